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
            vec!["-p", "hi", "--allowedTools", "Read,Bash(git diff"],
            "tether: options.allowedTools: \"Bash(git diff\" is not a rule: missing the closing parenthesis\n",
        ),
    ] {
        let out = daemon
            .tether()
            .current_dir(daemon.workdir())
            .args(&args)
            .output()?;
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), why);
    }
    assert!(fake.server.message_requests().is_empty(), "no turn ran");
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
    let out = daemon
        .tether()
        .current_dir(daemon.workdir())
        .args([
            "-p",
            "--dangerously-skip-permissions",
            "-n",
            "nightly cleanup",
            "--verbose",
            "--output-format",
            "json",
            "make a file",
        ])
        .output()?;
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
