//! Operations end to end: configuration layers and errors, `tether config show`, `tether
//! doctor`, the rotating log file.

use anyhow::Context;
use serde_json::{Value, json};
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake};

fn entry<'a>(report: &'a Value, key: &str) -> &'a Value {
    report["entries"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["key"] == key))
        .unwrap_or(&Value::Null)
}

#[test]
fn a_bad_config_stops_the_daemon_with_the_file_line_and_key() -> anyhow::Result<()> {
    let mut daemon = Daemon::start()?;
    daemon.terminate()?;
    daemon.write_config("model = \"opus\"\n\n[api]\nmax_retries = \"lots\"\n")?;
    let out = daemon.command().output()?;
    assert_eq!(out.status.code(), Some(2), "refuses to start");
    let err = String::from_utf8_lossy(&out.stderr);
    let at = format!("{}:4", daemon.config_path().display());
    assert!(
        err.contains(&at) && err.contains("api.max_retries"),
        "names the file, line and key: {err}"
    );
    assert!(!daemon.socket().exists(), "nothing was served");

    daemon.write_config("model = \"opus\"\nidle_unlod = \"1h\"\n")?;
    let out = daemon.command().output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(":2") && err.contains("\"idle_unlod\""),
        "{err}"
    );

    std::fs::remove_file(daemon.config_path())?;
    let out = daemon
        .command()
        .env("TETHER_DELTA_RETENTION", "a while")
        .arg("--set")
        .arg("model=opus")
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err.contains("TETHER_DELTA_RETENTION") && err.contains("delta_retention"),
        "{err}"
    );
    Ok(())
}

#[test]
fn config_layers_reach_sessions_and_config_show_says_where_each_came_from() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("hi")]))?;
    let mut env = fake.env();
    env.push(("TETHER_IDLE_UNLOAD".into(), "2h".into()));
    let mut daemon = Daemon::start_with(env)?;
    daemon.terminate()?;
    daemon.write_config(
        "# tether\nmodel = \"opus\"\nidle_unload = \"1h\"\npermission_mode = \"plan\"\n\n[permissions]\nallow = [\"Bash(ls:*)\"]\n",
    )?;

    // Without a daemon, `config show` asks a local tetherd (same environment as the client's).
    let out = daemon
        .tether()
        .args(["config", "show", "--json"])
        .env("TETHER_IDLE_UNLOAD", "3h")
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let local: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(entry(&local, "idle_unload")["value"], "\"3h\"");
    assert_eq!(
        entry(&local, "idle_unload")["source"],
        "env TETHER_IDLE_UNLOAD"
    );

    daemon.spawn()?;
    let out = daemon
        .tether()
        .args(["config", "show", "--json"])
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout)?;
    let file = daemon.config_path().display().to_string();
    assert_eq!(entry(&report, "model")["value"], "\"opus\"");
    assert_eq!(entry(&report, "model")["source"], format!("{file}:2"));
    assert_eq!(
        entry(&report, "idle_unload")["value"],
        "\"2h\"",
        "env beats the file"
    );
    assert_eq!(
        entry(&report, "idle_unload")["source"],
        "env TETHER_IDLE_UNLOAD"
    );
    assert_eq!(entry(&report, "fast_model")["source"], "default");
    let text = daemon.tether().args(["config", "show"]).output()?;
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("model = \"opus\"") && text.contains(&format!("# {file}:2")),
        "{text}"
    );

    // New sessions get the configured model and mode.
    let mut c = daemon.ndjson()?;
    let id = c.call("session/new", json!({"cwd": daemon.workdir()}))?["sessionId"]
        .as_str()
        .context("id")?
        .to_owned();
    let got = c.call("session/get", json!({"sessionId": id}))?;
    assert_eq!(got["model"], "opus");
    assert_eq!(got["permissionMode"], "plan");
    Ok(())
}

#[test]
fn doctor_checks_the_daemon_and_the_api_without_showing_the_key() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([]))?;
    let mut env = fake.env();
    env.retain(|(k, _)| k != "ANTHROPIC_API_KEY");
    env.push(("ANTHROPIC_API_KEY".into(), "sk-doctor-secret".into()));
    let daemon = Daemon::start_with(env.clone())?;
    let out = daemon
        .tether()
        .args(["doctor", "--online", "--json"])
        .output()?;
    let checks: Vec<Value> = serde_json::from_slice(&out.stdout)
        .with_context(|| String::from_utf8_lossy(&out.stderr).into_owned())?;
    let status = |name: &str| {
        checks
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| {
                (
                    c["status"].clone(),
                    c["detail"].as_str().unwrap_or("").to_owned(),
                )
            })
            .unwrap_or_default()
    };
    for name in [
        "socket",
        "daemon",
        "config",
        "data directory",
        "credentials",
        "api",
    ] {
        assert_eq!(status(name).0, "ok", "{name}: {checks:?}");
    }
    assert!(status("credentials").1.contains("ANTHROPIC_API_KEY"));
    assert!(status("api").1.contains("200"), "{:?}", status("api"));
    assert!(out.status.success());
    let all = String::from_utf8_lossy(&out.stdout);
    assert!(
        !all.contains("sk-doctor-secret"),
        "the key's value never shows"
    );

    // The text form, with a daemon that has no credentials: a clear failure and exit 1.
    let mut bare = fake.env();
    bare.retain(|(k, _)| k != "ANTHROPIC_API_KEY");
    let nokey = Daemon::start_with(bare)?;
    let out = nokey.tether().args(["doctor"]).output()?;
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l.starts_with('✗')
            && l.contains("credentials")
            && l.contains("ANTHROPIC_API_KEY")),
        "{text}"
    );
    Ok(())
}

#[test]
fn a_daemon_not_under_systemd_writes_a_rotating_log_in_its_data_dir() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(vec![("TETHER_LOG".into(), "info".into())])?;
    let logs = daemon.data_dir().join("logs");
    let mut text = String::new();
    for _ in 0..100 {
        text = std::fs::read_dir(&logs)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("tetherd."))
            .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
            .collect();
        if text.contains("serving") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        text.contains("serving"),
        "the log file has the start-up: {text:?}"
    );
    Ok(())
}
