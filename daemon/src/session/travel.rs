//! A session's working tree brought to the node that takes it over (cluster mode, a node with
//! its own `cluster.workspaces`): the last snapshot its log names is fetched from the cluster's
//! store as a chain of packs, written out in `<workspaces>/<session id>`, and the session works
//! there from then on (its record's directory changes, and a `workspace_restored` event tells
//! every client and, with the next prompt, the model).
//!
//! Invariant: only a snapshot a committed event names is restored, so a change a tool was
//! making when the old owner stopped is never carried; the log is the judge.

use super::SessionError;
use super::recovery::Loaded;
use crate::snapshots::{PackStore, Policy, Shadow};
use crate::store::SessionRecord;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tether_proto::EventKind;

/// Whether a node whose working trees live under `root` must rebuild the working tree of the
/// session `record` describes: its directory lies elsewhere (another host's), is not here, or
/// is here at another snapshot than the last one its log names (another node ran it since).
pub(super) async fn stale(
    root: &Path,
    policy: Option<Arc<Policy>>,
    record: &SessionRecord,
    loaded: &Loaded,
) -> bool {
    let cwd = PathBuf::from(&record.cwd);
    if !cwd.starts_with(root) || !cwd.is_dir() {
        return true;
    }
    let (Some(last), Some(policy)) = (loaded.ledger.marks.last().0, policy) else {
        return false;
    };
    let last = last.to_owned();
    let shadow = Shadow::new(policy, &record.id.0, cwd);
    tokio::task::spawn_blocking(move || shadow.current().as_deref() != Some(last.as_str()))
        .await
        .unwrap_or(true)
}

/// Rebuilds the working tree of the session `record` describes under `root`; returns the event
/// that says so, with `record`'s directory changed to the new one.
pub(super) async fn restore(
    root: &Path,
    node: &str,
    policy: Option<Arc<Policy>>,
    packs: Option<Arc<dyn PackStore>>,
    record: &mut SessionRecord,
    loaded: &Loaded,
) -> Result<EventKind, SessionError> {
    let failed = |why: String| SessionError::Workspace(why);
    let started = std::time::Instant::now();
    let target = root.join(&record.id.0);
    let made = target.clone();
    tokio::task::spawn_blocking(move || std::fs::create_dir_all(&made))
        .await
        .map_err(|e| failed(e.to_string()))?
        .map_err(|e| {
            failed(format!(
                "cannot make its directory {}: {e}",
                target.display()
            ))
        })?;
    let (last, call) = loaded.ledger.marks.last();
    let (last, call) = (last.map(str::to_owned), call.map(str::to_owned));
    if let Some(commit) = &last {
        let Some(policy) = policy else {
            return Err(failed(
                "its files are in snapshots, and snapshots are off on this node (snapshots.enabled)"
                    .into(),
            ));
        };
        let Some(packs) = packs else {
            return Err(failed("this node is not in a cluster".into()));
        };
        let shadow = Arc::new(Shadow::new(policy, &record.id.0, target.clone()));
        fetch(&shadow, packs.as_ref(), commit).await?;
        let (s, c) = (shadow.clone(), commit.clone());
        tokio::task::spawn_blocking(move || s.materialise(&c))
            .await
            .map_err(|e| failed(format!("writing its files stopped: {e}")))?
            .map_err(|e| failed(format!("cannot write its files: {e}")))?;
    }
    let cwd = target.display().to_string();
    tracing::info!(
        session = %record.id,
        from = %record.cwd,
        to = %cwd,
        ms = started.elapsed().as_millis() as u64,
        "restored the working tree"
    );
    record.cwd = cwd.clone();
    Ok(EventKind::WorkspaceRestored {
        node: node.to_owned(),
        cwd,
        snapshot: last,
        after_tool_call: call,
    })
}

/// Brings snapshot `commit` into this node's store: the packs of the chain down to a snapshot
/// this node has whole (or the chain's end), then taken in oldest first, so a fetch cut short
/// leaves nothing that looks complete and is not.
async fn fetch(
    shadow: &Arc<Shadow>,
    packs: &dyn PackStore,
    commit: &str,
) -> Result<(), SessionError> {
    let failed = |why: String| SessionError::Workspace(why);
    let mut chain = Vec::new();
    let mut want = Some(commit.to_owned());
    while let Some(next) = want {
        let s = shadow.clone();
        let n = next.clone();
        let here = tokio::task::spawn_blocking(move || s.complete(&n))
            .await
            .map_err(|e| failed(e.to_string()))?
            .map_err(|e| failed(e.to_string()))?;
        if here {
            break;
        }
        let (pack, base) = packs
            .get(next.clone())
            .await
            .map_err(|e| failed(format!("cannot read snapshot {next} from the cluster: {e}")))?
            .ok_or_else(|| {
                failed(format!(
                    "snapshot {next} is not in the cluster's store (it was taken before this node's cluster kept snapshots, or its upload did not finish)"
                ))
            })?;
        chain.push((next, pack));
        want = base;
    }
    for (name, pack) in chain.into_iter().rev() {
        let s = shadow.clone();
        tokio::task::spawn_blocking(move || s.import(&pack))
            .await
            .map_err(|e| failed(e.to_string()))?
            .map_err(|e| failed(format!("cannot take in snapshot {name}: {e}")))?;
    }
    Ok(())
}
