//! Finding sessions by what was said in them (`session/list`'s `query`): the id, the title,
//! then the conversation in the log — the prompts and the model's replies — whatever the
//! case, newest session first, stopping once enough are found.
//!
//! Invariant: reads only; a log that cannot be read is a session that does not match.

use crate::store::Store;
use tether_proto::{Event, EventKind, InputItem, SessionSummary};

/// Characters shown on each side of a match.
const AROUND: usize = 40;

/// The words around the first place `query` (lowercase) is in `text`, on one line.
fn snippet(text: &str, query: &str) -> Option<String> {
    let lower = text.to_lowercase();
    let at = lower.find(query)?;
    // `to_lowercase` can change lengths; find the match's characters by counting.
    let start_chars = lower[..at].chars().count();
    let chars: Vec<char> = text.chars().collect();
    let from = start_chars.saturating_sub(AROUND);
    let to = (start_chars + query.chars().count() + AROUND).min(chars.len());
    // Never a control character: what a reply said must not drive a terminal.
    let mut out: String = chars[from.min(chars.len())..to]
        .iter()
        .map(|c| if c.is_whitespace() { ' ' } else { *c })
        .filter(|c| !c.is_control())
        .collect();
    out = out.split_whitespace().collect::<Vec<_>>().join(" ");
    if from > 0 {
        out.insert(0, '…');
    }
    if to < chars.len() {
        out.push('…');
    }
    Some(out)
}

/// What a logged event said, if it is part of the conversation.
fn said(event: &Event) -> Vec<&str> {
    match &event.kind {
        EventKind::TurnStarted { input, .. } => input
            .iter()
            .filter_map(|i| match i {
                InputItem::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect(),
        EventKind::AssistantBlockCompleted { block, .. } => {
            block["text"].as_str().into_iter().collect()
        }
        _ => Vec::new(),
    }
}

/// Where `query` is in the session: its title or id, else the first prompt or reply holding
/// it.
fn found(store: &Store, session: &SessionSummary, query: &str) -> Option<String> {
    if let Some(title) = &session.title
        && let Some(s) = snippet(title, query)
    {
        return Some(s);
    }
    if session.session_id.0.to_lowercase().starts_with(query) {
        return Some(session.title.clone().unwrap_or_default());
    }
    let log = store.log(&session.session_id);
    for item in log.iter_between(0, tether_proto::Seq::MAX) {
        let Ok((_, bytes)) = item else {
            return None;
        };
        // Only prompts and replies are read (never the deltas), and only those whose bytes
        // hold the words are parsed.
        let text = String::from_utf8_lossy(&bytes);
        if !(text.contains(r#""type":"turn_started""#)
            || text.contains(r#""type":"assistant_block_completed""#))
            || !text.to_lowercase().contains(query)
        {
            continue;
        }
        let Ok(event) = serde_json::from_slice::<Event>(&bytes) else {
            continue;
        };
        if let Some(s) = said(&event).into_iter().find_map(|t| snippet(t, query)) {
            return Some(s);
        }
    }
    None
}

/// The sessions (newest first, as given) whose id, title or conversation holds `query`, at
/// most `limit`, each with the words around the match.
pub fn matching(
    store: &Store,
    sessions: Vec<SessionSummary>,
    query: &str,
    limit: usize,
) -> Vec<SessionSummary> {
    let query = query.trim().to_lowercase();
    let mut out = Vec::new();
    for mut session in sessions {
        if out.len() >= limit {
            break;
        }
        if let Some(found) = found(store, &session, &query) {
            session.found = Some(found);
            out.push(session);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snippet_is_the_words_around_the_match_on_one_line() {
        assert_eq!(
            snippet("The Zebra\ncrossing", "zebra").as_deref(),
            Some("The Zebra crossing")
        );
        let long = format!("{} needle {}", "a ".repeat(60), "b ".repeat(60));
        let s = snippet(&long, "needle").expect("found");
        assert!(
            s.starts_with('…') && s.ends_with('…') && s.contains("needle"),
            "{s}"
        );
        assert_eq!(snippet("nothing here", "zebra"), None);
        assert_eq!(
            snippet("İstanbul zebra", "zebra").as_deref(),
            Some("İstanbul zebra"),
            "a letter whose lowercase is longer still lets the match be found"
        );
    }
}
