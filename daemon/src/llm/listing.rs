//! The API's own model list (`GET /v1/models`): fetched in the background at most once a day and
//! cached in the data directory (`models.json`), so a model released after this build is known —
//! its window and output limit — without ever delaying or failing a turn. Offline is fine: the
//! cache (or the built-in catalog alone) is used.

use super::{AnthropicClient, ListedModel, ModelCatalog};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How old the cache may be before the API is asked again.
pub const REFRESH_AFTER: Duration = Duration::from_secs(24 * 60 * 60);

#[derive(Debug, Serialize, Deserialize)]
struct Cache {
    /// Seconds since the epoch when the list was fetched.
    fetched_at: u64,
    models: Vec<ListedModel>,
}

fn cache_path(data_dir: &Path) -> PathBuf {
    data_dir.join("models.json")
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Teaches `catalog` the cached list, then asks the API when the cache is missing or older than
/// [`REFRESH_AFTER`]; failures are logged, never raised.
pub async fn refresh(llm: &AnthropicClient, catalog: &ModelCatalog, data_dir: &Path) {
    let path = cache_path(data_dir);
    let cached: Option<Cache> = std::fs::read(&path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok());
    let fresh = cached
        .as_ref()
        .is_some_and(|c| now().saturating_sub(c.fetched_at) < REFRESH_AFTER.as_secs());
    if let Some(c) = cached {
        catalog.learn(c.models);
    }
    if fresh {
        return;
    }
    match llm.list_models().await {
        Ok(models) => {
            tracing::debug!(count = models.len(), "the API listed its models");
            let cache = Cache {
                fetched_at: now(),
                models,
            };
            if let Ok(bytes) = serde_json::to_vec(&cache)
                && let Err(e) = tether_proto::private::write(&path, &bytes)
            {
                tracing::warn!("cannot cache the model list in {}: {e}", path.display());
            }
            catalog.learn(cache.models);
        }
        Err(e) => tracing::info!("the model list was not refreshed (the catalog is used): {e}"),
    }
}
