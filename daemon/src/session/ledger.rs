//! The session's ledger: what its log says beyond the conversation — usage and cost of every
//! finished turn, which `clientTurnId` started which turn, permission requests still open and
//! how answered ones were resolved, and the rules answers added. Derived from the log like the
//! history (one `apply` per event, on load and live), owned by the session, never by a turn.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use tether_proto::{ClientRef, EventKind, PermissionDecision, TokenUsage, TurnId};

/// A permission request nobody has answered yet.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpenRequest {
    /// The tool call it holds.
    pub tool_call_id: String,
    /// The rules an "always" or "this session" answer adds.
    pub rules: Vec<String>,
    /// The `permission_requested` data, as clients saw it.
    pub data: Value,
}

/// A session's totals, idempotency keys and permission history.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Ledger {
    /// Tokens of every finished turn.
    pub usage: TokenUsage,
    /// Cost of every finished turn; `None` once any turn's cost was unknown.
    pub cost_usd: Option<f64>,
    turns_ended: u64,
    /// The session reached its budget, and it has not been changed since.
    #[serde(default)]
    pub budget_reached: bool,
    client_turns: HashMap<String, TurnId>,
    open: BTreeMap<String, OpenRequest>,
    resolved: HashMap<String, (PermissionDecision, Option<ClientRef>)>,
    session_rules: Vec<String>,
    /// The turns and the snapshots around them, for rewinding.
    #[serde(default)]
    pub(super) marks: super::rewind::TurnMarks,
}

impl Ledger {
    /// Applies one event of the session's log.
    pub fn apply(&mut self, event: &EventKind, turn_id: Option<&TurnId>) {
        match event {
            // The daemon's daily cap stops each prompt, and pauses no session.
            EventKind::BudgetReached { daily, .. } => self.budget_reached |= !daily,
            EventKind::SessionConfigured {
                budget_usd: Some(_),
                ..
            } => self.budget_reached = false,
            EventKind::TurnStarted {
                client_turn_id: Some(c),
                ..
            } => {
                if let Some(t) = turn_id {
                    self.client_turns.insert(c.clone(), t.clone());
                }
            }
            EventKind::TurnEnded {
                usage, cost_usd, ..
            } => {
                self.usage.add(usage);
                self.cost_usd = match (self.turns_ended, self.cost_usd, cost_usd) {
                    (0, _, c) => *c,
                    (_, Some(a), Some(b)) => Some(a + b),
                    _ => None,
                };
                self.turns_ended += 1;
            }
            EventKind::PermissionRequested {
                request_id,
                tool_call_id,
                rule,
                rules,
                ..
            } => {
                let data = serde_json::to_value(event)
                    .map(|v| v["data"].clone())
                    .unwrap_or_default();
                let rules = if rules.is_empty() {
                    vec![rule.clone()]
                } else {
                    rules.clone()
                };
                self.open.insert(
                    request_id.clone(),
                    OpenRequest {
                        tool_call_id: tool_call_id.clone(),
                        rules,
                        data,
                    },
                );
            }
            EventKind::PermissionResolved {
                request_id,
                decision,
                resolved_by,
                rule,
                rules,
                ..
            } => {
                self.open.remove(request_id);
                self.resolved
                    .insert(request_id.clone(), (*decision, resolved_by.clone()));
                if !rules.is_empty() {
                    self.session_rules.extend(rules.iter().cloned());
                } else if let Some(rule) = rule {
                    self.session_rules.push(rule.clone());
                }
            }
            _ => {}
        }
    }

    /// The session's totals so far; a session that spent nothing has cost 0.
    pub fn spent(&self) -> (TokenUsage, Option<f64>) {
        let cost = match self.cost_usd {
            None if self.usage == TokenUsage::default() => Some(0.0),
            c => c,
        };
        (self.usage, cost)
    }

    /// The turn a client's idempotency key started.
    pub fn turn_for(&self, client_turn_id: &str) -> Option<&TurnId> {
        self.client_turns.get(client_turn_id)
    }

    /// The open request logged for a tool call: its id and the rules an answer adds.
    pub fn open_request_for(&self, tool_call_id: &str) -> Option<(String, Vec<String>)> {
        self.open
            .iter()
            .find(|(_, r)| r.tool_call_id == tool_call_id)
            .map(|(id, r)| (id.clone(), r.rules.clone()))
    }

    /// Whether `request_id` was asked and not resolved.
    pub fn is_open(&self, request_id: &str) -> bool {
        self.open.contains_key(request_id)
    }

    /// The tool calls held by an open request.
    pub fn awaiting_tool_calls(&self) -> HashSet<String> {
        self.open.values().map(|r| r.tool_call_id.clone()).collect()
    }

    /// The ids of the open requests, in order.
    pub fn open_ids(&self) -> Vec<String> {
        self.open.keys().cloned().collect()
    }

    /// The open requests as clients saw them.
    pub fn open_requests(&self) -> Vec<Value> {
        self.open.values().map(|r| r.data.clone()).collect()
    }

    /// How an answered request was resolved, and by whom.
    pub fn resolution(&self, request_id: &str) -> Option<&(PermissionDecision, Option<ClientRef>)> {
        self.resolved.get(request_id)
    }

    /// The rules `allow_session` / `allow_always` answers added.
    pub fn session_rules(&self) -> &[String] {
        &self.session_rules
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requested(id: &str, call: &str, rules: &[&str]) -> EventKind {
        EventKind::PermissionRequested {
            request_id: id.into(),
            tool_call_id: call.into(),
            tool: "Bash".into(),
            input: serde_json::json!({"command": "make"}),
            preview: "make".into(),
            options: Vec::new(),
            rule: rules.join(", "),
            rules: rules.iter().map(|r| (*r).to_owned()).collect(),
        }
    }

    fn resolved(id: &str, decision: PermissionDecision, rules: &[&str]) -> EventKind {
        EventKind::PermissionResolved {
            request_id: id.into(),
            decision,
            resolved_by: None,
            message: None,
            rule: None,
            rules: rules.iter().map(|r| (*r).to_owned()).collect(),
        }
    }

    #[test]
    fn requests_open_resolve_and_leave_their_rules() {
        let mut l = Ledger::default();
        l.apply(&requested("p1", "c1", &["Bash(make:*)"]), None);
        l.apply(&requested("p2", "c2", &[]), None);
        assert_eq!(
            l.open_request_for("c1"),
            Some(("p1".into(), vec!["Bash(make:*)".to_owned()]))
        );
        assert_eq!(l.open_ids(), ["p1", "p2"]);
        assert_eq!(l.open_requests()[0]["toolCallId"], "c1");
        l.apply(
            &resolved("p1", PermissionDecision::AllowSession, &["Bash(make:*)"]),
            None,
        );
        l.apply(&resolved("p2", PermissionDecision::Deny, &[]), None);
        assert!(l.awaiting_tool_calls().is_empty());
        assert_eq!(l.session_rules(), ["Bash(make:*)"]);
        assert_eq!(
            l.resolution("p2").map(|r| r.0),
            Some(PermissionDecision::Deny)
        );
    }

    #[test]
    fn totals_and_idempotency_keys() {
        let mut l = Ledger::default();
        assert_eq!(l.spent().1, Some(0.0), "nothing spent costs nothing");
        let t = TurnId("t1".into());
        l.apply(
            &EventKind::TurnStarted {
                input: Vec::new(),
                content: Vec::new(),
                by: None,
                client_turn_id: Some("k1".into()),
            },
            Some(&t),
        );
        assert_eq!(l.turn_for("k1"), Some(&t));
        let ended = |cost| EventKind::TurnEnded {
            stop_reason: tether_proto::StopReason::EndTurn,
            usage: TokenUsage {
                input_tokens: 10,
                ..TokenUsage::default()
            },
            cost_usd: cost,
            error: None,
            api_ms: None,
            cancelled_by: None,
        };
        l.apply(&ended(Some(0.5)), Some(&t));
        l.apply(&ended(Some(0.25)), Some(&t));
        assert_eq!(
            l.spent(),
            (
                TokenUsage {
                    input_tokens: 20,
                    ..TokenUsage::default()
                },
                Some(0.75)
            )
        );
        l.apply(&ended(None), Some(&t));
        assert_eq!(
            l.spent().1,
            None,
            "an unknown price makes the total unknown"
        );
    }
}
