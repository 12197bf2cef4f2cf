//! Streaming decode: SSE bytes → API events → the assembled message, with each piece handed to
//! the caller as it arrives.
//!
//! Accumulation follows the official SDK: text and thinking deltas append; `signature_delta`
//! sets the signature; `partial_json` pieces are concatenated and parsed once at
//! `content_block_stop`; `citations_delta` appends a citation; other delta types (e.g.
//! `compaction_delta`) set their fields on the block. `message_delta` sets `stop_reason`,
//! `stop_sequence`, `stop_details` and `usage.output_tokens`, and overwrites `input_tokens`,
//! `cache_creation_input_tokens`, `cache_read_input_tokens` and `server_tool_use` only when they
//! are present and non-null. `ping` and unknown events are ignored. A stream is complete once a
//! `message_delta` carried a `stop_reason`, with or without `message_stop`.

use super::error::LlmError;
use super::models::Usage;
use eventsource_stream::{EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use serde_json::{Map, Value};

/// A piece of the response, as it arrives.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamUpdate {
    /// The message began.
    MessageStarted {
        /// Its id.
        id: String,
        /// The model that answers.
        model: String,
        /// Its usage so far (the input, counted before any output).
        usage: Usage,
    },
    /// A content block began (its type is `block["type"]`).
    BlockStarted {
        /// Its index.
        index: usize,
        /// The block as it started (a tool_use has its id and name here).
        block: Value,
    },
    /// More text.
    TextDelta {
        /// Block index.
        index: usize,
        /// The new text.
        text: String,
    },
    /// More thinking.
    ThinkingDelta {
        /// Block index.
        index: usize,
        /// The new thinking text.
        thinking: String,
    },
    /// More of a tool's input JSON.
    ToolInputDelta {
        /// Block index.
        index: usize,
        /// The new piece of JSON.
        partial_json: String,
    },
    /// A content block is complete.
    BlockCompleted {
        /// Its index.
        index: usize,
        /// The whole block, verbatim as it goes back to the API.
        block: Value,
    },
    /// Stop reason and usage arrived.
    MessageDelta {
        /// Why the model stopped.
        stop_reason: Option<String>,
        /// Usage so far (cumulative).
        usage: Usage,
    },
    /// The attempt failed and will be retried; pieces already streamed by it are void.
    Retrying {
        /// Retry number, from 1.
        attempt: u32,
        /// Wait before it.
        delay: std::time::Duration,
        /// What failed.
        error: LlmError,
        /// Whether this attempt had streamed pieces that must be discarded.
        discarded: bool,
    },
}

/// A tool_use block whose input JSON was cut off or invalid; it must not be executed.
#[derive(Debug, Clone, PartialEq)]
pub struct TruncatedToolInput {
    /// Block index.
    pub index: usize,
    /// The tool_use id.
    pub id: String,
    /// The tool name.
    pub name: String,
    /// The JSON text received.
    pub raw_json: String,
}

/// The complete assistant message.
#[derive(Debug, Clone, PartialEq)]
pub struct AssembledMessage {
    /// The message object, verbatim (id, model, content, stop_reason, usage, …).
    pub message: Value,
    /// Why the model stopped.
    pub stop_reason: Option<String>,
    /// Final usage.
    pub usage: Usage,
    /// Tool calls whose input is unusable.
    pub truncated_tool_inputs: Vec<TruncatedToolInput>,
}

impl AssembledMessage {
    /// The content blocks.
    pub fn content(&self) -> &[Value] {
        self.message
            .get("content")
            .and_then(|c| c.as_array())
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }
}

#[derive(Debug, Default)]
struct BlockState {
    block: Map<String, Value>,
    json: String,
    stopped: bool,
}

/// The most content blocks a message may have: indexes count up from 0, and one far beyond
/// this would have the accumulator allocate for every index below it.
const MAX_BLOCKS: usize = 4096;

/// Assembles one message from its stream events.
#[derive(Debug, Default)]
pub struct Accumulator {
    message: Option<Map<String, Value>>,
    blocks: Vec<Option<BlockState>>,
    truncated: Vec<TruncatedToolInput>,
    stop_reason_seen: bool,
}

fn malformed(what: impl std::fmt::Display) -> LlmError {
    LlmError::Malformed(what.to_string())
}

fn append_str(block: &mut Map<String, Value>, key: &str, piece: &str) {
    match block.get_mut(key) {
        Some(Value::String(s)) => s.push_str(piece),
        _ => {
            block.insert(key.to_owned(), Value::String(piece.to_owned()));
        }
    }
}

impl Accumulator {
    /// A fresh accumulator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one event's `data`; returns the piece to hand on, if any.
    pub fn apply(&mut self, data: &str) -> Result<Option<StreamUpdate>, LlmError> {
        let mut event: Map<String, Value> =
            serde_json::from_str(data).map_err(|e| malformed(format!("{e}: {data}")))?;
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        match kind.as_str() {
            "message_start" => {
                let Some(Value::Object(message)) = event.remove("message") else {
                    return Err(malformed("message_start without a message"));
                };
                let update = StreamUpdate::MessageStarted {
                    id: message
                        .get("id")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                    model: message
                        .get("model")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                    usage: message
                        .get("usage")
                        .map(Usage::from_api)
                        .unwrap_or_default(),
                };
                self.message = Some(message);
                self.blocks.clear();
                self.truncated.clear();
                self.stop_reason_seen = false;
                Ok(Some(update))
            }
            "content_block_start" => {
                let index = index_of(&event)?;
                let Some(Value::Object(block)) = event.remove("content_block") else {
                    return Err(malformed("content_block_start without a block"));
                };
                if index >= MAX_BLOCKS {
                    return Err(malformed(format!("block index {index} out of range")));
                }
                if self.blocks.len() <= index {
                    self.blocks.resize_with(index + 1, || None);
                }
                self.blocks[index] = Some(BlockState {
                    block: block.clone(),
                    ..Default::default()
                });
                Ok(Some(StreamUpdate::BlockStarted {
                    index,
                    block: Value::Object(block),
                }))
            }
            "content_block_delta" => {
                let index = index_of(&event)?;
                let Some(Value::Object(mut delta)) = event.remove("delta") else {
                    return Err(malformed("content_block_delta without a delta"));
                };
                let state = self
                    .blocks
                    .get_mut(index)
                    .and_then(Option::as_mut)
                    .ok_or_else(|| malformed(format!("delta for unknown block {index}")))?;
                let delta_type = delta
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                let text_of = |d: &Map<String, Value>, k: &str| {
                    d.get(k).and_then(Value::as_str).unwrap_or("").to_owned()
                };
                Ok(match delta_type.as_str() {
                    "text_delta" => {
                        let text = text_of(&delta, "text");
                        append_str(&mut state.block, "text", &text);
                        Some(StreamUpdate::TextDelta { index, text })
                    }
                    "thinking_delta" => {
                        let thinking = text_of(&delta, "thinking");
                        append_str(&mut state.block, "thinking", &thinking);
                        Some(StreamUpdate::ThinkingDelta { index, thinking })
                    }
                    "input_json_delta" => {
                        let partial_json = text_of(&delta, "partial_json");
                        state.json.push_str(&partial_json);
                        Some(StreamUpdate::ToolInputDelta {
                            index,
                            partial_json,
                        })
                    }
                    "signature_delta" => {
                        state.block.insert(
                            "signature".into(),
                            Value::String(text_of(&delta, "signature")),
                        );
                        None
                    }
                    "citations_delta" => {
                        let citation = delta.remove("citation").unwrap_or(Value::Null);
                        match state.block.get_mut("citations") {
                            Some(Value::Array(a)) => a.push(citation),
                            _ => {
                                state
                                    .block
                                    .insert("citations".into(), Value::Array(vec![citation]));
                            }
                        }
                        None
                    }
                    _ => {
                        // Newer delta types (e.g. compaction_delta) set their fields.
                        for (k, v) in delta.into_iter().filter(|(k, _)| k != "type") {
                            state.block.insert(k, v);
                        }
                        None
                    }
                })
            }
            "content_block_stop" => {
                let index = index_of(&event)?;
                let state = self
                    .blocks
                    .get_mut(index)
                    .and_then(Option::as_mut)
                    .ok_or_else(|| malformed(format!("stop for unknown block {index}")))?;
                state.stopped = true;
                if !state.json.is_empty() {
                    match serde_json::from_str::<Value>(&state.json) {
                        Ok(input) => {
                            state.block.insert("input".into(), input);
                        }
                        Err(_) => self.truncated.push(truncated(index, state)),
                    }
                }
                Ok(Some(StreamUpdate::BlockCompleted {
                    index,
                    block: Value::Object(state.block.clone()),
                }))
            }
            "message_delta" => {
                let message = self
                    .message
                    .as_mut()
                    .ok_or_else(|| malformed("message_delta before message_start"))?;
                if let Some(Value::Object(delta)) = event.remove("delta") {
                    for key in ["stop_reason", "stop_sequence"] {
                        message.insert(key.into(), delta.get(key).cloned().unwrap_or(Value::Null));
                    }
                    if let Some(details) = delta.get("stop_details") {
                        message.insert("stop_details".into(), details.clone());
                    }
                    self.stop_reason_seen |= delta.get("stop_reason").is_some_and(|r| !r.is_null());
                }
                if let Some(Value::Object(usage)) = event.remove("usage") {
                    let target = message
                        .entry("usage")
                        .or_insert_with(|| Value::Object(Map::new()));
                    if let Value::Object(target) = target {
                        if let Some(out) = usage.get("output_tokens") {
                            target.insert("output_tokens".into(), out.clone());
                        }
                        for key in [
                            "input_tokens",
                            "cache_creation_input_tokens",
                            "cache_read_input_tokens",
                            "server_tool_use",
                        ] {
                            if let Some(v) = usage.get(key).filter(|v| !v.is_null()) {
                                target.insert(key.into(), v.clone());
                            }
                        }
                    }
                }
                Ok(Some(StreamUpdate::MessageDelta {
                    stop_reason: message
                        .get("stop_reason")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    usage: message
                        .get("usage")
                        .map(Usage::from_api)
                        .unwrap_or_default(),
                }))
            }
            "error" => {
                let err = event.get("error");
                let field = |k: &str| {
                    err.and_then(|e| e.get(k))
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned()
                };
                Err(LlmError::Stream {
                    error_type: field("type"),
                    message: field("message"),
                })
            }
            // ping, message_stop, and event types this build does not know.
            _ => Ok(None),
        }
    }

    /// The assembled message; [`LlmError::Truncated`] unless a stop reason arrived.
    pub fn finish(mut self) -> Result<AssembledMessage, LlmError> {
        let Some(mut message) = self.message.take() else {
            return Err(LlmError::Truncated);
        };
        if !self.stop_reason_seen {
            return Err(LlmError::Truncated);
        }
        let mut content = Vec::with_capacity(self.blocks.len());
        for (index, state) in self.blocks.into_iter().enumerate() {
            let Some(state) = state else { continue };
            if !state.stopped && !state.json.is_empty() {
                // Cut off (e.g. by max_tokens) before content_block_stop: even if the text
                // happens to parse, the input is incomplete.
                self.truncated.push(truncated(index, &state));
            }
            content.push(Value::Object(state.block));
        }
        message.insert("content".into(), Value::Array(content));
        let usage = message
            .get("usage")
            .map(Usage::from_api)
            .unwrap_or_default();
        let stop_reason = message
            .get("stop_reason")
            .and_then(Value::as_str)
            .map(str::to_owned);
        Ok(AssembledMessage {
            message: Value::Object(message),
            stop_reason,
            usage,
            truncated_tool_inputs: self.truncated,
        })
    }
}

fn truncated(index: usize, state: &BlockState) -> TruncatedToolInput {
    let field = |k: &str| {
        state
            .block
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    TruncatedToolInput {
        index,
        id: field("id"),
        name: field("name"),
        raw_json: state.json.clone(),
    }
}

fn index_of(event: &Map<String, Value>) -> Result<usize, LlmError> {
    event
        .get("index")
        .and_then(Value::as_u64)
        .map(|i| i as usize)
        .ok_or_else(|| malformed("event without an index"))
}

/// Decodes SSE bytes into the `data` of each event (empty data is skipped).
pub fn decode_stream<S, B>(bytes: S) -> impl Stream<Item = Result<String, LlmError>>
where
    S: Stream<Item = Result<B, LlmError>>,
    B: AsRef<[u8]>,
{
    bytes.eventsource().filter_map(|r| async move {
        match r {
            Ok(ev) if ev.data.is_empty() => None,
            Ok(ev) => Some(Ok(ev.data)),
            Err(EventStreamError::Transport(e)) => Some(Err(e)),
            Err(EventStreamError::Utf8(e)) => Some(Err(malformed(e))),
            Err(EventStreamError::Parser(e)) => Some(Err(malformed(e))),
        }
    })
}

/// Decodes and assembles a whole stream, handing each piece to `on_update`.
pub async fn assemble<S, B>(
    bytes: S,
    mut on_update: impl FnMut(StreamUpdate),
) -> Result<AssembledMessage, LlmError>
where
    S: Stream<Item = Result<B, LlmError>>,
    B: AsRef<[u8]>,
{
    let mut acc = Accumulator::new();
    let events = decode_stream(bytes);
    futures::pin_mut!(events);
    while let Some(data) = events.next().await {
        if let Some(update) = acc.apply(&data?)? {
            on_update(update);
        }
    }
    acc.finish()
}
