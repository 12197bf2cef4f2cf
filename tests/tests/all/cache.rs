//! What a session costs in cache terms: a prompt prefix (tools, system) fixed at the first turn
//! and sent byte for byte ever after — across restarts, idle unloads and model changes, with what
//! changes told at the tail — and the cache lifetimes each kind of turn gets.

use anyhow::Context;
use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake, Ndjson, WAIT};

/// A connection that says it is a terminal, as `tether` does.
fn terminal(daemon: &Daemon) -> anyhow::Result<Ndjson> {
    daemon.ndjson()?.as_terminal()
}

fn git(dir: &std::path::Path, args: &[&str]) -> anyhow::Result<()> {
    let ok = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .status()?
        .success();
    anyhow::ensure!(ok, "git {args:?} failed");
    Ok(())
}

fn turn(c: &mut Ndjson, session: &str, text: &str) -> anyhow::Result<Vec<Value>> {
    c.start_turn(session, text)?;
    c.events_until("turn_ended")
}

/// The request a prompt was sent in (the last user message's first block is the prompt).
fn request_for<'a>(
    reqs: &'a [tether_tests::fake_anthropic::Recorded],
    prompt: &str,
) -> anyhow::Result<&'a Value> {
    reqs.iter()
        .map(|r| &r.body)
        .find(|b| {
            b["messages"]
                .as_array()
                .and_then(|m| m.last())
                .is_some_and(|m| m["content"][0]["text"] == prompt)
        })
        .with_context(|| format!("no request for {prompt:?}"))
}

#[test]
fn the_prompt_prefix_is_byte_identical_across_restart_unload_and_model_change() -> anyhow::Result<()>
{
    let fake = Fake::start(Script::of((0..5).map(|i| Step::text(format!("reply {i}")))))?;
    let mut env = fake.env();
    env.push(("TETHER_IDLE_UNLOAD".into(), "300ms".into()));
    let mut daemon = Daemon::start_with(env)?;
    let work = daemon.workdir();
    std::fs::write(work.join("CLAUDE.md"), "Use tabs.\n")?;
    git(&work, &["init", "-q"])?;
    git(&work, &["add", "."])?;
    git(&work, &["commit", "-qm", "first"])?;

    let mut c = terminal(&daemon)?;
    let session = c.new_session_in(&work)?;
    c.watch(&session)?;
    let first = turn(&mut c, &session, "one")?;
    assert!(
        first.iter().any(|e| e["type"] == "system_prompt"),
        "the prefix is logged at the first turn"
    );

    // The working tree and the memory change; the model is told at the tail.
    std::fs::write(work.join("new.txt"), "x")?;
    turn(&mut c, &session, "# the build uses make")?;
    let second = turn(&mut c, &session, "two")?;
    let update = second
        .iter()
        .find(|e| e["type"] == "context_updated")
        .context("a context update")?;
    assert!(
        update["data"]["git"]
            .as_str()
            .is_some_and(|g| g.contains("new.txt"))
    );
    assert!(
        update["data"]["memory"]
            .as_str()
            .is_some_and(|m| m.contains("the build uses make"))
    );
    let unchanged = turn(&mut c, &session, "three")?;
    assert!(
        !unchanged.iter().any(|e| e["type"] == "context_updated"),
        "nothing changed since"
    );

    turn(&mut c, &session, "/model opus")?;
    turn(&mut c, &session, "after the model change")?;

    daemon.terminate()?;
    daemon.spawn()?;
    let mut c = terminal(&daemon)?;
    c.watch(&session)?;
    turn(&mut c, &session, "after the restart")?;
    drop(c);

    // Nobody attached: the session unloads, then reloads for the next turn.
    let deadline = Instant::now() + WAIT;
    loop {
        let status = daemon.ndjson()?.call("daemon/status", json!({}))?;
        if status["loadedSessions"] == 0 {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "never unloaded: {status}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut c = terminal(&daemon)?;
    c.watch(&session)?;
    turn(&mut c, &session, "after the unload")?;

    let reqs = fake.server.message_requests();
    let base = request_for(&reqs, "one")?;
    for prompt in [
        "two",
        "three",
        "after the model change",
        "after the restart",
        "after the unload",
    ] {
        let body = request_for(&reqs, prompt)?;
        assert_eq!(
            body["system"].to_string(),
            base["system"].to_string(),
            "system of {prompt:?}"
        );
        assert_eq!(
            body["tools"].to_string(),
            base["tools"].to_string(),
            "tools of {prompt:?}"
        );
    }
    let two = request_for(&reqs, "two")?;
    let last = two["messages"]
        .as_array()
        .and_then(|m| m.last())
        .context("messages")?;
    assert!(
        last["content"].to_string().contains("<context-update>"),
        "the update joins the prompt's message: {last}"
    );
    assert_eq!(
        request_for(&reqs, "after the model change")?["model"],
        "claude-opus-5-5"
    );
    for r in &reqs {
        assert!(r.rejected.is_none(), "{:?}", r.rejected);
    }
    Ok(())
}

#[test]
fn interactive_turns_cache_the_prefix_for_an_hour_and_scripts_for_five_minutes()
-> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::default().tool_use("Glob", json!({"pattern": "*"})),
        Step::text("a"),
        Step::text("b"),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut c = terminal(&daemon)?;
    let session = c.new_session_in(&daemon.workdir())?;
    c.watch(&session)?;
    turn(&mut c, &session, "from a terminal")?;
    let out = daemon.run_tether(&["-p", "from a script"])?;
    assert!(out.status.success(), "{out:?}");

    let reqs = fake.server.message_requests();
    let one_hour = json!({"type": "ephemeral", "ttl": "1h"});
    let five_minutes = json!({"type": "ephemeral"});
    let last_of = |v: &Value, key: &str| -> anyhow::Result<Value> {
        let last = v[key]
            .as_array()
            .and_then(|a| a.last())
            .with_context(|| format!("no {key}"))?;
        Ok(last["cache_control"].clone())
    };
    let t = request_for(&reqs, "from a terminal")?;
    assert_eq!(last_of(t, "tools")?, one_hour);
    assert_eq!(last_of(t, "system")?, one_hour);
    assert_eq!(
        t["messages"][0]["content"][0]["cache_control"], one_hour,
        "a turn's prompt is kept for the hour a pause may take"
    );
    // The request after the tool call: the prompt for the hour, the moving tail 5 minutes.
    let after_tool = reqs
        .iter()
        .map(|r| &r.body)
        .find(|b| b["messages"].as_array().is_some_and(|m| m.len() == 3))
        .context("the request with the tool's result")?;
    assert_eq!(
        after_tool["messages"][0]["content"][0]["cache_control"],
        one_hour
    );
    assert_eq!(
        after_tool["messages"][2]["content"][0]["cache_control"], five_minutes,
        "the moving tail keeps 5 minutes"
    );
    let s = request_for(&reqs, "from a script")?;
    assert_eq!(last_of(s, "system")?, five_minutes);
    assert_eq!(
        s["messages"][0]["content"][0]["cache_control"],
        five_minutes
    );
    for r in &reqs {
        assert!(r.rejected.is_none(), "{:?}", r.rejected);
    }
    Ok(())
}

fn billed(body_usage: &Value) -> (u64, u64, u64) {
    let n = |k: &str| body_usage[k].as_u64().unwrap_or(0);
    (
        n("inputTokens"),
        n("cacheCreationInputTokens"),
        n("cacheReadInputTokens"),
    )
}

#[test]
fn the_prefix_is_read_from_the_cache_after_a_restart_and_after_a_six_minute_pause()
-> anyhow::Result<()> {
    let fake = Fake::start(
        Script::of((0..4).map(|i| Step::text(format!("reply {i}")))).with_prompt_cache(),
    )?;
    let mut daemon = Daemon::start_with(fake.env())?;
    let mut c = terminal(&daemon)?;
    let session = c.new_session_in(&daemon.workdir())?;
    c.watch(&session)?;
    let usage_of = |events: &[Value]| -> anyhow::Result<(u64, u64, u64)> {
        let ended = events.last().context("turn_ended")?;
        Ok(billed(&ended["data"]["usage"]))
    };
    let (_, written, read) = usage_of(&turn(&mut c, &session, "one")?)?;
    assert!(
        written > 1000 && read == 0,
        "the first turn writes the prefix"
    );
    let (_, _, read) = usage_of(&turn(&mut c, &session, "two")?)?;
    assert!(
        read >= written,
        "the second reads all the first wrote: {read} < {written}"
    );

    daemon.terminate()?;
    daemon.spawn()?;
    let mut c = terminal(&daemon)?;
    c.watch(&session)?;
    let (_, _, read_before) = usage_of(&turn(&mut c, &session, "after a restart")?)?;
    assert!(
        read_before >= written,
        "a restart keeps the prefix cached: {read_before}"
    );

    fake.server.advance(Duration::from_secs(6 * 60));
    let (_, rewritten, read) = usage_of(&turn(&mut c, &session, "after a pause")?)?;
    assert!(
        read >= written / 2 && rewritten < written,
        "the hour-long prefix outlives a 6-minute pause: read {read}, wrote {rewritten}"
    );
    assert!(
        read > read_before,
        "the conversation up to the last prompt outlives the pause too: read {read}, {read_before} before it"
    );
    let cost = turn(&mut c, &session, "/cost")?;
    let said = cost
        .iter()
        .find(|e| e["type"] == "notice")
        .and_then(|e| e["data"]["message"].as_str())
        .context("a /cost notice")?;
    assert!(
        said.contains("the cache served") && said.contains("saving about $"),
        "{said}"
    );
    let snapshot = c.call("session/get", json!({"sessionId": session}))?;
    assert!(
        snapshot["costUsd"].as_f64().is_some_and(|c| c > 0.0),
        "{snapshot}"
    );
    for r in fake.server.message_requests() {
        assert!(r.rejected.is_none(), "{:?}", r.rejected);
    }
    Ok(())
}
