//! Delta retention: once a turn ended long enough ago, its streaming deltas (text, thinking, tool
//! input, tool progress) are removed from the log. The `*_completed` events, tool calls and results
//! and everything else stay, so the history and every transcript are unchanged; only a replay
//! loses the token-by-token view. The session record's `pruned_through` says how far pruning has
//! gone: a subscriber whose `since` is older gets a `snapshot` first.

use crate::store::{EventLog, SessionRecord, StoreError};
use std::time::{Duration, SystemTime};
use tether_proto::{Event, EventKind, Seq};

/// What one pruning pass did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Pruned {
    /// The new `pruned_through`: the `turn_ended` of the last pruned turn.
    pub through: Seq,
    /// How many deltas were removed.
    pub removed: usize,
}

/// Removes the deltas of turns in `(after, upto]` that ended at least `keep` ago. Returns `None`
/// when no turn was old enough. The removal is not flushed.
pub(super) fn prune(
    log: &EventLog,
    after: Seq,
    upto: Seq,
    keep: Duration,
) -> Result<Option<Pruned>, StoreError> {
    let cutoff = SystemTime::now()
        .checked_sub(keep)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let mut pending = Vec::new();
    let mut removable = Vec::new();
    let mut through = None;
    for record in log.iter_between(after, upto) {
        let (seq, bytes) = record?;
        // A damaged record is not ours to remove; loading reports it.
        let Ok(event) = serde_json::from_slice::<Event>(&bytes) else {
            continue;
        };
        if event.kind.is_delta() {
            pending.push(seq);
        } else if matches!(event.kind, EventKind::TurnEnded { .. }) {
            let ended = humantime::parse_rfc3339(&event.ts).unwrap_or(SystemTime::now());
            if ended > cutoff {
                break;
            }
            removable.append(&mut pending);
            through = Some(seq);
        }
    }
    let Some(through) = through else {
        return Ok(None);
    };
    log.remove(&removable)?;
    Ok(Some(Pruned {
        through,
        removed: removable.len(),
    }))
}

/// Prunes `record`'s session up to `upto` if `keep` allows, advancing its `pruned_through`.
/// Returns whether anything changed (the record then needs writing).
pub(super) fn apply(
    log: &EventLog,
    record: &mut SessionRecord,
    upto: Seq,
    keep: Duration,
) -> Result<bool, StoreError> {
    let Some(pruned) = prune(log, record.pruned_through, upto, keep)? else {
        return Ok(false);
    };
    tracing::debug!(
        session = %record.id,
        through = pruned.through,
        removed = pruned.removed,
        "pruned the deltas of finished turns"
    );
    record.pruned_through = pruned.through;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use tether_proto::{TokenUsage, TurnId};

    fn append(log: &EventLog, seq: Seq, kind: EventKind, ts: &str) {
        let event = Event {
            session_id: "s".into(),
            seq: Some(seq),
            epoch: 1,
            ts: ts.into(),
            turn_id: Some(TurnId("t".into())),
            kind,
        };
        let json = serde_json::to_vec(&event).expect("encode");
        log.append(seq, &json).expect("append");
    }

    fn ended() -> EventKind {
        EventKind::TurnEnded {
            stop_reason: tether_proto::StopReason::EndTurn,
            usage: TokenUsage::default(),
            cost_usd: None,
            error: None,
            api_ms: None,
            cancelled_by: None,
        }
    }

    fn delta() -> EventKind {
        EventKind::TextDelta {
            index: 0,
            text: "x".into(),
        }
    }

    fn note() -> EventKind {
        EventKind::Notice {
            level: tether_proto::NoticeLevel::Info,
            message: "kept".into(),
        }
    }

    #[test]
    fn only_deltas_of_turns_old_enough_are_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let log = store.log(&"s".into());
        let old = "2020-01-01T00:00:00.000Z";
        let now = crate::session::now_rfc3339();
        append(&log, 1, note(), old);
        append(&log, 2, delta(), old);
        append(&log, 3, delta(), old);
        append(&log, 4, ended(), old);
        append(&log, 5, delta(), &now);
        append(&log, 6, ended(), &now);
        append(&log, 7, delta(), &now); // a running turn

        let pruned = prune(&log, 0, 7, Duration::from_secs(3600)).expect("prune");
        assert_eq!(
            pruned,
            Some(Pruned {
                through: 4,
                removed: 2
            })
        );
        let left: Vec<Seq> = log.iter_between(0, 7).map(|r| r.expect("read").0).collect();
        assert_eq!(left, vec![1, 4, 5, 6, 7]);

        assert_eq!(
            prune(&log, 4, 7, Duration::ZERO).expect("prune"),
            Some(Pruned {
                through: 6,
                removed: 1
            })
        );
        assert_eq!(prune(&log, 6, 7, Duration::ZERO).expect("prune"), None);
    }
}
