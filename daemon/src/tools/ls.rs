//! `LS {path, ignore?}`: a directory as a tree, respecting `.gitignore`, at most 1000 entries.

use super::walk::walker;
use crate::tools::{Tool, ToolContext, ToolFuture, ToolOutput};
use serde_json::{Value, json};

/// Most entries listed.
pub const MAX_ENTRIES: usize = 1000;

/// Lists a directory tree.
pub struct Ls;

impl Tool for Ls {
    fn name(&self) -> &'static str {
        "LS"
    }

    fn description(&self) -> &'static str {
        "Lists a directory as a tree (directories end with /), respecting .gitignore and skipping hidden files, \
         at most 1000 entries. path must be absolute; ignore takes glob patterns of names to leave out."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Absolute path of the directory"},
                "ignore": {"type": "array", "items": {"type": "string"}, "description": "Glob patterns of names to skip"}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    fn is_read_only(&self) -> bool {
        true
    }

    fn run<'a>(&'a self, input: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let root = ctx.resolve(input["path"].as_str().unwrap_or_default());
            let patterns: Vec<String> = input["ignore"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|p| p.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            let fence = ctx.workspace.fence();
            match tokio::task::spawn_blocking(move || list(&root, &patterns, fence)).await {
                Ok(Ok(text)) => ToolOutput::text(text),
                Ok(Err(msg)) => ToolOutput::error(msg),
                Err(e) => ToolOutput::error(format!("the listing did not complete: {e}")),
            }
        })
    }
}

fn list(
    root: &std::path::Path,
    ignore: &[String],
    fence: Option<super::walk::Fence>,
) -> Result<String, String> {
    if !root.is_dir() {
        return Err(format!("{} is not a directory", root.display()));
    }
    let mut set = globset::GlobSetBuilder::new();
    for p in ignore {
        set.add(globset::Glob::new(p).map_err(|e| format!("invalid ignore pattern {p:?}: {e}"))?);
    }
    let set = set.build().map_err(|e| e.to_string())?;
    let mut out = format!("- {}/\n", root.display());
    let mut count = 0;
    let mut walk = walker(root, fence);
    walk.sort_by_file_name(|a, b| a.cmp(b));
    for entry in walk.build().flatten().skip(1) {
        let name = entry.file_name();
        if set.is_match(name)
            || entry.path().ancestors().any(|a| {
                a != root && a.starts_with(root) && a.file_name().is_some_and(|n| set.is_match(n))
            })
        {
            continue;
        }
        count += 1;
        if count > MAX_ENTRIES {
            out.push_str(&format!(
                "(truncated at {MAX_ENTRIES} entries; list a subdirectory for more)\n"
            ));
            break;
        }
        let indent = "  ".repeat(entry.depth());
        let slash = if entry.file_type().is_some_and(|t| t.is_dir()) {
            "/"
        } else {
            ""
        };
        out.push_str(&format!("{indent}- {}{slash}\n", name.to_string_lossy()));
    }
    Ok(out)
}
