//! The session actor: one tokio task per live session, through which every change to the
//! session goes. Its loop takes commands from the mailbox in batches, hands each to the part
//! that owns it (one line per command), then commits the batch: one flush makes it durable, then
//! its events are broadcast and its callers answered.
//!
//! The parts: [`Journal`] (record, log, fan-out), [`Presence`] (who is attached), [`Broker`]
//! (permission requests and their deadlines), [`Turns`] (the running turn and the queue), and the
//! handlers in `turns.rs`, `commands.rs`, `configure.rs` and `recovery.rs`. Slow outside work —
//! hooks, reading the input, gathering the context, the model — runs in tasks the actor owns
//! (`tasks`), never on this loop, so a cancel or a permission answer is served at once.

use super::broker::Broker;
use super::journal::{Attachment, Journal};
use super::ledger::Ledger;
use super::presence::Presence;
use super::recovery::{Loaded, OpenTurn, OrphanShell};
use super::turns::{Preparation, Queued, TurnRequest, Turns};
use super::{Configure, SessionError, TurnEnv};
use crate::agent::{History, PermissionAsk, SinkError, TurnOutcome, Verdict};
use crate::store::{EventLog, SessionRecord, Store};
use crate::tools::Workspace;
use std::collections::HashSet;
use std::sync::Arc;
use tether_proto::{
    ClientRef, DetachReason, EventKind, PermissionResponse, Role, SessionId, SessionSnapshot,
    SessionStatus, SessionSummary, TurnId, TurnStarted,
};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

/// Most commands handled before one flush.
const MAX_BATCH: usize = 256;

/// What the actor is asked to do: by RPC handlers (through [`SessionHandle`]), by the turn's
/// task, and by its own background work.
pub(super) enum Command {
    AnnounceCreation {
        by: Option<ClientRef>,
        reply: oneshot::Sender<Result<(), SessionError>>,
    },
    Attach {
        client: ClientRef,
        role: Role,
        /// Not the owner: the session must be shared with the client's principal.
        guest: bool,
        reply: oneshot::Sender<Result<Attachment, SessionError>>,
    },
    Detach {
        client: ClientRef,
        role: Role,
        reason: DetachReason,
    },
    Configure {
        change: Configure,
        by: Option<ClientRef>,
        reply: oneshot::Sender<Result<SessionSummary, SessionError>>,
    },
    /// `session/share` (`role` set) and `session/unshare`.
    Share {
        principal: String,
        role: Option<tether_proto::SessionRole>,
        by: Option<ClientRef>,
        reply: oneshot::Sender<Result<Vec<tether_proto::Share>, SessionError>>,
    },
    Summary {
        reply: oneshot::Sender<SessionSummary>,
    },
    Snapshot {
        reply: oneshot::Sender<SessionSnapshot>,
    },
    /// Answered once everything before it is durable.
    Settled {
        reply: oneshot::Sender<()>,
    },
    Rules {
        reply: oneshot::Sender<tether_proto::PermissionRules>,
    },
    // Boxed, as `Prepared`'s queue entry: every slot of the actor's channel is as large as the
    // largest command.
    StartTurn {
        request: Box<TurnRequest>,
        reply: oneshot::Sender<Result<TurnStarted, SessionError>>,
    },
    CancelTurn {
        by: Option<ClientRef>,
        reply: oneshot::Sender<Result<bool, SessionError>>,
    },
    /// A turn's input has been read and passed through the prompt hooks.
    Prepared {
        queued: Box<Queued>,
        preparation: Preparation,
    },
    TurnEvent {
        turn_id: TurnId,
        event: EventKind,
        ack: Option<oneshot::Sender<Result<(), SinkError>>>,
    },
    TurnFinished {
        turn_id: TurnId,
        outcome: TurnOutcome,
    },
    Authorize {
        turn_id: TurnId,
        ask: PermissionAsk,
        reply: oneshot::Sender<Result<Verdict, SinkError>>,
    },
    RespondPermission {
        request_id: String,
        answer: super::Answer,
        by: ClientRef,
        after_hooks: bool,
        reply: oneshot::Sender<Result<PermissionResponse, SessionError>>,
    },
    /// The cluster reported who follows the session from other nodes (`quiet`: the first
    /// report after loading, about clients attached before this daemon took the session).
    Followers {
        clients: Vec<tether_proto::AttachedClient>,
        quiet: bool,
    },
    /// A turn's hook runs a callback of the SDK program that started it.
    HookCallback {
        turn_id: TurnId,
        callback_id: String,
        input: serde_json::Value,
        reply: oneshot::Sender<Result<serde_json::Value, String>>,
    },
    /// A turn relays a message to an in-process MCP server of the SDK program that started it.
    McpRelay {
        turn_id: TurnId,
        server: String,
        message: serde_json::Value,
        reply: oneshot::Sender<Result<serde_json::Value, String>>,
    },
    /// The cluster recorded an answer to one of the session's requests.
    RecordedAnswer {
        request_id: String,
        answer: Vec<u8>,
    },
    /// `hook/respond`: a client answered a hook callback.
    HookRespond {
        request_id: String,
        answer: Result<serde_json::Value, String>,
        by: ClientRef,
        reply: oneshot::Sender<Result<bool, SessionError>>,
    },
    /// The PermissionRequest hooks of a request ran: their answer, if they gave one.
    PermissionHooksRan {
        request_id: String,
        answer: Option<super::Answer>,
    },
    /// A hook started or finished running (logged in its turn, if it ran for one).
    HookRan {
        turn_id: Option<TurnId>,
        event: EventKind,
    },
    /// Logs a notice.
    Note {
        message: String,
        reply: oneshot::Sender<Result<(), SessionError>>,
    },
    /// A background shell ended.
    ShellEnded {
        id: String,
        command: String,
        end: crate::tools::JobEnd,
    },
    /// Background shells an earlier daemon left running.
    RecoverShells {
        shells: Vec<OrphanShell>,
    },
    /// The answer of a daemon command a task worked out (`/sandbox`); ends its turn.
    Answered {
        turn_id: TurnId,
        text: String,
    },
    /// A `!command` has run (its `shell_command` event); ends its turn.
    ShellRan {
        turn_id: TurnId,
        run: super::commands::ShellRun,
    },
    /// A generated title for a session that had none.
    Titled {
        title: String,
    },
    /// `session/rewind`.
    Rewind {
        to_turn: u64,
        scope: tether_proto::RewindScope,
        overwrite: bool,
        by: Option<ClientRef>,
        reply: oneshot::Sender<Result<tether_proto::RewindResult, SessionError>>,
    },
    /// A rewind's files are back, or could not be put back.
    Rewound {
        rewinding: Box<super::rewind::Rewinding>,
        restored: Option<Result<crate::snapshots::Restored, crate::snapshots::SnapshotError>>,
    },
    /// `session/checkpoints`.
    Checkpoints {
        reply: oneshot::Sender<Vec<tether_proto::Checkpoint>>,
    },
    /// Ends (or resumes) a turn the log left open: the daemon stopped during it.
    RecoverOpenTurn {
        open: OpenTurn,
    },
    Delete {
        by: Option<ClientRef>,
        reply: oneshot::Sender<Result<(), SessionError>>,
    },
    Shutdown {
        reply: oneshot::Sender<()>,
    },
    /// Another node of the cluster took the session over: stop now, writing nothing.
    Fence,
}

/// A cheap, cloneable address of a session actor.
#[derive(Clone)]
pub struct SessionHandle {
    id: SessionId,
    tx: mpsc::UnboundedSender<Command>,
}

impl SessionHandle {
    /// The session's id.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// Whether the actor has stopped.
    pub fn is_stopped(&self) -> bool {
        self.tx.is_closed()
    }

    /// Waits until the actor has stopped.
    pub async fn stopped(&self) {
        self.tx.closed().await;
    }

    /// `hook/respond`: a hook callback's answer; `false` when no hook waits for it.
    pub async fn hook_respond(
        &self,
        request_id: String,
        answer: Result<serde_json::Value, String>,
        by: ClientRef,
    ) -> Result<Result<bool, SessionError>, SessionError> {
        self.call(|reply| Command::HookRespond {
            request_id,
            answer,
            by,
            reply,
        })
        .await
    }

    /// Tells the session that the cluster recorded an answer to one of its requests.
    pub(super) fn recorded_answer(&self, request_id: String, answer: Vec<u8>) {
        let _ = self.tx.send(Command::RecordedAnswer { request_id, answer });
    }

    /// Tells the session who follows it from other nodes of the cluster.
    pub(super) fn followers(&self, clients: Vec<tether_proto::AttachedClient>, quiet: bool) {
        let _ = self.tx.send(Command::Followers { clients, quiet });
    }

    /// Stops the actor at once without writing anything more: another node holds the session.
    pub(super) async fn fence(&self) {
        let _ = self.tx.send(Command::Fence);
    }

    async fn call<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, SessionError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(make(reply))
            .map_err(|_| SessionError::Stopped(self.id.clone()))?;
        rx.await.map_err(|_| SessionError::Stopped(self.id.clone()))
    }

    pub(super) async fn announce_creation(
        &self,
        by: Option<ClientRef>,
    ) -> Result<(), SessionError> {
        self.call(|reply| Command::AnnounceCreation { by, reply })
            .await?
    }

    /// Attaches a subscriber: logs `client_attached` and returns where its replay ends.
    /// Subscribes `client` in `role`; a `guest` (not the owner) only while the session is
    /// shared with its principal, and as an observer when that is their role.
    pub async fn attach(
        &self,
        client: ClientRef,
        role: Role,
        guest: bool,
    ) -> Result<Attachment, SessionError> {
        self.call(|reply| Command::Attach {
            client,
            role,
            guest,
            reply,
        })
        .await?
    }

    /// Detaches a subscriber (logs `client_detached`); a stopped session ignores it.
    pub async fn detach(&self, client: ClientRef, role: Role, reason: DetachReason) {
        let _ = self.tx.send(Command::Detach {
            client,
            role,
            reason,
        });
    }

    /// Changes settings; logs `session_configured` with what changed.
    pub async fn configure(
        &self,
        change: Configure,
        by: Option<ClientRef>,
    ) -> Result<SessionSummary, SessionError> {
        self.call(|reply| Command::Configure { change, by, reply })
            .await?
    }

    /// Gives `principal` a role in the session (`Some`) or takes theirs away (`None`); logs
    /// `session_shared` or `session_unshared` when something changed. Answers with everyone's
    /// roles once the change is durable.
    pub async fn share(
        &self,
        principal: String,
        role: Option<tether_proto::SessionRole>,
        by: Option<ClientRef>,
    ) -> Result<Vec<tether_proto::Share>, SessionError> {
        self.call(|reply| Command::Share {
            principal,
            role,
            by,
            reply,
        })
        .await?
    }

    /// Rewinds the session to just before turn `to_turn` (`session/rewind`).
    pub async fn rewind(
        &self,
        to_turn: u64,
        scope: tether_proto::RewindScope,
        overwrite: bool,
        by: Option<ClientRef>,
    ) -> Result<tether_proto::RewindResult, SessionError> {
        self.call(|reply| Command::Rewind {
            to_turn,
            scope,
            overwrite,
            by,
            reply,
        })
        .await?
    }

    /// The turns the session can be rewound to (`session/checkpoints`).
    pub async fn checkpoints(&self) -> Result<Vec<tether_proto::Checkpoint>, SessionError> {
        self.call(|reply| Command::Checkpoints { reply }).await
    }

    /// The session's current metadata.
    pub async fn summary(&self) -> Result<SessionSummary, SessionError> {
        self.call(|reply| Command::Summary { reply }).await
    }

    /// Waits until everything the session did before this call (its start-up recovery
    /// included) is durable and broadcast.
    pub async fn settled(&self) -> Result<(), SessionError> {
        self.call(|reply| Command::Settled { reply }).await
    }

    /// The session's full snapshot (totals, running turn).
    pub async fn snapshot(&self) -> Result<SessionSnapshot, SessionError> {
        self.call(|reply| Command::Snapshot { reply }).await
    }

    /// The permission mode and rules in effect, each with its source.
    pub async fn rules(&self) -> Result<tether_proto::PermissionRules, SessionError> {
        self.call(|reply| Command::Rules { reply }).await
    }

    /// Starts (or queues) a turn; a repeated `client_turn_id` returns the turn it started.
    pub async fn start_turn(&self, request: TurnRequest) -> Result<TurnStarted, SessionError> {
        self.call(|reply| Command::StartTurn {
            request: Box::new(request),
            reply,
        })
        .await?
    }

    /// Answers a permission request; the first answer wins. `after_hooks`: the answer waits
    /// for the request's PermissionRequest hooks, and loses to theirs.
    pub async fn respond_permission(
        &self,
        request_id: String,
        answer: super::Answer,
        by: ClientRef,
        after_hooks: bool,
    ) -> Result<PermissionResponse, SessionError> {
        self.call(|reply| Command::RespondPermission {
            request_id,
            answer,
            by,
            after_hooks,
            reply,
        })
        .await?
    }

    /// Logs a notice for every client (durable on return).
    pub async fn note(&self, message: String) -> Result<(), SessionError> {
        self.call(|reply| Command::Note { message, reply }).await?
    }

    /// Cancels the running turn; `false` when none runs. An observer may not.
    pub async fn cancel_turn(&self, by: Option<ClientRef>) -> Result<bool, SessionError> {
        self.call(|reply| Command::CancelTurn { by, reply }).await?
    }

    pub(super) async fn delete(&self, by: Option<ClientRef>) -> Result<(), SessionError> {
        self.call(|reply| Command::Delete { by, reply }).await?
    }

    pub(super) async fn shutdown(&self) {
        let _ = self.call(|reply| Command::Shutdown { reply }).await;
    }
}

/// The state of one live session, split into the parts that own it.
pub(super) struct SessionActor {
    /// Record, log and fan-out.
    pub(super) journal: Journal,
    /// Who is attached.
    pub(super) presence: Presence,
    /// Permission requests waiting for an answer.
    pub(super) broker: Broker,
    /// The running turn and the queue.
    pub(super) turns: Turns,
    /// The conversation, derived from the log.
    pub(super) history: History,
    /// Totals, idempotency keys and permission history, derived from the log.
    pub(super) ledger: Ledger,
    pub(super) env: Arc<TurnEnv>,
    pub(super) workspace: Arc<Workspace>,
    /// The working tree's snapshots (none when they are off).
    pub(super) shadow: Option<Arc<crate::snapshots::Shadow>>,
    /// Every task the actor started: turns, their preparation, titles, notification hooks.
    /// Dropping the actor aborts them.
    pub(super) tasks: JoinSet<()>,
    pub(super) me: mpsc::WeakUnboundedSender<Command>,
    /// Turns started by the session itself since a client last started one.
    pub(super) wakeups: u32,
    /// Whether this load has run the SessionStart hooks.
    pub(super) session_started: bool,
    /// A title is being generated.
    pub(super) titling: bool,
    /// A turn ended since deltas were last pruned.
    pub(super) prune_due: bool,
    /// Settings problems already reported.
    pub(super) reported: HashSet<String>,
    /// The last client to leave was a script (`tether -p`, a raw connection): nobody is likely
    /// to come back soon, so the session unloads once idle after [`SCRIPT_IDLE_UNLOAD`].
    pub(super) left_by_script: bool,
}

/// How long a session a script left stays loaded once idle (at most `idle_unload`).
const SCRIPT_IDLE_UNLOAD: std::time::Duration = std::time::Duration::from_secs(1);

/// Starts the actor of a session whose log is `loaded`.
pub(super) fn spawn(
    record: SessionRecord,
    store: Store,
    log: EventLog,
    epoch: u64,
    loaded: Loaded,
    env: Arc<TurnEnv>,
    on_stop: Box<dyn FnOnce() + Send>,
) -> SessionHandle {
    let (tx, rx) = mpsc::unbounded_channel();
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let settings_env = crate::settings::env(std::path::Path::new(&record.cwd), home.as_deref());
    let workspace = Arc::new(
        Workspace::new(
            std::path::PathBuf::from(&record.cwd),
            Vec::new(),
            env.data_dir.join("scratch").join(&record.id.0),
        )
        .with_env(settings_env),
    );
    let me = tx.downgrade();
    workspace.jobs.on_end(Box::new(move |id, command, end| {
        if let Some(tx) = me.upgrade() {
            let _ = tx.send(Command::ShellEnded {
                id: id.to_owned(),
                command: command.to_owned(),
                end,
            });
        }
    }));
    let handle = SessionHandle {
        id: record.id.clone(),
        tx: tx.clone(),
    };
    let shadow = env.snapshots.clone().map(|policy| {
        Arc::new(crate::snapshots::Shadow::new(
            policy,
            &record.id.0,
            std::path::PathBuf::from(&record.cwd),
        ))
    });
    let mut actor = SessionActor {
        shadow,
        journal: Journal::new(record, store, log, epoch, loaded.head),
        presence: Presence::default(),
        broker: Broker::default(),
        turns: Turns::default(),
        history: loaded.history,
        ledger: loaded.ledger,
        env,
        workspace,
        tasks: JoinSet::new(),
        me: tx.downgrade(),
        wakeups: 0,
        session_started: false,
        titling: false,
        prune_due: false,
        reported: HashSet::new(),
        left_by_script: false,
    };
    actor.broker.restore(loaded.recorded);
    if let Some(restored) = loaded.restored {
        actor.emit(restored);
    }
    // The recovery runs before anything a client asks.
    if !loaded.damaged.is_empty() {
        actor.emit(EventKind::Notice {
            level: tether_proto::NoticeLevel::Info,
            message: format!(
                "{} damaged record(s) in this session's log could not be read and were skipped (seq {:?})",
                loaded.damaged.len(),
                loaded.damaged
            ),
        });
    }
    if let Some(open) = loaded.open_turn {
        let _ = tx.send(Command::RecoverOpenTurn { open });
    }
    if !loaded.shells.is_empty() {
        let _ = tx.send(Command::RecoverShells {
            shells: loaded.shells,
        });
    }
    tokio::spawn(async move {
        // `run` drops the receiver, so the handle reads as stopped when `on_stop` runs.
        actor.run(rx).await;
        on_stop();
    });
    handle
}

/// Whether the loop goes on after a command.
pub(super) enum Flow {
    Continue,
    Stop,
}

impl SessionActor {
    /// Whether nothing holds the session in memory: no subscriber, turn, request, job or task.
    fn idle(&self) -> bool {
        self.presence.is_empty()
            && self.turns.is_idle()
            && self.broker.is_empty()
            && self.tasks.is_empty()
            && !self.workspace.jobs.any_running()
    }

    /// How long the session stays loaded from now if nothing happens; `None` while it is busy
    /// (or unloading is off).
    fn unload_after(&self) -> Option<std::time::Duration> {
        let after = self.env.idle_unload.filter(|_| self.idle())?;
        Some(if self.left_by_script {
            after.min(SCRIPT_IDLE_UNLOAD)
        } else {
            after
        })
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Command>) {
        // What `spawn` logged (a damaged log's notice) is durable before anything else.
        self.commit().await;
        loop {
            let deadline = self.broker.next_deadline();
            let unload_after = self.unload_after();
            let first = tokio::select! {
                cmd = rx.recv() => match cmd {
                    Some(cmd) => Some(cmd),
                    None => break,
                },
                () = sleep_until(deadline), if deadline.is_some() => {
                    self.no_controller_deadlines();
                    None
                }
                () = sleep(unload_after), if unload_after.is_some() => {
                    tracing::debug!(session = %self.journal.record.id, "unloading an idle session");
                    break;
                }
                Some(done) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    if let Err(e) = done
                        && !e.is_cancelled()
                    {
                        tracing::error!(session = %self.journal.record.id, "a session task failed: {e}");
                    }
                    None
                }
            };
            let mut flow = Flow::Continue;
            if let Some(cmd) = first {
                flow = self.handle(cmd).await;
                let mut handled = 1;
                while matches!(flow, Flow::Continue) && handled < MAX_BATCH {
                    match rx.try_recv() {
                        Ok(cmd) => {
                            flow = self.handle(cmd).await;
                            handled += 1;
                        }
                        Err(_) => break,
                    }
                }
            }
            self.commit().await;
            self.journal.release_fanout();
            if matches!(flow, Flow::Stop) {
                break;
            }
        }
        // A session loaded again is told its MCP servers' troubles again.
        self.env.mcp.forget(&self.journal.record.id.0);
        tracing::debug!(session = %self.journal.record.id, "session actor stopped");
    }

    async fn handle(&mut self, cmd: Command) -> Flow {
        match cmd {
            Command::AnnounceCreation { by, reply } => self.announce_creation(by, reply),
            Command::Attach {
                client,
                role,
                guest,
                reply,
            } => self.attach(client, role, guest, reply),
            Command::Detach {
                client,
                role,
                reason,
            } => self.detach(client, role, reason),
            Command::Configure { change, by, reply } => self.configure(change, by, reply),
            Command::Share {
                principal,
                role,
                by,
                reply,
            } => self.share(principal, role, by, reply),
            Command::Summary { reply } => drop(reply.send(self.summary())),
            Command::Snapshot { reply } => drop(reply.send(self.snapshot())),
            Command::Settled { reply } => self.journal.after_commit(move |_| {
                let _ = reply.send(());
            }),
            Command::Rules { reply } => drop(reply.send(self.rules_report())),
            Command::Rewind {
                to_turn,
                scope,
                overwrite,
                by,
                reply,
            } => self.rewind(to_turn, scope, overwrite, by, reply),
            Command::Rewound {
                rewinding,
                restored,
            } => self.rewound(*rewinding, restored),
            Command::Checkpoints { reply } => drop(reply.send(self.checkpoints())),
            Command::StartTurn { request, reply } => drop(reply.send(self.request_turn(*request))),
            Command::CancelTurn { by, reply } => {
                let observer = by.as_ref().is_some_and(|b| self.presence.observer_only(b));
                drop(reply.send(if observer {
                    Err(SessionError::NotController)
                } else {
                    Ok(self.cancel_turn(by))
                }))
            }
            Command::Prepared {
                queued,
                preparation,
            } => self.prepared(*queued, preparation),
            Command::TurnEvent {
                turn_id,
                event,
                ack,
            } => self.turn_event(turn_id, event, ack),
            Command::TurnFinished { turn_id, outcome } => self.turn_finished(turn_id, outcome),
            Command::Authorize {
                turn_id,
                ask,
                reply,
            } => self.authorize(turn_id, ask, reply),
            Command::RespondPermission {
                request_id,
                answer,
                by,
                after_hooks,
                reply,
            } => {
                if after_hooks && self.broker.hooks_running(&request_id) && self.may_hold(&by) {
                    let held = self.broker.after_hooks(request_id, answer, by);
                    drop(reply.send(Ok(held)));
                } else {
                    drop(reply.send(self.respond_permission(request_id, answer, by).await));
                }
            }
            Command::Followers { clients, quiet } => self.followers(clients, quiet),
            Command::RecordedAnswer { request_id, answer } => {
                self.recorded_answer(request_id, &answer)
            }
            Command::HookCallback {
                turn_id,
                callback_id,
                input,
                reply,
            } => self.ask_client(turn_id, "hook", reply, |request_id| {
                EventKind::HookCallback {
                    request_id,
                    callback_id,
                    input,
                }
            }),
            Command::McpRelay {
                turn_id,
                server,
                message,
                reply,
            } => self.ask_client(turn_id, "mcp", reply, |request_id| EventKind::McpMessage {
                request_id,
                server,
                message,
            }),
            Command::HookRespond {
                request_id,
                answer,
                by,
                reply,
            } => drop(reply.send(if self.presence.observer_only(&by) {
                Err(SessionError::NotController)
            } else {
                Ok(self.broker.answer_callback(&request_id, answer))
            })),
            Command::PermissionHooksRan { request_id, answer } => {
                self.permission_hooks_ran(request_id, answer).await
            }
            // A hook that outlived its turn (a PermissionRequest hook whose request was
            // answered) is logged outside any turn, never in the next one's.
            Command::HookRan { turn_id, event } => {
                let turn_id = turn_id.filter(|t| self.turns.is_running(t));
                self.emit_in(event, turn_id)
            }
            Command::Note { message, reply } => self.note(message, reply),
            Command::ShellEnded { id, command, end } => self.shell_ended(id, command, end),
            Command::RecoverShells { shells } => self.recover_shells(shells),
            Command::Answered { turn_id, text } => self.command_answered(turn_id, text),
            Command::ShellRan { turn_id, run } => self.shell_ran(turn_id, run),
            Command::Titled { title } => self.titled(title),
            Command::RecoverOpenTurn { open } => self.recover(open),
            Command::Delete { by, reply } => return self.delete(by, reply).await,
            Command::Shutdown { reply } => return self.shutdown(reply).await,
            Command::Fence => return self.fence(),
        }
        Flow::Continue
    }

    fn announce_creation(
        &mut self,
        by: Option<ClientRef>,
        reply: oneshot::Sender<Result<(), SessionError>>,
    ) {
        let r = &self.journal.record;
        let kind = EventKind::SessionCreated {
            cwd: r.cwd.clone(),
            title: r.title.clone(),
            model: r.model.clone(),
            permission_mode: r.permission_mode,
            by,
        };
        self.journal.touch();
        match self.try_emit(kind, None) {
            Ok(()) => self.journal.reply_after_commit(reply, || ()),
            Err(e) => drop(reply.send(Err(e))),
        }
    }

    fn attach(
        &mut self,
        client: ClientRef,
        mut role: Role,
        guest: bool,
        reply: oneshot::Sender<Result<Attachment, SessionError>>,
    ) {
        if guest {
            let principal = client.principal.clone().unwrap_or_default();
            match self
                .journal
                .record
                .shares
                .iter()
                .find(|s| s.principal == principal)
            {
                None => {
                    let _ = reply.send(Err(SessionError::NotPermitted(principal)));
                    return;
                }
                Some(s) if s.role == tether_proto::SessionRole::Observer => role = Role::Observer,
                Some(_) => {}
            }
        }
        self.presence.attach(client.clone(), role);
        self.left_by_script = false;
        let attachment = self.journal.subscribe(self.presence.list());
        if role == Role::Controller {
            self.broker.disarm();
        }
        if self.journal.broken().is_some() {
            // Read-only: the replay works, presence cannot be logged.
            let _ = reply.send(Ok(attachment));
            return;
        }
        match self.try_emit(EventKind::ClientAttached { client, role }, None) {
            Ok(()) => self.journal.reply_after_commit(reply, move || attachment),
            Err(e) => drop(reply.send(Err(e))),
        }
    }

    fn detach(&mut self, client: ClientRef, role: Role, reason: DetachReason) {
        self.presence.detach(&client, role);
        self.left_by_script =
            client.kind == tether_proto::ClientKind::Script && self.presence.is_empty();
        self.arm_no_controller();
        self.emit(EventKind::ClientDetached {
            client,
            role,
            reason,
        });
    }

    /// Asks the client that started turn `turn_id` (an SDK program's hook callback or MCP
    /// message): the event `ask` makes of a new request id (`<kind>_…`) goes to the turn's
    /// subscribers, and `reply` waits for `hook/respond` or `mcp/respond`.
    fn ask_client(
        &mut self,
        turn_id: TurnId,
        kind: &str,
        reply: oneshot::Sender<Result<serde_json::Value, String>>,
        ask: impl FnOnce(String) -> EventKind,
    ) {
        // Its turn ended meanwhile (a late call of a parallel tool): nobody will answer.
        if !self.turns.is_running(&turn_id) {
            drop(reply.send(Err("its turn has ended".into())));
            return;
        }
        let request_id = format!("{kind}_{}", uuid::Uuid::new_v4().simple());
        self.broker
            .hold_callback(request_id.clone(), turn_id.clone(), reply);
        self.journal
            .broadcast_control_in(ask(request_id), Some(turn_id));
    }

    /// Clients on other nodes came or went: logged as they are for this daemon's own, and a
    /// controller there counts for the `onNoController` policy.
    fn followers(&mut self, clients: Vec<tether_proto::AttachedClient>, quiet: bool) {
        let moved = self.presence.elsewhere(clients, quiet);
        if moved.attached.is_empty() && moved.detached.is_empty() {
            return;
        }
        self.arm_no_controller();
        for a in moved.attached {
            self.emit(EventKind::ClientAttached {
                client: a.client,
                role: a.role,
            });
        }
        for a in moved.detached {
            self.emit(EventKind::ClientDetached {
                client: a.client,
                role: a.role,
                reason: DetachReason::Closed,
            });
        }
    }

    fn note(&mut self, message: String, reply: oneshot::Sender<Result<(), SessionError>>) {
        let kind = EventKind::Notice {
            level: tether_proto::NoticeLevel::Info,
            message,
        };
        match self.try_emit(kind, None) {
            Ok(()) => self.journal.reply_after_commit(reply, || ()),
            Err(e) => drop(reply.send(Err(e))),
        }
    }

    /// An event the turn's task sent; `ack` is answered once it is durable.
    fn turn_event(
        &mut self,
        turn_id: TurnId,
        event: EventKind,
        ack: Option<oneshot::Sender<Result<(), SinkError>>>,
    ) {
        let result = self.try_emit(event, Some(turn_id));
        match (ack, result) {
            (Some(ack), Ok(())) => self.journal.after_commit(move |err| {
                let _ = ack.send(match err {
                    Some(e) => Err(SinkError::Storage(e.clone())),
                    None => Ok(()),
                });
            }),
            (Some(ack), Err(e)) => drop(ack.send(Err(SinkError::storage(e)))),
            (None, _) => {}
        }
    }

    async fn delete(
        &mut self,
        by: Option<ClientRef>,
        reply: oneshot::Sender<Result<(), SessionError>>,
    ) -> Flow {
        self.workspace.jobs.stop_all();
        if let Some(running) = self.turns.take_running() {
            running.cancel.cancel();
        }
        self.commit().await;
        let result = self.journal.delete().await;
        if result.is_ok() {
            // The commands' saved outputs go with the session.
            let dirs = [
                self.workspace.scratch().to_owned(),
                self.workspace.host_scratch(),
            ];
            tokio::task::spawn_blocking(move || {
                for dir in dirs {
                    match std::fs::remove_dir_all(&dir) {
                        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                            tracing::warn!(dir = %dir.display(), "could not remove a deleted session's saved outputs: {e}");
                        }
                        _ => {}
                    }
                }
            });
            self.session_end("other");
            self.journal
                .broadcast_control(EventKind::SessionDeleted { by });
        }
        let stop = result.is_ok();
        let _ = reply.send(result);
        if stop { Flow::Stop } else { Flow::Continue }
    }

    async fn shutdown(&mut self, reply: oneshot::Sender<()>) -> Flow {
        self.workspace.jobs.stop_all();
        self.turns.clear_queue();
        if let Some(running) = self.turns.take_running() {
            running.cancel.cancel();
            self.end_turn(running.turn_id, super::recovery::interrupted_outcome());
        }
        self.commit().await;
        self.journal.broadcast_control(EventKind::DaemonShutdown {});
        let _ = reply.send(());
        Flow::Stop
    }

    /// This node lost the session's lease: its tools and background commands are killed,
    /// nothing more is written, clients are told where the session went, and the actor stops.
    fn fence(&mut self) -> Flow {
        self.workspace.jobs.stop_all();
        self.turns.clear_queue();
        if let Some(running) = self.turns.take_running() {
            running.cancel.cancel();
        }
        self.tasks.abort_all();
        let why = "this node lost the session's lease (another node of the cluster took it over, or NATS could not be reached in time)".to_owned();
        self.journal.fail(why.clone());
        self.journal.broadcast_control(EventKind::Error {
            code: "session_moved".into(),
            message: format!(
                "{why}; nothing more is written here (events up to #{} are saved). Attach again to follow it there.",
                self.journal.committed()
            ),
        });
        tracing::warn!(session = %self.journal.record.id, "{why}: stopped");
        Flow::Stop
    }

    /// The session's summary now.
    pub(super) fn summary(&self) -> SessionSummary {
        self.journal.summary(self.presence.list())
    }

    pub(super) fn set_status(&mut self, status: SessionStatus) {
        if self.journal.record.status != status {
            self.journal.record.status = status;
            self.emit(EventKind::SessionStatus { status });
        }
    }

    /// Appends an event to the log (durable and broadcast at the end of the batch) and applies
    /// it to the history and the ledger. A failed commit makes the session read-only
    /// ([`Self::storage_failed`]); from then on this refuses.
    pub(super) fn try_emit(
        &mut self,
        kind: EventKind,
        turn_id: Option<TurnId>,
    ) -> Result<(), SessionError> {
        let event = self.journal.append(kind, turn_id)?;
        self.history.apply(&event.kind);
        self.ledger.apply(&event.kind, event.turn_id.as_ref());
        self.ledger.marks.apply(&event);
        Ok(())
    }

    /// [`Self::try_emit`] for events nobody waits on: a failure is logged (and, when it is the
    /// write that failed, told to every subscriber by [`Self::storage_failed`]).
    pub(super) fn emit(&mut self, kind: EventKind) {
        self.emit_in(kind, None);
    }

    /// [`Self::emit`] for an event of a turn.
    pub(super) fn emit_in(&mut self, kind: EventKind, turn_id: Option<TurnId>) {
        let what = kind.type_name();
        if let Err(e) = self.try_emit(kind, turn_id) {
            tracing::error!(session = %self.journal.record.id, "could not log {what}: {e}");
        }
    }

    /// A write failed: stop the turn, drop the queue, tell every subscriber (an `error` without
    /// a seq, since it cannot be logged), and refuse writes from now on. Reads keep working.
    pub(super) fn storage_failed(&mut self, e: &SessionError) {
        let why = e.to_string();
        if !self.journal.fail(why.clone()) {
            return;
        }
        if let Some(cancel) = self.turns.running_cancel() {
            cancel.cancel();
        }
        let dropped = self.turns.clear_queue();
        let mut message = format!(
            "could not save this session's events: {why}. The running turn was stopped and the session is read-only (events up to #{} are saved); free disk space (in a cluster: bring NATS back) and restart tetherd to go on.",
            self.journal.committed()
        );
        if dropped > 0 {
            message.push_str(&format!(" {dropped} queued turn(s) were dropped."));
        }
        self.journal.broadcast_control(EventKind::Error {
            code: "storage_failed".into(),
            message,
        });
    }

    /// Makes the batch durable, then broadcasts it; prunes deltas after a turn ended.
    async fn commit(&mut self) {
        match self.journal.commit().await {
            Ok(()) => {
                if let Some(keep) = self.env.delta_retention
                    && std::mem::take(&mut self.prune_due)
                {
                    self.journal.prune(keep).await;
                }
            }
            // The batch is not durable, so no client sees it; the session stops writing.
            Err(e) => self.storage_failed(&e),
        }
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

async fn sleep(after: Option<std::time::Duration>) {
    match after {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}
