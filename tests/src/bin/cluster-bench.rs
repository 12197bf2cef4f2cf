//! `cluster-bench`: what cluster mode costs and how fast it fails over, against one machine's
//! daemon. Starts a three-server JetStream cluster on loopback (the nats-server `tests/run`
//! caches), the fake API, and `tetherd` nodes (binaries from the build directory); prints:
//!
//! - append latency: `turn/start` → its `turn_started` event (one commit: publish, ack,
//!   local write, broadcast), p50/p99 over `--turns` turns, on sled alone and on R3;
//! - events per second: a reply of `--deltas` text deltas streamed to a subscriber;
//! - `tether -p "say hi"`: wall time through a sled daemon and a cluster node (median);
//! - failover: owner `kill -9`ed → the first event a client on another node gets from the new
//!   owner, over `--failovers` runs, with the lease's lifetime (`--ttl`) that bounds it.
//!
//! Build first: `cargo build --release --workspace --bins`, then run
//! `target/release/cluster-bench`. Asserts nothing.

use anyhow::Context;
use clap::Parser;
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};
use tether_tests::fake_anthropic::{Rule, Script, Step};
use tether_tests::nats::NatsCluster;
use tether_tests::{Daemon, Fake};

/// Costs of cluster mode.
#[derive(Debug, Parser)]
struct Args {
    /// Turns timed for the append latency.
    #[arg(long, default_value_t = 200)]
    turns: usize,
    /// Text deltas of the streamed reply.
    #[arg(long, default_value_t = 5000)]
    deltas: usize,
    /// `tether -p` runs of each kind.
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Failovers timed.
    #[arg(long, default_value_t = 20)]
    failovers: usize,
    /// The lease's lifetime.
    #[arg(long, default_value = "2s")]
    ttl: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let nats = NatsCluster::start(3)?;
    let shared = tempfile::Builder::new().prefix("cluster-bench").tempdir()?;
    let shared = shared.path().canonicalize()?;
    let script = Script {
        rules: vec![
            Rule {
                last_user_matches: Some("^stream$".into()),
                has_tool_result: None,
                times: None,
                step: Step::text_deltas(args.deltas, |i| format!("w{i} ")),
            },
            Rule {
                last_user_matches: Some(".".into()),
                has_tool_result: None,
                times: None,
                step: Step::text("hi"),
            },
        ],
        ..Script::default()
    };
    let fake = Fake::start(script)?;

    let mut local = Daemon::prepare(fake.env())?;
    local.trust(&shared)?;
    local.spawn()?;
    let node_a = nats.node("a", fake.env(), &shared, &args.ttl)?;

    println!(
        "append latency (turn/start → turn_started), {} turns:",
        args.turns
    );
    for (name, daemon) in [("sled", &local), ("R3", &node_a)] {
        let (p50, p99) = append_latency(daemon, &shared, args.turns)?;
        println!("  {name:>5}: p50 {p50:.2} ms, p99 {p99:.2} ms");
    }
    println!("streamed reply of {} deltas:", args.deltas);
    for (name, daemon) in [("sled", &local), ("R3", &node_a)] {
        let (events, took) = stream_reply(daemon, &shared)?;
        println!(
            "  {name:>5}: {events} events in {:.0} ms, {:.0} events/s",
            took.as_secs_f64() * 1000.0,
            events as f64 / took.as_secs_f64()
        );
    }
    println!("tether -p \"say hi\", median of {}:", args.runs);
    for (name, daemon) in [("sled", &local), ("R3", &node_a)] {
        let median = headless(daemon, &shared, args.runs)?;
        println!("  {name:>5}: {:.1} ms", median * 1000.0);
    }
    drop(node_a);

    println!(
        "failover (owner killed → first event from the new owner), lease {}:",
        args.ttl
    );
    let mut times = Vec::new();
    for _ in 0..args.failovers {
        times.push(failover(&nats, &fake, &shared, &args.ttl)?);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "  min {:.0} ms, median {:.0} ms, max {:.0} ms over {} runs",
        times[0] * 1000.0,
        times[times.len() / 2] * 1000.0,
        times[times.len() - 1] * 1000.0,
        times.len()
    );
    Ok(())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn append_latency(daemon: &Daemon, cwd: &Path, turns: usize) -> anyhow::Result<(f64, f64)> {
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(cwd)?;
    c.watch(&session)?;
    let mut ms = Vec::with_capacity(turns);
    for _ in 0..turns {
        let sent = Instant::now();
        c.start_turn(&session, "hello")?;
        c.events_until("turn_started")?;
        ms.push(sent.elapsed().as_secs_f64() * 1000.0);
        c.events_until("turn_ended")?;
    }
    ms.sort_by(f64::total_cmp);
    Ok((percentile(&ms, 0.5), percentile(&ms, 0.99)))
}

fn stream_reply(daemon: &Daemon, cwd: &Path) -> anyhow::Result<(usize, Duration)> {
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(cwd)?;
    c.watch(&session)?;
    let started = Instant::now();
    c.start_turn(&session, "stream")?;
    let events = c.events_until("turn_ended")?;
    Ok((events.len(), started.elapsed()))
}

fn headless(daemon: &Daemon, cwd: &Path, runs: usize) -> anyhow::Result<f64> {
    let mut times = Vec::new();
    for _ in 0..runs {
        let started = Instant::now();
        let out = daemon
            .tether()
            .current_dir(cwd)
            .args(["-p", "say hi"])
            .output()?;
        anyhow::ensure!(out.status.success(), "tether -p failed: {out:?}");
        times.push(started.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// One failover: a session on a fresh node, the node killed, a client on another node asking;
/// seconds from the kill to the new owner's first event.
fn failover(nats: &NatsCluster, fake: &Fake, shared: &Path, ttl: &str) -> anyhow::Result<f64> {
    let mut owner = nats.node("owner", fake.env(), shared, ttl)?;
    let other = nats.node("other", fake.env(), shared, ttl)?;
    let mut c = owner.ndjson()?;
    let session = c.new_session_in(shared)?;
    c.watch(&session)?;
    c.start_turn(&session, "hello")?;
    c.events_until("turn_ended")?;
    let mut there = other.ndjson()?;
    let killed = Instant::now();
    owner.kill9()?;
    there.subscribe(&session, json!("head"))?;
    // The new owner's first event: the client's own attach, written under the new epoch.
    loop {
        let e: Value = there.next_event()?;
        if e["type"] == "client_attached" {
            break;
        }
    }
    let took = killed.elapsed().as_secs_f64();
    there
        .call("session/delete", json!({"sessionId": session}))
        .context("delete")?;
    Ok(took)
}
