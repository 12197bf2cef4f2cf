//! What the editor shows: the prompt under its status row (model, mode, context, cost, who else
//! is attached), and the permission prompt (single keys or arrows; it disappears when another
//! client answers first).

use crate::style::Style;
use crossterm::event::{Event, KeyCode, KeyEvent, KeyModifiers};
use reedline::{Prompt, PromptEditMode, PromptHistorySearch};
use std::borrow::Cow;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tether_proto::PermissionDecision;

/// The session's state, shown in the status row above the prompt.
#[derive(Debug, Clone, Default)]
pub struct Status {
    /// The session's title.
    pub title: Option<String>,
    /// Model alias or id.
    pub model: String,
    /// Permission mode.
    pub mode: String,
    /// How full the context is.
    pub context_percent: Option<f64>,
    /// Session cost so far.
    pub cost: Option<f64>,
    /// Other clients attached.
    pub others: usize,
    /// Whether this client only watches.
    pub observer: bool,
    /// The settings' `statusLine` command's output, shown instead.
    pub custom: Option<String>,
}

impl Status {
    /// `sonnet · default · 12% · $0.0123 · +1 attached`
    pub fn line(&self) -> String {
        if let Some(custom) = &self.custom {
            return custom.clone();
        }
        let mut parts = vec![self.model.clone(), self.mode.clone()];
        if let Some(p) = self.context_percent {
            parts.push(format!("{p:.0}% context"));
        }
        if let Some(c) = self.cost {
            parts.push(format!("${c:.4}"));
        }
        if self.others > 0 {
            parts.push(format!("+{} attached", self.others));
        }
        if self.observer {
            parts.push("observing".into());
        }
        parts.join(" · ")
    }
}

/// The input prompt: the status on a row of its own above the input (never beside it, where a
/// long line would run under it), then `› `. Without a status it is the prompt a sent line
/// keeps in the transcript (`› ` and the text).
pub struct TetherPrompt {
    /// Shared with the event loop (`None`: a sent line's prompt).
    pub status: Option<Arc<Mutex<Status>>>,
    /// Whether to colour (the modes that skip questions stand out).
    pub color: bool,
}

impl TetherPrompt {
    /// The prompt a sent line keeps: no status row.
    pub fn sent() -> Self {
        Self {
            status: None,
            color: false,
        }
    }
}

/// The colour a permission mode's name has in the status row: the ones that ask less stand
/// out (bypassPermissions red, acceptEdits magenta, plan cyan); the others keep the row's grey.
fn mode_colour(mode: &str) -> Option<&'static str> {
    match mode {
        "bypassPermissions" => Some("\x1b[31m"),
        "acceptEdits" => Some("\x1b[35m"),
        "plan" => Some("\x1b[36m"),
        _ => None,
    }
}

/// The terminal's width now.
fn columns() -> usize {
    crossterm::terminal::size()
        .map(|(cols, _)| usize::from(cols))
        .unwrap_or(80)
}

impl Prompt for TetherPrompt {
    fn render_prompt_left(&self) -> Cow<'_, str> {
        let Some(status) = &self.status else {
            return Cow::Borrowed("");
        };
        let status = status.lock().unwrap_or_else(|p| p.into_inner());
        let mut line = status.line();
        if let Some(colour) = mode_colour(&status.mode).filter(|_| self.color) {
            let named = format!(" · {} ·", status.mode);
            line = line.replacen(&named, &format!(" · {colour}{}\x1b[90m ·", status.mode), 1);
        }
        drop(status);
        // One row whatever the width: the editor and the erasure after a break count on it.
        let line = crate::view::fit_visible(&line, columns().saturating_sub(1).max(10));
        Cow::Owned(format!("{line}\n"))
    }
    fn render_prompt_right(&self) -> Cow<'_, str> {
        Cow::Borrowed("")
    }
    fn render_prompt_indicator(&self, _mode: PromptEditMode) -> Cow<'_, str> {
        Cow::Borrowed(INDICATOR)
    }
    fn render_prompt_multiline_indicator(&self) -> Cow<'_, str> {
        Cow::Borrowed(CONTINUATION)
    }
    fn render_prompt_history_search_indicator(&self, search: PromptHistorySearch) -> Cow<'_, str> {
        Cow::Owned(format!("(search: {}) ", search.term))
    }
    fn get_prompt_color(&self) -> reedline::Color {
        reedline::Color::DarkGray
    }
    fn get_indicator_color(&self) -> reedline::Color {
        reedline::Color::Default
    }
}

/// What starts the input line.
pub const INDICATOR: &str = "› ";

/// Starts a line printed above the prompt while the editor reads: up to the status row and
/// clear it, so the line takes its place and the prompt is drawn again below.
pub const OVER_STATUS: &str = "\x1b[1A\r\x1b[2K";
/// What starts each further line of a multi-line input.
pub const CONTINUATION: &str = "  ";

/// How many rows above the cursor a prompt of `status_rows` status rows and an input whose
/// text before the cursor is `before` takes at `cols` columns: what to erase when the editor
/// lets go of the terminal without finishing its line.
pub fn rows_above_cursor(status_rows: usize, before: &str, cols: usize) -> usize {
    let cols = cols.max(1);
    let lines: Vec<&str> = before.split('\n').collect();
    let mut rows = status_rows;
    for (i, line) in lines.iter().enumerate() {
        let prefix = if i == 0 { INDICATOR } else { CONTINUATION };
        let width = unicode_width::UnicodeWidthStr::width(prefix)
            + unicode_width::UnicodeWidthStr::width(*line);
        if i + 1 == lines.len() {
            rows += width / cols;
        } else {
            rows += width.div_ceil(cols).max(1);
        }
    }
    rows
}

/// Lines of a request's preview shown above the choices.
const PREVIEW_LINES: usize = 20;

/// The answers a permission prompt can offer: the daemon's option, its label, its key.
const CHOICES: [(&str, &str, char); 4] = [
    ("allow_once", "Yes", 'y'),
    (
        "allow_session",
        "Yes, and don't ask again this session for",
        's',
    ),
    (
        "allow_always",
        "Always allow (saved to the project's settings)",
        'a',
    ),
    ("deny", "No, and tell the model what to do instead", 'n'),
];

/// The choices offered for a request (all four unless the daemon offers fewer of them).
fn choices(options: &[String]) -> Vec<(&'static str, &'static str, char)> {
    let offered: Vec<_> = CHOICES
        .into_iter()
        .filter(|(o, _, _)| options.iter().any(|x| x == o))
        .collect();
    if offered.is_empty() {
        CHOICES.to_vec()
    } else {
        offered
    }
}

/// Draws the choices; returns how many rows they took (a line wider than the terminal takes
/// more than one, and the erasure must take them all).
fn draw(
    out: &mut impl Write,
    offered: &[(&str, &str, char)],
    selected: usize,
    rule: &str,
    style: Style,
) -> u16 {
    let cols = columns().max(1);
    let mut rows = 0;
    for (i, (option, label, key)) in offered.iter().enumerate() {
        // A rule for a whole multi-line command is shown on one line.
        let label = if *option == "allow_session" {
            let rule: String = rule
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect();
            format!("{label} {rule}")
        } else {
            (*label).to_owned()
        };
        let line = format!(
            "  {} {}. {label} ({key})",
            if i == selected { "❯" } else { " " },
            i + 1
        );
        rows += unicode_width::UnicodeWidthStr::width(line.as_str())
            .div_ceil(cols)
            .max(1);
        let line = if i == selected {
            style.bold(&line)
        } else {
            line
        };
        let _ = write!(out, "{line}\r\n");
    }
    let _ = out.flush();
    u16::try_from(rows).unwrap_or(u16::MAX)
}

/// A diff's `---`/`+++` lines with a path under `cwd` written relative to it (shorter, and
/// what the user types).
fn relative_paths(preview: &str, cwd: &str) -> String {
    if !preview.starts_with("--- ") || cwd.is_empty() {
        return preview.to_owned();
    }
    let under = format!("{}/", cwd.trim_end_matches('/'));
    let mut out = String::with_capacity(preview.len());
    for (i, line) in preview.split_inclusive('\n').enumerate() {
        match line.get(..4) {
            Some(mark @ ("--- " | "+++ ")) if i < 2 && line[4..].starts_with(&under) => {
                out.push_str(mark);
                out.push_str(&line[4 + under.len()..]);
            }
            _ => out.push_str(line),
        }
    }
    out
}

/// Asks about one request; `None` when `cancel` fires first (answered elsewhere) or the
/// terminal cannot be read.
pub fn permission(
    request: &super::Pending,
    cwd: &str,
    style: Style,
    cancel: &AtomicBool,
) -> Option<super::Answer> {
    let (tool, rule) = (&request.tool, &request.rule);
    let preview = &relative_paths(&request.preview, cwd);
    let mut out = std::io::stdout();
    let _ = writeln!(
        out,
        "{} {}",
        style.warn("?"),
        style.bold(&format!("Allow {tool}?"))
    );
    // A diff preview (Edit, Write) in colour; a command or URL as it is.
    let shown = if preview.starts_with("--- ") {
        crate::view::indented(preview, PREVIEW_LINES, style, |l| {
            crate::view::diff_line(style, l)
        })
    } else {
        crate::view::indented(preview, PREVIEW_LINES, style, |l| style.dim(l))
    };
    let _ = write!(out, "{shown}");
    // What the model says the command is for.
    if let Some(description) = request.input["description"]
        .as_str()
        .filter(|d| !d.trim().is_empty())
    {
        let _ = write!(
            out,
            "  {}\r\n",
            style.dim(&format!("({})", description.trim()))
        );
    }
    if tool == "Bash" {
        let command = request.input["command"].as_str().unwrap_or_default().trim();
        if rule.is_empty() {
            let _ = write!(
                out,
                "  {}\r\n",
                style.dim(
                    "what this runs is decided as it runs (a loop, a condition, a variable) and a \
                     pattern in it keeps a rule from naming it: it is asked about each time"
                )
            );
        } else if *rule == format!("Bash({command})") && command.contains([';', '&', '|', '$']) {
            let _ = write!(
                out,
                "  {}\r\n",
                style.dim(
                    "what this runs is decided as it runs: only exactly this command can be allowed"
                )
            );
        }
    }
    let offered = choices(&request.options);
    if crossterm::terminal::enable_raw_mode().is_err() {
        return None;
    }
    let mut selected = 0;
    let mut rows = draw(&mut out, &offered, selected, rule, style);
    let choice = loop {
        let Some(code) = next_key(cancel) else {
            break None;
        };
        let pick = match code {
            KeyCode::Char(c) => offered
                .iter()
                .position(|(_, _, k)| *k == c.to_ascii_lowercase())
                .or_else(|| {
                    c.to_digit(10)
                        .map(|d| d as usize)
                        .filter(|d| (1..=offered.len()).contains(d))
                        .map(|d| d - 1)
                }),
            KeyCode::Esc => offered.iter().position(|(o, _, _)| *o == "deny"),
            KeyCode::Enter => Some(selected),
            KeyCode::Up | KeyCode::Down => {
                selected = if code == KeyCode::Up {
                    (selected + offered.len() - 1) % offered.len()
                } else {
                    (selected + 1) % offered.len()
                };
                let _ = crossterm::execute!(
                    out,
                    crossterm::cursor::MoveUp(rows),
                    crossterm::terminal::Clear(crossterm::terminal::ClearType::FromCursorDown)
                );
                rows = draw(&mut out, &offered, selected, rule, style);
                None
            }
            _ => None,
        };
        if let Some(p) = pick {
            break Some(p);
        }
    };
    let _ = crossterm::execute!(
        out,
        crossterm::cursor::MoveUp(rows),
        crossterm::terminal::Clear(crossterm::terminal::ClearType::FromCursorDown)
    );
    let _ = crossterm::terminal::disable_raw_mode();
    let decision = match offered.get(choice?).map(|(o, _, _)| *o) {
        Some("allow_once") => PermissionDecision::AllowOnce,
        Some("allow_session") => PermissionDecision::AllowSession,
        Some("allow_always") => PermissionDecision::AllowAlways,
        _ => PermissionDecision::Deny,
    };
    let mut message = None;
    if decision == PermissionDecision::Deny {
        let mut line = String::new();
        // Asked once the terminal echoes again, so what is typed shows.
        let read = super::quiet::cooked(|| {
            let _ = write!(out, "  what should the model do instead? (Enter to skip) ");
            let _ = out.flush();
            std::io::stdin().read_line(&mut line)
        });
        if read.is_ok() && !line.trim().is_empty() {
            message = Some(line.trim().to_owned());
        }
    }
    Some(super::Answer {
        decision,
        message,
        updated_input: None,
    })
}

/// A menu of `items` under `title`, one row each (cut to the terminal's width): arrows move,
/// Enter (or, when `numbered`, a row's number) picks, Esc or Ctrl+C leaves (`None`). It is
/// erased when done; a terminal that cannot be read says so.
pub fn pick(
    title: &str,
    items: &[String],
    numbered: bool,
    mut selected: usize,
    style: Style,
    cancel: &AtomicBool,
) -> Option<usize> {
    if items.is_empty() {
        return None;
    }
    let mut out = std::io::stdout();
    let width = columns().saturating_sub(1).max(10);
    let draw = |out: &mut std::io::Stdout, selected: usize| {
        let _ = write!(out, "{}\r\n", style.bold(title));
        for (i, item) in items.iter().enumerate() {
            let mark = if i == selected { "❯" } else { " " };
            let row = if numbered {
                format!("  {mark} {}. {item}", i + 1)
            } else {
                format!("  {mark} {item}")
            };
            let row = crate::view::fit_visible(&row, width);
            let row = if i == selected { style.bold(&row) } else { row };
            let _ = write!(out, "{row}\r\n");
        }
        let _ = write!(
            out,
            "{}\r\n",
            style.dim(if numbered {
                "  ↑/↓ to move, Enter or a number to pick, Esc to leave"
            } else {
                "  ↑/↓ to move, Enter to pick, Esc to leave"
            })
        );
        let _ = out.flush();
    };
    let rows = u16::try_from(items.len() + 2).unwrap_or(u16::MAX);
    if !raw_mode(&mut out, style) {
        return None;
    }
    selected = selected.min(items.len() - 1);
    draw(&mut out, selected);
    let erase = |out: &mut std::io::Stdout| erase_rows(out, rows);
    let choice = loop {
        let Some(code) = next_key(cancel) else {
            break None;
        };
        match code {
            KeyCode::Esc => break None,
            KeyCode::Enter => break Some(selected),
            KeyCode::Char(c) if numbered => {
                if let Some(d) = c
                    .to_digit(10)
                    .map(|d| d as usize)
                    .filter(|d| (1..=items.len()).contains(d))
                {
                    break Some(d - 1);
                }
            }
            KeyCode::Up | KeyCode::Down => {
                selected = if code == KeyCode::Up {
                    (selected + items.len() - 1) % items.len()
                } else {
                    (selected + 1) % items.len()
                };
                erase(&mut out);
                draw(&mut out, selected);
            }
            _ => {}
        }
    };
    erase(&mut out);
    let _ = crossterm::terminal::disable_raw_mode();
    choice
}

/// Puts the terminal in raw mode for a picker; `false`, having said why, when it cannot.
fn raw_mode(out: &mut std::io::Stdout, style: Style) -> bool {
    match crossterm::terminal::enable_raw_mode() {
        Ok(()) => true,
        Err(e) => {
            let _ = writeln!(
                out,
                "{}",
                style.error(&format!("cannot read the terminal: {e}"))
            );
            false
        }
    }
}

/// Takes back the `rows` lines a picker drew above the cursor.
fn erase_rows(out: &mut std::io::Stdout, rows: u16) {
    let _ = crossterm::execute!(
        out,
        crossterm::cursor::MoveUp(rows),
        crossterm::terminal::Clear(crossterm::terminal::ClearType::FromCursorDown)
    );
}

/// Rows a searching picker shows at most.
pub const SEARCH_ROWS: usize = 10;
/// How long a searching picker waits for the next key before it searches.
const SEARCH_PAUSE: Duration = Duration::from_millis(120);

/// A picker whose list follows what is typed: `search(query)` gives the rows for a query
/// (each a label and what picking it returns), asked again at every change, starting with
/// `initial`. Typing edits the query, ↑/↓ move, Enter picks, Esc leaves.
pub fn search_pick<T>(
    title: &str,
    initial: &str,
    mut search: impl FnMut(&str) -> Vec<(String, T)>,
    style: Style,
    cancel: &AtomicBool,
) -> Option<T> {
    let mut out = std::io::stdout();
    let width = columns().saturating_sub(1).max(10);
    let mut query = initial.to_owned();
    let mut rows = search(&query);
    let mut selected = 0usize;
    let draw = |out: &mut std::io::Stdout, query: &str, rows: &[(String, T)], selected: usize| {
        let fit = |line: String| crate::view::fit_visible(&line, width);
        let mut lines = vec![
            fit(style.bold(title)),
            fit(format!("  {} {query}▏", style.dim("search:"))),
        ];
        if rows.is_empty() {
            lines.push(style.dim("    nothing matches"));
        }
        for (i, (label, _)) in rows.iter().take(SEARCH_ROWS).enumerate() {
            let mark = if i == selected { "❯" } else { " " };
            let row = crate::view::fit_visible(&format!("  {mark} {label}"), width);
            lines.push(if i == selected { style.bold(&row) } else { row });
        }
        lines.push(fit(
            style.dim("  type to search · ↑/↓ move · Enter picks · Esc leaves")
        ));
        for line in &lines {
            let _ = write!(out, "{line}\r\n");
        }
        let _ = out.flush();
        u16::try_from(lines.len()).unwrap_or(u16::MAX)
    };
    if !raw_mode(&mut out, style) {
        return None;
    }
    let mut drawn = draw(&mut out, &query, &rows, selected);

    let choice = loop {
        let Some(code) = next_key(cancel) else {
            break None;
        };
        let shown = rows.len().min(SEARCH_ROWS);
        match code {
            KeyCode::Esc => break None,
            KeyCode::Enter if shown > 0 => break Some(rows.swap_remove(selected)),
            KeyCode::Up | KeyCode::Down if shown > 0 => {
                selected = if code == KeyCode::Up {
                    (selected + shown - 1) % shown
                } else {
                    (selected + 1) % shown
                };
            }
            KeyCode::Char(c) => query.push(c),
            KeyCode::Backspace if query.pop().is_some() => {}
            _ => continue,
        }
        if matches!(code, KeyCode::Char(_) | KeyCode::Backspace) {
            // While keys keep coming (typing, a paste), the search waits for the last one.
            if crossterm::event::poll(SEARCH_PAUSE).unwrap_or(false) {
                continue;
            }
            rows = search(&query);
            selected = 0;
        }
        erase_rows(&mut out, drawn);
        drawn = draw(&mut out, &query, &rows, selected);
    };
    erase_rows(&mut out, drawn);
    let _ = crossterm::terminal::disable_raw_mode();
    choice.map(|(_, picked)| picked)
}

/// The next key, the terminal being in raw mode; `None` when `cancel` fires (answered
/// elsewhere) or the terminal cannot be read. Ctrl+C reads as Esc.
fn next_key(cancel: &AtomicBool) -> Option<KeyCode> {
    loop {
        if cancel.load(Ordering::SeqCst) {
            return None;
        }
        match crossterm::event::poll(Duration::from_millis(50)) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(_) => return None,
        }
        match crossterm::event::read() {
            Ok(Event::Key(KeyEvent {
                code: KeyCode::Char('c'),
                modifiers,
                ..
            })) if modifiers.contains(KeyModifiers::CONTROL) => return Some(KeyCode::Esc),
            Ok(Event::Key(KeyEvent { code, .. })) => return Some(code),
            Ok(_) => continue,
            Err(_) => return None,
        }
    }
}

/// Waits for one key in raw mode (see [`next_key`]).
fn key(cancel: &AtomicBool) -> Option<KeyCode> {
    if crossterm::terminal::enable_raw_mode().is_err() {
        return None;
    }
    let got = next_key(cancel);
    let _ = crossterm::terminal::disable_raw_mode();
    got
}

/// Reads a line with the terminal echoing (what is typed shows).
fn line(question: &str) -> String {
    let mut out = std::io::stdout();
    let mut line = String::new();
    let _ = super::quiet::cooked(|| {
        let _ = write!(out, "{question}");
        let _ = out.flush();
        std::io::stdin().read_line(&mut line)
    });
    line.trim().to_owned()
}

/// A plan from `ExitPlanMode`: approve it (accepting edits, or approving each) or keep
/// planning, saying what should change.
pub fn plan(plan: &str, style: Style, cancel: &AtomicBool) -> Option<super::Answer> {
    let mut out = std::io::stdout();
    let _ = writeln!(
        out,
        "{} {}",
        style.warn("?"),
        style.bold("The model's plan:")
    );
    let mut md = crate::markdown::Markdown::new(style);
    let mut shown = md.push(plan);
    shown.push_str(&md.finish());
    for row in shown.lines() {
        let _ = writeln!(out, "  {row}");
    }
    let _ = writeln!(
        out,
        "{}\n  1. Yes, and accept edits without asking (a)\n  2. Yes, and approve each edit (y)\n  3. No, keep planning (n)",
        style.bold("Carry it out?")
    );
    let _ = out.flush();
    let decision = loop {
        match key(cancel)? {
            KeyCode::Char('1' | 'a' | 'A' | 's' | 'S') => break PermissionDecision::AllowSession,
            KeyCode::Char('2' | 'y' | 'Y') | KeyCode::Enter => break PermissionDecision::AllowOnce,
            KeyCode::Char('3' | 'n' | 'N') | KeyCode::Esc => break PermissionDecision::Deny,
            _ => continue,
        }
    };
    let message = (decision == PermissionDecision::Deny)
        .then(|| line("  what should change in the plan? (Enter to skip) "))
        .filter(|m| !m.is_empty());
    Some(super::Answer {
        decision,
        message,
        updated_input: None,
    })
}

/// `AskUserQuestion`: each question with its numbered options (a key picks one; several are
/// typed as `1,3`; the last number is for an answer in your own words); Esc declines.
pub fn questions(
    input: &serde_json::Value,
    style: Style,
    cancel: &AtomicBool,
) -> Option<super::Answer> {
    let mut out = std::io::stdout();
    let asked = input["questions"].as_array().cloned().unwrap_or_default();
    let _ = writeln!(
        out,
        "{} {}",
        style.warn("?"),
        style.bold(if asked.len() == 1 {
            "The model asks:"
        } else {
            "The model asks (one question at a time):"
        })
    );
    let mut replies = Vec::new();
    for q in &asked {
        let options = q["options"].as_array().cloned().unwrap_or_default();
        let header = q["header"]
            .as_str()
            .filter(|h| !h.is_empty())
            .map(|h| style.dim(&format!("[{h}] ")))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{header}{}",
            style.bold(q["question"].as_str().unwrap_or_default())
        );
        for (i, o) in options.iter().enumerate() {
            let description = o["description"]
                .as_str()
                .filter(|d| !d.is_empty())
                .map(|d| style.dim(&format!(" — {d}")))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  {}. {}{description}",
                i + 1,
                o["label"].as_str().unwrap_or_default()
            );
        }
        let other = options.len() + 1;
        let _ = writeln!(out, "  {other}. {}", style.dim("Other: in your own words"));
        let _ = out.flush();
        let reply = if q["multiSelect"] == true {
            line(&format!(
                "  choose one or more (e.g. 1,{}) or type: ",
                options.len()
            ))
        } else {
            loop {
                match key(cancel)? {
                    KeyCode::Esc => break String::new(),
                    KeyCode::Char(c) => match c.to_digit(10).map(|d| d as usize) {
                        Some(d) if d == other => break line("  your answer: "),
                        Some(d) if (1..other).contains(&d) => break d.to_string(),
                        _ => continue,
                    },
                    _ => continue,
                }
            }
        };
        if reply.is_empty() {
            return Some(super::Answer {
                decision: PermissionDecision::Deny,
                message: None,
                updated_input: None,
            });
        }
        let _ = writeln!(
            out,
            "  {}",
            style.ok(&format!("→ {}", resolve(&options, &reply)))
        );
        replies.push(reply);
    }
    Some(super::Answer {
        decision: PermissionDecision::AllowOnce,
        message: None,
        updated_input: Some(with_answers(input, &replies)),
    })
}

/// An option number (or several, `1,3`) as its label(s); anything else as typed.
fn resolve(options: &[serde_json::Value], reply: &str) -> String {
    let picks: Option<Vec<&str>> = reply
        .split(',')
        .map(|n| {
            n.trim()
                .parse::<usize>()
                .ok()
                .and_then(|n| n.checked_sub(1))
                .and_then(|i| options.get(i))
                .and_then(|o| o["label"].as_str())
        })
        .collect();
    match picks {
        Some(labels) if !labels.is_empty() => labels.join(", "),
        _ => reply.to_owned(),
    }
}

/// The call's input with `answers` (question → answer) from one reply per question, as
/// Claude Code's permission prompt fills it in.
pub fn with_answers(input: &serde_json::Value, replies: &[String]) -> serde_json::Value {
    let mut answers = serde_json::Map::new();
    for (q, reply) in input["questions"]
        .as_array()
        .into_iter()
        .flatten()
        .zip(replies)
    {
        let options = q["options"].as_array().cloned().unwrap_or_default();
        if let Some(question) = q["question"].as_str() {
            answers.insert(question.to_owned(), resolve(&options, reply).into());
        }
    }
    let mut out = input.clone();
    out["answers"] = serde_json::Value::Object(answers);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_diff_names_files_under_the_session_relative_to_it() {
        let diff = "--- /work/p/src/a.rs\n+++ /work/p/src/a.rs\n@@ -1 +1 @@\n--- /work/p/x\n";
        assert_eq!(
            relative_paths(diff, "/work/p"),
            "--- src/a.rs\n+++ src/a.rs\n@@ -1 +1 @@\n--- /work/p/x\n"
        );
        assert_eq!(
            relative_paths("--- /etc/hosts\n", "/work/p"),
            "--- /etc/hosts\n"
        );
        assert_eq!(relative_paths("rm -rf x", "/work/p"), "rm -rf x");
    }

    #[test]
    fn the_rows_above_the_cursor_count_the_status_and_every_wrapped_row() {
        // `› ` and 8 characters at 10 columns: the cursor sits on the next row.
        assert_eq!(rows_above_cursor(1, "abcdefgh", 10), 2);
        assert_eq!(rows_above_cursor(1, "abc", 10), 1);
        // A line of 25 columns takes 3 rows; the cursor is on the row after it.
        assert_eq!(
            rows_above_cursor(1, &format!("{}\n", "x".repeat(23)), 10),
            4
        );
        assert_eq!(rows_above_cursor(0, "", 80), 0);
    }

    #[test]
    fn replies_become_answers_by_option_number_or_as_typed() {
        let input = json!({"questions": [
            {"question": "Which database?", "options": [{"label": "Postgres"}, {"label": "SQLite"}]},
            {"question": "Which checks?", "multiSelect": true, "options": [{"label": "lint"}, {"label": "test"}, {"label": "fmt"}]},
            {"question": "Name?", "options": [{"label": "a"}, {"label": "b"}]}
        ]});
        let out = with_answers(&input, &["2".into(), "1, 3".into(), "my own".into()]);
        assert_eq!(
            out["answers"],
            json!({"Which database?": "SQLite", "Which checks?": "lint, fmt", "Name?": "my own"})
        );
        assert_eq!(out["questions"], input["questions"]);
    }
}
