//! Exports of a session's log: JSONL (the events, one per line, as logged) and a readable
//! Markdown transcript with tool calls and results folded, saying who prompted, answered,
//! cancelled and shared when the daemon knew.

use serde_json::Value;
use tether_proto::{Event, EventKind};

/// Lines of a tool result kept in the Markdown transcript.
const RESULT_LINES: usize = 40;

/// The events as JSON lines.
pub fn jsonl(events: &[Event]) -> String {
    events
        .iter()
        .filter_map(|e| serde_json::to_string(e).ok())
        .map(|l| l + "\n")
        .collect()
}

/// A code fence longer than any backtick run inside `text`.
fn fence(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let ticks = "`".repeat(longest.max(2) + 1);
    format!("{ticks}\n{}\n{ticks}\n", text.trim_end())
}

/// Who did something, as the transcript names them (` (bob over ssh)`); empty when the log
/// does not say.
fn who(by: Option<&tether_proto::ClientRef>) -> String {
    let Some(principal) = by.and_then(|b| b.principal.as_deref()) else {
        return String::new();
    };
    match by.and_then(|b| b.channel.as_ref()) {
        Some(tether_proto::Channel::Local) | None => format!(" ({principal})"),
        Some(channel) => format!(" ({principal} over {})", channel.as_str()),
    }
}

/// A readable transcript.
pub fn markdown(title: &str, cwd: &str, events: &[Event]) -> String {
    let mut out = format!("# {title}\n\nWorking directory: `{cwd}`\n");
    let mut calls: std::collections::HashMap<String, (String, Value)> = Default::default();
    for ev in events {
        match &ev.kind {
            EventKind::TurnStarted { content, by, .. } if !content.is_empty() => {
                out.push_str(&format!(
                    "\n## User{} — {}\n\n{}\n",
                    who(by.as_ref()),
                    &ev.ts,
                    tether_proto::content_text(&Value::Array(content.clone()))
                ));
            }
            EventKind::AssistantBlockCompleted { block, .. } => match block["type"].as_str() {
                Some("text") => out.push_str(&format!(
                    "\n## Assistant\n\n{}\n",
                    block["text"].as_str().unwrap_or("")
                )),
                Some("thinking") => out.push_str(&format!(
                    "\n<details><summary>Thinking</summary>\n\n{}\n</details>\n",
                    block["thinking"].as_str().unwrap_or("")
                )),
                _ => {}
            },
            EventKind::ToolCall {
                tool_call_id,
                name,
                input,
            } => {
                calls.insert(tool_call_id.clone(), (name.clone(), input.clone()));
            }
            EventKind::ToolResult {
                tool_call_id,
                content,
                is_error,
                ..
            } => {
                let (name, input) = calls
                    .remove(tool_call_id)
                    .unwrap_or_else(|| ("tool".into(), Value::Null));
                let key = [
                    "command",
                    "file_path",
                    "pattern",
                    "url",
                    "path",
                    "description",
                ]
                .iter()
                .find_map(|k| input[*k].as_str())
                .unwrap_or("");
                let text = tether_proto::content_text(content);
                let total = text.lines().count();
                let mut shown: String = text
                    .lines()
                    .take(RESULT_LINES)
                    .collect::<Vec<_>>()
                    .join("\n");
                if total > RESULT_LINES {
                    shown.push_str(&format!("\n… {} more lines", total - RESULT_LINES));
                }
                out.push_str(&format!(
                    "\n<details><summary>{}{name} <code>{}</code></summary>\n\nInput:\n\n{}\nResult:\n\n{}</details>\n",
                    if *is_error { "✗ " } else { "" },
                    key.replace('&', "&amp;").replace('<', "&lt;"),
                    fence(&serde_json::to_string_pretty(&input).unwrap_or_default()),
                    fence(&shown)
                ));
            }
            EventKind::PermissionResolved {
                decision,
                resolved_by: Some(by),
                ..
            } => out.push_str(&format!(
                "\n*Permission: {}{}*\n",
                decision.as_str(),
                who(Some(by))
            )),
            EventKind::SessionShared {
                principal,
                role,
                by,
            } => out.push_str(&format!(
                "\n*Shared with {principal} as {role}{}*\n",
                who(by.as_ref())
            )),
            EventKind::SessionUnshared {
                principal,
                role,
                by,
            } => out.push_str(&format!(
                "\n*{principal} is no longer {role}{}*\n",
                who(by.as_ref())
            )),
            EventKind::TurnEnded {
                stop_reason,
                cost_usd,
                error,
                cancelled_by,
                ..
            } => {
                let cost = cost_usd.map(|c| format!(", ${c:.4}")).unwrap_or_default();
                let cost = format!("{cost}{}", who(cancelled_by.as_ref()));
                let err = error
                    .as_ref()
                    .map(|e| format!(": {}", e.message))
                    .unwrap_or_default();
                out.push_str(&format!("\n*Turn ended ({stop_reason}{cost}){err}*\n"));
            }
            EventKind::CompactionCompleted { summary, .. } => {
                out.push_str(&format!(
                    "\n<details><summary>Compacted</summary>\n\n{summary}\n</details>\n"
                ));
            }
            EventKind::HistoryCleared {} => out.push_str("\n---\n*Conversation cleared*\n"),
            EventKind::BackgroundShellEnded { message, .. } => {
                out.push_str(&format!("\n*{message}*\n"))
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tether_proto::{TokenUsage, TurnError};

    fn at(kind: EventKind) -> Event {
        Event {
            session_id: "s".into(),
            seq: None,
            epoch: 1,
            ts: "2026-12-01T10:00:00.000Z".into(),
            turn_id: None,
            kind,
        }
    }

    fn block(block: Value) -> EventKind {
        EventKind::AssistantBlockCompleted { index: 0, block }
    }

    fn ended(stop_reason: &str, error: Option<TurnError>) -> EventKind {
        EventKind::TurnEnded {
            stop_reason: tether_proto::StopReason::parse(stop_reason),
            usage: TokenUsage::default(),
            cost_usd: Some(0.0123),
            error,
            api_ms: None,
            cancelled_by: None,
        }
    }

    #[test]
    fn markdown_transcript() {
        let long: String = (1..=45).map(|i| format!("line {i}\n")).collect();
        let events = [
            EventKind::TurnStarted {
                input: vec![],
                content: vec![json!({"type": "text", "text": "Why does `make` fail?"})],
                by: None,
                client_turn_id: None,
            },
            block(json!({"type": "thinking", "thinking": "Check the Makefile first.", "signature": "sig"})),
            block(json!({"type": "text", "text": "Let me look at the build."})),
            EventKind::ToolCall {
                tool_call_id: "t1".into(),
                name: "Bash".into(),
                input: json!({"command": "make 2>&1 | head -n 45 < /dev/null"}),
            },
            EventKind::ToolResult {
                tool_call_id: "t1".into(),
                content: json!(long),
                is_error: false,
                details: None,
                snapshot: None,
            },
            EventKind::ToolCall {
                tool_call_id: "t2".into(),
                name: "Read".into(),
                input: json!({"file_path": "/p/README.md"}),
            },
            EventKind::ToolResult {
                tool_call_id: "t2".into(),
                content: json!("file does not exist: /p/README.md\n```\nfenced\n```"),
                is_error: true,
                details: None,
                snapshot: None,
            },
            block(json!({"type": "text", "text": "The `all` target is missing.\n\n- add it\n- rerun"})),
            ended("end_turn", None),
            EventKind::BackgroundShellEnded {
                shell_id: "bash_1".into(),
                command: "npm run dev".into(),
                state: tether_proto::ShellState::Exited,
                exit_code: Some(0),
                message: "background shell bash_1 (npm run dev) exited with code 0".into(),
            },
            EventKind::CompactionCompleted {
                tokens_before: 180_000,
                tokens_after: 2_000,
                summary: "The user fixed the build.".into(),
            },
            EventKind::TurnStarted {
                input: vec![],
                content: vec![json!({"type": "text", "text": "and now?"})],
                by: None,
                client_turn_id: None,
            },
            ended(
                "error",
                Some(TurnError {
                    code: "overloaded".into(),
                    message: "the API stayed overloaded".into(),
                    retryable: true,
                }),
            ),
            EventKind::HistoryCleared {},
        ]
        .map(at);
        insta::assert_snapshot!(markdown("Fix the build", "/p", &events));
    }
}
