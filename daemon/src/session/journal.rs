//! The session's write path: its record and its event log, the batch of events appended but not
//! yet durable, the callers to answer once they are, and the fan-out to subscribers.
//!
//! Invariant: an event reaches a subscriber only after the flush that made it durable; the
//! broadcast watermark (`committed`) is what a new subscriber replays up to, so replay and live
//! delivery meet with no gap and no duplicate. After the first failed write the journal refuses
//! every append (the session is read-only until the daemon restarts); reads keep working. A
//! commit that waits on its storage longer than two seconds tells subscribers so (a notice, not
//! logged), and again when it goes through.

use super::SessionError;
use crate::store::{EventLog, SessionRecord, Store};
use std::sync::Arc;
use tether_proto::{AttachedClient, Event, EventKind, Seq, SessionId, SessionSummary, TurnId};
use tokio::sync::{broadcast, oneshot};

/// How many events a subscriber may fall behind before it gets `lagged`. The channel allocates
/// all its slots at once (about 40 bytes each), so it exists only while someone subscribes.
pub const FANOUT_CAPACITY: usize = 1024;

/// How long a commit may take before subscribers are told the session waits for its storage.
const SLOW_COMMIT: std::time::Duration = std::time::Duration::from_secs(2);

/// What subscribers are told while a commit waits, and when it went through.
const WAITING: &str =
    "the session's storage is not accepting writes yet; the session waits and goes on when it does";
const RESUMED: &str = "the session's storage accepts writes again; the session goes on";

/// A warning for subscribers (not logged) of session `id`.
fn notice(id: &SessionId, epoch: u64, message: &str) -> Option<Arc<LiveEvent>> {
    let event = Event {
        session_id: id.clone(),
        seq: None,
        epoch,
        ts: super::now_rfc3339(),
        turn_id: None,
        kind: EventKind::Notice {
            level: tether_proto::NoticeLevel::Warning,
            message: message.to_owned(),
        },
    };
    let json = serde_json::to_string(&event).ok()?;
    Some(Arc::new(LiveEvent {
        seq: None,
        json: json.into_boxed_str(),
        ends_stream: false,
        revokes: None,
        delta: false,
    }))
}

/// An event on its way to subscribers: its encoded JSON, exactly as logged.
#[derive(Debug)]
pub struct LiveEvent {
    /// Its seq; `None` for stream-control events.
    pub seq: Option<Seq>,
    /// The encoded event.
    pub json: Box<str>,
    /// Whether it ends the subscriptions that receive it.
    pub ends_stream: bool,
    /// The principal whose subscriptions it ends (`session_shared`, `session_unshared`).
    pub revokes: Option<Box<str>>,
    /// Whether it is a streaming delta (which a shared log may let expire).
    pub delta: bool,
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

/// Something to do once the batch is durable (`None`) or has failed (`Some`).
type Deferred = Box<dyn FnOnce(Option<&Arc<SessionError>>) + Send>;

/// A session's record and log, written in batches.
pub struct Journal {
    /// The session's metadata; changes are saved with the next commit.
    pub record: SessionRecord,
    store: Store,
    log: EventLog,
    epoch: u64,
    /// Seq of the last appended event.
    head: Seq,
    /// Seq of the last broadcast (durable) event.
    committed: Seq,
    /// The channel to subscribers; `None` while nobody subscribes.
    fanout: Option<broadcast::Sender<Arc<LiveEvent>>>,
    /// Appended but not yet broadcast.
    unsent: Vec<Arc<LiveEvent>>,
    /// Answers to give once the batch is durable.
    deferred: Vec<Deferred>,
    record_dirty: bool,
    /// Why the store refused a write: from then on nothing is appended.
    broken: Option<String>,
}

impl Journal {
    /// The journal of a session whose log ends at `head`.
    pub fn new(record: SessionRecord, store: Store, log: EventLog, epoch: u64, head: Seq) -> Self {
        Self {
            record,
            store,
            log,
            epoch,
            head,
            committed: head,
            fanout: None,
            unsent: Vec::new(),
            deferred: Vec::new(),
            record_dirty: false,
            broken: None,
        }
    }

    /// Seq of the last durable, broadcast event.
    pub fn committed(&self) -> Seq {
        self.committed
    }

    /// Seq of the last appended event (durable once the batch is).
    pub fn head(&self) -> Seq {
        self.head
    }

    /// The store the session is kept in.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The session's log, for reading.
    pub fn log(&self) -> &EventLog {
        &self.log
    }

    /// Why the session is read-only, if it is.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// Refuses writes when the session is read-only.
    pub fn writable(&self) -> Result<(), SessionError> {
        match &self.broken {
            Some(why) => Err(SessionError::StorageFailed(why.clone())),
            None => Ok(()),
        }
    }

    /// Marks the record changed, to be saved with the next commit.
    pub fn touch(&mut self) {
        self.record_dirty = true;
    }

    /// The session's summary with `attached` as its clients.
    pub fn summary(&self, attached: Vec<AttachedClient>) -> SessionSummary {
        super::summary_of(&self.record, self.committed, attached)
    }

    /// Registers a subscriber, then reads the watermark: everything after it will be broadcast
    /// to the returned receiver, everything up to it is in the log.
    pub fn subscribe(&mut self, attached: Vec<AttachedClient>) -> Attachment {
        let events = match &self.fanout {
            Some(fanout) => fanout.subscribe(),
            None => {
                let (fanout, events) = broadcast::channel(FANOUT_CAPACITY);
                self.fanout = Some(fanout);
                events
            }
        };
        Attachment {
            events,
            watermark: self.committed,
            log: self.log.clone(),
            summary: self.summary(attached),
        }
    }

    fn envelope(&self, seq: Option<Seq>, turn_id: Option<TurnId>, kind: EventKind) -> Event {
        Event {
            session_id: self.record.id.clone(),
            seq,
            epoch: self.epoch,
            ts: super::now_rfc3339(),
            turn_id,
            kind,
        }
    }

    /// Adds an event to the batch (written, made durable and broadcast by the next commit) and
    /// returns it as it will be logged.
    pub fn append(
        &mut self,
        kind: EventKind,
        turn_id: Option<TurnId>,
    ) -> Result<Event, SessionError> {
        self.writable()?;
        let seq = self.head + 1;
        let delta = kind.is_delta();
        // A role taken away or changed ends that person's subscriptions: they come back in
        // the role they have now, if any.
        let revokes = match &kind {
            EventKind::SessionUnshared { principal, .. }
            | EventKind::SessionShared { principal, .. } => Some(principal.as_str().into()),
            _ => None,
        };
        let event = self.envelope(Some(seq), turn_id, kind);
        let json =
            serde_json::to_string(&event).map_err(|e| SessionError::Commit(e.to_string()))?;
        self.head = seq;
        self.record.updated_at.clone_from(&event.ts);
        self.record.head = seq;
        self.record_dirty = true;
        self.unsent.push(Arc::new(LiveEvent {
            seq: Some(seq),
            json: json.into_boxed_str(),
            ends_stream: false,
            revokes,
            delta,
        }));
        Ok(event)
    }

    /// Runs `then` once the current batch is durable (`None`) or failed (`Some`).
    pub fn after_commit(&mut self, then: impl FnOnce(Option<&Arc<SessionError>>) + Send + 'static) {
        self.deferred.push(Box::new(then));
    }

    /// Answers `reply` with `value` once the batch is durable, or with the commit's error.
    pub fn reply_after_commit<T: Send + 'static>(
        &mut self,
        reply: oneshot::Sender<Result<T, SessionError>>,
        value: impl FnOnce() -> T + Send + 'static,
    ) {
        self.after_commit(move |err| {
            let _ = reply.send(match err {
                Some(e) => Err(SessionError::Commit(e.to_string())),
                None => Ok(value()),
            });
        });
    }

    /// Sends a stream-control event (no seq, never logged) to every subscriber.
    pub fn broadcast_control(&mut self, kind: EventKind) {
        self.broadcast_control_in(kind, None);
    }

    /// Sends a stream-control event of turn `turn_id` to every subscriber.
    pub fn broadcast_control_in(&mut self, kind: EventKind, turn_id: Option<TurnId>) {
        let ends_stream = kind.ends_subscription();
        let event = self.envelope(None, turn_id, kind);
        match serde_json::to_string(&event) {
            Ok(json) => {
                self.send(Arc::new(LiveEvent {
                    seq: None,
                    json: json.into_boxed_str(),
                    ends_stream,
                    revokes: None,
                    delta: false,
                }));
            }
            Err(e) => tracing::error!("could not encode a stream-control event: {e}"),
        }
    }

    /// Broadcasts `event` to the subscribers, if there are any; with none left, the channel and
    /// its slots go (the event is in the log for later replays).
    fn send(&mut self, event: Arc<LiveEvent>) {
        if let Some(fanout) = &self.fanout
            && fanout.send(event).is_err()
        {
            self.fanout = None;
        }
    }

    /// Drops the channel to subscribers once nobody holds a receiver (the last one left).
    pub fn release_fanout(&mut self) {
        if self
            .fanout
            .as_ref()
            .is_some_and(|f| f.receiver_count() == 0)
        {
            self.fanout = None;
        }
    }

    /// Marks the session read-only; `false` when it already was.
    pub fn fail(&mut self, why: String) -> bool {
        if self.broken.is_some() {
            return false;
        }
        self.broken = Some(why);
        true
    }

    /// Whether anything waits for a commit.
    pub fn pending(&self) -> bool {
        !self.unsent.is_empty() || !self.deferred.is_empty() || self.record_dirty
    }

    /// Makes the batch durable, then broadcasts its events and answers its callers. On failure
    /// nothing of the batch is broadcast, its callers get the error, and it is returned.
    pub async fn commit(&mut self) -> Result<(), Arc<SessionError>> {
        if !self.pending() {
            return Ok(());
        }
        let result = {
            let events = self
                .unsent
                .iter()
                .filter_map(|ev| Some((ev.seq?, ev.json.as_bytes(), ev.delta)));
            let record = self.record_dirty.then_some(&self.record);
            // A write that waits (a cluster's storage between leaders, without its quorum) pauses
            // the session: every subscriber is told, and told again when it goes on.
            let commit = self.store.commit(&self.log, events, record);
            tokio::pin!(commit);
            tokio::select! {
                result = &mut commit => result,
                () = tokio::time::sleep(SLOW_COMMIT) => {
                    let tell = |message| {
                        if let Some(fanout) = &self.fanout
                            && let Some(notice) = notice(&self.record.id, self.epoch, message)
                        {
                            let _ = fanout.send(notice);
                        }
                    };
                    tell(WAITING);
                    let result = commit.await;
                    if result.is_ok() {
                        tell(RESUMED);
                    }
                    result
                }
            }
        }
        .map_err(SessionError::from);
        let deferred = std::mem::take(&mut self.deferred);
        match result {
            Ok(()) => {
                self.record_dirty = false;
                self.committed = self.head;
                for ev in std::mem::take(&mut self.unsent) {
                    self.send(ev);
                }
                for d in deferred {
                    d(None);
                }
                Ok(())
            }
            Err(e) => {
                tracing::error!(session = %self.record.id, "commit failed: {e}");
                let shared = Arc::new(e);
                for d in deferred {
                    d(Some(&shared));
                }
                Err(shared)
            }
        }
    }

    /// Prunes the deltas of turns that ended at least `keep` ago (committed ones only).
    pub async fn prune(&mut self, keep: std::time::Duration) {
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

    /// Records a permission answer in the store before the log has it; `None` when it is the
    /// first, else the answer that was ([`Store::record_answer`]).
    pub fn record_answer(
        &self,
        request_id: &str,
        answer: Vec<u8>,
    ) -> impl std::future::Future<Output = Result<Option<Vec<u8>>, crate::store::StoreError>>
    + Send
    + use<> {
        let store = self.store.clone();
        let id = self.record.id.clone();
        let request_id = request_id.to_owned();
        async move { store.record_answer(&id, &request_id, &answer).await }
    }

    /// Deletes the session from the store.
    pub async fn delete(&mut self) -> Result<(), SessionError> {
        self.store
            .delete_session(&self.record.id)
            .await
            .map_err(SessionError::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_proto::{SessionId, SessionStatus};

    fn journal(dir: &std::path::Path) -> Journal {
        let store = Store::open(dir).expect("store");
        let id = SessionId("s1".into());
        let record = SessionRecord {
            id: id.clone(),
            title: None,
            cwd: "/tmp".into(),
            model: "sonnet".into(),
            effort: None,
            permission_mode: Default::default(),
            on_no_controller: Default::default(),
            budget_usd: None,
            status: SessionStatus::Idle,
            created_at: String::new(),
            updated_at: String::new(),
            pruned_through: 0,
            head: 0,
            shares: Vec::new(),
        };
        let log = store.log(&id);
        Journal::new(record, store, log, 7, 0)
    }

    fn notice(text: &str) -> EventKind {
        EventKind::Notice {
            level: tether_proto::NoticeLevel::Info,
            message: text.into(),
        }
    }

    #[tokio::test]
    async fn events_reach_subscribers_only_after_the_commit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut j = journal(dir.path());
        let mut sub = j.subscribe(Vec::new());
        assert_eq!(sub.watermark, 0);
        let event = j.append(notice("one"), None).expect("append");
        assert_eq!(event.seq, Some(1));
        assert!(sub.events.try_recv().is_err(), "seen before it was durable");
        assert_eq!(j.committed(), 0);
        j.commit().await.expect("commit");
        assert_eq!(j.committed(), 1);
        let live = sub.events.try_recv().expect("broadcast after commit");
        assert_eq!(live.seq, Some(1));
        assert!(live.json.contains("\"one\""));
        // A subscriber that attaches now replays up to 1 and gets only what follows live.
        let late = j.subscribe(Vec::new());
        assert_eq!(late.watermark, 1);
        assert_eq!(late.log.head().expect("head"), 1);
    }

    #[tokio::test]
    async fn callers_are_answered_once_durable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut j = journal(dir.path());
        let (tx, mut rx) = oneshot::channel::<Result<u32, SessionError>>();
        j.append(notice("x"), None).expect("append");
        j.reply_after_commit(tx, || 42);
        assert!(rx.try_recv().is_err());
        j.commit().await.expect("commit");
        assert_eq!(rx.try_recv().expect("answered").expect("ok"), 42);
    }

    #[tokio::test]
    async fn a_read_only_journal_refuses_appends_and_keeps_its_head() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut j = journal(dir.path());
        j.append(notice("kept"), None).expect("append");
        j.commit().await.expect("commit");
        assert!(j.fail("disk full".into()));
        assert!(!j.fail("again".into()), "the first reason stays");
        match j.append(notice("lost"), None) {
            Err(SessionError::StorageFailed(why)) => {
                assert_eq!(why, "disk full")
            }
            other => panic!("expected a read-only refusal, got {other:?}"),
        }
        assert_eq!(j.committed(), 1);
        assert!(j.writable().is_err());
    }

    #[tokio::test]
    async fn control_events_are_sent_at_once_and_never_logged() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut j = journal(dir.path());
        let mut sub = j.subscribe(Vec::new());
        j.broadcast_control(EventKind::DaemonShutdown {});
        let live = sub.events.try_recv().expect("control event");
        assert_eq!(live.seq, None);
        assert!(live.ends_stream);
        assert_eq!(j.subscribe(Vec::new()).log.head().expect("head"), 0);
    }
}
