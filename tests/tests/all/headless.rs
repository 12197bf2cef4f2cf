//! `tether -p`: one headless turn through the real client and daemon.

use anyhow::Context;
use serde_json::{Value, json};
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake};

#[test]
fn print_mode_streams_the_answer_and_exits_zero() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("Hi there, human.")]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let out = daemon
        .tether()
        .current_dir(daemon.workdir())
        .args(["-p", "say hi"])
        .output()?;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8(out.stdout)?, "Hi there, human.\n");
    let sent = &fake.server.message_requests()[0].body;
    assert_eq!(sent["messages"][0]["content"][0]["text"], "say hi");
    Ok(())
}

#[test]
fn print_mode_json_and_denied_permissions() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::default().tool_use("Bash", json!({"command": "touch created-by-the-model"})),
        Step::text("I could not run it."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let out = daemon
        .tether()
        .current_dir(daemon.workdir())
        .args(["-p", "make a file", "--output-format", "json"])
        .output()?;
    assert!(out.status.success(), "{out:?}");
    let result: Value = serde_json::from_slice(&out.stdout).context("one JSON object")?;
    assert_eq!(result["result"], "I could not run it.");
    assert_eq!(result["stopReason"], "end_turn");
    assert!(result["costUsd"].as_f64().is_some_and(|c| c > 0.0));
    assert!(
        !daemon.workdir().join("created-by-the-model").exists(),
        "the call was denied"
    );
    let reqs = fake.server.message_requests();
    let denied = reqs[1].body["messages"][2]["content"][0]["content"]
        .as_str()
        .context("result")?
        .to_owned();
    assert!(denied.contains("headless run"), "{denied}");
    Ok(())
}

#[test]
fn print_mode_stream_json_emits_every_event_and_fails_with_the_turn() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::error(
        401,
        "authentication_error",
        "invalid x-api-key",
    )]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let out = daemon
        .tether()
        .current_dir(daemon.workdir())
        .args(["-p", "hello", "--output-format", "stream-json"])
        .output()?;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let types: Vec<String> = String::from_utf8(out.stdout)?
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|e| e["type"].as_str().map(str::to_owned))
        .collect();
    assert!(
        types.contains(&"turn_started".to_owned())
            && types.last().map(String::as_str) == Some("turn_ended"),
        "{types:?}"
    );
    Ok(())
}
