//! The wire fuzzed against the real daemon: mutated requests for every method (wrong types,
//! broken JSON, batches, odd ids, deep nesting) over NDJSON, and mutated HTTP upgrade requests.
//! After each input a probe on the same connection must be answered, every line the daemon
//! writes must be a JSON-RPC message, and a sentinel connection must stay fast; at the end the
//! daemon is alive and its memory near where it started.
//!
//! Runs for `TETHER_WIRE_FUZZ_SECS` (default 5); `TETHER_WIRE_FUZZ_SEED` replays a run.

use serde_json::{Value, json};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake, Ndjson};

/// A small deterministic generator (xorshift64*), so a failing run can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Bytes that matter to JSON and HTTP.
const SPECIAL: &[u8] = b"\"\\{}[]:,0-1e.9 \n\r\tnulltruefalse";

/// `seed` with a few random edits.
fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut out = seed.to_vec();
    for _ in 0..1 + rng.below(6) {
        let at = rng.below(out.len() + 1);
        match rng.below(6) {
            0 if at < out.len() => out[at] = rng.next() as u8,
            1 => out.insert(at, SPECIAL[rng.below(SPECIAL.len())]),
            2 if at < out.len() => {
                out.remove(at);
            }
            3 if at < out.len() => {
                let end = (at + 1 + rng.below(12)).min(out.len());
                out.drain(at..end);
            }
            4 => {
                let end = (at + 1 + rng.below(8)).min(out.len());
                let run = out[at.min(out.len())..end].to_vec();
                for _ in 0..rng.below(64) {
                    out.splice(at..at, run.iter().copied());
                }
            }
            _ => {
                // A value of another type where a value was.
                let swap: &[u8] = [
                    &b"null"[..],
                    b"[]",
                    b"{}",
                    b"-1",
                    b"1e999",
                    b"\"\"",
                    b"true",
                ][rng.below(7)];
                out.splice(at..at, swap.iter().copied());
            }
        }
    }
    // One line: the framing is NDJSON.
    out.retain(|b| *b != b'\n');
    out
}

fn requests(session: &str, cwd: &str) -> Vec<Value> {
    let s = json!(session);
    [
        ("initialize", json!({"protocolVersion": 1, "clientInfo": {"name": "f", "version": "0", "kind": "tui"}, "capabilities": {"permissions": true}})),
        ("daemon/status", json!({})),
        ("daemon/config", json!({})),
        ("models/list", json!({})),
        ("session/new", json!({"cwd": cwd, "title": "t", "model": "claude-sonnet-4-5"})),
        ("session/list", json!({"cwd": cwd, "limit": 5})),
        ("session/get", json!({"sessionId": s})),
        ("session/configure", json!({"sessionId": s, "model": "claude-sonnet-4-5", "permissionMode": "default"})),
        ("session/fork", json!({"sessionId": s, "atSeq": 1})),
        ("session/export", json!({"sessionId": s, "format": "jsonl"})),
        ("turn/start", json!({"sessionId": s, "input": [{"type": "text", "text": "hi"}], "mode": "queue", "clientTurnId": "c1"})),
        ("turn/cancel", json!({"sessionId": s})),
        ("permission/respond", json!({"sessionId": s, "requestId": "r1", "decision": "allow_once"})),
        ("permission/list", json!({"sessionId": s})),
        ("permission/rules", json!({"sessionId": s})),
        ("session/commands", json!({"sessionId": s})),
        ("settings/list", json!({"cwd": cwd})),
        ("mcp/list", json!({"cwd": cwd})),
        ("session/subscribe", json!({"sessionId": s, "since": 0, "role": "observer"})),
        ("session/unsubscribe", json!([1])),
    ]
    .into_iter()
    .map(|(method, params)| json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}))
    .collect()
}

/// Sends `input` then a probe, and reads until the probe's reply: every line must be JSON-RPC.
fn exchange(conn: &mut Ndjson, input: &[u8], probe: u64) -> anyhow::Result<()> {
    let mut bytes = input.to_vec();
    bytes.push(b'\n');
    bytes.extend_from_slice(
        format!("{{\"jsonrpc\":\"2.0\",\"id\":\"probe-{probe}\",\"method\":\"daemon/status\"}}\n")
            .as_bytes(),
    );
    conn.send_raw(&bytes)?;
    loop {
        let msg = conn.read()?;
        let one = |m: &Value| m["jsonrpc"] == "2.0";
        let ok = match &msg {
            Value::Array(items) => !items.is_empty() && items.iter().all(one),
            m => one(m),
        };
        anyhow::ensure!(ok, "not a JSON-RPC message: {msg}");
        if msg["id"] == json!(format!("probe-{probe}")) {
            anyhow::ensure!(msg.get("result").is_some(), "the probe failed: {msg}");
            return Ok(());
        }
    }
}

const UPGRADE: &str = "GET / HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

/// Sends a mutated upgrade request and reads whatever comes back until the daemon closes or
/// goes quiet.
fn upgrade(daemon: &Daemon, rng: &mut Rng) -> anyhow::Result<()> {
    let mut input = mutate(rng, UPGRADE.as_bytes());
    input.extend_from_slice(b"\r\n\r\n");
    let mut stream = UnixStream::connect(daemon.socket())?;
    stream.set_read_timeout(Some(Duration::from_millis(300)))?;
    stream.write_all(&input)?;
    let mut buf = [0u8; 4096];
    while let Ok(n) = stream.read(&mut buf) {
        if n == 0 {
            break;
        }
    }
    Ok(())
}

/// A connection whose first line is well-formed, so it is NDJSON whatever comes next (a first
/// byte that is a letter would make it HTTP).
fn ndjson_connection(daemon: &Daemon) -> anyhow::Result<Ndjson> {
    let mut conn = daemon.ndjson()?;
    conn.call("daemon/status", json!({}))?;
    Ok(conn)
}

#[test]
fn mutated_requests_never_break_the_daemon_or_its_replies() -> anyhow::Result<()> {
    let secs: u64 = std::env::var("TETHER_WIRE_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let seed: u64 = std::env::var("TETHER_WIRE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        })
        | 1;
    let fake = Fake::start(Script::of((0..50).map(|_| Step::text("ok"))))?;
    // The inputs create sessions (new, fork); idle ones leave memory soon, so that what stays
    // after the run is what the daemon failed to free.
    let mut env = fake.env();
    env.push(("TETHER_IDLE_UNLOAD_MS".into(), "500".into()));
    let daemon = Daemon::start_with(env)?;
    let mut sentinel = daemon.ndjson()?;
    let session = sentinel.new_session_in(&daemon.workdir())?;
    let cwd = daemon.workdir().display().to_string();
    let seeds: Vec<Vec<u8>> = requests(&session, &cwd)
        .iter()
        .map(|r| r.to_string().into_bytes())
        .collect();
    sentinel.call("daemon/status", json!({}))?;
    let before = daemon.rss_kib()?;

    let mut rng = Rng(seed);
    let mut conn = ndjson_connection(&daemon)?;
    let (mut inputs, mut upgrades, mut reconnects) = (0u64, 0u64, 0u64);
    let mut slowest = Duration::ZERO;
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if rng.below(50) == 0 {
            upgrade(&daemon, &mut rng)?;
            upgrades += 1;
            continue;
        }
        let pick = rng.below(seeds.len());
        let mut input = mutate(&mut rng, &seeds[pick]);
        if rng.below(10) == 0 {
            // A batch of two.
            let pick = rng.below(seeds.len());
            let other = mutate(&mut rng, &seeds[pick]);
            input = [&b"["[..], &input, b",", &other, b"]"].concat();
        }
        // Stopping the daemon is what that method is for.
        if String::from_utf8_lossy(&input).contains("shutdown") {
            continue;
        }
        inputs += 1;
        if let Err(e) = exchange(&mut conn, &input, inputs) {
            anyhow::bail!(
                "input #{inputs} (TETHER_WIRE_FUZZ_SEED={seed}): {e}\n{}",
                String::from_utf8_lossy(&input)
            );
        }
        if inputs % 100 == 0 {
            let asked = Instant::now();
            sentinel.call("daemon/status", json!({}))?;
            slowest = slowest.max(asked.elapsed());
            // Subscriptions the inputs made pile up notifications; start afresh now and then.
            conn = ndjson_connection(&daemon)?;
            reconnects += 1;
        }
    }
    drop(conn);
    // Memory returns near its start once the fuzzing connections are gone.
    let sessions = sentinel.call("session/list", json!({}))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = daemon.rss_kib()?;
    while after > before + 16 * 1024 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        after = daemon.rss_kib()?;
    }
    eprintln!(
        "wire fuzz (seed {seed}): {inputs} mutated requests, {upgrades} mutated upgrades, {reconnects} reconnects in {secs} s, {} sessions made; \
         sentinel slowest {slowest:?}; RSS {before} -> {after} KiB",
        sessions["total"]
    );
    sentinel.call("daemon/status", json!({}))?;
    assert!(
        after <= before + 16 * 1024,
        "RSS stayed at {after} KiB (from {before})"
    );
    Ok(())
}
