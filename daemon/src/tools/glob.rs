//! `Glob {pattern, path?}`: files whose path (relative to `path`) matches a glob, newest first,
//! at most 100, respecting `.gitignore`.

use super::walk::walker;
use crate::tools::{Tool, ToolContext, ToolFuture, ToolOutput};
use serde_json::{Value, json};
use std::path::PathBuf;

/// Most paths returned.
pub const MAX_RESULTS: usize = 100;

/// Finds files by name pattern.
pub struct Glob;

impl Tool for Glob {
    fn name(&self) -> &'static str {
        "Glob"
    }

    fn description(&self) -> &'static str {
        "Finds files by glob pattern (e.g. \"**/*.rs\", \"src/**/test_*.py\"), matched against paths relative to \
         path (default: the current directory). Returns absolute paths, most recently modified first, at most 100. \
         Respects .gitignore and skips hidden files."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "minLength": 1, "description": "Glob pattern"},
                "path": {"type": "string", "description": "Directory to search in (default: current directory)"}
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
            let pattern = input["pattern"].as_str().unwrap_or_default().to_owned();
            let root = ctx.dir_or_cwd(&input["path"]);
            let cancel = ctx.cancel.clone();
            let fence = ctx.workspace.fence();
            match tokio::task::spawn_blocking(move || glob(&root, &pattern, fence, &cancel)).await {
                Ok(Ok(out)) => out,
                Ok(Err(msg)) => ToolOutput::error(msg),
                Err(e) => ToolOutput::error(format!("the search did not complete: {e}")),
            }
        })
    }
}

/// Matches `pattern` under `root`; newest first.
pub fn glob(
    root: &std::path::Path,
    pattern: &str,
    fence: Option<super::walk::Fence>,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<ToolOutput, String> {
    if !root.is_dir() {
        return Err(format!("{} is not a directory", root.display()));
    }
    let matcher = globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map_err(|e| format!("invalid glob pattern {pattern:?}: {e}"))?
        .compile_matcher();
    let results = std::sync::Mutex::new(Vec::new());
    walker(root, fence).build_parallel().run(|| {
        let (matcher, results) = (&matcher, &results);
        Box::new(move |entry| {
            if cancel.is_cancelled() {
                return ignore::WalkState::Quit;
            }
            let Ok(entry) = entry else {
                return ignore::WalkState::Continue;
            };
            if entry.file_type().is_some_and(|t| t.is_file())
                && matcher.is_match(super::walk::relative(entry.path(), root))
            {
                let modified = entry
                    .metadata()
                    .ok()
                    .and_then(|m| m.modified().ok())
                    .unwrap_or(std::time::UNIX_EPOCH);
                results
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((modified, entry.into_path()));
            }
            ignore::WalkState::Continue
        })
    });
    if cancel.is_cancelled() {
        return Err("cancelled".into());
    }
    let mut found: Vec<(std::time::SystemTime, PathBuf)> =
        results.into_inner().unwrap_or_else(|p| p.into_inner());
    if found.is_empty() {
        return Ok(ToolOutput::text(format!(
            "No files match {pattern:?} in {}",
            root.display()
        )));
    }
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let total = found.len();
    let mut out: String = found
        .iter()
        .take(MAX_RESULTS)
        .map(|(_, p)| format!("{}\n", p.display()))
        .collect();
    if total > MAX_RESULTS {
        out.push_str(&format!(
            "(truncated: {total} files match; showing the {MAX_RESULTS} most recently modified — narrow the pattern or path)\n"
        ));
    }
    Ok(ToolOutput::text(out))
}
