//! `--input-format stream-json` as the Agent SDKs drive Claude Code: stdin is read as it comes.
//! Each user line starts a turn when it arrives (queued behind a running one) and gets one
//! `result`; end of input ends the run after the last turn. The control protocol runs both
//! ways: the SDK's requests (`initialize`, `interrupt`, `set_permission_mode`, `set_model`,
//! `mcp_status`, `get_context_usage` …) are answered with a `control_response`; with
//! `--permission-prompt-tool stdio` each permission request goes to the SDK as `can_use_tool`,
//! and the hook callbacks `initialize` names run as the daemon's hooks do, each asked of the SDK
//! as `hook_callback` when the daemon's `hook_callback` event comes; the program's in-process
//! MCP servers are reached the same way (`mcp_message`).
//! The session is the daemon's: `tether attach` watches it and may answer first (the SDK's
//! request is then withdrawn with `control_cancel_request`); if the SDK goes away mid-turn,
//! the turn finishes in the daemon.
//!
//! A malformed line, an unknown request or an answer to nothing is reported (on stdout as a
//! `control_response` error where the line had a request id, on stderr otherwise) and the run
//! goes on.

use crate::connection::{self, Connection, Events};
use crate::headless::{Headless, Totals, stream_json_for, title_of};
use crate::stream_json::Translator;
use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;
use tether_proto::{
    BusyMode, ClientKind, InputItem, PermissionDecision, PermissionMode, Role, SessionId, Since,
    TetherRpcClient,
};
use tokio::io::AsyncBufReadExt;

/// Where a permission request goes when the run has no one to ask.
const NOBODY: &str = "headless run: nobody can approve this call; allow it with --allowedTools, a permission rule or --permission-mode, or answer it from the SDK (canUseTool)";

/// One line of stdin, as read.
enum Line {
    /// A line's text.
    Text(String),
    /// Stdin ended.
    End,
    /// Stdin could not be read.
    Failed(std::io::Error),
}

/// A turn this run started, and what it added up to so far.
struct Turn {
    id: String,
    started: Instant,
    totals: Totals,
}

/// A `can_use_tool` request sent to the SDK, waiting for its answer.
struct Asked {
    /// The daemon's request it stands for.
    request_id: String,
}

/// What the daemon asked the SDK program through this client: a hook callback or a message for
/// one of its MCP servers, by the daemon's request id.
enum Relayed {
    Hook(String),
    Mcp(String),
}

/// The run: one session, the turns started for the SDK's messages, the requests in flight.
struct Run {
    h: Headless,
    conn: Connection,
    session: Option<SessionId>,
    events: Option<Events>,
    translator: Option<Translator>,
    /// Our turns, oldest first; the first is the one running.
    turns: VecDeque<Turn>,
    /// `can_use_tool` requests by our request id.
    asked: HashMap<String, Asked>,
    /// `hook_callback` and `mcp_message` requests by our request id: what the daemon asked.
    relayed: HashMap<String, Relayed>,
    /// The hook callbacks `initialize` named, for every turn.
    hook_callbacks: Option<Value>,
    /// Options of the turns still to start (the agents `initialize` brought in).
    agents: Option<Value>,
    /// Whether the SDK answers permission requests (`--permission-prompt-tool stdio`).
    stdio_permissions: bool,
    /// Set before the session exists, applied when it is made.
    mode: Option<PermissionMode>,
    model: Option<String>,
    /// The last result's verdict.
    last_ok: bool,
    input_open: bool,
    next_request: u64,
    /// How full the context was at the last reply (percent).
    context_percent: f64,
}

fn write_line(value: &Value) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{value}")?;
    out.flush()?;
    Ok(())
}

fn success(request_id: &Value, response: Value) -> Value {
    json!({"type": "control_response",
           "response": {"subtype": "success", "request_id": request_id, "response": response}})
}

fn failure(request_id: &Value, error: impl std::fmt::Display) -> Value {
    json!({"type": "control_response",
           "response": {"subtype": "error", "request_id": request_id, "error": error.to_string()}})
}

/// The content of a user message as the daemon takes it: text, images (base64) and documents
/// (a PDF as base64, plain text) inline; other blocks are refused by name.
fn input_of(content: &Value) -> anyhow::Result<Vec<InputItem>> {
    match content {
        Value::String(s) => Ok(vec![InputItem::Text { text: s.clone() }]),
        Value::Array(blocks) => blocks
            .iter()
            .map(|b| match b["type"].as_str() {
                Some("text") => Ok(InputItem::Text {
                    text: b["text"].as_str().unwrap_or_default().to_owned(),
                }),
                Some("image") if b["source"]["type"] == "base64" => Ok(InputItem::Image {
                    path: None,
                    data: b["source"]["data"].as_str().map(str::to_owned),
                    media_type: b["source"]["media_type"].as_str().map(str::to_owned),
                }),
                Some("document") => match b["source"]["type"].as_str() {
                    Some("base64" | "text") => Ok(InputItem::Document {
                        data: b["source"]["data"].as_str().unwrap_or_default().to_owned(),
                        media_type: b["source"]["media_type"]
                            .as_str()
                            .unwrap_or("application/pdf")
                            .to_owned(),
                        title: b["title"].as_str().map(str::to_owned),
                    }),
                    other => bail!("document sources of type {other:?} are not taken"),
                },
                Some(other) => bail!("content blocks of type {other:?} are not taken"),
                None => bail!("a content block without a type"),
            })
            .collect(),
        _ => bail!("the message has no content"),
    }
}

/// `--input-format stream-json` with `--output-format stream-json`, in real time.
pub async fn run(socket: &Path, h: Headless) -> anyhow::Result<ExitCode> {
    let cwd = crate::remote::work_dir().context("cannot read the current directory")?;
    let conn = connection::connect(socket, true, ClientKind::Script).await?;
    crate::trust::report_untrusted(&conn, &cwd).await?;
    let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
        loop {
            let line = match stdin.next_line().await {
                Ok(Some(l)) => Line::Text(l),
                Ok(None) => Line::End,
                Err(e) => Line::Failed(e),
            };
            let last = !matches!(line, Line::Text(_));
            if tx.send(line).is_err() || last {
                return;
            }
        }
    });
    let mut run = Run {
        stdio_permissions: h.options.permission_prompt_tool.as_deref() == Some("stdio"),
        mode: crate::commands::parse_mode(h.permission_mode.clone())?,
        model: h.model.clone(),
        session: h.session.clone(),
        h,
        conn,
        events: None,
        translator: None,
        turns: VecDeque::new(),
        asked: HashMap::new(),
        relayed: HashMap::new(),
        hook_callbacks: None,
        agents: None,
        last_ok: true,
        input_open: true,
        next_request: 0,
        context_percent: 0.0,
    };
    if run.stdio_permissions {
        // The SDK answers them; the daemon must not see an MCP tool of that name.
        run.h.options.permission_prompt_tool = None;
    }
    if run.session.is_some() {
        run.open(&cwd, None).await?;
    }
    loop {
        if !run.input_open && run.turns.is_empty() {
            break;
        }
        tokio::select! {
            line = lines.recv(), if run.input_open => match line {
                Some(Line::Text(text)) => run.line(&cwd, &text).await?,
                Some(Line::Failed(e)) => {
                    eprintln!("tether: cannot read stdin: {e}");
                    run.input_open = false;
                }
                Some(Line::End) | None => run.input_open = false,
            },
            event = async {
                match run.events.as_mut() {
                    Some(events) => events.next().await,
                    None => std::future::pending().await,
                }
            } => match event {
                None => bail!("the connection to tetherd was lost"),
                Some(Err(e)) => bail!("bad event from tetherd: {e}"),
                Some(Ok(raw)) => run.event(&raw).await?,
            },
        }
    }
    Ok(if run.last_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

impl Run {
    /// Creates (or opens) the session and subscribes; `first` titles a new one.
    async fn open(&mut self, cwd: &str, first: Option<&str>) -> anyhow::Result<()> {
        let session = match &self.session {
            Some(id) => {
                if self.mode.is_some() || self.model.is_some() {
                    self.conn
                        .client
                        .session_configure(
                            id.clone(),
                            None,
                            self.model.clone(),
                            self.mode,
                            None,
                            None,
                        )
                        .await?;
                }
                id.clone()
            }
            None => {
                let title = self
                    .h
                    .name
                    .clone()
                    .unwrap_or_else(|| title_of(first.unwrap_or("sdk")));
                self.conn
                    .client
                    .session_new(
                        cwd.to_owned(),
                        Some(title),
                        self.model.clone(),
                        self.mode,
                        self.h.session_id.clone(),
                    )
                    .await?
                    .session_id
            }
        };
        self.events =
            Some(connection::subscribe(&self.conn, &session, Role::Controller, Since::Head).await?);
        let (translator, init) = stream_json_for(&self.conn, &session, &self.h).await?;
        write_line(&init)?;
        self.translator = Some(translator);
        self.session = Some(session);
        Ok(())
    }

    /// One line of stdin.
    async fn line(&mut self, cwd: &str, text: &str) -> anyhow::Result<()> {
        if text.trim().is_empty() {
            return Ok(());
        }
        let message: Value = match serde_json::from_str(text) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("tether: skipping an input line that is not JSON ({e})");
                return Ok(());
            }
        };
        match message["type"].as_str() {
            Some("user") => self.user(cwd, &message).await,
            Some("control_request") => {
                let id = message["request_id"].clone();
                let request = &message["request"];
                let answer = match self.control(request).await {
                    Ok(response) => success(&id, response),
                    Err(e) => failure(&id, format!("{e:#}")),
                };
                write_line(&answer)
            }
            Some("control_response") => self.answered(&message["response"]).await,
            // The SDK withdrew a request: it is already answered (first answer wins).
            Some("control_cancel_request") => Ok(()),
            // Claude Code's keep-alives and the like carry nothing for a turn.
            Some("keep_alive" | "update_environment_variables") => Ok(()),
            other => {
                eprintln!("tether: skipping an input line of type {other:?}");
                Ok(())
            }
        }
    }

    /// A user message: a turn, queued behind the running one.
    async fn user(&mut self, cwd: &str, message: &Value) -> anyhow::Result<()> {
        let input = match input_of(&message["message"]["content"]) {
            Ok(input) => input,
            Err(e) => return self.refused(format!("{e:#}")),
        };
        if self.session.is_none() {
            let first = input.iter().find_map(|i| match i {
                InputItem::Text { text } => Some(text.clone()),
                _ => None,
            });
            self.open(cwd, first.as_deref()).await?;
        }
        let Some(session) = self.session.clone() else {
            return Ok(());
        };
        let mut options = self.h.options.clone();
        options.hook_callbacks = self.hook_callbacks.clone();
        if let Some(agents) = &self.agents {
            let mut all = options.agents.take().unwrap_or_else(|| json!({}));
            if let (Some(all), Some(more)) = (all.as_object_mut(), agents.as_object()) {
                all.extend(more.clone());
            }
            options.agents = Some(all);
        }
        match self
            .conn
            .client
            .turn_start(session, input, None, Some(BusyMode::Queue), Some(options))
            .await
        {
            Ok(started) => {
                self.turns.push_back(Turn {
                    id: started.turn_id.0,
                    started: Instant::now(),
                    totals: Totals::default(),
                });
                Ok(())
            }
            Err(e) => self.refused(connection::describe(&e.into())),
        }
    }

    /// A message that started no turn still gets its `result`, an error.
    fn refused(&mut self, why: String) -> anyhow::Result<()> {
        eprintln!("tether: {why}");
        self.last_ok = false;
        write_line(&json!({
            "type": "result",
            "subtype": "error_during_execution",
            "is_error": true,
            "duration_ms": 0,
            "duration_api_ms": 0,
            "num_turns": 0,
            "result": why,
            "errors": [why],
            "session_id": self.session.as_ref().map(|s| s.0.clone()).unwrap_or_default(),
            "total_cost_usd": 0.0,
            "usage": {"input_tokens": 0, "output_tokens": 0,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
            "modelUsage": {},
            "permission_denials": [],
            "terminal_reason": "error",
            "uuid": uuid::Uuid::new_v4().to_string(),
        }))
    }

    /// A control request from the SDK; its response data.
    async fn control(&mut self, request: &Value) -> anyhow::Result<Value> {
        let subtype = request["subtype"].as_str().unwrap_or_default();
        let session = self.session.clone();
        match subtype {
            "initialize" => {
                if let Some(agents) = request.get("agents").filter(|a| a.is_object()) {
                    self.agents = Some(agents.clone());
                }
                self.take_initialize(request);
                self.hook_callbacks = request
                    .get("hooks")
                    .filter(|h| h.as_object().is_some_and(|h| !h.is_empty()))
                    .cloned();
                Ok(json!({
                    "commands": [],
                    "output_style": "default",
                    "available_output_styles": ["default"],
                    "hooks_applied": self.hook_callbacks.is_some(),
                }))
            }
            "interrupt" => {
                if let Some(session) = session
                    && !self.turns.is_empty()
                {
                    self.conn.client.turn_cancel(session).await?;
                }
                Ok(json!({}))
            }
            "set_permission_mode" => {
                let mode = crate::commands::parse_mode(request["mode"].as_str().map(String::from))?
                    .context("set_permission_mode needs a mode")?;
                match session {
                    Some(s) => {
                        self.conn
                            .client
                            .session_configure(s, None, None, Some(mode), None, None)
                            .await?;
                    }
                    None => self.mode = Some(mode),
                }
                Ok(json!({}))
            }
            "set_model" => {
                // `null` goes back to the default model.
                let model = request["model"].as_str().unwrap_or("default").to_owned();
                match session {
                    Some(s) => {
                        self.conn
                            .client
                            .session_configure(s, None, Some(model), None, None, None)
                            .await?;
                    }
                    None => self.model = Some(model),
                }
                Ok(json!({}))
            }
            // Thinking follows the model's effort in tether (`--effort`); nothing to set.
            "set_max_thinking_tokens" => Ok(json!({})),
            "mcp_reconnect" => {
                let name = request["serverName"]
                    .as_str()
                    .context("mcp_reconnect needs a serverName")?;
                let cwd = crate::remote::work_dir()?;
                self.conn.client.mcp_reconnect(cwd, name.to_owned()).await?;
                Ok(json!({}))
            }
            "mcp_status" => {
                let cwd = crate::remote::work_dir()?;
                let list = self.conn.client.mcp_list(cwd).await?;
                let servers: Vec<Value> = list
                    .servers
                    .iter()
                    .map(|s| {
                        let tools: Vec<Value> =
                            s.tools.iter().map(|t| json!({"name": t})).collect();
                        json!({"name": s.name, "status": crate::headless::mcp_status(&s.state),
                               "scope": s.scope, "tools": tools})
                    })
                    .collect();
                Ok(json!({"mcpServers": servers}))
            }
            "get_context_usage" => {
                let Some(session) = session else {
                    return Ok(json!({"categories": [], "totalTokens": 0, "maxTokens": 0,
                                     "percentage": 0, "model": self.model}));
                };
                let snapshot = self.conn.client.session_get(session).await?;
                let models = self.conn.client.models_list().await?;
                let name = &snapshot.summary.model;
                let id = models
                    .aliases
                    .iter()
                    .find(|a| &a.alias == name)
                    .map_or(name, |a| &a.model);
                let max = models
                    .models
                    .iter()
                    .find(|m| &m.id == id)
                    .map_or(0, |m| m.context_window);
                let percent = self.context_percent;
                let used = (percent / 100.0 * max as f64).round() as u64;
                Ok(json!({"categories": [{"name": "Messages", "tokens": used}],
                          "totalTokens": used, "maxTokens": max, "rawMaxTokens": max,
                          "percentage": percent, "model": id}))
            }
            other => bail!("Unsupported control request subtype: {other}"),
        }
    }

    /// What the TypeScript SDK passes in `initialize` rather than on the command line: its
    /// in-process MCP servers (`sdkMcpServers`, by name), the system prompt, the text appended
    /// to it, the answer's JSON Schema. They apply to every turn of the run.
    fn take_initialize(&mut self, request: &Value) {
        let options = &mut self.h.options;
        if let Some(names) = request["sdkMcpServers"].as_array() {
            let mut servers = options.mcp_config.take().unwrap_or_else(|| json!({}));
            if let Some(map) = servers.as_object_mut() {
                for name in names.iter().filter_map(Value::as_str) {
                    map.insert(name.to_owned(), json!({"type": "sdk", "name": name}));
                }
            }
            options.mcp_config = Some(servers);
        }
        let text = |v: &Value| match v {
            Value::String(s) => Some(s.clone()),
            Value::Array(parts) => Some(
                parts
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
            _ => None,
        };
        if let Some(prompt) = text(&request["systemPrompt"]) {
            options.system_prompt = Some(prompt);
        }
        if let Some(append) = text(&request["appendSystemPrompt"]) {
            options.append_system_prompt = Some(append);
        }
        if let Some(schema) = request.get("jsonSchema").filter(|s| s.is_object()) {
            options.json_schema = Some(schema.clone());
        }
    }

    /// The SDK's answer to one of our requests.
    async fn answered(&mut self, response: &Value) -> anyhow::Result<()> {
        let id = response["request_id"].as_str().unwrap_or_default();
        if let Some(relayed) = self.relayed.remove(id) {
            let answer = match (&relayed, response["subtype"].as_str()) {
                // A hook's answer may be empty; an MCP server's must be a JSON-RPC object.
                (Relayed::Hook(_), Some("success")) => Ok(Some(response["response"].clone())
                    .filter(Value::is_object)
                    .unwrap_or_else(|| json!({}))),
                (Relayed::Mcp(_), Some("success"))
                    if response["response"]["mcp_response"].is_object() =>
                {
                    Ok(response["response"]["mcp_response"].clone())
                }
                _ => Err(response["error"]
                    .as_str()
                    .unwrap_or("the SDK program gave no answer")
                    .to_owned()),
            };
            return self.relay_back(relayed, answer).await;
        }
        let Some(asked) = self.asked.remove(id) else {
            eprintln!("tether: an answer to no open request ({id:?}) was ignored");
            return Ok(());
        };
        let Some(session) = self.session.clone() else {
            return Ok(());
        };
        let data = &response["response"];
        let (decision, message, updated) =
            match (response["subtype"].as_str(), data["behavior"].as_str()) {
                (Some("success"), Some("allow")) => (
                    PermissionDecision::AllowOnce,
                    None,
                    data.get("updatedInput").filter(|u| u.is_object()).cloned(),
                ),
                (Some("success"), _) => (
                    PermissionDecision::Deny,
                    Some(
                        data["message"]
                            .as_str()
                            .filter(|m| !m.is_empty())
                            .unwrap_or("denied by the SDK's canUseTool")
                            .to_owned(),
                    ),
                    None,
                ),
                _ => (
                    PermissionDecision::Deny,
                    Some(format!(
                        "the SDK's canUseTool failed: {}",
                        response["error"].as_str().unwrap_or("no reason given")
                    )),
                    None,
                ),
            };
        // Refused (answered elsewhere meanwhile, or the store failed): said, and the run goes on.
        if let Err(e) = self
            .conn
            .client
            .permission_respond(
                session.clone(),
                asked.request_id,
                decision,
                message,
                updated,
                Some(true),
            )
            .await
        {
            eprintln!("tether: the SDK's answer was not taken: {e}");
        }
        if data["interrupt"] == true
            && let Err(e) = self.conn.client.turn_cancel(session).await
        {
            eprintln!("tether: cannot interrupt the turn: {e}");
        }
        Ok(())
    }

    /// One event of the session.
    async fn event(&mut self, raw: &Value) -> anyhow::Result<()> {
        let kind = raw["type"].as_str().unwrap_or_default();
        let data = &raw["data"];
        if kind == "notice" && data["level"] == "warning" {
            eprintln!(
                "tether: warning: {}",
                data["message"].as_str().unwrap_or_default()
            );
        }
        if let Some(percent) = data["contextPercent"].as_f64() {
            self.context_percent = percent;
        }
        if kind == "error" && data["code"] == "storage_failed" {
            bail!(
                "{}",
                data["message"]
                    .as_str()
                    .unwrap_or("the session could not save its events")
            );
        }
        // Answered elsewhere first (a terminal attached to the session): withdrawn here.
        if kind == "permission_resolved" {
            let request = data["requestId"].as_str().unwrap_or_default();
            if let Some(ours) = self
                .asked
                .iter()
                .find(|(_, a)| a.request_id == request)
                .map(|(id, _)| id.clone())
            {
                self.asked.remove(&ours);
                write_line(&json!({"type": "control_cancel_request", "request_id": ours}))?;
            }
        }
        let ours = self
            .turns
            .iter()
            .position(|t| raw["turnId"].as_str() == Some(t.id.as_str()));
        let Some(index) = ours else {
            return Ok(());
        };
        if let Some(t) = self.translator.as_mut() {
            for line in t.event(raw) {
                write_line(&line)?;
            }
        }
        if kind == "permission_requested" {
            self.ask(data).await?;
        }
        let request_id = || data["requestId"].as_str().unwrap_or_default().to_owned();
        let relayed = match kind {
            "hook_callback" => Some((
                Relayed::Hook(request_id()),
                json!({
                    "subtype": "hook_callback",
                    "callback_id": data["callbackId"],
                    "input": data["input"],
                    "tool_use_id": data["input"]["tool_use_id"],
                }),
            )),
            "mcp_message" => Some((
                Relayed::Mcp(request_id()),
                json!({
                    "subtype": "mcp_message",
                    "server_name": data["server"],
                    "message": data["message"],
                }),
            )),
            _ => None,
        };
        if let Some((relayed, request)) = relayed {
            if self.input_open {
                let ours = self.request(request)?;
                self.relayed.insert(ours, relayed);
            } else {
                // The SDK can no longer be asked (its input ended): the daemon is told at once.
                let why = "the SDK program's input has ended".to_owned();
                self.relay_back(relayed, Err(why)).await?;
            }
        }
        if self.turns[index].totals.take(kind, data)
            && let Some(turn) = self.turns.remove(index)
        {
            let session = self.session.clone().unwrap_or(SessionId(String::new()));
            let result = turn.totals.result(&session, turn.started);
            self.last_ok = turn.totals.succeeded();
            let line = match &self.translator {
                Some(t) => t.result(result),
                None => result,
            };
            write_line(&line)?;
        }
        Ok(())
    }

    /// Gives the daemon the SDK program's answer to what it asked (or why there is none); a
    /// refusal (the hook or the turn stopped waiting) is said, and the run goes on.
    async fn relay_back(
        &mut self,
        relayed: Relayed,
        answer: Result<Value, String>,
    ) -> anyhow::Result<()> {
        let Some(session) = self.session.clone() else {
            return Ok(());
        };
        let (output, error) = match answer {
            Ok(output) if output.is_object() => (Some(output), None),
            Ok(_) => (
                None,
                Some("the SDK program's answer is not an object".to_owned()),
            ),
            Err(why) => (None, Some(why)),
        };
        let sent = match relayed {
            Relayed::Hook(request_id) => {
                self.conn
                    .client
                    .hook_respond(session, request_id, output, error)
                    .await
            }
            Relayed::Mcp(request_id) => {
                self.conn
                    .client
                    .mcp_respond(session, request_id, output, error)
                    .await
            }
        };
        if let Err(e) = sent {
            eprintln!("tether: the SDK program's answer was refused: {e}");
        }
        Ok(())
    }

    /// Sends the SDK a control request; its id, which the SDK's answer names.
    fn request(&mut self, request: Value) -> anyhow::Result<String> {
        self.next_request += 1;
        let id = format!(
            "tether_{}_{}",
            self.next_request,
            uuid::Uuid::new_v4().simple()
        );
        write_line(&json!({"type": "control_request", "request_id": id, "request": request}))?;
        Ok(id)
    }

    /// A permission request of one of our turns: to the SDK, or refused.
    async fn ask(&mut self, data: &Value) -> anyhow::Result<()> {
        let request_id = data["requestId"].as_str().unwrap_or_default().to_owned();
        if self.stdio_permissions && self.input_open {
            let ours = self.request(json!({
                    "subtype": "can_use_tool",
                    "tool_name": data["tool"],
                    "input": data["input"],
                    "tool_use_id": data["toolCallId"],
                    "permission_suggestions": data["rules"].as_array().map(|rules| {
                        vec![json!({
                            "type": "addRules",
                            "rules": rules.iter().filter_map(|r| r.as_str()).map(rule_value).collect::<Vec<_>>(),
                            "behavior": "allow",
                            "destination": "session",
                        })]
                    }).unwrap_or_default(),
                    "blocked_path": null,
            }))?;
            self.asked.insert(ours, Asked { request_id });
            return Ok(());
        }
        let (decision, message, updated) = match &self.h.permission_prompt_command {
            Some(cmd) => {
                let request = json!({
                    "sessionId": self.session,
                    "requestId": request_id,
                    "tool_name": data["tool"],
                    "input": data["input"],
                    "preview": data["preview"],
                });
                crate::headless::ask_command(cmd, &request).await
            }
            None => (PermissionDecision::Deny, Some(NOBODY.to_owned()), None),
        };
        if let Some(session) = self.session.clone()
            && let Err(e) = self
                .conn
                .client
                .permission_respond(session, request_id, decision, message, updated, Some(true))
                .await
        {
            eprintln!("tether: the answer was not taken: {e}");
        }
        Ok(())
    }
}

/// A rule (`Bash(git diff:*)`) as the SDK's permission updates spell it.
fn rule_value(rule: &str) -> Value {
    match rule.split_once('(') {
        Some((tool, rest)) => {
            json!({"toolName": tool, "ruleContent": rest.strip_suffix(')').unwrap_or(rest)})
        }
        None => json!({"toolName": rule}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_content_becomes_the_turns_input() {
        let input = input_of(&json!("hi")).expect("text");
        assert!(matches!(&input[..], [InputItem::Text { text }] if text == "hi"));
        let input = input_of(&json!([
            {"type": "text", "text": "what is this?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
        ]))
        .expect("blocks");
        assert!(matches!(
            &input[1],
            InputItem::Image { data: Some(d), media_type: Some(m), .. } if d == "iVBO" && m == "image/png"
        ));
        let input = input_of(&json!([
            {"type": "document", "title": "notes", "source": {"type": "text", "media_type": "text/plain", "data": "hello"}},
        ]))
        .expect("a document");
        assert!(matches!(
            &input[0],
            InputItem::Document { data, media_type, title: Some(t) } if data == "hello" && media_type == "text/plain" && t == "notes"
        ));
        assert!(input_of(&json!([{"type": "video"}])).is_err());
        assert!(input_of(&Value::Null).is_err());
    }

    #[test]
    fn rules_are_spelled_as_the_sdk_spells_them() {
        assert_eq!(
            rule_value("Bash(git diff:*)"),
            json!({"toolName": "Bash", "ruleContent": "git diff:*"})
        );
        assert_eq!(rule_value("Edit"), json!({"toolName": "Edit"}));
    }
}
