//! The bridge's state: the daemon connection (reopened, and the daemon restarted, when it goes
//! away) and one link per ACP session the editor opened. A link is a controller subscription to
//! the session whose events a forwarder task turns into `session/update`s, the prompts waiting
//! for their turn to end, and the permission requests open in the editor. Nothing here is agent
//! state: every link can be rebuilt from the session's log.

use super::translate::{Changed, Translator};
use super::{Editor, settings};
use crate::connection::{self, Connection, Events};
use agent_client_protocol::v1::schema::{
    AvailableCommand, AvailableCommandsUpdate, ConfigOptionUpdate, PermissionOption,
    PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest, SessionNotification,
    SessionUpdate,
};
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tether_proto::{
    ClientKind, ModelList, PermissionDecision, Role, SessionId, Since, TetherRpcClient,
};
use tokio::sync::oneshot;
use tokio::task::AbortHandle;

/// How long the bridge tries to reach a daemon that went away before failing the prompts.
const RECONNECT_FOR: Duration = Duration::from_secs(15);

/// Why the bridge cannot do what the editor asked.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// The daemon cannot be reached.
    #[error(transparent)]
    Connect(#[from] connection::ConnectError),
    /// The daemon refused a call.
    #[error("{0}")]
    Daemon(String),
    /// The link to the session's events broke and could not be restored.
    #[error("the connection to tetherd was lost: {0}")]
    Lost(String),
}

impl From<connection::CallError> for BridgeError {
    fn from(e: connection::CallError) -> Self {
        Self::Daemon(connection::call_error(&e))
    }
}

/// How a turn the bridge waits on ended.
#[derive(Debug, Clone)]
pub struct TurnEnd {
    /// Tether's stop reason.
    pub stop_reason: String,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

/// The daemon connection, reopened on demand.
pub struct Daemon {
    socket: PathBuf,
    name: String,
    conn: tokio::sync::Mutex<Option<Arc<Connection>>>,
}

impl Daemon {
    /// A daemon reached through `socket`, by a client other clients see as `name`.
    pub fn new(socket: PathBuf, name: String) -> Self {
        Self {
            socket,
            name,
            conn: tokio::sync::Mutex::new(None),
        }
    }

    /// The connection, opened (and the daemon started) when there is none or it broke.
    pub async fn get(&self) -> Result<Arc<Connection>, BridgeError> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| c.client.is_connected()) {
            return Ok(c.clone());
        }
        let conn = Arc::new(
            connection::connect_as(&self.socket, true, ClientKind::Bridge, self.name.clone())
                .await?,
        );
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// The connection, retried for a while (a daemon restarting after a crash).
    async fn reach(&self) -> Result<Arc<Connection>, BridgeError> {
        let deadline = tokio::time::Instant::now() + RECONNECT_FOR;
        let mut delay = Duration::from_millis(100);
        loop {
            match self.get().await {
                Ok(c) => return Ok(c),
                Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
                Err(_) => {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(2));
                }
            }
        }
    }
}

/// What a link's forwarder and the request handlers share.
#[derive(Default)]
struct Inner {
    translator: Translator,
    /// Prompts waiting for their turn, by client turn id.
    waiters: HashMap<String, oneshot::Sender<Result<TurnEnd, String>>>,
    /// Turn id → client turn id of the turns the bridge started.
    turns: HashMap<String, String>,
    /// Permission requests open in the editor, by request id.
    asking: HashMap<String, AbortHandle>,
    /// The tool call of each permission request put to the editor.
    requests: HashMap<String, String>,
    /// The last seq the forwarder saw.
    last_seq: u64,
    /// The forwarder ended for good.
    dead: Option<String>,
}

/// One ACP session: its subscription and what waits on it.
pub struct Link {
    /// The session.
    pub session: SessionId,
    /// What every prompt of the session carries from its setup: the editor's MCP servers and
    /// additional directories.
    pub options: tether_proto::TurnOptions,
    inner: Mutex<Inner>,
    forwarder: Mutex<Option<AbortHandle>>,
    /// The trust question of a new session, while the editor has not answered it: the first
    /// prompt waits for it, so a folder trusted now acts from that prompt on.
    trust: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Link {
    fn drop(&mut self) {
        if let Some(task) = self.lock_forwarder().take() {
            task.abort();
        }
        for (_, ask) in self.lock().asking.drain() {
            ask.abort();
        }
    }
}

/// How a link starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// The whole history becomes updates (`session/load`).
    Show,
    /// The history only sets the translator's state (`session/new`, `session/resume`).
    Silent,
}

impl Link {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until the editor has answered the session's trust question, if one is open.
    pub async fn trust_answered(&self) {
        let pending = self.trust.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(task) = pending {
            let _ = task.await;
        }
    }

    fn lock_forwarder(&self) -> std::sync::MutexGuard<'_, Option<AbortHandle>> {
        self.forwarder.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The session's settings as its events said.
    pub fn settings(&self) -> super::translate::Settings {
        self.lock().translator.settings.clone()
    }

    /// Registers a prompt's wait before its turn starts.
    pub fn wait(&self, client_turn_id: &str) -> oneshot::Receiver<Result<TurnEnd, String>> {
        let (tx, rx) = oneshot::channel();
        let mut inner = self.lock();
        if let Some(reason) = &inner.dead {
            let _ = tx.send(Err(reason.clone()));
        } else {
            inner.waiters.insert(client_turn_id.to_owned(), tx);
        }
        rx
    }

    /// Forgets a wait whose turn never started.
    pub fn unwait(&self, client_turn_id: &str) {
        self.lock().waiters.remove(client_turn_id);
    }

    /// Whether the forwarder ended for good.
    pub fn is_dead(&self) -> bool {
        self.lock().dead.is_some()
    }
}

/// Opens a link: subscribes from the start of the log and starts its forwarder. Returns when
/// the replay is over (so `session/load` answers after the history's updates).
pub async fn open(
    editor: &Arc<Editor>,
    session: SessionId,
    options: tether_proto::TurnOptions,
    replay: Replay,
) -> Result<Arc<Link>, BridgeError> {
    let conn = editor.daemon.get().await?;
    let events = connection::subscribe(&conn, &session, Role::Controller, Since::Seq(0))
        .await
        .map_err(|e| BridgeError::Daemon(connection::describe(&e)))?;
    let models = editor.models().await?;
    let windows = models
        .aliases
        .iter()
        .filter_map(|a| {
            let m = models.models.iter().find(|m| m.id == a.model)?;
            Some((a.alias.clone(), m.context_window))
        })
        .chain(
            models
                .models
                .iter()
                .map(|m| (m.id.clone(), m.context_window)),
        )
        .collect::<Vec<_>>();
    let link = Arc::new(Link {
        session: session.clone(),
        options,
        inner: Mutex::new(Inner {
            translator: Translator::new(windows),
            ..Inner::default()
        }),
        forwarder: Mutex::new(None),
        trust: Mutex::new(None),
    });
    let (ready_tx, ready_rx) = oneshot::channel();
    let task = tokio::spawn(forward(
        editor.clone(),
        Arc::downgrade(&link),
        conn,
        events,
        replay,
        ready_tx,
    ));
    *link.lock_forwarder() = Some(task.abort_handle());
    match ready_rx.await {
        Ok(Ok(())) => Ok(link),
        Ok(Err(e)) => Err(BridgeError::Daemon(e)),
        Err(_) => Err(BridgeError::Lost("the session's event stream ended".into())),
    }
}

/// Tells the editor the session's commands.
pub async fn send_commands(editor: &Editor, session: &SessionId) -> Result<(), BridgeError> {
    let conn = editor.daemon.get().await?;
    let commands = conn
        .client
        .session_commands(session.clone())
        .await?
        .into_iter()
        .map(|c| AvailableCommand::new(c.name, c.description))
        .collect();
    editor.update(
        session,
        SessionUpdate::AvailableCommandsUpdate(AvailableCommandsUpdate::new(commands)),
    );
    Ok(())
}

/// The forwarder: every event of the session, in order, as updates; prompts answered when
/// their turn ends; permission requests put to the editor. Re-subscribes after `lagged` and
/// after a daemon restart, from the last seq it saw.
async fn forward(
    editor: Arc<Editor>,
    link: std::sync::Weak<Link>,
    mut conn: Arc<Connection>,
    mut events: Events,
    replay: Replay,
    ready: oneshot::Sender<Result<(), String>>,
) {
    let mut ready = Some(ready);
    let mut replaying = true;
    // Permission requests of the replay still open when it ends.
    let mut open: Vec<Value> = vec![];
    // This bridge's connection ids (one per reconnect): answers from them are the editor's.
    let mut us = vec![conn.hello.connection_id];
    let ended = loop {
        let item = events.next().await;
        let Some(link) = link.upgrade() else { return };
        let raw = match item {
            Some(Ok(raw)) if raw["type"] != "lagged" => raw,
            Some(Err(e)) => {
                warn(&format!("bad event from tetherd: {e}"));
                continue;
            }
            // The daemon went away, or this subscriber fell behind: subscribe again (reaching
            // the daemon again if needed) and go on from the last seq.
            _ => {
                let since = link.lock().last_seq;
                match resubscribe(&editor, &link.session, since).await {
                    Ok((c, e)) => {
                        us.push(c.hello.connection_id);
                        conn = c;
                        events = e;
                        continue;
                    }
                    Err(e) => break e.to_string(),
                }
            }
        };
        if let Some(seq) = raw["seq"].as_u64() {
            link.lock().last_seq = seq;
        }
        let data = &raw["data"];
        match raw["type"].as_str().unwrap_or("") {
            "replay_complete" => {
                replaying = false;
                if let Some(r) = ready.take() {
                    let _ = r.send(Ok(()));
                }
                for request in std::mem::take(&mut open) {
                    ask(&editor, &link, &conn, request);
                }
                continue;
            }
            "session_deleted" => break "the session was deleted".to_owned(),
            // Nothing more is saved for this session: its waiting prompts fail with the reason.
            "error" if data["code"] == "storage_failed" => {
                break data["message"]
                    .as_str()
                    .unwrap_or("the session could not save its events")
                    .to_owned();
            }
            "turn_started" => {
                let turn = raw["turnId"].as_str().unwrap_or_default().to_owned();
                let client_turn = data["clientTurnId"].as_str().unwrap_or_default();
                let ours = {
                    let mut inner = link.lock();
                    let ours = inner.waiters.contains_key(client_turn);
                    if ours {
                        inner.turns.insert(turn, client_turn.to_owned());
                    }
                    ours
                };
                // The editor shows what it sent; a turn someone else started is news to it.
                if (replaying && replay == Replay::Show) || (!replaying && !ours) {
                    for update in Translator::user_message(&raw) {
                        editor.update(&link.session, update);
                    }
                }
            }
            "permission_requested" if replaying => open.push(data.clone()),
            "permission_requested" => ask(&editor, &link, &conn, data.clone()),
            "permission_resolved" => {
                let request = data["requestId"].as_str().unwrap_or_default();
                open.retain(|r| r["requestId"] != request);
                let asking = link.lock().asking.remove(request);
                if let Some(task) = asking {
                    // Someone else answered first: close the editor's prompt, say who.
                    task.abort();
                    let by = data["resolvedBy"].clone();
                    let mine = by["clientId"]
                        .as_u64()
                        .is_some_and(|id| us.iter().any(|u| u.0 == id));
                    if !mine && data["decision"] != "cancelled" {
                        let tool_call = pending_call(&link, request);
                        if let Some(tool_call) = tool_call {
                            editor.update(
                                &link.session,
                                Translator::note(&tool_call, answered(data)),
                            );
                        }
                    }
                }
            }
            _ => {}
        }
        let skip = replaying && replay == Replay::Silent;
        let (updates, changed) = link.lock().translator.event(&raw);
        if !skip {
            for update in updates {
                editor.update(&link.session, update);
            }
            if changed == (Changed { options: true }) && !replaying {
                options_changed(&editor, &link).await;
            }
        }
        if raw["type"] == "turn_ended" {
            let turn = raw["turnId"].as_str().unwrap_or_default();
            let mut inner = link.lock();
            if let Some(client_turn) = inner.turns.remove(turn)
                && let Some(waiter) = inner.waiters.remove(&client_turn)
            {
                let _ = waiter.send(Ok(TurnEnd {
                    stop_reason: data["stopReason"].as_str().unwrap_or("end_turn").to_owned(),
                    error: data["error"]["message"].as_str().map(str::to_owned),
                }));
            }
        }
    };
    if let Some(r) = ready.take() {
        let _ = r.send(Err(ended.clone()));
    }
    if let Some(link) = link.upgrade() {
        let mut inner = link.lock();
        for (_, waiter) in inner.waiters.drain() {
            let _ = waiter.send(Err(ended.clone()));
        }
        inner.dead = Some(ended);
    }
}

/// Says what went wrong on stderr, which editors keep as the agent's log.
fn warn(message: &str) {
    eprintln!("tether acp: {message}");
}

/// Subscribes again after `since`, reconnecting (and restarting the daemon) as needed.
async fn resubscribe(
    editor: &Editor,
    session: &SessionId,
    since: u64,
) -> Result<(Arc<Connection>, Events), BridgeError> {
    let deadline = tokio::time::Instant::now() + RECONNECT_FOR;
    loop {
        let conn = editor.daemon.reach().await?;
        match connection::subscribe(&conn, session, Role::Controller, Since::Seq(since)).await {
            Ok(events) => return Ok((conn, events)),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(BridgeError::Lost(connection::describe(&e)));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The tool call an open permission request is about.
fn pending_call(link: &Link, request: &str) -> Option<String> {
    link.lock().requests.get(request).cloned()
}

/// "Allowed once by tether on host pts/1", in words.
fn answered(data: &Value) -> String {
    let what = match data["decision"].as_str().unwrap_or("") {
        "allow_once" => "Allowed once",
        "allow_session" => "Allowed for this session",
        "allow_always" => "Always allowed",
        "deny" => "Denied",
        _ => "Cancelled",
    };
    match serde_json::from_value::<tether_proto::ClientRef>(data["resolvedBy"].clone()) {
        Ok(by) => format!("{what} by {}", crate::render::person(&by)),
        Err(_) => format!("{what} by tether"),
    }
}

/// The config options after the model or effort changed.
async fn options_changed(editor: &Editor, link: &Link) {
    let Ok(models) = editor.models().await else {
        return;
    };
    let options = settings::config_options(&models, &link.settings());
    editor.update(
        &link.session,
        SessionUpdate::ConfigOptionUpdate(ConfigOptionUpdate::new(options)),
    );
}

/// Puts a permission request to the editor; its answer goes to the daemon. Aborted (and the
/// editor's request cancelled) when another client answers first.
fn ask(editor: &Arc<Editor>, link: &Arc<Link>, conn: &Arc<Connection>, request: Value) {
    let Some(request_id) = request["requestId"].as_str().map(str::to_owned) else {
        return;
    };
    let tool_call_id = request["toolCallId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let tool = request["tool"].as_str().unwrap_or_default();
    let call = {
        let mut inner = link.lock();
        inner
            .requests
            .insert(request_id.clone(), tool_call_id.clone());
        inner
            .translator
            .described_call(&tool_call_id, tool, &request["input"])
    };
    let rule = request["rule"].as_str().unwrap_or_default();
    let options = request["options"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter_map(|o| {
            // A plan to approve (ExitPlanMode) rather than a call: its own words.
            let plan = tool == "ExitPlanMode";
            let (name, kind) = match o {
                "allow_once" if plan => (
                    "Approve the plan (ask before each edit)".to_owned(),
                    PermissionOptionKind::AllowOnce,
                ),
                "allow_session" if plan => (
                    "Approve the plan and accept edits".to_owned(),
                    PermissionOptionKind::AllowAlways,
                ),
                "deny" if plan => ("Keep planning".to_owned(), PermissionOptionKind::RejectOnce),
                "allow_once" => ("Allow once".to_owned(), PermissionOptionKind::AllowOnce),
                "allow_session" => (
                    format!("Allow {rule} for this session"),
                    PermissionOptionKind::AllowAlways,
                ),
                "allow_always" => (
                    format!("Always allow {rule}"),
                    PermissionOptionKind::AllowAlways,
                ),
                "deny" => ("Reject".to_owned(), PermissionOptionKind::RejectOnce),
                _ => return None,
            };
            Some(PermissionOption::new(o.to_owned(), name, kind))
        })
        .collect::<Vec<_>>();
    let question = RequestPermissionRequest::new(link.session.0.clone(), call, options);
    let sent = editor.cx.send_request(question);
    let weak = Arc::downgrade(link);
    let conn = conn.clone();
    let session = link.session.clone();
    let id = request_id.clone();
    let task = tokio::spawn(async move {
        let answer = sent.block_task().await;
        // Answered here: no longer open in the editor.
        if let Some(link) = weak.upgrade() {
            link.lock().asking.remove(&id);
        }
        let (decision, message) = match answer {
            Ok(r) => match r.outcome {
                RequestPermissionOutcome::Selected(s) => {
                    match serde_json::from_value::<PermissionDecision>(Value::String(
                        s.option_id.0.to_string(),
                    )) {
                        Ok(d) => (d, None),
                        Err(_) => return,
                    }
                }
                // The editor cancelled the prompt (it sent session/cancel, which ends the turn).
                _ => return,
            },
            Err(e) => (
                PermissionDecision::Deny,
                Some(format!("the editor could not answer: {e}")),
            ),
        };
        if let Err(e) = conn
            .client
            .permission_respond(session, id, decision, message, None, None)
            .await
        {
            warn(&format!(
                "cannot answer the permission request: {}",
                connection::call_error(&e)
            ));
        }
    });
    link.lock().asking.insert(request_id, task.abort_handle());
}

/// Asks the editor, once, whether a new session's directory may act, when it is not trusted
/// and its own files would (hooks, allow rules, MCP servers…): a permission request the editor
/// shows like any other, listing them. "Trust" is recorded by the daemon; anything else leaves
/// the directory untrusted (its deny and ask rules still apply) and asks again next time. The
/// session's first prompt waits for the answer ([`Link::trust_answered`]).
pub fn ask_trust(editor: &Arc<Editor>, link: &Link, cwd: String) {
    use agent_client_protocol::v1::schema::{
        ContentBlock, ToolCallContent, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
    };
    let editor = editor.clone();
    let session = link.session.clone();
    let task = tokio::spawn(async move {
        let Ok(conn) = editor.daemon.get().await else {
            return;
        };
        let trust = match conn.client.workspace_trust(cwd.clone(), None).await {
            Ok(t) if !t.trusted && !t.acts.is_empty() => t,
            Ok(_) => return,
            Err(e) => {
                warn(&format!(
                    "cannot ask whether {cwd} is trusted: {}",
                    connection::call_error(&e)
                ));
                return;
            }
        };
        let text = format!(
            "{} is not trusted yet. Its own files would:\n{}\nOnly trust a folder whose files you or \
             your team wrote. Until then its deny and ask rules apply and nothing of it that widens \
             what runs does.",
            trust.dir,
            trust
                .acts
                .iter()
                .map(|a| format!("- {a}\n"))
                .collect::<String>()
        );
        let call = ToolCallUpdate::new(
            format!("trust-{}", session.0),
            ToolCallUpdateFields::new()
                .title(format!("Trust the files in {}?", trust.dir))
                .kind(ToolKind::Other)
                .raw_input(serde_json::json!({"dir": trust.dir, "acts": trust.acts}))
                .content(vec![ToolCallContent::from(ContentBlock::from(text))]),
        );
        let options = vec![
            PermissionOption::new(
                "trust".to_owned(),
                "Trust this folder".to_owned(),
                PermissionOptionKind::AllowAlways,
            ),
            PermissionOption::new(
                "not_now".to_owned(),
                "Not now".to_owned(),
                PermissionOptionKind::RejectOnce,
            ),
        ];
        let question = RequestPermissionRequest::new(session.0.clone(), call, options);
        let answer = editor.cx.send_request(question).block_task().await;
        if let Ok(r) = answer
            && let RequestPermissionOutcome::Selected(s) = r.outcome
            && s.option_id.0.as_ref() == "trust"
            && let Err(e) = conn.client.workspace_trust(cwd, Some(true)).await
        {
            warn(&format!(
                "cannot trust the folder: {}",
                connection::call_error(&e)
            ));
        }
    });
    *link.trust.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
}

/// The daemon's model list, for config options and context windows.
pub async fn models(daemon: &Daemon) -> Result<ModelList, BridgeError> {
    Ok(daemon.get().await?.client.models_list().await?)
}

/// Sends one update to the editor.
pub fn notify(
    cx: &agent_client_protocol::v1::ConnectionTo<agent_client_protocol::Client>,
    session: &SessionId,
    update: SessionUpdate,
) {
    if let Err(e) = cx.send_notification(SessionNotification::new(session.0.clone(), update)) {
        warn(&format!("cannot send an update to the editor: {e}"));
    }
}
