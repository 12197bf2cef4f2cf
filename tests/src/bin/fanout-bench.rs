//! `fanout-bench [--clients N] [--deltas N]`: starts its own fake API and a `tetherd` (from the
//! build directory), attaches N raw NDJSON clients to one session, runs a turn whose reply
//! streams N text deltas, and prints the events/s each client received and the spread of
//! arrival (first to last client) per event. A client that falls too far behind gets `lagged`
//! and subscribes again from its last seq, as `tether` does; the catch-ups are counted.
//! Asserts nothing.

use anyhow::Context;
use clap::Parser;
use serde_json::{Value, json};
use std::time::Instant;
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake, Ndjson};

/// Fan-out figures.
#[derive(Debug, Parser)]
struct Args {
    /// Subscribed clients.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Text deltas in the reply.
    #[arg(long, default_value_t = 20_000)]
    deltas: usize,
}

/// What one client saw: deltas delivered, seconds until the turn ended, arrival times.
struct ClientRun {
    delivered: usize,
    /// How often it lagged and caught up from the log.
    caught_up: usize,
    elapsed: f64,
    arrivals: Vec<Instant>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let fake = Fake::start(Script::of([Step::text_deltas(args.deltas, |i| {
        format!("w{i} ")
    })]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut owner = daemon.ndjson()?;
    let session = owner.new_session_in(&daemon.workdir())?;
    let mut clients: Vec<Ndjson> = Vec::new();
    for _ in 0..args.clients {
        let mut c = daemon.ndjson()?;
        c.call(
            "session/subscribe",
            json!({"sessionId": session, "since": "head", "role": "observer"}),
        )?;
        clients.push(c);
    }
    let start = Instant::now();
    owner.start_turn(&session, "stream")?;
    let handles: Vec<_> = clients
        .into_iter()
        .map(|mut c| {
            let session = session.clone();
            std::thread::spawn(move || -> anyhow::Result<ClientRun> {
                let mut n = 0;
                let mut caught_up = 0;
                let mut last_seq = None;
                let mut arrivals = Vec::new();
                loop {
                    let e: Value = c.next_event()?;
                    if let Some(seq) = e["seq"].as_u64() {
                        if last_seq.is_some_and(|last| seq <= last) {
                            continue;
                        }
                        last_seq = Some(seq);
                    }
                    if e["type"] == "text_delta" {
                        n += 1;
                        arrivals.push(Instant::now());
                    }
                    if e["type"] == "lagged" {
                        let since = last_seq.context("lagged before any event")?;
                        c.call(
                            "session/subscribe",
                            json!({"sessionId": session, "since": since, "role": "observer"}),
                        )?;
                        caught_up += 1;
                    }
                    if e["type"] == "turn_ended" {
                        return Ok(ClientRun {
                            delivered: n,
                            caught_up,
                            elapsed: start.elapsed().as_secs_f64(),
                            arrivals,
                        });
                    }
                }
            })
        })
        .collect();
    let mut results = Vec::new();
    for h in handles {
        results.push(
            h.join()
                .map_err(|_| anyhow::anyhow!("client thread panicked"))??,
        );
    }
    let total: usize = results.iter().map(|r| r.delivered).sum();
    let caught_up: usize = results.iter().map(|r| r.caught_up).sum();
    let slowest = results.iter().map(|r| r.elapsed).fold(0.0, f64::max);
    let mut spreads: Vec<f64> = Vec::new();
    for i in 0..results.first().map(|r| r.arrivals.len()).unwrap_or(0) {
        let times: Vec<Instant> = results
            .iter()
            .filter_map(|r| r.arrivals.get(i).copied())
            .collect();
        if let (Some(min), Some(max)) = (times.iter().min(), times.iter().max()) {
            spreads.push(max.duration_since(*min).as_secs_f64() * 1e6);
        }
    }
    spreads.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        spreads
            .get(((spreads.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or(0.0)
    };
    println!(
        "fanout: {} clients × {} deltas = {total} events delivered in {:.3} s → {:.0} events/s; per event, first-to-last client spread median {:.0} µs, p99 {:.0} µs; {caught_up} catch-ups after `lagged`",
        args.clients,
        args.deltas,
        slowest,
        total as f64 / slowest,
        pct(0.5),
        pct(0.99)
    );
    Ok(())
}
