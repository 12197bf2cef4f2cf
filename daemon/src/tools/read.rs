//! `Read {file_path, offset?, limit?, pages?}`: a text file as numbered lines (`cat -n`
//! style), an image as image content, a PDF as a document (whole when short, else the
//! `pages` asked for, cut out by `pdf.rs`). Remembers what it read for the staleness rule of
//! Write and Edit.

use crate::tools::{FileStamp, Tool, ToolContext, ToolFuture, ToolOutput};
use base64::Engine;
use serde_json::{Value, json};

/// Largest image the API takes (base64-decoded bytes).
pub const MAX_IMAGE_BYTES: usize = 5 * 1024 * 1024;

/// Lines returned when no limit is given.
const DEFAULT_LIMIT: usize = 2000;
/// Longer lines are cut.
const MAX_LINE: usize = 2000;
/// The output stops before it grows past this many bytes (the rest is read with an offset).
const MAX_OUTPUT_BYTES: usize = 256 * 1024;
/// Largest PDF read (the API takes requests up to 32 MB, and base64 adds a third).
const MAX_PDF_BYTES: u64 = 20 * 1024 * 1024;
/// Notebooks up to this size are shown as cells; larger ones as text.
const MAX_NOTEBOOK: u64 = 16 * 1024 * 1024;

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
         are returned as images. PDFs are returned as documents: whole up to 10 pages, otherwise give pages \
         (\"3\", \"1-5\"; at most 20 per call). Read a file before you Write or Edit it."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "Absolute path of the file to read"},
                "offset": {"type": "integer", "minimum": 0, "description": "First line to read (1-based; 0 reads from the start)"},
                "limit": {"type": "integer", "minimum": 1, "description": "How many lines to read"},
                "pages": {"type": "string", "description": "For a PDF: the page or range to read, e.g. \"3\" or \"1-5\" (at most 20 pages)"}
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
            if !meta.is_file() {
                return ToolOutput::error(format!(
                    "{} is not a regular file (a device, pipe or socket); it cannot be read as one",
                    path.display()
                ));
            }
            let modified = meta.modified().ok();
            if let Some(media) = image_type(&path) {
                if meta.len() > MAX_IMAGE_BYTES as u64 {
                    return ToolOutput::error(format!(
                        "{} is {} KB, over the 5 MB image limit",
                        path.display(),
                        meta.len() / 1024
                    ));
                }
                let bytes = match read_whole(&path, modified, ctx).await {
                    Ok(b) => b,
                    Err(out) => return out,
                };
                let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
                return ToolOutput::blocks(vec![
                    json!({"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}),
                ]);
            }
            let pages = input["pages"].as_str().filter(|p| !p.trim().is_empty());
            if path
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("pdf"))
            {
                return read_pdf(&path, &meta, modified, pages, ctx).await;
            }
            if pages.is_some() {
                return ToolOutput::error(format!(
                    "pages is for PDF files; {} is read by lines (offset, limit)",
                    path.display()
                ));
            }
            if path.extension().is_some_and(|e| e == "ipynb") && meta.len() <= MAX_NOTEBOOK {
                let bytes = match read_whole(&path, modified, ctx).await {
                    Ok(b) => b,
                    Err(out) => return out,
                };
                if let Some(cells) = serde_json::from_slice::<Value>(&bytes)
                    .ok()
                    .and_then(|nb| super::notebook::render(&nb))
                {
                    return ToolOutput::text(cells);
                }
            }
            let len = meta.len();
            let file = path.clone();
            let excerpt =
                tokio::task::spawn_blocking(move || read_lines(&file, len, offset, limit)).await;
            let excerpt = match excerpt {
                Ok(Ok(e)) => e,
                Ok(Err(e)) => {
                    return ToolOutput::error(format!("cannot read {}: {e}", path.display()));
                }
                Err(e) => return ToolOutput::error(format!("cannot read {}: {e}", path.display())),
            };
            let Excerpt::Text {
                mut text,
                crc,
                next,
                total,
                binary_at,
            } = excerpt
            else {
                ctx.workspace
                    .remember(&path, FileStamp::streamed(len, modified, None));
                return ToolOutput::error(format!(
                    "{} is a binary file; it cannot be shown as text",
                    path.display()
                ));
            };
            ctx.workspace
                .remember(&path, FileStamp::streamed(len, modified, crc));
            if total == Some(0) {
                return ToolOutput::text(format!("{} is empty.", path.display()));
            }
            if let Some(n) = binary_at {
                let note =
                    format!("… binary data from line {n} on (NUL bytes; not shown as text)\n");
                if text.is_empty() {
                    return ToolOutput::error(format!("{}: {note}", path.display()));
                }
                text.push_str(&note);
                return ToolOutput::text(text);
            }
            if text.is_empty() {
                return ToolOutput::error(format!(
                    "{} has {} lines; offset {offset} is past the end",
                    path.display(),
                    total.map_or_else(|| "fewer".to_owned(), |t| t.to_string())
                ));
            }
            match (next, total) {
                (Some(next), Some(total)) if next <= total => text.push_str(&format!(
                    "… {} more lines (read with offset {next} to continue)\n",
                    total + 1 - next
                )),
                (Some(next), None) => text.push_str(&format!(
                    "… more lines follow in this {} MB file (read with offset {next} to continue)\n",
                    len / (1024 * 1024)
                )),
                _ => {}
            }
            ToolOutput::text(text)
        })
    }
}

/// A PDF as a document block: whole when it is short, else the `pages` asked for.
async fn read_pdf(
    path: &std::path::Path,
    meta: &std::fs::Metadata,
    modified: Option<std::time::SystemTime>,
    pages: Option<&str>,
    ctx: &ToolContext,
) -> ToolOutput {
    use super::pdf::{MAX_PAGES_PER_READ, MAX_WHOLE_PAGES, Pdf, parse_range};
    let range = match pages.map(parse_range).transpose() {
        Ok(r) => r,
        Err(e) => return ToolOutput::error(e),
    };
    if meta.len() > MAX_PDF_BYTES {
        return ToolOutput::error(format!(
            "{} is {} MB, over the 20 MB PDF limit",
            path.display(),
            meta.len() / (1024 * 1024)
        ));
    }
    let bytes = match read_whole(path, modified, ctx).await {
        Ok(b) => b,
        Err(out) => return out,
    };
    let shown = tokio::task::spawn_blocking(move || {
        let pdf = Pdf::parse(&bytes)
            .map_err(|e| format!("it cannot be read as a PDF ({e})"))?;
        let total = pdf.pages();
        match range {
            None if total > MAX_WHOLE_PAGES => Err(format!(
                "it has {total} pages; read it in parts with pages (e.g. \"1-{MAX_PAGES_PER_READ}\")"
            )),
            None => Ok((bytes, format!("all {total} pages"))),
            Some((first, _)) if first > total => {
                Err(format!("it has {total} pages; there is no page {first}"))
            }
            Some((first, last)) => {
                let last = last.min(total);
                if last - first + 1 > MAX_PAGES_PER_READ {
                    return Err(format!(
                        "{} pages asked for; read at most {MAX_PAGES_PER_READ} at a time",
                        last - first + 1
                    ));
                }
                let part = pdf.extract(first, last)?;
                Ok((part, format!("pages {first}-{last} of {total}")))
            }
        }
    })
    .await;
    match shown {
        Ok(Ok((doc, what))) => {
            let data = base64::engine::general_purpose::STANDARD.encode(&doc);
            ToolOutput::blocks(vec![
                json!({"type": "text", "text": format!("PDF {}: {what}", path.display())}),
                json!({"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": data}}),
            ])
        }
        Ok(Err(why)) => ToolOutput::error(format!("{}: {why}", path.display())),
        Err(e) => ToolOutput::error(format!("reading {} failed: {e}", path.display())),
    }
}

/// A small file read whole (an image, a notebook), its stamp remembered.
async fn read_whole(
    path: &std::path::Path,
    modified: Option<std::time::SystemTime>,
    ctx: &ToolContext,
) -> Result<Vec<u8>, ToolOutput> {
    let bytes = tokio::fs::read(path)
        .await
        .map_err(|e| ToolOutput::error(format!("cannot read {}: {e}", path.display())))?;
    ctx.workspace
        .remember(path, FileStamp::of(&bytes, modified));
    Ok(bytes)
}

/// What [`read_lines`] found.
enum Excerpt {
    /// A NUL byte near the start: not text.
    Binary,
    /// The requested lines as `cat -n` shows them.
    Text {
        text: String,
        /// CRC of the whole file (read whole only when it is small enough to be hashed).
        crc: Option<crc32fast::Hasher>,
        /// The first line not shown, if the output stopped before the file's end.
        next: Option<usize>,
        /// How many lines the file has, when it was read to its end.
        total: Option<usize>,
        /// The first line shown would have been binary data (NUL bytes): the output stops there.
        binary_at: Option<usize>,
    },
}

/// Reads lines `offset..offset + limit` (1-based) of a file of `len` bytes in pieces, never
/// holding more than one piece and the output: a line is cut at [`MAX_LINE`] characters and
/// the output stops at [`MAX_OUTPUT_BYTES`]. A file small enough to be hashed is read to its
/// end (for its stamp and line count); a larger one only as far as the lines shown.
fn read_lines(
    path: &std::path::Path,
    len: u64,
    offset: usize,
    limit: usize,
) -> std::io::Result<Excerpt> {
    use std::io::BufRead;
    let mut reader = std::io::BufReader::with_capacity(64 * 1024, std::fs::File::open(path)?);
    let hashed = len <= FileStamp::HASHED_UP_TO;
    let mut crc = hashed.then(crc32fast::Hasher::new);
    let mut text = String::new();
    let mut line: Vec<u8> = Vec::new();
    // The line being read (1-based), whether it is wanted, and whether it was cut.
    let mut n = 1usize;
    let mut cut = false;
    let mut next = None;
    let mut checked_binary = false;
    let mut ended_with_newline = true;
    let mut binary_at = None;
    let last_wanted = offset.saturating_add(limit).saturating_sub(1);
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            break;
        }
        if !checked_binary {
            checked_binary = true;
            if chunk.iter().take(8192).any(|&b| b == 0) {
                return Ok(Excerpt::Binary);
            }
        }
        let mut rest = chunk;
        while !rest.is_empty() {
            let end = memchr::memchr(b'\n', rest);
            let piece = &rest[..end.unwrap_or(rest.len())];
            let wanted = n >= offset && n <= last_wanted && next.is_none();
            if wanted && memchr::memchr(0, piece).is_some() {
                // Text that turns into binary (a log followed by a hole): stop at it.
                next = Some(n);
                binary_at = Some(n);
                line.clear();
            } else if wanted && !cut {
                let room = MAX_LINE * 4 - line.len().min(MAX_LINE * 4);
                line.extend_from_slice(&piece[..piece.len().min(room)]);
                cut = piece.len() > room;
            }
            match end {
                Some(i) => {
                    if wanted && binary_at.is_none() && !finish_line(&mut text, &mut line, n, cut) {
                        next = Some(n);
                    }
                    cut = false;
                    n += 1;
                    rest = &rest[i + 1..];
                    ended_with_newline = true;
                }
                None => {
                    rest = &[];
                    ended_with_newline = false;
                }
            }
        }
        let used = chunk.len();
        if let Some(c) = crc.as_mut() {
            c.update(chunk);
        }
        reader.consume(used);
        let done_showing = next.is_some() || n > last_wanted;
        if done_showing && !hashed {
            // A large file is not read past what is shown.
            return Ok(Excerpt::Text {
                text,
                crc: None,
                next: Some(next.unwrap_or(n)),
                total: None,
                binary_at,
            });
        }
    }
    // A last line without a newline.
    if !ended_with_newline {
        if n >= offset
            && n <= last_wanted
            && next.is_none()
            && !finish_line(&mut text, &mut line, n, cut)
        {
            next = Some(n);
        }
        n += 1;
    }
    let total = n - 1;
    Ok(Excerpt::Text {
        text,
        crc,
        next: next.or((last_wanted < total).then_some(last_wanted + 1)),
        total: Some(total),
        binary_at,
    })
}

/// Appends line `n` as `cat -n` shows it, cut at [`MAX_LINE`] characters; returns `false`
/// (appending nothing) when the output has no room left for it.
fn finish_line(text: &mut String, line: &mut Vec<u8>, n: usize, cut: bool) -> bool {
    let content = String::from_utf8_lossy(line);
    let content = content.strip_suffix('\r').unwrap_or(&content);
    let mut shown: String = content.chars().take(MAX_LINE).collect();
    if cut || content.chars().count() > MAX_LINE {
        shown.push_str("… [line cut]");
    }
    let entry = format!("{n:>6}\t{shown}\n");
    line.clear();
    if text.len() + entry.len() > MAX_OUTPUT_BYTES && !text.is_empty() {
        return false;
    }
    text.push_str(&entry);
    true
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
