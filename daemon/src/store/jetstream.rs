//! The clustered store: session logs, records and leases on a NATS JetStream cluster, so a
//! session outlives the node running it and any node can take it over.
//!
//! Invariant: the only module that imports async-nats. Exactly one node writes a session: the
//! one holding its lease (a KV entry created if absent, renewed on its expected revision, whose
//! revision is the session's epoch), and each commit is one publish per chunk carrying the
//! expected last sequence of the session's subject, so a stale owner's write is refused by the
//! log itself. A node copies what it reads into its local store ([`super::local`]); the copy is
//! always a prefix of the shared log, brought up to date when the node claims the session.
//!
//! Layout: sessions are spread over [`names::SHARDS`] file streams `TETHER_LOG_<n>` (each stream is a
//! Raft group, so not one per session), subject `tether.log.<n>.<session token>`; a message is
//! one commit's events, one JSON line each, its first seq in the `Tether-Seq` header. Buckets:
//! `tether-sessions` (records), `tether-leases` (owners), `tether-meta` (schema version),
//! `tether-nodes` (who is in the cluster), `tether-answers` (permission answers not yet logged,
//! `answers.rs`), `tether-presence` (who follows which session from which node,
//! `followers.rs`).
//! Checkpoints stay local: each node derives its own from the log.

use super::{
    ClusterSettings, Followed, Following, SCHEMA_VERSION, SessionRecord, StoreError, local,
};
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::{self, kv, stream};
use base64::Engine;
use bytes::Bytes;
use futures::StreamExt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tether_proto::{Seq, SessionId};
use tokio_util::sync::CancellationToken;

mod answers;
mod followers;
mod leases;
mod names;
mod packs;

use answers::Answers;
use followers::Followers;
use leases::{Held, Leases};
use names::{SHARDS, calls_subject, shard_of, subject, token};
pub use packs::Packs;

/// The header naming the seq of a message's first event.
const SEQ_HEADER: &str = "Tether-Seq";
/// Largest payload of one publish; a bigger commit goes as several, each expecting the last.
const CHUNK_BYTES: usize = 256 * 1024;
const RECORDS: &str = "tether-sessions";
const LEASES: &str = "tether-leases";
const META: &str = "tether-meta";
const NODES: &str = "tether-nodes";
const ANSWERS: &str = "tether-answers";
const PRESENCE: &str = "tether-presence";
const SNAPSHOTS: &str = "tether-snapshots";
/// How long a recorded permission answer is kept (its owner logs it at once, or the next
/// owner when it takes the session over).
const ANSWERS_KEPT: Duration = Duration::from_secs(30 * 24 * 3600);
/// How long a starting node waits for JetStream to answer (its leaders being elected).
const JETSTREAM_PATIENCE: Duration = Duration::from_secs(30);
/// Events a follower may have waiting before the log is read further.
const FOLLOW_BUFFER: usize = 256;
/// How long a node waits for another to answer a call it passed on.
const PASS_ON_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection to the cluster, shared by every session of this node.
pub(super) struct Cluster {
    client: async_nats::Client,
    /// JetStream, answering within a quarter of the lease (so a write can be retried before
    /// the lease is in doubt).
    js: jetstream::Context,
    node: String,
    ttl: Duration,
    /// How long streaming deltas stay in the log (`None`: for ever).
    delta_ttl: Option<Duration>,
    urls: Vec<String>,
    logs: Vec<stream::Stream>,
    records: kv::Store,
    /// Who runs which session.
    leases: Leases,
    /// Who is in the cluster: each node's name, renewed every third of the lease while it runs.
    nodes: kv::Store,
    /// Permission answers not yet logged by their session's owner.
    answers: Arc<Answers>,
    /// Who follows which session from which node.
    followers: Arc<Followers>,
    /// What answers calls passed on to this node, once the daemon installed it.
    handler: tokio::sync::watch::Sender<Option<super::PassedOn>>,
    /// The working trees' snapshots, as packs.
    packs: Packs,
}

/// The buckets and streams of a cluster, as [`Cluster::prepare`] finds or makes them.
struct Prepared {
    records: kv::Store,
    leases: kv::Store,
    nodes: kv::Store,
    answers: kv::Store,
    presence: kv::Store,
    logs: Vec<stream::Stream>,
    packs: Packs,
}

/// One message of a commit, as it goes to the log.
struct Message {
    /// Its events, one JSON line each.
    payload: Bytes,
    /// The seq of its first event.
    first: Seq,
    /// Its id, which JetStream deduplicates a retried publish by.
    id: String,
    /// How long the log keeps it (only deltas expire).
    expires: Option<Duration>,
}

/// What [`Cluster::claim`] gives the session's actor.
pub(super) struct Claimed {
    pub epoch: u64,
    pub lost: CancellationToken,
}

fn failed(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Cluster(format!("{what}: {e}"))
}

impl Cluster {
    /// Connects to the cluster and makes sure its streams and buckets exist. Fails with a clear
    /// error when no server answers or the cluster's data has another schema version.
    pub async fn connect(settings: &ClusterSettings) -> Result<Self, StoreError> {
        let unreachable = |reason: String| StoreError::Unreachable {
            urls: settings.urls.join(", "),
            reason,
        };
        let mut options = async_nats::ConnectOptions::new()
            .name(format!("tetherd {}", settings.node))
            .connection_timeout(Duration::from_secs(5))
            .max_reconnects(None);
        if let Some(creds) = &settings.creds {
            options = options.credentials_file(creds).await.map_err(|e| {
                unreachable(format!(
                    "cannot read the credentials file {}: {e}",
                    creds.display()
                ))
            })?;
        }
        if let Some(ca) = &settings.tls_ca {
            options = options.add_root_certificates(ca.clone()).require_tls(true);
        }
        let client = options
            .connect(settings.urls.clone())
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let js = jetstream::new(client.clone());
        // A cluster that starts with its nodes elects its leaders meanwhile: wait a while.
        let started = Instant::now();
        let Prepared {
            records,
            leases,
            nodes,
            answers,
            presence,
            logs,
            packs,
        } = loop {
            match Self::prepare(&js, settings).await {
                Ok(ready) => break ready,
                Err(StoreError::Unreachable { reason, .. })
                    if started.elapsed() < JETSTREAM_PATIENCE =>
                {
                    tracing::warn!("JetStream is not ready yet, trying again: {reason}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => return Err(e),
            }
        };
        let mut js = js;
        js.set_timeout(
            (settings.lease_ttl / 4).clamp(Duration::from_millis(250), Duration::from_secs(5)),
        );
        Ok(Self {
            client: client.clone(),
            js,
            node: settings.node.clone(),
            ttl: settings.lease_ttl,
            delta_ttl: settings.delta_ttl,
            urls: settings.urls.clone(),
            logs,
            records,
            leases: Leases::new(
                leases,
                client.clone(),
                settings.node.clone(),
                settings.lease_ttl,
            ),
            nodes,
            answers: Arc::new(Answers::new(answers)),
            followers: Arc::new(Followers::new(
                presence,
                settings.node.clone(),
                settings.lease_ttl,
            )),
            handler: tokio::sync::watch::Sender::new(None),
            packs,
        })
    }

    /// Makes sure the buckets and log streams exist and the schema version is this one's.
    async fn prepare(
        js: &jetstream::Context,
        settings: &ClusterSettings,
    ) -> Result<Prepared, StoreError> {
        let replicas = settings.replicas.max(1);
        let bucket = |name: &str| kv::Config {
            bucket: name.to_owned(),
            history: 1,
            num_replicas: replicas,
            storage: stream::StorageType::File,
            ..Default::default()
        };
        // `max_age`: how long an entry lasts unless written again (zero: for ever).
        let open_bucket = |name: &'static str, max_age: Duration| {
            let js = js.clone();
            let config = kv::Config {
                max_age,
                ..bucket(name)
            };
            async move {
                let down = |e: &dyn std::fmt::Display| jetstream_down(&settings.urls, name, e);
                let store = match js.get_key_value(name).await {
                    Ok(store) => store,
                    Err(_) => js.create_key_value(config).await.map_err(|e| down(&e))?,
                };
                // A bucket is made to let any replica answer a read, and a replica may not
                // have stored the latest write yet: a lease just taken or an answer just
                // recorded could read as absent. Every read goes to the leader instead.
                let stream = store.stream.cached_info().config.clone();
                if !stream.allow_direct {
                    return Ok(store);
                }
                js.update_stream(stream::Config {
                    allow_direct: false,
                    ..stream
                })
                .await
                .map_err(|e| down(&e))?;
                js.get_key_value(name).await.map_err(|e| down(&e))
            }
        };
        let meta = open_bucket(META, Duration::ZERO).await?;
        check_schema(&meta).await.map_err(|e| match e {
            StoreError::Cluster(reason) => StoreError::Unreachable {
                urls: settings.urls.join(", "),
                reason,
            },
            other => other,
        })?;
        let records = open_bucket(RECORDS, Duration::ZERO).await?;
        let leases = open_bucket(LEASES, Duration::ZERO).await?;
        // A node that stops announcing itself drops out after a few of its lease's lifetimes.
        let nodes = open_bucket(NODES, settings.lease_ttl * 3).await?;
        let answers = open_bucket(ANSWERS, ANSWERS_KEPT).await?;
        let presence = open_bucket(PRESENCE, settings.lease_ttl * 3).await?;
        let mut logs = Vec::new();
        for shard in 0..SHARDS {
            let config = stream::Config {
                name: format!("TETHER_LOG_{shard}"),
                subjects: vec![format!("tether.log.{shard}.*")],
                num_replicas: replicas,
                storage: stream::StorageType::File,
                allow_message_ttl: true,
                ..Default::default()
            };
            let log = js
                .get_or_create_stream(config)
                .await
                .map_err(|e| jetstream_down(&settings.urls, "the log streams", e))?;
            logs.push(log);
        }
        let packs = match js.get_object_store(SNAPSHOTS).await {
            Ok(store) => store,
            Err(_) => js
                .create_object_store(jetstream::object_store::Config {
                    bucket: SNAPSHOTS.to_owned(),
                    num_replicas: replicas,
                    storage: stream::StorageType::File,
                    ..Default::default()
                })
                .await
                .map_err(|e| jetstream_down(&settings.urls, SNAPSHOTS, e))?,
        };
        Ok(Prepared {
            records,
            leases,
            nodes,
            answers,
            presence,
            logs,
            packs: Packs::new(packs),
        })
    }

    /// The working trees' snapshots.
    pub fn packs(&self) -> Packs {
        self.packs.clone()
    }

    /// Announces this node every third of the lease while it runs.
    pub fn announce(self: &Arc<Self>) {
        let me = Arc::downgrade(self);
        let every = self.ttl / 3;
        tokio::spawn(async move {
            loop {
                let Some(cluster) = me.upgrade() else {
                    return;
                };
                let key = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&cluster.node);
                if let Err(e) = cluster
                    .nodes
                    .put(key, Bytes::from(cluster.node.clone()))
                    .await
                {
                    tracing::debug!("could not announce this node: {e}");
                }
                drop(cluster);
                tokio::time::sleep(every).await;
            }
        });
    }

    /// The nodes that announced themselves recently.
    pub async fn nodes(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Ok(mut keys) = self.nodes.keys().await {
            while let Some(Ok(key)) = keys.next().await {
                if let Ok(Some(name)) = self.nodes.get(&key).await {
                    out.push(String::from_utf8_lossy(&name).into_owned());
                }
            }
        }
        out.sort();
        out
    }

    /// Takes the calls other nodes pass on to this one from the moment it joins: a ping is
    /// answered at once (this node is alive), a call once the daemon's methods are installed
    /// ([`Cluster::answer_calls_with`]), so calls that come while it recovers its sessions wait
    /// rather than fail.
    pub fn take_calls(&self) {
        let client = self.client.clone();
        let subject = calls_subject(&self.node);
        let handler = self.handler.subscribe();
        tokio::spawn(async move {
            let mut calls = match client.subscribe(subject).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!("cannot take calls from other nodes: {e}");
                    return;
                }
            };
            while let Some(call) = calls.next().await {
                let Some(reply) = call.reply.clone() else {
                    continue;
                };
                let client = client.clone();
                if *call.payload == *b"ping" {
                    let _ = client.publish(reply, Bytes::from_static(b"pong")).await;
                    continue;
                }
                let handler = handler.clone();
                tokio::spawn(async move {
                    let mut handler = handler;
                    let answer_with = match handler.wait_for(Option::is_some).await {
                        Ok(installed) => installed.clone(),
                        Err(_) => return,
                    };
                    let Some(answer_with) = answer_with else {
                        return;
                    };
                    let answer =
                        answer_with(String::from_utf8_lossy(&call.payload).into_owned()).await;
                    if let Err(e) = client.publish(reply, Bytes::from(answer)).await {
                        tracing::debug!("could not answer a passed-on call: {e}");
                    }
                });
            }
        });
    }

    /// Refuses to join when a running node already answers to this node's name: two nodes of
    /// one name would each take the other's leases for their own.
    pub async fn check_name_free(&self) -> Result<(), StoreError> {
        if self.leases.answers(&self.node).await {
            return Err(StoreError::NodeNameTaken {
                node: self.node.clone(),
            });
        }
        Ok(())
    }

    /// Installs what answers the calls other nodes pass on ([`Cluster::take_calls`]).
    pub fn answer_calls_with(&self, handler: super::PassedOn) {
        self.handler.send_replace(Some(handler));
    }

    /// Passes a call on to `node` and waits for its answer.
    pub async fn pass_on(&self, node: &str, call: String) -> Result<String, StoreError> {
        let request = async_nats::Request::new()
            .payload(Bytes::from(call))
            .timeout(Some(PASS_ON_TIMEOUT));
        match self.client.send_request(calls_subject(node), request).await {
            Ok(answer) => Ok(String::from_utf8_lossy(&answer.payload).into_owned()),
            Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => Err(
                StoreError::Cluster(format!("node {node} is not connected to the cluster")),
            ),
            Err(e) if e.kind() == async_nats::RequestErrorKind::TimedOut => {
                Err(StoreError::NoAnswer {
                    node: node.to_owned(),
                    seconds: PASS_ON_TIMEOUT.as_secs(),
                })
            }
            Err(e) => Err(failed(&format!("node {node} did not answer"), e)),
        }
    }

    /// This node's name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The servers it was given.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// Whether the connection to NATS is up now.
    pub fn connected(&self) -> bool {
        matches!(
            self.client.connection_state(),
            async_nats::connection::State::Connected
        )
    }

    /// The sessions this node holds, with how long ago each lease was renewed.
    pub fn held(&self) -> Vec<(SessionId, Duration)> {
        self.leases.held()
    }

    /// Copies every session record into `db` and keeps copying changes (a session created,
    /// changed or deleted on any node), so listing sessions reads the local store.
    pub async fn mirror_records(self: &Arc<Self>, db: local::Db) -> Result<(), StoreError> {
        let down = |e: &dyn std::fmt::Display| failed("cannot read the session records", e);
        let stored = self.records.status().await.map_err(|e| down(&e))?;
        // One stream: each key's latest value first (`delta` counts down to the last of
        // them), then every change as it comes.
        let mut watch = self
            .records
            .watch_with_history(">")
            .await
            .map_err(|e| down(&e))?;
        let mut known = std::collections::HashSet::new();
        if stored.info.state.messages > 0 {
            loop {
                let entry = tokio::time::timeout(JETSTREAM_PATIENCE, watch.next())
                    .await
                    .map_err(|_| down(&"no answer"))?
                    .ok_or_else(|| down(&"the watch ended"))?
                    .map_err(|e| down(&e))?;
                if let Some(id) = copy_record(&db, &entry).await? {
                    known.insert(id);
                }
                if entry.delta == 0 {
                    break;
                }
            }
        }
        for record in db.sessions()? {
            if known.contains(&record.id) {
                continue;
            }
            if db.mark(&record.id)? > 0 {
                // Copied from the cluster once, deleted there while this node was away.
                db.delete_session(&record.id).await?;
            } else {
                // This node's own from before it joined: it goes into the cluster.
                self.upload(&record, &db).await?;
            }
        }
        tokio::spawn(async move {
            while let Some(entry) = watch.next().await {
                let result = match entry {
                    Ok(entry) => copy_record(&db, &entry).await.map(|_| ()),
                    Err(e) => {
                        tracing::warn!("the watch of session records failed: {e}");
                        continue;
                    }
                };
                if let Err(e) = result {
                    tracing::warn!("could not copy a session record: {e}");
                }
            }
        });
        Ok(())
    }

    /// Puts a session this node kept on its own (from before it joined the cluster) into the
    /// cluster: its whole log and its record, under its lease.
    async fn upload(&self, record: &SessionRecord, db: &local::Db) -> Result<(), StoreError> {
        let claimed = self.claim(&record.id, db).await?;
        let log = db.log(&record.id);
        let events = log.read(0, log.head()?, usize::MAX)?;
        // Old events, the turns long over: kept whole.
        let events: Vec<(Seq, &[u8], bool)> = events
            .iter()
            .map(|(s, j)| (*s, j.as_slice(), false))
            .collect();
        let result = self.publish(&record.id, &events, Some(record)).await;
        self.release(&record.id, claimed.epoch).await;
        let last = result?;
        db.put_mark(&record.id, last)?;
        db.flush().await?;
        tracing::info!(session = %record.id, events = events.len(), "put this node's session into the cluster");
        Ok(())
    }

    /// Takes the lease of a session for this node and brings the local copy of its log up to
    /// date. A lease held by another node is taken only when its owner has not renewed it for
    /// the lease's lifetime; while the owner renews, this fails with [`StoreError::OwnedElsewhere`].
    pub async fn claim(&self, id: &SessionId, db: &local::Db) -> Result<Claimed, StoreError> {
        self.leases
            .one_at_a_time(id, self.claim_alone(id, db))
            .await
    }

    async fn claim_alone(&self, id: &SessionId, db: &local::Db) -> Result<Claimed, StoreError> {
        if let Some(held) = self.leases.holding(id) {
            return Ok(Claimed {
                epoch: held.epoch,
                lost: held.lost.clone(),
            });
        }
        let (revision, sent) = self.leases.take(id).await?;
        let last = match self.catch_up(id, db).await {
            Ok(last) => last,
            Err(e) => {
                self.leases.abandon(id, revision).await;
                return Err(e);
            }
        };
        let held = self.leases.hold(id, revision, sent, last);
        Ok(Claimed {
            epoch: revision,
            lost: held.lost.clone(),
        })
    }

    /// Whether another node holds the session's lease and renewed it within its lifetime.
    pub async fn held_elsewhere(&self, id: &SessionId) -> bool {
        self.leases.held_elsewhere(id).await
    }

    /// Follows a session another node runs: brings the local copy up to date and returns its
    /// head, then sends each event written after it as it is written, until the receiver goes.
    pub async fn follow(&self, id: &SessionId, db: &local::Db) -> Result<Following, StoreError> {
        let down = |e: &dyn std::fmt::Display| failed("cannot follow the session's log", e);
        let last = self.catch_up(id, db).await?;
        let mut head = db.log(id).head()?;
        let stream = &self.logs[shard_of(id) as usize];
        let mut messages = read_from(stream, subject(id), last + 1)
            .await
            .map_err(|e| down(&e))?;
        // The record's deletion ends the session everywhere.
        let mut record = self
            .records
            .watch(token(id))
            .await
            .map_err(|e| down(&e))
            .map(Some)?;
        let (tx, events) = tokio::sync::mpsc::channel(FOLLOW_BUFFER);
        let started_at = head;
        tokio::spawn(async move {
            loop {
                let watching = record.is_some();
                let message = tokio::select! {
                    // Events already written go out before a deletion that followed them.
                    biased;
                    () = tx.closed() => return,
                    message = messages.next() => message,
                    change = async {
                        match record.as_mut() {
                            Some(watch) => watch.next().await,
                            None => std::future::pending().await,
                        }
                    }, if watching => {
                        match change {
                            Some(Ok(entry)) if entry.operation != kv::Operation::Put => {
                                let _ = tx.send(Ok(Followed::Deleted)).await;
                                return;
                            }
                            Some(_) => {}
                            None => record = None,
                        }
                        continue;
                    }
                };
                let message = match message {
                    Some(Ok(m)) => m,
                    Some(Err(e)) => {
                        let _ = tx.send(Err(down(&e))).await;
                        return;
                    }
                    None => return,
                };
                let Some(first) = first_seq(&message.headers) else {
                    continue;
                };
                for (i, line) in message.payload.split(|b| *b == b'\n').enumerate() {
                    let seq = first + i as u64;
                    if seq > head {
                        head = seq;
                        if tx
                            .send(Ok(Followed::Event(seq, line.to_vec())))
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                }
            }
        });
        Ok(Following {
            head: started_at,
            events,
        })
    }

    /// Copies into `db` what the shared log has beyond the local copy; returns the stream
    /// sequence of the session's last message.
    async fn catch_up(&self, id: &SessionId, db: &local::Db) -> Result<u64, StoreError> {
        let down = |e: &dyn std::fmt::Display| failed("cannot read the session's log", e);
        let stream = &self.logs[shard_of(id) as usize];
        let subject = subject(id);
        let last = match stream.get_last_raw_message_by_subject(&subject).await {
            Ok(m) => m.sequence,
            Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => 0,
            Err(e) => return Err(down(&e)),
        };
        let mut mark = db.mark(id)?;
        if mark == 0 && last > 0 && db.log(id).head()? > 0 {
            // A local log that was never the cluster's (an id used on both sides): the
            // cluster's wins.
            db.forget_log(id)?;
        }
        if mark > last {
            // The local copy is of another log (a cluster started afresh): copy it again whole.
            db.forget_log(id)?;
            mark = 0;
        }
        if mark == last {
            return Ok(last);
        }
        let mut messages = read_from(stream, subject.clone(), mark + 1)
            .await
            .map_err(|e| down(&e))?;
        let log = db.log(id);
        let mut head = log.head()?;
        while mark < last {
            let Some(message) = messages.next().await else {
                return Err(failed(
                    "cannot read the session's log",
                    format!("it ended at message {mark} of {last}"),
                ));
            };
            let message = message.map_err(|e| down(&e))?;
            let sequence = message.info().map_err(|e| down(&e))?.stream_sequence;
            let first = first_seq(&message.headers)
                .ok_or_else(|| failed("a log message has no seq", sequence))?;
            for (i, line) in message.payload.split(|b| *b == b'\n').enumerate() {
                let seq = first + i as u64;
                if seq > head {
                    log.append(seq, line)?;
                    head = seq;
                }
            }
            mark = sequence;
            db.put_mark(id, mark)?;
        }
        db.flush().await?;
        Ok(last)
    }

    /// Publishes a commit to the shared log (then the record), as the session's lease holder.
    pub async fn publish(
        &self,
        id: &SessionId,
        events: &[(Seq, &[u8], bool)],
        record: Option<&SessionRecord>,
    ) -> Result<u64, StoreError> {
        let held = self.leases.holding(id).ok_or_else(|| StoreError::Fenced {
            session: id.clone(),
            why: "this node does not hold the session's lease".into(),
        })?;
        let _writing = held.writing.lock().await;
        held.usable(self.ttl).map_err(|why| StoreError::Fenced {
            session: id.clone(),
            why,
        })?;
        let mut last = held.last();
        for chunk in chunks(events) {
            let Some(&(first, _, deltas)) = chunk.first() else {
                continue;
            };
            let mut payload = Vec::with_capacity(chunk.iter().map(|(_, j, _)| j.len() + 1).sum());
            for (i, (_, json, _)) in chunk.iter().enumerate() {
                if i > 0 {
                    payload.push(b'\n');
                }
                payload.extend_from_slice(json);
            }
            let message = Message {
                payload: Bytes::from(payload),
                first,
                id: format!("{}:{}:{first}", token(id), held.epoch),
                expires: self.delta_ttl.filter(|_| deltas),
            };
            last = self.publish_chunk(id, &held, &message, last).await?;
            held.set_last(last);
        }
        if let Some(record) = record {
            let json = serde_json::to_vec(record).map_err(|source| StoreError::Decode {
                what: "session record".into(),
                source,
            })?;
            // Retried as the log's writes are: a put of the same value is harmless.
            let json = Bytes::from(json);
            let mut delay = Duration::from_millis(50);
            let started = Instant::now();
            while let Err(e) = self.records.put(token(id), json.clone()).await {
                if e.kind() == kv::PutErrorKind::InvalidKey || started.elapsed() >= self.ttl {
                    return Err(failed("cannot save the session's record", e));
                }
                if let Err(why) = held.usable(self.ttl) {
                    return Err(failed(
                        "cannot save the session's record",
                        format!("{e}; gave up: {why}"),
                    ));
                }
                tracing::debug!(session = %id, "saving the session's record failed, retrying: {e}");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(1));
            }
        }
        Ok(last)
    }

    /// Publishes one chunk of a commit expecting the subject's last message to be `last`;
    /// returns the new one. A failure other than a refused expectation (a leader election, a
    /// lost connection) is retried with the same message id, which JetStream deduplicates,
    /// while the lease is still this node's.
    async fn publish_chunk(
        &self,
        id: &SessionId,
        held: &Held,
        chunk: &Message,
        last: u64,
    ) -> Result<u64, StoreError> {
        let message_id = chunk.id.as_str();
        let subject = subject(id);
        let mut delay = Duration::from_millis(50);
        let mut retried = false;
        let started = Instant::now();
        loop {
            let mut message = jetstream::message::PublishMessage::build()
                .payload(chunk.payload.clone())
                .header(SEQ_HEADER, chunk.first.to_string().as_str())
                .message_id(message_id)
                .expected_last_subject_sequence(last);
            if let Some(ttl) = chunk.expires {
                message = message.ttl(ttl);
            }
            let ack = match self.js.send_publish(subject.clone(), message).await {
                Ok(ack) => ack.await,
                Err(e) => Err(e),
            };
            let e = match ack {
                Ok(ack) => return Ok(ack.sequence),
                Err(e) => e,
            };
            if e.kind() == PublishErrorKind::WrongLastSequence {
                // A retried publish that was stored after all is the subject's last message.
                if retried && let Some(sequence) = self.last_with_id(id, message_id).await {
                    return Ok(sequence);
                }
                let why = "another node wrote to the session's log".to_owned();
                held.lose(why.clone());
                return Err(StoreError::Fenced {
                    session: id.clone(),
                    why,
                });
            }
            // A refusal that will not change (too big, storage full, not allowed) is not
            // tried again; nor is anything once the lease is in doubt or a lease's time passed.
            let passing = matches!(
                e.kind(),
                PublishErrorKind::TimedOut
                    | PublishErrorKind::BrokenPipe
                    | PublishErrorKind::StreamNotFound
                    | PublishErrorKind::MaxAckPending
            );
            if !passing {
                return Err(failed("cannot write to the session's log", e));
            }
            if let Err(why) = held.usable(self.ttl) {
                return Err(failed(
                    "cannot write to the session's log",
                    format!("{e}; gave up: {why}"),
                ));
            }
            if started.elapsed() >= self.ttl {
                return Err(failed(
                    "cannot write to the session's log",
                    format!("{e}; gave up after {:.0?}", started.elapsed()),
                ));
            }
            if !retried {
                tracing::warn!(session = %id, "writing to the session's log failed, retrying: {e}");
            }
            retried = true;
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(1));
        }
    }

    /// The sequence of the session's last message when its id is `message_id`.
    async fn last_with_id(&self, id: &SessionId, message_id: &str) -> Option<u64> {
        let stream = &self.logs[shard_of(id) as usize];
        let last = stream
            .get_last_raw_message_by_subject(&subject(id))
            .await
            .ok()?;
        let found = last.headers.get(async_nats::header::NATS_MESSAGE_ID)?;
        (found.as_str() == message_id).then_some(last.sequence)
    }

    /// Gives back the lease of a session this node stops running (see [`Leases::release`]).
    pub fn release(
        &self,
        id: &SessionId,
        epoch: u64,
    ) -> impl std::future::Future<Output = ()> + use<> {
        self.leases.release(id, epoch)
    }

    /// Gives back every lease this node holds.
    pub async fn release_all(&self) {
        self.leases.release_all().await;
    }

    /// Removes a session from the cluster: its log, record and lease.
    pub async fn delete(&self, id: &SessionId) -> Result<(), StoreError> {
        let stream = &self.logs[shard_of(id) as usize];
        stream
            .purge()
            .filter(subject(id))
            .await
            .map_err(|e| failed("cannot delete the session's log", e))?;
        self.records
            .delete(token(id))
            .await
            .map_err(|e| failed("cannot delete the session's record", e))?;
        self.leases.forget(id).await;
        self.answers.forget(id).await;
        Ok(())
    }

    /// Records a permission answer before the session's owner logs it: `None` when it is the
    /// first, else the answer that won.
    pub async fn record_answer(
        &self,
        id: &SessionId,
        request_id: &str,
        answer: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError> {
        // The session waits for this: no longer than a quarter of its lease.
        let patience = (self.ttl / 4).clamp(Duration::from_millis(250), Duration::from_secs(5));
        tokio::time::timeout(patience, self.answers.record(id, request_id, answer))
            .await
            .map_err(|_| {
                failed(
                    "cannot record the answer",
                    format!("no answer from JetStream within {patience:?}"),
                )
            })?
    }

    /// Who follows which session: watched and renewed from now on.
    pub fn followers(&self) -> &Arc<Followers> {
        &self.followers
    }

    /// Starts watching the recorded answers; returns what delivers them.
    pub fn answers(&self) -> tokio::sync::broadcast::Receiver<answers::RecordedAnswer> {
        self.answers.recorded_from_now()
    }

    /// Watches the answers bucket while this node runs.
    pub fn watch_answers(&self) {
        Answers::watch(Arc::downgrade(&self.answers));
    }

    /// The answer recorded for a request, if any.
    pub async fn recorded_answer(&self, id: &SessionId, request_id: &str) -> Option<Vec<u8>> {
        self.answers.recorded(id, request_id).await
    }
}

/// A session's log messages from stream sequence `start` on, in order, then live.
async fn read_from(
    stream: &stream::Stream,
    subject: String,
    start: u64,
) -> Result<jetstream::consumer::pull::Ordered, String> {
    let consumer = stream
        .create_consumer(jetstream::consumer::pull::OrderedConfig {
            filter_subject: subject,
            deliver_policy: jetstream::consumer::DeliverPolicy::ByStartSequence {
                start_sequence: start,
            },
            ..Default::default()
        })
        .await
        .map_err(|e| e.to_string())?;
    consumer.messages().await.map_err(|e| e.to_string())
}

/// Copies one change of the records bucket into `db`; the session's id when it is one there.
async fn copy_record(db: &local::Db, entry: &kv::Entry) -> Result<Option<SessionId>, StoreError> {
    match entry.operation {
        kv::Operation::Put => match serde_json::from_slice::<SessionRecord>(&entry.value) {
            Ok(record) => {
                db.put_session(&record)?;
                Ok(Some(record.id))
            }
            Err(e) => {
                tracing::warn!(
                    key = entry.key,
                    "skipping an unreadable session record: {e}"
                );
                Ok(None)
            }
        },
        kv::Operation::Delete | kv::Operation::Purge => {
            if let Ok(bytes) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(&entry.key) {
                let id = SessionId(String::from_utf8_lossy(&bytes).into_owned());
                db.delete_session(&id).await?;
            }
            Ok(None)
        }
    }
}

/// The seq of a log message's first event.
fn first_seq(headers: &Option<async_nats::HeaderMap>) -> Option<Seq> {
    headers
        .as_ref()?
        .get(SEQ_HEADER)
        .and_then(|v| v.as_str().parse().ok())
}

/// Splits a commit into publishes of at most [`CHUNK_BYTES`] (one event each at least).
fn chunks<'a>(events: &'a [(Seq, &'a [u8], bool)]) -> Vec<&'a [(Seq, &'a [u8], bool)]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut size = 0;
    for (i, (_, json, delta)) in events.iter().enumerate() {
        if i > start && (size + json.len() > CHUNK_BYTES || *delta != events[start].2) {
            out.push(&events[start..i]);
            start = i;
            size = 0;
        }
        size += json.len() + 1;
    }
    if start < events.len() {
        out.push(&events[start..]);
    }
    out
}

/// The error for JetStream not answering while setting up `what`.
fn jetstream_down(urls: &[String], what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Unreachable {
        urls: urls.join(", "),
        reason: format!(
            "JetStream did not set up {what}: {e} (is JetStream enabled, and does the cluster have a leader?)"
        ),
    }
}

/// Refuses a cluster whose data was written with another schema version.
async fn check_schema(meta: &kv::Store) -> Result<(), StoreError> {
    let ours = Bytes::from(SCHEMA_VERSION.to_string());
    match meta.create("schema", ours).await {
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {}
        Err(e) => return Err(failed("cannot read the cluster's schema version", e)),
    }
    let found = meta
        .get("schema")
        .await
        .map_err(|e| failed("cannot read the cluster's schema version", e))?
        .and_then(|v| String::from_utf8_lossy(&v).trim().parse::<u64>().ok())
        .unwrap_or(0);
    if found == SCHEMA_VERSION {
        Ok(())
    } else {
        Err(StoreError::ClusterSchema { found })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_commits_split_and_small_ones_do_not() {
        let big = vec![b'x'; CHUNK_BYTES / 2 + 1];
        let events: Vec<(Seq, &[u8], bool)> = (1..=5).map(|s| (s, big.as_slice(), false)).collect();
        let split = chunks(&events);
        assert_eq!(
            split.iter().map(|c| c.len()).collect::<Vec<_>>(),
            [1, 1, 1, 1, 1]
        );
        let small: Vec<(Seq, &[u8], bool)> =
            (1..=50).map(|s| (s, b"{}".as_slice(), false)).collect();
        assert_eq!(chunks(&small).len(), 1);
        assert!(chunks(&[]).is_empty());
    }

    #[test]
    fn deltas_go_in_messages_of_their_own() {
        let events: Vec<(Seq, &[u8], bool)> = [false, true, true, true, false, false, true]
            .into_iter()
            .zip(1..)
            .map(|(delta, s)| (s, b"{}".as_slice(), delta))
            .collect();
        let split = chunks(&events);
        assert_eq!(
            split.iter().map(|c| (c.len(), c[0].2)).collect::<Vec<_>>(),
            [(1, false), (3, true), (2, false), (1, true)]
        );
    }

    #[test]
    fn any_session_id_makes_one_subject_token() {
        for id in ["a.b", "with space", "*", ">", "ümlaut"] {
            let t = token(&SessionId(id.into()));
            assert!(
                t.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
                "{t}"
            );
        }
    }
}
