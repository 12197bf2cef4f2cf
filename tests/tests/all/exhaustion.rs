//! Tools aimed at exhausting the daemon — a command printing 200 MB, a Read of a 2 GB file, a
//! Grep over a tree of 100 MB that matches everywhere — and a disk that fills during a turn:
//! the daemon stays up and small, and every turn gets a clear result.

use anyhow::Context;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;
use std::time::Instant;
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake, Ndjson};

/// How far the daemon's peak memory may rise over the whole exhausting turn.
const PEAK_GROWTH_KIB: u64 = 96 * 1024;

fn of_type<'a>(events: &'a [Value], ty: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == ty).collect()
}

/// The text of the `n`th tool result.
fn result_text(events: &[Value], n: usize) -> anyhow::Result<String> {
    let r = of_type(events, "tool_result")
        .get(n)
        .copied()
        .with_context(|| format!("no tool result #{n}"))?;
    Ok(match &r["data"]["content"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

/// Bytes of the files under `dir`.
fn du(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match entry.metadata() {
                Ok(m) if m.is_dir() => stack.push(entry.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

#[test]
fn a_200_mb_output_a_2_gb_read_and_a_grep_of_everything_leave_the_daemon_small()
-> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::default().tool_use(
            "Bash",
            json!({"command": "yes 'a line of build output that goes on and on' | head -c 200000000"}),
        ),
        Step::default().tool_use(
            "Read",
            json!({"file_path": "huge.log", "offset": 999, "limit": 3}),
        ),
        Step::default().tool_use(
            "Grep",
            json!({"pattern": "e", "path": "tree", "output_mode": "content"}),
        ),
        Step::text("All three tools answered."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let work = daemon.workdir();
    // A 2 GB file: a thousand lines of text, then a hole.
    let huge = std::fs::File::create(work.join("huge.log"))?;
    let lines: String = (1..=1000).map(|n| format!("log line {n}\n")).collect();
    std::io::Write::write_all(&mut &huge, lines.as_bytes())?;
    huge.set_len(2 << 30)?;
    // 1000 files of 100 KB, every line matching.
    let line = "the quick brown fox jumps over the lazy dog again and again\n";
    let body = line.repeat(100_000 / line.len());
    for d in 0..10 {
        let dir = work.join(format!("tree/d{d}"));
        std::fs::create_dir_all(&dir)?;
        for f in 0..100 {
            std::fs::write(dir.join(format!("f{f}.txt")), &body)?;
        }
    }

    let mut c: Ndjson = daemon.ndjson()?;
    let session = c.new_session_in(&work)?;
    c.watch(&session)?;
    // Warm up allocations a turn makes anyway, so the peak measures the tools.
    let before_kib = daemon.peak_rss_kib()?;
    let before_disk = du(&daemon.data_dir().join("db"));
    let started = Instant::now();
    c.start_turn(&session, "exhaust yourself")?;
    let events = c.events_until("turn_ended")?;
    let took = started.elapsed();
    let peak_kib = daemon.peak_rss_kib()?;
    let disk = du(&daemon.data_dir().join("db")) - before_disk;
    let last = events.last().context("events")?;
    assert_eq!(last["data"]["stopReason"], "end_turn", "{last}");

    // Bash: the start and end of the output, how much was cut, and where all of it is.
    let bash = result_text(&events, 0)?;
    assert!(
        bash.starts_with("a line of build output"),
        "{}",
        &bash[..100]
    );
    assert!(bash.contains("bytes of 200000000 cut; its first 32 MB are in "));
    assert!(bash.contains("the rest was not saved"));
    assert!(bash.chars().count() < 31_000, "{}", bash.len());
    let saved = bash
        .split("its first 32 MB are in ")
        .nth(1)
        .and_then(|s| s.split(';').next())
        .context("saved path")?;
    // The data directory is no sink: what is saved stops at the cap.
    assert_eq!(std::fs::metadata(saved)?.len(), 32 << 20);
    let progress: usize = of_type(&events, "tool_progress")
        .iter()
        .filter_map(|e| e["data"]["chunk"].as_str())
        .map(str::len)
        .sum();
    assert!(progress < 4 << 20, "{progress} bytes of live progress");

    // Read: the lines asked for, up to where the text turns into the hole's zeros.
    let read = result_text(&events, 1)?;
    assert!(
        read.contains(
            "   999\tlog line 999\n  1000\tlog line 1000\n… binary data from line 1001 on"
        ),
        "{read}"
    );

    // Grep: bounded, and it says the search was cut.
    let grep = result_text(&events, 2)?;
    assert!(grep.len() < 140 * 1024, "{}", grep.len());
    assert!(grep.contains("the search stopped after collecting 16 MB"));

    eprintln!(
        "exhaustion: 200 MB output + 2 GB read + 100 MB grep in {:.1} s; peak RSS {} → {} MiB; \
         {} KiB of live progress; the log grew {} KiB",
        took.as_secs_f64(),
        before_kib / 1024,
        peak_kib / 1024,
        progress / 1024,
        disk / 1024
    );
    assert!(
        peak_kib < before_kib + PEAK_GROWTH_KIB,
        "peak RSS {before_kib} → {peak_kib} KiB"
    );
    assert!(disk < 16 << 20, "the session's log grew {disk} bytes");
    // Still serving.
    c.call("session/list", json!({}))?;
    Ok(())
}

/// Whether the tests run as root (uid 0, from `/proc/self/status`).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().next().map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// A small tmpfs mounted at a directory for the life of the value (lazily unmounted after).
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> anyhow::Result<Self> {
        std::fs::create_dir_all(at)?;
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()?;
        anyhow::ensure!(
            status.success(),
            "this machine does not let the tests mount a tmpfs (root with CAP_SYS_ADMIN)"
        );
        Ok(Self(at.to_owned()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Writes to `dir` until the file system is full.
fn fill(dir: &Path) -> std::fs::File {
    use std::io::Write;
    let mut f = std::fs::File::create(dir.join("filler")).expect("filler");
    let chunk = vec![0u8; 64 * 1024];
    while f.write_all(&chunk).and_then(|_| f.flush()).is_ok() {}
    f
}

#[test]
fn a_disk_that_fills_during_a_turn_stops_it_clearly_and_loses_nothing_saved() -> anyhow::Result<()>
{
    let long: String = "lorem ipsum dolor sit amet ".repeat(20_000);
    let fake = Fake::start(Script::of([
        Step::text("Saved before the disk filled."),
        Step::text(&long),
        Step::text("Going on after space was freed."),
    ]))?;
    if !is_root() {
        eprintln!(
            "skipped: filling a disk needs a tmpfs, which needs root (tests/run runs as root)"
        );
        return Ok(());
    }
    let mut daemon = Daemon::prepare(fake.env())?;
    let data = daemon.data_dir();
    let mount = match Tmpfs::mount(&data, "24m") {
        Ok(m) => m,
        Err(e) => {
            // Root without CAP_SYS_ADMIN (some containers) cannot mount either.
            eprintln!("skipped: {e}");
            return Ok(());
        }
    };
    daemon.spawn()?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&daemon.workdir())?;
    c.watch(&session)?;
    c.start_turn(&session, "before")?;
    c.events_until("turn_ended")?;

    let filler = fill(&mount.0);
    c.start_turn(&session, "fill it")?;
    // The turn stops with a clear error (or, if everything still fit, ends).
    let mut stopped = None;
    for _ in 0..100_000 {
        let e = c.next_event()?;
        if e["type"] == "error" || e["type"] == "turn_ended" {
            stopped = Some(e);
            break;
        }
    }
    let stopped = stopped.context("the turn neither ended nor failed")?;
    assert_eq!(stopped["type"], "error", "{stopped}");
    assert_eq!(stopped["data"]["code"], "storage_failed", "{stopped}");
    let message = stopped["data"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("No space left on device") && message.contains("free disk space"),
        "{message}"
    );
    // The daemon keeps serving; the failed session answers reads and refuses new turns.
    let mut other = daemon.ndjson()?;
    other.call("session/list", json!({}))?;
    let refused = other.request(
        "turn/start",
        json!({"sessionId": session, "input": [{"type": "text", "text": "more"}]}),
    )?;
    assert!(refused.get("error").is_some(), "{refused}");

    // Space freed and the daemon restarted: everything saved is there, and turns go on.
    drop(filler);
    std::fs::remove_file(mount.0.join("filler"))?;
    daemon.kill9()?;
    daemon.spawn()?;
    let mut c = daemon.ndjson()?;
    c.subscribe(&session, json!(0))?;
    let log = c.events_until("replay_complete")?;
    let texts: Vec<&Value> = of_type(&log, "assistant_block_completed");
    assert!(
        texts
            .iter()
            .any(|e| e["data"]["block"]["text"] == "Saved before the disk filled."),
        "{texts:?}"
    );
    let seqs: Vec<u64> = log.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    // The turn the full disk stopped may be closed (`interrupted_by_restart`) just after the
    // replay; the new turn is told apart by its id.
    let turn = c.start_turn(&session, "after")?;
    let ended = loop {
        let e = c.next_event()?;
        if e["type"] == "turn_ended" && e["turnId"] == turn.as_str() {
            break e;
        }
    };
    assert_eq!(ended["data"]["stopReason"], "end_turn", "{ended}");
    drop(daemon);
    drop(mount);
    Ok(())
}
