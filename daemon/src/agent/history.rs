//! The API message history, derived from a session's events.
//!
//! Invariant: one derivation, used both when a session loads (replaying its log) and while a turn
//! runs (applying each event as it is emitted), so the history can never disagree with what
//! clients saw. [`History::messages`] is always valid for the API: roles alternate starting with
//! the user, every `tool_use` is answered by a `tool_result` at the start of the next message (a
//! missing one is filled with an error result), no empty text blocks.

use crate::llm::{Message, Role};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::borrow::Cow;
use std::sync::Arc;
use tether_proto::{EventKind, StopReason};

/// How a summary opens the history after compaction.
pub const SUMMARY_PREFIX: &str = "This session continues an earlier conversation that was summarized to free context. \
The summary:\n\n";

/// What the next prompt is prefixed with after the user interrupted the model.
pub const INTERRUPTED_BY_USER: &str = "[Request interrupted by user]";

/// What the next prompt is prefixed with after a daemon stop cut the model off.
pub const INTERRUPTED_BY_RESTART: &str = "[Request interrupted: the agent stopped and restarted]";

/// The code of the `error` a failed compaction logs (the history counts them in a row).
pub const COMPACTION_FAILED: &str = "compaction_failed";

/// What a tool result says when the log has none for a call (a crash or cancel before it).
pub const MISSING_RESULT: &str = "interrupted: no result was recorded for this tool call";

/// A session's conversation as the model sees it (the session's totals and permission history
/// are its ledger, kept by the session).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct History {
    messages: Vec<Message>,
    /// Blocks of the reply being streamed; committed by `assistant_message_completed`.
    pending: Vec<Value>,
    /// Input tokens of the last model request (how full the context is).
    pub last_context_tokens: u64,
    /// Compactions that failed in a row.
    pub compaction_failures: u32,
    /// The session's prompt prefix, once captured (`system_prompt`).
    pub prefix: Option<Prefix>,
    /// What the conversation has told the model of the parts that change: the prefix's, then
    /// each update's; back to the prefix's when the conversation is cleared or compacted.
    pub told: Told,
    /// The last turn was interrupted: the next prompt says so first.
    interrupted: Option<Cow<'static, str>>,
    /// What happened since the last prompt without the model (a background shell ended, a
    /// `!command` ran): the next prompt says it first.
    #[serde(default)]
    notes: Vec<String>,
    /// Where the conversation stood as each turn began, for a rewind to it; emptied by
    /// `/clear` and compaction, which leave nothing before them to go back to.
    #[serde(default)]
    marks: Vec<Mark>,
    /// Turns started, numbered as a rewind numbers them.
    #[serde(default)]
    turns_started: u64,
}

/// The conversation as one turn began.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Mark {
    turn: u64,
    messages: usize,
    /// How many blocks the last message had (the turn's prompt may have joined it).
    last_blocks: Option<usize>,
    interrupted: Option<Cow<'static, str>>,
    notes: Vec<String>,
    told: Told,
    context_tokens: u64,
}

/// A session's prompt prefix, as logged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prefix {
    /// Tether's instructions.
    pub instructions: String,
    /// Working directory, platform, date.
    pub environment: String,
    /// The git snapshot.
    pub git: Option<String>,
    /// The memory files.
    pub memory: Option<String>,
}

impl Prefix {
    /// The system blocks, byte for byte as at capture.
    pub fn blocks(&self) -> Vec<crate::llm::SystemBlock> {
        crate::context::blocks(
            &self.instructions,
            &self.environment,
            self.git.as_deref(),
            self.memory.as_deref(),
        )
    }

    fn told(&self) -> Told {
        Told {
            date: self
                .environment
                .lines()
                .find_map(|l| l.strip_prefix("Date: "))
                .map(str::to_owned),
            git: self.git.clone(),
            memory: self.memory.clone(),
        }
    }
}

/// The changing parts of the context as the model last heard them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Told {
    /// The date.
    pub date: Option<String>,
    /// The git snapshot.
    pub git: Option<String>,
    /// The memory files.
    pub memory: Option<String>,
}

fn is_empty_text(block: &Value) -> bool {
    block["type"] == "text" && block["text"].as_str().is_none_or(|t| t.trim().is_empty())
}

impl History {
    /// The `tool_use` blocks of the last reply that have no `tool_result` yet (a turn cut while
    /// its tools ran or waited for permission).
    pub fn unanswered_tool_uses(&self) -> Vec<Value> {
        let Some(at) = self
            .messages
            .iter()
            .rposition(|m| m.role == Role::Assistant)
        else {
            return Vec::new();
        };
        let answered: std::collections::HashSet<&str> = self.messages[at + 1..]
            .iter()
            .flat_map(|m| m.content.iter())
            .filter(|b| b["type"] == "tool_result")
            .filter_map(|b| b["tool_use_id"].as_str())
            .collect();
        self.messages[at]
            .content
            .iter()
            .filter(|b| b["type"] == "tool_use")
            .filter(|b| !b["id"].as_str().is_some_and(|id| answered.contains(id)))
            .cloned()
            .collect()
    }

    /// Applies one event of the session's log.
    pub fn apply(&mut self, event: &EventKind) {
        match event {
            EventKind::TurnStarted { content, .. } => {
                self.turns_started += 1;
                self.marks.push(Mark {
                    turn: self.turns_started,
                    messages: self.messages.len(),
                    last_blocks: self.messages.last().map(|m| m.content.len()),
                    interrupted: self.interrupted.clone(),
                    notes: self.notes.clone(),
                    told: self.told.clone(),
                    context_tokens: self.last_context_tokens,
                });
                self.pending.clear();
                if let Some(marker) = self.interrupted.take() {
                    self.push(Role::User, vec![json!({"type": "text", "text": marker})]);
                }
                for note in std::mem::take(&mut self.notes) {
                    self.push(Role::User, vec![json!({"type": "text", "text": note})]);
                }
                self.push(Role::User, content.clone());
            }
            EventKind::AssistantBlockCompleted { block, .. } if !is_empty_text(block) => {
                self.pending.push(block.clone());
            }
            // A failed attempt's blocks are void.
            EventKind::Retrying { .. } => self.pending.clear(),
            EventKind::AssistantMessageCompleted { usage, .. } => {
                self.last_context_tokens = usage.input_tokens
                    + usage.cache_creation_input_tokens
                    + usage.cache_read_input_tokens;
                let blocks = std::mem::take(&mut self.pending);
                self.push(Role::Assistant, blocks);
            }
            EventKind::ToolResult {
                tool_call_id,
                content,
                is_error,
                ..
            } => {
                let mut block =
                    json!({"type": "tool_result", "tool_use_id": tool_call_id, "content": content});
                if *is_error {
                    block["is_error"] = json!(true);
                }
                self.push(Role::User, vec![block]);
            }
            EventKind::Continuation { prompt, .. } => {
                self.push(Role::User, vec![json!({"type": "text", "text": prompt})]);
            }
            EventKind::TurnEnded { stop_reason, .. } => {
                // An interrupted reply keeps the text it got to (never a half tool call), and
                // the next prompt says it was interrupted; a failed one leaves nothing.
                let pending = std::mem::take(&mut self.pending);
                let marker = match stop_reason {
                    StopReason::Cancelled => Some(INTERRUPTED_BY_USER),
                    StopReason::InterruptedByRestart => Some(INTERRUPTED_BY_RESTART),
                    _ => None,
                };
                if let Some(marker) = marker {
                    let said: Vec<Value> = pending
                        .into_iter()
                        .filter(|b| b["type"] == "text")
                        .collect();
                    self.push(Role::Assistant, said);
                    self.interrupted = Some(marker.into());
                }
            }
            // As Claude Code gives the model a command the user ran with `!`.
            EventKind::ShellCommand {
                command,
                stdout,
                stderr,
                ..
            } => self.notes.push(format!(
                "<bash-input>{command}</bash-input>\n<bash-stdout>{stdout}</bash-stdout><bash-stderr>{stderr}</bash-stderr>"
            )),
            EventKind::WorkspaceRestored {
                node,
                cwd,
                snapshot,
                after_tool_call,
            } => {
                let state = match (snapshot, after_tool_call) {
                    (None, _) => "empty (no tool had changed a file yet)".to_owned(),
                    (Some(_), Some(id)) => format!("at the state after tool call {id}"),
                    (Some(_), None) => "at the state after the last rewind".to_owned(),
                };
                self.notes.push(format!(
                    "<system-reminder>The session moved: its workspace was restored on host {node} in {cwd}, {state}. Work in {cwd} from now on. Ignored files such as build outputs were not carried, and any change a tool was making when the previous host stopped is gone.</system-reminder>"
                ));
            }
            EventKind::BackgroundShellEnded {
                shell_id, message, ..
            } => self.notes.push(format!(
                "<system-reminder>{message}. Read what it printed with BashOutput (bash_id {shell_id}).</system-reminder>"
            )),
            EventKind::Rewound {
                to_turn,
                conversation: true,
                ..
            } => {
                let Some(at) = self.marks.iter().position(|m| m.turn == *to_turn) else {
                    return;
                };
                let mark = self.marks[at].clone();
                self.marks.truncate(at);
                self.messages.truncate(mark.messages);
                if let (Some(n), Some(last)) = (mark.last_blocks, self.messages.last_mut()) {
                    Arc::make_mut(&mut last.content).truncate(n);
                }
                self.pending.clear();
                self.interrupted = mark.interrupted;
                self.notes = mark.notes;
                // Before the first turn the prefix was not captured yet: it is now.
                self.told = if mark.told == Told::default() {
                    self.prefix.as_ref().map(Prefix::told).unwrap_or_default()
                } else {
                    mark.told
                };
                self.last_context_tokens = mark.context_tokens;
            }
            EventKind::HistoryCleared {} => {
                self.marks.clear();
                self.messages.clear();
                self.pending.clear();
                self.last_context_tokens = 0;
                self.told = self.prefix.as_ref().map(Prefix::told).unwrap_or_default();
                self.interrupted = None;
            }
            EventKind::SystemPrompt {
                instructions,
                environment,
                git,
                memory,
            } => {
                let prefix = Prefix {
                    instructions: instructions.clone(),
                    environment: environment.clone(),
                    git: git.clone(),
                    memory: memory.clone(),
                };
                self.told = prefix.told();
                self.prefix = Some(prefix);
            }
            EventKind::ContextUpdated { date, git, memory } => {
                let text =
                    crate::context::update_text(date.as_deref(), git.as_deref(), memory.as_deref());
                self.push(Role::User, vec![json!({"type": "text", "text": text})]);
                if date.is_some() {
                    self.told.date = date.clone();
                }
                if git.is_some() {
                    self.told.git = git.clone();
                }
                if memory.is_some() {
                    self.told.memory = memory.clone();
                }
            }
            EventKind::CompactionCompleted {
                summary,
                tokens_after,
                ..
            } => {
                self.marks.clear();
                self.messages.clear();
                self.pending.clear();
                self.last_context_tokens = *tokens_after;
                self.compaction_failures = 0;
                self.told = self.prefix.as_ref().map(Prefix::told).unwrap_or_default();
                self.push(
                    Role::User,
                    vec![json!({"type": "text", "text": format!("{SUMMARY_PREFIX}{summary}")})],
                );
            }
            EventKind::Error { code, .. } if code == COMPACTION_FAILED => {
                self.compaction_failures += 1
            }
            _ => {}
        }
    }

    fn push(&mut self, role: Role, content: Vec<Value>) {
        if content.is_empty() {
            return;
        }
        match self.messages.last_mut() {
            Some(last) if last.role == role => Arc::make_mut(&mut last.content).extend(content),
            _ => self.messages.push(Message {
                role,
                content: Arc::new(content),
            }),
        }
    }

    /// Whether the conversation can go back to just before turn `turn` (it began after the
    /// last `/clear` or compaction).
    pub fn can_rewind_to(&self, turn: u64) -> bool {
        self.marks.iter().any(|m| m.turn == turn)
    }

    /// Whether nothing has been said yet.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The messages to send, repaired to be valid for the API.
    pub fn messages(&self) -> Vec<Message> {
        let mut out: Vec<Message> = Vec::with_capacity(self.messages.len() + 1);
        for m in &self.messages {
            if out.is_empty() && m.role == Role::Assistant {
                continue; // the API wants the user first
            }
            out.push(m.clone());
        }
        let mut i = 0;
        while i < out.len() {
            if out[i].role == Role::Assistant {
                let ids: Vec<String> = out[i]
                    .content
                    .iter()
                    .filter(|b| b["type"] == "tool_use")
                    .filter_map(|b| b["id"].as_str().map(str::to_owned))
                    .collect();
                if !ids.is_empty() {
                    if out.get(i + 1).is_none_or(|m| m.role != Role::User) {
                        out.insert(
                            i + 1,
                            Message {
                                role: Role::User,
                                content: Arc::default(),
                            },
                        );
                    }
                    answer_in_order(&mut out[i + 1].content, &ids);
                }
            } else if i > 0 {
                // Results whose call is not in the previous message are orphans (e.g. after /clear).
                let prev_ids: Vec<&str> = out[i - 1]
                    .content
                    .iter()
                    .filter(|b| b["type"] == "tool_use")
                    .filter_map(|b| b["id"].as_str())
                    .collect();
                let keep: Vec<Value> = out[i]
                    .content
                    .iter()
                    .filter(|b| {
                        b["type"] != "tool_result"
                            || b["tool_use_id"]
                                .as_str()
                                .is_some_and(|id| prev_ids.contains(&id))
                    })
                    .cloned()
                    .collect();
                if keep.len() != out[i].content.len() {
                    out[i].content = Arc::new(keep);
                }
            } else if out[i].content.iter().any(|b| b["type"] == "tool_result") {
                Arc::make_mut(&mut out[i].content).retain(|b| b["type"] != "tool_result");
            }
            i += 1;
        }
        out.retain(|m| !m.content.is_empty());
        // Dropping empty messages may have put two of one role side by side.
        let mut merged: Vec<Message> = Vec::with_capacity(out.len());
        for m in out {
            match merged.last_mut() {
                Some(last) if last.role == m.role => {
                    Arc::make_mut(&mut last.content).extend(m.content.iter().cloned())
                }
                _ => merged.push(m),
            }
        }
        merged
    }
}

/// Puts one `tool_result` per id first in `content`, in the calls' order, filling missing ones.
fn answer_in_order(content: &mut Arc<Vec<Value>>, ids: &[String]) {
    let in_order = content.len() >= ids.len()
        && ids
            .iter()
            .zip(content.iter())
            .all(|(id, b)| b["type"] == "tool_result" && b["tool_use_id"] == id.as_str())
        && content[ids.len()..]
            .iter()
            .all(|b| b["type"] != "tool_result");
    if in_order {
        // The common case: the shared copy is sent as it is.
        return;
    }
    let content = Arc::make_mut(content);
    let (mut results, rest): (Vec<Value>, Vec<Value>) =
        content.drain(..).partition(|b| b["type"] == "tool_result");
    let mut ordered = Vec::with_capacity(ids.len() + rest.len());
    for id in ids {
        match results.iter().position(|r| r["tool_use_id"] == id.as_str()) {
            Some(p) => ordered.push(results.remove(p)),
            None => ordered.push(json!({"type": "tool_result", "tool_use_id": id, "content": MISSING_RESULT, "is_error": true})),
        }
    }
    ordered.extend(rest);
    *content = ordered;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_proto::TokenUsage;

    fn turn(text: &str) -> EventKind {
        EventKind::TurnStarted {
            input: vec![],
            content: vec![json!({"type": "text", "text": text})],
            by: None,
            client_turn_id: None,
        }
    }

    fn block(b: Value) -> EventKind {
        EventKind::AssistantBlockCompleted { index: 0, block: b }
    }

    fn done() -> EventKind {
        EventKind::AssistantMessageCompleted {
            model: "m".into(),
            usage: TokenUsage::default(),
            stop_reason: Some(StopReason::EndTurn),
        }
    }

    fn result(id: &str) -> EventKind {
        EventKind::ToolResult {
            tool_call_id: id.into(),
            content: json!("ok"),
            is_error: false,
            details: None,
            snapshot: None,
        }
    }

    fn roles(h: &History) -> Vec<(Role, Vec<String>)> {
        h.messages()
            .into_iter()
            .map(|m| {
                let kinds = m
                    .content
                    .iter()
                    .map(|b| match b["type"].as_str() {
                        Some("tool_result") => {
                            format!("result:{}", b["tool_use_id"].as_str().unwrap_or(""))
                        }
                        Some("tool_use") => format!("use:{}", b["id"].as_str().unwrap_or("")),
                        Some(t) => t.to_owned(),
                        None => "?".into(),
                    })
                    .collect();
                (m.role, kinds)
            })
            .collect()
    }

    #[test]
    fn results_are_ordered_by_call_and_missing_ones_filled() {
        let mut h = History::default();
        for e in [
            turn("go"),
            block(json!({"type": "text", "text": "ok"})),
            block(json!({"type": "tool_use", "id": "a", "name": "Read", "input": {}})),
            block(json!({"type": "tool_use", "id": "b", "name": "Read", "input": {}})),
            block(json!({"type": "tool_use", "id": "c", "name": "Read", "input": {}})),
            done(),
            result("c"),
            result("a"),
        ] {
            h.apply(&e);
        }
        assert_eq!(
            roles(&h),
            vec![
                (Role::User, vec!["text".into()]),
                (
                    Role::Assistant,
                    vec![
                        "text".into(),
                        "use:a".into(),
                        "use:b".into(),
                        "use:c".into()
                    ]
                ),
                (
                    Role::User,
                    vec!["result:a".into(), "result:b".into(), "result:c".into()]
                ),
            ]
        );
        let msgs = h.messages();
        assert_eq!(msgs[2].content[1]["content"], MISSING_RESULT);
    }

    #[test]
    fn requests_share_the_history_and_a_breakpoint_copies_only_the_last_message() {
        let mut h = History::default();
        for e in [
            turn("go"),
            block(json!({"type": "tool_use", "id": "a", "name": "Read", "input": {}})),
            block(json!({"type": "tool_use", "id": "b", "name": "Read", "input": {}})),
            done(),
            result("a"),
            result("b"),
            block(json!({"type": "text", "text": "read both"})),
            done(),
            turn("next"),
        ] {
            h.apply(&e);
        }
        let first = h.messages();
        let second = h.messages();
        assert_eq!(first.len(), 5);
        for (a, b) in first.iter().zip(&second) {
            assert!(Arc::ptr_eq(&a.content, &b.content), "{a:?} was copied");
        }
        let request = crate::llm::MessagesRequest::new("m", 1, second)
            .with_cache_breakpoints(crate::llm::CacheTtl::FiveMinutes);
        for (a, b) in first.iter().zip(&request.messages).take(4) {
            assert!(Arc::ptr_eq(&a.content, &b.content));
        }
        assert!(!Arc::ptr_eq(
            &first[4].content,
            &request.messages[4].content
        ));
        assert_eq!(
            request.messages[4].content[0]["cache_control"]["type"],
            "ephemeral"
        );
        assert!(first[4].content[0].get("cache_control").is_none());
    }

    #[test]
    fn failed_attempts_leave_no_trace_and_an_interrupted_reply_keeps_its_text() {
        let mut h = History::default();
        h.apply(&turn("one"));
        h.apply(&block(json!({"type": "text", "text": "first try"})));
        h.apply(&EventKind::Retrying {
            attempt: 1,
            delay_ms: 1,
            error: "x".into(),
            discarded: true,
        });
        h.apply(&block(json!({"type": "text", "text": "second"})));
        h.apply(&block(json!({"type": "text", "text": ""})));
        h.apply(&done());
        h.apply(&turn("two"));
        h.apply(&block(json!({"type": "text", "text": "cut"})));
        h.apply(&block(
            json!({"type": "tool_use", "id": "half", "name": "Read", "input": {}}),
        ));
        let ended = |stop: &str| EventKind::TurnEnded {
            stop_reason: StopReason::parse(stop),
            usage: TokenUsage::default(),
            cost_usd: None,
            error: None,
            api_ms: None,
            cancelled_by: None,
        };
        h.apply(&ended("cancelled"));
        h.apply(&turn("three"));
        let msgs = h.messages();
        assert_eq!(msgs.len(), 5, "{msgs:?}");
        assert_eq!(
            msgs[1].content,
            vec![json!({"type": "text", "text": "second"})].into()
        );
        assert_eq!(
            msgs[3].content,
            vec![json!({"type": "text", "text": "cut"})].into(),
            "the text it got to, never a call without its result"
        );
        assert_eq!(
            msgs[4].content,
            vec![
                json!({"type": "text", "text": INTERRUPTED_BY_USER}),
                json!({"type": "text", "text": "three"})
            ]
            .into()
        );
        // A failed turn leaves nothing; the next prompt joins the failed one's.
        h.apply(&block(json!({"type": "text", "text": "doomed"})));
        h.apply(&ended("error"));
        h.apply(&turn("four"));
        let msgs = h.messages();
        assert_eq!(msgs.len(), 5);
        assert_eq!(msgs[4].content.len(), 3);
    }

    #[test]
    fn clear_forgets_and_orphans_are_dropped() {
        let mut h = History::default();
        h.apply(&turn("one"));
        h.apply(&block(
            json!({"type": "tool_use", "id": "a", "name": "Read", "input": {}}),
        ));
        h.apply(&done());
        h.apply(&EventKind::HistoryCleared {});
        h.apply(&result("a"));
        h.apply(&turn("fresh"));
        assert_eq!(roles(&h), vec![(Role::User, vec!["text".into()])]);
    }

    fn rewound(to_turn: u64) -> EventKind {
        EventKind::Rewound {
            to_turn,
            code: false,
            conversation: true,
            restored: Vec::new(),
            kept: Vec::new(),
            outside: Vec::new(),
            failed: Vec::new(),
            snapshot: None,
            by: None,
        }
    }

    fn texts(h: &History) -> Vec<String> {
        h.messages()
            .iter()
            .flat_map(|m| m.content.iter())
            .filter_map(|b| b["text"].as_str().map(str::to_owned))
            .collect()
    }

    #[test]
    fn a_rewind_goes_back_to_just_before_a_turn_even_one_that_joined_a_message() {
        let mut h = History::default();
        h.apply(&turn("one"));
        h.apply(&block(
            json!({"type": "tool_use", "id": "a", "name": "Bash", "input": {}}),
        ));
        h.apply(&done());
        h.apply(&result("a"));
        // Cut after its tool ran: the next prompt joins the tool result's user message.
        h.apply(&EventKind::TurnEnded {
            stop_reason: StopReason::MaxTurns,
            usage: TokenUsage::default(),
            cost_usd: None,
            error: None,
            api_ms: None,
            cancelled_by: None,
        });
        h.apply(&turn("two"));
        h.apply(&block(json!({"type": "text", "text": "reply two"})));
        h.apply(&done());
        h.apply(&turn("three"));
        assert!(h.can_rewind_to(2) && h.can_rewind_to(3));
        h.apply(&rewound(2));
        assert_eq!(texts(&h), ["one"]);
        assert!(!h.can_rewind_to(2), "the rewound turns are gone");
        assert!(h.can_rewind_to(1));
        h.apply(&turn("two again"));
        assert_eq!(texts(&h), ["one", "two again"]);
        // A compaction leaves nothing before it to go back to.
        h.apply(&EventKind::CompactionCompleted {
            summary: "s".into(),
            tokens_before: 10,
            tokens_after: 1,
        });
        assert!(!h.can_rewind_to(1) && !h.can_rewind_to(4));
    }
}
