//! The terminal client in a pseudo-terminal, against the real daemon and the fake API: a turn
//! with a permission prompt answered by key, two terminals on one session, Ctrl+C, detach and
//! `tether -c`, folded pastes and a clipboard image.

use crate::pty::{
    echo_script, notes, notes_edit, only_session, settled, slow_reply, status_row, tether,
    tether_in, tether_with, turn_messages, turn_request, two_terminals,
};
use anyhow::Context;
use serde_json::{Value, json};
use std::time::Duration;
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake};

#[test]
fn a_turn_asks_in_the_terminal_and_tether_c_shows_it_after_a_detach() -> anyhow::Result<()> {
    let fake = Fake::start(echo_script("All **done** here."))?;
    let daemon = Daemon::start_with(fake.env())?;
    let commands = daemon.workdir().join(".claude/commands");
    std::fs::create_dir_all(&commands)?;
    std::fs::write(
        commands.join("review.md"),
        "---\ndescription: Review the staged changes\n---\nReview them.\n",
    )?;
    let mut a = tether(&daemon, &[])?;
    a.want("› ")?;
    a.send_line("run the echo")?;
    a.want("● Bash(xargs echo from-the-pty)")?;
    a.want("Allow Bash?")?;
    a.want("(n)")?;
    a.send("y")?;
    a.want("allowed once")?;
    a.want("⎿ from-the-pty")?;
    a.want("All done here.")?;
    a.want("─ done")?;
    a.want("› ")?;
    // Client commands: the daemon's custom commands in /help, the rules in effect, and a
    // failing command that says why and keeps the prompt.
    a.send_line("/help")?;
    a.want("/review")?;
    a.want("Review the staged changes (project)")?;
    a.send_line("/permissions")?;
    a.want("mode default")?;
    a.send_line("/attach no-such-session")?;
    a.want("✗")?;
    a.send_line("/status")?;
    a.want("model ")?;
    a.send([4u8])?;
    a.want("detached")?;

    let session = only_session(&daemon)?;
    let got = daemon
        .ndjson()?
        .call("session/get", json!({"sessionId": session}))?;
    assert_eq!(got["status"], "idle", "the session stays in the daemon");

    let mut again = tether(&daemon, &["-c"])?;
    again.want("› run the echo")?;
    again.want("All done here.")?;
    again.want("› ")?;
    // The replay shows the answer, not a question long answered, nor who came and went.
    {
        let shown = again.shown.lock().unwrap_or_else(|p| p.into_inner());
        assert!(shown.0.contains("allowed once"), "{}", shown.0);
        assert!(!shown.0.contains("/allow or /deny"), "{}", shown.0);
        assert!(!shown.0.contains("Allow Bash?"), "{}", shown.0);
        assert!(!shown.0.contains(" left"), "{}", shown.0);
    }
    again.send([4u8])?;
    again.want("detached")?;
    Ok(())
}

#[test]
fn a_second_terminal_answers_and_the_first_sees_who_did() -> anyhow::Result<()> {
    let fake = Fake::start(echo_script("Answered from elsewhere."))?;
    let daemon = Daemon::start_with(fake.env())?;
    let (mut a, mut b, session) = two_terminals(&daemon)?;
    a.want("joined as controller")?;

    a.send_line("run the echo")?;
    a.want("Allow Bash?")?;
    b.want("› run the echo")?;
    // The second controller gets the whole prompt too, and answers by key.
    b.want("Allow Bash?")?;
    b.want("(n)")?;
    b.send("y")?;
    // The prompt in the first terminal goes away, saying who answered.
    a.want(&format!("allowed once by {} (tether on", whoami()))?;
    a.want("Answered from elsewhere.")?;
    b.want("Answered from elsewhere.")?;
    a.want("› ")?;
    // On the screen (not only in the bytes): no part of the menu is left, the line that says
    // who answered is still there, and so are the tool's output and the reply.
    let screen = a.screen();
    assert!(!screen.contains("1. Yes"), "a stale menu line:\n{screen}");
    assert!(
        screen.contains(&format!("allowed once by {} (tether on", whoami())),
        "{screen}"
    );
    assert!(screen.contains("Answered from elsewhere."), "{screen}");
    a.send([4u8])?;
    a.want("detached")?;
    let events: Vec<Value> = {
        let mut c = daemon.ndjson()?;
        c.subscribe(&session, json!(0))?;
        c.events_until("replay_complete")?
    };
    let resolved = events
        .iter()
        .find(|e| e["type"] == "permission_resolved")
        .context("resolved")?;
    assert_eq!(resolved["data"]["decision"], "allow_once");
    Ok(())
}

#[test]
fn a_second_terminal_sees_a_long_paragraph_stream_row_by_row() -> anyhow::Result<()> {
    // One paragraph of ~600 characters, whose stream stalls before it ends.
    let words: Vec<String> = (1..=100).map(|i| format!("word{i}")).collect();
    let paragraph = words.join(" ");
    let fake =
        Fake::start(Script::of([Step::text(&paragraph).stall_after(4)]).titling("Streaming"))?;
    let daemon = Daemon::start_with(fake.env())?;
    let (a, mut b, _) = two_terminals(&daemon)?;
    a.send_line("write a long paragraph")?;
    // The watching terminal, at its prompt, gets the paragraph's rows while it streams.
    b.want("word1 word2 word3")?;
    b.want("word20 ")?;
    {
        let shown = b.shown.lock().unwrap_or_else(|p| p.into_inner());
        assert!(
            !shown.0.contains("word100"),
            "the stream stalled before its end"
        );
    }
    // Rows printed above its prompt leave what was on the screen where it was.
    let screen = settled(&b);
    assert!(screen.contains("› write a long paragraph"), "{screen}");
    assert!(screen.contains("word1 word2 word3"), "{screen}");
    Ok(())
}

#[test]
fn ctrl_c_cancels_a_running_turn_and_the_prompt_returns() -> anyhow::Result<()> {
    let fake = Fake::start(
        Script::of([
            Step::text("Working on it.\nStill working, and then the stream stalls forever.")
                .stall_after(4),
            Step::text("Fresh answer."),
        ])
        .titling("Something slow"),
    )?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = tether(&daemon, &["--", "start something slow"])?;
    a.want("Working on it.")?;
    a.send([3u8])?;
    a.want("─ interrupted")?;
    a.want("› ")?;
    a.send_line("again")?;
    a.want("Fresh answer.")?;
    a.want("› ")?;
    a.send([4u8])?;
    a.want("detached")?;
    Ok(())
}

/// A 1×1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

#[test]
fn a_long_paste_is_folded_and_ctrl_v_attaches_the_clipboard_image() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("A log and a dot.")]).titling("Pasted"))?;
    let daemon = Daemon::start_with(fake.env())?;
    // An X11 clipboard holding a PNG, served by a stand-in for xclip.
    let bin_dir = daemon.dir.path().join("clipboard-bin");
    std::fs::create_dir_all(&bin_dir)?;
    let xclip = bin_dir.join("xclip");
    std::fs::write(
        &xclip,
        format!(
            "#!/bin/sh\ncase \"$*\" in\n  *TARGETS*) printf 'TARGETS\\ntext/plain\\nimage/png\\n' ;;\n  *image/png*) echo {PNG} | base64 -d ;;\n  *) exit 1 ;;\nesac\n"
        ),
    )?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&xclip, std::fs::Permissions::from_mode(0o755))?;
    }
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut a = tether_with(&daemon, &[], &[("PATH", path), ("DISPLAY", ":77".into())])?;
    a.want("› ")?;
    let log: String = (1..=30).map(|i| format!("error line {i}\n")).collect();
    a.send("why does this fail? ")?;
    a.send(format!("\x1b[200~{log}\x1b[201~"))?;
    a.want("[pasted 30 lines #1]")?;
    a.send(" and what is ")?;
    a.send([0x16u8])?;
    a.want("[image #1]")?;
    a.send("\r")?;
    a.want("A log and a dot.")?;
    a.want("› ")?;
    a.send([4u8])?;
    a.want("detached")?;

    let requests = fake.server.message_requests();
    let turn = requests
        .iter()
        .find(|r| r.body["messages"][0]["content"].is_array() && r.body["tools"].is_array())
        .context("the turn's request")?;
    assert_eq!(turn.rejected, None);
    let content = turn.body["messages"][0]["content"]
        .as_array()
        .context("content")?;
    let text = content
        .iter()
        .find(|b| b["type"] == "text" && b["text"].as_str().is_some_and(|t| t.contains("why")))
        .context("the prompt's text")?;
    assert_eq!(
        text["text"],
        format!("why does this fail? {log} and what is [image #1]")
    );
    let image = content
        .iter()
        .find(|b| b["type"] == "image")
        .context("the image")?;
    assert_eq!(image["source"]["media_type"], "image/png");
    assert_eq!(image["source"]["data"], PNG);
    Ok(())
}

#[test]
fn a_running_tool_shows_a_spinner_with_its_time_and_the_tail_of_its_output() -> anyhow::Result<()> {
    let command = "for i in 1 2 3 4 5 6; do echo tick$i; sleep 0.3; done";
    let fake = Fake::start(
        Script::of([
            Step::text("Counting.").tool_use("Bash", json!({"command": command})),
            Step::text("Counted."),
        ])
        .titling("Ticks"),
    )?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = tether(&daemon, &["--", "count"])?;
    a.want("Allow Bash?")?;
    a.send("y")?;
    // Live while it runs: the output's tail under a spinner line with the elapsed time.
    a.want("│ tick2")?;
    a.want("(for i in 1 2 3 4 5 6; do echo tick$i; sleep 0.3; done) · 1 s")?;
    // Then the folded result for good.
    a.want("⎿ tick1")?;
    a.want("… 2 more lines")?;
    a.want("Counted.")?;
    a.want("─ done")?;
    a.want("› ")?;
    a.send([4u8])?;
    a.want("detached")?;
    Ok(())
}

#[test]
fn tether_r_lists_this_directorys_sessions_and_resumes_the_one_picked() -> anyhow::Result<()> {
    let daemon = Daemon::start()?;
    let mut c = daemon.ndjson()?;
    let cwd = daemon.workdir().display().to_string();
    for title in ["older work", "newer work"] {
        c.call("session/new", json!({"cwd": cwd, "title": title}))?;
        std::thread::sleep(Duration::from_millis(20));
    }
    c.call("session/new", json!({"cwd": "/tmp", "title": "elsewhere"}))?;

    let mut a = tether(&daemon, &["-r"])?;
    a.want("1. ")?;
    a.want("newer work")?;
    a.want("2. ")?;
    a.want("older work")?;
    a.want("resume which?")?;
    {
        let shown = a.shown.lock().unwrap_or_else(|p| p.into_inner());
        assert!(
            !shown.0.contains("elsewhere"),
            "only this directory's sessions"
        );
    }
    a.send("2\r")?;
    a.want("› ")?;
    a.send_line("/status")?;
    a.want("older work")?;
    a.send([4u8])?;
    a.want("detached")?;
    Ok(())
}

#[test]
fn resume_searches_what_was_said_and_switches_to_the_session_picked() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::text("Here is a fact about a zebra crossing."),
        Step::text("Nothing special here."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut c = daemon.ndjson()?;
    let work = daemon.workdir();
    let mut ids = Vec::new();
    for (title, prompt) in [("animals", "tell me a fact"), ("chores", "anything else")] {
        let session = c.call(
            "session/new",
            json!({"cwd": work, "title": title, "permissionMode": "bypassPermissions"}),
        )?["sessionId"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        c.watch(&session)?;
        c.start_turn(&session, prompt)?;
        c.events_until("turn_ended")?;
        ids.push(session);
    }

    // From the command line: the session whose reply holds the words, with where.
    let out = daemon.run_tether(&["sessions", "--search", "ZEBRA"])?;
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains(&ids[0][..8]), "{table}");
    assert!(!table.contains(&ids[1][..8]), "{table}");
    assert!(table.contains("zebra crossing"), "{table}");

    // In the terminal: the picker narrows as the words are typed, and Enter goes there.
    let mut a = tether(&daemon, &[])?;
    a.want("› ")?;
    a.send_line("/resume")?;
    a.want("Resume a session:")?;
    a.want("chores")?;
    a.send("zebr")?;
    a.want("zebra crossing")?;
    {
        let screen = a.screen();
        assert!(
            !screen.contains("chores"),
            "the list follows the search:\n{screen}"
        );
    }
    a.send("\r")?;
    a.want("a fact about a zebra crossing")?;
    a.want("› ")?;
    a.send_line("/status")?;
    a.want("animals")?;
    a.send([4u8])?;
    a.want("detached")?;
    Ok(())
}

#[test]
fn ctrl_t_opens_the_thinking_of_the_last_reply() -> anyhow::Result<()> {
    let fake = Fake::start(
        Script::of([
            Step::text("Use a queue.").thinking("A queue keeps the order; a stack would not.")
        ])
        .titling("Thinking"),
    )?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = tether(&daemon, &["--", "stack or queue?"])?;
    a.want("✻ Thinking…")?;
    a.want("Use a queue.")?;
    a.want("› ")?;
    {
        let shown = a.shown.lock().unwrap_or_else(|p| p.into_inner());
        assert!(!shown.0.contains("keeps the order"), "folded at first");
    }
    a.send([0x14u8])?;
    a.want("A queue keeps the order; a stack would not.")?;
    a.send([4u8])?;
    a.want("detached")?;
    Ok(())
}

#[test]
fn model_completes_from_the_daemons_catalog_and_switches_the_session() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("Opus here.")]).titling("Models"))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = tether(&daemon, &["--", "/cost"])?;
    // The prompt is back (its status on the right), not only the echo of `› /cost`.
    a.want("session cost")?;
    a.want("sonnet · default")?;
    a.send(b"/model claude-opus-5")?;
    a.send(b"\t")?;
    a.want("Claude Opus 5 · 1M")?;
    a.send(b"\r")?;
    a.want("claude-opus-5-5")?;
    a.send(b"\r")?;
    a.want("model claude-opus-5-5")?;
    a.want("› ")?;
    a.send(b"hi\r")?;
    a.want("Opus here.")?;
    let turn = turn_request(&fake, "hi")?;
    assert_eq!(turn.body["model"], "claude-opus-5-5");
    a.send([4u8])?;
    a.want("detached")?;
    Ok(())
}

#[test]
fn an_unknown_command_is_refused_with_the_one_list_of_commands() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([]).titling("Commands"))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = tether(&daemon, &[])?;
    a.want("› ")?;
    a.send_line("/nope")?;
    a.want("unknown command /nope; the commands are ")?;
    {
        let shown = a.shown.lock().unwrap_or_else(|p| p.into_inner());
        for listed in ["/help", "/allow", "/model", "/effort", "/compact", "/cost"] {
            assert!(shown.0.contains(listed), "{listed} missing: {}", shown.0);
        }
    }
    assert!(
        fake.server.message_requests().is_empty(),
        "nothing reached the model"
    );
    a.send([4u8])?;
    a.want("detached")?;
    Ok(())
}

#[test]
fn model_and_permission_mode_on_the_command_line_apply_to_the_interactive_session()
-> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("Haiku here.")]).titling("Flags"))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = tether(
        &daemon,
        &["--model", "haiku", "--permission-mode", "plan", "--", "hi"],
    )?;
    a.want("Haiku here.")?;
    a.want("› ")?;
    a.send([4u8])?;
    a.want("detached")?;
    let turn = turn_request(&fake, "hi")?;
    assert_eq!(turn.body["model"], "claude-haiku-5-5");
    let session = only_session(&daemon)?;
    let mut c = daemon.ndjson()?;
    let got = c.call("session/get", json!({"sessionId": session}))?;
    assert_eq!(got["permissionMode"], "plan", "{got}");
    assert_eq!(got["model"], "haiku");
    Ok(())
}

#[test]
fn claude_code_turn_flags_apply_to_every_interactive_turn() -> anyhow::Result<()> {
    let fake =
        Fake::start(Script::of([Step::text("First."), Step::text("Second.")]).titling("Flags"))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = tether(
        &daemon,
        &[
            "--system-prompt",
            "Answer in one word.",
            "--disallowedTools",
            "WebFetch",
            "--",
            "one",
        ],
    )?;
    a.want("First.")?;
    a.want("› ")?;
    a.send_line("two")?;
    a.want("Second.")?;
    a.want("› ")?;
    a.send([4u8])?;
    a.want("detached")?;
    for prompt in ["one", "two"] {
        let sent = fake
            .server
            .message_requests()
            .into_iter()
            .find(|r| {
                r.body["messages"]
                    .to_string()
                    .contains(&format!("\"{prompt}\""))
            })
            .with_context(|| format!("the request of {prompt}"))?;
        assert_eq!(sent.body["system"][0]["text"], "Answer in one word.");
        assert!(!tether_tests::tool_names(&sent.body)?.contains(&"WebFetch"));
    }
    Ok(())
}

#[test]
fn the_first_start_shows_a_hint_and_later_ones_do_not() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([]).titling("Hint"))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = tether(&daemon, &[])?;
    a.want("Welcome to tether")?;
    a.want("› ")?;
    a.send([4u8])?;
    a.want("detached")?;
    drop(a);
    let mut b = tether(&daemon, &[])?;
    b.want("› ")?;
    {
        let shown = b.shown.lock().unwrap_or_else(|p| p.into_inner());
        assert!(!shown.0.contains("Welcome"), "only once: {}", shown.0);
    }
    b.send([4u8])?;
    b.want("detached")?;
    Ok(())
}

#[test]
fn the_transcript_follows_a_terminal_resize() -> anyhow::Result<()> {
    let paragraph = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi \
                     omicron pi rho sigma tau upsilon phi chi psi omega and then the end.";
    let fake =
        Fake::start(Script::of([Step::text("Wide."), Step::text(paragraph)]).titling("Resize"))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = tether(&daemon, &["--", "first"])?;
    a.want("Wide.")?;
    a.want("› ")?;
    a.resize(40, 30)?;
    a.send_line("second")?;
    a.want("the end.")?;
    a.want("─ done")?;
    let shown = a.shown.lock().unwrap_or_else(|p| p.into_inner()).0.clone();
    let at = shown.rfind("alpha beta").context("the paragraph")?;
    let rows: Vec<&str> = shown[at..]
        .split("\r\n")
        .take_while(|row| !row.contains("the end."))
        .collect();
    assert!(
        rows.len() >= 3 && rows.iter().all(|r| r.chars().count() <= 40),
        "wrapped at 40 columns: {rows:?}"
    );
    a.send([4u8])?;
    a.want("detached")?;
    Ok(())
}

#[test]
fn a_paste_during_a_turn_waits_unechoed_for_the_prompt_and_stays_one_prompt() -> anyhow::Result<()>
{
    let fake = Fake::start(
        Script::of([
            Step::text("Working on it.\nStill working, and then the stream stalls forever.")
                .stall_after(4),
            Step::text("Got all six."),
        ])
        .titling("Paste while busy"),
    )?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = tether(&daemon, &["--", "start something slow"])?;
    a.want("Working on it.")?;
    let pasted: String = (1..=6).map(|i| format!("pasted row {i}\n")).collect();
    a.send(format!("\x1b[200~{pasted}\x1b[201~"))?;
    std::thread::sleep(Duration::from_millis(300));
    {
        let shown = a.shown.lock().unwrap_or_else(|p| p.into_inner());
        assert!(
            !shown.0.contains("pasted row 3"),
            "not echoed into the transcript"
        );
    }
    a.send([3u8])?;
    a.want("─ interrupted")?;
    a.want("[pasted 6 lines #1]")?;
    a.send("\r")?;
    a.want("Got all six.")?;
    a.want("› ")?;
    a.send([4u8])?;
    a.want("detached")?;
    // The terminal is handed back as it was: bracketed paste off again.
    a.want("\x1b[?2004l")?;
    let turns = turn_messages(&fake);
    assert_eq!(turns.len(), 2, "one turn for the whole paste: {turns:?}");
    assert!(
        turns[1].contains("pasted row 1\\npasted row 2"),
        "{}",
        turns[1]
    );
    assert!(turns[1].contains("pasted row 6"), "{}", turns[1]);
    Ok(())
}

#[test]
fn a_session_where_nothing_was_asked_is_not_kept() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("Kept.")]).titling("Kept"))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = tether(&daemon, &[])?;
    a.want("› ")?;
    a.send([4u8])?;
    a.want("nothing was asked, so the empty session was not kept")?;
    let mut c = daemon.ndjson()?;
    let list = c.call("session/list", json!({}))?;
    assert_eq!(list["total"], 0, "{list}");
    // One where something was asked stays.
    let mut b = tether(&daemon, &["--", "keep this"])?;
    b.want("Kept.")?;
    b.want("› ")?;
    b.send([4u8])?;
    b.want("the session stays in tetherd")?;
    let list = c.call("session/list", json!({}))?;
    assert_eq!(list["total"], 1, "{list}");
    Ok(())
}

#[test]
fn esc_interrupts_a_turn_typing_waits_for_the_prompt_and_ctrl_d_detaches_at_once()
-> anyhow::Result<()> {
    let fake = Fake::start(
        Script::of([
            Step::text("Working on it.\nStill working, and then the stream stalls forever.")
                .stall_after(4),
            Step::text("Second answer.\nThen this one stalls too.").stall_after(3),
        ])
        .titling("Esc and Ctrl+D"),
    )?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = tether(&daemon, &["--", "start something slow"])?;
    a.want("Working on it.")?;
    // Typed during the turn: not echoed into the transcript, shown dimmed under the live
    // area, kept for the next prompt.
    a.send("typed ahead")?;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !a.screen().contains("› typed ahead") {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the typed text is not shown: {}",
            a.screen()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    a.send("\x1b")?;
    a.want("interrupted")?;
    a.want("typed ahead")?;
    a.send(" too\r")?;
    a.want("Second answer.")?;
    // Ctrl+D while the turn runs detaches now, not when the turn ends.
    a.send([4u8])?;
    a.want("detached")?;
    let turns = turn_messages(&fake);
    assert_eq!(turns.len(), 2, "{turns:?}");
    assert!(turns[1].contains("typed ahead too"), "{}", turns[1]);
    // The session goes on in the daemon: the second turn still runs.
    let mut c = daemon.ndjson()?;
    let list = c.call("session/list", json!({}))?;
    assert_eq!(list["sessions"][0]["status"], "running", "{list}");
    Ok(())
}

#[test]
fn no_with_a_message_tells_the_model_what_to_do_instead() -> anyhow::Result<()> {
    let fake = Fake::start(echo_script("Fine, I will not."))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = tether(&daemon, &["--", "run the echo"])?;
    a.want("Allow Bash?")?;
    a.send("n")?;
    a.want("what should the model do instead? (Enter to skip) ")?;
    a.send("use printf instead\r")?;
    // The line is echoed while it is typed, then the turn goes on.
    a.want("use printf instead\r\n")?;
    a.want(&format!("denied by {} (tether", whoami()))?;
    a.want("Fine, I will not.")?;
    a.want("› ")?;
    a.send([4u8])?;
    a.want("detached")?;
    let told = turn_messages(&fake)
        .pop()
        .context("the request after the answer")?;
    assert!(told.contains("use printf instead"), "{told}");
    Ok(())
}

#[test]
fn an_approved_edit_shows_its_diff_once() -> anyhow::Result<()> {
    let fake = Fake::start(notes_edit("An edit"))?;
    let daemon = Daemon::start_with(fake.env())?;
    notes(&daemon)?;
    let mut a = tether(&daemon, &["--", "edit the notes"])?;
    a.want("Allow Edit?")?;
    a.want("+fresh words")?;
    a.want("(n)")?;
    a.send("y")?;
    a.want("applied as shown above: 1 line added, 1 line removed")?;
    a.want("Edited.")?;
    a.want("› ")?;
    let screen = a.screen();
    assert_eq!(screen.matches("+fresh words").count(), 1, "{screen}");
    assert_eq!(
        std::fs::read_to_string(daemon.workdir().join("notes.txt"))?,
        "first\nfresh words\nlast\n"
    );
    a.send([4u8])?;
    a.want("detached")?;
    Ok(())
}

#[test]
fn the_status_line_follows_shift_tab_and_clear() -> anyhow::Result<()> {
    let fake = Fake::start(
        Script::of([Step::text("Use a queue.").thinking("A queue keeps the order.")])
            .titling("Status"),
    )?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = tether(&daemon, &["--", "hi"])?;
    a.want("Use a queue.")?;
    a.want("default · 0% context")?;
    // What Shift+Tab and Ctrl+T print stays on the screen, above a prompt that shows the new
    // mode.
    a.send("\x1b[Z")?;
    a.want("acceptEdits · 0% context")?;
    a.send([20u8])?;
    a.want("A queue keeps the order.")?;
    let screen = settled(&a);
    assert!(screen.contains("mode: acceptEdits"), "{screen}");
    // What printed above the prompt took the old status row's place: one status on screen.
    assert_eq!(screen.matches(" · 0% context").count(), 1, "{screen}");
    assert!(screen.contains("  A queue keeps the order."), "{screen}");
    assert!(status_row(&screen).contains("acceptEdits"), "{screen}");
    // A cleared conversation's context is unknown until the next reply measures it.
    a.send_line("/clear")?;
    a.want("acceptEdits · $")?;
    let screen = settled(&a);
    assert!(!status_row(&screen).contains("context"), "{screen}");
    a.send([4u8])?;
    a.want("detached")?;
    Ok(())
}

#[test]
fn ctrl_o_and_expand_show_a_folded_output_in_full() -> anyhow::Result<()> {
    let fake = Fake::start(
        Script::of([
            Step::text("Counting.").tool_use("Bash", json!({"command": "seq 101 112"})),
            Step::text("Counted."),
        ])
        .titling("Count"),
    )?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = tether(
        &daemon,
        &["--permission-mode", "bypassPermissions", "--", "count"],
    )?;
    a.want("⎿ 101")?;
    a.want("… 8 more lines (Ctrl+O or /expand shows them)")?;
    a.want("Counted.")?;
    a.want("bypassPermissions")?;
    assert!(!a.screen().contains("    112"), "folded at first");
    a.send([15u8])?;
    a.want("Bash(seq 101 112) — all 12 lines")?;
    a.want("112")?;
    let screen = settled(&a);
    assert!(screen.contains("    112"), "{screen}");
    a.send_line("/expand 2")?;
    a.want("only 1 folded outputs are kept")?;
    a.send([4u8])?;
    a.want("detached")?;
    Ok(())
}

#[test]
fn a_code_line_wider_than_the_terminal_is_on_the_screen_once_at_120_and_60_columns()
-> anyhow::Result<()> {
    let long = "x".repeat(240);
    let reply = format!(
        "Here:\n\n```rust\nfn main() {{\n    let marker_q = \"{long}\";\n    println!(\"{{}}\", marker_q.len());\n}}\n```\nDone streaming."
    );
    let fake =
        Fake::start(Script::of([slow_reply(&reply), slow_reply(&reply)]).titling("Wide code"))?;
    let daemon = Daemon::start_with(fake.env())?;
    for cols in [120u16, 60] {
        let mut a = tether(&daemon, &[])?;
        a.resize(cols, 30)?;
        a.want("› ")?;
        a.send_line("show me")?;
        a.want("Done streaming.")?;
        a.want("─ done")?;
        let screen = settled(&a);
        assert_eq!(
            screen.matches("let marker_q").count(),
            1,
            "at {cols} columns:\n{screen}"
        );
        assert_eq!(screen.matches("println!").count(), 1, "{screen}");
        a.send([4u8])?;
        a.want("detached")?;
    }
    Ok(())
}

#[test]
fn the_terminal_answers_a_question_by_key_and_approves_a_plan() -> anyhow::Result<()> {
    let fake = Fake::start(
        Script::of([
            Step::text("One question.").tool_use(
                "AskUserQuestion",
                json!({"questions": [{"question": "Which database?", "header": "Database",
                    "options": [{"label": "Postgres", "description": "a server"}, {"label": "SQLite", "description": "a file"}]}]}),
            ),
            Step::text("Planning.").tool_use("EnterPlanMode", json!({})),
            Step::default().tool_use("ExitPlanMode", json!({"plan": "1. Use **SQLite**"})),
            Step::text("On it."),
        ])
        .titling("Questions"),
    )?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = tether(&daemon, &["--", "set it up"])?;
    a.want("The model asks:")?;
    a.want("2. SQLite — a file")?;
    a.want("3. Other")?;
    a.send("2")?;
    a.want("→ SQLite")?;
    a.want("answered")?;
    a.want("The model's plan:")?;
    a.want("Use SQLite")?;
    a.want("(n)")?;
    a.send("a")?;
    a.want("plan approved (edits run without asking)")?;
    a.want("On it.")?;
    a.want("acceptEdits")?;
    a.send([4u8])?;
    a.want("detached")?;
    let sent = turn_messages(&fake).join("\n");
    assert!(
        sent.contains(r#"\"Which database?\" = \"SQLite\""#),
        "{sent}"
    );
    Ok(())
}

#[test]
fn a_cloned_folder_is_trusted_only_when_the_user_says_so() -> anyhow::Result<()> {
    let fake =
        Fake::start(Script::of([Step::text("First."), Step::text("Second.")]).titling("Trust"))?;
    let daemon = Daemon::start_with(fake.env())?;
    let clone = daemon.dir.path().join("clone");
    std::fs::create_dir_all(clone.join(".claude"))?;
    std::fs::write(
        clone.join(".claude/settings.json"),
        json!({
            "statusLine": {"type": "command", "command": "touch status-ran; echo from the clone"},
            "hooks": {"SessionStart": [{"hooks": [
                {"type": "command", "command": "touch session-start-ran"}]}]},
        })
        .to_string(),
    )?;
    // No: the session runs, and nothing of the clone's acts.
    let mut a = tether_in(&daemon, &clone, &["--", "one"], &[])?;
    a.want("SessionStart hooks")?;
    a.want("Trust this folder? [y/N]")?;
    a.send("n\r")?;
    a.want("Not trusted")?;
    a.want("First.")?;
    a.send([4u8])?;
    a.want("detached")?;
    assert!(!clone.join("session-start-ran").exists());
    assert!(!clone.join("status-ran").exists());
    // Yes: recorded, and the clone's hook and status line act from the first prompt on.
    let mut b = tether_in(&daemon, &clone, &["--", "two"], &[])?;
    b.want("Trust this folder? [y/N]")?;
    b.send("y\r")?;
    b.want("Trusted")?;
    b.want("Second.")?;
    b.want("from the clone")?;
    b.send([4u8])?;
    b.want("detached")?;
    assert!(clone.join("session-start-ran").exists());
    // Asked once: a trusted folder opens straight to the prompt.
    let mut c = tether_in(&daemon, &clone, &[], &[])?;
    c.want("› ")?;
    assert!(!settled(&c).contains("Trust this folder"));
    c.send([4u8])?;
    Ok(())
}

#[test]
fn a_status_line_command_from_the_settings_replaces_the_status() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("Hello.")]).titling("Status line"))?;
    let daemon = Daemon::start_with(fake.env())?;
    let claude = daemon.workdir().join(".claude");
    std::fs::create_dir_all(&claude)?;
    std::fs::write(
        claude.join("settings.json"),
        json!({"statusLine": {"type": "command",
            "command": "cat > status-input.json; printf '\\033[32mbranch main\\033[0m · custom\\n'"}})
        .to_string(),
    )?;
    let mut a = tether(&daemon, &["--", "hi"])?;
    a.want("Hello.")?;
    a.want("branch main · custom")?;
    let screen = settled(&a);
    let status = status_row(&screen);
    assert!(
        status.trim_end().ends_with("branch main · custom") && !status.contains("sonnet"),
        "{screen}"
    );
    let input: Value = serde_json::from_str(&std::fs::read_to_string(
        daemon.workdir().join("status-input.json"),
    )?)?;
    assert_eq!(
        input["session_id"].as_str(),
        Some(only_session(&daemon)?.as_str())
    );
    assert_eq!(input["model"]["id"], "sonnet");
    assert!(input["cost"]["total_cost_usd"].is_number(), "{input}");
    a.send([4u8])?;
    a.want("detached")?;
    Ok(())
}

/// This user's name, as the daemon names the people at its clients.
fn whoami() -> String {
    nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_default()
}
