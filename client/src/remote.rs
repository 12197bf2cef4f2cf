//! Reaching a daemon on another machine: `--remote [user@]host[:dir]` (or `$TETHER_REMOTE`)
//! makes every command talk through `ssh host tether bridge` (`bridge.rs` is the remote end).
//! The protocol runs unchanged over the pipe, so a dropped SSH connection is a dropped socket
//! connection: clients reconnect and resume with `since`.

use std::process::Stdio;
use std::sync::OnceLock;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// Where the daemon runs when it is not here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    /// What ssh connects to: `host` or `user@host`.
    pub destination: String,
    /// The working directory of new sessions there (default: the local one's path).
    pub dir: Option<String>,
}

static REMOTE: OnceLock<Option<Remote>> = OnceLock::new();

/// Why the remote daemon cannot be reached.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// ssh could not be started.
    #[error("cannot run {program}: {reason}")]
    Spawn {
        /// The ssh program.
        program: String,
        /// Why.
        reason: String,
    },
    /// `--remote` names no host.
    #[error("--remote needs a host: [user@]host[:dir]")]
    NoHost,
}

impl Remote {
    /// Reads `[user@]host[:dir]` (`[v6-address]` in brackets).
    pub fn parse(spec: &str) -> Result<Self, RemoteError> {
        let spec = spec.trim();
        let at = spec.rfind('@').map_or(0, |i| i + 1);
        let host_end = match spec[at..].strip_prefix('[') {
            Some(rest) => rest.find(']').map_or(spec.len(), |i| at + i + 2),
            None => spec[at..].find(':').map_or(spec.len(), |i| at + i),
        };
        // ssh takes an IPv6 address without its brackets.
        let host = spec[at..host_end]
            .trim_start_matches('[')
            .trim_end_matches(']');
        if host.is_empty() {
            return Err(RemoteError::NoHost);
        }
        let destination = format!("{}{host}", &spec[..at]);
        let dir = spec[host_end..]
            .strip_prefix(':')
            .filter(|d| !d.is_empty())
            .map(str::to_owned);
        Ok(Self { destination, dir })
    }
}

/// Sets where the daemon is for this process: the `--remote` argument, else `$TETHER_REMOTE`.
pub fn configure(flag: Option<&str>) -> Result<(), RemoteError> {
    let spec = flag
        .map(str::to_owned)
        .or_else(|| std::env::var("TETHER_REMOTE").ok())
        .filter(|s| !s.trim().is_empty());
    let remote = spec.as_deref().map(Remote::parse).transpose()?;
    let _ = REMOTE.set(remote);
    Ok(())
}

/// The remote daemon this process talks to, if any.
pub fn current() -> Option<&'static Remote> {
    REMOTE.get().and_then(Option::as_ref)
}

/// The working directory new sessions get: the remote one given with `--remote host:dir`,
/// else this process's (its path, also on a remote machine).
pub fn work_dir() -> std::io::Result<String> {
    if let Some(dir) = current().and_then(|r| r.dir.clone()) {
        return Ok(dir);
    }
    Ok(std::env::current_dir()?.display().to_string())
}

/// The pipe to a remote daemon: ssh's stdout and stdin, and ssh itself (killed on drop).
pub struct Pipe {
    /// Read and write ends.
    pub stream: tokio::io::Join<ChildStdout, ChildStdin>,
    /// The ssh process.
    pub ssh: Child,
}

/// Runs `ssh <destination> tether bridge`: `$TETHER_SSH` is the ssh command (split at
/// whitespace, default `ssh`), `$TETHER_REMOTE_TETHER` the remote `tether` (default `tether`
/// on the remote PATH). ssh's own messages (a password prompt, "Connection refused") go to
/// this process's stderr.
pub fn open(remote: &Remote) -> Result<Pipe, RemoteError> {
    let ssh = std::env::var("TETHER_SSH").unwrap_or_else(|_| "ssh".into());
    let mut words = ssh.split_whitespace();
    let program = words.next().unwrap_or("ssh").to_owned();
    let tether = std::env::var("TETHER_REMOTE_TETHER").unwrap_or_else(|_| "tether".into());
    let mut child = Command::new(&program)
        .args(words)
        // No pseudo-terminal (the pipe carries bytes), a quick verdict on a dead host, and
        // a dropped network noticed within a minute.
        .args([
            "-T",
            "-o",
            "ConnectTimeout=10",
            "-o",
            "ServerAliveInterval=15",
        ])
        .args(["-o", "ServerAliveCountMax=3", "--"])
        .arg(&remote.destination)
        .arg(format!("{tether} bridge"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| RemoteError::Spawn {
            program: program.clone(),
            reason: e.to_string(),
        })?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(RemoteError::Spawn {
            program,
            reason: "no pipes".into(),
        });
    };
    Ok(Pipe {
        stream: tokio::io::join(stdout, stdin),
        ssh: child,
    })
}

/// What a pipe's ssh said about a failed handshake: its exit status, once it has exited.
pub async fn ssh_verdict(ssh: &mut Child) -> String {
    match tokio::time::timeout(std::time::Duration::from_secs(2), ssh.wait()).await {
        Ok(Ok(status)) if status.code() == Some(255) => {
            "ssh could not connect (its message is above)".into()
        }
        Ok(Ok(status)) => format!(
            "`tether bridge` on the remote host ended ({status}); is tether installed there? (set TETHER_REMOTE_TETHER to its path)"
        ),
        _ => "the remote end did not answer".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_and_directories_are_read_like_scp() {
        let r = |s: &str| Remote::parse(s).expect("a valid spec");
        assert_eq!(r("box").destination, "box");
        assert_eq!(r("box").dir, None);
        assert_eq!(r("me@box:/srv/app").destination, "me@box");
        assert_eq!(r("me@box:/srv/app").dir.as_deref(), Some("/srv/app"));
        assert_eq!(r("me@[::1]:/w").destination, "me@::1");
        assert_eq!(r("[::1]:/w").dir.as_deref(), Some("/w"));
        assert_eq!(r("box:").dir, None);
        assert!(Remote::parse("me@").is_err());
        assert!(Remote::parse(":/w").is_err());
    }
}
