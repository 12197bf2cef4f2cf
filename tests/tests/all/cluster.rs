//! Cluster mode end to end: real nats-servers in one JetStream cluster on loopback, several
//! `tetherd` nodes on it, the fake API. A session outlives the node that ran it (killed,
//! or paused past its lease), its tool never runs twice, a stale owner is fenced, a leader
//! election of the log's stream costs no write, and bad cluster settings are named.

use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::nats::NatsCluster;
use tether_tests::{Daemon, Fake, Ndjson};

/// How long a node may go silent before another takes its sessions, in these tests.
const TTL: &str = "2s";

/// A working directory every node sees (one host).
fn shared_dir() -> anyhow::Result<(tempfile::TempDir, PathBuf)> {
    let dir = tempfile::Builder::new()
        .prefix("tether-cluster")
        .tempdir()?;
    let path = dir.path().canonicalize()?;
    Ok((dir, path))
}

/// The events of `session` from the start as `c` replays them, through `replay_complete`.
fn replay(c: &mut Ndjson, session: &str, since: u64) -> anyhow::Result<Vec<Value>> {
    c.subscribe(session, json!(since))?;
    let mut seen = c.events_until("replay_complete")?;
    seen.pop();
    Ok(seen)
}

/// The events `c` reads through the next `turn_ended`, waiting up to `patience` in all (longer
/// than one read's wait: the cluster may be electing leaders meanwhile).
fn turn_end_within(c: &mut Ndjson, patience: Duration) -> anyhow::Result<Vec<Value>> {
    let deadline = Instant::now() + patience;
    let mut events = Vec::new();
    while events
        .last()
        .is_none_or(|e: &Value| e["type"] != "turn_ended")
    {
        match c.next_event() {
            Ok(e) => events.push(e),
            Err(_) if Instant::now() < deadline => {}
            Err(e) => return Err(e),
        }
    }
    Ok(events)
}

fn logged(events: &[Value]) -> Vec<&Value> {
    events.iter().filter(|e| e["seq"].is_u64()).collect()
}

/// Whether a process whose command line contains `marker` runs.
fn running(marker: &str) -> bool {
    std::process::Command::new("pgrep")
        .arg("-f")
        .arg(marker)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Seqs dense from 1, epochs never decreasing, one result per tool call.
fn check_log(events: &[&Value]) -> anyhow::Result<()> {
    let mut epoch = 0;
    let mut results = std::collections::HashMap::<String, usize>::new();
    for (i, e) in events.iter().enumerate() {
        if e["seq"].as_u64() != Some(i as u64 + 1) {
            bail!("seqs are not dense at #{}: {e}", i + 1);
        }
        let this = e["epoch"].as_u64().context("epoch")?;
        if this < epoch {
            bail!("the epoch went back from {epoch} at {e}");
        }
        epoch = this;
        if e["type"] == "tool_result" {
            *results
                .entry(e["data"]["toolCallId"].as_str().unwrap_or("").to_owned())
                .or_default() += 1;
        }
    }
    if let Some((id, n)) = results.iter().find(|(_, n)| **n != 1) {
        bail!("tool call {id} has {n} results");
    }
    Ok(())
}

#[test]
fn a_session_outlives_its_node_killed_mid_tool_and_the_tool_never_runs_twice() -> anyhow::Result<()>
{
    let nats = NatsCluster::start(3)?;
    let (_keep, shared) = shared_dir()?;
    let runs = shared.join("runs.txt");
    let fake = Fake::start(Script::of([
        Step::text("Running it.").tool_use(
            "Bash",
            json!({"command": format!("echo run >> {}; echo started; sleep 30", runs.display())}),
        ),
        Step::text("It was interrupted; carrying on."),
    ]))?;
    let mut a = nats.node("a", fake.env(), &shared, TTL)?;
    let b = nats.node("b", fake.env(), &shared, TTL)?;

    let mut on_a = a.ndjson()?;
    let session = on_a.new_session_in(&shared)?;
    on_a.watch(&session)?;
    on_a.start_turn(&session, "run the slow thing")?;
    let seen_on_a = on_a.events_until("tool_progress")?;
    let last_seen = seen_on_a
        .iter()
        .filter_map(|e| e["seq"].as_u64())
        .max()
        .context("seqs")?;
    a.kill9()?;

    // Any node lists it; the first to be asked takes it over once a's lease runs out.
    let mut on_b = b.ndjson()?;
    let listed = on_b.call("session/list", json!({}))?;
    assert_eq!(
        listed["sessions"][0]["sessionId"],
        json!(session),
        "{listed}"
    );
    // Listed with how far its log goes, though b has not copied it yet.
    assert!(
        listed["sessions"][0]["headSeq"].as_u64() >= Some(last_seen),
        "{listed}"
    );
    let started = Instant::now();
    on_b.subscribe(&session, json!(0))?;
    let mut events = on_b.events_until("replay_complete")?;
    let took = started.elapsed();
    while !events.iter().any(|e| e["type"] == "turn_ended") {
        events.push(on_b.next_event()?);
    }
    // Everything a's client saw, with the same seq and content.
    for e in seen_on_a
        .iter()
        .filter(|e| e["seq"].as_u64().is_some_and(|s| s <= last_seen))
    {
        let seq = e["seq"].as_u64().context("seq")?;
        let there = events
            .iter()
            .find(|x| x["seq"].as_u64() == Some(seq))
            .with_context(|| format!("#{seq} is missing on b"))?;
        assert_eq!(there, e, "#{seq} differs on b");
    }
    let ended = events
        .iter()
        .find(|e| e["type"] == "turn_ended")
        .context("turn_ended")?;
    assert_eq!(ended["data"]["stopReason"], "interrupted_by_restart");
    let result = events
        .iter()
        .find(|e| e["type"] == "tool_result")
        .context("the interrupted result")?;
    assert_eq!(result["data"]["isError"], true);
    assert!(
        ended["epoch"].as_u64() > seen_on_a[0]["epoch"].as_u64(),
        "the new owner's epoch is higher: {ended} vs {}",
        seen_on_a[0]
    );

    // The next turn runs on b, and the tool ran once.
    on_b.start_turn(&session, "what happened?")?;
    let next = on_b.events_until("turn_ended")?;
    assert_eq!(
        next.last().context("end")?["data"]["stopReason"],
        "end_turn"
    );
    assert_eq!(std::fs::read_to_string(&runs)?, "run\n");
    // b says it runs the session now, and which nodes it has seen.
    let status = on_b.call("daemon/status", json!({}))?;
    let cluster = &status["cluster"];
    assert_eq!(cluster["node"], "b", "{status}");
    assert_eq!(cluster["connected"], true);
    assert!(
        cluster["nodes"]
            .as_array()
            .is_some_and(|n| n.contains(&json!("b"))),
        "{status}"
    );
    assert!(
        cluster["held"]
            .as_array()
            .is_some_and(|h| h.iter().any(|s| s["sessionId"] == json!(session))),
        "{status}"
    );
    let mut check = b.ndjson()?;
    let all = replay(&mut check, &session, 0)?;
    check_log(&logged(&all))?;
    fake.no_rejections();
    eprintln!("failover: b answered after {took:?} (lease {TTL})");
    Ok(())
}

#[test]
fn every_node_serves_every_session_events_commands_and_answers() -> anyhow::Result<()> {
    let nats = NatsCluster::start(3)?;
    let (_keep, shared) = shared_dir()?;
    let written = shared.join("from-b.txt");
    let fake = Fake::start(Script::of([
        Step::text("First reply, in a few words."),
        Step::text("Second reply, live on every node."),
        Step::text("Third, asked from b."),
        Step::text("Writing.").tool_use(
            "Write",
            json!({"file_path": written.display().to_string(), "content": "approved on b\n"}),
        ),
        Step::text("Written."),
        Step::text("Fourth, from tether -p on c."),
    ]))?;
    let a = nats.node("a", fake.env(), &shared, TTL)?;
    let b = nats.node("b", fake.env(), &shared, TTL)?;
    let c = nats.node("c", fake.env(), &shared, TTL)?;
    let mut on_a = a.ndjson()?;
    let session = on_a.new_session_in(&shared)?;
    on_a.watch(&session)?;
    on_a.start_turn(&session, "one")?;
    on_a.events_until("turn_ended")?;

    // Followers on the other nodes: the same events from seq 3, byte for byte (each replay
    // ends with the attaches logged before it, so they are compared as far as all go).
    let mut on_b = b.ndjson()?;
    let mut on_c = c.ndjson()?;
    let from_b = replay(&mut on_b, &session, 3)?;
    let from_c = replay(&mut on_c, &session, 3)?;
    let mut here = a.ndjson()?;
    let from_a = replay(&mut here, &session, 3)?;
    let n = from_a.len().min(from_b.len()).min(from_c.len());
    assert!(n >= 10, "{n} events in common");
    assert_eq!(from_b[..n], from_a[..n], "b differs");
    assert_eq!(from_c[..n], from_b[..n], "c differs");

    // A turn on a reaches them live, the same as a's own client sees it.
    on_a.start_turn(&session, "two")?;
    let live = on_a.events_until("turn_ended")?;
    let live = logged(&live);
    for (name, follower) in [("b", &mut on_b), ("c", &mut on_c)] {
        let got = follower.events_until("turn_ended")?;
        let got = logged(&got);
        let first = got
            .first()
            .and_then(|e| e["seq"].as_u64())
            .context("live events")?;
        let same: Vec<&Value> = live
            .iter()
            .copied()
            .filter(|e| e["seq"].as_u64().is_some_and(|s| s >= first))
            .collect();
        assert_eq!(got, same, "{name} saw the turn differently");
    }
    // A command on b goes to a, which runs it; every node sees it.
    let mut asks = b.ndjson()?;
    asks.start_turn(&session, "three")?;
    let third = on_b.events_until("turn_ended")?;
    assert_eq!(
        third.last().context("end")?["data"]["stopReason"],
        "end_turn"
    );
    let started = third
        .iter()
        .find(|e| e["type"] == "turn_started" && e["data"]["input"][0]["text"] == "three")
        .context("the turn b asked for")?;
    // Attributed to the client on b that asked, not to a client of a.
    let asker = asks.call("daemon/status", json!({}))?;
    assert_eq!(asker["cluster"]["node"], "b");
    assert_ne!(started["data"]["by"]["clientId"], 0, "{started}");
    assert_eq!(started["data"]["by"]["kind"], "script", "{started}");
    on_c.events_until("turn_ended")?;
    let snapshot = asks.call("session/get", json!({"sessionId": session}))?;
    // Answered by a (b's copy may lag): the turn's end is in it.
    assert!(
        snapshot["headSeq"].as_u64() >= third.last().context("end")?["seq"].as_u64(),
        "{snapshot}"
    );
    assert_eq!(snapshot["runningTurn"], Value::Null, "{snapshot}");

    // A permission request of a session on a, answered from b.
    let asking = on_a.call(
        "session/new",
        json!({"cwd": shared, "title": "asks", "permissionMode": "default"}),
    )?["sessionId"]
        .as_str()
        .context("session")?
        .to_owned();
    on_a.start_turn(&asking, "write it")?;
    let mut follower = b.ndjson()?;
    follower.subscribe(&asking, json!(0))?;
    let request = follower
        .events_until("permission_requested")?
        .last()
        .context("a request")?["data"]["requestId"]
        .clone();
    let answer = asks.call(
        "permission/respond",
        json!({"sessionId": asking, "requestId": request, "decision": "allow_once"}),
    )?;
    assert_eq!(answer["status"], "accepted", "{answer}");
    let end = follower.events_until("turn_ended")?;
    assert_eq!(end.last().context("end")?["data"]["stopReason"], "end_turn");
    assert_eq!(std::fs::read_to_string(&written)?, "approved on b\n");

    // The terminal client (WebSocket) on c, resuming a's session: passed on the same way.
    let out = c
        .tether()
        .current_dir(&shared)
        .args(["-p", "--resume", &session, "four"])
        .output()?;
    assert!(
        out.status.success(),
        "tether -p on c failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Fourth, from tether -p on c."),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // Deleted from b (passed on to a): followers everywhere are told, and it is gone from
    // every node's list.
    asks.call("session/delete", json!({"sessionId": asking}))?;
    follower.events_until("session_deleted")?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let listed = on_c.call("session/list", json!({}))?;
        let gone = listed["sessions"]
            .as_array()
            .is_some_and(|l| l.iter().all(|s| s["sessionId"] != json!(asking)));
        if gone {
            break;
        }
        if Instant::now() > deadline {
            bail!("c still lists the deleted session: {listed}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    fake.no_rejections();
    Ok(())
}

#[test]
fn a_permission_request_open_when_its_node_dies_is_answered_on_another() -> anyhow::Result<()> {
    let nats = NatsCluster::start(3)?;
    let (_keep, shared) = shared_dir()?;
    let file = shared.join("after-failover.txt");
    let fake = Fake::start(Script::of([
        Step::text("Writing.").tool_use(
            "Write",
            json!({"file_path": file.display().to_string(), "content": "allowed on b\n"}),
        ),
        Step::text("Written."),
    ]))?;
    let mut a = nats.node("a", fake.env(), &shared, TTL)?;
    let b = nats.node("b", fake.env(), &shared, TTL)?;
    let mut on_a = a.ndjson()?;
    let session = on_a.call(
        "session/new",
        json!({"cwd": shared, "title": "asks", "permissionMode": "default"}),
    )?["sessionId"]
        .as_str()
        .context("session")?
        .to_owned();
    on_a.watch(&session)?;
    on_a.start_turn(&session, "write it")?;
    let asked = on_a.events_until("permission_requested")?;
    let request = asked.last().context("request")?["data"]["requestId"].clone();
    a.kill9()?;

    // b takes the session over; the request is still open there, and b's answer is the one.
    let mut on_b = b.ndjson()?;
    let mut seen = replay(&mut on_b, &session, 0)?;
    let open = on_b.call("permission/list", json!({"sessionId": session}))?;
    assert!(
        open.as_array()
            .is_some_and(|l| l.iter().any(|p| p["requestId"] == request)),
        "{open}"
    );
    let mut answering = b.ndjson()?;
    let answer = answering.call(
        "permission/respond",
        json!({"sessionId": session, "requestId": request, "decision": "allow_once"}),
    )?;
    assert_eq!(answer["status"], "accepted", "{answer}");
    seen.extend(on_b.events_until("turn_ended")?);
    assert_eq!(
        seen.last().context("end")?["data"]["stopReason"],
        "end_turn"
    );
    assert_eq!(std::fs::read_to_string(&file)?, "allowed on b\n");
    let resolved: Vec<&Value> = seen
        .iter()
        .filter(|e| e["type"] == "permission_resolved")
        .collect();
    assert_eq!(resolved.len(), 1, "resolved once: {resolved:?}");
    check_log(&logged(&seen))?;
    fake.no_rejections();
    Ok(())
}

/// The owner records an answer before it logs it: one that dies in between (simulated here by
/// recording the answer as it would, then killing it) still has its answer win on the next
/// owner, and a later answer from another node learns it lost.
#[test]
fn an_answer_its_dying_owner_recorded_wins_on_the_next() -> anyhow::Result<()> {
    use base64::Engine;
    let nats = NatsCluster::start(3)?;
    let (_keep, shared) = shared_dir()?;
    let file = shared.join("never.txt");
    let fake = Fake::start(Script::of([
        Step::text("Writing.").tool_use(
            "Write",
            json!({"file_path": file.display().to_string(), "content": "no\n"}),
        ),
        Step::text("Understood, not writing."),
    ]))?;
    let mut a = nats.node("a", fake.env(), &shared, TTL)?;
    let b = nats.node("b", fake.env(), &shared, TTL)?;
    let c = nats.node("c", fake.env(), &shared, TTL)?;
    let mut on_a = a.ndjson()?;
    let session = on_a.new_session_with_mode(&shared, "default")?;
    let mut on_c = c.ndjson()?;
    on_c.subscribe(&session, json!(0))?;
    on_a.watch(&session)?;
    on_a.start_turn(&session, "write it")?;
    let asked = on_a.events_until("permission_requested")?;
    let request = asked.last().context("request")?["data"]["requestId"]
        .as_str()
        .context("request id")?
        .to_owned();
    a.kill9()?;
    let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    let recorded = json!({
        "decision": "deny",
        "message": "not that file",
        "by": {"clientId": 7, "kind": "tui", "name": "alice"},
    });
    tether_tests::nats::publish(
        &nats.url(1),
        &format!("$KV.tether-answers.{}.{}", b64(&session), b64(&request)),
        recorded.to_string().as_bytes(),
    )?;

    let mut on_b = b.ndjson()?;
    let late = on_b.call(
        "permission/respond",
        json!({"sessionId": session, "requestId": request, "decision": "allow_once"}),
    )?;
    assert_eq!(late["status"], "already_resolved", "{late}");
    assert_eq!(late["decision"], "deny", "{late}");
    assert_eq!(late["resolvedBy"]["name"], "alice", "{late}");
    // Every node saw the same single resolution, and the turn went on with it.
    let seen = on_c.events_until("turn_ended")?;
    let resolved: Vec<&Value> = seen
        .iter()
        .filter(|e| e["type"] == "permission_resolved")
        .collect();
    assert_eq!(resolved.len(), 1, "resolved once: {resolved:?}");
    assert_eq!(resolved[0]["data"]["decision"], "deny");
    assert_eq!(resolved[0]["data"]["message"], "not that file");
    assert!(!file.exists(), "the denied write ran");
    check_log(&logged(&seen))?;
    // Reads of the answers and the leases go to each bucket's leader, never to a replica
    // that may not have stored the latest write yet.
    for bucket in ["tether-answers", "tether-leases"] {
        let info = tether_tests::nats::publish(
            &nats.url(2),
            &format!("$JS.API.STREAM.INFO.KV_{bucket}"),
            b"",
        )?;
        assert_eq!(info["config"]["allow_direct"], false, "{bucket}: {info}");
    }
    fake.no_rejections();
    Ok(())
}

/// The first event `c` reads for which `wanted` holds.
fn event_where(c: &mut Ndjson, wanted: impl Fn(&Value) -> bool) -> anyhow::Result<Value> {
    loop {
        let e = c.next_event()?;
        if wanted(&e) {
            return Ok(e);
        }
    }
}

/// A client on another node counts where the session runs: it is listed and its coming and
/// going are logged, and as a controller it keeps the `onNoController` policy from acting.
#[test]
fn clients_on_other_nodes_count_as_attached_where_the_session_runs() -> anyhow::Result<()> {
    let nats = NatsCluster::start(3)?;
    let (_keep, shared) = shared_dir()?;
    let file = shared.join("approved.txt");
    let fake = Fake::start(Script::of([
        Step::text("Writing.").tool_use(
            "Write",
            json!({"file_path": file.display().to_string(), "content": "approved on b\n"}),
        ),
        Step::text("Written."),
    ]))?;
    // A lease long enough that b's presence never lapses on a busy machine.
    let a = nats.node("a", fake.env(), &shared, "10s")?;
    let b = nats.node("b", fake.env(), &shared, "10s")?;
    let mut on_a = a.ndjson()?;
    let session = on_a.new_session_with_mode(&shared, "default")?;
    on_a.call(
        "session/configure",
        json!({"sessionId": session, "onNoController": {"action": "deny", "timeoutMs": 500}}),
    )?;
    let mut watcher = a.ndjson()?;
    watcher.call(
        "session/subscribe",
        json!({"sessionId": session, "since": "head", "role": "observer"}),
    )?;
    let from_b = |e: &Value, ty: &str| e["type"] == ty && e["data"]["client"]["node"] == "b";

    let mut on_b = b.ndjson()?;
    on_b.call(
        "session/subscribe",
        json!({"sessionId": session, "since": 0, "role": "controller"}),
    )?;
    let attached = event_where(&mut watcher, |e| from_b(e, "client_attached"))?;
    assert_eq!(attached["data"]["role"], "controller", "{attached}");
    // b's own client sees itself arrive, through the log it follows.
    event_where(&mut on_b, |e| from_b(e, "client_attached"))?;
    let listed = on_a.call("session/get", json!({"sessionId": session}))?;
    let attached = listed["attachedClients"].as_array().context("attached")?;
    assert!(
        attached
            .iter()
            .any(|c| c["client"]["node"] == "b" && c["role"] == "controller"),
        "{listed}"
    );

    // With b's controller there, the request waits past the policy's timeout for its answer.
    on_a.start_turn(&session, "write it")?;
    let asked = event_where(&mut on_b, |e| e["type"] == "permission_requested")?;
    std::thread::sleep(Duration::from_millis(1500));
    let answer = on_b.call(
        "permission/respond",
        json!({"sessionId": session, "requestId": asked["data"]["requestId"], "decision": "allow_once"}),
    )?;
    assert_eq!(answer["status"], "accepted", "{answer}");
    assert_eq!(answer["resolvedBy"]["node"], "b", "{answer}");
    event_where(&mut watcher, |e| e["type"] == "turn_ended")?;
    assert_eq!(std::fs::read_to_string(&file)?, "approved on b\n");

    // b's client leaves: the owner logs it.
    drop(on_b);
    let detached = event_where(&mut watcher, |e| from_b(e, "client_detached"))?;
    assert_eq!(detached["data"]["role"], "controller", "{detached}");
    fake.no_rejections();
    Ok(())
}

/// Streaming deltas go into log messages of their own, which the log lets expire an hour after
/// `delta_retention`; every other event is kept for good.
#[test]
fn the_shared_log_lets_only_deltas_expire() -> anyhow::Result<()> {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let nats = NatsCluster::start(3)?;
    let (_keep, shared) = shared_dir()?;
    let fake = Fake::start(Script::of([Step::text_deltas(40, |i| format!("word{i} "))]))?;
    let mut env = fake.env();
    env.push(("TETHER_DELTA_RETENTION".into(), "10m".into()));
    let a = nats.node("a", env, &shared, TTL)?;
    let mut c = a.ndjson()?;
    let session = c.new_session_in(&shared)?;
    c.watch(&session)?;
    c.start_turn(&session, "talk")?;
    c.events_until("turn_ended")?;

    let shard = crc32fast::hash(session.as_bytes()) % 4;
    let subject = format!(
        "tether.log.{shard}.{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&session)
    );
    let (mut expiring, mut kept, mut seq) = (0, 0, 0);
    // Each of the session's messages in turn, read through JetStream's API.
    while let Ok(reply) = tether_tests::nats::publish(
        &nats.url(0),
        &format!("$JS.API.STREAM.MSG.GET.TETHER_LOG_{shard}"),
        json!({"seq": seq + 1, "next_by_subj": subject})
            .to_string()
            .as_bytes(),
    ) {
        let message = &reply["message"];
        seq = message["seq"].as_u64().context("seq")?;
        let headers = String::from_utf8(b64.decode(message["hdrs"].as_str().context("hdrs")?)?)?;
        let data = b64.decode(message["data"].as_str().context("data")?)?;
        let mut types = Vec::new();
        for line in data.split(|b| *b == b'\n') {
            let event: Value = serde_json::from_slice(line)?;
            types.push(event["type"].as_str().unwrap_or_default().to_owned());
        }
        let delta = |t: &String| t.ends_with("_delta") || t == "tool_progress";
        if types.iter().all(delta) {
            assert!(headers.contains("Nats-TTL: 4200"), "{headers}");
            expiring += 1;
        } else {
            assert!(
                !types.iter().any(delta),
                "deltas mixed with other events: {types:?}"
            );
            assert!(!headers.contains("Nats-TTL"), "{headers}");
            kept += 1;
        }
    }
    assert!(
        expiring >= 1 && kept >= 3,
        "{expiring} expiring, {kept} kept"
    );
    fake.no_rejections();
    Ok(())
}

#[test]
fn a_paused_owner_is_fenced_and_its_tool_is_gone() -> anyhow::Result<()> {
    let nats = NatsCluster::start(3)?;
    let (_keep, shared) = shared_dir()?;
    let marker = format!("tether-fence-{}", std::process::id());
    let fake = Fake::start(Script::of([
        Step::text("Sleeping.").tool_use(
            "Bash",
            json!({"command": format!("echo started; sleep 60 # {marker}")}),
        ),
        Step::text("Noted."),
    ]))?;
    let mut a = nats.node("a", fake.env(), &shared, TTL)?;
    let b = nats.node("b", fake.env(), &shared, TTL)?;
    let mut on_a = a.ndjson()?;
    let session = on_a.new_session_in(&shared)?;
    on_a.watch(&session)?;
    on_a.start_turn(&session, "sleep")?;
    on_a.events_until("tool_progress")?;
    assert!(running(&marker), "the tool runs");

    let pid = a.child.as_ref().context("a runs")?.id();
    signal(pid, "STOP")?;
    let mut on_b = b.ndjson()?;
    let takeover = replay(&mut on_b, &session, 0);
    signal(pid, "CONT")?;
    let mut events = takeover?;
    while !events.iter().any(|e| e["type"] == "turn_ended") {
        events.push(on_b.next_event()?);
    }
    let b_epoch = events.last().context("events")?["epoch"].as_u64();

    // Back from its pause, a finds its lease gone: it stops, kills the tool, tells its client.
    let deadline = Instant::now() + Duration::from_secs(15);
    let moved = loop {
        let e = on_a.next_event()?;
        if e["type"] == "error" {
            break e;
        }
        if Instant::now() > deadline {
            bail!("a's client was not told");
        }
    };
    assert_eq!(moved["data"]["code"], "session_moved", "{moved}");
    while running(&marker) {
        if Instant::now() > deadline {
            bail!("the fenced node's tool still runs");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Nothing from a's epoch after b's first event; the session goes on on b.
    on_b.start_turn(&session, "and now?")?;
    let next = on_b.events_until("turn_ended")?;
    assert_eq!(
        next.last().context("end")?["data"]["stopReason"],
        "end_turn"
    );
    let mut check = b.ndjson()?;
    let all = replay(&mut check, &session, 0)?;
    let all = logged(&all);
    check_log(&all)?;
    let first_b = all
        .iter()
        .position(|e| e["epoch"].as_u64() == b_epoch)
        .context("b's events")?;
    assert!(
        all[first_b..]
            .iter()
            .all(|e| e["epoch"].as_u64() == b_epoch),
        "a wrote after b took over"
    );
    assert!(a.log().contains("lost the session's lease"), "{}", a.log());
    a.kill9()?;
    fake.no_rejections();
    Ok(())
}

#[test]
fn the_log_streams_leader_killed_mid_turn_loses_nothing() -> anyhow::Result<()> {
    let mut nats = NatsCluster::start(3)?;
    let (_keep, shared) = shared_dir()?;
    let fake = Fake::start(Script::of([
        Step::text("Waiting.").tool_use("Bash", json!({"command": "sleep 3; echo done"})),
        Step::text("All done."),
    ]))?;
    // A lease long enough to ride out the elections (NATS's Raft takes up to about ten
    // seconds to elect when the meta leader goes too).
    let mut a = nats.node("a", fake.env(), &shared, "30s")?;
    let mut c = a.ndjson()?;
    let session = c.new_session_in(&shared)?;
    c.watch(&session)?;
    c.start_turn(&session, "wait")?;
    c.events_until("tool_progress")?;
    // The server leading the session's log stream (sessions are spread over four by a hash
    // of their id).
    let stream = format!("TETHER_LOG_{}", crc32fast::hash(session.as_bytes()) % 4);
    let leader = nats
        .stream_leader(&stream)?
        .context("the stream's leader")?;
    let leader = nats.index_of(&leader).context("the leader's index")?;
    nats.kill(leader);
    let rest = turn_end_within(&mut c, Duration::from_secs(60))
        .with_context(|| format!("the turn did not end: {}", a.log()))?;
    assert_eq!(
        rest.last().context("end")?["data"]["stopReason"],
        "end_turn"
    );
    nats.restart(leader)?;
    nats.wait_ready()?;

    // The whole cluster restarted: everything acknowledged is still there.
    let mut check = a.ndjson()?;
    let before = replay(&mut check, &session, 0)?;
    drop(check);
    a.terminate()?;
    nats.restart_all()?;
    let b = nats.node("b", fake.env(), &shared, "30s")?;
    let mut on_b = b.ndjson()?;
    let after =
        replay(&mut on_b, &session, 0).with_context(|| format!("b did not replay: {}", b.log()))?;
    // The check client's own attach and detach come after what it replayed.
    let (before, after) = (logged(&before), logged(&after));
    assert!(after.len() >= before.len(), "events were lost");
    if let Some(i) = (0..before.len()).find(|i| before[*i] != after[*i]) {
        bail!("#{} differs: {} vs {}", i + 1, before[i], after[i]);
    }
    check_log(&after)?;
    fake.no_rejections();
    Ok(())
}

#[test]
fn a_cluster_that_stops_answering_pauses_the_turn_with_a_notice_and_it_goes_on()
-> anyhow::Result<()> {
    let nats = NatsCluster::start(3)?;
    let (_keep, shared) = shared_dir()?;
    let fake = Fake::start(Script::of([
        Step::text("Waiting.").tool_use("Bash", json!({"command": "sleep 2; echo done"})),
        Step::text("Done after the pause."),
    ]))?;
    let a = nats.node("a", fake.env(), &shared, "30s")?;
    let mut c = a.ndjson()?;
    let session = c.new_session_in(&shared)?;
    c.watch(&session)?;
    c.start_turn(&session, "wait")?;
    c.events_until("tool_call")?;
    // Every server frozen while the tool runs: its result cannot be written.
    for i in 0..nats.len() {
        nats.stop(i)?;
    }
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !seen
        .iter()
        .any(|e: &Value| e["type"] == "notice" && e["seq"].is_null())
    {
        anyhow::ensure!(
            Instant::now() < deadline,
            "no notice while paused: {seen:?}"
        );
        seen.push(c.next_event()?);
    }
    for i in 0..nats.len() {
        nats.cont(i)?;
    }
    let rest = turn_end_within(&mut c, Duration::from_secs(60))
        .with_context(|| format!("the turn did not go on: {}", a.log()))?;
    assert!(
        rest.iter().any(|e| e["type"] == "notice"
            && e["data"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("again"))),
        "told that it goes on: {rest:?}"
    );
    assert_eq!(
        rest.last().context("end")?["data"]["stopReason"],
        "end_turn"
    );
    let mut check = a.ndjson()?;
    check_log(&logged(&replay(&mut check, &session, 0)?))?;
    fake.no_rejections();
    Ok(())
}

#[test]
fn bad_cluster_settings_and_an_unreachable_cluster_are_named() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([]))?;
    // Nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let url = format!("nats://127.0.0.1:{port}");
    let mut env = fake.env();
    env.push(("TETHER_CLUSTER_NATS".into(), url.clone()));
    let daemon = Daemon::prepare(env)?;
    let out = briefly(daemon.command())?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains(&url) && err.contains("cannot reach"), "{err}");
    // `tetherd doctor` says the same.
    let mut doctor = daemon.command();
    doctor.args(["doctor", "--json"]);
    let out = briefly(doctor)?;
    let checks: Value = serde_json::from_slice(&out.stdout)
        .with_context(|| String::from_utf8_lossy(&out.stderr).into_owned())?;
    let cluster = checks
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "cluster"))
        .context("a cluster check")?;
    assert_eq!(cluster["status"], "fail", "{cluster}");
    assert!(
        cluster["detail"].as_str().is_some_and(|d| d.contains(&url)),
        "{cluster}"
    );

    let daemon = Daemon::prepare(fake.env())?;
    daemon.write_config("[cluster]\nnats = [\"nats://127.0.0.1:4222\"]\nlease_ttl = \"10ms\"\n")?;
    let out = briefly(daemon.command())?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("config.toml:3") && err.contains("cluster.lease_ttl"),
        "{err}"
    );
    Ok(())
}

#[test]
fn a_node_that_joins_brings_its_sessions_along() -> anyhow::Result<()> {
    let nats = NatsCluster::start(1)?;
    let (_keep, shared) = shared_dir()?;
    let fake = Fake::start(Script::of([
        Step::text("Before the cluster."),
        Step::text("After, on another node."),
    ]))?;
    // A daemon on its own first, with one conversation.
    let mut alone = Daemon::prepare(fake.env())?;
    alone.trust(&shared)?;
    alone.spawn()?;
    let mut c = alone.ndjson()?;
    let session = c.new_session_in(&shared)?;
    c.watch(&session)?;
    c.start_turn(&session, "hello")?;
    c.events_until("turn_ended")?;
    drop(c);
    let mut check = alone.ndjson()?;
    let before = replay(&mut check, &session, 0)?;
    drop(check);
    alone.terminate()?;
    // The same daemon joins a cluster: its session goes with it, for every node.
    alone.env.extend([
        ("TETHER_CLUSTER_NATS".to_owned(), nats.url(0)),
        ("TETHER_CLUSTER_NODE".to_owned(), "a".to_owned()),
        ("TETHER_CLUSTER_REPLICAS".to_owned(), "1".to_owned()),
        ("TETHER_CLUSTER_LEASE_TTL".to_owned(), TTL.to_owned()),
    ]);
    alone.spawn()?;
    // A second node under the same name is refused: each would take the other's leases.
    let twin = Daemon::prepare(alone.env.clone())?;
    let out = briefly(twin.command())?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("already named a"), "{err}");
    let b = nats.node("b", fake.env(), &shared, TTL)?;
    let mut on_b = b.ndjson()?;
    let listed = on_b.call("session/list", json!({}))?;
    assert_eq!(
        listed["sessions"][0]["sessionId"],
        json!(session),
        "{listed}"
    );
    alone.kill9()?;
    let after = replay(&mut on_b, &session, 0)?;
    let (before, after) = (logged(&before), logged(&after));
    assert!(after.len() >= before.len(), "events were lost: {after:?}");
    assert_eq!(before, after[..before.len()]);
    on_b.start_turn(&session, "still there?")?;
    let next = on_b.events_until("turn_ended")?;
    assert_eq!(
        next.last().context("end")?["data"]["stopReason"],
        "end_turn"
    );
    Ok(())
}

#[test]
fn a_node_of_another_schema_version_refuses_to_join() -> anyhow::Result<()> {
    let nats = NatsCluster::start(1)?;
    let (_keep, shared) = shared_dir()?;
    let fake = Fake::start(Script::of([]))?;
    // The first node sets the cluster's schema version up; then a newer one takes over.
    let first = nats.node("a", fake.env(), &shared, TTL)?;
    drop(first);
    tether_tests::nats::publish(&nats.url(0), "$KV.tether-meta.schema", b"99")?;
    let mut env = fake.env();
    env.push(("TETHER_CLUSTER_NATS".into(), nats.url(0)));
    env.push(("TETHER_CLUSTER_REPLICAS".into(), "1".into()));
    let daemon = Daemon::prepare(env)?;
    let out = briefly(daemon.command())?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("schema version 99") && err.contains("this tetherd has 2"),
        "{err}"
    );
    Ok(())
}

fn signal(pid: u32, sig: &str) -> anyhow::Result<()> {
    let status = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()?;
    if !status.success() {
        bail!("kill -{sig} {pid} failed");
    }
    Ok(())
}

/// Runs a command that should stop by itself, killing it after 30 s.
fn briefly(mut cmd: std::process::Command) -> anyhow::Result<std::process::Output> {
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            child.kill()?;
            bail!("it did not stop: {:?}", child.wait_with_output()?);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(child.wait_with_output()?)
}

/// The tree of the files under `dir`, as git would hash them.
fn tree_of(dir: &std::path::Path) -> anyhow::Result<String> {
    let scratch = tempfile::tempdir()?;
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("--git-dir")
            .arg(scratch.path())
            .arg("--work-tree")
            .arg(dir)
            .args(args)
            .output()
    };
    let init = std::process::Command::new("git")
        .args(["init", "-q", "--bare"])
        .arg(scratch.path())
        .output()?;
    anyhow::ensure!(init.status.success(), "{init:?}");
    let add = git(&["add", "-A"])?;
    anyhow::ensure!(add.status.success(), "{add:?}");
    let tree = git(&["write-tree"])?;
    Ok(String::from_utf8(tree.stdout)?.trim().to_owned())
}

#[test]
fn a_session_taken_over_on_another_host_gets_its_working_tree_back() -> anyhow::Result<()> {
    let nats = NatsCluster::start(3)?;
    let (_keep, base) = shared_dir()?;
    // Each node has its own directory for working trees, as two hosts would.
    let (root_a, root_b) = (base.join("host-a"), base.join("host-b"));
    let project = root_a.join("project");
    std::fs::create_dir_all(&project)?;
    std::fs::create_dir_all(&root_b)?;
    let fake = Fake::start(Script::of([
        Step::text("Writing.").tool_use(
            "Write",
            json!({"file_path": project.join("one.txt"), "content": "one\n"}),
        ),
        Step::text("Now the slow part.").tool_use(
            "Bash",
            json!({"command": "printf half > two.txt; printf k > .env; echo started; sleep 30"}),
        ),
        Step::text("It was cut off."),
        Step::text("Carrying on there."),
    ]))?;
    let env_for = |root: &std::path::Path| {
        let mut env = fake.env();
        env.push((
            "TETHER_CLUSTER_WORKSPACES".to_owned(),
            root.display().to_string(),
        ));
        env
    };
    let mut a = nats.node("a", env_for(&root_a), &base, TTL)?;
    let b = nats.node("b", env_for(&root_b), &base, TTL)?;

    let mut on_a = a.ndjson()?;
    let session = on_a.new_session_in(&project)?;
    on_a.watch(&session)?;
    on_a.start_turn(&session, "write one, then the slow thing")?;
    let seen = on_a.events_until("tool_progress")?;
    let written = seen
        .iter()
        .find(|e| e["type"] == "tool_result")
        .context("the Write's result")?;
    let snapshot = written["data"]["snapshot"].clone();
    assert!(snapshot["tree"].is_string(), "{written}");
    assert_eq!(std::fs::read_to_string(project.join("two.txt"))?, "half");
    a.kill9()?;

    // b takes the session over and rebuilds its working tree under its own directory.
    let mut on_b = b.ndjson()?;
    let asked = Instant::now();
    on_b.subscribe(&session, json!(0))?;
    let mut events = on_b.events_until("replay_complete")?;
    let took = asked.elapsed();
    while !events.iter().any(|e| e["type"] == "turn_ended") {
        events.push(on_b.next_event()?);
    }
    let restored = events
        .iter()
        .find(|e| e["type"] == "workspace_restored")
        .context("workspace_restored")?;
    let there = root_b.join(&session);
    assert_eq!(restored["data"]["node"], "b");
    assert_eq!(restored["data"]["cwd"], json!(there.display().to_string()));
    assert_eq!(restored["data"]["snapshot"], snapshot["commit"]);
    assert_eq!(
        restored["data"]["afterToolCall"],
        written["data"]["toolCallId"]
    );
    // The tree is the one the last committed result named: the cut Bash's file is not there,
    // and no secret travelled.
    assert_eq!(tree_of(&there)?, snapshot["tree"].as_str().context("tree")?);
    assert_eq!(std::fs::read_to_string(there.join("one.txt"))?, "one\n");
    assert!(!there.join("two.txt").exists());
    assert!(!there.join(".env").exists());

    // The session works there now, and the model is told.
    on_b.start_turn(&session, "where are we?")?;
    on_b.events_until("turn_ended")?;
    let asked = fake
        .server
        .message_requests()
        .last()
        .context("a request")?
        .body["messages"]
        .to_string();
    assert!(
        asked.contains(&format!(
            "its workspace was restored on host b in {}",
            there.display()
        )),
        "{asked}"
    );
    let summary = on_b.call("session/get", json!({"sessionId": session}))?;
    assert_eq!(
        summary["cwd"],
        json!(there.display().to_string()),
        "{summary}"
    );
    fake.no_rejections();
    eprintln!("takeover with a restore: b answered after {took:?} (lease {TTL})");
    Ok(())
}
