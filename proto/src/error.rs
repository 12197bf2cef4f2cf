//! Error codes of the protocol, besides JSON-RPC's standard ones (-32700 parse error, -32600
//! invalid request, -32601 method not found, -32602 invalid params, -32603 internal error).

use jsonrpsee::types::ErrorObjectOwned;

/// Tether's own JSON-RPC error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum ErrorCode {
    /// A turn is running and the request asked not to queue.
    SessionBusy = -32001,
    /// No session has that id.
    SessionNotFound = -32002,
    /// An observer tried to act on a session.
    NotController = -32003,
    /// No pending permission request has that id.
    RequestNotFound = -32004,
    /// The daemon is draining and takes no new work.
    DaemonShuttingDown = -32005,
    /// The method is part of the protocol but this daemon does not serve it yet.
    NotImplemented = -32006,
    /// The daemon could not store or read session data.
    Storage = -32007,
    /// The daemon serves as many connections as it allows (`max_connections`); sent on a
    /// refused NDJSON connection before it is closed.
    TooManyConnections = -32008,
    /// In cluster mode: another node runs the session and keeps its lease; the message names
    /// the node.
    SessionElsewhere = -32009,
    /// The session reached its budget: a prompt is refused until the budget is raised.
    BudgetReached = -32010,
    /// The caller's role does not allow the call: the message names the principal, the role
    /// and what it allows. Nothing changed.
    NotPermitted = -32011,
}

impl ErrorCode {
    /// The numeric code on the wire.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The code for a numeric value, if it is one of tether's.
    pub fn from_code(code: i32) -> Option<Self> {
        [
            Self::SessionBusy,
            Self::SessionNotFound,
            Self::NotController,
            Self::RequestNotFound,
            Self::DaemonShuttingDown,
            Self::NotImplemented,
            Self::Storage,
            Self::TooManyConnections,
            Self::SessionElsewhere,
            Self::BudgetReached,
            Self::NotPermitted,
        ]
        .into_iter()
        .find(|c| c.code() == code)
    }

    /// A JSON-RPC error object with this code and a message.
    pub fn with_message(self, message: impl Into<String>) -> ErrorObjectOwned {
        ErrorObjectOwned::owned::<()>(self.code(), message.into(), None)
    }
}
