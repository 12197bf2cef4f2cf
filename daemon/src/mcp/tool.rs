//! An MCP server's tool as a tether tool: named `mcp__<server>__<tool>`, its schema passed to
//! the model as the server gave it, its result (text, images, embedded resources, structured
//! content, `isError`) mapped to `tool_result` content, cut at `MAX_MCP_OUTPUT_TOKENS`.
//!
//! Invariant: whatever the server does, the model gets a result; a call never fails the turn.

use super::client::{Connection, ListedTool, McpError};
use super::config::Limits;
use crate::tools::{Tool, ToolContext, ToolFuture, ToolOutput, Tools};
use serde_json::{Value, json};
use std::sync::{Arc, Weak};

/// The API's limit on a tool name.
const MAX_NAME: usize = 64;
/// The most of a description the model is sent.
const MAX_DESCRIPTION: usize = 2048;
/// Image types the API takes.
const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// The prefix of every tool of server `server`.
fn prefix(server: &str) -> String {
    format!("mcp__{server}__")
}

/// A tool name the API accepts: characters outside `[A-Za-z0-9_-]` become `_`.
fn normalize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// What a tool needs of the server it belongs to (`servers.rs`'s `Server`).
pub trait Source: Send + Sync {
    /// The server's name.
    fn name(&self) -> &str;
    /// Its call timeout and output cap.
    fn limits(&self) -> &Limits;
    /// A live connection (a starting server is waited for); why there is none.
    fn connect(
        self: Arc<Self>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Connection, String>> + Send>>;
}

/// One tool of one server.
pub struct McpTool {
    name: String,
    remote: String,
    description: String,
    schema: Value,
    read_only: bool,
    server: Weak<dyn Source>,
}

/// The tools of a listing, and what was dropped and why (a name too long for the API, a
/// schema that is not an object schema).
pub fn tools_of(server: &Arc<dyn Source>, listed: Vec<ListedTool>) -> (Tools, Vec<String>) {
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    let mut dropped = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for t in listed {
        let name = format!("{}{}", prefix(server.name()), normalize(&t.name));
        if name.len() > MAX_NAME {
            dropped.push(format!(
                "tool {:?} dropped: {name} is longer than the API's {MAX_NAME} characters",
                t.name
            ));
            continue;
        }
        if t.input_schema.get("type").and_then(Value::as_str) != Some("object") {
            dropped.push(format!(
                "tool {:?} dropped: its input schema is not an object schema",
                t.name
            ));
            continue;
        }
        if !seen.insert(name.clone()) {
            dropped.push(format!(
                "tool {:?} dropped: another tool has the name {name}",
                t.name
            ));
            continue;
        }
        let description = if t.description.chars().count() > MAX_DESCRIPTION {
            let cut: String = t.description.chars().take(MAX_DESCRIPTION).collect();
            format!("{cut}…")
        } else {
            t.description
        };
        tools.push(Arc::new(McpTool {
            name,
            remote: t.name,
            description,
            schema: t.input_schema,
            read_only: t.read_only,
            server: Arc::downgrade(server),
        }));
    }
    let (tools, invalid) = Tools::checked(tools);
    for (name, why) in invalid {
        dropped.push(format!(
            "tool {name:?} dropped: its input schema is invalid: {why}"
        ));
    }
    (tools, dropped)
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> Value {
        self.schema.clone()
    }

    fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn run<'a>(&'a self, input: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let Some(server) = self.server.upgrade() else {
                return ToolOutput::error(format!(
                    "{}: its MCP server was stopped; call it again in the next turn",
                    self.name
                ));
            };
            let conn = match server.clone().connect().await {
                Ok(c) => c,
                Err(why) => return ToolOutput::error(why),
            };
            let progress = ctx.progress.clone();
            let limits = server.limits();
            match conn
                .call(
                    &self.remote,
                    input,
                    Arc::new(move |line| progress(line + "\n")),
                    &ctx.cancel,
                    limits.call,
                )
                .await
            {
                Ok(result) => output_of(&result, limits.max_output_tokens),
                Err(McpError::Cancelled) => ToolOutput::error("cancelled"),
                Err(e) => ToolOutput::error(format!(
                    "the MCP server {} failed the call: {e}",
                    server.name()
                )),
            }
        })
    }
}

fn text_block(text: String) -> Value {
    json!({"type": "text", "text": text})
}

/// One MCP content item as a tool-result block: text and images as they are, what the model
/// cannot take as a line saying what it was.
fn block_of(item: &Value) -> Value {
    let str_of = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    match item["type"].as_str() {
        Some("text") => text_block(str_of(&item["text"])),
        Some("image") if IMAGE_TYPES.contains(&item["mimeType"].as_str().unwrap_or_default()) => {
            json!({"type": "image", "source": {
                "type": "base64", "media_type": item["mimeType"], "data": item["data"],
            }})
        }
        Some("image") => text_block(format!(
            "[image of type {} omitted: the model takes PNG, JPEG, GIF or WebP]",
            str_of(&item["mimeType"])
        )),
        Some("audio") => text_block(format!(
            "[audio of type {} omitted]",
            item["mimeType"].as_str().unwrap_or("?")
        )),
        Some("resource") => {
            let r = &item["resource"];
            let uri = str_of(&r["uri"]);
            match r["text"].as_str() {
                Some(t) => text_block(format!("[resource {uri}]\n{t}")),
                None => text_block(format!(
                    "[resource {uri} ({}) holds binary data, omitted]",
                    r["mimeType"].as_str().unwrap_or("?")
                )),
            }
        }
        Some("resource_link") => text_block(
            format!(
                "[resource link: {} {}]",
                str_of(&item["uri"]),
                str_of(&item["name"])
            )
            .trim_end()
            .to_owned(),
        ),
        _ => text_block(item.to_string()),
    }
}

/// A `tools/call` result as tool-result content.
pub fn output_of(result: &Value, max_tokens: usize) -> ToolOutput {
    let mut blocks: Vec<Value> = result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .map(block_of)
        .collect();
    if blocks.is_empty()
        && let Some(s) = result.get("structuredContent").filter(|s| !s.is_null())
    {
        blocks.push(text_block(s.to_string()));
    }
    let is_error = result["isError"].as_bool() == Some(true);
    let max_chars = max_tokens.saturating_mul(4);
    let mut used = 0usize;
    let mut truncated = false;
    for b in blocks.iter_mut() {
        if let Some(t) = b["text"].as_str() {
            let left = max_chars.saturating_sub(used);
            if t.len() > left {
                let mut cut = left;
                while !t.is_char_boundary(cut) {
                    cut -= 1;
                }
                b["text"] = json!(t[..cut].to_owned());
                truncated = true;
            }
            used += b["text"].as_str().map_or(0, str::len);
        }
    }
    if truncated {
        blocks.push(json!({"type": "text", "text": format!(
            "[output truncated: the MCP tool's result exceeded {max_tokens} tokens (MAX_MCP_OUTPUT_TOKENS)]"
        )}));
    }
    let only_text = blocks.iter().all(|b| b["type"] == "text");
    let mut out = if blocks.is_empty() {
        ToolOutput::text("(no output)")
    } else if only_text {
        ToolOutput::text(
            blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
        )
    } else {
        ToolOutput::blocks(blocks)
    };
    out.is_error = is_error;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_content_kinds() {
        let r = json!({"content": [
            {"type": "text", "text": "hello"},
            {"type": "image", "mimeType": "image/png", "data": "AAAA"},
            {"type": "image", "mimeType": "image/tiff", "data": "AAAA"},
            {"type": "resource", "resource": {"uri": "file:///a", "text": "body"}},
            {"type": "resource_link", "uri": "file:///b", "name": "b"}
        ]});
        let out = output_of(&r, 25_000);
        assert!(!out.is_error);
        let blocks = out.content.as_array().expect("test setup");
        assert_eq!(blocks[0]["text"], "hello");
        assert_eq!(blocks[1]["source"]["media_type"], "image/png");
        assert!(
            blocks[2]["text"]
                .as_str()
                .expect("test setup")
                .contains("image/tiff")
        );
        assert_eq!(blocks[3]["text"], "[resource file:///a]\nbody");
        assert_eq!(blocks[4]["text"], "[resource link: file:///b b]");
    }

    #[test]
    fn text_only_structured_errors_and_truncation() {
        let out = output_of(
            &json!({"content": [{"type": "text", "text": "x"}], "isError": true}),
            10,
        );
        assert_eq!(out.content, json!("x"));
        assert!(out.is_error);
        let out = output_of(&json!({"content": [], "structuredContent": {"a": 1}}), 10);
        assert_eq!(out.content, json!("{\"a\":1}"));
        let out = output_of(
            &json!({"content": [{"type": "text", "text": "é".repeat(100)}]}),
            10,
        );
        let text = out.content.as_str().expect("test setup");
        assert!(text.contains("MAX_MCP_OUTPUT_TOKENS"), "{text}");
        // 10 tokens are 40 bytes: 20 two-byte characters, never half of one.
        assert!(
            text.starts_with(&format!("{}\n[output truncated", "é".repeat(20))),
            "{text}"
        );
        assert_eq!(output_of(&json!({}), 10).content, json!("(no output)"));
    }

    #[test]
    fn names_fit_the_api() {
        assert_eq!(normalize("get.sum/v2"), "get_sum_v2");
        assert_eq!(prefix("fs"), "mcp__fs__");
    }
}
