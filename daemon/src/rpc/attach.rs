//! One subscriber's stream: `snapshot` when `since` is older than the kept deltas, replay
//! `(since, watermark]` from the log, `replay_complete`, then
//! live events, until the client goes away, falls behind (`lagged`) or the stream is ended by the
//! session (`session_deleted`, `daemon_shutdown`).

use super::connections::Connections;
use crate::session::{Attachment, SessionHandle};
use jsonrpsee::core::server::{SubscriptionMessage, SubscriptionSink};
use serde_json::value::RawValue;
use std::sync::Arc;
use std::time::Duration;
use tether_proto::{ClientRef, DetachReason, Event, EventKind, Role, Seq, Since};
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
    let event = Event {
        session_id: sub.session.id().clone(),
        seq: None,
        epoch: sub.epoch,
        ts: crate::session::now_rfc3339(),
        turn_id: None,
        kind,
    };
    serde_json::to_string(&event).ok().and_then(message)
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
