//! Who runs which session: the lease bucket, the leases this node holds and their renewal, and
//! the wait for another node's lease to run out.
//!
//! Invariant: a node takes a lease another node holds only after the lease went unrenewed for
//! its whole lifetime and its holder does not answer; a holder renews every quarter of the
//! lifetime and stops writing at three quarters, so the two never overlap. The lease's revision
//! when it was taken is the session's epoch.

use super::names::{calls_subject, token};
use crate::store::StoreError;
use async_nats::jetstream::kv;
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tether_proto::SessionId;
use tokio_util::sync::CancellationToken;

/// How often a node waiting for a lease looks at it again.
const LEASE_POLL: Duration = Duration::from_millis(100);

/// The leases of this node, and the bucket every node keeps them in.
pub(super) struct Leases {
    bucket: kv::Store,
    /// To ask a holder whether it is alive.
    client: async_nats::Client,
    node: String,
    ttl: Duration,
    /// The sessions this node holds the lease of.
    held: Mutex<HashMap<SessionId, Arc<Held>>>,
    /// A lock per session being claimed.
    claiming: Mutex<HashMap<SessionId, Arc<tokio::sync::Mutex<()>>>>,
}

/// A session whose lease this node holds.
pub(super) struct Held {
    key: String,
    /// The lease's revision when it was claimed: the session's epoch here.
    pub(super) epoch: u64,
    state: Mutex<HeldState>,
    /// Cancelled when the node lost the lease (or gave it back).
    pub(super) lost: CancellationToken,
    /// One commit at a time (the actor commits serially; a fork commits before its actor runs).
    pub(super) writing: tokio::sync::Mutex<()>,
}

struct HeldState {
    /// The lease's current revision (each renewal makes a new one).
    revision: u64,
    /// When the lease was last renewed (or claimed): when that write was sent.
    renewed: Instant,
    /// The stream sequence of the session's last message, as this node wrote or read it.
    last: u64,
    /// Why the lease was lost, once it was.
    lost_why: Option<String>,
}

/// How long a lease may go unrenewed before its holder stops writing.
fn unrenewed_limit(ttl: Duration) -> Duration {
    ttl * 3 / 4
}

/// A lock's map, usable after a panic elsewhere (single inserts and removes).
fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Leases {
    pub(super) fn new(
        bucket: kv::Store,
        client: async_nats::Client,
        node: String,
        ttl: Duration,
    ) -> Self {
        Self {
            bucket,
            client,
            node,
            ttl,
            held: Mutex::new(HashMap::new()),
            claiming: Mutex::new(HashMap::new()),
        }
    }

    /// The sessions this node holds, with how long ago each lease was renewed.
    pub(super) fn held(&self) -> Vec<(SessionId, Duration)> {
        locked(&self.held)
            .iter()
            .map(|(id, h)| (id.clone(), h.state().renewed.elapsed()))
            .collect()
    }

    /// The lease this node holds of a session, if it still does.
    pub(super) fn holding(&self, id: &SessionId) -> Option<Arc<Held>> {
        locked(&self.held)
            .get(id)
            .filter(|h| !h.lost.is_cancelled())
            .cloned()
    }

    /// Runs `claim` as the only claim of `id` on this node at a time: a second would take the
    /// lease from the first (both are this node's) and fence it.
    pub(super) async fn one_at_a_time<T>(
        &self,
        id: &SessionId,
        claim: impl std::future::Future<Output = T>,
    ) -> T {
        let lock = locked(&self.claiming)
            .entry(id.clone())
            .or_default()
            .clone();
        let result = {
            let _one = lock.lock().await;
            claim.await
        };
        let mut claiming = locked(&self.claiming);
        if claiming.get(id).is_some_and(|l| Arc::strong_count(l) <= 2) {
            claiming.remove(id);
        }
        result
    }

    /// Takes the lease of `id`; returns its revision and when the write that took it was sent.
    /// A lease held by another node that renewed it lately and answers is refused with
    /// [`StoreError::OwnedElsewhere`]; one whose holder is gone, paused or cut off is waited
    /// out (or found renewed after all).
    pub(super) async fn take(&self, id: &SessionId) -> Result<(u64, Instant), StoreError> {
        let key = token(id);
        let down = |e: &dyn std::fmt::Display| {
            StoreError::Cluster(format!("cannot read the session's lease: {e}"))
        };
        let me = Bytes::from(self.node.clone());
        // Long enough for a dead owner's lease to run out, and for a live one to renew.
        let give_up = Instant::now() + self.ttl * 2;
        loop {
            let entry = self.bucket.entry(&key).await.map_err(|e| down(&e))?;
            let sent = Instant::now();
            let entry = match entry {
                Some(e) if e.operation == kv::Operation::Put => e,
                _ => match self.bucket.create(&key, me.clone()).await {
                    Ok(revision) => return Ok((revision, sent)),
                    Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(down(&e)),
                },
            };
            let holder = String::from_utf8_lossy(&entry.value).into_owned();
            let age = age_of(&entry);
            // This node's own lease (from before a restart) or one its owner let run out.
            if holder == self.node || age >= self.ttl {
                let sent = Instant::now();
                match self.bucket.update(&key, me.clone(), entry.revision).await {
                    Ok(revision) => {
                        if holder != self.node {
                            tracing::info!(session = %id, from = holder, "took over the session");
                        }
                        return Ok((revision, sent));
                    }
                    Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => continue,
                    Err(e) => return Err(down(&e)),
                }
            }
            // Held by another node that renewed it lately (every quarter of the lease) and
            // answers: it runs the session.
            if age < self.ttl / 2 && self.answers(&holder).await {
                return Err(StoreError::OwnedElsewhere {
                    session: id.clone(),
                    node: holder,
                });
            }
            // Gone, paused or cut off: wait for a renewal (it is alive after all) or for the
            // lease to run out.
            loop {
                tokio::time::sleep(LEASE_POLL).await;
                let now = self.bucket.entry(&key).await.map_err(|e| down(&e))?;
                let renewed = now.as_ref().is_some_and(|e| {
                    e.revision != entry.revision || e.operation != kv::Operation::Put
                });
                if renewed {
                    if let Some(now) = now.filter(|e| e.operation == kv::Operation::Put) {
                        let node = String::from_utf8_lossy(&now.value).into_owned();
                        if node != self.node {
                            return Err(StoreError::OwnedElsewhere {
                                session: id.clone(),
                                node,
                            });
                        }
                    }
                    break;
                }
                if age_of(&entry) >= self.ttl {
                    break;
                }
                if Instant::now() >= give_up {
                    return Err(StoreError::OwnedElsewhere {
                        session: id.clone(),
                        node: holder,
                    });
                }
            }
        }
    }

    /// Keeps a lease just taken (`revision`, sent at `sent`), the session's log copied through
    /// stream sequence `last`, and renews it until it is lost or given back.
    pub(super) fn hold(
        &self,
        id: &SessionId,
        revision: u64,
        sent: Instant,
        last: u64,
    ) -> Arc<Held> {
        let held = Arc::new(Held {
            key: token(id),
            epoch: revision,
            state: Mutex::new(HeldState {
                revision,
                renewed: sent,
                last,
                lost_why: None,
            }),
            lost: CancellationToken::new(),
            writing: tokio::sync::Mutex::new(()),
        });
        locked(&self.held).insert(id.clone(), held.clone());
        tokio::spawn(renew(
            self.bucket.clone(),
            self.node.clone(),
            self.ttl,
            held.clone(),
        ));
        tracing::info!(session = %id, epoch = revision, "holding the session's lease");
        held
    }

    /// Gives up a lease just taken that this node cannot use (nobody else is kept out by it).
    pub(super) async fn abandon(&self, id: &SessionId, revision: u64) {
        let _ = self
            .bucket
            .delete_expect_revision(token(id), Some(revision))
            .await;
    }

    /// Whether another node holds the session's lease and renewed it within its lifetime
    /// (`false` when that cannot be read: the claim then finds out).
    pub(super) async fn held_elsewhere(&self, id: &SessionId) -> bool {
        let Ok(Some(entry)) = self.bucket.entry(token(id)).await else {
            return false;
        };
        entry.operation == kv::Operation::Put
            && *entry.value != *self.node.as_bytes()
            && age_of(&entry) < self.ttl
    }

    /// Whether `node` answers at all (a node that died has no one taking its calls: NATS says
    /// so at once; a paused one does not answer in time).
    pub(super) async fn answers(&self, node: &str) -> bool {
        let request = async_nats::Request::new()
            .payload(Bytes::from_static(b"ping"))
            .timeout(Some(Duration::from_secs(1)));
        self.client
            .send_request(calls_subject(node), request)
            .await
            .is_ok()
    }

    /// Gives back the lease of a session this node stops running (the claim of `epoch` only: a
    /// newer claim of the session stays). This node stops holding it at once; the returned
    /// future deletes the lease (unless it was renewed or claimed anew since), so another node
    /// may take the session without waiting.
    pub(super) fn release(
        &self,
        id: &SessionId,
        epoch: u64,
    ) -> impl std::future::Future<Output = ()> + use<> {
        let held = {
            let mut map = locked(&self.held);
            match map.get(id) {
                Some(h) if h.epoch == epoch => map.remove(id),
                _ => None,
            }
        };
        let bucket = self.bucket.clone();
        let id = id.clone();
        async move {
            let Some(held) = held else {
                return;
            };
            held.lose("the session was unloaded".into());
            let revision = held.state().revision;
            if let Err(e) = bucket
                .delete_expect_revision(&held.key, Some(revision))
                .await
            {
                tracing::debug!(session = %id, "could not give the lease back: {e}");
            }
        }
    }

    /// Gives back every lease this node holds.
    pub(super) async fn release_all(&self) {
        let held: Vec<(SessionId, u64)> = locked(&self.held)
            .iter()
            .map(|(id, h)| (id.clone(), h.epoch))
            .collect();
        for (id, epoch) in held {
            self.release(&id, epoch).await;
        }
    }

    /// Drops the lease of a deleted session, whoever held it.
    pub(super) async fn forget(&self, id: &SessionId) {
        if let Some(held) = locked(&self.held).remove(id) {
            held.lose("the session was deleted".into());
        }
        let _ = self.bucket.delete(token(id)).await;
    }
}

/// How long ago a lease entry was written, by the server's clock against this node's.
fn age_of(entry: &kv::Entry) -> Duration {
    SystemTime::now()
        .duration_since(SystemTime::from(entry.created))
        .unwrap_or_default()
}

impl Held {
    fn state(&self) -> std::sync::MutexGuard<'_, HeldState> {
        // Plain values, each written whole.
        locked(&self.state)
    }

    /// The stream sequence of the session's last message, as this node knows it.
    pub(super) fn last(&self) -> u64 {
        self.state().last
    }

    /// Records the session's last message after a write.
    pub(super) fn set_last(&self, last: u64) {
        self.state().last = last;
    }

    /// Refuses a write once the lease is lost or has gone unrenewed for three quarters of its
    /// lifetime (another node may take it at the full lifetime, counted from when the server
    /// stored the renewal, which is after this node sent it).
    pub(super) fn usable(&self, ttl: Duration) -> Result<(), String> {
        let state = self.state();
        if let Some(why) = &state.lost_why {
            return Err(why.clone());
        }
        if self.lost.is_cancelled() {
            return Err("the lease was given back".into());
        }
        if state.renewed.elapsed() >= unrenewed_limit(ttl) {
            let why = format!(
                "the lease went unrenewed for {:.1}s",
                state.renewed.elapsed().as_secs_f64()
            );
            drop(state);
            self.lose(why.clone());
            return Err(why);
        }
        Ok(())
    }

    /// Marks the lease lost (the first reason stays) and tells the session's actor.
    pub(super) fn lose(&self, why: String) {
        let mut state = self.state();
        if state.lost_why.is_none() {
            state.lost_why = Some(why);
        }
        drop(state);
        self.lost.cancel();
    }
}

/// Renews a held lease every quarter of its lifetime (a failed renewal is tried again at once,
/// every quarter second) until it is lost or given back.
async fn renew(bucket: kv::Store, node: String, ttl: Duration, held: Arc<Held>) {
    let every = ttl / 4;
    let again = Duration::from_millis(250);
    let wait_for_ack = (ttl / 8).max(again);
    let mut next = every;
    loop {
        tokio::select! {
            () = held.lost.cancelled() => return,
            () = tokio::time::sleep(next) => {}
        }
        if held.usable(ttl).is_err() {
            return;
        }
        let revision = held.state().revision;
        let sent = Instant::now();
        let update = bucket.update(&held.key, Bytes::from(node.clone()), revision);
        next = again;
        match tokio::time::timeout(wait_for_ack, update).await {
            Ok(Ok(revision)) => {
                let mut state = held.state();
                state.revision = revision;
                state.renewed = sent;
                next = every;
            }
            Ok(Err(e)) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                // A renewal that timed out here may have been stored after all: the lease still
                // names this node. Anything else is another node's.
                match bucket.entry(&held.key).await {
                    Ok(Some(entry))
                        if entry.operation == kv::Operation::Put
                            && *entry.value == *node.as_bytes() =>
                    {
                        let mut state = held.state();
                        state.revision = entry.revision;
                        state.renewed = sent;
                        next = every;
                    }
                    Ok(_) => {
                        held.lose("another node took the session over".into());
                        return;
                    }
                    Err(e) => tracing::warn!(key = held.key, "could not read a lease: {e}"),
                }
            }
            Ok(Err(e)) => tracing::warn!(key = held.key, "could not renew a lease: {e}"),
            Err(_) => tracing::warn!(key = held.key, "renewing a lease timed out"),
        }
    }
}
