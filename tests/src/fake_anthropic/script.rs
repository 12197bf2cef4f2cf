//! Scripts: what the fake answers, step by step, and the SSE it renders for each step.

use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What the fake answers.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Script {
    /// Served in order, one per request that no rule matched.
    #[serde(default)]
    pub responses: Vec<Step>,
    /// Served whenever a request matches, before `responses`.
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// Bill input as the API's prompt cache would ([`super::cache`]); a step's own `usage`
    /// still wins.
    #[serde(default)]
    pub simulate_cache: bool,
}

impl Script {
    /// A script of these responses, in order.
    pub fn of(responses: impl IntoIterator<Item = Step>) -> Self {
        Self {
            responses: responses.into_iter().collect(),
            rules: Vec::new(),
            simulate_cache: false,
        }
    }

    /// Bills input through the simulated prompt cache.
    pub fn with_prompt_cache(mut self) -> Self {
        self.simulate_cache = true;
        self
    }

    /// Answers the daemon's session-title requests (sessions created without a title) with
    /// `title`, so they do not take scripted responses.
    pub fn titling(mut self, title: &str) -> Self {
        self.rules.push(Rule {
            last_user_matches: Some("^Write a title for the coding session".into()),
            has_tool_result: None,
            times: None,
            step: Step::text(title),
        });
        self
    }
}

/// A response for requests that match.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rule {
    /// Regex the last user message's text must match.
    #[serde(default)]
    pub last_user_matches: Option<String>,
    /// Whether the last user message must (or must not) carry tool results.
    #[serde(default)]
    pub has_tool_result: Option<bool>,
    /// How many times the rule may fire (unlimited when absent).
    #[serde(default)]
    pub times: Option<usize>,
    /// What to answer.
    pub step: Step,
}

/// A `tool_use` block for the `toolUses` shorthand.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolUse {
    /// Its id (generated when absent).
    #[serde(default)]
    pub id: Option<String>,
    /// Tool name.
    pub name: String,
    /// Its input.
    pub input: Value,
}

/// An `error` event injected mid-stream.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MidStreamError {
    /// Events sent before it.
    pub after_chunk: usize,
    /// e.g. `overloaded_error`.
    pub error_type: String,
}

/// One response. Exactly one body source should be set: `sseFile`, `sse`, `events`, the
/// `text`/`thinking`/`toolUses` shorthand, or `status` (an HTTP error with `body`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Step {
    /// An SSE file served byte for byte (relative paths are relative to the current directory).
    #[serde(default)]
    pub sse_file: Option<PathBuf>,
    /// Raw SSE text.
    #[serde(default)]
    pub sse: Option<String>,
    /// Event objects, each rendered as `event: <type>` + `data: <json>`.
    #[serde(default)]
    pub events: Option<Vec<Value>>,
    /// Shorthand: a reply with this text.
    #[serde(default)]
    pub text: Option<String>,
    /// Shorthand: a thinking block before the text (with a signature).
    #[serde(default)]
    pub thinking: Option<String>,
    /// Shorthand: tool calls after the text.
    #[serde(default)]
    pub tool_uses: Vec<ToolUse>,
    /// Shorthand: stop reason (default `end_turn`, or `tool_use` with tool calls).
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// Shorthand: fields merged into the usage of `message_start` (e.g. a high `input_tokens`).
    #[serde(default)]
    pub usage: Option<Value>,
    /// HTTP status of an error response.
    #[serde(default)]
    pub status: Option<u16>,
    /// Body of an error response (the API's error envelope by default).
    #[serde(default)]
    pub body: Option<Value>,
    /// Extra response headers (`retry-after`, `x-should-retry`, …).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Fault: an `error` event after N events (the rest is not sent).
    #[serde(default)]
    pub mid_stream_error: Option<MidStreamError>,
    /// Fault: abort the connection after N events.
    #[serde(default)]
    pub cut_after_chunk: Option<usize>,
    /// Fault: send N events, then nothing, forever.
    #[serde(default)]
    pub stall_after_chunk: Option<usize>,
    /// Fault: wait this long before each event.
    #[serde(default)]
    pub chunk_delay_ms: Option<u64>,
    /// With `chunk_delay_ms`: wait only before every Nth event, so a long stream is paced in
    /// bursts rather than slowed to one event per delay.
    #[serde(default)]
    pub chunks_per_delay: Option<usize>,
    /// Replace [`NOW_US`] in each event, as it is written, with the microseconds since the Unix
    /// epoch: a client subtracts it from its own clock for the API-chunk-to-client latency.
    #[serde(default)]
    pub stamp_time: bool,
}

/// The placeholder [`Step::stamp_time`] replaces with the time an event is written.
pub const NOW_US: &str = "@@NOW_US@@";

impl Step {
    /// A complete reply with this text.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Default::default()
        }
    }

    /// A reply streamed as `deltas` text deltas (the `i`th one's text is `text(i)`), written
    /// as fast as the fake can: for benchmarks of the event path.
    pub fn text_deltas(deltas: usize, text: impl Fn(usize) -> String) -> Self {
        let mut events = vec![
            json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 10, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ];
        for i in 0..deltas {
            events.push(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text(i)}}));
        }
        events.push(json!({"type": "content_block_stop", "index": 0}));
        events.push(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": deltas}}));
        Self {
            events: Some(events),
            ..Default::default()
        }
    }

    /// An SSE file served verbatim.
    pub fn sse_file(path: impl Into<PathBuf>) -> Self {
        Self {
            sse_file: Some(path.into()),
            ..Default::default()
        }
    }

    /// An HTTP error with the API's envelope.
    pub fn error(status: u16, error_type: &str, message: &str) -> Self {
        Self {
            status: Some(status),
            body: Some(super::error_body(error_type, message)),
            ..Default::default()
        }
    }

    /// Adds a response header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.insert(name.to_owned(), value.to_owned());
        self
    }

    /// Adds a tool call.
    pub fn tool_use(mut self, name: &str, input: Value) -> Self {
        self.tool_uses.push(ToolUse {
            id: None,
            name: name.to_owned(),
            input,
        });
        self
    }

    /// Adds a thinking block.
    pub fn thinking(mut self, thinking: &str) -> Self {
        self.thinking = Some(thinking.to_owned());
        self
    }

    /// Aborts the connection after `n` events.
    pub fn cut_after(mut self, n: usize) -> Self {
        self.cut_after_chunk = Some(n);
        self
    }

    /// Stalls after `n` events.
    pub fn stall_after(mut self, n: usize) -> Self {
        self.stall_after_chunk = Some(n);
        self
    }

    /// Sends an `error` event of `error_type` after `n` events.
    pub fn mid_stream_error(mut self, n: usize, error_type: &str) -> Self {
        self.mid_stream_error = Some(MidStreamError {
            after_chunk: n,
            error_type: error_type.to_owned(),
        });
        self
    }

    /// The SSE events of this step, each a complete chunk of text.
    /// The SSE events of this step; `billed` is the input usage the prompt cache computed, used
    /// unless the step sets its own.
    pub fn events(
        &self,
        model: &str,
        serial: u64,
        billed: Option<&Value>,
    ) -> anyhow::Result<Vec<String>> {
        if let Some(path) = &self.sse_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
            return Ok(split_sse(&text));
        }
        if let Some(text) = &self.sse {
            return Ok(split_sse(text));
        }
        if let Some(events) = &self.events {
            return Ok(events.iter().map(render).collect());
        }
        Ok(self
            .shorthand(model, serial, billed)
            .iter()
            .map(render)
            .collect())
    }

    fn shorthand(&self, model: &str, serial: u64, billed: Option<&Value>) -> Vec<Value> {
        let mut usage = json!({"input_tokens": 25, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 1});
        if let (Some(Value::Object(b)), Value::Object(u)) = (billed, &mut usage) {
            for (k, v) in b {
                u.insert(k.clone(), v.clone());
            }
        }
        if let (Some(Value::Object(extra)), Value::Object(u)) = (&self.usage, &mut usage) {
            for (k, v) in extra {
                u.insert(k.clone(), v.clone());
            }
        }
        let mut events = vec![json!({"type": "message_start", "message": {
            "id": format!("msg_fake_{serial}"), "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage}})];
        let mut index = 0;
        let mut output_tokens = 0;
        if let Some(thinking) = &self.thinking {
            events.push(json!({"type": "content_block_start", "index": index, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}));
            events.push(json!({"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": thinking}}));
            events.push(json!({"type": "content_block_delta", "index": index, "delta": {"type": "signature_delta", "signature": format!("sig_fake_{serial}_{index}")}}));
            events.push(json!({"type": "content_block_stop", "index": index}));
            output_tokens += thinking.split_whitespace().count();
            index += 1;
        }
        if let Some(text) = self.text.as_ref().filter(|t| !t.is_empty()) {
            events.push(json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}));
            for piece in split_pieces(text, 3) {
                events.push(json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}));
            }
            events.push(json!({"type": "content_block_stop", "index": index}));
            output_tokens += text.split_whitespace().count();
            index += 1;
        }
        for (n, tool) in self.tool_uses.iter().enumerate() {
            let id = tool
                .id
                .clone()
                .unwrap_or_else(|| format!("toolu_fake_{serial}_{n}"));
            events.push(json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": id, "name": tool.name, "input": {}}}));
            events.push(json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": ""}}));
            for piece in split_pieces(&tool.input.to_string(), 2) {
                events.push(json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}}));
            }
            events.push(json!({"type": "content_block_stop", "index": index}));
            output_tokens += 10;
            index += 1;
        }
        let stop_reason = self.stop_reason.clone().unwrap_or_else(|| {
            if self.tool_uses.is_empty() {
                "end_turn"
            } else {
                "tool_use"
            }
            .to_owned()
        });
        events.push(json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": output_tokens.max(1)}}));
        events.push(json!({"type": "message_stop"}));
        events
    }
}

fn render(event: &Value) -> String {
    let kind = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    format!("event: {kind}\ndata: {event}\n\n")
}

/// Splits `text` into at most `n` pieces on character boundaries.
fn split_pieces(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(n).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// Splits SSE text into events (each with its terminating blank line; an unterminated tail is
/// kept as the last chunk, byte for byte).
pub fn split_sse(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("\n\n") {
        out.push(rest[..at + 2].to_owned());
        rest = &rest[at + 2..];
    }
    if !rest.is_empty() {
        out.push(rest.to_owned());
    }
    out
}

fn data_of(chunk: &str) -> Option<Value> {
    let data: Vec<&str> = chunk
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect();
    if data.is_empty() {
        return None;
    }
    serde_json::from_str(&data.join("\n")).ok()
}

/// `(signature, thinking text)` of every thinking block in the events.
pub fn thinking_signatures(events: &[String]) -> Vec<(String, String)> {
    let Some(message) = assemble(events) else {
        return Vec::new();
    };
    message["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "thinking")
        .filter_map(|b| {
            Some((
                b["signature"].as_str()?.to_owned(),
                b["thinking"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// A simple assembly of the events into a message (for non-streaming replies).
pub fn assemble(events: &[String]) -> Option<Value> {
    let mut message: Option<Value> = None;
    let mut blocks: Vec<Value> = Vec::new();
    let mut json_parts: Vec<String> = Vec::new();
    for ev in events.iter().filter_map(|c| data_of(c)) {
        match ev["type"].as_str()? {
            "message_start" => message = Some(ev["message"].clone()),
            "content_block_start" => {
                blocks.push(ev["content_block"].clone());
                json_parts.push(String::new());
            }
            "content_block_delta" => {
                let i = ev["index"].as_u64()? as usize;
                let (block, json) = (blocks.get_mut(i)?, json_parts.get_mut(i)?);
                let d = &ev["delta"];
                match d["type"].as_str()? {
                    "text_delta" => {
                        block["text"] = json!(format!(
                            "{}{}",
                            block["text"].as_str()?,
                            d["text"].as_str()?
                        ))
                    }
                    "thinking_delta" => {
                        block["thinking"] = json!(format!(
                            "{}{}",
                            block["thinking"].as_str()?,
                            d["thinking"].as_str()?
                        ))
                    }
                    "signature_delta" => block["signature"] = d["signature"].clone(),
                    "input_json_delta" => json.push_str(d["partial_json"].as_str()?),
                    _ => {}
                }
            }
            "content_block_stop" => {
                let i = ev["index"].as_u64()? as usize;
                if !json_parts.get(i)?.is_empty() {
                    blocks[i]["input"] = serde_json::from_str(&json_parts[i]).ok()?;
                }
            }
            "message_delta" => {
                let m = message.as_mut()?;
                m["stop_reason"] = ev["delta"]["stop_reason"].clone();
                m["usage"]["output_tokens"] = ev["usage"]["output_tokens"].clone();
            }
            _ => {}
        }
    }
    let mut m = message?;
    m["content"] = Value::Array(blocks);
    Some(m)
}
