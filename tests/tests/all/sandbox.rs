//! The Bash sandbox (bubblewrap) end to end: with `sandbox.enabled` in the user's settings a
//! command cannot write outside the project, read the user's keys or reach a local listener,
//! and runs without asking; a call that leaves the sandbox is asked about; a bubblewrap that
//! cannot start refuses the call and says why (`/sandbox`, `doctor`); `network.allowedDomains`
//! reaches the listed hosts through the daemon's proxy and nothing else. And the daemon's
//! credentials stay out of Bash and hooks.

use anyhow::Context;
use serde_json::{Value, json};
use std::io::{Read as _, Write as _};
use std::path::Path;
use std::sync::{Arc, Mutex};
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake, Ndjson};

/// One Bash call per step, then a closing text.
fn bash_calls(commands: &[Value]) -> Script {
    let mut steps: Vec<Step> = commands
        .iter()
        .map(|input| Step::default().tool_use("Bash", input.clone()))
        .collect();
    steps.push(Step::text("done"));
    Script::of(steps)
}

/// A daemon whose user (its HOME outside `/tmp`, whose sandbox view is a fresh tmpfs) has
/// `settings` and an SSH key.
struct Setup {
    daemon: Daemon,
    home: tempfile::TempDir,
}

fn setup(fake: &Fake, settings: Value, extra_env: &[(&str, &str)]) -> anyhow::Result<Setup> {
    let home = tempfile::Builder::new()
        .prefix("tether-sandbox-home")
        .tempdir_in("/var/tmp")?;
    std::fs::create_dir_all(home.path().join(".claude"))?;
    std::fs::create_dir_all(home.path().join(".ssh"))?;
    std::fs::write(
        home.path().join(".claude/settings.json"),
        settings.to_string(),
    )?;
    std::fs::write(
        home.path().join(".ssh/id_rsa"),
        "-----BEGIN FAKE KEY-----\nsecret-key-material\n",
    )?;
    let mut env = fake.env();
    env.push(("HOME".into(), home.path().display().to_string()));
    env.extend(extra_env.iter().map(|(k, v)| ((*k).into(), (*v).into())));
    let mut daemon = Daemon::prepare(env)?;
    daemon.spawn()?;
    Ok(Setup { daemon, home })
}

fn results(events: &[Value]) -> Vec<(bool, String)> {
    events
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .map(|e| {
            let content = &e["data"]["content"];
            (
                e["data"]["isError"] == true,
                content
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| content.to_string()),
            )
        })
        .collect()
}

fn session(c: &mut Ndjson, daemon: &Daemon, mode: &str) -> anyhow::Result<String> {
    let s = c.new_session_with_mode(&daemon.workdir(), mode)?;
    c.watch(&s)?;
    Ok(s)
}

/// Records `work` as trusted (or not) in the `~/.claude.json` of `home`.
fn set_trust(home: &Path, work: &Path, trusted: bool) -> anyhow::Result<()> {
    let key = work.canonicalize()?.display().to_string();
    let state = json!({"projects": {key: {"hasTrustDialogAccepted": trusted}}});
    std::fs::write(home.join(".claude.json"), state.to_string())?;
    Ok(())
}

/// What the `~/.claude.json` of `home` says of `work`'s trust.
fn trust_of(home: &Path, work: &Path) -> anyhow::Result<Value> {
    let state: Value = serde_json::from_str(&std::fs::read_to_string(home.join(".claude.json"))?)?;
    let key = work.canonicalize()?.display().to_string();
    Ok(state["projects"][key.as_str()]["hasTrustDialogAccepted"].clone())
}

/// A command that tries to open a TCP connection to `port` on the loopback.
fn connect_command(port: u16) -> String {
    let has_curl = std::process::Command::new("sh")
        .args(["-c", "command -v curl"])
        .output()
        .is_ok_and(|o| o.status.success());
    if has_curl {
        format!("curl -sS --max-time 20 http://127.0.0.1:{port}/ && echo CONNECTED")
    } else {
        format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED")
    }
}

#[test]
fn sandboxed_bash_writes_only_in_the_project_and_reaches_no_secret_and_no_network()
-> anyhow::Result<()> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let fake = Fake::start(bash_calls(&[
        json!({"command": "touch ~/x"}),
        json!({"command": "cat ~/.ssh/id_rsa"}),
        json!({"command": connect_command(port)}),
        json!({"command": "echo made-inside > inside.txt && cat inside.txt"}),
        json!({"command": "echo later > later.txt", "run_in_background": true}),
    ]))?;
    let Setup { daemon, home } = setup(&fake, json!({"sandbox": {"enabled": true}}), &[])?;
    let mut c = daemon.ndjson()?;
    // The default mode: every call above runs unasked because the sandbox holds it.
    let s = session(&mut c, &daemon, "default")?;
    c.start_turn(&s, "probe the sandbox")?;
    let events = c.events_until("turn_ended")?;
    assert!(
        events.iter().all(|e| e["type"] != "permission_requested"),
        "a sandboxed call was asked about: {events:?}"
    );
    let r = results(&events);
    assert_eq!(r.len(), 5, "{events:?}");
    assert!(r[0].0 && r[0].1.contains("Read-only file system"), "{r:?}");
    assert!(!home.path().join("x").exists(), "touch ~/x wrote the home");
    assert!(r[1].0 && !r[1].1.contains("secret-key-material"), "{r:?}");
    assert!(r[2].0 && !r[2].1.contains("CONNECTED"), "{r:?}");
    listener.set_nonblocking(true)?;
    assert!(
        listener.accept().is_err(),
        "the local listener saw a connection"
    );
    assert_eq!(r[3], (false, "made-inside\n".to_owned()), "{r:?}");
    assert_eq!(
        std::fs::read_to_string(daemon.workdir().join("inside.txt"))?,
        "made-inside\n"
    );
    // The background shell ran sandboxed too, and could write inside.
    let later = daemon.workdir().join("later.txt");
    for _ in 0..600 {
        if later.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(std::fs::read_to_string(&later)?, "later\n");
    Ok(())
}

/// A local HTTP server that answers every request with `body` and records its request lines.
fn http_listener(body: &'static str) -> anyhow::Result<(u16, Arc<Mutex<Vec<String>>>)> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(20)));
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && head.len() < 65536 {
                match stream.read(&mut byte) {
                    Ok(1) => head.push(byte[0]),
                    _ => break,
                }
            }
            let line = String::from_utf8_lossy(&head)
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned();
            record.lock().unwrap_or_else(|p| p.into_inner()).push(line);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    Ok((port, seen))
}

#[test]
fn allowed_domains_are_reached_through_the_proxy_and_other_hosts_are_refused() -> anyhow::Result<()>
{
    let has_curl = std::process::Command::new("sh")
        .args(["-c", "command -v curl"])
        .output()
        .is_ok_and(|o| o.status.success());
    anyhow::ensure!(has_curl, "this test needs curl (tests/run installs it)");
    let (port, seen) = http_listener("hello-through-the-proxy")?;
    let fake = Fake::start(bash_calls(&[
        json!({"command": format!("curl -sS --max-time 20 http://localhost:{port}/allowed")}),
        json!({"command": format!("curl -sS --max-time 20 -w '\nstatus %{{http_code}}\n' http://127.0.0.1:{port}/refused")}),
        json!({"command": "echo \"$https_proxy|$NO_PROXY\""}),
    ]))?;
    let settings =
        json!({"sandbox": {"enabled": true, "network": {"allowedDomains": ["localhost"]}}});
    let Setup {
        daemon,
        home: _home,
    } = setup(&fake, settings, &[])?;
    let mut c = daemon.ndjson()?;
    let s = session(&mut c, &daemon, "default")?;
    c.start_turn(&s, "reach the listener")?;
    let events = c.events_until("turn_ended")?;
    let r = results(&events);
    assert_eq!(r.len(), 3, "{events:?}");
    assert_eq!(r[0], (false, "hello-through-the-proxy".to_owned()), "{r:?}");
    assert!(
        r[1].1.contains("status 403") && r[1].1.contains("not in sandbox.network.allowedDomains"),
        "{r:?}"
    );
    assert!(r[2].1.starts_with("http://127.0.0.1:"), "{r:?}");
    // The refused request never reached the listener (the allowed one has been answered).
    let seen = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(seen, ["GET /allowed HTTP/1.1"], "{seen:?}");
    // And /sandbox says so.
    c.start_turn(&s, "/sandbox")?;
    let said: String = c
        .events_until("turn_ended")?
        .iter()
        .filter(|e| e["type"] == "notice")
        .filter_map(|e| e["data"]["message"].as_str())
        .collect();
    assert!(said.contains("network: only localhost"), "{said}");
    Ok(())
}

#[test]
fn leaving_the_sandbox_is_asked_about() -> anyhow::Result<()> {
    let fake = Fake::start(bash_calls(&[
        json!({"command": "touch outside-marker", "dangerouslyDisableSandbox": true}),
    ]))?;
    let Setup {
        daemon,
        home: _home,
    } = setup(&fake, json!({"sandbox": {"enabled": true}}), &[])?;
    let mut c = daemon.ndjson()?;
    let s = session(&mut c, &daemon, "default")?;
    c.start_turn(&s, "leave")?;
    let asked = c.events_until("permission_requested")?;
    let request = asked.last().context("the request")?["data"].clone();
    assert_eq!(request["input"]["dangerouslyDisableSandbox"], true);
    c.call(
        "permission/respond",
        json!({"sessionId": s, "requestId": request["requestId"], "decision": "deny"}),
    )?;
    c.events_until("turn_ended")?;
    assert!(!daemon.workdir().join("outside-marker").exists());
    Ok(())
}

#[test]
fn a_sandbox_that_cannot_start_refuses_the_call_and_says_why() -> anyhow::Result<()> {
    let fake = Fake::start(bash_calls(&[json!({"command": "touch ran-unsandboxed"})]))?;
    let Setup {
        daemon,
        home: _home,
    } = setup(
        &fake,
        json!({"sandbox": {"enabled": true}}),
        &[("TETHER_BWRAP", "/nonexistent/bwrap")],
    )?;
    let mut c = daemon.ndjson()?;
    let s = session(&mut c, &daemon, "bypassPermissions")?;
    c.start_turn(&s, "run it")?;
    let events = c.events_until("turn_ended")?;
    let r = results(&events);
    assert_eq!(r.len(), 1, "{events:?}");
    assert!(
        r[0].0 && r[0].1.contains("bubblewrap is not installed") && r[0].1.contains("not run"),
        "{r:?}"
    );
    assert!(!daemon.workdir().join("ran-unsandboxed").exists());
    // `/sandbox` says so.
    c.start_turn(&s, "/sandbox")?;
    let events = c.events_until("turn_ended")?;
    let said: String = events
        .iter()
        .filter(|e| e["type"] == "notice")
        .filter_map(|e| e["data"]["message"].as_str())
        .collect();
    assert!(
        said.contains("enabled but unavailable") && said.contains("/nonexistent/bwrap"),
        "{events:?}"
    );
    // And so does doctor.
    let (checks, _) = daemon.doctor()?;
    let (status, detail) = checks.get("sandbox").context("a sandbox check")?;
    assert_eq!(status, "warn", "{detail}");
    assert!(detail.contains("not installed"), "{detail}");
    Ok(())
}

#[test]
fn sandbox_reports_what_is_writable_and_the_network_rule() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("unused")]))?;
    let Setup {
        daemon,
        home: _home,
    } = setup(&fake, json!({"sandbox": {"enabled": true}}), &[])?;
    let mut c = daemon.ndjson()?;
    let s = session(&mut c, &daemon, "default")?;
    c.start_turn(&s, "/sandbox")?;
    let events = c.events_until("turn_ended")?;
    let said: String = events
        .iter()
        .filter(|e| e["type"] == "notice")
        .filter_map(|e| e["data"]["message"].as_str())
        .collect();
    let work = daemon.workdir().display().to_string();
    assert!(
        said.contains("sandbox: on") && said.contains(&work) && said.contains("network: none"),
        "{said}"
    );
    Ok(())
}

/// Reads `path` once it exists (a hook writes it after the call's result).
fn wait_for(path: &Path) -> anyhow::Result<String> {
    for _ in 0..600 {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return Ok(text);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    anyhow::bail!("{} never appeared", path.display())
}

#[test]
fn the_daemons_credentials_reach_neither_bash_nor_hooks() -> anyhow::Result<()> {
    let fake = Fake::start(bash_calls(&[json!({
        "command": "echo \"key=[$ANTHROPIC_API_KEY] aws=[$AWS_SECRET_ACCESS_KEY] mine=[$AWS_SESSION_TOKEN]\""
    })]))?;
    // Hooks run in the session's directory.
    let settings = json!({
        "env": {"AWS_SESSION_TOKEN": "set-in-settings"},
        "hooks": {"PostToolUse": [{"matcher": "Bash", "hooks": [{"type": "command",
            "command": "echo \"hook=[$ANTHROPIC_API_KEY]\" > hook-saw"}]}]}
    });
    let Setup {
        daemon,
        home: _home,
    } = setup(
        &fake,
        settings,
        &[("AWS_SECRET_ACCESS_KEY", "aws-secret-of-the-daemon")],
    )?;
    let mut c = daemon.ndjson()?;
    let s = session(&mut c, &daemon, "bypassPermissions")?;
    c.start_turn(&s, "print the key")?;
    let events = c.events_until("turn_ended")?;
    let r = results(&events);
    assert_eq!(
        r,
        [(false, "key=[] aws=[] mine=[set-in-settings]\n".to_owned())],
        "{events:?}"
    );
    assert_eq!(wait_for(&daemon.workdir().join("hook-saw"))?, "hook=[]\n");
    // The daemon itself still authenticates with the key.
    let sent = fake.server.message_requests();
    assert_eq!(
        sent[0].headers.get("x-api-key").map(String::as_str),
        Some("sk-ant-test")
    );
    Ok(())
}

#[test]
fn what_a_read_deny_rule_names_is_hidden_from_sandboxed_bash() -> anyhow::Result<()> {
    // A program reads the file itself: no argument names it, so only the sandbox can stop it.
    let fake = Fake::start(bash_calls(&[
        json!({"command": "python3 -c \"print(open('.env').read())\""}),
        json!({"command": "python3 -c \"import os; print(os.listdir('secrets'))\""}),
        json!({"command": "python3 -c \"print(open('README').read())\""}),
    ]))?;
    let Setup {
        daemon,
        home: _home,
    } = setup(&fake, json!({"sandbox": {"enabled": true}}), &[])?;
    let work = daemon.workdir();
    std::fs::create_dir_all(work.join(".claude"))?;
    std::fs::write(
        work.join(".claude/settings.json"),
        json!({"permissions": {"deny": ["Read(./.env)", "Read(./secrets/**)"]}}).to_string(),
    )?;
    std::fs::write(work.join(".env"), "API_TOKEN=hunter2\n")?;
    std::fs::create_dir_all(work.join("secrets"))?;
    std::fs::write(work.join("secrets/prod.key"), "x")?;
    std::fs::write(work.join("README"), "readable\n")?;
    let mut c = daemon.ndjson()?;
    let s = session(&mut c, &daemon, "default")?;
    c.start_turn(&s, "read around")?;
    let events = c.events_until("turn_ended")?;
    let r = results(&events);
    assert_eq!(r.len(), 3, "{events:?}");
    assert!(!r[0].1.contains("hunter2"), "{r:?}");
    assert!(!r[1].1.contains("prod.key"), "{r:?}");
    assert!(
        r[2].1.contains("readable"),
        "other files read as usual: {r:?}"
    );
    Ok(())
}

#[test]
fn a_sandboxed_command_cannot_change_what_runs_outside_it() -> anyhow::Result<()> {
    let fake = Fake::start(bash_calls(&[
        json!({"command": "echo '{\"sandbox\": {\"enabled\": false}}' > .claude/settings.local.json"}),
        json!({"command": "echo 'touch pwned' > .git/hooks/post-checkout"}),
        json!({"command": "echo '{\"mcpServers\": {}}' > .mcp.json"}),
        json!({"command": "git status --short", "dangerouslyDisableSandbox": true}),
    ]))?;
    let Setup {
        daemon,
        home: _home,
    } = setup(&fake, json!({"sandbox": {"enabled": true}}), &[])?;
    let work = daemon.workdir();
    std::fs::create_dir_all(work.join(".claude"))?;
    std::fs::create_dir_all(work.join(".git/hooks"))?;
    // The folder is the user's own and trusted, as a real project would be.
    set_trust(_home.path(), &work, true)?;
    let mut c = daemon.ndjson()?;
    let s = session(&mut c, &daemon, "bypassPermissions")?;
    c.start_turn(&s, "try")?;
    // Leaving the sandbox is asked about even in bypassPermissions.
    let asked = c.events_until("permission_requested")?;
    let request = asked.last().context("request")?;
    assert_eq!(request["data"]["tool"], "Bash", "{request}");
    let id = request["data"]["requestId"]
        .as_str()
        .context("id")?
        .to_owned();
    c.call(
        "permission/respond",
        json!({"sessionId": s, "requestId": id, "decision": "deny"}),
    )?;
    let events = c.events_until("turn_ended")?;
    let r = results(&asked.iter().chain(&events).cloned().collect::<Vec<_>>());
    assert_eq!(r.len(), 4, "{r:?}");
    assert!(r[0].0 && r[0].1.contains("Read-only file system"), "{r:?}");
    assert!(!work.join(".claude/settings.local.json").exists());
    assert!(r[1].0 && r[1].1.contains("Read-only file system"), "{r:?}");
    assert!(!work.join(".git/hooks/post-checkout").exists());
    // Created where nothing stood: the folder is no longer trusted, and the result says so.
    assert!(r[2].1.contains("no longer trusted"), "{r:?}");
    assert_eq!(trust_of(_home.path(), &work)?, json!(false));
    Ok(())
}

#[test]
fn a_sandboxed_background_command_that_creates_what_acts_outside_withdraws_trust()
-> anyhow::Result<()> {
    let fake = Fake::start(bash_calls(&[
        json!({"command": "sleep 0.2; echo 'source evil' > .envrc", "run_in_background": true}),
    ]))?;
    let Setup { daemon, home } = setup(&fake, json!({"sandbox": {"enabled": true}}), &[])?;
    let work = daemon.workdir();
    set_trust(home.path(), &work, true)?;
    let mut c = daemon.ndjson()?;
    let s = session(&mut c, &daemon, "default")?;
    c.start_turn(&s, "in the background")?;
    c.events_until("turn_ended")?;
    let trusted = || trust_of(home.path(), &work);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while trusted()? != json!(false) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(work.join(".envrc").exists(), "the job ran");
    assert_eq!(
        trusted()?,
        json!(false),
        "trust was withdrawn when the job ended"
    );
    Ok(())
}
