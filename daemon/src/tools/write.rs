//! `Write {file_path, content}`: creates or replaces a file atomically (temp file + rename),
//! creating parent directories and keeping an existing file's permissions. An existing file must
//! have been read in this session and be unchanged since.

use crate::tools::{FileStamp, Tool, ToolContext, ToolFuture, ToolOutput};
use serde_json::{Value, json};

/// Writes a file.
pub struct Write;

impl Tool for Write {
    fn name(&self) -> &'static str {
        "Write"
    }

    fn description(&self) -> &'static str {
        "Writes content to a file, replacing it if it exists and creating parent directories. \
         Give an absolute file_path and the complete new content."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "Absolute path of the file to write"},
                "content": {"type": "string", "description": "The complete content of the file"}
            },
            "required": ["file_path", "content"],
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
            let path = ctx.resolve(input["file_path"].as_str().unwrap_or_default());
            if let Err(msg) = ctx.workspace.check_fresh(&path) {
                return ToolOutput::error(msg);
            }
            let content = input["content"].as_str().unwrap_or_default().to_owned();
            let target = path.clone();
            let bytes = content.clone().into_bytes();
            let result = tokio::task::spawn_blocking(move || write_atomic(&target, &bytes)).await;
            match result {
                Ok(Ok(existed)) => {
                    let modified = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
                    ctx.workspace
                        .remember(&path, FileStamp::of(content.as_bytes(), modified));
                    ToolOutput::text(format!(
                        "{} {}",
                        if existed { "Updated" } else { "Created" },
                        path.display()
                    ))
                }
                Ok(Err(e)) => ToolOutput::error(e),
                Err(e) => ToolOutput::error(format!("the write did not complete: {e}")),
            }
        })
    }
}

/// Replaces `path` with `bytes` atomically; returns whether it existed.
pub fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> Result<bool, String> {
    use std::io::Write as _;
    let dir = path
        .parent()
        .ok_or_else(|| format!("{} has no parent directory", path.display()))?;
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let existing = std::fs::metadata(path).ok();
    if existing.as_ref().is_some_and(|m| m.is_dir()) {
        return Err(format!("{} is a directory", path.display()));
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tether-{}", std::process::id()));
    let mut f =
        std::fs::File::create(&tmp).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    let written = f.write_all(bytes).and_then(|_| f.sync_all());
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("cannot write {}: {e}", path.display()));
    }
    if let Some(m) = &existing {
        let _ = std::fs::set_permissions(&tmp, m.permissions());
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot replace {}: {e}", path.display())
    })?;
    Ok(existing.is_some())
}
