//! `WebSearch {query, allowed_domains?, blocked_domains?}`: a web search through the API's own
//! search tool (`web_search_20250305`), run by the fast model in a request of its own; the
//! result is its cited summary and the pages found, so the main conversation pays only for
//! that. Each search is billed by the API ($10 per 1,000), added to the turn's cost.

use crate::llm::{Message, MessagesRequest, Role, SystemBlock, ToolDefinition};
use crate::tools::{Tool, ToolContext, ToolFuture, ToolOutput};
use serde_json::{Value, json};

/// What one search costs (the API's price, per search).
const PRICE_PER_SEARCH: f64 = 0.01;
/// Searches the fast model may make for one call.
const MAX_USES: u64 = 5;
/// How often a paused search (`pause_turn`) is resumed.
const MAX_RESUMES: usize = 3;

/// Searches the web.
pub struct WebSearch;

impl Tool for WebSearch {
    fn name(&self) -> &'static str {
        "WebSearch"
    }

    fn description(&self) -> &'static str {
        "Searches the web and returns a summary of what the results say, with the pages it comes from. \
         Use it for information newer than your training or outside the repository (current versions, \
         documentation, error messages). allowed_domains keeps results to those sites; blocked_domains \
         leaves sites out (not both). Cite the pages you rely on."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 2, "description": "The search query"},
                "allowed_domains": {"type": "array", "items": {"type": "string"}, "description": "Only results from these domains"},
                "blocked_domains": {"type": "array", "items": {"type": "string"}, "description": "Never results from these domains"}
            },
            "required": ["query"],
            "additionalProperties": false
        })
    }

    fn is_read_only(&self) -> bool {
        true
    }

    fn run<'a>(&'a self, input: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let Some(net) = ctx.net.clone() else {
                return ToolOutput::error("web access is not available here");
            };
            let query = input["query"]
                .as_str()
                .unwrap_or_default()
                .trim()
                .to_owned();
            let domains = |k: &str| {
                input[k]
                    .as_array()
                    .filter(|a| !a.is_empty())
                    .map(|a| Value::Array(a.clone()))
            };
            let (allowed, blocked) = (domains("allowed_domains"), domains("blocked_domains"));
            if allowed.is_some() && blocked.is_some() {
                return ToolOutput::error(
                    "give allowed_domains or blocked_domains, not both (the search takes one)",
                );
            }
            let mut options = serde_json::Map::new();
            options.insert("type".into(), json!("web_search_20250305"));
            options.insert("max_uses".into(), json!(MAX_USES));
            if let Some(a) = allowed {
                options.insert("allowed_domains".into(), a);
            }
            if let Some(b) = blocked {
                options.insert("blocked_domains".into(), b);
            }
            let mut messages = vec![Message::user_text(format!(
                "Search the web for: {query}\n\nThen report what the results say that answers it: the facts, versions, \
                 commands or code, each with the page it comes from. Say so if the results do not answer it."
            ))];
            let model = net.catalog.resolve(&net.fast_model);
            let cancel = ctx.cancel.child_token();
            let mut text = String::new();
            let mut pages: Vec<(String, String)> = Vec::new();
            let mut searches = 0;
            for _ in 0..=MAX_RESUMES {
                let mut request = MessagesRequest::new(model.clone(), 4096, messages.clone());
                request.system = vec![SystemBlock::text(
                    "You search the web for a coding agent and report precisely and briefly what the results say.",
                )];
                request.tools = vec![ToolDefinition::server("web_search", options.clone())];
                net.catalog
                    .shape(&mut request, &crate::llm::RequestPolicy::internal());
                let message = match net.llm.stream(&request, &mut |_| {}, &cancel).await {
                    Ok(m) => m,
                    Err(e) => return ToolOutput::error(format!("the web search failed: {e}")),
                };
                let used = message.message["usage"]["server_tool_use"]["web_search_requests"]
                    .as_u64()
                    .unwrap_or(0);
                searches += used;
                let cost = net
                    .catalog
                    .cost_usd(&net.fast_model, &message.usage)
                    .map(|c| c + used as f64 * PRICE_PER_SEARCH);
                ctx.spend(tether_proto::TokenUsage::from(&message.usage), cost);
                for block in message.content() {
                    match block["type"].as_str() {
                        Some("text") => text.push_str(block["text"].as_str().unwrap_or_default()),
                        Some("web_search_tool_result") => {
                            if let Some(code) = block["content"]["error_code"].as_str() {
                                return ToolOutput::error(format!(
                                    "the web search failed: {}",
                                    search_error(code)
                                ));
                            }
                            for r in block["content"].as_array().into_iter().flatten() {
                                let url = r["url"].as_str().unwrap_or_default().to_owned();
                                if !url.is_empty() && !pages.iter().any(|(_, u)| *u == url) {
                                    let title = r["title"].as_str().unwrap_or(&url).to_owned();
                                    pages.push((title, url));
                                }
                            }
                        }
                        _ => {}
                    }
                }
                // A long search pauses; sending its reply back lets it go on.
                if message.stop_reason.as_deref() != Some("pause_turn") {
                    break;
                }
                messages.push(Message {
                    role: Role::Assistant,
                    content: std::sync::Arc::new(message.content().to_vec()),
                });
            }
            let mut out = format!("Web search results for {query:?}:\n\n{}\n", text.trim());
            if !pages.is_empty() {
                out.push_str("\nSources:\n");
                for (title, url) in &pages {
                    out.push_str(&format!("- {title} — {url}\n"));
                }
            }
            if searches == 0 && pages.is_empty() {
                out.push_str("\n(no search was made)\n");
            }
            ToolOutput::text(out)
        })
    }
}

/// The API's `web_search_tool_result_error` codes, in words.
fn search_error(code: &str) -> String {
    match code {
        "too_many_requests" => "the search service is rate limited; try again shortly".into(),
        "invalid_input" => "the query was not accepted".into(),
        "max_uses_exceeded" => "too many searches for one call".into(),
        "query_too_long" => "the query is too long".into(),
        "unavailable" => "the search service is unavailable".into(),
        other => format!("error {other}"),
    }
}
