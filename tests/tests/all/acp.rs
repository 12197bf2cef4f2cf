//! `tether acp` driven by an editor no one here wrote: the ACP Python SDK (`tests/acp/editor.py`,
//! `tests/run` installs the SDK). Every line the bridge writes is checked against the schema the
//! ACP TypeScript SDK ships.

use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Instant;
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake, WAIT, acp_python, acp_schema, bin};

/// Numbers the trace files of a test's editors.
static TRACES: AtomicUsize = AtomicUsize::new(0);

/// The editor: the SDK's client running `tether acp`, commanded over JSON lines.
pub(crate) struct Editor {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<Value>,
    /// Every line `tether acp` wrote.
    trace: PathBuf,
    /// Every report read so far.
    pub(crate) seen: Vec<Value>,
}

impl Drop for Editor {
    /// The editor goes with the test, and `tether acp` with it: left running, the bridge would
    /// start a daemon of its own once the test's daemon is gone.
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Editor {
    fn start(daemon: &Daemon, fake: &Fake) -> anyhow::Result<Self> {
        Self::start_with(daemon, fake, &["acp"], &[])
    }

    /// An editor running `tether ARGS` (which end with `acp`) with more environment.
    pub(crate) fn start_with(
        daemon: &Daemon,
        fake: &Fake,
        args: &[&str],
        env: &[(&str, String)],
    ) -> anyhow::Result<Self> {
        let trace = daemon.dir.path().join(format!(
            "acp-{}.jsonl",
            TRACES.fetch_add(1, Ordering::Relaxed)
        ));
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("acp/editor.py");
        let mut child = Command::new(acp_python())
            // Its own process group: the editor, the shell, `tether acp` and `tee` end together.
            .process_group(0)
            .arg(script)
            .args([
                "sh",
                "-c",
                "trace=$1; shift; \"$0\" \"$@\" | tee -a \"$trace\"",
            ])
            .arg(bin("tether"))
            .arg(&trace)
            .args(args)
            .env("TETHER_SOCKET", daemon.socket())
            .env("TETHER_HOME", daemon.data_dir())
            .env("TETHER_CONFIG", daemon.config_path())
            .envs(fake.env())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .current_dir(daemon.workdir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("start the ACP editor")?;
        let stdin = child.stdin.take().context("stdin")?;
        let stdout = child.stdout.take().context("stdout")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) => {
                        if tx.send(v).is_err() {
                            break;
                        }
                    }
                    Err(_) => eprintln!("editor: {line}"),
                }
            }
        });
        let mut editor = Self {
            child,
            stdin,
            lines,
            trace,
            seen: vec![],
        };
        let init = editor.request(json!({"op": "initialize"}))?;
        assert_eq!(init["result"]["protocolVersion"], 1, "{init}");
        Ok(editor)
    }

    pub(crate) fn send(&mut self, cmd: Value) -> anyhow::Result<()> {
        writeln!(self.stdin, "{cmd}")?;
        self.stdin.flush()?;
        Ok(())
    }

    /// Reads reports until one matches (one already read counts).
    pub(crate) fn until(
        &mut self,
        what: &str,
        matches: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        self.until_from(0, what, matches)
    }

    /// Reads reports until one at or after `from` matches.
    fn until_from(
        &mut self,
        from: usize,
        what: &str,
        matches: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        if let Some(v) = self.seen.iter().skip(from).find(|v| matches(v)) {
            return Ok(v.clone());
        }
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(v) => {
                    self.seen.push(v.clone());
                    if matches(&v) {
                        return Ok(v);
                    }
                }
                Err(_) => bail!(
                    "no {what} within {WAIT:?}; saw:\n{}",
                    self.seen
                        .iter()
                        .map(Value::to_string)
                        .collect::<Vec<_>>()
                        .join("\n")
                ),
            }
        }
    }

    /// Sends a request command and waits for its report.
    pub(crate) fn request(&mut self, cmd: Value) -> anyhow::Result<Value> {
        let op = cmd["op"].clone();
        let from = self.seen.len();
        self.send(cmd)?;
        self.until_from(from, &format!("reply to {op}"), |v| {
            v["op"] == op && (v.get("result").is_some() || v.get("error").is_some())
        })
    }

    pub(crate) fn new_session(&mut self, cwd: &Path) -> anyhow::Result<String> {
        let r = self.request(json!({"op": "new", "cwd": cwd}))?;
        Ok(r["result"]["sessionId"]
            .as_str()
            .with_context(|| format!("no session: {r}"))?
            .to_owned())
    }

    pub(crate) fn prompt(&mut self, session: &str, text: &str, tag: &str) -> anyhow::Result<()> {
        self.send(json!({"op": "prompt", "sessionId": session, "tag": tag,
            "prompt": [{"type": "text", "text": text}]}))
    }

    pub(crate) fn prompt_done(&mut self, tag: &str) -> anyhow::Result<Value> {
        self.until(&format!("end of prompt {tag}"), |v| {
            v["op"] == "prompt" && v["tag"] == tag
        })
    }

    /// The updates of one kind seen so far.
    fn updates(&self, kind: &str) -> Vec<Value> {
        self.seen
            .iter()
            .filter(|v| v["op"] == "update" && v["update"]["sessionUpdate"] == kind)
            .map(|v| v["update"].clone())
            .collect()
    }

    /// The text of the agent's message chunks so far.
    pub(crate) fn agent_text(&self) -> String {
        self.updates("agent_message_chunk")
            .iter()
            .filter_map(|u| u["content"]["text"].as_str())
            .collect()
    }

    /// Every line the bridge wrote, each checked against the ACP schema.
    pub(crate) fn checked_trace(&self) -> anyhow::Result<Vec<Value>> {
        let schema: Value = serde_json::from_str(&std::fs::read_to_string(acp_schema())?)?;
        let defs = schema["$defs"].clone();
        let agent = jsonschema::validator_for(&json!({
            "$defs": defs, "$ref": "#/$defs/AgentOutgoing",
        }))
        .or_else(|_| {
            // The root's first alternative: every message an agent sends.
            let mut root = schema["anyOf"][0].clone();
            root["$defs"] = defs.clone();
            jsonschema::validator_for(&root)
        })
        .map_err(|e| anyhow::anyhow!("the ACP schema does not compile: {e}"))?;
        let def = |name: &str| {
            jsonschema::validator_for(&json!({"$defs": defs, "$ref": format!("#/$defs/{name}")}))
                .map_err(|e| anyhow::anyhow!("{name}: {e}"))
        };
        let update = def("SessionNotification")?;
        let permission = def("RequestPermissionRequest")?;
        let text = std::fs::read_to_string(&self.trace)?;
        let mut lines = vec![];
        for line in text.lines() {
            let v: Value = serde_json::from_str(line)
                .with_context(|| format!("the bridge wrote a line that is not JSON: {line}"))?;
            let errors: Vec<String> = agent.iter_errors(&v).map(|e| e.to_string()).collect();
            assert!(
                errors.is_empty(),
                "{line}\ndoes not match the schema: {errors:?}"
            );
            let specific = match v["method"].as_str() {
                Some("session/update") => Some(&update),
                Some("session/request_permission") => Some(&permission),
                _ => None,
            };
            if let Some(validator) = specific {
                let errors: Vec<String> = validator
                    .iter_errors(&v["params"])
                    .map(|e| e.to_string())
                    .collect();
                assert!(
                    errors.is_empty(),
                    "{line}\ndoes not match the schema: {errors:?}"
                );
            }
            lines.push(v);
        }
        Ok(lines)
    }
}

#[test]
fn an_editor_prompts_and_sees_the_reply_stream_and_a_terminal_sees_the_same_session()
-> anyhow::Result<()> {
    let fake = Fake::start(
        Script::of([
            Step::text("Streaming from tether, in several pieces of text.")
                .thinking("Let me think."),
        ])
        .titling("Editor session"),
    )?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut editor = Editor::start(&daemon, &fake)?;
    let session = editor.new_session(&daemon.workdir())?;
    // The new session is the daemon's: a terminal finds it and watches it.
    let mut terminal = daemon.ndjson()?;
    terminal.watch(&session)?;
    editor.prompt(&session, "hello from the editor", "p1")?;
    let done = editor.prompt_done("p1")?;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(
        editor.agent_text(),
        "Streaming from tether, in several pieces of text."
    );
    let thought: String = editor
        .updates("agent_thought_chunk")
        .iter()
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert_eq!(thought, "Let me think.");
    // The editor's own prompt is not echoed back to it.
    assert!(editor.updates("user_message_chunk").is_empty());
    let seen = terminal.events_until("turn_ended")?;
    let started = seen
        .iter()
        .find(|e| e["type"] == "turn_started")
        .context("turn_started")?;
    assert_eq!(
        started["data"]["input"][0]["text"], "hello from the editor",
        "{started}"
    );
    // The commands came with the session; the session is listed.
    let commands = editor.updates("available_commands_update");
    assert!(
        commands[0]["availableCommands"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["name"] == "compact")),
        "{commands:?}"
    );
    let list = editor.request(json!({"op": "list", "cwd": daemon.workdir()}))?;
    assert!(
        list["result"]["sessions"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| s["sessionId"] == session.as_str())),
        "{list}"
    );
    let request = &fake.server.message_requests()[0].body;
    assert!(
        request["messages"]
            .to_string()
            .contains("hello from the editor"),
        "{request}"
    );
    editor.checked_trace()?;
    Ok(())
}

#[test]
fn the_editor_answers_a_permission_request_and_sees_the_tool_run() -> anyhow::Result<()> {
    let fake = Fake::start(
        Script::of([
            Step::default().tool_use(
                "Bash",
                json!({"command": "echo tool-ran-here | tee out.txt"}),
            ),
            Step::text("The command ran."),
        ])
        .titling("Editor session"),
    )?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut editor = Editor::start(&daemon, &fake)?;
    let session = editor.new_session(&daemon.workdir())?;
    editor.prompt(&session, "run it", "p1")?;
    let asked = editor.until("a permission request", |v| v["op"] == "permission")?;
    let call = &asked["toolCall"];
    assert_eq!(call["kind"], "execute", "{asked}");
    assert_eq!(
        call["title"], "`echo tool-ran-here | tee out.txt`",
        "{asked}"
    );
    let options: Vec<&str> = asked["options"]
        .as_array()
        .context("options")?
        .iter()
        .filter_map(|o| o["optionId"].as_str())
        .collect();
    assert!(options.contains(&"allow_once") && options.contains(&"deny"));
    let tool_call_id = call["toolCallId"]
        .as_str()
        .context("toolCallId")?
        .to_owned();
    editor.send(json!({"op": "answer", "toolCallId": tool_call_id, "optionId": "allow_once"}))?;
    let done = editor.prompt_done("p1")?;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    // The call was announced, ran, and its output reached the editor.
    let started = editor.updates("tool_call");
    assert!(
        started
            .iter()
            .any(|u| u["toolCallId"] == tool_call_id.as_str()),
        "{started:?}"
    );
    let updates = editor.updates("tool_call_update");
    let completed = updates
        .iter()
        .find(|u| u["toolCallId"] == tool_call_id.as_str() && u["status"] == "completed")
        .context("a completed update")?;
    assert!(
        completed["content"].to_string().contains("tool-ran-here"),
        "{completed}"
    );
    assert_eq!(editor.agent_text(), "The command ran.");
    // The model got the command's output.
    assert!(
        fake.server
            .message_requests()
            .iter()
            .any(|r| r.body["messages"].to_string().contains("tool-ran-here\\n")),
        "no request carries the output"
    );
    editor.checked_trace()?;
    Ok(())
}

#[test]
fn writing_over_a_file_shows_the_editor_what_it_replaces() -> anyhow::Result<()> {
    let fake = Fake::start(
        Script::of([
            Step::default().tool_use("Read", json!({"file_path": "notes.txt"})),
            Step::default().tool_use(
                "Write",
                json!({"file_path": "notes.txt", "content": "fresh words\n"}),
            ),
            Step::text("Rewritten."),
        ])
        .titling("Editor session"),
    )?;
    let daemon = Daemon::start_with(fake.env())?;
    std::fs::write(daemon.workdir().join("notes.txt"), "old words\n")?;
    let mut editor = Editor::start(&daemon, &fake)?;
    let session = editor.new_session(&daemon.workdir())?;
    editor.prompt(&session, "rewrite the notes", "p1")?;
    let asked = editor.until("a permission request", |v| v["op"] == "permission")?;
    let diff = asked["toolCall"]["content"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "diff"))
        .context("a diff")?;
    assert_eq!(diff["oldText"], "old words\n", "{asked}");
    assert_eq!(diff["newText"], "fresh words\n", "{asked}");
    let tool_call_id = asked["toolCall"]["toolCallId"]
        .as_str()
        .context("toolCallId")?
        .to_owned();
    // Not running while it waits for the answer.
    let running = |editor: &Editor| {
        editor
            .updates("tool_call_update")
            .iter()
            .chain(editor.updates("tool_call").iter())
            .any(|u| u["toolCallId"] == tool_call_id.as_str() && u["status"] == "in_progress")
    };
    assert!(!running(&editor), "in progress before the answer");
    editor.send(json!({"op": "answer", "toolCallId": tool_call_id, "optionId": "allow_once"}))?;
    let done = editor.prompt_done("p1")?;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert!(running(&editor), "never in progress");
    editor.checked_trace()?;
    Ok(())
}

#[test]
fn the_editor_is_asked_to_trust_a_folder_whose_files_would_act() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("hello")]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let clone = daemon.dir.path().join("clone");
    std::fs::create_dir_all(clone.join(".claude"))?;
    std::fs::write(
        clone.join(".claude/settings.json"),
        json!({"hooks": {"SessionStart": [{"hooks": [
            {"type": "command", "command": "touch session-start-ran"}]}]}})
        .to_string(),
    )?;
    let mut editor = Editor::start(&daemon, &fake)?;
    let session = editor.new_session(&clone)?;
    // The editor prompts at once; the prompt waits for the answer.
    editor.prompt(&session, "hi", "p1")?;
    let asked = editor.until("the trust question", |v| v["op"] == "permission")?;
    let call = &asked["toolCall"];
    assert!(
        call["title"]
            .as_str()
            .is_some_and(|t| t.starts_with("Trust")),
        "{asked}"
    );
    assert!(
        call.to_string().contains("SessionStart hooks"),
        "it says what would act: {asked}"
    );
    assert_eq!(asked["sessionId"], session.as_str());
    let id = call["toolCallId"]
        .as_str()
        .context("toolCallId")?
        .to_owned();
    editor.send(json!({"op": "answer", "toolCallId": id, "optionId": "trust"}))?;
    editor.prompt_done("p1")?;
    // Recorded where Claude Code keeps it, and the clone's hook ran with that first prompt.
    let state: Value = serde_json::from_str(&std::fs::read_to_string(
        daemon.dir.path().join("home/.claude.json"),
    )?)?;
    let key = clone.canonicalize()?.display().to_string();
    assert_eq!(
        state["projects"][key.as_str()]["hasTrustDialogAccepted"],
        true
    );
    assert!(clone.join("session-start-ran").exists());
    editor.checked_trace()?;
    Ok(())
}

#[test]
fn a_terminal_answers_first_and_the_editor_is_told_who() -> anyhow::Result<()> {
    let fake = Fake::start(
        Script::of([
            Step::default().tool_use("Bash", json!({"command": "echo from-terminal > out.txt"})),
            Step::text("Done."),
        ])
        .titling("Editor session"),
    )?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut editor = Editor::start(&daemon, &fake)?;
    let session = editor.new_session(&daemon.workdir())?;
    let mut terminal = daemon.ndjson()?.as_terminal()?;
    terminal.watch(&session)?;
    editor.prompt(&session, "run it", "p1")?;
    editor.until("a permission request", |v| v["op"] == "permission")?;
    let requested = terminal.events_until("permission_requested")?;
    let request = requested.last().context("request")?["data"]["requestId"].clone();
    let answer = terminal.call(
        "permission/respond",
        json!({"sessionId": session, "requestId": request, "decision": "allow_once"}),
    )?;
    assert_eq!(answer["status"], "accepted", "{answer}");
    let done = editor.prompt_done("p1")?;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let notes = editor.updates("tool_call_update");
    assert!(
        notes
            .iter()
            .any(|u| u["content"].to_string().contains("Allowed once by")),
        "{notes:?}"
    );
    // The editor's own prompt was withdrawn.
    let trace = editor.checked_trace()?;
    assert!(
        trace.iter().any(|l| l["method"] == "$/cancel_request"),
        "no $/cancel_request in {trace:?}"
    );
    Ok(())
}

#[test]
fn cancel_ends_the_prompt_and_a_terminals_turn_reaches_the_editor() -> anyhow::Result<()> {
    let fake = Fake::start(
        Script::of([
            Step::text("This reply never ends because the stream stalls.").stall_after(4),
            Step::text("A reply to the terminal."),
        ])
        .titling("Editor session"),
    )?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut editor = Editor::start(&daemon, &fake)?;
    let session = editor.new_session(&daemon.workdir())?;
    editor.prompt(&session, "go", "p1")?;
    editor.until("the first chunk", |v| {
        v["op"] == "update" && v["update"]["sessionUpdate"] == "agent_message_chunk"
    })?;
    editor.send(json!({"op": "cancel", "sessionId": session}))?;
    let done = editor.prompt_done("p1")?;
    assert_eq!(done["result"]["stopReason"], "cancelled", "{done}");
    // A turn a terminal starts shows in the editor with its prompt.
    let mut terminal = daemon.ndjson()?;
    terminal.watch(&session)?;
    terminal.start_turn(&session, "typed in a terminal")?;
    terminal.events_until("turn_ended")?;
    editor.until("the terminal's prompt", |v| {
        v["update"]["sessionUpdate"] == "user_message_chunk"
            && v["update"]["content"]["text"] == "typed in a terminal"
    })?;
    let from = editor.seen.len();
    editor.until_from(from, "the usage after the reply", |v| {
        v["update"]["sessionUpdate"] == "usage_update"
    })?;
    assert!(
        editor.agent_text().ends_with("A reply to the terminal."),
        "{}",
        editor.agent_text()
    );
    editor.checked_trace()?;
    Ok(())
}

#[test]
fn a_session_loads_after_a_daemon_restart_with_its_history() -> anyhow::Result<()> {
    let fake =
        Fake::start(Script::of([Step::text("The first answer.")]).titling("Editor session"))?;
    let mut daemon = Daemon::start_with(fake.env())?;
    let session = {
        let mut editor = Editor::start(&daemon, &fake)?;
        let session = editor.new_session(&daemon.workdir())?;
        editor.prompt(&session, "the first question", "p1")?;
        editor.prompt_done("p1")?;
        session
    };
    daemon.kill9()?;
    daemon.spawn()?;
    let mut editor = Editor::start(&daemon, &fake)?;
    let loaded =
        editor.request(json!({"op": "load", "sessionId": session, "cwd": daemon.workdir()}))?;
    assert!(loaded.get("result").is_some(), "{loaded}");
    // The history came before the answer to session/load.
    let at = editor
        .seen
        .iter()
        .position(|v| v["op"] == "load")
        .context("load")?;
    let before: Vec<&Value> = editor.seen[..at].iter().collect();
    let said = |kind: &str, text: &str| {
        before
            .iter()
            .any(|v| v["update"]["sessionUpdate"] == kind && v["update"]["content"]["text"] == text)
    };
    assert!(
        said("user_message_chunk", "the first question"),
        "{before:?}"
    );
    assert!(
        before
            .iter()
            .any(|v| v["update"]["sessionUpdate"] == "agent_message_chunk"),
        "{before:?}"
    );
    assert_eq!(editor.agent_text(), "The first answer.");
    assert_eq!(
        loaded["result"]["modes"]["currentModeId"], "default",
        "{loaded}"
    );
    editor.checked_trace()?;
    Ok(())
}

#[test]
fn modes_and_the_model_are_set_from_the_editor_and_bad_input_gets_an_error() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("ok")]).titling("Editor session"))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut editor = Editor::start(&daemon, &fake)?;
    let session = editor.new_session(&daemon.workdir())?;
    let set =
        editor.request(json!({"op": "mode", "sessionId": session, "modeId": "acceptEdits"}))?;
    assert!(set.get("result").is_some(), "{set}");
    editor.until("the mode update", |v| {
        v["update"]["sessionUpdate"] == "current_mode_update"
            && v["update"]["currentModeId"] == "acceptEdits"
    })?;
    let bad = editor.request(json!({"op": "mode", "sessionId": session, "modeId": "yolo"}))?;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    let model = editor.request(
        json!({"op": "option", "sessionId": session, "configId": "model", "value": "opus"}),
    )?;
    let options = model["result"]["configOptions"]
        .as_array()
        .with_context(|| format!("{model}"))?;
    assert!(
        options
            .iter()
            .any(|o| o["id"] == "model" && o["currentValue"] == "opus"),
        "{model}"
    );
    let mut terminal = daemon.ndjson()?;
    let got = terminal.call("session/get", json!({"sessionId": session}))?;
    assert_eq!(got["permissionMode"], "acceptEdits", "{got}");
    assert_eq!(got["model"], "opus", "{got}");
    // A line that is not JSON gets a parse error, and the bridge goes on.
    editor.send(json!({"op": "raw", "line": "{not json"}))?;
    let listed = editor.request(json!({"op": "list"}))?;
    assert!(listed.get("result").is_some(), "{listed}");
    let trace = editor.checked_trace()?;
    assert!(
        trace.iter().any(|l| l["error"]["code"] == -32700),
        "no parse error in {trace:?}"
    );
    Ok(())
}

/// Stops the daemon the bridge started on this socket (it is no child of the test).
struct StopsDaemon<'a>(&'a Daemon);

impl Drop for StopsDaemon<'_> {
    fn drop(&mut self) {
        if let Ok(mut c) = self.0.ndjson() {
            let _ = c.call("daemon/shutdown", json!({}));
        }
    }
}

#[test]
fn a_daemon_killed_mid_prompt_fails_the_prompt_clearly_and_the_next_one_works() -> anyhow::Result<()>
{
    let fake = Fake::start(
        Script::of([
            Step::text("This reply stalls until the daemon dies.").stall_after(4),
            Step::text("Back again."),
        ])
        .titling("Editor session"),
    )?;
    let mut daemon = Daemon::start_with(fake.env())?;
    let mut editor = Editor::start(&daemon, &fake)?;
    let session = editor.new_session(&daemon.workdir())?;
    editor.prompt(&session, "go", "p1")?;
    editor.until("the first chunk", |v| {
        v["update"]["sessionUpdate"] == "agent_message_chunk"
    })?;
    daemon.kill9()?;
    // The bridge starts the daemon again; its recovery ends the interrupted turn.
    let _stop = StopsDaemon(&daemon);
    let done = editor.prompt_done("p1")?;
    assert!(
        done["error"]["data"]
            .as_str()
            .is_some_and(|d| d.contains("interrupted")),
        "{done}"
    );
    editor.prompt(&session, "again", "p2")?;
    let done = editor.prompt_done("p2")?;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert!(
        editor.agent_text().ends_with("Back again."),
        "{}",
        editor.agent_text()
    );
    // A daemon command answers in the reply.
    editor.prompt(&session, "/cost", "p3")?;
    let done = editor.prompt_done("p3")?;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert!(editor.agent_text().contains('$'), "{}", editor.agent_text());
    editor.checked_trace()?;
    Ok(())
}

#[test]
fn the_editors_mcp_servers_file_links_and_effort_reach_the_model() -> anyhow::Result<()> {
    let fake = Fake::start(
        Script::of([
            Step::default().tool_use("mcp__probe__pid", json!({})),
            Step::text("The probe answered."),
        ])
        .titling("Editor session"),
    )?;
    let daemon = Daemon::start_with(fake.env())?;
    std::fs::write(daemon.workdir().join("notes.md"), "the notes say: fish\n")?;
    let mut editor = Editor::start(&daemon, &fake)?;
    let created = editor.request(json!({"op": "new", "cwd": daemon.workdir(), "mcpServers": [
        {"name": "probe", "command": bin("mcp-test-server"), "args": [], "env": []}
    ]}))?;
    let session = created["result"]["sessionId"]
        .as_str()
        .with_context(|| format!("{created}"))?
        .to_owned();
    let set = editor
        .request(json!({"op": "mode", "sessionId": session, "modeId": "bypassPermissions"}))?;
    assert!(set.get("result").is_some(), "{set}");
    let effort = editor.request(
        json!({"op": "option", "sessionId": session, "configId": "effort", "value": "low"}),
    )?;
    assert!(
        effort["result"]["configOptions"]
            .as_array()
            .is_some_and(|o| o
                .iter()
                .any(|o| o["id"] == "effort" && o["currentValue"] == "low")),
        "{effort}"
    );
    let link = format!("file://{}", daemon.workdir().join("notes.md").display());
    editor.send(
        json!({"op": "prompt", "sessionId": session, "tag": "p1", "prompt": [
            {"type": "text", "text": "what do the notes say?"},
            {"type": "resource_link", "name": "notes.md", "uri": link},
        ]}),
    )?;
    let done = editor.prompt_done("p1")?;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let requests = fake.server.message_requests();
    let first = requests
        .iter()
        .find(|r| {
            let m = r.body["messages"].to_string();
            m.contains("what do the notes say?") && !m.contains("Write a title")
        })
        .context("the prompt's request")?;
    assert!(
        first.body["messages"]
            .to_string()
            .contains("the notes say: fish"),
        "the file was not attached: {}",
        first.body["messages"]
    );
    assert_eq!(
        first.body["output_config"]["effort"], "low",
        "{}",
        first.body
    );
    assert!(
        tether_tests::tool_names(&first.body)?.contains(&"mcp__probe__pid"),
        "the editor's MCP server's tools are not offered"
    );
    let calls = editor.updates("tool_call");
    assert!(
        calls.iter().any(|c| c["title"] == "mcp__probe__pid"),
        "{calls:?}"
    );
    let results = editor.updates("tool_call_update");
    assert!(
        results.iter().any(|u| u["status"] == "completed"),
        "{results:?}"
    );
    editor.checked_trace()?;
    Ok(())
}

#[test]
fn the_editors_additional_directories_need_no_permission() -> anyhow::Result<()> {
    let fake = Fake::start(Script::default().titling("Editor session"))?;
    let daemon = Daemon::start_with(fake.env())?;
    let other = daemon.dir.path().join("other");
    std::fs::create_dir_all(&other)?;
    std::fs::write(other.join("notes.txt"), "notes from beside the project\n")?;
    let notes = other.join("notes.txt").display().to_string();
    fake.server
        .push(Step::default().tool_use("Read", json!({"file_path": notes})));
    fake.server.push(Step::text("Read them."));
    let mut editor = Editor::start(&daemon, &fake)?;
    let created = editor.request(json!({"op": "new", "cwd": daemon.workdir(),
        "additionalDirectories": [other]}))?;
    let session = created["result"]["sessionId"]
        .as_str()
        .with_context(|| format!("{created}"))?
        .to_owned();
    editor.prompt(&session, "read the notes", "p1")?;
    let done = editor.prompt_done("p1")?;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert!(
        !editor.seen.iter().any(|v| v["op"] == "permission"),
        "a read in an additional directory asked"
    );
    let completed = editor
        .updates("tool_call_update")
        .into_iter()
        .find(|u| u["status"] == "completed")
        .context("the read completed")?;
    assert!(
        completed["content"]
            .to_string()
            .contains("notes from beside"),
        "{completed}"
    );
    let relative = editor.request(json!({"op": "new", "cwd": daemon.workdir(),
        "additionalDirectories": ["relative/dir"]}))?;
    assert_eq!(relative["error"]["code"], -32602, "{relative}");
    editor.checked_trace()?;
    Ok(())
}
