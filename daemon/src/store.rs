//! The store seam: what the daemon keeps of its sessions (records, event logs, checkpoints,
//! and in cluster mode who owns each session) behind one interface.
//!
//! Invariant: nothing outside this folder knows where the data lives. Every node keeps its
//! copy on sled (`local.rs`); a clustered store also writes each commit to NATS JetStream first
//! (`jetstream.rs`), so the local copy of a log is always a prefix of the shared one, and a
//! session is written by one node at a time. Reads are always of the local copy; a session is
//! brought up to date when a node claims it ([`Store::claim`]).
//!
//! Events are appended only through [`Store::commit`]: one call per journal commit, durable
//! when it returns.

mod jetstream;
mod local;

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tether_proto::{PermissionMode, Seq, SessionId, SessionStatus};
use tokio_util::sync::CancellationToken;

pub use local::DiskError;

/// Version of the on-disk layout; a daemon refuses a store written by a newer layout.
pub const SCHEMA_VERSION: u64 = 2;

/// What can go wrong with the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The local database failed (IO, corruption, a lock held by another process).
    #[error("storage error in {path}: {source}")]
    Disk {
        /// The database directory.
        path: PathBuf,
        /// What the database said.
        source: DiskError,
    },
    /// A stored value did not decode.
    #[error("stored {what} is not valid: {source}")]
    Decode {
        /// What was being read.
        what: String,
        /// The decoding error.
        source: serde_json::Error,
    },
    /// The store was written by a newer tetherd.
    #[error(
        "the data in {path} has schema version {found}, newer than this tetherd's {SCHEMA_VERSION}; upgrade tetherd"
    )]
    NewerSchema {
        /// The database directory.
        path: PathBuf,
        /// Version found on disk.
        found: u64,
    },
    /// No NATS server of the cluster answered, or JetStream did not.
    #[error(
        "cannot reach the cluster's NATS servers ({urls}): {reason}. Check that they run and are reachable from here, the cluster.nats URLs, and the cluster.creds and cluster.tls_ca settings"
    )]
    Unreachable {
        /// The servers tried.
        urls: String,
        /// What went wrong.
        reason: String,
    },
    /// The cluster's data was written by a tetherd of another schema version.
    #[error(
        "the cluster's data has schema version {found}, this tetherd has {SCHEMA_VERSION}: every node must run a tetherd of the same schema version"
    )]
    ClusterSchema {
        /// The cluster's version.
        found: u64,
    },
    /// A running node of the cluster already has this node's name.
    #[error(
        "a running node of the cluster is already named {node}: give this one another name (cluster.node, TETHER_CLUSTER_NODE)"
    )]
    NodeNameTaken {
        /// The name.
        node: String,
    },
    /// Another node runs the session and keeps its lease.
    #[error("session {session} is running on node {node} of the cluster; attach to it there")]
    OwnedElsewhere {
        /// The session.
        session: SessionId,
        /// The node that holds it.
        node: String,
    },
    /// In a cluster: this node cannot see the session's working directory, so it does not take
    /// the session.
    #[error(
        "session {session} works in {cwd}, which node {node} cannot see; run it on a node that has that directory (the same path on a shared filesystem)"
    )]
    CwdUnreachable {
        /// The session.
        session: SessionId,
        /// Its working directory.
        cwd: String,
        /// This node.
        node: String,
    },
    /// This node lost the session's lease: it may not write the session any more.
    #[error("this node no longer holds session {session}: {why}")]
    Fenced {
        /// The session.
        session: SessionId,
        /// Why.
        why: String,
    },
    /// A call passed on to another node got no answer in time: it may have run there.
    #[error("node {node} did not answer within {seconds} s; the call may have run there")]
    NoAnswer {
        /// The node.
        node: String,
        /// How long it was given.
        seconds: u64,
    },
    /// JetStream refused or failed an operation.
    #[error("cluster storage error: {0}")]
    Cluster(String),
}

/// Where a clustered store's NATS servers are and how this node takes part (`[cluster]`).
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// Server URLs.
    pub urls: Vec<String>,
    /// This node's name.
    pub node: String,
    /// How long an owner may go silent before another node takes its sessions.
    pub lease_ttl: Duration,
    /// Copies JetStream keeps of each log and bucket.
    pub replicas: usize,
    /// A `.creds` file.
    pub creds: Option<PathBuf>,
    /// A CA file; TLS is then required.
    pub tls_ca: Option<PathBuf>,
    /// How long the shared log keeps streaming deltas (`None`: for ever): an hour beyond
    /// `delta_retention`, counted from when they were written, so a turn of up to an hour
    /// keeps its deltas as long as a node's own copy does.
    pub delta_ttl: Option<Duration>,
}

impl ClusterSettings {
    /// The `[cluster]` settings, when `cluster.nats` names servers.
    pub fn from_config(config: &crate::config::Config) -> Option<Self> {
        let urls = config.list("cluster.nats");
        if urls.is_empty() {
            return None;
        }
        let node = config.string("cluster.node").unwrap_or_else(|| {
            nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
                .unwrap_or_else(|| "tetherd".into())
        });
        let path = |key: &str| config.string(key).map(PathBuf::from);
        Some(Self {
            urls,
            node,
            lease_ttl: config
                .duration("cluster.lease_ttl")
                .unwrap_or(Duration::from_secs(10)),
            replicas: config.number("cluster.replicas").unwrap_or(3.0).max(1.0) as usize,
            creds: path("cluster.creds"),
            tls_ca: path("cluster.tls_ca"),
            delta_ttl: config
                .duration("delta_retention")
                .map(|keep| keep + Duration::from_secs(3600)),
        })
    }
}

/// Connects to the cluster as `tetherd doctor` does: what it found, or why it could not.
pub async fn probe_cluster(settings: &ClusterSettings) -> Result<String, StoreError> {
    let cluster = jetstream::Cluster::connect(settings).await?;
    let nodes = cluster.nodes().await;
    Ok(format!(
        "{} reachable, JetStream ready; nodes seen: {}",
        settings.urls.join(", "),
        if nodes.is_empty() {
            "none".to_owned()
        } else {
            nodes.join(", ")
        }
    ))
}

/// What a store holding a session for this node gives its actor.
#[derive(Debug, Clone)]
pub struct Claim {
    /// The epoch the session's events are stamped with.
    pub epoch: u64,
    /// Cancelled when this node loses the session (another node took it over): the actor must
    /// stop at once, writing nothing more. Never cancelled on one machine.
    pub lost: CancellationToken,
}

/// Answers a call another node passed on (the call's JSON-RPC text → the reply's).
pub type PassedOn = Arc<
    dyn Fn(String) -> std::pin::Pin<Box<dyn std::future::Future<Output = String> + Send>>
        + Send
        + Sync,
>;

/// A session followed from a node that does not run it ([`Store::follow`]).
#[derive(Debug)]
pub struct Following {
    /// The local copy's head when following began: replay through it from the local log.
    pub head: Seq,
    /// Each event written after `head`, encoded, as the session's owner writes it.
    pub events: tokio::sync::mpsc::Receiver<Result<Followed, StoreError>>,
}

/// What a followed session does next.
#[derive(Debug)]
pub enum Followed {
    /// Its owner wrote this event (its seq, its JSON).
    Event(Seq, Vec<u8>),
    /// It was deleted: nothing more comes.
    Deleted,
}

/// The cluster as this node sees it, for `daemon/status` and doctor.
#[derive(Debug, Clone)]
pub struct ClusterStatus {
    /// This node's name.
    pub node: String,
    /// The servers it was given.
    pub urls: Vec<String>,
    /// Whether the connection is up.
    pub connected: bool,
    /// The nodes that announced themselves recently.
    pub nodes: Vec<String>,
    /// The sessions this node holds, with the age of each lease's last renewal.
    pub held: Vec<(SessionId, Duration)>,
}

/// A session's stored metadata (its settings; the history lives in its log).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecord {
    /// Its id.
    pub id: SessionId,
    /// Title, once it has one.
    pub title: Option<String>,
    /// Working directory.
    pub cwd: String,
    /// Model alias or id.
    pub model: String,
    /// Effort level chosen for the session (`/effort`); `None`: the configured one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
    /// Permission mode.
    pub permission_mode: PermissionMode,
    /// What permission requests do while no controller is attached.
    #[serde(default)]
    pub on_no_controller: tether_proto::NoControllerPolicy,
    /// The most it may spend (USD); `None`: no cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<f64>,
    /// What it was doing when last written.
    pub status: SessionStatus,
    /// RFC 3339 creation time.
    pub created_at: String,
    /// RFC 3339 time of the last change.
    pub updated_at: String,
    /// Deltas at or below this seq may have been pruned (0: the log is complete).
    #[serde(default)]
    pub pruned_through: Seq,
    /// The seq of the last event when the record was written (0 in records of older builds):
    /// what a node lists for a session whose log it has not copied.
    #[serde(default)]
    pub head: Seq,
    /// The people the owner gave a role (`session_shared` events, applied), by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<tether_proto::Share>,
}

/// The daemon's store.
#[derive(Clone)]
pub struct Store {
    db: local::Db,
    cluster: Option<Arc<jetstream::Cluster>>,
}

/// One session's append-only event log.
#[derive(Clone)]
pub struct EventLog {
    id: SessionId,
    local: local::Log,
}

impl Store {
    /// Opens (or creates) the local database in `dir`, checking its schema version.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        Ok(Self {
            db: local::Db::open(dir)?,
            cluster: None,
        })
    }

    /// Opens the local database in `dir` as this node's copy of a clustered store: connects to
    /// the cluster and copies every session's record (logs are copied when claimed).
    pub async fn open_clustered(
        dir: &Path,
        settings: &ClusterSettings,
    ) -> Result<Self, StoreError> {
        let db = local::Db::open(dir)?;
        let cluster = Arc::new(jetstream::Cluster::connect(settings).await?);
        cluster.check_name_free().await?;
        // A node that starts while the cluster elects a leader waits for it, as `connect` does.
        let started = std::time::Instant::now();
        while let Err(e) = cluster.mirror_records(db.clone()).await {
            if started.elapsed() > Duration::from_secs(30) {
                return Err(e);
            }
            tracing::warn!("the session records cannot be read yet, trying again: {e}");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        cluster.announce();
        cluster.take_calls();
        cluster.followers().start();
        cluster.watch_answers();
        Ok(Self {
            db,
            cluster: Some(cluster),
        })
    }

    /// This node's name in the cluster (`None` on one machine).
    pub fn node(&self) -> Option<String> {
        self.cluster.as_ref().map(|c| c.node().to_owned())
    }

    /// Whether this store is a node of a cluster.
    pub fn clustered(&self) -> bool {
        self.cluster.is_some()
    }

    /// The cluster as this node sees it; `None` on one machine.
    pub async fn cluster_status(&self) -> Option<ClusterStatus> {
        let c = self.cluster.as_ref()?;
        Some(ClusterStatus {
            node: c.node().to_owned(),
            urls: c.urls().to_vec(),
            connected: c.connected(),
            nodes: c.nodes().await,
            held: c.held(),
        })
    }

    /// Takes a session for this node before its actor runs: on one machine at once, stamped
    /// with the daemon's `epoch`; in a cluster by taking its lease (waiting out a silent
    /// owner's) and copying what the shared log has beyond the local copy.
    ///
    /// A node that cannot see the session's working directory `cwd` does not take it; `None`:
    /// the node rebuilds the working tree itself (`session/travel.rs`).
    pub async fn claim(
        &self,
        id: &SessionId,
        epoch: u64,
        cwd: Option<&str>,
    ) -> Result<Claim, StoreError> {
        match &self.cluster {
            None => Ok(Claim {
                epoch,
                lost: CancellationToken::new(),
            }),
            Some(cluster) => {
                if let Some(cwd) = cwd
                    && !Path::new(cwd).is_dir()
                {
                    return Err(StoreError::CwdUnreachable {
                        session: id.clone(),
                        cwd: cwd.to_owned(),
                        node: cluster.node().to_owned(),
                    });
                }
                let claimed = cluster.claim(id, &self.db).await?;
                Ok(Claim {
                    epoch: claimed.epoch,
                    lost: claimed.lost,
                })
            }
        }
    }

    /// Where workspace snapshots go for other nodes: the cluster's store (`None` on one
    /// machine, where they stay in the data directory).
    pub fn packs(&self) -> Option<std::sync::Arc<dyn crate::snapshots::PackStore>> {
        let cluster = self.cluster.as_ref()?;
        Some(std::sync::Arc::new(cluster.packs()))
    }

    /// Follows a session another node runs (`None` on one machine, where every session is
    /// this daemon's): its log copied here, then its new events as they are written.
    pub async fn follow(&self, id: &SessionId) -> Option<Result<Following, StoreError>> {
        let cluster = self.cluster.as_ref()?;
        Some(cluster.follow(id, &self.db).await)
    }

    /// Gives back every session this daemon holds (it is stopping).
    pub async fn release_all(&self) {
        if let Some(cluster) = &self.cluster {
            cluster.release_all().await;
        }
    }

    /// Answers, with `handler`, the calls other nodes pass on to this one (a no-op on one
    /// machine).
    pub fn serve_passed_on(&self, handler: PassedOn) {
        if let Some(cluster) = &self.cluster {
            cluster.answer_calls_with(handler);
        }
    }

    /// Passes a call (JSON-RPC text) on to `node` and returns its reply's text.
    pub async fn pass_on(&self, node: &str, call: String) -> Result<String, StoreError> {
        match &self.cluster {
            Some(cluster) => cluster.pass_on(node, call).await,
            None => Err(StoreError::Cluster(
                "this daemon is not in a cluster".into(),
            )),
        }
    }

    /// Records a permission answer (encoded by the session) before the session's owner logs
    /// it, so the first answer outlives an owner that dies at that instant: `None` when this
    /// one is the first, else the answer that won. On one machine the log is the record, so
    /// this records nothing and answers `None`.
    pub async fn record_answer(
        &self,
        id: &SessionId,
        request_id: &str,
        answer: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError> {
        match &self.cluster {
            Some(cluster) => cluster.record_answer(id, request_id, answer).await,
            None => Ok(None),
        }
    }

    /// The answer recorded for a request of session `id` that its log does not show resolved
    /// (an owner died before logging it); never any on one machine.
    pub async fn recorded_answer(&self, id: &SessionId, request_id: &str) -> Option<Vec<u8>> {
        match &self.cluster {
            Some(cluster) => cluster.recorded_answer(id, request_id).await,
            None => None,
        }
    }

    /// A client of this node follows session `id` (which another node runs) in `role`: the
    /// session's owner counts it as attached. A no-op on one machine.
    pub async fn follower_joined(&self, id: &SessionId, client: tether_proto::AttachedClient) {
        if let Some(cluster) = &self.cluster {
            cluster.followers().joined(id, client).await;
        }
    }

    /// A client of this node stopped following session `id`.
    pub async fn follower_left(&self, id: &SessionId, client: &tether_proto::AttachedClient) {
        if let Some(cluster) = &self.cluster {
            cluster.followers().left(id, client).await;
        }
    }

    /// The clients that follow session `id` through the cluster, on any node (none on one
    /// machine).
    pub fn followers(&self, id: &SessionId) -> Vec<tether_proto::AttachedClient> {
        match &self.cluster {
            Some(cluster) => cluster.followers().of(id),
            None => Vec::new(),
        }
    }

    /// The sessions whose followers change, as they change (`None` on one machine).
    pub fn followers_changed(&self) -> Option<tokio::sync::broadcast::Receiver<SessionId>> {
        self.cluster.as_ref().map(|c| c.followers().changes())
    }

    /// The permission answers recorded in the cluster from now on, by any node: (session,
    /// request, encoded answer). `None` on one machine.
    pub fn answers_recorded(
        &self,
    ) -> Option<tokio::sync::broadcast::Receiver<(SessionId, String, Vec<u8>)>> {
        self.cluster.as_ref().map(|c| c.answers())
    }

    /// Whether another node runs the session now (never on one machine).
    pub async fn held_elsewhere(&self, id: &SessionId) -> bool {
        match &self.cluster {
            Some(cluster) => cluster.held_elsewhere(id).await,
            None => false,
        }
    }

    /// Gives a session's `claim` back when its actor stops (or never started): this daemon
    /// stops holding it at once (unless a newer claim took its place), and
    /// the returned future lets the cluster know (another node may then take it without
    /// waiting for the lease to run out).
    pub fn release(
        &self,
        id: &SessionId,
        claim: &Claim,
    ) -> impl std::future::Future<Output = ()> + use<> {
        let released = self.cluster.as_ref().map(|c| c.release(id, claim.epoch));
        async move {
            if let Some(released) = released {
                released.await;
            }
        }
    }

    /// Allocates this start's epoch: one more than the last, made durable before returning.
    pub fn next_epoch(&self) -> Result<u64, StoreError> {
        self.db.next_epoch()
    }

    /// Every stored session.
    pub fn sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        self.db.sessions()
    }

    /// How many sessions are stored.
    pub fn session_count(&self) -> usize {
        self.db.session_count()
    }

    /// One session's record, if it exists.
    pub fn session(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError> {
        self.db.session(id)
    }

    /// Writes a session's record (not flushed). For this node's own bookkeeping (a status
    /// corrected on load, retention's watermark); a change others must see goes through
    /// [`Store::commit`].
    pub fn put_session(&self, record: &SessionRecord) -> Result<(), StoreError> {
        self.db.put_session(record)
    }

    /// A session's checkpoint (opaque bytes), if it has one.
    pub fn checkpoint(&self, id: &SessionId) -> Result<Option<Vec<u8>>, StoreError> {
        self.db.checkpoint(id)
    }

    /// Replaces a session's checkpoint (not flushed).
    pub fn put_checkpoint(&self, id: &SessionId, bytes: &[u8]) -> Result<(), StoreError> {
        self.db.put_checkpoint(id, bytes)
    }

    /// Removes a session's log, record and checkpoint, durably (from the cluster too).
    pub async fn delete_session(&self, id: &SessionId) -> Result<(), StoreError> {
        if let Some(cluster) = &self.cluster {
            cluster.delete(id).await?;
        }
        self.db.delete_session(id).await
    }

    /// The event log of a session.
    pub fn log(&self, id: &SessionId) -> EventLog {
        EventLog {
            id: id.clone(),
            local: self.db.log(id),
        }
    }

    /// Appends `events` (seq, encoded event, whether it is a streaming delta; consecutive seqs)
    /// to `log` and saves `record` when given, durably: when this returns `Ok`, all of it
    /// survives a crash; on an error none of the events may be assumed written. (A shared log
    /// lets deltas expire a while after `delta_retention`; each node prunes its own copy.)
    pub async fn commit<'a>(
        &self,
        log: &EventLog,
        events: impl IntoIterator<Item = (Seq, &'a [u8], bool)> + Clone,
        record: Option<&SessionRecord>,
    ) -> Result<(), StoreError> {
        let shared = match &self.cluster {
            Some(cluster) => {
                let batch: Vec<(Seq, &[u8], bool)> = events.clone().into_iter().collect();
                Some(cluster.publish(&log.id, &batch, record).await?)
            }
            None => None,
        };
        for (seq, json, _) in events {
            log.local.append(seq, json)?;
        }
        if let Some(record) = record {
            self.db.put_session(record)?;
        }
        // Written after the events it vouches for: a copy never claims more than it has.
        if let Some(last) = shared {
            self.db.put_mark(&log.id, last)?;
        }
        self.db.flush().await
    }

    /// Makes every write so far durable (with other callers' writes, in one flush).
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.db.flush().await
    }

    /// Makes every write so far durable, blocking the calling thread.
    pub fn flush_blocking(&self) -> Result<(), StoreError> {
        self.db.flush_blocking()
    }
}

impl EventLog {
    /// The seq of the last event, 0 when empty.
    pub fn head(&self) -> Result<Seq, StoreError> {
        self.local.head()
    }

    /// Removes the events at `seqs` from this node's copy, in one atomic batch (not flushed).
    pub fn remove(&self, seqs: &[Seq]) -> Result<(), StoreError> {
        self.local.remove(seqs)
    }

    /// Every encoded event with `after < seq <= upto`, in order, read lazily.
    pub fn iter_between(
        &self,
        after: Seq,
        upto: Seq,
    ) -> impl Iterator<Item = Result<(Seq, Vec<u8>), StoreError>> + '_ {
        self.local.iter_between(after, upto)
    }

    /// Up to `limit` encoded events with `after < seq <= upto`, in order.
    pub fn read(
        &self,
        after: Seq,
        upto: Seq,
        limit: usize,
    ) -> Result<Vec<(Seq, Vec<u8>)>, StoreError> {
        self.local.read(after, upto, limit)
    }

    /// Writes one event straight into this node's copy, bypassing [`Store::commit`]: for tests
    /// that build a log by hand.
    #[cfg(test)]
    pub fn append(&self, seq: Seq, json: &[u8]) -> Result<(), StoreError> {
        self.local.append(seq, json)
    }
}
