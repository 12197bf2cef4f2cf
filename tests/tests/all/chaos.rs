//! The chaos loop: multi-tool turns in two sessions watched by two clients, while the daemon is
//! `kill -9`ed and clients are cut off at random moments. After every daemon restart it checks
//! that every event a client was ever shown is still in the log with the same seq and payload,
//! that seqs are dense, and that a new turn completes in every session; at the end, that every
//! request the fake API received passed its validation.
//!
//! Runs for `TETHER_CHAOS_SECS` seconds (45 by default) with timings drawn from
//! `TETHER_CHAOS_SEED` (printed, random by default); prints what it survived.

use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tether_tests::fake_anthropic::{Rule, Script, Step};
use tether_tests::{Daemon, Fake, Ndjson};

/// What the clients were shown, per session: seq → event.
type Seen = HashMap<String, BTreeMap<u64, Value>>;

/// State shared by the driver and the client threads.
struct Shared {
    socket: PathBuf,
    sessions: Vec<String>,
    seen: Mutex<Seen>,
    problems: Mutex<Vec<String>>,
    /// Clients stay disconnected while set (the daemon is down or being checked).
    paused: AtomicBool,
    stop: AtomicBool,
    events: AtomicU64,
}

impl Shared {
    fn problem(&self, p: String) {
        self.problems
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(p);
    }
}

/// Asks (over `stream`) to allow a permission request.
fn allow(stream: &mut UnixStream, session: &str, request: &Value) {
    let req = json!({"jsonrpc": "2.0", "id": 1000, "method": "permission/respond",
        "params": {"sessionId": session, "requestId": request, "decision": "allow_once"}});
    let _ = stream.write_all(format!("{req}\n").as_bytes());
}

/// One watching client: subscribes to every session `since` the last seq it saw, checks that
/// seqs arrive dense and in order, records what it was shown, and reconnects whenever its
/// connection ends (or `cut` tells it to drop it, as a killed client would). The one that
/// `answers` allows every permission request, also those still pending when it reconnects.
fn client(shared: Arc<Shared>, name: &'static str, cut: Arc<AtomicBool>, answers: bool) {
    let mut last: HashMap<String, u64> = HashMap::new();
    while !shared.stop.load(Ordering::SeqCst) {
        if shared.paused.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        let Ok(mut stream) = UnixStream::connect(&shared.socket) else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        if stream
            .set_read_timeout(Some(Duration::from_millis(50)))
            .is_err()
        {
            continue;
        }
        for (i, s) in shared.sessions.iter().enumerate() {
            let since = last.get(s).copied().unwrap_or(0);
            let req = json!({"jsonrpc": "2.0", "id": i, "method": "session/subscribe",
                "params": {"sessionId": s, "since": since}});
            let _ = stream.write_all(format!("{req}\n").as_bytes());
            if answers {
                let list = json!({"jsonrpc": "2.0", "id": 2000 + i, "method": "permission/list",
                    "params": {"sessionId": s}});
                let _ = stream.write_all(format!("{list}\n").as_bytes());
            }
        }
        let Ok(reader) = stream.try_clone() else {
            continue;
        };
        let mut reader = BufReader::new(reader);
        let mut line = String::new();
        loop {
            if shared.stop.load(Ordering::SeqCst) || cut.swap(false, Ordering::SeqCst) {
                break;
            }
            match reader.read_line(&mut line) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    continue;
                }
                Err(_) => break,
            }
            let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                shared.problem(format!("{name}: not JSON: {line}"));
                break;
            };
            line.clear();
            if msg["id"] == 1000 {
                continue; // a permission answer's reply (accepted or already resolved)
            }
            if msg.get("error").is_some() {
                break; // e.g. the daemon is shutting down; reconnect
            }
            if let (Some(pending), Some(id)) = (msg["result"].as_array(), msg["id"].as_u64()) {
                let session = id
                    .checked_sub(2000)
                    .and_then(|i| shared.sessions.get(i as usize));
                for (p, s) in pending.iter().zip(std::iter::repeat(session)) {
                    if let Some(s) = s {
                        allow(&mut stream, s, &p["requestId"]);
                    }
                }
                continue;
            }
            let event = &msg["params"]["result"];
            if answers && event["type"] == "permission_requested" {
                let session = event["sessionId"].as_str().unwrap_or_default();
                allow(&mut stream, session, &event["data"]["requestId"]);
            }
            if event["type"] == "lagged" {
                break;
            }
            let (Some(session), Some(seq)) = (event["sessionId"].as_str(), event["seq"].as_u64())
            else {
                continue;
            };
            let prev = last.get(session).copied().unwrap_or(0);
            if seq != prev + 1 {
                shared.problem(format!(
                    "{name}: session {session} went from #{prev} to #{seq} (a gap or a duplicate)"
                ));
            }
            last.insert(session.to_owned(), seq);
            let mut seen = shared.seen.lock().unwrap_or_else(|e| e.into_inner());
            let log = seen.entry(session.to_owned()).or_default();
            match log.get(&seq) {
                Some(earlier) if earlier != event => shared.problem(format!(
                    "{name}: #{seq} of {session} differs from what another client saw:\n{earlier}\n{event}"
                )),
                Some(_) => {}
                None => {
                    log.insert(seq, event.clone());
                    shared.events.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// Reads a session's whole log through a fresh subscription.
fn read_log(daemon: &Daemon, session: &str) -> anyhow::Result<BTreeMap<u64, Value>> {
    read_log_after(daemon, session, 0)
}

/// The session's logged events after `since`.
fn read_log_after(
    daemon: &Daemon,
    session: &str,
    since: u64,
) -> anyhow::Result<BTreeMap<u64, Value>> {
    let mut c = daemon.ndjson()?;
    c.subscribe(session, json!(since))?;
    let mut log = BTreeMap::new();
    for e in c.events_until("replay_complete")? {
        if let Some(seq) = e["seq"].as_u64() {
            log.insert(seq, e);
        }
    }
    Ok(log)
}

/// After a restart: every shown event is in the log, identical; the log's seqs are dense.
/// `checked` holds, per session, the seq up to which an earlier call checked the log: this call
/// reads the log from there on (that event included, so the two reads join up), which keeps a
/// long run linear. Returns how many shown events were checked.
fn verify(
    daemon: &Daemon,
    shared: &Shared,
    checked: &mut BTreeMap<String, u64>,
) -> anyhow::Result<usize> {
    let mut count = 0;
    for session in &shared.sessions {
        let start = checked.get(session).copied().unwrap_or(0).max(1);
        let log = read_log_after(daemon, session, start - 1)?;
        let dense = log.keys().copied().eq(start..start + log.len() as u64);
        if !dense {
            bail!(
                "the log of {session} has gaps after #{start}: {:?}",
                log.keys().collect::<Vec<_>>()
            );
        }
        let seen = shared.seen.lock().unwrap_or_else(|e| e.into_inner());
        for (seq, shown) in seen.get(session).into_iter().flat_map(|s| s.range(start..)) {
            match log.get(seq) {
                Some(kept) if kept == shown => count += 1,
                Some(kept) => bail!("#{seq} of {session} changed:\nshown {shown}\nkept  {kept}"),
                None => bail!("#{seq} of {session} was shown to a client and then lost: {shown}"),
            }
        }
        if let Some(last) = log.keys().next_back() {
            checked.insert(session.clone(), *last);
        }
    }
    Ok(count)
}

/// Checks (and forgets, so a long run's memory stays flat) every request the fake API received
/// since the last call: each must have passed its validation. Returns how many there were.
fn check_requests(fake: &Fake) -> anyhow::Result<usize> {
    let requests = fake.server.take_requests();
    for r in &requests {
        if let Some(why) = &r.rejected {
            bail!("the fake API rejected a request: {why}\n{}", r.body);
        }
    }
    Ok(requests.len())
}

/// Starts a turn in every session that is idle (a busy one is left alone).
fn start_turns(daemon: &Daemon, sessions: &[String], round: u64) {
    let Ok(mut c) = daemon.ndjson() else { return };
    for s in sessions {
        let _ = c.request(
            "turn/start",
            json!({"sessionId": s, "input": [{"type": "text", "text": format!("round {round}: check the file")}], "mode": "reject"}),
        );
    }
}

/// Starts a turn in every session and waits until each has ended with `end_turn`.
fn complete_a_turn_everywhere(daemon: &Daemon, sessions: &[String]) -> anyhow::Result<()> {
    let mut c: Ndjson = daemon.ndjson()?;
    let mut pending = HashMap::new();
    for s in sessions {
        c.watch(s)?;
        // A turn recovered at start-up has ended already; queue behind anything else.
        let r = c.call(
            "turn/start",
            json!({"sessionId": s, "input": [{"type": "text", "text": "after the restart: check the file"}], "mode": "queue"}),
        )?;
        pending.insert(
            r["turnId"].as_str().context("turnId")?.to_owned(),
            s.clone(),
        );
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while !pending.is_empty() {
        if Instant::now() > deadline {
            bail!("turns did not complete after a restart: {pending:?}");
        }
        let e = c.next_event()?;
        if e["type"] == "turn_ended"
            && let Some(turn) = e["turnId"].as_str()
            && pending.remove(turn).is_some()
        {
            let reason = &e["data"]["stopReason"];
            if reason != "end_turn" {
                bail!("a turn after a restart ended with {reason}: {e}");
            }
        }
    }
    Ok(())
}

fn slow(step: Step) -> Step {
    Step {
        chunk_delay_ms: Some(15),
        ..step
    }
}

#[test]
fn chaos_kills_lose_nothing_any_client_was_shown() -> anyhow::Result<()> {
    let secs: u64 = std::env::var("TETHER_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(45);
    let script = Script {
        responses: Vec::new(),
        simulate_cache: false,
        rules: vec![
            Rule {
                last_user_matches: None,
                has_tool_result: Some(true),
                times: None,
                step: slow(Step::text(
                    "Both tools answered: the command printed chaos and the file says steady.",
                )),
            },
            Rule {
                last_user_matches: None,
                has_tool_result: Some(false),
                times: None,
                step: slow(
                    Step::text("Let me look.")
                        .tool_use("Bash", json!({"command": "echo chaos; sleep 0.1"}))
                        .tool_use("Read", json!({"file_path": "chaos.txt"})),
                ),
            },
        ],
    };
    let fake = Fake::start(script)?;
    let mut daemon = Daemon::start_with(fake.env())?;
    std::fs::write(daemon.workdir().join("chaos.txt"), "steady\n")?;
    let mut c = daemon.ndjson()?;
    // Two sessions run tools freely; the third asks, and client A answers.
    let sessions = vec![
        c.new_session_in(&daemon.workdir())?,
        c.new_session_in(&daemon.workdir())?,
        c.new_session_with_mode(&daemon.workdir(), "default")?,
    ];
    drop(c);
    let shared = Arc::new(Shared {
        socket: daemon.socket(),
        sessions: sessions.clone(),
        seen: Mutex::default(),
        problems: Mutex::default(),
        paused: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        events: AtomicU64::new(0),
    });
    let cuts = [
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    ];
    let threads: Vec<_> = ["client A", "client B"]
        .into_iter()
        .zip(cuts.iter().cloned())
        .map(|(name, cut)| {
            let shared = shared.clone();
            let answers = name == "client A";
            std::thread::spawn(move || client(shared, name, cut, answers))
        })
        .collect();

    let seed: u64 = std::env::var("TETHER_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    eprintln!("chaos: TETHER_CHAOS_SEED={seed}");
    let deadline = Instant::now() + Duration::from_secs(secs);
    let (mut daemon_kills, mut client_kills, mut verified) = (0u64, 0u64, 0usize);
    let mut round = 0;
    let mut checked = BTreeMap::new();
    let mut timings = Timings::default();
    let mut requests = 0;
    let outcome: anyhow::Result<()> = (|| {
        while Instant::now() < deadline {
            round += 1;
            start_turns(&daemon, &sessions, round);
            std::thread::sleep(Duration::from_millis(pause_ms(seed, round, 900)));
            if pause_ms(seed, round, 3) == 0 {
                cuts[(round % 2) as usize].store(true, Ordering::SeqCst);
                client_kills += 1;
                continue;
            }
            shared.paused.store(true, Ordering::SeqCst);
            daemon.kill9()?;
            daemon_kills += 1;
            // Let the clients notice the dead socket before the new daemon listens.
            std::thread::sleep(Duration::from_millis(80));
            let t = Instant::now();
            daemon.spawn()?;
            let spawned = t.elapsed();
            verified += verify(&daemon, &shared, &mut checked)?;
            requests += check_requests(&fake)?;
            let checked_at = t.elapsed();
            shared.paused.store(false, Ordering::SeqCst);
            complete_a_turn_everywhere(&daemon, &sessions)?;
            timings.add(spawned, checked_at - spawned, t.elapsed() - checked_at);
            if daemon_kills % 50 == 0 {
                eprintln!("chaos: {daemon_kills} kills, round {round}: {timings}");
                timings = Timings::default();
            }
        }
        // A final turn everywhere (client A still answers), then stop the clients.
        complete_a_turn_everywhere(&daemon, &sessions)
    })();
    shared.stop.store(true, Ordering::SeqCst);
    for t in threads {
        let _ = t.join();
    }
    outcome.with_context(|| {
        format!("after {daemon_kills} daemon kills in round {round} (TETHER_CHAOS_SEED={seed})")
    })?;
    // The last check reads every log whole.
    verified += verify(&daemon, &shared, &mut BTreeMap::new())?;
    let mut recovered = 0;
    for s in &sessions {
        recovered += read_log(&daemon, s)?
            .values()
            .filter(|e| e["type"] == "turn_recovered")
            .count();
    }
    let problems = shared.problems.lock().unwrap_or_else(|e| e.into_inner());
    assert!(problems.is_empty(), "seed {seed}: {problems:#?}");
    requests += check_requests(&fake)?;
    println!(
        "chaos: {secs} s, {daemon_kills} daemon kills ({recovered} turns cut off and recovered) and \
         {client_kills} client kills survived, {} events shown to clients, {verified} checks against the log \
         after restarts, {requests} API requests valid, 0 lost",
        shared.events.load(Ordering::Relaxed),
    );
    assert!(
        daemon_kills > 0,
        "the loop must kill the daemon at least once"
    );
    Ok(())
}

/// How long the phases after a kill took, summed over some kills (printed as means and maxima,
/// so a run shows whether restarts slow down as the sessions grow).
#[derive(Default)]
struct Timings {
    kills: u32,
    spawn: (Duration, Duration),
    verify: (Duration, Duration),
    turn: (Duration, Duration),
}

impl Timings {
    fn add(&mut self, spawn: Duration, verify: Duration, turn: Duration) {
        self.kills += 1;
        for (slot, d) in [
            (&mut self.spawn, spawn),
            (&mut self.verify, verify),
            (&mut self.turn, turn),
        ] {
            slot.0 += d;
            slot.1 = slot.1.max(d);
        }
    }
}

impl std::fmt::Display for Timings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.kills.max(1);
        let mut sep = "";
        for (name, (sum, max)) in [
            ("restart", self.spawn),
            ("check", self.verify),
            ("turn", self.turn),
        ] {
            write!(
                f,
                "{sep}{name} {:.0} ms mean, {:.0} max",
                (sum / n).as_secs_f64() * 1e3,
                max.as_secs_f64() * 1e3
            )?;
            sep = "; ";
        }
        Ok(())
    }
}

/// A number below `max` for this round, drawn from the seed (splitmix64), so a failing run can
/// be replayed with the same choices.
fn pause_ms(seed: u64, round: u64, max: u64) -> u64 {
    let mut x = (seed ^ round).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 29;
    x % max
}
