//! The wire contract between `tetherd` and its clients: the JSON-RPC trait, its params and
//! results, the session `Event` envelope, ids, error codes and the protocol version.
//!
//! Invariant: these are the only wire types; nothing here performs network IO, and the only
//! filesystem calls are the private-file rules in [`private`] that both sides must apply the same
//! way. Field names are camelCase on the wire, params are by-name JSON objects.
#![warn(missing_docs)]

pub mod error;
pub mod event;
pub mod ids;
pub mod paths;
pub mod private;
// Each named parameter of the wire is an argument of its method, in the code the RPC macro
// writes too (`permission/respond` has six).
#[allow(clippy::too_many_arguments)]
pub mod rpc;
pub mod schema;
pub mod types;
pub mod vocab;

pub use error::ErrorCode;
pub use event::{Event, EventKind, content_text};
pub use ids::{ConnectionId, Epoch, Seq, SessionId, TurnId};
pub use rpc::{TetherRpcClient, TetherRpcServer};
pub use types::*;
pub use vocab::*;

/// The protocol version spoken by this build; `initialize` reports it.
pub const PROTOCOL_VERSION: u32 = 1;

/// Largest JSON-RPC message, in bytes, either way.
pub const MAX_MESSAGE_BYTES: u32 = 16 * 1024 * 1024;

/// Re-exported so clients use the exact jsonrpsee version the trait was generated with.
pub use jsonrpsee;
