//! `Bash {command, description?, timeout?}`: runs a command with bash in the session's current
//! directory, in its own process group. Output (stdout and stderr interleaved, as a terminal
//! shows them) streams as progress and is held within bounds (`capture`); a timeout or cancel kills the whole group, grandchildren
//! included; a `cd` persists for later calls as long as it stays inside the working directories.
//! With the sandbox enabled (`crate::sandbox`) a call runs in bubblewrap — its foreground shell,
//! its spare and its background shells alike — unless it is excluded or asks to leave it
//! (`dangerouslyDisableSandbox`); a bubblewrap that cannot start refuses the call. When
//! `network.allowedDomains` names hosts, the session's proxy is started first and each shell
//! starts its relay before the command (`crate::sandbox::proxy`).

use crate::tools::capture::{self, Capture, Progress, cut_middle};
use crate::tools::shell::{self, Spawned, kill_group};
use crate::tools::{JobEnd, Tool, ToolContext, ToolFuture, ToolOutput, jobs};
use grep_matcher::Matcher as _;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::time::Instant;

/// Default timeout.
const DEFAULT_TIMEOUT_MS: u64 = 120_000;
/// Largest timeout a call may ask for.
const MAX_TIMEOUT_MS: u64 = 600_000;
/// Output beyond this many characters is cut in the middle (the full text goes to a file).
pub const MAX_OUTPUT_CHARS: usize = 30_000;
/// After the shell exits, how long output from lingering background jobs is still collected.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(100);

/// Runs shell commands.
#[derive(Default)]
pub struct Bash {
    spare: shell::Spare,
}

impl Tool for Bash {
    fn name(&self) -> &'static str {
        "Bash"
    }

    fn description(&self) -> &'static str {
        "Runs a bash command in the session's current directory and returns its output (stdout and stderr \
         interleaved) and exit code. The current directory persists between calls (a cd stays in effect) but must \
         stay inside the session's working directories. timeout is in milliseconds (default 120000, at most 600000); \
         a command that runs longer is killed with all its child processes. Output over 30000 characters is cut in \
         the middle and saved to a file whose path is given. Prefer the Read, Write and search tools over cat, echo \
         redirection, find and grep."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "minLength": 1, "description": "The command to run"},
                "description": {"type": "string", "description": "What the command does, in a few words"},
                "timeout": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_MS, "description": "Timeout in milliseconds"},
                "run_in_background": {"type": "boolean", "description": "Start it and return at once with a shell id for BashOutput and KillShell (servers, watchers, long builds)"},
                "dangerouslyDisableSandbox": {"type": "boolean", "description": "Run this command outside the OS sandbox (when one is enabled); the user is asked first. Only when the sandbox stops a command that must run"}
            },
            "required": ["command"],
            "additionalProperties": false
        })
    }

    fn is_read_only(&self) -> bool {
        false
    }

    fn changes_files(&self) -> bool {
        true
    }

    fn run<'a>(&'a self, input: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let command = input["command"].as_str().unwrap_or_default().to_owned();
            let jail = match jail(&input, ctx).await {
                Ok(jail) => jail,
                Err(why) => return ToolOutput::error(why),
            };
            if input["run_in_background"].as_bool().unwrap_or(false) {
                return match start_background(&command, ctx, jail) {
                    Ok((id, pid)) => {
                        let mut out = ToolOutput::text(format!(
                            "Started background shell {id}. Read its output with BashOutput {{\"bash_id\": \"{id}\"}}; stop it with KillShell."
                        ));
                        // What a later daemon needs to stop it if this one dies first.
                        out.details = Some(json!({"backgroundShell": {
                            "id": id,
                            "command": command,
                            "pid": pid,
                            "startTicks": pid.and_then(start_ticks),
                        }}));
                        out
                    }
                    Err(e) => ToolOutput::error(format!("could not start the command: {e}")),
                };
            }
            let timeout = Duration::from_millis(
                input["timeout"]
                    .as_u64()
                    .unwrap_or(DEFAULT_TIMEOUT_MS)
                    .min(MAX_TIMEOUT_MS),
            );
            let out = match run(&command, timeout, ctx, &self.spare, &jail.wrap).await {
                Ok(out) => out,
                Err(e) => ToolOutput::error(format!("could not run the command: {e}")),
            };
            distrust_created(out, crate::sandbox::Sandbox::created(jail.absent), ctx)
        })
    }
}

/// When a sandboxed command created files that would act outside the sandbox (a project
/// `.claude/settings.json` that turns it off, a git hook), the session's directories are no
/// longer trusted, so they do not act until the user trusts them again; the result says so.
fn distrust_created(
    mut out: ToolOutput,
    created: Vec<std::path::PathBuf>,
    ctx: &ToolContext,
) -> ToolOutput {
    if let Some(note) = withdraw_trust(&created, ctx.workspace.roots())
        && let Some(text) = out.content.as_str()
    {
        out.content = serde_json::Value::String(format!("{text}{note}"));
    }
    out
}

/// Withdraws the trust of `roots` when `created` is not empty; the note that says so.
fn withdraw_trust(created: &[std::path::PathBuf], roots: &[std::path::PathBuf]) -> Option<String> {
    if created.is_empty() {
        return None;
    }
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let revoked = roots
        .iter()
        .map(|root| crate::trust::set(root, home.as_deref(), false))
        .collect::<Result<Vec<_>, _>>();
    let names: Vec<String> = created.iter().map(|p| p.display().to_string()).collect();
    tracing::warn!(created = ?names, "a sandboxed command created files that act outside the sandbox");
    Some(match revoked {
        Ok(_) => format!(
            "\n[tether: this command created {}, which would act outside the sandbox; the folder is no \
             longer trusted, so its own settings do not act until the user trusts it again (tether trust)]",
            names.join(", ")
        ),
        Err(e) => format!(
            "\n[tether: this command created {}, which would act outside the sandbox, and the folder's \
             trust could not be withdrawn: {e}]",
            names.join(", ")
        ),
    })
}

/// Where a call runs ([`Jail`]), or why it cannot run.
async fn jail(input: &Value, ctx: &ToolContext) -> Result<Jail, String> {
    let Some(sandbox) = ctx.workspace.sandbox() else {
        return Ok(Jail::default());
    };
    if sandbox.place(input) == crate::sandbox::Placement::Outside {
        return Ok(Jail::default());
    }
    if let Err(why) = crate::sandbox::ready(&sandbox.bwrap).await {
        return Err(format!(
            "the command was not run: the sandbox is enabled (sandbox.enabled) but {why}. \
             Commands are never run outside it silently; the user can fix bubblewrap or turn the sandbox off"
        ));
    }
    // Bound inside: it must exist when the sandbox starts.
    tether_proto::private::create_dir_all(&sandbox.scratch)
        .map_err(|e| format!("could not prepare the sandbox: {e}"))?;
    let proxy = ctx.workspace.proxy(&sandbox).map_err(|e| {
        format!(
            "the command was not run: the sandbox's network proxy (for sandbox.network.allowedDomains) could not start: {e}"
        )
    })?;
    Ok(Jail {
        wrap: sandbox.wrap(proxy.as_deref()),
        absent: sandbox.absent(),
    })
}

/// Where a call runs: the sandbox's command line (empty: outside), and what a command inside
/// could create that would act outside it ([`crate::sandbox::Sandbox::absent`], looked at
/// again when the command ends).
#[derive(Default)]
struct Jail {
    wrap: Vec<OsString>,
    absent: Vec<std::path::PathBuf>,
}

/// A file removed when this goes out of scope.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// When a process started, in clock ticks since boot (`/proc/<pid>/stat` field 22): with the
/// pid, it names one process even after the pid is reused.
fn start_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; fields after it are plain.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Kills the process group of a background shell an earlier daemon started, if its leader is
/// still that very process. Returns whether it was running.
pub fn reap_orphan(pid: i32, ticks: Option<u64>) -> bool {
    match (start_ticks(pid), ticks) {
        (Some(now), Some(then)) if now == then => {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            true
        }
        _ => false,
    }
}

/// Starts `command` as a background job of the session (under `wrap`); returns its id and pid.
fn start_background(
    command: &str,
    ctx: &ToolContext,
    jail: Jail,
) -> std::io::Result<(String, Option<i32>)> {
    let Jail { wrap, absent } = jail;
    let Spawned {
        mut child,
        pgid,
        mut pipe,
    } = shell::spawn(command, &ctx.workspace.cwd(), ctx.workspace.env(), &wrap)?;
    let (id, job) = ctx.workspace.jobs.start(command);
    // Checked when it ends, as a foreground call is: what it created that acts outside.
    let roots = ctx.workspace.roots().to_vec();
    let distrust = move |job: &super::Job| {
        let created = crate::sandbox::Sandbox::created(absent);
        if let Some(note) = withdraw_trust(&created, &roots) {
            job.append(note.as_bytes());
        }
    };
    tokio::spawn(async move {
        let mut buf = vec![0u8; 16 * 1024];
        let mut status = None;
        loop {
            tokio::select! {
                read = pipe.read(&mut buf) => match read {
                    Ok(0) | Err(_) => break,
                    Ok(n) => job.append(&buf[..n]),
                },
                s = child.wait(), if status.is_none() => {
                    status = Some(s.ok().and_then(|s| s.code()));
                }
                _ = job.stop.cancelled() => {
                    kill_group(pgid);
                    let _ = child.wait().await;
                    distrust(&job);
                    job.finish(JobEnd::Killed);
                    return;
                }
            }
        }
        let code = match status {
            Some(code) => code,
            None => child.wait().await.ok().and_then(|s| s.code()),
        };
        distrust(&job);
        job.finish(JobEnd::Exited(code));
    });
    Ok((id, pgid.map(Pid::as_raw)))
}

async fn run(
    command: &str,
    timeout: Duration,
    ctx: &ToolContext,
    spare: &shell::Spare,
    wrap: &[OsString],
) -> std::io::Result<ToolOutput> {
    let cwd = ctx.workspace.cwd();
    // Outside the sandbox while it is on, the call's files are kept where sandboxed commands
    // cannot reach them.
    let scratch = if wrap.is_empty() && ctx.workspace.sandbox().is_some() {
        ctx.workspace.host_scratch()
    } else {
        ctx.workspace.scratch().to_owned()
    };
    tether_proto::private::create_dir_all(&scratch)?;
    let id = uuid::Uuid::new_v4().simple().to_string();
    let pwd_file = scratch.join(format!("{id}.pwd"));
    // The shell starts with `PWD` = `cwd`; only a command that leaves it elsewhere pays for
    // the file that says where.
    let script = format!(
        "__tether_pwd={}; __tether_out={}\n\
         trap '__tether_rc=$?; [ \"$PWD\" = \"$__tether_pwd\" ] || pwd -P > \"$__tether_out\" 2>/dev/null; exit $__tether_rc' EXIT\n\
         {command}\n",
        shell::quote(&cwd),
        shell::quote(&pwd_file)
    );
    let env = ctx.workspace.env();
    let script_file = RemoveOnDrop(scratch.join(format!("{id}.sh")));
    let Spawned {
        mut child,
        pgid,
        mut pipe,
    } = match spare.run(&script, &cwd, &script_file.0, env, wrap) {
        Some(spawned) => spawned,
        None => shell::spawn(&script, &cwd, env, wrap)?,
    };
    let deadline = Instant::now() + timeout;
    let mut output = Capture::new(scratch.join(format!("{id}.log")));
    let mut progress = Progress::default();
    let mut buf = vec![0u8; 64 * 1024];
    let mut status = None;
    let mut drain_until: Option<Instant> = None;
    let mut stopped: Option<&str> = None;
    let kill = kill_group;
    loop {
        tokio::select! {
            read = pipe.read(&mut buf) => match read {
                Ok(0) | Err(_) => {
                    if status.is_none() {
                        status = Some(child.wait().await?);
                    }
                    break;
                }
                Ok(n) => {
                    output.push(&buf[..n]);
                    progress.push(&buf[..n]);
                    if let Some(chunk) = progress.take(false) {
                        (ctx.progress)(chunk);
                    }
                }
            },
            _ = capture::until(progress.due()) => {
                if let Some(chunk) = progress.take(false) {
                    (ctx.progress)(chunk);
                }
            }
            s = child.wait(), if status.is_none() => {
                status = Some(s?);
                drain_until = Some(Instant::now() + DRAIN_AFTER_EXIT);
            }
            _ = tokio::time::sleep_until(drain_until.unwrap_or(deadline)), if drain_until.is_some() => break,
            _ = tokio::time::sleep_until(deadline), if status.is_none() && stopped.is_none() => {
                kill(pgid);
                stopped = Some("timeout");
            }
            _ = ctx.cancel.cancelled(), if status.is_none() && stopped.is_none() => {
                kill(pgid);
                stopped = Some("cancelled");
            }
        }
    }
    if let Some(chunk) = progress.take(true) {
        (ctx.progress)(chunk);
    }
    if stopped.is_some() {
        // Whatever is left of the group goes too.
        kill(pgid);
    }
    let code = status.and_then(|s| s.code());
    let mut text = output.finish(MAX_OUTPUT_CHARS);
    let mut notes = Vec::new();
    if let Ok(new_dir) = std::fs::read_to_string(&pwd_file) {
        let _ = std::fs::remove_file(&pwd_file);
        let new_dir = Path::new(new_dir.trim()).to_owned();
        if !new_dir.as_os_str().is_empty()
            && new_dir != cwd
            && new_dir != cwd.canonicalize().unwrap_or_default()
        {
            match ctx.workspace.set_cwd(new_dir.clone()) {
                Ok(()) => notes.push(format!("(current directory is now {})", new_dir.display())),
                Err(msg) => notes.push(format!("(cd refused: {msg})")),
            }
        }
    }
    // After the `cd` is taken, so the spare starts where the next call runs.
    spare.refill(&ctx.workspace.cwd(), env, wrap);
    match stopped {
        Some("timeout") => notes.push(format!(
            "(killed after {} ms: the command ran past its timeout; its child processes were killed too)",
            timeout.as_millis()
        )),
        Some(_) => notes.push("(interrupted by user: the command and its child processes were killed)".into()),
        None => {}
    }
    let failed = stopped.is_some() || code != Some(0);
    if let Some(c) = code.filter(|c| *c != 0) {
        notes.push(format!("(exit code {c})"));
    }
    if text.is_empty() && notes.is_empty() {
        text = "(no output)".into();
    }
    for n in notes {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&n);
    }
    Ok(if failed {
        ToolOutput::error(text)
    } else {
        ToolOutput::text(text)
    })
}

/// Reads a background shell's new output.
pub struct BashOutput;

impl Tool for BashOutput {
    fn name(&self) -> &'static str {
        "BashOutput"
    }

    fn description(&self) -> &'static str {
        "Returns the output a background shell (started with Bash run_in_background) produced since the last read, \
         and whether it still runs. filter keeps only lines matching a regular expression."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "bash_id": {"type": "string", "description": "The shell id Bash returned"},
                "task_id": {"type": "string", "description": "The same id (Claude Code's name for it)"},
                "filter": {"type": "string", "description": "Regular expression; only matching lines are returned"},
                "block": {"type": "boolean", "description": "Accepted; the output so far is returned at once"},
                "timeout": {"type": "number", "description": "Accepted with block"}
            },
            "additionalProperties": false
        })
    }

    fn is_read_only(&self) -> bool {
        true
    }

    fn run<'a>(&'a self, input: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let id = input["bash_id"]
                .as_str()
                .or(input["task_id"].as_str())
                .unwrap_or_default();
            let Some(job) = ctx.workspace.jobs.get(id) else {
                return ToolOutput::error(unknown_shell(id, ctx));
            };
            let filter = match input["filter"].as_str().map(regex_lite) {
                Some(Ok(re)) => Some(re),
                Some(Err(e)) => return ToolOutput::error(e),
                None => None,
            };
            let (new, dropped) = job.take_new();
            let new = String::from_utf8_lossy(&new).into_owned();
            let mut text = match &filter {
                Some(re) => new
                    .lines()
                    .filter(|l| re.is_match(l.as_bytes()).unwrap_or(false))
                    .map(|l| format!("{l}\n"))
                    .collect(),
                None => new,
            };
            if text.chars().count() > MAX_OUTPUT_CHARS {
                text = cut_middle(&text, MAX_OUTPUT_CHARS, "not saved; read more often");
            }
            let state = match job.end() {
                None => "still running".to_owned(),
                Some(end) => end.describe(),
            };
            if dropped > 0 {
                text = format!(
                    "… [{dropped} earlier bytes dropped unread: a job keeps at most {} KiB of output between reads] …\n{text}",
                    jobs::MAX_UNREAD / 1024
                );
            }
            if text.is_empty() {
                text = "(no new output)\n".into();
            }
            ToolOutput::text(format!("{text}[{id}: {state}]"))
        })
    }
}

/// Kills a background shell.
pub struct KillShell;

impl Tool for KillShell {
    fn name(&self) -> &'static str {
        "KillShell"
    }

    fn description(&self) -> &'static str {
        "Kills a background shell (and every process it started) by its id."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "shell_id": {"type": "string", "description": "The shell id Bash returned"},
                "task_id": {"type": "string", "description": "The same id (Claude Code's name for it)"}
            },
            "additionalProperties": false
        })
    }

    fn is_read_only(&self) -> bool {
        false
    }

    fn run<'a>(&'a self, input: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let id = input["shell_id"]
                .as_str()
                .or(input["task_id"].as_str())
                .unwrap_or_default();
            let Some(job) = ctx.workspace.jobs.get(id) else {
                return ToolOutput::error(unknown_shell(id, ctx));
            };
            if let Some(end) = job.end() {
                return ToolOutput::text(format!("{id} had already ended ({})", end.describe()));
            }
            job.stop.cancel();
            ToolOutput::text(format!("Killed {id} ({})", job.command))
        })
    }
}

fn unknown_shell(id: &str, ctx: &ToolContext) -> String {
    let ids = ctx.workspace.jobs.ids();
    if ids.is_empty() {
        format!("there is no background shell {id:?}; none has been started in this session")
    } else {
        format!(
            "there is no background shell {id:?}; the shells are: {}",
            ids.join(", ")
        )
    }
}

fn regex_lite(pattern: &str) -> Result<grep_regex::RegexMatcher, String> {
    grep_regex::RegexMatcher::new(pattern).map_err(|e| format!("invalid filter {pattern:?}: {e}"))
}

/// Whether `out` is an error whose text contains `needle`.
#[cfg(test)]
fn fails_saying(out: &ToolOutput, needle: &str) -> bool {
    out.is_error && out.content.as_str().is_some_and(|s| s.contains(needle))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::Workspace;
    use std::sync::{Arc, Mutex};

    fn ctx(root: &Path) -> (ToolContext, Arc<Mutex<String>>) {
        let seen = Arc::new(Mutex::new(String::new()));
        let sink = seen.clone();
        let mut ctx = ToolContext::detached(Arc::new(Workspace::new(
            root.to_owned(),
            Vec::new(),
            root.join(".scratch"),
        )));
        ctx.progress = Arc::new(move |c: String| sink.lock().expect("lock").push_str(&c));
        (ctx, seen)
    }

    #[tokio::test]
    async fn output_exit_codes_and_cd_persistence() {
        let bash = Bash::default();
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        std::fs::create_dir(root.join("sub")).expect("mkdir");
        let (ctx, progress) = ctx(&root);
        let out = bash
            .run(json!({"command": "echo out; echo err >&2"}), &ctx)
            .await;
        assert_eq!(out, ToolOutput::text("out\nerr\n"));
        assert_eq!(*progress.lock().expect("lock"), "out\nerr\n");
        let out = bash.run(json!({"command": "exit 3"}), &ctx).await;
        assert!(fails_saying(&out, "exit code 3"), "{out:?}");
        bash.run(json!({"command": "cd sub"}), &ctx).await;
        assert_eq!(ctx.workspace.cwd(), root.join("sub"));
        let out = bash.run(json!({"command": "pwd"}), &ctx).await;
        assert_eq!(
            out.content.as_str().map(str::trim),
            Some(root.join("sub").to_str().expect("utf8"))
        );
        let out = bash.run(json!({"command": "cd /"}), &ctx).await;
        assert!(
            out.content
                .as_str()
                .is_some_and(|s| s.contains("cd refused")),
            "{out:?}"
        );
        assert_eq!(ctx.workspace.cwd(), root.join("sub"));
    }

    fn assert_scratch_is_empty(root: &Path) {
        let left: Vec<_> = std::fs::read_dir(root.join(".scratch"))
            .expect("scratch")
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect();
        assert!(left.is_empty(), "files left in scratch: {left:?}");
    }

    /// Waits until `bash` has a spare shell waiting; returns its pid.
    async fn spare_pid(bash: &Bash) -> u32 {
        for _ in 0..500 {
            if let Some(pid) = bash.spare.pid() {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no spare shell started");
    }

    #[tokio::test]
    async fn a_call_after_the_first_runs_in_the_spare_shell_as_if_it_were_fresh() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        std::fs::create_dir(root.join("sub")).expect("mkdir");
        let (ctx, _) = ctx(&root);
        let bash = Bash::default();
        bash.run(json!({"command": "true"}), &ctx).await;
        let pid = spare_pid(&bash).await;
        let out = bash
            .run(
                json!({"command": "echo $$ \"$PWD\"; read -r line; echo \"read: $line\"; exit 4"}),
                &ctx,
            )
            .await;
        let text = out.content.as_str().unwrap_or_default();
        assert!(
            text.starts_with(&format!("{pid} {}\nread: \n", root.display())),
            "the spare ran it, in the session's directory, stdin empty: {text}"
        );
        assert!(out.is_error && text.contains("exit code 4"), "{text}");
        // A cd in the spare persists, and the next spare starts there.
        bash.run(json!({"command": "cd sub"}), &ctx).await;
        assert_eq!(ctx.workspace.cwd(), root.join("sub"));
        let pid = spare_pid(&bash).await;
        let out = bash.run(json!({"command": "echo $$; pwd"}), &ctx).await;
        assert_eq!(
            out.content.as_str(),
            Some(format!("{pid}\n{}\n", root.join("sub").display()).as_str())
        );
        // A spare started elsewhere moves to the session's directory first.
        ctx.workspace
            .set_cwd(root.clone())
            .expect("back to the root");
        spare_pid(&bash).await;
        let out = bash.run(json!({"command": "pwd"}), &ctx).await;
        assert_eq!(
            out.content.as_str(),
            Some(format!("{}\n", root.display()).as_str())
        );
        // A syntax error is reported as bash reports it, and nothing is left in scratch.
        spare_pid(&bash).await;
        let out = bash.run(json!({"command": "if then fi"}), &ctx).await;
        assert!(fails_saying(&out, "syntax error"), "{out:?}");
        assert_scratch_is_empty(&root);
    }

    #[tokio::test]
    async fn a_spare_with_another_environment_is_not_used() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let (ctx, _) = ctx(&root);
        let bash = Bash::default();
        bash.run(json!({"command": "true"}), &ctx).await;
        let pid = spare_pid(&bash).await;
        let mut other = ToolContext::detached(Arc::new(
            Workspace::new(root.clone(), Vec::new(), root.join(".scratch"))
                .with_env(vec![("TETHER_SPARE_TEST".into(), "set".into())]),
        ));
        other.progress = Arc::new(|_| {});
        let out = bash
            .run(json!({"command": "echo $$ $TETHER_SPARE_TEST"}), &other)
            .await;
        let text = out.content.as_str().unwrap_or_default().to_owned();
        assert!(text.ends_with(" set\n"), "{text}");
        assert_ne!(text, format!("{pid} set\n"), "a fresh shell ran it");
    }

    #[tokio::test]
    async fn the_directory_follows_cd_through_odd_names_and_leaves_no_files() {
        let bash = Bash::default();
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical").join("a b's");
        let odd = root.join("it's \"here\" $x");
        std::fs::create_dir_all(&odd).expect("mkdir");
        let (ctx, _) = ctx(&root);
        let out = bash.run(json!({"command": "echo \"$PWD\""}), &ctx).await;
        assert_eq!(
            out.content.as_str().map(str::trim),
            root.to_str(),
            "the shell starts with PWD at the session's directory"
        );
        let out = bash
            .run(json!({"command": "cd \"it's \\\"here\\\" \\$x\""}), &ctx)
            .await;
        assert!(!out.is_error, "{out:?}");
        assert_eq!(ctx.workspace.cwd(), odd);
        // Away and back again within one command: nothing changes.
        bash.run(json!({"command": "cd / && cd -"}), &ctx).await;
        assert_eq!(ctx.workspace.cwd(), odd);
        bash.run(json!({"command": "cd .."}), &ctx).await;
        assert_eq!(ctx.workspace.cwd(), root);
        assert_scratch_is_empty(&root);
    }

    #[tokio::test]
    async fn a_timeout_kills_the_grandchildren_too() {
        let bash = Bash::default();
        let dir = tempfile::tempdir().expect("tempdir");
        let (ctx, _) = ctx(dir.path());
        let marker = format!("{}", 90 + (std::process::id() % 9));
        let started = std::time::Instant::now();
        let out = bash
            .run(
                json!({"command": format!("sh -c 'sleep {marker}.25 & wait'"), "timeout": 300}),
                &ctx,
            )
            .await;
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(fails_saying(&out, "killed after 300 ms"), "{out:?}");
        let ps = std::process::Command::new("ps")
            .args(["-eo", "args"])
            .output()
            .expect("ps");
        let listing = String::from_utf8_lossy(&ps.stdout);
        assert!(
            !listing
                .lines()
                .any(|l| l.starts_with(&format!("sleep {marker}.25"))),
            "grandchild survived"
        );
    }

    #[tokio::test]
    async fn long_output_is_cut_and_saved() {
        let bash = Bash::default();
        let dir = tempfile::tempdir().expect("tempdir");
        let (ctx, _) = ctx(dir.path());
        let out = bash.run(json!({"command": "seq 1 20000"}), &ctx).await;
        let text = out.content.as_str().expect("text");
        assert!(text.starts_with("1\n2\n") && text.trim_end().ends_with("20000"));
        let path = text
            .split("the full output is in ")
            .nth(1)
            .and_then(|r| r.split(']').next())
            .expect("path");
        let full = std::fs::read_to_string(path).expect("saved");
        assert_eq!(full.lines().count(), 20000);
    }
}

#[cfg(test)]
mod sandboxed {
    use super::*;
    use crate::sandbox::{Paths, Sandbox, Settings};
    use crate::tools::Workspace;
    use std::sync::Arc;

    fn sandboxed(root: &Path, bwrap: Option<&str>) -> ToolContext {
        let ws = Workspace::new(root.to_owned(), Vec::new(), root.join(".scratch"));
        let mut sandbox = Sandbox::new(
            Settings {
                enabled: true,
                auto_allow: true,
                allow_unsandboxed: true,
                ..Settings::default()
            },
            Paths {
                roots: vec![root.to_owned()],
                scratch: root.join(".scratch"),
                data_dir: root.join(".data"),
                ..Paths::default()
            },
        );
        if let Some(b) = bwrap {
            sandbox.bwrap = b.into();
        }
        ws.set_sandbox(Some(sandbox));
        let mut ctx = ToolContext::detached(Arc::new(ws));
        ctx.progress = Arc::new(|_| {});
        ctx
    }

    async fn bwrap_works() -> bool {
        match crate::sandbox::probe(&crate::sandbox::bwrap_path()).await {
            Ok(()) => true,
            Err(why) => {
                eprintln!("skipped: {why}");
                false
            }
        }
    }

    #[tokio::test]
    async fn a_bubblewrap_that_cannot_start_refuses_the_call() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let ctx = sandboxed(&root, Some("/nonexistent/bwrap"));
        let bash = Bash::default();
        for input in [
            json!({"command": "touch ran"}),
            json!({"command": "touch ran", "run_in_background": true}),
        ] {
            let out = bash.run(input, &ctx).await;
            assert!(fails_saying(&out, "bubblewrap is not installed"), "{out:?}");
        }
        // Leaving the sandbox (the permission check asked the user) runs it outside.
        let out = bash
            .run(
                json!({"command": "touch ran", "dangerouslyDisableSandbox": true}),
                &ctx,
            )
            .await;
        assert!(!out.is_error, "{out:?}");
        assert!(root.join("ran").exists());
    }

    #[tokio::test]
    async fn sandboxed_calls_and_the_spare_stay_inside_and_outside_calls_outside() {
        if !bwrap_works().await {
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let ctx = sandboxed(&root, None);
        let bash = Bash::default();
        let outside = format!("/var/tmp/tether-bash-{}", std::process::id());
        let write = format!("touch {outside}");
        // Twice: the first in a fresh shell, the second in the spare it left.
        for _ in 0..2 {
            let out = bash.run(json!({"command": &write}), &ctx).await;
            assert!(fails_saying(&out, "Read-only file system"), "{out:?}");
            assert!(!Path::new(&outside).exists());
            let out = bash
                .run(
                    json!({"command": "echo ok > inside && cd sub 2>/dev/null; pwd"}),
                    &ctx,
                )
                .await;
            assert!(!out.is_error, "{out:?}");
        }
        // An unsandboxed call never takes the sandboxed spare.
        let out = bash
            .run(
                json!({"command": format!("{write} && rm {outside}"), "dangerouslyDisableSandbox": true}),
                &ctx,
            )
            .await;
        assert!(!out.is_error, "{out:?}");
        // And a sandboxed one after it never takes the unsandboxed spare.
        let out = bash.run(json!({"command": &write}), &ctx).await;
        assert!(fails_saying(&out, "Read-only file system"), "{out:?}");
        // A cd inside persists as outside.
        std::fs::create_dir(root.join("sub")).expect("mkdir");
        bash.run(json!({"command": "cd sub"}), &ctx).await;
        assert_eq!(ctx.workspace.cwd(), root.join("sub"));
        // Background shells too.
        let out = bash
            .run(json!({"command": &write, "run_in_background": true}), &ctx)
            .await;
        assert!(!out.is_error, "{out:?}");
        let job = ctx.workspace.jobs.get("bash_1").expect("job");
        while job.end().is_none() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (text, _) = job.take_new();
        assert!(
            String::from_utf8_lossy(&text).contains("Read-only file system"),
            "{text:?}"
        );
        assert!(!Path::new(&outside).exists());
    }
}

#[cfg(test)]
mod background {
    use super::*;
    use crate::tools::Workspace;
    use std::sync::Arc;

    #[tokio::test]
    async fn background_shells_are_read_incrementally_and_killed() {
        let bash = Bash::default();
        let dir = tempfile::tempdir().expect("tempdir");
        let ctx = ToolContext::detached(Arc::new(Workspace::new(
            dir.path().to_owned(),
            Vec::new(),
            dir.path().join(".s"),
        )));
        let out = bash.run(json!({"command": "echo one; sleep 0.2; echo two; sleep 60", "run_in_background": true}), &ctx).await;
        assert!(
            out.content.as_str().is_some_and(|s| s.contains("bash_1")),
            "{out:?}"
        );
        let mut first = String::new();
        while !first.contains("one") {
            tokio::time::sleep(Duration::from_millis(20)).await;
            first.push_str(
                BashOutput
                    .run(json!({"bash_id": "bash_1"}), &ctx)
                    .await
                    .content
                    .as_str()
                    .unwrap_or(""),
            );
        }
        assert!(first.contains("still running"));
        let mut second = String::new();
        while !second.contains("two") {
            tokio::time::sleep(Duration::from_millis(20)).await;
            second = BashOutput
                .run(json!({"bash_id": "bash_1", "filter": "^t"}), &ctx)
                .await
                .content
                .as_str()
                .unwrap_or("")
                .to_owned();
        }
        assert!(!second.contains("one"), "only new output: {second}");
        KillShell.run(json!({"shell_id": "bash_1"}), &ctx).await;
        let job = ctx.workspace.jobs.get("bash_1").expect("job");
        while job.end().is_none() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(job.end(), Some(JobEnd::Killed));
        let missing = BashOutput.run(json!({"bash_id": "bash_9"}), &ctx).await;
        assert!(fails_saying(&missing, "bash_1"), "{missing:?}");
    }
}
