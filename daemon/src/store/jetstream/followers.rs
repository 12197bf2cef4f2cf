//! Who follows which session from which node: a node that streams a session another node runs
//! to its own clients says so in the `tether-presence` bucket (one key per session and node,
//! the list of its subscribers), renewed every third of the lease; every node watches the
//! bucket, so the session's owner knows who is attached anywhere ("N attached", whether a
//! controller is there to answer a permission request).
//!
//! Invariant: a node's entry counts only while it is renewed; one not heard of for a whole
//! lease (its node died or lost the cluster) is dropped, and the owner is told.

use super::names::{token, token_of};
use async_nats::jetstream::kv;
use bytes::Bytes;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};
use tether_proto::{AttachedClient, SessionId};
use tokio::sync::broadcast;

/// One node's subscribers to one session, as the bucket holds them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Entry {
    session: SessionId,
    node: String,
    clients: Vec<AttachedClient>,
}

/// An entry as this node last heard it.
struct Heard {
    entry: Entry,
    at: Instant,
}

/// This node's followers, and every node's as last heard.
pub struct Followers {
    bucket: kv::Store,
    node: String,
    ttl: Duration,
    mine: Mutex<HashMap<SessionId, Vec<AttachedClient>>>,
    heard: Mutex<HashMap<String, Heard>>,
    changed: broadcast::Sender<SessionId>,
    /// One write at a time, so the bucket ends with the latest list.
    writing: tokio::sync::Mutex<()>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Followers {
    /// Followers kept in `bucket`, renewed within `ttl`.
    pub fn new(bucket: kv::Store, node: String, ttl: Duration) -> Self {
        Self {
            bucket,
            node,
            ttl,
            mine: Mutex::default(),
            heard: Mutex::default(),
            changed: broadcast::channel(256).0,
            writing: tokio::sync::Mutex::new(()),
        }
    }

    fn key(&self, id: &SessionId) -> String {
        format!("{}.{}", token(id), token_of(&self.node))
    }

    /// A client of this node follows session `id`.
    pub async fn joined(&self, id: &SessionId, client: AttachedClient) {
        lock(&self.mine).entry(id.clone()).or_default().push(client);
        self.publish(id).await;
    }

    /// A client of this node stopped following session `id`.
    pub async fn left(&self, id: &SessionId, client: &AttachedClient) {
        {
            let mut mine = lock(&self.mine);
            if let Some(list) = mine.get_mut(id) {
                if let Some(i) = list
                    .iter()
                    .position(|a| a.client.same(&client.client) && a.role == client.role)
                {
                    list.remove(i);
                }
                if list.is_empty() {
                    mine.remove(id);
                }
            }
        }
        self.publish(id).await;
    }

    /// Writes this node's entry for `id` (removes it when nobody follows).
    async fn publish(&self, id: &SessionId) {
        let _one = self.writing.lock().await;
        let clients = lock(&self.mine).get(id).cloned().unwrap_or_default();
        let key = self.key(id);
        let done = if clients.is_empty() {
            self.bucket.delete(&key).await.map_err(|e| e.to_string())
        } else {
            let entry = Entry {
                session: id.clone(),
                node: self.node.clone(),
                clients,
            };
            match serde_json::to_vec(&entry) {
                Ok(bytes) => self
                    .bucket
                    .put(&key, Bytes::from(bytes))
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            }
        };
        if let Err(e) = done {
            tracing::debug!(session = %id, "could not say who follows the session here: {e}");
        }
    }

    /// The clients following session `id` through the cluster, on any node.
    pub fn of(&self, id: &SessionId) -> Vec<AttachedClient> {
        lock(&self.heard)
            .values()
            .filter(|h| &h.entry.session == id)
            .flat_map(|h| h.entry.clients.iter().cloned())
            .collect()
    }

    /// The sessions whose followers change, as they change.
    pub fn changes(&self) -> broadcast::Receiver<SessionId> {
        self.changed.subscribe()
    }

    /// Watches the bucket and renews this node's entries, while `self` lives.
    pub fn start(self: &Arc<Self>) {
        let me = Arc::downgrade(self);
        tokio::spawn(watch(me.clone()));
        tokio::spawn(renew(me, self.ttl / 3));
    }

    /// Takes one change of the bucket in.
    fn heard(&self, entry: &kv::Entry) {
        let session = match entry.operation {
            kv::Operation::Put => match serde_json::from_slice::<Entry>(&entry.value) {
                Ok(new) => {
                    let session = new.session.clone();
                    let old = lock(&self.heard).insert(
                        entry.key.clone(),
                        Heard {
                            entry: new.clone(),
                            at: Instant::now(),
                        },
                    );
                    if old.is_some_and(|o| o.entry == new) {
                        return;
                    }
                    session
                }
                Err(e) => {
                    tracing::debug!(
                        key = entry.key,
                        "skipping an unreadable presence entry: {e}"
                    );
                    return;
                }
            },
            kv::Operation::Delete | kv::Operation::Purge => {
                match lock(&self.heard).remove(&entry.key) {
                    Some(gone) => gone.entry.session,
                    None => return,
                }
            }
        };
        let _ = self.changed.send(session);
    }

    /// Drops the entries not renewed for a whole lease.
    fn expire(&self) {
        let stale: Vec<SessionId> = {
            let mut heard = lock(&self.heard);
            let old: Vec<String> = heard
                .iter()
                .filter(|(_, h)| h.at.elapsed() > self.ttl)
                .map(|(k, _)| k.clone())
                .collect();
            old.iter()
                .filter_map(|k| heard.remove(k).map(|h| h.entry.session))
                .collect()
        };
        for session in stale {
            let _ = self.changed.send(session);
        }
    }
}

async fn watch(me: Weak<Followers>) {
    loop {
        let Some(followers) = me.upgrade() else {
            return;
        };
        let watching = followers.bucket.watch_with_history(">").await;
        drop(followers);
        match watching {
            Ok(mut changes) => {
                while let Some(change) = changes.next().await {
                    let Some(followers) = me.upgrade() else {
                        return;
                    };
                    match change {
                        Ok(entry) => followers.heard(&entry),
                        Err(e) => {
                            tracing::debug!("the presence watch failed: {e}");
                            break;
                        }
                    }
                }
            }
            Err(e) => tracing::debug!("cannot watch who follows which session: {e}"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn renew(me: Weak<Followers>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(followers) = me.upgrade() else {
            return;
        };
        let sessions: Vec<SessionId> = lock(&followers.mine).keys().cloned().collect();
        for id in &sessions {
            followers.publish(id).await;
        }
        followers.expire();
    }
}
