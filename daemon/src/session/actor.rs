//! The session actor: one tokio task per live session that owns its record, its log head and its
//! subscribers, and through which every change to the session goes.
//!
//! Commands are handled in batches: each command appends its events to the log, then one flush
//! makes the whole batch durable, then the events are broadcast and the callers answered. The
//! broadcast watermark (`committed`) is what a new subscriber replays up to, so replay and live
//! delivery meet with no gap and no duplicate.

use super::{Configure, SessionError, TurnEnv};
use crate::agent::{
    History, PermissionAsk, SinkError, SlashCommand, Turn, TurnOutcome, TurnSink, Verdict,
    Workspace,
};
use crate::store::{EventLog, SessionRecord, Store};
use futures::FutureExt;
use std::collections::VecDeque;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::SystemTime;
use tether_proto::{
    AttachedClient, BusyMode, ClientRef, Event, EventKind, InputItem, NoControllerAction,
    PermissionDecision, PermissionResponse, Role, Seq, SessionId, SessionSnapshot, SessionStatus,
    SessionSummary, TokenUsage, TurnError, TurnId, TurnOptions, TurnStarted,
};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// How many events a subscriber may fall behind before it gets `lagged`.
pub const FANOUT_CAPACITY: usize = 8192;
/// Most commands handled before one flush.
const MAX_BATCH: usize = 256;

/// An event on its way to subscribers: its encoded JSON, exactly as logged.
#[derive(Debug)]
pub struct LiveEvent {
    /// Its seq; `None` for stream-control events.
    pub seq: Option<Seq>,
    /// The encoded event.
    pub json: Box<str>,
    /// Whether it ends the subscriptions that receive it.
    pub ends_stream: bool,
}

/// A subscriber's view of a session at the moment it attached: live events after `watermark`
/// arrive on `events`; everything up to it is in `log`.
pub struct Attachment {
    /// Live events after the watermark.
    pub events: broadcast::Receiver<Arc<LiveEvent>>,
    /// The last event broadcast before this attachment (the replay's end).
    pub watermark: Seq,
    /// The session's log, for replay.
    pub log: EventLog,
    /// The session when it attached; its `pruned_through` decides whether a replay starts with
    /// a `snapshot`.
    pub summary: SessionSummary,
}

enum Command {
    AnnounceCreation {
        by: Option<ClientRef>,
        reply: oneshot::Sender<Result<(), SessionError>>,
    },
    Attach {
        client: ClientRef,
        role: Role,
        reply: oneshot::Sender<Result<Attachment, SessionError>>,
    },
    Detach {
        client: ClientRef,
        role: Role,
        reason: &'static str,
    },
    Configure {
        change: Configure,
        by: Option<ClientRef>,
        reply: oneshot::Sender<Result<SessionSummary, SessionError>>,
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
    StartTurn {
        input: Vec<InputItem>,
        client_turn_id: Option<String>,
        mode: BusyMode,
        options: TurnOptions,
        by: ClientRef,
        reply: oneshot::Sender<Result<TurnStarted, SessionError>>,
    },
    CancelTurn {
        reply: oneshot::Sender<bool>,
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
        decision: PermissionDecision,
        message: Option<String>,
        by: ClientRef,
        reply: oneshot::Sender<Result<PermissionResponse, SessionError>>,
    },
    /// Logs a notice.
    Note {
        message: String,
        reply: oneshot::Sender<Result<(), SessionError>>,
    },
    /// A request's wait for a controller ran out (the `onNoController` policy).
    NoControllerTimeout {
        request_id: String,
    },
    /// Ends a turn the log left open (the daemon stopped during it).
    /// A background shell ended.
    ShellEnded {
        id: String,
        command: String,
        end: crate::agent::JobEnd,
    },
    /// Background shells an earlier daemon left running.
    RecoverShells {
        shells: Vec<OrphanShell>,
    },
    /// A generated title for a session that had none.
    Titled {
        title: String,
    },
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
    pub async fn attach(&self, client: ClientRef, role: Role) -> Result<Attachment, SessionError> {
        self.call(|reply| Command::Attach {
            client,
            role,
            reply,
        })
        .await?
    }

    /// Detaches a subscriber (logs `client_detached`); a stopped session ignores it.
    pub async fn detach(&self, client: ClientRef, role: Role, reason: &'static str) {
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
    pub async fn start_turn(
        &self,
        input: Vec<InputItem>,
        client_turn_id: Option<String>,
        mode: BusyMode,
        options: TurnOptions,
        by: ClientRef,
    ) -> Result<TurnStarted, SessionError> {
        self.call(|reply| Command::StartTurn {
            input,
            client_turn_id,
            mode,
            options,
            by,
            reply,
        })
        .await?
    }

    /// Answers a permission request; the first answer wins.
    pub async fn respond_permission(
        &self,
        request_id: String,
        decision: PermissionDecision,
        message: Option<String>,
        by: ClientRef,
    ) -> Result<PermissionResponse, SessionError> {
        self.call(|reply| Command::RespondPermission {
            request_id,
            decision,
            message,
            by,
            reply,
        })
        .await?
    }

    /// Logs a notice for every client (durable on return).
    pub async fn note(&self, message: String, _by: Option<ClientRef>) -> Result<(), SessionError> {
        self.call(|reply| Command::Note { message, reply }).await?
    }

    /// Cancels the running turn; `false` when none runs.
    pub async fn cancel_turn(&self) -> Result<bool, SessionError> {
        self.call(|reply| Command::CancelTurn { reply }).await
    }

    pub(super) async fn delete(&self, by: Option<ClientRef>) -> Result<(), SessionError> {
        self.call(|reply| Command::Delete { by, reply }).await?
    }

    pub(super) async fn shutdown(&self) {
        let _ = self.call(|reply| Command::Shutdown { reply }).await;
    }
}

fn interrupted_outcome() -> TurnOutcome {
    TurnOutcome {
        stop_reason: "interrupted_by_restart".into(),
        usage: TokenUsage::default(),
        cost_usd: Some(0.0),
        error: None,
    }
}

/// The current time as RFC 3339 UTC with milliseconds.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// A summary built from a record.
pub fn summary_of(
    record: &SessionRecord,
    head_seq: Seq,
    attached: Vec<AttachedClient>,
) -> SessionSummary {
    SessionSummary {
        session_id: record.id.clone(),
        title: record.title.clone(),
        cwd: record.cwd.clone(),
        model: record.model.clone(),
        permission_mode: record.permission_mode,
        on_no_controller: record.on_no_controller,
        status: record.status,
        created_at: record.created_at.clone(),
        updated_at: record.updated_at.clone(),
        head_seq,
        pruned_through: record.pruned_through,
        attached_clients: attached,
    }
}

type Deferred = Box<dyn FnOnce(Option<&SessionError>) + Send>;

struct SessionActor {
    record: SessionRecord,
    store: Store,
    log: EventLog,
    epoch: u64,
    /// Seq of the last appended event.
    head: Seq,
    /// Seq of the last broadcast (durable) event.
    committed: Seq,
    fanout: broadcast::Sender<Arc<LiveEvent>>,
    attached: Vec<AttachedClient>,
    /// Appended but not yet broadcast.
    unsent: Vec<Arc<LiveEvent>>,
    /// Answers to give once the batch is durable.
    deferred: Vec<Deferred>,
    record_dirty: bool,
    /// A turn ended since deltas were last pruned.
    prune_due: bool,
    /// A title is being generated.
    titling: bool,
    /// Why the store refused a write: from then on nothing is appended (the session is
    /// read-only) until the daemon restarts.
    broken: Option<String>,
    env: Arc<TurnEnv>,
    history: History,
    running: Option<Running>,
    queue: VecDeque<Queued>,
    /// Whether this actor has run the SessionStart hooks (once per load).
    session_started: bool,
    workspace: Arc<Workspace>,
    /// Permission requests waiting for an answer.
    waiting: std::collections::HashMap<String, Waiting>,
    /// Settings problems already reported.
    reported: std::collections::HashSet<String>,
    me: mpsc::WeakUnboundedSender<Command>,
}

struct Waiting {
    turn_id: TurnId,
    /// The rules an `allow_session` / `allow_always` answer adds.
    rules: Vec<String>,
    reply: oneshot::Sender<Result<Verdict, SinkError>>,
}

struct Running {
    turn_id: TurnId,
    cancel: CancellationToken,
    /// Permission rules that allow without asking during this turn only.
    allow: Vec<String>,
}

struct Queued {
    turn_id: TurnId,
    input: Vec<InputItem>,
    client_turn_id: Option<String>,
    options: TurnOptions,
    by: ClientRef,
}

/// Everything [`SessionActor::launch`] needs besides the turn id.
struct Launch {
    model: String,
    tools: crate::agent::Tools,
    hooks: Arc<crate::hooks::Hooks>,
    job: TurnJob,
    /// The user's prompt text, recorded on the turn span when prompts may be logged.
    prompt: Option<String>,
    options: TurnOptions,
    /// Started by a person's client (not a script): pauses are likely, so a long-lived cache
    /// pays.
    interactive: bool,
}

/// What a launched turn does.
enum TurnJob {
    /// A model turn.
    Run,
    /// `/compact [instructions]`.
    Compact(Option<String>),
    /// Goes on with these tool calls of a turn an earlier daemon left waiting for permission.
    Resume(Vec<crate::agent::Call>),
}

/// The turn's outlet into its session actor.
struct ActorSink {
    tx: mpsc::UnboundedSender<Command>,
    turn_id: TurnId,
}

impl TurnSink for ActorSink {
    fn authorize(
        &self,
        ask: PermissionAsk,
    ) -> Pin<Box<dyn Future<Output = Result<Verdict, SinkError>> + Send + '_>> {
        Box::pin(async move {
            let (reply, answer) = oneshot::channel();
            self.tx
                .send(Command::Authorize {
                    turn_id: self.turn_id.clone(),
                    ask,
                    reply,
                })
                .map_err(|_| SinkError("the session stopped".into()))?;
            answer
                .await
                .map_err(|_| SinkError("the session stopped".into()))?
        })
    }

    fn send(&self, event: EventKind) {
        let _ = self.tx.send(Command::TurnEvent {
            turn_id: self.turn_id.clone(),
            event,
            ack: None,
        });
    }

    fn commit(
        &self,
        event: EventKind,
    ) -> Pin<Box<dyn Future<Output = Result<(), SinkError>> + Send + '_>> {
        Box::pin(async move {
            let (ack, done) = oneshot::channel();
            self.tx
                .send(Command::TurnEvent {
                    turn_id: self.turn_id.clone(),
                    event,
                    ack: Some(ack),
                })
                .map_err(|_| SinkError("the session stopped".into()))?;
            done.await
                .map_err(|_| SinkError("the session stopped".into()))?
        })
    }
}

/// What a session's log says when it is loaded.
pub(super) struct Loaded {
    pub head: Seq,
    pub history: History,
    pub open_turn: Option<OpenTurn>,
    /// Seqs of records that could not be decoded (skipped).
    pub damaged: Vec<Seq>,
    /// Background shells started and never seen to end.
    pub shells: Vec<OrphanShell>,
}

/// A background shell the log shows started and never ended.
#[derive(Debug)]
pub(super) struct OrphanShell {
    pub id: String,
    pub command: String,
    pub pid: Option<i32>,
    pub start_ticks: Option<u64>,
}

/// What the log says about a turn that has no `turn_ended`.
#[derive(Debug)]
pub(super) struct OpenTurn {
    pub turn_id: TurnId,
    /// Tool calls without a result, in order.
    pub unanswered: Vec<String>,
    /// Text streamed into blocks that never completed: index → text.
    pub partial: std::collections::BTreeMap<u32, String>,
}

/// Replays a session's log into its history.
pub(super) fn replay(log: &EventLog) -> Result<Loaded, SessionError> {
    let head = log.head()?;
    let mut history = History::default();
    let mut open_turn = None;
    let mut damaged = Vec::new();
    let mut shells = Vec::new();
    for record in log.iter_between(0, head) {
        let (seq, bytes) = record?;
        let Ok(event) = serde_json::from_slice::<Event>(&bytes) else {
            tracing::warn!(seq, "skipping an undecodable event while loading a session");
            damaged.push(seq);
            continue;
        };
        match (&event.kind, open_turn.as_mut()) {
            (EventKind::TurnStarted { .. }, _) => {
                open_turn = event.turn_id.clone().map(|turn_id| OpenTurn {
                    turn_id,
                    unanswered: Vec::new(),
                    partial: Default::default(),
                })
            }
            (EventKind::TurnEnded { .. }, _) => open_turn = None,
            (
                EventKind::ToolResult {
                    details: Some(d), ..
                },
                _,
            ) if d.get("backgroundShell").is_some() => {
                let b = &d["backgroundShell"];
                if let (Some(id), Some(command)) = (b["id"].as_str(), b["command"].as_str()) {
                    shells.push(OrphanShell {
                        id: id.to_owned(),
                        command: command.to_owned(),
                        pid: b["pid"].as_i64().and_then(|p| i32::try_from(p).ok()),
                        start_ticks: b["startTicks"].as_u64(),
                    });
                }
            }
            (EventKind::BackgroundShellEnded { shell_id, .. }, _) => {
                shells.retain(|s| &s.id != shell_id)
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
        history.apply(&event.kind, event.turn_id.as_ref());
    }
    Ok(Loaded {
        head,
        history,
        open_turn,
        damaged,
        shells,
    })
}

/// Starts the actor of a session whose log is `loaded`.
pub(super) fn spawn(
    record: SessionRecord,
    store: Store,
    log: EventLog,
    epoch: u64,
    loaded: Loaded,
    env: Arc<TurnEnv>,
) -> SessionHandle {
    let (tx, rx) = mpsc::unbounded_channel();
    let head = loaded.head;
    if !loaded.damaged.is_empty() {
        let (reply, _) = oneshot::channel();
        let _ = tx.send(Command::Note {
            message: format!(
                "{} damaged record(s) in this session's log could not be read and were skipped (seq {:?})",
                loaded.damaged.len(),
                loaded.damaged
            ),
            reply,
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
    let (fanout, _) = broadcast::channel(FANOUT_CAPACITY);
    let workspace = Arc::new(Workspace::new(
        std::path::PathBuf::from(&record.cwd),
        Vec::new(),
        env.data_dir.join("scratch").join(&record.id.0),
    ));
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
    let actor = SessionActor {
        record,
        store,
        log,
        epoch,
        head,
        committed: head,
        fanout,
        attached: Vec::new(),
        unsent: Vec::new(),
        deferred: Vec::new(),
        record_dirty: false,
        prune_due: false,
        titling: false,
        broken: None,
        env,
        history: loaded.history,
        running: None,
        queue: VecDeque::new(),
        session_started: false,
        workspace,
        waiting: Default::default(),
        reported: Default::default(),
        me: tx.downgrade(),
    };
    tokio::spawn(actor.run(rx));
    handle
}

enum Flow {
    Continue,
    Stop,
}

impl SessionActor {
    /// Whether nothing holds the session in memory: no subscriber, turn, request or job.
    fn idle(&self) -> bool {
        self.attached.is_empty()
            && self.running.is_none()
            && self.queue.is_empty()
            && self.waiting.is_empty()
            && !self.workspace.jobs.any_running()
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Command>) {
        loop {
            let next = match self.env.idle_unload {
                Some(after) if self.idle() => tokio::select! {
                    cmd = rx.recv() => cmd,
                    _ = tokio::time::sleep(after) => {
                        tracing::debug!(session = %self.record.id, "unloading an idle session");
                        None
                    }
                },
                _ => rx.recv().await,
            };
            let Some(cmd) = next else { break };
            let mut flow = self.handle(cmd).await;
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
            self.commit().await;
            if matches!(flow, Flow::Stop) {
                break;
            }
        }
        tracing::debug!(session = %self.record.id, "session actor stopped");
    }

    async fn handle(&mut self, cmd: Command) -> Flow {
        match cmd {
            Command::AnnounceCreation { by, reply } => {
                let kind = EventKind::SessionCreated {
                    cwd: self.record.cwd.clone(),
                    title: self.record.title.clone(),
                    model: self.record.model.clone(),
                    permission_mode: self.record.permission_mode,
                    by,
                };
                self.record_dirty = true;
                match self.emit(kind) {
                    Ok(()) => self.defer(reply, |_| Ok(())),
                    Err(e) => drop(reply.send(Err(e))),
                }
            }
            Command::Attach {
                client,
                role,
                reply,
            } => {
                // Register before reading the watermark: everything after `committed` will be
                // broadcast to this receiver, everything up to it is in the log.
                let events = self.fanout.subscribe();
                let attachment = Attachment {
                    events,
                    watermark: self.committed,
                    log: self.log.clone(),
                    summary: self.summary(),
                };
                self.attached.push(AttachedClient {
                    client: client.clone(),
                    role,
                });
                if self.broken.is_some() {
                    // Read-only: the replay works, presence cannot be logged.
                    let _ = reply.send(Ok(attachment));
                    return Flow::Continue;
                }
                match self.emit(EventKind::ClientAttached { client, role }) {
                    Ok(()) => self.defer(reply, move |_| Ok(attachment)),
                    Err(e) => drop(reply.send(Err(e))),
                }
            }
            Command::Detach {
                client,
                role,
                reason,
            } => {
                if let Some(i) = self
                    .attached
                    .iter()
                    .position(|a| a.client.client_id == client.client_id && a.role == role)
                {
                    self.attached.remove(i);
                }
                self.apply_no_controller_policy();
                if let Err(e) = self.emit(EventKind::ClientDetached {
                    client,
                    role,
                    reason: reason.to_owned(),
                }) {
                    tracing::error!(session = %self.record.id, "could not log client_detached: {e}");
                }
            }
            Command::Configure { change, by, reply } => {
                let title = change
                    .title
                    .filter(|t| self.record.title.as_deref() != Some(t.as_str()));
                let model = change.model.filter(|m| *m != self.record.model);
                let permission_mode = change
                    .permission_mode
                    .filter(|m| *m != self.record.permission_mode);
                let on_no_controller = change
                    .on_no_controller
                    .filter(|p| *p != self.record.on_no_controller);
                if title.is_none()
                    && model.is_none()
                    && permission_mode.is_none()
                    && on_no_controller.is_none()
                {
                    let _ = reply.send(Ok(self.summary()));
                    return Flow::Continue;
                }
                if let Some(t) = &title {
                    self.record.title = Some(t.clone());
                }
                if let Some(m) = &model {
                    self.record.model = m.clone();
                }
                if let Some(m) = permission_mode {
                    self.record.permission_mode = m;
                }
                if let Some(p) = on_no_controller {
                    self.record.on_no_controller = p;
                    self.apply_no_controller_policy();
                }
                self.record_dirty = true;
                let kind = EventKind::SessionConfigured {
                    title,
                    model,
                    effort: None,
                    permission_mode,
                    on_no_controller,
                    by,
                };
                match self.emit(kind) {
                    Ok(()) => {
                        let summary = self.summary();
                        self.defer(reply, move |_| Ok(summary));
                    }
                    Err(e) => drop(reply.send(Err(e))),
                }
            }
            Command::Summary { reply } => {
                let _ = reply.send(self.summary());
            }
            Command::Snapshot { reply } => {
                let _ = reply.send(SessionSnapshot {
                    summary: self.summary(),
                    pending_permissions: self
                        .history
                        .pending_permissions
                        .values()
                        .cloned()
                        .collect(),
                    usage: self.history.usage,
                    cost_usd: self.history.cost_usd,
                    running_turn: self.running.as_ref().map(|r| r.turn_id.clone()),
                });
            }
            Command::Settled { reply } => {
                // A batch always ends in a commit; answer after it.
                self.deferred
                    .push(Box::new(move |_: Option<&SessionError>| {
                        let _ = reply.send(());
                    }));
            }
            Command::Rules { reply } => {
                let rules = self.rules();
                let entries = [
                    ("deny", &rules.deny),
                    ("ask", &rules.ask),
                    ("allow", &rules.allow),
                ]
                .into_iter()
                .flat_map(|(kind, list)| {
                    list.iter().map(move |r| tether_proto::RuleEntry {
                        kind: kind.into(),
                        rule: r.text.clone(),
                        source: r.source.clone(),
                    })
                })
                .collect();
                let _ = reply.send(tether_proto::PermissionRules {
                    mode: self.record.permission_mode,
                    rules: entries,
                    additional_directories: rules
                        .additional_dirs
                        .iter()
                        .map(|d| d.display().to_string())
                        .collect(),
                    problems: rules.problems,
                });
            }
            Command::StartTurn {
                input,
                client_turn_id,
                mode,
                options,
                by,
                reply,
            } => {
                let result = self
                    .request_turn(input, client_turn_id, mode, options, by)
                    .await;
                let _ = reply.send(result);
            }
            Command::CancelTurn { reply } => {
                let running = self
                    .running
                    .as_ref()
                    .map(|r| (r.cancel.clone(), r.turn_id.clone()));
                if let Some((cancel, turn_id)) = &running {
                    cancel.cancel();
                    self.cancel_waiting(turn_id);
                }
                let _ = reply.send(running.is_some());
            }
            Command::Authorize {
                turn_id,
                ask,
                reply,
            } => self.authorize(turn_id, ask, reply),
            Command::ShellEnded { id, command, end } => {
                let (state, exit_code) = match end {
                    crate::agent::JobEnd::Exited(code) => ("exited", code),
                    crate::agent::JobEnd::Killed => ("killed", None),
                    crate::agent::JobEnd::Lost => ("lost", None),
                };
                let _ = self.emit(EventKind::BackgroundShellEnded {
                    message: format!("background shell {id} ({command}) {}", end.describe()),
                    shell_id: id,
                    command,
                    state: state.into(),
                    exit_code,
                });
            }
            Command::RecoverShells { shells } => {
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
                    let _ = self.emit(EventKind::BackgroundShellEnded {
                        message: format!(
                            "background shell {} ({}) {what}; its later output is lost",
                            shell.id, shell.command
                        ),
                        shell_id: shell.id,
                        command: shell.command,
                        state: "lost".into(),
                        exit_code: None,
                    });
                }
            }
            Command::Titled { title } => {
                if self.record.title.is_none() {
                    self.record.title = Some(title.clone());
                    self.record_dirty = true;
                    let _ = self.emit(EventKind::SessionConfigured {
                        title: Some(title),
                        model: None,
                        effort: None,
                        permission_mode: None,
                        on_no_controller: None,
                        by: None,
                    });
                }
            }
            Command::Note { message, reply } => match self.emit(EventKind::Notice {
                level: "info".into(),
                message,
            }) {
                Ok(()) => self.defer(reply, |_| Ok(())),
                Err(e) => drop(reply.send(Err(e))),
            },
            Command::NoControllerTimeout { request_id } => {
                let policy = self.record.on_no_controller;
                let decision = match policy.action {
                    NoControllerAction::Wait => None,
                    NoControllerAction::Deny => Some(PermissionDecision::Deny),
                    NoControllerAction::Allow => Some(PermissionDecision::AllowOnce),
                };
                if let (Some(decision), false) = (decision, self.has_controller())
                    && let Some(waiting) = self.waiting.remove(&request_id)
                {
                    let message = format!(
                        "no controller was attached within {} ms; the session's onNoController policy decided",
                        policy.timeout_ms
                    );
                    if let Err(e) = self.resolve(request_id, waiting, decision, Some(message), None)
                    {
                        tracing::error!(session = %self.record.id, "could not resolve a permission request: {e}");
                    }
                }
            }
            Command::RespondPermission {
                request_id,
                decision,
                message,
                by,
                reply,
            } => {
                let result = self.respond_permission(request_id, decision, message, by);
                let _ = reply.send(result);
            }
            Command::TurnEvent {
                turn_id,
                event,
                ack,
            } => {
                let result = self.emit_in(event, Some(turn_id));
                match (ack, result) {
                    (Some(ack), Ok(())) => {
                        self.deferred
                            .push(Box::new(move |err: Option<&SessionError>| {
                                let _ = ack.send(match err {
                                    Some(e) => Err(SinkError(e.to_string())),
                                    None => Ok(()),
                                });
                            }))
                    }
                    (Some(ack), Err(e)) => drop(ack.send(Err(SinkError(e.to_string())))),
                    (None, Err(e)) => {
                        tracing::error!(session = %self.record.id, "could not log a turn event: {e}")
                    }
                    (None, Ok(())) => {}
                }
            }
            Command::TurnFinished { turn_id, outcome } => {
                if self.running.as_ref().is_some_and(|r| r.turn_id == turn_id) {
                    self.running = None;
                    self.end_turn(turn_id, outcome);
                    self.start_next().await;
                }
            }
            Command::RecoverOpenTurn { open } => self.recover(open).await,
            Command::Delete { by, reply } => {
                self.workspace.jobs.stop_all();
                if let Some(running) = self.running.take() {
                    running.cancel.cancel();
                }
                self.commit().await;
                let result = self
                    .store
                    .delete_session(&self.record.id)
                    .await
                    .map_err(SessionError::from);
                if result.is_ok() {
                    self.broadcast_control(EventKind::SessionDeleted { by });
                }
                let stop = result.is_ok();
                let _ = reply.send(result);
                if stop {
                    return Flow::Stop;
                }
            }
            Command::Shutdown { reply } => {
                self.workspace.jobs.stop_all();
                if let Some(running) = self.running.take() {
                    running.cancel.cancel();
                    self.end_turn(running.turn_id, interrupted_outcome());
                }
                self.commit().await;
                self.broadcast_control(EventKind::DaemonShutdown {});
                let _ = reply.send(());
                return Flow::Stop;
            }
        }
        Flow::Continue
    }

    fn observer_only(&self, client: &ClientRef) -> bool {
        let mine: Vec<Role> = self
            .attached
            .iter()
            .filter(|a| a.client.client_id == client.client_id)
            .map(|a| a.role)
            .collect();
        !mine.is_empty() && !mine.contains(&Role::Controller)
    }

    /// The session's rules now: the settings files (read each time, so edits apply at once)
    /// plus the rules answers added. New problems in the files are reported once.
    fn rules(&mut self) -> crate::permissions::RuleSet {
        let root = std::path::PathBuf::from(&self.record.cwd);
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        let mut rules = crate::permissions::load_settings(&root, home.as_deref());
        let session = self.history.session_rules.clone();
        rules.add("allow", &session, &root, home.as_deref(), "session");
        if let Some(turn) = self.running.as_ref().filter(|r| !r.allow.is_empty()) {
            let allow = turn.allow.clone();
            rules.add(
                "allow",
                &allow,
                &root,
                home.as_deref(),
                "this turn's allowedTools",
            );
        }
        for problem in rules.problems.clone() {
            if self.reported.insert(problem.clone()) {
                let _ = self.emit(EventKind::Notice {
                    level: "warning".into(),
                    message: problem,
                });
            }
        }
        rules
    }

    /// Holds the turn's call until `request_id` is answered.
    fn await_answer(&mut self, request_id: String, waiting: Waiting) {
        self.waiting.insert(request_id, waiting);
        self.set_status(SessionStatus::AwaitingPermission);
        self.apply_no_controller_policy();
    }

    fn authorize(
        &mut self,
        turn_id: TurnId,
        ask: PermissionAsk,
        reply: oneshot::Sender<Result<Verdict, SinkError>>,
    ) {
        use crate::permissions::{Call, Decision, decide, suggest_rules};
        let logged = self
            .history
            .pending_permissions
            .iter()
            .find(|(_, p)| p["toolCallId"].as_str() == Some(ask.tool_call_id.as_str()))
            .map(|(id, p)| {
                (
                    id.clone(),
                    match p["rules"].as_array() {
                        Some(list) if !list.is_empty() => list
                            .iter()
                            .filter_map(|r| r.as_str().map(str::to_owned))
                            .collect(),
                        _ => vec![p["rule"].as_str().unwrap_or_default().to_owned()],
                    },
                )
            });
        if let Some((request_id, rules)) = logged {
            // A request an earlier daemon logged (the turn was resumed) stays open as it was.
            self.await_answer(
                request_id,
                Waiting {
                    turn_id,
                    rules,
                    reply,
                },
            );
            return;
        }
        let rules = self.rules();
        let root = std::path::PathBuf::from(&self.record.cwd);
        let roots = [root];
        let cwd = self.workspace.cwd();
        let call = Call {
            tool: &ask.tool,
            input: &ask.input,
            read_only: ask.read_only,
            cwd: &cwd,
            roots: &roots,
        };
        use crate::hooks::HookPermission;
        let decision = match (
            decide(self.record.permission_mode, &rules, &call),
            &ask.hook,
        ) {
            (Decision::Deny(why), _) => Decision::Deny(why),
            (_, Some(HookPermission::Deny(why))) => {
                Decision::Deny(format!("denied by a PreToolUse hook: {why}"))
            }
            (_, Some(HookPermission::Allow)) => Decision::Allow,
            (Decision::Allow, Some(HookPermission::Ask)) => Decision::Ask,
            (d, _) => d,
        };
        let source = match &ask.hook {
            Some(HookPermission::Allow | HookPermission::Deny(_)) => "hook",
            _ if std::mem::discriminant(&decide(
                self.record.permission_mode,
                &Default::default(),
                &call,
            )) == std::mem::discriminant(&decision) =>
            {
                "mode"
            }
            _ => "rule",
        };
        match &decision {
            Decision::Allow => crate::telemetry::permission_decision("allow", source),
            Decision::Deny(_) => crate::telemetry::permission_decision("deny", source),
            Decision::Ask => {}
        }
        match decision {
            Decision::Allow => drop(reply.send(Ok(Verdict::Allow))),
            Decision::Deny(why) => drop(reply.send(Ok(Verdict::Deny(why)))),
            Decision::Ask => {
                let request_id = format!("perm_{}", uuid::Uuid::new_v4().simple());
                let tool_name = ask.tool.clone();
                let suggested = suggest_rules(&call, &rules);
                let preview = crate::tools::preview(&ask.tool, &ask.input, &cwd);
                let event = EventKind::PermissionRequested {
                    request_id: request_id.clone(),
                    tool_call_id: ask.tool_call_id,
                    tool: ask.tool,
                    input: ask.input,
                    preview,
                    options: ["allow_once", "allow_session", "allow_always", "deny"]
                        .map(String::from)
                        .to_vec(),
                    rule: suggested.join(", "),
                    rules: suggested.clone(),
                };
                if let Err(e) = self.emit_in(event, Some(turn_id.clone())) {
                    let _ = reply.send(Err(SinkError(e.to_string())));
                    return;
                }
                self.await_answer(
                    request_id,
                    Waiting {
                        turn_id,
                        rules: suggested,
                        reply,
                    },
                );
                let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
                let hooks = crate::hooks::Hooks::load(
                    std::path::Path::new(&self.record.cwd),
                    home.as_deref(),
                    self.env.config_hooks.as_ref(),
                );
                if hooks.has("Notification") {
                    let input = serde_json::json!({
                        "session_id": self.record.id.0,
                        "cwd": cwd,
                        "message": format!("tether needs your permission to use {tool_name}"),
                    });
                    tokio::spawn(async move {
                        let outcome = hooks.run("Notification", None, input, &cwd).await;
                        for n in outcome.notices {
                            tracing::warn!("{n}");
                        }
                    });
                }
            }
        }
    }

    fn respond_permission(
        &mut self,
        request_id: String,
        decision: PermissionDecision,
        message: Option<String>,
        by: ClientRef,
    ) -> Result<PermissionResponse, SessionError> {
        if self.observer_only(&by) {
            return Err(SessionError::NotController);
        }
        if let Some(why) = &self.broken {
            return Err(SessionError::StorageFailed(why.clone()));
        }
        let Some(waiting) = self.waiting.remove(&request_id) else {
            return match self.history.resolved_permissions.get(&request_id) {
                Some((decision, resolved_by)) => Ok(PermissionResponse {
                    status: "already_resolved".into(),
                    decision: *decision,
                    resolved_by: resolved_by.clone(),
                }),
                None => Err(SessionError::RequestNotFound(request_id)),
            };
        };
        self.resolve(request_id, waiting, decision, message, Some(by))
    }

    fn has_controller(&self) -> bool {
        self.attached.iter().any(|a| a.role == Role::Controller)
    }

    /// With no controller attached and a policy that acts, arms a timer for each waiting request.
    fn apply_no_controller_policy(&self) {
        let policy = self.record.on_no_controller;
        if policy.action == NoControllerAction::Wait
            || self.has_controller()
            || self.waiting.is_empty()
        {
            return;
        }
        let Some(tx) = self.me.upgrade() else { return };
        for request_id in self.waiting.keys().cloned() {
            let tx = tx.clone();
            tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(policy.timeout_ms)).await;
                let _ = tx.send(Command::NoControllerTimeout { request_id });
            });
        }
    }

    /// Records a decision on a waiting request and lets its tool call go on (once durable).
    fn resolve(
        &mut self,
        request_id: String,
        waiting: Waiting,
        decision: PermissionDecision,
        message: Option<String>,
        by: Option<ClientRef>,
    ) -> Result<PermissionResponse, SessionError> {
        let adds_rule = matches!(
            decision,
            PermissionDecision::AllowSession | PermissionDecision::AllowAlways
        );
        let wire = serde_json::to_value(decision)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let source = if by.is_some() { "user" } else { "policy" };
        crate::telemetry::permission_decision(&wire, source);
        let event = EventKind::PermissionResolved {
            request_id,
            decision,
            resolved_by: by.clone(),
            message: message.clone(),
            rule: adds_rule.then(|| waiting.rules.join(", ")),
            rules: if adds_rule {
                waiting.rules.clone()
            } else {
                Vec::new()
            },
        };
        self.emit_in(event, Some(waiting.turn_id.clone()))?;
        if decision == PermissionDecision::AllowAlways {
            let root = std::path::PathBuf::from(&self.record.cwd);
            for rule in &waiting.rules {
                let note = match crate::permissions::remember_always(&root, rule) {
                    Ok(file) => format!("{rule} is now allowed in {}", file.display()),
                    Err(e) => {
                        format!("{rule} is allowed for this session, but could not be saved: {e}")
                    }
                };
                let _ = self.emit(EventKind::Notice {
                    level: "info".into(),
                    message: note,
                });
            }
        }
        let verdict = match decision {
            PermissionDecision::Deny => Verdict::Deny(match message.filter(|m| !m.trim().is_empty()) {
                Some(m) => format!("The user denied this tool call and said: {m}"),
                None => "The user denied this tool call. Do not retry it unchanged; ask the user or take another approach.".into(),
            }),
            _ => Verdict::Allow,
        };
        // The tool runs only once the decision is durable.
        let reply = waiting.reply;
        self.deferred
            .push(Box::new(move |err: Option<&SessionError>| {
                let _ = reply.send(match err {
                    Some(e) => Err(SinkError(e.to_string())),
                    None => Ok(verdict),
                });
            }));
        if !self.waiting.values().any(|w| {
            self.running
                .as_ref()
                .is_some_and(|r| r.turn_id == w.turn_id)
        }) {
            self.set_status(SessionStatus::Running);
        }
        Ok(PermissionResponse {
            status: "accepted".into(),
            decision,
            resolved_by: by,
        })
    }

    /// Resolves every request of `turn_id` as cancelled.
    fn cancel_waiting(&mut self, turn_id: &TurnId) {
        let ids: Vec<String> = self
            .waiting
            .iter()
            .filter(|(_, w)| &w.turn_id == turn_id)
            .map(|(id, _)| id.clone())
            .collect();
        for request_id in ids {
            if let Some(w) = self.waiting.remove(&request_id) {
                let _ = self.emit_in(
                    EventKind::PermissionResolved {
                        request_id,
                        decision: PermissionDecision::Cancelled,
                        resolved_by: None,
                        message: None,
                        rule: None,
                        rules: Vec::new(),
                    },
                    Some(w.turn_id),
                );
                let _ = w
                    .reply
                    .send(Ok(Verdict::Deny(crate::agent::INTERRUPTED.to_owned())));
            }
        }
    }

    fn set_status(&mut self, status: SessionStatus) {
        if self.record.status != status {
            self.record.status = status;
            if let Err(e) = self.emit(EventKind::SessionStatus { status }) {
                tracing::error!(session = %self.record.id, "could not log session_status: {e}");
            }
        }
    }

    fn end_turn(&mut self, turn_id: TurnId, outcome: TurnOutcome) {
        crate::telemetry::turn_ended(
            &self.env.catalog.resolve(&self.record.model),
            &outcome.usage,
            outcome.cost_usd,
        );
        let event = EventKind::TurnEnded {
            stop_reason: outcome.stop_reason,
            usage: outcome.usage,
            cost_usd: outcome.cost_usd,
            error: outcome.error,
        };
        if let Err(e) = self.emit_in(event, Some(turn_id)) {
            tracing::error!(session = %self.record.id, "could not log turn_ended: {e}");
        }
        self.prune_due = true;
        if self.running.is_none() && self.queue.is_empty() {
            self.set_status(SessionStatus::Idle);
        }
    }

    async fn request_turn(
        &mut self,
        input: Vec<InputItem>,
        client_turn_id: Option<String>,
        mode: BusyMode,
        options: TurnOptions,
        by: ClientRef,
    ) -> Result<TurnStarted, SessionError> {
        if let Some(c) = &client_turn_id {
            if let Some(turn_id) = self.history.client_turns.get(c) {
                return Ok(TurnStarted {
                    turn_id: turn_id.clone(),
                    queued: false,
                });
            }
            if let Some(q) = self
                .queue
                .iter()
                .find(|q| q.client_turn_id.as_ref() == Some(c))
            {
                return Ok(TurnStarted {
                    turn_id: q.turn_id.clone(),
                    queued: true,
                });
            }
        }
        if self.observer_only(&by) {
            return Err(SessionError::NotController);
        }
        if let Some(why) = &self.broken {
            return Err(SessionError::StorageFailed(why.clone()));
        }
        let turn_id = TurnId(uuid::Uuid::new_v4().to_string());
        let queued = Queued {
            turn_id: turn_id.clone(),
            input,
            client_turn_id,
            options,
            by,
        };
        if self.running.is_some() {
            if mode == BusyMode::Reject {
                return Err(SessionError::Busy);
            }
            self.queue.push_back(queued);
            return Ok(TurnStarted {
                turn_id,
                queued: true,
            });
        }
        self.start_turn(queued).await;
        Ok(TurnStarted {
            turn_id,
            queued: false,
        })
    }

    async fn start_next(&mut self) {
        while self.running.is_none()
            && let Some(next) = self.queue.pop_front()
        {
            self.start_turn(next).await;
        }
    }

    /// Fixes the session's prompt prefix at its first model turn (`system_prompt`); at a later
    /// fresh turn (`tail`), tells the model what changed since — date, git, memory — at the tail
    /// of the conversation (`context_updated`), never in the prefix. A resumed turn gets no
    /// update: its next message must start with tool results.
    async fn settle_context(&mut self, turn_id: &TurnId, cwd: &std::path::Path, tail: bool) {
        if self.history.prefix.is_some() && !tail {
            return;
        }
        let notes = crate::context::project_memory(&self.env.data_dir, cwd);
        let now = crate::context::gather(cwd, Some(&notes)).await;
        let kind = if self.history.prefix.is_none() {
            EventKind::SystemPrompt {
                instructions: now.instructions,
                environment: now.environment,
                git: now.git,
                memory: now.memory,
            }
        } else {
            let told = &self.history.told;
            // A part that went away is said to be gone, not left as it was.
            let changed = |was: &Option<String>, is: Option<String>, gone: &str| {
                (was.as_ref() != is.as_ref()).then(|| is.unwrap_or_else(|| gone.to_owned()))
            };
            let date = (told.date.as_deref() != Some(now.date.as_str())).then(|| now.date.clone());
            let git = changed(&told.git, now.git, "# Git\n(not a git repository any more)");
            let memory = changed(&told.memory, now.memory, "# Memory\n(no memory files now)");
            if date.is_none() && git.is_none() && memory.is_none() {
                return;
            }
            EventKind::ContextUpdated { date, git, memory }
        };
        if let Err(e) = self.emit_in(kind, Some(turn_id.clone())) {
            tracing::error!(session = %self.record.id, "could not log the session's context: {e}");
        }
    }

    /// Ends a turn the daemon refused before any model call: an `error` event, then the end.
    fn refuse(&mut self, turn_id: TurnId, code: &str, message: String) {
        let _ = self.emit_in(
            EventKind::Error {
                code: code.into(),
                message: message.clone(),
            },
            Some(turn_id.clone()),
        );
        let error = TurnError {
            code: code.into(),
            message,
            retryable: false,
        };
        self.finish_command(turn_id, Some(error))
    }

    /// Ends a turn that was handled without the model (a command).
    fn finish_command(&mut self, turn_id: TurnId, error: Option<TurnError>) {
        let outcome = TurnOutcome {
            stop_reason: if error.is_some() { "error" } else { "command" }.into(),
            usage: TokenUsage::default(),
            cost_usd: Some(0.0),
            error,
        };
        self.end_turn(turn_id, outcome);
    }

    fn notice(&mut self, turn_id: &TurnId, message: String) {
        let _ = self.emit_in(
            EventKind::Notice {
                level: "info".into(),
                message,
            },
            Some(turn_id.clone()),
        );
    }

    /// Ends or resumes a turn an earlier daemon left open. Text clients saw stays as a cut-off
    /// block; tools that were running get an interrupted result (never run again). A turn that
    /// was waiting for permission keeps its requests open and goes on once they are answered;
    /// any other open turn ends `interrupted_by_restart`.
    async fn recover(&mut self, open: OpenTurn) {
        let turn_id = open.turn_id.clone();
        // Text clients saw stays visible as a completed (truncated) block; it does not join the
        // history, because the reply never completed.
        for (index, text) in &open.partial {
            let _ = self.emit_in(
                EventKind::AssistantBlockCompleted {
                    index: *index,
                    block: serde_json::json!({"type": "text", "text": format!("{text} [cut off: the daemon stopped]")}),
                },
                Some(turn_id.clone()),
            );
        }
        let awaiting: std::collections::HashSet<String> = self
            .history
            .pending_permissions
            .values()
            .filter_map(|p| p["toolCallId"].as_str().map(str::to_owned))
            .filter(|id| open.unanswered.contains(id))
            .collect();
        let interrupted: Vec<String> = open
            .unanswered
            .iter()
            .filter(|id| !awaiting.contains(*id))
            .cloned()
            .collect();
        for id in &interrupted {
            let _ = self.emit_in(
                EventKind::ToolResult {
                    tool_call_id: id.clone(),
                    content: serde_json::json!("interrupted: the daemon stopped while this tool was running; it was not run again"),
                    is_error: true,
                    details: None,
                },
                Some(turn_id.clone()),
            );
        }
        if !awaiting.is_empty() && self.env.llm.is_ok() {
            let _ = self.emit_in(
                EventKind::TurnRecovered {
                    action: "awaiting_permission".into(),
                    interrupted_tools: interrupted,
                },
                Some(turn_id.clone()),
            );
            let calls: Vec<crate::agent::Call> = self
                .history
                .unanswered_tool_uses()
                .into_iter()
                .map(|b| {
                    let id = b["id"].as_str().unwrap_or_default().to_owned();
                    crate::agent::Call {
                        logged: open.unanswered.contains(&id),
                        id,
                        name: b["name"].as_str().unwrap_or_default().to_owned(),
                        input: b.get("input").cloned().unwrap_or_default(),
                    }
                })
                .collect();
            self.notice(
                &turn_id,
                "the daemon stopped while this turn waited for permission; the request is still open, and the turn goes on once it is answered".into(),
            );
            let cwd = std::path::PathBuf::from(&self.record.cwd);
            let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
            let hooks = Arc::new(crate::hooks::Hooks::load(
                &cwd,
                home.as_deref(),
                self.env.config_hooks.as_ref(),
            ));
            let (model, tools) = (self.record.model.clone(), self.env.tools.clone());
            let plan = Launch {
                model,
                tools,
                hooks,
                job: TurnJob::Resume(calls),
                prompt: None,
                options: TurnOptions::default(),
                interactive: true,
            };
            self.launch(turn_id, plan).await;
            return;
        }
        let _ = self.emit_in(
            EventKind::TurnRecovered {
                action: "ended".into(),
                interrupted_tools: open.unanswered.clone(),
            },
            Some(turn_id.clone()),
        );
        let pending: Vec<String> = self.history.pending_permissions.keys().cloned().collect();
        for request_id in pending {
            let _ = self.emit_in(
                EventKind::PermissionResolved {
                    request_id,
                    decision: PermissionDecision::Cancelled,
                    resolved_by: None,
                    message: Some("the daemon stopped while this request was pending".into()),
                    rule: None,
                    rules: Vec::new(),
                },
                Some(turn_id.clone()),
            );
        }
        self.end_turn(turn_id, interrupted_outcome());
        let _ = self.emit(EventKind::Notice {
            level: "warning".into(),
            message:
                "the daemon stopped during the last turn; it was ended and the session is ready"
                    .into(),
        });
    }

    /// Names an untitled session after its first prompt, in the background.
    fn name_session(&mut self, input: &[InputItem]) {
        if self.record.title.is_some() || self.titling {
            return;
        }
        let prompt: Vec<&str> = input
            .iter()
            .filter_map(|i| match i {
                InputItem::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        let prompt = prompt.join("\n");
        if prompt.trim().is_empty() {
            return;
        }
        self.titling = true;
        let env = self.env.clone();
        let tx = self.me.clone();
        let session = self.record.id.clone();
        tokio::spawn(async move {
            let llm = env.llm.as_deref().map_err(String::as_str);
            let title = match crate::agent::generate_title(
                llm,
                &env.catalog,
                &env.fast_model,
                &prompt,
            )
            .await
            {
                Ok(t) => t,
                Err((fallback, why)) => {
                    tracing::info!(%session, "titled from the prompt; the model was not asked or failed: {why}");
                    fallback
                }
            };
            if let Some(tx) = tx.upgrade() {
                let _ = tx.send(Command::Titled { title });
            }
        });
    }

    async fn start_turn(&mut self, q: Queued) {
        let cwd = std::path::PathBuf::from(&self.record.cwd);
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        let command = crate::agent::parse_command(&cwd, home.as_deref(), &q.input);
        let (content, notices) = match &command {
            Some(SlashCommand::Custom { prompt, .. }) => {
                let p = crate::agent::process_input(
                    &cwd,
                    &[InputItem::Text {
                        text: prompt.clone(),
                    }],
                );
                (p.content, p.notices)
            }
            Some(_) => (Vec::new(), Vec::new()),
            None => {
                let p = crate::agent::process_input(&cwd, &q.input);
                (p.content, p.notices)
            }
        };
        let hooks = Arc::new(crate::hooks::Hooks::load(
            &cwd,
            home.as_deref(),
            self.env.config_hooks.as_ref(),
        ));
        for problem in hooks.problems.clone() {
            if self.reported.insert(problem.clone()) {
                let _ = self.emit(EventKind::Notice {
                    level: "warning".into(),
                    message: problem,
                });
            }
        }
        let (mut content, mut notices) = (content, notices);
        let mut blocked = None;
        if command.is_none() || matches!(command, Some(SlashCommand::Custom { .. })) {
            if !self.session_started && hooks.has("SessionStart") {
                self.session_started = true;
                let input = serde_json::json!({"session_id": self.record.id.0, "cwd": cwd, "source": "startup"});
                let outcome = hooks
                    .run("SessionStart", Some("startup"), input, &cwd)
                    .await;
                notices.extend(outcome.notices);
                content.extend(
                    outcome
                        .context
                        .into_iter()
                        .map(|c| serde_json::json!({"type": "text", "text": c})),
                );
            }
            if hooks.has("UserPromptSubmit") {
                let prompt: Vec<&str> = content.iter().filter_map(|b| b["text"].as_str()).collect();
                let input = serde_json::json!({"session_id": self.record.id.0, "cwd": cwd, "prompt": prompt.join("\n")});
                let outcome = hooks.run("UserPromptSubmit", None, input, &cwd).await;
                notices.extend(outcome.notices);
                blocked = outcome.block.or(outcome.stop);
                content.extend(
                    outcome
                        .context
                        .into_iter()
                        .map(|c| serde_json::json!({"type": "text", "text": c})),
                );
            }
        }
        if blocked.is_some() {
            content.clear();
        }
        let input: Vec<serde_json::Value> = q
            .input
            .iter()
            .filter_map(|i| serde_json::to_value(i).ok())
            .collect();
        let started = EventKind::TurnStarted {
            input,
            content,
            by: Some(q.by.clone()),
            client_turn_id: q.client_turn_id.clone(),
        };
        if let Err(e) = self.emit_in(started, Some(q.turn_id.clone())) {
            tracing::error!(session = %self.record.id, "could not log turn_started: {e}");
            return;
        }
        for notice in notices {
            let _ = self.emit_in(
                EventKind::Notice {
                    level: "warning".into(),
                    message: notice,
                },
                Some(q.turn_id.clone()),
            );
        }
        let turn_id = q.turn_id.clone();
        if let Some(reason) = blocked {
            let message = format!("the prompt was blocked by a UserPromptSubmit hook: {reason}");
            let _ = self.emit_in(
                EventKind::Error {
                    code: "prompt_blocked".into(),
                    message: message.clone(),
                },
                Some(turn_id.clone()),
            );
            let error = TurnError {
                code: "prompt_blocked".into(),
                message,
                retryable: false,
            };
            return self.finish_command(turn_id, Some(error));
        }
        let mut model = self.record.model.clone();
        let mut tools = self.env.tools.clone();
        let mut compact_instructions = None;
        match command {
            None => self.name_session(&q.input),
            Some(SlashCommand::Clear) => {
                let _ = self.emit_in(EventKind::HistoryCleared {}, Some(turn_id.clone()));
                return self.finish_command(turn_id, None);
            }
            Some(SlashCommand::Model(None)) => {
                let resolved = self.env.catalog.resolve(&model);
                self.notice(&turn_id, format!("model: {model} ({resolved})"));
                return self.finish_command(turn_id, None);
            }
            Some(SlashCommand::Model(Some(name))) => {
                if let Err(e) = self.env.catalog.check(&name) {
                    return self.refuse(turn_id, e.code(), e.to_string());
                }
                self.record.model = name.clone();
                self.record_dirty = true;
                let _ = self.emit_in(
                    EventKind::SessionConfigured {
                        title: None,
                        model: Some(name.clone()),
                        effort: None,
                        permission_mode: None,
                        on_no_controller: None,
                        by: Some(q.by),
                    },
                    Some(turn_id.clone()),
                );
                return self.finish_command(turn_id, None);
            }
            Some(SlashCommand::Effort(None)) => {
                let info = self.env.catalog.info(&model);
                let levels = info
                    .as_ref()
                    .map(|i| {
                        i.efforts
                            .iter()
                            .map(|e| e.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                    .filter(|l| !l.is_empty());
                let current = self
                    .record
                    .effort
                    .clone()
                    .or_else(|| self.env.policy.effort.map(|e| e.as_str().to_owned()))
                    .or_else(|| {
                        info.as_ref()
                            .and_then(|i| i.default_effort)
                            .map(|e| format!("{} (the model's default)", e.as_str()))
                    });
                let text = match (current, levels) {
                    (Some(c), Some(l)) => format!("effort: {c}; {model} takes {l}"),
                    _ => format!("{model} has no effort setting"),
                };
                self.notice(&turn_id, text);
                return self.finish_command(turn_id, None);
            }
            Some(SlashCommand::Effort(Some(level))) => {
                let reset = matches!(level.as_str(), "default" | "auto");
                if !reset && let Err(e) = self.env.catalog.check_effort(&model, &level) {
                    return self.refuse(turn_id, e.code(), e.to_string());
                }
                self.record.effort = (!reset).then(|| level.clone());
                self.record_dirty = true;
                let _ = self.emit_in(
                    EventKind::SessionConfigured {
                        title: None,
                        model: None,
                        effort: Some(if reset { String::new() } else { level }),
                        permission_mode: None,
                        on_no_controller: None,
                        by: Some(q.by),
                    },
                    Some(turn_id.clone()),
                );
                return self.finish_command(turn_id, None);
            }
            Some(SlashCommand::Cost) => {
                let u = self.history.usage;
                let cost = match self.history.cost_usd {
                    Some(c) => format!("${c:.4}"),
                    None if u == TokenUsage::default() => "$0.0000".into(),
                    None => "unknown (a model without a price was used)".into(),
                };
                let all =
                    u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens;
                // What the cache reads would have cost as plain input, at this model's prices.
                let saving = self
                    .env
                    .catalog
                    .info(&model)
                    .and_then(|i| i.price)
                    .map(|p| {
                        let saved = u.cache_read_input_tokens as f64 * (p.input - p.cache_read)
                            / 1_000_000.0;
                        format!(
                            ", saving about ${saved:.4} at {}'s prices",
                            self.env.catalog.resolve(&model)
                        )
                    })
                    .unwrap_or_default();
                let share = (u.cache_read_input_tokens * 100)
                    .checked_div(all)
                    .unwrap_or(0);
                self.notice(
                    &turn_id,
                    format!(
                        "session cost {cost}; tokens: {} input, {} output, {} cache writes, {} cache reads; the cache served {share}% of input{saving}",
                        u.input_tokens, u.output_tokens, u.cache_creation_input_tokens, u.cache_read_input_tokens
                    ),
                );
                return self.finish_command(turn_id, None);
            }
            Some(SlashCommand::Note(note)) => {
                let file = crate::context::project_memory(&self.env.data_dir, &cwd);
                match crate::context::remember(&file, &note) {
                    Ok(()) => {
                        self.notice(&turn_id, format!("noted in {}", file.display()));
                        return self.finish_command(turn_id, None);
                    }
                    Err(e) => {
                        let message = format!("could not write {}: {e}", file.display());
                        let _ = self.emit_in(
                            EventKind::Error {
                                code: "memory".into(),
                                message: message.clone(),
                            },
                            Some(turn_id.clone()),
                        );
                        let error = TurnError {
                            code: "memory".into(),
                            message,
                            retryable: true,
                        };
                        return self.finish_command(turn_id, Some(error));
                    }
                }
            }
            Some(SlashCommand::Unknown(name)) => {
                let all: Vec<String> = crate::agent::list_commands(&cwd, home.as_deref())
                    .into_iter()
                    .map(|c| format!("/{}", c.name))
                    .collect();
                let message = format!(
                    "unknown command /{name}; this session's commands are {} (custom ones live in .claude/commands/)",
                    all.join(" ")
                );
                let _ = self.emit_in(
                    EventKind::Error {
                        code: "unknown_command".into(),
                        message: message.clone(),
                    },
                    Some(turn_id.clone()),
                );
                let error = TurnError {
                    code: "unknown_command".into(),
                    message,
                    retryable: false,
                };
                return self.finish_command(turn_id, Some(error));
            }
            Some(SlashCommand::Compact(instructions)) => compact_instructions = Some(instructions),
            Some(SlashCommand::Custom {
                model: m,
                allowed_tools,
                ..
            }) => {
                if let Some(m) = m {
                    model = m;
                }
                if let Some(names) = allowed_tools {
                    tools = tools.subset(&names);
                }
            }
        }

        let effort = q.options.effort.as_deref().filter(|e| !e.trim().is_empty());
        let checked = self.env.catalog.check(&model).and_then(|()| match effort {
            Some(e) => self.env.catalog.check_effort(&model, e).map(|_| ()),
            None => Ok(()),
        });
        if let Err(e) = checked {
            return self.refuse(turn_id, e.code(), e.to_string());
        }
        let job = match compact_instructions {
            Some(instructions) => TurnJob::Compact(instructions),
            None => TurnJob::Run,
        };
        let prompt: Vec<&str> = q
            .input
            .iter()
            .filter_map(|i| match i {
                InputItem::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        let prompt = Some(prompt.join("\n"));
        let plan = Launch {
            model,
            tools,
            hooks,
            job,
            prompt,
            options: q.options.clone(),
            interactive: q.by.kind != tether_proto::ClientKind::Script,
        };
        self.launch(turn_id, plan).await;
    }

    /// Runs a turn's work in its own task; its events come back through an [`ActorSink`].
    async fn launch(&mut self, turn_id: TurnId, plan: Launch) {
        let Launch {
            model,
            tools,
            hooks,
            job,
            prompt,
            options,
            interactive,
        } = plan;
        let cwd = std::path::PathBuf::from(&self.record.cwd);
        let cancel = CancellationToken::new();
        self.running = Some(Running {
            turn_id: turn_id.clone(),
            cancel: cancel.clone(),
            allow: options.allowed_tools.clone(),
        });
        let tools = if options.disallowed_tools.is_empty() {
            tools
        } else {
            let keep: Vec<String> = tools
                .names()
                .into_iter()
                .filter(|n| !options.disallowed_tools.iter().any(|d| d == n))
                .map(str::to_owned)
                .collect();
            tools.subset(&keep)
        };
        let mut limits = self.env.limits.clone();
        if let Some(n) = options.max_turns {
            limits.max_requests = n;
        }
        self.set_status(SessionStatus::Running);
        let llm = match &self.env.llm {
            Ok(llm) => llm.clone(),
            Err(message) => {
                let error = TurnError {
                    code: "config".into(),
                    message: message.clone(),
                    retryable: false,
                };
                self.running = None;
                return self.finish_command(turn_id, Some(error));
            }
        };
        self.settle_context(&turn_id, &cwd, matches!(job, TurnJob::Run))
            .await;
        let Some(tx) = self.me.upgrade() else { return };
        let mut system = self
            .history
            .prefix
            .as_ref()
            .map(|p| p.blocks())
            .unwrap_or_default();
        if let Some(extra) = options
            .append_system_prompt
            .as_ref()
            .filter(|e| !e.trim().is_empty())
        {
            system.push(crate::llm::SystemBlock::text(extra.clone()));
        }
        let mut policy = self.env.policy.clone();
        policy.hide_thinking = options.hide_thinking;
        policy.prefix_ttl = self.env.cache_ttl.unwrap_or(if interactive {
            crate::llm::CacheTtl::OneHour
        } else {
            crate::llm::CacheTtl::FiveMinutes
        });
        // The turn's own level, else the session's (`/effort`), else the configured one.
        if let Some(e) = options
            .effort
            .as_deref()
            .or(self.record.effort.as_deref())
            .and_then(crate::llm::Effort::parse)
        {
            policy.effort = Some(e);
        }
        let child_tools: Vec<String> = tools
            .names()
            .into_iter()
            .filter(|n| *n != crate::agent::TASK_TOOL)
            .map(str::to_owned)
            .collect();
        let subagents = Arc::new(crate::agent::Subagents {
            hooks: hooks.clone(),
            session_id: self.record.id.0.clone(),
            llm: llm.clone(),
            catalog: self.env.catalog.clone(),
            model: model.clone(),
            system: system.clone(),
            tools: tools.subset(&child_tools),
            limits: limits.clone(),
            policy: policy.clone(),
            web: self.env.web.clone(),
            fast_model: self.env.fast_model.clone(),
            authorizer: Arc::new(ActorSink {
                tx: tx.clone(),
                turn_id: turn_id.clone(),
            }),
        });
        let turn = Turn {
            model,
            system,
            tools,
            llm,
            catalog: self.env.catalog.clone(),
            workspace: self.workspace.clone(),
            cancel,
            limits,
            subagents: Some(subagents),
            hooks,
            session_id: self.record.id.0.clone(),
            web: self.env.web.clone(),
            fast_model: self.env.fast_model.clone(),
            policy,
        };
        let history = self.history.clone();
        let sink = Arc::new(ActorSink {
            tx: tx.clone(),
            turn_id: turn_id.clone(),
        });
        let span = tracing::info_span!(
            "turn",
            session.id = %self.record.id,
            turn.id = %turn_id,
            model = %self.env.catalog.resolve(&turn.model),
            job = match &job {
                TurnJob::Run => "run",
                TurnJob::Compact(_) => "compact",
                TurnJob::Resume(_) => "resume",
            },
            prompt = tracing::field::Empty,
            stop_reason = tracing::field::Empty,
            tokens.input = tracing::field::Empty,
            tokens.output = tracing::field::Empty,
            cost_usd = tracing::field::Empty,
        );
        if let Some(p) = prompt.filter(|_| self.env.log_user_prompts) {
            span.record("prompt", p);
        }
        let task = async move {
            let job = async {
                match job {
                    TurnJob::Run => turn.run(history, sink).await,
                    TurnJob::Compact(instructions) => {
                        turn.compact_only(history, sink, instructions).await
                    }
                    TurnJob::Resume(calls) => turn.resume(history, calls, sink).await,
                }
            };
            let outcome = match AssertUnwindSafe(job).catch_unwind().await {
                Ok(outcome) => outcome,
                Err(panic) => {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown panic".into());
                    tracing::error!("a turn panicked: {what}");
                    TurnOutcome {
                        stop_reason: "error".into(),
                        usage: TokenUsage::default(),
                        cost_usd: None,
                        error: Some(TurnError {
                            code: "internal".into(),
                            message: format!("the turn crashed: {what}"),
                            retryable: false,
                        }),
                    }
                }
            };
            let span = tracing::Span::current();
            span.record("stop_reason", outcome.stop_reason.as_str());
            span.record("tokens.input", outcome.usage.input_tokens);
            span.record("tokens.output", outcome.usage.output_tokens);
            if let Some(c) = outcome.cost_usd {
                span.record("cost_usd", c);
            }
            let _ = tx.send(Command::TurnFinished { turn_id, outcome });
        };
        tokio::spawn(tracing::Instrument::instrument(task, span));
    }

    fn summary(&self) -> SessionSummary {
        summary_of(&self.record, self.committed, self.attached.clone())
    }

    fn defer<T: Send + 'static>(
        &mut self,
        reply: oneshot::Sender<Result<T, SessionError>>,
        value: impl FnOnce(()) -> Result<T, SessionError> + Send + 'static,
    ) {
        self.deferred
            .push(Box::new(move |err: Option<&SessionError>| {
                let result = match err {
                    Some(e) => Err(SessionError::Commit(e.to_string())),
                    None => value(()),
                };
                let _ = reply.send(result);
            }));
    }

    fn envelope(&self, seq: Option<Seq>, kind: EventKind) -> Event {
        Event {
            session_id: self.record.id.clone(),
            seq,
            epoch: self.epoch,
            ts: now_rfc3339(),
            turn_id: None,
            kind,
        }
    }

    /// Appends an event to the log (not yet durable nor broadcast).
    fn emit(&mut self, kind: EventKind) -> Result<(), SessionError> {
        self.emit_in(kind, None)
    }

    /// Appends an event of a turn to the log and applies it to the history.
    fn emit_in(&mut self, kind: EventKind, turn_id: Option<TurnId>) -> Result<(), SessionError> {
        if let Some(why) = &self.broken {
            return Err(SessionError::StorageFailed(why.clone()));
        }
        let seq = self.head + 1;
        let mut event = self.envelope(Some(seq), kind);
        event.turn_id = turn_id;
        let json =
            serde_json::to_string(&event).map_err(|e| SessionError::Commit(e.to_string()))?;
        if let Err(e) = self.log.append(seq, json.as_bytes()) {
            let e = SessionError::from(e);
            self.storage_failed(&e);
            return Err(e);
        }
        self.head = seq;
        self.history.apply(&event.kind, event.turn_id.as_ref());
        self.record.updated_at = event.ts;
        self.record_dirty = true;
        self.unsent.push(Arc::new(LiveEvent {
            seq: Some(seq),
            json: json.into_boxed_str(),
            ends_stream: false,
        }));
        Ok(())
    }

    fn broadcast_control(&mut self, kind: EventKind) {
        let ends_stream = kind.ends_subscription();
        let event = self.envelope(None, kind);
        match serde_json::to_string(&event) {
            Ok(json) => {
                let _ = self.fanout.send(Arc::new(LiveEvent {
                    seq: None,
                    json: json.into_boxed_str(),
                    ends_stream,
                }));
            }
            Err(e) => tracing::error!("could not encode a stream-control event: {e}"),
        }
    }

    /// A write failed: stop the turn, drop the queue, tell every subscriber (an `error` without
    /// a seq, since it cannot be logged), and refuse writes from now on. Reads keep working.
    fn storage_failed(&mut self, e: &SessionError) {
        if self.broken.is_some() {
            return;
        }
        let why = e.to_string();
        self.broken = Some(why.clone());
        if let Some(r) = &self.running {
            r.cancel.cancel();
        }
        let dropped = self.queue.len();
        self.queue.clear();
        let mut message = format!(
            "could not save this session's events: {why}. The running turn was stopped and the session is read-only (events up to #{} are saved); free disk space and restart tetherd to go on.",
            self.committed
        );
        if dropped > 0 {
            message.push_str(&format!(" {dropped} queued turn(s) were dropped."));
        }
        self.broadcast_control(EventKind::Error {
            code: "storage_failed".into(),
            message,
        });
    }

    /// Prunes the deltas of turns that ended long enough ago (only committed ones).
    async fn prune(&mut self) {
        let Some(keep) = self.env.delta_retention else {
            return;
        };
        let result =
            match super::retention::apply(&self.log, &mut self.record, self.committed, keep) {
                Ok(true) => match self.store.put_session(&self.record) {
                    Ok(()) => self.store.flush().await,
                    Err(e) => Err(e),
                },
                other => other.map(|_| ()),
            };
        if let Err(e) = result {
            tracing::warn!(session = %self.record.id, "could not prune deltas: {e}");
        }
    }

    /// Makes the batch durable, then broadcasts its events and answers its callers.
    async fn commit(&mut self) {
        if self.unsent.is_empty() && self.deferred.is_empty() && !self.record_dirty {
            return;
        }
        let mut result = Ok(());
        if self.record_dirty {
            result = self
                .store
                .put_session(&self.record)
                .map_err(SessionError::from);
        }
        if result.is_ok() {
            result = self.store.flush().await.map_err(SessionError::from);
        }
        let deferred = std::mem::take(&mut self.deferred);
        match result {
            Ok(()) => {
                self.record_dirty = false;
                self.committed = self.head;
                for ev in self.unsent.drain(..) {
                    // No receivers is fine: the event is in the log for later replays.
                    let _ = self.fanout.send(ev);
                }
                for d in deferred {
                    d(None);
                }
                if std::mem::take(&mut self.prune_due) {
                    self.prune().await;
                }
            }
            Err(e) => {
                // The batch is not durable, so no client sees it; the session stops writing.
                tracing::error!(session = %self.record.id, "commit failed: {e}");
                for d in deferred {
                    d(Some(&e));
                }
                self.storage_failed(&e);
            }
        }
    }
}
