//! How output looks: colour (off with `NO_COLOR` or when stdout is not a terminal) and width.

use crossterm::style::Stylize;

/// Colour on or off, and the width to wrap at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    /// Whether to emit ANSI styling.
    pub color: bool,
    /// Columns.
    pub width: usize,
}

impl Style {
    /// Plain text at `width` columns.
    #[cfg(test)]
    pub fn plain(width: usize) -> Self {
        Self {
            color: false,
            width,
        }
    }

    /// For stdout: colour when it is a terminal and `NO_COLOR` is unset; its width (80 when
    /// unknown).
    pub fn detect() -> Self {
        use std::io::IsTerminal;
        let tty = std::io::stdout().is_terminal();
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let width = Self::terminal_width().unwrap_or(80);
        Self {
            color: tty && !no_color,
            width,
        }
    }

    /// The terminal's width now, when stdout is one.
    pub fn terminal_width() -> Option<usize> {
        use std::io::IsTerminal;
        if !std::io::stdout().is_terminal() {
            return None;
        }
        crossterm::terminal::size()
            .ok()
            .map(|(w, _)| w as usize)
            .filter(|w| *w > 0)
    }

    fn apply(&self, text: &str, f: impl FnOnce(&str) -> String) -> String {
        if self.color && !text.is_empty() {
            f(text)
        } else {
            text.to_owned()
        }
    }

    /// Bold.
    pub fn bold(&self, t: &str) -> String {
        self.apply(t, |t| t.bold().to_string())
    }
    /// Dim (secondary information).
    pub fn dim(&self, t: &str) -> String {
        self.apply(t, |t| t.dim().to_string())
    }
    /// Italic.
    pub fn italic(&self, t: &str) -> String {
        self.apply(t, |t| t.italic().to_string())
    }
    /// Inline code.
    pub fn code(&self, t: &str) -> String {
        if self.color {
            t.cyan().to_string()
        } else {
            format!("`{t}`")
        }
    }
    /// Link text.
    pub fn link(&self, t: &str) -> String {
        self.apply(t, |t| t.blue().underlined().to_string())
    }
    /// A heading of `level`.
    pub fn heading(&self, t: &str, level: usize) -> String {
        if !self.color {
            return format!("{} {t}", "#".repeat(level));
        }
        match level {
            1 => t.bold().underlined().magenta().to_string(),
            2 => t.bold().magenta().to_string(),
            _ => t.bold().to_string(),
        }
    }
    /// An error.
    pub fn error(&self, t: &str) -> String {
        self.apply(t, |t| t.red().to_string())
    }
    /// A warning (retries, notices).
    pub fn warn(&self, t: &str) -> String {
        self.apply(t, |t| t.yellow().to_string())
    }
    /// Success.
    pub fn ok(&self, t: &str) -> String {
        self.apply(t, |t| t.green().to_string())
    }
    /// A tool call's name.
    pub fn tool(&self, t: &str) -> String {
        self.apply(t, |t| t.bold().cyan().to_string())
    }
    /// An added diff line.
    pub fn added(&self, t: &str) -> String {
        self.apply(t, |t| t.green().to_string())
    }
    /// A removed diff line.
    pub fn removed(&self, t: &str) -> String {
        self.apply(t, |t| t.red().to_string())
    }
}
