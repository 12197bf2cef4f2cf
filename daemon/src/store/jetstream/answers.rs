//! Permission answers the cluster keeps until the session's owner has logged them: each is
//! written create-if-absent under its session and request, so the first answer wins durably
//! even when the owner dies before logging it, and the next owner finds it.
//!
//! Invariant: an answer is never overwritten; a later one learns which answer won.

use super::names::{token, token_of};
use crate::store::StoreError;
use async_nats::jetstream::kv;
use bytes::Bytes;
use tether_proto::SessionId;

/// The bucket of answers.
pub struct Answers {
    bucket: kv::Store,
}

fn key(id: &SessionId, request_id: &str) -> String {
    format!("{}.{}", token(id), token_of(request_id))
}

impl Answers {
    /// Answers kept in `bucket`.
    pub fn new(bucket: kv::Store) -> Self {
        Self { bucket }
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
