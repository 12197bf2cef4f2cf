//! `tether acp`: an Agent Client Protocol agent on stdin/stdout for editors (Zed, Neovim,
//! Emacs, JetBrains), bridged to the daemon like the terminal client. It holds no agent state:
//! a session the editor opens is a daemon session any terminal can attach to, and what the
//! editor sees is that session's event log as `session/update`s.
//!
//! - `translate.rs`: events → updates (pure).
//! - `bridge.rs`: the daemon connection and one link (subscription, waiting prompts, open
//!   permission requests) per session.
//! - `settings.rs`: permission modes as session modes, model and effort as config options, the
//!   editor's MCP servers as `mcpConfig`.
//! - `prompt.rs`: prompt content → turn input.

mod bridge;
mod prompt;
mod settings;
mod translate;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, CloseSessionRequest, CloseSessionResponse,
    DeleteSessionRequest, DeleteSessionResponse, Implementation, InitializeRequest,
    InitializeResponse, ListSessionsRequest, ListSessionsResponse, LoadSessionRequest,
    LoadSessionResponse, McpCapabilities, NewSessionRequest, NewSessionResponse,
    PromptCapabilities, PromptRequest, PromptResponse, ResumeSessionRequest, ResumeSessionResponse,
    SessionAdditionalDirectoriesCapabilities, SessionCapabilities, SessionCloseCapabilities,
    SessionDeleteCapabilities, SessionInfo, SessionListCapabilities, SessionResumeCapabilities,
    SessionUpdate, SetSessionConfigOptionRequest, SetSessionConfigOptionResponse,
    SetSessionModeRequest, SetSessionModeResponse, StopReason,
};
use agent_client_protocol::{Agent, Client, Error, Stdio};
use bridge::{BridgeError, Daemon, Link, Replay};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, OnceLock};
use tether_proto::{BusyMode, InputItem, ModelList, PermissionMode, SessionId, TetherRpcClient};

/// What the handlers share: the daemon, and once the editor has spoken, the editor.
struct Shared {
    socket: PathBuf,
    editor: OnceLock<Arc<Editor>>,
}

impl Shared {
    fn editor(&self, cx: &ConnectionTo<Client>) -> Arc<Editor> {
        self.editor
            .get_or_init(|| {
                Arc::new(Editor {
                    daemon: Daemon::new(self.socket.clone(), "tether acp".into()),
                    cx: cx.clone(),
                    links: Mutex::new(HashMap::new()),
                    models: tokio::sync::Mutex::new(None),
                })
            })
            .clone()
    }
}

/// A session's modes and config options, as `session/new`, `load` and `resume` answer them.
type Described = (
    agent_client_protocol::v1::schema::SessionModeState,
    Vec<agent_client_protocol::v1::schema::SessionConfigOption>,
);

/// One editor connection: the daemon, the open sessions, the way back to the editor.
pub struct Editor {
    daemon: Daemon,
    cx: ConnectionTo<Client>,
    links: Mutex<HashMap<SessionId, Arc<Link>>>,
    models: tokio::sync::Mutex<Option<ModelList>>,
}

impl Editor {
    /// Sends one `session/update`.
    fn update(&self, session: &SessionId, update: SessionUpdate) {
        bridge::notify(&self.cx, session, update);
    }

    /// The daemon's models (asked once).
    async fn models(&self) -> Result<ModelList, BridgeError> {
        let mut cached = self.models.lock().await;
        if let Some(m) = cached.as_ref() {
            return Ok(m.clone());
        }
        let models = bridge::models(&self.daemon).await?;
        *cached = Some(models.clone());
        Ok(models)
    }

    fn link(&self, session: &SessionId) -> Option<Arc<Link>> {
        self.links
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(session)
            .cloned()
    }

    fn keep(&self, link: Arc<Link>) {
        self.links
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(link.session.clone(), link);
    }

    /// The session's link, opened (silently) when the editor prompts a session it never
    /// loaded in this connection, or reopened when its stream ended for good.
    async fn linked(self: &Arc<Self>, session: &SessionId) -> Result<Arc<Link>, Error> {
        if let Some(link) = self.link(session).filter(|l| !l.is_dead()) {
            return Ok(link);
        }
        let options = self
            .link(session)
            .map(|l| l.options.clone())
            .unwrap_or_default();
        let link = bridge::open(self, session.clone(), options, Replay::Silent)
            .await
            .map_err(failed)?;
        self.keep(link.clone());
        Ok(link)
    }

    async fn new_session(
        self: Arc<Self>,
        req: NewSessionRequest,
    ) -> Result<NewSessionResponse, Error> {
        let cwd = absolute(&req.cwd)?;
        let conn = self.daemon.get().await.map_err(failed)?;
        let session = conn
            .client
            .session_new(cwd.clone(), None, None, None, None)
            .await
            .map_err(|e| failed(e.into()))?
            .session_id;
        let options = settings::prompt_options(&req.mcp_servers, &req.additional_directories)?;
        let link = bridge::open(&self, session.clone(), options, Replay::Silent)
            .await
            .map_err(failed)?;
        self.keep(link.clone());
        let (modes, options) = self.described(&link).await?;
        self.commands_later(session.clone());
        bridge::ask_trust(&self, &link, cwd);
        Ok(NewSessionResponse::new(session.0)
            .modes(modes)
            .config_options(options))
    }

    async fn load_session(
        self: Arc<Self>,
        req: LoadSessionRequest,
        replay: Replay,
    ) -> Result<Described, Error> {
        let session = SessionId(req.session_id.0.to_string());
        let options = settings::prompt_options(&req.mcp_servers, &req.additional_directories)?;
        // A reload replaces the old link (and its subscription).
        self.links
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&session);
        let link = bridge::open(&self, session.clone(), options, replay)
            .await
            .map_err(failed)?;
        self.keep(link.clone());
        let described = self.described(&link).await?;
        self.commands_later(session);
        Ok(described)
    }

    async fn described(&self, link: &Link) -> Result<Described, Error> {
        let models = self.models().await.map_err(failed)?;
        let now = link.settings();
        Ok((
            settings::modes(&now.mode),
            settings::config_options(&models, &now),
        ))
    }

    /// The session's commands, once the editor has the session's id.
    fn commands_later(self: &Arc<Self>, session: SessionId) {
        let editor = self.clone();
        tokio::spawn(async move {
            if let Err(e) = bridge::send_commands(&editor, &session).await {
                eprintln!("tether acp: cannot list the session's commands: {e}");
            }
        });
    }

    async fn list_sessions(&self, req: ListSessionsRequest) -> Result<ListSessionsResponse, Error> {
        let conn = self.daemon.get().await.map_err(failed)?;
        let cwd = req.cwd.map(|c| c.display().to_string());
        let list = conn
            .client
            .session_list(cwd, None, Some(100), req.cursor, None)
            .await
            .map_err(|e| failed(e.into()))?;
        let sessions = list
            .sessions
            .into_iter()
            .map(|s| {
                SessionInfo::new(s.session_id.0, s.cwd)
                    .title(s.title)
                    .updated_at(s.updated_at)
            })
            .collect();
        Ok(ListSessionsResponse::new(sessions).next_cursor(list.next_cursor))
    }

    async fn prompt(self: Arc<Self>, req: PromptRequest) -> Result<PromptResponse, Error> {
        let session = SessionId(req.session_id.0.to_string());
        let input = prompt::input(&req.prompt)
            .map_err(|e| Error::invalid_params().data(serde_json::json!(e.to_string())))?;
        if let Some(link) = self.link(&session) {
            link.trust_answered().await;
        }
        let end = self.run_turn(&session, input).await?;
        let stop = match end.stop_reason.as_str() {
            "end_turn" | "stop_sequence" | "pause_turn" | "tool_use" | "command" | "compacted" => {
                StopReason::EndTurn
            }
            "max_tokens" => StopReason::MaxTokens,
            "max_turns" => StopReason::MaxTurnRequests,
            "refusal" => StopReason::Refusal,
            "cancelled" => StopReason::Cancelled,
            "interrupted_by_restart" => {
                return Err(Error::internal_error().data(serde_json::json!(
                    "the turn was interrupted: tetherd stopped while it ran (the session is intact; send the prompt again)"
                )));
            }
            other => {
                let why = end
                    .error
                    .unwrap_or_else(|| format!("the turn ended: {}", other.replace('_', " ")));
                return Err(Error::internal_error().data(serde_json::json!(why)));
            }
        };
        Ok(PromptResponse::new(stop))
    }

    /// Starts a turn and waits for it to end (queued behind a running one).
    async fn run_turn(
        self: &Arc<Self>,
        session: &SessionId,
        input: Vec<InputItem>,
    ) -> Result<bridge::TurnEnd, Error> {
        let link = self.linked(session).await?;
        let client_turn = uuid::Uuid::new_v4().to_string();
        let ended = link.wait(&client_turn);
        let options = link.options.clone();
        let conn = self.daemon.get().await.map_err(failed)?;
        if let Err(e) = conn
            .client
            .turn_start(
                session.clone(),
                input,
                Some(client_turn.clone()),
                Some(BusyMode::Queue),
                Some(options),
            )
            .await
        {
            link.unwait(&client_turn);
            return Err(failed(e.into()));
        }
        match ended.await {
            Ok(Ok(end)) => Ok(end),
            Ok(Err(why)) => Err(failed(BridgeError::Lost(why))),
            Err(_) => Err(failed(BridgeError::Lost("the session was closed".into()))),
        }
    }

    async fn cancel(&self, session: SessionId) {
        let Ok(conn) = self.daemon.get().await else {
            return;
        };
        if let Err(e) = conn.client.turn_cancel(session).await {
            eprintln!(
                "tether acp: cannot cancel the turn: {}",
                crate::connection::call_error(&e)
            );
        }
    }

    async fn set_mode(&self, req: SetSessionModeRequest) -> Result<SetSessionModeResponse, Error> {
        let mode = req.mode_id.0.to_string();
        if !settings::is_mode(&mode) {
            return Err(Error::invalid_params().data(serde_json::json!(format!(
                "unknown mode {mode:?} (default, acceptEdits, plan, dontAsk, bypassPermissions)"
            ))));
        }
        let mode: PermissionMode = serde_json::from_value(serde_json::Value::String(mode))
            .map_err(|e| Error::invalid_params().data(serde_json::json!(e.to_string())))?;
        let conn = self.daemon.get().await.map_err(failed)?;
        conn.client
            .session_configure(
                SessionId(req.session_id.0.to_string()),
                None,
                None,
                Some(mode),
                None,
                None,
            )
            .await
            .map_err(|e| failed(e.into()))?;
        Ok(SetSessionModeResponse::new())
    }

    async fn set_option(
        self: Arc<Self>,
        req: SetSessionConfigOptionRequest,
    ) -> Result<SetSessionConfigOptionResponse, Error> {
        let session = SessionId(req.session_id.0.to_string());
        let value = match &req.value {
            agent_client_protocol::v1::schema::SessionConfigOptionValue::ValueId { value } => {
                value.0.to_string()
            }
            _ => return Err(Error::invalid_params().data(serde_json::json!("a value id"))),
        };
        let link = self.linked(&session).await?;
        let conn = self.daemon.get().await.map_err(failed)?;
        let mut now = link.settings();
        match req.config_id.0.as_ref() {
            settings::MODEL => {
                let summary = conn
                    .client
                    .session_configure(session.clone(), None, Some(value), None, None, None)
                    .await
                    .map_err(|e| failed(e.into()))?;
                now.model = summary.model;
            }
            settings::EFFORT => {
                // The daemon's `/effort` checks the level against the model.
                let level = if value == settings::DEFAULT_EFFORT {
                    "default".to_owned()
                } else {
                    value.clone()
                };
                let end = self
                    .run_turn(
                        &session,
                        vec![InputItem::Text {
                            text: format!("/effort {level}"),
                        }],
                    )
                    .await?;
                if let Some(why) = end.error {
                    return Err(Error::invalid_params().data(serde_json::json!(why)));
                }
                now = link.settings();
            }
            other => {
                return Err(Error::invalid_params()
                    .data(serde_json::json!(format!("unknown option {other:?}"))));
            }
        }
        let models = self.models().await.map_err(failed)?;
        Ok(SetSessionConfigOptionResponse::new(
            settings::config_options(&models, &now),
        ))
    }

    async fn delete(&self, req: DeleteSessionRequest) -> Result<DeleteSessionResponse, Error> {
        let session = SessionId(req.session_id.0.to_string());
        self.links
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&session);
        let conn = self.daemon.get().await.map_err(failed)?;
        conn.client
            .session_delete(session)
            .await
            .map_err(|e| failed(e.into()))?;
        Ok(DeleteSessionResponse::new())
    }
}

/// A bridge failure as the editor gets it: an internal error with the reason in words.
fn failed(e: BridgeError) -> Error {
    Error::internal_error().data(serde_json::json!(e.to_string()))
}

fn absolute(cwd: &Path) -> Result<String, Error> {
    if !cwd.is_absolute() {
        return Err(Error::invalid_params().data(serde_json::json!(format!(
            "cwd must be an absolute path: {}",
            cwd.display()
        ))));
    }
    Ok(cwd.display().to_string())
}

/// Spawns a handler's work so the editor's next message is read meanwhile, and answers the
/// request when it is done.
macro_rules! answer_later {
    ($shared:expr, $req:ty, |$editor:ident, $r:ident| $body:expr) => {{
        let shared = $shared.clone();
        async move |$r: $req, responder: agent_client_protocol::v1::Responder<_>, cx| {
            let $editor = shared.editor(&cx);
            tokio::spawn(async move {
                let _ = responder.respond_with_result($body);
            });
            Ok(())
        }
    }};
}

/// `tether acp`: serves the editor on stdin/stdout until it closes them.
pub async fn run(socket: &Path) -> anyhow::Result<ExitCode> {
    let shared = Arc::new(Shared {
        socket: socket.to_owned(),
        editor: OnceLock::new(),
    });
    let cancel = shared.clone();
    Agent
        .v1()
        .name("tether")
        .on_receive_request(
            async move |req: InitializeRequest, responder, _cx| {
                let _ = req.protocol_version;
                responder.respond(
                    InitializeResponse::new(ProtocolVersion::V1)
                        .agent_capabilities(
                            AgentCapabilities::new()
                                .load_session(true)
                                .prompt_capabilities(
                                    PromptCapabilities::new().image(true).embedded_context(true),
                                )
                                .mcp_capabilities(McpCapabilities::new().http(true).sse(true))
                                .session_capabilities(
                                    SessionCapabilities::new()
                                        .list(SessionListCapabilities::new())
                                        .resume(SessionResumeCapabilities::new())
                                        .close(SessionCloseCapabilities::new())
                                        .additional_directories(
                                            SessionAdditionalDirectoriesCapabilities::new(),
                                        )
                                        .delete(SessionDeleteCapabilities::new()),
                                ),
                        )
                        .agent_info(Implementation::new("tether", env!("CARGO_PKG_VERSION"))),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            answer_later!(shared, NewSessionRequest, |editor, req| editor
                .new_session(req)
                .await),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            answer_later!(shared, LoadSessionRequest, |editor, req| editor
                .load_session(req, Replay::Show)
                .await
                .map(|(modes, options)| LoadSessionResponse::new()
                    .modes(modes)
                    .config_options(options))),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            answer_later!(shared, ResumeSessionRequest, |editor, req| {
                let load =
                    LoadSessionRequest::new(req.session_id, req.cwd).mcp_servers(req.mcp_servers);
                editor
                    .load_session(load, Replay::Silent)
                    .await
                    .map(|(modes, options)| {
                        ResumeSessionResponse::new()
                            .modes(modes)
                            .config_options(options)
                    })
            }),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            answer_later!(shared, ListSessionsRequest, |editor, req| editor
                .list_sessions(req)
                .await),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            answer_later!(shared, PromptRequest, |editor, req| editor
                .prompt(req)
                .await),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            answer_later!(shared, SetSessionModeRequest, |editor, req| editor
                .set_mode(req)
                .await),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            answer_later!(shared, SetSessionConfigOptionRequest, |editor, req| editor
                .set_option(req)
                .await),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            answer_later!(shared, DeleteSessionRequest, |editor, req| editor
                .delete(req)
                .await),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            answer_later!(shared, CloseSessionRequest, |editor, req| {
                editor
                    .links
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&SessionId(req.session_id.0.to_string()));
                Ok::<_, Error>(CloseSessionResponse::new())
            }),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |n: CancelNotification, cx| {
                let editor = cancel.editor(&cx);
                let session = SessionId(n.session_id.0.to_string());
                tokio::spawn(async move { editor.cancel(session).await });
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(Stdio::new())
        .await
        .map_err(|e| anyhow::anyhow!("the editor connection failed: {e}"))?;
    Ok(ExitCode::SUCCESS)
}
