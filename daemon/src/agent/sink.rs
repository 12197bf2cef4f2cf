//! Where a turn's events go. The session actor implements it: it appends each event to the log,
//! makes it durable and broadcasts it, in the order they were sent.

use std::future::Future;
use std::pin::Pin;
use tether_proto::EventKind;

/// Why the session could not take a turn's event or permission check.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SinkError {
    /// The session's actor is gone (the daemon is stopping, or the session was deleted).
    #[error("the session stopped")]
    Stopped,
    /// The event could not be saved; the session is read-only from now on.
    #[error("the session could not record an event: {0}")]
    Storage(#[source] std::sync::Arc<dyn std::error::Error + Send + Sync>),
}

impl SinkError {
    /// A storage failure, from the session's own error.
    pub fn storage(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Storage(std::sync::Arc::new(e))
    }
}

/// A tool call awaiting the permission check.
#[derive(Debug, Clone)]
pub struct PermissionAsk {
    /// The call's id.
    pub tool_call_id: String,
    /// The tool.
    pub tool: String,
    /// Its input.
    pub input: serde_json::Value,
    /// Whether the tool only reads.
    pub read_only: bool,
    /// What a PreToolUse hook said, if one did.
    pub hook: Option<crate::hooks::HookPermission>,
    /// The turn answers its own asks (`--permission-prompt-tool`): when the rules would ask,
    /// answer [`Verdict::Ask`] instead of opening a request.
    pub delegated: bool,
}

/// The permission check's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Run the call.
    Allow,
    /// Run the call with this input instead (a controller's `updatedInput`).
    AllowWith(serde_json::Value),
    /// Do not run it; the text goes to the model as the result.
    Deny(String),
    /// The rules would ask, and the turn answers itself (only for a `delegated` ask).
    Ask,
}

/// The turn's outlet.
pub trait TurnSink: Send + Sync {
    /// Checks whether a call may run, asking a controller when the rules say so (waits for the
    /// answer).
    fn authorize(
        &self,
        ask: PermissionAsk,
    ) -> Pin<Box<dyn Future<Output = Result<Verdict, SinkError>> + Send + '_>>;

    /// Sends an event without waiting (deltas, progress, completed blocks).
    fn send(&self, event: EventKind);
    /// Sends an event and waits until it — and everything sent before it — is durable
    /// (write-ahead points: a tool call before it runs, results before the next request).
    fn commit(
        &self,
        event: EventKind,
    ) -> Pin<Box<dyn Future<Output = Result<(), SinkError>> + Send + '_>>;
}
