//! Exports of a session's log: JSONL (the events, one per line, as logged) and a readable
//! Markdown transcript with tool calls and results folded.

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

fn fence(text: &str) -> String {
    let ticks = if text.contains("```") { "````" } else { "```" };
    format!("{ticks}\n{}\n{ticks}\n", text.trim_end())
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .map(|b| match b["type"].as_str() {
                Some("text") => b["text"].as_str().unwrap_or("").to_owned(),
                Some(other) => format!("[{other}]"),
                None => String::new(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

/// A readable transcript.
pub fn markdown(title: &str, cwd: &str, events: &[Event]) -> String {
    let mut out = format!("# {title}\n\nWorking directory: `{cwd}`\n");
    let mut calls: std::collections::HashMap<String, (String, Value)> = Default::default();
    for ev in events {
        match &ev.kind {
            EventKind::TurnStarted { content, .. } if !content.is_empty() => {
                out.push_str(&format!(
                    "\n## User — {}\n\n{}\n",
                    &ev.ts,
                    text_of(&Value::Array(content.clone()))
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
                let text = text_of(content);
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
                    key.replace('<', "&lt;"),
                    fence(&serde_json::to_string_pretty(&input).unwrap_or_default()),
                    fence(&shown)
                ));
            }
            EventKind::TurnEnded {
                stop_reason,
                cost_usd,
                error,
                ..
            } => {
                let cost = cost_usd.map(|c| format!(", ${c:.4}")).unwrap_or_default();
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
            _ => {}
        }
    }
    out
}
