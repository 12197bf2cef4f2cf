//! `mcp-bench [--turns N]`: what an MCP tool costs through the daemon. Starts a daemon (the
//! `tetherd` next to this binary) against the in-process fake API and the official everything
//! server (`tests/run` caches it), then times whole turns that make one tool call: the first
//! one cold (it starts the server), then `N` each of `mcp__everything__echo` and the built-in
//! `TodoWrite` with an empty list (next to nothing to do), alternating. Prints the cold turn, the medians and p90s, and the difference of the
//! medians: the per-call overhead of going to an MCP server.

use anyhow::Context;
use clap::Parser;
use serde_json::json;
use std::time::Instant;
use tether_tests::fake_anthropic::{Rule, Script, Step};
use tether_tests::{Daemon, Fake, mcp_server};

/// Times MCP tool calls against built-in ones.
#[derive(Debug, Parser)]
struct Args {
    /// Turns of each kind, after the cold one.
    #[arg(long, default_value_t = 30)]
    turns: usize,
}

fn rule(prompt: &str, step: Step) -> Rule {
    Rule {
        last_user_matches: Some(format!("{prompt}$")),
        has_tool_result: Some(false),
        times: None,
        step,
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut script = Script::of([]);
    script.rules = vec![
        rule(
            "mcp",
            Step::default().tool_use("mcp__everything__echo", json!({"message": "hi"})),
        ),
        rule(
            "builtin",
            Step::default().tool_use("TodoWrite", json!({"todos": []})),
        ),
        Rule {
            last_user_matches: None,
            has_tool_result: Some(true),
            times: None,
            step: Step::text("done"),
        },
        Rule {
            last_user_matches: None,
            has_tool_result: None,
            times: None,
            step: Step::text("a title"),
        },
    ];
    let fake = Fake::start(script)?;
    let daemon = Daemon::start_with(fake.env())?;
    let work = daemon.workdir();
    tether_tests::project_mcp_servers(
        &work,
        json!({"everything": {"command": mcp_server("mcp-server-everything"), "args": ["stdio"]}}),
    )?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&work)?;
    c.watch(&session)?;
    let mut turn = |prompt: &str| -> anyhow::Result<f64> {
        let started = Instant::now();
        c.start_turn(&session, prompt)?;
        let events = c.events_until("turn_ended")?;
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        let end = events.last().context("turn_ended")?;
        if end["data"]["stopReason"] != "end_turn" {
            anyhow::bail!("the {prompt} turn ended {end}");
        }
        if let Some(r) = events.iter().find(|e| e["type"] == "tool_result")
            && r["data"]["isError"] == true
        {
            anyhow::bail!("the {prompt} call failed: {r}");
        }
        c.start_turn(&session, "/clear")?;
        c.events_until("turn_ended")?;
        Ok(ms)
    };
    let cold = turn("mcp")?;
    let (mut mcp, mut builtin) = (Vec::new(), Vec::new());
    for _ in 0..args.turns {
        mcp.push(turn("mcp")?);
        builtin.push(turn("builtin")?);
    }
    let stats = |times: &mut Vec<f64>| {
        times.sort_by(f64::total_cmp);
        let at = |p: f64| times[((times.len() as f64 - 1.0) * p).round() as usize];
        (at(0.5), at(0.9))
    };
    let (mcp_median, mcp_p90) = stats(&mut mcp);
    let (builtin_median, builtin_p90) = stats(&mut builtin);
    println!("cold turn (starts the everything server): {cold:.1} ms");
    println!(
        "turn with mcp__everything__echo: median {mcp_median:.2} ms, p90 {mcp_p90:.2} ms (n={})",
        mcp.len()
    );
    println!(
        "turn with TodoWrite (built-in):   median {builtin_median:.2} ms, p90 {builtin_p90:.2} ms (n={})",
        builtin.len()
    );
    println!(
        "per-call overhead of MCP: {:.2} ms; server start-up ≈ {:.1} ms",
        mcp_median - builtin_median,
        cold - mcp_median
    );
    Ok(())
}
