//! `tether share`, `tether unshare` and `tether audit`: who else may use a session and in which
//! role, and the ledger of every permission decision with who (or what) made it.

use crate::commands::{Output, print_json, resolve};
use crate::connection::{self, Connection};
use crate::render;
use std::path::Path;
use std::process::ExitCode;
use tether_proto::{
    AuditEntry, ClientKind, DecisionSource, PermissionDecision, SessionId, SessionRole, Shares,
    TetherRpcClient,
};

/// A role a person can be given, from its name.
pub fn parse_role(name: &str) -> anyhow::Result<SessionRole> {
    match name {
        "controller" => Ok(SessionRole::Controller),
        "approver" => Ok(SessionRole::Approver),
        "observer" => Ok(SessionRole::Observer),
        other => anyhow::bail!(
            "{other:?} is not a role: controller (prompt, answer, configure, cancel), approver (answer permission requests only) or observer (watch)"
        ),
    }
}

async fn connect(socket: &Path, id: &str) -> anyhow::Result<(Connection, SessionId)> {
    let conn = connection::connect(socket, true, ClientKind::Script).await?;
    let session = resolve(&conn, id).await?.session_id;
    Ok((conn, session))
}

/// Who has which role, as JSON or a table.
fn print_shares(out: Output, session: &SessionId, shares: &Shares) -> anyhow::Result<ExitCode> {
    if out.json {
        print_json(shares)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!("{session}");
    println!("  {:<16} owner", shares.owner);
    for s in &shares.shares {
        println!("  {:<16} {}", s.principal, s.role);
    }
    Ok(ExitCode::SUCCESS)
}

/// The lines that say who has which role, as `/share` shows them.
pub fn shares_text(shares: &Shares) -> String {
    let mut out = format!("{} (owner)", shares.owner);
    for s in &shares.shares {
        out.push_str(&format!(", {} ({})", s.principal, s.role));
    }
    out
}

/// `tether share ID [--with NAME --role ROLE]`: lists who has a role, or gives one.
pub async fn share(
    socket: &Path,
    out: Output,
    id: &str,
    with: Option<String>,
    role: &str,
) -> anyhow::Result<ExitCode> {
    let (conn, session) = connect(socket, id).await?;
    let shares = match with {
        Some(principal) => {
            conn.client
                .session_share(session.clone(), principal, parse_role(role)?)
                .await
        }
        None => conn.client.session_shares(session.clone()).await,
    }
    .map_err(|e| anyhow::anyhow!("{}", connection::call_error(&e)))?;
    print_shares(out, &session, &shares)
}

/// `tether unshare ID --with NAME`.
pub async fn unshare(
    socket: &Path,
    out: Output,
    id: &str,
    principal: String,
) -> anyhow::Result<ExitCode> {
    let (conn, session) = connect(socket, id).await?;
    let shares = conn
        .client
        .session_unshare(session.clone(), principal)
        .await
        .map_err(|e| anyhow::anyhow!("{}", connection::call_error(&e)))?;
    print_shares(out, &session, &shares)
}

/// `since` as RFC 3339: a time as given, or a span back from now (`30m`, `2h`, `7d`).
fn since_time(since: &str) -> anyhow::Result<String> {
    if humantime::parse_rfc3339_weak(since).is_ok() {
        return Ok(since.to_owned());
    }
    let span = humantime::parse_duration(since).map_err(|_| {
        anyhow::anyhow!(
            "--since takes a time (2026-12-08T09:30:00Z) or a span back from now (30m, 2h, 7d), not {since:?}"
        )
    })?;
    let at = std::time::SystemTime::now()
        .checked_sub(span)
        .ok_or_else(|| anyhow::anyhow!("--since {since} is before the clock's start"))?;
    Ok(humantime::format_rfc3339_millis(at).to_string())
}

/// One decision in a line.
fn entry_line(e: &AuditEntry) -> String {
    let decision = match e.decision {
        PermissionDecision::AllowOnce => "allowed once",
        PermissionDecision::AllowSession => "allowed for the session",
        PermissionDecision::AllowAlways => "always allowed",
        PermissionDecision::Deny => "denied",
        PermissionDecision::Cancelled => "withdrawn",
    };
    let who = match (&e.source, &e.by) {
        (DecisionSource::Person, Some(by)) => format!("by {}", render::client(by)),
        _ => render::decided_by(
            &e.source,
            &e.rule,
            &e.rule_source,
            e.mode.unwrap_or_default(),
        ),
    };
    let hash = e.input_hash.get(..19).unwrap_or(&e.input_hash);
    let session = e.session_id.0.get(..8).unwrap_or(&e.session_id.0);
    format!(
        "{session}  #{:<5} {}  {:<12} {decision} {who}  {hash}",
        e.seq,
        render::clock(&e.ts),
        e.tool
    )
}

/// `tether audit [ID] [--since T]`: every permission decision, oldest first.
pub async fn audit(
    socket: &Path,
    out: Output,
    id: Option<&str>,
    since: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let since = since.map(since_time).transpose()?;
    let conn = connection::connect(socket, true, ClientKind::Script).await?;
    let session = match id {
        Some(id) => Some(resolve(&conn, id).await?.session_id),
        None => None,
    };
    let audit = conn
        .client
        .session_audit(session, since)
        .await
        .map_err(|e| anyhow::anyhow!("{}", connection::call_error(&e)))?;
    if out.json {
        print_json(&audit)?;
        return Ok(ExitCode::SUCCESS);
    }
    if audit.entries.is_empty() {
        println!("no permission decisions");
    }
    for e in &audit.entries {
        println!("{}", entry_line(e));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_a_time_or_a_span() {
        assert_eq!(
            since_time("2026-12-08T09:30:00Z").expect("a time"),
            "2026-12-08T09:30:00Z"
        );
        let back = since_time("2h").expect("a span");
        assert!(humantime::parse_rfc3339_weak(&back).is_ok(), "{back}");
        assert!(since_time("yesterday-ish").is_err());
    }

    #[test]
    fn roles_are_named_as_on_the_wire() {
        assert_eq!(
            parse_role("approver").expect("a role"),
            SessionRole::Approver
        );
        let err = parse_role("owner").expect_err("the owner is not given");
        assert!(err.to_string().contains("controller"), "{err}");
    }
}
