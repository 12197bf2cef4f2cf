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
    format!("{name} #{}", c.client_id)
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

/// One line describing an event.
pub fn event_line(ev: &Event) -> String {
    let seq = ev
        .seq
        .map(|s| format!("#{s}"))
        .unwrap_or_else(|| "--".into());
    let detail = match &ev.kind {
        EventKind::ReplayComplete { head_seq } => {
            format!("replay complete at #{head_seq}; live from here")
        }
        EventKind::Lagged { last_seq } => format!("fell behind after #{last_seq}; resuming"),
        EventKind::SessionDeleted { by: who } => format!("session deleted{}", by(who)),
        EventKind::DaemonShutdown {} => "tetherd is shutting down".into(),
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
            permission_mode,
            by: who,
        } => {
            let mut parts = Vec::new();
            if let Some(t) = title {
                parts.push(format!("title \"{t}\""));
            }
            if let Some(m) = model {
                parts.push(format!("model {m}"));
            }
            if let Some(m) = permission_mode {
                parts.push(format!("mode {}", m.as_str()));
            }
            format!("configured: {}{}", parts.join(", "), by(who))
        }
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
    };
    format!("{seq:>6}  {}  {detail}", clock(&ev.ts))
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
                    s.status.as_str().to_owned()
                } else {
                    format!(
                        "{} ({} attached)",
                        s.status.as_str(),
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
    for row in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
