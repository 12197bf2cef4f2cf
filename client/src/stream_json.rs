//! `--output-format stream-json`: tether's events as the messages Claude Code's headless mode
//! writes, one JSON object per line — `system`/`init` first, then an `assistant` message for
//! each model reply (API-shaped: id, model, content blocks, stop reason, usage), a `user`
//! message for each tool result, with `--include-partial-messages` the API's own stream events
//! (`stream_event`), and the `result` object last. Tether's own events stay available as
//! `--output-format events`.
//!
//! Pure: events in, lines out; the headless loop writes them.

use serde_json::{Value, json};
use std::collections::BTreeMap;

/// What the `init` message reports about the session.
pub struct Init<'a> {
    /// The session.
    pub session_id: &'a str,
    /// Its working directory.
    pub cwd: &'a str,
    /// The model id the session uses.
    pub model: &'a str,
    /// Its permission mode (Claude Code's names).
    pub permission_mode: &'a str,
    /// The tools offered to the model.
    pub tools: &'a [String],
    /// The session's slash commands, without the `/`.
    pub slash_commands: &'a [String],
    /// Its skills, by name.
    pub skills: &'a [String],
    /// Its MCP servers: `{name, status}` each.
    pub mcp_servers: &'a [Value],
}

/// Turns one session's events into Claude Code's stream-json messages.
pub struct Translator {
    session_id: String,
    model: String,
    partial: bool,
    /// Whether hook runs become `system` messages.
    hooks: bool,
    /// The `Agent` call whose sub-agent this translates for (its messages'
    /// `parent_tool_use_id`); `None` for the session's own conversation.
    parent: Option<String>,
    /// The sub-agents running now, by their parent call.
    children: BTreeMap<String, Translator>,
    /// The reply being streamed: its id and its completed blocks by index.
    message: Option<(String, BTreeMap<u64, Value>)>,
}

fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// What every message made from a logged event has as its `uuid`'s first part: the rest is the
/// event's seq, so `--resume-session-at` can find the message again.
const SEQ_UUID: &str = "00000000-0000-4000-8000-";

/// The `uuid` of the message made from the event at `seq`.
fn uuid_at(seq: u64) -> String {
    format!("{SEQ_UUID}{seq:012x}")
}

/// The seq a message's `uuid` names, when tether gave it.
pub fn seq_of(uuid: &str) -> Option<u64> {
    u64::from_str_radix(uuid.strip_prefix(SEQ_UUID)?, 16).ok()
}

/// Tether's camelCase token counts as the API's snake_case `usage`.
fn usage(u: &Value) -> Value {
    let n = |k: &str| u[k].as_u64().unwrap_or(0);
    json!({
        "input_tokens": n("inputTokens"),
        "cache_creation_input_tokens": n("cacheCreationInputTokens"),
        "cache_read_input_tokens": n("cacheReadInputTokens"),
        "output_tokens": n("outputTokens"),
    })
}

impl Translator {
    /// A translator for `session_id`, whose replies come from `model`; `partial` adds the
    /// `stream_event` lines.
    pub fn new(session_id: &str, model: &str, partial: bool) -> Self {
        Self {
            session_id: session_id.to_owned(),
            model: model.to_owned(),
            partial,
            hooks: false,
            parent: None,
            children: BTreeMap::new(),
            message: None,
        }
    }

    /// With `on`, each hook's start and end become `system` messages (`--include-hook-events`).
    pub fn with_hook_events(mut self, on: bool) -> Self {
        self.hooks = on;
        self
    }

    /// The `system`/`init` message.
    pub fn init(&self, init: &Init<'_>) -> Value {
        json!({
            "type": "system",
            "subtype": "init",
            "cwd": init.cwd,
            "session_id": init.session_id,
            "tools": init.tools,
            "mcp_servers": init.mcp_servers,
            "model": init.model,
            "permissionMode": init.permission_mode,
            "slash_commands": init.slash_commands,
            "output_style": "default",
            "agents": [],
            "skills": init.skills,
            "plugins": [],
            // The SDKs read the version of the CLI they drive from here.
            "claude_code_version": env!("CARGO_PKG_VERSION"),
            "tether_version": env!("CARGO_PKG_VERSION"),
            // The daemon holds the credentials; which ones, `tether doctor` says.
            "apiKeySource": "tetherd",
            "uuid": uuid(),
        })
    }

    /// Adds the envelope fields every message has.
    fn envelope(&self, mut message: Value) -> Value {
        message["parent_tool_use_id"] = json!(self.parent);
        message["session_id"] = json!(self.session_id);
        message["uuid"] = json!(uuid());
        message
    }

    fn stream_event(&self, event: Value) -> Value {
        self.envelope(json!({"type": "stream_event", "event": event}))
    }

    /// The reply being streamed, started if none is.
    fn current(&mut self, out: &mut Vec<Value>) -> &mut (String, BTreeMap<u64, Value>) {
        if self.message.is_none() {
            let id = format!("msg_{}", uuid::Uuid::new_v4().simple());
            if self.partial {
                let start = json!({
                    "type": "message_start",
                    "message": {
                        "id": id, "type": "message", "role": "assistant", "model": self.model,
                        "content": [], "stop_reason": null, "stop_sequence": null,
                        "usage": usage(&Value::Null),
                    },
                });
                out.push(self.stream_event(start));
            }
            self.message = Some((id, BTreeMap::new()));
        }
        self.message.get_or_insert_with(Default::default)
    }

    /// The messages one tether event (`{type, data, …}` as the daemon sends it) becomes.
    pub fn event(&mut self, raw: &Value) -> Vec<Value> {
        let data = &raw["data"];
        let index = data["index"].as_u64().unwrap_or(0);
        let mut out = Vec::new();
        match raw["type"].as_str().unwrap_or("") {
            "assistant_block_started" => {
                self.current(&mut out);
                if self.partial {
                    let block = data
                        .get("block")
                        .cloned()
                        .unwrap_or_else(|| json!({"type": data["kind"]}));
                    out.push(self.stream_event(json!({
                        "type": "content_block_start", "index": index, "content_block": block,
                    })));
                }
            }
            kind @ ("text_delta" | "thinking_delta" | "tool_input_delta") if self.partial => {
                self.current(&mut out);
                let delta = match kind {
                    "text_delta" => json!({"type": "text_delta", "text": data["text"]}),
                    "thinking_delta" => {
                        json!({"type": "thinking_delta", "thinking": data["thinking"]})
                    }
                    _ => json!({"type": "input_json_delta", "partial_json": data["partialJson"]}),
                };
                out.push(self.stream_event(json!({
                    "type": "content_block_delta", "index": index, "delta": delta,
                })));
            }
            "assistant_block_completed" => {
                let (_, blocks) = self.current(&mut out);
                blocks.insert(index, data["block"].clone());
                if self.partial {
                    out.push(
                        self.stream_event(json!({"type": "content_block_stop", "index": index})),
                    );
                }
            }
            // A failed attempt's blocks are void; the retry streams the reply again.
            "retrying" => {
                if let Some((_, blocks)) = &mut self.message {
                    blocks.clear();
                }
            }
            "assistant_message_completed" => {
                let (id, blocks) = self.message.take().unwrap_or_default();
                let usage = usage(&data["usage"]);
                let model = data["model"].as_str().unwrap_or(&self.model).to_owned();
                if self.partial {
                    out.push(self.stream_event(json!({
                        "type": "message_delta",
                        "delta": {"stop_reason": data["stopReason"], "stop_sequence": null},
                        "usage": usage,
                    })));
                    out.push(self.stream_event(json!({"type": "message_stop"})));
                }
                let message = json!({
                    "id": if id.is_empty() { format!("msg_{}", uuid::Uuid::new_v4().simple()) } else { id },
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": blocks.into_values().collect::<Vec<_>>(),
                    "stop_reason": data["stopReason"],
                    "stop_sequence": null,
                    "usage": usage,
                });
                let mut message = self.envelope(json!({"type": "assistant", "message": message}));
                if let Some(seq) = raw["seq"].as_u64() {
                    message["uuid"] = json!(uuid_at(seq));
                }
                out.push(message);
            }
            // A sub-agent's messages, as Claude Code sends them: with the call that runs it.
            "subagent_event" => {
                let Some(parent) = data["parentToolCallId"].as_str() else {
                    return out;
                };
                let child = self.children.entry(parent.to_owned()).or_insert_with(|| {
                    let mut child = Translator::new(&self.session_id, &self.model, false);
                    child.parent = Some(parent.to_owned());
                    child
                });
                out.extend(child.event(&data["event"]));
            }
            "tool_result" => {
                self.children
                    .remove(data["toolCallId"].as_str().unwrap_or_default());
                let mut block = json!({
                    "tool_use_id": data["toolCallId"],
                    "type": "tool_result",
                    "content": data["content"],
                });
                block["is_error"] = json!(data["isError"] == true);
                let message = json!({"role": "user", "content": [block]});
                // What the tool gave beyond the model's text (an Edit's diff …), else its result.
                let result = match data.get("details").filter(|d| !d.is_null()) {
                    Some(details) => details.clone(),
                    None => data["content"].clone(),
                };
                out.push(self.envelope(
                    json!({"type": "user", "message": message, "tool_use_result": result}),
                ));
            }
            kind @ ("hook_started" | "hook_response") if self.hooks => {
                let mut message = json!({
                    "type": "system",
                    "subtype": kind,
                    "hook_id": data["hookId"],
                    "hook_name": data["hookName"],
                    "hook_event": data["hookEvent"],
                    "session_id": self.session_id,
                    "uuid": uuid(),
                });
                if kind == "hook_response" {
                    // Claude Code's `output`: what the hook printed, both streams.
                    let printed: Vec<&str> = ["stdout", "stderr"]
                        .iter()
                        .filter_map(|k| data[*k].as_str())
                        .filter(|s| !s.is_empty())
                        .collect();
                    message["output"] = json!(printed.join("\n"));
                    for (to, from) in [
                        ("stdout", "stdout"),
                        ("stderr", "stderr"),
                        ("outcome", "outcome"),
                        ("exit_code", "exitCode"),
                    ] {
                        if let Some(v) = data.get(from) {
                            message[to] = v.clone();
                        }
                    }
                }
                out.push(message);
            }
            _ => {}
        }
        out
    }

    /// The final `result` object with its envelope `uuid`.
    pub fn result(&self, mut result: Value) -> Value {
        result["uuid"] = json!(uuid());
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(ty: &str, data: Value) -> Value {
        json!({"type": ty, "data": data, "sessionId": "s1", "seq": 1, "epoch": 1, "ts": "", "turnId": "t1"})
    }

    fn reply() -> Vec<Value> {
        vec![
            ev(
                "assistant_block_started",
                json!({"index": 0, "kind": "text", "block": {"type": "text", "text": ""}}),
            ),
            ev("text_delta", json!({"index": 0, "text": "Let me look."})),
            ev(
                "assistant_block_completed",
                json!({"index": 0, "block": {"type": "text", "text": "Let me look."}}),
            ),
            ev(
                "assistant_block_started",
                json!({"index": 1, "kind": "tool_use", "block": {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}}),
            ),
            ev(
                "tool_input_delta",
                json!({"index": 1, "partialJson": "{\"command\":\"ls\"}"}),
            ),
            ev(
                "assistant_block_completed",
                json!({"index": 1, "block": {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}}),
            ),
            ev(
                "assistant_message_completed",
                json!({"model": "claude-sonnet-5-5", "stopReason": "tool_use", "usage": {"inputTokens": 12, "outputTokens": 7, "cacheCreationInputTokens": 0, "cacheReadInputTokens": 3}}),
            ),
            ev(
                "tool_call",
                json!({"toolCallId": "toolu_1", "name": "Bash", "input": {"command": "ls"}}),
            ),
            ev(
                "tool_result",
                json!({"toolCallId": "toolu_1", "content": "a.txt\n", "isError": false}),
            ),
        ]
    }

    #[test]
    fn a_reply_becomes_an_assistant_message_and_a_tool_result_a_user_message() {
        let mut t = Translator::new("s1", "claude-sonnet-5-5", false);
        let lines: Vec<Value> = reply().iter().flat_map(|e| t.event(e)).collect();
        assert_eq!(lines.len(), 2, "{lines:#?}");
        let a = &lines[0];
        assert_eq!(a["type"], "assistant");
        assert_eq!(a["session_id"], "s1");
        assert_eq!(a["parent_tool_use_id"], Value::Null);
        assert!(a["uuid"].as_str().is_some_and(|u| u.len() == 36));
        let m = &a["message"];
        assert!(m["id"].as_str().is_some_and(|id| id.starts_with("msg_")));
        assert_eq!(m["role"], "assistant");
        assert_eq!(m["model"], "claude-sonnet-5-5");
        assert_eq!(m["stop_reason"], "tool_use");
        assert_eq!(m["content"][0]["text"], "Let me look.");
        assert_eq!(m["content"][1]["input"]["command"], "ls");
        assert_eq!(m["usage"]["input_tokens"], 12);
        assert_eq!(m["usage"]["cache_read_input_tokens"], 3);
        let u = &lines[1];
        assert_eq!(u["type"], "user");
        assert_eq!(u["message"]["role"], "user");
        let block = &u["message"]["content"][0];
        assert_eq!(block["type"], "tool_result");
        assert_eq!(block["tool_use_id"], "toolu_1");
        assert_eq!(block["content"], "a.txt\n");
        assert_eq!(block["is_error"], false);
        assert_eq!(
            u["tool_use_result"], "a.txt\n",
            "what the SDKs read as the tool's result"
        );
    }

    #[test]
    fn partial_messages_follow_the_apis_stream_events() {
        let mut t = Translator::new("s1", "claude-sonnet-5-5", true);
        let kinds: Vec<String> = reply()
            .iter()
            .flat_map(|e| t.event(e))
            .map(|l| match l["type"].as_str() {
                Some("stream_event") => l["event"]["type"].as_str().unwrap_or("?").to_owned(),
                other => other.unwrap_or("?").to_owned(),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
                "assistant",
                "user",
            ]
        );
    }

    #[test]
    fn a_retried_attempt_leaves_nothing_behind() {
        let mut t = Translator::new("s1", "m", false);
        let mut events = vec![
            ev(
                "assistant_block_completed",
                json!({"index": 0, "block": {"type": "text", "text": "void"}}),
            ),
            ev(
                "retrying",
                json!({"attempt": 1, "delayMs": 10, "error": "overloaded", "discarded": true}),
            ),
        ];
        events.extend(reply().into_iter().take(7));
        let lines: Vec<Value> = events.iter().flat_map(|e| t.event(e)).collect();
        assert_eq!(lines.len(), 1);
        assert_eq!(
            lines[0]["message"]["content"].as_array().map(Vec::len),
            Some(2)
        );
        assert_eq!(lines[0]["message"]["content"][0]["text"], "Let me look.");
    }

    #[test]
    fn hook_runs_become_system_messages_only_when_asked() {
        let events = [
            ev(
                "hook_started",
                json!({"hookId": "h1", "hookName": "PreToolUse:Bash", "hookEvent": "PreToolUse"}),
            ),
            ev(
                "hook_response",
                json!({"hookId": "h1", "hookName": "PreToolUse:Bash", "hookEvent": "PreToolUse",
                    "stdout": "", "stderr": "no", "exitCode": 2,
                    "outcome": "error"}),
            ),
        ];
        let mut quiet = Translator::new("s1", "m", false);
        assert!(events.iter().all(|e| quiet.event(e).is_empty()));
        let mut told = Translator::new("s1", "m", false).with_hook_events(true);
        let lines: Vec<Value> = events.iter().flat_map(|e| told.event(e)).collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["subtype"], "hook_started");
        assert_eq!(lines[0]["hook_name"], "PreToolUse:Bash");
        assert_eq!(lines[1]["subtype"], "hook_response");
        assert_eq!(lines[1]["exit_code"], 2);
        assert_eq!(lines[1]["output"], "no");
        assert_eq!(lines[1]["outcome"], "error");
        assert_eq!(lines[1]["hook_id"], lines[0]["hook_id"]);
        assert_eq!(lines[1]["session_id"], "s1");
    }
}
