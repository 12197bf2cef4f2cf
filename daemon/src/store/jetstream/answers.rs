//! Permission answers the cluster keeps until the session's owner has logged them: each is
//! written create-if-absent under its session and request, so the first answer wins durably
//! even when the owner dies before logging it, and the next owner finds it.
//!
//! Invariant: an answer is never overwritten; a later one learns which answer won. Every node
//! watches the bucket, so the owner of a session applies an answer another node's owner
//! recorded just before losing the session to it.

use super::names::{token, token_of};
use crate::store::StoreError;
use async_nats::jetstream::kv;
use base64::Engine;
use bytes::Bytes;
use futures::StreamExt;
use std::time::Duration;
use tether_proto::SessionId;
use tokio::sync::broadcast;

/// An answer recorded in the cluster: its session, its request, the answer as encoded.
pub type RecordedAnswer = (SessionId, String, Vec<u8>);

/// The bucket of answers.
pub struct Answers {
    bucket: kv::Store,
    recorded: broadcast::Sender<RecordedAnswer>,
}

/// A key's session and request, as the tokens spell them.
fn parts(key: &str) -> Option<(SessionId, String)> {
    let (session, request) = key.split_once('.')?;
    let decode = |t: &str| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(t)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
    };
    Some((SessionId(decode(session)?), decode(request)?))
}

fn key(id: &SessionId, request_id: &str) -> String {
    format!("{}.{}", token(id), token_of(request_id))
}

impl Answers {
    /// Answers kept in `bucket`.
    pub fn new(bucket: kv::Store) -> Self {
        Self {
            bucket,
            recorded: broadcast::channel(256).0,
        }
    }

    /// The answers recorded from now on, by any node, as they are recorded.
    pub fn recorded_from_now(&self) -> broadcast::Receiver<RecordedAnswer> {
        self.recorded.subscribe()
    }

    /// Watches the bucket for new answers while `me` lives.
    pub fn watch(me: std::sync::Weak<Self>) {
        tokio::spawn(async move {
            loop {
                let Some(answers) = me.upgrade() else { return };
                let watching = answers.bucket.watch_all().await;
                drop(answers);
                match watching {
                    Ok(mut changes) => {
                        while let Some(change) = changes.next().await {
                            let Some(answers) = me.upgrade() else { return };
                            match change {
                                Ok(entry) if entry.operation == kv::Operation::Put => {
                                    if let Some((session, request)) = parts(&entry.key) {
                                        let _ = answers.recorded.send((
                                            session,
                                            request,
                                            entry.value.to_vec(),
                                        ));
                                    }
                                }
                                Ok(_) => {}
                                Err(e) => {
                                    tracing::debug!("the answers watch failed: {e}");
                                    break;
                                }
                            }
                        }
                    }
                    Err(e) => tracing::debug!("cannot watch the recorded answers: {e}"),
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
    }

    /// Records `answer` for `request_id` unless one is there: `None` when this one is the
    /// first, else the answer that was.
    pub async fn record(
        &self,
        id: &SessionId,
        request_id: &str,
        answer: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let key = key(id, request_id);
        match self
            .bucket
            .create(&key, Bytes::copy_from_slice(answer))
            .await
        {
            Ok(_) => Ok(None),
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
                match self.bucket.get(&key).await {
                    Ok(Some(first)) => Ok(Some(first.to_vec())),
                    // Gone between the two calls (its session was deleted): nothing won.
                    Ok(None) => Ok(None),
                    Err(e) => Err(super::failed("cannot read the recorded answer", e)),
                }
            }
            Err(e) => Err(super::failed("cannot record the answer", e)),
        }
    }

    /// The recorded answer to `request_id`, if any; an unreadable bucket counts as none
    /// (the request then stays open for a new answer).
    pub async fn recorded(&self, id: &SessionId, request_id: &str) -> Option<Vec<u8>> {
        match self.bucket.get(key(id, request_id)).await {
            Ok(found) => found.map(|b| b.to_vec()),
            Err(e) => {
                tracing::warn!("cannot read the answers recorded for session {id}: {e}");
                None
            }
        }
    }

    /// Forgets a deleted session's answers.
    pub async fn forget(&self, id: &SessionId) {
        let subjects = format!("{}{}.>", self.bucket.prefix, token(id));
        if let Err(e) = self.bucket.stream.purge().filter(subjects).await {
            tracing::warn!("cannot forget the answers of deleted session {id}: {e}");
        }
    }
}
