//! Rewinding a session to just before one of its turns. [`TurnMarks`] follows the log (like the
//! ledger, one `apply` per event) and knows each turn and the snapshots around it; the actor's
//! `rewind` checks the request, puts files back from the snapshots in a task off its loop
//! (prompts wait behind it as behind a turn), then logs one `rewound` event that the history
//! and every client follow.
//!
//! Invariant: a rewind deletes nothing from the log; turns are numbered from 1 in the order they
//! started, rewound ones included, so a number always names the same turn.

use super::SessionError;
use super::actor::{Command, SessionActor};
use serde::{Deserialize, Serialize};
use tether_proto::{Checkpoint, ClientRef, Event, EventKind, RewindResult, RewindScope};
use tokio::sync::oneshot;

/// One turn, as a rewind sees it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Mark {
    turn: u64,
    /// The seq of its `turn_started` (where its whole prompt is).
    seq: u64,
    /// The start of its prompt.
    preview: String,
    /// The working tree before its first change, once it made one.
    before: Option<String>,
    /// Still in the conversation (not rewound away).
    live: bool,
}

/// The session's turns and the snapshots that bracket them, derived from the log.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct TurnMarks {
    marks: Vec<Mark>,
    /// The last snapshot an event names.
    last: Option<String>,
    /// The tool call that left the tree in that state (none after a rewind).
    #[serde(default)]
    last_call: Option<String>,
    /// The snapshots tether's own changes made (tool calls, rewinds), each with the number of
    /// turns started when it was made: what a rewind may put back.
    #[serde(default)]
    made: Vec<(u64, String)>,
}

/// How much of a prompt the list keeps.
const PREVIEW: usize = 200;

impl TurnMarks {
    /// Applies one event of the session's log.
    pub fn apply(&mut self, event: &Event) {
        match &event.kind {
            EventKind::TurnStarted { input, .. } => {
                let prompt = super::turns::text_of(input);
                let preview = match prompt.char_indices().nth(PREVIEW) {
                    Some((at, _)) => format!("{}…", &prompt[..at]),
                    None => prompt,
                };
                self.marks.push(Mark {
                    turn: self.marks.len() as u64 + 1,
                    seq: event.seq.unwrap_or(0),
                    preview,
                    before: None,
                    live: true,
                });
            }
            EventKind::ToolResult {
                snapshot: Some(s),
                tool_call_id,
                ..
            } => {
                // The tree before the turn's first change: the snapshot taken for it (results
                // of parallel calls may come in any order), else the last one before.
                if let Some(m) = self.marks.last_mut() {
                    match &s.before {
                        Some(before) => m.before = Some(before.clone()),
                        None if m.before.is_none() => m.before = self.last.clone(),
                        None => {}
                    }
                }
                // A call that changed nothing names the snapshot before it: not its making.
                let unchanged =
                    s.before.as_ref() == Some(&s.commit) || self.last.as_ref() == Some(&s.commit);
                if !unchanged {
                    self.made.push((self.marks.len() as u64, s.commit.clone()));
                }
                self.last = Some(s.commit.clone());
                self.last_call = Some(tool_call_id.clone());
            }
            EventKind::Rewound {
                to_turn,
                conversation,
                snapshot,
                ..
            } => {
                if let Some(s) = snapshot {
                    self.made.push((self.marks.len() as u64, s.clone()));
                    self.last = Some(s.clone());
                    self.last_call = None;
                }
                if *conversation {
                    for m in self.marks.iter_mut().filter(|m| m.turn >= *to_turn) {
                        m.live = false;
                    }
                }
            }
            _ => {}
        }
    }

    /// The last snapshot an event names, and the tool call that made it.
    pub fn last(&self) -> (Option<&str>, Option<&str>) {
        (self.last.as_deref(), self.last_call.as_deref())
    }

    /// The snapshot the files go back to for a rewind to `turn`: the tree before the first
    /// change made in it or after it (`None`: tether changed nothing since).
    fn code_target(&self, turn: u64) -> Option<&str> {
        self.marks
            .iter()
            .filter(|m| m.turn >= turn)
            .find_map(|m| m.before.as_deref())
    }

    /// The snapshots tether made from turn `turn` on.
    fn made_since(&self, turn: u64) -> std::collections::HashSet<String> {
        self.made
            .iter()
            .filter(|(at, _)| *at >= turn)
            .map(|(_, c)| c.clone())
            .collect()
    }

    fn live(&self, turn: u64) -> Option<&Mark> {
        self.marks.iter().find(|m| m.turn == turn && m.live)
    }

    /// The turns still in the conversation, oldest first.
    pub fn checkpoints(&self, conversation: impl Fn(u64) -> bool) -> Vec<Checkpoint> {
        self.marks
            .iter()
            .filter(|m| m.live)
            .map(|m| Checkpoint {
                turn: m.turn,
                prompt: m.preview.clone(),
                files: self.code_target(m.turn).is_some(),
                conversation: conversation(m.turn),
            })
            .collect()
    }
}

/// A rewind whose files are being put back.
pub(super) struct Rewinding {
    to_turn: u64,
    code: bool,
    conversation: bool,
    prompt: String,
    by: Option<ClientRef>,
    reply: oneshot::Sender<Result<RewindResult, SessionError>>,
}

impl SessionActor {
    /// `session/rewind`: checks the request, then puts files back off the loop
    /// ([`Self::rewound`] ends it).
    pub(super) fn rewind(
        &mut self,
        to_turn: u64,
        scope: RewindScope,
        overwrite: bool,
        by: Option<ClientRef>,
        reply: oneshot::Sender<Result<RewindResult, SessionError>>,
    ) {
        if by.as_ref().is_some_and(|b| self.presence.observer_only(b)) {
            let _ = reply.send(Err(SessionError::NotController));
            return;
        }
        let refuse = |why: String| Err(SessionError::CannotRewind(why));
        let checked = (|| {
            self.journal.writable()?;
            // Prompts queued behind no running turn (a session at its budget) wait on.
            if self.turns.running_id().is_some() {
                return refuse(
                    "a turn is running; stop it first (Esc, /cancel or turn/cancel)".into(),
                );
            }
            if self.turns.is_rewinding() {
                return refuse("another rewind is under way".into());
            }
            let Some(mark) = self.ledger.marks.live(to_turn) else {
                let live: Vec<u64> = self
                    .ledger
                    .marks
                    .checkpoints(|_| true)
                    .iter()
                    .map(|c| c.turn)
                    .collect();
                return refuse(match (live.first(), live.last()) {
                    (Some(a), Some(b)) => format!(
                        "turn {to_turn} is not in this conversation (its turns: {a} to {b}; /rewind lists them)"
                    ),
                    _ => "this session has no turns yet".into(),
                });
            };
            let conversation = scope != RewindScope::Code;
            let code = scope != RewindScope::Conversation;
            if conversation && !self.history.can_rewind_to(to_turn) {
                return refuse(format!(
                    "the conversation was cleared or compacted after turn {to_turn} began, so it cannot go back there; rewind the files only (code), or pick a later turn"
                ));
            }
            let files = if code {
                match self.ledger.marks.code_target(to_turn) {
                    None => None,
                    Some(target) => {
                        let Some(shadow) = self.shadow.clone() else {
                            return refuse(
                                "snapshots are off (snapshots.enabled), so files cannot be put back; rewind the conversation only".into(),
                            );
                        };
                        let last = self.ledger.marks.last.clone().unwrap_or_default();
                        let made = self.ledger.marks.made_since(to_turn);
                        Some((shadow, target.to_owned(), last, made))
                    }
                }
            } else {
                None
            };
            Ok((mark.seq, mark.preview.clone(), code, conversation, files))
        })();
        let (seq, preview, code, conversation, files) = match checked {
            Ok(c) => c,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        self.turns.set_rewinding(true);
        let log = self.journal.log().clone();
        let me = self.me.clone();
        let rewinding = Rewinding {
            to_turn,
            code,
            conversation,
            prompt: preview,
            by,
            reply,
        };
        let packs = self.journal.store().packs();
        let shared = files.as_ref().map(|(shadow, ..)| shadow.clone());
        self.tasks.spawn(async move {
            let work = tokio::task::spawn_blocking(move || {
                // The whole prompt, from its event.
                let prompt = log
                    .read(seq.saturating_sub(1), seq, 1)
                    .ok()
                    .and_then(|r| r.into_iter().next())
                    .and_then(|(_, bytes)| serde_json::from_slice::<Event>(&bytes).ok())
                    .and_then(|e| match e.kind {
                        EventKind::TurnStarted { input, .. } => Some(super::turns::text_of(&input)),
                        _ => None,
                    });
                let restored = files.map(|(shadow, target, last, made)| {
                    shadow.restore(
                        &target,
                        &last,
                        &made,
                        overwrite,
                        &format!("after a rewind to turn {to_turn}"),
                    )
                });
                (prompt, restored)
            })
            .await;
            let (prompt, mut restored) = match work {
                Ok(w) => w,
                Err(e) => (
                    None,
                    Some(Err(crate::snapshots::SnapshotError::Refused(format!(
                        "putting files back stopped: {e}"
                    )))),
                ),
            };
            // In a cluster the tree after the rewind counts once it is there too.
            if let (Some(Ok(done)), Some(shadow)) = (restored.as_mut(), shared)
                && let Some(after) = done.after.clone()
            {
                let turn = crate::snapshots::TurnSnapshots {
                    shadow,
                    turn: String::new(),
                    packs,
                };
                if let Err(e) = turn.share(&after).await {
                    done.after = None;
                    done.failed
                        .push(format!("(the cluster did not take the rewound tree: {e})"));
                }
            }
            let mut rewinding = rewinding;
            if let Some(p) = prompt {
                rewinding.prompt = p;
            }
            if let Some(tx) = me.upgrade() {
                let _ = tx.send(Command::Rewound {
                    rewinding: Box::new(rewinding),
                    restored,
                });
            }
        });
    }

    /// The files of a rewind are back (or could not be put back): logs `rewound` and answers.
    pub(super) fn rewound(
        &mut self,
        rewinding: Rewinding,
        restored: Option<Result<crate::snapshots::Restored, crate::snapshots::SnapshotError>>,
    ) {
        self.turns.set_rewinding(false);
        let Rewinding {
            to_turn,
            code,
            conversation,
            prompt,
            by,
            reply,
        } = rewinding;
        let restored = match restored.transpose() {
            Ok(r) => r.unwrap_or_default(),
            Err(e) => {
                let _ = reply.send(Err(SessionError::CannotRewind(format!(
                    "the files could not be put back: {e}"
                ))));
                self.start_next();
                return;
            }
        };
        let event = EventKind::Rewound {
            to_turn,
            code,
            conversation,
            restored: restored.restored.clone(),
            kept: restored.kept.clone(),
            outside: restored.outside.clone(),
            failed: restored.failed.clone(),
            snapshot: restored.after.as_ref().map(|t| t.commit.clone()),
            by,
        };
        match self.try_emit(event, None) {
            Ok(()) => {
                let seq = self.journal.head();
                self.journal
                    .reply_after_commit(reply, move || RewindResult {
                        to_turn,
                        prompt,
                        code,
                        conversation,
                        restored: restored.restored,
                        kept: restored.kept,
                        outside: restored.outside,
                        failed: restored.failed,
                        seq,
                    });
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
        self.start_next();
    }

    /// `session/checkpoints`: the turns the session can go back to.
    pub(super) fn checkpoints(&self) -> Vec<Checkpoint> {
        self.ledger
            .marks
            .checkpoints(|turn| self.history.can_rewind_to(turn))
    }
}
