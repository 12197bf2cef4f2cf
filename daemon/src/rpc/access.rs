//! Who may call what: the one table of methods against the roles a session's owner grants,
//! applied to every call of a connection that is not the owner's, on both transports (the
//! NDJSON loop calls [`check`]; [`Checked`] is the WebSocket transport's middleware).
//!
//! Invariant: a method not in the table is the owner's alone, so a new method is closed to
//! others until it is placed here; a refused call changes nothing and its error names the
//! principal, their role and what the method needs. The owner's own connections (the daemon's
//! Unix user, no `--role` cap) skip the check entirely.
//!
//! Within a method a role allows, what acts outside the session's log and its permission
//! prompts stays the owner's (`owners_part`): a `!` shell command or a `#` memory note,
//! `/budget` and `/output-style` with an argument, the turn options that add rules, directories, settings, hooks or MCP servers, attachments from
//! outside the session's directory, the budget, the no-controller policy and
//! `bypassPermissions`, and `allow_always` (which writes the project's settings).

use super::{Connections, Peer};
use crate::store::{SessionRecord, Store};
use jsonrpsee::core::server::MethodResponse;
use jsonrpsee::server::middleware::rpc::{Batch, Notification, RpcServiceT};
use jsonrpsee::types::{ErrorObjectOwned, Id, Request};
use std::future::Future;
use std::sync::Arc;
use tether_proto::{ErrorCode, SessionId, SessionRole};

/// What a method needs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Need {
    /// Any connection: it tells nothing of a session not shared with the caller.
    Anyone,
    /// At least this role in the session its `sessionId` names.
    Session(SessionRole),
    /// The daemon's owner.
    Owner,
}

/// The table.
fn need(method: &str) -> Need {
    match method {
        // `session/list` shows a non-owner only the sessions shared with them; an approval
        // token is its own authority.
        "initialize"
        | "models/list"
        | "session/list"
        | "session/unsubscribe"
        | "permission/approve" => Need::Anyone,
        "session/get"
        | "session/subscribe"
        | "session/export"
        | "session/checkpoints"
        | "session/commands"
        | "session/shares"
        | "permission/list"
        | "permission/rules" => Need::Session(SessionRole::Observer),
        "permission/respond" => Need::Session(SessionRole::Approver),
        "turn/start" | "turn/cancel" | "session/configure" | "session/compact"
        | "session/rewind" | "hook/respond" | "mcp/respond" => {
            Need::Session(SessionRole::Controller)
        }
        _ => Need::Owner,
    }
}

/// What each role is for, in the refusal.
fn allows(role: &SessionRole) -> &'static str {
    match role {
        SessionRole::Owner => "may do everything",
        SessionRole::Controller => "may prompt, answer, configure, cancel and rewind",
        SessionRole::Approver => "may answer permission requests, questions and plans only",
        SessionRole::Observer => "may watch only",
        SessionRole::Other(_) => "may do nothing this daemon knows",
    }
}

/// Turn options someone other than the owner may send: they shape the reply, never what
/// runs without asking.
const OPTIONS_FOR_OTHERS: &[&str] = &[
    "maxTurns",
    "effort",
    "hideThinking",
    "fallbackModel",
    "jsonSchema",
    "disallowedTools",
    "tools",
    "appendSystemPrompt",
    "systemPrompt",
];

/// What in a call's params only the owner may ask for, though the method is open to `peer`
/// (`None`: nothing).
fn owners_part(
    method: &str,
    params: &serde_json::Value,
    cwd: Option<&std::path::Path>,
) -> Option<String> {
    match method {
        "turn/start" => {
            if let Some(options) = params["options"].as_object()
                && let Some(key) = options
                    .keys()
                    .find(|k| !OPTIONS_FOR_OTHERS.contains(&k.as_str()))
            {
                return Some(format!("the turn option {key}"));
            }
            for item in params["input"].as_array().into_iter().flatten() {
                if let Some(text) = item["text"].as_str() {
                    let text = text.trim_start();
                    if text.starts_with('!') {
                        return Some("a ! shell command".into());
                    }
                    if text.starts_with('#') && !text.starts_with("##") {
                        return Some("a # memory note".into());
                    }
                    // The commands that set the budget or write the project's settings.
                    let mut words = text.split_whitespace();
                    if let (Some(command @ ("/budget" | "/output-style")), Some(_)) =
                        (words.next(), words.next())
                    {
                        return Some(format!("{command} with an argument"));
                    }
                }
                if let Some(path) = item["path"].as_str()
                    && !inside(path, cwd)
                {
                    return Some(format!(
                        "attaching {path} (outside the session's directory)"
                    ));
                }
            }
            None
        }
        "session/configure" => {
            if !params["budgetUsd"].is_null() {
                Some("the budget".into())
            } else if !params["onNoController"].is_null() {
                Some("the no-controller policy".into())
            } else if params["permissionMode"] == "bypassPermissions" {
                Some("bypassPermissions".into())
            } else {
                None
            }
        }
        "permission/respond" if params["decision"] == "allow_always" => Some(
            "allow_always (it writes the project's settings; allow_session lasts the session)"
                .into(),
        ),
        _ => None,
    }
}

/// Whether an attachment's `path` stays in the session's directory `cwd`: relative without
/// `..`, or absolute below it.
fn inside(path: &str, cwd: Option<&std::path::Path>) -> bool {
    let path = std::path::Path::new(path);
    let no_parent = !path
        .components()
        .any(|c| matches!(c, std::path::Component::ParentDir));
    let below = path.is_relative() || cwd.is_some_and(|cwd| path.starts_with(cwd));
    no_parent && below && !path.to_string_lossy().starts_with('~')
}

/// The role `record`'s session gives `peer` (`None`: not shared with them, or no such
/// session).
fn granted(record: Option<&SessionRecord>, peer: &Peer) -> Option<SessionRole> {
    if peer.owner {
        return peer.role(None);
    }
    let granted = record
        .and_then(|r| r.shares.iter().find(|s| s.principal == peer.principal))
        .map(|s| s.role.clone());
    peer.role(granted)
}

/// `peer`'s role in `session` (`None`: not shared with them, or no such session).
pub fn role_in(store: &Store, peer: &Peer, session: &SessionId) -> Option<SessionRole> {
    granted(store.session(session).ok().flatten().as_ref(), peer)
}

fn refuse(message: String) -> ErrorObjectOwned {
    ErrorCode::NotPermitted.with_message(message)
}

/// Whether `peer` may call `method` with `params`; the refusal says why.
pub fn check(
    store: &Store,
    owner: &str,
    peer: &Peer,
    method: &str,
    params: Option<&str>,
) -> Result<(), ErrorObjectOwned> {
    if peer.unrestricted() {
        return Ok(());
    }
    let who = &peer.principal;
    match need(method) {
        Need::Anyone => Ok(()),
        Need::Owner if peer.owner => Err(refuse(format!(
            "{method} is for the daemon's owner; this connection of {who} may act only as {} (tether bridge --role)",
            peer.cap.as_ref().map_or("owner", |c| c.as_str())
        ))),
        Need::Owner => Err(refuse(format!(
            "{method} is for {owner}, who runs this daemon; {who} may use only the sessions shared with them"
        ))),
        Need::Session(needed) => {
            let params: serde_json::Value = params
                .and_then(|p| serde_json::from_str(p).ok())
                .unwrap_or_default();
            let session = params["sessionId"]
                .as_str()
                .map(|id| SessionId(id.to_owned()))
                .ok_or_else(|| {
                    jsonrpsee::types::ErrorObject::owned::<()>(
                        jsonrpsee::types::error::INVALID_PARAMS_CODE,
                        format!("{method} needs sessionId"),
                        None,
                    )
                })?;
            // The record is read once: for the grant, and for the session's directory.
            let record = store.session(&session).ok().flatten();
            match granted(record.as_ref(), peer) {
                None => Err(refuse(format!(
                    "session {session} is not shared with {who} (its owner, {owner}, can share it: tether share {session} --with {who} --role ROLE)"
                ))),
                // Within what the role allows, the owner's parts stay the owner's.
                Some(role) if role.rank() >= needed.rank() => {
                    let cwd = record.as_ref().map(|r| std::path::Path::new(&r.cwd));
                    match owners_part(method, &params, cwd).filter(|_| !peer.owner) {
                        Some(what) => Err(refuse(format!(
                            "{what} is for {owner}, who runs this daemon; {who} cannot ask for it"
                        ))),
                        None => Ok(()),
                    }
                }
                Some(role) => Err(refuse(format!(
                    "{who} is {} {role} of session {session} and {}: {method} needs {needed} or more",
                    article(&role),
                    allows(&role),
                ))),
            }
        }
    }
}

fn article(role: &SessionRole) -> &'static str {
    if role.as_str().starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

/// The WebSocket transport's middleware: [`check`] for every call of a connection that is not
/// the owner's; such a connection may not send batches.
#[derive(Clone)]
pub struct Checked<S> {
    inner: S,
    store: Store,
    connections: Arc<Connections>,
    /// Who is at the connection, as it was accepted.
    peer: Peer,
}

impl<S> Checked<S> {
    /// Wraps `inner` for the connection of `peer`.
    pub fn new(inner: S, store: Store, connections: Arc<Connections>, peer: Peer) -> Self {
        Self {
            inner,
            store,
            connections,
            peer,
        }
    }
}

impl<S> RpcServiceT for Checked<S>
where
    S: RpcServiceT<
            MethodResponse = MethodResponse,
            BatchResponse = MethodResponse,
            NotificationResponse = MethodResponse,
        > + Send
        + Sync,
{
    type MethodResponse = MethodResponse;
    type NotificationResponse = MethodResponse;
    type BatchResponse = MethodResponse;

    fn call<'a>(&self, request: Request<'a>) -> impl Future<Output = MethodResponse> + Send + 'a {
        let verdict = check(
            &self.store,
            self.connections.owner(),
            &self.peer,
            request.method_name(),
            request.params.as_ref().map(|p| p.get()),
        );
        let outcome = match verdict {
            Ok(()) => Ok(self.inner.call(request)),
            Err(e) => Err(MethodResponse::error(request.id().into_owned(), e)),
        };
        async move {
            match outcome {
                Ok(call) => call.await,
                Err(refused) => refused,
            }
        }
    }

    fn batch<'a>(&self, requests: Batch<'a>) -> impl Future<Output = MethodResponse> + Send + 'a {
        let principal = self.peer.principal.clone();
        let batch = self.peer.unrestricted().then(|| self.inner.batch(requests));
        async move {
            match batch {
                Some(batch) => batch.await,
                None => MethodResponse::error(
                    Id::Null,
                    refuse(format!(
                        "{principal} may not send batches: send each call on its own"
                    )),
                ),
            }
        }
    }

    fn notification<'a>(
        &self,
        n: Notification<'a>,
    ) -> impl Future<Output = MethodResponse> + Send + 'a {
        self.inner.notification(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_role_reaches_what_it_should_and_no_more() {
        let cases = [
            ("session/subscribe", SessionRole::Observer),
            ("permission/respond", SessionRole::Approver),
            ("turn/start", SessionRole::Controller),
            ("session/rewind", SessionRole::Controller),
        ];
        for (method, needed) in cases {
            assert_eq!(need(method), Need::Session(needed), "{method}");
        }
        for method in [
            "session/new",
            "session/delete",
            "session/fork",
            "session/share",
            "session/unshare",
            "session/audit",
            "daemon/shutdown",
            "daemon/status",
            "workspace/trust",
            "mcp/configure",
            "a/method/added/later",
        ] {
            assert_eq!(need(method), Need::Owner, "{method}");
        }
    }
}
