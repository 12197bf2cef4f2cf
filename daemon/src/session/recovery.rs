//! Loading a session from its log, and what a stop left behind: the log replayed into the
//! history ([`replay`], from the session's checkpoint on, so a long session loads as fast as a
//! short one), a turn with no `turn_ended` ended or resumed ([`SessionActor::recover`]),
//! background shells reaped or reported lost, and the end of shells that finish now.
//!
//! Invariant: a tool that was running when the daemon stopped is never run again; it gets an
//! `is_error` result saying so, and the history sent to the API stays valid.

use super::SessionError;
use super::actor::SessionActor;
use super::launch::{Launch, TurnJob};
use super::ledger::Ledger;
use crate::agent::{History, TurnOutcome};
use crate::store::{EventLog, Store};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use tether_proto::{
    Event, EventKind, PermissionDecision, Seq, SessionId, ShellState, TurnId, TurnOptions,
};

/// What a session's log says when it is loaded.
#[derive(Serialize, Deserialize)]
pub(super) struct Loaded {
    pub head: Seq,
    pub history: History,
    pub ledger: Ledger,
    pub open_turn: Option<OpenTurn>,
    /// Seqs of records that could not be decoded (skipped).
    #[serde(skip)]
    pub damaged: Vec<Seq>,
    /// Background shells started and never seen to end.
    pub shells: Vec<OrphanShell>,
    /// Answers the store recorded for open requests that the log does not show resolved
    /// (request id → encoded answer): filled in by whoever loads the session.
    #[serde(skip)]
    pub recorded: std::collections::HashMap<String, Vec<u8>>,
    /// The working tree this node rebuilt for the session as it took it (`workspace_restored`,
    /// logged first).
    #[serde(skip)]
    pub restored: Option<EventKind>,
}

impl Loaded {
    /// A new session's: nothing logged yet.
    pub fn empty() -> Self {
        Self {
            head: 0,
            history: History::default(),
            ledger: Ledger::default(),
            open_turn: None,
            damaged: Vec::new(),
            shells: Vec::new(),
            recorded: Default::default(),
            restored: None,
        }
    }
}

/// A background shell the log shows started and never ended.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct OrphanShell {
    pub id: String,
    pub command: String,
    pub pid: Option<i32>,
    pub start_ticks: Option<u64>,
}

/// What the log says about a turn that has no `turn_ended`.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct OpenTurn {
    pub turn_id: TurnId,
    /// Tool calls without a result, in order.
    pub unanswered: Vec<String>,
    /// Text streamed into blocks that never completed: index → text.
    pub partial: BTreeMap<u32, String>,
}

/// How a turn the daemon's stop cut ends.
pub(super) fn interrupted_outcome() -> TurnOutcome {
    TurnOutcome::without_model(tether_proto::StopReason::InterruptedByRestart, None)
}

/// A load that replays more events than this past the session's checkpoint writes a new one.
const CHECKPOINT_AFTER: Seq = 256;
/// The checkpoint format; one of another version is ignored and the log replayed whole.
const CHECKPOINT_VERSION: u32 = 3;

/// Turns a session starts by itself in a row (for background shells that ended) before it
/// waits for a person.
const MAX_WAKEUPS: u32 = 3;

/// A session's state as of `loaded.head`: exactly what replaying its log up to there yields.
/// Valid because a log only grows (retention removes deltas of ended turns, which the state
/// no longer depends on).
#[derive(Serialize, Deserialize)]
struct Checkpoint {
    version: u32,
    loaded: Loaded,
}

/// Replays a session's log into its history and ledger: from its checkpoint on when it has a
/// usable one, and leaves a new checkpoint when that replay was long.
pub(super) fn replay(
    store: &Store,
    id: &SessionId,
    log: &EventLog,
) -> Result<Loaded, SessionError> {
    let head = log.head()?;
    let mut loaded = store
        .checkpoint(id)?
        .and_then(|bytes| match serde_json::from_slice::<Checkpoint>(&bytes) {
            Ok(c) if c.version == CHECKPOINT_VERSION && c.loaded.head <= head => Some(c.loaded),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(session = %id, "ignoring an unreadable checkpoint: {e}");
                None
            }
        })
        .unwrap_or_else(Loaded::empty);
    let from = loaded.head;
    loaded.head = head;
    for record in log.iter_between(from, head) {
        let (seq, bytes) = record?;
        let Ok(event) = serde_json::from_slice::<Event>(&bytes) else {
            tracing::warn!(seq, "skipping an undecodable event while loading a session");
            loaded.damaged.push(seq);
            continue;
        };
        track(&mut loaded, &event);
        loaded.history.apply(&event.kind);
        loaded.ledger.apply(&event.kind, event.turn_id.as_ref());
        loaded.ledger.marks.apply(&event);
    }
    // A damaged log keeps being replayed whole, so its notice is never lost.
    if head - from > CHECKPOINT_AFTER && loaded.damaged.is_empty() {
        let checkpoint = Checkpoint {
            version: CHECKPOINT_VERSION,
            loaded,
        };
        match serde_json::to_vec(&checkpoint) {
            Ok(bytes) => {
                if let Err(e) = store.put_checkpoint(id, &bytes) {
                    tracing::warn!(session = %id, "cannot write a checkpoint: {e}");
                }
            }
            Err(e) => tracing::warn!(session = %id, "cannot encode a checkpoint: {e}"),
        }
        loaded = checkpoint.loaded;
    }
    Ok(loaded)
}

/// Follows the open turn and the background shells through one event.
fn track(loaded: &mut Loaded, event: &Event) {
    match (&event.kind, loaded.open_turn.as_mut()) {
        (EventKind::TurnStarted { .. }, _) => {
            loaded.open_turn = event.turn_id.clone().map(|turn_id| OpenTurn {
                turn_id,
                unanswered: Vec::new(),
                partial: BTreeMap::new(),
            })
        }
        (EventKind::TurnEnded { .. }, _) => loaded.open_turn = None,
        (
            EventKind::ToolResult {
                details: Some(d), ..
            },
            _,
        ) if d.get("backgroundShell").is_some() => {
            let b = &d["backgroundShell"];
            if let (Some(id), Some(command)) = (b["id"].as_str(), b["command"].as_str()) {
                loaded.shells.push(OrphanShell {
                    id: id.to_owned(),
                    command: command.to_owned(),
                    pid: b["pid"].as_i64().and_then(|p| i32::try_from(p).ok()),
                    start_ticks: b["startTicks"].as_u64(),
                });
            }
        }
        (EventKind::BackgroundShellEnded { shell_id, .. }, _) => {
            loaded.shells.retain(|s| &s.id != shell_id)
        }
        (EventKind::ToolCall { tool_call_id, .. }, Some(t)) => {
            t.unanswered.push(tool_call_id.clone())
        }
        (EventKind::ToolResult { tool_call_id, .. }, Some(t)) => {
            t.unanswered.retain(|id| id != tool_call_id)
        }
        (EventKind::TextDelta { index, text }, Some(t)) => {
            t.partial.entry(*index).or_default().push_str(text)
        }
        (EventKind::AssistantBlockCompleted { index, .. }, Some(t)) => {
            t.partial.remove(index);
        }
        (EventKind::AssistantMessageCompleted { .. } | EventKind::Retrying { .. }, Some(t)) => {
            t.partial.clear()
        }
        _ => {}
    }
}

impl SessionActor {
    /// Ends or resumes a turn an earlier daemon left open. Text clients saw stays as a cut-off
    /// block; tools that were running get an interrupted result (never run again). A turn that
    /// was waiting for permission keeps its requests open and goes on once they are answered;
    /// any other open turn ends `interrupted_by_restart`.
    pub(super) fn recover(&mut self, open: OpenTurn) {
        let turn_id = open.turn_id.clone();
        let at = || Some(turn_id.clone());
        // Text clients saw stays visible as a completed (truncated) block; it does not join the
        // history, because the reply never completed.
        for (index, text) in &open.partial {
            self.emit_in(
                EventKind::AssistantBlockCompleted {
                    index: *index,
                    block: serde_json::json!({"type": "text", "text": format!("{text} [cut off: the daemon stopped]")}),
                },
                at(),
            );
        }
        let waiting_for_answer = self.ledger.awaiting_tool_calls();
        let awaiting: HashSet<&String> = open
            .unanswered
            .iter()
            .filter(|id| waiting_for_answer.contains(*id))
            .collect();
        let interrupted: Vec<String> = open
            .unanswered
            .iter()
            .filter(|id| !awaiting.contains(id))
            .cloned()
            .collect();
        let resume = !awaiting.is_empty() && self.env.llm.is_ok();
        for id in &interrupted {
            self.emit_in(
                EventKind::ToolResult {
                    tool_call_id: id.clone(),
                    content: serde_json::json!("interrupted: the daemon stopped while this tool was running; it was not run again"),
                    is_error: true,
                    details: None,
                    snapshot: None,
                },
                at(),
            );
        }
        if resume {
            self.emit_in(
                EventKind::TurnRecovered {
                    action: tether_proto::RecoveryAction::AwaitingPermission,
                    interrupted_tools: interrupted,
                },
                at(),
            );
            return self.resume(turn_id, &open.unanswered);
        }
        self.emit_in(
            EventKind::TurnRecovered {
                action: tether_proto::RecoveryAction::Ended,
                interrupted_tools: open.unanswered.clone(),
            },
            at(),
        );
        let pending = self.ledger.open_ids();
        for request_id in pending {
            // Answered before the stop (the answer recorded, not yet logged): logged as it was
            // answered; the call is interrupted all the same.
            let resolved = match self.broker.take_recorded(&request_id) {
                Some(answer) => EventKind::PermissionResolved {
                    request_id,
                    decision: answer.decision(),
                    resolved_by: Some(answer.by().clone()),
                    message: answer.message().map(str::to_owned),
                    rule: None,
                    rules: Vec::new(),
                },
                None => EventKind::PermissionResolved {
                    request_id,
                    decision: PermissionDecision::Cancelled,
                    resolved_by: None,
                    message: Some("the daemon stopped while this request was pending".into()),
                    rule: None,
                    rules: Vec::new(),
                },
            };
            self.emit_in(resolved, at());
        }
        self.end_turn(turn_id, interrupted_outcome());
        self.emit(EventKind::Notice {
            level: tether_proto::NoticeLevel::Warning,
            message:
                "the daemon stopped during the last turn; it was ended and the session is ready"
                    .into(),
        });
    }

    /// Goes on with a turn that waited for permission: its unanswered calls run once their
    /// requests are answered.
    fn resume(&mut self, turn_id: TurnId, unanswered: &[String]) {
        let calls: Vec<crate::agent::Call> = self
            .history
            .unanswered_tool_uses()
            .into_iter()
            .map(|b| {
                let id = b["id"].as_str().unwrap_or_default().to_owned();
                crate::agent::Call {
                    logged: unanswered.contains(&id),
                    id,
                    name: b["name"].as_str().unwrap_or_default().to_owned(),
                    input: b.get("input").cloned().unwrap_or_default(),
                }
            })
            .collect();
        self.emit_in(
            EventKind::Notice {
                level: tether_proto::NoticeLevel::Info,
                message: "the daemon stopped while this turn waited for permission; the request is still open, and the turn goes on once it is answered".into(),
            },
            Some(turn_id.clone()),
        );
        let cwd = std::path::PathBuf::from(&self.journal.record.cwd);
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        let mut hooks =
            crate::hooks::Hooks::load(&cwd, home.as_deref(), self.env.config_hooks.as_ref());
        hooks.watched_by(self.hook_watcher(Some(turn_id.clone())));
        let hooks = Arc::new(hooks);
        let plan = Launch {
            model: self.journal.record.model.clone(),
            tools: self.env.tools.clone(),
            hooks,
            job: TurnJob::Resume(calls),
            cancel: Default::default(),
            prompt: None,
            options: TurnOptions::default(),
            interactive: true,
        };
        self.launch(turn_id, plan);
    }

    /// Background shells an earlier daemon left: killed if still running, reported lost.
    pub(super) fn recover_shells(&mut self, shells: Vec<OrphanShell>) {
        for shell in shells {
            let killed = shell
                .pid
                .is_some_and(|pid| crate::tools::reap_orphan(pid, shell.start_ticks));
            self.workspace.jobs.adopt_lost(&shell.id, &shell.command);
            let what = if killed {
                "was still running after tetherd stopped and has been killed"
            } else {
                "ended while tetherd was stopped"
            };
            self.emit(EventKind::BackgroundShellEnded {
                message: format!(
                    "background shell {} ({}) {what}; its later output is lost",
                    shell.id, shell.command
                ),
                shell_id: shell.id,
                command: shell.command,
                state: tether_proto::ShellState::Lost,
                exit_code: None,
            });
        }
    }

    /// A background shell of this session ended.
    pub(super) fn shell_ended(&mut self, id: String, command: String, end: crate::tools::JobEnd) {
        let (state, exit_code) = match end {
            crate::tools::JobEnd::Exited(code) => (ShellState::Exited, code),
            crate::tools::JobEnd::Killed => (ShellState::Killed, None),
            crate::tools::JobEnd::Lost => (ShellState::Lost, None),
        };
        self.emit(EventKind::BackgroundShellEnded {
            message: format!("background shell {id} ({command}) {}", end.describe()),
            shell_id: id,
            command,
            state,
            exit_code,
        });
        // The model learns of it with the next prompt; while a controller is here and the
        // session idles, that prompt comes now (a few times in a row at most, so shells that
        // start shells cannot keep it busy alone).
        if end != crate::tools::JobEnd::Lost
            && self.turns.is_idle()
            && self.presence.has_controller()
            && self.wakeups < MAX_WAKEUPS
        {
            self.wakeups += 1;
            let request = super::TurnRequest {
                input: vec![tether_proto::InputItem::Text {
                    text: "A background shell ended (see above); go on with its result.".into(),
                }],
                client_turn_id: None,
                mode: tether_proto::BusyMode::Queue,
                options: Default::default(),
                by: tether_proto::ClientRef {
                    client_id: tether_proto::ConnectionId(0),
                    kind: tether_proto::ClientKind::Script,
                    name: Some("tetherd".into()),
                    node: None,
                    principal: None,
                    channel: None,
                },
                command: None,
            };
            if let Err(e) = self.request_turn(request) {
                tracing::warn!(session = %self.journal.record.id, "could not wake the model: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_proto::TokenUsage;

    fn event(seq: u64, turn: Option<&str>, kind: EventKind) -> Event {
        Event {
            session_id: tether_proto::SessionId("s".into()),
            seq: Some(seq),
            epoch: 1,
            ts: String::new(),
            turn_id: turn.map(|t| TurnId(t.into())),
            kind,
        }
    }

    #[test]
    fn an_open_turn_keeps_its_unanswered_calls_and_cut_text() {
        let mut loaded = Loaded::empty();
        let t = Some("t1");
        let call = |id: &str| EventKind::ToolCall {
            tool_call_id: id.into(),
            name: "Bash".into(),
            input: serde_json::json!({}),
        };
        let events = [
            event(
                1,
                t,
                EventKind::TurnStarted {
                    input: vec![],
                    content: vec![],
                    by: None,
                    client_turn_id: None,
                },
            ),
            event(2, t, call("a")),
            event(3, t, call("b")),
            event(
                4,
                t,
                EventKind::ToolResult {
                    tool_call_id: "a".into(),
                    content: serde_json::json!("ok"),
                    is_error: false,
                    details: None,
                    snapshot: None,
                },
            ),
            event(
                5,
                t,
                EventKind::TextDelta {
                    index: 0,
                    text: "half a ".into(),
                },
            ),
            event(
                6,
                t,
                EventKind::TextDelta {
                    index: 0,
                    text: "sentence".into(),
                },
            ),
        ];
        for e in &events {
            track(&mut loaded, e);
        }
        let open = loaded.open_turn.as_ref().expect("open");
        assert_eq!(open.turn_id, TurnId("t1".into()));
        assert_eq!(open.unanswered, ["b"]);
        assert_eq!(
            open.partial.get(&0).map(String::as_str),
            Some("half a sentence")
        );
        track(
            &mut loaded,
            &event(
                7,
                t,
                EventKind::TurnEnded {
                    stop_reason: tether_proto::StopReason::EndTurn,
                    usage: TokenUsage::default(),
                    cost_usd: None,
                    error: None,
                    api_ms: None,
                    cancelled_by: None,
                },
            ),
        );
        assert!(loaded.open_turn.is_none());
    }
}

#[cfg(test)]
mod checkpoint_tests {
    use super::*;
    use serde_json::json;
    use tether_proto::{StopReason, TokenUsage};

    /// Appends one turn (prompt, streamed reply, a tool call and its result, the end) or, with
    /// `open`, a turn the daemon's stop cut mid-reply.
    fn turn(log: &EventLog, seq: &mut u64, n: u32, open: bool) {
        let turn = Some(TurnId(format!("t{n}")));
        let mut push = |kind: EventKind| {
            *seq += 1;
            let e = Event {
                session_id: SessionId("s".into()),
                seq: Some(*seq),
                epoch: 1,
                ts: String::new(),
                turn_id: turn.clone(),
                kind,
            };
            log.append(*seq, &serde_json::to_vec(&e).expect("encode"))
                .expect("append");
        };
        push(EventKind::TurnStarted {
            input: vec![],
            content: vec![json!({"type": "text", "text": format!("prompt {n}")})],
            by: None,
            client_turn_id: Some(format!("c{n}")),
        });
        for word in ["looking ", "at ", "it"] {
            push(EventKind::TextDelta {
                index: 0,
                text: word.into(),
            });
        }
        if open {
            push(EventKind::ToolCall {
                tool_call_id: format!("call{n}"),
                name: "Bash".into(),
                input: json!({"command": "true"}),
            });
            return;
        }
        push(EventKind::AssistantBlockCompleted {
            index: 0,
            block: json!({"type": "text", "text": "looking at it"}),
        });
        push(EventKind::AssistantMessageCompleted {
            model: "m".into(),
            usage: TokenUsage {
                input_tokens: u64::from(n),
                ..Default::default()
            },
            stop_reason: Some(StopReason::EndTurn),
        });
        push(EventKind::TurnEnded {
            stop_reason: if n.is_multiple_of(7) {
                StopReason::Cancelled
            } else {
                StopReason::EndTurn
            },
            usage: TokenUsage::default(),
            cost_usd: Some(0.25),
            error: None,
            api_ms: None,
            cancelled_by: None,
        });
    }

    fn state(loaded: &Loaded) -> serde_json::Value {
        serde_json::to_value(loaded).expect("encode")
    }

    #[test]
    fn loading_from_a_checkpoint_equals_replaying_the_whole_log() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let id = SessionId("s".into());
        let log = store.log(&id);
        let mut seq = 0;
        for n in 0..30 {
            turn(&log, &mut seq, n, false);
        }
        // Short: no checkpoint yet.
        let whole = replay(&store, &id, &log).expect("replay");
        assert!(store.checkpoint(&id).expect("read").is_none());
        assert_eq!(whole.head, seq);
        for n in 30..100 {
            turn(&log, &mut seq, n, false);
        }
        // Long enough: this load leaves a checkpoint at its head.
        let first = replay(&store, &id, &log).expect("replay");
        let written = store.checkpoint(&id).expect("read").expect("a checkpoint");
        assert!(written.len() > 100);
        // More turns, the last one cut open; loading from the checkpoint gives what a replay of
        // the whole log gives (the checkpoint removed).
        for n in 100..103 {
            turn(&log, &mut seq, n, false);
        }
        turn(&log, &mut seq, 103, true);
        let resumed = replay(&store, &id, &log).expect("replay");
        assert_eq!(resumed.head, seq);
        assert!(
            store.checkpoint(&id).expect("read").as_deref() == Some(&written[..]),
            "a short replay leaves the checkpoint as it was"
        );
        let other = tempfile::tempdir().expect("tempdir");
        let fresh = Store::open(other.path()).expect("store");
        let copy = fresh.log(&id);
        for record in log.iter_between(0, seq) {
            let (s, bytes) = record.expect("read");
            copy.append(s, &bytes).expect("append");
        }
        let full = replay(&fresh, &id, &copy).expect("replay");
        assert_eq!(state(&resumed), state(&full));
        assert!(resumed.open_turn.is_some() && first.open_turn.is_none());
        assert_eq!(
            resumed.history.messages().len(),
            full.history.messages().len()
        );

        // A checkpoint from another version, or past the log's head, is ignored.
        store
            .put_checkpoint(&id, br#"{"version": 999, "loaded": {}}"#)
            .expect("write");
        assert_eq!(
            state(&replay(&store, &id, &log).expect("replay")),
            state(&full)
        );
        store.put_checkpoint(&id, b"not json").expect("write");
        assert_eq!(
            state(&replay(&store, &id, &log).expect("replay")),
            state(&full)
        );
    }
}
