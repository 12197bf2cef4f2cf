//! Approving from anywhere: the approval token a hook is given answers its request once, from
//! any shell that reaches the daemon, even after a kill -9; a forged or replayed token is
//! refused with the reason, and the token never enters the session's log.

use anyhow::Context;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake};

/// Makes `daemon`'s project run a command hook on `event` (for `matcher`'s tools, if given)
/// that keeps its input; returns the file it writes. The project is trusted.
fn keep_hook_input(daemon: &Daemon, event: &str, matcher: Option<&str>) -> anyhow::Result<PathBuf> {
    let told = daemon.workdir().join(".told.json");
    let settings = daemon.workdir().join(".claude");
    std::fs::create_dir_all(&settings)?;
    let mut entry = json!({"hooks": [
        {"type": "command", "command": format!("cat > {}", told.display())}
    ]});
    if let Some(m) = matcher {
        entry["matcher"] = json!(m);
    }
    std::fs::write(
        settings.join("settings.json"),
        json!({"hooks": {event: [entry]}}).to_string(),
    )?;
    daemon.trust(&daemon.workdir())?;
    Ok(told)
}

/// The input the hook kept, once it has run.
fn hook_input(told: &std::path::Path) -> anyhow::Result<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(text) = std::fs::read_to_string(told)
            && let Ok(v) = serde_json::from_str::<Value>(&text)
        {
            return Ok(v);
        }
        anyhow::ensure!(Instant::now() < deadline, "the hook never ran");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_hooks_approval_token_answers_once_even_after_a_kill_9() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::text("Writing.").tool_use(
            "Write",
            json!({"file_path": "approved.txt", "content": "by link\n"}),
        ),
        Step::text("Written."),
    ]))?;
    let mut daemon = Daemon::start_with(fake.env())?;
    let told = keep_hook_input(&daemon, "Notification", None)?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_with_mode(&daemon.workdir(), "default")?;
    c.watch(&session)?;
    c.start_turn(&session, "write it")?;
    let asked = c.events_until("permission_requested")?;
    let request = asked.last().context("request")?["data"]["requestId"].clone();

    // The hook got the token with its request.
    let input = hook_input(&told)?;
    assert_eq!(input["request_id"], request, "{input}");
    let token = input["approval_token"]
        .as_str()
        .context("approval_token")?
        .to_owned();

    // A token with another signature is refused, and answers nothing. (A character inside the
    // signature: the last one carries padding bits a decoder checks.)
    let mut chars: Vec<char> = token.chars().collect();
    let at = chars.len() - 10;
    chars[at] = if chars[at] == 'A' { 'B' } else { 'A' };
    let forged: String = chars.into_iter().collect();
    let out = daemon.run_tether(&["approve", &forged])?;
    assert!(!out.status.success(), "{out:?}");
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(why.contains("not issued by this daemon"), "{why}");

    // The daemon dies between the notification and the approval; the token still answers.
    daemon.kill9()?;
    daemon.spawn()?;
    let out = daemon.run_tether(&["approve", &token])?;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "accepted: allow_once"
    );
    let mut c = daemon.ndjson()?;
    let seen = c.replay_until(&session, |s| s.iter().any(|e| e["type"] == "turn_ended"))?;
    let resolved: Vec<&Value> = seen
        .iter()
        .filter(|e| e["type"] == "permission_resolved")
        .collect();
    assert_eq!(resolved.len(), 1, "{resolved:?}");
    assert_eq!(resolved[0]["data"]["resolvedBy"]["kind"], "link");
    assert_eq!(
        std::fs::read_to_string(daemon.workdir().join("approved.txt"))?,
        "by link\n"
    );

    // Used once: a replay is refused with who answered.
    let out = daemon.run_tether(&["approve", &token, "deny"])?;
    assert!(!out.status.success(), "{out:?}");
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(why.contains("answered already"), "{why}");
    // The token is for hooks only: no event of the session carries it.
    assert!(
        seen.iter().all(|e| !e.to_string().contains(&token)),
        "the token is in the log"
    );
    fake.no_rejections();
    Ok(())
}

/// What the browser script saw (`tests/browser/approve.mjs`).
fn in_browser(url: &str, shot: &std::path::Path, press: Option<&str>) -> anyhow::Result<Value> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("browser/approve.mjs");
    let mut cmd = std::process::Command::new("node");
    cmd.arg(script)
        .arg(tether_tests::browser_dir())
        .arg(url)
        .arg(shot);
    if let Some(value) = press {
        cmd.arg(value);
    }
    let out = cmd.output()?;
    anyhow::ensure!(out.status.success(), "the browser script failed: {out:?}");
    let line = String::from_utf8(out.stdout)?;
    Ok(serde_json::from_str(line.trim())?)
}

/// The approval page, in a real headless Chromium at a phone's width: it shows the call and a
/// button for each answer, loads nothing from elsewhere and runs no script; Allow answers the
/// request and the turn goes on. A bad token shows nothing of the session.
#[test]
fn the_approval_page_answers_from_a_phones_browser() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::text("Running it.").tool_use(
            "Bash",
            json!({"command": "echo approved-from-the-page > page.txt"}),
        ),
        Step::text("Done."),
    ]))?;
    let mut env = fake.env();
    env.push(("TETHER_APPROVALS_LISTEN".into(), "127.0.0.1:0".into()));
    let daemon = Daemon::start_with(env)?;
    let told = keep_hook_input(&daemon, "PermissionRequest", Some("Bash"))?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_with_mode(&daemon.workdir(), "default")?;
    c.call(
        "session/configure",
        json!({"sessionId": session, "title": "Deploy check"}),
    )?;
    c.watch(&session)?;
    c.start_turn(&session, "run it")?;
    c.events_until("permission_requested")?;
    let input = hook_input(&told)?;
    let url = input["approval_url"].as_str().context("approval_url")?;
    let token = input["approval_token"].as_str().context("approval_token")?;
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with(token),
        "{url}"
    );

    let shots = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    // A link with a bad token shows the reason and nothing of the session.
    let bad = url.replace("/a/tat1.", "/a/tat1.x");
    let refused = in_browser(&bad, &shots.join("approval-page-refused.png"), None)?;
    assert_eq!(refused["status"], 403, "{refused}");
    let text = refused["text"].as_str().unwrap_or_default();
    assert!(
        !text.contains("Deploy check") && !text.contains("echo"),
        "{text}"
    );

    let shot = shots.join("approval-page.png");
    let seen = in_browser(url, &shot, Some("allow_once"))?;
    assert_eq!(seen["status"], 200, "{seen}");
    let text = seen["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("Deploy check")
            && text.contains("Bash")
            && text.contains("approved-from-the-page"),
        "{text}"
    );
    assert_eq!(
        seen["buttons"],
        json!(["allow_once", "allow_session", "allow_always", "deny"])
    );
    assert_eq!(seen["scripts"], 0, "{seen}");
    // Small enough for a phone on a poor connection.
    assert!(
        seen["bytes"].as_u64().is_some_and(|b| b < 8 * 1024),
        "{seen}"
    );
    eprintln!("the approval page: {} bytes", seen["bytes"]);
    assert!(
        seen["width"].as_u64().is_some_and(|w| w <= 390),
        "wider than a phone: {seen}"
    );
    let page_origin = url.split("/a/").next().unwrap_or_default();
    assert!(
        seen["loaded"].as_array().is_some_and(|all| all
            .iter()
            .all(|u| u.as_str().is_some_and(|u| u.starts_with(page_origin)))),
        "the page loaded something from elsewhere: {seen}"
    );
    assert!(
        seen["headers"]["content-security-policy"]
            .as_str()
            .is_some_and(|p| p.contains("default-src 'none'")),
        "{seen}"
    );
    assert!(
        seen["after"]
            .as_str()
            .is_some_and(|t| t.contains("Allow once")),
        "{seen}"
    );
    // A screenshot at phone width is kept with the test run's output.
    let png = std::fs::read(&shot)?;
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 5_000,
        "{}",
        shot.display()
    );

    // The answer came from the page, and the turn went on.
    let events = c.events_until("turn_ended")?;
    let resolved = events
        .iter()
        .find(|e| e["type"] == "permission_resolved")
        .context("resolved")?;
    assert_eq!(resolved["data"]["resolvedBy"]["kind"], "link", "{resolved}");
    assert_eq!(
        std::fs::read_to_string(daemon.workdir().join("page.txt"))?,
        "approved-from-the-page\n"
    );
    // Opened again, the link says there is nothing left to answer.
    let again = in_browser(url, &shots.join("approval-page-again.png"), None)?;
    assert_eq!(again["status"], 409, "{again}");
    fake.no_rejections();
    Ok(())
}
