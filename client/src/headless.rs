//! `tether -p`: headless turns for scripts. Prompts come from the argument (or stdin), or one
//! per line of stdin with `--input-format stream-json`; output is the answer (`text`), one
//! result object (`json`), Claude Code's messages then a `result` line (`stream-json`, see
//! `stream_json.rs`), or every daemon event then a `result` line (`events`). Exit 0
//! when the last turn ended with `end_turn`, 1 with a message otherwise. Nobody can answer a
//! permission request here: it follows the mode and rules, and an `ask` is denied — or
//! answered by `--permission-prompt-command`.

use crate::connection;
use crate::stream_json::{Init, Translator};
use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tether_proto::{
    ClientKind, InputItem, NoticeLevel, PermissionDecision, Role, SessionId, Since, StopReason,
    TetherRpcClient, TurnOptions,
};

/// What `tether -p` runs.
#[derive(Debug, Clone, Default)]
pub struct Headless {
    /// The prompt (`None`: read from stdin).
    pub prompt: Option<String>,
    /// `text`, `json`, `stream-json` or `events`.
    pub format: String,
    /// `text` or `stream-json`.
    pub input_format: String,
    /// Permission mode of a new session.
    pub permission_mode: Option<String>,
    /// Model of a new session.
    pub model: Option<String>,
    /// Continue this session instead of creating one.
    pub session: Option<SessionId>,
    /// What each turn may do.
    pub options: TurnOptions,
    /// A command that answers permission requests (JSON in, JSON out).
    pub permission_prompt_command: Option<String>,
    /// Title of a new session (`-n`); else the prompt's first line.
    pub name: Option<String>,
    /// With stream-json: the API's stream events too.
    pub include_partial_messages: bool,
    /// With stream-json: a `system` message as each hook starts and ends.
    pub include_hook_events: bool,
    /// Cancel the turn once the run has cost more than this (dollars).
    pub max_budget_usd: Option<f64>,
    /// The new session's id (`--session-id`, a UUID).
    pub session_id: Option<SessionId>,
}

/// The first line of a prompt, shortened to a title.
pub(crate) fn title_of(prompt: &str) -> String {
    let line = prompt
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("headless");
    if line.chars().count() <= 60 {
        return line.to_owned();
    }
    let cut: String = line.chars().take(59).collect();
    format!("{}…", cut.trim_end())
}

/// One prompt of a `stream-json` input line: `{"type":"user","message":{"content": "…" or
/// [{"type":"text","text":"…"}]}}` or `{"type":"user","text":"…"}`.
fn prompt_of(line: &str) -> anyhow::Result<Option<String>> {
    if line.trim().is_empty() {
        return Ok(None);
    }
    let v: Value =
        serde_json::from_str(line).with_context(|| format!("input line is not JSON: {line}"))?;
    if v["type"] != "user" {
        bail!("input lines must have \"type\": \"user\": {line}");
    }
    let content = if v["message"].is_object() {
        &v["message"]["content"]
    } else {
        &v["text"]
    };
    let text = match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => bail!("input line has no text: {line}"),
    };
    Ok(Some(text))
}

/// Runs the permission prompt command on one request; its stdout says allow or deny.
pub(crate) async fn ask_command(
    command: &str,
    request: &Value,
) -> (PermissionDecision, Option<String>, Option<Value>) {
    let run = async {
        let mut child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("cannot start it")?;
        if let Some(mut stdin) = child.stdin.take() {
            use tokio::io::AsyncWriteExt;
            stdin.write_all(request.to_string().as_bytes()).await?;
        }
        let out = child.wait_with_output().await?;
        let answer: Value = serde_json::from_slice(&out.stdout)
            .with_context(|| format!("it printed no JSON ({})", out.status))?;
        anyhow::Ok(answer)
    };
    match tokio::time::timeout(Duration::from_secs(60), run).await {
        // `updatedInput` (an AskUserQuestion's `answers`, for one) goes with the answer.
        Ok(Ok(a)) if a["behavior"] == "allow" => (
            PermissionDecision::AllowOnce,
            None,
            a.get("updatedInput").filter(|u| u.is_object()).cloned(),
        ),
        Ok(Ok(a)) => (
            PermissionDecision::Deny,
            Some(
                a["message"]
                    .as_str()
                    .unwrap_or("denied by the permission prompt command")
                    .to_owned(),
            ),
            None,
        ),
        Ok(Err(e)) => (
            PermissionDecision::Deny,
            Some(format!("the permission prompt command failed: {e:#}")),
            None,
        ),
        Err(_) => (
            PermissionDecision::Deny,
            Some("the permission prompt command did not answer within 60 s".into()),
            None,
        ),
    }
}

/// The tool a `--json-schema` run answers with.
const STRUCTURED_OUTPUT: &str = "StructuredOutput";

/// What the turns added up to.
#[derive(Default)]
pub(crate) struct Totals {
    result: String,
    /// What a daemon command said in this turn (its info notices).
    said: String,
    /// The text of the reply being read.
    current: String,
    /// The model that answered last.
    model: Option<String>,
    stop_reason: Option<StopReason>,
    error: Option<Value>,
    input: u64,
    output: u64,
    cache_read: u64,
    cache_creation: u64,
    cost: f64,
    /// A turn's price was unknown: the total is too.
    cost_unknown: bool,
    num_turns: u64,
    /// The calls refused, as Claude Code lists them.
    denials: Vec<Value>,
    /// The permission requests still open, by id.
    asked: std::collections::HashMap<String, Value>,
    /// Milliseconds the turns waited on the model's API.
    api_ms: u64,
    /// The run was stopped for going over `--max-budget-usd`.
    over_budget: bool,
    /// `--json-schema`: the StructuredOutput calls by id, and the accepted answer.
    structured_calls: std::collections::HashMap<String, Value>,
    structured: Option<Value>,
}

impl Totals {
    /// Takes in one event of a turn (`kind`, `data`): the answer's text, the calls, the
    /// structured output; `true` once the turn ended.
    pub(crate) fn take(&mut self, kind: &str, data: &Value) -> bool {
        match kind {
            "assistant_block_completed" => {
                if let Some(t) = data["block"]["text"].as_str() {
                    self.current.push_str(t);
                }
            }
            "retrying" => self.current.clear(),
            "permission_requested" => {
                let id = data["requestId"].as_str().unwrap_or_default().to_owned();
                self.asked.insert(id, data.clone());
            }
            // Whoever refused it: this client, another, a hook or the policy.
            "permission_resolved" => {
                let asked = self
                    .asked
                    .remove(data["requestId"].as_str().unwrap_or_default());
                if let Some(asked) = asked.filter(|_| data["decision"] == "deny") {
                    self.denied(&asked);
                }
            }
            "assistant_message_completed" => {
                self.num_turns += 1;
                if let Some(model) = data["model"].as_str() {
                    self.model = Some(model.to_owned());
                }
                if !self.current.trim().is_empty() {
                    self.result = std::mem::take(&mut self.current);
                }
            }
            "tool_call" if data["name"] == STRUCTURED_OUTPUT => {
                if let Some(id) = data["toolCallId"].as_str() {
                    self.structured_calls
                        .insert(id.to_owned(), data["input"].clone());
                }
            }
            // The answer is a StructuredOutput call the daemon accepted (it matched).
            "tool_result" if data["isError"] == false => {
                if let Some(answer) = data["toolCallId"]
                    .as_str()
                    .and_then(|id| self.structured_calls.remove(id))
                {
                    self.structured = Some(answer);
                }
            }
            // A daemon command (`/cost`, `/context` …) answers in notices: they are its result.
            "notice" if data["level"] == NoticeLevel::Info.as_str() => {
                if let Some(m) = data["message"].as_str() {
                    if !self.said.is_empty() {
                        self.said.push('\n');
                    }
                    self.said.push_str(m);
                }
            }
            "turn_ended" => {
                if data["stopReason"] == StopReason::Command.as_str() && self.current.is_empty() {
                    self.result = std::mem::take(&mut self.said);
                }
                self.said.clear();
                self.add_turn(data);
                return true;
            }
            _ => {}
        }
        false
    }

    /// A call refused for want of an answer, as Claude Code lists it.
    fn denied(&mut self, data: &Value) {
        self.denials.push(json!({
            "tool_name": data["tool"],
            "tool_use_id": data["toolCallId"],
            "tool_input": data["input"],
        }));
    }

    /// Whether the run ended as it should.
    pub(crate) fn succeeded(&self) -> bool {
        self.ok()
    }

    /// Why the run failed, for stderr.
    pub(crate) fn why(&self) -> String {
        self.error
            .as_ref()
            .and_then(|e| e["message"].as_str().map(str::to_owned))
            .unwrap_or_else(|| {
                let why = self.stop_reason.as_ref().map_or("", StopReason::as_str);
                format!("the turn stopped: {why}")
            })
    }

    fn add_turn(&mut self, data: &Value) {
        let u = &data["usage"];
        self.input += u["inputTokens"].as_u64().unwrap_or(0);
        self.output += u["outputTokens"].as_u64().unwrap_or(0);
        self.cache_read += u["cacheReadInputTokens"].as_u64().unwrap_or(0);
        self.cache_creation += u["cacheCreationInputTokens"].as_u64().unwrap_or(0);
        match data["costUsd"].as_f64() {
            Some(c) => self.cost += c,
            None => self.cost_unknown = true,
        }
        self.stop_reason = data["stopReason"].as_str().map(StopReason::parse);
        self.api_ms += data["apiMs"].as_u64().unwrap_or(0);
        self.error = data.get("error").cloned();
    }

    fn ok(&self) -> bool {
        !self.over_budget && self.stop_reason.as_ref().is_some_and(StopReason::is_normal)
    }

    /// The result object in Claude Code's shape (its field names, its `subtype`s), plus
    /// tether's `error` (code, message, retryable) when the run failed.
    pub(crate) fn result(&self, session: &SessionId, started: Instant) -> Value {
        let subtype = match (self.ok(), &self.stop_reason) {
            (true, _) => "success",
            (false, _) if self.over_budget => "error_max_budget_usd",
            (false, Some(StopReason::MaxTurns)) => "error_max_turns",
            (false, _) => "error_during_execution",
        };
        let mut result = json!({
            "type": "result",
            "subtype": subtype,
            "is_error": !self.ok(),
            "duration_ms": started.elapsed().as_millis() as u64,
            "duration_api_ms": self.api_ms,
            "num_turns": self.num_turns,
            "result": self.result,
            "stop_reason": self.stop_reason.as_ref().map_or("", StopReason::as_str),
            "session_id": session,
            "total_cost_usd": (!self.cost_unknown).then_some(self.cost),
            "usage": {
                "input_tokens": self.input,
                "cache_creation_input_tokens": self.cache_creation,
                "cache_read_input_tokens": self.cache_read,
                "output_tokens": self.output,
            },
            "permission_denials": self.denials,
            "terminal_reason": match &self.stop_reason {
                _ if self.over_budget => "budget_exceeded",
                Some(StopReason::MaxTurns) => "max_turns",
                Some(StopReason::Cancelled) => "aborted_streaming",
                Some(StopReason::ModelContextWindowExceeded) => "prompt_too_long",
                Some(r) if r.is_normal() => "completed",
                _ => "model_error",
            },
        });
        // Per model, as the SDKs read it (`modelUsage`).
        if let Some(model) = &self.model {
            result["modelUsage"] = json!({ model: {
                "inputTokens": self.input,
                "outputTokens": self.output,
                "cacheReadInputTokens": self.cache_read,
                "cacheCreationInputTokens": self.cache_creation,
                "webSearchRequests": 0,
                "costUSD": (!self.cost_unknown).then_some(self.cost),
            }});
        } else {
            result["modelUsage"] = json!({});
        }
        if let Some(answer) = &self.structured {
            result["structured_output"] = answer.clone();
        }
        if let Some(e) = self.error.as_ref().filter(|e| !e.is_null()) {
            result["error"] = e.clone();
        }
        result
    }
}

/// An MCP server's state as the SDKs read it: connected, failed, pending (not started yet) …
pub(crate) fn mcp_status(state: &str) -> &str {
    match state {
        "starting" | "idle" => "pending",
        other => other,
    }
}

/// Claude Code's stream-json translator for `session`, and its `init` message.
pub(crate) async fn stream_json_for(
    conn: &connection::Connection,
    session: &SessionId,
    h: &Headless,
) -> anyhow::Result<(Translator, Value)> {
    let snapshot = conn.client.session_get(session.clone()).await?;
    let models = conn.client.models_list().await?;
    let status = conn.client.daemon_status().await?;
    let listed = conn.client.session_commands(session.clone()).await?;
    let skills: Vec<String> = listed
        .iter()
        .filter(|c| c.source.ends_with("skill"))
        .map(|c| c.name.clone())
        .collect();
    let commands: Vec<String> = listed.into_iter().map(|c| c.name).collect();
    // The Skill tool is offered only when there are skills to load.
    let tools: Vec<String> = status
        .tools
        .iter()
        .filter(|t| *t != "Skill" || !skills.is_empty())
        .cloned()
        .collect();
    let summary = &snapshot.summary;
    let model = models
        .aliases
        .iter()
        .find(|a| a.alias == summary.model)
        .map_or(summary.model.clone(), |a| a.model.clone());
    let mcp_servers: Vec<Value> = match conn.client.mcp_list(summary.cwd.clone()).await {
        Ok(list) => list
            .servers
            .iter()
            .map(|s| json!({"name": s.name, "status": mcp_status(&s.state)}))
            .collect(),
        Err(_) => Vec::new(),
    };
    let translator = Translator::new(&session.0, &model, h.include_partial_messages)
        .with_hook_events(h.include_hook_events);
    let init = translator.init(&Init {
        mcp_servers: &mcp_servers,
        session_id: &session.0,
        cwd: &summary.cwd,
        model: &model,
        permission_mode: summary.permission_mode.as_str(),
        tools: &tools,
        slash_commands: &commands,
        skills: &skills,
    });
    Ok((translator, init))
}

/// `tether -p`.
pub async fn run(socket: &Path, h: Headless) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let format = match h.format.as_str() {
        f @ ("text" | "json" | "stream-json" | "events") => f.to_owned(),
        other => bail!("unknown output format {other:?} (use text, json, stream-json or events)"),
    };
    let mut prompts: Box<dyn Iterator<Item = anyhow::Result<String>>> =
        match (h.input_format.as_str(), &h.prompt) {
            ("stream-json", _) => Box::new(
                std::io::stdin()
                    .lock()
                    .lines()
                    .map(|l| prompt_of(&l?))
                    .filter_map(Result::transpose)
                    .collect::<Vec<_>>()
                    .into_iter(),
            ),
            ("text", Some(p)) => Box::new(std::iter::once(Ok(p.clone()))),
            ("text", None) => {
                let mut all = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut all)?;
                if all.trim().is_empty() {
                    bail!("no prompt: give one after -p or on stdin");
                }
                Box::new(std::iter::once(Ok(all)))
            }
            (other, _) => bail!("unknown input format {other:?} (use text or stream-json)"),
        };
    let mode = crate::commands::parse_mode(h.permission_mode.clone())?;
    let cwd = crate::remote::work_dir().context("cannot read the current directory")?;
    let conn = connection::connect(socket, true, ClientKind::Script).await?;
    connection::note_ignored_env(&conn, h.model.is_some()).await;
    crate::trust::report_untrusted(&conn, &cwd).await?;
    let Some(first) = prompts.next().transpose()? else {
        bail!("no prompt on stdin");
    };
    let session = match h.session.clone() {
        Some(id) => id,
        // Headless sessions are titled by their prompt: no extra model call for a script.
        None => {
            conn.client
                .session_new(
                    cwd,
                    Some(h.name.clone().unwrap_or_else(|| title_of(&first))),
                    h.model.clone(),
                    mode,
                    h.session_id.clone(),
                )
                .await?
                .session_id
        }
    };
    let mut sub = connection::subscribe(&conn, &session, Role::Controller, Since::Head).await?;
    let mut out = std::io::stdout().lock();
    let mut claude = None;
    if format == "stream-json" {
        let translator = stream_json_for(&conn, &session, &h).await?;
        writeln!(out, "{}", translator.1)?;
        claude = Some(translator.0);
    }
    let mut totals = Totals::default();
    // What the session had cost before this run (a resumed one has a past).
    let spent_before = match h.max_budget_usd {
        Some(_) => conn
            .client
            .session_get(session.clone())
            .await?
            .cost_usd
            .unwrap_or(0.0),
        None => 0.0,
    };
    let mut next = Some(first);
    while let Some(prompt) = next.take() {
        let turn = conn
            .client
            .turn_start(
                session.clone(),
                vec![InputItem::Text { text: prompt }],
                None,
                Some(tether_proto::BusyMode::Queue),
                Some(h.options.clone()),
            )
            .await?;
        let turn = Value::String(turn.turn_id.0);
        loop {
            let raw = match sub.next().await {
                None => bail!("the connection to tetherd was lost"),
                Some(Err(e)) => bail!("bad event from tetherd: {e}"),
                Some(Ok(raw)) => raw,
            };
            if format == "events" {
                writeln!(out, "{raw}")?;
                out.flush()?;
            } else if let Some(t) = claude.as_mut().filter(|_| raw["turnId"] == turn) {
                for line in t.event(&raw) {
                    writeln!(out, "{line}")?;
                }
                out.flush()?;
            }
            if format != "events"
                && raw["type"] == "notice"
                && raw["data"]["level"] == NoticeLevel::Warning.as_str()
            {
                // (readers of `events` see it in the stream.)
                eprintln!(
                    "tether: warning: {}",
                    raw["data"]["message"].as_str().unwrap_or_default()
                );
            }
            // The session could not save its events: the turn is over, and nothing more will
            // be logged for it (the error has no turn and no seq).
            if raw["type"] == "error" && raw["data"]["code"] == "storage_failed" {
                bail!(
                    "{}",
                    raw["data"]["message"]
                        .as_str()
                        .unwrap_or("the session could not save its events")
                );
            }
            if raw["turnId"] != turn {
                continue;
            }
            let data = &raw["data"];
            let kind = raw["type"].as_str().unwrap_or("");
            let denied = totals.denials.len();
            if totals.take(kind, data) {
                break;
            }
            // A refusal is told once it is final (a PermissionRequest hook may allow first).
            if let Some(call) = totals.denials.get(denied)
                && format != "events"
            {
                eprintln!(
                    "tether: denied {}: {}",
                    call["tool_name"].as_str().unwrap_or("a tool call"),
                    data["message"].as_str().unwrap_or("refused")
                );
            }
            match kind {
                "text_delta" if format == "text" => {
                    write!(out, "{}", data["text"].as_str().unwrap_or(""))?;
                    out.flush()?;
                }
                "retrying" if data["discarded"] == true && format == "text" => {
                    writeln!(out, "\n[retrying: the partial answer above is void]")?;
                }
                "permission_requested" => {
                    let request_id = data["requestId"].as_str().unwrap_or_default().to_owned();
                    let (decision, message, updated) = match &h.permission_prompt_command {
                        Some(cmd) => {
                            let request = json!({
                                "sessionId": session,
                                "requestId": request_id,
                                "tool_name": data["tool"],
                                "input": data["input"],
                                "preview": data["preview"],
                            });
                            ask_command(cmd, &request).await
                        }
                        None if data["tool"] == "AskUserQuestion" => (
                            PermissionDecision::Deny,
                            Some("headless run: nobody can answer questions; decide yourself and say what you assumed (or answer through --permission-prompt-command)".into()),
                            None,
                        ),
                        None => (
                            PermissionDecision::Deny,
                            Some("headless run: nobody can approve this call; allow it with --allowedTools, a permission rule or --permission-mode".into()),
                            None,
                        ),
                    };
                    conn.client
                        .permission_respond(
                            session.clone(),
                            request_id,
                            decision,
                            message,
                            updated,
                            Some(true),
                        )
                        .await?;
                }
                "usage_updated" if !totals.over_budget => {
                    let spent = data["sessionCostUsd"].as_f64().unwrap_or(0.0) - spent_before;
                    if let Some(budget) = h.max_budget_usd.filter(|b| spent > *b) {
                        totals.over_budget = true;
                        eprintln!(
                            "tether: this run has cost ${spent:.4}, over --max-budget-usd {budget}; stopping"
                        );
                        conn.client.turn_cancel(session.clone()).await?;
                    }
                }
                _ => {}
            }
        }
        // A command's answer came in notices, not as streamed text.
        if format == "text" && totals.stop_reason == Some(StopReason::Command) {
            write!(out, "{}", totals.result)?;
        }
        if format == "text" && !totals.result.ends_with('\n') {
            writeln!(out)?;
        }
        if !totals.ok() {
            break;
        }
        next = prompts.next().transpose()?;
    }
    let result = totals.result(&session, started);
    match (format.as_str(), &claude) {
        (_, Some(t)) => writeln!(out, "{}", t.result(result))?,
        ("json" | "events", _) => {
            let mut result = result;
            result["uuid"] = serde_json::json!(uuid::Uuid::new_v4().to_string());
            writeln!(out, "{result}")?
        }
        _ => {}
    }
    out.flush()?;
    if totals.ok() {
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("tether: {}", totals.why());
    Ok(ExitCode::FAILURE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_json_input_lines() {
        assert_eq!(
            prompt_of(r#"{"type":"user","message":{"role":"user","content":"hi"}}"#)
                .expect("valid")
                .as_deref(),
            Some("hi")
        );
        assert_eq!(
            prompt_of(r#"{"type":"user","message":{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}"#)
                .expect("valid")
                .as_deref(),
            Some("a\nb")
        );
        assert_eq!(prompt_of("  ").expect("blank"), None);
        assert!(prompt_of(r#"{"type":"assistant"}"#).is_err());
        assert!(prompt_of("not json").is_err());
    }
}
