//! The approval page (opt-in, `approvals.listen`): for a valid approval token, a small page with
//! the session, the tool and what it would do (the command, the diff), and a button for each
//! answer the token allows; posting one answers the request. It works in a phone's browser,
//! needs no account, sends no script and loads nothing from elsewhere; without a valid token
//! it shows nothing of any session.
//!
//! Invariant: every route takes its token first; a refused token gets the reason and nothing
//! else.

use super::Refusal;
use crate::session::Sessions;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::sync::Arc;
use tether_proto::{ClientKind, ClientRef, ConnectionId, PermissionDecision};

/// The headers every answer carries: no script, nothing from elsewhere, the token kept out of
/// referrers and caches.
const POLICY: &str =
    "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'";

/// The answer a form posts.
#[derive(Debug, serde::Deserialize)]
struct Posted {
    decision: String,
    #[serde(default)]
    message: String,
}

/// Serves the page on `listener` until `shutdown`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    sessions: Arc<Sessions>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let app = axum::Router::new()
        .route("/a/{token}", get(show).post(post))
        .fallback(|| async { page(StatusCode::NOT_FOUND, "Not found", "<p>Nothing here.</p>") })
        .with_state(sessions);
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
    {
        tracing::error!("the approval page stopped: {e}");
    }
}

fn escape(text: &str) -> String {
    html_escape::encode_text(text).into_owned()
}

/// A whole page with `title` and `body`, with the headers every answer carries.
fn page(status: StatusCode, title: &str, body: &str) -> Response {
    let html = format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>{title} · tether</title>
<style>
body {{ font: 16px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 42rem; padding: 1rem; color: #1b1b1b; background: #fafafa; }}
h1 {{ font-size: 1.25rem; margin: 0 0 .75rem; }}
.meta {{ color: #555; font-size: .9rem; margin: 0 0 1rem; word-break: break-all; }}
pre {{ background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: .75rem; overflow-x: auto; white-space: pre-wrap; word-break: break-word; font-size: .85rem; }}
form {{ display: flex; flex-wrap: wrap; gap: .5rem; margin-top: 1rem; }}
button {{ flex: 1 1 8rem; font: inherit; padding: .8rem 1rem; border-radius: 6px; border: 1px solid #888; background: #fff; }}
button.allow {{ background: #1f6f3f; color: #fff; border-color: #1f6f3f; }}
button.deny {{ background: #8b1e1e; color: #fff; border-color: #8b1e1e; }}
textarea {{ width: 100%; font: inherit; min-height: 3rem; box-sizing: border-box; }}
</style></head>
<body><h1>{title}</h1>{body}</body></html>"#,
        title = escape(title),
    );
    let mut response = (status, html).into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
        (header::CONTENT_SECURITY_POLICY, POLICY),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

fn refused(refusal: &Refusal) -> Response {
    let status = match refusal {
        Refusal::Token(_) => StatusCode::FORBIDDEN,
        Refusal::Session(_) => StatusCode::NOT_FOUND,
        Refusal::Answered { .. } => StatusCode::CONFLICT,
    };
    page(
        status,
        "Cannot answer",
        &format!("<p>{}</p>", escape(&refusal.to_string())),
    )
}

/// The button label of an answer.
fn label(decision: PermissionDecision) -> &'static str {
    match decision {
        PermissionDecision::AllowOnce => "Allow once",
        PermissionDecision::AllowSession => "Allow for this session",
        PermissionDecision::AllowAlways => "Always allow",
        PermissionDecision::Deny => "Deny",
        PermissionDecision::Cancelled => "Cancel",
    }
}

/// `GET /a/{token}`: the request and its answers.
async fn show(State(sessions): State<Arc<Sessions>>, Path(token): Path<String>) -> Response {
    let grant = match sessions.env().approvals.check(&token) {
        Ok(grant) => grant,
        Err(why) => return refused(&Refusal::Token(why)),
    };
    let snapshot = match sessions.get(&grant.session).await {
        Ok(handle) => match handle.snapshot().await {
            Ok(s) => s,
            Err(e) => return refused(&Refusal::Session(e)),
        },
        Err(e) => return refused(&Refusal::Session(e)),
    };
    let Some(request) = snapshot
        .pending_permissions
        .iter()
        .find(|r| r["requestId"] == grant.request_id.as_str())
    else {
        return page(
            StatusCode::CONFLICT,
            "Nothing to answer",
            "<p>This request is no longer waiting: it was answered, or its turn ended.</p>",
        );
    };
    let summary = &snapshot.summary;
    let session = summary.title.as_deref().unwrap_or(&summary.session_id.0);
    let tool = request["tool"].as_str().unwrap_or("a tool");
    let preview = request["preview"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| serde_json::to_string_pretty(&request["input"]).unwrap_or_default());
    let buttons: String = grant
        .allowed
        .iter()
        .map(|d| {
            let class = if *d == PermissionDecision::Deny {
                "deny"
            } else {
                "allow"
            };
            format!(
                r#"<button type="submit" name="decision" value="{}" class="{class}">{}</button>"#,
                d.as_str(),
                label(*d)
            )
        })
        .collect();
    let body = format!(
        r#"<p class="meta">Session <b>{session}</b> in {cwd}</p>
<p><b>{tool}</b> wants to:</p>
<pre>{preview}</pre>
<form method="post">
<textarea name="message" placeholder="Why not, or what to do instead (for a denial)"></textarea>
{buttons}
</form>"#,
        session = escape(session),
        cwd = escape(&summary.cwd),
        tool = escape(tool),
        preview = escape(&preview),
    );
    page(StatusCode::OK, &format!("{tool} needs your answer"), &body)
}

/// `POST /a/{token}`: answers with the button pressed.
async fn post(
    State(sessions): State<Arc<Sessions>>,
    Path(token): Path<String>,
    axum::Form(posted): axum::Form<Posted>,
) -> Response {
    let Some(decision) = PermissionDecision::parse(&posted.decision) else {
        return page(
            StatusCode::BAD_REQUEST,
            "Cannot answer",
            "<p>That is not an answer.</p>",
        );
    };
    let message = Some(posted.message.trim().to_owned()).filter(|m| !m.is_empty());
    let carrier = ClientRef {
        client_id: ConnectionId(0),
        kind: ClientKind::Link,
        name: None,
        node: None,
        principal: None,
        channel: Some(tether_proto::Channel::Link),
    };
    match super::answer(
        &sessions,
        &token,
        decision,
        message,
        carrier,
        "the approval page",
    )
    .await
    {
        Ok(response) => page(
            StatusCode::OK,
            "Answered",
            &format!(
                "<p>Your answer, <b>{}</b>, was given. You can close this page.</p>",
                label(response.decision)
            ),
        ),
        Err(refusal) => refused(&refusal),
    }
}
