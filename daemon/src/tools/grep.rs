//! `Grep {pattern, path?, glob?, type?, output_mode?, -i?, -n?, -A?, -B?, -C?, multiline?,
//! head_limit?, offset?}`: ripgrep's engines (`grep-regex`, `grep-searcher`, `ignore`) with its
//! output conventions: `path:line:text` for matches, `path-line-text` for context, `--` between
//! groups; binary files skipped.

use super::walk::walker;
use crate::tools::{Tool, ToolContext, ToolFuture, ToolOutput};
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Searches file contents.
pub struct Grep;

impl Tool for Grep {
    fn name(&self) -> &'static str {
        "Grep"
    }

    fn description(&self) -> &'static str {
        "Searches file contents with a regular expression (Rust regex syntax, like ripgrep). output_mode: \
         files_with_matches (default; paths, most recently modified first), content (matching lines as \
         path:line:text, with -A/-B/-C context), or count (path:count). Filter files with glob (e.g. \"*.rs\") or type \
         (e.g. \"rust\", \"py\"). -i ignores case; multiline lets . and patterns span lines. head_limit and offset \
         page through long results. Respects .gitignore and skips binary files."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "minLength": 1, "description": "Regular expression"},
                "path": {"type": "string", "description": "File or directory to search (default: current directory)"},
                "glob": {"type": "string", "description": "Only files whose path matches this glob"},
                "type": {"type": "string", "description": "Only files of this type (rust, py, js, ...)"},
                "output_mode": {"type": "string", "enum": ["files_with_matches", "content", "count"]},
                "-i": {"type": "boolean"},
                "-n": {"type": "boolean", "description": "Line numbers in content mode (default true)"},
                "-A": {"type": "integer", "minimum": 0},
                "-B": {"type": "integer", "minimum": 0},
                "-C": {"type": "integer", "minimum": 0},
                "context": {"type": "integer", "minimum": 0, "description": "Lines of context around each match (same as -C)"},
                "multiline": {"type": "boolean"},
                "head_limit": {"type": "integer", "minimum": 0, "description": "At most this many results (0: all)"},
                "offset": {"type": "integer", "minimum": 0}
            },
            "required": ["pattern"],
            "additionalProperties": false
        })
    }

    fn is_read_only(&self) -> bool {
        true
    }

    fn run<'a>(&'a self, input: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let root = ctx.dir_or_cwd(&input["path"]);
            let cancel = ctx.cancel.clone();
            let fence = ctx.workspace.fence();
            match tokio::task::spawn_blocking(move || grep(&root, &input, fence, &cancel)).await {
                Ok(Ok(text)) => ToolOutput::text(text),
                Ok(Err(msg)) => ToolOutput::error(msg),
                Err(e) => ToolOutput::error(format!("the search did not complete: {e}")),
            }
        })
    }
}

/// What one file contributed.
struct Found {
    path: PathBuf,
    matches: u64,
    lines: Vec<String>,
    modified: std::time::SystemTime,
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Files,
    Content,
    Count,
}

/// Bytes of results a search collects at most; it stops there and says so.
const MAX_COLLECTED: usize = 16 << 20;
/// The output shown stops before it grows past this many bytes (the rest is paged with offset).
const MAX_OUTPUT_BYTES: usize = 128 * 1024;
/// Longer matching lines are cut (minified files).
const MAX_LINE: usize = 2000;

/// Collects ripgrep-style lines for one file.
struct Lines<'a> {
    path: &'a str,
    /// Bytes collected by the whole search so far (all threads).
    collected: &'a AtomicUsize,
    numbers: bool,
    out: Vec<String>,
    matches: u64,
    last_line: Option<u64>,
    mode: Mode,
    /// Whether context lines are shown (only then are groups separated by `--`).
    context: bool,
}

impl Lines<'_> {
    fn push(&mut self, sep: char, first: Option<u64>, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        for (i, line) in text
            .strip_suffix('\n')
            .unwrap_or(&text)
            .split('\n')
            .enumerate()
        {
            let n = first.map(|f| f + i as u64);
            if let (Some(last), Some(n)) = (self.last_line, n)
                && self.context
                && n > last + 1
                && !self.out.is_empty()
            {
                self.out.push("--".into());
            }
            self.last_line = n.or(self.last_line);
            let line = line.strip_suffix('\r').unwrap_or(line);
            let cut;
            let line = match line.char_indices().nth(MAX_LINE) {
                Some((end, _)) => {
                    cut = format!("{}… [line cut]", &line[..end]);
                    cut.as_str()
                }
                None => line,
            };
            let entry = match (self.numbers, n) {
                (true, Some(n)) => format!("{}{sep}{n}{sep}{line}", self.path),
                _ => format!("{}{sep}{line}", self.path),
            };
            self.collected.fetch_add(entry.len(), Ordering::Relaxed);
            self.out.push(entry);
        }
    }

    /// Whether the search has collected all it may.
    fn full(&self) -> bool {
        self.collected.load(Ordering::Relaxed) > MAX_COLLECTED
    }
}

impl Sink for Lines<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _s: &Searcher, m: &SinkMatch<'_>) -> Result<bool, std::io::Error> {
        self.matches += 1;
        if self.mode == Mode::Files {
            return Ok(false);
        }
        if self.mode == Mode::Content {
            self.push(':', m.line_number(), m.bytes());
        }
        Ok(!self.full())
    }

    fn context(&mut self, _s: &Searcher, c: &SinkContext<'_>) -> Result<bool, std::io::Error> {
        if self.mode == Mode::Content {
            self.push('-', c.line_number(), c.bytes());
        }
        Ok(!self.full())
    }
}

fn grep(
    root: &Path,
    input: &Value,
    fence: Option<super::walk::Fence>,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<String, String> {
    let pattern = input["pattern"].as_str().unwrap_or_default();
    let flag = |k: &str| input[k].as_bool().unwrap_or(false);
    let num = |k: &str| input[k].as_u64().map(|n| n as usize);
    let mode = match input["output_mode"].as_str() {
        Some("content") => Mode::Content,
        Some("count") => Mode::Count,
        _ => Mode::Files,
    };
    let multiline = flag("multiline");
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(flag("-i"))
        .multi_line(true)
        .dot_matches_new_line(multiline)
        .build(pattern)
        .map_err(|e| format!("invalid regex {pattern:?}: {e}"))?;
    let context = num("-C").or(num("context")).unwrap_or(0);
    let mut searcher = SearcherBuilder::new()
        .line_number(true)
        .multi_line(multiline)
        .before_context(if mode == Mode::Content {
            num("-B").unwrap_or(context)
        } else {
            0
        })
        .after_context(if mode == Mode::Content {
            num("-A").unwrap_or(context)
        } else {
            0
        })
        .binary_detection(BinaryDetection::quit(0))
        .build();
    let numbers = input["-n"].as_bool().unwrap_or(true);

    let context = searcher.before_context() > 0 || searcher.after_context() > 0;
    let collected = AtomicUsize::new(0);
    // One file's result: its matches, its lines (content mode), its mtime (files mode).
    let search_one = |searcher: &mut Searcher, file: &Path| -> Option<Found> {
        let shown = file.display().to_string();
        if collected.load(Ordering::Relaxed) > MAX_COLLECTED {
            return None;
        }
        let mut sink = Lines {
            path: &shown,
            collected: &collected,
            numbers,
            out: Vec::new(),
            matches: 0,
            last_line: None,
            mode,
            context,
        };
        if searcher.search_path(&matcher, file, &mut sink).is_err() || sink.matches == 0 {
            return None;
        }
        let modified = match mode {
            Mode::Files => std::fs::metadata(file)
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH),
            _ => std::time::UNIX_EPOCH,
        };
        collected.fetch_add(shown.len(), Ordering::Relaxed);
        Some(Found {
            path: file.to_owned(),
            matches: sink.matches,
            lines: sink.out,
            modified,
        })
    };
    let mut found: Vec<Found> = if root.is_file() {
        if fence.as_ref().is_some_and(|f| f.hides(root)) {
            return Err(format!(
                "{} is kept from tools by a Read deny rule",
                root.display()
            ));
        }
        search_one(&mut searcher, root).into_iter().collect()
    } else if root.is_dir() {
        let mut walk = walker(root, fence);
        if let Some(g) = input["glob"].as_str() {
            let mut o = ignore::overrides::OverrideBuilder::new(root);
            for part in g.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                o.add(part)
                    .map_err(|e| format!("invalid glob {part:?}: {e}"))?;
            }
            walk.overrides(o.build().map_err(|e| e.to_string())?);
        }
        if let Some(t) = input["type"].as_str() {
            let mut types = ignore::types::TypesBuilder::new();
            types.add_defaults();
            types.select(t);
            walk.types(
                types
                    .build()
                    .map_err(|e| format!("unknown file type {t:?}: {e}"))?,
            );
        }
        // Walk and search in parallel, like ripgrep; results are sorted afterwards.
        let results = std::sync::Mutex::new(Vec::new());
        walk.build_parallel().run(|| {
            let mut searcher = searcher.clone();
            let results = &results;
            let search_one = &search_one;
            let collected = &collected;
            Box::new(move |entry| {
                if cancel.is_cancelled() || collected.load(Ordering::Relaxed) > MAX_COLLECTED {
                    return ignore::WalkState::Quit;
                }
                let Ok(entry) = entry else {
                    return ignore::WalkState::Continue;
                };
                if entry.file_type().is_some_and(|t| t.is_file())
                    && let Some(f) = search_one(&mut searcher, entry.path())
                {
                    results.lock().unwrap_or_else(|p| p.into_inner()).push(f);
                }
                ignore::WalkState::Continue
            })
        });
        if cancel.is_cancelled() {
            return Err("cancelled".into());
        }
        results.into_inner().unwrap_or_else(|p| p.into_inner())
    } else {
        return Err(format!("{} does not exist", root.display()));
    };
    found.sort_by(|a, b| a.path.cmp(&b.path));

    let mut entries: Vec<(std::time::SystemTime, String)> = Vec::new();
    let mut lines: Vec<String> = Vec::new();
    for f in found {
        match mode {
            Mode::Files => entries.push((f.modified, f.path.display().to_string())),
            Mode::Count => lines.push(format!("{}:{}", f.path.display(), f.matches)),
            Mode::Content => {
                if !lines.is_empty() && context {
                    lines.push("--".into());
                }
                lines.extend(f.lines);
            }
        }
    }
    if mode == Mode::Files {
        entries.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        lines = entries.into_iter().map(|(_, p)| p).collect();
    }
    if lines.is_empty() {
        return Ok(format!("No matches for {pattern:?} in {}", root.display()));
    }
    let total = lines.len();
    let offset = num("offset").unwrap_or(0);
    let limit = num("head_limit").filter(|n| *n > 0).unwrap_or(usize::MAX);
    let mut out = String::new();
    let mut shown = 0;
    for line in lines.into_iter().skip(offset).take(limit) {
        if out.len() + line.len() + 1 > MAX_OUTPUT_BYTES && shown > 0 {
            break;
        }
        out.push_str(&line);
        out.push('\n');
        shown += 1;
    }
    let shown_to = offset + shown;
    if shown_to < total {
        out.push_str(&format!(
            "(showing {shown} of {total} lines; use offset {shown_to} for more)\n"
        ));
    }
    if collected.load(Ordering::Relaxed) > MAX_COLLECTED {
        out.push_str(&format!(
            "(the search stopped after collecting {} MB of results, so there are more matches than these; narrow it with path, glob, type or a more specific pattern)\n",
            MAX_COLLECTED >> 20
        ));
    }
    Ok(out)
}
