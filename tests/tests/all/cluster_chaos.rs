//! The cluster's chaos loop: three nats-servers, three `tetherd` nodes and one session whose
//! turns each run a Bash call that needs permission, while nodes are `kill -9`ed and revived,
//! paused past their lease and resumed, and nats-servers are killed and restarted, at random
//! moments. Turns are started and permission requests answered from random nodes, two nodes
//! at once for each answer. Once everything is back and the session settles, the logs every
//! node replays are checked: the same on every node, seqs dense and unique, epochs never going
//! back (so nothing from a fenced epoch after a takeover), one result per tool call, each
//! permission request resolved at most once and as the answer told "accepted" said (every
//! other answer told the logged decision), no tool run twice, every request the fake API
//! received valid.
//!
//! Runs for `TETHER_CLUSTER_CHAOS_SECS` seconds (40 by default) with choices drawn from
//! `TETHER_CHAOS_SEED` (printed, random by default); prints what it survived.

use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tether_tests::fake_anthropic::{Rule, Script, Step};
use tether_tests::nats::NatsCluster;
use tether_tests::{Daemon, Fake, Ndjson};

/// A node's lease in this loop: short, so takeovers happen often.
const TTL: &str = "2s";
/// How long the driver waits for one call before going on (the node may be paused).
const CALL_PATIENCE: Duration = Duration::from_secs(4);
/// How long the session gets to settle once everything is back.
const SETTLE: Duration = Duration::from_secs(120);

/// One call on a fresh connection to `socket`, given up on after [`CALL_PATIENCE`] (the
/// thread finishes on its own).
fn try_call(socket: &Path, method: &str, params: Value) -> Option<Value> {
    let (tx, rx) = mpsc::channel();
    let socket = socket.to_owned();
    let method = method.to_owned();
    std::thread::spawn(move || {
        let reply = Ndjson::connect(&socket).and_then(|mut c| c.request(&method, params));
        let _ = tx.send(reply);
    });
    rx.recv_timeout(CALL_PATIENCE).ok()?.ok()
}

/// What a tetherd node is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Up,
    Killed,
    Paused,
}

struct Node {
    daemon: Daemon,
    state: State,
}

fn signal(daemon: &Daemon, sig: &str) -> anyhow::Result<()> {
    let pid = daemon.child.as_ref().context("not running")?.id();
    let ok = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()?
        .success();
    anyhow::ensure!(ok, "kill -{sig} {pid} failed");
    Ok(())
}

/// What each answer sent was told, by request: the decision sent and the reply's result.
type Replies = HashMap<String, Vec<(String, Value)>>;

/// Answers every open request of `session` from two nodes at once, one allowing and one
/// denying; what each was told goes into `replies`.
fn answer_open(
    sockets: &[PathBuf],
    session: &str,
    rng: &mut fastrand::Rng,
    replies: &mut Replies,
) -> usize {
    let from = &sockets[rng.usize(..sockets.len())];
    let Some(open) = try_call(from, "permission/list", json!({"sessionId": session})) else {
        return 0;
    };
    let requests: Vec<String> = open["result"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter_map(|r| r["requestId"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    for request in &requests {
        let pair = [
            sockets[rng.usize(..sockets.len())].clone(),
            sockets[rng.usize(..sockets.len())].clone(),
        ];
        let answering: Vec<_> = pair
            .into_iter()
            .zip(["allow_once", "deny"])
            .map(|(socket, decision)| {
                let params = json!({"sessionId": session, "requestId": request,
                                    "decision": decision, "message": "refused by the second"});
                let reply =
                    std::thread::spawn(move || try_call(&socket, "permission/respond", params));
                (decision, reply)
            })
            .collect();
        for (decision, reply) in answering {
            if let Ok(Some(reply)) = reply.join()
                && let Some(result) = reply.get("result")
            {
                replies
                    .entry(request.clone())
                    .or_default()
                    .push((decision.to_owned(), result.clone()));
            }
        }
    }
    requests.len()
}

/// The logged events node `daemon` replays for `session`.
fn replay(daemon: &Daemon, session: &str) -> anyhow::Result<Vec<Value>> {
    let mut c = daemon.ndjson()?;
    c.subscribe(session, json!(0))?;
    let mut events = c.events_until("replay_complete")?;
    events.retain(|e| e["seq"].is_u64());
    Ok(events)
}

/// The invariants one node's log must hold.
fn check(events: &[Value]) -> anyhow::Result<()> {
    let mut epoch = 0;
    let mut calls = HashMap::<String, usize>::new();
    let mut results = HashMap::<String, usize>::new();
    let mut resolved = HashMap::<String, usize>::new();
    for (i, e) in events.iter().enumerate() {
        if e["seq"].as_u64() != Some(i as u64 + 1) {
            bail!("seqs are not dense and unique at #{}: {e}", i + 1);
        }
        let this = e["epoch"].as_u64().context("epoch")?;
        if this < epoch {
            bail!("the epoch went back from {epoch} at {e}");
        }
        epoch = this;
        let id = |field: &str| e["data"][field].as_str().unwrap_or_default().to_owned();
        match e["type"].as_str() {
            Some("tool_call") => *calls.entry(id("toolCallId")).or_default() += 1,
            Some("tool_result") => *results.entry(id("toolCallId")).or_default() += 1,
            Some("permission_resolved") => *resolved.entry(id("requestId")).or_default() += 1,
            _ => {}
        }
    }
    if let Some((id, n)) = results.iter().find(|(_, n)| **n != 1) {
        bail!("tool call {id} has {n} results");
    }
    if let Some(id) = calls.keys().find(|id| !results.contains_key(*id)) {
        let at = events
            .iter()
            .position(|e| e["type"] == "tool_call" && e["data"]["toolCallId"] == id.as_str())
            .unwrap_or(0);
        let after: Vec<String> = events[at..]
            .iter()
            .take(30)
            .map(|e| {
                format!("#{} e{} {} {}", e["seq"], e["epoch"], e["type"], e["data"])
                    .chars()
                    .take(160)
                    .collect()
            })
            .collect();
        bail!("tool call {id} has no result:\n{}", after.join("\n"));
    }
    if let Some((id, n)) = resolved.iter().find(|(_, n)| **n > 1) {
        bail!("permission request {id} was resolved {n} times");
    }
    Ok(())
}

/// What the answers were told agrees with the log: at most one was accepted per request, and
/// the logged decision is the accepted one's; every other was told the logged decision.
fn check_replies(events: &[Value], replies: &Replies) -> anyhow::Result<()> {
    for e in events.iter().filter(|e| e["type"] == "permission_resolved") {
        let request = e["data"]["requestId"].as_str().unwrap_or_default();
        let logged = e["data"]["decision"].as_str().unwrap_or_default();
        let told = replies.get(request).map(Vec::as_slice).unwrap_or_default();
        let accepted: Vec<&(String, Value)> = told
            .iter()
            .filter(|(_, r)| r["status"] == "accepted")
            .collect();
        if accepted.len() > 1 {
            bail!("request {request}: two answers were accepted: {told:?}");
        }
        if let Some((sent, _)) = accepted.first()
            && sent != logged
        {
            bail!("request {request}: {sent} was accepted, {logged} was logged: {e}");
        }
        if let Some((_, r)) = told
            .iter()
            .find(|(_, r)| r["status"] == "already_resolved" && r["decision"] != logged)
        {
            bail!("request {request}: told {r} but {logged} was logged");
        }
    }
    Ok(())
}

#[test]
fn cluster_chaos_keeps_every_log_whole_and_the_same_everywhere() -> anyhow::Result<()> {
    let secs: u64 = std::env::var("TETHER_CLUSTER_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let seed: u64 = std::env::var("TETHER_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    eprintln!("cluster chaos: {secs} s, TETHER_CHAOS_SEED={seed}");
    let mut rng = fastrand::Rng::with_seed(seed);

    let mut nats = NatsCluster::start(3)?;
    let keep = tempfile::Builder::new().prefix("tether-chaos").tempdir()?;
    let shared = keep.path().canonicalize()?;
    let runs = shared.join("runs.log");
    let mut script = Script::of(Vec::<Step>::new()).titling("chaos");
    script.rules.push(Rule {
        last_user_matches: None,
        has_tool_result: Some(true),
        times: None,
        step: Step::text("Ran it."),
    });
    let fake = Fake::start(script)?;
    let mut nodes = Vec::new();
    for name in ["a", "b", "c"] {
        nodes.push(Node {
            daemon: nats.node(name, fake.env(), &shared, TTL)?,
            state: State::Up,
        });
    }
    let sockets: Vec<PathBuf> = nodes.iter().map(|n| n.daemon.socket()).collect();
    let session = nodes[0]
        .daemon
        .ndjson()?
        .new_session_with_mode(&shared, "default")?;

    let mut turns = 0u64;
    let mut answered = 0usize;
    let mut replies = Replies::new();
    let (mut kills, mut pauses, mut server_kills) = (0, 0, 0);
    let mut server_down: Option<(usize, Instant)> = None;
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        // Bring back what has been down long enough.
        for node in &mut nodes {
            match node.state {
                State::Killed if rng.u8(..4) == 0 => {
                    node.daemon.spawn().with_context(|| {
                        format!("a node did not come back: {}", node.daemon.log())
                    })?;
                    node.state = State::Up;
                }
                State::Paused if rng.u8(..2) == 0 => {
                    signal(&node.daemon, "CONT")?;
                    node.state = State::Up;
                }
                _ => {}
            }
        }
        if let Some((i, since)) = server_down
            && since.elapsed() > Duration::from_secs(2)
        {
            nats.restart(i)?;
            server_down = None;
        }
        let up: Vec<usize> = (0..nodes.len())
            .filter(|i| nodes[*i].state == State::Up)
            .collect();
        let roll = rng.u8(..100);
        match roll {
            0..35 if !up.is_empty() => {
                turns += 1;
                fake.server.push(Step::text(format!("Running {turns}.")).tool_use(
                    "Bash",
                    json!({"command": format!("echo run-{turns} >> {}; sleep 0.3", runs.display())}),
                ));
                let node = up[rng.usize(..up.len())];
                try_call(
                    &sockets[node],
                    "turn/start",
                    json!({"sessionId": session, "mode": "queue",
                           "input": [{"type": "text", "text": format!("turn {turns}")}]}),
                );
            }
            35..65 if !up.is_empty() => {
                let up_sockets: Vec<PathBuf> = up.iter().map(|i| sockets[*i].clone()).collect();
                answered += answer_open(&up_sockets, &session, &mut rng, &mut replies);
            }
            65..80 if up.len() > 1 => {
                let i = up[rng.usize(..up.len())];
                nodes[i].daemon.kill9()?;
                nodes[i].state = State::Killed;
                kills += 1;
            }
            80..90 if up.len() > 1 => {
                let i = up[rng.usize(..up.len())];
                signal(&nodes[i].daemon, "STOP")?;
                nodes[i].state = State::Paused;
                pauses += 1;
            }
            90.. if server_down.is_none() => {
                let i = rng.usize(..nats.len());
                nats.kill(i);
                server_down = Some((i, Instant::now()));
                server_kills += 1;
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(200 + rng.u64(..500)));
    }

    // Everything back; the session settles with every request answered.
    if let Some((i, _)) = server_down {
        nats.restart(i)?;
    }
    for node in &mut nodes {
        match node.state {
            State::Killed => node
                .daemon
                .spawn()
                .with_context(|| format!("a node did not come back: {}", node.daemon.log()))?,
            State::Paused => signal(&node.daemon, "CONT")?,
            State::Up => {}
        }
        node.state = State::Up;
    }
    let settled_by = Instant::now() + SETTLE;
    loop {
        answered += answer_open(&sockets, &session, &mut rng, &mut replies);
        let snapshot = try_call(&sockets[0], "session/get", json!({"sessionId": session}));
        let settled = snapshot.as_ref().is_some_and(|s| {
            s["result"]["status"] == "idle"
                && s["result"]["pendingPermissions"]
                    .as_array()
                    .is_some_and(Vec::is_empty)
        });
        if settled {
            break;
        }
        if Instant::now() > settled_by {
            bail!(
                "the session did not settle: {snapshot:?}\n{}",
                nodes
                    .iter()
                    .map(|n| n.daemon.log())
                    .collect::<Vec<_>>()
                    .join("\n====\n")
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }

    // Every node replays the same log, whole (once each has copied all of it), and it holds
    // every invariant.
    let same_by = Instant::now() + Duration::from_secs(20);
    let logs = loop {
        let mut logs = Vec::new();
        for node in &nodes {
            logs.push(replay(&node.daemon, &session)?);
        }
        // A replay's own attach and detach come after it: compare what all of them hold.
        let heads: Vec<usize> = logs.iter().map(Vec::len).collect();
        let n = heads.iter().copied().min().unwrap_or(0);
        let whole = logs.iter().all(|l| {
            l[n..]
                .iter()
                .all(|e| e["type"] == "client_attached" || e["type"] == "client_detached")
        });
        if whole || Instant::now() > same_by {
            break logs;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    for (name, log) in ["a", "b", "c"].iter().zip(&logs) {
        check(log).with_context(|| format!("in the log node {name} replays"))?;
    }
    let n = logs.iter().map(Vec::len).min().unwrap_or(0);
    for (i, log) in logs.iter().enumerate().skip(1) {
        if let Some(k) = (0..n).find(|k| log[*k] != logs[0][*k]) {
            bail!(
                "node {i} differs at #{}: {} vs {}",
                k + 1,
                log[k],
                logs[0][k]
            );
        }
        if let Some(e) = log[n..]
            .iter()
            .chain(&logs[0][n..])
            .find(|e| e["type"] != "client_attached" && e["type"] != "client_detached")
        {
            bail!("node {i}'s log and node 0's do not end alike: {e}");
        }
    }
    check_replies(&logs[0], &replies)?;
    let ran = std::fs::read_to_string(&runs).unwrap_or_default();
    let mut times = HashMap::<&str, usize>::new();
    for line in ran.lines() {
        *times.entry(line).or_default() += 1;
    }
    if let Some((run, n)) = times.iter().find(|(_, n)| **n > 1) {
        bail!("{run} ran {n} times");
    }
    fake.no_rejections();
    let results = logs[0]
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .count();
    let ended = logs[0].iter().filter(|e| e["type"] == "turn_ended").count();
    let epochs = logs[0]
        .iter()
        .filter_map(|e| e["epoch"].as_u64())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    eprintln!(
        "cluster chaos survived: {kills} node kills, {pauses} pauses past the lease, {server_kills} nats-server kills; {turns} turns asked, {ended} ended, {results} tool results, {} runs, {answered} requests answered, {epochs} owners, {} events",
        times.len(),
        logs[0].len()
    );
    Ok(())
}
