//! The approval ledger: every permission decision of a session, read from its log
//! (`session/audit`). Decisions nobody was asked about are `permission_decided` events; a
//! person's (or the daemon's, for nobody) are `permission_resolved`, paired with the
//! `permission_requested` they answer for the tool and its input.
//!
//! Invariant: the log is the only source, so the ledger after a kill -9 is the ledger the log
//! holds; nothing here writes. A request withdrawn because its turn ended is no decision and
//! is not listed.

use crate::permissions::input_hash;
use serde_json::Value;
use std::collections::HashMap;
use tether_proto::{AuditEntry, DecisionSource, Event, EventKind, PermissionDecision, SessionId};

/// Reads one session's events in order and keeps its decisions.
pub struct Ledger {
    session: SessionId,
    /// Decisions at or after this RFC 3339 time only.
    since: Option<String>,
    /// Tool calls seen: id → input.
    inputs: HashMap<String, Value>,
    /// Open requests: id → (tool call, tool, input).
    requests: HashMap<String, (String, String, Value)>,
    entries: Vec<AuditEntry>,
}

impl Ledger {
    /// An empty ledger of `session`.
    pub fn new(session: SessionId, since: Option<String>) -> Self {
        Self {
            session,
            since,
            inputs: HashMap::new(),
            requests: HashMap::new(),
            entries: Vec::new(),
        }
    }

    /// Takes in the next event of the log.
    pub fn read(&mut self, event: Event) {
        let Some(seq) = event.seq else {
            return;
        };
        let ts = event.ts;
        match event.kind {
            EventKind::ToolCall {
                tool_call_id,
                input,
                ..
            } => {
                self.inputs.insert(tool_call_id, input);
            }
            EventKind::SubagentEvent { event, .. } => {
                if let EventKind::ToolCall {
                    tool_call_id,
                    input,
                    ..
                } = *event
                {
                    self.inputs.insert(tool_call_id, input);
                }
            }
            EventKind::PermissionDecided {
                tool_call_id,
                tool,
                decision,
                source,
                rule,
                rule_source,
                mode,
                input_hash: checked,
            } => {
                // The input checked; a log of an older build names only the model's.
                let input_hash = match checked {
                    h if !h.is_empty() => h,
                    _ => input_hash(self.inputs.get(&tool_call_id).unwrap_or(&Value::Null)),
                };
                let entry = AuditEntry {
                    session_id: self.session.clone(),
                    seq,
                    ts,
                    input_hash,
                    tool_call_id,
                    tool,
                    decision,
                    mode: (source == DecisionSource::Mode).then_some(mode),
                    source,
                    rule,
                    rule_source,
                    by: None,
                    request_id: None,
                };
                self.keep(entry);
            }
            EventKind::PermissionRequested {
                request_id,
                tool_call_id,
                tool,
                input,
                ..
            } => {
                self.requests
                    .insert(request_id, (tool_call_id, tool, input));
            }
            EventKind::PermissionResolved {
                request_id,
                decision,
                resolved_by,
                ..
            } => {
                let Some((tool_call_id, tool, input)) = self.requests.remove(&request_id) else {
                    return;
                };
                if decision == PermissionDecision::Cancelled {
                    return;
                }
                let entry = AuditEntry {
                    session_id: self.session.clone(),
                    seq,
                    ts,
                    tool_call_id,
                    tool,
                    input_hash: input_hash(&input),
                    decision,
                    source: if resolved_by.is_some() {
                        DecisionSource::Person
                    } else {
                        DecisionSource::Daemon
                    },
                    rule: None,
                    rule_source: None,
                    mode: None,
                    by: resolved_by,
                    request_id: Some(request_id),
                };
                self.keep(entry);
            }
            _ => {}
        }
    }

    fn keep(&mut self, entry: AuditEntry) {
        // Timestamps are RFC 3339 UTC of one width, so they compare as text.
        if self.since.as_ref().is_none_or(|s| entry.ts >= *s) {
            self.entries.push(entry);
        }
    }

    /// The decisions, in log order.
    pub fn entries(self) -> Vec<AuditEntry> {
        self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tether_proto::{Channel, ClientKind, ClientRef, ConnectionId, PermissionMode};

    fn event(seq: u64, ts: &str, kind: EventKind) -> Event {
        Event {
            session_id: "s".into(),
            seq: Some(seq),
            epoch: 1,
            ts: ts.into(),
            turn_id: None,
            kind,
        }
    }

    #[test]
    fn the_hash_does_not_depend_on_key_order() {
        let a = input_hash(&json!({"command": "ls", "timeout": 5}));
        let b: Value = serde_json::from_str(r#"{"timeout":5,"command":"ls"}"#).expect("json");
        assert_eq!(a, input_hash(&b));
        assert_ne!(a, input_hash(&json!({"command": "ls -a", "timeout": 5})));
        assert!(a.starts_with("sha256:") && a.len() == 7 + 64);
    }

    #[test]
    fn rules_modes_and_people_are_listed_and_withdrawals_are_not() {
        let bob = ClientRef {
            client_id: ConnectionId(4),
            kind: ClientKind::Bridge,
            name: None,
            node: None,
            principal: Some("bob".into()),
            channel: Some(Channel::Ssh),
        };
        let mut ledger = Ledger::new("s".into(), Some("2026-01-01T00:00:02.000Z".into()));
        let call = |id: &str, cmd: &str| EventKind::ToolCall {
            tool_call_id: id.into(),
            name: "Bash".into(),
            input: json!({"command": cmd}),
        };
        let decided = |id: &str| EventKind::PermissionDecided {
            tool_call_id: id.into(),
            tool: "Bash".into(),
            decision: PermissionDecision::AllowOnce,
            source: DecisionSource::Rule,
            rule: Some("Bash(ls:*)".into()),
            rule_source: Some(".claude/settings.json:4".into()),
            mode: PermissionMode::Default,
            input_hash: String::new(),
        };
        let asked = |req: &str, id: &str| EventKind::PermissionRequested {
            request_id: req.into(),
            tool_call_id: id.into(),
            tool: "Bash".into(),
            input: json!({"command": "rm x"}),
            preview: String::new(),
            options: vec![],
            rule: String::new(),
            rules: vec![],
        };
        let resolved = |req: &str, d, by: Option<ClientRef>| EventKind::PermissionResolved {
            request_id: req.into(),
            decision: d,
            resolved_by: by,
            message: None,
            rule: None,
            rules: vec![],
        };
        let events = [
            event(1, "2026-01-01T00:00:01.000Z", call("t0", "ls")),
            event(2, "2026-01-01T00:00:01.000Z", decided("t0")),
            event(3, "2026-01-01T00:00:02.000Z", call("t1", "ls")),
            event(4, "2026-01-01T00:00:02.000Z", decided("t1")),
            event(5, "2026-01-01T00:00:03.000Z", call("t2", "rm x")),
            event(6, "2026-01-01T00:00:03.000Z", asked("p1", "t2")),
            event(
                7,
                "2026-01-01T00:00:04.000Z",
                resolved("p1", PermissionDecision::AllowOnce, Some(bob.clone())),
            ),
            event(8, "2026-01-01T00:00:05.000Z", asked("p2", "t3")),
            event(
                9,
                "2026-01-01T00:00:06.000Z",
                resolved("p2", PermissionDecision::Cancelled, None),
            ),
        ];
        for e in events {
            ledger.read(e);
        }
        let entries = ledger.entries();
        assert_eq!(
            entries.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [4, 7],
            "the first is before `since`, the withdrawal is no decision"
        );
        assert_eq!(entries[0].source, DecisionSource::Rule);
        assert_eq!(
            entries[0].rule_source.as_deref(),
            Some(".claude/settings.json:4")
        );
        assert_eq!(entries[0].input_hash, input_hash(&json!({"command": "ls"})));
        assert_eq!(entries[1].source, DecisionSource::Person);
        assert_eq!(entries[1].by, Some(bob));
        assert_eq!(entries[1].tool_call_id, "t2");
        assert_eq!(
            entries[1].input_hash,
            input_hash(&json!({"command": "rm x"}))
        );
    }
}
