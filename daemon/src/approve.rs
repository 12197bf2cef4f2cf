//! Answering from outside a session: a permission request answered with its approval token,
//! for `permission/approve` and for the approval page (`page.rs`). The token is checked, then
//! the answer goes through the session's broker as the `link`'s, where the first answer wins.
//!
//! Invariant: nothing here answers without a valid token for that very request and answer.

pub mod page;

use crate::approvals::Refused;
use crate::session::{SessionError, Sessions};
use tether_proto::{ClientKind, ClientRef, PermissionDecision, PermissionResponse};

/// Why a token answered nothing.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The token itself.
    #[error(transparent)]
    Token(#[from] Refused),
    /// Its session.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// Its request was answered already.
    #[error("this token's request was answered already ({decision} by {by}); a token answers once")]
    Answered {
        /// How.
        decision: &'static str,
        /// By whom.
        by: String,
    },
}

/// `carrier` with the kind the audit shows for an answer given with a token.
fn as_link(carrier: ClientRef, through: &str) -> ClientRef {
    ClientRef {
        kind: ClientKind::Link,
        name: Some(format!("approval link (via {through})")),
        channel: Some(tether_proto::Channel::Link),
        ..carrier
    }
}

/// Answers the request of `token` with `decision`, on behalf of whoever carried it
/// (`carrier`, reaching the daemon `through` a connection or the page).
pub async fn answer(
    sessions: &Sessions,
    token: &str,
    decision: PermissionDecision,
    message: Option<String>,
    carrier: ClientRef,
    through: &str,
) -> Result<PermissionResponse, Refusal> {
    let grant = sessions.env().approvals.check(token)?;
    grant.allows(decision)?;
    let handle = sessions.get(&grant.session).await?;
    let answer = crate::session::Answer {
        decision,
        message,
        updated_input: None,
    };
    let by = as_link(carrier, through);
    let response = handle
        .respond_permission(grant.request_id, answer, by, false)
        .await?;
    if response.status == tether_proto::ResponseStatus::AlreadyResolved {
        return Err(Refusal::Answered {
            decision: response.decision.as_str(),
            by: response
                .resolved_by
                .as_ref()
                .and_then(|b| b.name.clone())
                .unwrap_or_else(|| "the daemon".into()),
        });
    }
    Ok(response)
}
