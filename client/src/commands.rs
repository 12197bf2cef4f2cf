//! The subcommands: each connects, asks the daemon, prints the answer (human or `--json`).

use crate::connection::{self, ConnectError, Connection};
use crate::render;
use anyhow::{Context, bail};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::SystemTime;
use tether_proto::{
    CheckStatus, ClientKind, Event, EventKind, PermissionMode, Role, SessionId, SessionStatus,
    SessionSummary, Since, TetherRpcClient,
};

/// How to print.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    /// Machine-readable JSON.
    pub json: bool,
}

pub(crate) fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// `tether sessions`
pub async fn sessions(
    socket: &Path,
    out: Output,
    here: bool,
    status: Option<String>,
    limit: Option<usize>,
    search: Option<String>,
) -> anyhow::Result<ExitCode> {
    let status = status
        .map(|s| {
            serde_json::from_value::<SessionStatus>(serde_json::Value::String(s.clone())).map_err(
                |_| {
                    anyhow::anyhow!(
                        "unknown status {s:?}: use idle, running or awaiting_permission"
                    )
                },
            )
        })
        .transpose()?;
    let conn = connection::connect(socket, true, ClientKind::Script).await?;
    let cwd = if here {
        Some(crate::remote::work_dir()?)
    } else {
        None
    };
    let searched = search.is_some();
    let list = conn
        .client
        .session_list(cwd, status, limit, None, search)
        .await?;
    if out.json {
        print_json(&list)?;
    } else if searched && list.sessions.is_empty() {
        println!("no session holds those words");
    } else {
        print!(
            "{}",
            render::sessions_table(&list.sessions, SystemTime::now())
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Dollars per million tokens as people write them: `3`, `0.3`, `1.25` (never the float's
/// binary tail).
fn price(dollars: f64) -> String {
    let text = format!("{dollars:.4}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// `tether new`
pub async fn new(
    socket: &Path,
    out: Output,
    title: Option<String>,
    model: Option<String>,
    permission_mode: Option<String>,
) -> anyhow::Result<ExitCode> {
    let mode = parse_mode(permission_mode)?;
    let cwd = crate::remote::work_dir().context("cannot read the current directory")?;
    let conn = connection::connect(socket, true, ClientKind::Tui).await?;
    let created = conn
        .client
        .session_new(cwd, title, model, mode, None)
        .await?;
    if out.json {
        print_json(&created)?;
    } else {
        println!("{}", created.session_id);
    }
    Ok(ExitCode::SUCCESS)
}

/// `tether rm`: deletes each session named; one that cannot be found or deleted is reported and
/// the others still go.
pub async fn remove(socket: &Path, out: Output, ids: &[String]) -> anyhow::Result<ExitCode> {
    let conn = connection::connect(socket, true, ClientKind::Tui).await?;
    let mut deleted = Vec::new();
    let mut failed = false;
    for id in ids {
        let found = match resolve(&conn, id).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("tether: {e:#}");
                failed = true;
                continue;
            }
        };
        match conn.client.session_delete(found.session_id.clone()).await {
            Ok(_) => {
                if !out.json {
                    println!("deleted {}", found.session_id);
                }
                deleted.push(found.session_id.0);
            }
            Err(e) => {
                eprintln!(
                    "tether: cannot delete {}: {}",
                    found.session_id,
                    connection::call_error(&e)
                );
                failed = true;
            }
        }
    }
    if out.json {
        print_json(&serde_json::json!({"deleted": deleted}))?;
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `tether approve TOKEN [DECISION]`: answers the token's request.
pub async fn approve(
    socket: &Path,
    out: Output,
    token: &str,
    decision: &str,
    message: Option<String>,
) -> anyhow::Result<ExitCode> {
    let decision = match decision {
        "allow" | "yes" | "allow_once" => tether_proto::PermissionDecision::AllowOnce,
        "session" | "allow_session" => tether_proto::PermissionDecision::AllowSession,
        "always" | "allow_always" => tether_proto::PermissionDecision::AllowAlways,
        "deny" | "no" => tether_proto::PermissionDecision::Deny,
        other => anyhow::bail!("{other:?} is not an answer: allow, session, always or deny"),
    };
    let conn = connection::connect(socket, true, ClientKind::Script).await?;
    let answered = conn
        .client
        .permission_approve(token.to_owned(), Some(decision), message)
        .await;
    match answered {
        Ok(r) if out.json => {
            print_json(&serde_json::to_value(&r)?)?;
            Ok(ExitCode::SUCCESS)
        }
        Ok(r) => {
            println!("{}: {}", r.status.as_str(), r.decision.as_str());
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("tether: refused: {}", connection::call_error(&e));
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `tether budget ID [AMOUNT]`: shows the session's budget and spend, or sets the budget.
pub async fn budget(
    socket: &Path,
    out: Output,
    id: &str,
    amount: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let conn = connection::connect(socket, true, ClientKind::Script).await?;
    let found = resolve(&conn, id).await?;
    let session = found.session_id;
    if let Some(amount) = amount {
        let budget: f64 = amount
            .trim()
            .trim_start_matches('$')
            .parse()
            .ok()
            .filter(|b: &f64| b.is_finite() && *b >= 0.0)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "{amount:?} is not an amount of dollars (e.g. 5, 2.50; 0 removes the cap)"
                )
            })?;
        conn.client
            .session_configure(session.clone(), None, None, None, None, Some(budget))
            .await
            .map_err(|e| anyhow::anyhow!("{}", connection::call_error(&e)))?;
    }
    let snapshot = conn.client.session_get(session.clone()).await?;
    if out.json {
        print_json(&serde_json::json!({
            "sessionId": session,
            "budgetUsd": snapshot.budget_usd,
            "costUsd": snapshot.cost_usd,
            "budgetReached": snapshot.budget_reached,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    let spent = snapshot
        .cost_usd
        .map_or_else(|| "an unknown amount".into(), |c| format!("${c:.4}"));
    match snapshot.budget_usd {
        Some(b) if snapshot.budget_reached => {
            println!(
                "{session}: budget ${b:.2}, {spent} spent: reached, prompts wait until it is raised"
            )
        }
        Some(b) => println!("{session}: budget ${b:.2}, {spent} spent"),
        None => println!("{session}: no budget, {spent} spent"),
    }
    Ok(ExitCode::SUCCESS)
}

/// `tether rewind ID`: lists the turns a session can go back to; with `to`, rewinds it to just
/// before that turn (`scope`: files, conversation or both).
pub async fn rewind(
    socket: &Path,
    out: Output,
    id: &str,
    to: Option<u64>,
    scope: tether_proto::RewindScope,
    overwrite: bool,
) -> anyhow::Result<ExitCode> {
    let conn = connection::connect(socket, true, ClientKind::Script).await?;
    let session = resolve(&conn, id).await?.session_id;
    let Some(to) = to else {
        let points = conn
            .client
            .session_checkpoints(session.clone())
            .await
            .map_err(|e| anyhow::anyhow!("{}", connection::call_error(&e)))?;
        if out.json {
            print_json(&points)?;
            return Ok(ExitCode::SUCCESS);
        }
        if points.is_empty() {
            println!("{session}: no turns to rewind to yet");
        }
        for p in &points {
            let marks = match (p.files, p.conversation) {
                (true, true) => "files, conversation",
                (true, false) => "files",
                (false, true) => "conversation",
                (false, false) => "-",
            };
            let prompt = p.prompt.lines().next().unwrap_or("");
            println!("{:>4}  {marks:<20}  {prompt}", p.turn);
        }
        return Ok(ExitCode::SUCCESS);
    };
    let done = conn
        .client
        .session_rewind(session.clone(), to, Some(scope), Some(overwrite))
        .await
        .map_err(|e| anyhow::anyhow!("{}", connection::call_error(&e)))?;
    if out.json {
        print_json(&done)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{}",
        render::rewound(
            done.to_turn,
            done.code,
            done.conversation,
            &done.restored,
            &done.kept,
            &done.failed,
        )
    );
    for file in &done.restored {
        println!("  put back  {file}");
    }
    for file in &done.kept {
        println!("  kept      {file} (edited outside tether; --overwrite puts it back too)");
    }
    for file in &done.outside {
        println!("  untouched {file} (edited outside tether)");
    }
    Ok(ExitCode::SUCCESS)
}

/// Finds the session whose id is `id` or starts with it.
pub async fn resolve(conn: &Connection, id: &str) -> anyhow::Result<SessionSummary> {
    if let Ok(snapshot) = conn.client.session_get(SessionId(id.to_owned())).await {
        return Ok(snapshot.summary);
    }
    let list = conn
        .client
        .session_list(None, None, None, None, None)
        .await?;
    let matches: Vec<SessionSummary> = list
        .sessions
        .into_iter()
        .filter(|s| s.session_id.0.starts_with(id))
        .collect();
    match matches.len() {
        0 => bail!("no session matches {id:?} (`tether sessions` lists them)"),
        1 => Ok(matches.into_iter().next().context("one match")?),
        n => {
            let ids: Vec<String> = matches.iter().map(|s| s.session_id.0.clone()).collect();
            bail!("{id:?} matches {n} sessions: {}", ids.join(", "))
        }
    }
}

fn parse_since(since: &str) -> anyhow::Result<Since> {
    if since == "head" {
        return Ok(Since::Head);
    }
    since
        .parse::<u64>()
        .map(Since::Seq)
        .with_context(|| format!("--since must be a seq number or `head`, got {since:?}"))
}

/// `tether attach`
pub async fn attach(
    socket: &Path,
    out: Output,
    id: &str,
    observe: bool,
    since: &str,
) -> anyhow::Result<ExitCode> {
    let mut since = parse_since(since)?;
    let conn = connection::connect(socket, true, ClientKind::Tui).await?;
    let session = resolve(&conn, id).await?;
    let role = if observe {
        Role::Observer
    } else {
        Role::Controller
    };
    if !out.json {
        eprintln!(
            "attached to {} {} as {} — Ctrl+C detaches",
            session.session_id,
            session
                .title
                .as_deref()
                .map(|t| format!("\"{t}\""))
                .unwrap_or_default(),
            if observe { "observer" } else { "controller" }
        );
    }
    let mut ctrl_c = std::pin::pin!(tokio::signal::ctrl_c());
    let mut printer = render::StreamPrinter::default();
    loop {
        let mut sub = connection::subscribe(&conn, &session.session_id, role, since).await?;
        loop {
            let item = tokio::select! {
                _ = &mut ctrl_c => {
                    let _ = sub.unsubscribe().await;
                    if !out.json {
                        eprintln!("detached");
                    }
                    return Ok(ExitCode::SUCCESS);
                }
                item = sub.next() => item,
            };
            let raw = match item {
                None => bail!("the connection to tetherd was lost"),
                Some(Err(e)) => bail!("bad event from tetherd: {e}"),
                Some(Ok(raw)) => raw,
            };
            // Events of types this build does not know are printed raw in JSON mode, skipped
            // otherwise.
            let event = serde_json::from_value::<Event>(raw.clone()).ok();
            if out.json {
                println!("{raw}");
            } else if let Some(ev) = &event {
                let text = printer.feed(ev);
                let mut stdout = std::io::stdout().lock();
                let _ = stdout
                    .write_all(text.as_bytes())
                    .and_then(|_| stdout.flush());
            }
            let Some(ev) = event else { continue };
            match ev.kind {
                EventKind::Lagged { last_seq } => {
                    since = Since::Seq(last_seq);
                    break; // re-subscribe from where we were
                }
                EventKind::SessionDeleted { .. } | EventKind::DaemonShutdown {} => {
                    return Ok(ExitCode::SUCCESS);
                }
                _ => {}
            }
        }
    }
}

/// `tether daemon status`
/// `tether models`: the aliases, then one line per model (window, output limit, thinking,
/// effort levels, price per million tokens).
pub async fn models(socket: &Path, out: Output) -> anyhow::Result<ExitCode> {
    let conn = connection::connect(socket, true, ClientKind::Script).await?;
    let list = conn.client.models_list().await?;
    if out.json {
        print_json(&list)?;
        return Ok(ExitCode::SUCCESS);
    }
    let tokens = |n: u64| {
        if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
            format!("{}M", n / 1_000_000)
        } else {
            format!("{}k", n / 1000)
        }
    };
    println!("default {}", list.default_model);
    for a in &list.aliases {
        println!("  {:<8} → {}", a.alias, a.model);
    }
    println!();
    println!(
        "{:<22} {:>6} {:>6}  {:<21} {:<26} price $/MTok in/out/cache read",
        "model", "window", "output", "thinking", "effort"
    );
    for m in &list.models {
        let window = match m.long_context_window {
            Some(l) => format!("{}/{}", tokens(m.context_window), tokens(l)),
            None => tokens(m.context_window),
        };
        let effort = if m.efforts.is_empty() {
            "-".to_owned()
        } else {
            let d = m.default_effort.as_deref().unwrap_or("");
            m.efforts
                .iter()
                .map(|e| if e == d { format!("{e}*") } else { e.clone() })
                .collect::<Vec<_>>()
                .join(",")
        };
        let price = match m.price {
            Some([i, o, _, _, r]) => format!("{}/{}/{}", price(i), price(o), price(r)),
            None => "unknown (set [models.\"<id>\"] in config.toml)".into(),
        };
        let source = if m.source == "built-in" {
            String::new()
        } else {
            format!("  ({})", m.source)
        };
        println!(
            "{:<22} {:>6} {:>6}  {:<21} {:<26} {price}{source}",
            m.id,
            window,
            tokens(u64::from(m.max_output)),
            m.thinking,
            effort
        );
    }
    println!("\n* the model's default effort; window a/b: b with the [1m] suffix");
    Ok(ExitCode::SUCCESS)
}

pub async fn daemon_status(socket: &Path, out: Output) -> anyhow::Result<ExitCode> {
    let conn = match connection::connect(socket, false, ClientKind::Script).await {
        Ok(c) => c,
        Err(ConnectError::NotRunning(path)) => {
            if out.json {
                print_json(&serde_json::json!({"running": false, "socket": path}))?;
            } else {
                println!("tetherd is not running (socket {})", path.display());
            }
            return Ok(ExitCode::from(3));
        }
        Err(e) => return Err(e.into()),
    };
    let status = conn.client.daemon_status().await?;
    if out.json {
        let mut v = serde_json::to_value(&status)?;
        v["running"] = serde_json::Value::Bool(true);
        print_json(&v)?;
    } else {
        println!(
            "tetherd {} running (pid {}, epoch {}, up {})",
            status.daemon.version,
            status.daemon.pid,
            status.epoch,
            humantime::format_duration(std::time::Duration::from_secs(status.uptime_ms / 1000))
        );
        println!("  socket         {}", status.socket);
        println!("  data           {}", status.data_dir);
        println!(
            "  sessions       {} stored, {} loaded",
            status.sessions, status.loaded_sessions
        );
        println!(
            "  clients        {} connections, {} subscriptions",
            status.connections, status.subscriptions
        );
        if let Some(cluster) = &status.cluster {
            println!(
                "  cluster        node {} ({}), nodes seen: {}",
                cluster.node,
                if cluster.connected {
                    "connected to NATS"
                } else {
                    "NATS unreachable"
                },
                cluster.nodes.join(", ")
            );
            println!("  nats           {}", cluster.servers.join(", "));
            for held in &cluster.held {
                println!(
                    "  runs           {} (lease renewed {:.1}s ago)",
                    held.session_id,
                    held.lease_age_ms as f64 / 1000.0
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `tether daemon stop`
pub async fn daemon_stop(socket: &Path, out: Output) -> anyhow::Result<ExitCode> {
    let conn = match connection::connect(socket, false, ClientKind::Script).await {
        Ok(c) => c,
        Err(ConnectError::NotRunning(_)) => {
            if !out.json {
                println!("tetherd is not running");
            } else {
                print_json(&serde_json::json!({"stopped": false, "running": false}))?;
            }
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => return Err(e.into()),
    };
    let pid = conn.hello.daemon.pid;
    conn.client.daemon_shutdown().await?;
    // The daemon closes our connection once it has drained.
    let closed = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        conn.client.on_disconnect(),
    )
    .await;
    if closed.is_err() {
        bail!("tetherd (pid {pid}) did not stop within 10s");
    }
    // It removes its socket as the last step before exiting.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while socket.exists() {
        if std::time::Instant::now() > deadline {
            bail!(
                "tetherd (pid {pid}) did not remove {} within 10s",
                socket.display()
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    if out.json {
        print_json(&serde_json::json!({"stopped": true, "pid": pid}))?;
    } else {
        println!("tetherd (pid {pid}) stopped");
    }
    Ok(ExitCode::SUCCESS)
}

pub fn parse_mode(mode: Option<String>) -> anyhow::Result<Option<PermissionMode>> {
    mode.map(|m| {
        serde_json::from_value::<PermissionMode>(serde_json::Value::String(m.clone())).with_context(|| {
            format!("unknown permission mode {m:?} (use default, acceptEdits, plan, bypassPermissions or dontAsk)")
        })
    })
    .transpose()
}

/// The systemd user units, as shipped in `systemd/`.
const SOCKET_UNIT: &str = include_str!("../../systemd/tetherd.socket");
const SERVICE_UNIT: &str = include_str!("../../systemd/tetherd.service");

/// `tether daemon install`: writes the units to `~/.config/systemd/user/` (or
/// `$XDG_CONFIG_HOME/systemd/user/`) and prints how to enable them; `--enable` runs that.
pub fn daemon_install(enable: bool) -> anyhow::Result<ExitCode> {
    let env = connection::path_env();
    let dir = match (&env.xdg_config_home, &env.home) {
        (Some(c), _) => std::path::PathBuf::from(c).join("systemd/user"),
        (None, Some(h)) => std::path::PathBuf::from(h).join(".config/systemd/user"),
        (None, None) => bail!("neither XDG_CONFIG_HOME nor HOME is set"),
    };
    tether_proto::private::create_dir_all(&dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    for (name, text) in [
        ("tetherd.socket", SOCKET_UNIT),
        ("tetherd.service", SERVICE_UNIT),
    ] {
        let path = dir.join(name);
        tether_proto::private::write(&path, text.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    let steps = [
        vec!["systemctl", "--user", "daemon-reload"],
        vec!["systemctl", "--user", "enable", "--now", "tetherd.socket"],
    ];
    if !enable {
        println!("\nTo start tetherd on demand and at login:");
        for s in &steps {
            println!("  {}", s.join(" "));
        }
        println!("To keep it running after you log out:\n  loginctl enable-linger");
        return Ok(ExitCode::SUCCESS);
    }
    for s in &steps {
        let status = std::process::Command::new(s[0])
            .args(&s[1..])
            .status()
            .with_context(|| format!("cannot run {}", s[0]))?;
        if !status.success() {
            bail!("`{}` failed ({status})", s.join(" "));
        }
    }
    println!("tetherd.socket is enabled; `loginctl enable-linger` keeps it running after logout");
    Ok(ExitCode::SUCCESS)
}

/// Runs the local `tetherd` with `args` (no daemon needed) and returns its stdout, for what a
/// daemon started now would see.
fn local_tetherd(args: &[&str]) -> anyhow::Result<(String, bool)> {
    let binary = connection::daemon_binary();
    let out = std::process::Command::new(&binary)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {}", binary.display()))?;
    if !out.status.success() && out.stdout.is_empty() {
        bail!("{}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok((
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.success(),
    ))
}

/// `tether config show`
pub async fn config_show(socket: &Path, out: Output) -> anyhow::Result<ExitCode> {
    let report = match connection::connect(socket, false, ClientKind::Script).await {
        Ok(conn) => conn.client.daemon_config().await?,
        Err(ConnectError::NotRunning(_)) => {
            let (text, _) = local_tetherd(&["config", "--json"])?;
            serde_json::from_str(&text).context("tetherd config gave no JSON")?
        }
        Err(e) => return Err(e.into()),
    };
    if out.json {
        print_json(&report)?;
    } else {
        print!("{}", report.render());
    }
    Ok(ExitCode::SUCCESS)
}

/// `tether doctor`: the client's view (socket, daemon), then the daemon's own checks — from the
/// running daemon, else from a local `tetherd doctor`.
pub async fn doctor(socket: &Path, out: Output, online: bool) -> anyhow::Result<ExitCode> {
    use std::os::unix::fs::PermissionsExt;
    let check = |name: &str, status: CheckStatus, detail: String| tether_proto::Check {
        name: name.into(),
        status,
        detail,
    };
    let mut checks = Vec::new();
    let mode = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.permissions().mode() & 0o777)
            .ok()
    };
    let dir = socket.parent().unwrap_or(Path::new("/"));
    let uid = nix::unistd::getuid().as_raw();
    let rule = connection::path_env().socket_dir_rule(socket);
    let dir_verdict = tether_proto::private::verify_socket_dir(dir, rule, uid);
    checks.push(match (mode(socket), mode(dir)) {
        (_, Some(_)) if dir_verdict.is_err() => check(
            "socket",
            CheckStatus::Fail,
            dir_verdict.err().map(|e| e.to_string()).unwrap_or_default(),
        ),
        (Some(0o600), Some(d)) => check(
            "socket",
            CheckStatus::Ok,
            format!("{} (0600, directory {d:04o}, yours)", socket.display()),
        ),
        (Some(m), Some(d)) => check(
            "socket",
            CheckStatus::Warn,
            format!(
                "{} has mode {m:04o} (directory {d:04o}); expected 0600",
                socket.display()
            ),
        ),
        _ => check(
            "socket",
            CheckStatus::Ok,
            format!(
                "{} (absent; created when the daemon starts)",
                socket.display()
            ),
        ),
    });
    let daemon_checks: Vec<tether_proto::Check> =
        match connection::connect(socket, false, ClientKind::Script).await {
            Ok(conn) => {
                let status = conn.client.daemon_status().await?;
                checks.push(check(
                    "daemon",
                    CheckStatus::Ok,
                    format!(
                        "tetherd {} (pid {}) up {}s, {} session(s)",
                        status.daemon.version,
                        status.daemon.pid,
                        status.uptime_ms / 1000,
                        status.sessions
                    ),
                ));
                conn.client.daemon_doctor(Some(online)).await?
            }
            Err(ConnectError::NotRunning(_)) => {
                checks.push(check(
                    "daemon",
                    CheckStatus::Ok,
                    "not running; it starts when a command needs it".into(),
                ));
                let mut args = vec!["doctor", "--json"];
                if online {
                    args.push("--online");
                }
                let (text, _) = local_tetherd(&args)?;
                serde_json::from_str(&text).context("tetherd doctor gave no JSON")?
            }
            Err(e) => {
                checks.push(check("daemon", CheckStatus::Fail, e.to_string()));
                Vec::new()
            }
        };
    checks.extend(daemon_checks);
    if out.json {
        print_json(&checks)?;
    } else {
        for c in &checks {
            let mark = match c.status {
                CheckStatus::Ok => "✓",
                CheckStatus::Warn => "!",
                _ => "✗",
            };
            println!("{mark} {:<15} {}", c.name, c.detail);
        }
    }
    Ok(if checks.iter().any(|c| c.status == CheckStatus::Fail) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// A new session forked from `id` with its whole history (`--fork-session`).
pub async fn fork(socket: &Path, id: SessionId) -> anyhow::Result<SessionId> {
    fork_at(socket, id, None).await
}

/// Forks a session with its history up to `at` (all of it when `None`).
pub async fn fork_at(socket: &Path, id: SessionId, at: Option<u64>) -> anyhow::Result<SessionId> {
    let conn = connection::connect(socket, true, ClientKind::Script).await?;
    Ok(conn.client.session_fork(id, at).await?.session_id)
}

/// A session by id or prefix; an empty `id` lists this directory's sessions and asks which.
pub async fn pick_session(socket: &Path, id: &str) -> anyhow::Result<SessionId> {
    let conn = connection::connect(socket, true, ClientKind::Script).await?;
    if !id.is_empty() {
        return Ok(resolve(&conn, id).await?.session_id);
    }
    let cwd = crate::remote::work_dir()?;
    let list = conn
        .client
        .session_list(Some(cwd), None, Some(20), None, None)
        .await?;
    if list.sessions.is_empty() {
        bail!("no session in this directory yet; run tether");
    }
    for (i, s) in list.sessions.iter().enumerate() {
        println!(
            "{:>3}. {}  {}  {}",
            i + 1,
            s.session_id.0.chars().take(8).collect::<String>(),
            render::ago(&s.updated_at, SystemTime::now()),
            s.title.as_deref().unwrap_or("(untitled)")
        );
    }
    print!("resume which? (number or id) [1] ");
    std::io::stdout().flush()?;
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    let answer = line.trim();
    let n: usize = match answer {
        "" => 1,
        a => match a.parse() {
            Ok(n) => n,
            Err(_) => return Ok(resolve(&conn, a).await?.session_id),
        },
    };
    list.sessions
        .get(n.saturating_sub(1))
        .map(|s| s.session_id.clone())
        .context("no such session in the list")
}

#[cfg(test)]
mod tests {
    #[test]
    fn prices_read_as_people_write_them() {
        assert_eq!(super::price(3.0), "3");
        assert_eq!(super::price(0.1 * 3.0), "0.3");
        assert_eq!(super::price(1.25), "1.25");
        assert_eq!(super::price(0.08), "0.08");
    }
}
