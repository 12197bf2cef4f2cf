//! Human-readable text for events, sessions and times. Plain text; the rich terminal renderer
//! builds on these lines.

use std::time::{Duration, SystemTime};
use tether_proto::{ClientRef, Event, EventKind, SessionSummary};

/// `py #3` for a client named `py` on connection 3, `script #3` when it gave no name.
pub fn client(c: &ClientRef) -> String {
    let name = c
        .name
        .clone()
        .unwrap_or_else(|| format!("{:?}", c.kind).to_lowercase());
    match &c.principal {
        Some(principal) => {
            let over = match &c.channel {
                Some(tether_proto::Channel::Local) | None => String::new(),
                Some(channel) => format!(" over {}", channel.as_str()),
            };
            format!("{principal}{over} ({name} #{})", c.client_id)
        }
        None => format!("{name} #{}", c.client_id),
    }
}

/// Who is at a client, in words: `bob over ssh (zed)`, `alice (tether on dev pts/3)`; the
/// client's own name alone when the daemon named no one (a log of an older build).
pub fn person(c: &ClientRef) -> String {
    let Some(principal) = &c.principal else {
        return c.name.clone().unwrap_or_else(|| client(c));
    };
    let who = match &c.channel {
        Some(tether_proto::Channel::Ssh) => format!("{principal} over ssh"),
        Some(tether_proto::Channel::Link) => format!("{principal} with an approval link"),
        Some(tether_proto::Channel::Other(how)) => format!("{principal} over {how}"),
        Some(tether_proto::Channel::Local) | None => principal.clone(),
    };
    match &c.name {
        // An approval link's name says only that it was one.
        Some(name) if c.channel != Some(tether_proto::Channel::Link) => format!("{who} ({name})"),
        _ => who,
    }
}

/// Where a decision nobody was asked about came from, in words.
pub fn decided_by(
    source: &tether_proto::DecisionSource,
    rule: &Option<String>,
    rule_source: &Option<String>,
    mode: tether_proto::PermissionMode,
) -> String {
    use tether_proto::DecisionSource as S;
    match source {
        S::Rule => format!(
            "by the rule {}{}",
            rule.as_deref().unwrap_or("?"),
            rule_source
                .as_ref()
                .map(|s| format!(" ({s})"))
                .unwrap_or_default()
        ),
        S::Mode => format!("by the {} mode", mode.as_str()),
        S::Hook => "by a PreToolUse hook".into(),
        S::Sandbox => "because the sandbox holds it".into(),
        S::Person => "by a person".into(),
        S::Daemon => "by the daemon".into(),
        S::Other(s) => format!("by {s}"),
    }
}

/// What a `session_configured` changed, in words (`model opus`, `effort high`, `mode plan`,
/// `budget $5.00`).
pub fn changes(
    model: &Option<String>,
    effort: &Option<String>,
    mode: Option<tether_proto::PermissionMode>,
    budget_usd: Option<f64>,
) -> Vec<String> {
    let mut parts = Vec::new();
    if let Some(m) = model {
        parts.push(format!("model {m}"));
    }
    match effort.as_deref() {
        Some("") => parts.push("effort: the model's default".into()),
        Some(e) => parts.push(format!("effort {e}")),
        None => {}
    }
    if let Some(m) = mode {
        parts.push(format!("mode {}", m.as_str()));
    }
    match budget_usd {
        Some(b) if b > 0.0 => parts.push(format!("budget ${b:.2}")),
        Some(_) => parts.push("no budget".into()),
        None => {}
    }
    parts
}

/// What a `!command` printed: its stdout, then its stderr, without trailing blank lines.
pub fn printed(stdout: &str, stderr: &str) -> String {
    let mut text = stdout.trim_end().to_owned();
    if !stderr.trim().is_empty() {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(stderr.trim_end());
    }
    text
}

fn by(c: &Option<ClientRef>) -> String {
    c.as_ref()
        .map(|c| format!(" (by {})", client(c)))
        .unwrap_or_default()
}

/// The clock time of an RFC 3339 timestamp (`12:15:07`), or the timestamp as given.
pub fn clock(ts: &str) -> &str {
    ts.get(11..19).unwrap_or(ts)
}

/// What a rewind did, in one line: where it went, what it put back, what it left alone.
pub fn rewound(
    to_turn: u64,
    code: bool,
    conversation: bool,
    restored: &[String],
    kept: &[String],
    failed: &[String],
) -> String {
    let what = match (code, conversation) {
        (true, true) => "files and conversation",
        (true, false) => "files",
        _ => "conversation",
    };
    let mut line = format!("⟲ rewound to before turn {to_turn} ({what})");
    if code {
        line.push_str(&match restored.len() {
            0 => "; no file to put back".to_owned(),
            1 => format!("; put back {}", restored[0]),
            n => format!("; put back {n} files"),
        });
    }
    if !kept.is_empty() {
        line.push_str(&format!(
            "; kept as edited outside tether: {}",
            kept.join(", ")
        ));
    }
    if !failed.is_empty() {
        line.push_str(&format!("; could not put back {}", failed.join("; ")));
    }
    line
}

/// A working tree rebuilt on another node, in one line.
pub fn restored(
    node: &str,
    cwd: &str,
    snapshot: Option<&str>,
    after_tool_call: Option<&str>,
) -> String {
    match (snapshot, after_tool_call) {
        (None, _) => {
            format!("◦ the session moved to {node}: it works in {cwd} (no file had changed yet)")
        }
        (Some(_), Some(id)) => format!(
            "◦ the session moved to {node}: its files were restored in {cwd} (as after tool call {id})"
        ),
        (Some(_), None) => format!(
            "◦ the session moved to {node}: its files were restored in {cwd} (as after the last rewind)"
        ),
    }
}

/// One line describing an event.
pub fn event_line(ev: &Event) -> String {
    let seq = ev
        .seq
        .map(|s| format!("#{s}"))
        .unwrap_or_else(|| "--".into());
    format!("{seq:>6}  {}  {}", clock(&ev.ts), detail(&ev.kind))
}

/// What an event says, in a few words.
fn detail(kind: &EventKind) -> String {
    match kind {
        EventKind::ReplayComplete { head_seq } => {
            format!("replay complete at #{head_seq}; live from here")
        }
        EventKind::Lagged { last_seq } => format!("fell behind after #{last_seq}; resuming"),
        EventKind::Snapshot { at_seq, .. } => {
            format!("streaming deltas up to #{at_seq} were pruned; completed blocks follow")
        }
        EventKind::SessionDeleted { by: who } => format!("session deleted{}", by(who)),
        EventKind::DaemonShutdown {} => "tetherd is shutting down".into(),
        EventKind::HookCallback { callback_id, .. } => {
            format!("the SDK program's hook callback {callback_id} is asked")
        }
        EventKind::McpMessage { server, .. } => {
            format!("a message for the SDK program's MCP server {server}")
        }
        EventKind::SessionCreated {
            cwd,
            title,
            model,
            permission_mode,
            by: who,
        } => format!(
            "session created in {cwd}{} — model {model}, mode {}{}",
            title
                .as_ref()
                .map(|t| format!(" \"{t}\""))
                .unwrap_or_default(),
            permission_mode.as_str(),
            by(who)
        ),
        EventKind::SessionConfigured {
            title,
            model,
            effort,
            permission_mode,
            on_no_controller,
            budget_usd,
            by: who,
        } => {
            let mut parts = Vec::new();
            if let Some(t) = title {
                parts.push(format!("title \"{t}\""));
            }
            parts.extend(changes(model, effort, *permission_mode, *budget_usd));
            if let Some(p) = on_no_controller {
                parts.push(
                    format!(
                        "without a controller: {:?} after {} ms",
                        p.action, p.timeout_ms
                    )
                    .to_lowercase(),
                );
            }
            format!("configured: {}{}", parts.join(", "), by(who))
        }
        EventKind::SessionShared {
            principal,
            role,
            by: who,
        } => format!("shared with {principal} as {role}{}", by(who)),
        EventKind::SessionUnshared {
            principal,
            role,
            by: who,
        } => format!("{principal} is no longer {role}{}", by(who)),
        EventKind::PermissionDecided {
            tool,
            decision,
            source,
            rule,
            rule_source,
            mode,
            ..
        } => format!(
            "{tool} {} {}",
            if *decision == tether_proto::PermissionDecision::Deny {
                "denied"
            } else {
                "allowed"
            },
            decided_by(source, rule, rule_source, *mode)
        ),
        EventKind::ClientAttached { client: c, role } => {
            format!(
                "{} attached as {}",
                client(c),
                format!("{role:?}").to_lowercase()
            )
        }
        EventKind::ClientDetached {
            client: c,
            role,
            reason,
        } => format!(
            "{} ({}) detached: {reason}",
            client(c),
            format!("{role:?}").to_lowercase()
        ),
        EventKind::SessionStatus { status } => format!("status: {}", status.as_str()),
        EventKind::Notice { level, message } => format!("{level}: {message}"),
        EventKind::HookStarted { hook_name, .. } => format!("hook {hook_name} started"),
        EventKind::HookResponse {
            hook_name,
            exit_code,
            outcome,
            ..
        } => {
            let how = match (outcome, exit_code) {
                (tether_proto::HookOutcome::Success, _) => "finished".to_owned(),
                (tether_proto::HookOutcome::Cancelled, _) => "was cancelled".to_owned(),
                (_, Some(code)) => format!("exited with {code}"),
                (tether_proto::HookOutcome::Other(o), None) => format!("ended: {o}"),
                (_, None) => "failed".to_owned(),
            };
            format!("hook {hook_name} {how}")
        }
        EventKind::TurnStarted {
            content, by: who, ..
        } => {
            let text: Vec<&str> = content.iter().filter_map(|b| b["text"].as_str()).collect();
            format!(
                "> {}{}",
                text.join(" ").chars().take(200).collect::<String>(),
                by(who)
            )
        }
        EventKind::TurnEnded {
            stop_reason,
            usage,
            cost_usd,
            error,
            cancelled_by,
            ..
        } => {
            let cost = cost_usd.map(|c| format!(", ${c:.4}")).unwrap_or_default();
            let who = cancelled_by
                .as_ref()
                .map(|c| format!("; cancelled by {}", client(c)))
                .unwrap_or_default();
            let err = error
                .as_ref()
                .map(|e| format!(" — {}: {}", e.code, e.message))
                .unwrap_or_default();
            format!(
                "turn ended ({stop_reason}; {} in, {} out{cost}{who}){err}",
                usage.input_tokens
                    + usage.cache_read_input_tokens
                    + usage.cache_creation_input_tokens,
                usage.output_tokens
            )
        }
        EventKind::AssistantBlockStarted { kind, block, .. } => match kind.as_str() {
            "tool_use" => format!("calling {}…", block["name"].as_str().unwrap_or("a tool")),
            other => format!("{other}…"),
        },
        EventKind::TextDelta { text, .. } => text.clone(),
        EventKind::ThinkingDelta { .. } => "(thinking)".into(),
        EventKind::ToolInputDelta { partial_json, .. } => partial_json.clone(),
        EventKind::AssistantBlockCompleted { block, .. } => match block["type"].as_str() {
            Some("text") => block["text"].as_str().unwrap_or("").to_owned(),
            Some("tool_use") => format!(
                "{} {}",
                block["name"].as_str().unwrap_or("?"),
                block["input"]
            ),
            Some(other) => format!("[{other}]"),
            None => "[block]".into(),
        },
        EventKind::AssistantMessageCompleted { stop_reason, .. } => {
            format!(
                "reply complete ({})",
                stop_reason.as_ref().map_or("?", |s| s.as_str())
            )
        }
        EventKind::ToolCall { name, input, .. } => format!("▶ {name} {input}"),
        EventKind::ToolProgress { chunk, .. } => chunk.trim_end().to_owned(),
        EventKind::BackgroundShellEnded { message, .. } => format!("◆ {message}"),
        EventKind::Rewound {
            to_turn,
            code,
            conversation,
            restored,
            kept,
            failed,
            by,
            ..
        } => {
            let line = rewound(*to_turn, *code, *conversation, restored, kept, failed);
            match by {
                Some(b) => format!("{line} — by {}", client(b)),
                None => line,
            }
        }
        EventKind::WorkspaceRestored {
            node,
            cwd,
            snapshot,
            after_tool_call,
        } => restored(node, cwd, snapshot.as_deref(), after_tool_call.as_deref()),
        EventKind::ShellCommand {
            command,
            stdout,
            stderr,
            exit_code,
        } => {
            let code = exit_code.map_or("killed".to_owned(), |c| format!("exit {c}"));
            format!("!{command} ({code})\n{}", printed(stdout, stderr))
        }
        EventKind::ToolResult {
            content, is_error, ..
        } => {
            let text = content
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| content.to_string());
            let first = text
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(120)
                .collect::<String>();
            let more = text.lines().count().saturating_sub(1);
            let more = if more > 0 {
                format!(" (+{more} lines)")
            } else {
                String::new()
            };
            format!("{} {first}{more}", if *is_error { "✗" } else { "✓" })
        }
        EventKind::Retrying {
            attempt,
            delay_ms,
            error,
            ..
        } => format!(
            "retrying ({attempt}) in {:.1} s: {error}",
            *delay_ms as f64 / 1000.0
        ),
        EventKind::Continuation { attempt, .. } => {
            format!("reply hit the output limit; continuing ({attempt})")
        }
        EventKind::UsageUpdated {
            session_cost_usd,
            context_percent,
            ..
        } => format!(
            "usage: context {}, session {}",
            context_percent
                .map(|p| format!("{p:.0}%"))
                .unwrap_or_else(|| "?".into()),
            session_cost_usd
                .map(|c| format!("${c:.4}"))
                .unwrap_or_else(|| "cost unknown".into())
        ),
        EventKind::HistoryCleared {} => "conversation cleared".into(),
        EventKind::SystemPrompt { git, memory, .. } => format!(
            "context fixed for this session: instructions, environment{}{}",
            if git.is_some() { ", git" } else { "" },
            if memory.is_some() { ", memory" } else { "" }
        ),
        EventKind::ContextUpdated { date, git, memory } => {
            let parts: Vec<&str> = [
                date.as_ref().map(|_| "date"),
                git.as_ref().map(|_| "git"),
                memory.as_ref().map(|_| "memory"),
            ]
            .into_iter()
            .flatten()
            .collect();
            format!("the model is told what changed: {}", parts.join(", "))
        }
        EventKind::TurnRecovered {
            action,
            interrupted_tools,
        } => format!(
            "the daemon stopped during this turn; it was {action} ({} tool call(s) interrupted)",
            interrupted_tools.len()
        ),
        EventKind::PermissionRequested {
            request_id,
            tool,
            preview,
            ..
        } => format!("permission needed for {tool} (request {request_id}):\n{preview}"),
        EventKind::PermissionResolved {
            decision,
            resolved_by,
            message,
            ..
        } => format!(
            "permission {}{}{}",
            decision.as_str(),
            by(resolved_by),
            message
                .as_ref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ),
        EventKind::PlanUpdated { todos } => {
            let lines: Vec<String> = todos
                .iter()
                .map(|t| {
                    let mark = match t["status"].as_str() {
                        Some("completed") => "[x]",
                        Some("in_progress") => "[>]",
                        _ => "[ ]",
                    };
                    format!("{mark} {}", t["content"].as_str().unwrap_or(""))
                })
                .collect();
            format!("plan:\n        {}", lines.join("\n        "))
        }
        EventKind::CompactionStarted { reason } => {
            format!("compacting the conversation ({reason})…")
        }
        EventKind::CompactionCompleted {
            tokens_before,
            tokens_after,
            ..
        } => format!("compacted: {tokens_before} → ~{tokens_after} tokens"),
        EventKind::ModelFallback { from, to } => {
            format!("{from} is overloaded; continuing with {to}")
        }
        EventKind::Error { code, message } => format!("error ({code}): {message}"),
        EventKind::BudgetReached {
            budget_usd,
            spent_usd,
            next_request_usd,
            daily: false,
        } => format!(
            "budget reached: ${spent_usd:.4} spent of ${budget_usd:.2}, and the next request would cost about ${next_request_usd:.4}; paused until the budget is raised"
        ),
        EventKind::BudgetReached {
            budget_usd,
            spent_usd,
            daily: true,
            ..
        } => format!(
            "the daemon's daily budget is spent: ${spent_usd:.4} of ${budget_usd:.2} today; no more model requests until midnight UTC (or raise daily_budget_usd)"
        ),
        EventKind::SubagentEvent { agent, event, .. } => {
            format!("sub-agent {agent}: {}", detail(event))
        }
    }
}

/// Turns a stream of events into terminal text: reply text and tool output stream inline as
/// they arrive; every other event is one line. Deltas that a `*_completed` event repeats are not
/// printed twice.
#[derive(Debug, Default)]
pub struct StreamPrinter {
    /// Whether the cursor is in the middle of streamed text.
    inline: bool,
    /// Blocks whose text was streamed (so their completed event is not repeated).
    streamed: std::collections::HashSet<(Option<String>, u32)>,
}

impl StreamPrinter {
    /// The text to print for `ev`.
    pub fn feed(&mut self, ev: &Event) -> String {
        let turn = ev.turn_id.as_ref().map(|t| t.0.clone());
        match &ev.kind {
            EventKind::TextDelta { index, text } => {
                self.streamed.insert((turn, *index));
                self.inline = !text.ends_with('\n');
                text.clone()
            }
            EventKind::ToolProgress { chunk, .. } => {
                self.inline = !chunk.ends_with('\n');
                chunk.clone()
            }
            EventKind::ThinkingDelta { .. }
            | EventKind::ToolInputDelta { .. }
            | EventKind::AssistantBlockStarted { .. } => String::new(),
            EventKind::AssistantBlockCompleted { index, block }
                if block["type"] == "text" && self.streamed.remove(&(turn, *index)) =>
            {
                let end = if self.inline { "\n" } else { "" };
                self.inline = false;
                end.to_owned()
            }
            _ => {
                let lead = if self.inline { "\n" } else { "" };
                self.inline = false;
                format!("{lead}{}\n", event_line(ev))
            }
        }
    }
}

/// `5s ago`, `3m ago`, `2h ago`, `4d ago` for an RFC 3339 time.
pub fn ago(ts: &str, now: SystemTime) -> String {
    let Ok(then) = humantime::parse_rfc3339_weak(ts.trim_end_matches('Z')) else {
        return ts.to_owned();
    };
    let secs = now.duration_since(then).unwrap_or(Duration::ZERO).as_secs();
    match secs {
        0..60 => format!("{secs}s ago"),
        60..3600 => format!("{}m ago", secs / 60),
        3600..86400 => format!("{}h ago", secs / 3600),
        _ => format!("{}d ago", secs / 86400),
    }
}

/// `/permissions`: the mode, then each rule (deny, ask, allow — the order they are checked in)
/// with where it comes from, extra directories and unreadable rules.
pub fn rules(rules: &tether_proto::PermissionRules, s: crate::style::Style) -> String {
    let mut out = format!("mode {}\n", s.bold(rules.mode.as_str()));
    if rules.rules.is_empty() {
        out.push_str(&format!("{}\n", s.dim("no rules: calls follow the mode")));
    }
    let width = rules
        .rules
        .iter()
        .map(|r| r.rule.chars().count())
        .max()
        .unwrap_or(0);
    for r in &rules.rules {
        let kind = match r.kind.as_str() {
            "deny" => s.error("deny "),
            "ask" => s.warn("ask  "),
            _ => s.ok("allow"),
        };
        out.push_str(&format!(
            "  {kind} {:<width$}  {}\n",
            r.rule,
            s.dim(&r.source)
        ));
    }
    for dir in &rules.additional_directories {
        out.push_str(&format!("  {} {dir}\n", s.dim("also in")));
    }
    for problem in &rules.problems {
        out.push_str(&format!("  {}\n", s.warn(&format!("! {problem}"))));
    }
    out
}

/// `/config`: each settings file's keys, and what tether does with them.
pub fn settings_keys(keys: &[tether_proto::SettingsKey], s: crate::style::Style) -> String {
    if keys.is_empty() {
        return format!(
            "{}\n",
            s.dim("no Claude Code settings files here (~/.claude/settings.json, .claude/settings.json, .claude/settings.local.json)")
        );
    }
    let mut out = String::new();
    let mut source = "";
    let width = keys
        .iter()
        .map(|k| k.key.chars().count())
        .max()
        .unwrap_or(0);
    for k in keys {
        if k.source != source {
            source = &k.source;
            out.push_str(&format!("{}\n", s.bold(source)));
        }
        let note = if k.used {
            s.ok(&k.note)
        } else {
            s.dim(&k.note)
        };
        out.push_str(&format!("  {:<width$}  {note}\n", k.key));
    }
    out
}

/// The `tether sessions` table.
pub fn sessions_table(sessions: &[SessionSummary], now: SystemTime) -> String {
    if sessions.is_empty() {
        return "no sessions yet — `tether new` creates one\n".into();
    }
    let rows: Vec<[String; 5]> = sessions
        .iter()
        .map(|s| {
            [
                s.session_id.0.chars().take(8).collect(),
                s.title.clone().unwrap_or_else(|| "(untitled)".into()),
                s.cwd.clone(),
                if s.attached_clients.is_empty() {
                    s.status.words().to_owned()
                } else {
                    format!(
                        "{} ({} attached)",
                        s.status.words(),
                        s.attached_clients.len()
                    )
                },
                ago(&s.updated_at, now),
            ]
        })
        .collect();
    let header = ["ID", "TITLE", "CWD", "STATUS", "UPDATED"].map(String::from);
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let found = std::iter::once(None).chain(sessions.iter().map(|s| s.found.as_deref()));
    for (row, found) in std::iter::once(&header).chain(&rows).zip(found) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
        // A search says where it found the words.
        if let Some(found) = found.filter(|f| !f.is_empty()) {
            let found: String = found.chars().filter(|c| !c.is_control()).collect();
            out.push_str(&format!("          {found}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(kind: EventKind) -> Event {
        Event {
            session_id: "s".into(),
            seq: Some(1),
            epoch: 1,
            ts: "2026-01-01T10:11:12.000Z".into(),
            turn_id: Some(tether_proto::TurnId("t".into())),
            kind,
        }
    }

    #[test]
    fn streamed_text_is_inline_and_not_repeated() {
        let mut p = StreamPrinter::default();
        let mut out = String::new();
        for k in [
            EventKind::AssistantBlockStarted {
                index: 0,
                kind: "text".into(),
                block: json!({"type": "text"}),
            },
            EventKind::TextDelta {
                index: 0,
                text: "Hello ".into(),
            },
            EventKind::TextDelta {
                index: 0,
                text: "world".into(),
            },
            EventKind::AssistantBlockCompleted {
                index: 0,
                block: json!({"type": "text", "text": "Hello world"}),
            },
            EventKind::Notice {
                level: tether_proto::NoticeLevel::Info,
                message: "done".into(),
            },
        ] {
            out.push_str(&p.feed(&ev(k)));
        }
        assert_eq!(out, "Hello world\n    #1  10:11:12  info: done\n");
    }

    #[test]
    fn ago_buckets() {
        let now = humantime::parse_rfc3339("2026-01-02T00:00:00Z").expect("time");
        assert_eq!(ago("2026-01-01T23:59:50.000Z", now), "10s ago");
        assert_eq!(ago("2026-01-01T23:50:00.000Z", now), "10m ago");
        assert_eq!(ago("2026-01-01T21:00:00.000Z", now), "3h ago");
        assert_eq!(ago("2025-12-30T00:00:00.000Z", now), "3d ago");
        assert_eq!(ago("garbage", now), "garbage");
    }
}
