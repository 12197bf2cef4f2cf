//! The JSON-RPC trait: every method of the protocol with its explicit slash-separated name.
//! Params are by-name objects (`param_kind = map`) with camelCase keys.

use crate::event::Event;
use crate::ids::SessionId;
use crate::types::*;
use jsonrpsee::core::{RpcResult, SubscriptionResult};
use jsonrpsee::proc_macros::rpc;

/// The tether daemon's API. `TetherRpcServer` is implemented by `tetherd`; `TetherRpcClient` is
/// the typed client the terminal uses.
#[rpc(server, client)]
pub trait TetherRpc {
    /// Says who the client is; optional (a connection without it is kind `script`).
    #[method(name = "initialize", param_kind = map, with_extensions)]
    async fn initialize(
        &self,
        #[argument(rename = "protocolVersion")] protocol_version: u32,
        #[argument(rename = "clientInfo")] client_info: Option<ClientInfo>,
        capabilities: Option<Capabilities>,
    ) -> RpcResult<InitializeResult>;

    /// Health and counts.
    #[method(name = "daemon/status", param_kind = map)]
    async fn daemon_status(&self) -> RpcResult<DaemonStatus>;

    /// The daemon's effective configuration and where each value came from.
    #[method(name = "daemon/config", param_kind = map)]
    async fn daemon_config(&self) -> RpcResult<ConfigReport>;

    /// Health checks (data directory, credentials, config, git; the API with `online`).
    #[method(name = "daemon/doctor", param_kind = map)]
    async fn daemon_doctor(&self, online: Option<bool>) -> RpcResult<Vec<Check>>;

    /// The models this daemon knows (built-in catalog, the API's list, config.toml prices) and
    /// the aliases.
    #[method(name = "models/list", param_kind = map)]
    async fn models_list(&self) -> RpcResult<ModelList>;

    /// Drains and stops the daemon after answering.
    #[method(name = "daemon/shutdown", param_kind = map)]
    async fn daemon_shutdown(&self) -> RpcResult<ShutdownResult>;

    /// Creates a session; `sessionId` (a UUID nobody uses yet) picks its id, as claude's
    /// `--session-id` does.
    #[method(name = "session/new", param_kind = map, with_extensions)]
    async fn session_new(
        &self,
        cwd: String,
        title: Option<String>,
        model: Option<String>,
        #[argument(rename = "permissionMode")] permission_mode: Option<PermissionMode>,
        #[argument(rename = "sessionId")] session_id: Option<SessionId>,
    ) -> RpcResult<SessionNewResult>;

    /// Lists sessions, most recently active first: `cwd` and `status` filter, `limit` sizes a
    /// page and `cursor` (a previous page's `nextCursor`) continues after it. `query` keeps
    /// the sessions whose id starts with it or whose title or conversation (prompts and
    /// replies) holds it, whatever the case, each with `found`, the words around it; a search
    /// has no next page.
    #[method(name = "session/list", param_kind = map, with_extensions)]
    async fn session_list(
        &self,
        cwd: Option<String>,
        status: Option<SessionStatus>,
        limit: Option<usize>,
        cursor: Option<String>,
        query: Option<String>,
    ) -> RpcResult<SessionList>;

    /// A session's full snapshot.
    #[method(name = "session/get", param_kind = map)]
    async fn session_get(
        &self,
        #[argument(rename = "sessionId")] session_id: SessionId,
    ) -> RpcResult<SessionSnapshot>;

    /// Changes a session's title, model, permission mode, no-controller policy or budget
    /// (`budgetUsd`, in USD; `0` removes the cap).
    #[method(name = "session/configure", param_kind = map, with_extensions)]
    async fn session_configure(
        &self,
        #[argument(rename = "sessionId")] session_id: SessionId,
        title: Option<String>,
        model: Option<String>,
        #[argument(rename = "permissionMode")] permission_mode: Option<PermissionMode>,
        #[argument(rename = "onNoController")] on_no_controller: Option<NoControllerPolicy>,
        #[argument(rename = "budgetUsd")] budget_usd: Option<f64>,
    ) -> RpcResult<SessionSummary>;

    /// Deletes a session and its log.
    #[method(name = "session/delete", param_kind = map, with_extensions)]
    async fn session_delete(
        &self,
        #[argument(rename = "sessionId")] session_id: SessionId,
    ) -> RpcResult<SessionDeleted>;

    /// Forks a session at a seq.
    #[method(name = "session/fork", param_kind = map, with_extensions)]
    async fn session_fork(
        &self,
        #[argument(rename = "sessionId")] session_id: SessionId,
        #[argument(rename = "atSeq")] at_seq: Option<u64>,
    ) -> RpcResult<SessionNewResult>;

    /// Compacts a session's history now (runs as a turn, queued behind a running one).
    #[method(name = "session/compact", param_kind = map, with_extensions)]
    async fn session_compact(
        &self,
        #[argument(rename = "sessionId")] session_id: SessionId,
        instructions: Option<String>,
    ) -> RpcResult<TurnStarted>;

    /// Exports a session as markdown or JSONL.
    #[method(name = "session/export", param_kind = map)]
    async fn session_export(
        &self,
        #[argument(rename = "sessionId")] session_id: SessionId,
        format: Option<crate::vocab::ExportFormat>,
    ) -> RpcResult<SessionExport>;

    /// The turns a session can be rewound to, oldest first: those still in its conversation.
    #[method(name = "session/checkpoints", param_kind = map)]
    async fn session_checkpoints(
        &self,
        #[argument(rename = "sessionId")] session_id: SessionId,
    ) -> RpcResult<Vec<Checkpoint>>;

    /// Rewinds a session to just before turn `toTurn`: its files as tether's snapshots
    /// recorded them, its conversation, or both (`restore`, default both). A file edited
    /// outside tether since the last snapshot is kept as it is unless `overwrite`. Refused
    /// while a turn runs. Logs a `rewound` event; nothing is deleted from the log.
    #[method(name = "session/rewind", param_kind = map, with_extensions)]
    async fn session_rewind(
        &self,
        #[argument(rename = "sessionId")] session_id: SessionId,
        #[argument(rename = "toTurn")] to_turn: u64,
        restore: Option<RewindScope>,
        overwrite: Option<bool>,
    ) -> RpcResult<RewindResult>;

    /// Starts a turn; its progress arrives as events.
    #[method(name = "turn/start", param_kind = map, with_extensions)]
    async fn turn_start(
        &self,
        #[argument(rename = "sessionId")] session_id: SessionId,
        input: Vec<InputItem>,
        #[argument(rename = "clientTurnId")] client_turn_id: Option<String>,
        mode: Option<BusyMode>,
        options: Option<TurnOptions>,
    ) -> RpcResult<TurnStarted>;

    /// Interrupts the running turn (idempotent).
    #[method(name = "turn/cancel", param_kind = map, with_extensions)]
    async fn turn_cancel(
        &self,
        #[argument(rename = "sessionId")] session_id: SessionId,
    ) -> RpcResult<TurnCancelled>;

    /// Answers a permission request; the first answer wins. An allowing answer may carry
    /// `updatedInput`, the input the call runs with instead (checked like the model's): how a
    /// controller answers an `AskUserQuestion` call (its `answers`), as in Claude Code.
    /// `afterHooks`: the answer yields to the request's PermissionRequest hooks (a script's
    /// automatic answer, as Claude Code runs those hooks before it asks): while they run it is
    /// held (status `held`), and applied once they have run without deciding.
    #[method(name = "permission/respond", param_kind = map, with_extensions)]
    async fn permission_respond(
        &self,
        #[argument(rename = "sessionId")] session_id: SessionId,
        #[argument(rename = "requestId")] request_id: String,
        decision: PermissionDecision,
        message: Option<String>,
        #[argument(rename = "updatedInput")] updated_input: Option<serde_json::Value>,
        #[argument(rename = "afterHooks")] after_hooks: Option<bool>,
    ) -> RpcResult<PermissionResponse>;

    /// Answers a permission request with an approval token (from a PermissionRequest or
    /// Notification hook's input): `decision` (default `allow_once`) must be one the token
    /// allows. The answer is attributed to kind `link`; the first answer wins as always, and a
    /// token whose request is answered already, or that is forged, expired or does not allow
    /// the decision, is refused with the reason.
    #[method(name = "permission/approve", param_kind = map, with_extensions)]
    async fn permission_approve(
        &self,
        token: String,
        decision: Option<PermissionDecision>,
        message: Option<String>,
    ) -> RpcResult<PermissionResponse>;

    /// Answers a `hook_callback` event: the callback's output (a hook's JSON output), or why
    /// it failed. `true` when the hook was still waiting for it. Observers may not answer.
    #[method(name = "hook/respond", param_kind = map, with_extensions)]
    async fn hook_respond(
        &self,
        #[argument(rename = "sessionId")] session_id: SessionId,
        #[argument(rename = "requestId")] request_id: String,
        output: Option<serde_json::Value>,
        error: Option<String>,
    ) -> RpcResult<bool>;

    /// Answers an `mcp_message` event: the in-process server's JSON-RPC answer, or why there
    /// is none. `true` when the turn was still waiting for it. Observers may not answer.
    #[method(name = "mcp/respond", param_kind = map, with_extensions)]
    async fn mcp_respond(
        &self,
        #[argument(rename = "sessionId")] session_id: SessionId,
        #[argument(rename = "requestId")] request_id: String,
        message: Option<serde_json::Value>,
        error: Option<String>,
    ) -> RpcResult<bool>;

    /// A session's pending permission requests (the `permission_requested` data of each).
    #[method(name = "permission/list", param_kind = map)]
    async fn permission_list(
        &self,
        #[argument(rename = "sessionId")] session_id: SessionId,
    ) -> RpcResult<Vec<serde_json::Value>>;

    /// The slash commands the daemon runs for a session: built-in, then the project's and the
    /// user's custom commands.
    #[method(name = "session/commands", param_kind = map)]
    async fn session_commands(
        &self,
        #[argument(rename = "sessionId")] session_id: SessionId,
    ) -> RpcResult<Vec<CommandInfo>>;

    /// Every key of the Claude Code settings files that apply in `cwd`, and whether tether
    /// uses it.
    #[method(name = "settings/list", param_kind = map)]
    async fn settings_list(&self, cwd: String) -> RpcResult<Vec<SettingsKey>>;

    /// Whether `cwd`'s own files may act, and what they would do; `trust` true records that
    /// they may (false that they may not) first.
    #[method(name = "workspace/trust", param_kind = map)]
    async fn workspace_trust(&self, cwd: String, trust: Option<bool>) -> RpcResult<WorkspaceTrust>;

    /// The MCP servers a session in `cwd` gets: each with its scope and state, and what
    /// could not be read.
    #[method(name = "mcp/list", param_kind = map)]
    async fn mcp_list(&self, cwd: String) -> RpcResult<McpList>;

    /// Changes the MCP configuration of `cwd` (add, remove, approve), in the files Claude
    /// Code keeps it in.
    #[method(name = "mcp/configure", param_kind = map)]
    async fn mcp_configure(&self, cwd: String, change: McpChange) -> RpcResult<McpChanged>;

    /// Stops the server `name` of `cwd` and starts it again.
    #[method(name = "mcp/reconnect", param_kind = map)]
    async fn mcp_reconnect(&self, cwd: String, name: String) -> RpcResult<McpList>;

    /// The permission mode and rules in effect for a session, each rule with its source.
    #[method(name = "permission/rules", param_kind = map)]
    async fn permission_rules(
        &self,
        #[argument(rename = "sessionId")] session_id: SessionId,
    ) -> RpcResult<PermissionRules>;

    /// Gives `principal` (a Unix user name, or the name a bridge gives) a role in the session,
    /// or changes it: `controller`, `approver` or `observer`. Owner only; logged as
    /// `session_shared`.
    #[method(name = "session/share", param_kind = map, with_extensions)]
    async fn session_share(
        &self,
        #[argument(rename = "sessionId")] session_id: SessionId,
        principal: String,
        role: crate::vocab::SessionRole,
    ) -> RpcResult<Shares>;

    /// Takes `principal`'s role in the session away; their subscriptions end. Owner only;
    /// logged as `session_unshared`.
    #[method(name = "session/unshare", param_kind = map, with_extensions)]
    async fn session_unshare(
        &self,
        #[argument(rename = "sessionId")] session_id: SessionId,
        principal: String,
    ) -> RpcResult<Shares>;

    /// Who has a role in the session.
    #[method(name = "session/shares", param_kind = map)]
    async fn session_shares(
        &self,
        #[argument(rename = "sessionId")] session_id: SessionId,
    ) -> RpcResult<Shares>;

    /// Every permission decision of one session (or of all), read from the log: the tool, a
    /// hash of its input, the decision, what made it (a rule with its file and line, the
    /// mode, a hook, the sandbox, or a person with their principal and channel), and the
    /// seq. `since` (RFC 3339) leaves out older ones. Owner only.
    #[method(name = "session/audit", param_kind = map, with_extensions)]
    async fn session_audit(
        &self,
        #[argument(rename = "sessionId")] session_id: Option<SessionId>,
        since: Option<String>,
    ) -> RpcResult<Audit>;

    /// Replays a session's events after `since`, then `replay_complete`, then live events, as
    /// `session/event` notifications.
    #[subscription(
        name = "session/subscribe" => "session/event",
        unsubscribe = "session/unsubscribe",
        item = Event,
        param_kind = map,
        with_extensions
    )]
    async fn session_subscribe(
        &self,
        #[argument(rename = "sessionId")] session_id: SessionId,
        role: Option<Role>,
        since: Option<Since>,
    ) -> SubscriptionResult;
}
