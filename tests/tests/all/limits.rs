//! Clients that misbehave on purpose — a flood of requests whose replies are never read, on
//! either transport — cannot grow the daemon's memory or slow its other clients.

use anyhow::Context;
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};
use tether_tests::Daemon;

/// How much a flood may grow the daemon: far below the hundreds of MiB an unbounded queue takes.
const GROWTH_KIB: u64 = 48 * 1024;

/// One request line of about 2 KiB, numbered.
fn request(id: u64) -> String {
    let pad = "x".repeat(2000);
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"session/list\",\"params\":{{\"pad\":\"{pad}\"}}}}\n"
    )
}

/// Writes `frame(i)` for i = 0.. until a write blocks for a second (the daemon stopped reading)
/// or `budget` passes; returns the bytes written.
fn flood(stream: &mut UnixStream, frame: impl Fn(u64) -> Vec<u8>, budget: Duration) -> u64 {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let deadline = Instant::now() + budget;
    let mut written = 0u64;
    let mut id = 0;
    while Instant::now() < deadline {
        let bytes = frame(id);
        match stream.write_all(&bytes) {
            Ok(()) => written += bytes.len() as u64,
            Err(_) => break,
        }
        id += 1;
    }
    written
}

/// While the flood stands: the daemon stopped reading the flooder early, grew little, and
/// answers the sentinel at once.
fn held_back(
    name: &str,
    daemon: &Daemon,
    sentinel: &mut tether_tests::Ndjson,
    written: u64,
    before: u64,
) -> anyhow::Result<()> {
    eprintln!(
        "{name}: {} KiB written before the daemon stopped reading",
        written / 1024
    );
    assert!(
        written < 64 * 1024 * 1024,
        "the daemon kept reading a client that reads nothing: {written} bytes"
    );
    grew_little_and_answers(name, daemon, sentinel, before)
}

/// The daemon grew little since `before`, and answers the sentinel at once.
fn grew_little_and_answers(
    name: &str,
    daemon: &Daemon,
    sentinel: &mut tether_tests::Ndjson,
    before: u64,
) -> anyhow::Result<()> {
    let during = daemon.rss_kib()?;
    let waited = sentinel_answers(sentinel)?;
    eprintln!("{name}: RSS {before} -> {during} KiB; sentinel answered in {waited:?}");
    assert!(
        during < before + GROWTH_KIB,
        "RSS grew from {before} to {during} KiB"
    );
    assert!(
        waited < Duration::from_secs(2),
        "sentinel waited {waited:?}"
    );
    Ok(())
}

/// The sentinel is answered at once while the flood stands.
fn sentinel_answers(sentinel: &mut tether_tests::Ndjson) -> anyhow::Result<Duration> {
    let asked = Instant::now();
    sentinel.call("daemon/status", json!({}))?;
    Ok(asked.elapsed())
}

#[test]
fn an_ndjson_client_that_never_reads_is_throttled_and_cannot_grow_the_daemon() -> anyhow::Result<()>
{
    let daemon = Daemon::start()?;
    let mut sentinel = daemon.ndjson()?;
    sentinel.call("daemon/status", json!({}))?;
    let before = daemon.rss_kib()?;

    let mut stream = UnixStream::connect(daemon.socket())?;
    let written = flood(
        &mut stream,
        |id| request(id).into_bytes(),
        Duration::from_secs(20),
    );
    held_back("ndjson flood", &daemon, &mut sentinel, written, before)?;

    // The flooder can still read what it was answered, in order of its requests' ids.
    let mut lines = BufReader::new(stream.try_clone()?);
    stream.set_read_timeout(Some(tether_tests::WAIT))?;
    let mut first = String::new();
    lines.read_line(&mut first)?;
    let first: serde_json::Value = serde_json::from_str(&first).context("a reply line")?;
    assert!(first["id"].is_u64(), "{first}");
    drop(lines);
    drop(stream);
    sentinel_answers(&mut sentinel)?;
    Ok(())
}

/// A masked client text frame, as RFC 6455 requires of clients.
fn ws_frame(payload: &[u8]) -> Vec<u8> {
    let mask = [0x37u8, 0xfa, 0x21, 0x3d];
    let mut frame = vec![0x81u8];
    match payload.len() {
        n if n < 126 => frame.push(0x80 | n as u8),
        n if n < 65536 => {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            frame.push(0x80 | 127);
            frame.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}

#[test]
fn a_websocket_client_that_never_reads_is_throttled_and_cannot_grow_the_daemon()
-> anyhow::Result<()> {
    let daemon = Daemon::start()?;
    let mut sentinel = daemon.ndjson()?;
    sentinel.call("daemon/status", json!({}))?;
    let before = daemon.rss_kib()?;

    let mut stream = UnixStream::connect(daemon.socket())?;
    stream.write_all(
        b"GET / HTTP/1.1\r\nHost: tetherd\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    )?;
    stream.set_read_timeout(Some(tether_tests::WAIT))?;
    let mut head = BufReader::new(stream.try_clone()?);
    let mut status = String::new();
    head.read_line(&mut status)?;
    assert!(status.starts_with("HTTP/1.1 101"), "{status}");
    loop {
        let mut line = String::new();
        head.read_line(&mut line)?;
        if line.trim().is_empty() {
            break;
        }
    }
    let written = flood(
        &mut stream,
        |id| ws_frame(request(id).trim_end().as_bytes()),
        Duration::from_secs(20),
    );
    held_back("websocket flood", &daemon, &mut sentinel, written, before)?;
    drop(head);
    drop(stream);
    sentinel_answers(&mut sentinel)?;
    Ok(())
}

/// A reply that streams `deltas` text deltas.
fn dense_reply(deltas: usize) -> tether_tests::fake_anthropic::Script {
    use tether_tests::fake_anthropic::{Script, Step};
    let mut events = vec![
        json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ];
    for i in 0..deltas {
        events.push(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": format!("w{i} ")}}));
    }
    events.push(json!({"type": "content_block_stop", "index": 0}));
    events.push(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": deltas}}));
    // Paced (about 3.5k events/s) so that a reader on a busy machine keeps up.
    Script::of([Step {
        events: Some(events),
        chunk_delay_ms: Some(1),
        chunks_per_delay: Some(4),
        ..Default::default()
    }])
}

#[test]
fn a_subscriber_that_stops_reading_gets_lagged_and_the_others_see_every_event() -> anyhow::Result<()>
{
    // More events than the session's fan-out ring and the connection's queue hold together.
    const DELTAS: usize = 20_000;
    let fake = tether_tests::Fake::start(dense_reply(DELTAS))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut owner = daemon.ndjson()?;
    let session = owner.new_session_in(&daemon.workdir())?;
    let mut fast = daemon.ndjson()?;
    fast.call(
        "session/subscribe",
        json!({"sessionId": session, "since": "head", "role": "observer"}),
    )?;
    let mut slow = UnixStream::connect(daemon.socket())?;
    let subscribe = json!({"jsonrpc": "2.0", "id": 1, "method": "session/subscribe",
        "params": {"sessionId": session, "since": "head", "role": "observer"}});
    slow.write_all(format!("{subscribe}\n").as_bytes())?;
    // The slow client's subscription is in place before the turn starts.
    let mut slow_lines = BufReader::new(slow.try_clone()?);
    slow.set_read_timeout(Some(tether_tests::WAIT))?;
    let mut line = String::new();
    while !line.contains("\"id\":1") {
        line.clear();
        slow_lines.read_line(&mut line)?;
        anyhow::ensure!(!line.is_empty(), "the slow client's connection closed");
    }

    let started = Instant::now();
    owner.start_turn(&session, "stream")?;
    let mut seen = 0;
    loop {
        let event = fast.next_event()?;
        match event["type"].as_str() {
            Some("text_delta") => seen += 1,
            Some("lagged") => anyhow::bail!("the reading subscriber lagged after {seen} deltas"),
            Some("turn_ended") => break,
            _ => {}
        }
    }
    let fast_took = started.elapsed();
    let rss = daemon.rss_kib()?;
    assert_eq!(seen, DELTAS, "the reading subscriber missed deltas");

    // The slow client, reading at last, finds the events it had room for and then `lagged`.
    let mut deltas_before_lagged = 0;
    let lagged = loop {
        line.clear();
        slow_lines
            .read_line(&mut line)
            .context("the slow client never got `lagged`")?;
        anyhow::ensure!(!line.is_empty(), "the slow client's connection closed");
        let msg: serde_json::Value = serde_json::from_str(&line)?;
        let event = &msg["params"]["result"];
        match event["type"].as_str() {
            Some("text_delta") => deltas_before_lagged += 1,
            Some("lagged") => break event.clone(),
            Some("turn_ended") => anyhow::bail!("the slow client was never lagged"),
            _ => {}
        }
    };
    eprintln!(
        "slow subscriber: the reading one got all {DELTAS} deltas in {fast_took:?}; the stalled one \
         got {deltas_before_lagged} then `lagged` at #{}; daemon RSS {rss} KiB",
        lagged["data"]["lastSeq"]
    );
    assert!(deltas_before_lagged < DELTAS);
    // Re-subscribing from where it stopped catches the slow client up.
    let last = lagged["data"]["lastSeq"].clone();
    let mut again = daemon.ndjson()?;
    again.call(
        "session/subscribe",
        json!({"sessionId": session, "since": last, "role": "observer"}),
    )?;
    let rest = again.events_until("turn_ended")?;
    let caught_up = rest.iter().filter(|e| e["type"] == "text_delta").count();
    assert_eq!(deltas_before_lagged + caught_up, DELTAS);
    Ok(())
}

#[test]
fn large_replies_a_client_never_reads_are_bounded_by_bytes() -> anyhow::Result<()> {
    use tether_tests::fake_anthropic::{Script, Step};
    let fake = tether_tests::Fake::start(Script::of([Step::text("noted")]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut owner = daemon.ndjson()?;
    let session = owner.new_session_in(&daemon.workdir())?;
    // A prompt of 128 KiB: each export of the session is at least that large.
    owner.watch(&session)?;
    owner.start_turn(&session, &"z".repeat(128 * 1024))?;
    owner.events_until("turn_ended")?;
    owner.call("session/export", json!({"sessionId": session}))?;
    let before = daemon.rss_kib()?;

    // 1000 exports (128 MiB of replies) asked for, and not read for a while.
    let stream = UnixStream::connect(daemon.socket())?;
    let mut writer = stream.try_clone()?;
    let asking = session.clone();
    let flooder = std::thread::spawn(move || -> std::io::Result<()> {
        for id in 0..1000 {
            let req = json!({"jsonrpc": "2.0", "id": id, "method": "session/export",
                "params": {"sessionId": asking}});
            writer.write_all(format!("{req}\n").as_bytes())?;
        }
        Ok(())
    });
    // Let the daemon do all it will do with what it read.
    std::thread::sleep(Duration::from_secs(3));
    grew_little_and_answers("large replies", &daemon, &mut owner, before)?;

    // Every reply is still there for the client once it reads.
    let mut lines = BufReader::new(stream.try_clone()?);
    stream.set_read_timeout(Some(tether_tests::WAIT))?;
    let mut ids = std::collections::BTreeSet::new();
    let mut line = String::new();
    while ids.len() < 1000 {
        line.clear();
        lines.read_line(&mut line).context("reading the replies")?;
        anyhow::ensure!(!line.is_empty(), "the connection closed");
        let reply: serde_json::Value = serde_json::from_str(&line)?;
        anyhow::ensure!(
            reply["result"]["content"].is_string(),
            "{}",
            &line[..200.min(line.len())]
        );
        ids.insert(reply["id"].as_u64().context("id")?);
    }
    flooder
        .join()
        .map_err(|_| anyhow::anyhow!("the flooding thread panicked"))??;
    // Once the client has left, the daemon gives the memory back (within a few seconds).
    drop((lines, stream));
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = daemon.rss_kib()?;
    while after > before + 8 * 1024 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        after = daemon.rss_kib()?;
    }
    eprintln!("large replies: RSS {after} KiB once the client read them all and left");
    assert!(
        after <= before + 8 * 1024,
        "RSS stayed at {after} KiB (from {before})"
    );
    Ok(())
}
