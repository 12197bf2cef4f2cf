//! Live sessions: the registry that loads them on demand (`registry.rs`) and the per-session
//! actor that owns each one (`actor.rs` and its parts: `journal`, `ledger`, `presence`, `broker`,
//! `turns`, `commands`, `configure`, `recovery`); `export` and `retention` read and prune logs.
//!
//! Invariant: everything that changes a session goes through its actor (one writer, no locks on
//! session state), and an event is durable in the store before any subscriber sees it.

mod actor;
pub mod audit;
mod broker;
mod commands;
mod configure;
mod export;
mod journal;
mod launch;
mod ledger;
mod presence;
mod recovery;
mod registry;
mod retention;
mod rewind;
mod sandboxing;
mod search;
mod travel;
mod turns;

pub use actor::SessionHandle;
pub use journal::{Attachment, LiveEvent};
pub use registry::{Sessions, SharedSessions};
pub use turns::TurnRequest;

use crate::store::{SessionRecord, StoreError};
use std::sync::Arc;
use tether_proto::{PermissionMode, SessionId, SessionStatus, SessionSummary};

/// Errors of session operations.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// No session has this id.
    #[error("no session with id {0}")]
    NotFound(SessionId),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The store failed while committing (the message of the underlying error).
    #[error("could not persist session events: {0}")]
    Commit(String),
    /// An earlier write failed (e.g. the disk is full): the session is read-only until the
    /// daemon restarts.
    #[error(
        "this session is read-only: saving its events failed ({0}); free disk space (in a cluster: bring NATS back) and restart tetherd"
    )]
    StorageFailed(String),
    /// The session's actor has stopped (the daemon is shutting down).
    #[error("session {0} is shutting down")]
    Stopped(SessionId),
    /// A turn is running and the request asked not to queue.
    #[error("a turn is already running in this session (use mode \"queue\" to run after it)")]
    Busy,
    /// This node could not rebuild the session's working tree, with why.
    #[error("cannot run the session on this node: {0}")]
    Workspace(String),
    /// A rewind was asked for that cannot be done, with why.
    #[error("cannot rewind: {0}")]
    CannotRewind(String),
    /// An observer tried to act.
    #[error("this client is attached as an observer and cannot act on the session")]
    NotController,
    /// Someone the session is not shared with (any more) asked to follow it.
    #[error("{0} has no role in this session (any more)")]
    NotPermitted(String),
    /// `session/unshare` named someone without a role.
    #[error("{0} has no role in this session")]
    NotShared(String),
    /// No permission request has this id.
    #[error("no permission request with id {0} in this session")]
    RequestNotFound(String),
    /// A new session asked for an id another session has.
    #[error("session id {0} is already in use")]
    AlreadyExists(SessionId),
    /// The session reached its budget: prompts wait until it is raised.
    #[error(
        "this session reached its budget of ${budget:.2} (${spent:.4} spent); raise it with /budget AMOUNT, `tether budget ID AMOUNT` or session/configure budgetUsd"
    )]
    BudgetReached {
        /// The cap.
        budget: f64,
        /// What was spent.
        spent: f64,
    },
}

/// The current time as RFC 3339 UTC with milliseconds.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// A summary built from a record.
pub fn summary_of(
    record: &SessionRecord,
    head_seq: tether_proto::Seq,
    attached: Vec<tether_proto::AttachedClient>,
) -> SessionSummary {
    SessionSummary {
        session_id: record.id.clone(),
        title: record.title.clone(),
        cwd: record.cwd.clone(),
        model: record.model.clone(),
        permission_mode: record.permission_mode,
        on_no_controller: record.on_no_controller,
        status: record.status,
        created_at: record.created_at.clone(),
        updated_at: record.updated_at.clone(),
        head_seq,
        pruned_through: record.pruned_through,
        attached_clients: attached,
        shares: record.shares.clone(),
        found: None,
    }
}

/// What turns need from the daemon: the model client, model facts, tools, limits.
pub struct TurnEnv {
    /// The model client, or why there is none.
    pub llm: Result<Arc<crate::llm::AnthropicClient>, String>,
    /// Aliases and prices.
    pub catalog: crate::llm::ModelCatalog,
    /// The built-in tools.
    pub tools: crate::tools::Tools,
    /// The MCP servers, shared by every session.
    pub mcp: Arc<crate::mcp::McpServers>,
    /// Turn limits.
    pub limits: crate::agent::TurnLimits,
    /// The daemon's data directory (project memory lives under it).
    pub data_dir: std::path::PathBuf,
    /// Web pages, for WebFetch.
    pub web: Arc<crate::llm::WebFetcher>,
    /// The small fast model (`ANTHROPIC_SMALL_FAST_MODEL`, default haiku).
    pub fast_model: String,
    /// How long an idle session (no subscriber, turn, request or background job) stays in
    /// memory; `None` keeps sessions loaded.
    pub idle_unload: Option<std::time::Duration>,
    /// How long the deltas of a finished turn are kept; `None` keeps them forever.
    pub delta_retention: Option<std::time::Duration>,
    /// The permission mode of new sessions.
    pub permission_mode: PermissionMode,
    /// The budget of new sessions (USD), if they have one (`budget_usd`).
    pub budget_usd: Option<f64>,
    /// What all sessions spent today, against the daily cap (`daily_budget_usd`), if any.
    pub daily: Option<Arc<crate::agent::Daily>>,
    /// Mints the approval tokens hooks get.
    pub approvals: Arc<crate::approvals::Approvals>,
    /// Where the approval page answers (`<base>/a/<token>`), when it is served
    /// (`approvals.listen`) or reached through another address (`approvals.url`).
    pub approval_links: Option<String>,
    /// Whether turn spans carry the prompt text (`OTEL_LOG_USER_PROMPTS`).
    pub log_user_prompts: bool,
    /// Thinking, effort, context editing and betas from the configuration.
    pub policy: crate::llm::RequestPolicy,
    /// The stable prefix's cache lifetime (`cache_ttl`); `None` (`auto`): an hour for turns a
    /// person started, 5 minutes for scripts.
    pub cache_ttl: Option<crate::llm::CacheTtl>,
    /// config.toml's `[hooks]` table (as JSON, in the settings files' shape) and the file's
    /// name, handed to every hook load.
    pub config_hooks: Option<(serde_json::Value, String)>,
    /// How sessions record their working tree (`[snapshots]`); `None`: they do not.
    pub snapshots: Option<Arc<crate::snapshots::Policy>>,
    /// In a cluster, this node's directory for working trees it rebuilds
    /// (`cluster.workspaces`).
    pub workspaces: Option<std::path::PathBuf>,
}

/// What a new session starts with.
#[derive(Debug, Clone, Default)]
pub struct NewSession {
    /// Working directory (absolute).
    pub cwd: String,
    /// Title.
    pub title: Option<String>,
    /// Model alias or id.
    pub model: Option<String>,
    /// Permission mode.
    pub permission_mode: Option<PermissionMode>,
    /// Its id, when the caller picks one (`--session-id`).
    pub id: Option<SessionId>,
}

/// Which sessions `session/list` returns.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only those created in this directory.
    pub cwd: Option<String>,
    /// Only those in this state.
    pub status: Option<SessionStatus>,
    /// At most this many.
    pub limit: Option<usize>,
    /// After this position (a previous page's `nextCursor`).
    pub cursor: Option<String>,
    /// Only those shared with this principal (someone other than the owner asks).
    pub shared_with: Option<String>,
    /// Only those whose id, title or conversation holds this (any case).
    pub query: Option<String>,
}

/// A controller's answer to a permission request.
#[derive(Debug, Clone)]
pub struct Answer {
    /// Allow (once, for the session, always) or deny.
    pub decision: tether_proto::PermissionDecision,
    /// For a deny: what the model should do instead.
    pub message: Option<String>,
    /// For an allow: the input the call runs with instead (an `AskUserQuestion`'s answers).
    pub updated_input: Option<serde_json::Value>,
}

/// A change of settings; `None` leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct Configure {
    /// New title.
    pub title: Option<String>,
    /// New model.
    pub model: Option<String>,
    /// New permission mode.
    pub permission_mode: Option<PermissionMode>,
    /// New policy for requests while no controller is attached.
    pub on_no_controller: Option<tether_proto::NoControllerPolicy>,
    /// New budget in USD (`0`: no cap).
    pub budget_usd: Option<f64>,
}
