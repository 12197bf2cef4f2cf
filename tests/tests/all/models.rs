//! Today's models end to end: what each alias sends (id, `max_tokens`, thinking, effort, context
//! editing, betas), costs from the catalog and from config.toml, models learnt from
//! `GET /v1/models`, and the errors for names and levels a model does not take.

use anyhow::Context;
use serde_json::{Value, json};
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake};

fn headless(daemon: &Daemon, args: &[&str]) -> anyhow::Result<std::process::Output> {
    Ok(daemon
        .tether()
        .current_dir(daemon.workdir())
        .arg("-p")
        .args(args)
        .output()?)
}

/// A headless run that must fail; its stderr.
fn refused(daemon: &Daemon, args: &[&str]) -> anyhow::Result<String> {
    let out = headless(daemon, args)?;
    anyhow::ensure!(!out.status.success(), "{args:?} was accepted: {out:?}");
    Ok(String::from_utf8_lossy(&out.stderr).into_owned())
}

fn betas(headers: &std::collections::BTreeMap<String, String>) -> Vec<String> {
    headers
        .get("anthropic-beta")
        .map(|b| b.split(',').map(|s| s.trim().to_owned()).collect())
        .unwrap_or_default()
}

#[test]
fn each_alias_sends_todays_model_with_its_thinking_effort_and_betas() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::text("hi from opus"),
        Step::text("hi from sonnet"),
        Step::text("hi from haiku"),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let expect = [
        ("opus", "claude-opus-5-5", "medium"),
        ("sonnet", "claude-sonnet-5-5", "high"),
        ("haiku", "claude-haiku-5-5", "medium"),
    ];
    for (alias, _, _) in expect {
        let out = headless(
            &daemon,
            &["--model", alias, "--output-format", "json", "say hi"],
        )?;
        assert!(out.status.success(), "{alias}: {out:?}");
        let result: Value = serde_json::from_slice(&out.stdout).context("one JSON object")?;
        assert!(
            result["total_cost_usd"].as_f64().is_some_and(|c| c > 0.0),
            "{alias} is priced from the catalog: {result}"
        );
    }
    let reqs = fake.server.message_requests();
    assert_eq!(reqs.len(), 3);
    for (req, (alias, id, effort)) in reqs.iter().zip(expect) {
        assert!(req.rejected.is_none(), "{alias}: {:?}", req.rejected);
        let body = &req.body;
        assert_eq!(body["model"], id, "{alias}");
        assert_eq!(body["max_tokens"], 128_000, "{alias}");
        assert_eq!(
            body["thinking"],
            json!({"type": "adaptive", "display": "omitted"}),
            "{alias}: headless runs do not ask for thinking text"
        );
        assert_eq!(body["output_config"], json!({"effort": effort}), "{alias}");
        assert_eq!(
            body["context_management"],
            json!({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}),
            "{alias}"
        );
        let b = betas(&req.headers);
        for needed in [
            "interleaved-thinking-2025-05-14",
            "context-management-2025-06-27",
            "effort-2025-11-24",
        ] {
            assert!(b.iter().any(|x| x == needed), "{alias}: {needed} in {b:?}");
        }
    }
    Ok(())
}

#[test]
fn an_interactive_session_asks_for_thinking_updates_and_an_older_model_for_a_budget()
-> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::text("Done.").thinking("Let me think about that."),
        Step::text("Old model answer."),
    ]))?;
    let daemon = Daemon::prepare(fake.env())?;
    daemon.write_config("thinking_budget = 8000\n")?;
    let mut daemon = daemon;
    daemon.spawn()?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&daemon.workdir())?;
    c.watch(&session)?;
    c.start_turn(&session, "think first")?;
    let events = c.events_until("turn_ended")?;
    assert!(
        events.iter().any(|e| e["type"] == "thinking_delta"),
        "the thinking streams to clients"
    );
    c.call(
        "session/configure",
        json!({"sessionId": session, "model": "claude-haiku-4-5"}),
    )?;
    c.start_turn(&session, "and now?")?;
    c.events_until("turn_ended")?;

    let reqs = fake.server.message_requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        reqs[0].body["thinking"],
        json!({"type": "adaptive", "display": "updates"})
    );
    assert!(
        betas(&reqs[0].headers)
            .iter()
            .any(|b| b == "thinking-display-updates-2026-08-18")
    );
    // The thinking block (with its signature) goes back verbatim.
    let sent_back = &reqs[1].body["messages"][1]["content"][0];
    assert_eq!(sent_back["type"], "thinking");
    assert!(
        sent_back["signature"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
    );
    let old = &reqs[1].body;
    assert_eq!(old["model"], "claude-haiku-4-5");
    assert_eq!(old["max_tokens"], 64_000);
    assert_eq!(
        old["thinking"],
        json!({"type": "enabled", "budget_tokens": 8000})
    );
    assert!(
        old.get("output_config").is_none(),
        "Haiku 4.5 has no effort"
    );
    for r in &reqs {
        assert!(r.rejected.is_none(), "{:?}", r.rejected);
    }
    Ok(())
}

#[test]
fn effort_is_sent_when_asked_and_names_and_levels_a_model_lacks_are_refused() -> anyhow::Result<()>
{
    let fake = Fake::start(Script::of([Step::text("thorough")]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let out = headless(&daemon, &["--model", "opus", "--effort", "xhigh", "go"])?;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        fake.server.message_requests()[0].body["output_config"]["effort"],
        "xhigh"
    );

    let err = refused(&daemon, &["--model", "opuss", "go"])?;
    assert!(
        err.contains("opuss") && err.contains("sonnet") && err.contains("fable"),
        "lists the aliases: {err}"
    );
    let err = refused(
        &daemon,
        &["--model", "claude-haiku-4-5", "--effort", "low", "go"],
    )?;
    assert!(
        err.contains("claude-haiku-4-5") && err.contains("effort"),
        "names the model: {err}"
    );
    let err = refused(
        &daemon,
        &["--model", "claude-opus-4-6", "--effort", "xhigh", "go"],
    )?;
    assert!(
        err.contains("low, medium, high, max"),
        "says what it takes: {err}"
    );
    assert_eq!(
        fake.server.message_requests().len(),
        1,
        "refused before any request"
    );

    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&daemon.workdir())?;
    let reply = c.request(
        "session/configure",
        json!({"sessionId": session, "model": "sonet"}),
    )?;
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    Ok(())
}

#[test]
fn a_model_newer_than_the_catalog_is_learnt_from_the_api_and_priced_from_config()
-> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::text("from the future"),
        Step::text("priced"),
    ]))?;
    let daemon = Daemon::prepare(fake.env())?;
    let mut daemon = daemon;
    daemon.spawn()?;
    // The daemon asks GET /v1/models in the background at start.
    let deadline = std::time::Instant::now() + tether_tests::WAIT;
    let listed = loop {
        let mut c = daemon.ndjson()?;
        let list = c.call("models/list", json!({}))?;
        let found = list["models"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["id"] == "claude-nova-1").cloned());
        if let Some(f) = found {
            break f;
        }
        anyhow::ensure!(std::time::Instant::now() < deadline, "never learnt: {list}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(listed["source"], "api");
    assert_eq!(listed["contextWindow"], 2_000_000);
    assert!(
        daemon.data_dir().join("models.json").is_file(),
        "cached for a day"
    );

    let out = headless(
        &daemon,
        &["--model", "claude-nova-1", "--output-format", "json", "hi"],
    )?;
    assert!(out.status.success(), "{out:?}");
    let result: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(
        result["total_cost_usd"],
        Value::Null,
        "no price known: {result}"
    );
    assert_eq!(
        fake.server.message_requests()[0].body["model"],
        "claude-nova-1"
    );

    daemon.terminate()?;
    daemon.write_config("[models.\"claude-nova-1\"]\ninput = 1.0\noutput = 2.0\n")?;
    daemon.spawn()?;
    let out = headless(
        &daemon,
        &["--model", "claude-nova-1", "--output-format", "json", "hi"],
    )?;
    assert!(out.status.success(), "{out:?}");
    let result: Value = serde_json::from_slice(&out.stdout)?;
    assert!(
        result["total_cost_usd"].as_f64().is_some_and(|c| c > 0.0),
        "priced from config.toml: {result}"
    );
    Ok(())
}

#[test]
fn an_unknown_beta_is_reported_clearly_and_not_retried() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("unreachable")]))?;
    let mut env = fake.env();
    env.push(("ANTHROPIC_BETAS".into(), "made-up-beta-2099-01-01".into()));
    let daemon = Daemon::start_with(env)?;
    let out = headless(&daemon, &["say hi"])?;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("made-up-beta-2099-01-01"), "{err}");
    assert_eq!(
        fake.server.message_requests().len(),
        1,
        "a 400 is not retried"
    );
    Ok(())
}

#[test]
fn effort_set_with_a_slash_command_sticks_to_the_session() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("one"), Step::text("two")]))?;
    let mut daemon = Daemon::start_with(fake.env())?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&daemon.workdir())?;
    c.watch(&session)?;
    c.start_turn(&session, "/effort sideways")?;
    let events = c.events_until("turn_ended")?;
    let err = events
        .iter()
        .find(|e| e["type"] == "error")
        .context("an error event")?;
    assert_eq!(err["data"]["code"], "invalid_effort");
    assert!(
        err["data"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("claude-sonnet-5-5") && m.contains("xhigh")),
        "{err}"
    );
    c.start_turn(&session, "/effort xhigh")?;
    let events = c.events_until("turn_ended")?;
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "session_configured" && e["data"]["effort"] == "xhigh"),
        "every client sees the change"
    );
    c.start_turn(&session, "go")?;
    c.events_until("turn_ended")?;
    // It survives a restart.
    daemon.terminate()?;
    daemon.spawn()?;
    let mut c = daemon.ndjson()?;
    c.watch(&session)?;
    c.start_turn(&session, "again")?;
    c.events_until("turn_ended")?;
    let reqs = fake.server.message_requests();
    assert_eq!(reqs.len(), 2, "commands never reach the model");
    for r in &reqs {
        assert_eq!(r.body["output_config"]["effort"], "xhigh");
    }
    Ok(())
}
