//! One subscriber's stream: `snapshot` when `since` is older than the kept deltas, replay
//! `(since, watermark]` from the log, `replay_complete`, then
//! live events, until the client goes away, falls behind (`lagged`) or the stream is ended by the
//! session (`session_deleted`, `daemon_shutdown`).

use super::connections::Connections;
use crate::session::{Attachment, SessionHandle};
use crate::store::{EventLog, Followed, Following};
use jsonrpsee::core::server::{SubscriptionMessage, SubscriptionSink};
use serde_json::value::RawValue;
use std::sync::Arc;
use std::time::Duration;
use tether_proto::{ClientRef, DetachReason, Event, EventKind, Role, Seq, SessionId, Since};
use tokio::sync::broadcast::error::RecvError;

/// Events read from the log per replay step.
const REPLAY_CHUNK: usize = 1024;
/// How long a lagging client gets to take its `lagged` notice.
const LAGGED_SEND_TIMEOUT: Duration = Duration::from_secs(2);

/// What the pump needs besides the sink.
pub struct Subscriber {
    /// The session.
    pub session: SessionHandle,
    /// Who subscribed.
    pub client: ClientRef,
    /// As what.
    pub role: Role,
    /// The daemon epoch, for stream-control envelopes.
    pub epoch: u64,
    /// For the subscription count.
    pub connections: Arc<Connections>,
}

/// Runs a subscription to its end, then logs the client's detachment.
pub async fn pump(sink: SubscriptionSink, attachment: Attachment, since: Since, sub: Subscriber) {
    sub.connections.count_subscription(1);
    let reason = stream(&sink, attachment, since, &sub).await;
    sub.session
        .detach(sub.client.clone(), sub.role, reason)
        .await;
    sub.connections.count_subscription(-1);
}

fn message(json: String) -> Option<SubscriptionMessage> {
    RawValue::from_string(json)
        .ok()
        .map(SubscriptionMessage::from)
}

fn control(sub: &Subscriber, kind: EventKind) -> Option<SubscriptionMessage> {
    control_of(sub.session.id(), sub.epoch, kind)
}

/// A stream-control event (no seq) of a session.
fn control_of(session: &SessionId, epoch: u64, kind: EventKind) -> Option<SubscriptionMessage> {
    let event = Event {
        session_id: session.clone(),
        seq: None,
        epoch,
        ts: crate::session::now_rfc3339(),
        turn_id: None,
        kind,
    };
    serde_json::to_string(&event).ok().and_then(message)
}

/// A subscription on a node of the cluster to a session another node runs: replay from this
/// node's copy of the log, `replay_complete`, then the events the owner writes as they are
/// written, until the client goes or the log cannot be read. The owner learns of this
/// subscriber through the cluster (the caller says it joined and left); commands for the
/// session are passed on to it (`forward.rs`).
pub async fn follow(
    sink: SubscriptionSink,
    log: EventLog,
    session: SessionId,
    following: Following,
    since: Since,
    epoch: u64,
    connections: Arc<Connections>,
) {
    connections.count_subscription(1);
    follow_events(&sink, &log, &session, following, since, epoch).await;
    connections.count_subscription(-1);
}

async fn follow_events(
    sink: &SubscriptionSink,
    log: &EventLog,
    session: &SessionId,
    mut following: Following,
    since: Since,
    epoch: u64,
) {
    let head = following.head;
    let mut last = match since {
        Since::Seq(n) => n.min(head),
        Since::Head => head,
    };
    while last < head {
        let chunk = match log.read(last, head, REPLAY_CHUNK) {
            Ok(c) if !c.is_empty() => c,
            Ok(_) => break,
            Err(e) => {
                tracing::error!(session = %session, "replay failed: {e}");
                return;
            }
        };
        for (seq, bytes) in chunk {
            let json = String::from_utf8_lossy(&bytes).into_owned();
            if send(sink, message(json)).await.is_err() {
                return;
            }
            last = seq;
        }
    }
    let complete = control_of(session, epoch, EventKind::ReplayComplete { head_seq: head });
    if send(sink, complete).await.is_err() {
        return;
    }
    loop {
        tokio::select! {
            biased;
            _ = sink.closed() => return,
            next = following.events.recv() => match next {
                Some(Ok(Followed::Event(seq, bytes))) if seq > last => {
                    last = seq;
                    let json = String::from_utf8_lossy(&bytes).into_owned();
                    if send(sink, message(json)).await.is_err() {
                        return;
                    }
                }
                Some(Ok(Followed::Event(..))) => {}
                Some(Ok(Followed::Deleted)) => {
                    let deleted = control_of(session, epoch, EventKind::SessionDeleted { by: None });
                    let _ = send(sink, deleted).await;
                    return;
                }
                Some(Err(e)) => {
                    tracing::warn!(session = %session, "following stopped: {e}");
                    return;
                }
                None => return,
            },
        }
    }
}

async fn send(sink: &SubscriptionSink, msg: Option<SubscriptionMessage>) -> Result<(), ()> {
    match msg {
        Some(m) => sink.send(m).await.map_err(|_| ()),
        None => Ok(()),
    }
}

async fn stream(
    sink: &SubscriptionSink,
    mut att: Attachment,
    since: Since,
    sub: &Subscriber,
) -> DetachReason {
    let mut last: Seq = match since {
        Since::Seq(n) => n.min(att.watermark),
        Since::Head => att.watermark,
    };
    let pruned_through = att.summary.pruned_through;
    if last < pruned_through {
        let snapshot = control(
            sub,
            EventKind::Snapshot {
                at_seq: pruned_through,
                session: Box::new(att.summary.clone()),
            },
        );
        if send(sink, snapshot).await.is_err() {
            return DetachReason::Closed;
        }
    }
    while last < att.watermark {
        let chunk = match att.log.read(last, att.watermark, REPLAY_CHUNK) {
            Ok(c) if !c.is_empty() => c,
            Ok(_) => break,
            Err(e) => {
                tracing::error!(session = %sub.session.id(), "replay failed: {e}");
                return DetachReason::ReplayFailed;
            }
        };
        for (seq, bytes) in chunk {
            let json = String::from_utf8_lossy(&bytes).into_owned();
            if send(sink, message(json)).await.is_err() {
                return DetachReason::Closed;
            }
            last = seq;
        }
    }
    let done = control(
        sub,
        EventKind::ReplayComplete {
            head_seq: att.watermark,
        },
    );
    if send(sink, done).await.is_err() {
        return DetachReason::Closed;
    }
    loop {
        tokio::select! {
            biased;
            _ = sink.closed() => return DetachReason::Closed,
            received = att.events.recv() => match received {
                Ok(ev) => {
                    if let Some(seq) = ev.seq {
                        if seq <= last {
                            continue;
                        }
                        last = seq;
                    }
                    if send(sink, message(ev.json.to_string())).await.is_err() {
                        return DetachReason::Closed;
                    }
                    if ev.ends_stream {
                        return DetachReason::Ended;
                    }
                    if ev.revokes.is_some()
                        && ev.revokes.as_deref() == sub.client.principal.as_deref()
                    {
                        return DetachReason::Revoked;
                    }
                }
                Err(RecvError::Lagged(_)) => {
                    if let Some(m) = control(sub, EventKind::Lagged { last_seq: last }) {
                        let _ = sink.send_timeout(m, LAGGED_SEND_TIMEOUT).await;
                    }
                    return DetachReason::Lagged;
                }
                Err(RecvError::Closed) => return DetachReason::Ended,
            }
        }
    }
}
