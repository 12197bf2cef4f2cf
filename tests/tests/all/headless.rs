//! `tether -p`: one headless turn through the real client and daemon.

use anyhow::Context;
use serde_json::{Value, json};
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake};

/// The model each turn request asked (title requests, which carry no tools, left out).
fn turn_models(fake: &Fake) -> Vec<String> {
    fake.turn_requests()
        .iter()
        .map(|r| r.body["model"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Runs `tether ARGS`, which must fail; returns what it said on stderr.
fn refused(daemon: &Daemon, args: &[&str]) -> anyhow::Result<String> {
    let out = daemon.run_tether(args)?;
    anyhow::ensure!(!out.status.success(), "tether {args:?} succeeded: {out:?}");
    Ok(String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn print_mode_streams_the_answer_and_exits_zero() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("Hi there, human.")]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let out = daemon.run_tether(&["-p", "say hi"])?;
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
    let out = daemon.run_tether(&["-p", "make a file", "--output-format", "json"])?;
    assert!(out.status.success(), "{out:?}");
    let result: Value = serde_json::from_slice(&out.stdout).context("one JSON object")?;
    assert_eq!(result["result"], "I could not run it.");
    assert_eq!(result["stop_reason"], "end_turn");
    assert_eq!(result["subtype"], "success");
    assert_eq!(result["is_error"], false);
    assert!(result["total_cost_usd"].as_f64().is_some_and(|c| c > 0.0));
    assert!(
        result["session_id"].as_str().is_some_and(|s| s.len() == 36),
        "jq .session_id works: {result}"
    );
    assert_eq!(result["permission_denials"][0]["tool_name"], "Bash");
    assert_eq!(
        result["permission_denials"][0]["tool_input"]["command"],
        "touch created-by-the-model"
    );
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
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("tether: denied Bash: headless run"),
        "the script is told: {stderr}"
    );
    Ok(())
}

/// As in Claude Code, a PermissionRequest hook decides before `-p` refuses what nobody can
/// approve: even a slow one, and its refusal is listed like any other.
#[test]
fn print_mode_lets_a_permission_request_hook_answer_first() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::default().tool_use("Bash", json!({"command": "touch approved-by-the-hook"})),
        Step::default().tool_use("Bash", json!({"command": "touch refused-by-the-hook"})),
        Step::text("Done."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let hook = r#"sleep 0.5; if grep -q approved; then echo '{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow"}}}'; fi"#;
    let settings = daemon.workdir().join(".claude");
    std::fs::create_dir_all(&settings)?;
    std::fs::write(
        settings.join("settings.json"),
        json!({"hooks": {"PermissionRequest": [{"matcher": "Bash", "hooks": [
            {"type": "command", "command": hook}
        ]}]}})
        .to_string(),
    )?;
    daemon.trust(&daemon.workdir())?;
    let out = daemon.run_tether(&["-p", "make two files", "--output-format", "json"])?;
    assert!(out.status.success(), "{out:?}");
    let result: Value = serde_json::from_slice(&out.stdout).context("one JSON object")?;
    assert!(
        daemon.workdir().join("approved-by-the-hook").exists(),
        "the hook's allow lost to -p's refusal: {result}"
    );
    assert!(!daemon.workdir().join("refused-by-the-hook").exists());
    let denials = result["permission_denials"].as_array().context("denials")?;
    assert_eq!(denials.len(), 1, "{result}");
    assert_eq!(
        denials[0]["tool_input"]["command"],
        "touch refused-by-the-hook"
    );
    fake.no_rejections();
    Ok(())
}

#[test]
fn print_mode_rejects_bad_options_with_the_daemons_reason() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("never asked")]))?;
    let daemon = Daemon::start_with(fake.env())?;
    for (args, why) in [
        (
            vec!["-p", "hi", "--max-turns", "0"],
            "tether: options.maxTurns must be at least 1\n",
        ),
        (
            vec!["-p", "hi", "--allowedTools", "Read Bash(git diff"],
            "tether: options.allowedTools: \"Bash(git diff\" is not a rule: missing the closing parenthesis\n",
        ),
    ] {
        let out = daemon.run_tether(&args)?;
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), why);
    }
    assert!(fake.server.message_requests().is_empty(), "no turn ran");
    Ok(())
}

#[test]
fn print_mode_events_emits_every_event_and_fails_with_the_turn() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::error(
        401,
        "authentication_error",
        "invalid x-api-key",
    )]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let out = daemon.run_tether(&["-p", "hello", "--output-format", "events"])?;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let types: Vec<String> = String::from_utf8(out.stdout)?
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|e| e["type"].as_str().map(str::to_owned))
        .collect();
    assert!(
        types.contains(&"turn_started".to_owned()) && types.contains(&"turn_ended".to_owned()),
        "{types:?}"
    );
    assert_eq!(
        types.last().map(String::as_str),
        Some("result"),
        "{types:?}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("tether:"), "a message on errors: {stderr}");
    Ok(())
}

/// `--output-format stream-json` writes Claude Code's messages: init, one assistant message
/// per reply and one user message per tool result, API-shaped, then the result object.
#[test]
fn print_mode_stream_json_speaks_claude_codes_messages() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::text("Let me look.").tool_use("Bash", json!({"command": "echo from-the-tool"})),
        Step::text("It printed from-the-tool."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let out = daemon.run_tether(&[
        "-p",
        "run it",
        "--output-format",
        "stream-json",
        "--verbose",
        "--include-partial-messages",
        "--allowedTools",
        "Bash(echo:*)",
        "--model",
        "haiku",
    ])?;
    assert!(out.status.success(), "{out:?}");
    let lines: Vec<Value> = String::from_utf8(out.stdout)?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .context("every line is JSON")?;
    let session = lines[0]["session_id"].as_str().context("session_id")?;
    for l in &lines {
        assert_eq!(l["session_id"], session, "{l}");
        assert!(l["uuid"].as_str().is_some_and(|u| u.len() == 36), "{l}");
    }
    // init: the session as Claude Code describes it.
    let init = &lines[0];
    assert_eq!(
        (&init["type"], &init["subtype"]),
        (&json!("system"), &json!("init"))
    );
    assert_eq!(init["cwd"], daemon.workdir().display().to_string());
    assert!(
        init["model"]
            .as_str()
            .is_some_and(|m| m.starts_with("claude-haiku")),
        "{init}"
    );
    assert_eq!(init["permissionMode"], "default");
    let tools: Vec<&str> = init["tools"]
        .as_array()
        .context("tools")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        tools.contains(&"Bash") && tools.contains(&"Read"),
        "{tools:?}"
    );
    assert!(
        init["slash_commands"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c == "compact"))
    );
    // The messages in order, without tether's own events.
    let kinds: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["type"].as_str())
        .filter(|k| *k != "stream_event")
        .collect();
    assert_eq!(
        kinds,
        ["system", "assistant", "user", "assistant", "result"]
    );
    let replies: Vec<&Value> = lines.iter().filter(|l| l["type"] == "assistant").collect();
    let first = &replies[0]["message"];
    assert_eq!(first["role"], "assistant");
    assert!(
        first["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("msg_"))
    );
    assert_eq!(first["stop_reason"], "tool_use");
    assert_eq!(first["content"][0]["text"], "Let me look.");
    let call = &first["content"][1];
    assert_eq!(
        (&call["type"], &call["name"]),
        (&json!("tool_use"), &json!("Bash"))
    );
    assert!(
        first["usage"]["input_tokens"]
            .as_u64()
            .is_some_and(|n| n > 0)
    );
    let result_line = lines.iter().find(|l| l["type"] == "user").context("user")?;
    let block = &result_line["message"]["content"][0];
    assert_eq!(block["type"], "tool_result");
    assert_eq!(block["tool_use_id"], call["id"]);
    assert_eq!(block["is_error"], false);
    assert!(block["content"].to_string().contains("from-the-tool"));
    assert_eq!(
        replies[1]["message"]["content"][0]["text"],
        "It printed from-the-tool."
    );
    // Partial messages: the API's stream events, a message_start to a message_stop per reply.
    let events: Vec<&str> = lines
        .iter()
        .filter(|l| l["type"] == "stream_event")
        .filter_map(|l| l["event"]["type"].as_str())
        .collect();
    assert_eq!(
        events.iter().filter(|e| **e == "message_start").count(),
        2,
        "{events:?}"
    );
    assert_eq!(events.iter().filter(|e| **e == "message_stop").count(), 2);
    assert!(events.contains(&"content_block_delta"));
    // The result closes the stream, with Claude Code's fields.
    let result = lines.last().context("result")?;
    assert_eq!(
        (&result["type"], &result["subtype"]),
        (&json!("result"), &json!("success"))
    );
    assert_eq!(result["is_error"], false);
    assert_eq!(result["result"], "It printed from-the-tool.");
    assert_eq!(result["num_turns"], 2);
    Ok(())
}

/// `tether -p` with the scripting options, against one fake that records what it was sent.
#[test]
fn print_mode_options_reach_the_turn_and_stdin_prompts_continue_the_session() -> anyhow::Result<()>
{
    let fake = Fake::start(Script::of([
        Step::default().tool_use("Bash", json!({"command": "echo allowed-by-rule"})),
        Step::text("first done"),
        Step::text("second done"),
        Step::default().tool_use("Bash", json!({"command": "echo asked"})),
        Step::text("asked and answered"),
        Step::default().tool_use("Read", json!({"file_path": "x"})),
        Step::default().tool_use("Read", json!({"file_path": "y"})),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let run = |args: &[&str], stdin: &str| -> anyhow::Result<std::process::Output> {
        use std::io::Write;
        let mut child = daemon
            .tether()
            .current_dir(daemon.workdir())
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        child
            .stdin
            .take()
            .context("stdin")?
            .write_all(stdin.as_bytes())?;
        Ok(child.wait_with_output()?)
    };

    // Two prompts from stdin, one session; a rule from --allowedTools lets Bash run.
    let lines = concat!(
        r#"{"type":"user","message":{"role":"user","content":"first"}}"#,
        "\n",
        r#"{"type":"user","message":{"role":"user","content":[{"type":"text","text":"second"}]}}"#,
        "\n"
    );
    let out = run(
        &[
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "json",
            "--allowedTools",
            "Bash(echo:*)",
            "--disallowedTools",
            "WebFetch",
            "--append-system-prompt",
            "Answer in haiku.",
        ],
        lines,
    )?;
    assert!(out.status.success(), "{out:?}");
    let result: Value = serde_json::from_slice(&out.stdout).context("one JSON result")?;
    assert_eq!(result["type"], "result");
    assert_eq!(result["result"], "second done");
    assert_eq!(result["num_turns"], 3, "three model replies in all");
    assert!(result["duration_ms"].as_u64().is_some());
    assert!(
        result["usage"]["input_tokens"]
            .as_u64()
            .is_some_and(|n| n > 0)
    );
    let session = result["session_id"]
        .as_str()
        .context("session_id")?
        .to_owned();
    let reqs = fake.server.message_requests();
    let tool_result = reqs[1].body["messages"][2]["content"][0]["content"].to_string();
    assert!(tool_result.contains("allowed-by-rule"), "{tool_result}");
    let system = reqs[0].body["system"].to_string();
    assert!(system.contains("Answer in haiku."), "{system}");
    let tools = tether_tests::tool_names(&reqs[0].body)?;
    assert!(
        !tools.contains(&"WebFetch") && tools.contains(&"Bash"),
        "{tools:?}"
    );
    assert_eq!(
        reqs[2].body["messages"].as_array().map(Vec::len),
        Some(5),
        "the second prompt continues the session"
    );

    // --session continues it; a permission prompt command answers the ask.
    let answer = daemon.dir.path().join("answer.sh");
    std::fs::write(
        &answer,
        "#!/bin/sh\ncat > /dev/null\necho '{\"behavior\":\"allow\"}'\n",
    )?;
    let out = run(
        &[
            "-p",
            "ask me",
            "--session",
            &session,
            "--permission-prompt-command",
            &format!("sh {}", answer.display()),
        ],
        "",
    )?;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8(out.stdout)?, "asked and answered\n");
    let asked = fake.server.message_requests()[4].body["messages"].to_string();
    assert!(asked.contains("asked\\n"), "the tool ran: {asked}");

    // --max-turns stops a turn that keeps calling tools; the exit code says so.
    let out = run(
        &[
            "-p",
            "read forever",
            "--max-turns",
            "1",
            "--session",
            &session,
        ],
        "",
    )?;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("max_turns"));
    Ok(())
}

#[test]
fn claude_codes_flags_skip_permissions_and_name_the_session() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::default().tool_use("Bash", json!({"command": "touch made-by-the-model"})),
        Step::text("Made it."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let out = daemon.run_tether(&[
        "-p",
        "--dangerously-skip-permissions",
        "-n",
        "nightly cleanup",
        "--verbose",
        "--output-format",
        "json",
        "make a file",
    ])?;
    assert!(out.status.success(), "{out:?}");
    let result: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(result["result"], "Made it.");
    assert_eq!(result["permission_denials"], json!([]));
    assert!(daemon.workdir().join("made-by-the-model").exists());
    let mut c = daemon.ndjson()?;
    let list = c.call("session/list", json!({}))?;
    assert_eq!(list["sessions"][0]["title"], "nightly cleanup", "{list}");
    Ok(())
}

#[test]
fn opusplan_plans_with_opus_and_works_with_sonnet_and_best_is_opus() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::text("A plan."),
        Step::text("Done."),
        Step::text("Best."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    for args in [
        vec![
            "-p",
            "plan it",
            "--model",
            "opusplan",
            "--permission-mode",
            "plan",
        ],
        vec!["-p", "do it", "--model", "opusplan"],
        vec!["-p", "your best", "--model", "best"],
    ] {
        let out = daemon.run_tether(&args)?;
        assert!(out.status.success(), "{args:?}: {out:?}");
    }
    let models = turn_models(&fake);
    assert_eq!(models.len(), 3, "{models:?}");
    assert!(models[0].contains("opus"), "{models:?}");
    assert!(models[1].contains("sonnet"), "{models:?}");
    assert!(models[2].contains("opus"), "{models:?}");
    Ok(())
}

#[test]
fn a_model_overloaded_three_times_in_a_row_gives_way_to_the_fallback() -> anyhow::Result<()> {
    // Retryable overloaded answers (no `x-should-retry: false`), the server asking for no wait.
    let overloaded =
        || Step::error(529, "overloaded_error", "Overloaded").header("retry-after", "0");
    let fake = Fake::start(Script::of([
        overloaded(),
        overloaded(),
        overloaded(),
        Step::text("from the fallback"),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let out = daemon.run_tether(&["-p", "hi", "--fallback-model", "haiku"])?;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8(out.stdout)?, "from the fallback\n");
    let models = turn_models(&fake);
    assert_eq!(models.len(), 4, "{models:?}");
    assert!(models[..3].iter().all(|m| m == &models[0]), "{models:?}");
    assert!(
        models[3].contains("haiku"),
        "the fourth asks the fallback: {models:?}"
    );
    Ok(())
}

/// claude's `--tools`, `--fallback-model` and `--max-budget-usd`, and the result's
/// `duration_api_ms`.
#[test]
fn print_mode_tools_fallback_model_and_budget() -> anyhow::Result<()> {
    let overloaded =
        || Step::error(529, "overloaded_error", "Overloaded").header("x-should-retry", "false");
    let fake = Fake::start(Script::of([
        overloaded(),
        Step::text("from the fallback"),
        // Long enough that the cancel always lands while it runs.
        Step::default().tool_use("Bash", json!({"command": "sleep 30"})),
        Step::text("never reached"),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;

    // Only the tools named; the overloaded model gives way to the fallback.
    let out = daemon.run_tether(&[
        "-p",
        "hi",
        "--output-format",
        "json",
        "--tools",
        "Read,Grep",
        "--fallback-model",
        "haiku",
    ])?;
    assert!(out.status.success(), "{out:?}");
    let result: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(result["result"], "from the fallback");
    let api = result["duration_api_ms"]
        .as_u64()
        .context("duration_api_ms")?;
    assert!(api <= result["duration_ms"].as_u64().context("duration_ms")?);
    let reqs = fake.server.message_requests();
    assert_eq!(tether_tests::tool_names(&reqs[0].body)?, ["Read", "Grep"]);
    assert_eq!(reqs[1].body["model"], "claude-haiku-5-5");

    // An unknown tool or model is refused before anything runs.
    let out = daemon.run_tether(&["-p", "hi", "--tools", "Read,Teleport"])?;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Teleport"),
        "{out:?}"
    );
    let out = daemon.run_tether(&["-p", "hi", "--fallback-model", "sonet"])?;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("sonet"),
        "{out:?}"
    );
    assert_eq!(fake.server.message_requests().len(), 2, "nothing was asked");

    // Over the budget, the turn is stopped and the result says why.
    let out = daemon.run_tether(&[
        "-p",
        "loop",
        "--output-format",
        "json",
        "--allowedTools",
        "Bash(sleep:*)",
        "--max-budget-usd",
        "0.0000001",
    ])?;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let result: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(result["subtype"], "error_max_budget_usd");
    assert_eq!(result["is_error"], true);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-budget-usd"));
    assert_eq!(
        fake.server.message_requests().len(),
        3,
        "the run stopped after the reply that went over"
    );
    Ok(())
}

/// claude's `--session-id`: the new session takes the given UUID; a taken or malformed one is
/// refused before anything runs.
#[test]
fn print_mode_session_id_names_the_new_session() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("hello")]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let id = "5f0c8f2e-6f53-4a8e-9d2b-8c1d2e3f4a5b";
    let out = daemon.run_tether(&["-p", "hi", "--session-id", id, "--output-format", "json"])?;
    assert!(out.status.success(), "{out:?}");
    let result: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(result["session_id"], id);
    let listed = String::from_utf8(daemon.run_tether(&["sessions", "--json"])?.stdout)?;
    assert!(listed.contains(id), "{listed}");

    let again = daemon.run_tether(&["-p", "hi", "--session-id", id])?;
    assert_eq!(again.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already in use"),
        "{again:?}"
    );
    let bad = daemon.run_tether(&["-p", "hi", "--session-id", "not-a-uuid"])?;
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("UUID"),
        "{bad:?}"
    );
    assert_eq!(
        fake.server.message_requests().len(),
        1,
        "only the first run asked the model"
    );
    Ok(())
}

#[test]
fn agents_given_with_the_flag_run_with_their_prompt_and_bad_json_is_refused() -> anyhow::Result<()>
{
    let fake = Fake::start(Script::of([
        Step::default().tool_use(
            "Agent",
            json!({"description": "check", "prompt": "Check the numbers.", "subagent_type": "checker"}),
        ),
        Step::text("They add up."),
        Step::text("Checked."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let agents = json!({"checker": {
        "description": "Checks arithmetic",
        "prompt": "You check arithmetic and nothing else.",
        "tools": ["Read"],
    }})
    .to_string();
    // As a file, which claude also takes.
    let file = daemon.dir.path().join("agents.json");
    std::fs::write(&file, &agents)?;
    let out = daemon.run_tether(&["-p", "check it", "--agents", &file.display().to_string()])?;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8(out.stdout)?, "Checked.\n");
    let child = &fake.server.message_requests()[1].body;
    assert!(
        child["system"]
            .to_string()
            .contains("You check arithmetic and nothing else."),
        "{child}"
    );
    assert_eq!(tether_tests::tool_names(child)?, ["Read"]);
    let stderr = refused(&daemon, &["-p", "x", "--agents", "[1]"])?;
    assert!(stderr.contains("--agents: expected an object"), "{stderr}");
    Ok(())
}

#[test]
fn system_prompt_add_dir_and_fork_session_work_as_claudes() -> anyhow::Result<()> {
    let fake = Fake::start(Script::default())?;
    let daemon = Daemon::start_with(fake.env())?;
    let other = daemon.dir.path().join("other");
    std::fs::create_dir_all(&other)?;
    std::fs::write(other.join("notes.txt"), "outside notes\n")?;
    let notes = other.join("notes.txt").display().to_string();
    fake.server
        .push(Step::default().tool_use("Read", json!({"file_path": notes})));
    fake.server.push(Step::text("Read it."));
    fake.server.push(Step::text("Forked answer."));
    let out = daemon.run_tether(&[
        "-p",
        "read the notes",
        "--system-prompt",
        "You are a terse assistant.",
        "--add-dir",
        &other.display().to_string(),
        "--output-format",
        "json",
    ])?;
    assert!(out.status.success(), "{out:?}");
    let result: Value = serde_json::from_slice(&out.stdout)?;
    let first = &fake.server.message_requests()[0].body;
    assert_eq!(first["system"][0]["text"], "You are a terse assistant.");
    assert!(
        first["system"].to_string().contains("Working directory"),
        "the context still follows: {}",
        first["system"]
    );
    // Reading outside the session's directory did not ask (a headless ask is a denial).
    assert_eq!(result["permission_denials"], json!([]), "{result}");
    let session = result["session_id"].as_str().context("session")?.to_owned();
    let forked = daemon.run_tether(&[
        "-p",
        "and now?",
        "-r",
        &session,
        "--fork-session",
        "--output-format",
        "json",
    ])?;
    assert!(forked.status.success(), "{forked:?}");
    let forked: Value = serde_json::from_slice(&forked.stdout)?;
    assert_ne!(forked["session_id"], session.as_str(), "a new session");
    assert_eq!(forked["result"], "Forked answer.");
    // The fork carried the history; the original did not get the new turn.
    let last = fake
        .server
        .message_requests()
        .last()
        .cloned()
        .context("request")?;
    assert!(last.body["messages"].to_string().contains("read the notes"));
    let mut c = daemon.ndjson()?;
    let original = c.call(
        "session/export",
        json!({"sessionId": session, "format": "jsonl"}),
    )?;
    assert!(!original["content"].to_string().contains("and now?"));
    let stderr = refused(&daemon, &["-p", "x", "--add-dir", "/nonexistent/dir"])?;
    assert!(stderr.contains("/nonexistent/dir"), "{stderr}");
    Ok(())
}

#[test]
fn json_schema_answers_through_structured_output_until_it_matches() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        // Stops without the structured answer: it is reminded.
        Step::text("The name is tether."),
        // Answers with the wrong type: the schema refuses it.
        Step::default().tool_use("StructuredOutput", json!({"name": 3})),
        Step::default().tool_use("StructuredOutput", json!({"name": "tether"})),
        Step::text("Done."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let schema = json!({"type": "object", "properties": {"name": {"type": "string"}},
        "required": ["name"]})
    .to_string();
    let out = daemon.run_tether(&[
        "-p",
        "what is the project called?",
        "--json-schema",
        &schema,
        "--output-format",
        "json",
    ])?;
    assert!(out.status.success(), "{out:?}");
    let result: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(
        result["structured_output"],
        json!({"name": "tether"}),
        "{result}"
    );
    let requests = fake.server.message_requests();
    let tools = tether_tests::tool_names(&requests[0].body)?;
    assert!(tools.contains(&"StructuredOutput"), "{tools:?}");
    assert!(
        requests[1].body["messages"]
            .to_string()
            .contains("call the StructuredOutput tool now"),
        "reminded"
    );
    assert!(
        requests[2].body["messages"]
            .to_string()
            .contains("is not of type"),
        "the schema's complaint reached the model: {}",
        requests[2].body["messages"]
    );
    let stderr = refused(
        &daemon,
        &["-p", "x", "--json-schema", r#"{"type": "string"}"#],
    )?;
    assert!(stderr.contains("schema of an object"), "{stderr}");
    Ok(())
}

#[test]
fn settings_given_with_the_flag_allow_hook_and_pick_the_model() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::default().tool_use("Bash", json!({"command": "touch made-by-tool"})),
        Step::text("Touched."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let settings = json!({
        "permissions": {"allow": ["Bash(touch:*)"]},
        "hooks": {"PostToolUse": [{"matcher": "Bash",
            "hooks": [{"type": "command", "command": "touch hook-ran"}]}]},
        "model": "opus",
        "statusLine": {"type": "command", "command": "echo hi"},
    })
    .to_string();
    let out = daemon.run_tether(&["-p", "touch it", "--settings", &settings])?;
    assert!(out.status.success(), "{out:?}");
    // The rule let the call run (a headless ask is a denial); the hook ran after it.
    assert!(daemon.workdir().join("made-by-tool").exists());
    assert!(daemon.workdir().join("hook-ran").exists());
    assert_eq!(
        fake.server.message_requests()[0].body["model"],
        "claude-opus-5-5"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not used by tether: statusLine"),
        "{stderr}"
    );
    Ok(())
}

#[test]
fn agent_runs_the_main_conversation_as_that_agent() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("Reviewed.")]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let agents = daemon.workdir().join(".claude/agents");
    std::fs::create_dir_all(&agents)?;
    std::fs::write(
        agents.join("reviewer.md"),
        "---\nname: reviewer\ndescription: Reviews\ntools: Read, Grep\nmodel: haiku\n---\nYou review code and change nothing.\n",
    )?;
    let out = daemon.run_tether(&["-p", "review", "--agent", "reviewer"])?;
    assert!(out.status.success(), "{out:?}");
    let sent = &fake.server.message_requests()[0].body;
    assert_eq!(sent["model"], "claude-haiku-5-5");
    assert_eq!(
        sent["system"][0]["text"],
        "You review code and change nothing."
    );
    assert_eq!(tether_tests::tool_names(sent)?, ["Read", "Grep"]);
    let stderr = refused(&daemon, &["-p", "x", "--agent", "nobody"])?;
    assert!(
        stderr.contains("no agent \"nobody\"") && stderr.contains("reviewer"),
        "{stderr}"
    );
    Ok(())
}

/// Where `got` lacks a field `want` has, or has it with another JSON type (null in `want`
/// takes any value); arrays are compared by their first element.
fn shape_differences(want: &Value, got: &Value, at: &str, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Null, _) => {}
        (Value::Object(w), Value::Object(g)) => {
            for (k, wv) in w {
                match g.get(k) {
                    Some(gv) => shape_differences(wv, gv, &format!("{at}.{k}"), out),
                    None => out.push(format!("{at}.{k} is missing")),
                }
            }
        }
        (Value::Array(w), Value::Array(g)) => {
            if let (Some(wf), Some(gf)) = (w.first(), g.first()) {
                shape_differences(wf, gf, &format!("{at}[0]"), out);
            }
        }
        (Value::Number(_), Value::Number(_))
        | (Value::String(_), Value::String(_))
        | (Value::Bool(_), Value::Bool(_)) => {}
        (w, g) => out.push(format!("{at}: {w} in the documented example, {g} here")),
    }
}

#[test]
fn json_and_stream_json_have_every_field_of_claude_codes_documented_examples() -> anyhow::Result<()>
{
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/claude-code");
    let fake = Fake::start(Script::of([
        Step::text("Let me look.").tool_use("Bash", json!({"command": "ls"})),
        Step::text("It has files."),
        Step::text("Again.").tool_use("Bash", json!({"command": "ls"})),
        Step::text("Still files."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let out = daemon.run_tether(&[
        "-p",
        "what is here?",
        "--output-format",
        "json",
        "--allowedTools",
        "Bash(ls)",
    ])?;
    assert!(out.status.success(), "{out:?}");
    let got: Value = serde_json::from_slice(&out.stdout)?;
    let want: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("result.json"))?)?;
    let mut diffs = Vec::new();
    shape_differences(&want, &got, "result", &mut diffs);

    let out = daemon.run_tether(&[
        "-p",
        "and now?",
        "--output-format",
        "stream-json",
        "--verbose",
        "--allowedTools",
        "Bash(ls)",
    ])?;
    assert!(out.status.success(), "{out:?}");
    let lines: Vec<Value> = String::from_utf8(out.stdout)?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let documented: Vec<Value> = std::fs::read_to_string(fixtures.join("stream.jsonl"))?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    for want in &documented {
        let kind = want["type"].as_str().unwrap_or_default();
        // The first line of each type tether wrote.
        match lines.iter().find(|l| l["type"] == kind) {
            Some(got) => shape_differences(want, got, kind, &mut diffs),
            None => diffs.push(format!("no {kind} line")),
        }
    }
    assert!(diffs.is_empty(), "{diffs:#?}");
    Ok(())
}

#[test]
fn a_daemon_setting_set_for_one_command_is_named_not_ignored() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("Hello."), Step::text("Hello.")]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let out = daemon
        .tether()
        .args(["-p", "say hi"])
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/elsewhere")
        .output()?;
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("ANTHROPIC_BASE_URL here is not used: tetherd decides api.base_url")
            && said.contains(&fake.server.url())
            && said.contains("tether config show"),
        "{said}"
    );
    assert_eq!(said.lines().count(), 1, "one line: {said}");
    // The same value as the daemon's says nothing.
    let out = daemon
        .tether()
        .args(["-p", "say hi"])
        .env("ANTHROPIC_BASE_URL", fake.server.url())
        .output()?;
    assert!(out.status.success(), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    Ok(())
}
