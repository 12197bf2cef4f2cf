//! The systemd user units and socket activation.

use serde_json::json;
use std::process::{Command, Stdio};
use tether_tests::{Ndjson, bin};

#[test]
fn installed_units_pass_systemd_analyze_verify() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("config");
    let out = Command::new(bin("tether"))
        .args(["daemon", "install"])
        .env("XDG_CONFIG_HOME", &config)
        .output()?;
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout)?;
    assert!(
        stdout.contains("systemctl --user enable --now tetherd.socket")
            && stdout.contains("loginctl enable-linger")
    );
    let units = config.join("systemd/user");
    // %h/.cargo/bin/tetherd must exist for verify: point a home at the built binary.
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".cargo/bin"))?;
    std::os::unix::fs::symlink(bin("tetherd"), home.join(".cargo/bin/tetherd"))?;
    let runtime = dir.path().join("run");
    std::fs::create_dir_all(&runtime)?;
    let verify = Command::new("systemd-analyze")
        .args(["verify", "--user"])
        .arg(units.join("tetherd.socket"))
        .arg(units.join("tetherd.service"))
        .env("HOME", &home)
        .env("XDG_RUNTIME_DIR", &runtime)
        .output()
        .map_err(|e| {
            anyhow::anyhow!("systemd-analyze is required (tests/run installs systemd): {e}")
        })?;
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stderr)
    );
    assert!(
        verify.stderr.is_empty(),
        "no warnings: {}",
        String::from_utf8_lossy(&verify.stderr)
    );
    Ok(())
}

#[test]
fn the_daemon_serves_on_a_socket_systemd_passes() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("activated.sock");
    let mut activator = Command::new("systemd-socket-activate")
        .arg("-l")
        .arg(&socket)
        .arg(bin("tetherd"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env("TETHER_LOG", "warn")
        .env("HOME", dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            anyhow::anyhow!("systemd-socket-activate is required (tests/run installs systemd): {e}")
        })?;
    // The activator binds, then listens, then forks: the socket file can exist a moment before
    // it accepts, so connect until it does.
    let deadline = std::time::Instant::now() + tether_tests::WAIT;
    let mut c = loop {
        match Ndjson::connect(&socket) {
            Ok(c) => break c,
            Err(e) => anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "systemd-socket-activate did not listen: {e}"
            ),
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let status = c.call("daemon/status", json!({}))?;
    assert_eq!(status["socket"], socket.display().to_string());
    let session = c.call("session/new", json!({"cwd": dir.path()}))?;
    assert!(session["sessionId"].is_string());
    c.call("daemon/shutdown", json!({}))?;
    let code = activator.wait()?;
    assert!(code.success(), "{code}");
    assert!(
        socket.exists(),
        "an inherited socket belongs to systemd and is not removed"
    );
    Ok(())
}
