//! MCP servers as tools, against the official reference servers (`tests/run` installs them):
//! the everything server over stdio and Streamable HTTP and SSE, the filesystem server, the time
//! server (Python), and
//! Claude Code's configuration files.

use anyhow::Context;
use serde_json::{Value, json};
use std::process::{Child, Command, Stdio};
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake, mcp_server, tool_names};

/// `--mcp-config` JSON for the everything server over stdio.
fn everything_stdio() -> String {
    json!({"mcpServers": {"everything": {
        "command": mcp_server("mcp-server-everything"),
        "args": ["stdio"],
    }}})
    .to_string()
}

/// The `tool_result` blocks of a request's last user message.
fn results(body: &Value) -> Vec<Value> {
    body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_array())
        .map(|c| {
            c.iter()
                .filter(|b| b["type"] == "tool_result")
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// A `tool_result` block's content as text.
fn result_text(block: &Value) -> String {
    tether_proto::content_text(&block["content"])
}

#[test]
fn stdio_server_tools_are_called_and_their_results_reach_the_model() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::default()
            .tool_use("mcp__everything__echo", json!({"message": "hello mcp"}))
            .tool_use("mcp__everything__get-sum", json!({"a": 2, "b": 3})),
        Step::default().tool_use("mcp__everything__get-tiny-image", json!({})),
        // Input the server's schema refuses comes back as an error the model can fix.
        Step::default().tool_use("mcp__everything__get-sum", json!({"a": "two"})),
        Step::text("All done."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let config = everything_stdio();
    let out = daemon.run_tether(&[
        "-p",
        "use the everything server",
        "--mcp-config",
        &config,
        "--allowedTools",
        "mcp__everything",
        "--output-format",
        "json",
    ])?;
    assert!(out.status.success(), "{out:?}");
    let result: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(result["result"], "All done.");
    let requests = fake.server.message_requests();
    assert_eq!(requests.len(), 4);

    let names = tool_names(&requests[0].body)?;
    for t in [
        "Bash",
        "mcp__everything__echo",
        "mcp__everything__get-sum",
        "mcp__everything__get-tiny-image",
    ] {
        assert!(names.contains(&t), "{t} offered: {names:?}");
    }
    let tools = requests[0].body["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let echo = tools
        .iter()
        .find(|t| t["name"] == "mcp__everything__echo")
        .cloned()
        .unwrap_or_default();
    assert_eq!(echo["input_schema"]["type"], "object");
    assert!(
        echo["input_schema"]["properties"]["message"].is_object(),
        "{echo}"
    );

    let first = results(&requests[1].body);
    assert_eq!(result_text(&first[0]), "Echo: hello mcp");
    assert!(result_text(&first[1]).contains("is 5"), "{}", first[1]);
    assert_ne!(first[0]["is_error"], true);

    let image = results(&requests[2].body);
    let blocks = image[0]["content"].as_array().cloned().unwrap_or_default();
    assert!(
        blocks
            .iter()
            .any(|b| b["type"] == "image" && b["source"]["media_type"] == "image/png"),
        "an image block: {}",
        image[0]
    );

    let bad = results(&requests[3].body);
    assert_eq!(bad[0]["is_error"], true, "{}", bad[0]);
    assert!(result_text(&bad[0]).contains("invalid input"), "{}", bad[0]);
    Ok(())
}

#[test]
fn mcp_calls_ask_permission_unless_a_rule_allows_the_server() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::default().tool_use("mcp__everything__echo", json!({"message": "hi"})),
        Step::text("Denied."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let config = everything_stdio();
    let out = daemon.run_tether(&[
        "-p",
        "echo",
        "--mcp-config",
        &config,
        "--output-format",
        "json",
    ])?;
    assert!(out.status.success(), "{out:?}");
    let result: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(
        result["permission_denials"][0]["tool_name"],
        "mcp__everything__echo"
    );
    let sent = fake.server.message_requests();
    assert_eq!(results(&sent[1].body)[0]["is_error"], true);
    Ok(())
}

#[test]
fn project_servers_run_once_approved() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("one"), Step::text("two")]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let work = daemon.workdir();
    std::fs::write(
        work.join(".mcp.json"),
        json!({"mcpServers": {
            "everything": {"command": mcp_server("mcp-server-everything")},
            "broken": {"type": "http"}
        }})
        .to_string(),
    )?;
    let out = daemon.run_tether(&["-p", "hi", "--output-format", "stream-json", "--verbose"])?;
    assert!(out.status.success(), "{out:?}");
    let names = tool_names(&fake.server.message_requests()[0].body)?
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>();
    assert!(
        !names.iter().any(|n| n.starts_with("mcp__")),
        "not approved yet: {names:?}"
    );
    let events = daemon.run_tether(&["sessions", "--json"])?;
    assert!(events.status.success());

    std::fs::create_dir_all(work.join(".claude"))?;
    std::fs::write(
        work.join(".claude/settings.json"),
        json!({"enabledMcpjsonServers": ["everything"]}).to_string(),
    )?;
    let out = daemon.run_tether(&["-p", "hi", "--output-format", "events"])?;
    assert!(out.status.success(), "{out:?}");
    let names = tool_names(&fake.server.message_requests()[1].body)?
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>();
    assert!(
        names.iter().any(|n| n == "mcp__everything__echo"),
        "{names:?}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("mcpServers.broken") && stdout.contains("missing \\\"url\\\""),
        "the malformed entry is named, the good one works: {stdout}"
    );
    Ok(())
}

/// A reference server started on a free port in one of its HTTP modes.
struct HttpServer {
    child: Child,
    port: u16,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(3001)
}

fn http_server(mode: &str) -> anyhow::Result<HttpServer> {
    let port = free_port();
    let child = Command::new(mcp_server("mcp-server-everything"))
        .arg(mode)
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the {mode} server did not listen"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Ok(HttpServer { child, port })
}

#[test]
fn http_and_sse_servers_answer_tool_calls() -> anyhow::Result<()> {
    let http = http_server("streamableHttp")?;
    let sse = http_server("sse")?;
    let fake = Fake::start(Script::of([
        Step::default()
            .tool_use("mcp__web__echo", json!({"message": "over http"}))
            .tool_use("mcp__old__echo", json!({"message": "over sse"})),
        Step::text("Both answered."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let config = json!({"mcpServers": {
        "web": {"type": "http", "url": format!("http://127.0.0.1:{}/mcp", http.port),
                "headers": {"X-Test": "${TETHER_TEST_HEADER:-yes}"}},
        "old": {"type": "sse", "url": format!("http://127.0.0.1:{}/sse", sse.port)},
    }})
    .to_string();
    let out = daemon.run_tether(&[
        "-p",
        "echo twice",
        "--mcp-config",
        &config,
        "--strict-mcp-config",
        "--allowedTools",
        "mcp__web,mcp__old",
    ])?;
    assert!(out.status.success(), "{out:?}");
    let sent = fake.server.message_requests();
    let r = results(&sent[1].body);
    assert_eq!(result_text(&r[0]), "Echo: over http");
    assert_eq!(result_text(&r[1]), "Echo: over sse");
    Ok(())
}

#[test]
fn python_time_server_speaks_the_newer_protocol() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::default().tool_use(
            "mcp__time__get_current_time",
            json!({"timezone": "Europe/Paris"}),
        ),
        Step::text("It is some time."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let config =
        json!({"mcpServers": {"time": {"command": mcp_server("mcp-server-time")}}}).to_string();
    let out = daemon.run_tether(&[
        "-p",
        "time?",
        "--mcp-config",
        &config,
        "--allowedTools",
        "mcp__time__get_current_time",
    ])?;
    assert!(out.status.success(), "{out:?}");
    let r = results(&fake.server.message_requests()[1].body);
    let text = result_text(&r[0]);
    assert!(
        text.contains("Europe/Paris") && text.contains("datetime"),
        "{text}"
    );
    Ok(())
}

/// A daemon whose working directory's `.mcp.json` (approved in the project's settings) holds
/// `servers`, a bypassPermissions session there, watched.
fn project_session(
    script: Script,
    servers: Value,
) -> anyhow::Result<(Fake, Daemon, tether_tests::Ndjson, String)> {
    let fake = Fake::start(script)?;
    let daemon = Daemon::start_with(fake.env())?;
    let work = daemon.workdir();
    tether_tests::project_mcp_servers(&work, servers)?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&work)?;
    c.watch(&session)?;
    Ok((fake, daemon, c, session))
}

#[test]
fn progress_streams_and_a_cancelled_turn_stops_the_call() -> anyhow::Result<()> {
    let (fake, _daemon, mut c, session) = project_session(
        Script::of([
            Step::default().tool_use(
                "mcp__everything__trigger-long-running-operation",
                json!({"duration": 30, "steps": 30}),
            ),
            Step::text("never reached"),
        ]),
        json!({"everything": {"command": mcp_server("mcp-server-everything")}}),
    )?;
    c.start_turn(&session, "run the long one")?;
    let events = c.events_until("tool_progress")?;
    let call = events
        .iter()
        .find(|e| e["type"] == "tool_call")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        call["data"]["name"],
        "mcp__everything__trigger-long-running-operation"
    );
    let progress = events.last().cloned().unwrap_or_default();
    assert!(
        progress["data"]["chunk"]
            .as_str()
            .is_some_and(|o| o.contains("/30")),
        "{progress}"
    );
    let asked = std::time::Instant::now();
    c.call("turn/cancel", json!({"sessionId": session}))?;
    let events = c.events_until("turn_ended")?;
    assert!(
        asked.elapsed() < std::time::Duration::from_secs(5),
        "cancelled at once, not after 30 s"
    );
    assert_eq!(
        events.last().map(|e| e["data"]["stopReason"].clone()),
        Some(json!("cancelled"))
    );
    assert_eq!(fake.server.message_requests().len(), 1);
    Ok(())
}

#[test]
fn a_crashed_server_restarts_and_a_changed_tool_list_reaches_the_next_request() -> anyhow::Result<()>
{
    let (fake, _daemon, mut c, session) = project_session(
        Script::of([
            Step::default().tool_use("mcp__probe__pid", json!({})),
            Step::text("t1"),
            Step::default().tool_use("mcp__probe__crash", json!({})),
            Step::text("t2"),
            Step::default().tool_use("mcp__probe__pid", json!({})),
            Step::text("t3"),
            Step::default().tool_use("mcp__probe__grow", json!({})),
            Step::text("t4"),
            Step::default().tool_use("mcp__probe__extra", json!({})),
            Step::text("t5"),
        ]),
        json!({"probe": {"command": tether_tests::bin("mcp-test-server")}}),
    )?;
    for prompt in ["pid", "crash", "pid again", "grow", "extra"] {
        c.start_turn(&session, prompt)?;
        let events = c.events_until("turn_ended")?;
        let end = events.last().cloned().unwrap_or_default();
        assert_eq!(end["data"]["stopReason"], "end_turn", "{prompt}: {end}");
    }
    let sent = fake.server.message_requests();
    let first_pid = result_text(&results(&sent[1].body)[0]);
    assert!(first_pid.parse::<u32>().is_ok(), "{first_pid}");
    let crashed = &results(&sent[3].body)[0];
    assert_eq!(crashed["is_error"], true, "{crashed}");
    assert!(result_text(crashed).contains("probe"), "{crashed}");
    let second_pid = result_text(&results(&sent[5].body)[0]);
    assert!(second_pid.parse::<u32>().is_ok(), "{second_pid}");
    assert_ne!(first_pid, second_pid, "a new process after the crash");
    assert!(!tool_names(&sent[6].body)?.contains(&"mcp__probe__extra"));
    assert!(tool_names(&sent[8].body)?.contains(&"mcp__probe__extra"));
    assert_eq!(
        result_text(&results(&sent[9].body)[0]),
        "the extra tool answers"
    );
    Ok(())
}

#[test]
fn tether_mcp_adds_lists_approves_and_removes_as_claude_mcp_does() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::default().tool_use("mcp__probe__pid", json!({})),
        Step::text("done"),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let probe = tether_tests::bin("mcp-test-server");
    let probe = probe.to_string_lossy();
    let text = |out: &std::process::Output| String::from_utf8_lossy(&out.stdout).into_owned();

    let out = daemon.run_tether(&["mcp", "add", "probe", "--", &probe])?;
    assert!(out.status.success(), "{out:?}");
    assert!(
        text(&out).contains("Added the local MCP server probe"),
        "{out:?}"
    );
    let state: Value = serde_json::from_str(&std::fs::read_to_string(
        daemon.workdir().join("../home/.claude.json"),
    )?)?;
    let work = daemon.workdir();
    assert_eq!(
        state["projects"][work.to_string_lossy().as_ref()]["mcpServers"]["probe"]["command"],
        json!(probe),
        "kept where claude keeps local servers: {state}"
    );
    let out = daemon.run_tether(&["mcp", "list"])?;
    assert!(
        text(&out).contains("probe: ") && text(&out).contains("idle"),
        "{out:?}"
    );

    let out = daemon.run_tether(&["-p", "pid", "--allowedTools", "mcp__probe"])?;
    assert!(out.status.success(), "{out:?}");
    let out = daemon.run_tether(&["mcp", "get", "probe", "--json"])?;
    let got: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(got["state"], "connected", "{got}");
    assert_eq!(got["scope"], "local");
    assert!(
        got["tools"]
            .as_array()
            .is_some_and(|t| t.contains(&json!("mcp__probe__pid"))),
        "{got}"
    );

    let out = daemon.run_tether(&["mcp", "add-json", "web", r#"{"type":"http"}"#])?;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("missing \"url\""),
        "{out:?}"
    );
    let out = daemon.run_tether(&[
        "mcp",
        "add",
        "--scope",
        "project",
        "--transport",
        "http",
        "web",
        "http://127.0.0.1:9/mcp",
    ])?;
    assert!(out.status.success(), "{out:?}");
    let list = daemon.run_tether(&["mcp", "list", "--json"])?;
    let list: Value = serde_json::from_slice(&list.stdout)?;
    assert_eq!(list["unapproved"], json!(["web"]));
    let out = daemon.run_tether(&["mcp", "approve", "web"])?;
    assert!(out.status.success(), "{out:?}");
    let list = daemon.run_tether(&["mcp", "list", "--json"])?;
    let list: Value = serde_json::from_slice(&list.stdout)?;
    assert_eq!(list["unapproved"], json!([]));
    assert_eq!(list["servers"].as_array().map(Vec::len), Some(2));

    for name in ["probe", "web"] {
        let out = daemon.run_tether(&["mcp", "remove", name])?;
        assert!(out.status.success(), "{out:?}");
    }
    let out = daemon.run_tether(&["mcp", "list"])?;
    assert!(text(&out).contains("No MCP servers"), "{out:?}");
    Ok(())
}

#[test]
fn a_call_longer_than_the_idle_time_is_not_stopped() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::default().tool_use(
            "mcp__everything__trigger-long-running-operation",
            json!({"duration": 2, "steps": 2}),
        ),
        Step::text("finished"),
    ]))?;
    let mut env = fake.env();
    env.push(("TETHER_MCP_IDLE_MS".into(), "300".into()));
    let daemon = Daemon::start_with(env)?;
    let config = everything_stdio();
    let out = daemon.run_tether(&[
        "-p",
        "run it",
        "--mcp-config",
        &config,
        "--allowedTools",
        "mcp__everything",
    ])?;
    assert!(out.status.success(), "{out:?}");
    let r = results(&fake.server.message_requests()[1].body);
    assert_ne!(r[0]["is_error"], true, "not stopped mid-call: {}", r[0]);
    assert!(
        result_text(&r[0]).contains("completed"),
        "{}",
        result_text(&r[0])
    );
    Ok(())
}

#[test]
fn a_permission_prompt_tool_answers_headless_permission_requests() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::default().tool_use("Bash", json!({"command": "echo original > original.txt"})),
        Step::default().tool_use("Bash", json!({"command": "rm -rf notes"})),
        Step::text("Done."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let config =
        json!({"mcpServers": {"probe": {"command": tether_tests::bin("mcp-test-server")}}})
            .to_string();
    let out = daemon.run_tether(&[
        "-p",
        "do both",
        "--mcp-config",
        &config,
        "--permission-prompt-tool",
        "mcp__probe__approve",
        "--output-format",
        "json",
    ])?;
    assert!(out.status.success(), "{out:?}");
    // Allowed, with the tool's input instead of the model's.
    assert!(daemon.workdir().join("approved.txt").exists());
    assert!(!daemon.workdir().join("original.txt").exists());
    // Denied, with the tool's message reaching the model.
    let last = fake
        .server
        .message_requests()
        .last()
        .cloned()
        .context("request")?;
    let denied = results(&last.body);
    assert_eq!(denied[0]["is_error"], true);
    assert!(
        result_text(&denied[0]).contains("rm -rf notes is not allowed here"),
        "{denied:?}"
    );
    let bad = daemon.run_tether(&["-p", "x", "--permission-prompt-tool", "Bash"])?;
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("must name an MCP tool"),
        "{bad:?}"
    );
    Ok(())
}

#[test]
fn a_stdio_server_dies_with_a_daemon_killed_outright() -> anyhow::Result<()> {
    let (fake, mut daemon, mut c, session) = project_session(
        Script::of([
            Step::default().tool_use("mcp__probe__pid", json!({})),
            Step::text("got it"),
        ]),
        // A server that would outlive its closed stdin.
        json!({"probe": {"command": tether_tests::bin("mcp-test-server"),
            "env": {"MCP_TEST_LINGER": "1"}}}),
    )?;
    c.start_turn(&session, "pid")?;
    c.events_until("turn_ended")?;
    let pid = result_text(&results(&fake.server.message_requests()[1].body)[0]);
    let proc_dir = std::path::PathBuf::from(format!("/proc/{}", pid.trim()));
    assert!(proc_dir.exists(), "the server runs: {pid}");
    daemon.kill9()?;
    // SIGKILL runs no handler in the daemon: the kernel ends the server.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let gone = loop {
        let state = std::fs::read_to_string(proc_dir.join("stat")).unwrap_or_default();
        // Gone, or a zombie waiting for init to reap it.
        if state.is_empty() || state.split_whitespace().nth(2) == Some("Z") {
            break true;
        }
        if std::time::Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(gone, "the MCP server {pid} outlived the daemon");
    Ok(())
}

#[test]
fn the_official_filesystem_server_reads_lists_and_refuses_outside_its_root() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::default()
            .tool_use("mcp__fs__read_text_file", json!({"path": "notes.txt"}))
            .tool_use("mcp__fs__list_directory", json!({"path": "."})),
        Step::default().tool_use("mcp__fs__read_text_file", json!({"path": "/etc/hostname"})),
        Step::text("Read them."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let work = daemon.workdir();
    std::fs::write(work.join("notes.txt"), "the filesystem server read this\n")?;
    std::fs::create_dir_all(work.join("src"))?;
    let config = json!({"mcpServers": {"fs": {
        "command": mcp_server("mcp-server-filesystem"),
        "args": [work.display().to_string()],
    }}})
    .to_string();
    let out = daemon.run_tether(&[
        "-p",
        "read the notes",
        "--mcp-config",
        &config,
        "--allowedTools",
        "mcp__fs",
    ])?;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8(out.stdout)?, "Read them.\n");
    let sent = fake.server.message_requests();
    let first = results(&sent[1].body);
    assert!(
        result_text(&first[0]).contains("the filesystem server read this"),
        "{first:?}"
    );
    let listing = result_text(&first[1]);
    assert!(
        listing.contains("notes.txt") && listing.contains("[DIR] src"),
        "{listing}"
    );
    // Outside the directory it was given: the server refuses, as an error the model reads.
    let outside = &results(&sent[2].body)[0];
    assert_eq!(outside["is_error"], true, "{outside}");
    assert!(
        result_text(outside).contains("outside allowed directories")
            || result_text(outside).contains("Access denied"),
        "{outside}"
    );
    Ok(())
}
