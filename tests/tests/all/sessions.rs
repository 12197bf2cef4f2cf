//! Session management end to end: retention and snapshots, listing, titles, background shells
//! across restarts, fork and export.

use anyhow::Context;
use serde_json::{Value, json};
use tether_tests::fake_anthropic::{Rule, Script, Step};
use tether_tests::{Daemon, Fake, Ndjson, seqs};

fn env_with(fake: &Fake, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut env = fake.env();
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env
}

fn of_type<'a>(events: &'a [Value], ty: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == ty).collect()
}

#[test]
fn pruned_deltas_are_announced_by_a_snapshot_and_completed_blocks_stay() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::text("First answer, streamed in several deltas to prune."),
        Step::text("Second answer."),
    ]))?;
    let mut daemon = Daemon::start_with(env_with(&fake, &[("TETHER_DELTA_RETENTION", "0s")]))?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&daemon.workdir())?;
    c.watch(&session)?;
    c.start_turn(&session, "first")?;
    let live = c.events_until("turn_ended")?;
    assert!(
        !of_type(&live, "text_delta").is_empty(),
        "live clients get deltas"
    );
    let ended_at = live.last().and_then(|e| e["seq"].as_u64()).context("seq")?;

    // Pruning runs after the turn's end is durable; the record says how far it went.
    let mut pruned = 0;
    for _ in 0..100 {
        pruned = c.call("session/get", json!({"sessionId": session}))?["prunedThrough"]
            .as_u64()
            .unwrap_or(0);
        if pruned > 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(pruned, ended_at, "pruned through the turn's end");

    let mut late = daemon.ndjson()?;
    late.subscribe(&session, json!(0))?;
    let replay = late.events_until("replay_complete")?;
    assert_eq!(replay[0]["type"], "snapshot", "{:?}", replay[0]);
    assert_eq!(replay[0]["data"]["atSeq"], ended_at);
    assert_eq!(replay[0]["data"]["session"]["sessionId"], session.as_str());
    assert!(of_type(&replay, "text_delta").is_empty(), "deltas are gone");
    let completed = of_type(&replay, "assistant_block_completed");
    assert_eq!(
        completed[0]["data"]["block"]["text"],
        "First answer, streamed in several deltas to prune."
    );
    let replayed = seqs(&replay);
    assert!(replayed.windows(2).all(|w| w[0] < w[1]), "in order");

    // A `since` at or after the pruned point gets no snapshot.
    let mut recent = daemon.ndjson()?;
    recent.subscribe(&session, json!(ended_at))?;
    let replay = recent.events_until("replay_complete")?;
    assert!(of_type(&replay, "snapshot").is_empty(), "{replay:?}");

    // Pruning survives a restart and the session goes on.
    daemon.kill9()?;
    daemon.spawn()?;
    let mut c = daemon.ndjson()?;
    c.subscribe(&session, json!(0))?;
    let replay = c.events_until("replay_complete")?;
    assert_eq!(replay[0]["type"], "snapshot");
    c.start_turn(&session, "second")?;
    let events = c.events_until("turn_ended")?;
    assert_eq!(
        events.last().map(|e| e["data"]["stopReason"].clone()),
        Some(json!("end_turn"))
    );
    let history = &fake.server.message_requests()[1].body["messages"];
    assert_eq!(
        history[1]["content"][0]["text"], "First answer, streamed in several deltas to prune.",
        "the history is rebuilt from completed blocks"
    );
    Ok(())
}

/// Waits for the session's `session_configured` that sets a title and returns the title.
/// The title a turn's session is given, read with the turn's events up to its end: the title
/// is made in the background, so it may come before or after `turn_ended`.
fn title_of_turn(c: &mut Ndjson) -> anyhow::Result<String> {
    let (mut title, mut ended) = (None, false);
    while title.is_none() || !ended {
        let e = c.next_event()?;
        if e["type"] == "turn_ended" {
            ended = true;
        } else if e["type"] == "session_configured"
            && let Some(t) = e["data"]["title"].as_str()
        {
            title = Some(t.to_owned());
        }
    }
    title.context("a title")
}

fn title_rule(times: usize, step: Step) -> Rule {
    Rule {
        last_user_matches: Some("^Write a title for the coding session".into()),
        has_tool_result: None,
        times: Some(times),
        step,
    }
}

#[test]
fn untitled_sessions_are_named_by_the_fast_model_or_after_their_prompt() -> anyhow::Result<()> {
    let mut script = Script::of([Step::text("On it."), Step::text("Also on it.")]);
    script.rules = vec![
        title_rule(1, Step::text("\"Fix the flaky login test.\"")),
        title_rule(
            1,
            Step::error(400, "invalid_request_error", "no titles today"),
        ),
    ];
    let fake = Fake::start(script)?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut c = daemon.ndjson()?;
    let cwd = daemon.workdir();
    let first = c.call("session/new", json!({"cwd": cwd}))?["sessionId"]
        .as_str()
        .context("id")?
        .to_owned();
    c.watch(&first)?;
    c.start_turn(&first, "the login test fails one run in ten, find out why")?;
    assert_eq!(title_of_turn(&mut c)?, "Fix the flaky login test");
    let title_request = fake
        .server
        .message_requests()
        .into_iter()
        .find(|r| r.body["max_tokens"] == 64)
        .context("a title request")?;
    assert!(
        title_request.body["model"]
            .as_str()
            .is_some_and(|m| m.contains("haiku")),
        "the fast model names sessions: {}",
        title_request.body["model"]
    );

    let second = c.call("session/new", json!({"cwd": cwd}))?["sessionId"]
        .as_str()
        .context("id")?
        .to_owned();
    c.watch(&second)?;
    c.start_turn(
        &second,
        "\n  rename every handler in the rpc module so that the names say which method each one serves",
    )?;
    let fallback = title_of_turn(&mut c)?;
    assert_eq!(
        fallback, "rename every handler in the rpc module so that the names…",
        "a failed title request keeps the prompt, shortened"
    );

    // A given title is never replaced.
    let titled = c.new_session_in(&cwd)?;
    c.watch(&titled)?;
    c.start_turn(&titled, "hello")?;
    c.events_until("turn_ended")?;
    let got = c.call("session/get", json!({"sessionId": titled}))?;
    assert_eq!(got["title"], "test");
    Ok(())
}

#[test]
fn session_list_filters_by_cwd_and_status_and_pages_by_cursor() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("ok").stall_after(3)]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut c = daemon.ndjson()?;
    let here = daemon.workdir();
    let elsewhere = tempfile::tempdir()?;
    let mut ids = Vec::new();
    for i in 0..5 {
        let cwd = if i % 2 == 0 {
            here.as_path()
        } else {
            elsewhere.path()
        };
        ids.push(c.new_session_in(cwd)?);
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // The oldest becomes the most recently active by running a turn (that stalls: running).
    c.watch(&ids[0])?;
    c.start_turn(&ids[0], "keep running")?;
    c.events_until("text_delta")?;

    let list = c.call("session/list", json!({}))?;
    let order: Vec<&str> = list["sessions"]
        .as_array()
        .context("sessions")?
        .iter()
        .filter_map(|s| s["sessionId"].as_str())
        .collect();
    assert_eq!(order, [&ids[0], &ids[4], &ids[3], &ids[2], &ids[1]]);
    assert_eq!(list["total"], 5);
    assert!(list.get("nextCursor").is_none());

    let mine = c.call("session/list", json!({"cwd": here}))?;
    assert_eq!(mine["total"], 3);
    let running = c.call("session/list", json!({"status": "running"}))?;
    assert_eq!(running["sessions"][0]["sessionId"], ids[0].as_str());
    assert_eq!(running["total"], 1);

    let mut paged = Vec::new();
    let mut cursor = Value::Null;
    loop {
        let page = c.call("session/list", json!({"limit": 2, "cursor": cursor}))?;
        assert_eq!(page["total"], 5);
        for s in page["sessions"].as_array().context("page")? {
            paged.push(s["sessionId"].as_str().context("id")?.to_owned());
        }
        match page.get("nextCursor") {
            Some(next) => cursor = next.clone(),
            None => break,
        }
    }
    assert_eq!(paged, order);

    let bad = c.request("session/list", json!({"status": "sleeping"}))?;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    Ok(())
}

#[test]
fn background_shells_cut_by_a_daemon_stop_are_killed_and_reported_lost() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::default().tool_use(
            "Bash",
            json!({"command": "echo up; sleep 300", "run_in_background": true}),
        ),
        Step::text("Started."),
        Step::default().tool_use("BashOutput", json!({"bash_id": "bash_1"})),
        Step::text("It was lost."),
        Step::default().tool_use(
            "Bash",
            json!({"command": "echo done; exit 3", "run_in_background": true}),
        ),
        Step::text("Started another."),
    ]))?;
    let mut daemon = Daemon::start_with(fake.env())?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&daemon.workdir())?;
    c.watch(&session)?;
    c.start_turn(&session, "start the server")?;
    let events = c.events_until("turn_ended")?;
    let started = of_type(&events, "tool_result")[0]["data"]["details"]["backgroundShell"].clone();
    let pid = started["pid"].as_i64().context("pid")?;
    let proc_dir = std::path::PathBuf::from(format!("/proc/{pid}"));
    assert!(proc_dir.exists(), "the shell runs");

    daemon.kill9()?;
    assert!(proc_dir.exists(), "a killed daemon leaves its shell behind");
    daemon.spawn()?;
    let mut c = daemon.ndjson()?;
    let seen = c.replay_until(&session, |s| {
        s.iter().any(|e| e["type"] == "background_shell_ended")
    })?;
    let lost = of_type(&seen, "background_shell_ended")[0];
    assert_eq!(lost["data"]["shellId"], "bash_1");
    assert_eq!(lost["data"]["state"], "lost");
    assert!(
        lost["data"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("has been killed")),
        "{lost}"
    );
    // Killed at start-up; the orphan is reaped by whoever adopted it.
    for _ in 0..100 {
        let zombie_or_gone = std::fs::read_to_string(proc_dir.join("stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z'))
            })
            .unwrap_or(true);
        if zombie_or_gone {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let alive = std::fs::read_to_string(proc_dir.join("stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false);
    assert!(!alive, "the orphaned shell was killed");

    c.start_turn(&session, "how is the server?")?;
    let events = c.events_until("turn_ended")?;
    let output = of_type(&events, "tool_result")[0]["data"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(output.contains("[bash_1: lost"), "{output}");

    c.start_turn(&session, "start another")?;
    let mut events = c.events_until("turn_ended")?;
    let result = of_type(&events, "tool_result")[0]["data"]["content"].clone();
    assert!(
        result.as_str().is_some_and(|r| r.contains("bash_2")),
        "ids are not reused: {result}"
    );
    while of_type(&events, "background_shell_ended").is_empty() {
        events.push(c.next_event()?);
    }
    let ended = of_type(&events, "background_shell_ended")[0];
    assert_eq!(ended["data"]["state"], "exited");
    assert_eq!(ended["data"]["exitCode"], 3);
    Ok(())
}

/// Sets the daemon's soft file size limit (`None`: unlimited), as a full disk would stop writes.
fn limit_file_size(daemon: &Daemon, bytes: Option<u64>) -> anyhow::Result<()> {
    let pid = daemon.child.as_ref().context("daemon runs")?.id();
    let limit = bytes.map_or("unlimited".to_owned(), |b| b.to_string());
    let status = std::process::Command::new("prlimit")
        .arg(format!("--pid={pid}"))
        .arg(format!("--fsize={limit}:"))
        .status()?;
    anyhow::ensure!(status.success(), "prlimit failed");
    Ok(())
}

#[test]
fn a_failed_write_stops_the_turn_with_an_error_and_the_session_stays_readable() -> anyhow::Result<()>
{
    let long: String = (0..4000)
        .map(|i| format!("line {i} of a long answer that will not fit on the disk\n"))
        .collect();
    let fake = Fake::start(Script::of([
        Step::text("A short first answer."),
        Step::text(long),
        Step::text("Back after the restart."),
    ]))?;
    let mut daemon = Daemon::start_with(fake.env())?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&daemon.workdir())?;
    c.watch(&session)?;
    c.start_turn(&session, "first")?;
    c.events_until("turn_ended")?;
    let saved_head = c.call("session/get", json!({"sessionId": session}))?["headSeq"]
        .as_u64()
        .context("head")?;

    // The database may not grow any more: like a full disk, without filling one.
    let db = daemon.data_dir().join("db").join("db");
    limit_file_size(&daemon, Some(std::fs::metadata(&db)?.len()))?;
    // A headless run on it ends with the reason instead of waiting for a turn_ended that can
    // never be saved.
    let mut headless = daemon
        .tether()
        .current_dir(daemon.workdir())
        .args(["-p", "write a lot", "--session", &session])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let deadline = std::time::Instant::now() + tether_tests::WAIT;
    let status = loop {
        if let Some(status) = headless.try_wait()? {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = headless.kill();
            anyhow::bail!("tether -p hung after the write failed");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(!status.success());
    let mut stderr = String::new();
    if let Some(mut err) = headless.stderr.take() {
        std::io::Read::read_to_string(&mut err, &mut stderr)?;
    }
    assert!(stderr.contains("File too large"), "the reason: {stderr}");
    let events = c.events_until("error")?;
    let error = events.last().context("error")?;
    assert_eq!(error["data"]["code"], "storage_failed", "{error}");
    assert!(error.get("seq").is_none(), "it cannot be logged");
    let message = error["data"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("read-only"), "{message}");

    // The daemon keeps serving: the session reads, new writes are refused clearly.
    let status = c.call("daemon/status", json!({}))?;
    assert!(status["pid"].is_u64() || status.is_object());
    let refused = c.request(
        "turn/start",
        json!({"sessionId": session, "input": [{"type": "text", "text": "again"}]}),
    )?;
    assert_eq!(refused["error"]["code"], -32007, "{refused}");
    let mut reader = daemon.ndjson()?;
    reader.subscribe(&session, json!(0))?;
    let replay = reader.events_until("replay_complete")?;
    let last_replayed = seqs(&replay).last().copied().unwrap_or(0);
    assert!(last_replayed >= saved_head, "what was saved is readable");
    let export = c.call("session/export", json!({"sessionId": session}))?;
    assert!(
        export["content"]
            .as_str()
            .is_some_and(|t| t.contains("A short first answer."))
    );

    // With room again, a restart finds every event any client was shown, and goes on.
    let shown = seqs(&events);
    limit_file_size(&daemon, None)?;
    daemon.kill9()?;
    daemon.spawn()?;
    let mut c = daemon.ndjson()?;
    c.subscribe(&session, json!(0))?;
    let replay = c.events_until("replay_complete")?;
    let kept = seqs(&replay);
    for seq in shown {
        assert!(
            kept.contains(&seq),
            "event #{seq} was shown and must survive"
        );
    }
    c.start_turn(&session, "and now?")?;
    let events = c.events_until("turn_ended")?;
    assert_eq!(
        events.last().map(|e| e["data"]["stopReason"].clone()),
        Some(json!("end_turn"))
    );
    Ok(())
}

#[test]
fn tether_rm_deletes_sessions_by_prefix_and_names_the_ones_it_cannot() -> anyhow::Result<()> {
    let daemon = Daemon::start()?;
    let new = daemon.run_tether(&["new", "--title", "to go"])?;
    assert!(new.status.success(), "{new:?}");
    let id = String::from_utf8(new.stdout)?.trim().to_owned();
    let kept = daemon.run_tether(&["new", "--title", "to keep"])?;
    let kept = String::from_utf8(kept.stdout)?.trim().to_owned();
    let out = daemon.run_tether(&["rm", &id[..8], "no-such-session"])?;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(String::from_utf8(out.stdout)?, format!("deleted {id}\n"));
    assert!(
        String::from_utf8(out.stderr)?.contains("no session matches \"no-such-session\""),
        "the one it cannot find is named"
    );
    let list = daemon.ndjson()?.call("session/list", json!({}))?;
    let ids: Vec<&str> = list["sessions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["sessionId"].as_str())
        .collect();
    assert_eq!(ids, [kept.as_str()]);
    Ok(())
}

#[test]
fn forty_sessions_streaming_at_once_all_finish() -> anyhow::Result<()> {
    const SESSIONS: usize = 40;
    let mut steps = Step::text("streamed in small pieces, each of which is made durable");
    steps.chunk_delay_ms = Some(5);
    let mut script = Script::default().titling("t");
    script.rules.push(Rule {
        last_user_matches: None,
        has_tool_result: None,
        times: None,
        step: steps,
    });
    let fake = Fake::start(script)?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut clients = Vec::new();
    for _ in 0..SESSIONS {
        let mut c = daemon.ndjson()?;
        let session = c.new_session("side by side")?;
        c.watch(&session)?;
        clients.push((c, session));
    }
    for (c, session) in &mut clients {
        c.start_turn(session, "go")?;
    }
    // Each session commits its events as they stream; together they once wedged the store.
    let threads: Vec<_> = clients
        .into_iter()
        .map(|(mut c, session)| {
            std::thread::spawn(move || -> anyhow::Result<Value> {
                let events = c
                    .events_until("turn_ended")
                    .with_context(|| format!("session {session} never ended its turn"))?;
                events.last().cloned().context("turn_ended")
            })
        })
        .collect();
    for t in threads {
        let ended = t
            .join()
            .map_err(|_| anyhow::anyhow!("client thread panicked"))??;
        assert_eq!(ended["data"]["stopReason"], "end_turn", "{ended}");
    }
    Ok(())
}
