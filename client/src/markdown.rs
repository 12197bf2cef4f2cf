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
    /// Its columns' alignment, from the separator row.
    align: Vec<Align>,
}

/// How a table column is aligned (`:--`, `:-:`, `--:`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Align {
    Left,
    Center,
    Right,
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
            align: Vec::new(),
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

    /// The full rows of a plain paragraph still streaming, rendered and taken from it: for a
    /// terminal that cannot show a live preview (its prompt is up), so a long paragraph appears
    /// row by row rather than when it ends. Rows break between words, first fit, as the
    /// paragraph will wrap; the row being written and its last word stay.
    pub fn take_rows(&mut self) -> String {
        let trimmed = self.partial.trim_start();
        let plain = self.code.is_none()
            && self.table.is_empty()
            && self.partial.len() == trimmed.len()
            && !trimmed.starts_with(['#', '-', '*', '+', '>', '|', '`', '~'])
            && !trimmed
                .split_once(". ")
                .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if !plain {
            return String::new();
        }
        let width = self.room();
        let mut out = String::new();
        loop {
            // Words followed by a space are final; the last one may still grow.
            let mut col = 0;
            let mut cut = None;
            let mut start = 0;
            for (i, c) in self.partial.char_indices() {
                if c != ' ' {
                    continue;
                }
                let word = &self.partial[start..i];
                let w = textwrap::core::display_width(word);
                if !word.is_empty() {
                    if col > 0 && col + 1 + w > width {
                        cut = Some(start);
                        break;
                    }
                    col += usize::from(col > 0) + w;
                }
                start = i + 1;
            }
            let Some(at) = cut else { break };
            let row: String = self.partial.drain(..at).collect();
            out.push_str(&self.prose(row.trim_end()));
        }
        out
    }

    /// The columns a row may take: all but the terminal's last, where a terminal holds the
    /// cursor before it wraps (and where the live area, which never uses it, would clip).
    fn room(&self) -> usize {
        self.style.width.saturating_sub(1).max(20)
    }

    /// The line still streaming, rendered as it would be if it ended here (terminal rows, for
    /// a live preview; empty when nothing is pending). Changes no state.
    pub fn preview(&self) -> Vec<String> {
        if self.partial.trim().is_empty() {
            return Vec::new();
        }
        let trimmed = self.partial.trim_start();
        let rendered = if self.code.is_some()
            || trimmed.starts_with('|')
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
                // With colour the highlighting marks the block; plain text keeps the fence.
                let out = if self.style.color {
                    String::new()
                } else {
                    format!("{fence}\n")
                };
                self.code = None;
                self.highlighter = None;
                return out;
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
            if self.style.color {
                if !lang.is_empty() {
                    out.push_str(&format!("{}\n", self.style.dim(&lang)));
                }
            } else {
                out.push_str(&format!("{fence}{lang}\n"));
            }
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
            if separator {
                self.align = cells
                    .iter()
                    .map(|c| match (c.starts_with(':'), c.ends_with(':')) {
                        (true, true) => Align::Center,
                        (false, true) => Align::Right,
                        _ => Align::Left,
                    })
                    .collect();
            } else {
                self.table.push(cells);
            }
            return String::new();
        }
        let mut out = self.flush_table();
        out.push_str(&self.prose(line));
        out
    }

    fn code_line(&mut self, line: &str) -> String {
        // No indent: copied code is the code.
        let Some(h) = self.highlighter.as_mut() else {
            return format!("{line}\n");
        };
        let (syntaxes, _) = highlighting();
        let with_newline = format!("{line}\n");
        match h.highlight_line(&with_newline, syntaxes) {
            Ok(ranges) => format!(
                "{}\x1b[0m",
                syntect::util::as_24_bit_terminal_escaped(&ranges, false)
            ),
            Err(_) => format!("{line}\n"),
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
            .room()
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

    /// Renders a collected table: columns aligned by their rendered width (inline code and
    /// emphasis measured as shown) and as the separator row says; a table wider than the
    /// terminal becomes one `header: value` block per row.
    fn flush_table(&mut self) -> String {
        if self.table.is_empty() {
            return String::new();
        }
        let rows = std::mem::take(&mut self.table);
        let align = std::mem::take(&mut self.align);
        let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
        let rendered: Vec<Vec<String>> = rows
            .iter()
            .enumerate()
            .map(|(i, row)| {
                (0..cols)
                    .map(|c| {
                        let cell = row.get(c).map(String::as_str).unwrap_or("");
                        if i == 0 {
                            self.style.bold(&self.inline(cell))
                        } else {
                            self.inline(cell)
                        }
                    })
                    .collect()
            })
            .collect();
        let shown = |s: &str| textwrap::core::display_width(s);
        let widths: Vec<usize> = (0..cols)
            .map(|c| rendered.iter().map(|r| shown(&r[c])).max().unwrap_or(0))
            .collect();
        let gaps = 3 * cols.saturating_sub(1);
        let total = widths.iter().sum::<usize>() + gaps;
        let mut out = String::new();
        // Too wide (a row never takes the last column, where a terminal holds the cursor
        // before it wraps): cells wrap inside their columns while each column still fits its
        // longest word; past that, one block per row.
        let room = self.room();
        let widths = if total > room {
            match fitted(&rendered, &widths, room.saturating_sub(gaps)) {
                Some(w) => w,
                None if rendered.len() > 1 => return self.blocks(&rendered),
                None => widths,
            }
        } else {
            widths
        };
        let reset = if self.style.color { "\x1b[0m" } else { "" };
        for (i, row) in rendered.iter().enumerate() {
            let wrapped: Vec<Vec<String>> = row
                .iter()
                .enumerate()
                .map(|(c, text)| {
                    if shown(text) <= widths[c] {
                        return vec![text.clone()];
                    }
                    textwrap::wrap(text, widths[c])
                        .into_iter()
                        .map(|l| {
                            if l.contains('\x1b') {
                                format!("{l}{reset}")
                            } else {
                                l.into_owned()
                            }
                        })
                        .collect()
                })
                .collect();
            let height = wrapped.iter().map(Vec::len).max().unwrap_or(1);
            for line in 0..height {
                let cells: Vec<String> = wrapped
                    .iter()
                    .enumerate()
                    .map(|(c, lines)| {
                        let text = lines.get(line).map(String::as_str).unwrap_or("");
                        let pad = widths[c].saturating_sub(shown(text));
                        match align.get(c).copied().unwrap_or(Align::Left) {
                            Align::Left => format!("{text}{}", " ".repeat(pad)),
                            Align::Right => format!("{}{text}", " ".repeat(pad)),
                            Align::Center => format!(
                                "{}{text}{}",
                                " ".repeat(pad / 2),
                                " ".repeat(pad - pad / 2)
                            ),
                        }
                    })
                    .collect();
                out.push_str(&format!(
                    "{}\n",
                    cells.join(&self.style.dim(" │ ")).trim_end()
                ));
            }
            if i == 0 {
                let rule: Vec<String> = widths.iter().map(|w| "─".repeat(*w)).collect();
                out.push_str(&format!("{}\n", self.style.dim(&rule.join("─┼─"))));
            }
        }
        out
    }

    /// A table too wide to draw: one block per row, `header: value`, each value word-wrapped
    /// with its further lines indented.
    fn blocks(&self, rendered: &[Vec<String>]) -> String {
        let mut out = String::new();
        for row in &rendered[1..] {
            for (c, cell) in row.iter().enumerate() {
                let label = rendered[0].get(c).map(String::as_str).unwrap_or("");
                let options = textwrap::Options::new(self.room())
                    .subsequent_indent("  ")
                    .break_words(true);
                for line in textwrap::wrap(&format!("{label}: {cell}"), options) {
                    out.push_str(&line);
                    out.push('\n');
                }
            }
            out.push('\n');
        }
        out
    }
}

/// Column widths that fit `room` with every cell wrapped inside its column and no word broken:
/// each column starts at its longest word and grows toward its widest cell, the one short of
/// the most first. `None` when the longest words alone do not fit.
fn fitted(rendered: &[Vec<String>], natural: &[usize], room: usize) -> Option<Vec<usize>> {
    let shown = |s: &str| textwrap::core::display_width(s);
    let mut widths: Vec<usize> = (0..natural.len())
        .map(|c| {
            rendered
                .iter()
                .filter_map(|r| r.get(c))
                .flat_map(|cell| cell.split_whitespace())
                .map(shown)
                .max()
                .unwrap_or(1)
                .max(1)
        })
        .collect();
    let mut spare = room.checked_sub(widths.iter().sum())?;
    while spare > 0 {
        let Some(c) = (0..widths.len())
            .filter(|c| natural[*c] > widths[*c])
            .max_by_key(|c| natural[*c] - widths[*c])
        else {
            break;
        };
        widths[c] += 1;
        spare -= 1;
    }
    Some(widths)
}

/// The level of a `#` heading line.
fn heading(line: &str) -> Option<usize> {
    let level = line.chars().take_while(|c| *c == '#').count();
    (1..=6)
        .contains(&level)
        .then_some(level)
        .filter(|l| line[*l..].starts_with(' '))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(style: Style, text: &str) -> String {
        let mut md = Markdown::new(style);
        let mut out = md.push(text);
        out.push_str(&md.finish());
        out
    }

    #[test]
    fn table_columns_align_as_shown_and_as_the_separator_says() {
        let table = "| name | count | note |\n|:-----|------:|:----:|\n| `a` | 1 | x |\n| **bold** | 1234 | centred |\n";
        let colour = Style {
            color: true,
            width: 80,
        };
        let out = render(colour, table);
        // The column separators line up, measured as the terminal shows the cells.
        let columns = |row: &str| -> Vec<usize> {
            row.char_indices()
                .filter(|(_, c)| *c == '│' || *c == '┼')
                .map(|(i, _)| textwrap::core::display_width(&row[..i]))
                .collect()
        };
        let rows: Vec<Vec<usize>> = out.lines().map(columns).collect();
        assert!(rows.iter().all(|r| *r == rows[0]), "{rows:?}\n{out}");
        let plain = render(Style::plain(80), table);
        assert_eq!(
            plain,
            "name │ count │  note\n─────┼───────┼────────\n`a`  │     1 │    x\nbold │  1234 │ centred\n"
        );
    }

    #[test]
    fn a_table_wider_than_the_terminal_wraps_inside_its_cells() {
        let table = "| file | what changed |\n|---|---|\n| src/main.rs | the parser now keeps comments |\n| README.md | usage |\n";
        let out = render(Style::plain(30), table);
        assert_eq!(
            out,
            "file        │ what changed\n\
             ────────────┼────────────────\n\
             src/main.rs │ the parser now\n\
             \x20           │ keeps comments\n\
             README.md   │ usage\n"
        );
        assert!(out.lines().all(|l| l.chars().count() < 30), "{out}");
    }

    #[test]
    fn a_table_whose_words_cannot_fit_becomes_blocks_with_wrapped_values() {
        let table = "| file | what changed |\n|---|---|\n| src/parser/comments.rs | the parser now keeps comments |\n";
        let out = render(Style::plain(20), table);
        assert_eq!(
            out,
            "file:\n  src/parser/comment\n  s.rs\nwhat changed: the\n  parser now keeps\n  comments\n\n"
        );
    }

    #[test]
    fn code_blocks_carry_no_indent() {
        let out = render(Style::plain(80), "```rust\nfn main() {}\n```\n");
        assert_eq!(out, "```rust\nfn main() {}\n```\n");
        let out = render(
            Style {
                color: true,
                width: 80,
            },
            "```\nplain code\n```\n",
        );
        assert!(
            out.lines()
                .all(|l| !l.starts_with(' ') && !l.contains("```")),
            "{out:?}"
        );
    }

    #[test]
    fn a_streaming_paragraph_gives_up_its_full_rows() {
        let mut md = Markdown::new(Style::plain(30));
        let words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu";
        let mut shown = String::new();
        for piece in words.split_inclusive(' ') {
            shown.push_str(&md.push(piece));
            shown.push_str(&md.take_rows());
        }
        // Full rows are out before the paragraph ends, exactly as the whole paragraph wraps.
        let mut whole = Markdown::new(Style::plain(30));
        let wrapped = whole.push(&format!("{words}\n"));
        assert_eq!(shown.lines().count(), 2, "{shown:?}");
        assert!(wrapped.starts_with(&shown), "{shown:?} vs {wrapped:?}");
        shown.push_str(&md.push("\n"));
        assert_eq!(shown, wrapped);
        // Lists and code are left to their own line rules.
        let mut list = Markdown::new(Style::plain(30));
        list.push("- alpha beta gamma delta epsilon zeta eta ");
        assert_eq!(list.take_rows(), "");
    }
}
