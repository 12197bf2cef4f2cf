//! Local security end to end, with real second and third Unix users (`tether-other`, the
//! attacker, and `tether-victim`, created by `tests/run`): private data and logs, a squatted
//! `/tmp/tether-$UID`, a socket another user serves, and the daemon's own refusals.
//!
//! Switching users needs root; run as anyone else, these tests say so and pass without asserting.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use tether_proto::private::first_open_entry;
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake, WAIT, bin};

const ATTACKER: &str = "tether-other";
const VICTIM: &str = "tether-victim";

/// `(uid, gid)` of a test user; `None` (with a line on stderr) when the tests cannot switch users.
pub(super) fn user(name: &str) -> Option<(u32, u32)> {
    if !nix::unistd::getuid().is_root() {
        eprintln!("skipped: switching to {name} needs root");
        return None;
    }
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, name]).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    match (id("-u"), id("-g")) {
        (Some(u), Some(g)) => Some((u, g)),
        _ => panic!("no user {name}: tests/run creates it (useradd as root)"),
    }
}

/// A command run as `name`, keeping our environment (runs nothing until asked).
pub(super) fn as_user(name: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let (uid, gid) = user(name).expect("checked by the caller");
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg("--clear-groups")
        .arg("--")
        .arg(program);
    cmd
}

fn chmod(path: &Path, mode: u32) -> anyhow::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn another_user_cannot_read_sessions_or_logs_even_under_umask_0() -> anyhow::Result<()> {
    if user(ATTACKER).is_none() {
        return Ok(());
    }
    let fake = Fake::start(Script::of([Step::text("the launch code is 0000")]))?;
    let mut daemon = Daemon::prepare(fake.env())?;
    daemon.umask = Some(0o000);
    daemon.spawn()?;
    let out = daemon.run_tether(&["-p", "what is the launch code?"])?;
    assert!(out.status.success(), "{out:?}");
    daemon.terminate()?;
    // A home directory others may traverse, as many are.
    chmod(daemon.dir.path(), 0o755)?;
    let data = daemon.data_dir();
    assert_eq!(
        first_open_entry(&data),
        None,
        "everything in {data:?} is private"
    );
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("db/db")), 0o600);
    let logs: Vec<_> = std::fs::read_dir(data.join("logs"))?.flatten().collect();
    assert!(!logs.is_empty(), "the daemon keeps a log file");
    for log in &logs {
        assert_eq!(mode(&log.path()), 0o600, "{:?}", log.path());
    }

    // An install from before: everything readable. The next start tightens it and says so.
    let loosen = Command::new("chmod")
        .args(["-R", "go+rX"])
        .arg(&data)
        .status()?;
    assert!(loosen.success());
    assert_eq!(mode(&data.join("db/db")), 0o644);
    daemon.spawn()?;
    assert_eq!(first_open_entry(&data), None, "tightened at start");
    let log = daemon.log();
    assert!(log.contains("open to other users"), "{log}");
    daemon.terminate()?;

    for target in [data.join("db/db"), logs[0].path()] {
        let out = as_user(ATTACKER, "cat").arg(&target).output()?;
        assert!(!out.status.success(), "{target:?} was readable");
        assert!(
            stderr(&out).contains("Permission denied"),
            "{}",
            stderr(&out)
        );
    }
    let out = as_user(ATTACKER, "ls").arg(&data).output()?;
    assert!(!out.status.success(), "the data directory was listable");
    // Control: the same user reads a file the test leaves open, so the refusals above are ours.
    let open = daemon.dir.path().join("open.txt");
    std::fs::write(&open, "readable")?;
    chmod(&open, 0o644)?;
    let out = as_user(ATTACKER, "cat").arg(&open).output()?;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "readable", "{out:?}");
    Ok(())
}

/// The victim's own scratch space: a temporary directory the victim owns.
fn victim_dir(uid: u32, gid: u32) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new().prefix("tether-victim").tempdir()?;
    std::fs::create_dir_all(dir.path().join("home"))?;
    let status = Command::new("chown")
        .arg("-R")
        .arg(format!("{uid}:{gid}"))
        .arg(dir.path())
        .status()?;
    assert!(status.success());
    Ok(dir)
}

/// A command run as the victim with the environment that picks the `/tmp` fallback.
fn victim(program: &Path, home: &Path) -> Command {
    let mut cmd = as_user(VICTIM, program);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("NO_COLOR", "1")
        .env("TETHER_LOG", "warn");
    cmd
}

/// An attacker's listener on `socket` (mode 0777) appending whatever it receives to `capture`.
fn attacker_listener(socket: &Path, capture: &Path) -> anyhow::Result<std::process::Child> {
    let child = as_user(ATTACKER, "socat")
        .arg("-u")
        .arg(format!("UNIX-LISTEN:{},mode=777,fork", socket.display()))
        .arg(format!("OPEN:{},creat,append", capture.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let deadline = Instant::now() + WAIT;
    while !socket.exists() {
        anyhow::ensure!(Instant::now() < deadline, "socat did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(child)
}

/// Runs `client` while an attacker listens on `socket`; its output, and every byte the attacker
/// received.
fn while_attacker_listens(
    socket: &Path,
    capture: &Path,
    mut client: Command,
) -> anyhow::Result<(Output, Vec<u8>)> {
    let mut listener = attacker_listener(socket, capture)?;
    let out = client.output();
    // Give anything the client sent time to reach the capture file.
    std::thread::sleep(Duration::from_millis(200));
    let _ = listener.kill();
    let _ = listener.wait();
    Ok((out?, std::fs::read(capture).unwrap_or_default()))
}

struct Squat(std::path::PathBuf);

impl Drop for Squat {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_squatted_tmp_runtime_directory_is_refused_and_nothing_is_touched() -> anyhow::Result<()> {
    let (Some(_), Some((uid, gid))) = (user(ATTACKER), user(VICTIM)) else {
        return Ok(());
    };
    let squat = Squat(format!("/tmp/tether-{uid}").into());
    let _ = std::fs::remove_dir_all(&squat.0);
    let mine = victim_dir(uid, gid)?;
    let home = mine.path().join("home");
    let precious = home.join("notes.txt");
    std::fs::write(&precious, "the victim's notes\n")?;
    Command::new("chown")
        .arg(format!("{uid}:{gid}"))
        .arg(&precious)
        .status()?;
    let before = std::fs::metadata(&precious)?.modified()?;

    // The attacker gets there first: a world-writable directory and a planted lock symlink.
    let made = as_user(ATTACKER, "sh")
        .arg("-c")
        .arg(format!(
            "mkdir {dir} && chmod 777 {dir} && ln -s {target} {dir}/tetherd.sock.lock",
            dir = squat.0.display(),
            target = precious.display()
        ))
        .status()?;
    assert!(made.success());

    let out = victim(&bin("tetherd"), &home)
        .arg("--data-dir")
        .arg(mine.path().join("data"))
        .arg("--print-ready")
        .output()?;
    assert!(
        !out.status.success(),
        "tetherd served from the squatted directory"
    );
    let err = stderr(&out);
    assert!(
        err.contains(&squat.0.display().to_string())
            && err.contains("not to you")
            && err.contains("XDG_RUNTIME_DIR"),
        "names the directory, the reason and the fix: {err}"
    );
    assert_eq!(std::fs::read_to_string(&precious)?, "the victim's notes\n");
    assert_eq!(std::fs::metadata(&precious)?.modified()?, before);
    assert!(!squat.0.join("tetherd.sock").exists(), "nothing was bound");

    // The attacker now listens where the victim's client would look; the client must not talk.
    let capture = squat.0.join("captured");
    let mut client = victim(&bin("tether"), &home);
    client.args(["-p", "my secret prompt"]).current_dir(&home);
    let (out, captured) = while_attacker_listens(&squat.0.join("tetherd.sock"), &capture, client)?;
    assert!(!out.status.success(), "{out:?}");
    let err = stderr(&out);
    assert!(err.contains("not to you"), "{err}");
    let captured = String::from_utf8_lossy(&captured);
    assert!(
        !captured.contains("secret"),
        "the attacker read: {captured}"
    );
    assert_eq!(std::fs::read_to_string(&precious)?, "the victim's notes\n");
    Ok(())
}

#[test]
fn the_client_refuses_a_socket_another_user_serves() -> anyhow::Result<()> {
    if user(ATTACKER).is_none() {
        return Ok(());
    }
    // A shared sticky directory, as /tmp is: the rule lets a named socket live there.
    let dir = tempfile::tempdir()?;
    chmod(dir.path(), 0o755)?;
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared)?;
    chmod(&shared, 0o1777)?;
    let socket = shared.join("tetherd.sock");
    let capture = shared.join("captured");
    let mut client = Command::new(bin("tether"));
    client
        .env("TETHER_SOCKET", &socket)
        .env("TETHER_HOME", dir.path().join("data"))
        .env("NO_COLOR", "1")
        .args(["-p", "my secret prompt"]);
    let (out, captured) = while_attacker_listens(&socket, &capture, client)?;
    assert!(!out.status.success(), "{out:?}");
    let err = stderr(&out);
    let (other, _) = user(ATTACKER).expect("checked");
    assert!(
        err.contains(&format!("runs as uid {other}")) && err.contains("refusing"),
        "{err}"
    );
    assert!(captured.is_empty(), "sent before checking: {captured:?}");
    Ok(())
}

#[test]
fn another_user_is_refused_by_the_socket_mode_then_by_the_peer_check() -> anyhow::Result<()> {
    if user(ATTACKER).is_none() {
        return Ok(());
    }
    let daemon = Daemon::start()?;
    chmod(daemon.dir.path(), 0o755)?;
    chmod(&daemon.dir.path().join("run"), 0o755)?;
    let socket = daemon.socket();
    let ask = |socket: &Path| -> anyhow::Result<Output> {
        let mut child = as_user(ATTACKER, "socat")
            .args(["-t", "2", "-"])
            .arg(format!("UNIX-CONNECT:{}", socket.display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon/status\"}\n")?;
        }
        Ok(child.wait_with_output()?)
    };

    let out = ask(&socket)?;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("Permission denied"),
        "{}",
        stderr(&out)
    );

    chmod(&socket, 0o666)?;
    let out = ask(&socket)?;
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("result"),
        "another user got an answer: {out:?}"
    );
    let deadline = Instant::now() + WAIT;
    while !daemon
        .log()
        .contains("closed a connection from another user")
    {
        anyhow::ensure!(Instant::now() < deadline, "not logged: {}", daemon.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    // Control: the owner is answered on the same socket.
    let mut mine = daemon.ndjson()?;
    let status = mine.call("daemon/status", serde_json::json!({}))?;
    assert!(status["daemon"]["pid"].is_number(), "{status}");
    Ok(())
}
