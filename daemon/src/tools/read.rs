//! `Read {file_path, offset?, limit?}`: a text file as numbered lines (`cat -n` style), or an
//! image as image content. Remembers what it read for the staleness rule of Write and Edit.

use crate::tools::{FileStamp, Tool, ToolContext, ToolFuture, ToolOutput};
use base64::Engine;
use serde_json::{Value, json};

/// Largest image the API takes (base64-decoded bytes).
pub const MAX_IMAGE_BYTES: usize = 5 * 1024 * 1024;

/// Lines returned when no limit is given.
const DEFAULT_LIMIT: usize = 2000;
/// Longer lines are cut.
const MAX_LINE: usize = 2000;

/// Reads a file.
pub struct Read;

impl Tool for Read {
    fn name(&self) -> &'static str {
        "Read"
    }

    fn description(&self) -> &'static str {
        "Reads a text file and returns it with line numbers (cat -n format: the number, a tab, the line). \
         Give an absolute file_path. By default up to 2000 lines from the start; use offset (1-based first line) \
         and limit for longer files. Lines longer than 2000 characters are cut. Images (png, jpeg, gif, webp) \
         are returned as images. Read a file before you Write or Edit it."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "Absolute path of the file to read"},
                "offset": {"type": "integer", "minimum": 0, "description": "First line to read (1-based; 0 reads from the start)"},
                "limit": {"type": "integer", "minimum": 1, "description": "How many lines to read"}
            },
            "required": ["file_path"],
            "additionalProperties": false
        })
    }

    fn is_read_only(&self) -> bool {
        true
    }

    fn run<'a>(&'a self, input: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let path = ctx.resolve(input["file_path"].as_str().unwrap_or_default());
            let offset = input["offset"].as_u64().unwrap_or(1).max(1) as usize;
            let limit = input["limit"]
                .as_u64()
                .map(|l| l as usize)
                .unwrap_or(DEFAULT_LIMIT);
            let meta = match tokio::fs::metadata(&path).await {
                Ok(m) => m,
                Err(e) => return ToolOutput::error(format!("cannot read {}: {e}", path.display())),
            };
            if meta.is_dir() {
                return ToolOutput::error(format!("{} is a directory, not a file", path.display()));
            }
            let bytes = match tokio::fs::read(&path).await {
                Ok(b) => b,
                Err(e) => return ToolOutput::error(format!("cannot read {}: {e}", path.display())),
            };
            ctx.workspace
                .remember(&path, FileStamp::of(&bytes, meta.modified().ok()));
            if let Some(media) = image_type(&path) {
                if bytes.len() > MAX_IMAGE_BYTES {
                    return ToolOutput::error(format!(
                        "{} is {} KB, over the 5 MB image limit",
                        path.display(),
                        bytes.len() / 1024
                    ));
                }
                let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
                return ToolOutput::blocks(vec![
                    json!({"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}),
                ]);
            }
            if bytes.is_empty() {
                return ToolOutput::text(format!("{} is empty.", path.display()));
            }
            if path.extension().is_some_and(|e| e == "ipynb")
                && let Some(cells) = serde_json::from_slice::<Value>(&bytes)
                    .ok()
                    .and_then(|nb| super::notebook::render(&nb))
            {
                return ToolOutput::text(cells);
            }
            if bytes.iter().take(8192).any(|&b| b == 0) {
                return ToolOutput::error(format!(
                    "{} is a binary file; it cannot be shown as text",
                    path.display()
                ));
            }
            let text = String::from_utf8_lossy(&bytes);
            let total = text.lines().count();
            let mut out = String::new();
            for (n, line) in text.lines().enumerate().skip(offset - 1).take(limit) {
                let line: String = if line.chars().count() > MAX_LINE {
                    line.chars().take(MAX_LINE).collect::<String>() + "… [line cut]"
                } else {
                    line.to_owned()
                };
                out.push_str(&format!("{:>6}\t{line}\n", n + 1));
            }
            if out.is_empty() {
                return ToolOutput::error(format!(
                    "{} has {total} lines; offset {offset} is past the end",
                    path.display()
                ));
            }
            let shown_to = (offset - 1 + limit).min(total);
            if shown_to < total {
                out.push_str(&format!(
                    "… {} more lines (read with offset {} to continue)\n",
                    total - shown_to,
                    shown_to + 1
                ));
            }
            ToolOutput::text(out)
        })
    }
}

fn image_type(path: &std::path::Path) -> Option<&'static str> {
    match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
        "png" => Some("image/png"),
        "jpg" | "jpeg" => Some("image/jpeg"),
        "gif" => Some("image/gif"),
        "webp" => Some("image/webp"),
        _ => None,
    }
}
