//! `cost-bench [--turns N]`: what a tool-using session costs in prompt-cache terms. Runs N turns
//! (each: the model reads a file, then answers) through a real `tetherd` against the fake API
//! with its simulated prompt cache, in four variants — straight through, a daemon restart
//! half-way, a 6-minute pause before every turn (simulated time) with `cache_ttl = "auto"`, and
//! the same pauses with `cache_ttl = "5m"` — and prints, for each, the share of input tokens
//! served from the cache and the session's cost at the model's prices.
//!
//! Build first: `cargo build --workspace --bins --release`, then run
//! `target/release/cost-bench`.

use clap::Parser;
use serde_json::{Value, json};
use std::time::Duration;
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake, Ndjson};

/// Prints the cache share and cost of a tool-using session in four variants.
#[derive(Debug, Parser)]
struct Args {
    /// Turns per session.
    #[arg(long, default_value_t = 20)]
    turns: usize,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Variant {
    Straight,
    Restart,
    Pauses,
    PausesFiveMinutes,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Self::Straight => "straight through",
            Self::Restart => "daemon restart half-way, tree changed",
            Self::Pauses => "6-min pause before each turn (auto: 1h prefix)",
            Self::PausesFiveMinutes => "6-min pause before each turn (cache_ttl = 5m)",
        }
    }
}

#[derive(Debug, Default)]
struct Totals {
    input: u64,
    written: u64,
    read: u64,
    output: u64,
    cost: f64,
}

fn terminal(daemon: &Daemon) -> anyhow::Result<Ndjson> {
    daemon.ndjson()?.as_terminal()
}

fn run(variant: Variant, turns: usize) -> anyhow::Result<Totals> {
    let mut steps = Vec::new();
    for i in 0..turns {
        steps.push(Step::default().tool_use("Read", json!({"file_path": "NOTES.md"})));
        steps.push(Step::text(format!(
            "Turn {i}: the notes say to keep functions short."
        )));
    }
    let fake = Fake::start(Script::of(steps).with_prompt_cache())?;
    let mut daemon = Daemon::prepare(fake.env())?;
    if variant == Variant::PausesFiveMinutes {
        daemon.write_config("cache_ttl = \"5m\"\n")?;
    }
    daemon.spawn()?;
    let work = daemon.workdir();
    std::fs::write(work.join("NOTES.md"), "Keep functions short.\n".repeat(40))?;
    // A repository, so the prompt carries a git snapshot that changes.
    for args in [
        &["init", "-q"][..],
        &["add", "."],
        &[
            "-c",
            "user.name=b",
            "-c",
            "user.email=b@example.com",
            "commit",
            "-qm",
            "notes",
        ],
    ] {
        let ok = std::process::Command::new("git")
            .args(args)
            .current_dir(&work)
            .status()?
            .success();
        anyhow::ensure!(ok, "git {args:?} failed");
    }
    let mut c = terminal(&daemon)?;
    let session = c.new_session_in(&work)?;
    c.watch(&session)?;
    let mut totals = Totals::default();
    for i in 0..turns {
        if variant == Variant::Restart && i == turns / 2 {
            // The working tree changed meanwhile (the git status a rebuilt prompt would carry).
            std::fs::write(
                work.join("CHANGES.md"),
                "edited while the daemon was down\n",
            )?;
            daemon.terminate()?;
            daemon.spawn()?;
            c = terminal(&daemon)?;
            c.watch(&session)?;
        }
        if matches!(variant, Variant::Pauses | Variant::PausesFiveMinutes) && i > 0 {
            fake.server.advance(Duration::from_secs(6 * 60));
        }
        c.start_turn(&session, &format!("What do the notes say? (question {i})"))?;
        let events = c.events_until("turn_ended")?;
        let ended: &Value = events.last().ok_or_else(|| anyhow::anyhow!("no end"))?;
        if let Some(err) = ended["data"].get("error").filter(|e| !e.is_null()) {
            anyhow::bail!("turn {i} failed: {err}");
        }
        let u = &ended["data"]["usage"];
        let n = |k: &str| u[k].as_u64().unwrap_or(0);
        totals.input += n("inputTokens");
        totals.written += n("cacheCreationInputTokens");
        totals.read += n("cacheReadInputTokens");
        totals.output += n("outputTokens");
        totals.cost += ended["data"]["costUsd"].as_f64().unwrap_or(f64::NAN);
    }
    for r in fake.server.message_requests() {
        if let Some(why) = r.rejected {
            anyhow::bail!("the fake API rejected a request: {why}");
        }
    }
    Ok(totals)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    println!(
        "{} tool-using turns per session, model sonnet (claude-sonnet-5-5 prices), simulated prompt cache",
        args.turns
    );
    println!(
        "{:<48} {:>9} {:>9} {:>9} {:>7} {:>10}",
        "variant", "uncached", "written", "read", "cached", "cost"
    );
    for v in [
        Variant::Straight,
        Variant::Restart,
        Variant::Pauses,
        Variant::PausesFiveMinutes,
    ] {
        let t = run(v, args.turns)?;
        let all = t.input + t.written + t.read;
        println!(
            "{:<48} {:>9} {:>9} {:>9} {:>6.1}% {:>9.4}$",
            v.name(),
            t.input,
            t.written,
            t.read,
            100.0 * t.read as f64 / all.max(1) as f64,
            t.cost
        );
    }
    Ok(())
}
