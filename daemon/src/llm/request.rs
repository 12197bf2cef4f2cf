//! The body of `POST /v1/messages`, and where prompt-caching breakpoints go.
//!
//! Content blocks are kept as JSON values, verbatim as the API sent them, so thinking blocks
//! (with signatures), server tool blocks and anything newer round-trip unchanged.

use serde::Serialize;
use serde_json::{Value, json};
use std::sync::Arc;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The user (and tool results).
    User,
    /// The model.
    Assistant,
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Message {
    /// Its author.
    pub role: Role,
    /// Its content blocks, shared: every request of a conversation reuses the history's copy
    /// (`Arc::make_mut` before a change).
    pub content: Arc<Vec<Value>>,
}

impl Message {
    /// A user message with one text block.
    pub fn user_text(text: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: Arc::new(vec![json!({"type": "text", "text": text.into()})]),
        }
    }
}

/// `cache_control: {type: ephemeral, ttl?}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl: Option<&'static str>,
}

impl CacheControl {
    /// The ephemeral (5-minute) breakpoint.
    pub const EPHEMERAL: Self = Self {
        kind: "ephemeral",
        ttl: None,
    };

    /// A breakpoint with this lifetime.
    pub fn with(ttl: CacheTtl) -> Self {
        match ttl {
            CacheTtl::FiveMinutes => Self::EPHEMERAL,
            CacheTtl::OneHour => Self {
                kind: "ephemeral",
                ttl: Some("1h"),
            },
        }
    }
}

/// How long a cache entry lives: 5 minutes (writes 1.25× input) or an hour (writes 2×).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CacheTtl {
    /// The default.
    #[default]
    FiveMinutes,
    /// For prefixes that must survive a pause.
    OneHour,
}

/// A text block of the system prompt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SystemBlock {
    #[serde(rename = "type")]
    kind: &'static str,
    /// The text.
    pub text: String,
    /// Set on the last block by [`MessagesRequest::with_cache_breakpoints`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<CacheControl>,
}

impl SystemBlock {
    /// A system text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            kind: "text",
            text: text.into(),
            cache_control: None,
        }
    }
}

/// A tool the model may call: one of ours (name, description, schema), or a tool the API runs
/// itself (`type` and its options in `server`, e.g. `web_search_20250305`). The description and
/// schema are shared, so every request of every turn reuses the tool's own copy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolDefinition {
    /// `^[a-zA-Z0-9_-]{1,128}$`
    pub name: String,
    /// What it does, for the model.
    #[serde(skip_serializing_if = "no_text")]
    pub description: Arc<str>,
    /// JSON schema of its input (none for a server tool).
    #[serde(skip_serializing_if = "no_value")]
    pub input_schema: Arc<Value>,
    /// A server tool's `type` and options.
    #[serde(flatten)]
    pub server: serde_json::Map<String, Value>,
    /// Set on the last tool by [`MessagesRequest::with_cache_breakpoints`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<CacheControl>,
}

impl ToolDefinition {
    /// A tool the API runs itself: `options` holds its `type` and settings.
    pub fn server(name: &str, options: serde_json::Map<String, Value>) -> Self {
        Self {
            name: name.to_owned(),
            description: Arc::from(""),
            input_schema: Arc::new(Value::Null),
            server: options,
            cache_control: None,
        }
    }
}

fn no_text(text: &Arc<str>) -> bool {
    text.is_empty()
}

fn no_value(value: &Arc<Value>) -> bool {
    value.is_null()
}

/// Extended thinking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Thinking {
    /// Thinking with a token budget.
    Enabled {
        /// Tokens the model may think for (≥ 1024, < max_tokens).
        budget_tokens: u32,
    },
    /// The model decides how much to think.
    Adaptive {
        /// What thinking blocks carry back.
        #[serde(skip_serializing_if = "Option::is_none")]
        display: Option<ThinkingDisplay>,
    },
}

/// `thinking.display`: what comes back in thinking blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ThinkingDisplay {
    /// A summary of the thinking.
    Summarized,
    /// Empty thinking text (the signature still carries it): the answer starts sooner.
    Omitted,
    /// Only the short updates the model writes between tool calls.
    Updates,
}

/// A streaming Messages API request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MessagesRequest {
    /// Model id (aliases resolved).
    pub model: String,
    /// Output limit.
    pub max_tokens: u32,
    /// System prompt blocks.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub system: Vec<SystemBlock>,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Tools.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolDefinition>,
    /// `{type: auto|any|tool|none, …}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    /// Extended thinking.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<Thinking>,
    /// `{user_id}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// Custom stop sequences.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop_sequences: Vec<String>,
    /// Sampling temperature.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// `{effort}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_config: Option<Value>,
    /// `{edits: […]}`: context editing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_management: Option<Value>,
    /// Always true: tether streams.
    pub stream: bool,
    /// The `anthropic-beta` features this request uses (a header, not part of the body).
    #[serde(skip)]
    pub betas: Vec<String>,
    /// Overloaded answers in a row after which the request gives up instead of retrying on (a
    /// fallback model waits; Claude Code switches after 3). `None`: retried like any error.
    #[serde(skip)]
    pub overloaded_limit: Option<u32>,
}

/// Block types that accept a `cache_control` breakpoint.
const CACHEABLE: &[&str] = &["text", "image", "document", "tool_use", "tool_result"];

/// Whether `message` is a prompt: a user message that answers no tool call, so a turn (or a
/// continuation) starts with it.
fn is_prompt(message: &Message) -> bool {
    message.role == Role::User
        && !message
            .content
            .iter()
            .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
}

/// The messages that get a breakpoint, in order, with their lifetimes: the last message (5
/// minutes, unless it is a prompt under a one-hour prefix) and, under a one-hour prefix, the
/// turn's prompt, or the previous turn's when the last message is the prompt.
fn message_breakpoints(messages: &[Message], prefix_ttl: CacheTtl) -> Vec<(usize, CacheTtl)> {
    let Some(last) = messages.len().checked_sub(1) else {
        return Vec::new();
    };
    if prefix_ttl == CacheTtl::FiveMinutes {
        return vec![(last, CacheTtl::FiveMinutes)];
    }
    let mut prompts = messages
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, m)| is_prompt(m));
    match prompts.next().map(|(i, _)| i) {
        Some(turn) if turn == last => {
            let mut marks: Vec<_> = prompts
                .next()
                .map(|(i, _)| (i, CacheTtl::OneHour))
                .into_iter()
                .collect();
            marks.push((last, CacheTtl::OneHour));
            marks
        }
        Some(turn) => vec![(turn, CacheTtl::OneHour), (last, CacheTtl::FiveMinutes)],
        None => vec![(last, CacheTtl::FiveMinutes)],
    }
}

impl MessagesRequest {
    /// A streaming request with no system prompt, tools or options.
    pub fn new(model: impl Into<String>, max_tokens: u32, messages: Vec<Message>) -> Self {
        Self {
            model: model.into(),
            max_tokens,
            system: Vec::new(),
            messages,
            tools: Vec::new(),
            tool_choice: None,
            thinking: None,
            metadata: None,
            stop_sequences: Vec::new(),
            temperature: None,
            output_config: None,
            context_management: None,
            stream: true,
            betas: Vec::new(),
            overloaded_limit: None,
        }
    }

    /// Places the prompt-caching breakpoints: the last tool and the last system block (the
    /// stable prefix, cached for `prefix_ttl`), and the last cacheable block of the last message
    /// (the moving tail, 5 minutes). With a one-hour prefix the conversation up to the prompt
    /// that started the turn is kept for the hour too, since pauses fall between turns: the
    /// turn's prompt is a breakpoint, and a request that ends with its prompt also marks the
    /// previous turn's, so the next turn reads what the last one wrote however many blocks its
    /// tool calls added. Any other breakpoint in the messages is removed, so a request never
    /// carries more than the API's 4. Longer lifetimes come first in the prefix order (tools,
    /// system, messages), as the API requires.
    pub fn with_cache_breakpoints(mut self, prefix_ttl: CacheTtl) -> Self {
        let prefix = CacheControl::with(prefix_ttl);
        for block in &mut self.system {
            block.cache_control = None;
        }
        if let Some(last) = self.system.last_mut() {
            last.cache_control = Some(prefix);
        }
        for tool in &mut self.tools {
            tool.cache_control = None;
        }
        if let Some(last) = self.tools.last_mut() {
            last.cache_control = Some(prefix);
        }
        // Only a message that carries a breakpoint is copied out of the shared history.
        for message in &mut self.messages {
            if message
                .content
                .iter()
                .any(|b| b.get("cache_control").is_some())
            {
                for block in Arc::make_mut(&mut message.content) {
                    if let Some(obj) = block.as_object_mut() {
                        obj.remove("cache_control");
                    }
                }
            }
        }
        for (index, ttl) in message_breakpoints(&self.messages, prefix_ttl) {
            let target = Arc::make_mut(&mut self.messages[index].content)
                .iter_mut()
                .rev()
                .find(|b| {
                    b.get("type")
                        .and_then(|t| t.as_str())
                        .is_some_and(|t| CACHEABLE.contains(&t))
                });
            if let Some(obj) = target.and_then(|b| b.as_object_mut()) {
                obj.insert("cache_control".into(), json!(CacheControl::with(ttl)));
            }
        }
        self
    }

    /// The `anthropic-beta` header's value: the features this request uses, in order, once
    /// each (empty for the stable API).
    pub fn beta_header(&self) -> String {
        self.betas.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count_breakpoints(v: &Value) -> usize {
        match v {
            Value::Object(m) => {
                usize::from(m.contains_key("cache_control"))
                    + m.values().map(count_breakpoints).sum::<usize>()
            }
            Value::Array(a) => a.iter().map(count_breakpoints).sum(),
            _ => 0,
        }
    }

    #[test]
    fn breakpoints_go_on_the_last_tool_system_block_turn_prompt_and_tail() {
        let mut req = MessagesRequest::new(
            "m",
            100,
            vec![
                Message {
                    role: Role::User,
                    content: vec![
                        json!({"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}),
                    ].into(),
                },
                Message {
                    role: Role::Assistant,
                    content: vec![json!({"type": "text", "text": "b"})].into(),
                },
                Message {
                    role: Role::User,
                    content: vec![
                        json!({"type": "tool_result", "tool_use_id": "t", "content": "x"}),
                        json!({"type": "text", "text": "c"}),
                    ].into(),
                },
            ],
        );
        req.system = vec![SystemBlock::text("one"), SystemBlock::text("two")];
        req.tools = vec![
            ToolDefinition {
                name: "A".into(),
                description: "a".into(),
                input_schema: Arc::new(json!({"type": "object"})),
                server: Default::default(),
                cache_control: None,
            },
            ToolDefinition {
                name: "B".into(),
                description: "b".into(),
                input_schema: Arc::new(json!({"type": "object"})),
                server: Default::default(),
                cache_control: None,
            },
        ];
        let req = req.with_cache_breakpoints(CacheTtl::OneHour);
        let v = serde_json::to_value(&req).expect("serializes");
        assert_eq!(count_breakpoints(&v), 4);
        assert_eq!(
            v["system"][1]["cache_control"],
            json!({"type": "ephemeral", "ttl": "1h"})
        );
        assert_eq!(
            v["tools"][1]["cache_control"],
            json!({"type": "ephemeral", "ttl": "1h"})
        );
        assert_eq!(
            v["messages"][2]["content"][1]["cache_control"],
            json!({"type": "ephemeral"}),
            "the tail keeps 5 minutes"
        );
        assert_eq!(
            v["messages"][0]["content"][0]["cache_control"],
            json!({"type": "ephemeral", "ttl": "1h"}),
            "the turn's prompt keeps the hour"
        );
        assert_eq!(v["stream"], true);
    }

    fn text(role: Role, text: &str) -> Message {
        Message {
            role,
            content: vec![json!({"type": "text", "text": text})].into(),
        }
    }

    fn tool_result(id: &str) -> Message {
        Message {
            role: Role::User,
            content: vec![json!({"type": "tool_result", "tool_use_id": id, "content": "x"})].into(),
        }
    }

    /// Where the breakpoints of `messages` go: (message, ttl) pairs.
    fn marks(messages: Vec<Message>, ttl: CacheTtl) -> Vec<(usize, Value)> {
        let req = MessagesRequest::new("m", 100, messages).with_cache_breakpoints(ttl);
        req.messages
            .iter()
            .enumerate()
            .flat_map(|(i, m)| {
                m.content
                    .iter()
                    .filter_map(move |b| b.get("cache_control").map(|c| (i, c.clone())))
            })
            .collect()
    }

    #[test]
    fn an_hour_long_prefix_keeps_the_conversation_up_to_the_turns_prompt() {
        let hour = json!({"type": "ephemeral", "ttl": "1h"});
        let five = json!({"type": "ephemeral"});
        let assistant_tool = |id: &str| Message {
            role: Role::Assistant,
            content: vec![json!({"type": "tool_use", "id": id, "name": "Bash", "input": {}})]
                .into(),
        };
        // A turn's first request: the previous turn's prompt and this one, both for the hour.
        let first = vec![
            text(Role::User, "one"),
            assistant_tool("a"),
            tool_result("a"),
            text(Role::Assistant, "done"),
            text(Role::User, "two"),
        ];
        assert_eq!(
            marks(first.clone(), CacheTtl::OneHour),
            vec![(0, hour.clone()), (4, hour.clone())]
        );
        // Within the turn: its prompt for the hour, the moving tail for 5 minutes.
        let mut later = first.clone();
        later.extend([assistant_tool("b"), tool_result("b")]);
        assert_eq!(
            marks(later.clone(), CacheTtl::OneHour),
            vec![(4, hour.clone()), (6, five.clone())]
        );
        // The very first prompt has no earlier one.
        assert_eq!(
            marks(vec![text(Role::User, "one")], CacheTtl::OneHour),
            vec![(0, hour)]
        );
        // A five-minute prefix marks only the tail.
        assert_eq!(marks(first, CacheTtl::FiveMinutes), vec![(4, five.clone())]);
        assert_eq!(marks(later, CacheTtl::FiveMinutes), vec![(6, five)]);
        assert!(marks(Vec::new(), CacheTtl::OneHour).is_empty());
    }
}
