//! `--remote`: clients on one machine, the daemon on "another", through a real sshd on a
//! loopback port (`tests/run` installs OpenSSH) with a key made for the test. The local
//! `TETHER_SOCKET` points where no daemon is, so only the ssh path can work.

use super::acp::Editor;
use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake, bin};

/// An sshd for this test only, letting this user in with a fresh key.
pub(super) struct Sshd {
    child: Child,
    pub(super) port: u16,
    pub(super) dir: PathBuf,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn keygen(path: &Path) -> anyhow::Result<()> {
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .status()
        .context("ssh-keygen (tests/run installs openssh-client)")?;
    anyhow::ensure!(status.success(), "ssh-keygen failed");
    Ok(())
}

impl Sshd {
    /// Starts sshd, and writes the `tether` the remote side runs: the real one with the
    /// daemon's environment (what a login shell on the remote machine would have).
    pub(super) fn start(daemon: &Daemon, fake: &Fake) -> anyhow::Result<Self> {
        let dir = daemon.dir.path().join("ssh");
        std::fs::create_dir_all(&dir)?;
        keygen(&dir.join("host_key"))?;
        keygen(&dir.join("client_key"))?;
        std::fs::copy(dir.join("client_key.pub"), dir.join("authorized_keys"))?;
        let port = free_port()?;
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\n\
             AuthorizedKeysFile {d}/authorized_keys\nPidFile {d}/sshd.pid\nStrictModes no\n\
             UsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             PermitRootLogin prohibit-password\nPrintMotd no\n",
            d = dir.display()
        );
        std::fs::write(dir.join("sshd_config"), config)?;
        let mut env = format!(
            "export TETHER_SOCKET='{}' TETHER_HOME='{}' TETHER_CONFIG='{}'\n",
            daemon.socket().display(),
            daemon.data_dir().display(),
            daemon.config_path().display()
        );
        for (k, v) in fake.env() {
            env.push_str(&format!("export {k}='{v}'\n"));
        }
        let wrapper = dir.join("remote-tether");
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\n{env}exec '{}' \"$@\"\n",
                bin("tether").display()
            ),
        )?;
        std::fs::set_permissions(
            &wrapper,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )?;
        // sshd wants its privilege separation directory, which only a running service makes.
        if nix::unistd::getuid().is_root() {
            std::fs::create_dir_all("/run/sshd")?;
        }
        let child = Command::new("/usr/sbin/sshd")
            .args(["-D", "-e", "-f"])
            .arg(dir.join("sshd_config"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("sshd.log"))?)
            .spawn()
            .context("/usr/sbin/sshd (tests/run installs openssh-server)")?;
        let sshd = Self { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                bail!(
                    "sshd did not start: {}",
                    std::fs::read_to_string(sshd.dir.join("sshd.log")).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(sshd)
    }

    /// `user@127.0.0.1:DIR`.
    fn remote(&self, dir: &Path) -> anyhow::Result<String> {
        let user = nix::unistd::User::from_uid(nix::unistd::getuid())?
            .context("this user's name")?
            .name;
        Ok(format!("{user}@127.0.0.1:{}", dir.display()))
    }

    pub(super) fn wrapper(&self) -> PathBuf {
        self.dir.join("remote-tether")
    }

    /// A key of its own for `who`, let in only to run `tether ARGS` (a forced command in
    /// `authorized_keys`, as the README's "Sharing a session" writes it); returns the key.
    pub(super) fn forced_key(&self, who: &str, args: &str) -> anyhow::Result<PathBuf> {
        let key = self.dir.join(format!("{who}_key"));
        keygen(&key)?;
        let public = std::fs::read_to_string(key.with_extension("pub"))?;
        let line = format!(
            "command=\"{} {args}\",no-port-forwarding,no-X11-forwarding,no-agent-forwarding,no-pty {}",
            self.wrapper().display(),
            public.trim()
        );
        let mut keys = std::fs::read_to_string(self.dir.join("authorized_keys"))?;
        keys.push_str(&line);
        keys.push('\n');
        std::fs::write(self.dir.join("authorized_keys"), keys)?;
        Ok(key)
    }

    /// ssh in with `key` (whatever command the client asks for, the key's forced one runs),
    /// its stdin and stdout piped.
    pub(super) fn connect_with(&self, key: &Path) -> anyhow::Result<Child> {
        let user = nix::unistd::User::from_uid(nix::unistd::getuid())?
            .context("this user's name")?
            .name;
        Command::new("ssh")
            .args(["-F", "/dev/null", "-p", &self.port.to_string(), "-i"])
            .arg(key)
            .args([
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                "BatchMode=yes",
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                "UserKnownHostsFile=/dev/null",
                "-o",
                "LogLevel=ERROR",
                "-T",
            ])
            .arg(format!("{user}@127.0.0.1"))
            .arg("anything")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("ssh (tests/run installs openssh-client)")
    }

    /// The client side's environment: ssh with the test's key and port, and no local daemon.
    fn client_env(&self, port: u16) -> Vec<(&'static str, String)> {
        vec![
            (
                "TETHER_SSH",
                format!(
                    "ssh -F /dev/null -p {port} -i {} -o IdentitiesOnly=yes -o BatchMode=yes \
                     -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR",
                    self.dir.join("client_key").display()
                ),
            ),
            ("TETHER_REMOTE_TETHER", self.wrapper().display().to_string()),
            (
                "TETHER_SOCKET",
                self.dir.join("no-daemon-here/sock").display().to_string(),
            ),
        ]
    }
}

#[test]
fn headless_runs_through_ssh_in_the_remote_directory() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("Answered over ssh.")]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let sshd = Sshd::start(&daemon, &fake)?;
    let remote_dir = daemon.dir.path().join("remote-project");
    std::fs::create_dir_all(&remote_dir)?;
    let out = Command::new(bin("tether"))
        .args(["--remote", &sshd.remote(&remote_dir)?, "-p", "hello there"])
        .args(["--output-format", "json"])
        .envs(sshd.client_env(sshd.port))
        .current_dir(daemon.workdir())
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(result["result"], "Answered over ssh.", "{result}");
    // The session is the remote daemon's, in the directory given with --remote.
    let list = daemon.ndjson()?.call("session/list", json!({}))?;
    assert_eq!(
        list["sessions"][0]["cwd"],
        remote_dir.display().to_string(),
        "{list}"
    );
    assert!(
        !sshd.dir.join("no-daemon-here").exists(),
        "a local daemon was started"
    );
    Ok(())
}

#[test]
fn a_killed_ssh_mid_turn_is_reconnected_and_the_editor_loses_nothing() -> anyhow::Result<()> {
    let reply = "This answer streams slowly, so the ssh connection dies in the middle of it.";
    let slow = Step {
        chunk_delay_ms: Some(60),
        ..Step::text(reply)
    };
    let fake = Fake::start(Script::of([slow]).titling("Remote"))?;
    let daemon = Daemon::start_with(fake.env())?;
    let sshd = Sshd::start(&daemon, &fake)?;
    let remote = sshd.remote(&daemon.workdir())?;
    let env = sshd.client_env(sshd.port);
    let mut editor = Editor::start_with(&daemon, &fake, &["--remote", &remote, "acp"], &env)?;
    let session = editor.new_session(&daemon.workdir())?;
    editor.prompt(&session, "go slowly", "p1")?;
    editor.until("the first chunk", |v| {
        v["update"]["sessionUpdate"] == "agent_message_chunk"
    })?;
    let killed = Command::new("pkill")
        .args(["-9", "-f", "--"])
        .arg(format!("{} bridge", sshd.wrapper().display()))
        .status()?;
    assert!(killed.success(), "no ssh process to kill");
    let done = editor.prompt_done("p1")?;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    // Every piece exactly once: the reconnect resumed after the last event seen.
    assert_eq!(editor.agent_text(), reply);
    editor.checked_trace()?;
    Ok(())
}

#[test]
fn an_unreachable_host_fails_in_seconds_with_sshs_message() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let sshd = Sshd::start(&daemon, &fake)?;
    let closed = free_port()?;
    let started = Instant::now();
    let out = Command::new(bin("tether"))
        .args(["--remote", &sshd.remote(&daemon.workdir())?, "sessions"])
        .envs(sshd.client_env(closed))
        .output()?;
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("Connection refused"), "{stderr}");
    assert!(stderr.contains("ssh could not connect"), "{stderr}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    Ok(())
}
