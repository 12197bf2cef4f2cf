//! The session actor: one tokio task per live session that owns its record, its log head and its
//! subscribers, and through which every change to the session goes.
//!
//! Commands are handled in batches: each command appends its events to the log, then one flush
//! makes the whole batch durable, then the events are broadcast and the callers answered. The
//! broadcast watermark (`committed`) is what a new subscriber replays up to, so replay and live
//! delivery meet with no gap and no duplicate.

use super::{Configure, SessionError};
use crate::store::{EventLog, SessionRecord, Store};
use std::sync::Arc;
use std::time::SystemTime;
use tether_proto::{
    AttachedClient, ClientRef, Event, EventKind, Role, Seq, SessionId, SessionSummary,
};
use tokio::sync::{broadcast, mpsc, oneshot};

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
    tx: mpsc::Sender<Command>,
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
            .await
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
        let _ = self
            .tx
            .send(Command::Detach {
                client,
                role,
                reason,
            })
            .await;
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

    pub(super) async fn delete(&self, by: Option<ClientRef>) -> Result<(), SessionError> {
        self.call(|reply| Command::Delete { by, reply }).await?
    }

    pub(super) async fn shutdown(&self) {
        let _ = self.call(|reply| Command::Shutdown { reply }).await;
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
        status: record.status,
        created_at: record.created_at.clone(),
        updated_at: record.updated_at.clone(),
        head_seq,
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
}

/// Starts the actor of a session whose log ends at `head`.
pub(super) fn spawn(
    record: SessionRecord,
    store: Store,
    log: EventLog,
    epoch: u64,
    head: Seq,
) -> SessionHandle {
    let (tx, rx) = mpsc::channel(1024);
    let (fanout, _) = broadcast::channel(FANOUT_CAPACITY);
    let handle = SessionHandle {
        id: record.id.clone(),
        tx,
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
    };
    tokio::spawn(actor.run(rx));
    handle
}

enum Flow {
    Continue,
    Stop,
}

impl SessionActor {
    async fn run(mut self, mut rx: mpsc::Receiver<Command>) {
        while let Some(cmd) = rx.recv().await {
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
                };
                self.attached.push(AttachedClient {
                    client: client.clone(),
                    role,
                });
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
                if title.is_none() && model.is_none() && permission_mode.is_none() {
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
                self.record_dirty = true;
                let kind = EventKind::SessionConfigured {
                    title,
                    model,
                    permission_mode,
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
            Command::Delete { by, reply } => {
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
                self.commit().await;
                self.broadcast_control(EventKind::DaemonShutdown {});
                let _ = reply.send(());
                return Flow::Stop;
            }
        }
        Flow::Continue
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
        let seq = self.head + 1;
        let event = self.envelope(Some(seq), kind);
        let json =
            serde_json::to_string(&event).map_err(|e| SessionError::Commit(e.to_string()))?;
        self.log.append(seq, json.as_bytes())?;
        self.head = seq;
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
            }
            Err(e) => {
                // Keep the events unsent: the next successful commit delivers them in order.
                tracing::error!(session = %self.record.id, "commit failed: {e}");
                for d in deferred {
                    d(Some(&e));
                }
            }
        }
    }
}
