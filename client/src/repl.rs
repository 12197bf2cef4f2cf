//! The interactive client: a line editor (reedline: history per project, multi-line input,
//! `/` and `@` completion) over one session's event stream, rendered by [`View`]. While a turn
//! runs — whichever client started it — every terminal shows it live, Esc or Ctrl+C cancels it
//! (controllers), permission requests become a prompt in every controller, and what is typed
//! waits for the next prompt; between turns, events from other clients print above the input
//! line. Ctrl+D (or Ctrl+C twice at an empty prompt) detaches: the session stays in the daemon.

mod commands;
mod editor;
mod paste;
mod prompt;
mod quiet;
mod status_line;

pub use commands::{CLIENT_COMMANDS, DaemonCommands, ModelNames};

use crate::commands::Output;
use crate::connection::{self, Connection};
use crate::style::Style;
use crate::view::View;
use anyhow::Context;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use tether_proto::{
    ClientKind, Event, EventKind, InputItem, PermissionDecision, Role, Seq, SessionId, Since,
    TetherRpcClient,
};
use tokio::sync::mpsc;

/// How the interactive client starts.
#[derive(Debug, Default)]
pub struct Start {
    /// An existing session (else a new one here).
    pub session: Option<SessionId>,
    /// A first prompt to send.
    pub prompt: Option<String>,
    /// Watch only.
    pub observe: bool,
    /// `--model`: the model of the new session, or the one to switch a resumed session to.
    pub model: Option<String>,
    /// `--permission-mode`: the same for the permission mode.
    pub permission_mode: Option<tether_proto::PermissionMode>,
    /// `-n/--name`: the new session's title.
    pub name: Option<String>,
    /// What each turn may do (`--allowedTools`, `--add-dir`, `--settings`, `--agent`, …).
    pub options: tether_proto::TurnOptions,
}

/// What the editor thread hands back.
pub enum Input {
    /// A submitted line.
    Line(String),
    /// Shift+Tab: the next permission mode.
    NextMode,
    /// Ctrl+T: show or fold thinking.
    ToggleThinking,
    /// Ctrl+O: the last folded tool output in full.
    Expand,
    /// A line finished while a turn ran, sent now that the prompt is back.
    Ahead(String),
    /// The editor let go of the terminal (a turn started); what was typed waits.
    Released,
    /// Ctrl+C at the prompt.
    Interrupt,
    /// Esc while a turn runs: interrupt it.
    Cancel,
    /// Ctrl+D, or the editor is gone.
    Detach,
    /// The terminal could not be read.
    Failed(String),
}

struct Session {
    id: SessionId,
    sub: connection::Events,
    last_seq: Seq,
}

/// A permission prompt on screen.
struct Asking {
    request_id: String,
    cancel: Arc<AtomicBool>,
}

struct Repl {
    socket: PathBuf,
    conn: Connection,
    /// What each turn may do, from the command line.
    options: tether_proto::TurnOptions,
    style: Style,
    view: View,
    session: Session,
    role: Role,
    /// Lines typed at the prompt go here to be turns or commands.
    to_editor: std::sync::mpsc::Sender<editor::Command>,
    /// Printing above the prompt while the editor is active.
    /// Prints above the editor's prompt while it reads.
    printer: std::sync::mpsc::SyncSender<String>,
    editing: bool,
    /// Set to make the editor let go of the terminal.
    release: Arc<AtomicU8>,
    /// The editor was asked to let go and has not yet: what prints waits in `deferred`.
    releasing: bool,
    /// The turn this client started and is waiting for (it may be queued).
    waiting_turn: Option<String>,
    /// The session's running turn, whoever started it.
    running: Option<String>,
    /// This client asked for the running turn to stop.
    cancelling: bool,
    /// The client is detaching: nothing more is drawn live.
    leaving: bool,
    /// Permission requests seen and not yet answered, oldest first.
    pending: Vec<Pending>,
    /// Where a permission prompt's answer goes (with its request id).
    answers: mpsc::UnboundedSender<(String, Option<Answer>)>,
    asking: Option<Asking>,
    interrupts: u8,
    status: Arc<std::sync::Mutex<prompt::Status>>,
    /// What the paste placeholders in the submitted line stand for.
    pasted: Arc<std::sync::Mutex<paste::Pasted>>,
    /// The live area's lines as drawn (the cursor is at the end of the last).
    live_drawn: std::cell::RefCell<Vec<String>>,
    /// What was typed while our turn runs (the editor thread keeps it for the next prompt).
    typed: Arc<std::sync::Mutex<String>>,
    /// Text to print once the permission prompt on screen has gone (printed under its menu,
    /// the menu's erasure would take it and leave part of the menu behind).
    deferred: std::cell::RefCell<String>,
    /// The daemon's slash commands for this session.
    commands: DaemonCommands,
    models: ModelNames,
    /// This client created the session (rather than attaching to one).
    created: bool,
    /// The session's directory (paths under it are shown relative).
    cwd: String,
    /// A turn was started in the session (by anyone): it is worth keeping.
    saw_turn: bool,
}

fn client_name() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".into());
    let tty = nix::unistd::ttyname(std::io::stdin()).ok().map(|p| {
        p.display()
            .to_string()
            .trim_start_matches("/dev/")
            .to_owned()
    });
    match tty {
        Some(t) => format!("tether on {host} {t}"),
        None => format!("tether on {host}"),
    }
}

/// Runs the interactive client until the user detaches.
pub async fn run(socket: &Path, start: Start) -> anyhow::Result<ExitCode> {
    {
        use std::io::IsTerminal;
        if !std::io::stdin().is_terminal() {
            anyhow::bail!(
                "the interactive client needs a terminal; for scripts use tether -p \"prompt\""
            );
        }
    }
    let conn = connection::connect_as(socket, true, ClientKind::Tui, client_name()).await?;
    connection::note_ignored_env(&conn, start.model.is_some()).await;
    let created = start.session.is_none() && !start.observe;
    if created {
        let cwd = crate::remote::work_dir().context("cannot read the current directory")?;
        crate::trust::ask(&conn, &cwd).await?;
    }
    let _terminal = quiet::start();
    // Listening for resizes before the width is first read: a resize in between (a terminal
    // sized just after it started the client) would otherwise be lost.
    let mut resized =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())?;
    let style = Style::detect();
    let cwd = crate::remote::work_dir().context("cannot read the current directory")?;
    let id = match start.session {
        Some(id) => {
            // A resumed session switches to what the command line asks for.
            if start.model.is_some() || start.permission_mode.is_some() {
                conn.client
                    .session_configure(
                        id.clone(),
                        None,
                        start.model.clone(),
                        start.permission_mode,
                        None,
                        None,
                    )
                    .await?;
            }
            id
        }
        None => {
            conn.client
                .session_new(
                    cwd.clone(),
                    start.name.clone(),
                    start.model.clone(),
                    start.permission_mode,
                    None,
                )
                .await?
                .session_id
        }
    };
    let role = if start.observe {
        Role::Observer
    } else {
        Role::Controller
    };
    let sub = connection::subscribe(&conn, &id, role, Since::Seq(0)).await?;
    let printer = reedline::ExternalPrinter::new(1024);
    let to_printer = printer.sender();
    let status = Arc::new(std::sync::Mutex::new(prompt::Status::default()));
    let (input_tx, mut input_rx) = mpsc::unbounded_channel();
    let data_dir = connection::path_env().data_dir();
    // No prompt history anywhere yet: the first time tether is used on this machine.
    let first_start = !data_dir.join("history").exists();
    let pasted = Arc::new(std::sync::Mutex::new(paste::Pasted::default()));
    let typed = Arc::new(std::sync::Mutex::new(String::new()));
    let commands = DaemonCommands::default();
    let models = ModelNames::default();
    let release = Arc::new(AtomicU8::new(0));
    let to_editor = editor::spawn(editor::Setup {
        release: release.clone(),
        printer,
        status: status.clone(),
        history: editor::history_file(&data_dir, &cwd),
        cwd: PathBuf::from(&cwd),
        color: style.color,
        input: input_tx,
        pasted: pasted.clone(),
        typed: typed.clone(),
        commands: commands.clone(),
        models: models.clone(),
    })?;
    let me = conn.hello.connection_id;
    let (answers_tx, mut answers_rx) = mpsc::unbounded_channel::<(String, Option<Answer>)>();
    let mut repl = Repl {
        answers: answers_tx,
        socket: socket.to_owned(),
        conn,
        options: start.options.clone(),
        style,
        view: {
            let mut view = View::new(style, Some(me));
            view.live = std::io::IsTerminal::is_terminal(&std::io::stdout());
            view
        },
        session: Session {
            id,
            sub,
            last_seq: 0,
        },
        role,
        to_editor,
        printer: to_printer,
        editing: false,
        release,
        releasing: false,
        waiting_turn: None,
        running: None,
        cancelling: false,
        leaving: false,
        pending: Vec::new(),
        asking: None,
        interrupts: 0,
        status,
        pasted,
        live_drawn: Default::default(),
        deferred: Default::default(),
        typed,
        commands: commands.clone(),
        models,
        created,
        cwd: cwd.clone(),
        saw_turn: false,
    };
    if first_start {
        repl.say(&repl.style.dim(
            "Welcome to tether. Type a request and press Enter · /help lists the commands · \
             Shift+Tab changes the permission mode · Ctrl+D detaches (the session keeps running \
             in tetherd; tether -c comes back to it)",
        ));
    }
    repl.refresh_commands().await;
    repl.refresh_status().await;
    let mut first_prompt = start.prompt;
    let mut ctrl_c = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = tick.tick() => repl.draw_live(),
            _ = resized.recv() => {
                if let Some(width) = Style::terminal_width() {
                    repl.style.width = width;
                    repl.view.set_width(width);
                }
            }
            item = repl.session.sub.next() => {
                let raw = match item {
                    Some(Ok(raw)) => raw,
                    Some(Err(e)) => {
                        repl.say(&repl.style.error(&format!("bad event from tetherd: {e}")));
                        continue;
                    }
                    None => {
                        repl.reconnect().await?;
                        continue;
                    }
                };
                let Ok(event) = serde_json::from_value::<Event>(raw) else { continue };
                if repl.handle_event(&event).await {
                    return Ok(ExitCode::SUCCESS);
                }
                if let EventKind::ReplayComplete { .. } = event.kind {
                    // What the replay left unanswered is asked about now.
                    let open = repl.pending.first().cloned();
                    match (first_prompt.take(), open) {
                        (Some(p), _) => {
                            repl.say(&format!("{} {p}", repl.style.bold("›")));
                            repl.submit(vec![InputItem::Text { text: p }]).await;
                        }
                        (None, Some(request)) => {
                            repl.offer(&request);
                            repl.edit();
                        }
                        // At the prompt, or following the turn that runs.
                        (None, None) => repl.edit(),
                    }
                }
            }
            input = input_rx.recv() => {
                repl.editing = false;
                repl.view.rows = false;
                // Whatever the editor handed over, it no longer holds the terminal.
                repl.release.store(0, Ordering::SeqCst);
                if repl.releasing {
                    repl.releasing = false;
                    let deferred = std::mem::take(&mut *repl.deferred.borrow_mut());
                    repl.print(&deferred);
                }
                match input.unwrap_or(Input::Detach) {
                    Input::Line(line) => {
                        repl.interrupts = 0;
                        if repl.line(line).await? {
                            return Ok(ExitCode::SUCCESS);
                        }
                    }
                    Input::Ahead(line) => {
                        repl.interrupts = 0;
                        repl.say(&format!("{} {line}", repl.style.bold("›")));
                        if repl.line(line).await? {
                            return Ok(ExitCode::SUCCESS);
                        }
                    }
                    // A turn started: show it, and the request it may already have opened.
                    Input::Released => repl.edit(),
                    // The editor repaints its prompt where it was after a key it hands over,
                    // so what these print goes above the prompt once it is back.
                    Input::NextMode => {
                        repl.edit();
                        repl.next_mode().await;
                    }
                    Input::ToggleThinking => {
                        let text = repl.view.toggle_thinking();
                        repl.edit();
                        repl.print(&text);
                    }
                    Input::Expand => {
                        let text = repl.view.expand(1);
                        repl.edit();
                        repl.print(&text);
                    }
                    Input::Interrupt => {
                        repl.interrupts += 1;
                        if repl.interrupts >= 2 {
                            let bye = repl.leave().await;
                            repl.say(&repl.style.dim(&bye));
                            return Ok(ExitCode::SUCCESS);
                        }
                        repl.say(&repl.style.dim("(Ctrl+C again or Ctrl+D to detach)"));
                        repl.edit();
                    }
                    Input::Cancel => repl.cancel().await,
                    Input::Failed(why) => {
                        repl.say(&repl.style.error(&format!("the terminal cannot be read ({why}); detaching")));
                        return Ok(ExitCode::FAILURE);
                    }
                    Input::Detach => {
                        let bye = repl.leave().await;
                        repl.say(&repl.style.dim(&bye));
                        return Ok(ExitCode::SUCCESS);
                    }
                }
            }
            _ = ctrl_c.recv() => {
                // Only reaches us while a turn runs (the editor takes Ctrl+C itself).
                if repl.busy() && !repl.editing && repl.asking.is_none() {
                    repl.cancel().await;
                }
            }
            Some((request_id, answer)) = answers_rx.recv() => {
                repl.asking = None;
                repl.pending.retain(|p| p.request_id != request_id);
                // What arrived while the prompt was up (who answered, for one).
                let deferred = std::mem::take(&mut *repl.deferred.borrow_mut());
                repl.print(&deferred);
                // (A request that arrived while this one was on screen is asked next.)
                match answer {
                    Some(a) => repl.respond(&request_id, a).await,
                    None => repl.edit(),
                }
            }
        }
    }
}

/// A permission request waiting for an answer.
#[derive(Clone)]
struct Pending {
    request_id: String,
    tool_call_id: String,
    tool: String,
    /// The call's input (an AskUserQuestion's questions).
    input: serde_json::Value,
    preview: String,
    /// The rule "don't ask again" would save.
    rule: String,
    /// The answers offered (`allow_once`, …).
    options: Vec<String>,
}

/// An answer from the permission prompt.
pub struct Answer {
    decision: PermissionDecision,
    message: Option<String>,
    /// The input the call runs with instead (an AskUserQuestion's answers).
    updated_input: Option<serde_json::Value>,
}

impl Repl {
    /// Prints a line (word-wrapped to the terminal): above the input line while editing, else
    /// straight to stdout.
    fn say(&self, text: &str) {
        let mut out = String::new();
        for line in crate::view::wrap_text(text, self.style.width) {
            out.push_str(&line);
            out.push('\n');
        }
        self.print(&out);
    }

    fn print(&self, text: &str) {
        if text.is_empty() {
            return;
        }
        if self.asking.is_some() || self.releasing {
            self.deferred.borrow_mut().push_str(text);
            return;
        }
        if self.editing {
            // Printed over the status row the prompt leaves above the input (the editor's
            // printer only moves up over the input), so no stale status stays behind.
            let text = format!("{}{}", prompt::OVER_STATUS, text.trim_end_matches('\n'));
            let _ = self.printer.send(text);
        } else {
            let clear = self.clear_live();
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(clear.as_bytes());
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
            drop(out);
            self.draw_live();
        }
    }

    /// Redraws the live area under the transcript (running tools, the line being written)
    /// while this client shows a turn; never while the editor or a prompt owns the terminal.
    fn draw_live(&self) {
        let mut lines = if self.view.live && !self.editing && self.asking.is_none() && !self.leaving
        {
            self.view.live(std::time::SystemTime::now())
        } else {
            Vec::new()
        };
        if self.cancelling && !lines.is_empty() {
            lines.push(self.style.warn("cancelling…"));
        }
        // What is typed meanwhile shows, dimmed, under it: it waits for the next prompt.
        let typed = self.typed.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if !lines.is_empty() && !typed.is_empty() {
            let width = self.style.width.saturating_sub(1).max(10);
            lines.push(
                self.style
                    .dim(&crate::view::fit_visible(&format!("› {typed}"), width)),
            );
        }
        if *self.live_drawn.borrow() == lines {
            return;
        }
        let mut draw = self.clear_live();
        draw.push_str(&lines.join("\r\n"));
        *self.live_drawn.borrow_mut() = lines;
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(draw.as_bytes());
        let _ = out.flush();
    }

    /// The bytes that erase the live area (forgetting it was drawn).
    fn clear_live(&self) -> String {
        let drawn = std::mem::take(&mut *self.live_drawn.borrow_mut());
        match drawn.len() {
            0 => String::new(),
            1 => "\r\x1b[J".into(),
            n => format!("\x1b[{}A\r\x1b[J", n - 1),
        }
    }

    /// Erases the live area now.
    fn hide_live(&self) {
        let clear = self.clear_live();
        if !clear.is_empty() {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(clear.as_bytes());
            let _ = out.flush();
        }
    }

    /// Whether a turn runs that this terminal follows (or its own waits in the queue).
    fn busy(&self) -> bool {
        self.running.is_some() || self.waiting_turn.is_some()
    }

    /// Hands the terminal to the line editor, or, while a turn runs, follows it: the live area
    /// and the key watcher.
    fn edit(&mut self) {
        if self.busy() {
            // An open request this controller has not been shown yet is asked now, whatever
            // ended the editor's turn at the terminal.
            if let Some(request) =
                self.pending.first().cloned().filter(|_| {
                    self.role == Role::Controller && self.asking.is_none() && !self.editing
                })
            {
                self.offer(&request);
                if self.asking.is_some() {
                    return;
                }
            }
            self.watch_keys();
            self.draw_live();
            return;
        }
        if !self.editing && self.asking.is_none() {
            self.hide_live();
            self.editing = true;
            // No live area under a prompt: another client's reply streams in row by row.
            self.view.rows = true;
            let _ = self.to_editor.send(editor::Command::ReadLine);
        }
    }

    /// Reads the session's slash commands (custom commands may have been added since).
    async fn refresh_commands(&self) {
        if let Ok(list) = self
            .conn
            .client
            .session_commands(self.session.id.clone())
            .await
        {
            *self.commands.lock().unwrap_or_else(|p| p.into_inner()) = list;
        }
        if let Ok(list) = self.conn.client.models_list().await {
            let names = list
                .aliases
                .iter()
                .map(|a| (a.alias.clone(), a.model.clone()))
                .chain(list.models.iter().map(|m| {
                    let w = m.context_window;
                    let window = if w >= 1_000_000 && w.is_multiple_of(1_000_000) {
                        format!("{}M", w / 1_000_000)
                    } else {
                        format!("{}k", w / 1000)
                    };
                    (m.id.clone(), format!("{} · {window}", m.display_name))
                }))
                .collect();
            *self.models.lock().unwrap_or_else(|p| p.into_inner()) = names;
        }
    }

    async fn refresh_status(&mut self) {
        let Ok(snapshot) = self.conn.client.session_get(self.session.id.clone()).await else {
            return;
        };
        // The settings' statusLine command, in the session's directory, replaces the status.
        let cwd = PathBuf::from(&snapshot.summary.cwd);
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let trusted = crate::trust::is_trusted(&self.conn, &snapshot.summary.cwd).await;
        let custom = match status_line::StatusLine::load(&cwd, home.as_deref(), trusted) {
            Some(command) => {
                let percent = self
                    .status
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .context_percent;
                let input = status_line::input(&snapshot, &snapshot.summary.model, percent);
                command.run(&input, &cwd).await
            }
            None => None,
        };
        self.cwd = snapshot.summary.cwd.clone();
        let mut s = self.status.lock().unwrap_or_else(|p| p.into_inner());
        s.custom = custom;
        s.title = snapshot.summary.title.clone();
        s.model = snapshot.summary.model.clone();
        s.mode = snapshot.summary.permission_mode.as_str().to_owned();
        s.cost = snapshot.cost_usd;
        s.others = snapshot
            .summary
            .attached_clients
            .iter()
            .filter(|a| a.client.client_id != self.conn.hello.connection_id)
            .count();
        s.observer = self.role == Role::Observer;
    }

    /// Handles one event; returns whether the client should exit.
    async fn handle_event(&mut self, event: &Event) -> bool {
        if let Some(seq) = event.seq {
            if seq <= self.session.last_seq {
                return false; // already shown (a re-subscription's overlap)
            }
            self.session.last_seq = seq;
        }
        if let (EventKind::TurnStarted { .. }, Some(turn)) = (&event.kind, &event.turn_id) {
            self.saw_turn = true;
            self.running = Some(turn.0.clone());
            self.cancelling = false;
            if self.editing && !self.releasing {
                // The terminal follows the turn: the editor lets go (what was printed before
                // this reaches the screen first), and what prints meanwhile waits for it.
                self.release.store(editor::RELEASE, Ordering::SeqCst);
                self.releasing = true;
                self.view.rows = false;
            }
        }
        let text = self.view.feed(event);
        // (A controller's prompt shows the request itself, now or once the one on screen or the
        // editor has gone.)
        let will_ask = matches!(event.kind, EventKind::PermissionRequested { .. })
            && self.role == Role::Controller
            && (!self.editing || self.releasing || self.asking.is_some());
        if !will_ask {
            self.print(&text);
        }
        match &event.kind {
            EventKind::UsageUpdated {
                context_percent,
                session_cost_usd,
                ..
            } => {
                let mut s = self.status.lock().unwrap_or_else(|p| p.into_inner());
                s.context_percent = *context_percent;
                s.cost = *session_cost_usd;
            }
            // The context shrank: a cleared one is unknown until the next reply measures it; a
            // compacted one holds about the summary.
            EventKind::HistoryCleared {} => {
                self.status
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .context_percent = None;
            }
            EventKind::CompactionCompleted {
                tokens_before,
                tokens_after,
                ..
            } => {
                let mut s = self.status.lock().unwrap_or_else(|p| p.into_inner());
                s.context_percent = s
                    .context_percent
                    .filter(|_| *tokens_before > 0)
                    .map(|p| p * *tokens_after as f64 / *tokens_before as f64);
            }
            EventKind::PermissionRequested {
                request_id,
                tool_call_id,
                tool,
                input,
                preview,
                rule,
                options,
                ..
            } => {
                let request = Pending {
                    options: options.clone(),
                    request_id: request_id.clone(),
                    tool_call_id: tool_call_id.clone(),
                    tool: tool.clone(),
                    input: input.clone(),
                    preview: preview.clone(),
                    rule: rule.clone(),
                };
                self.pending.push(request.clone());
                // A replayed request is asked about once the replay shows it still open.
                if !self.view.replaying {
                    self.offer(&request);
                }
            }
            EventKind::PermissionResolved { request_id, .. } => {
                self.pending.retain(|p| &p.request_id != request_id);
                if let Some(a) = self.asking.as_ref().filter(|a| &a.request_id == request_id) {
                    // Answered elsewhere (or here): the prompt goes away; the terminal is
                    // handed back once its thread has restored it.
                    a.cancel.store(true, Ordering::SeqCst);
                }
            }
            EventKind::TurnEnded { .. } => {
                let turn = event.turn_id.as_ref().map(|t| t.0.as_str());
                if turn == self.running.as_deref() {
                    self.running = None;
                    self.cancelling = false;
                }
                if turn == self.waiting_turn.as_deref() {
                    self.waiting_turn = None;
                }
                if !self.busy() && !self.view.replaying {
                    self.refresh_status().await;
                    self.edit();
                }
            }
            // Once per replay, not once per replayed join (each refresh asks the daemon, and
            // runs the settings' statusLine command).
            EventKind::SessionConfigured { .. }
            | EventKind::ClientAttached { .. }
            | EventKind::ClientDetached { .. }
                if !self.view.replaying =>
            {
                self.refresh_status().await
            }
            EventKind::ReplayComplete { .. } => self.refresh_status().await,
            EventKind::SessionDeleted { .. } => return true,
            _ => {}
        }
        false
    }

    /// Asks about `request` in this terminal, or (at the prompt) says how to answer it.
    fn offer(&mut self, request: &Pending) {
        if self.role != Role::Controller {
            return;
        }
        if !self.editing && self.asking.is_none() {
            // The prompt shows the diff; its result will not show it again.
            self.view.previewed(&request.tool_call_id);
            self.ask(request.clone());
        } else if self.editing && !self.releasing {
            // (Once the editor has let go, the prompt asks.)
            let how = match request.tool.as_str() {
                "AskUserQuestion" => format!(
                    "  the model asks:\n{}  answer with /answer <choice or text>[; next answer…] or /deny",
                    request.preview
                ),
                "ExitPlanMode" => {
                    "  the model presents a plan: /allow approves it, /deny keeps planning".into()
                }
                tool => format!("  {tool} needs permission: answer with /allow or /deny"),
            };
            self.say(&self.style.dim(&how));
        }
    }

    fn ask(&mut self, request: Pending) {
        self.hide_live();
        let cancel = Arc::new(AtomicBool::new(false));
        self.asking = Some(Asking {
            request_id: request.request_id.clone(),
            cancel: cancel.clone(),
        });
        let style = self.style;
        let cwd = self.cwd.clone();
        let answers = self.answers.clone();
        // The key watcher lets go of the terminal before the prompt reads it.
        let (paused, stopped) = std::sync::mpsc::channel();
        let _ = self.to_editor.send(editor::Command::Pause(paused));
        tokio::task::spawn_blocking(move || {
            let _ = stopped.recv_timeout(std::time::Duration::from_secs(1));
            let answer = match request.tool.as_str() {
                "AskUserQuestion" => prompt::questions(&request.input, style, &cancel),
                "ExitPlanMode" => prompt::plan(&request.preview, style, &cancel),
                _ => prompt::permission(&request, &cwd, style, &cancel),
            };
            let _ = answers.send((request.request_id, answer));
        });
    }

    /// Esc, Ctrl+C or `/cancel` while a turn runs: a controller stops it, whoever started it.
    async fn cancel(&mut self) {
        if !self.busy() {
            self.say(&self.style.dim("nothing to cancel: no turn is running"));
        } else if self.role == Role::Observer {
            self.say(&self.style.warn(
                "observers cannot cancel: attached as an observer, this terminal only watches",
            ));
        } else {
            match self.conn.client.turn_cancel(self.session.id.clone()).await {
                Ok(_) => {
                    self.cancelling = true;
                    self.draw_live();
                }
                Err(e) => self.say(
                    &self
                        .style
                        .error(&format!("could not cancel: {}", connection::call_error(&e))),
                ),
            }
        }
        self.edit();
    }

    async fn respond(&mut self, request_id: &str, answer: Answer) {
        match self
            .conn
            .client
            .permission_respond(
                self.session.id.clone(),
                request_id.to_owned(),
                answer.decision,
                answer.message,
                answer.updated_input,
                None,
            )
            .await
        {
            Ok(r) if r.status == tether_proto::ResponseStatus::AlreadyResolved => {
                let who = r
                    .resolved_by
                    .as_ref()
                    .map(crate::render::client)
                    .unwrap_or_else(|| "the daemon".into());
                self.say(&self.style.dim(&format!("  already answered by {who}")));
            }
            Ok(_) => {}
            Err(e) => self.say(
                &self
                    .style
                    .error(&format!("could not answer: {}", connection::call_error(&e))),
            ),
        }
        self.edit();
    }

    /// What leaving says. A session this client created in which nothing was ever asked, and
    /// which no other client has open, is not kept: `tether sessions` and `-c` never meet an
    /// empty one.
    async fn leave(&mut self) -> String {
        // The live area goes, and is not drawn again: the terminal is left clean.
        self.hide_live();
        self.leaving = true;
        let kept = format!(
            "detached; the session stays in tetherd (tether attach {})",
            self.session.id
        );
        if !self.created || self.saw_turn || self.waiting_turn.is_some() {
            return kept;
        }
        let me = self.conn.hello.connection_id;
        let Ok(snapshot) = self.conn.client.session_get(self.session.id.clone()).await else {
            return kept;
        };
        let others = snapshot
            .summary
            .attached_clients
            .iter()
            .any(|c| c.client.client_id != me);
        if others || snapshot.summary.status != tether_proto::SessionStatus::Idle {
            return kept;
        }
        match self
            .conn
            .client
            .session_delete(self.session.id.clone())
            .await
        {
            Ok(_) => "detached; nothing was asked, so the empty session was not kept".into(),
            Err(_) => kept,
        }
    }

    /// While our turn runs and nothing else reads the terminal: Esc interrupts, Ctrl+D
    /// detaches, typing is kept for the next prompt.
    fn watch_keys(&self) {
        if self.busy() && !self.editing && self.asking.is_none() && !self.leaving {
            let _ = self.to_editor.send(editor::Command::Watch);
        }
    }
    async fn submit(&mut self, input: Vec<InputItem>) {
        if self.role == Role::Observer {
            self.say(
                &self
                    .style
                    .warn("attached as an observer: you cannot start turns"),
            );
            self.edit();
            return;
        }
        // A directory added with /add-dir that has gone since would fail every turn.
        let gone: Vec<String> = self
            .options
            .add_dirs
            .iter()
            .filter(|d| !Path::new(d).is_dir())
            .cloned()
            .collect();
        if !gone.is_empty() {
            self.options.add_dirs.retain(|d| !gone.contains(d));
            self.say(&self.style.warn(&format!(
                "no longer a working directory (it is gone): {}",
                gone.join(", ")
            )));
        }
        match self
            .conn
            .client
            .turn_start(
                self.session.id.clone(),
                input,
                Some(uuid_like()),
                Some(tether_proto::BusyMode::Queue),
                Some(self.options.clone()),
            )
            .await
        {
            Ok(started) => {
                self.waiting_turn = Some(started.turn_id.0);
                self.watch_keys();
                if started.queued {
                    self.say(&self.style.dim("queued behind the running turn"));
                }
            }
            Err(e) => {
                self.say(
                    &self
                        .style
                        .error(&format!("✗ {}", connection::call_error(&e))),
                );
                self.edit();
            }
        }
    }

    /// Switches to another session (the old one stays in the daemon).
    async fn switch(&mut self, id: SessionId) -> anyhow::Result<()> {
        self.switch_as(id, self.role).await
    }

    /// Switches to another session in `role`.
    async fn switch_as(&mut self, id: SessionId, role: Role) -> anyhow::Result<()> {
        let sub = connection::subscribe(&self.conn, &id, role, Since::Seq(0)).await?;
        self.role = role;
        let old = std::mem::replace(
            &mut self.session,
            Session {
                id,
                sub,
                last_seq: 0,
            },
        );
        let _ = old.sub.unsubscribe().await;
        let live = self.view.live;
        self.view = View::new(self.style, Some(self.conn.hello.connection_id));
        self.view.live = live;
        self.pending.clear();
        self.waiting_turn = None;
        self.running = None;
        self.cancelling = false;
        self.say(&self.style.dim(&format!("session {}", self.session.id)));
        self.refresh_status().await;
        self.refresh_commands().await;
        Ok(())
    }

    /// The daemon restarted or the socket dropped: connect again and re-subscribe after the
    /// last seq shown, so nothing is lost or repeated.
    async fn reconnect(&mut self) -> anyhow::Result<()> {
        self.say(&self.style.dim("connection to tetherd lost; reconnecting…"));
        let mut delay = std::time::Duration::from_millis(100);
        for _ in 0..50 {
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(std::time::Duration::from_secs(2));
            let Ok(conn) =
                connection::connect_as(&self.socket, true, ClientKind::Tui, client_name()).await
            else {
                continue;
            };
            let Ok(sub) = connection::subscribe(
                &conn,
                &self.session.id,
                self.role,
                Since::Seq(self.session.last_seq),
            )
            .await
            else {
                continue;
            };
            self.conn = conn;
            self.session.sub = sub;
            self.view.set_me(self.conn.hello.connection_id);
            self.view.replaying = true;
            self.say(&self.style.dim("reconnected"));
            return Ok(());
        }
        anyhow::bail!(
            "tetherd did not come back; the session is kept: tether attach {}",
            self.session.id
        )
    }
}

/// A client turn id (idempotent retries of one submission).
fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("tui-{}-{nanos}", std::process::id())
}

/// `tether -c`: the most recent session in this directory.
pub async fn most_recent_here(socket: &Path) -> anyhow::Result<Option<SessionId>> {
    let conn = connection::connect(socket, true, ClientKind::Script).await?;
    let cwd = crate::remote::work_dir()?;
    let list = conn
        .client
        .session_list(Some(cwd), None, Some(1), None, None)
        .await?;
    Ok(list.sessions.into_iter().next().map(|s| s.session_id))
}

/// Whether `tether attach` can be interactive (terminal in and out, no `--json`).
pub fn wants_interactive(out: Output) -> bool {
    use std::io::IsTerminal;
    !out.json && std::io::stdin().is_terminal() && std::io::stdout().is_terminal()
}
