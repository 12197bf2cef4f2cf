//! The daemon spine: socket, both transports, the durable event log, subscriptions, the client.

use anyhow::Context;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use tether_tests::{Daemon, WAIT, seqs};

/// Makes `n` session_configured events on `session` (each reply means it is durable).
fn configure_n(
    client: &mut tether_tests::Ndjson,
    session: &str,
    from: usize,
    n: usize,
) -> anyhow::Result<()> {
    for i in from..from + n {
        client.call(
            "session/configure",
            json!({"sessionId": session, "title": format!("title {i}")}),
        )?;
    }
    Ok(())
}

fn by_seq(events: &[Value]) -> std::collections::BTreeMap<u64, Value> {
    events
        .iter()
        .filter_map(|e| e["seq"].as_u64().map(|s| (s, e.clone())))
        .collect()
}

#[test]
fn two_clients_see_the_same_log_and_a_reconnect_gets_exactly_the_missing_events()
-> anyhow::Result<()> {
    let daemon = Daemon::start()?;
    let mut a = daemon.ndjson()?;
    let mut b = daemon.ndjson()?;
    let session = a.new_session("shared")?;
    a.subscribe(&session, json!(0))?;
    b.subscribe(&session, json!(0))?;
    let mut seen_a = a.events_until("replay_complete")?;
    let mut seen_b = b.events_until("replay_complete")?;

    configure_n(&mut a, &session, 0, 5)?;
    // a: its own attach (2), b's attach (3), five configures (4..=8); b: the same from 3.
    for _ in 0..7 {
        seen_a.push(a.next_event()?);
    }
    for _ in 0..6 {
        seen_b.push(b.next_event()?);
    }
    assert_eq!(seqs(&seen_a), (1..=8).collect::<Vec<_>>());
    assert_eq!(seqs(&seen_b), (1..=8).collect::<Vec<_>>());
    assert_eq!(
        by_seq(&seen_a),
        by_seq(&seen_b),
        "both clients see identical events"
    );

    // b goes away mid-stream; events keep coming (including b's detachment).
    let last_b = 8;
    drop(b);
    configure_n(&mut a, &session, 5, 3)?;
    let mut more_a = Vec::new();
    while seqs(&more_a).last() != Some(&12) {
        more_a.push(a.next_event()?);
    }
    let detached: Vec<&Value> = more_a
        .iter()
        .filter(|e| e["type"] == "client_detached")
        .collect();
    assert_eq!(detached.len(), 1, "b's disconnect is logged: {more_a:?}");

    // b comes back since its last seq: exactly 9..=12, then replay_complete, then live.
    let mut b = daemon.ndjson()?;
    b.subscribe(&session, json!(last_b))?;
    let replay = b.events_until("replay_complete")?;
    assert_eq!(seqs(&replay), vec![9, 10, 11, 12]);
    assert_eq!(
        replay.last().context("replay_complete")?["data"]["headSeq"],
        12
    );
    assert!(
        replay.last().context("rc")?.get("seq").is_none(),
        "stream control has no seq"
    );
    let replay_map = by_seq(&replay);
    assert_eq!(
        replay_map,
        by_seq(&more_a),
        "replayed events are identical to the originals"
    );
    let live = b.next_event()?;
    assert_eq!(
        (live["seq"].as_u64(), live["type"].as_str()),
        (Some(13), Some("client_attached"))
    );
    Ok(())
}

#[test]
fn socat_speaks_ndjson_with_subscriptions() -> anyhow::Result<()> {
    let socat = Command::new("socat").arg("-V").output();
    assert!(
        socat.is_ok_and(|o| o.status.success()),
        "socat is required for this test (.ci/run installs it)"
    );
    let daemon = Daemon::start()?;
    let mut raw = daemon.ndjson()?;
    let session = raw.new_session("via socat")?;

    let mut child = Command::new("socat")
        .arg("-")
        .arg(format!("UNIX-CONNECT:{}", daemon.socket().display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut stdin = child.stdin.take().context("stdin")?;
    let stdout = child.stdout.take().context("stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let next = || -> anyhow::Result<Value> { Ok(serde_json::from_str(&rx.recv_timeout(WAIT)?)?) };
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":"s","method":"session/subscribe","params":{{"sessionId":"{session}","since":0,"role":"observer"}}}}"#
    )?;
    let sub = next()?;
    assert_eq!(sub["id"], "s");
    let sub_id = sub["result"].clone();
    let created = next()?;
    assert_eq!(created["params"]["subscription"], sub_id);
    assert_eq!(created["params"]["result"]["type"], "session_created");
    assert_eq!(next()?["params"]["result"]["type"], "replay_complete");
    let attached = next()?;
    assert_eq!(attached["params"]["result"]["data"]["role"], "observer");

    raw.call(
        "session/configure",
        json!({"sessionId": session, "model": "opus"}),
    )?;
    let configured = next()?;
    assert_eq!(configured["params"]["result"]["type"], "session_configured");
    assert_eq!(configured["params"]["result"]["data"]["model"], "opus");
    drop(stdin);
    let status = child.wait()?;
    assert!(status.success());
    Ok(())
}

#[test]
fn kill_9_loses_no_acknowledged_event_and_seqs_continue() -> anyhow::Result<()> {
    let mut daemon = Daemon::start()?;
    let mut client = daemon.ndjson()?;
    let session = client.new_session("crash me")?;
    let first_epoch = client.call("initialize", json!({"protocolVersion": 1}))?["epoch"].clone();
    client.subscribe(&session, json!(0))?;
    let mut seen = client.events_until("replay_complete")?;
    configure_n(&mut client, &session, 0, 20)?;
    // Seqs 1 (created), 2 (attached), 3..=22 (configured): wait until all were shown.
    while seqs(&seen).last() != Some(&22) {
        seen.push(client.next_event()?);
    }
    daemon.kill9()?;
    assert!(
        daemon.socket().exists(),
        "kill -9 leaves a stale socket behind"
    );
    daemon.spawn()?;

    let mut client = daemon.ndjson()?;
    let hello = client.call("initialize", json!({"protocolVersion": 1}))?;
    assert_ne!(hello["epoch"], first_epoch, "epoch changes on restart");
    assert!(hello["epoch"].as_u64() > first_epoch.as_u64());
    client.subscribe(&session, json!(0))?;
    let replay = client.events_until("replay_complete")?;
    assert_eq!(seqs(&replay), (1..=22).collect::<Vec<_>>());
    assert_eq!(
        by_seq(&replay),
        by_seq(&seen),
        "every event shown before the crash survives as it was"
    );
    let next = client.next_event()?;
    assert_eq!(next["seq"], 23);
    assert_eq!(next["epoch"], hello["epoch"]);
    let summary = client.call("session/get", json!({"sessionId": session}))?;
    assert_eq!(summary["title"], "title 19");
    Ok(())
}

#[test]
fn socket_directory_and_file_are_private() -> anyhow::Result<()> {
    let daemon = Daemon::start()?;
    let sock = std::fs::metadata(daemon.socket())?.permissions().mode() & 0o777;
    let dir = std::fs::metadata(daemon.socket().parent().context("dir")?)?
        .permissions()
        .mode()
        & 0o777;
    assert_eq!((dir, sock), (0o700, 0o600));
    Ok(())
}

#[test]
fn a_second_daemon_on_the_same_socket_refuses_to_start() -> anyhow::Result<()> {
    let daemon = Daemon::start()?;
    let out = daemon.command().output()?;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("already serving"), "stderr: {stderr}");
    // The first one is unharmed.
    let mut client = daemon.ndjson()?;
    client.call("daemon/status", json!({}))?;
    Ok(())
}

#[test]
fn malformed_and_oversized_input_get_errors_and_the_connection_keeps_working() -> anyhow::Result<()>
{
    let daemon = Daemon::start()?;
    let mut bystander = daemon.ndjson()?;
    let session = bystander.new_session("bystander")?;
    bystander.subscribe(&session, json!("head"))?;
    bystander.events_until("replay_complete")?;

    let mut c = daemon.ndjson()?;
    c.send_raw(b"{not json\n")?;
    assert_eq!(c.read()?["error"]["code"], -32700);
    c.send_raw(b"[1, 2]\n")?;
    let batch = c.read()?;
    assert_eq!(batch[0]["error"]["code"], -32600, "{batch}");
    c.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":9}\n")?;
    let invalid = c.read()?;
    assert_eq!(
        (invalid["error"]["code"].clone(), invalid["id"].clone()),
        (json!(-32600), json!(9))
    );

    let odd = c.request(
        "initialize",
        json!({"protocolVersion": 1, "capabilities": []}),
    )?;
    assert_eq!(
        odd["error"]["code"], -32602,
        "capabilities is an object: {odd}"
    );
    let unknown = c.request("session/teleport", json!({}))?;
    assert_eq!(unknown["error"]["code"], -32601);
    let bad = c.request("session/new", json!({"title": "no cwd"}))?;
    assert_eq!(bad["error"]["code"], -32602);
    assert!(
        bad["error"].to_string().contains("cwd"),
        "names the field: {bad}"
    );
    let relative = c.request("session/new", json!({"cwd": "relative/dir"}))?;
    assert_eq!(relative["error"]["code"], -32602);
    let missing = c.request("session/get", json!({"sessionId": "nope"}))?;
    assert_eq!(missing["error"]["code"], -32002);
    let bad_sub = c.request(
        "session/subscribe",
        json!({"sessionId": session, "since": "tail"}),
    )?;
    assert_eq!(bad_sub["error"]["code"], -32602, "{bad_sub}");
    let bad_format = c.request(
        "session/export",
        json!({"sessionId": session, "format": "pdf"}),
    )?;
    assert_eq!(bad_format["error"]["code"], -32602, "{bad_format}");

    // 17 MiB on one line.
    let mut big =
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"session/new\",\"params\":{\"cwd\":\"".to_vec();
    big.extend(std::iter::repeat_n(b'a', 17 * 1024 * 1024));
    big.extend(b"\"}}\n");
    c.send_raw(&big)?;
    assert_eq!(c.read()?["error"]["code"], -32007);

    // Still usable, and the other client saw none of it.
    c.call("daemon/status", json!({}))?;
    bystander.call(
        "session/configure",
        json!({"sessionId": session, "title": "still here"}),
    )?;
    let seen = bystander.events_until("session_configured")?;
    assert_eq!(seen.last().context("event")?["data"]["title"], "still here");
    Ok(())
}

#[test]
fn one_connection_cannot_unsubscribe_another() -> anyhow::Result<()> {
    let daemon = Daemon::start()?;
    let mut a = daemon.ndjson()?;
    let mut b = daemon.ndjson()?;
    let session = a.new_session("mine")?;
    let sub = a.subscribe(&session, json!("head"))?;
    a.events_until("replay_complete")?;
    let stolen = b.call("session/unsubscribe", json!([sub]))?;
    assert_eq!(stolen, json!(false));
    b.call(
        "session/configure",
        json!({"sessionId": session, "title": "after"}),
    )?;
    let events = a.events_until("session_configured")?;
    assert_eq!(events.last().context("event")?["data"]["title"], "after");
    assert_eq!(a.call("session/unsubscribe", json!([sub]))?, json!(true));
    Ok(())
}

#[test]
fn deleting_a_session_ends_its_subscriptions() -> anyhow::Result<()> {
    let daemon = Daemon::start()?;
    let mut a = daemon.ndjson()?;
    let session = a.new_session("doomed")?;
    a.subscribe(&session, json!("head"))?;
    a.events_until("replay_complete")?;
    let mut b = daemon.ndjson()?;
    b.call("session/delete", json!({"sessionId": session}))?;
    let ended = a.events_until("session_deleted")?;
    assert!(ended.last().context("event")?.get("seq").is_none());
    let gone = b.request("session/get", json!({"sessionId": session}))?;
    assert_eq!(gone["error"]["code"], -32002);
    let list = b.call("session/list", json!({}))?;
    assert_eq!(list["sessions"], json!([]));
    Ok(())
}

#[test]
fn shutdown_over_rpc_tells_subscribers_and_removes_the_socket() -> anyhow::Result<()> {
    let mut daemon = Daemon::start()?;
    let mut watcher = daemon.ndjson()?;
    let session = watcher.new_session("watched")?;
    watcher.subscribe(&session, json!("head"))?;
    watcher.events_until("replay_complete")?;
    daemon.ndjson()?.call("daemon/shutdown", json!({}))?;
    watcher.events_until("daemon_shutdown")?;
    assert!(daemon.wait_exit()?.success());
    assert!(!daemon.socket().exists());
    Ok(())
}

#[test]
fn sigterm_is_a_clean_shutdown() -> anyhow::Result<()> {
    let mut daemon = Daemon::start()?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session("kept")?;
    assert!(daemon.terminate()?.success());
    assert!(!daemon.socket().exists());
    daemon.spawn()?;
    let got = daemon
        .ndjson()?
        .call("session/get", json!({"sessionId": session}))?;
    assert_eq!(got["title"], "kept");
    Ok(())
}

#[test]
fn the_tether_client_creates_lists_attaches_and_stops() -> anyhow::Result<()> {
    let mut daemon = Daemon::start()?;
    let out = daemon
        .tether()
        .args(["new", "--title", "from the cli"])
        .output()?;
    assert!(out.status.success(), "{out:?}");
    let id = String::from_utf8(out.stdout)?.trim().to_owned();

    let out = daemon.tether().args(["sessions"]).output()?;
    let table = String::from_utf8(out.stdout)?;
    assert!(table.starts_with("ID"), "{table}");
    assert!(
        table.contains(&id[..8]) && table.contains("from the cli"),
        "{table}"
    );
    let out = daemon.tether().args(["sessions", "--json"]).output()?;
    let list: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(list["sessions"][0]["sessionId"], id.as_str());

    // Attach by prefix, see a change made elsewhere, detach with Ctrl+C.
    let mut attach = daemon
        .tether()
        .args(["attach", &id[..6], "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = attach.stdout.take().context("stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let next = || -> anyhow::Result<Value> { Ok(serde_json::from_str(&rx.recv_timeout(WAIT)?)?) };
    let mut types = Vec::new();
    while types.last().map(String::as_str) != Some("client_attached") {
        types.push(next()?["type"].as_str().context("type")?.to_owned());
    }
    assert_eq!(
        types,
        ["session_created", "replay_complete", "client_attached"]
    );
    let mut c = daemon.ndjson()?;
    c.subscribe(&id, json!("head"))?;
    c.events_until("replay_complete")?;
    c.call(
        "session/configure",
        json!({"sessionId": id, "permissionMode": "plan"}),
    )?;
    loop {
        let ev = next()?;
        if ev["type"] == "session_configured" {
            assert_eq!(ev["data"]["permissionMode"], "plan");
            break;
        }
    }
    Command::new("kill")
        .arg("-INT")
        .arg(attach.id().to_string())
        .status()?;
    assert!(attach.wait()?.success());
    let detached = c.events_until("client_detached")?;
    assert_eq!(
        detached.last().context("ev")?["data"]["client"]["kind"],
        "tui"
    );

    let out = daemon
        .tether()
        .args(["daemon", "status", "--json"])
        .output()?;
    let status: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(status["running"], true);
    assert_eq!(status["sessions"], 1);

    let out = daemon.tether().args(["daemon", "stop"]).output()?;
    assert!(out.status.success(), "{out:?}");
    assert!(daemon.wait_exit()?.success());
    let out = daemon.tether().args(["daemon", "status"]).output()?;
    assert_eq!(
        out.status.code(),
        Some(3),
        "status reports a stopped daemon"
    );
    Ok(())
}

#[test]
fn the_client_autostarts_a_daemon_that_outlives_it() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("auto/tetherd.sock");
    let tether = || {
        let mut cmd = Command::new(tether_tests::bin("tether"));
        cmd.env("TETHER_SOCKET", &socket)
            .env("TETHER_HOME", dir.path().join("home"))
            .env("TETHER_LOG", "warn");
        cmd
    };
    let out = tether().args(["sessions", "--json"]).output()?;
    assert!(out.status.success(), "{out:?}");
    assert!(socket.exists(), "the daemon was started");
    // The client is gone; the daemon still answers.
    let mut c = tether_tests::Ndjson::connect(&socket)?;
    let status = c.call("daemon/status", json!({}))?;
    let pid = status["daemon"]["pid"].as_u64().context("pid")?;
    let out = tether().args(["daemon", "stop"]).output()?;
    assert!(out.status.success(), "{out:?}");
    assert!(!socket.exists());
    // The daemon process ends (or is a zombie until its parent, init, reaps it).
    let deadline = std::time::Instant::now() + WAIT;
    while std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z")) {
        assert!(
            std::time::Instant::now() < deadline,
            "tetherd {pid} still runs after stop"
        );
        std::thread::yield_now();
    }
    Ok(())
}

#[test]
fn a_session_a_script_left_unloads_at_once_one_a_terminal_left_stays() -> anyhow::Result<()> {
    // The default idle_unload (15 minutes) applies to what a person may come back to.
    let daemon = Daemon::start()?;
    let loaded = |c: &mut tether_tests::Ndjson| -> anyhow::Result<Value> {
        Ok(c.call("daemon/status", json!({}))?["loadedSessions"].clone())
    };
    let mut status = daemon.ndjson()?;
    {
        let mut terminal = daemon.ndjson()?.as_terminal()?;
        let session = terminal.new_session("by hand")?;
        terminal.watch(&session)?;
    }
    {
        let mut script = daemon.ndjson()?;
        let session = script.new_session("scripted")?;
        script.watch(&session)?;
    }
    assert_eq!(loaded(&mut status)?, 2);
    let deadline = std::time::Instant::now() + WAIT;
    while loaded(&mut status)? != 1 {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the session the script left stayed loaded"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(
        loaded(&mut status)?,
        1,
        "the terminal's session was unloaded"
    );
    let list = status.call("session/list", json!({}))?;
    let titles: Vec<&str> = list["sessions"]
        .as_array()
        .context("sessions")?
        .iter()
        .filter_map(|s| s["title"].as_str())
        .collect();
    assert_eq!(titles.len(), 2, "both are kept: {titles:?}");
    Ok(())
}

#[test]
fn idle_sessions_are_unloaded_and_reload_transparently() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(vec![("TETHER_IDLE_UNLOAD_MS".into(), "100".into())])?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session("sleepy")?;
    let deadline = std::time::Instant::now() + WAIT;
    while c.call("daemon/status", json!({}))?["loadedSessions"] != 0 {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the idle session was not unloaded"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let list = c.call("session/list", json!({}))?;
    assert_eq!(
        list["sessions"][0]["title"], "sleepy",
        "unloaded sessions are still listed"
    );
    c.subscribe(&session, json!(0))?;
    let replay = c.events_until("replay_complete")?;
    assert_eq!(replay[0]["type"], "session_created");
    assert_eq!(c.call("daemon/status", json!({}))?["loadedSessions"], 1);
    // A subscriber keeps it loaded.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(c.call("daemon/status", json!({}))?["loadedSessions"], 1);
    Ok(())
}
