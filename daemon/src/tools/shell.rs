//! Starting the shells Bash runs commands in, each in its own process group with stdout and
//! stderr sharing one pipe. A command either starts its own `bash -c`, or takes the spare: a
//! shell started ahead of need that waits on its stdin for the path of a script to source, so
//! the call pays for a pipe write instead of a process start (a fork, an exec and bash's
//! start-up: most of what a quick command costs). A Bash tool has one spare, for the
//! environment and sandbox it was started with (a sandboxed call never runs in an unsandboxed
//! spare, nor the other way round); it is started again after each call and stopped after a
//! minute unused.
//!
//! A shell is `bash`, or `bwrap … -- bash` when the call runs in the sandbox (`wrap`, from
//! `crate::sandbox`); either way its environment is the daemon's without its credentials
//! (`crate::child_env`), plus the settings' `env`.

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::ffi::OsString;
use std::io::Write as _;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// How long an unused spare waits before it is stopped.
const SPARE_IDLE: Duration = Duration::from_secs(60);

/// What the spare runs: one line of stdin names the script; stdin is `/dev/null` again before
/// the script runs, as for a shell started for its command. The end of its input (the daemon
/// gone) ends it.
const WAIT_THEN_SOURCE: &str =
    "IFS= read -r __tether_script || exit 0; exec </dev/null; . \"$__tether_script\"";

/// A shell in its own process group whose stdout and stderr share one pipe.
pub struct Spawned {
    /// The shell.
    pub child: tokio::process::Child,
    /// Its process group.
    pub pgid: Option<Pid>,
    /// Its output.
    pub pipe: tokio::net::unix::pipe::Receiver,
}

/// A started shell whose output pipe is not yet registered with a runtime.
struct Started {
    child: tokio::process::Child,
    output: OwnedFd,
}

impl Started {
    fn spawned(self) -> std::io::Result<Spawned> {
        let pgid = self.child.id().map(|p| Pid::from_raw(p as i32));
        let pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(self.output)?;
        Ok(Spawned {
            child: self.child,
            pgid,
            pipe,
        })
    }
}

/// How a shell starts: `bash` itself, or under the sandbox's command line (`bwrap` first,
/// ending with `--` or with the prelude that starts the network relay and then runs `bash`).
fn command(wrap: &[OsString]) -> tokio::process::Command {
    match wrap.split_first() {
        Some((bwrap, args)) => {
            let mut cmd = tokio::process::Command::new(bwrap);
            cmd.args(args).arg("bash");
            cmd
        }
        None => tokio::process::Command::new("bash"),
    }
}

fn start(
    args: &[&str],
    cwd: &Path,
    env: &[(String, String)],
    wrap: &[OsString],
    stdin: Stdio,
) -> std::io::Result<Started> {
    let (reader, writer) = std::io::pipe()?;
    let mut cmd = command(wrap);
    crate::child_env::scrub(&mut cmd);
    let child = cmd
        .args(args)
        .current_dir(cwd)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("PWD", cwd)
        .stdin(stdin)
        .stdout(writer.try_clone()?)
        .stderr(writer)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()?;
    let output: OwnedFd = reader.into();
    nix::fcntl::fcntl(
        &output,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )
    .map_err(std::io::Error::from)?;
    Ok(Started { child, output })
}

/// Starts `bash -c script` in `cwd` (with `PWD` set to it) and stdin from `/dev/null`, under
/// `wrap` (the sandbox's command line, or empty).
pub fn spawn(
    script: &str,
    cwd: &Path,
    env: &[(String, String)],
    wrap: &[OsString],
) -> std::io::Result<Spawned> {
    start(&["-c", script], cwd, env, wrap, Stdio::null())?.spawned()
}

/// `path` as one single-quoted shell word.
pub fn quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', "'\\''"))
}

/// Kills a shell's whole process group.
pub fn kill_group(pgid: Option<Pid>) {
    if let Some(pg) = pgid {
        let _ = killpg(pg, Signal::SIGKILL);
    }
}

/// A spare shell waiting for its script.
struct Waiting {
    started: Started,
    script_in: std::io::PipeWriter,
    env: Vec<(String, String)>,
    wrap: Vec<OsString>,
    generation: u64,
}

/// A Bash tool's spare shell.
#[derive(Default)]
pub struct Spare {
    slot: Arc<Mutex<Option<Waiting>>>,
    generation: AtomicU64,
}

fn lock(slot: &Mutex<Option<Waiting>>) -> MutexGuard<'_, Option<Waiting>> {
    slot.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Spare {
    /// Runs `script` in the spare, if one is waiting with `env` under `wrap`: writes it to
    /// `file` (after a change to `cwd`, in case the spare started elsewhere; then `OLDPWD` is
    /// where it started) and hands the spare its path. `None` when there is no spare to take or
    /// handing it over failed (a spare with another environment or sandbox is stopped); the
    /// caller starts a shell then.
    pub fn run(
        &self,
        script: &str,
        cwd: &Path,
        file: &Path,
        env: &[(String, String)],
        wrap: &[OsString],
    ) -> Option<Spawned> {
        let Waiting {
            mut started,
            mut script_in,
            env: spare_env,
            wrap: spare_wrap,
            ..
        } = lock(&self.slot).take()?;
        let path = file.as_os_str().as_bytes();
        if spare_env != env
            || spare_wrap != wrap
            || path.contains(&b'\n')
            || !matches!(started.child.try_wait(), Ok(None))
        {
            return None;
        }
        let dir = quote(cwd);
        let mut line = path.to_vec();
        line.push(b'\n');
        std::fs::write(
            file,
            format!("[ \"$PWD\" = {dir} ] || cd -- {dir} || exit 1\n{script}"),
        )
        .and_then(|()| script_in.write_all(&line))
        .and_then(|()| started.spawned())
        .ok()
    }

    /// Starts a spare in `dir` with `env` under `wrap`, in the background, unless one is
    /// waiting; it is stopped after a minute unused.
    pub fn refill(&self, dir: &Path, env: &[(String, String)], wrap: &[OsString]) {
        let slot = self.slot.clone();
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let (dir, env): (PathBuf, Vec<(String, String)>) = (dir.to_owned(), env.to_vec());
        let wrap = wrap.to_vec();
        tokio::spawn(async move {
            if lock(&slot).is_some() {
                return;
            }
            let spare = std::io::pipe().and_then(|(reader, script_in)| {
                let started = start(&["-c", WAIT_THEN_SOURCE], &dir, &env, &wrap, reader.into())?;
                Ok((started, script_in))
            });
            match spare {
                Ok((started, script_in)) => {
                    *lock(&slot) = Some(Waiting {
                        started,
                        script_in,
                        env,
                        wrap,
                        generation,
                    });
                }
                Err(e) => {
                    tracing::debug!(error = %e, "no spare shell");
                    return;
                }
            }
            tokio::time::sleep(SPARE_IDLE).await;
            let mut waiting = lock(&slot);
            if waiting.as_ref().is_some_and(|w| w.generation == generation) {
                // Dropping it kills it.
                *waiting = None;
            }
        });
    }

    /// The pid of the waiting spare, if any.
    #[cfg(test)]
    pub fn pid(&self) -> Option<u32> {
        lock(&self.slot).as_ref().and_then(|w| w.started.child.id())
    }
}
