//! What the editor shows: the prompt with its status line (model, mode, context, cost, who else
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

/// The session's state, shown right of the prompt.
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
}

impl Status {
    /// `sonnet · default · 12% · $0.0123 · +1 attached`
    pub fn line(&self) -> String {
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

/// The input prompt.
pub struct TetherPrompt {
    /// Shared with the event loop.
    pub status: Arc<Mutex<Status>>,
}

impl Prompt for TetherPrompt {
    fn render_prompt_left(&self) -> Cow<'_, str> {
        Cow::Borrowed("")
    }
    fn render_prompt_right(&self) -> Cow<'_, str> {
        Cow::Owned(self.status.lock().unwrap_or_else(|p| p.into_inner()).line())
    }
    fn render_prompt_indicator(&self, _mode: PromptEditMode) -> Cow<'_, str> {
        Cow::Borrowed("› ")
    }
    fn render_prompt_multiline_indicator(&self) -> Cow<'_, str> {
        Cow::Borrowed("  ")
    }
    fn render_prompt_history_search_indicator(&self, search: PromptHistorySearch) -> Cow<'_, str> {
        Cow::Owned(format!("(search: {}) ", search.term))
    }
}

/// Lines of a request's preview shown above the choices.
const PREVIEW_LINES: usize = 20;

const CHOICES: [(&str, char); 4] = [
    ("Yes", 'y'),
    ("Yes, and don't ask again this session for", 's'),
    ("Always allow (saved to the project's settings)", 'a'),
    ("No, and tell the model what to do instead", 'n'),
];

fn draw(out: &mut impl Write, selected: usize, rule: &str, style: Style) -> std::io::Result<()> {
    for (i, (label, key)) in CHOICES.iter().enumerate() {
        let label = if i == 1 {
            format!("{label} {rule}")
        } else {
            (*label).to_owned()
        };
        let line = format!(
            "  {} {}. {label} ({key})",
            if i == selected { "❯" } else { " " },
            i + 1
        );
        let line = if i == selected {
            style.bold(&line)
        } else {
            line
        };
        write!(out, "{line}\r\n")?;
    }
    out.flush()
}

/// Asks about one request; `None` when `cancel` fires first (answered elsewhere) or the
/// terminal cannot be read.
pub fn permission(
    tool: &str,
    preview: &str,
    rule: &str,
    style: Style,
    cancel: &AtomicBool,
) -> Option<super::Answer> {
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
    if crossterm::terminal::enable_raw_mode().is_err() {
        return None;
    }
    let mut selected = 0;
    let _ = draw(&mut out, selected, rule, style);
    let rows = CHOICES.len() as u16;
    let choice = loop {
        if cancel.load(Ordering::SeqCst) {
            break None;
        }
        match crossterm::event::poll(Duration::from_millis(50)) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(_) => break None,
        }
        let Ok(Event::Key(KeyEvent {
            code, modifiers, ..
        })) = crossterm::event::read()
        else {
            continue;
        };
        let pick = match code {
            KeyCode::Char('c') if modifiers.contains(KeyModifiers::CONTROL) => Some(3),
            KeyCode::Char(c) => CHOICES
                .iter()
                .position(|(_, k)| *k == c.to_ascii_lowercase())
                .or_else(|| {
                    c.to_digit(10)
                        .and_then(|d| (1..=4).contains(&d).then(|| d as usize - 1))
                }),
            KeyCode::Esc => Some(3),
            KeyCode::Enter => Some(selected),
            KeyCode::Up | KeyCode::Down => {
                selected = if code == KeyCode::Up {
                    (selected + CHOICES.len() - 1) % CHOICES.len()
                } else {
                    (selected + 1) % CHOICES.len()
                };
                let _ = crossterm::execute!(
                    out,
                    crossterm::cursor::MoveUp(rows),
                    crossterm::terminal::Clear(crossterm::terminal::ClearType::FromCursorDown)
                );
                let _ = draw(&mut out, selected, rule, style);
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
    let decision = match choice? {
        0 => PermissionDecision::AllowOnce,
        1 => PermissionDecision::AllowSession,
        2 => PermissionDecision::AllowAlways,
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
    Some(super::Answer { decision, message })
}
