//! How the cluster's things are named: the subject-safe token of a session id, the log stream
//! and subject a session's events go to, and the subject a node takes passed-on calls on.
//!
//! Invariant: every name is derived from the id alone, the same on every node.

use base64::Engine;
use tether_proto::SessionId;

/// How many log streams sessions are spread over.
pub const SHARDS: u32 = 4;

/// The subject-safe form of a session id (ids a client picks may hold dots or spaces); also
/// its key in the KV buckets.
pub fn token(id: &SessionId) -> String {
    token_of(&id.0)
}

/// The subject-safe form of any name (a request id, a node's name).
pub fn token_of(name: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(name.as_bytes())
}

/// The log stream (`TETHER_LOG_<n>`) a session's events go to.
pub fn shard_of(id: &SessionId) -> u32 {
    crc32fast::hash(id.0.as_bytes()) % SHARDS
}

/// The subject of a session's log.
pub fn subject(id: &SessionId) -> String {
    format!("tether.log.{}.{}", shard_of(id), token(id))
}

/// Where a node takes the calls other nodes pass on to it.
pub fn calls_subject(node: &str) -> String {
    format!(
        "tether.calls.{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(node)
    )
}
