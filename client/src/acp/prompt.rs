//! An ACP prompt as tether's turn input: text as it is, a `file://` resource link as an
//! `@`-mention (the daemon reads the file), an embedded resource as its text, an image as an
//! image.

use agent_client_protocol::v1::schema::{ContentBlock, EmbeddedResourceResource};
use tether_proto::InputItem;

/// Why a prompt cannot be sent.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PromptError {
    /// The prompt has nothing in it.
    #[error("the prompt is empty")]
    Empty,
    /// A block tether does not take.
    #[error("{0} content is not supported in prompts")]
    Unsupported(&'static str),
}

/// The turn input of a prompt.
pub fn input(prompt: &[ContentBlock]) -> Result<Vec<InputItem>, PromptError> {
    let mut items = Vec::with_capacity(prompt.len());
    for block in prompt {
        items.push(match block {
            ContentBlock::Text(t) => InputItem::Text {
                text: t.text.clone(),
            },
            ContentBlock::Image(i) => InputItem::Image {
                path: None,
                data: Some(i.data.clone()),
                media_type: Some(i.mime_type.clone()),
            },
            ContentBlock::ResourceLink(link) => match file_path(&link.uri) {
                Some(path) => InputItem::File { path },
                None => InputItem::Text {
                    text: format!("[{}]({})", link.name, link.uri),
                },
            },
            ContentBlock::Resource(r) => match &r.resource {
                EmbeddedResourceResource::TextResourceContents(t) => InputItem::Text {
                    text: format!(
                        "<context ref=\"{}\">\n{}\n</context>",
                        file_path(&t.uri).unwrap_or_else(|| t.uri.clone()),
                        t.text
                    ),
                },
                EmbeddedResourceResource::BlobResourceContents(b)
                    if b.mime_type
                        .as_deref()
                        .is_some_and(|m| m.starts_with("image/")) =>
                {
                    InputItem::Image {
                        path: None,
                        data: Some(b.blob.clone()),
                        media_type: b.mime_type.clone(),
                    }
                }
                _ => return Err(PromptError::Unsupported("binary resource")),
            },
            ContentBlock::Audio(_) => return Err(PromptError::Unsupported("audio")),
            _ => return Err(PromptError::Unsupported("this kind of")),
        });
    }
    let blank = items.iter().all(|i| match i {
        InputItem::Text { text } => text.trim().is_empty(),
        _ => false,
    });
    if blank {
        return Err(PromptError::Empty);
    }
    Ok(items)
}

/// The path of a `file://` URI, percent-decoded.
fn file_path(uri: &str) -> Option<String> {
    let rest = uri.strip_prefix("file://")?;
    // `file://host/path`: only the local host.
    let path = match rest.find('/') {
        Some(0) => rest,
        Some(i) if &rest[..i] == "localhost" => &rest[i..],
        _ => return None,
    };
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, ..) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::{ImageContent, ResourceLink};

    #[test]
    fn file_links_become_mentions_and_other_links_text() {
        let prompt = vec![
            ContentBlock::from("look at"),
            ContentBlock::ResourceLink(ResourceLink::new("a b.rs", "file:///w/a%20b.rs")),
            ContentBlock::ResourceLink(ResourceLink::new("docs", "https://x.dev/d")),
            ContentBlock::Image(ImageContent::new("AAAA", "image/png")),
        ];
        let items = input(&prompt).expect("valid prompt");
        assert_eq!(
            items,
            vec![
                InputItem::Text {
                    text: "look at".into()
                },
                InputItem::File {
                    path: "/w/a b.rs".into()
                },
                InputItem::Text {
                    text: "[docs](https://x.dev/d)".into()
                },
                InputItem::Image {
                    path: None,
                    data: Some("AAAA".into()),
                    media_type: Some("image/png".into())
                },
            ]
        );
    }

    #[test]
    fn empty_prompts_and_remote_files_are_refused_or_kept_as_text() {
        assert_eq!(input(&[ContentBlock::from("  ")]), Err(PromptError::Empty));
        assert_eq!(file_path("file://other/x"), None);
        assert_eq!(file_path("file://localhost/x"), Some("/x".into()));
    }
}
