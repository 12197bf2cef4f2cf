//! Turns end to end: the real daemon, the fake Anthropic API, raw NDJSON clients.

use anyhow::Context;
use serde_json::{Value, json};
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake, Ndjson};

/// A daemon wired to a fake with `script`, a subscribed client and a session in the work dir.
fn setup(script: Script) -> anyhow::Result<(Fake, Daemon, Ndjson, String)> {
    let fake = Fake::start(script)?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut client = daemon.ndjson()?;
    let session = client.new_session_in(&daemon.workdir())?;
    client.watch(&session)?;
    Ok((fake, daemon, client, session))
}

/// Runs a turn to its `turn_ended` and returns its events.
fn run_turn(c: &mut Ndjson, session: &str, text: &str) -> anyhow::Result<Vec<Value>> {
    c.start_turn(session, text)?;
    c.events_until("turn_ended")
}

/// The stop reason of the turn whose events end with `turn_ended`.
fn stop_reason(events: &[Value]) -> &str {
    events
        .last()
        .and_then(|e| e["data"]["stopReason"].as_str())
        .unwrap_or("")
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().filter_map(|e| e["type"].as_str()).collect()
}

fn of_type<'a>(events: &'a [Value], ty: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == ty).collect()
}

#[test]
fn a_text_turn_streams_and_ends_with_usage_and_cost() -> anyhow::Result<()> {
    let (fake, _daemon, mut c, session) = setup(Script::of([Step::text("Hello from the model.")]))?;
    let turn = c.start_turn(&session, "say hi")?;
    let events = c.events_until("turn_ended")?;
    let t = types(&events);
    let expected_order = [
        "turn_started",
        "session_status",
        "assistant_block_started",
        "text_delta",
        "assistant_block_completed",
        "assistant_message_completed",
        "usage_updated",
        "turn_ended",
    ];
    let mut at = 0;
    for ty in t.iter() {
        if at < expected_order.len() && *ty == expected_order[at] {
            at += 1;
        }
    }
    assert_eq!(at, expected_order.len(), "order: {t:?}");
    let text: String = of_type(&events, "text_delta")
        .iter()
        .filter_map(|e| e["data"]["text"].as_str())
        .collect();
    assert_eq!(text, "Hello from the model.");
    let completed = of_type(&events, "assistant_block_completed");
    assert_eq!(
        completed[0]["data"]["block"],
        json!({"type": "text", "text": "Hello from the model."})
    );
    let ended = events.last().context("turn_ended")?;
    assert_eq!(ended["turnId"], turn.as_str());
    assert_eq!(ended["data"]["stopReason"], "end_turn");
    assert_eq!(ended["data"]["usage"]["inputTokens"], 25);
    assert!(
        ended["data"]["costUsd"].as_f64().is_some_and(|c| c > 0.0),
        "{ended}"
    );
    for e in &events {
        assert!(
            e["turnId"] == turn.as_str() || e["type"] == "session_status",
            "{e}"
        );
    }
    assert_eq!(c.next_event()?["data"]["status"], "idle");

    let reqs = fake.server.message_requests();
    assert_eq!(reqs.len(), 1);
    let body = &reqs[0].body;
    assert_eq!(body["model"], "claude-sonnet-5-5");
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "say hi", "cache_control": {"type": "ephemeral"}}]}])
    );
    assert!(
        body["system"][0]["text"]
            .as_str()
            .is_some_and(|s| s.contains("tether"))
    );
    let tool_names = tether_tests::tool_names(body)?;
    assert_eq!(
        tool_names,
        [
            "Bash",
            "BashOutput",
            "KillShell",
            "Read",
            "Write",
            "Edit",
            "MultiEdit",
            "Glob",
            "Grep",
            "LS",
            "NotebookEdit",
            "TodoWrite",
            "Agent",
            "WebFetch",
            "WebSearch",
            "AskUserQuestion",
            "EnterPlanMode",
            "ExitPlanMode"
        ]
    );
    fake.no_rejections();

    let snapshot = c.call("session/get", json!({"sessionId": session}))?;
    assert_eq!(snapshot["usage"]["inputTokens"], 25);
    assert!(snapshot["costUsd"].as_f64().is_some_and(|c| c > 0.0));
    assert_eq!(snapshot["runningTurn"], Value::Null);
    Ok(())
}

#[test]
fn parallel_reads_then_a_write_and_all_results_in_one_message_in_order() -> anyhow::Result<()> {
    let fake = Fake::start(Script::default())?;
    let daemon = Daemon::start_with(fake.env())?;
    let work = daemon.workdir();
    std::fs::write(work.join("a.txt"), "alpha\n")?;
    std::fs::write(work.join("b.txt"), "beta\n")?;
    let out = work.join("out/c.txt");
    fake.server.push(
        Step::text("Reading both, then writing.")
            .tool_use("Read", json!({"file_path": work.join("a.txt")}))
            .tool_use("Read", json!({"file_path": work.join("b.txt")}))
            .tool_use("Write", json!({"file_path": out, "content": "gamma\n"})),
    );
    fake.server.push(Step::text("All done."));
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&work)?;
    c.watch(&session)?;
    let events = run_turn(&mut c, &session, "copy things")?;
    assert_eq!(stop_reason(&events), "end_turn");
    let calls = of_type(&events, "tool_call");
    let results = of_type(&events, "tool_result");
    assert_eq!((calls.len(), results.len()), (3, 3), "{:?}", types(&events));
    assert!(
        results.iter().all(|r| r["data"]["isError"] == false),
        "{results:?}"
    );
    // The write ran after both reads finished.
    let pos = |pred: &dyn Fn(&Value) -> bool| events.iter().position(pred).unwrap_or(usize::MAX);
    let write_call = pos(&|e| e["type"] == "tool_call" && e["data"]["name"] == "Write");
    let last_read_result = events
        .iter()
        .rposition(|e| {
            e["type"] == "tool_result"
                && e["data"]["content"]
                    .as_str()
                    .is_some_and(|s| s.contains("\talpha") || s.contains("\tbeta"))
        })
        .context("read results")?;
    assert!(
        last_read_result < write_call,
        "reads finish before the write starts"
    );
    assert_eq!(std::fs::read_to_string(&out)?, "gamma\n");

    let reqs = fake.server.message_requests();
    assert_eq!(reqs.len(), 2);
    let second = &reqs[1].body["messages"];
    let last = second
        .as_array()
        .and_then(|m| m.last())
        .context("last message")?;
    assert_eq!(last["role"], "user");
    let ids: Vec<&str> = last["content"]
        .as_array()
        .context("content")?
        .iter()
        .filter_map(|b| b["tool_use_id"].as_str())
        .collect();
    let call_ids: Vec<&str> = calls
        .iter()
        .filter_map(|c| c["data"]["toolCallId"].as_str())
        .collect();
    assert_eq!(
        ids, call_ids,
        "one user message with every result, in call order"
    );
    assert!(
        last["content"][0]["content"]
            .as_str()
            .is_some_and(|s| s.contains("     1\talpha"))
    );
    fake.no_rejections();
    Ok(())
}

#[test]
fn invalid_tool_input_is_an_error_result_the_model_can_fix() -> anyhow::Result<()> {
    let fake = Fake::start(Script::default())?;
    let daemon = Daemon::start_with(fake.env())?;
    let file = daemon.workdir().join("notes.txt");
    std::fs::write(&file, "hello\n")?;
    fake.server
        .push(Step::default().tool_use("Read", json!({"path": "notes.txt"})));
    fake.server
        .push(Step::default().tool_use("Read", json!({"file_path": file})));
    fake.server
        .push(Step::default().tool_use("Teleport", json!({})));
    fake.server.push(Step::text("It says hello."));
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&daemon.workdir())?;
    c.watch(&session)?;
    let events = run_turn(&mut c, &session, "read notes")?;
    let results = of_type(&events, "tool_result");
    assert_eq!(results.len(), 3);
    assert_eq!(results[0]["data"]["isError"], true);
    let msg = results[0]["data"]["content"].as_str().context("msg")?;
    assert!(msg.contains("file_path"), "names the field: {msg}");
    assert_eq!(results[1]["data"]["isError"], false);
    let unknown = results[2]["data"]["content"].as_str().context("msg")?;
    assert!(
        unknown.contains("Teleport")
            && unknown
                .contains("Bash, BashOutput, KillShell, Read, Write, Edit, MultiEdit, Glob, Grep, LS, NotebookEdit, TodoWrite, Agent, WebFetch"),
        "{unknown}"
    );
    assert_eq!(stop_reason(&events), "end_turn");
    fake.no_rejections();
    Ok(())
}

#[test]
fn max_tokens_is_continued_with_our_own_user_message() -> anyhow::Result<()> {
    let mut cut = Step::text("The first half of a long answer");
    cut.stop_reason = Some("max_tokens".into());
    let (fake, _daemon, mut c, session) =
        setup(Script::of([cut, Step::text(" and the second half.")]))?;
    let events = run_turn(&mut c, &session, "write a lot")?;
    let cont = of_type(&events, "continuation");
    assert_eq!(cont.len(), 1);
    assert_eq!(cont[0]["data"]["attempt"], 1);
    assert_eq!(stop_reason(&events), "end_turn");
    let reqs = fake.server.message_requests();
    let msgs = reqs[1].body["messages"]
        .as_array()
        .context("messages")?
        .clone();
    assert_eq!(msgs.len(), 3);
    assert_eq!(msgs[1]["role"], "assistant");
    assert_eq!(
        msgs[1]["content"][0]["text"],
        "The first half of a long answer"
    );
    assert!(
        msgs[2]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("Continue exactly where you stopped"))
    );
    fake.no_rejections();
    Ok(())
}

#[test]
fn cancel_mid_stream_then_the_next_turn_works() -> anyhow::Result<()> {
    let (fake, _daemon, mut c, session) = setup(Script::of([
        Step::text("This reply will never finish because it stalls").stall_after(3),
        Step::text("Fresh answer."),
    ]))?;
    c.start_turn(&session, "first")?;
    c.events_until("text_delta")?;
    let r = c.call("turn/cancel", json!({"sessionId": session}))?;
    assert_eq!(r["cancelled"], true);
    let events = c.events_until("turn_ended")?;
    assert_eq!(stop_reason(&events), "cancelled");
    // What the interrupted reply cost is counted: its input, the output kept, and the session's
    // total in every client.
    let ended = events.last().context("turn_ended")?;
    assert!(
        ended["data"]["usage"]["inputTokens"].as_u64() > Some(0),
        "{ended}"
    );
    assert!(
        ended["data"]["usage"]["outputTokens"].as_u64() > Some(0),
        "{ended}"
    );
    assert!(ended["data"]["costUsd"].as_f64() > Some(0.0), "{ended}");
    let totals = events
        .iter()
        .rfind(|e| e["type"] == "usage_updated")
        .context("usage_updated")?;
    assert!(
        totals["data"]["sessionCostUsd"].as_f64() > Some(0.0),
        "{totals}"
    );
    // Cancelling again is harmless.
    assert_eq!(
        c.call("turn/cancel", json!({"sessionId": session}))?["cancelled"],
        false
    );

    let events = run_turn(&mut c, &session, "second")?;
    assert_eq!(stop_reason(&events), "end_turn");
    let reqs = fake.server.message_requests();
    let msgs = reqs[1].body["messages"].as_array().context("messages")?;
    // The model knows what it already said and that it was interrupted.
    assert_eq!(msgs.len(), 3, "{msgs:?}");
    assert_eq!(msgs[0]["content"][0]["text"], "first");
    assert_eq!(msgs[1]["role"], "assistant");
    let said = msgs[1]["content"][0]["text"]
        .as_str()
        .context("partial text")?;
    assert!(
        !said.is_empty() && "This reply will never finish because it stalls".starts_with(said),
        "the partial reply as it was cut: {said:?}"
    );
    assert_eq!(
        msgs[2]["content"][0]["text"],
        "[Request interrupted by user]"
    );
    assert_eq!(msgs[2]["content"][1]["text"], "second");
    fake.no_rejections();
    Ok(())
}

#[test]
fn busy_sessions_reject_or_queue_and_client_turn_ids_are_idempotent() -> anyhow::Result<()> {
    let (fake, _daemon, mut c, session) = setup(Script::of([
        Step::text("slow one").stall_after(3),
        Step::text("queued one"),
    ]))?;
    let start = |c: &mut Ndjson, id: &str, mode: &str| {
        c.request(
            "turn/start",
            json!({"sessionId": session, "input": [{"type": "text", "text": id}], "clientTurnId": id, "mode": mode}),
        )
    };
    let first = start(&mut c, "t1", "reject")?;
    let again = start(&mut c, "t1", "reject")?;
    assert_eq!(
        first["result"]["turnId"], again["result"]["turnId"],
        "same clientTurnId, same turn"
    );
    let busy = start(&mut c, "t2", "reject")?;
    assert_eq!(busy["error"]["code"], -32001);
    let queued = start(&mut c, "t3", "queue")?;
    assert_eq!(queued["result"]["queued"], true);
    let mut events = c.events_until("text_delta")?;
    c.call("turn/cancel", json!({"sessionId": session}))?;
    events.extend(c.events_until("turn_ended")?);
    assert_eq!(
        of_type(&events, "turn_started").len(),
        1,
        "{:?}",
        types(&events)
    );
    let events = c.events_until("turn_ended")?;
    assert_eq!(
        events.last().context("end")?["turnId"],
        queued["result"]["turnId"]
    );
    assert_eq!(stop_reason(&events), "end_turn");
    assert_eq!(fake.server.message_requests().len(), 2);
    fake.no_rejections();
    Ok(())
}

#[test]
fn memory_files_and_git_reach_the_model_and_the_system_prompt_is_stable() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("one"), Step::text("two")]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let work = daemon.workdir();
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(&work)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
    };
    git(&["init", "-q", "-b", "trunk"])?;
    std::fs::write(
        work.join("CLAUDE.md"),
        "Always answer in haiku.\n@docs/extra.md\n",
    )?;
    std::fs::create_dir_all(work.join("docs"))?;
    std::fs::write(work.join("docs/extra.md"), "Never use semicolons.\n")?;
    git(&["add", "."])?;
    git(&["commit", "-q", "-m", "first commit"])?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&work)?;
    c.watch(&session)?;
    c.start_turn(&session, "one")?;
    c.events_until("turn_ended")?;
    c.start_turn(&session, "two")?;
    c.events_until("turn_ended")?;
    let reqs = fake.server.message_requests();
    let system = reqs[0].body["system"].to_string();
    assert!(system.contains("Always answer in haiku."), "{system}");
    assert!(
        system.contains("Never use semicolons."),
        "imports are inlined"
    );
    assert!(system.contains("Current branch: trunk"), "{system}");
    assert!(system.contains("first commit"));
    assert_eq!(
        reqs[0].body["system"], reqs[1].body["system"],
        "byte-identical across requests"
    );
    assert_eq!(reqs[0].body["tools"], reqs[1].body["tools"]);
    fake.no_rejections();
    Ok(())
}

#[test]
fn without_credentials_a_turn_fails_clearly_and_the_session_survives() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("unreachable")]))?;
    let env: Vec<(String, String)> = fake
        .env()
        .into_iter()
        .filter(|(k, _)| k != "ANTHROPIC_API_KEY")
        .collect();
    let daemon = Daemon::start_with(env)?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&daemon.workdir())?;
    c.watch(&session)?;
    let events = run_turn(&mut c, &session, "hello?")?;
    let end = events.last().context("end")?;
    assert_eq!(end["data"]["stopReason"], "error");
    assert_eq!(end["data"]["error"]["code"], "no_credentials");
    assert!(
        end["data"]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("ANTHROPIC_API_KEY"))
    );
    assert!(fake.server.requests().is_empty());
    c.call("session/get", json!({"sessionId": session}))?;
    Ok(())
}

#[test]
fn auto_compaction_near_the_context_limit_continues_from_the_summary() -> anyhow::Result<()> {
    let mut big = Step::text("Long answer.");
    big.usage = Some(json!({"input_tokens": 950_000}));
    let (fake, _daemon, mut c, session) = setup(Script::of([
        big,
        Step::text("SUMMARY: the user asked for a long answer and got it."),
        Step::text("Short answer."),
    ]))?;
    c.start_turn(&session, "first question")?;
    let first = c.events_until("turn_ended")?;
    let usage = of_type(&first, "usage_updated");
    assert_eq!(
        usage.last().map(|u| u["data"]["contextPercent"].clone()),
        Some(json!(95.0)),
        "950k of Sonnet 5.5's 1M window"
    );
    let events = run_turn(&mut c, &session, "second question")?;
    let t = types(&events);
    assert!(
        t.contains(&"compaction_started") && t.contains(&"compaction_completed"),
        "{t:?}"
    );
    let done = of_type(&events, "compaction_completed")[0];
    assert_eq!(done["data"]["tokensBefore"], 950_000);
    assert_eq!(stop_reason(&events), "end_turn");
    let reqs = fake.server.message_requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(
        reqs[1].body["tool_choice"],
        json!({"type": "none"}),
        "the summarizing request calls no tools"
    );
    let msgs = reqs[2].body["messages"].as_array().context("messages")?;
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    let text = msgs[0]["content"][0]["text"].as_str().context("text")?;
    assert!(text.contains("SUMMARY: the user asked"), "{text}");
    fake.no_rejections();
    Ok(())
}

#[test]
fn kill_9_during_compaction_keeps_the_full_history_and_the_next_turn_compacts_again()
-> anyhow::Result<()> {
    let mut big = Step::text("Long answer.");
    big.usage = Some(json!({"input_tokens": 950_000}));
    let fake = Fake::start(Script::of([
        big,
        Step::text("SUMMARY: never finished").stall_after(3),
        Step::text("SUMMARY: the user asked for a long answer and got it."),
        Step::text("Short answer."),
    ]))?;
    let mut daemon = Daemon::start_with(fake.env())?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&daemon.workdir())?;
    c.watch(&session)?;
    run_turn(&mut c, &session, "first question")?;
    c.start_turn(&session, "second question")?;
    c.events_until("compaction_started")?;
    // The summary request is streaming (and stalls): the daemon dies mid-compaction.
    while fake.server.message_requests().len() < 2 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    daemon.kill9()?;
    daemon.spawn()?;

    let mut c = daemon.ndjson()?;
    let seen = c.replay_until(&session, |s| {
        s.iter().any(|e| e["type"] == "replay_complete")
    })?;
    let ended = seen
        .iter()
        .rev()
        .find(|e| e["type"] == "turn_ended")
        .context("turn_ended")?;
    assert_eq!(ended["data"]["stopReason"], "interrupted_by_restart");
    assert!(of_type(&seen, "compaction_completed").is_empty());

    // Nothing was summarized away: the next turn still sees the whole history, compacts it,
    // and answers.
    let events = run_turn(&mut c, &session, "third question")?;
    assert_eq!(stop_reason(&events), "end_turn", "{events:?}");
    assert!(!of_type(&events, "compaction_completed").is_empty());
    let reqs = fake.server.message_requests();
    let summarize = reqs[2].body["messages"].to_string();
    assert!(
        summarize.contains("first question") && summarize.contains("Long answer."),
        "the second summary covers the whole history: {summarize}"
    );
    fake.no_rejections();
    Ok(())
}

#[test]
fn prompt_too_long_is_compacted_and_retried_once() -> anyhow::Result<()> {
    let (fake, _daemon, mut c, session) = setup(Script::of([
        Step::error(
            400,
            "invalid_request_error",
            "prompt is too long: 230000 tokens > 200000 maximum",
        ),
        Step::text("the summary"),
        Step::text("Answer after compaction."),
    ]))?;
    let events = run_turn(&mut c, &session, "a huge question")?;
    assert_eq!(
        of_type(&events, "compaction_started")[0]["data"]["reason"],
        "prompt_too_long"
    );
    assert_eq!(stop_reason(&events), "end_turn");
    let text: String = of_type(&events, "text_delta")
        .iter()
        .filter_map(|e| e["data"]["text"].as_str())
        .collect();
    assert_eq!(text, "Answer after compaction.");
    assert_eq!(fake.server.message_requests().len(), 3);
    fake.no_rejections();
    Ok(())
}

#[test]
fn overloaded_after_retries_falls_back_to_the_fallback_model() -> anyhow::Result<()> {
    let overloaded =
        || Step::error(529, "overloaded_error", "Overloaded").header("x-should-retry", "false");
    let fake = Fake::start(Script::of([overloaded(), Step::text("from the fallback")]))?;
    let mut env = fake.env();
    env.push(("TETHER_FALLBACK_MODEL".into(), "haiku".into()));
    let daemon = Daemon::start_with(env)?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&daemon.workdir())?;
    c.watch(&session)?;
    let events = run_turn(&mut c, &session, "hi")?;
    let fb = of_type(&events, "model_fallback");
    assert_eq!(fb.len(), 1, "{:?}", types(&events));
    assert_eq!(
        fb[0]["data"],
        json!({"from": "claude-sonnet-5-5", "to": "claude-haiku-5-5"})
    );
    assert_eq!(stop_reason(&events), "end_turn");
    let models: Vec<Value> = fake
        .server
        .message_requests()
        .iter()
        .map(|r| r.body["model"].clone())
        .collect();
    assert_eq!(
        models,
        [json!("claude-sonnet-5-5"), json!("claude-haiku-5-5")]
    );
    Ok(())
}

#[test]
fn slash_commands_and_memory_notes_are_handled_by_the_daemon() -> anyhow::Result<()> {
    let (fake, daemon, mut c, session) = setup(Script::of([
        Step::text("one"),
        Step::text("two"),
        Step::text("three"),
    ]))?;
    let cmds = daemon.workdir().join(".claude/commands");
    std::fs::create_dir_all(&cmds)?;
    std::fs::write(
        cmds.join("greet.md"),
        "---\ndescription: greet\nmodel: haiku\n---\nSay hello to $0 politely, then to $ARGUMENTS[1].\n",
    )?;

    c.start_turn(&session, "first")?;
    c.events_until("turn_ended")?;

    let events = run_turn(&mut c, &session, "/nosuch thing")?;
    assert_eq!(
        of_type(&events, "error")[0]["data"]["code"],
        "unknown_command"
    );
    assert_eq!(
        events.last().context("end")?["data"]["error"]["code"],
        "unknown_command"
    );

    let events = run_turn(&mut c, &session, "/cost")?;
    assert!(
        of_type(&events, "notice")[0]["data"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("session cost $"))
    );
    // What fills the window, by part, against the model's window.
    let events = run_turn(&mut c, &session, "/context")?;
    let said = of_type(&events, "notice")[0]["data"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    for part in [
        "context: about ",
        "system prompt",
        "tools (",
        "conversation (2 messages)",
        "free",
    ] {
        assert!(said.contains(part), "{part:?} in {said}");
    }
    // The agent types, and the hooks in effect with where each comes from.
    let events = run_turn(&mut c, &session, "/agents")?;
    let said = of_type(&events, "notice")[0]["data"]["message"].to_string();
    assert!(said.contains("general-purpose (built-in)"), "{said}");
    std::fs::create_dir_all(daemon.workdir().join(".claude"))?;
    std::fs::write(
        daemon.workdir().join(".claude/settings.json"),
        json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "echo checked"}]}]}})
            .to_string(),
    )?;
    let events = run_turn(&mut c, &session, "/hooks")?;
    let said = of_type(&events, "notice")[0]["data"]["message"].to_string();
    assert!(said.contains("PreToolUse [Bash]: echo checked"), "{said}");
    assert!(said.contains("settings.json"), "{said}");

    let events = run_turn(&mut c, &session, "# the tests live in tests/all")?;
    assert!(
        of_type(&events, "notice")[0]["data"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("MEMORY.md"))
    );

    let events = run_turn(&mut c, &session, "/clear")?;
    assert_eq!(of_type(&events, "history_cleared").len(), 1);

    let events = run_turn(&mut c, &session, "/greet Ada Bob")?;
    assert_eq!(stop_reason(&events), "end_turn");

    let events = run_turn(&mut c, &session, "/model opus")?;
    assert_eq!(
        of_type(&events, "session_configured")[0]["data"]["model"],
        "opus"
    );
    c.start_turn(&session, "after the switch")?;
    c.events_until("turn_ended")?;

    let reqs = fake.server.message_requests();
    assert_eq!(reqs.len(), 3, "commands make no API calls");
    assert_eq!(
        reqs[1].body["model"], "claude-haiku-5-5",
        "the custom command's model"
    );
    let msgs = reqs[1].body["messages"].as_array().context("messages")?;
    assert_eq!(
        msgs.len(),
        1,
        "/clear dropped the earlier conversation: {msgs:?}"
    );
    assert_eq!(
        msgs[0]["content"][0]["text"],
        "Say hello to Ada politely, then to Bob."
    );
    assert!(
        msgs[0]["content"]
            .to_string()
            .contains("the tests live in tests/all"),
        "the note reaches the model at the tail: {msgs:?}"
    );
    assert_eq!(
        reqs[1].body["system"], reqs[0].body["system"],
        "the prompt prefix never changes"
    );
    assert_eq!(reqs[2].body["model"], "claude-opus-5-5");
    fake.no_rejections();
    Ok(())
}

#[test]
fn history_survives_a_restart_and_a_turn_cut_by_kill_9_is_ended() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::text("Remember: the answer is 42."),
        Step::text("This reply is cut by a crash").stall_after(3),
        Step::text("Still here."),
    ]))?;
    let mut daemon = Daemon::start_with(fake.env())?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&daemon.workdir())?;
    c.watch(&session)?;
    c.start_turn(&session, "what is the answer?")?;
    c.events_until("turn_ended")?;
    c.start_turn(&session, "tell me more")?;
    c.events_until("text_delta")?;
    daemon.kill9()?;
    daemon.spawn()?;

    let mut c = daemon.ndjson()?;
    // The open turn is ended when the session loads (in the replay or just after it).
    let seen = c.replay_until(&session, |s| of_type(s, "turn_ended").len() >= 2)?;
    let cut = seen
        .iter()
        .filter(|e| e["type"] == "assistant_block_completed")
        .filter_map(|e| e["data"]["block"]["text"].as_str())
        .find(|t| t.contains("[cut off: the daemon stopped]"));
    assert!(
        cut.is_some_and(|t| t.starts_with("This reply")),
        "the streamed text stays visible: {cut:?}"
    );
    let ends = of_type(&seen, "turn_ended");
    assert_eq!(ends[0]["data"]["stopReason"], "end_turn");
    assert_eq!(ends[1]["data"]["stopReason"], "interrupted_by_restart");
    let events = run_turn(&mut c, &session, "are you there?")?;
    assert_eq!(stop_reason(&events), "end_turn");

    let reqs = fake.server.message_requests();
    let msgs = reqs[2].body["messages"].as_array().context("messages")?;
    assert_eq!(msgs[0]["content"][0]["text"], "what is the answer?");
    assert_eq!(msgs[1]["content"][0]["text"], "Remember: the answer is 42.");
    // The model sees what it had said when the daemon died, and that it was cut off.
    assert_eq!(msgs.len(), 5, "{msgs:?}");
    assert_eq!(msgs[2]["content"][0]["text"], "tell me more");
    assert!(
        msgs[3]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("This reply") && t.contains("cut off")),
        "{msgs:?}"
    );
    assert!(
        msgs[4]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("[Request interrupted")),
        "{msgs:?}"
    );
    assert_eq!(msgs[4]["content"][1]["text"], "are you there?");
    fake.no_rejections();
    Ok(())
}

#[test]
fn cancel_during_a_running_tool_kills_it_and_the_next_turn_works() -> anyhow::Result<()> {
    let (fake, _daemon, mut c, session) = setup(Script::of([
        Step::default().tool_use(
            "Bash",
            json!({"command": "echo started; sleep 30", "description": "wait"}),
        ),
        Step::text("Recovered."),
    ]))?;
    c.start_turn(&session, "wait a while")?;
    let progress = c.events_until("tool_progress")?;
    assert_eq!(
        progress.last().context("progress")?["data"]["chunk"],
        "started\n"
    );
    let started = std::time::Instant::now();
    c.call("turn/cancel", json!({"sessionId": session}))?;
    let events = c.events_until("turn_ended")?;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "the tool was killed promptly"
    );
    let result = of_type(&events, "tool_result");
    assert_eq!(result.len(), 1);
    assert_eq!(result[0]["data"]["isError"], true);
    assert!(
        result[0]["data"]["content"]
            .as_str()
            .is_some_and(|s| s.contains("interrupted")),
        "{}",
        result[0]
    );
    assert_eq!(stop_reason(&events), "cancelled");

    let events = run_turn(&mut c, &session, "still there?")?;
    assert_eq!(stop_reason(&events), "end_turn");
    let reqs = fake.server.message_requests();
    let msgs = reqs[1].body["messages"].as_array().context("messages")?;
    assert_eq!(
        msgs.len(),
        3,
        "user, assistant tool_use, user(result + new prompt): {msgs:?}"
    );
    assert_eq!(msgs[2]["content"][0]["type"], "tool_result");
    fake.no_rejections();
    Ok(())
}

#[test]
fn a_task_runs_a_sub_agent_whose_answer_and_usage_reach_the_parent() -> anyhow::Result<()> {
    let (fake, _daemon, mut c, session) = setup(Script::of([
        Step::default().tool_use("Task", json!({"description": "find the answer", "prompt": "What is six times seven? Reply with the number."})),
        Step::text("The answer is 42."),
        Step::text("The sub-agent says 42."),
    ]))?;
    let events = run_turn(&mut c, &session, "delegate it")?;
    let result = of_type(&events, "tool_result");
    assert_eq!(result[0]["data"]["content"], "The answer is 42.");
    // What the sub-agent did is logged under the call that ran it.
    let call = &of_type(&events, "tool_call")[0]["data"]["toolCallId"];
    let child = of_type(&events, "subagent_event");
    assert!(
        child
            .iter()
            .all(|e| e["data"]["parentToolCallId"] == *call
                && e["data"]["agent"] == "general-purpose"),
        "{child:?}"
    );
    let said: Vec<&Value> = child
        .iter()
        .map(|e| &e["data"]["event"])
        .filter(|e| e["type"] == "assistant_block_completed")
        .collect();
    assert_eq!(said.len(), 1, "{child:?}");
    assert_eq!(said[0]["data"]["block"]["text"], "The answer is 42.");
    assert!(
        child
            .iter()
            .any(|e| e["data"]["event"]["type"] == "assistant_message_completed"),
        "{child:?}"
    );
    let progress: String = of_type(&events, "tool_progress")
        .iter()
        .filter_map(|e| e["data"]["chunk"].as_str())
        .collect();
    assert!(
        progress.contains("[sub-agent general-purpose: find the answer]")
            && progress.contains("The answer is 42."),
        "{progress}"
    );
    let end = events.last().context("end")?;
    assert_eq!(
        end["data"]["usage"]["inputTokens"], 75,
        "three requests, the child's included"
    );
    let reqs = fake.server.message_requests();
    assert_eq!(reqs.len(), 3);
    let child = &reqs[1].body;
    assert_eq!(
        child["messages"][0]["content"][0]["text"],
        "What is six times seven? Reply with the number."
    );
    let child_tools = tether_tests::tool_names(child)?;
    assert!(
        !child_tools.contains(&"Agent") && child_tools.contains(&"Read"),
        "{child_tools:?}"
    );
    fake.no_rejections();
    Ok(())
}

#[test]
fn an_agent_call_names_its_agent_and_sets_how_hard_it_thinks() -> anyhow::Result<()> {
    let (fake, _daemon, mut c, session) = setup(Script::of([
        Step::default().tool_use(
            "Agent",
            json!({"description": "check it", "prompt": "Is 7 prime?", "name": "checker", "effort": "low"}),
        ),
        Step::text("Yes."),
        Step::text("It is prime."),
    ]))?;
    let events = run_turn(&mut c, &session, "delegate it")?;
    let progress: String = of_type(&events, "tool_progress")
        .iter()
        .filter_map(|e| e["data"]["chunk"].as_str())
        .collect();
    assert!(
        progress.contains("[sub-agent checker (general-purpose): check it]"),
        "{progress}"
    );
    let reqs = fake.server.message_requests();
    assert_eq!(
        reqs[1].body["output_config"]["effort"], "low",
        "the agent's"
    );
    assert_ne!(
        reqs[0].body["output_config"]["effort"], "low",
        "not the parent's"
    );
    fake.no_rejections();
    Ok(())
}

#[test]
fn a_projects_agent_runs_with_its_own_prompt_tools_and_model() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::default().tool_use(
            "Agent",
            json!({"description": "review the diff", "prompt": "Review the change.", "subagent_type": "reviewer"}),
        ),
        Step::text("Looks right to me."),
        Step::default().tool_use(
            "Agent",
            json!({"description": "nobody", "prompt": "x", "subagent_type": "nonexistent"}),
        ),
        Step::text("Reviewed."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let agents = daemon.workdir().join(".claude/agents");
    std::fs::create_dir_all(&agents)?;
    std::fs::write(
        agents.join("reviewer.md"),
        "---\nname: reviewer\ndescription: Reviews changes for mistakes\ntools: Read, Grep\nmodel: haiku\n---\nYou are a strict code reviewer.\n",
    )?;
    std::fs::write(agents.join("broken.md"), "---\nname: [broken\n---\n")?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&daemon.workdir())?;
    c.watch(&session)?;
    let events = run_turn(&mut c, &session, "review it")?;
    let results = of_type(&events, "tool_result");
    assert_eq!(results[0]["data"]["content"], "Looks right to me.");
    assert_eq!(results[1]["data"]["isError"], true);
    let refused = results[1]["data"]["content"].to_string();
    assert!(
        refused.contains("nonexistent")
            && refused.contains("reviewer")
            && refused.contains("Explore"),
        "{refused}"
    );
    // The broken definition is reported with its file and line; the rest still works.
    let notices: Vec<String> = of_type(&events, "notice")
        .iter()
        .filter_map(|e| e["data"]["message"].as_str().map(str::to_owned))
        .collect();
    assert!(
        notices
            .iter()
            .any(|n| n.contains("broken.md:3: while parsing a flow sequence")),
        "{notices:?}"
    );
    let reqs = fake.server.message_requests();
    let parent = &reqs[0].body;
    let task = parent["tools"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "Agent"))
        .context("the Agent tool")?;
    assert!(
        task["description"].as_str().is_some_and(
            |d| d.contains("- reviewer: Reviews changes for mistakes (Tools: Read, Grep)")
        ),
        "{task}"
    );
    let child = &reqs[1].body;
    assert_eq!(child["model"], "claude-haiku-5-5", "the agent's model");
    assert_eq!(tether_tests::tool_names(child)?, ["Read", "Grep"]);
    let system = child["system"].to_string();
    assert!(
        system.contains("You are a strict code reviewer."),
        "{system}"
    );
    assert!(
        system.contains("Working directory"),
        "the environment follows: {system}"
    );
    assert!(
        !system.contains("You are tether"),
        "not the parent's prompt: {system}"
    );
    fake.no_rejections();
    Ok(())
}

#[test]
fn glob_read_edit_and_git_diff_chain_in_one_turn() -> anyhow::Result<()> {
    let fake = Fake::start(Script::default())?;
    let daemon = Daemon::start_with(fake.env())?;
    let work = daemon.workdir();
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(&work)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
    };
    git(&["init", "-q"])?;
    std::fs::write(work.join("greeting.txt"), "hello world\n")?;
    git(&["add", "."])?;
    git(&["commit", "-q", "-m", "init"])?;
    let file = work.join("greeting.txt");
    fake.server
        .push(Step::default().tool_use("Glob", json!({"pattern": "**/*.txt"})));
    fake.server
        .push(Step::default().tool_use("Read", json!({"file_path": file})));
    fake.server.push(Step::default().tool_use(
        "Edit",
        json!({"file_path": file, "old_string": "world", "new_string": "tether"}),
    ));
    fake.server
        .push(Step::default().tool_use("Bash", json!({"command": "git diff --no-color"})));
    fake.server.push(Step::text("Changed the greeting."));
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&work)?;
    c.watch(&session)?;
    let events = run_turn(&mut c, &session, "greet tether instead")?;
    assert_eq!(stop_reason(&events), "end_turn");
    let results: Vec<&Value> = of_type(&events, "tool_result");
    assert_eq!(results.len(), 4);
    assert!(
        results.iter().all(|r| r["data"]["isError"] == false),
        "{results:?}"
    );
    assert!(
        results[0]["data"]["content"]
            .as_str()
            .is_some_and(|s| s.contains("greeting.txt"))
    );
    assert!(
        results[2]["data"]["details"]["diff"]
            .as_str()
            .is_some_and(|d| d.contains("+hello tether"))
    );
    let diff = results[3]["data"]["content"].as_str().context("diff")?;
    assert!(
        diff.contains("-hello world") && diff.contains("+hello tether"),
        "{diff}"
    );
    assert_eq!(std::fs::read_to_string(&file)?, "hello tether\n");
    let reqs = fake.server.message_requests();
    assert_eq!(reqs.len(), 5);
    let last = reqs[4].body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .context("last")?;
    assert!(
        last["content"][0]["content"]
            .as_str()
            .is_some_and(|s| s.contains("+hello tether"))
    );
    assert!(
        last["content"][0].get("details").is_none(),
        "client-only details never reach the model"
    );
    fake.no_rejections();
    Ok(())
}

#[test]
fn session_compact_summarizes_on_request() -> anyhow::Result<()> {
    let (fake, _daemon, mut c, session) = setup(Script::of([
        Step::text("first answer"),
        Step::text("SUMMARY of the chat"),
        Step::text("after compaction"),
    ]))?;
    c.start_turn(&session, "hello")?;
    c.events_until("turn_ended")?;
    c.call(
        "session/compact",
        json!({"sessionId": session, "instructions": "keep the greeting"}),
    )?;
    let events = c.events_until("turn_ended")?;
    assert_eq!(
        of_type(&events, "compaction_started")[0]["data"]["reason"],
        "manual"
    );
    assert_eq!(stop_reason(&events), "compacted");
    c.start_turn(&session, "next")?;
    c.events_until("turn_ended")?;
    let reqs = fake.server.message_requests();
    let ask = reqs[1].body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .context("ask")?
        .to_string();
    assert!(ask.contains("keep the greeting"), "{ask}");
    let msgs = reqs[2].body["messages"].as_array().context("messages")?;
    assert!(
        msgs[0]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("SUMMARY of the chat"))
    );
    fake.no_rejections();
    Ok(())
}

#[test]
fn export_and_fork_carry_the_conversation() -> anyhow::Result<()> {
    let (fake, _daemon, mut c, session) = setup(Script::of([
        Step::default().tool_use("Bash", json!({"command": "echo exported"})),
        Step::text("The command printed exported."),
        Step::text("Continuing in the fork."),
        Step::text("Continuing in the original."),
        Step::text("A fresh start."),
    ]))?;
    c.start_turn(&session, "run echo")?;
    c.events_until("turn_ended")?;
    let md = c.call("session/export", json!({"sessionId": session}))?;
    let text = md["content"].as_str().context("markdown")?;
    assert!(
        text.contains("## User") && text.contains("run echo"),
        "{text}"
    );
    assert!(
        text.contains("<summary>Bash <code>echo exported</code></summary>"),
        "{text}"
    );
    assert!(text.contains("The command printed exported."));
    let jsonl = c.call(
        "session/export",
        json!({"sessionId": session, "format": "jsonl"}),
    )?;
    let lines: Vec<Value> = jsonl["content"]
        .as_str()
        .context("jsonl")?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let head = c.call("session/get", json!({"sessionId": session}))?["headSeq"]
        .as_u64()
        .context("head")?;
    assert_eq!(lines.len() as u64, head);

    let fork = c.call("session/fork", json!({"sessionId": session}))?["sessionId"]
        .as_str()
        .context("id")?
        .to_owned();
    assert_ne!(fork, session);
    let got = c.call("session/get", json!({"sessionId": fork}))?;
    assert!(got["title"].as_str().is_some_and(|t| t.ends_with("(fork)")));
    let mut f = tether_tests::Ndjson::connect(&_daemon.socket())?;
    f.subscribe(&fork, json!(0))?;
    let replay = f.events_until("replay_complete")?;
    assert!(
        replay.iter().all(|e| e["type"] != "client_attached"),
        "presence is not copied"
    );
    assert_eq!(
        seqs_of(&replay),
        (1..=replay.len() as u64 - 1).collect::<Vec<_>>(),
        "dense seqs"
    );
    assert!(replay.iter().any(|e| {
        e["type"] == "notice"
            && e["data"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("forked from"))
    }));
    f.start_turn(&fork, "and then?")?;
    f.events_until("turn_ended")?;
    let reqs = fake.server.message_requests();
    let msgs = reqs[2].body["messages"].as_array().context("messages")?;
    assert_eq!(
        msgs[0]["content"][0]["text"], "run echo",
        "the fork continues the conversation"
    );
    assert_eq!(msgs.len(), 5);

    // The two diverge: the original goes on without the fork's turn.
    c.start_turn(&session, "meanwhile in the original")?;
    c.events_until("turn_ended")?;
    let reqs = fake.server.message_requests();
    let original = reqs[3].body["messages"].to_string();
    assert!(original.contains("meanwhile in the original"));
    assert!(
        !original.contains("and then?") && !original.contains("Continuing in the fork."),
        "{original}"
    );

    // A fork at an earlier point keeps only what came before it.
    let mut o = tether_tests::Ndjson::connect(&_daemon.socket())?;
    o.subscribe(&session, json!(0))?;
    let first_turn = o
        .events_until("replay_complete")?
        .iter()
        .find(|e| e["type"] == "turn_started")
        .and_then(|e| e["seq"].as_u64())
        .context("turn_started")?;
    let early = c.call(
        "session/fork",
        json!({"sessionId": session, "atSeq": first_turn - 1}),
    )?["sessionId"]
        .as_str()
        .context("id")?
        .to_owned();
    f.watch(&early)?;
    f.start_turn(&early, "start over")?;
    f.events_until("turn_ended")?;
    let reqs = fake.server.message_requests();
    let msgs = reqs[4].body["messages"].as_array().context("messages")?;
    assert_eq!(
        msgs.len(),
        1,
        "nothing from before the fork point: {msgs:?}"
    );
    fake.no_rejections();
    Ok(())
}

fn seqs_of(events: &[Value]) -> Vec<u64> {
    events.iter().filter_map(|e| e["seq"].as_u64()).collect()
}

#[test]
fn secrets_never_reach_the_daemon_log() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::error(529, "overloaded_error", "Overloaded"),
        Step::default().tool_use("Bash", json!({"command": "echo tool ran"})),
        Step::text("done"),
    ]))?;
    let mut env = fake.env();
    env.iter_mut().for_each(|(k, v)| {
        if k == "ANTHROPIC_API_KEY" {
            *v = "sk-ant-this-must-never-be-logged".into();
        }
    });
    env.push(("TETHER_LOG".into(), "trace".into()));
    let daemon = Daemon::start_with(env)?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&daemon.workdir())?;
    c.watch(&session)?;
    let events = run_turn(&mut c, &session, "go")?;
    assert_eq!(stop_reason(&events), "end_turn");
    let log = daemon.log();
    assert!(
        log.contains("retrying"),
        "the log has the turn in it: {}",
        log.len()
    );
    assert!(
        !log.contains("this-must-never-be-logged"),
        "the API key leaked into the log"
    );
    let files: String = std::fs::read_dir(daemon.data_dir().join("logs"))?
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    assert!(
        files.contains("model request failed"),
        "the log file has the turn: {files}"
    );
    assert!(
        !files.contains("this-must-never-be-logged"),
        "the API key leaked into the log file"
    );
    let all: String = events.iter().map(|e| e.to_string()).collect();
    assert!(
        !all.contains("this-must-never-be-logged"),
        "the API key leaked into events"
    );
    Ok(())
}

#[test]
fn kill_9_during_a_tool_gives_it_an_interrupted_result_and_the_session_goes_on()
-> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::text("Running it.").tool_use("Bash", json!({"command": "echo started; sleep 5"})),
        Step::text("Understood, it was interrupted."),
    ]))?;
    let mut daemon = Daemon::start_with(fake.env())?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&daemon.workdir())?;
    c.watch(&session)?;
    c.start_turn(&session, "run the slow thing")?;
    let call = c.events_until("tool_progress")?;
    let id = call
        .iter()
        .find(|e| e["type"] == "tool_call")
        .context("tool_call")?["data"]["toolCallId"]
        .clone();
    daemon.kill9()?;
    daemon.spawn()?;

    let mut c = daemon.ndjson()?;
    // The scan at start-up ended the turn before anyone opened the session.
    let listed = c.call("session/list", json!({}))?;
    assert_eq!(listed["sessions"][0]["status"], "idle", "{listed}");
    let seen = c.replay_until(&session, |s| s.iter().any(|e| e["type"] == "turn_ended"))?;
    let result = seen
        .iter()
        .find(|e| e["type"] == "tool_result")
        .context("interrupted result")?;
    assert_eq!(result["data"]["toolCallId"], id);
    assert_eq!(result["data"]["isError"], true);
    assert!(
        result["data"]["content"]
            .as_str()
            .is_some_and(|s| s.contains("the daemon stopped"))
    );
    let recovered = seen
        .iter()
        .find(|e| e["type"] == "turn_recovered")
        .context("turn_recovered")?;
    assert_eq!(recovered["data"]["interruptedTools"], json!([id]));
    // Recovered at start-up: by the time a client looks, the turn has ended.
    let ended = seen
        .iter()
        .find(|e| e["type"] == "turn_ended")
        .context("turn_ended")?;
    assert_eq!(ended["data"]["stopReason"], "interrupted_by_restart");

    let events = run_turn(&mut c, &session, "what happened?")?;
    assert_eq!(stop_reason(&events), "end_turn");
    let reqs = fake.server.message_requests();
    let msgs = reqs[1].body["messages"].as_array().context("messages")?;
    assert_eq!(msgs[2]["content"][0]["tool_use_id"], id);
    assert!(
        msgs[2]["content"][0]["content"]
            .as_str()
            .is_some_and(|s| s.contains("the daemon stopped"))
    );
    fake.no_rejections();
    Ok(())
}

#[test]
fn claude_codes_tool_names_and_fields_are_understood() -> anyhow::Result<()> {
    let (fake, daemon, mut c, session) = setup(Script::of([
        Step::default()
            .tool_use("Read", json!({"file_path": "notes.txt", "offset": 0}))
            .tool_use(
                "Grep",
                json!({"pattern": "two", "output_mode": "content", "head_limit": 0, "context": 1}),
            )
            .tool_use("TaskStop", json!({"task_id": "nope"})),
        Step::default().tool_use(
            "Agent",
            json!({"description": "look", "prompt": "say what notes.txt holds", "subagent_type": "general-purpose"}),
        ),
        Step::text("The sub-agent says: one, two, three."),
        Step::text("All done."),
    ]))?;
    std::fs::write(daemon.workdir().join("notes.txt"), "one\ntwo\nthree\n")?;
    let events = run_turn(&mut c, &session, "use the tools")?;
    assert_eq!(stop_reason(&events), "end_turn");
    let results = of_type(&events, "tool_result");
    let text = |r: &Value| r["data"]["content"].to_string();
    assert!(
        !results.iter().any(|r| text(r).contains("no tool named")),
        "every name was known: {results:?}"
    );
    // Parallel calls finish in any order: find each result by its call.
    let result_of = |name: &str| -> anyhow::Result<&Value> {
        let id = of_type(&events, "tool_call")
            .into_iter()
            .find(|e| e["data"]["name"] == name)
            .with_context(|| format!("a {name} call"))?["data"]["toolCallId"]
            .clone();
        results
            .iter()
            .copied()
            .find(|r| r["data"]["toolCallId"] == id)
            .with_context(|| format!("the {name} result"))
    };
    let read = result_of("Read")?;
    assert_eq!(read["data"]["isError"], false, "{read}");
    assert!(text(read).contains("one"), "{read}");
    let grep = result_of("Grep")?;
    assert_eq!(grep["data"]["isError"], false, "{grep}");
    assert!(
        text(grep).contains("one") && text(grep).contains("three"),
        "context 1 around the match: {grep}"
    );
    let stop = result_of("TaskStop")?;
    assert_eq!(stop["data"]["isError"], true, "an unknown shell: {stop}");
    let agent = result_of("Agent")?;
    assert!(text(agent).contains("one, two, three"), "{agent}");
    fake.no_rejections();
    Ok(())
}

#[test]
fn the_settings_env_reaches_bash_commands_and_hooks_and_attribution_the_prompt()
-> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::default().tool_use("Bash", json!({"command": "echo \"$DEPLOY_TARGET/$LEVEL\""})),
        Step::text("done"),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let work = daemon.workdir();
    std::fs::create_dir_all(work.join(".claude"))?;
    // The local file wins over the project's; a number is written as Claude Code users do.
    std::fs::write(
        work.join(".claude/settings.json"),
        json!({"env": {"DEPLOY_TARGET": "staging", "LEVEL": 2},
            "attribution": {"commit": "Assisted-by: tether"},
            "hooks": {"PostToolUse": [{"matcher": "Bash", "hooks": [{"type": "command",
                "command": "echo \"$DEPLOY_TARGET\" > hook-saw"}]}]}})
        .to_string(),
    )?;
    std::fs::write(
        work.join(".claude/settings.local.json"),
        json!({"env": {"DEPLOY_TARGET": "local"}}).to_string(),
    )?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&work)?;
    c.watch(&session)?;
    let events = run_turn(&mut c, &session, "where to?")?;
    let result = of_type(&events, "tool_result");
    assert_eq!(result[0]["data"]["content"], "local/2\n", "{events:?}");
    assert_eq!(std::fs::read_to_string(work.join("hook-saw"))?, "local\n");
    // The settings' attribution is what the model is told to end commits with.
    let system = fake
        .server
        .message_requests()
        .iter()
        .find(|r| r.body["tools"].is_array())
        .context("a turn request")?
        .body["system"]
        .to_string();
    assert!(
        system.contains("End every git commit message you write with a blank line and then:\\nAssisted-by: tether"),
        "{system}"
    );
    assert!(!system.contains("pull request"), "{system}");
    Ok(())
}

#[test]
fn the_users_api_key_helper_authenticates_and_a_projects_is_not_used() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("Keyed.")]))?;
    // Only the base URL: the key comes from the user's settings.
    let env: Vec<(String, String)> = fake
        .env()
        .into_iter()
        .filter(|(k, _)| k != "ANTHROPIC_API_KEY")
        .collect();
    let mut daemon = Daemon::prepare(env)?;
    let claude = daemon.dir.path().join("home/.claude");
    std::fs::create_dir_all(&claude)?;
    std::fs::write(
        claude.join("settings.json"),
        json!({"apiKeyHelper": "echo sk-ant-from-the-helper"}).to_string(),
    )?;
    let project = daemon.workdir().join(".claude");
    std::fs::create_dir_all(&project)?;
    std::fs::write(
        project.join("settings.json"),
        json!({"apiKeyHelper": "echo sk-ant-from-a-project"}).to_string(),
    )?;
    daemon.spawn()?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&daemon.workdir())?;
    c.watch(&session)?;
    let events = run_turn(&mut c, &session, "hi")?;
    assert_eq!(stop_reason(&events), "end_turn", "{events:?}");
    let sent = fake.server.message_requests();
    assert_eq!(
        sent[0].headers.get("x-api-key").map(String::as_str),
        Some("sk-ant-from-the-helper")
    );
    let (checks, _) = daemon.doctor()?;
    assert!(
        checks["credentials"].1.contains("key command"),
        "{checks:?}"
    );
    let keys = c.call("settings/list", json!({"cwd": daemon.workdir()}))?;
    let reported = |source: &str| {
        keys.as_array()
            .into_iter()
            .flatten()
            .find(|k| {
                k["key"] == "apiKeyHelper"
                    && k["source"].as_str().is_some_and(|s| s.contains(source))
            })
            .cloned()
    };
    let project = reported("work").context("the project's apiKeyHelper is reported")?;
    assert_eq!(project["used"], false, "{project}");
    let user = reported("home").context("the user's apiKeyHelper is reported")?;
    assert_eq!(user["used"], true, "{user}");
    Ok(())
}

/// A PDF of `pages` pages, written out by hand (objects, then the cross-reference table).
fn tiny_pdf(pages: usize) -> Vec<u8> {
    let mut objects = vec![
        "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
        format!(
            "<< /Type /Pages /Kids [{}] /Count {pages} >>",
            (0..pages)
                .map(|i| format!("{} 0 R", 3 + 2 * i))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    ];
    for i in 0..pages {
        objects.push(format!(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {} 0 R >>",
            4 + 2 * i
        ));
        let text = format!("BT 72 720 Td (Page {}) Tj ET", i + 1);
        objects.push(format!(
            "<< /Length {} >>\nstream\n{text}\nendstream",
            text.len()
        ));
    }
    let mut out = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, body) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n{body}\nendobj\n", i + 1).as_bytes());
    }
    let xref = out.len();
    out.extend_from_slice(
        format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
    );
    for o in offsets {
        out.extend_from_slice(format!("{o:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    out
}

#[test]
fn read_sends_a_pdf_as_a_document_and_a_long_one_by_pages() -> anyhow::Result<()> {
    let (fake, daemon, mut c, session) = setup(Script::of([
        Step::default().tool_use("Read", json!({"file_path": "short.pdf"})),
        Step::default().tool_use("Read", json!({"file_path": "long.pdf"})),
        Step::default().tool_use("Read", json!({"file_path": "long.pdf", "pages": "2-3"})),
        Step::text("Read them."),
    ]))?;
    std::fs::write(daemon.workdir().join("short.pdf"), tiny_pdf(3))?;
    std::fs::write(daemon.workdir().join("long.pdf"), tiny_pdf(12))?;
    let events = run_turn(&mut c, &session, "read the pdfs")?;
    assert_eq!(stop_reason(&events), "end_turn");
    fake.no_rejections();
    let results = of_type(&events, "tool_result");
    let short = &results[0]["data"];
    assert_eq!(short["isError"], false, "{short}");
    assert_eq!(short["content"][1]["type"], "document");
    assert_eq!(
        short["content"][1]["source"]["media_type"],
        "application/pdf"
    );
    assert!(
        short["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.ends_with("all 3 pages")),
        "{short}"
    );
    let long = &results[1]["data"];
    assert_eq!(long["isError"], true);
    assert!(
        long["content"]
            .as_str()
            .is_some_and(|t| t.contains("has 12 pages") && t.contains("pages")),
        "{long}"
    );
    let part = &results[2]["data"];
    assert_eq!(part["content"][1]["type"], "document", "{part}");
    assert!(
        part["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.ends_with("pages 2-3 of 12")),
        "{part}"
    );
    Ok(())
}

#[test]
fn web_search_runs_the_apis_search_tool_and_returns_the_cited_pages() -> anyhow::Result<()> {
    // What the API streams for a request with its web search tool: the search it ran, the
    // results, then the summary.
    let search = Step {
        events: Some(vec![
            json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "model": "claude-haiku-4-5", "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 40, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"query\": \"tokio latest version\"}"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [
                {"type": "web_search_result", "title": "tokio - crates.io", "url": "https://crates.io/crates/tokio", "encrypted_content": "e1", "page_age": null},
                {"type": "web_search_result", "title": "Tokio releases", "url": "https://github.com/tokio-rs/tokio/releases", "encrypted_content": "e2", "page_age": null}
            ]}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "The latest tokio is 1.54."}}),
            json!({"type": "content_block_stop", "index": 2}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 12, "server_tool_use": {"web_search_requests": 1}}}),
            json!({"type": "message_stop"}),
        ]),
        ..Default::default()
    };
    let (fake, _daemon, mut c, session) = setup(Script::of([
        Step::default().tool_use(
            "WebSearch",
            json!({"query": "tokio latest version", "allowed_domains": ["crates.io", "github.com"]}),
        ),
        search,
        Step::text("It is 1.54."),
    ]))?;
    let events = run_turn(&mut c, &session, "which tokio is current?")?;
    assert_eq!(stop_reason(&events), "end_turn");
    fake.no_rejections();
    let requests = fake.server.message_requests();
    let sub = requests
        .iter()
        .find(|r| r.body["tools"][0]["type"] == "web_search_20250305")
        .context("the search request")?;
    assert_eq!(sub.body["tools"][0]["name"], "web_search");
    assert_eq!(
        sub.body["tools"][0]["allowed_domains"],
        json!(["crates.io", "github.com"])
    );
    let result = of_type(&events, "tool_result");
    let text = result[0]["data"]["content"].as_str().unwrap_or_default();
    assert!(
        text.contains("The latest tokio is 1.54.")
            && text.contains("- tokio - crates.io — https://crates.io/crates/tokio")
            && text.contains("https://github.com/tokio-rs/tokio/releases"),
        "{text}"
    );
    // The search is billed: one search at $0.01 on top of the tokens.
    let ended = events.last().context("end")?;
    assert!(
        ended["data"]["costUsd"].as_f64().is_some_and(|c| c > 0.01),
        "{ended}"
    );
    Ok(())
}

#[test]
fn a_background_shell_that_ends_wakes_the_model_while_someone_is_there() -> anyhow::Result<()> {
    let (fake, _daemon, mut c, session) = setup(Script::of([
        Step::default().tool_use(
            "Bash",
            json!({"command": "sleep 0.5; echo bg-done", "run_in_background": true}),
        ),
        Step::text("Started it."),
        Step::text("It printed bg-done."),
    ]))?;
    let first = run_turn(&mut c, &session, "build in the background")?;
    assert_eq!(stop_reason(&first), "end_turn");
    // The shell ends, and the session starts a turn of its own about it.
    let mut woke = None;
    for _ in 0..200 {
        let e = c.next_event()?;
        if e["type"] == "turn_started" {
            woke = Some(e);
            break;
        }
    }
    let woke = woke.context("a turn after the shell ended")?;
    assert_eq!(woke["data"]["by"]["name"], "tetherd", "{woke}");
    let events = c.events_until("turn_ended")?;
    assert_eq!(stop_reason(&events), "end_turn");
    let last = fake
        .server
        .message_requests()
        .into_iter()
        .rfind(|r| r.body["tools"].is_array())
        .context("the woken request")?;
    let told = last.body["messages"].to_string();
    assert!(
        told.contains("<system-reminder>background shell bash_1")
            && told.contains("exited with code 0"),
        "{told}"
    );
    fake.no_rejections();
    Ok(())
}
