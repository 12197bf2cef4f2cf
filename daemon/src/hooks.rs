//! Hooks in Claude Code's configuration shape (`"hooks"` in the same settings files as the
//! permission rules): `PreToolUse`, `PostToolUse`, `PostToolUseFailure`, `UserPromptSubmit`,
//! `Stop`, `StopFailure`, `SubagentStart`, `SubagentStop`, `SessionStart`, `SessionEnd`,
//! `PreCompact`, `PostCompact`, `Notification`, `PermissionRequest`; each entry has a `matcher` (tool name, agent type, trigger or
//! regex; empty or `*` for all) and command hooks. Claude Code's other events are reported as
//! not used by tether, never as an error.
//!
//! A command gets the event's JSON on stdin (with `$CLAUDE_PROJECT_DIR` set to the session's
//! directory) and runs with a timeout (default 60 s). Exit 0 is
//! fine (stdout may be JSON with `decision`, `reason`, `continue`, `stopReason` and
//! `hookSpecificOutput.{permissionDecision, additionalContext}`); exit 2 blocks, its stderr going
//! back to the model (or the user for prompts); any other exit is a non-blocking error.
//!
//! A turn started by an Agent SDK program may also carry the SDK's hook callbacks
//! (`TurnOptions.hookCallbacks`, in the shape of the SDK's `initialize`): each is asked through
//! an [`Asker`] (the session sends it to the client, which asks the SDK) and its answer read as
//! a command's JSON output; no answer in time is a non-blocking error.

use grep_matcher::Matcher as _;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use tether_proto::{EventKind, HookOutcome};

/// Default hook timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// The events hooks can attach to, named as in Claude Code's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HookEvent {
    /// Before a tool call runs (may block it, or decide its permission).
    PreToolUse,
    /// After a tool call succeeded (may add to its result).
    PostToolUse,
    /// After a tool call failed (may add to its result).
    PostToolUseFailure,
    /// Before a prompt goes to the model (may block it, or add context).
    UserPromptSubmit,
    /// When the model stops (may ask it to go on).
    Stop,
    /// When a turn ends because of an error (the API's, a timeout); its output is ignored.
    StopFailure,
    /// Before a sub-agent starts (may add context to its task).
    SubagentStart,
    /// When a sub-agent stops (may ask it to go on).
    SubagentStop,
    /// At a session's first prompt since it was loaded (may add context).
    SessionStart,
    /// Before the conversation is compacted.
    PreCompact,
    /// After the conversation was compacted.
    PostCompact,
    /// When the session waits for a permission answer.
    Notification,
    /// When a permission request is opened: may answer it (`decision.behavior`), racing the
    /// controllers; the first answer wins.
    PermissionRequest,
    /// When a session ends: cleared (`reason: clear`) or deleted (`other`).
    SessionEnd,
}

impl HookEvent {
    /// Every event.
    pub const ALL: [Self; 14] = [
        Self::PreToolUse,
        Self::PostToolUse,
        Self::PostToolUseFailure,
        Self::UserPromptSubmit,
        Self::Stop,
        Self::StopFailure,
        Self::SubagentStart,
        Self::SubagentStop,
        Self::SessionStart,
        Self::PreCompact,
        Self::PostCompact,
        Self::Notification,
        Self::PermissionRequest,
        Self::SessionEnd,
    ];

    /// Claude Code's events tether has no moment for (teams, worktrees, configuration
    /// watching, …): a settings file may name them; tether says it does not run them.
    pub const NOT_USED: &[&str] = &[
        // Fired by Claude Code's auto-mode classifier, which tether does not have.
        "PermissionDenied",
        "TeammateIdle",
        "TaskCompleted",
        "TaskCreated",
        "InstructionsLoaded",
        "ConfigChange",
        "CwdChanged",
        "FileChanged",
        "WorktreeCreate",
        "WorktreeRemove",
        "Elicitation",
        "ElicitationResult",
        "UserPromptExpansion",
        "Setup",
    ];

    /// Whether the session runs this event's hooks outside its turns (so an SDK program's
    /// callbacks, which belong to a turn, cannot be asked).
    pub fn outside_turns(self) -> bool {
        self == Self::SessionEnd
    }

    /// The name settings files use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PreToolUse => "PreToolUse",
            Self::PostToolUse => "PostToolUse",
            Self::PostToolUseFailure => "PostToolUseFailure",
            Self::UserPromptSubmit => "UserPromptSubmit",
            Self::Stop => "Stop",
            Self::StopFailure => "StopFailure",
            Self::SubagentStart => "SubagentStart",
            Self::SubagentStop => "SubagentStop",
            Self::SessionStart => "SessionStart",
            Self::PreCompact => "PreCompact",
            Self::PostCompact => "PostCompact",
            Self::Notification => "Notification",
            Self::PermissionRequest => "PermissionRequest",
            Self::SessionEnd => "SessionEnd",
        }
    }

    /// The event a settings file names.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == name)
    }
}

impl std::fmt::Display for HookEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone)]
struct Command {
    command: String,
    timeout: Duration,
}

/// What one hook of an entry runs.
#[derive(Debug, Clone)]
enum Action {
    /// A shell command.
    Command(Command),
    /// A callback of the SDK program that started the turn, by its id.
    Callback { id: String, timeout: Duration },
}

#[derive(Debug, Clone)]
struct Entry {
    event: HookEvent,
    matcher: Option<String>,
    actions: Vec<Action>,
    /// Where it was configured (a settings file, config.toml, `--settings`, the SDK).
    source: String,
}

/// Asks the SDK program that started a turn to run one of its hook callbacks: its answer
/// (the hook's JSON output), or why there is none.
pub trait Asker: Send + Sync + std::fmt::Debug {
    /// Runs callback `id` with `input`.
    fn ask(
        &self,
        id: &str,
        input: &Value,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Value, String>> + Send + '_>>;
}

/// Told of every hook run as it starts and ends (`hook_started`, `hook_response`): the
/// session logs them, so every client sees what ran and what it said.
pub trait Watcher: Send + Sync + std::fmt::Debug {
    /// One of the two events of a run.
    fn tell(&self, event: EventKind);
}

/// The most of a hook's stdout or stderr its `hook_response` carries.
const MAX_TOLD: usize = 64 * 1024;

/// `text` cut to at most [`MAX_TOLD`] bytes, on a character boundary.
fn told(mut text: String) -> String {
    if text.len() > MAX_TOLD {
        let mut end = MAX_TOLD;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// What one hook run printed and how it ended.
#[derive(Debug, Default)]
struct Ran {
    stdout: String,
    stderr: String,
    exit_code: Option<i32>,
    /// `None`: it did not run to its end.
    success: Option<bool>,
}

impl Ran {
    fn failed(why: String) -> Self {
        Self {
            stderr: why,
            success: Some(false),
            ..Self::default()
        }
    }
}

/// One hook run as its watcher sees it: `hook_started` when made, `hook_response` when
/// [`Told::end`] is called — or, dropped first (its turn was cancelled), a cancelled one.
struct Told<'a> {
    watcher: &'a dyn Watcher,
    hook_id: String,
    hook_name: String,
    hook_event: HookEvent,
    ran: Option<Ran>,
}

impl<'a> Told<'a> {
    fn start(watcher: &'a dyn Watcher, event: HookEvent, target: Option<&str>) -> Self {
        let hook_name = match target {
            Some(t) => format!("{event}:{t}"),
            None => event.as_str().to_owned(),
        };
        let hook_id = uuid::Uuid::new_v4().to_string();
        watcher.tell(EventKind::HookStarted {
            hook_id: hook_id.clone(),
            hook_name: hook_name.clone(),
            hook_event: event.as_str().to_owned(),
        });
        Self {
            watcher,
            hook_id,
            hook_name,
            hook_event: event,
            ran: None,
        }
    }

    fn end(mut self, ran: Ran) {
        self.ran = Some(ran);
    }
}

impl Drop for Told<'_> {
    fn drop(&mut self) {
        let ran = self.ran.take().unwrap_or_default();
        self.watcher.tell(EventKind::HookResponse {
            hook_id: std::mem::take(&mut self.hook_id),
            hook_name: std::mem::take(&mut self.hook_name),
            hook_event: self.hook_event.as_str().to_owned(),
            stdout: told(ran.stdout),
            stderr: told(ran.stderr),
            exit_code: ran.exit_code,
            outcome: match ran.success {
                Some(true) => HookOutcome::Success,
                Some(false) => HookOutcome::Error,
                None => HookOutcome::Cancelled,
            },
        });
    }
}

/// A PreToolUse hook's say in the permission check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookPermission {
    /// Allow without asking (deny rules still win).
    Allow,
    /// Ask even if rules allow.
    Ask,
    /// Refuse, with the reason for the model.
    Deny(String),
}

/// What the hooks of one event said.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// A hook blocked (exit 2 or `decision: block`), with its reason.
    pub block: Option<String>,
    /// A PreToolUse permission decision.
    pub permission: Option<HookPermission>,
    /// Text to add for the model.
    pub context: Vec<String>,
    /// Non-blocking problems to show the user.
    pub notices: Vec<String>,
    /// `continue: false`: stop, with this reason.
    pub stop: Option<String>,
    /// A PreToolUse hook's replacement for the call's input (`updatedInput`).
    pub updated_input: Option<Value>,
}

/// The hooks of a project.
#[derive(Debug, Clone, Default)]
pub struct Hooks {
    entries: Vec<Entry>,
    /// Who runs the entries' callbacks (none: they are skipped).
    asker: Option<std::sync::Arc<dyn Asker>>,
    /// Who is told of each run (none: nobody).
    watcher: Option<std::sync::Arc<dyn Watcher>>,
    /// Configuration problems, naming the file.
    pub problems: Vec<String>,
    /// The settings files' `env`, set for every hook command.
    env: Vec<(String, String)>,
}

impl Hooks {
    /// The hooks of tether's config.toml (`configured`: its `[hooks]` table, in the settings
    /// files' shape, and the file's name, as the configuration read it at start), then those of
    /// `~/.claude/settings.json` and the project's settings files.
    pub fn load(root: &Path, home: Option<&Path>, configured: Option<&(Value, String)>) -> Self {
        // Each settings file is read once, for its hooks and its `env`.
        let files = crate::settings::files(root, home);
        let mut hooks = Self {
            env: crate::settings::env_of(&files),
            ..Self::default()
        };
        if let Some((table, source)) = configured {
            hooks.add(table, source);
        }
        for (file, v) in &files {
            hooks.add(&v["hooks"], &file.display().to_string());
        }
        hooks
    }

    /// Adds the `hooks` object of one settings file.
    pub fn add(&mut self, v: &Value, source: &str) {
        let Some(map) = v.as_object() else {
            if !v.is_null() {
                self.problems
                    .push(format!("{source}: \"hooks\" must be an object"));
            }
            return;
        };
        for (name, entries) in map {
            let Some(event) = HookEvent::parse(name) else {
                self.problems
                    .push(if HookEvent::NOT_USED.contains(&name.as_str()) {
                        format!("{source}: tether does not run {name} hooks (the others work)")
                    } else {
                        format!("{source}: unknown hook event {name:?} (ignored; the others work)")
                    });
                continue;
            };
            for entry in entries.as_array().into_iter().flatten() {
                let matcher = entry["matcher"]
                    .as_str()
                    .map(str::to_owned)
                    .filter(|m| !m.is_empty() && m != "*");
                let actions = entry["hooks"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|h| h["type"] == "command")
                    .filter_map(|h| {
                        Some(Action::Command(Command {
                            command: h["command"].as_str()?.to_owned(),
                            timeout: timeout_of(&h["timeout"]),
                        }))
                    })
                    .collect::<Vec<_>>();
                if actions.is_empty() {
                    self.problems.push(format!(
                        "{source}: a {event} hook entry has no command hooks"
                    ));
                    continue;
                }
                self.entries.push(Entry {
                    event,
                    matcher,
                    actions,
                    source: source.to_owned(),
                });
            }
        }
    }

    /// Adds an SDK program's hook callbacks (`{"PreToolUse": [{"matcher": "Bash",
    /// "hookCallbackIds": ["hook_0"], "timeout": 30}]}`), run through `asker`.
    pub fn add_callbacks(&mut self, v: &Value, asker: std::sync::Arc<dyn Asker>) {
        let Some(map) = v.as_object() else { return };
        for (name, entries) in map {
            let Some(event) = HookEvent::parse(name).filter(|e| !e.outside_turns()) else {
                self.problems.push(format!(
                    "the SDK's {name} hook callbacks are not run by tether (those of the hooks a turn runs are)"
                ));
                continue;
            };
            for entry in entries.as_array().into_iter().flatten() {
                let timeout = timeout_of(&entry["timeout"]);
                let actions: Vec<Action> = entry["hookCallbackIds"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|id| id.as_str())
                    .map(|id| Action::Callback {
                        id: id.to_owned(),
                        timeout,
                    })
                    .collect();
                if actions.is_empty() {
                    continue;
                }
                self.entries.push(Entry {
                    event,
                    matcher: entry["matcher"]
                        .as_str()
                        .map(str::to_owned)
                        .filter(|m| !m.is_empty() && m != "*"),
                    actions,
                    source: "the SDK program".to_owned(),
                });
            }
        }
        self.asker = Some(asker);
    }

    /// Tells `watcher` of every run from now on.
    pub fn watched_by(&mut self, watcher: std::sync::Arc<dyn Watcher>) {
        self.watcher = Some(watcher);
    }

    /// Every hook, one line each — event, matcher, what it runs, where it was configured —
    /// then the problems of the files they came from (`/hooks`).
    pub fn describe(&self) -> String {
        let mut lines: Vec<String> = self
            .entries
            .iter()
            .flat_map(|e| {
                let matcher = e
                    .matcher
                    .as_deref()
                    .map(|m| format!(" [{m}]"))
                    .unwrap_or_default();
                e.actions.iter().map(move |a| {
                    let runs = match a {
                        Action::Command(c) => c.command.clone(),
                        Action::Callback { id, .. } => format!("callback {id}"),
                    };
                    format!("{}{matcher}: {runs}  ({})", e.event, e.source)
                })
            })
            .collect();
        if lines.is_empty() {
            lines.push("no hooks (settings files' \"hooks\", tether's [hooks])".into());
        }
        lines.extend(self.problems.iter().map(|p| format!("! {p}")));
        lines.join("\n")
    }

    /// Whether any hook listens to `event`.
    pub fn has(&self, event: HookEvent) -> bool {
        self.entries.iter().any(|e| e.event == event)
    }

    /// Runs the hooks of `event` whose matcher accepts `target` (a tool name, or `auto`/`manual`
    /// for PreCompact), feeding them `input` (to which `hook_event_name` is added).
    pub async fn run(
        &self,
        event: HookEvent,
        target: Option<&str>,
        mut input: Value,
        cwd: &Path,
    ) -> Outcome {
        let mut outcome = Outcome::default();
        input["hook_event_name"] = json!(event.as_str());
        let stdin = input.to_string();
        // A callback never gets the approval token: its input reaches every client.
        let for_callbacks = match &self.asker {
            Some(_) => without_secrets(&input),
            None => Value::Null,
        };
        for entry in self.entries.iter().filter(|e| e.event == event) {
            if let (Some(m), Some(t)) = (&entry.matcher, target)
                && !matcher_hits(m, t)
            {
                continue;
            }
            for action in &entry.actions {
                // A callback runs only where its program can be asked.
                let run = match (action, self.asker.as_deref()) {
                    (Action::Command(cmd), _) => Run::Command(cmd),
                    (Action::Callback { id, timeout }, Some(asker)) => {
                        Run::Callback(asker, id, *timeout)
                    }
                    (Action::Callback { .. }, None) => continue,
                };
                let told = self
                    .watcher
                    .as_deref()
                    .map(|w| Told::start(w, event, target));
                let ran = match run {
                    Run::Command(cmd) => {
                        run_one(cmd, &stdin, cwd, &self.env, event, &mut outcome).await
                    }
                    Run::Callback(asker, id, timeout) => {
                        let asked = asker.ask(id, &for_callbacks);
                        callback(asked, id, timeout, event, &mut outcome).await
                    }
                };
                if let Some(told) = told {
                    told.end(ran);
                }
            }
        }
        outcome
    }
}

/// One hook of an entry, ready to run.
enum Run<'a> {
    Command(&'a Command),
    Callback(&'a dyn Asker, &'a str, Duration),
}

/// Waits for a callback's answer (`asked`) and reads it as a command's JSON output.
async fn callback(
    asked: impl std::future::Future<Output = Result<Value, String>>,
    id: &str,
    timeout: Duration,
    event: HookEvent,
    outcome: &mut Outcome,
) -> Ran {
    let why = match tokio::time::timeout(timeout, asked).await {
        Ok(Ok(output)) => {
            read_output(&output, event, outcome);
            return Ran {
                stdout: output.to_string(),
                success: Some(true),
                ..Ran::default()
            };
        }
        Ok(Err(why)) => format!("{event} hook callback {id} failed: {why}"),
        Err(_) => format!(
            "{event} hook callback {id} did not answer within {} s",
            timeout.as_secs_f64()
        ),
    };
    outcome.notices.push(why.clone());
    Ran::failed(why)
}

/// What only command hooks get: the approval token and its link answer the request.
const SECRET_KEYS: [&str; 2] = ["approval_token", "approval_url"];

/// `input` without [`SECRET_KEYS`].
fn without_secrets(input: &Value) -> Value {
    let mut input = input.clone();
    if let Some(map) = input.as_object_mut() {
        for key in SECRET_KEYS {
            map.remove(key);
        }
    }
    input
}

/// Whether a hook's `matcher` accepts `target`: a tool by any of its names (`Agent` is
/// `Task`), exactly or as an anchored regular expression.
fn matcher_hits(matcher: &str, target: &str) -> bool {
    let re = grep_regex::RegexMatcher::new(&format!("^(?:{matcher})$")).ok();
    crate::tools::names::all(target).any(|name| {
        matcher == name
            || re
                .as_ref()
                .is_some_and(|re| re.is_match(name.as_bytes()).unwrap_or(false))
    })
}

async fn run_one(
    cmd: &Command,
    stdin: &str,
    cwd: &Path,
    env: &[(String, String)],
    event: HookEvent,
    outcome: &mut Outcome,
) -> Ran {
    use tokio::io::AsyncWriteExt;
    let mut sh = tokio::process::Command::new("sh");
    crate::child_env::scrub(&mut sh);
    let child = sh
        .arg("-c")
        .arg(&cmd.command)
        .current_dir(cwd)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("CLAUDE_PROJECT_DIR", cwd)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            let why = format!("{event} hook {:?} could not start: {e}", cmd.command);
            outcome.notices.push(why.clone());
            return Ran::failed(why);
        }
    };
    if let Some(mut pipe) = child.stdin.take() {
        let _ = pipe.write_all(stdin.as_bytes()).await;
    }
    let out = match tokio::time::timeout(cmd.timeout, child.wait_with_output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => {
            let why = format!("{event} hook {:?} failed: {e}", cmd.command);
            outcome.notices.push(why.clone());
            return Ran::failed(why);
        }
        Err(_) => {
            let why = format!(
                "{event} hook {:?} did not finish within {} s and was stopped",
                cmd.command,
                cmd.timeout.as_secs_f64()
            );
            outcome.notices.push(why.clone());
            return Ran::failed(why);
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    let code = out.status.code();
    match code {
        Some(0) => {
            if let Ok(v) = serde_json::from_str::<Value>(&stdout)
                .map_err(|_| ())
                .and_then(|v| if v.is_object() { Ok(v) } else { Err(()) })
            {
                read_output(&v, event, outcome);
            } else if !stdout.is_empty()
                && matches!(event, HookEvent::UserPromptSubmit | HookEvent::SessionStart)
            {
                outcome.context.push(stdout.clone());
            }
        }
        Some(2) => {
            outcome.block = Some(if stderr.is_empty() {
                format!("blocked by a {event} hook")
            } else {
                stderr.clone()
            })
        }
        code => outcome.notices.push(format!(
            "{event} hook {:?} exited with {}: {}",
            cmd.command,
            code.map(|c| c.to_string())
                .unwrap_or_else(|| "a signal".into()),
            stderr.lines().next().unwrap_or("")
        )),
    }
    Ran {
        stdout,
        stderr,
        exit_code: code,
        success: Some(code == Some(0)),
    }
}

/// A hook's JSON output (a command's stdout, a callback's answer) taken into `outcome`.
fn read_output(v: &Value, event: HookEvent, outcome: &mut Outcome) {
    let reason = v["reason"].as_str().map(str::to_owned);
    if v["decision"] == "block" {
        outcome.block = Some(
            reason
                .clone()
                .unwrap_or_else(|| format!("blocked by a {event} hook")),
        );
    }
    if v["continue"] == false {
        outcome.stop = Some(
            v["stopReason"]
                .as_str()
                .unwrap_or("stopped by a hook")
                .to_owned(),
        );
    }
    let specific = &v["hookSpecificOutput"];
    let why = specific["permissionDecisionReason"]
        .as_str()
        .map(str::to_owned)
        .or(reason);
    match specific["permissionDecision"].as_str() {
        Some("allow") => outcome.permission = Some(HookPermission::Allow),
        Some("ask") => outcome.permission = Some(HookPermission::Ask),
        Some("deny") => {
            outcome.permission = Some(HookPermission::Deny(
                why.unwrap_or_else(|| "denied by a PreToolUse hook".into()),
            ))
        }
        _ => {}
    }
    if let Some(ctx) = specific["additionalContext"].as_str() {
        outcome.context.push(ctx.to_owned());
    }
    if event == HookEvent::PreToolUse
        && let Some(input) = specific.get("updatedInput").filter(|i| i.is_object())
    {
        outcome.updated_input = Some(input.clone());
    }
    // PermissionRequest: `decision: {behavior, updatedInput?, message?}`.
    let decision = &specific["decision"];
    if event == HookEvent::PermissionRequest {
        match decision["behavior"].as_str() {
            Some("allow") => {
                outcome.permission = Some(HookPermission::Allow);
                outcome.updated_input = decision
                    .get("updatedInput")
                    .filter(|i| i.is_object())
                    .cloned();
            }
            Some("deny") => {
                outcome.permission = Some(HookPermission::Deny(
                    decision["message"]
                        .as_str()
                        .unwrap_or("denied by a PermissionRequest hook")
                        .to_owned(),
                ))
            }
            _ => {}
        }
    }
    // `systemMessage`: shown to the user.
    if let Some(message) = v["systemMessage"].as_str() {
        outcome.notices.push(message.to_owned());
    }
}

/// The longest a hook may be given.
const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// A hook's `timeout` (seconds), or the default; at most a day.
fn timeout_of(v: &Value) -> Duration {
    v.as_f64()
        .filter(|t| *t > 0.0)
        .and_then(|t| Duration::try_from_secs_f64(t).ok())
        .map_or(DEFAULT_TIMEOUT, |t| t.min(MAX_TIMEOUT))
}

/// A successful call's `tool_response` as Claude Code shapes it for the tools hook scripts
/// read most (Bash's `stdout`, the file tools' `filePath` and `structuredPatch`, Glob's
/// `filenames`); other tools' result as its text or content blocks.
pub fn tool_response(tool: &str, input: &Value, content: &Value, details: Option<&Value>) -> Value {
    let text = tether_proto::content_text(content);
    let patch = || {
        details
            .and_then(|d| d["diff"].as_str())
            .map(structured_patch)
            .unwrap_or_default()
    };
    match tool {
        "Bash" => json!({"stdout": text, "stderr": "", "interrupted": false, "isImage": false}),
        "Read" => {
            // The file's lines without the numbers Read puts before them.
            let lines: Vec<&str> = text
                .lines()
                .filter_map(|l| {
                    let (n, rest) = l.split_once('\t')?;
                    n.trim().parse::<u64>().ok().map(|_| rest)
                })
                .collect();
            json!({"type": "text", "file": {
            "filePath": input["file_path"],
            "content": lines.join("\n"),
            "numLines": lines.len(),
            "startLine": input["offset"].as_u64().unwrap_or(1).max(1),
            }})
        }
        "Write" => json!({
            "type": if patch().iter().any(|h| h["oldLines"] != 0) { "update" } else { "create" },
            "filePath": input["file_path"],
            "content": input["content"],
            "structuredPatch": patch(),
        }),
        "Edit" => json!({
            "filePath": input["file_path"],
            "oldString": input["old_string"],
            "newString": input["new_string"],
            "replaceAll": input["replace_all"].as_bool().unwrap_or(false),
            "userModified": false,
            "structuredPatch": patch(),
        }),
        "MultiEdit" => json!({
            "filePath": input["file_path"],
            "edits": input["edits"],
            "userModified": false,
            "structuredPatch": patch(),
        }),
        "Glob" => {
            let filenames: Vec<&str> = text.lines().filter(|l| l.starts_with('/')).collect();
            json!({"filenames": filenames, "numFiles": filenames.len(), "truncated": false})
        }
        _ => content.clone(),
    }
}

/// A unified diff's hunks as Claude Code's `structuredPatch`.
fn structured_patch(diff: &str) -> Vec<Value> {
    let mut hunks: Vec<Value> = Vec::new();
    for line in diff.lines() {
        if let Some(header) = line.strip_prefix("@@ ") {
            let mut nums = header.split_whitespace().take(2).map(|range| {
                let range = range.trim_start_matches(['-', '+']);
                let (start, len) = range.split_once(',').unwrap_or((range, "1"));
                (
                    start.parse::<u64>().unwrap_or(0),
                    len.parse::<u64>().unwrap_or(1),
                )
            });
            let (old, new) = (
                nums.next().unwrap_or_default(),
                nums.next().unwrap_or_default(),
            );
            hunks.push(
                json!({"oldStart": old.0, "oldLines": old.1, "newStart": new.0,
                "newLines": new.1, "lines": []}),
            );
        } else if let Some(lines) = hunks.last_mut().and_then(|h| h["lines"].as_array_mut())
            && !line.starts_with("--- ")
            && !line.starts_with("+++ ")
        {
            lines.push(json!(line));
        }
    }
    hunks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hooks(v: Value) -> Hooks {
        let mut h = Hooks::default();
        h.add(&v, "test");
        assert!(h.problems.is_empty(), "{:?}", h.problems);
        h
    }

    #[test]
    fn tool_responses_take_claude_codes_shapes() {
        let bash = tool_response("Bash", &json!({"command": "ls"}), &json!("a\nb\n"), None);
        assert_eq!(bash["stdout"], "a\nb\n");
        assert_eq!(bash["interrupted"], false);
        let read = tool_response(
            "Read",
            &json!({"file_path": "/p/a"}),
            &json!("     1\tfirst\n     2\tsecond\n"),
            None,
        );
        assert_eq!(read["file"]["content"], "first\nsecond");
        assert_eq!(read["file"]["numLines"], 2);
        let diff = "--- a/x.rs\n+++ b/x.rs\n@@ -2,2 +2,3 @@\n one\n-two\n+deux\n+trois\n";
        let edit = tool_response(
            "Edit",
            &json!({"file_path": "/p/x.rs", "old_string": "two", "new_string": "deux\ntrois"}),
            &json!("edited"),
            Some(&json!({"diff": diff})),
        );
        assert_eq!(edit["filePath"], "/p/x.rs");
        assert_eq!(
            edit["structuredPatch"],
            json!([{"oldStart": 2, "oldLines": 2, "newStart": 2, "newLines": 3,
                "lines": [" one", "-two", "+deux", "+trois"]}])
        );
        let created = tool_response(
            "Write",
            &json!({"file_path": "/p/new", "content": "x\n"}),
            &json!("written"),
            Some(&json!({"diff": "--- /dev/null\n+++ b/new\n@@ -0,0 +1 @@\n+x\n"})),
        );
        assert_eq!(created["type"], "create");
        assert_eq!(
            tool_response("WebFetch", &json!({}), &json!("page"), None),
            json!("page")
        );
    }

    #[tokio::test]
    async fn a_matcher_names_a_tool_by_any_of_its_names() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tools = crate::tools::builtin();
        for tool in tools.names() {
            let mut names = vec![tool];
            names.extend(crate::tools::names::aliases(tool));
            for matcher in names {
                let h = hooks(json!({"PreToolUse": [{"matcher": matcher, "hooks": [
                    {"type": "command", "command": "echo matched >&2; exit 2"}]}]}));
                // The dispatcher runs hooks under the tool's own name.
                let out = h
                    .run(HookEvent::PreToolUse, Some(tool), json!({}), dir.path())
                    .await;
                assert_eq!(
                    out.block.as_deref(),
                    Some("matched"),
                    "matcher {matcher} on {tool}"
                );
            }
        }
        let h = hooks(
            json!({"PreToolUse": [{"matcher": "Agen.|Nothing", "hooks": [
            {"type": "command", "command": "echo matched >&2; exit 2"}]}]}),
        );
        let out = h
            .run(HookEvent::PreToolUse, Some("Task"), json!({}), dir.path())
            .await;
        assert_eq!(
            out.block.as_deref(),
            Some("matched"),
            "a regex over an alias"
        );
        let out = h
            .run(HookEvent::PreToolUse, Some("Bash"), json!({}), dir.path())
            .await;
        assert_eq!(out.block, None);
    }

    #[tokio::test]
    async fn exit_codes_json_output_matchers_and_timeouts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let h = hooks(json!({
            "PreToolUse": [
                {"matcher": "Bash", "hooks": [{"type": "command", "command": "grep -q '\"rm ' && { echo 'no rm here' >&2; exit 2; } || exit 0"}]},
                {"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "echo '{\"hookSpecificOutput\": {\"permissionDecision\": \"allow\"}}'"}]}
            ],
            "PostToolUse": [{"hooks": [{"type": "command", "command": "echo '{\"hookSpecificOutput\": {\"additionalContext\": \"lint: ok\"}}'"}]}],
            "Stop": [{"hooks": [{"type": "command", "command": "sleep 5", "timeout": 0.2}]}],
            "Notification": [{"hooks": [{"type": "command", "command": "exit 1"}]}]
        }));
        let rm = h
            .run(
                crate::hooks::HookEvent::PreToolUse,
                Some("Bash"),
                json!({"tool_input": {"command": "rm -rf x"}}),
                dir.path(),
            )
            .await;
        assert_eq!(rm.block.as_deref(), Some("no rm here"));
        let ls = h
            .run(
                crate::hooks::HookEvent::PreToolUse,
                Some("Bash"),
                json!({"tool_input": {"command": "ls"}}),
                dir.path(),
            )
            .await;
        assert_eq!(ls, Outcome::default());
        let edit = h
            .run(
                crate::hooks::HookEvent::PreToolUse,
                Some("Write"),
                json!({}),
                dir.path(),
            )
            .await;
        assert_eq!(edit.permission, Some(HookPermission::Allow));
        let other = h
            .run(
                crate::hooks::HookEvent::PreToolUse,
                Some("Read"),
                json!({}),
                dir.path(),
            )
            .await;
        assert_eq!(other, Outcome::default(), "matchers are anchored");
        let post = h
            .run(
                crate::hooks::HookEvent::PostToolUse,
                Some("Read"),
                json!({}),
                dir.path(),
            )
            .await;
        assert_eq!(post.context, ["lint: ok"]);
        let started = std::time::Instant::now();
        let stop = h
            .run(crate::hooks::HookEvent::Stop, None, json!({}), dir.path())
            .await;
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(stop.notices[0].contains("did not finish"), "{stop:?}");
        let note = h
            .run(
                crate::hooks::HookEvent::Notification,
                None,
                json!({}),
                dir.path(),
            )
            .await;
        assert!(note.notices[0].contains("exited with 1"));
        assert!(note.block.is_none());
    }
}

#[cfg(test)]
mod callback_tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Answers every callback with `answer`, and remembers what it was asked.
    #[derive(Debug)]
    struct Program {
        answer: Result<Value, String>,
        asked: Mutex<Vec<String>>,
    }

    impl Asker for Program {
        fn ask(
            &self,
            id: &str,
            _input: &Value,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Value, String>> + Send + '_>>
        {
            self.asked.lock().expect("lock").push(id.to_owned());
            let answer = self.answer.clone();
            Box::pin(async move { answer })
        }
    }

    fn with(answer: Result<Value, String>) -> (Hooks, Arc<Program>) {
        let program = Arc::new(Program {
            answer,
            asked: Mutex::default(),
        });
        let mut hooks = Hooks::default();
        hooks.add_callbacks(
            &json!({"PreToolUse": [{"matcher": "Bash", "hookCallbackIds": ["hook_0", "hook_1"]}],
                    "Bogus": [{"hookCallbackIds": ["hook_2"]}]}),
            program.clone(),
        );
        (hooks, program)
    }

    #[tokio::test]
    async fn an_sdk_programs_callbacks_answer_as_a_commands_output_would() {
        let deny = json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                          "permissionDecision": "deny", "permissionDecisionReason": "no"}});
        let (hooks, program) = with(Ok(deny));
        assert_eq!(hooks.problems.len(), 1, "{:?}", hooks.problems);
        let cwd = Path::new("/");
        let read = hooks
            .run(HookEvent::PreToolUse, Some("Read"), json!({}), cwd)
            .await;
        assert_eq!(read, Outcome::default(), "the matcher is Bash");
        let bash = hooks
            .run(HookEvent::PreToolUse, Some("Bash"), json!({}), cwd)
            .await;
        assert_eq!(bash.permission, Some(HookPermission::Deny("no".into())));
        assert_eq!(*program.asked.lock().expect("lock"), ["hook_0", "hook_1"]);

        let (hooks, _) = with(Err("the program went away".into()));
        let failed = hooks
            .run(HookEvent::PreToolUse, Some("Bash"), json!({}), cwd)
            .await;
        assert_eq!(failed.permission, None, "a failed callback decides nothing");
        assert!(
            failed.notices[0].contains("hook_0 failed: the program went away"),
            "{:?}",
            failed.notices
        );
    }
}

#[cfg(test)]
mod watcher_tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Keeps every event it is told.
    #[derive(Debug, Default)]
    struct Log(Mutex<Vec<EventKind>>);

    impl Watcher for Log {
        fn tell(&self, event: EventKind) {
            self.0.lock().expect("lock").push(event);
        }
    }

    fn watched(command: &str) -> (Hooks, Arc<Log>) {
        let mut hooks = Hooks::default();
        hooks.add(
            &json!({"Stop": [{"hooks": [{"type": "command", "command": command}]}]}),
            "test",
        );
        let log = Arc::new(Log::default());
        hooks.watched_by(log.clone());
        (hooks, log)
    }

    #[tokio::test]
    async fn each_run_is_told_as_it_starts_and_ends_or_is_cut_off() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (hooks, log) = watched("echo out; echo err >&2; exit 3");
        hooks
            .run(HookEvent::Stop, None, json!({}), dir.path())
            .await;
        let told = std::mem::take(&mut *log.0.lock().expect("lock"));
        let [
            EventKind::HookStarted {
                hook_id: started,
                hook_name,
                ..
            },
            EventKind::HookResponse {
                hook_id,
                stdout,
                stderr,
                exit_code,
                outcome,
                ..
            },
        ] = told.as_slice()
        else {
            panic!("{told:?}");
        };
        assert_eq!(started, hook_id);
        assert_eq!(hook_name, "Stop");
        assert_eq!((stdout.as_str(), stderr.as_str()), ("out", "err"));
        assert_eq!((*exit_code, outcome), (Some(3), &HookOutcome::Error));

        // A run whose turn is cancelled (its future dropped) ends as cancelled.
        let (hooks, log) = watched("sleep 30");
        let run = hooks.run(HookEvent::Stop, None, json!({}), dir.path());
        assert!(
            tokio::time::timeout(Duration::from_millis(200), run)
                .await
                .is_err()
        );
        let told = log.0.lock().expect("lock");
        assert!(
            matches!(
                told.as_slice(),
                [
                    EventKind::HookStarted { .. },
                    EventKind::HookResponse {
                        outcome: HookOutcome::Cancelled,
                        exit_code: None,
                        ..
                    }
                ]
            ),
            "{told:?}"
        );
    }
}
