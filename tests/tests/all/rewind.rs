//! Snapshots and `/rewind`: every tool call that changes files records the working tree (never
//! in the user's repository), and a rewind puts files, conversation or both back to just before
//! a turn, after a daemon kill -9 too, with every attached client told.

use anyhow::Context;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake};

fn git(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()?;
    anyhow::ensure!(out.status.success(), "git {args:?}: {out:?}");
    Ok(String::from_utf8(out.stdout)?)
}

/// The user's repository state a snapshot must never touch.
fn untouchable(repo: &Path) -> anyhow::Result<(Vec<u8>, String, String, String, String)> {
    Ok((
        std::fs::read(repo.join(".git/index"))?,
        git(repo, &["rev-parse", "HEAD"])?,
        git(repo, &["reflog"])?,
        git(repo, &["for-each-ref"])?,
        git(repo, &["stash", "list"])?,
    ))
}

/// The files of a snapshot commit, read from the daemon's snapshot store.
fn snapshot_files(data: &Path, commit: &str) -> anyhow::Result<Vec<String>> {
    for store in std::fs::read_dir(data.join("snapshots"))? {
        let dir = store?.path();
        let out = Command::new("git")
            .arg("--git-dir")
            .arg(&dir)
            .args(["ls-tree", "-r", "--name-only", commit])
            .output()?;
        if out.status.success() {
            return Ok(String::from_utf8(out.stdout)?
                .lines()
                .map(str::to_owned)
                .collect());
        }
    }
    anyhow::bail!("snapshot {commit} is in no store")
}

fn results(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .map(|e| &e["data"])
        .collect()
}

fn read(path: PathBuf) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|_| "<none>".into())
}

#[test]
fn a_rewind_puts_files_and_conversation_back_and_keeps_edits_made_outside() -> anyhow::Result<()> {
    let write = |file: &str, text: &str| {
        Step::text("Writing.").tool_use("Write", json!({"file_path": file, "content": text}))
    };
    let bash = |command: &str| Step::text("Running.").tool_use("Bash", json!({"command": command}));
    let fake = Fake::start(
        Script::of([
            // Turn 1: a new file, and a secret the snapshots keep out.
            write("b.txt", "b1"),
            write(".env", "TOKEN=1"),
            Step::text("Wrote b."),
            // Turn 2: a shell changes a tracked file and adds one.
            bash("printf two > a.txt && printf c1 > c.txt && printf k > server.pem"),
            Step::text("Changed a."),
            // Turn 3: one more file.
            write("d.txt", "d1"),
            Step::text("Wrote d."),
            // Turn 4, after the rewind.
            Step::text("Starting over."),
        ])
        .titling("Rewind"),
    )?;
    let mut daemon = Daemon::start_with(fake.env())?;
    let repo = daemon.workdir();
    git(&repo, &["init", "-q", "-b", "main"])?;
    std::fs::write(repo.join("a.txt"), "one")?;
    git(&repo, &["add", "a.txt"])?;
    git(&repo, &["commit", "-q", "-m", "first"])?;
    let before = untouchable(&repo)?;

    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&repo)?;
    c.watch(&session)?;
    let mut turns = Vec::new();
    for prompt in ["make b", "change a", "make d"] {
        c.start_turn(&session, prompt)?;
        turns.push(c.events_until("turn_ended")?);
    }
    // Each changing call names the tree it left; a turn's first also the tree before it.
    let first = results(&turns[0]);
    let snap = &first[0]["snapshot"];
    assert!(snap["before"].is_string(), "{first:?}");
    assert!(first[1]["snapshot"]["before"].is_null(), "{first:?}");
    let data = daemon.data_dir();
    let files = snapshot_files(&data, snap["commit"].as_str().context("commit")?)?;
    assert_eq!(files, ["a.txt", "b.txt"], "no secret in a snapshot");
    let second = results(&turns[1]);
    let files = snapshot_files(
        &data,
        second[0]["snapshot"]["commit"].as_str().context("c")?,
    )?;
    assert_eq!(files, ["a.txt", "b.txt", "c.txt"], "no .pem either");
    assert_eq!(
        untouchable(&repo)?,
        before,
        "the user's git state is untouched"
    );

    // Someone edits c.txt by hand; the daemon is killed and comes back.
    std::fs::write(repo.join("c.txt"), "by hand")?;
    daemon.kill9()?;
    daemon.spawn()?;

    let listed = daemon.run_tether(&["rewind", &session, "--json"])?;
    assert!(listed.status.success(), "{listed:?}");
    let points: Vec<Value> = serde_json::from_slice(&listed.stdout)?;
    let turns_listed: Vec<(u64, bool, bool, &str)> = points
        .iter()
        .map(|p| {
            (
                p["turn"].as_u64().unwrap_or(0),
                p["files"].as_bool().unwrap_or(false),
                p["conversation"].as_bool().unwrap_or(false),
                p["prompt"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        turns_listed,
        [
            (1, true, true, "make b"),
            (2, true, true, "change a"),
            (3, true, true, "make d")
        ]
    );

    // A second client watches the rewind happen.
    let mut watcher = daemon.ndjson()?;
    watcher.watch(&session)?;
    let out = daemon.run_tether(&["rewind", &session, "--to", "2"])?;
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        said.contains("rewound to before turn 2 (files and conversation)"),
        "{said}"
    );
    assert!(said.contains("kept      c.txt"), "{said}");
    assert_eq!(read(repo.join("a.txt")), "one");
    assert_eq!(read(repo.join("b.txt")), "b1");
    assert_eq!(
        read(repo.join("c.txt")),
        "by hand",
        "an outside edit is kept"
    );
    assert!(!repo.join("d.txt").exists());
    assert_eq!(
        read(repo.join(".env")),
        "TOKEN=1",
        "a secret is never touched"
    );
    let seen = watcher.events_until("rewound")?;
    let rewound = &seen.last().context("rewound")?["data"];
    assert_eq!(rewound["toTurn"], 2);
    assert_eq!(rewound["restored"], json!(["a.txt", "d.txt"]));
    assert_eq!(rewound["kept"], json!(["c.txt"]));
    assert_eq!(
        untouchable(&repo)?,
        before,
        "the user's git state is untouched"
    );

    // The model no longer sees turns 2 and 3; the list no longer offers them.
    let mut c = daemon.ndjson()?;
    c.watch(&session)?;
    c.start_turn(&session, "start over")?;
    c.events_until("turn_ended")?;
    let requests = fake.turn_requests();
    let sent = requests.last().context("request")?.body["messages"].to_string();
    assert!(
        sent.contains("make b") && sent.contains("start over"),
        "{sent}"
    );
    assert!(
        !sent.contains("change a") && !sent.contains("make d"),
        "{sent}"
    );
    let listed = daemon.run_tether(&["rewind", &session, "--json"])?;
    let points: Vec<Value> = serde_json::from_slice(&listed.stdout)?;
    let numbers: Vec<u64> = points.iter().filter_map(|p| p["turn"].as_u64()).collect();
    assert_eq!(
        numbers,
        [1, 4],
        "rewound turns are gone; numbers are never reused"
    );
    Ok(())
}

#[test]
fn a_rewind_is_refused_clearly_and_changes_nothing() -> anyhow::Result<()> {
    let fake = Fake::start(
        Script::of([Step::text("Hello."), Step::text("The summary.")]).titling("Refusals"),
    )?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&daemon.workdir())?;
    c.watch(&session)?;
    let reply = c.request("session/rewind", json!({"sessionId": session, "toTurn": 1}))?;
    assert!(
        reply["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no turns yet")),
        "{reply}"
    );
    c.start_turn(&session, "hi")?;
    c.events_until("turn_ended")?;
    let reply = c.request("session/rewind", json!({"sessionId": session, "toTurn": 7}))?;
    assert!(
        reply["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("turn 7 is not in this conversation (its turns: 1 to 1")),
        "{reply}"
    );
    c.call("session/compact", json!({"sessionId": session}))?;
    c.events_until("turn_ended")?;
    let reply = c.request(
        "session/rewind",
        json!({"sessionId": session, "toTurn": 1, "restore": "conversation"}),
    )?;
    assert!(
        reply["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("cleared or compacted after turn 1")),
        "{reply}"
    );
    Ok(())
}

#[test]
fn the_terminal_picks_a_turn_restores_it_and_puts_its_prompt_back() -> anyhow::Result<()> {
    use crate::pty::{tether, turn_messages};
    let write = |file: &str| {
        Step::text("Writing.").tool_use("Write", json!({"file_path": file, "content": "x"}))
    };
    let fake = Fake::start(
        Script::of([
            write("x.txt"),
            Step::text("Wrote x."),
            write("y.txt"),
            Step::text("Wrote y."),
            Step::text("Again, then."),
        ])
        .titling("Picker"),
    )?;
    let daemon = Daemon::start_with(fake.env())?;
    let dir = daemon.workdir();
    let mut a = tether(&daemon, &["--permission-mode", "acceptEdits"])?;
    a.want("› ")?;
    a.send_line("make x")?;
    a.want("Wrote x.")?;
    a.send_line("make y")?;
    a.want("Wrote y.")?;
    a.want("› ")?;
    assert!(dir.join("x.txt").exists() && dir.join("y.txt").exists());

    a.send_line("/rewind")?;
    a.until("the turns", |s| {
        s.contains("Rewind to just before:")
            && s.contains("  turn 1  make x  (files and conversation)")
            && s.contains("❯ turn 2  make y  (files and conversation)")
    })?;
    // Up to the first turn, Enter; then what to restore: both, the first choice.
    a.send("\x1b[A")?;
    a.until("turn 1 selected", |s| s.contains("❯ turn 1  make x"))?;
    a.send("\r")?;
    a.until("what to restore", |s| {
        s.contains("Turn 1: restore")
            && s.contains("❯ 1. Restore code and conversation")
            && s.contains("2. Restore conversation")
            && s.contains("3. Restore code")
            && s.contains("4. Never mind")
    })?;
    a.send("\r")?;
    a.want("rewound to before turn 1 (files and conversation); put back 2 files")?;
    a.until("the prompt is back", |s| s.contains("› make x"))?;
    let screen = a.screen();
    assert!(
        !screen.contains("Rewind to just before:"),
        "the picker is erased:\n{screen}"
    );
    assert!(!dir.join("x.txt").exists() && !dir.join("y.txt").exists());
    // Sent again as it is: the model sees one first prompt, not three.
    a.send("\r")?;
    a.want("Again, then.")?;
    let last = turn_messages(&fake).pop().context("the last turn")?;
    assert_eq!(last.matches("make").count(), 1, "{last}");

    // Esc Esc at an empty prompt opens the same picker; Esc leaves it.
    a.want("› ")?;
    let mut opened = false;
    for _ in 0..3 {
        a.send("\x1b")?;
        std::thread::sleep(std::time::Duration::from_millis(100));
        a.send("\x1b")?;
        if a.until("the picker", |s| s.contains("Rewind to just before:"))
            .is_ok()
        {
            opened = true;
            break;
        }
    }
    assert!(opened, "Esc Esc opens /rewind:\n{}", a.screen());
    a.send("\x1b")?;
    a.until("the picker is gone", |s| {
        !s.contains("Rewind to just before:")
    })?;
    a.send_line("/quit")?;
    a.exited()
}
