//! Streaming Markdown for the terminal: text arrives in deltas, each line is rendered once it is
//! complete (headings, lists, quotes, emphasis, inline code, links, tables, fenced code blocks
//! highlighted with syntect). Plain text with `NO_COLOR` or when output is not a terminal.

use crate::style::Style;
use pulldown_cmark::{Event as Md, Options, Parser, Tag, TagEnd};
use std::sync::OnceLock;
use syntect::easy::HighlightLines;
use syntect::highlighting::{Theme, ThemeSet};
use syntect::parsing::SyntaxSet;

/// Syntaxes and the theme, loaded on the first code block (not before the first paint).
fn highlighting() -> &'static (SyntaxSet, Theme) {
    static SETS: OnceLock<(SyntaxSet, Theme)> = OnceLock::new();
    SETS.get_or_init(|| {
        let syntaxes = SyntaxSet::load_defaults_newlines();
        let mut themes = ThemeSet::load_defaults().themes;
        let theme = themes
            .remove("base16-ocean.dark")
            .or_else(|| themes.into_values().next())
            .unwrap_or_default();
        (syntaxes, theme)
    })
}

/// Renders Markdown as it streams in.
pub struct Markdown {
    style: Style,
    /// Text after the last newline.
    partial: String,
    /// Inside a fenced code block: its fence and language.
    code: Option<(String, String)>,
    highlighter: Option<HighlightLines<'static>>,
    /// Rows of a table being collected.
    table: Vec<Vec<String>>,
}

impl Markdown {
    /// A renderer in `style`.
    pub fn new(style: Style) -> Self {
        Self {
            style,
            partial: String::new(),
            code: None,
            highlighter: None,
            table: Vec::new(),
        }
    }

    /// Wraps at `width` columns from the next line on (the terminal was resized).
    pub fn set_width(&mut self, width: usize) {
        self.style.width = width;
    }

    /// Adds streamed text; returns the rendered lines it completed. Control characters other
    /// than newlines and tabs are dropped: the model's text never drives the terminal.
    pub fn push(&mut self, text: &str) -> String {
        self.partial.extend(
            text.chars()
                .filter(|c| !c.is_control() || *c == '\n' || *c == '\t'),
        );
        let mut out = String::new();
        while let Some(at) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=at).collect();
            out.push_str(&self.line(line.trim_end_matches('\n')));
        }
        out
    }

    /// The line still streaming, rendered as it would be if it ended here (terminal rows, for
    /// a live preview; empty when nothing is pending). Changes no state.
    pub fn preview(&self) -> Vec<String> {
        if self.partial.trim().is_empty() {
            return Vec::new();
        }
        let trimmed = self.partial.trim_start();
        let rendered = if self.code.is_some() {
            format!("    {}", self.partial)
        } else if trimmed.starts_with('|')
            || trimmed.starts_with("```")
            || trimmed.starts_with("~~~")
        {
            self.partial.clone()
        } else {
            self.prose(&self.partial)
        };
        rendered.lines().map(str::to_owned).collect()
    }

    /// Renders what is left (the block completed).
    pub fn finish(&mut self) -> String {
        let rest = std::mem::take(&mut self.partial);
        let mut out = String::new();
        if !rest.is_empty() {
            out.push_str(&self.line(&rest));
        }
        out.push_str(&self.flush_table());
        self.code = None;
        self.highlighter = None;
        out
    }

    fn line(&mut self, line: &str) -> String {
        let trimmed = line.trim_start();
        if let Some((fence, _)) = &self.code {
            let closes = trimmed.starts_with(fence.as_str())
                && trimmed
                    .trim_matches(|c| c == '`' || c == '~')
                    .trim()
                    .is_empty();
            if closes {
                let fence = self.style.dim(fence);
                self.code = None;
                self.highlighter = None;
                return format!("{fence}\n");
            }
            return self.code_line(line);
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            let mut out = self.flush_table();
            let fence: String = trimmed
                .chars()
                .take_while(|c| *c == '`' || *c == '~')
                .collect();
            let lang = trimmed[fence.len()..].trim().to_owned();
            if self.style.color {
                let (syntaxes, theme) = highlighting();
                let syntax = syntaxes
                    .find_syntax_by_token(&lang)
                    .unwrap_or_else(|| syntaxes.find_syntax_plain_text());
                self.highlighter = Some(HighlightLines::new(syntax, theme));
            }
            out.push_str(&format!("{}\n", self.style.dim(&format!("{fence}{lang}"))));
            self.code = Some((fence, lang));
            return out;
        }
        if trimmed.starts_with('|') {
            let cells: Vec<String> = trimmed
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect();
            let separator = cells
                .iter()
                .all(|c| !c.is_empty() && c.chars().all(|ch| matches!(ch, '-' | ':' | ' ')));
            if !separator {
                self.table.push(cells);
            }
            return String::new();
        }
        let mut out = self.flush_table();
        out.push_str(&self.prose(line));
        out
    }

    fn code_line(&mut self, line: &str) -> String {
        let Some(h) = self.highlighter.as_mut() else {
            return format!("    {line}\n");
        };
        let (syntaxes, _) = highlighting();
        let with_newline = format!("{line}\n");
        match h.highlight_line(&with_newline, syntaxes) {
            Ok(ranges) => format!(
                "    {}\x1b[0m",
                syntect::util::as_24_bit_terminal_escaped(&ranges, false)
            ),
            Err(_) => format!("    {line}\n"),
        }
    }

    /// One line of prose: block markers by hand (they are per line), inline markup by
    /// pulldown-cmark; wrapped to the width.
    fn prose(&self, line: &str) -> String {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        if trimmed.is_empty() {
            return "\n".into();
        }
        if let Some(level) = heading(trimmed) {
            let text = trimmed[level..].trim();
            let body = self.inline(text);
            return format!("{}\n", self.style.heading(&body, level));
        }
        if trimmed.chars().all(|c| matches!(c, '-' | '*' | '_' | ' ')) && trimmed.len() >= 3 {
            return format!(
                "{}\n",
                self.style.dim(&"─".repeat(self.style.width.min(40)))
            );
        }
        let (marker, rest) = if let Some(rest) = trimmed.strip_prefix("> ") {
            ("│ ".to_owned(), rest)
        } else if let Some(rest) = trimmed
            .strip_prefix("- ")
            .or_else(|| trimmed.strip_prefix("* "))
            .or_else(|| trimmed.strip_prefix("+ "))
        {
            ("• ".to_owned(), rest)
        } else if let Some((n, rest)) = trimmed
            .split_once(". ")
            .filter(|(n, _)| !n.is_empty() && n.len() <= 3 && n.chars().all(|c| c.is_ascii_digit()))
        {
            (format!("{n}. "), rest)
        } else {
            (String::new(), trimmed)
        };
        let lead = format!("{indent}{marker}");
        let marker = if marker == "│ " {
            self.style.dim(&marker)
        } else {
            marker
        };
        let width = self
            .style
            .width
            .saturating_sub(unicode_width::UnicodeWidthStr::width(lead.as_str()))
            .max(20);
        let mut out = String::new();
        // Inline markup first, then wrap: textwrap measures past ANSI escapes.
        let rendered = self.inline(rest);
        for (i, piece) in textwrap::wrap(&rendered, width).iter().enumerate() {
            let prefix = if i == 0 {
                format!("{indent}{marker}")
            } else {
                " ".repeat(unicode_width::UnicodeWidthStr::width(lead.as_str()))
            };
            out.push_str(&format!("{prefix}{piece}\n"));
        }
        out
    }

    /// Inline markup: emphasis, strong, code, links, strikethrough.
    fn inline(&self, text: &str) -> String {
        let mut out = String::new();
        let mut strong = 0;
        let mut emphasis = 0;
        let mut link: Option<String> = None;
        for ev in Parser::new_ext(text, Options::ENABLE_STRIKETHROUGH) {
            match ev {
                Md::Start(Tag::Strong) => strong += 1,
                Md::End(TagEnd::Strong) => strong -= 1,
                Md::Start(Tag::Emphasis) => emphasis += 1,
                Md::End(TagEnd::Emphasis) => emphasis -= 1,
                Md::Start(Tag::Link { dest_url, .. }) => link = Some(dest_url.to_string()),
                Md::End(TagEnd::Link) => {
                    if let Some(url) = link.take() {
                        out.push_str(&self.style.dim(&format!(" ({url})")));
                    }
                }
                Md::Text(t) => {
                    let t = t.to_string();
                    out.push_str(&match (strong > 0, emphasis > 0, link.is_some()) {
                        (_, _, true) => self.style.link(&t),
                        (true, _, _) => self.style.bold(&t),
                        (_, true, _) => self.style.italic(&t),
                        _ => t,
                    });
                }
                Md::Code(c) => out.push_str(&self.style.code(&c)),
                Md::SoftBreak | Md::HardBreak => out.push(' '),
                Md::Html(h) | Md::InlineHtml(h) => out.push_str(&h),
                _ => {}
            }
        }
        out
    }

    /// Renders a collected table with aligned columns.
    fn flush_table(&mut self) -> String {
        if self.table.is_empty() {
            return String::new();
        }
        let rows = std::mem::take(&mut self.table);
        let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..cols)
            .map(|c| {
                rows.iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| unicode_width::UnicodeWidthStr::width(s.as_str()))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for (i, row) in rows.iter().enumerate() {
            let cells: Vec<String> = (0..cols)
                .map(|c| {
                    let cell = row.get(c).map(String::as_str).unwrap_or("");
                    let pad = widths[c].saturating_sub(unicode_width::UnicodeWidthStr::width(cell));
                    let text = if i == 0 {
                        self.style.bold(cell)
                    } else {
                        self.inline(cell)
                    };
                    format!("{text}{}", " ".repeat(pad))
                })
                .collect();
            out.push_str(&format!(
                "{}\n",
                cells.join(&self.style.dim(" │ ")).trim_end()
            ));
            if i == 0 {
                let rule: Vec<String> = widths.iter().map(|w| "─".repeat(*w)).collect();
                out.push_str(&format!("{}\n", self.style.dim(&rule.join("─┼─"))));
            }
        }
        out
    }
}

/// The level of a `#` heading line.
fn heading(line: &str) -> Option<usize> {
    let level = line.chars().take_while(|c| *c == '#').count();
    (1..=6)
        .contains(&level)
        .then_some(level)
        .filter(|l| line[*l..].starts_with(' '))
}
