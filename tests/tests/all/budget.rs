//! Budgets that hold: a session capped in dollars sends the model no request that would take
//! its spend past the cap, pauses where every client sees it, stays paused across a restart,
//! and goes on once the budget is raised.

use anyhow::Context;
use serde_json::{Value, json};
use tether_tests::Daemon;
use tether_tests::Fake;
use tether_tests::fake_anthropic::{Rule, Script, Step};

fn rule(matches: Option<&str>, step: Step) -> Rule {
    Rule {
        last_user_matches: matches.map(str::to_owned),
        has_tool_result: None,
        times: None,
        step,
    }
}

#[test]
fn a_looping_session_stops_at_its_budget_stays_paused_and_goes_on_when_raised() -> anyhow::Result<()>
{
    let mut script = Script::of(Vec::<Step>::new());
    script
        .rules
        .push(rule(Some("^stop now$"), Step::text("Stopped, as asked.")));
    // A model that never stops calling tools.
    script.rules.push(rule(
        None,
        Step::text("Once more.").tool_use("Bash", json!({"command": "true"})),
    ));
    let fake = Fake::start(script)?;
    let mut daemon = Daemon::start_with(fake.env())?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_with_mode(&daemon.workdir(), "bypassPermissions")?;
    c.call(
        "session/configure",
        json!({"sessionId": session, "budgetUsd": 0.05}),
    )?;
    let mut watcher = daemon.ndjson()?;
    watcher.watch(&session)?;
    c.watch(&session)?;
    c.start_turn(&session, "loop until told otherwise")?;
    let events = c.events_until("turn_ended")?;
    let end = events.last().context("end")?;
    assert_eq!(end["data"]["stopReason"], "budget_reached", "{end}");

    // No request went out once the spend plus its input would pass the cap.
    let spent: Vec<f64> = events
        .iter()
        .filter(|e| e["type"] == "usage_updated")
        .filter_map(|e| e["data"]["sessionCostUsd"].as_f64())
        .collect();
    let sent = fake.server.message_requests().len();
    assert_eq!(spent.len(), sent, "one usage update a request");
    assert!(sent >= 2, "the loop ran: {spent:?}");
    let before_last = spent[spent.len() - 2];
    assert!(before_last < 0.05, "{spent:?}");
    let reached = events
        .iter()
        .find(|e| e["type"] == "budget_reached")
        .context("budget_reached")?;
    let data = &reached["data"];
    let (at, next) = (
        data["spentUsd"].as_f64().context("spent")?,
        data["nextRequestUsd"].as_f64().context("next")?,
    );
    assert!(
        (at - spent[spent.len() - 1]).abs() < 1e-9,
        "{data} {spent:?}"
    );
    assert!(at + next > 0.05 && next > 0.0, "{data}");
    assert_eq!(data["budgetUsd"], 0.05);
    // Every client saw the pause.
    watcher.events_until("budget_reached")?;

    // Paused: a prompt is refused with the reason, and nothing reaches the model.
    let refused = c.request(
        "turn/start",
        json!({"sessionId": session, "input": [{"type": "text", "text": "stop now"}]}),
    )?;
    assert_eq!(refused["error"]["code"], -32010, "{refused}");
    let why = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(why.contains("budget") && why.contains("/budget"), "{why}");
    // `/compact` is a model request too, and waits like a prompt.
    let refused = c.request(
        "turn/start",
        json!({"sessionId": session, "input": [{"type": "text", "text": "/compact"}]}),
    )?;
    assert_eq!(refused["error"]["code"], -32010, "{refused}");
    let snapshot = c.call("session/get", json!({"sessionId": session}))?;
    assert_eq!(snapshot["budgetReached"], true, "{snapshot}");
    assert_eq!(snapshot["status"], "idle", "{snapshot}");

    // A restart keeps it paused.
    daemon.kill9()?;
    daemon.spawn()?;
    let mut c = daemon.ndjson()?;
    let snapshot = c.call("session/get", json!({"sessionId": session}))?;
    assert_eq!(snapshot["budgetReached"], true, "{snapshot}");
    assert_eq!(snapshot["budgetUsd"], 0.05, "{snapshot}");
    let refused = c.request(
        "turn/start",
        json!({"sessionId": session, "input": [{"type": "text", "text": "stop now"}]}),
    )?;
    assert_eq!(refused["error"]["code"], -32010, "{refused}");
    assert_eq!(fake.server.message_requests().len(), sent);

    // `/budget` answers while paused; `tether budget` raises the cap and the session goes on.
    c.watch(&session)?;
    c.start_turn(&session, "/budget")?;
    let told = c.events_until("turn_ended")?;
    let text: Value = told
        .iter()
        .find(|e| e["type"] == "notice")
        .map(|e| e["data"]["message"].clone())
        .unwrap_or_default();
    assert!(
        text.as_str().is_some_and(|t| t.contains("reached")),
        "{told:?}"
    );
    let out = daemon.run_tether(&["budget", &session, "1"])?;
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("budget $1.00"), "{said}");
    let snapshot = c.call("session/get", json!({"sessionId": session}))?;
    assert_eq!(snapshot["budgetReached"], false, "{snapshot}");
    c.start_turn(&session, "stop now")?;
    let events = c.events_until("turn_ended")?;
    let end = events.last().context("end")?;
    assert_eq!(end["data"]["stopReason"], "end_turn", "{end}");
    assert_eq!(fake.server.message_requests().len(), sent + 1);
    fake.no_rejections();
    Ok(())
}

/// The daemon's daily cap counts every session's spend, stops a looping one without pausing it,
/// and is remembered across a restart.
#[test]
fn the_daily_cap_stops_every_session_and_outlives_a_restart() -> anyhow::Result<()> {
    let mut script = Script::of(Vec::<Step>::new());
    script.rules.push(rule(
        None,
        Step::text("Once more.").tool_use("Bash", json!({"command": "true"})),
    ));
    let fake = Fake::start(script)?;
    let mut env = fake.env();
    env.push(("TETHER_DAILY_BUDGET_USD".into(), "0.04".into()));
    let mut daemon = Daemon::start_with(env)?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_with_mode(&daemon.workdir(), "bypassPermissions")?;
    c.watch(&session)?;
    c.start_turn(&session, "loop")?;
    let events = c.events_until("turn_ended")?;
    let end = events.last().context("end")?;
    assert_eq!(end["data"]["stopReason"], "budget_reached", "{end}");
    let reached = events
        .iter()
        .find(|e| e["type"] == "budget_reached")
        .context("budget_reached")?;
    assert_eq!(reached["data"]["daily"], true, "{reached}");
    assert_eq!(reached["data"]["budgetUsd"], 0.04, "{reached}");
    let spent = reached["data"]["spentUsd"].as_f64().context("spent")?;
    assert!(spent > 0.0, "{reached}");
    // The daily cap pauses no session: it has no budget of its own to raise.
    let snapshot = c.call("session/get", json!({"sessionId": session}))?;
    assert_eq!(snapshot["budgetReached"], false, "{snapshot}");

    // Another session, after a restart, is told what the day has spent.
    daemon.kill9()?;
    daemon.spawn()?;
    let mut c = daemon.ndjson()?;
    let other = c.new_session_with_mode(&daemon.workdir(), "bypassPermissions")?;
    c.watch(&other)?;
    c.start_turn(&other, "/budget")?;
    let told = c.events_until("turn_ended")?;
    let text = told
        .iter()
        .find(|e| e["type"] == "notice")
        .and_then(|e| e["data"]["message"].as_str())
        .unwrap_or_default()
        .to_owned();
    assert!(
        text.contains(&format!(
            "today all sessions spent ${spent:.4} of the daemon's daily $0.04"
        )),
        "{text}"
    );
    fake.no_rejections();
    Ok(())
}
