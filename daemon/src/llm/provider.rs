//! Where model requests go: the Anthropic API, or Google Vertex AI — its endpoint per model and
//! region, its request body (no `model`, `anthropic_version: vertex-2023-10-16`), its model ids
//! (`claude-sonnet-4-5@20250929`) and Google's Application Default Credentials (`gcp_auth`:
//! a service-account key in `GOOGLE_APPLICATION_CREDENTIALS`, `gcloud auth application-default
//! login`, the metadata server), tokens cached and refreshed before they expire.
//!
//! Invariant: the only module that imports `gcp_auth`; a token never appears in an error.

use super::error::LlmError;
use std::sync::Arc;
use tokio::sync::OnceCell;

/// The `anthropic_version` Vertex AI takes in the body.
pub const VERTEX_VERSION: &str = "vertex-2023-10-16";
/// The OAuth scope of Vertex AI calls.
const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// Claude Code's default region.
pub const DEFAULT_REGION: &str = "us-east5";

/// The model provider.
#[derive(Debug, Default)]
pub enum Provider {
    /// The Anthropic API (`api.base_url`).
    #[default]
    Anthropic,
    /// Google Vertex AI.
    Vertex(Vertex),
    /// Amazon Bedrock.
    Bedrock(super::bedrock::Bedrock),
}

impl Provider {
    /// Its name, as config.toml and telemetry say it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Anthropic => "anthropic",
            Self::Vertex(_) => "vertex",
            Self::Bedrock(_) => "bedrock",
        }
    }
}

/// How to reach Claude on Vertex AI.
pub struct Vertex {
    /// The Google Cloud project (`ANTHROPIC_VERTEX_PROJECT_ID`).
    pub project: String,
    /// The default region (`CLOUD_ML_REGION`; `global` allowed).
    pub region: String,
    /// A gateway's base URL ending in `/v1` (`ANTHROPIC_VERTEX_BASE_URL`); else Google's.
    pub base_url: Option<String>,
    /// Per-model regions: (`VERTEX_REGION_…` suffix, region).
    pub model_regions: Vec<(String, String)>,
    /// `false` for a gateway that authenticates itself (`CLAUDE_CODE_SKIP_VERTEX_AUTH`).
    pub authenticate: bool,
    tokens: OnceCell<Arc<dyn gcp_auth::TokenProvider>>,
}

impl std::fmt::Debug for Vertex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vertex")
            .field("project", &self.project)
            .field("region", &self.region)
            .field("base_url", &self.base_url)
            .field("authenticate", &self.authenticate)
            .finish_non_exhaustive()
    }
}

impl Vertex {
    /// Vertex settings; `model_regions` from the environment's `VERTEX_REGION_*` variables.
    pub fn new(
        project: String,
        region: Option<String>,
        base_url: Option<String>,
        authenticate: bool,
    ) -> Self {
        let model_regions = std::env::vars()
            .filter_map(|(k, v)| {
                let suffix = k.strip_prefix("VERTEX_REGION_")?;
                (!v.trim().is_empty()).then(|| (suffix.to_owned(), v.trim().to_owned()))
            })
            .collect();
        Self {
            project,
            region: region
                .filter(|r| !r.trim().is_empty())
                .unwrap_or_else(|| DEFAULT_REGION.to_owned()),
            base_url: base_url.filter(|b| !b.trim().is_empty()),
            model_regions,
            authenticate,
            tokens: OnceCell::new(),
        }
    }

    /// The region `model` is called in: its `VERTEX_REGION_…` variable, else the default.
    pub fn region_for(&self, model: &str) -> &str {
        let key = region_key(model);
        self.model_regions
            .iter()
            .find(|(k, _)| key.as_deref() == Some(k.as_str()))
            .map_or(self.region.as_str(), |(_, r)| r.as_str())
    }

    /// The streaming endpoint of `model` (a catalog id or a Vertex id).
    pub fn endpoint(&self, model: &str) -> String {
        let region = self.region_for(model);
        let base = match &self.base_url {
            Some(b) => b.trim_end_matches('/').to_owned(),
            None if region == "global" => "https://aiplatform.googleapis.com/v1".to_owned(),
            None => format!("https://{region}-aiplatform.googleapis.com/v1"),
        };
        format!(
            "{base}/projects/{}/locations/{region}/publishers/anthropic/models/{}:streamRawPredict",
            self.project,
            model_id(model)
        )
    }

    /// The request body Vertex takes: the Messages body without `model`, with its version.
    pub fn body(request: &serde_json::Value) -> serde_json::Value {
        let mut body = request.clone();
        if let Some(map) = body.as_object_mut() {
            map.remove("model");
            map.insert("anthropic_version".into(), VERTEX_VERSION.into());
        }
        body
    }

    /// A bearer token for the next request (`None` when authentication is skipped).
    pub async fn token(&self) -> Result<Option<String>, LlmError> {
        if !self.authenticate {
            return Ok(None);
        }
        let provider = self
            .tokens
            .get_or_try_init(|| async {
                gcp_auth::provider().await.map_err(|e| {
                    LlmError::Config(format!(
                        "no Google credentials for Vertex AI ({e}); set GOOGLE_APPLICATION_CREDENTIALS to a \
                         service-account key file, run `gcloud auth application-default login`, or run on \
                         Google Cloud (CLAUDE_CODE_SKIP_VERTEX_AUTH=1 for a gateway that authenticates)"
                    ))
                })
            })
            .await?;
        let token = provider.token(&[SCOPE]).await.map_err(|e| match e {
            // The token endpoint answered and refused: retrying cannot help.
            gcp_auth::Error::Str(_) | gcp_auth::Error::Json(..) => LlmError::Config(format!(
                "Vertex AI: Google refused to issue an access token ({e}); check the credentials \
                 (GOOGLE_APPLICATION_CREDENTIALS, `gcloud auth application-default login`)"
            )),
            _ => LlmError::Connection(format!("Vertex AI: cannot get a Google access token: {e}")),
        })?;
        Ok(Some(token.as_str().to_owned()))
    }

    /// Where the credentials come from, in words (never a secret).
    pub fn credential_source(&self) -> String {
        if !self.authenticate {
            return "none (CLAUDE_CODE_SKIP_VERTEX_AUTH: the gateway authenticates)".into();
        }
        match std::env::var("GOOGLE_APPLICATION_CREDENTIALS") {
            Ok(path) if !path.trim().is_empty() => {
                format!("service-account key {path} (GOOGLE_APPLICATION_CREDENTIALS)")
            }
            _ => "Google Application Default Credentials (gcloud user credentials or the metadata server)"
                .into(),
        }
    }
}

/// The id Vertex AI knows a catalog model by: a dated model as `claude-sonnet-4-5@20250929`,
/// anything else (a Vertex id already, or an undated newer model) as given.
pub fn model_id(model: &str) -> String {
    let model = model.trim_end_matches("[1m]");
    if model.contains('@') {
        return model.to_owned();
    }
    match super::models::dated_id(model)
        .as_deref()
        .and_then(|d| d.rsplit_once('-'))
    {
        Some((name, date)) => format!("{name}@{date}"),
        None => model.to_owned(),
    }
}

/// The suffix of the `VERTEX_REGION_…` variable of a model, as Claude Code names them:
/// `CLAUDE_3_5_HAIKU`, `CLAUDE_4_0_SONNET`, `CLAUDE_4_5_OPUS` (version, then family).
pub fn region_key(model: &str) -> Option<String> {
    let id = model_id(model);
    let name = id.split('@').next()?.strip_prefix("claude-")?;
    let parts: Vec<&str> = name.split('-').collect();
    let is_family = |p: &str| p.chars().all(|c| c.is_ascii_alphabetic());
    let (family, version): (&str, Vec<&str>) = match parts.as_slice() {
        // claude-3-5-haiku: the version first.
        [rest @ .., fam] if is_family(fam) => (fam, rest.to_vec()),
        // claude-sonnet-4-5: the family first.
        [fam, rest @ ..] if is_family(fam) => (fam, rest.to_vec()),
        _ => return None,
    };
    let major = version
        .first()
        .filter(|v| v.bytes().all(|b| b.is_ascii_digit()))?;
    let minor = version
        .get(1)
        .filter(|v| v.bytes().all(|b| b.is_ascii_digit()))
        .copied()
        .unwrap_or("0");
    Some(format!(
        "CLAUDE_{major}_{minor}_{}",
        family.to_ascii_uppercase()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_ids_and_region_variables() {
        assert_eq!(model_id("claude-sonnet-4-5"), "claude-sonnet-4-5@20250929");
        assert_eq!(
            model_id("claude-sonnet-4-5[1m]"),
            "claude-sonnet-4-5@20250929"
        );
        assert_eq!(model_id("claude-opus-4-0"), "claude-opus-4@20250514");
        assert_eq!(
            model_id("claude-sonnet-4-20250514"),
            "claude-sonnet-4@20250514"
        );
        assert_eq!(model_id("claude-opus-4-6"), "claude-opus-4-6");
        assert_eq!(
            model_id("claude-haiku-4-5@20251001"),
            "claude-haiku-4-5@20251001"
        );
        assert_eq!(
            region_key("claude-3-5-haiku").as_deref(),
            Some("CLAUDE_3_5_HAIKU")
        );
        assert_eq!(
            region_key("claude-sonnet-4-0").as_deref(),
            Some("CLAUDE_4_0_SONNET")
        );
        assert_eq!(
            region_key("claude-opus-4-1").as_deref(),
            Some("CLAUDE_4_1_OPUS")
        );
        assert_eq!(
            region_key("claude-sonnet-5-5").as_deref(),
            Some("CLAUDE_5_5_SONNET")
        );
        assert_eq!(
            region_key("claude-opus-5").as_deref(),
            Some("CLAUDE_5_0_OPUS")
        );
        assert_eq!(region_key("gpt-4"), None);
    }

    #[test]
    fn endpoints_by_region_and_gateway() {
        let mut v = Vertex::new("proj".into(), Some("global".into()), None, true);
        assert_eq!(
            v.endpoint("claude-sonnet-4-5"),
            "https://aiplatform.googleapis.com/v1/projects/proj/locations/global/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict"
        );
        v.model_regions = vec![("CLAUDE_3_5_HAIKU".into(), "europe-west1".into())];
        assert_eq!(
            v.endpoint("claude-3-5-haiku"),
            "https://europe-west1-aiplatform.googleapis.com/v1/projects/proj/locations/europe-west1/publishers/anthropic/models/claude-3-5-haiku@20241022:streamRawPredict"
        );
        let gw = Vertex::new(
            "p".into(),
            None,
            Some("http://127.0.0.1:9/v1/".into()),
            false,
        );
        assert_eq!(
            gw.endpoint("claude-opus-4-6"),
            "http://127.0.0.1:9/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-opus-4-6:streamRawPredict"
        );
        let body = Vertex::body(&serde_json::json!({"model": "m", "max_tokens": 5}));
        assert_eq!(
            body,
            serde_json::json!({"max_tokens": 5, "anthropic_version": VERTEX_VERSION})
        );
    }
}
