//! `turn-bench --socket PATH --cwd DIR [--turns N] [--prompt TEXT]`: times whole turns through a
//! running daemon over raw NDJSON, from `turn/start` sent to `turn_ended` received, and prints
//! min / median / p99 in milliseconds. Point the daemon at `fake-anthropic` for stable figures.

use clap::Parser;
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;
use tether_tests::Ndjson;

/// Times turns through a running tetherd.
#[derive(Debug, Parser)]
struct Args {
    /// The daemon's socket.
    #[arg(long)]
    socket: PathBuf,
    /// Working directory for the session.
    #[arg(long)]
    cwd: PathBuf,
    /// Turns to time (after 3 warm-up turns).
    #[arg(long, default_value_t = 50)]
    turns: usize,
    /// The prompt of each turn.
    #[arg(long, default_value = "say hi")]
    prompt: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut c = Ndjson::connect(&args.socket)?;
    let session = c.new_session_in(&args.cwd)?;
    c.subscribe(&session, json!("head"))?;
    c.events_until("client_attached")?;
    let mut times = Vec::with_capacity(args.turns);
    for i in 0..args.turns + 3 {
        let started = Instant::now();
        c.start_turn(&session, &args.prompt)?;
        let events = c.events_until("turn_ended")?;
        let elapsed = started.elapsed().as_secs_f64() * 1000.0;
        if let Some(err) = events.last().and_then(|e| e["data"].get("error")) {
            anyhow::bail!("turn failed: {err}");
        }
        if i >= 3 {
            times.push(elapsed);
        }
        // Keep the history short so every turn is alike.
        c.start_turn(&session, "/clear")?;
        c.events_until("turn_ended")?;
    }
    times.sort_by(f64::total_cmp);
    let pct = |p: f64| times[((times.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "turn {:?}: n={} min {:.2} ms, median {:.2} ms, p99 {:.2} ms",
        args.prompt,
        times.len(),
        times[0],
        pct(0.5),
        pct(0.99)
    );
    Ok(())
}
