//! The JSON-RPC methods: `TetherRpcServer` implemented over the session registry.
//!
//! Invariant: translation only. Each method checks its input, calls the session layer and maps
//! its errors to protocol error codes; no session state lives here.

use super::attach::{self, Subscriber};
use super::connections::Connections;
use crate::session::{Configure, ListFilter, NewSession, SessionError, Sessions, TurnRequest};
use crate::store::StoreError;
use jsonrpsee::Extensions;
use jsonrpsee::core::{RpcResult, SubscriptionResult};
use jsonrpsee::server::PendingSubscriptionSink;
use jsonrpsee::types::ErrorObjectOwned;
use jsonrpsee::types::error::INVALID_PARAMS_CODE;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use tether_proto::*;
use tokio_util::sync::CancellationToken;

/// The state the methods work on.
pub struct RpcApi {
    /// Every session.
    pub sessions: Arc<Sessions>,
    /// Every connection.
    pub connections: Arc<Connections>,
    /// When the daemon started.
    pub started: Instant,
    /// The socket it serves.
    pub socket: PathBuf,
    /// Its data directory.
    pub data_dir: PathBuf,
    /// Cancelled when the daemon starts draining.
    pub shutdown: CancellationToken,
    /// The effective configuration.
    pub config: Arc<crate::config::Config>,
    /// The socket other local users reach the daemon by, once a session is shared with one.
    pub shared: Arc<super::SharedSocket>,
}

fn invalid_params(message: impl Into<String>) -> ErrorObjectOwned {
    ErrorObjectOwned::owned::<()>(INVALID_PARAMS_CODE, message.into(), None)
}

fn rpc_error(e: SessionError) -> ErrorObjectOwned {
    // The node that runs the session, for the call to be passed on to it (`forward.rs`).
    if let SessionError::Store(StoreError::OwnedElsewhere { node, .. }) = &e {
        return ErrorObjectOwned::owned(
            ErrorCode::SessionElsewhere.code(),
            e.to_string(),
            Some(serde_json::json!({ "node": node })),
        );
    }
    let code = match &e {
        SessionError::NotFound(_) => ErrorCode::SessionNotFound,
        SessionError::Store(
            StoreError::OwnedElsewhere { .. } | StoreError::CwdUnreachable { .. },
        ) => ErrorCode::SessionElsewhere,
        SessionError::Store(_)
        | SessionError::Commit(_)
        | SessionError::StorageFailed(_)
        | SessionError::Workspace(_) => ErrorCode::Storage,
        SessionError::Stopped(_) => ErrorCode::DaemonShuttingDown,
        SessionError::Busy => ErrorCode::SessionBusy,
        SessionError::NotController => ErrorCode::NotController,
        SessionError::NotPermitted(_) => ErrorCode::NotPermitted,
        SessionError::RequestNotFound(_) => ErrorCode::RequestNotFound,
        SessionError::BudgetReached { .. } => ErrorCode::BudgetReached,
        SessionError::AlreadyExists(_)
        | SessionError::CannotRewind(_)
        | SessionError::NotShared(_) => {
            return ErrorObjectOwned::owned::<()>(INVALID_PARAMS_CODE, e.to_string(), None);
        }
    };
    code.with_message(e.to_string())
}

/// `tui`, `script` …: how a client kind is named on the wire.
fn render_kind(client: &ClientRef) -> String {
    serde_json::to_value(client.kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn connection_id(ext: &Extensions) -> ConnectionId {
    ConnectionId(
        ext.get::<jsonrpsee::ConnectionId>()
            .map(|c| c.0 as u64)
            .unwrap_or(0),
    )
}

fn non_empty(field: &str, value: Option<String>) -> Result<Option<String>, ErrorObjectOwned> {
    match value.map(|v| v.trim().to_owned()) {
        Some(v) if v.is_empty() => Err(invalid_params(format!("{field} must not be empty"))),
        other => Ok(other),
    }
}

impl RpcApi {
    /// A model name that can be sent (an alias or an id); a typo is refused with the aliases.
    fn checked_model(&self, model: Option<String>) -> Result<Option<String>, ErrorObjectOwned> {
        let model = non_empty("model", model)?;
        if let Some(m) = &model {
            self.sessions
                .env()
                .catalog
                .check(m)
                .map_err(|e| invalid_params(e.to_string()))?;
        }
        Ok(model)
    }

    fn check_running(&self) -> Result<(), ErrorObjectOwned> {
        if self.shutdown.is_cancelled() {
            return Err(ErrorCode::DaemonShuttingDown.with_message("tetherd is shutting down"));
        }
        Ok(())
    }

    fn by(&self, ext: &Extensions) -> Option<ClientRef> {
        Some(self.client(ext))
    }

    /// `hook/respond` and `mcp/respond`: answers what the session asked its SDK program (each
    /// method its own kind of request).
    async fn answer_asked(
        &self,
        ext: &Extensions,
        session_id: SessionId,
        request_id: String,
        kind: Asked,
        answer: Result<serde_json::Value, String>,
    ) -> RpcResult<bool> {
        let (prefix, what, other) = match kind {
            Asked::Hook => (
                "hook_",
                "a hook_callback's",
                "an mcp_message with mcp/respond",
            ),
            Asked::Mcp => (
                "mcp_",
                "an mcp_message's",
                "a hook_callback with hook/respond",
            ),
        };
        if !request_id.starts_with(prefix) {
            return Err(invalid_params(format!(
                "{request_id} is not {what} request (answer {other})"
            )));
        }
        let handle = self.sessions.get(&session_id).await.map_err(rpc_error)?;
        handle
            .hook_respond(request_id, answer, self.client(ext))
            .await
            .map_err(rpc_error)?
            .map_err(rpc_error)
    }

    /// Who is at the connection that made a call (for a call another node passed on, who
    /// was at that node's connection).
    fn peer(&self, ext: &Extensions) -> super::Peer {
        match ext.get::<super::Peer>() {
            Some(peer) => peer.clone(),
            None => self.connections.peer(connection_id(ext)),
        }
    }

    /// A principal a session can be shared with: named, and not the owner (who has every
    /// role already).
    fn sharable(&self, principal: String) -> Result<String, ErrorObjectOwned> {
        let principal = principal.trim().to_owned();
        if principal.is_empty() {
            return Err(invalid_params("principal must not be empty"));
        }
        if principal == self.connections.owner() {
            return Err(invalid_params(format!(
                "{principal} owns every session of this daemon already"
            )));
        }
        Ok(principal)
    }

    fn shares(&self, shares: Vec<Share>) -> Shares {
        Shares {
            owner: self.connections.owner().to_owned(),
            shares,
        }
    }

    /// Who made a call: this connection's client, or the client of another node that passed
    /// the call on.
    fn client(&self, ext: &Extensions) -> ClientRef {
        match ext.get::<super::forward::PassedOnBy>() {
            Some(by) => by.0.clone(),
            None => self.connections.client_ref(connection_id(ext)),
        }
    }
}

/// What the session asked its SDK program, which `answer_asked` answers.
enum Asked {
    Hook,
    Mcp,
}

#[jsonrpsee::core::async_trait]
impl TetherRpcServer for RpcApi {
    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "initialize"))]
    async fn initialize(
        &self,
        ext: &Extensions,
        protocol_version: u32,
        client_info: Option<ClientInfo>,
        capabilities: Option<Capabilities>,
    ) -> RpcResult<InitializeResult> {
        if protocol_version != PROTOCOL_VERSION {
            return Err(invalid_params(format!(
                "protocolVersion {protocol_version} is not supported; this tetherd speaks {PROTOCOL_VERSION}"
            )));
        }
        if client_info
            .as_ref()
            .is_some_and(|c| matches!(c.kind, ClientKind::Link | ClientKind::Other))
        {
            return Err(invalid_params(
                "clientInfo.kind must be tui, editor, script or bridge (link is the daemon's, for answers given with approval tokens)",
            ));
        }
        let id = connection_id(ext);
        self.connections
            .initialize(id, client_info, capabilities.unwrap_or_default());
        Ok(InitializeResult {
            protocol_version: PROTOCOL_VERSION,
            daemon: daemon_info(),
            epoch: self.sessions.epoch(),
            connection_id: id,
        })
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "daemon/status"))]
    async fn daemon_status(&self) -> RpcResult<DaemonStatus> {
        let (sessions, loaded) = self.sessions.counts();
        Ok(DaemonStatus {
            daemon: daemon_info(),
            epoch: self.sessions.epoch(),
            uptime_ms: self.started.elapsed().as_millis() as u64,
            socket: self.socket.display().to_string(),
            data_dir: self.data_dir.display().to_string(),
            sessions,
            loaded_sessions: loaded,
            connections: self.connections.count(),
            subscriptions: self.connections.subscription_count(),
            shutting_down: self.shutdown.is_cancelled(),
            tools: self
                .sessions
                .env()
                .tools
                .names()
                .into_iter()
                .map(str::to_owned)
                .collect(),
            cluster: self.sessions.store().cluster_status().await.map(|c| {
                tether_proto::ClusterInfo {
                    node: c.node,
                    servers: c.urls,
                    connected: c.connected,
                    nodes: c.nodes,
                    held: c
                        .held
                        .into_iter()
                        .map(|(session_id, age)| tether_proto::HeldSession {
                            session_id,
                            lease_age_ms: age.as_millis() as u64,
                        })
                        .collect(),
                }
            }),
        })
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "daemon/config"))]
    async fn daemon_config(&self) -> RpcResult<ConfigReport> {
        Ok(ConfigReport {
            file: self.config.file.as_ref().map(|f| f.display().to_string()),
            entries: self.config.entries(),
        })
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "daemon/doctor"))]
    async fn daemon_doctor(&self, online: Option<bool>) -> RpcResult<Vec<Check>> {
        let env = self.sessions.env();
        let llm = env.llm.as_deref().map_err(String::as_str);
        Ok(crate::doctor::checks(&self.config, &self.data_dir, llm, online.unwrap_or(false)).await)
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "models/list"))]
    async fn models_list(&self) -> RpcResult<tether_proto::ModelList> {
        let env = self.sessions.env();
        let catalog = &env.catalog;
        let models = catalog.list().into_iter().map(Into::into).collect();
        Ok(tether_proto::ModelList {
            default_model: catalog.default_model().to_owned(),
            aliases: catalog
                .aliases()
                .into_iter()
                .map(|(alias, model)| tether_proto::ModelAlias {
                    alias: alias.to_owned(),
                    model,
                })
                .collect(),
            models,
        })
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "daemon/shutdown"))]
    async fn daemon_shutdown(&self) -> RpcResult<ShutdownResult> {
        tracing::info!("shutdown requested over RPC");
        self.shutdown.cancel();
        Ok(ShutdownResult { stopping: true })
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "session/new"))]
    async fn session_new(
        &self,
        ext: &Extensions,
        cwd: String,
        title: Option<String>,
        model: Option<String>,
        permission_mode: Option<PermissionMode>,
        session_id: Option<SessionId>,
    ) -> RpcResult<SessionNewResult> {
        self.check_running()?;
        if let Some(id) = &session_id
            && uuid::Uuid::parse_str(&id.0).is_err()
        {
            return Err(invalid_params(format!(
                "sessionId must be a UUID, got {:?}",
                id.0
            )));
        }
        absolute_dir(&cwd)?;
        let new = NewSession {
            cwd,
            title: non_empty("title", title)?,
            model: self.checked_model(model)?,
            permission_mode,
            id: session_id,
        };
        let session_id = self
            .sessions
            .create(new, self.by(ext))
            .await
            .map_err(rpc_error)?;
        Ok(SessionNewResult { session_id })
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "session/list"))]
    async fn session_list(
        &self,
        ext: &Extensions,
        cwd: Option<String>,
        status: Option<SessionStatus>,
        limit: Option<usize>,
        cursor: Option<String>,
        query: Option<String>,
    ) -> RpcResult<SessionList> {
        // Someone else sees the sessions shared with them, and nothing of the others.
        let peer = self.peer(ext);
        let filter = ListFilter {
            cwd,
            status,
            limit,
            cursor,
            shared_with: (!peer.owner).then_some(peer.principal),
            query,
        };
        self.sessions.list(&filter).await.map_err(rpc_error)
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "session/get"))]
    async fn session_get(&self, session_id: SessionId) -> RpcResult<SessionSnapshot> {
        let handle = self.sessions.get(&session_id).await.map_err(rpc_error)?;
        handle.snapshot().await.map_err(rpc_error)
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "session/configure"))]
    async fn session_configure(
        &self,
        ext: &Extensions,
        session_id: SessionId,
        title: Option<String>,
        model: Option<String>,
        permission_mode: Option<PermissionMode>,
        on_no_controller: Option<NoControllerPolicy>,
        budget_usd: Option<f64>,
    ) -> RpcResult<SessionSummary> {
        self.check_running()?;
        if budget_usd.is_some_and(|b| !b.is_finite() || b < 0.0) {
            return Err(invalid_params(
                "budgetUsd must be a number of dollars, 0 or more (0 removes the cap)",
            ));
        }
        let change = Configure {
            title: non_empty("title", title)?,
            model: self.checked_model(model)?,
            permission_mode,
            on_no_controller,
            budget_usd,
        };
        let handle = self.sessions.get(&session_id).await.map_err(rpc_error)?;
        handle
            .configure(change, self.by(ext))
            .await
            .map_err(rpc_error)
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "session/delete"))]
    async fn session_delete(
        &self,
        ext: &Extensions,
        session_id: SessionId,
    ) -> RpcResult<SessionDeleted> {
        self.check_running()?;
        self.sessions
            .delete(&session_id, self.by(ext))
            .await
            .map_err(rpc_error)?;
        Ok(SessionDeleted { session_id })
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "session/fork"))]
    async fn session_fork(
        &self,
        _ext: &Extensions,
        session_id: SessionId,
        at_seq: Option<u64>,
    ) -> RpcResult<SessionNewResult> {
        self.check_running()?;
        let session_id = self
            .sessions
            .fork(&session_id, at_seq)
            .await
            .map_err(rpc_error)?;
        Ok(SessionNewResult { session_id })
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "session/compact"))]
    async fn session_compact(
        &self,
        ext: &Extensions,
        session_id: SessionId,
        instructions: Option<String>,
    ) -> RpcResult<TurnStarted> {
        self.check_running()?;
        let handle = self.sessions.get(&session_id).await.map_err(rpc_error)?;
        let by = self.client(ext);
        let instructions = instructions.filter(|i| !i.trim().is_empty());
        // The turn's logged input reads as the command a terminal would have typed.
        let text = match &instructions {
            Some(i) => format!("/compact {i}"),
            None => "/compact".to_owned(),
        };
        handle
            .start_turn(TurnRequest {
                input: vec![InputItem::Text { text }],
                client_turn_id: None,
                mode: BusyMode::Queue,
                options: TurnOptions::default(),
                by,
                command: Some(crate::agent::SlashCommand::Compact(instructions)),
            })
            .await
            .map_err(rpc_error)
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "session/share"))]
    async fn session_share(
        &self,
        ext: &Extensions,
        session_id: SessionId,
        principal: String,
        role: SessionRole,
    ) -> RpcResult<Shares> {
        let principal = self.sharable(principal)?;
        if !matches!(
            role,
            SessionRole::Controller | SessionRole::Approver | SessionRole::Observer
        ) {
            return Err(invalid_params(format!(
                "role must be controller, approver or observer, not {role}"
            )));
        }
        let handle = self.sessions.get(&session_id).await.map_err(rpc_error)?;
        // A local user reaches the daemon by the shared socket, opened at the first share:
        // a role they could not use is not given.
        if super::is_local_user(&principal) {
            self.shared.open().map_err(|e| {
                ErrorCode::Storage.with_message(format!("{principal} was not given a role: {e}"))
            })?;
        }
        let shares = handle
            .share(principal, Some(role), self.by(ext))
            .await
            .map_err(rpc_error)?;
        Ok(self.shares(shares))
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "session/unshare"))]
    async fn session_unshare(
        &self,
        ext: &Extensions,
        session_id: SessionId,
        principal: String,
    ) -> RpcResult<Shares> {
        let principal = self.sharable(principal)?;
        let handle = self.sessions.get(&session_id).await.map_err(rpc_error)?;
        let shares = handle
            .share(principal, None, self.by(ext))
            .await
            .map_err(rpc_error)?;
        Ok(self.shares(shares))
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "session/shares"))]
    async fn session_shares(&self, session_id: SessionId) -> RpcResult<Shares> {
        let handle = self.sessions.get(&session_id).await.map_err(rpc_error)?;
        let summary = handle.summary().await.map_err(rpc_error)?;
        Ok(self.shares(summary.shares))
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "session/audit"))]
    async fn session_audit(
        &self,
        _ext: &Extensions,
        session_id: Option<SessionId>,
        since: Option<String>,
    ) -> RpcResult<Audit> {
        if let Some(since) = &since
            && humantime::parse_rfc3339_weak(since).is_err()
        {
            return Err(invalid_params(format!(
                "since must be an RFC 3339 time (2026-12-08T09:30:00Z), not {since:?}"
            )));
        }
        // Written with milliseconds, as event timestamps are, so the two compare as text.
        let since = since
            .and_then(|s| humantime::parse_rfc3339_weak(&s).ok())
            .map(|t| humantime::format_rfc3339_millis(t).to_string());
        let sessions = self.sessions.clone();
        let entries =
            tokio::task::spawn_blocking(move || sessions.audit(session_id.as_ref(), since))
                .await
                .map_err(|e| ErrorCode::Storage.with_message(format!("the audit failed: {e}")))?
                .map_err(rpc_error)?;
        Ok(Audit { entries })
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "session/checkpoints"))]
    async fn session_checkpoints(&self, session_id: SessionId) -> RpcResult<Vec<Checkpoint>> {
        let handle = self.sessions.get(&session_id).await.map_err(rpc_error)?;
        handle.checkpoints().await.map_err(rpc_error)
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "session/rewind"))]
    async fn session_rewind(
        &self,
        ext: &Extensions,
        session_id: SessionId,
        to_turn: u64,
        restore: Option<RewindScope>,
        overwrite: Option<bool>,
    ) -> RpcResult<RewindResult> {
        self.check_running()?;
        let handle = self.sessions.get(&session_id).await.map_err(rpc_error)?;
        let by = self.client(ext);
        handle
            .rewind(
                to_turn,
                restore.unwrap_or_default(),
                overwrite.unwrap_or(false),
                Some(by),
            )
            .await
            .map_err(rpc_error)
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "session/export"))]
    async fn session_export(
        &self,
        session_id: SessionId,
        format: Option<ExportFormat>,
    ) -> RpcResult<SessionExport> {
        let format = format.unwrap_or_default();
        let content = self
            .sessions
            .export(&session_id, format)
            .await
            .map_err(rpc_error)?;
        Ok(SessionExport { format, content })
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "turn/start"))]
    async fn turn_start(
        &self,
        ext: &Extensions,
        session_id: SessionId,
        input: Vec<InputItem>,
        client_turn_id: Option<String>,
        mode: Option<BusyMode>,
        options: Option<TurnOptions>,
    ) -> RpcResult<TurnStarted> {
        self.check_running()?;
        if input.is_empty() {
            return Err(invalid_params("input must hold at least one item"));
        }
        if input.contains(&InputItem::Unknown) {
            return Err(invalid_params(
                "input items are text, file, image or document; this daemon does not know another type",
            ));
        }
        let options = options.unwrap_or_default();
        let in_process = options
            .mcp_config
            .as_ref()
            .and_then(|m| m.as_object())
            .is_some_and(|m| m.values().any(|s| s["type"] == "sdk"));
        if (options.hook_callbacks.is_some() || in_process)
            && ext.get::<super::forward::PassedOnBy>().is_some()
        {
            return Err(invalid_params(
                "options.hookCallbacks and in-process MCP servers are asked of the client that started the turn, through the node that runs the session: connect to that node",
            ));
        }
        if options.max_turns == Some(0) {
            return Err(invalid_params("options.maxTurns must be at least 1"));
        }
        if let Some(tool) = &options.permission_prompt_tool
            && !tool.starts_with("mcp__")
        {
            return Err(invalid_params(format!(
                "options.permissionPromptTool must name an MCP tool (mcp__server__tool), not {tool:?}"
            )));
        }
        if let Some(schema) = &options.json_schema {
            if schema["type"] != "object" {
                return Err(invalid_params(
                    "options.jsonSchema must be the schema of an object (\"type\": \"object\")",
                ));
            }
            if let Err(e) = jsonschema::validator_for(schema) {
                return Err(invalid_params(format!(
                    "options.jsonSchema is not a valid JSON Schema: {e}"
                )));
            }
        }
        if let Some(bad) = options
            .add_dirs
            .iter()
            .find(|d| !std::path::Path::new(d).is_absolute() || !std::path::Path::new(d).is_dir())
        {
            return Err(invalid_params(format!(
                "options.addDirs: {bad} is not an absolute path of a directory on the daemon's machine"
            )));
        }
        if let Some(names) = &options.tools {
            let known = &self.sessions.env().tools;
            if let Some(bad) = names.iter().find(|n| known.find(n).is_none()) {
                return Err(invalid_params(format!(
                    "options.tools: there is no tool named {bad:?}; the tools are {}",
                    known.names().join(", ")
                )));
            }
        }
        if let Some(model) = &options.fallback_model
            && let Err(e) = self.sessions.env().catalog.check(model)
        {
            return Err(invalid_params(format!("options.fallbackModel: {e}")));
        }
        for (field, rules) in [
            ("allowedTools", &options.allowed_tools),
            ("disallowedTools", &options.disallowed_tools),
        ] {
            for rule in rules {
                if let Err(why) =
                    crate::permissions::Rule::parse(rule, std::path::Path::new("/"), None)
                {
                    return Err(invalid_params(format!(
                        "options.{field}: {rule:?} is not a rule: {why}"
                    )));
                }
            }
        }
        let handle = self.sessions.get(&session_id).await.map_err(rpc_error)?;
        let by = self.client(ext);
        handle
            .start_turn(TurnRequest {
                input,
                client_turn_id,
                mode: mode.unwrap_or_default(),
                options,
                by,
                command: None,
            })
            .await
            .map_err(rpc_error)
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "turn/cancel"))]
    async fn turn_cancel(
        &self,
        ext: &Extensions,
        session_id: SessionId,
    ) -> RpcResult<TurnCancelled> {
        let handle = self.sessions.get(&session_id).await.map_err(rpc_error)?;
        let cancelled = handle.cancel_turn(self.by(ext)).await.map_err(rpc_error)?;
        Ok(TurnCancelled { cancelled })
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "permission/respond"))]
    async fn permission_respond(
        &self,
        ext: &Extensions,
        session_id: SessionId,
        request_id: String,
        decision: PermissionDecision,
        message: Option<String>,
        updated_input: Option<serde_json::Value>,
        after_hooks: Option<bool>,
    ) -> RpcResult<PermissionResponse> {
        if decision == PermissionDecision::Cancelled {
            return Err(invalid_params(
                "decision must be allow_once, allow_session, allow_always or deny",
            ));
        }
        if updated_input.as_ref().is_some_and(|v| !v.is_object()) {
            return Err(invalid_params("updatedInput must be an object"));
        }
        let handle = self.sessions.get(&session_id).await.map_err(rpc_error)?;
        // Someone else answers a question or a plan with their input; a tool call runs as the
        // model asked it, or not at all.
        let peer = self.peer(ext);
        if !peer.owner && updated_input.is_some() {
            let pending = handle
                .snapshot()
                .await
                .map_err(rpc_error)?
                .pending_permissions;
            let tool = pending
                .iter()
                .find(|p| p["requestId"] == request_id.as_str())
                .and_then(|p| p["tool"].as_str())
                .unwrap_or_default();
            if !matches!(tool, "AskUserQuestion" | "ExitPlanMode" | "") {
                return Err(ErrorCode::NotPermitted.with_message(format!(
                    "{} may answer {tool} as asked or not at all: changing its input (updatedInput) is for {}",
                    peer.principal,
                    self.connections.owner()
                )));
            }
        }
        let by = self.client(ext);
        let answer = crate::session::Answer {
            decision,
            message,
            updated_input,
        };
        handle
            .respond_permission(request_id, answer, by, after_hooks.unwrap_or(false))
            .await
            .map_err(rpc_error)
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "permission/approve"))]
    async fn permission_approve(
        &self,
        ext: &Extensions,
        token: String,
        decision: Option<PermissionDecision>,
        message: Option<String>,
    ) -> RpcResult<PermissionResponse> {
        self.check_running()?;
        let decision = decision.unwrap_or(PermissionDecision::AllowOnce);
        // Whoever carried the token, the answer is the link's: that is what the audit shows.
        let carrier = self.client(ext);
        let through = render_kind(&carrier);
        crate::approve::answer(&self.sessions, &token, decision, message, carrier, &through)
            .await
            .map_err(|refusal| match refusal {
                crate::approve::Refusal::Token(why) => invalid_params(why.to_string()),
                crate::approve::Refusal::Session(e) => rpc_error(e),
                answered @ crate::approve::Refusal::Answered { .. } => {
                    ErrorCode::RequestNotFound.with_message(answered.to_string())
                }
            })
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "hook/respond"))]
    async fn hook_respond(
        &self,
        ext: &Extensions,
        session_id: SessionId,
        request_id: String,
        output: Option<serde_json::Value>,
        error: Option<String>,
    ) -> RpcResult<bool> {
        let answer = match (output, error) {
            (_, Some(why)) => Err(why),
            (Some(output), None) if output.is_object() => Ok(output),
            (Some(_), None) => return Err(invalid_params("output must be an object")),
            (None, None) => Ok(serde_json::json!({})),
        };
        self.answer_asked(ext, session_id, request_id, Asked::Hook, answer)
            .await
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "mcp/respond"))]
    async fn mcp_respond(
        &self,
        ext: &Extensions,
        session_id: SessionId,
        request_id: String,
        message: Option<serde_json::Value>,
        error: Option<String>,
    ) -> RpcResult<bool> {
        let answer = match (message, error) {
            (_, Some(why)) => Err(why),
            (Some(message), None) if message.is_object() => Ok(message),
            (Some(_), None) => return Err(invalid_params("message must be a JSON-RPC object")),
            (None, None) => return Err(invalid_params("give message or error")),
        };
        self.answer_asked(ext, session_id, request_id, Asked::Mcp, answer)
            .await
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "permission/list"))]
    async fn permission_list(&self, session_id: SessionId) -> RpcResult<Vec<serde_json::Value>> {
        let handle = self.sessions.get(&session_id).await.map_err(rpc_error)?;
        Ok(handle
            .snapshot()
            .await
            .map_err(rpc_error)?
            .pending_permissions)
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "session/commands"))]
    async fn session_commands(&self, session_id: SessionId) -> RpcResult<Vec<CommandInfo>> {
        let handle = self.sessions.get(&session_id).await.map_err(rpc_error)?;
        let cwd = handle.summary().await.map_err(rpc_error)?.cwd;
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        Ok(crate::agent::list_commands(
            std::path::Path::new(&cwd),
            home.as_deref(),
        ))
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "mcp/list"))]
    async fn mcp_list(&self, cwd: String) -> RpcResult<McpList> {
        let cwd = absolute_dir(&cwd)?;
        Ok(crate::mcp::list(&self.sessions.env().mcp, &cwd))
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "settings/list"))]
    async fn settings_list(&self, cwd: String) -> RpcResult<Vec<tether_proto::SettingsKey>> {
        absolute_dir(&cwd)?;
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        Ok(crate::permissions::keys::report(
            std::path::Path::new(&cwd),
            home.as_deref(),
        ))
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "workspace/trust"))]
    async fn workspace_trust(
        &self,
        cwd: String,
        trust: Option<bool>,
    ) -> RpcResult<tether_proto::WorkspaceTrust> {
        let cwd = absolute_dir(&cwd)?;
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        let home = home.as_deref();
        let file = match trust {
            Some(trusted) => Some(
                crate::trust::set(&cwd, home, trusted)
                    .map_err(invalid_params)?
                    .display()
                    .to_string(),
            ),
            None => None,
        };
        Ok(tether_proto::WorkspaceTrust {
            dir: crate::trust::canonical(&cwd).display().to_string(),
            trusted: crate::trust::is_trusted(&cwd, home),
            acts: crate::permissions::keys::acts(&cwd, home),
            file,
        })
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "mcp/configure"))]
    async fn mcp_configure(&self, cwd: String, change: McpChange) -> RpcResult<McpChanged> {
        let cwd = absolute_dir(&cwd)?;
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        let home = home.as_deref();
        use crate::mcp::manage;
        let done = match &change {
            McpChange::Add {
                name,
                scope,
                config,
            } => manage::add(&cwd, home, name, scope.as_deref(), config),
            McpChange::Remove { name, scope } => manage::remove(&cwd, home, name, scope.as_deref()),
            McpChange::Approve { names, approve } => manage::approve(&cwd, home, names, *approve),
        };
        match done {
            Ok((file, message)) => Ok(McpChanged {
                file: file.display().to_string(),
                message,
            }),
            Err(e) => Err(invalid_params(e.to_string())),
        }
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "mcp/reconnect"))]
    async fn mcp_reconnect(&self, cwd: String, name: String) -> RpcResult<McpList> {
        let cwd = absolute_dir(&cwd)?;
        if !crate::mcp::reconnect(&self.sessions.env().mcp, &cwd, &name) {
            return Err(invalid_params(format!("no MCP server named {name} here")));
        }
        Ok(crate::mcp::list(&self.sessions.env().mcp, &cwd))
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "permission/rules"))]
    async fn permission_rules(&self, session_id: SessionId) -> RpcResult<PermissionRules> {
        let handle = self.sessions.get(&session_id).await.map_err(rpc_error)?;
        handle.rules().await.map_err(rpc_error)
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc.method = "session/subscribe"))]
    async fn session_subscribe(
        &self,
        pending: PendingSubscriptionSink,
        ext: &Extensions,
        session_id: SessionId,
        role: Option<Role>,
        since: Option<Since>,
    ) -> SubscriptionResult {
        if let Err(e) = self.check_running() {
            pending.reject(e).await;
            return Ok(());
        }
        let session = match self.sessions.get(&session_id).await {
            Ok(h) => h,
            // Another node of the cluster runs it: follow its log from here.
            Err(SessionError::Store(StoreError::OwnedElsewhere { .. })) => {
                let store = self.sessions.store();
                let following = match store.follow(&session_id).await {
                    Some(Ok(f)) => f,
                    Some(Err(e)) => {
                        pending.reject(rpc_error(SessionError::Store(e))).await;
                        return Ok(());
                    }
                    None => {
                        let e = SessionError::Commit(
                            "this daemon has no cluster to follow the session in".into(),
                        );
                        pending.reject(rpc_error(e)).await;
                        return Ok(());
                    }
                };
                let Ok(sink) = pending.accept().await else {
                    return Ok(());
                };
                let log = store.log(&session_id);
                // The owner counts this client as attached while it follows from here.
                let attached = tether_proto::AttachedClient {
                    client: self.client(ext),
                    role: role.unwrap_or_default(),
                };
                store.follower_joined(&session_id, attached.clone()).await;
                attach::follow(
                    sink,
                    log,
                    session_id.clone(),
                    following,
                    since.unwrap_or(Since::Seq(0)),
                    self.sessions.epoch(),
                    self.connections.clone(),
                )
                .await;
                store.follower_left(&session_id, &attached).await;
                return Ok(());
            }
            Err(e) => {
                pending.reject(rpc_error(e)).await;
                return Ok(());
            }
        };
        let client = self.client(ext);
        // Someone who may only watch is attached as an observer, whatever they asked for (the
        // session checks the grant again, in order with any change to it).
        let peer = self.peer(ext);
        let role = match super::access::role_in(self.sessions.store(), &peer, &session_id) {
            Some(SessionRole::Observer) => Role::Observer,
            _ => role.unwrap_or_default(),
        };
        let attachment = match session.attach(client.clone(), role, !peer.owner).await {
            Ok(a) => a,
            Err(e) => {
                pending.reject(rpc_error(e)).await;
                return Ok(());
            }
        };
        let sink = match pending.accept().await {
            Ok(sink) => sink,
            Err(_) => {
                session.detach(client, role, DetachReason::Closed).await;
                return Ok(());
            }
        };
        let sub = Subscriber {
            session,
            client,
            role,
            epoch: self.sessions.epoch(),
            connections: self.connections.clone(),
        };
        attach::pump(sink, attachment, since.unwrap_or(Since::Seq(0)), sub).await;
        Ok(())
    }
}

fn daemon_info() -> DaemonInfo {
    DaemonInfo {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        pid: std::process::id(),
    }
}

/// A request's `cwd`: an absolute path to a directory.
fn absolute_dir(cwd: &str) -> RpcResult<PathBuf> {
    let path = PathBuf::from(cwd);
    if !path.is_absolute() {
        return Err(invalid_params(format!(
            "cwd must be an absolute path, got {cwd:?}"
        )));
    }
    if !path.is_dir() {
        return Err(invalid_params(format!("cwd {cwd:?} is not a directory")));
    }
    Ok(path)
}
