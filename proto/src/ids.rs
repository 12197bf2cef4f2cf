//! Identifier newtypes. Session and turn ids are opaque strings; connection ids, seqs and epochs
//! are integers.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A session's id (a UUID in its hyphenated form).
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(transparent)]
pub struct SessionId(pub String);

/// A turn's id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct TurnId(pub String);

/// One connection to the daemon, unique for the daemon's lifetime (its `epoch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct ConnectionId(pub u64);

/// An event's position in its session's log: dense, starts at 1, never reused.
pub type Seq = u64;

/// Changes on every daemon start; strictly increasing across restarts.
pub type Epoch = u64;

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for TurnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for ConnectionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<&str> for SessionId {
    fn from(s: &str) -> Self {
        Self(s.to_owned())
    }
}
