//! The line editor on its own thread (reedline blocks): history per project, multi-line input
//! (Alt+Enter, or a line ending in `\`), Tab completion of `/commands` and `@paths`, Shift+Tab
//! for the next permission mode, Ctrl+T to show thinking, Ctrl+O to expand folded output, Esc Esc
//! to clear the line (at an empty prompt: `/rewind`), folded pastes and Ctrl+V (see `paste.rs`). It reads one line each time it is asked, and
//! lets go of the terminal when a turn starts (what was typed waits for the next prompt).

use super::paste::{Keys, Pasted};
use super::prompt::{Status, TetherPrompt};
use super::{CLIENT_COMMANDS, DaemonCommands, Input, ModelNames};
use reedline::{
    ColumnarMenu, Completer, Emacs, FileBackedHistory, KeyCode, KeyModifiers, MenuBuilder,
    Reedline, ReedlineEvent, ReedlineMenu, Signal, Span, Suggestion, ValidationResult, Validator,
    default_emacs_keybindings,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc::UnboundedSender;

/// What the editor thread is asked to do.
pub enum Command {
    /// Read one line and send it back (what was typed during the turn already in it).
    ReadLine,
    /// A turn runs: read keys without showing them — Esc interrupts the turn, Ctrl+D detaches,
    /// anything else is kept for the next prompt.
    Watch,
    /// Stop reading keys (a permission prompt takes the terminal); answers once stopped.
    Pause(std::sync::mpsc::Sender<()>),
    /// Start the next line with this text (a rewound prompt, to edit and send again).
    Prefill(String),
}

/// [`Setup::release`]: asked for.
pub const RELEASE: u8 = 1;
/// [`Setup::release`]: seen by the editor, which lets go in its next pass.
const ARMED: u8 = 2;

/// How often the key watcher looks for a command while it waits for keys.
const WATCH_POLL: std::time::Duration = std::time::Duration::from_millis(30);

/// What the editor needs.
pub struct Setup {
    /// Lines printed above the prompt while editing.
    pub printer: reedline::ExternalPrinter<String>,
    /// The status shown right of the prompt.
    pub status: Arc<Mutex<Status>>,
    /// The history file of this project.
    pub history: PathBuf,
    /// Where `@` completion looks.
    pub cwd: PathBuf,
    /// Whether to colour.
    pub color: bool,
    /// Where lines go.
    pub input: UnboundedSender<Input>,
    /// What the paste placeholders in the line stand for.
    pub pasted: Arc<Mutex<Pasted>>,
    /// What was typed while the turn runs, as the live area shows it (dimmed).
    pub typed: Arc<Mutex<String>>,
    /// The daemon's commands, for completion.
    pub commands: DaemonCommands,
    /// The daemon's models, for `/model` completion.
    pub models: ModelNames,
    /// Set to [`RELEASE`] to make the editor let go of the terminal (a turn started): the line
    /// being typed is kept for the next prompt and the prompt is erased. Back to 0 once the
    /// editor has handed anything over.
    pub release: Arc<AtomicU8>,
}

/// `<data dir>/history/<hash of the project directory>`: one history per project.
pub fn history_file(data_dir: &Path, cwd: &str) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    cwd.hash(&mut h);
    data_dir
        .join("history")
        .join(format!("{:016x}", h.finish()))
}

/// The editor Ctrl+G opens the prompt in: `$VISUAL`, else `$EDITOR` (either may carry
/// arguments, as `code --wait`), else `vi`.
pub(super) fn external_editor() -> std::process::Command {
    let line = std::env::var("VISUAL")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .or_else(|| {
            std::env::var("EDITOR")
                .ok()
                .filter(|v| !v.trim().is_empty())
        })
        .unwrap_or_else(|| "vi".into());
    let mut words = line.split_whitespace();
    let mut command = std::process::Command::new(words.next().unwrap_or("vi"));
    command.args(words);
    command
}

/// The file the prompt is edited in: private, beside the project's history.
fn prompt_file(history: &Path) -> PathBuf {
    let mut name = history.file_name().unwrap_or_default().to_owned();
    name.push(".prompt.md");
    history.with_file_name(name)
}

/// Host command Shift+Tab sends.
const NEXT_MODE: &str = "\u{1}next-mode";
/// Host command Ctrl+T sends.
const TOGGLE_THINKING: &str = "\u{1}toggle-thinking";
/// Host command Ctrl+O sends.
const EXPAND: &str = "\u{1}expand";
/// Host command Esc sends (after closing a menu).
const ESCAPE: &str = "\u{1}escape";
/// Two Esc presses at an empty prompt within this open `/rewind`.
const DOUBLE_ESCAPE: std::time::Duration = std::time::Duration::from_millis(800);

/// Completes `/commands` at the start of the line and `@paths` anywhere.
struct Complete {
    cwd: PathBuf,
    commands: DaemonCommands,
    models: ModelNames,
}

/// What `/effort` takes (the daemon checks it against the model).
const EFFORTS: &[(&str, &str)] = &[
    ("low", "fastest"),
    ("medium", ""),
    ("high", ""),
    ("xhigh", "newer models"),
    ("max", "as much as it takes"),
    ("default", "the model's own"),
];

impl Completer for Complete {
    fn complete(&mut self, line: &str, pos: usize) -> reedline::CompletionResult {
        reedline::CompletionResult::fresh(self.suggestions(line, pos))
    }
}

impl Complete {
    /// Slash commands, `/model` and `/effort` arguments, and `@` paths for the word at `pos`.
    fn suggestions(&self, line: &str, pos: usize) -> Vec<Suggestion> {
        let before = &line[..pos.min(line.len())];
        let start = before
            .rfind(char::is_whitespace)
            .map(|i| i + 1)
            .unwrap_or(0);
        let word = &before[start..];
        let span = Span::new(start, pos);
        let argument = |values: Vec<(String, String)>| -> Vec<Suggestion> {
            values
                .into_iter()
                .filter(|(v, _)| v.starts_with(word))
                .map(|(value, d)| Suggestion {
                    value,
                    description: (!d.is_empty()).then_some(d),
                    span,
                    append_whitespace: true,
                    ..Default::default()
                })
                .collect()
        };
        match before[..start].trim_end() {
            "/model" => {
                let models = self
                    .models
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                return argument(models);
            }
            "/effort" => {
                return argument(
                    EFFORTS
                        .iter()
                        .map(|(e, d)| ((*e).to_owned(), (*d).to_owned()))
                        .collect(),
                );
            }
            _ => {}
        }
        if start == 0 && word.starts_with('/') {
            let daemon: Vec<(String, String)> = self
                .commands
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .map(|c| (format!("/{}", c.name), c.description.clone()))
                .collect();
            return CLIENT_COMMANDS
                .iter()
                .map(|(c, d)| ((*c).to_owned(), (*d).to_owned()))
                .chain(daemon)
                .filter(|(c, _)| c.starts_with(word))
                .map(|(c, d)| Suggestion {
                    value: c,
                    description: Some(d),
                    span,
                    append_whitespace: true,
                    ..Default::default()
                })
                .collect();
        }
        let Some(partial) = word.strip_prefix('@') else {
            return Vec::new();
        };
        let (dir, prefix) = match partial.rfind('/') {
            Some(i) => (&partial[..=i], &partial[i + 1..]),
            None => ("", partial),
        };
        let Ok(entries) = std::fs::read_dir(self.cwd.join(dir)) else {
            return Vec::new();
        };
        let mut out: Vec<Suggestion> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                if !name.starts_with(prefix) || (name.starts_with('.') && !prefix.starts_with('.'))
                {
                    return None;
                }
                let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
                Some(Suggestion {
                    value: format!("@{dir}{name}{}", if is_dir { "/" } else { "" }),
                    span,
                    append_whitespace: !is_dir,
                    ..Default::default()
                })
            })
            .collect();
        out.sort_by(|a, b| a.value.cmp(&b.value));
        out.truncate(200);
        out
    }
}

/// A line ending in `\` continues on the next line.
struct Continuation;

impl Validator for Continuation {
    fn validate(&self, line: &str) -> ValidationResult {
        if line.ends_with('\\') {
            ValidationResult::Incomplete
        } else {
            ValidationResult::Complete
        }
    }
}

/// Starts the editor thread; send [`Command::ReadLine`] to read a line.
pub fn spawn(setup: Setup) -> anyhow::Result<std::sync::mpsc::Sender<Command>> {
    if let Some(dir) = setup.history.parent() {
        tether_proto::private::create_dir_all(dir)?;
    }
    let history = FileBackedHistory::with_file(5000, setup.history.clone())
        .map_err(|e| anyhow::anyhow!("cannot open the history {}: {e}", setup.history.display()))?;
    let history = super::paste::Expanded::new(history, setup.pasted.clone());
    let mut keys = default_emacs_keybindings();
    keys.add_binding(
        KeyModifiers::NONE,
        KeyCode::Tab,
        ReedlineEvent::UntilFound(vec![
            ReedlineEvent::Menu("completion".into()),
            ReedlineEvent::MenuNext,
        ]),
    );
    keys.add_binding(
        KeyModifiers::NONE,
        KeyCode::Esc,
        ReedlineEvent::Multiple(vec![
            ReedlineEvent::Esc,
            ReedlineEvent::ExecuteHostCommand(ESCAPE.into()),
        ]),
    );
    keys.add_binding(
        KeyModifiers::SHIFT,
        KeyCode::BackTab,
        ReedlineEvent::ExecuteHostCommand(NEXT_MODE.into()),
    );
    keys.add_binding(
        KeyModifiers::CONTROL,
        KeyCode::Char('t'),
        ReedlineEvent::ExecuteHostCommand(TOGGLE_THINKING.into()),
    );
    keys.add_binding(
        KeyModifiers::CONTROL,
        KeyCode::Char('o'),
        ReedlineEvent::ExecuteHostCommand(EXPAND.into()),
    );
    // Ctrl+G: the prompt in $VISUAL or $EDITOR (vi without either); saved, it comes back.
    keys.add_binding(
        KeyModifiers::CONTROL,
        KeyCode::Char('g'),
        ReedlineEvent::OpenEditor,
    );
    keys.add_binding(
        KeyModifiers::ALT,
        KeyCode::Enter,
        ReedlineEvent::Edit(vec![reedline::EditCommand::InsertNewline]),
    );
    let pasted = setup.pasted.clone();
    let breaking = Arc::new(AtomicBool::new(false));
    let release = setup.release;
    let menu = ColumnarMenu::default().with_name("completion");
    let mut editor = Reedline::create()
        .with_history(Box::new(history))
        .with_completer(Box::new(Complete {
            cwd: setup.cwd,
            commands: setup.commands,
            models: setup.models,
        }))
        .with_menu(ReedlineMenu::EngineCompleter(Box::new(menu)))
        // One candidate (`@no` and Tab) is taken at once.
        .with_quick_completions(true)
        .with_edit_mode(Box::new(Keys::new(
            Emacs::new(keys),
            setup.pasted,
            setup.printer.sender(),
        )))
        .with_validator(Box::new(Continuation))
        .with_ansi_colors(setup.color)
        .use_bracketed_paste(true)
        .with_external_printer(setup.printer)
        .with_transient_prompt(Box::new(TetherPrompt::sent()))
        .with_buffer_editor(external_editor(), prompt_file(&setup.history))
        .with_poll_interval(std::time::Duration::from_millis(50))
        .with_break_signal(breaking.clone())
        .with_idle_callback(Box::new(move || {
            // Lines sent to the printer before the release was asked for are printed in the
            // pass that sees it: the editor lets go in the pass after.
            if release
                .compare_exchange(ARMED, 0, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                breaking.store(true, Ordering::SeqCst);
            } else {
                let _ =
                    release.compare_exchange(RELEASE, ARMED, Ordering::SeqCst, Ordering::SeqCst);
            }
        }));
    let prompt = TetherPrompt {
        status: Some(setup.status),
        color: setup.color,
    };
    let (tx, rx) = std::sync::mpsc::channel::<Command>();
    let input = setup.input;
    let typed = setup.typed;
    std::thread::Builder::new()
        .name("line-editor".into())
        .spawn(move || {
            let mut ahead = Ahead::default();
            let mut watching = false;
            loop {
                let command = if watching {
                    match rx.try_recv() {
                        Ok(c) => c,
                        Err(std::sync::mpsc::TryRecvError::Empty) => {
                            let got = watch_key(&pasted, &mut ahead);
                            *typed.lock().unwrap_or_else(|p| p.into_inner()) = ahead.shown();
                            match got {
                                Some(got) => {
                                    watching = false;
                                    if input.send(got).is_err() {
                                        break;
                                    }
                                }
                                None => continue,
                            }
                            continue;
                        }
                        Err(std::sync::mpsc::TryRecvError::Disconnected) => break,
                    }
                } else {
                    match rx.recv() {
                        Ok(c) => c,
                        Err(_) => break,
                    }
                };
                match command {
                    Command::Watch => {
                        watching = true;
                        continue;
                    }
                    Command::Pause(done) => {
                        watching = false;
                        let _ = done.send(());
                        continue;
                    }
                    // What was typed meanwhile is not overwritten.
                    Command::Prefill(text) => {
                        if ahead.partial.is_empty() {
                            ahead.partial = text;
                        }
                        continue;
                    }
                    Command::ReadLine => {
                        watching = false;
                        typed.lock().unwrap_or_else(|p| p.into_inner()).clear();
                    }
                }
                // A line finished during the turn is sent as if typed now.
                if let Some(line) = ahead.lines.pop_front() {
                    if input.send(Input::Ahead(line)).is_err() {
                        break;
                    }
                    continue;
                }
                if !ahead.partial.is_empty() {
                    editor.run_edit_commands(&[reedline::EditCommand::InsertString(
                        std::mem::take(&mut ahead.partial),
                    )]);
                }
                // Esc closes a menu and stays at the prompt; twice at an empty one, it asks
                // for `/rewind` (as Claude Code's Esc Esc).
                let mut escaped: Option<(std::time::Instant, String)> = None;
                let read = loop {
                    let read = editor.read_line(&prompt);
                    if !matches!(&read, Ok(Signal::HostCommand(c)) if c == ESCAPE) {
                        break read;
                    }
                    let buffer = editor.current_buffer_contents().to_owned();
                    let empty = buffer.trim().is_empty();
                    // A second Esc soon after the first, nothing typed between.
                    if escaped.as_ref().is_some_and(|(at, before)| {
                        at.elapsed() < DOUBLE_ESCAPE && *before == buffer
                    }) {
                        escaped = None;
                        if empty {
                            erase_prompt(&editor, "");
                            break Ok(Signal::Success("/rewind".into()));
                        }
                        // With text: Esc Esc clears it.
                        editor.run_edit_commands(&[reedline::EditCommand::Clear]);
                        continue;
                    }
                    escaped = Some((std::time::Instant::now(), buffer));
                };
                // The editor has let go of the terminal: quiet until the next prompt.
                super::quiet::enter();
                let got = match read {
                    Ok(Signal::HostCommand(c)) if c == NEXT_MODE => Input::NextMode,
                    Ok(Signal::HostCommand(c)) if c == TOGGLE_THINKING => Input::ToggleThinking,
                    Ok(Signal::HostCommand(c)) if c == EXPAND => Input::Expand,
                    Ok(Signal::Success(line)) => {
                        // A `\` at a line end was a continuation mark, not text.
                        Input::Line(line.replace("\\\n", "\n"))
                    }
                    Ok(Signal::CtrlC) => Input::Interrupt,
                    Ok(Signal::CtrlD) => Input::Detach,
                    Ok(Signal::ExternalBreak(line)) => {
                        erase_prompt(&editor, &line);
                        editor.run_edit_commands(&[reedline::EditCommand::Clear]);
                        ahead.partial = line;
                        *typed.lock().unwrap_or_else(|p| p.into_inner()) = ahead.shown();
                        Input::Released
                    }
                    // No other host command or break is set up: back to the prompt.
                    Ok(_) => Input::Line(String::new()),
                    Err(e) => Input::Failed(e.to_string()),
                };
                if input.send(got).is_err() {
                    break;
                }
            }
        })?;
    Ok(tx)
}

/// Erases the prompt the editor left on the screen when it let go mid-line (status row and
/// input, from the cursor's row up), leaving the cursor where the prompt began. A prompt of
/// more rows than the turn that follows prints keeps blank rows instead: the editor's next
/// prompt takes its old place when the cursor is still inside it, and would draw over the turn.
fn erase_prompt(editor: &Reedline, line: &str) {
    use std::io::Write;
    let cols = crossterm::terminal::size()
        .map(|(c, _)| usize::from(c))
        .unwrap_or(80);
    let at = editor.current_insertion_point().min(line.len());
    let before = line.get(..at).unwrap_or(line);
    let up = super::prompt::rows_above_cursor(1, before, cols);
    let rows = super::prompt::rows_above_cursor(1, line, cols) + 1;
    let mut erase = if up == 0 {
        "\r\x1b[J".to_owned()
    } else {
        format!("\x1b[{up}A\r\x1b[J")
    };
    // A turn prints at least its prompt line, a blank one and its footer.
    erase.push_str(&"\r\n".repeat(rows.saturating_sub(2)));
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(erase.as_bytes());
    let _ = out.flush();
}

/// What was typed while a turn ran.
#[derive(Default)]
struct Ahead {
    /// Lines ended with Enter: sent one by one at the next prompts.
    lines: std::collections::VecDeque<String>,
    /// The line being typed: the next prompt starts with it.
    partial: String,
}

impl Ahead {
    /// One line for the live area: the lines sent next, then the one being typed.
    fn shown(&self) -> String {
        self.lines
            .iter()
            .map(|l| format!("{l} ⏎ "))
            .chain(std::iter::once(self.partial.clone()))
            .collect::<String>()
            .replace('\n', " ⏎ ")
            .trim_end()
            .to_owned()
    }
}

/// Waits briefly for one key while a turn runs: Esc (or `/cancel` and Enter) → interrupt the
/// turn, Ctrl+D → detach (both returned); text, Enter, Backspace and pastes (folded as the editor folds them) are
/// kept for the next prompt.
fn watch_key(pasted: &Arc<Mutex<Pasted>>, ahead: &mut Ahead) -> Option<Input> {
    use crossterm::event::{Event, KeyEventKind, KeyModifiers as Mods};
    if !crossterm::event::poll(WATCH_POLL).unwrap_or(false) {
        return None;
    }
    match crossterm::event::read().ok()? {
        Event::Key(key) if key.kind != KeyEventKind::Release => match key.code {
            crossterm::event::KeyCode::Esc => Some(Input::Cancel),
            crossterm::event::KeyCode::Char('d') if key.modifiers.contains(Mods::CONTROL) => {
                Some(Input::Detach)
            }
            crossterm::event::KeyCode::Char(c)
                if !key.modifiers.intersects(Mods::CONTROL | Mods::ALT) =>
            {
                ahead.partial.push(c);
                None
            }
            crossterm::event::KeyCode::Enter if ahead.partial.trim() == "/cancel" => {
                ahead.partial.clear();
                Some(Input::Cancel)
            }
            crossterm::event::KeyCode::Enter if !ahead.partial.trim().is_empty() => {
                let line = std::mem::take(&mut ahead.partial);
                ahead.lines.push_back(line);
                None
            }
            crossterm::event::KeyCode::Backspace => {
                ahead.partial.pop();
                None
            }
            _ => None,
        },
        Event::Paste(text) => {
            let folded = pasted.lock().unwrap_or_else(|p| p.into_inner()).fold(&text);
            ahead.partial.push_str(&folded);
            None
        }
        _ => None,
    }
}
