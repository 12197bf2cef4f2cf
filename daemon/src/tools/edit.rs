//! `Edit {file_path, old_string, new_string, replace_all?}` and `MultiEdit {file_path, edits}`:
//! exact string replacement. `old_string` must occur exactly once unless `replace_all`; the file
//! must have been read in this session and be unchanged since; CRLF files stay CRLF; the write
//! is atomic and all of a MultiEdit's edits apply or none. The result shows the changed lines; a
//! unified diff goes to clients in the result's details.

use super::write::write_atomic;
use crate::tools::{FileStamp, Tool, ToolContext, ToolFuture, ToolOutput};
use serde_json::{Value, json};
use std::path::Path;

/// Lines of context shown around a change.
const SNIPPET_CONTEXT: usize = 3;

/// One replacement.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// Text to find.
    pub old: String,
    /// Text to put instead.
    pub new: String,
    /// Replace every occurrence.
    pub replace_all: bool,
}

impl Change {
    pub fn from_json(v: &Value) -> Self {
        Self {
            old: v["old_string"].as_str().unwrap_or_default().to_owned(),
            new: v["new_string"].as_str().unwrap_or_default().to_owned(),
            replace_all: v["replace_all"].as_bool().unwrap_or(false),
        }
    }
}

/// How much one Edit or MultiEdit call may grow a file: a `replace_all` of a short string by a
/// long one could otherwise make gigabytes.
const MAX_GROWTH: usize = 16 << 20;
/// Larger files are not edited: the edit holds the file and its result in memory.
const MAX_FILE: u64 = 256 << 20;

/// Applies `changes` in order to `text`; returns the new text and the byte offset of the first
/// change in it.
pub fn apply(text: &str, changes: &[Change], name: &str) -> Result<(String, usize), String> {
    let crlf = text.contains("\r\n");
    let fix = |s: &str| {
        if crlf {
            s.replace("\r\n", "\n").replace('\n', "\r\n")
        } else {
            s.to_owned()
        }
    };
    let mut out = text.to_owned();
    let mut first: Option<usize> = None;
    for (i, c) in changes.iter().enumerate() {
        let which = if changes.len() > 1 {
            format!("edit {}: ", i + 1)
        } else {
            String::new()
        };
        if c.old == c.new {
            return Err(format!(
                "{which}old_string and new_string are the same; there is nothing to change"
            ));
        }
        if c.old.is_empty() {
            return Err(format!(
                "{which}old_string is empty; give the exact text to replace"
            ));
        }
        let (old, new) = (fix(&c.old), fix(&c.new));
        let count = out.matches(&old).count();
        if count == 0 {
            return Err(format!(
                "{which}old_string was not found in {name}; it must match the file exactly, including whitespace and indentation (Read the file to see its current text)"
            ));
        }
        if count > 1 && !c.replace_all {
            return Err(format!(
                "{which}old_string occurs {count} times in {name}; include more surrounding lines to make it unique, or set replace_all to change every occurrence"
            ));
        }
        let replaced = if c.replace_all { count } else { 1 };
        let grown =
            (out.len() - replaced * old.len()).saturating_add(replaced.saturating_mul(new.len()));
        if grown > text.len().saturating_add(MAX_GROWTH) {
            return Err(format!(
                "{which}the edit would make {name} {} MiB, more than {} MiB larger than it is; \
                 an edit that big is not an edit (write the file instead)",
                grown >> 20,
                MAX_GROWTH >> 20
            ));
        }
        let at = out.find(&old).unwrap_or(0);
        first = Some(first.map_or(at, |f| f.min(at)));
        out = if c.replace_all {
            out.replace(&old, &new)
        } else {
            out.replacen(&old, &new, 1)
        };
    }
    Ok((out, first.unwrap_or(0)))
}

/// The changed lines with a few lines of context, numbered as Read numbers them.
pub(crate) fn snippet(text: &str, at: usize, new_len: usize) -> String {
    // `at + new_len` spans the first change's new text, which after a multi-edit need not start
    // at `at`: it can end inside a character.
    let boundary = |mut i: usize| {
        i = i.min(text.len());
        while !text.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let start_line = text[..boundary(at)].matches('\n').count();
    let end_line = text[..boundary(at + new_len)].matches('\n').count();
    let lines: Vec<&str> = text.lines().collect();
    let from = start_line.saturating_sub(SNIPPET_CONTEXT);
    let to = (end_line + SNIPPET_CONTEXT + 1).min(lines.len());
    (from..to)
        .map(|n| format!("{:>6}\t{}\n", n + 1, lines[n].trim_end_matches('\r')))
        .collect()
}

async fn edit_file(ctx: &ToolContext, file_path: &str, changes: Vec<Change>) -> ToolOutput {
    let path = ctx.resolve(file_path);
    let name = path.display().to_string();
    if let Err(msg) = ctx.workspace.check_fresh(&path) {
        return ToolOutput::error(msg);
    }
    if let Ok(meta) = std::fs::metadata(&path)
        && meta.len() > MAX_FILE
    {
        return ToolOutput::error(format!(
            "{name} is {} MB; Edit changes files up to {} MB (use Bash, e.g. sed, for larger ones)",
            meta.len() >> 20,
            MAX_FILE >> 20
        ));
    }
    let original = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return ToolOutput::error(format!("{name} does not exist; use Write to create a file"));
        }
        Err(e) => return ToolOutput::error(format!("cannot read {name}: {e}")),
    };
    let Ok(text) = String::from_utf8(original) else {
        return ToolOutput::error(format!(
            "{name} is not UTF-8 text; it cannot be edited as text"
        ));
    };
    let (updated, at) = match apply(&text, &changes, &name) {
        Ok(r) => r,
        Err(msg) => return ToolOutput::error(msg),
    };
    let target = path.clone();
    let bytes = updated.clone().into_bytes();
    match tokio::task::spawn_blocking(move || write_atomic(&target, &bytes)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return ToolOutput::error(e),
        Err(e) => return ToolOutput::error(format!("the write did not complete: {e}")),
    }
    let modified = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
    ctx.workspace
        .remember(&path, FileStamp::of(updated.as_bytes(), modified));
    let diff = unified_diff(&path, &text, &updated);
    let new_len = changes.first().map(|c| c.new.len()).unwrap_or(0);
    let n = changes.len();
    ToolOutput::text(format!(
        "Edited {name} ({n} change{}). The changed lines now read:\n{}",
        if n == 1 { "" } else { "s" },
        snippet(&updated, at, new_len)
    ))
    .with_details(json!({"path": name, "diff": diff}))
}

/// A unified diff of `before` → `after`.
pub fn unified_diff(path: &Path, before: &str, after: &str) -> String {
    let name = path.display().to_string();
    // A huge or scrambled change gives a coarser diff rather than minutes of work.
    similar::TextDiff::configure()
        .timeout(std::time::Duration::from_millis(500))
        .diff_lines(before, after)
        .unified_diff()
        .context_radius(3)
        .header(&name, &name)
        .to_string()
}

/// Replaces text in a file.
pub struct Edit;

impl Tool for Edit {
    fn name(&self) -> &'static str {
        "Edit"
    }

    fn description(&self) -> &'static str {
        "Replaces old_string with new_string in a file. old_string must match the file exactly (whitespace and \
         indentation included) and occur exactly once, unless replace_all is true. Read the file first. Keep \
         old_string as short as possible while unique."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "Absolute path of the file"},
                "old_string": {"type": "string", "description": "The exact text to replace"},
                "new_string": {"type": "string", "description": "The text to put instead"},
                "replace_all": {"type": "boolean", "description": "Replace every occurrence"}
            },
            "required": ["file_path", "old_string", "new_string"],
            "additionalProperties": false
        })
    }

    fn is_read_only(&self) -> bool {
        false
    }

    fn changes_files(&self) -> bool {
        true
    }

    fn changes_file<'a>(&self, input: &'a Value) -> Option<&'a str> {
        input["file_path"].as_str()
    }

    fn run<'a>(&'a self, input: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let file = input["file_path"].as_str().unwrap_or_default().to_owned();
            edit_file(ctx, &file, vec![Change::from_json(&input)]).await
        })
    }
}

/// Several replacements in one file, all or nothing.
pub struct MultiEdit;

impl Tool for MultiEdit {
    fn name(&self) -> &'static str {
        "MultiEdit"
    }

    fn description(&self) -> &'static str {
        "Applies several Edit-style replacements to one file in order; if any fails, none is applied. \
         Each edit sees the text as the previous edits left it."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "Absolute path of the file"},
                "edits": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "properties": {
                            "old_string": {"type": "string"},
                            "new_string": {"type": "string"},
                            "replace_all": {"type": "boolean"}
                        },
                        "required": ["old_string", "new_string"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["file_path", "edits"],
            "additionalProperties": false
        })
    }

    fn is_read_only(&self) -> bool {
        false
    }

    fn changes_files(&self) -> bool {
        true
    }

    fn changes_file<'a>(&self, input: &'a Value) -> Option<&'a str> {
        input["file_path"].as_str()
    }

    fn run<'a>(&'a self, input: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let file = input["file_path"].as_str().unwrap_or_default().to_owned();
            let changes = input["edits"]
                .as_array()
                .map(|a| a.iter().map(Change::from_json).collect())
                .unwrap_or_default();
            edit_file(ctx, &file, changes).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ch(old: &str, new: &str, all: bool) -> Change {
        Change {
            old: old.into(),
            new: new.into(),
            replace_all: all,
        }
    }

    #[test]
    fn occurrences_table() {
        let text = "a b a c a\n";
        assert!(
            apply(text, &[ch("z", "y", false)], "f")
                .expect_err("0")
                .contains("not found")
        );
        assert_eq!(
            apply(text, &[ch("b", "B", false)], "f").expect("1").0,
            "a B a c a\n"
        );
        assert!(
            apply(text, &[ch("a", "A", false)], "f")
                .expect_err("3")
                .contains("occurs 3 times")
        );
        assert_eq!(
            apply(text, &[ch("a", "A", true)], "f").expect("all").0,
            "A b A c A\n"
        );
        assert!(
            apply(text, &[ch("a", "a", true)], "f")
                .expect_err("same")
                .contains("the same")
        );
    }

    #[test]
    fn crlf_files_stay_crlf_and_trailing_newline_is_kept() {
        let text = "one\r\ntwo\r\nthree\r\n";
        let (out, _) = apply(text, &[ch("one\ntwo", "uno\ndos", false)], "f").expect("applies");
        assert_eq!(out, "uno\r\ndos\r\nthree\r\n");
    }

    #[test]
    fn multi_edits_are_all_or_nothing_and_reversible() {
        let text = "fn main() {\n    let x = 1;\n}\n";
        let edits = [ch("x = 1", "y = 2", false), ch("nope", "z", false)];
        assert!(
            apply(text, &edits, "f")
                .expect_err("second fails")
                .starts_with("edit 2:")
        );
        let (forward, _) = apply(text, &[ch("let x = 1;", "let x = 2;", false)], "f").expect("fwd");
        let (back, _) =
            apply(&forward, &[ch("let x = 2;", "let x = 1;", false)], "f").expect("back");
        assert_eq!(back, text);
    }
}
