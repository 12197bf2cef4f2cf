//! A turn's input → the user message's content blocks: text, `@path` mentions (a file's
//! numbered text, a directory's listing), attached files, images and PDFs.
//!
//! Problems (a missing mention, an oversized image) never fail the turn: the mention stays text
//! and a notice says why.

use base64::Engine;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use tether_proto::InputItem;

/// Largest PDF the API takes.
pub const MAX_PDF_BYTES: usize = 32 * 1024 * 1024;
/// Largest text file attached by a mention.
pub const MAX_TEXT_BYTES: usize = 256 * 1024;
/// Entries shown for a mentioned directory.
const MAX_LISTING: usize = 200;

/// The processed input.
#[derive(Debug, Default)]
pub struct Processed {
    /// Content blocks of the user message.
    pub content: Vec<Value>,
    /// Things the user should know (a mention that was not attached, and why).
    pub notices: Vec<String>,
}

/// Builds the user message for `items`, resolving paths against `cwd`.
pub fn process(cwd: &Path, items: &[InputItem]) -> Processed {
    let mut out = Processed::default();
    for item in items {
        match item {
            InputItem::Text { text } => {
                if !text.trim().is_empty() {
                    out.content.push(json!({"type": "text", "text": text}));
                }
                for mention in mentions(text) {
                    attach(cwd, &mention, &mut out);
                }
            }
            InputItem::File { path } => attach(cwd, path, &mut out),
            InputItem::Document {
                data,
                media_type,
                title,
            } => {
                let source = match media_type.as_str() {
                    "application/pdf" if data.len() / 4 * 3 > MAX_PDF_BYTES => {
                        out.notices.push(format!(
                            "document not attached: {} MB is over the API's limit of {} MB",
                            data.len() / 4 * 3 / (1024 * 1024),
                            MAX_PDF_BYTES / (1024 * 1024)
                        ));
                        continue;
                    }
                    "application/pdf" => {
                        json!({"type": "base64", "media_type": "application/pdf", "data": data})
                    }
                    "text/plain" => {
                        json!({"type": "text", "media_type": "text/plain", "data": data})
                    }
                    other => {
                        out.notices.push(format!(
                            "document not attached: {other} is not application/pdf or text/plain"
                        ));
                        continue;
                    }
                };
                let mut block = json!({"type": "document", "source": source});
                if let Some(title) = title {
                    block["title"] = json!(title);
                }
                out.content.push(block);
            }
            // Refused by `turn/start`; nothing to attach.
            InputItem::Unknown => {}
            InputItem::Image {
                path,
                data,
                media_type,
            } => match (path, data) {
                (_, Some(data)) => {
                    let media = media_type.clone().unwrap_or_else(|| "image/png".into());
                    let size = data.len() / 4 * 3;
                    if !is_image_type(&media) {
                        out.notices.push(format!(
                            "image not attached: {media} is not png, jpeg, gif or webp"
                        ));
                    } else if size > crate::tools::MAX_IMAGE_BYTES {
                        out.notices.push(format!(
                            "image not attached: {} KB is over the API's limit of {} KB",
                            size / 1024,
                            crate::tools::MAX_IMAGE_BYTES / 1024
                        ));
                    } else {
                        out.content.push(image_block(&media, data.clone()));
                    }
                }
                (Some(path), None) => attach(cwd, path, &mut out),
                (None, None) => out
                    .notices
                    .push("an image item had neither a path nor data".into()),
            },
        }
    }
    if out.content.is_empty() {
        out.content
            .push(json!({"type": "text", "text": "(no text)"}));
    }
    out
}

/// `@path` tokens in text (`@` at the start or after whitespace; `@"a b"` for spaces).
pub fn mentions(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'@' && (i == 0 || bytes[i - 1].is_ascii_whitespace()) {
            let rest = &text[i + 1..];
            if let Some(quoted) = rest.strip_prefix('"')
                && let Some(end) = quoted.find('"')
            {
                out.push(quoted[..end].to_owned());
                i += end + 3;
                continue;
            }
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            let token = rest[..end].trim_end_matches([',', '.', ';', ':', ')', '?', '!']);
            if !token.is_empty() {
                out.push(token.to_owned());
            }
            i += end + 1;
            continue;
        }
        i += 1;
    }
    out
}

fn is_image_type(media: &str) -> bool {
    matches!(
        media,
        "image/png" | "image/jpeg" | "image/gif" | "image/webp"
    )
}

fn image_block(media: &str, data: String) -> Value {
    json!({"type": "image", "source": {"type": "base64", "media_type": media, "data": data}})
}

fn media_type_of(path: &Path) -> Option<&'static str> {
    match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
        "png" => Some("image/png"),
        "jpg" | "jpeg" => Some("image/jpeg"),
        "gif" => Some("image/gif"),
        "webp" => Some("image/webp"),
        "pdf" => Some("application/pdf"),
        _ => None,
    }
}

fn attach(cwd: &Path, mention: &str, out: &mut Processed) {
    let path = expand(cwd, mention);
    let meta = match std::fs::metadata(&path) {
        Ok(m) => m,
        Err(e) => {
            out.notices
                .push(format!("@{mention} was not attached: {e}"));
            return;
        }
    };
    if meta.is_dir() {
        out.content
            .push(json!({"type": "text", "text": listing(&path)}));
        return;
    }
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => {
            out.notices
                .push(format!("@{mention} was not attached: {e}"));
            return;
        }
    };
    let b64 = || base64::engine::general_purpose::STANDARD.encode(&bytes);
    match media_type_of(&path) {
        Some("application/pdf") if bytes.len() > MAX_PDF_BYTES => out.notices.push(format!(
            "@{mention} was not attached: {} MB is over the API's PDF limit of 32 MB",
            bytes.len() / (1024 * 1024)
        )),
        Some("application/pdf") => out.content.push(json!({"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": b64()}})),
        Some(_) if bytes.len() > crate::tools::MAX_IMAGE_BYTES => out.notices.push(format!(
            "@{mention} was not attached: {} KB is over the API's image limit of 5 MB",
            bytes.len() / 1024
        )),
        Some(media) => out.content.push(image_block(media, b64())),
        None if bytes.iter().take(8192).any(|&b| b == 0) => {
            out.notices.push(format!("@{mention} was not attached: it is a binary file"))
        }
        None if bytes.len() > MAX_TEXT_BYTES => out.notices.push(format!(
            "@{mention} was not attached: {} KB is more than {} KB; ask the agent to read parts of it",
            bytes.len() / 1024,
            MAX_TEXT_BYTES / 1024
        )),
        None => {
            let text = String::from_utf8_lossy(&bytes);
            let numbered: String = text
                .lines()
                .enumerate()
                .map(|(n, l)| format!("{:>6}\t{l}\n", n + 1))
                .collect();
            out.content.push(json!({"type": "text", "text": format!("Contents of {}:\n{numbered}", path.display())}));
        }
    }
}

fn expand(cwd: &Path, mention: &str) -> PathBuf {
    if let Some(rest) = mention.strip_prefix("~/")
        && let Ok(home) = std::env::var("HOME")
    {
        return PathBuf::from(home).join(rest);
    }
    let p = PathBuf::from(mention);
    if p.is_absolute() { p } else { cwd.join(p) }
}

fn listing(dir: &Path) -> String {
    let mut names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    format!("{name}/")
                } else {
                    name
                }
            })
            .collect(),
        Err(e) => return format!("Directory {} could not be listed: {e}", dir.display()),
    };
    names.sort();
    let total = names.len();
    let mut text = format!("Directory {} ({total} entries):\n", dir.display());
    for n in names.iter().take(MAX_LISTING) {
        text.push_str("  ");
        text.push_str(n);
        text.push('\n');
    }
    if total > MAX_LISTING {
        text.push_str(&format!("  … {} more\n", total - MAX_LISTING));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mention_syntax() {
        assert_eq!(
            mentions("look at @src/main.rs, then @\"my file.txt\""),
            vec!["src/main.rs", "my file.txt"]
        );
        assert_eq!(mentions("mail me at a@b.c"), Vec::<String>::new());
        assert_eq!(mentions("@README.md"), vec!["README.md"]);
    }

    #[test]
    fn files_directories_and_missing_mentions() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("a.txt"), "one\ntwo\n").expect("write");
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        std::fs::write(dir.path().join("bin.dat"), [0u8, 1, 2]).expect("write");
        let p = process(
            dir.path(),
            &[InputItem::Text {
                text: "see @a.txt and @sub and @nope.txt and @bin.dat".into(),
            }],
        );
        assert_eq!(p.content.len(), 3, "{:?}", p.content);
        let file = p.content[1]["text"].as_str().expect("text");
        assert!(file.contains("     1\tone\n     2\ttwo\n"), "{file}");
        assert!(
            p.content[2]["text"]
                .as_str()
                .expect("text")
                .contains("0 entries")
        );
        assert_eq!(p.notices.len(), 2, "{:?}", p.notices);
        assert!(p.notices[0].contains("nope.txt"));
        assert!(p.notices[1].contains("binary"));
    }
}
