//! Approving from anywhere: the approval token a hook is given answers its request once, from
//! any shell that reaches the daemon, even after a kill -9; a forged or replayed token is
//! refused with the reason, and the token never enters the session's log.

use anyhow::Context;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake};

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
    let told = daemon.workdir().join(".told.json");
    let settings = daemon.workdir().join(".claude");
    std::fs::create_dir_all(&settings)?;
    std::fs::write(
        settings.join("settings.json"),
        json!({"hooks": {"Notification": [{"hooks": [
            {"type": "command", "command": format!("cat > {}", told.display())}
        ]}]}})
        .to_string(),
    )?;
    daemon.trust(&daemon.workdir())?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_with_mode(&daemon.workdir(), "default")?;
    c.watch(&session)?;
    c.start_turn(&session, "write it")?;
    let asked = c.events_until("permission_requested")?;
    let request = asked.last().context("request")?["data"]["requestId"].clone();

    // The hook got the token with its request.
    let deadline = Instant::now() + Duration::from_secs(20);
    let input: Value = loop {
        if let Ok(text) = std::fs::read_to_string(&told)
            && let Ok(v) = serde_json::from_str::<Value>(&text)
        {
            break v;
        }
        anyhow::ensure!(Instant::now() < deadline, "the Notification hook never ran");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(input["request_id"], request, "{input}");
    let token = input["approval_token"]
        .as_str()
        .context("approval_token")?
        .to_owned();

    // A token with another signature is refused, and answers nothing.
    let mut forged = token.clone();
    let last = forged.pop().context("empty token")?;
    forged.push(if last == 'A' { 'B' } else { 'A' });
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
