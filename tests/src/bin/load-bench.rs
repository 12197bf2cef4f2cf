//! `load-bench roundtrip | headless | sessions`: what a turn costs in time and memory, against
//! the fake API and a `tetherd` (both started here, binaries from the build directory).
//!
//! - `roundtrip [--runs N]`: `tether -p` of a text reply and of a Bash tool round trip (the
//!   model calls `true`, then answers), each against its curl floor: one `curl` process sending
//!   the very requests tether sent (one for the reply, two for the round trip) in turn. The
//!   round trip also gets the floor of a client that runs the tool too: the two requests plus
//!   a `bash -c true` (the command the model asks for), since no client runs Bash for free.
//! - `headless [--turns N]`: N `tether -p` tool round trips in a row; prints the daemon's RSS
//!   as it goes, the client's peak RSS, and the daemon's RSS once idle.
//! - `sessions [--sessions N] [--turns K]`: N sessions, each with its own subscribed client,
//!   all running K turns at once whose replies stream paced text deltas stamped with the time
//!   the fake wrote them; prints event latency (fake → client) p50/p99, throughput and RSS.
//!
//! Build first: `cargo build --release --workspace --bins`, then run `target/release/load-bench`.
//! Asserts nothing.

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tether_tests::fake_anthropic::{NOW_US, Rule, Script, Step};
use tether_tests::{Daemon, Fake, rss_kib};

/// Time and memory of turns.
#[derive(Debug, Parser)]
struct Args {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// `tether -p` against the curl floor, for a text reply and a tool round trip.
    Roundtrip {
        /// Timed runs of each (after 5 warm-up runs).
        #[arg(long, default_value_t = 40)]
        runs: usize,
    },
    /// Many `tether -p` tool round trips in a row: RSS over time.
    Headless {
        /// Turns to run.
        #[arg(long, default_value_t = 1000)]
        turns: usize,
        /// Print the daemon's RSS every this many turns.
        #[arg(long, default_value_t = 100)]
        every: usize,
    },
    /// Many sessions streaming at once: event latency, throughput, RSS.
    Sessions {
        /// Sessions, each with its own client.
        #[arg(long, default_value_t = 200)]
        sessions: usize,
        /// Turns each session runs.
        #[arg(long, default_value_t = 5)]
        turns: usize,
        /// Text deltas per reply.
        #[arg(long, default_value_t = 40)]
        deltas: usize,
        /// Milliseconds between deltas (the pace of a real stream).
        #[arg(long, default_value_t = 20)]
        pace_ms: u64,
        /// Print the daemon's RSS once more this many seconds after the run (idle connection
        /// pools expire).
        #[arg(long)]
        later: Option<u64>,
    },
}

fn main() -> anyhow::Result<()> {
    match Args::parse().bench {
        Bench::Roundtrip { runs } => roundtrip(runs),
        Bench::Headless { turns, every } => headless(turns, every),
        Bench::Sessions {
            sessions,
            turns,
            deltas,
            pace_ms,
            later,
        } => many_sessions(sessions, turns, deltas, pace_ms, later),
    }
}

/// The fake's answers: "say hi" gets text; "roundtrip" gets a Bash call, then text.
fn headless_script() -> Script {
    let mut script = Script::default().titling("bench");
    script.rules.extend([
        Rule {
            last_user_matches: None,
            has_tool_result: Some(true),
            times: None,
            step: Step::text("done"),
        },
        Rule {
            last_user_matches: Some("^roundtrip".into()),
            has_tool_result: Some(false),
            times: None,
            step: Step::default().tool_use("Bash", json!({"command": "true"})),
        },
        Rule {
            last_user_matches: Some("^say hi".into()),
            has_tool_result: Some(false),
            times: None,
            step: Step::text("Hi! How can I help?"),
        },
    ]);
    script
}

/// Runs `tether -p PROMPT` to its end; fails unless it succeeded.
fn tether_p(daemon: &Daemon, prompt: &str) -> anyhow::Result<()> {
    let status = daemon
        .tether()
        .current_dir(daemon.workdir())
        .args(["-p", prompt, "--dangerously-skip-permissions"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .status()?;
    if !status.success() {
        bail!("tether -p {prompt:?} failed: {status}");
    }
    Ok(())
}

/// Median and 10th percentile of `times` (ms).
fn summary(times: &mut [f64]) -> (f64, f64) {
    times.sort_by(f64::total_cmp);
    let at = |p: f64| times[((times.len() as f64 - 1.0) * p).round() as usize];
    (at(0.5), at(0.1))
}

fn roundtrip(runs: usize) -> anyhow::Result<()> {
    let fake = Fake::start(headless_script())?;
    let daemon = Daemon::start_with(fake.env())?;
    let url = format!("{}/v1/messages", fake.server.url());
    let bodies = tempfile::tempdir()?;
    for prompt in ["say hi", "roundtrip"] {
        for _ in 0..5 {
            fake.server.take_requests();
            tether_p(&daemon, prompt)?;
        }
        // The requests of the last run, as curl will send them.
        let mut files = Vec::new();
        for (i, r) in fake
            .server
            .take_requests()
            .iter()
            .filter(|r| r.path == "/v1/messages" && !is_title_request(&r.body))
            .enumerate()
        {
            let file = bodies.path().join(format!("{prompt}-{i}.json"));
            std::fs::write(&file, serde_json::to_vec(&r.body)?)?;
            files.push(file);
        }
        // In turn, so a drift of the machine's speed touches all three alike.
        let (mut tether, mut apart, mut together) = (Vec::new(), Vec::new(), Vec::new());
        let mut with_tool = Vec::new();
        let ms = |started: Instant| started.elapsed().as_secs_f64() * 1000.0;
        for _ in 0..runs {
            let started = Instant::now();
            tether_p(&daemon, prompt)?;
            tether.push(ms(started));
            fake.server.take_requests();
            let started = Instant::now();
            for file in &files {
                curl(&url, std::slice::from_ref(file))?;
            }
            apart.push(ms(started));
            let started = Instant::now();
            curl(&url, &files)?;
            together.push(ms(started));
            if files.len() > 1 {
                let started = Instant::now();
                let status = Command::new("bash").args(["-c", "true"]).status()?;
                if !status.success() {
                    bail!("bash -c true failed: {status}");
                }
                with_tool.push(together[together.len() - 1] + ms(started));
            }
        }
        let ratios =
            |floor: &[f64]| -> Vec<f64> { tether.iter().zip(floor).map(|(t, f)| t / f).collect() };
        let (mut r_apart, mut r_together) = (ratios(&apart), ratios(&together));
        let mut r_with_tool = ratios(&with_tool);
        let (t50, t10) = summary(&mut tether);
        let (a50, _) = summary(&mut apart);
        let (g50, _) = summary(&mut together);
        let (ra50, _) = summary(&mut r_apart);
        let (rg50, _) = summary(&mut r_together);
        println!("{prompt:>9}: tether -p median {t50:.2} ms (p10 {t10:.2}), {runs} runs");
        if files.len() > 1 {
            println!(
                "{:>9}  curl, one process per request: median {a50:.2} ms → ratio {ra50:.2}×",
                ""
            );
        }
        println!(
            "{:>9}  curl, one process for {} request{}: median {g50:.2} ms → ratio {rg50:.2}×",
            "",
            files.len(),
            if files.len() == 1 { "" } else { "s" }
        );
        if !with_tool.is_empty() {
            let (w50, _) = summary(&mut with_tool);
            let (rw50, _) = summary(&mut r_with_tool);
            println!(
                "{:>9}  that, plus `bash -c true`: median {w50:.2} ms → ratio {rw50:.2}×",
                ""
            );
        }
    }
    Ok(())
}

fn is_title_request(body: &Value) -> bool {
    body.to_string()
        .contains("Write a title for the coding session")
}

/// The exchanges of `bodies` with one `curl` process, one after another on one connection,
/// each read to its end: the least a client that knew the requests beforehand would spend.
fn curl(url: &str, bodies: &[std::path::PathBuf]) -> anyhow::Result<()> {
    let mut cmd = Command::new("curl");
    for (i, body) in bodies.iter().enumerate() {
        if i > 0 {
            cmd.arg("--next");
        }
        cmd.args(["-sSN", "-o", "/dev/null", "-X", "POST"])
            .args(["-H", "content-type: application/json"])
            .args(["-H", "x-api-key: sk-ant-test"])
            .args(["-H", "anthropic-version: 2023-06-01"])
            .arg("--data-binary")
            .arg(format!("@{}", body.display()))
            .arg(url);
    }
    let status = cmd.status().context("run curl")?;
    if !status.success() {
        bail!("curl failed: {status}");
    }
    Ok(())
}

fn headless(turns: usize, every: usize) -> anyhow::Result<()> {
    let fake = Fake::start(headless_script())?;
    let daemon = Daemon::start_with(fake.env())?;
    std::thread::sleep(Duration::from_secs(1));
    println!("daemon idle at start: {}", rss(&daemon)?);
    let started = Instant::now();
    for i in 1..=turns {
        tether_p(&daemon, "roundtrip")?;
        // The fake's record would grow with the run.
        fake.server.take_requests();
        if i % every == 0 {
            println!(
                "after {i:>5} turns ({:>6.1} s): daemon {}",
                started.elapsed().as_secs_f64(),
                rss(&daemon)?
            );
        }
    }
    let client_peak = children_peak_rss_kib()?;
    println!(
        "{turns} turns in {:.1} s; client peak {client_peak} KiB; daemon peak {} KiB",
        started.elapsed().as_secs_f64(),
        daemon.peak_rss_kib()?
    );
    std::thread::sleep(Duration::from_secs(8));
    let idle = daemon.rss_kib()?;
    let session = daemon
        .ndjson()?
        .call("session/list", serde_json::json!({"limit": 1}))?["sessions"][0]["sessionId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    match client_memory(&daemon, &session) {
        Ok(m) => println!("an attached client (tether attach, line mode), idle: {m}"),
        Err(e) => println!("an attached client could not be measured: {e}"),
    }
    println!(
        "daemon idle after: {}; client peak + daemon idle = {} KiB",
        rss(&daemon)?,
        client_peak + idle
    );
    Ok(())
}

/// The daemon's memory: RSS (and how much of it is anonymous and how much mapped files, its
/// binary's code mostly), then its private (USS) and proportional (PSS) memory, which count
/// what it shares with other processes once; in KiB.
fn rss(daemon: &Daemon) -> anyhow::Result<String> {
    let m = daemon.memory()?;
    Ok(format!(
        "RSS {} KiB (anon {}, file {}), USS {} KiB, PSS {} KiB",
        m.rss,
        daemon.status_kib("RssAnon")?,
        daemon.status_kib("RssFile")?,
        m.uss,
        m.pss
    ))
}

/// A client attached to `session` while it idles (`tether attach`, line mode): its memory, as
/// [`rss`] gives the daemon's.
fn client_memory(daemon: &Daemon, session: &str) -> anyhow::Result<tether_tests::Memory> {
    let mut client = daemon
        .tether()
        .args(["attach", session, "--since", "head"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    std::thread::sleep(Duration::from_secs(2));
    let measured = tether_tests::memory(client.id());
    let _ = client.kill();
    let _ = client.wait();
    measured
}

/// The largest peak RSS of any child process waited for so far, in KiB.
fn children_peak_rss_kib() -> anyhow::Result<u64> {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)?;
    Ok(u64::try_from(usage.max_rss()).unwrap_or(0))
}

fn many_sessions(
    n: usize,
    turns: usize,
    deltas: usize,
    pace_ms: u64,
    later: Option<u64>,
) -> anyhow::Result<()> {
    let mut events = vec![
        json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ];
    for _ in 0..deltas {
        events.push(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": format!("t={NOW_US} ")}}));
    }
    events.push(json!({"type": "content_block_stop", "index": 0}));
    events.push(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": deltas}}));
    let mut script = Script::default().titling("bench");
    script.rules.push(Rule {
        last_user_matches: None,
        has_tool_result: None,
        times: None,
        step: Step {
            events: Some(events),
            chunk_delay_ms: Some(pace_ms),
            stamp_time: true,
            ..Default::default()
        },
    });
    let fake = Fake::start(script)?;
    let daemon = Daemon::start_with(fake.env())?;
    std::thread::sleep(Duration::from_secs(1));
    println!("daemon idle at start: {}", rss(&daemon)?);

    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        let mut c = daemon.ndjson()?.as_terminal()?;
        let session = c.new_session("bench")?;
        c.watch(&session)?;
        clients.push((c, session));
    }
    println!(
        "{n} sessions loaded, a client on each: daemon {} KiB",
        daemon.rss_kib()?
    );

    let pid = daemon.child.as_ref().context("daemon is not running")?.id();
    let done = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(Mutex::new(Vec::new()));
    let sampler = {
        let (done, samples) = (done.clone(), samples.clone());
        std::thread::spawn(move || {
            let started = Instant::now();
            while !done.load(Ordering::Relaxed) {
                if let (Ok(kib), Ok(mut s)) = (rss_kib(pid), samples.lock()) {
                    s.push((started.elapsed().as_secs_f64(), kib));
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        })
    };
    let started = Instant::now();
    let handles: Vec<_> = clients
        .into_iter()
        .map(|(mut c, session)| {
            std::thread::spawn(move || -> anyhow::Result<(Vec<f64>, usize)> {
                let mut latencies = Vec::with_capacity(turns * deltas);
                let mut events = 0;
                for _ in 0..turns {
                    c.start_turn(&session, "stream")?;
                    loop {
                        let e = c.next_event().with_context(|| {
                            format!("session {session}: no event after {events} events")
                        })?;
                        events += 1;
                        match e["type"].as_str() {
                            Some("text_delta") => {
                                let now = now_us();
                                let text = e["data"]["text"].as_str().unwrap_or_default();
                                for stamp in text.split("t=").skip(1) {
                                    let digits: String =
                                        stamp.chars().take_while(char::is_ascii_digit).collect();
                                    if let Ok(sent) = digits.parse::<u128>() {
                                        latencies.push(now.saturating_sub(sent) as f64 / 1000.0);
                                    }
                                }
                            }
                            Some("lagged") => bail!("a client lagged"),
                            Some("turn_ended") => {
                                if let Some(err) = e["data"].get("error") {
                                    bail!("turn failed: {err}");
                                }
                                break;
                            }
                            _ => {}
                        }
                    }
                }
                Ok((latencies, events))
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut events = 0;
    for h in handles {
        let (l, e) = h
            .join()
            .map_err(|_| anyhow::anyhow!("client thread panicked"))?
            .map_err(|e| {
                let log = daemon.log();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                e.context(format!("the daemon's log ends:\n{}", tail.join("\n")))
            })?;
        latencies.extend(l);
        events += e;
    }
    let wall = started.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    latencies.sort_by(f64::total_cmp);
    let at = |p: f64| {
        latencies
            .get(((latencies.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    println!(
        "{n} sessions × {turns} turns × {deltas} deltas every {pace_ms} ms: {events} events in {wall:.2} s → {:.0} events/s; latency fake → client p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} stamped deltas)",
        events as f64 / wall,
        at(0.5),
        at(0.99),
        latencies.last().copied().unwrap_or(0.0),
        latencies.len()
    );
    let samples = samples.lock().map(|s| s.clone()).unwrap_or_default();
    let line: Vec<String> = samples
        .iter()
        .step_by((samples.len() / 12).max(1))
        .map(|(t, kib)| format!("{t:.0}s {} MiB", kib / 1024))
        .collect();
    println!("daemon RSS during the run: {}", line.join(", "));
    println!("daemon peak {} KiB", daemon.peak_rss_kib()?);
    std::thread::sleep(Duration::from_secs(8));
    println!("daemon idle after: {}", rss(&daemon)?);
    if let Some(secs) = later {
        std::thread::sleep(Duration::from_secs(secs));
        println!("daemon {secs} s later: {}", rss(&daemon)?);
    }
    Ok(())
}

fn now_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0)
}
