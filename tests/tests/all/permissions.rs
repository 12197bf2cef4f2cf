//! The permission broker end to end: one prompt, many clients, the first answer wins, nothing
//! lost across disconnects and restarts.

use anyhow::Context;
use serde_json::{Value, json};
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake, Ndjson};

fn echo_turn() -> Vec<Step> {
    vec![
        Step::default().tool_use("Bash", json!({"command": "xargs echo from-the-tool"})),
        Step::text("done"),
    ]
}

fn attach(daemon: &Daemon, session: &str, role: &str) -> anyhow::Result<Ndjson> {
    let mut c = daemon.ndjson()?;
    c.call(
        "session/subscribe",
        json!({"sessionId": session, "since": "head", "role": role}),
    )?;
    c.events_until("client_attached")?;
    Ok(c)
}

/// The data of the next permission request `c` sees.
fn next_request(c: &mut Ndjson) -> anyhow::Result<Value> {
    Ok(c.events_until("permission_requested")?
        .last()
        .context("a permission request")?["data"]
        .clone())
}

/// Answers `request` with `answer` (`decision`, optional `message`).
fn respond(c: &mut Ndjson, session: &str, request: &Value, answer: Value) -> anyhow::Result<Value> {
    let mut params = json!({"sessionId": session, "requestId": request["requestId"]});
    if let (Some(p), Some(a)) = (params.as_object_mut(), answer.as_object()) {
        p.extend(a.clone());
    }
    c.call("permission/respond", params)
}

fn conn_id(c: &mut Ndjson) -> anyhow::Result<Value> {
    Ok(c.call(
        "initialize",
        json!({"protocolVersion": 1, "clientInfo": {"name": "t", "kind": "tui"}}),
    )?["connectionId"]
        .clone())
}

#[test]
fn the_first_controller_answer_wins_and_everyone_sees_who() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of(echo_turn()))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut setup = daemon.ndjson()?;
    let session = setup.new_session_with_mode(&daemon.workdir(), "default")?;
    let mut a = daemon.ndjson()?;
    let a_id = conn_id(&mut a)?;
    a.call(
        "session/subscribe",
        json!({"sessionId": session, "since": "head"}),
    )?;
    a.events_until("client_attached")?;
    let mut b = attach(&daemon, &session, "controller")?;
    let mut observer = attach(&daemon, &session, "observer")?;
    a.events_until("client_attached")?;
    a.events_until("client_attached")?;

    a.start_turn(&session, "say it")?;
    let mut request_ids = Vec::new();
    for c in [&mut a, &mut b, &mut observer] {
        let asked = c.events_until("permission_requested")?;
        let req = asked.last().context("request")?;
        assert_eq!(req["data"]["tool"], "Bash");
        assert_eq!(req["data"]["preview"], "xargs echo from-the-tool");
        assert_eq!(req["data"]["rule"], "Bash(xargs echo:*)");
        request_ids.push(req["data"]["requestId"].clone());
    }
    assert!(request_ids.windows(2).all(|w| w[0] == w[1]));
    let request = request_ids[0].clone();
    let snapshot = b.call("session/get", json!({"sessionId": session}))?;
    assert_eq!(snapshot["status"], "awaiting_permission");
    assert_eq!(snapshot["pendingPermissions"][0]["requestId"], request);

    let refused = observer.request(
        "permission/respond",
        json!({"sessionId": session, "requestId": request, "decision": "allow_once"}),
    )?;
    assert_eq!(refused["error"]["code"], -32003);
    // Nor may it cancel the turn or change the session.
    for (method, params) in [
        ("turn/cancel", json!({"sessionId": session})),
        (
            "session/configure",
            json!({"sessionId": session, "permissionMode": "bypassPermissions"}),
        ),
    ] {
        let refused = observer.request(method, params)?;
        assert_eq!(refused["error"]["code"], -32003, "{method}: {refused}");
    }
    let first = a.call(
        "permission/respond",
        json!({"sessionId": session, "requestId": request, "decision": "allow_once"}),
    )?;
    assert_eq!(first["status"], "accepted");
    let second = b.call(
        "permission/respond",
        json!({"sessionId": session, "requestId": request, "decision": "deny"}),
    )?;
    assert_eq!(second["status"], "already_resolved");
    assert_eq!(second["decision"], "allow_once");
    assert_eq!(second["resolvedBy"]["clientId"], a_id);
    for c in [&mut a, &mut b, &mut observer] {
        let resolved = c.events_until("permission_resolved")?;
        let r = resolved.last().context("resolved")?;
        assert_eq!(r["data"]["decision"], "allow_once");
        assert_eq!(r["data"]["resolvedBy"]["clientId"], a_id);
        let end = c.events_until("turn_ended")?;
        let result = end
            .iter()
            .find(|e| e["type"] == "tool_result")
            .context("result")?;
        assert_eq!(result["data"]["content"], "from-the-tool\n");
    }
    Ok(())
}

#[test]
fn a_request_outlives_its_clients_and_a_later_client_answers() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of(echo_turn()))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_with_mode(&daemon.workdir(), "default")?;
    c.watch(&session)?;
    c.start_turn(&session, "say it")?;
    c.events_until("permission_requested")?;
    drop(c);

    let mut late = daemon.ndjson()?;
    late.subscribe(&session, json!(0))?;
    let replay = late.events_until("replay_complete")?;
    let req = replay
        .iter()
        .find(|e| e["type"] == "permission_requested")
        .context("replayed")?;
    let request = req["data"]["requestId"].clone();
    let listed = late.call("permission/list", json!({"sessionId": session}))?;
    assert_eq!(listed[0]["requestId"], request);
    late.call(
        "permission/respond",
        json!({"sessionId": session, "requestId": request, "decision": "allow_once"}),
    )?;
    let end = late.events_until("turn_ended")?;
    assert_eq!(end.last().context("end")?["data"]["stopReason"], "end_turn");
    Ok(())
}

#[test]
fn a_pending_request_survives_kill_9_and_answering_it_resumes_the_turn() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::default()
            .tool_use("Bash", json!({"command": "xargs echo from-the-tool"}))
            .tool_use("Bash", json!({"command": "xargs echo second-tool"})),
        Step::text("both ran"),
        Step::text("after the restart"),
    ]))?;
    let mut daemon = Daemon::start_with(fake.env())?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_with_mode(&daemon.workdir(), "default")?;
    c.watch(&session)?;
    c.start_turn(&session, "say it")?;
    let request = c
        .events_until("permission_requested")?
        .last()
        .context("req")?["data"]["requestId"]
        .clone();
    daemon.kill9()?;
    daemon.spawn()?;

    let mut c = daemon.ndjson()?;
    let seen = c.replay_until(&session, |s| {
        s.iter().any(|e| e["type"] == "turn_recovered")
    })?;
    let recovered = seen
        .iter()
        .find(|e| e["type"] == "turn_recovered")
        .context("recovered")?;
    assert_eq!(recovered["data"]["action"], "awaiting_permission");
    assert!(
        seen.iter().all(|e| e["type"] != "turn_ended"),
        "the turn stays open"
    );
    assert!(seen.iter().all(|e| e["type"] != "permission_resolved"));
    let pending = c.call("permission/list", json!({"sessionId": session}))?;
    assert_eq!(pending[0]["requestId"], request, "{pending}");
    let status = c.call("session/get", json!({"sessionId": session}))?["status"].clone();
    assert_eq!(status, "awaiting_permission");

    // Answering the old request resumes the turn: the tool runs once, the next call asks.
    let answer = c.call(
        "permission/respond",
        json!({"sessionId": session, "requestId": request, "decision": "allow_once"}),
    )?;
    assert_eq!(answer["status"], "accepted");
    let next = c.events_until("permission_requested")?;
    let first = next
        .iter()
        .find(|e| e["type"] == "tool_result")
        .context("first result")?;
    assert!(
        first["data"]["content"]
            .as_str()
            .is_some_and(|t| t.contains("from-the-tool"))
    );
    let second = next.last().context("second request")?["data"]["requestId"].clone();
    c.call(
        "permission/respond",
        json!({"sessionId": session, "requestId": second, "decision": "allow_once"}),
    )?;
    let end = c.events_until("turn_ended")?;
    assert_eq!(end.last().context("end")?["data"]["stopReason"], "end_turn");
    let calls_logged = c.replay_until(&session, |_| true)?;
    let first_calls = calls_logged
        .iter()
        .filter(|e| {
            e["type"] == "tool_call" && e["data"]["input"]["command"] == "xargs echo from-the-tool"
        })
        .count();
    assert_eq!(first_calls, 1, "the call is logged once and run once");

    c.start_turn(&session, "again")?;
    let end = c.events_until("turn_ended")?;
    assert_eq!(end.last().context("end")?["data"]["stopReason"], "end_turn");
    for r in fake.server.message_requests() {
        assert!(r.rejected.is_none(), "{:?}", r.rejected);
    }
    Ok(())
}

#[test]
fn allow_always_is_saved_and_deny_messages_reach_the_model() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::default().tool_use("Bash", json!({"command": "touch one"})),
        Step::text("ok"),
        Step::default().tool_use("Bash", json!({"command": "touch two"})),
        Step::text("ok again"),
        Step::default().tool_use("Bash", json!({"command": "rm -rf build"})),
        Step::text("understood"),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_with_mode(&daemon.workdir(), "default")?;
    c.watch(&session)?;

    c.start_turn(&session, "first")?;
    let req = next_request(&mut c)?;
    assert_eq!(req["rule"], "Bash(touch one:*)");
    respond(&mut c, &session, &req, json!({"decision": "allow_always"}))?;
    c.events_until("turn_ended")?;
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(
        daemon.workdir().join(".claude/settings.local.json"),
    )?)?;
    assert_eq!(saved["permissions"]["allow"], json!(["Bash(touch one:*)"]));

    // A call the settings file allows does not ask (the file is read on every check).
    std::fs::write(
        daemon.workdir().join(".claude/settings.local.json"),
        r#"{"permissions": {"allow": ["Bash(touch:*)"]}}"#,
    )?;
    c.start_turn(&session, "second")?;
    let events = c.events_until("turn_ended")?;
    assert!(
        !events.iter().any(|e| e["type"] == "permission_requested"),
        "the rule allowed it"
    );

    c.start_turn(&session, "third")?;
    let req = next_request(&mut c)?;
    respond(
        &mut c,
        &session,
        &req,
        json!({"decision": "deny", "message": "never delete the build dir"}),
    )?;
    let events = c.events_until("turn_ended")?;
    let result = events
        .iter()
        .find(|e| e["type"] == "tool_result")
        .context("result")?;
    assert_eq!(result["data"]["isError"], true);
    let reqs = fake.server.message_requests();
    let last = reqs[5].body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .context("last")?
        .clone();
    assert!(
        last["content"][0]["content"]
            .as_str()
            .is_some_and(|s| s.contains("never delete the build dir")),
        "{last}"
    );
    Ok(())
}

#[test]
fn plan_mode_refuses_changes_without_asking() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of(echo_turn()))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_with_mode(&daemon.workdir(), "plan")?;
    c.watch(&session)?;
    c.start_turn(&session, "do it")?;
    let events = c.events_until("turn_ended")?;
    assert!(!events.iter().any(|e| e["type"] == "permission_requested"));
    let result = events
        .iter()
        .find(|e| e["type"] == "tool_result")
        .context("result")?;
    assert!(
        result["data"]["content"]
            .as_str()
            .is_some_and(|s| s.contains("plan mode"))
    );
    Ok(())
}

#[test]
fn hooks_block_add_context_force_a_stop_and_time_out() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::default().tool_use("Bash", json!({"command": "rm -rf build"})),
        Step::default().tool_use("Bash", json!({"command": "echo hi"})),
        Step::text("done"),
        Step::text("summary written"),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let work = daemon.workdir();
    std::fs::create_dir_all(work.join(".claude"))?;
    let settings = json!({"hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command",
            "command": "grep -q '\"command\":\"rm ' && { echo 'rm is not allowed' >&2; exit 2; }; exit 0"}]}],
        "PostToolUse": [{"matcher": "Bash", "hooks": [{"type": "command",
            "command": "echo '{\"hookSpecificOutput\": {\"additionalContext\": \"post-hook was here\"}}'"}]}],
        "Stop": [{"hooks": [{"type": "command",
            "command": "test -f stopped-once && exit 0; touch stopped-once; echo 'also write the summary' >&2; exit 2"}]}],
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "sleep 5", "timeout": 0.3}]}]
    }});
    std::fs::write(work.join(".claude/settings.json"), settings.to_string())?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&work)?;
    c.watch(&session)?;
    c.start_turn(&session, "clean up")?;
    let events = c.events_until("turn_ended")?;
    assert_eq!(
        events.last().context("end")?["data"]["stopReason"],
        "end_turn"
    );
    let notices: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "notice")
        .filter_map(|e| e["data"]["message"].as_str())
        .collect();
    assert!(
        notices.iter().any(|n| n.contains("did not finish")),
        "the hanging hook timed out: {notices:?}"
    );
    let results: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 2);
    assert!(
        results[0]["data"]["content"]
            .as_str()
            .is_some_and(|s| s.contains("rm is not allowed")),
        "{}",
        results[0]
    );
    assert_eq!(results[0]["data"]["isError"], true);
    assert!(
        results[1]["data"]["content"]
            .as_str()
            .is_some_and(|s| s.starts_with("hi\n") && s.contains("post-hook was here"))
    );
    let cont = events
        .iter()
        .find(|e| e["type"] == "continuation")
        .context("stop hook continuation")?;
    assert!(
        cont["data"]["prompt"]
            .as_str()
            .is_some_and(|p| p.contains("also write the summary"))
    );
    let reqs = fake.server.message_requests();
    assert_eq!(reqs.len(), 4, "the Stop hook forced one more model call");
    for r in reqs {
        assert!(r.rejected.is_none(), "{:?}", r.rejected);
    }
    Ok(())
}

#[test]
fn a_hook_written_for_claude_code_reads_its_fields_and_rewrites_the_input() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::default().tool_use("Bash", json!({"command": "echo original"})),
        Step::text("done"),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let work = daemon.workdir();
    std::fs::create_dir_all(work.join(".claude"))?;
    // Keeps what it was given, then allows the call with another command.
    let script = r#"import json, sys
seen = json.load(sys.stdin)
json.dump(seen, open("seen.json", "w"))
print(json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse",
    "permissionDecision": "allow", "updatedInput": {"command": "echo rewritten"}}}))
"#;
    std::fs::write(work.join("hook.py"), script)?;
    let settings = json!({"hooks": {"PreToolUse": [{"matcher": "Bash",
        "hooks": [{"type": "command", "command": "python3 hook.py"}]}]}});
    std::fs::write(work.join(".claude/settings.json"), settings.to_string())?;
    let mut c = daemon.ndjson()?;
    // In the default mode only the hook's "allow" lets the call run without asking.
    let session = c.new_session_with_mode(&work, "default")?;
    c.watch(&session)?;
    c.start_turn(&session, "run it")?;
    let events = c.events_until("turn_ended")?;
    assert!(!events.iter().any(|e| e["type"] == "permission_requested"));
    let call = events
        .iter()
        .find(|e| e["type"] == "tool_call")
        .context("call")?;
    let result = events
        .iter()
        .find(|e| e["type"] == "tool_result")
        .context("result")?;
    assert_eq!(result["data"]["content"], "rewritten\n", "{result}");
    let seen: Value = serde_json::from_str(&std::fs::read_to_string(work.join("seen.json"))?)?;
    assert_eq!(seen["hook_event_name"], "PreToolUse");
    assert_eq!(seen["tool_use_id"], call["data"]["toolCallId"]);
    assert_eq!(seen["permission_mode"], "default");
    assert_eq!(seen["session_id"], session);
    assert_eq!(seen["tool_input"]["command"], "echo original");
    Ok(())
}

#[test]
fn claude_codes_newer_hook_events_fire_with_a_transcript_and_the_project_dir() -> anyhow::Result<()>
{
    let fake = Fake::start(Script::of([
        Step::default().tool_use("Read", json!({"file_path": "/nonexistent/file.txt"})),
        Step::default().tool_use(
            "Agent",
            json!({"description": "look", "prompt": "Look around.", "subagent_type": "Explore"}),
        ),
        Step::text("Looked."),
        Step::text("All done."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let work = daemon.workdir();
    std::fs::create_dir_all(work.join(".claude"))?;
    // Each hook appends what it got (and the project dir) to a log, one JSON line per run.
    let script = r#"import json, os, sys
seen = json.load(sys.stdin)
seen["project_dir"] = os.environ.get("CLAUDE_PROJECT_DIR")
if seen.get("transcript_path"):
    seen["transcript"] = [json.loads(l) for l in open(seen["transcript_path"])]
open("hooks.log", "a").write(json.dumps(seen) + "\n")
if seen["hook_event_name"] == "SubagentStart":
    print(json.dumps({"hookSpecificOutput": {"hookEventName": "SubagentStart",
        "additionalContext": "Mind the vendored code."}}))
"#;
    std::fs::write(work.join("hook.py"), script)?;
    let hook = json!([{"hooks": [{"type": "command", "command": "python3 hook.py"}]}]);
    let settings = json!({"hooks": {
        "PostToolUseFailure": hook, "SubagentStart": hook, "SubagentStop": hook,
        "TeammateIdle": hook, "NoSuchEvent": hook,
    }});
    std::fs::write(work.join(".claude/settings.json"), settings.to_string())?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&work)?;
    c.watch(&session)?;
    c.start_turn(&session, "read the file, then explore")?;
    let events = c.events_until("turn_ended")?;
    let notices: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "notice")
        .filter_map(|e| e["data"]["message"].as_str())
        .collect();
    assert!(
        notices
            .iter()
            .any(|n| n.contains("tether does not run TeammateIdle hooks")),
        "{notices:?}"
    );
    assert!(
        notices
            .iter()
            .any(|n| n.contains("unknown hook event \"NoSuchEvent\"")),
        "{notices:?}"
    );
    let log = std::fs::read_to_string(work.join("hooks.log"))?;
    let runs: Vec<Value> = log
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let of = |name: &str| runs.iter().find(|r| r["hook_event_name"] == name).cloned();
    let failure = of("PostToolUseFailure").context("PostToolUseFailure ran")?;
    assert_eq!(failure["tool_name"], "Read");
    assert!(
        failure["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{failure}"
    );
    assert_eq!(failure["project_dir"], work.display().to_string());
    // The transcript holds the conversation up to the call, as Claude Code writes it.
    let transcript = failure["transcript"].as_array().context("a transcript")?;
    assert_eq!(transcript[0]["type"], "user");
    assert_eq!(
        transcript[0]["message"]["content"][0]["text"],
        "read the file, then explore"
    );
    assert_eq!(transcript[1]["type"], "assistant");
    let start = of("SubagentStart").context("SubagentStart ran")?;
    assert_eq!(start["agent_type"], "Explore");
    let stop = of("SubagentStop").context("SubagentStop ran")?;
    assert_eq!(stop["agent_type"], "Explore");
    assert_eq!(stop["last_assistant_message"], "Looked.");
    // The start hook's context reached the sub-agent.
    let child = &fake.server.message_requests()[2].body;
    assert!(
        child["messages"][0]
            .to_string()
            .contains("Mind the vendored code."),
        "{child}"
    );
    Ok(())
}

#[test]
fn a_cancel_is_answered_while_a_prompt_hook_runs() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of(echo_turn()))?;
    let daemon = Daemon::start_with(fake.env())?;
    let work = daemon.workdir();
    std::fs::create_dir_all(work.join(".claude"))?;
    let settings = json!({"hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command",
        "command": "touch hook-started; sleep 30; touch hook-finished", "timeout": 60}]}]}});
    std::fs::write(work.join(".claude/settings.json"), settings.to_string())?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&work)?;
    c.watch(&session)?;
    let turn = c.start_turn(&session, "hello")?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !work.join("hook-started").exists() {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the hook never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // While the hook runs, the session answers: it shows the turn running, and a cancel takes.
    let asked = std::time::Instant::now();
    let snapshot = c.call("session/get", json!({"sessionId": session}))?;
    assert_eq!(snapshot["runningTurn"], json!(turn));
    let r = c.call("turn/cancel", json!({"sessionId": session}))?;
    assert_eq!(r["cancelled"], true);
    let events = c.events_until("turn_ended")?;
    assert!(
        asked.elapsed() < std::time::Duration::from_secs(20),
        "the cancel waited for the hook ({:?})",
        asked.elapsed()
    );
    let end = events.last().context("end")?;
    assert_eq!(end["turnId"], json!(turn));
    assert_eq!(end["data"]["stopReason"], "cancelled");
    assert!(
        fake.server.message_requests().is_empty(),
        "the model was asked"
    );
    assert!(!work.join("hook-finished").exists());
    // The session goes on at once, without the hook.
    std::fs::remove_file(work.join(".claude/settings.json"))?;
    c.start_turn(&session, "again")?;
    let events = c.events_until("turn_ended")?;
    assert_eq!(
        events.last().context("end")?["data"]["stopReason"],
        "end_turn"
    );
    Ok(())
}

#[test]
fn an_unattended_session_follows_its_no_controller_policy() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of(echo_turn()))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut script = daemon.ndjson()?;
    let session = script.new_session_with_mode(&daemon.workdir(), "default")?;
    let summary = script.call(
        "session/configure",
        json!({"sessionId": session, "onNoController": {"action": "deny", "timeoutMs": 100}}),
    )?;
    assert_eq!(
        summary["onNoController"],
        json!({"action": "deny", "timeoutMs": 100})
    );
    let mut watcher = attach(&daemon, &session, "observer")?;
    script.start_turn(&session, "go")?;
    let events = watcher.events_until("turn_ended")?;
    let resolved = events
        .iter()
        .find(|e| e["type"] == "permission_resolved")
        .context("resolved")?;
    assert_eq!(resolved["data"]["decision"], "deny");
    assert_eq!(resolved["data"]["resolvedBy"], Value::Null);
    let result = events
        .iter()
        .find(|e| e["type"] == "tool_result")
        .context("result")?;
    assert!(
        result["data"]["content"]
            .as_str()
            .is_some_and(|s| s.contains("onNoController")),
        "{result}"
    );
    Ok(())
}

#[test]
fn the_rules_in_effect_are_listed_with_where_each_comes_from() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of(echo_turn()))?;
    let daemon = Daemon::start_with(fake.env())?;
    let settings = daemon.workdir().join(".claude/settings.json");
    std::fs::create_dir_all(settings.parent().context("dir")?)?;
    std::fs::write(
        &settings,
        r#"{"permissions": {"allow": ["Edit(src/**)"], "deny": ["Read(./.env)", "Bash(oops"]}}"#,
    )?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_with_mode(&daemon.workdir(), "default")?;
    c.watch(&session)?;
    c.start_turn(&session, "echo")?;
    let req = next_request(&mut c)?;
    respond(&mut c, &session, &req, json!({"decision": "allow_session"}))?;
    c.events_until("turn_ended")?;

    let rules = c.call("permission/rules", json!({"sessionId": session}))?;
    assert_eq!(rules["mode"], "default");
    let file = settings.display().to_string();
    assert_eq!(
        rules["rules"],
        json!([
            {"kind": "deny", "rule": "Read(./.env)", "source": file},
            {"kind": "allow", "rule": "Edit(src/**)", "source": file},
            {"kind": "allow", "rule": "Bash(xargs echo:*)", "source": "session"},
        ])
    );
    let problems = rules["problems"].as_array().context("problems")?;
    assert!(
        problems.len() == 1
            && problems[0]
                .as_str()
                .is_some_and(|p| p.contains(&file) && p.contains("Bash(oops")),
        "{problems:?}"
    );

    let unknown = c.request(
        "permission/rules",
        json!({"sessionId": "00000000-0000-0000-0000-000000000000"}),
    )?;
    assert!(unknown["error"]["message"].is_string(), "{unknown}");
    Ok(())
}

#[test]
fn always_allowing_a_compound_command_covers_every_part_and_read_only_commands_never_ask()
-> anyhow::Result<()> {
    let compound = "echo x > f && cat f";
    let fake = Fake::start(Script::of([
        Step::default().tool_use("Bash", json!({"command": compound})),
        Step::text("first"),
        Step::default().tool_use("Bash", json!({"command": compound})),
        Step::text("second"),
        Step::default().tool_use("Bash", json!({"command": "ls -la && date && pwd"})),
        Step::text("third"),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_with_mode(&daemon.workdir(), "default")?;
    c.watch(&session)?;

    c.start_turn(&session, "write and show")?;
    let req = next_request(&mut c)?;
    assert_eq!(
        req["rules"],
        json!(["Bash(echo x > f)"]),
        "cat only reads: {req}"
    );
    respond(&mut c, &session, &req, json!({"decision": "allow_always"}))?;
    c.events_until("turn_ended")?;
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(
        daemon.workdir().join(".claude/settings.local.json"),
    )?)?;
    assert_eq!(saved["permissions"]["allow"], json!(["Bash(echo x > f)"]));

    for prompt in ["again", "look around"] {
        c.start_turn(&session, prompt)?;
        let events = c.events_until("turn_ended")?;
        assert!(
            !events.iter().any(|e| e["type"] == "permission_requested"),
            "{prompt}: asked again"
        );
        let result = events
            .iter()
            .find(|e| e["type"] == "tool_result")
            .context("result")?;
        assert_eq!(result["data"]["isError"], false, "{result}");
    }
    assert_eq!(std::fs::read_to_string(daemon.workdir().join("f"))?, "x\n");
    Ok(())
}

#[test]
fn settings_files_give_new_sessions_their_mode_and_model_and_every_key_is_listed()
-> anyhow::Result<()> {
    let fake = Fake::start(Script::of(echo_turn()))?;
    let daemon = Daemon::start_with(fake.env())?;
    let work = daemon.workdir();
    std::fs::create_dir_all(work.join(".claude"))?;
    std::fs::write(
        work.join(".claude/settings.local.json"),
        json!({"permissions": {"defaultMode": "acceptEdits", "allow": []},
            "model": "haiku", "statusLine": {"type": "command", "command": "echo hi"},
            "outputStyle": "Explanatory", "spinnerTipsEnabled": false})
        .to_string(),
    )?;
    let mut c = daemon.ndjson()?;
    let created = c.call("session/new", json!({"cwd": work}))?;
    let session = created["sessionId"].as_str().context("session")?;
    let got = c.call("session/get", json!({"sessionId": session}))?;
    assert_eq!(got["permissionMode"], "acceptEdits", "{got}");
    assert_eq!(got["model"], "haiku", "{got}");
    // What the creator says still wins.
    let explicit = c.call(
        "session/new",
        json!({"cwd": work, "permissionMode": "plan", "model": "opus"}),
    )?;
    let got = c.call("session/get", json!({"sessionId": explicit["sessionId"]}))?;
    assert_eq!(got["permissionMode"], "plan");
    assert_eq!(got["model"], "opus");
    let keys = c.call("settings/list", json!({"cwd": work}))?;
    let keys = keys.as_array().context("keys")?;
    let key = |k: &str| {
        keys.iter()
            .find(|e| e["key"] == k)
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(key("model")["used"], true, "{keys:?}");
    assert_eq!(key("statusLine")["used"], true, "{keys:?}");
    assert_eq!(key("outputStyle")["used"], true, "{keys:?}");
    assert_eq!(key("spinnerTipsEnabled")["used"], false, "{keys:?}");
    assert_eq!(key("spinnerTipsEnabled")["note"], "not used by tether");
    Ok(())
}

#[test]
fn a_permission_request_hook_answers_and_session_end_hooks_run_on_clear_and_delete()
-> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::default().tool_use("Bash", json!({"command": "xargs echo hook-allowed"})),
        Step::default().tool_use("Bash", json!({"command": "rm -rf build"})),
        Step::text("done"),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let work = daemon.workdir();
    std::fs::create_dir_all(work.join(".claude"))?;
    // Claude Code's PermissionRequest output: allow `xargs echo`, deny `rm`.
    let decide = r#"import json, sys
seen = json.load(sys.stdin)
open("permission-hook.log", "a").write(json.dumps(seen) + "\n")
allow = seen["tool_input"]["command"].startswith("xargs echo")
decision = {"behavior": "allow"} if allow else {"behavior": "deny", "message": "no rm from hooks"}
print(json.dumps({"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": decision}}))
"#;
    std::fs::write(work.join("decide.py"), decide)?;
    let settings = json!({"hooks": {
        "PermissionRequest": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "python3 decide.py"}]}],
        // One write per run: the two runs may overlap.
        "SessionEnd": [{"hooks": [{"type": "command", "command": "line=$(cat); printf '%s\\n' \"$line\" >> session-end.log"}]}]
    }});
    std::fs::write(work.join(".claude/settings.json"), settings.to_string())?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_with_mode(&work, "default")?;
    c.watch(&session)?;
    // Nobody answers: the hook does.
    c.start_turn(&session, "echo, then clean")?;
    let events = c.events_until("turn_ended")?;
    let resolved: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "permission_resolved")
        .collect();
    assert_eq!(resolved.len(), 2, "{events:?}");
    assert_eq!(resolved[0]["data"]["decision"], "allow_once");
    assert!(
        resolved[0]["data"]
            .get("resolvedBy")
            .is_none_or(Value::is_null)
    );
    assert_eq!(resolved[1]["data"]["decision"], "deny");
    let results: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .collect();
    assert_eq!(results[0]["data"]["content"], "hook-allowed\n");
    assert!(
        results[1]["data"]["content"]
            .as_str()
            .is_some_and(|c| c.contains("no rm from hooks")),
        "{}",
        results[1]
    );
    let seen: Value = serde_json::from_str(
        std::fs::read_to_string(work.join("permission-hook.log"))?
            .lines()
            .next()
            .context("the hook ran")?,
    )?;
    assert_eq!(seen["hook_event_name"], "PermissionRequest");
    assert_eq!(seen["tool_name"], "Bash");
    assert_eq!(
        seen["permission_suggestions"][0]["rules"][0]["toolName"],
        "Bash"
    );

    // SessionEnd: on /clear, then on delete.
    c.start_turn(&session, "/clear")?;
    c.events_until("turn_ended")?;
    c.call("session/delete", json!({"sessionId": session}))?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let reasons = loop {
        let log = std::fs::read_to_string(work.join("session-end.log")).unwrap_or_default();
        let reasons: Vec<String> = log
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|v| v["reason"].as_str().map(str::to_owned))
            .collect();
        if reasons.len() >= 2 || std::time::Instant::now() > deadline {
            break reasons;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut reasons = reasons;
    reasons.sort();
    assert_eq!(reasons, ["clear", "other"]);
    Ok(())
}

#[test]
fn writing_a_file_not_yet_read_is_refused_before_anyone_is_asked() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::text("Overwriting.").tool_use(
            "Write",
            json!({"file_path": "notes.txt", "content": "new\n"}),
        ),
        Step::text("Reading first.").tool_use("Read", json!({"file_path": "notes.txt"})),
        Step::text("Now writing.").tool_use(
            "Write",
            json!({"file_path": "notes.txt", "content": "new\n"}),
        ),
        Step::text("Written."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    std::fs::write(daemon.workdir().join("notes.txt"), "old\n")?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_with_mode(&daemon.workdir(), "default")?;
    c.call(
        "session/subscribe",
        json!({"sessionId": session, "since": "head"}),
    )?;
    c.start_turn(&session, "rewrite the notes")?;
    // The unread file is refused at once; the one request is for the Write after the Read.
    let events = c.events_until("permission_requested")?;
    let refused = events
        .iter()
        .find(|e| e["type"] == "tool_result")
        .context("the first Write's result")?;
    assert_eq!(refused["data"]["isError"], true, "{refused}");
    assert!(
        refused["data"]["content"]
            .to_string()
            .contains("has not been read"),
        "{refused}"
    );
    let request = &events.last().context("request")?["data"];
    assert_eq!(request["tool"], "Write");
    let read_results = events.iter().filter(|e| e["type"] == "tool_result").count();
    assert_eq!(read_results, 2, "the refused Write, then the Read");
    respond(&mut c, &session, request, json!({"decision": "allow_once"}))?;
    c.events_until("turn_ended")?;
    assert_eq!(
        std::fs::read_to_string(daemon.workdir().join("notes.txt"))?,
        "new\n"
    );
    Ok(())
}
