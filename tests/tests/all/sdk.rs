//! Agents built on the Claude Agent SDKs for Python and TypeScript, pointed at `tether`
//! (`cli_path`, `pathToClaudeCodeExecutable`), as a user of each SDK would (`tests/sdk/agent.py`,
//! `tests/sdk/agent.mjs`): turns in a daemon session through the SDK's own stream-json and
//! control protocol, `can_use_tool` allowing and denying, hook callbacks (PreToolUse refusing a
//! call, UserPromptSubmit adding context), a tool of an in-process SDK MCP server, an interrupt during a tool, a one-shot
//! `query()`, and resuming the session by id. Each scenario runs with both SDKs. The SDKs'
//! bundled Claude Code never runs: the agents name tether as their CLI.

use anyhow::Context;
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake, bin, sdk_node_dir, sdk_python};

/// The SDKs every scenario runs with.
const SDKS: [Sdk; 2] = [Sdk::Python, Sdk::TypeScript];

#[derive(Debug, Clone, Copy)]
enum Sdk {
    Python,
    TypeScript,
}

/// How long one scenario may take.
const PATIENCE: Duration = Duration::from_secs(60);

/// Runs the `sdk` agent's `SCENARIO tether ARGS…` against `daemon`; the lines it printed.
fn agent(sdk: Sdk, daemon: &Daemon, scenario: &str, args: &[&str]) -> anyhow::Result<Vec<Value>> {
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("sdk");
    let probe = daemon.tether();
    let mut cmd = match sdk {
        Sdk::Python => {
            let mut cmd = Command::new(sdk_python());
            cmd.arg(scripts.join("agent.py"));
            cmd
        }
        Sdk::TypeScript => {
            let mut cmd = Command::new("node");
            cmd.arg(scripts.join("agent.mjs")).arg(sdk_node_dir());
            cmd
        }
    };
    cmd.arg(scenario)
        .arg(bin("tether"))
        .args(args)
        .current_dir(daemon.workdir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in probe.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    let child = cmd.spawn().context("start the SDK agent")?;
    let pid = child.id();
    // Read to the end on a thread (the pipes never fill), given up on after PATIENCE.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(PATIENCE) {
        Ok(out) => out?,
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            anyhow::bail!(
                "the {sdk:?} agent did not finish within {PATIENCE:?}: {}",
                daemon.log()
            );
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    anyhow::ensure!(
        out.status.success(),
        "the {sdk:?} agent failed ({}):\n{stdout}\n{stderr}\n{}",
        out.status,
        daemon.log()
    );
    let lines: Vec<Value> = stdout
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .with_context(|| format!("{stdout}\n{stderr}"))?;
    anyhow::ensure!(
        lines.last().is_some_and(|l| l["kind"] == "done"),
        "the agent did not finish:\n{stdout}\n{stderr}"
    );
    Ok(lines)
}

/// Runs a scenario with every SDK, saying which failed.
fn each_sdk(scenario: fn(Sdk) -> anyhow::Result<()>) -> anyhow::Result<()> {
    for sdk in SDKS {
        scenario(sdk).with_context(|| format!("with the {sdk:?} SDK"))?;
    }
    Ok(())
}

fn of_kind<'a>(lines: &'a [Value], kind: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["kind"] == kind).collect()
}

/// The logged events of `session`, as any client attaching later replays them.
fn replay(daemon: &Daemon, session: &str) -> anyhow::Result<Vec<Value>> {
    let mut c = daemon.ndjson()?;
    c.subscribe(session, json!(0))?;
    let mut events = c.events_until("replay_complete")?;
    events.pop();
    Ok(events)
}

#[test]
fn an_sdk_client_runs_its_turns_in_a_daemon_session() -> anyhow::Result<()> {
    each_sdk(an_sdk_client_runs_its_turns_in_a_daemon_session_with)
}

fn an_sdk_client_runs_its_turns_in_a_daemon_session_with(sdk: Sdk) -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::text("The first answer."),
        Step::text("The second answer."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let lines = agent(sdk, &daemon, "multi", &[])?;
    let init = of_kind(&lines, "init");
    assert_eq!(init[0]["version"], env!("CARGO_PKG_VERSION"), "{lines:?}");
    let results = of_kind(&lines, "result");
    assert_eq!(results.len(), 2, "one result per message: {lines:?}");
    assert_eq!(results[0]["result"], "The first answer.");
    assert_eq!(results[1]["result"], "The second answer.");
    assert_eq!(results[0]["is_error"], false);
    assert!(
        results[1]["model_usage"]
            .as_object()
            .is_some_and(|m| !m.is_empty()),
        "{lines:?}"
    );
    let session = results[0]["session_id"].as_str().context("session")?;
    assert_eq!(results[1]["session_id"], session);
    // The session is the daemon's: any client replays both turns.
    let events = replay(&daemon, session)?;
    let ended = events.iter().filter(|e| e["type"] == "turn_ended").count();
    assert_eq!(ended, 2);
    // The second request carried the first turn: one conversation.
    let requests = fake.server.message_requests();
    let last = requests.last().context("requests")?;
    assert!(last.body.to_string().contains("The first answer."));
    fake.no_rejections();
    Ok(())
}

#[test]
fn can_use_tool_allows_and_denies_from_the_sdk() -> anyhow::Result<()> {
    each_sdk(can_use_tool_allows_and_denies_from_the_sdk_with)
}

fn can_use_tool_allows_and_denies_from_the_sdk_with(sdk: Sdk) -> anyhow::Result<()> {
    let daemon_dir = tempfile::tempdir()?;
    let allowed = daemon_dir.path().join("allowed.txt");
    let denied = daemon_dir.path().join("denied.txt");
    let fake = Fake::start(Script::of([
        Step::text("First file.").tool_use(
            "Write",
            json!({"file_path": allowed.display().to_string(), "content": "yes\n"}),
        ),
        Step::text("Second file.").tool_use(
            "Write",
            json!({"file_path": denied.display().to_string(), "content": "no\n"}),
        ),
        Step::text("One written, one refused."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let lines = agent(sdk, &daemon, "permissions", &[])?;
    let asked = of_kind(&lines, "asked");
    assert_eq!(asked.len(), 2, "{lines:?}");
    assert_eq!(asked[0]["tool"], "Write");
    assert!(asked[0]["tool_use_id"].is_string(), "{lines:?}");
    assert_eq!(std::fs::read_to_string(&allowed)?, "yes\n");
    assert!(!denied.exists(), "the denied call ran");
    let result = of_kind(&lines, "result");
    assert_eq!(result.len(), 1, "{lines:?}");
    assert_eq!(result[0]["result"], "One written, one refused.");
    let denials = result[0]["denials"].as_array().context("denials")?;
    assert_eq!(denials.len(), 1, "{lines:?}");
    assert_eq!(denials[0]["tool_name"], "Write");
    // The model was told why.
    let requests = fake.server.message_requests();
    assert!(
        requests
            .last()
            .is_some_and(|r| r.body.to_string().contains("not that one")),
        "the denial's message did not reach the model"
    );
    fake.no_rejections();
    Ok(())
}

#[test]
fn an_interrupt_from_the_sdk_stops_the_tool_and_the_session_goes_on() -> anyhow::Result<()> {
    each_sdk(an_interrupt_from_the_sdk_stops_the_tool_and_the_session_goes_on_with)
}

fn an_interrupt_from_the_sdk_stops_the_tool_and_the_session_goes_on_with(
    sdk: Sdk,
) -> anyhow::Result<()> {
    let marker = format!("sdk-interrupt-{}", std::process::id());
    let fake = Fake::start(Script::of([
        Step::text("Running it.")
            .tool_use("Bash", json!({"command": format!("sleep 30 # {marker}")})),
        Step::text("Still here."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let lines = agent(sdk, &daemon, "interrupt", &[])?;
    assert_eq!(of_kind(&lines, "interrupted").len(), 1, "{lines:?}");
    let results = of_kind(&lines, "result");
    assert_eq!(results.len(), 2, "{lines:?}");
    assert_eq!(results[0]["is_error"], true, "{lines:?}");
    assert_eq!(results[1]["result"], "Still here.", "{lines:?}");
    let running = Command::new("pgrep").arg("-f").arg(&marker).output()?;
    assert!(!running.status.success(), "the interrupted tool still runs");
    fake.no_rejections();
    Ok(())
}

#[test]
fn the_sdks_hook_callbacks_refuse_a_call_and_add_context() -> anyhow::Result<()> {
    each_sdk(the_sdks_hook_callbacks_refuse_a_call_and_add_context_with)
}

fn the_sdks_hook_callbacks_refuse_a_call_and_add_context_with(sdk: Sdk) -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::text("Making it.").tool_use("Bash", json!({"command": "echo kept > kept.txt"})),
        Step::text("Cleaning up.").tool_use("Bash", json!({"command": "rm kept.txt"})),
        Step::text("The hook kept it."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    // A command hook of the project runs beside the program's callbacks.
    let settings = daemon.workdir().join(".claude");
    std::fs::create_dir_all(&settings)?;
    std::fs::write(
        settings.join("settings.json"),
        json!({"hooks": {"PostToolUse": [{"matcher": "Bash", "hooks": [
            {"type": "command", "command": "echo checked by the project"}
        ]}]}})
        .to_string(),
    )?;
    daemon.trust(&daemon.workdir())?;
    let lines = agent(sdk, &daemon, "hooks", &[])?;
    // Every hook's start and end reached the program (`includeHookEvents`), paired by id.
    let told = of_kind(&lines, "hook_event");
    let ran = |subtype: &str, event: &str| -> Vec<&Value> {
        told.iter()
            .copied()
            .filter(|h| h["subtype"] == subtype && h["event"] == event)
            .collect()
    };
    assert_eq!(
        ran("hook_started", "UserPromptSubmit").len(),
        1,
        "{lines:?}"
    );
    let pre = ran("hook_response", "PreToolUse");
    assert_eq!(pre.len(), 2, "{lines:?}");
    assert!(pre.iter().all(|h| h["outcome"] == "success"), "{lines:?}");
    assert!(
        pre[1]["output"]
            .as_str()
            .is_some_and(|o| o.contains("no removing")),
        "{lines:?}"
    );
    assert_eq!(pre[0]["name"], "PreToolUse:Bash", "{lines:?}");
    let post = ran("hook_response", "PostToolUse");
    assert_eq!(post.len(), 1, "only the call that ran: {lines:?}");
    assert_eq!(post[0]["output"], "checked by the project", "{lines:?}");
    for response in ran("hook_response", "PreToolUse") {
        assert!(
            told.iter()
                .any(|h| h["subtype"] == "hook_started" && h["id"] == response["id"]),
            "{lines:?}"
        );
    }
    let prompted: Vec<&Value> = of_kind(&lines, "hook")
        .into_iter()
        .filter(|h| h["event"] == "UserPromptSubmit")
        .collect();
    assert_eq!(prompted.len(), 1, "{lines:?}");
    assert_eq!(prompted[0]["prompt"], "make a file, then clean up");
    let hooks: Vec<&Value> = of_kind(&lines, "hook")
        .into_iter()
        .filter(|h| h["event"] == "PreToolUse")
        .collect();
    assert_eq!(hooks.len(), 2, "{lines:?}");
    assert_eq!(hooks[0]["event"], "PreToolUse");
    assert_eq!(hooks[0]["tool"], "Bash");
    assert!(hooks[0]["tool_use_id"].is_string(), "{lines:?}");
    assert_eq!(hooks[1]["command"], "rm kept.txt");
    assert!(
        daemon.workdir().join("kept.txt").exists(),
        "the refused rm ran"
    );
    let result = of_kind(&lines, "result");
    assert_eq!(result[0]["result"], "The hook kept it.", "{lines:?}");
    let requests = fake.server.message_requests();
    assert!(
        requests
            .last()
            .is_some_and(|r| r.body.to_string().contains("no removing")),
        "the hook's reason did not reach the model"
    );
    assert!(
        requests[0]
            .body
            .to_string()
            .contains("the user prefers short answers"),
        "the UserPromptSubmit callback's context did not reach the model"
    );
    fake.no_rejections();
    Ok(())
}

#[test]
fn a_sub_agent_the_program_defines_speaks_under_the_call_that_runs_it() -> anyhow::Result<()> {
    each_sdk(a_sub_agent_the_program_defines_speaks_under_the_call_that_runs_it_with)
}

fn a_sub_agent_the_program_defines_speaks_under_the_call_that_runs_it_with(
    sdk: Sdk,
) -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::text("Asking the counter.").tool_use(
            "Agent",
            json!({"description": "count", "prompt": "Count to three.", "subagent_type": "counter"}),
        ),
        Step::text("one two three"),
        Step::text("It counted to three."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let lines = agent(sdk, &daemon, "agents", &[])?;
    let said = of_kind(&lines, "assistant");
    let call = of_kind(&lines, "tool_use");
    assert_eq!(call.len(), 1, "{lines:?}");
    // The parent's messages have no parent; the sub-agent's name the Agent call.
    let child: Vec<&&Value> = said.iter().filter(|m| !m["parent"].is_null()).collect();
    assert_eq!(child.len(), 1, "{lines:?}");
    assert_eq!(child[0]["text"], "one two three");
    let parent = child[0]["parent"].as_str().context("parent")?;
    assert!(parent.starts_with("toolu_"), "{lines:?}");
    assert!(
        said.iter()
            .any(|m| m["parent"].is_null() && m["text"] == "It counted to three."),
        "{lines:?}"
    );
    // The program's agent ran with its own prompt.
    let requests = fake.server.message_requests();
    assert!(
        requests[1].body["system"]
            .to_string()
            .contains("You count."),
        "{}",
        requests[1].body["system"]
    );
    fake.no_rejections();
    Ok(())
}

#[test]
fn the_sdks_permission_request_callback_answers_while_the_turn_waits() -> anyhow::Result<()> {
    each_sdk(the_sdks_permission_request_callback_answers_while_the_turn_waits_with)
}

fn the_sdks_permission_request_callback_answers_while_the_turn_waits_with(
    sdk: Sdk,
) -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::text("Writing.").tool_use(
            "Write",
            json!({"file_path": "approved.txt", "content": "yes\n"}),
        ),
        Step::text("Written."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let file = daemon.workdir().join("approved.txt");
    let lines = agent(sdk, &daemon, "approver", &[])?;
    let hooks = of_kind(&lines, "hook");
    assert!(
        hooks
            .iter()
            .any(|h| h["event"] == "PermissionRequest" && h["tool"] == "Write"),
        "{lines:?}"
    );
    assert!(
        hooks.iter().any(|h| h["event"] == "Notification"
            && h["message"].as_str().is_some_and(|m| m.contains("Write"))),
        "{lines:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&file).with_context(|| format!("{lines:?}"))?,
        "yes\n"
    );
    let result = of_kind(&lines, "result");
    assert_eq!(result[0]["result"], "Written.", "{lines:?}");
    fake.no_rejections();
    Ok(())
}

#[test]
fn a_tool_of_the_sdks_in_process_mcp_server_runs_in_the_program() -> anyhow::Result<()> {
    each_sdk(a_tool_of_the_sdks_in_process_mcp_server_runs_in_the_program_with)
}

fn a_tool_of_the_sdks_in_process_mcp_server_runs_in_the_program_with(
    sdk: Sdk,
) -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::text("Adding.").tool_use("mcp__calc__add", json!({"a": 2, "b": 3})),
        Step::text("It is 5."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let lines = agent(sdk, &daemon, "mcp", &[])?;
    let ran = of_kind(&lines, "tool_ran");
    let requests = fake.server.message_requests();
    assert_eq!(
        ran.len(),
        1,
        "{lines:?}\n{}\n{}",
        requests
            .last()
            .map(|r| r.body["messages"].to_string())
            .unwrap_or_default(),
        daemon.log()
    );
    assert_eq!(ran[0]["args"]["a"], 2, "{lines:?}");
    let result = of_kind(&lines, "result");
    assert_eq!(result[0]["result"], "It is 5.", "{lines:?}");
    // The model saw the tool among its tools, and got what it returned.
    assert!(
        requests[0].body["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == "mcp__calc__add")),
        "the tool was not offered"
    );
    let last = requests.last().context("requests")?;
    let answer = last.body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .context("the last message")?;
    assert!(answer.to_string().contains('5'), "{answer}");
    fake.no_rejections();
    Ok(())
}

#[test]
fn a_one_shot_query_and_a_resumed_one_share_the_session() -> anyhow::Result<()> {
    each_sdk(a_one_shot_query_and_a_resumed_one_share_the_session_with)
}

fn a_one_shot_query_and_a_resumed_one_share_the_session_with(sdk: Sdk) -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::text("Once."),
        Step::text("Twice, same conversation."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let first = agent(sdk, &daemon, "oneshot", &[])?;
    let result = of_kind(&first, "result");
    assert_eq!(result.len(), 1, "{first:?}");
    assert_eq!(result[0]["result"], "Once.");
    let session = result[0]["session_id"]
        .as_str()
        .context("session")?
        .to_owned();
    let again = agent(sdk, &daemon, "resume", &[&session])?;
    let result = of_kind(&again, "result");
    assert_eq!(result[0]["session_id"], session.as_str(), "{again:?}");
    assert_eq!(result[0]["result"], "Twice, same conversation.");
    let requests = fake.server.message_requests();
    assert!(
        requests
            .last()
            .is_some_and(|r| r.body.to_string().contains("just once")),
        "the resumed turn did not carry the first"
    );
    fake.no_rejections();
    Ok(())
}

/// `tether` as an SDK starts it: stream-json both ways, `flags` between, in the daemon's work
/// directory; its stdin, and its stdout read as [`Lines`] (stderr stays with the child).
fn stream_json(
    daemon: &Daemon,
    flags: &[&str],
) -> anyhow::Result<(std::process::Child, std::process::ChildStdin, Lines)> {
    let mut child = daemon
        .tether()
        .args(["--output-format", "stream-json"])
        .args(flags)
        .args(["--input-format", "stream-json"])
        .current_dir(daemon.workdir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let stdin = child.stdin.take().context("stdin")?;
    let lines = Lines::of(child.stdout.take().context("stdout")?);
    Ok((child, stdin, lines))
}

/// Lines `tether` writes, read on a thread so a test can wait for one with a deadline.
struct Lines(std::sync::mpsc::Receiver<String>);

impl Lines {
    fn of(stdout: std::process::ChildStdout) -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self(rx)
    }

    /// The next line for which `wanted` holds (the ones before it are skipped).
    fn until(&self, wanted: impl Fn(&Value) -> bool) -> anyhow::Result<Value> {
        loop {
            let line = self
                .0
                .recv_timeout(tether_tests::WAIT)
                .context("no such line from tether")?;
            let value: Value =
                serde_json::from_str(&line).with_context(|| format!("not JSON: {line}"))?;
            if wanted(&value) {
                return Ok(value);
            }
        }
    }
}

/// The control protocol line by line, as an SDK writes it, with what no SDK should write mixed
/// in: each bad line is answered or reported and the run goes on; a permission request the SDK
/// is asked is answered first by another client, and the SDK's request is withdrawn.
#[test]
fn bad_lines_are_answered_and_another_client_may_answer_first() -> anyhow::Result<()> {
    use std::io::Write;
    let target = tempfile::tempdir()?;
    let file = target.path().join("from-the-terminal.txt");
    let fake = Fake::start(Script::of([
        Step::text("Writing.").tool_use(
            "Write",
            json!({"file_path": file.display().to_string(), "content": "approved elsewhere\n"}),
        ),
        Step::text("Written."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let (child, mut stdin, lines) = stream_json(
        &daemon,
        &[
            "--verbose",
            "--system-prompt=",
            "--permission-prompt-tool=stdio",
            "--setting-sources=user,project,local",
            "--max-thinking-tokens=4000",
        ],
    )?;
    let send = |stdin: &mut std::process::ChildStdin, v: Value| writeln!(stdin, "{v}");

    send(
        &mut stdin,
        json!({"type": "control_request", "request_id": "req_1",
                "request": {"subtype": "initialize", "hooks": null}}),
    )?;
    let init = lines.until(|l| l["type"] == "control_response")?;
    assert_eq!(init["response"]["subtype"], "success", "{init}");
    assert_eq!(init["response"]["request_id"], "req_1");
    writeln!(stdin, "this is not JSON")?;
    send(
        &mut stdin,
        json!({"type": "control_request", "request_id": "req_2",
                "request": {"subtype": "frobnicate"}}),
    )?;
    let refused = lines.until(|l| l["type"] == "control_response")?;
    assert_eq!(refused["response"]["subtype"], "error", "{refused}");
    assert_eq!(refused["response"]["request_id"], "req_2");
    assert!(
        refused["response"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("frobnicate")),
        "{refused}"
    );
    send(
        &mut stdin,
        json!({"type": "control_response",
                "response": {"subtype": "success", "request_id": "nobody_asked", "response": {}}}),
    )?;
    // Reconnecting a server this directory does not have is refused, naming it.
    send(
        &mut stdin,
        json!({"type": "control_request", "request_id": "req_3",
                "request": {"subtype": "mcp_reconnect", "serverName": "nowhere"}}),
    )?;
    let reconnect = lines.until(|l| l["type"] == "control_response")?;
    assert_eq!(reconnect["response"]["request_id"], "req_3", "{reconnect}");
    assert_eq!(reconnect["response"]["subtype"], "error", "{reconnect}");
    assert!(
        reconnect["response"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("nowhere")),
        "{reconnect}"
    );

    send(
        &mut stdin,
        json!({"type": "user", "session_id": "",
                "message": {"role": "user", "content": "write the file"},
                "parent_tool_use_id": null}),
    )?;
    let system = lines.until(|l| l["type"] == "system")?;
    let session = system["session_id"].as_str().context("session")?.to_owned();
    let asked = lines.until(|l| l["type"] == "control_request")?;
    assert_eq!(asked["request"]["subtype"], "can_use_tool", "{asked}");
    assert_eq!(asked["request"]["tool_name"], "Write");
    // A terminal attached to the session answers before the SDK does.
    let mut terminal = daemon.ndjson()?;
    let open = terminal.call("permission/list", json!({"sessionId": session}))?;
    let request = open[0]["requestId"].clone();
    let answer = terminal.call(
        "permission/respond",
        json!({"sessionId": session, "requestId": request, "decision": "allow_once"}),
    )?;
    assert_eq!(answer["status"], "accepted", "{answer}");
    let withdrawn = lines.until(|l| l["type"] == "control_cancel_request")?;
    assert_eq!(withdrawn["request_id"], asked["request_id"], "{withdrawn}");
    // The SDK's late answer changes nothing.
    send(
        &mut stdin,
        json!({"type": "control_response", "response": {"subtype": "success",
                "request_id": asked["request_id"], "response": {"behavior": "deny", "message": "too late"}}}),
    )?;
    let result = lines.until(|l| l["type"] == "result")?;
    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(result["result"], "Written.");
    assert_eq!(std::fs::read_to_string(&file)?, "approved elsewhere\n");
    drop(stdin);
    let out = child.wait_with_output()?;
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not JSON"), "{stderr}");
    assert!(stderr.contains("nobody_asked"), "{stderr}");
    fake.no_rejections();
    Ok(())
}

/// `--resume-session-at` with an assistant message's `uuid`: the session goes on from that
/// message, in a new session forked there, the later turns left out.
#[test]
fn resuming_at_a_message_goes_on_from_there() -> anyhow::Result<()> {
    use std::io::Write;
    let fake = Fake::start(Script::of([
        Step::text("The first answer."),
        Step::text("The second answer."),
        Step::text("The third answer."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let user = |text: &str| json!({"type": "user", "message": {"role": "user", "content": text}});
    let (mut first, mut stdin, lines) = stream_json(&daemon, &["--verbose"])?;
    writeln!(stdin, "{}", user("first question"))?;
    let answer = lines.until(|l| l["type"] == "assistant")?;
    let at = answer["uuid"].as_str().context("uuid")?.to_owned();
    let result = lines.until(|l| l["type"] == "result")?;
    let session = result["session_id"].as_str().context("session")?.to_owned();
    writeln!(stdin, "{}", user("second question"))?;
    lines.until(|l| l["type"] == "result")?;
    drop(stdin);
    assert!(first.wait()?.success());

    let (mut again, mut stdin, lines) = stream_json(
        &daemon,
        &[
            "--verbose",
            &format!("--resume={session}"),
            &format!("--resume-session-at={at}"),
        ],
    )?;
    writeln!(stdin, "{}", user("third question"))?;
    let result = lines.until(|l| l["type"] == "result")?;
    assert_eq!(result["result"], "The third answer.", "{result}");
    assert_ne!(
        result["session_id"],
        session.as_str(),
        "a new session, forked"
    );
    drop(stdin);
    assert!(again.wait()?.success());
    let last = fake.server.message_requests();
    let body = last.last().context("requests")?.body.to_string();
    assert!(body.contains("The first answer."), "{body}");
    assert!(
        !body.contains("second question"),
        "the later turn was kept: {body}"
    );
    // A uuid tether never gave is refused, saying so.
    let out = daemon
        .tether()
        .args([
            "--output-format",
            "stream-json",
            &format!("--resume={session}"),
            "--resume-session-at=4f1c2b9e-0000-4000-8000-000000000001",
            "--input-format",
            "stream-json",
        ])
        .current_dir(daemon.workdir())
        .stdin(Stdio::null())
        .output()?;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not the uuid of a message tether gave"),
        "{out:?}"
    );
    fake.no_rejections();
    Ok(())
}

/// A document block of an SDK's user message reaches the model as a document.
#[test]
fn a_document_in_a_message_reaches_the_model() -> anyhow::Result<()> {
    use std::io::Write;
    let fake = Fake::start(Script::of([Step::text("It says hello.")]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let (mut child, mut stdin, lines) = stream_json(&daemon, &[])?;
    let message = json!({"type": "user", "message": {"role": "user", "content": [
        {"type": "text", "text": "what does it say?"},
        {"type": "document", "title": "greeting",
         "source": {"type": "text", "media_type": "text/plain", "data": "hello there"}},
    ]}});
    writeln!(stdin, "{message}")?;
    let result = lines.until(|l| l["type"] == "result")?;
    assert_eq!(result["result"], "It says hello.", "{result}");
    drop(stdin);
    assert!(child.wait()?.success());
    let requests = fake.server.message_requests();
    let sent = &requests.first().context("a request")?.body["messages"][0]["content"];
    let document = sent
        .as_array()
        .and_then(|blocks| blocks.iter().find(|b| b["type"] == "document"))
        .context("a document block")?;
    assert_eq!(document["source"]["data"], "hello there", "{sent}");
    assert_eq!(document["title"], "greeting");
    fake.no_rejections();
    Ok(())
}
