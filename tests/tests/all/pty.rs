//! The terminal client in a pseudo-terminal, as the terminal suites drive it: a thread reads
//! what it prints into a VT100 screen (answering the queries a terminal answers) while a test
//! waits for text or screen states and types.

use anyhow::Context;
use expectrl::{Expect, Session};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake, bin};

/// What the test does to the terminal.
pub(crate) enum ToPty {
    /// Typed bytes.
    Keys(Vec<u8>),
    /// A new size: columns, rows.
    Resize(u16, u16),
}

/// A program in a pseudo-terminal. A thread reads everything it prints (answering the cursor
/// position and device attribute queries the line editor makes, as a real terminal would)
/// while the test waits for text and types.
pub(crate) struct Pty {
    pub(crate) shown: Arc<Mutex<(String, bool)>>,
    /// The screen as a VT100 of the pty's size shows what was printed.
    vt: Arc<Mutex<vt100::Parser>>,
    typed: std::sync::mpsc::Sender<ToPty>,
    /// How far `want` has read.
    at: usize,
    pid: i32,
}

impl Drop for Pty {
    /// The client goes with the test: left running, it would start a daemon of its own once
    /// the test's daemon is gone.
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-9", &self.pid.to_string()])
            .status();
    }
}

impl Pty {
    /// Runs `cmd` in a terminal of `cols` columns and `rows` rows.
    pub(crate) fn spawn(cmd: std::process::Command, cols: u16, rows: u16) -> anyhow::Result<Self> {
        let mut session = Session::spawn(cmd)?;
        session.get_process_mut().set_window_size(cols, rows)?;
        let pid = session.get_process().pid().as_raw();
        let shown = Arc::new(Mutex::new((String::new(), false)));
        let vt = Arc::new(Mutex::new(vt100::Parser::new(rows, cols, 0)));
        let (typed, keys) = std::sync::mpsc::channel::<ToPty>();
        let out = shown.clone();
        let screen = vt.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            let mut tail = String::new();
            loop {
                loop {
                    match keys.try_recv() {
                        Ok(ToPty::Keys(bytes)) => {
                            let _ = session.send(bytes);
                        }
                        Ok(ToPty::Resize(cols, rows)) => {
                            let _ = session.get_process_mut().set_window_size(cols, rows);
                            screen
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .screen_mut()
                                .set_size(rows, cols);
                        }
                        Err(std::sync::mpsc::TryRecvError::Empty) => break,
                        Err(std::sync::mpsc::TryRecvError::Disconnected) => return,
                    }
                }
                match session.try_read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                        tail.push_str(&text);
                        let (row, col) = {
                            let mut vt = screen.lock().unwrap_or_else(|p| p.into_inner());
                            vt.process(&buf[..n]);
                            vt.screen().cursor_position()
                        };
                        let position = format!("\x1b[{};{}R", row + 1, col + 1);
                        // Cursor position (where the emulated screen has it) and primary
                        // device attributes (asked before the keyboard protocol is chosen),
                        // answered as a VT100 would.
                        loop {
                            let cursor = tail.find("\x1b[6n").map(|i| (i, position.as_str()));
                            let device = tail.find("\x1b[c").map(|i| (i, "\x1b[?1;2c"));
                            let Some((i, answer)) = [cursor, device].into_iter().flatten().min()
                            else {
                                break;
                            };
                            let _ = session.send(answer);
                            tail.drain(..i + 3);
                        }
                        if tail.len() > 8 {
                            let keep = tail.len() - 8;
                            let cut = (keep..=tail.len())
                                .find(|i| tail.is_char_boundary(*i))
                                .unwrap_or(tail.len());
                            tail.drain(..cut);
                        }
                        out.lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .0
                            .push_str(&text);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(_) => break,
                }
            }
            out.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        });
        Ok(Self {
            shown,
            vt,
            typed,
            at: 0,
            pid,
        })
    }

    /// What the terminal's screen shows now, as plain text rows.
    pub(crate) fn screen(&self) -> String {
        self.vt
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .screen()
            .contents()
    }

    /// The screen's rows, one line each (wrapped text not joined).
    pub(crate) fn rows(&self) -> String {
        let vt = self.vt.lock().unwrap_or_else(|p| p.into_inner());
        let (_, cols) = vt.screen().size();
        vt.screen()
            .rows(0, cols)
            .map(|r| format!("{}\n", r.trim_end()))
            .collect()
    }

    /// Waits until the terminal shows `text` (after what earlier waits found).
    pub(crate) fn want(&mut self, text: &str) -> anyhow::Result<()> {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        loop {
            {
                let shown = self.shown.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(i) = shown.0[self.at..].find(text) {
                    self.at += i + text.len();
                    return Ok(());
                }
                if shown.1 || std::time::Instant::now() > deadline {
                    anyhow::bail!(
                        "waiting for {text:?} ({}); the terminal showed {:?}",
                        if shown.1 {
                            "the program exited"
                        } else {
                            "timed out"
                        },
                        &shown.0
                    );
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until the screen (rows as the terminal shows them) satisfies `ok`; `what` says
    /// what was awaited when it does not.
    pub(crate) fn until(&self, what: &str, ok: impl Fn(&str) -> bool) -> anyhow::Result<String> {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        loop {
            let screen = self.screen();
            if ok(&screen) {
                return Ok(screen);
            }
            if std::time::Instant::now() > deadline {
                anyhow::bail!("timed out waiting for {what}; the screen shows:\n{screen}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What the program printed after the text `after` (all of it when `after` never came).
    pub(crate) fn printed_after(&self, after: &str) -> String {
        let shown = self.shown.lock().unwrap_or_else(|p| p.into_inner());
        match shown.0.rfind(after) {
            Some(i) => shown.0[i + after.len()..].to_owned(),
            None => shown.0.clone(),
        }
    }

    /// Waits for the program to exit.
    pub(crate) fn exited(&self) -> anyhow::Result<()> {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while !self.shown.lock().unwrap_or_else(|p| p.into_inner()).1 {
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "the program did not exit"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    pub(crate) fn send(&self, bytes: impl AsRef<[u8]>) -> anyhow::Result<()> {
        self.typed
            .send(ToPty::Keys(bytes.as_ref().to_vec()))
            .map_err(|_| anyhow::anyhow!("the terminal is closed"))
    }

    /// Resizes the terminal (the program gets SIGWINCH).
    pub(crate) fn resize(&self, cols: u16, rows: u16) -> anyhow::Result<()> {
        self.typed
            .send(ToPty::Resize(cols, rows))
            .map_err(|_| anyhow::anyhow!("the terminal is closed"))
    }

    pub(crate) fn send_line(&self, line: &str) -> anyhow::Result<()> {
        self.send(format!("{line}\r"))
    }
}

/// `tether ARGS` in a 100×30 pseudo-terminal in the daemon's work directory, without colour.
pub(crate) fn tether(daemon: &Daemon, args: &[&str]) -> anyhow::Result<Pty> {
    tether_with(daemon, args, &[])
}

/// [`tether`] with more environment.
pub(crate) fn tether_with(
    daemon: &Daemon,
    args: &[&str],
    env: &[(&str, String)],
) -> anyhow::Result<Pty> {
    tether_in(daemon, &daemon.workdir(), args, env)
}

/// [`tether_with`] in another directory.
pub(crate) fn tether_in(
    daemon: &Daemon,
    dir: &std::path::Path,
    args: &[&str],
    env: &[(&str, String)],
) -> anyhow::Result<Pty> {
    Pty::spawn(command(daemon, dir, args, env), 100, 30)
}

/// `tether ARGS` in a terminal `cols` columns wide (30 rows).
pub(crate) fn tether_at(daemon: &Daemon, cols: u16, args: &[&str]) -> anyhow::Result<Pty> {
    Pty::spawn(command(daemon, &daemon.workdir(), args, &[]), cols, 30)
}

/// The client's command line, in `dir`, on the daemon's socket, without colour.
fn command(
    daemon: &Daemon,
    dir: &std::path::Path,
    args: &[&str],
    env: &[(&str, String)],
) -> std::process::Command {
    // Echo on, as a terminal starts (the pseudo-terminal library turns it off).
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", "stty echo && exec \"$0\" \"$@\""])
        .arg(bin("tether"));
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    cmd.args(args)
        .current_dir(dir)
        .env("TETHER_SOCKET", daemon.socket())
        .env("TETHER_HOME", daemon.data_dir())
        .env("TETHER_CONFIG", daemon.config_path())
        .env("HOME", daemon.dir.path().join("home"))
        .env("NO_COLOR", "1")
        .env("TERM", "xterm");
    cmd
}

pub(crate) fn only_session(daemon: &Daemon) -> anyhow::Result<String> {
    let list = daemon.ndjson()?.call("session/list", json!({}))?;
    Ok(list["sessions"][0]["sessionId"]
        .as_str()
        .context("a session")?
        .to_owned())
}

/// The request a turn with this (first) prompt was sent in.
pub(crate) fn turn_request(
    fake: &Fake,
    prompt: &str,
) -> anyhow::Result<tether_tests::fake_anthropic::Recorded> {
    fake.server
        .message_requests()
        .into_iter()
        .find(|r| r.body["messages"][0]["content"][0]["text"] == prompt)
        .context("the turn's request")
}

pub(crate) fn echo_script(reply: &str) -> Script {
    Script::of([
        Step::text("Running it.").tool_use("Bash", json!({"command": "xargs echo from-the-pty"})),
        Step::text(reply),
    ])
    .titling("Echo in a terminal")
}

/// A terminal on a new session, and a second one attached to it, both at their prompts.
pub(crate) fn two_terminals(daemon: &Daemon) -> anyhow::Result<(Pty, Pty, String)> {
    let mut a = tether(daemon, &[])?;
    a.want("› ")?;
    let session = only_session(daemon)?;
    let mut b = tether(daemon, &["attach", &session])?;
    b.want("› ")?;
    Ok((a, b, session))
}

/// The messages of each turn request the fake received (title requests, which carry no tools,
/// left out), as JSON text.
pub(crate) fn turn_messages(fake: &Fake) -> Vec<String> {
    fake.turn_requests()
        .iter()
        .map(|r| r.body["messages"].to_string())
        .collect()
}

/// The row just above the input line: the status.
pub(crate) fn status_row(screen: &str) -> &str {
    let lines: Vec<&str> = screen.lines().collect();
    lines
        .iter()
        .rposition(|l| l.starts_with('›'))
        .and_then(|i| i.checked_sub(1))
        .and_then(|i| lines.get(i))
        .copied()
        .unwrap_or("")
}

/// The screen once the program has stopped drawing for a moment.
pub(crate) fn settled(pty: &Pty) -> String {
    let mut last = pty.screen();
    loop {
        std::thread::sleep(Duration::from_millis(150));
        let now = pty.screen();
        if now == last {
            return now;
        }
        last = now;
    }
}

/// A reply streamed in small pieces, 15 ms apart.
pub(crate) fn slow_reply(text: &str) -> Step {
    let mut events = vec![
        json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ];
    let chars: Vec<char> = text.chars().collect();
    for piece in chars.chunks(12) {
        let piece: String = piece.iter().collect();
        events.push(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}));
    }
    events.push(json!({"type": "content_block_stop", "index": 0}));
    events.push(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 50}}));
    events.push(json!({"type": "message_stop"}));
    Step {
        events: Some(events),
        chunk_delay_ms: Some(15),
        ..Default::default()
    }
}

/// A turn that reads `notes.txt` and then edits "old words" in it to "fresh words" (asked
/// about in the default mode), then says "Edited."; [`notes`] writes the file.
pub(crate) fn notes_edit(title: &str) -> Script {
    Script::of([
        Step::text("Reading.").tool_use("Read", json!({"file_path": "notes.txt"})),
        Step::text("Editing.").tool_use(
            "Edit",
            json!({"file_path": "notes.txt", "old_string": "old words", "new_string": "fresh words"}),
        ),
        Step::text("Edited."),
    ])
    .titling(title)
}

/// Writes the `notes.txt` that [`notes_edit`] edits, in the daemon's work directory.
pub(crate) fn notes(daemon: &Daemon) -> anyhow::Result<()> {
    std::fs::write(
        daemon.workdir().join("notes.txt"),
        "first\nold words\nlast\n",
    )?;
    Ok(())
}
