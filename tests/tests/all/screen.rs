//! What the terminal shows, row by row, at 120 and 60 columns and with several terminals on one
//! session: an input line the status never covers, a turn any controller can stop, the whole
//! permission prompt in every controller, menus erased to their last wrapped row, notices that
//! never split a streaming word, prompts queued behind another terminal's turn, pastes kept
//! whole in the history, and a clean terminal after a detach.

use crate::pty::{
    notes, notes_edit, only_session, settled, slow_reply, status_row, tether, tether_at,
    turn_messages, two_terminals,
};
use anyhow::Context;
use serde_json::json;
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake};

/// A reply that streams its first lines and then stalls until cancelled.
fn stalled(first: &str) -> Step {
    Step::text(format!("{first}\nAnd then the stream stalls for good.")).stall_after(4)
}

#[test]
fn a_long_prompt_stays_whole_on_the_screen_at_120_and_60_columns() -> anyhow::Result<()> {
    let fake =
        Fake::start(Script::of([Step::text("Noted."), Step::text("Noted.")]).titling("Long"))?;
    let daemon = Daemon::start_with(fake.env())?;
    for cols in [120u16, 60] {
        let words: Vec<String> = (1..=24).map(|i| format!("word{i}-{cols}")).collect();
        let prompt = words.join(" ");
        let mut a = tether_at(&daemon, cols, &[])?;
        a.want("› ")?;
        a.send(&prompt)?;
        // While typing, the status keeps to its own row.
        let last = format!("word24-{cols}");
        let screen = a.until("the typed prompt", |s| s.contains(&last))?;
        // (The screen's text joins the rows the terminal wrapped.)
        assert!(screen.contains(&format!("› {prompt}")), "{screen}");
        a.send("\r")?;
        a.want("Noted.")?;
        a.want("› ")?;
        let screen = settled(&a);
        assert!(screen.contains(&format!("› {prompt}\n")), "{screen}");
        // The status is on the row above the new input line, and nowhere in the sent prompt.
        assert!(status_row(&screen).contains("default"), "{screen}");
        assert_eq!(screen.matches("default ·").count(), 1, "{screen}");
        a.send([4u8])?;
        a.want("detached")?;
    }
    Ok(())
}

#[test]
fn any_controller_stops_the_running_turn_and_an_observer_is_told_it_cannot() -> anyhow::Result<()> {
    let fake = Fake::start(
        Script::of([
            stalled("Working on the first."),
            stalled("Working on the second."),
            stalled("Working on the third."),
        ])
        .titling("Stopping"),
    )?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = tether(&daemon, &["--", "start the first"])?;
    a.want("Working on the first.")?;
    let session = only_session(&daemon)?;
    let mut watcher = tether(&daemon, &["attach", &session, "--observe"])?;
    watcher.want("Working on the first.")?;
    watcher.send("\x1b")?;
    watcher.want("observers cannot cancel")?;

    // Ctrl+D mid-turn leaves the terminal clean: nothing of the reply after the notice.
    a.send([4u8])?;
    a.want("detached")?;
    a.exited()?;
    let after = a.printed_after("detached");
    assert!(
        !after.contains("stalls"),
        "printed after detaching: {after:?}"
    );
    assert!(
        after.trim_end_matches("\x1b[?2004l").ends_with('\n'),
        "the shell prompt would follow: {after:?}"
    );

    // Back with `tether -c`: Esc stops the turn it did not start.
    let mut again = tether(&daemon, &["-c"])?;
    again.want("Working on the first.")?;
    again.send("\x1b")?;
    again.want("interrupted")?;
    again.want("› ")?;
    watcher.want("interrupted")?;

    // A second controller's Ctrl+C stops a turn started elsewhere.
    let mut b = tether(&daemon, &["attach", &session])?;
    b.want("› ")?;
    again.send_line("start the second")?;
    b.want("Working on the second.")?;
    b.send([3u8])?;
    b.want("interrupted")?;
    again.want("interrupted")?;

    // `/cancel`, typed while the turn runs, is the spelled-out form.
    again.want("› ")?;
    again.send_line("start the third")?;
    b.want("Working on the third.")?;
    b.send_line("/cancel")?;
    again.want("interrupted")?;
    let status = daemon
        .ndjson()?
        .call("session/get", json!({"sessionId": session}))?;
    assert_eq!(status["status"], "idle", "{status}");
    // The line was a command, not a prompt: three turns were asked of the model.
    assert_eq!(turn_messages(&fake).len(), 3);
    Ok(())
}

#[test]
fn a_second_controller_gets_the_whole_prompt_and_loses_it_when_the_first_answers()
-> anyhow::Result<()> {
    let fake = Fake::start(notes_edit("Two approvers"))?;
    let daemon = Daemon::start_with(fake.env())?;
    notes(&daemon)?;
    let (mut a, mut b, _) = two_terminals(&daemon)?;
    a.send_line("edit the notes")?;
    a.want("Allow Edit?")?;
    // The controller that sat at its prompt shows the diff and the choices, not a hint.
    b.want("Allow Edit?")?;
    let screen = b.until("the choices", |s| s.contains("(n)"))?;
    assert!(screen.contains("+fresh words"), "{screen}");
    assert!(screen.contains("-old words"), "{screen}");
    assert!(screen.contains("1. Yes"), "{screen}");
    assert!(!screen.contains("/allow or /deny"), "{screen}");
    a.want("(n)")?;
    a.send("y")?;
    b.want("allowed once by")?;
    b.want("Edited.")?;
    b.want("› ")?;
    let screen = settled(&b);
    assert!(!screen.contains("1. Yes"), "a stale menu row:\n{screen}");
    assert!(screen.contains("Edited."), "{screen}");
    Ok(())
}

#[test]
fn a_menu_that_wrapped_is_erased_to_its_last_row_at_60_columns() -> anyhow::Result<()> {
    let long = "x".repeat(50);
    let fake = Fake::start(
        Script::of([
            Step::text("First.").tool_use("Bash", json!({"command": format!("touch {long}-one")})),
            Step::text("Second.").tool_use("Bash", json!({"command": format!("touch {long}-two")})),
            Step::text("All done."),
        ])
        .titling("Wrapped menus"),
    )?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = tether_at(&daemon, 60, &[])?;
    a.want("› ")?;
    let session = only_session(&daemon)?;
    let mut b = tether(&daemon, &["attach", &session])?;
    b.want("› ")?;
    a.send_line("run both")?;
    a.want("don't ask again")?;
    a.want("(n)")?;
    // Answered in the other terminal: the menu goes, wrapped rows and all.
    b.want("(n)")?;
    b.send("y")?;
    a.want("allowed once by")?;
    // Answered here with `n`: the same.
    a.want("(n)")?;
    a.send("n")?;
    a.want("what should the model do instead?")?;
    a.send("\r")?;
    a.want("All done.")?;
    a.want("› ")?;
    let screen = settled(&a);
    assert!(!screen.contains("1. Yes"), "a stale menu row:\n{screen}");
    assert!(!screen.contains("don't ask"), "a stale menu row:\n{screen}");
    assert!(!screen.contains("(y)"), "a stale menu row:\n{screen}");
    Ok(())
}

#[test]
fn a_recalled_prompt_sends_its_paste_in_full() -> anyhow::Result<()> {
    let fake = Fake::start(
        Script::of([Step::text("Read it."), Step::text("Read it again.")]).titling("Paste"),
    )?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = tether(&daemon, &[])?;
    a.want("› ")?;
    let log: String = (1..=40).map(|i| format!("log line {i}\n")).collect();
    a.send(format!("look at \x1b[200~{log}\x1b[201~"))?;
    a.want("[pasted 40 lines #1]")?;
    a.send("\r")?;
    a.want("Read it.")?;
    a.want("› ")?;
    // Up recalls the prompt; Enter sends it again, paste and all.
    a.send("\x1b[A")?;
    a.until("the recalled prompt", |s| {
        s.contains("› look at log line 1\n")
    })?;
    a.send("\r")?;
    a.want("Read it again.")?;
    let turns = turn_messages(&fake);
    let last = turns.last().context("the second turn")?;
    assert!(last.contains("log line 40"), "{last}");
    assert!(!last.contains("[pasted"), "{last}");
    Ok(())
}

#[test]
fn notices_and_queued_prompts_never_split_a_streaming_reply() -> anyhow::Result<()> {
    let words: Vec<String> = (1..=90).map(|i| format!("word{i}")).collect();
    let paragraph = words.join(" ");
    let fake = Fake::start(
        Script::of([slow_reply(&paragraph), Step::text("The queued answer.")]).titling("Notices"),
    )?;
    let daemon = Daemon::start_with(fake.env())?;
    let (mut a, mut b, session) = two_terminals(&daemon)?;
    a.send_line("write a long paragraph")?;
    b.want("word3")?;
    // Someone joins, and the second controller types a prompt, while the reply streams.
    let mut c = tether(&daemon, &["attach", &session, "--observe"])?;
    c.want("word")?;
    b.send("what next?\r")?;
    b.until("the queued prompt under the live turn", |s| {
        s.contains("› what next?")
    })?;
    a.want("word90")?;
    // The queued prompt runs once the turn has ended, printed above its own answer.
    b.want("The queued answer.")?;
    b.want("› ")?;
    for pty in [&a, &b] {
        let rows = settled(pty);
        for word in &words {
            assert!(
                rows.contains(&format!("{word} ")) || rows.contains(&format!("{word}\n")),
                "{word} is split or missing:\n{rows}"
            );
        }
    }
    let screen = settled(&b);
    let asked = screen.find("› what next?").context("the queued prompt")?;
    let answered = screen.find("The queued answer.").context("its answer")?;
    let streamed = screen.find("word90").context("the first reply")?;
    assert!(streamed < asked && asked < answered, "{screen}");
    Ok(())
}

#[test]
fn a_loop_is_offered_only_as_itself_and_the_prompt_says_what_the_command_is_for()
-> anyhow::Result<()> {
    let looped = "for i in 1 2 3; do echo step-$i; done";
    let globbed = "for f in *.txt; do wc -l $f; done";
    let fake = Fake::start(
        Script::of([
            Step::text("Looping.").tool_use(
                "Bash",
                json!({"command": looped, "description": "Print three steps"}),
            ),
            Step::text("Again.").tool_use("Bash", json!({"command": looped})),
            Step::text("Counting.").tool_use("Bash", json!({"command": globbed})),
            Step::text("Looped."),
        ])
        .titling("Loops"),
    )?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = tether(&daemon, &["--", "loop"])?;
    a.want("Allow Bash?")?;
    a.want("(Print three steps)")?;
    a.want("only exactly this command can be allowed")?;
    let screen = a.until("the choices", |s| s.contains("(n)"))?;
    assert!(
        screen.contains(&format!("don't ask again this session for Bash({looped})")),
        "{screen}"
    );
    assert!(!screen.contains("Bash(for i:*)"), "{screen}");
    assert!(!screen.contains("Bash(do echo:*)"), "{screen}");
    a.send("s")?;
    a.want("step-3")?;
    // The same loop again runs without asking; one with a pattern offers no rule at all.
    a.want("Allow Bash?")?;
    a.want("it is asked about each time")?;
    let screen = a.until("the choices", |s| s.contains("(n)"))?;
    assert!(screen.contains("1. Yes (y)"), "{screen}");
    assert!(screen.contains("2. No, and tell the model"), "{screen}");
    assert!(!screen.contains("don't ask again"), "{screen}");
    a.send("y")?;
    a.want("Looped.")?;
    let shown = a.printed_after("Looping.");
    assert_eq!(shown.matches("Allow Bash?").count(), 2, "{shown}");
    Ok(())
}

#[test]
fn a_wide_table_keeps_its_grid_and_wraps_inside_the_long_cell_at_120_columns() -> anyhow::Result<()>
{
    let words: Vec<String> = (1..=30).map(|i| format!("reason{i}")).collect();
    let long = words.join(" ");
    let table = format!(
        "Here:\n\n| file | status | why |\n|---|---|---|\n| src/main.rs | changed | {long} |\n| README.md | same | nothing to say |\n\nThat is all."
    );
    let fake = Fake::start(Script::of([Step::text(&table)]).titling("Table"))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = tether_at(&daemon, 120, &["--", "show the table"])?;
    a.want("That is all.")?;
    settled(&a);
    // Row by row, as the terminal shows them.
    let screen = a.rows();
    assert!(
        screen.contains("src/main.rs │ changed │ reason1 reason2"),
        "{screen}"
    );
    assert!(
        screen.contains("README.md   │ same    │ nothing to say"),
        "{screen}"
    );
    assert!(
        !screen.contains("why: "),
        "no key: value fallback:\n{screen}"
    );
    for word in &words {
        assert!(
            screen.contains(&format!("{word} ")) || screen.contains(&format!("{word}\n")),
            "{word} is split:\n{screen}"
        );
    }
    // Every row of the grid fits the terminal.
    assert!(
        screen
            .lines()
            .filter(|l| l.contains('│'))
            .all(|l| l.chars().count() < 120),
        "{screen}"
    );
    Ok(())
}

#[test]
fn the_small_things_a_daily_user_reads() -> anyhow::Result<()> {
    let fake = Fake::start(
        Script::of([
            Step::text("Planning.").tool_use(
                "TodoWrite",
                json!({"todos": [{"content": "Write the parser", "status": "in_progress", "activeForm": "Writing the parser"}]}),
            ),
            Step::text("Reading.").tool_use("Read", json!({"file_path": "notes.txt"})),
            Step::text("Editing.").tool_use(
                "Edit",
                json!({"file_path": "notes.txt", "old_string": "old words", "new_string": "fresh words"}),
            ),
            Step::text("Edited."),
        ])
        .titling("Small things"),
    )?;
    let daemon = Daemon::start_with(fake.env())?;
    std::fs::write(daemon.workdir().join("notes.txt"), "old words\n")?;
    let mut a = tether(&daemon, &["--", "plan and edit"])?;
    // The plan has its own heading, and no empty call above it.
    a.want("● Plan")?;
    // The edit's prompt names the file as the user would.
    a.want("Allow Edit?")?;
    a.want("--- notes.txt")?;
    a.want("(n)")?;
    a.send("y")?;
    a.want("Edited.")?;
    a.want("› ")?;
    assert!(!a.screen().contains("TodoWrite("), "{}", a.screen());
    // `/model` says what it did.
    a.send_line("/model opus")?;
    a.want("◦ model opus")?;
    a.want("› ")?;
    a.send([4u8])?;
    a.want("detached")?;
    a.exited()?;
    // Statuses and prices in words and numbers people write.
    let out = daemon.run_tether(&["models"])?;
    let models = String::from_utf8_lossy(&out.stdout);
    assert!(!models.contains("0000000"), "{models}");
    let session = only_session(&daemon)?;
    let mut watcher = daemon.ndjson()?;
    watcher.call(
        "session/subscribe",
        json!({"sessionId": session, "since": "head"}),
    )?;
    // (The terminal's own leaving reaches the daemon when it does.)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let out = daemon.run_tether(&["sessions"])?;
        let listed = String::from_utf8_lossy(&out.stdout).into_owned();
        if listed.contains("idle (1 attached)") {
            break;
        }
        anyhow::ensure!(std::time::Instant::now() < deadline, "{listed}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Ok(())
}

#[test]
fn the_commands_people_type_and_ctrl_g() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("Got the edited prompt.")]).titling("Commands"))?;
    let daemon = Daemon::start_with(fake.env())?;
    let work = daemon.workdir();
    // Git as a fresh machine has it, whatever the runner's own configuration says.
    let git = |args: &[&str]| -> anyhow::Result<()> {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(&work)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()?;
        anyhow::ensure!(out.status.success(), "git {args:?}: {out:?}");
        Ok(())
    };
    git(&["init", "-q"])?;
    std::fs::write(work.join("notes.txt"), "old line\n")?;
    git(&["add", "notes.txt"])?;
    git(&["commit", "-qm", "first"])?;
    std::fs::write(work.join("notes.txt"), "new line\n")?;
    std::fs::write(work.join("fresh.txt"), "x\n")?;
    std::fs::create_dir_all(daemon.dir.path().join("elsewhere"))?;
    // An editor that writes the prompt.
    let editor = daemon.dir.path().join("fake-editor");
    std::fs::write(
        &editor,
        "#!/bin/sh\nprintf 'a prompt written in the editor' > \"$1\"\n",
    )?;
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let editor = editor.display().to_string();
    let mut a = crate::pty::tether_with(
        &daemon,
        &[],
        &[("EDITOR", editor.clone()), ("VISUAL", editor)],
    )?;
    a.want("› ")?;
    a.send_line("/diff")?;
    a.want("+new line")?;
    a.want("untracked: fresh.txt")?;
    let screen = a.screen();
    assert!(screen.contains("-old line"), "{screen}");
    a.send_line("/rename A better name")?;
    a.want("renamed to \"A better name\"")?;
    let session = only_session(&daemon)?;
    let got = daemon
        .ndjson()?
        .call("session/get", json!({"sessionId": session}))?;
    assert_eq!(got["title"], "A better name", "{got}");
    a.send_line("/add-dir ../elsewhere")?;
    a.want("is a working directory of this terminal's turns from now on")?;
    a.send_line("/plan")?;
    a.want("mode: plan")?;
    a.send_line("/doctor")?;
    a.want("✓ daemon")?;
    // Ctrl+G: the prompt comes back from the editor and is sent with Enter.
    a.send([7u8])?;
    a.want("a prompt written in the editor")?;
    a.send("\r")?;
    a.want("Got the edited prompt.")?;
    crate::pty::turn_request(&fake, "a prompt written in the editor")?;
    a.want("› ")?;
    // /copy puts the reply on the clipboard through the terminal.
    a.send_line("/copy")?;
    a.want("copied the last reply (22 characters)")?;
    let encoded = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode("Got the edited prompt.")
    };
    assert!(
        a.printed_after("/copy")
            .contains(&format!("\x1b]52;c;{encoded}\x07")),
        "no OSC 52 copy"
    );
    // /memory opens the project's CLAUDE.md in the editor.
    a.send_line("/memory")?;
    a.want("CLAUDE.md saved")?;
    assert_eq!(
        std::fs::read_to_string(daemon.workdir().join("CLAUDE.md"))?,
        "a prompt written in the editor"
    );
    Ok(())
}

#[test]
fn a_command_typed_with_a_bang_runs_and_its_output_reaches_the_model() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("It printed from-the-shell.")]).titling("Bang"))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = tether(&daemon, &[])?;
    a.want("› ")?;
    a.send_line("!echo from-the-shell; echo to-stderr >&2; exit 3")?;
    a.want("⎿ from-the-shell")?;
    a.want("to-stderr")?;
    a.want("exit code 3")?;
    a.want("› ")?;
    // The model asked nothing for it; the next prompt carries it as Claude Code sends it.
    assert!(turn_messages(&fake).is_empty());
    a.send_line("what did it print?")?;
    a.want("It printed from-the-shell.")?;
    let sent = turn_messages(&fake).pop().context("the request")?;
    assert!(
        sent.contains("<bash-input>echo from-the-shell; echo to-stderr >&2; exit 3</bash-input>"),
        "{sent}"
    );
    assert!(
        sent.contains("<bash-stdout>from-the-shell\\n</bash-stdout>"),
        "{sent}"
    );
    assert!(
        sent.contains("<bash-stderr>to-stderr\\n</bash-stderr>"),
        "{sent}"
    );
    assert!(sent.contains("what did it print?"), "{sent}");

    // What a command leaves running in the background does not hold its turn, and Esc stops
    // one that runs on (with everything it started).
    let marker = daemon.dir.path().join("still-running");
    a.send_line(&format!(
        "!(sleep 20.0417; touch {}) & echo started",
        marker.display()
    ))?;
    a.want("⎿ started")?;
    a.want("› ")?;
    a.send_line("!sleep 30.0417; echo never")?;
    a.until("the command running", |s| s.contains("working"))?;
    a.send("\x1b")?;
    a.want("(cancelled)")?;
    a.want("interrupted")?;
    a.want("› ")?;
    let alive = std::process::Command::new("pgrep")
        .args(["-f", "sleep (20|30)\\.0417"])
        .output()?;
    assert!(
        String::from_utf8_lossy(&alive.stdout).trim().is_empty(),
        "left running: {alive:?}"
    );
    Ok(())
}
