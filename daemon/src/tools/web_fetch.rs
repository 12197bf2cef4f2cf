//! `WebFetch {url, prompt}`: fetches a page (as Markdown) and has the fast model answer `prompt`
//! about it, so a long page costs the main conversation only the answer.

use crate::llm::{Message, MessagesRequest, SystemBlock};
use crate::tools::{Tool, ToolContext, ToolFuture, ToolOutput};
use serde_json::{Value, json};

/// Most page characters given to the fast model.
const MAX_PAGE_CHARS: usize = 100_000;

/// Fetches and reads a web page.
pub struct WebFetch;

impl Tool for WebFetch {
    fn name(&self) -> &'static str {
        "WebFetch"
    }

    fn description(&self) -> &'static str {
        "Fetches a web page (http/https; http is upgraded to https), converts it to Markdown and answers prompt \
         about it with a small fast model. Redirects to another host are not followed: the result names the new \
         URL. Pages are cached for 15 minutes."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "The URL to fetch"},
                "prompt": {"type": "string", "minLength": 1, "description": "What to extract from the page"},
                "offset": {"type": "integer", "minimum": 0, "description": "Characters of the page to skip (to read past a truncated part)"}
            },
            "required": ["url", "prompt"],
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
            let url = input["url"].as_str().unwrap_or_default();
            let prompt = input["prompt"].as_str().unwrap_or_default();
            let page = match net.web.fetch(url).await {
                Ok(p) => p,
                Err(e) => return ToolOutput::error(e.to_string()),
            };
            let skip = input["offset"].as_u64().unwrap_or(0) as usize;
            let total = page.text.chars().count();
            let mut text: String = page.text.chars().skip(skip).take(MAX_PAGE_CHARS).collect();
            if skip + MAX_PAGE_CHARS < total {
                text.push_str(&format!(
                    "\n\n[page truncated: {} of {total} characters from offset {skip}; call again with offset {} for more]",
                    MAX_PAGE_CHARS,
                    skip + MAX_PAGE_CHARS
                ));
            }
            let ask = format!(
                "Web page {} ({}):\n\n<page>\n{text}\n</page>\n\n{prompt}\n\nAnswer from the page only; quote exact text where it matters; say so if the page does not answer it.",
                page.url, page.content_type
            );
            let mut request = MessagesRequest::new(
                net.catalog.resolve(&net.fast_model),
                4096,
                vec![Message::user_text(ask)],
            );
            request.system = vec![SystemBlock::text(
                "You read web pages for a coding agent and answer precisely and briefly.",
            )];
            net.catalog
                .shape(&mut request, &crate::llm::RequestPolicy::internal());
            let cancel = ctx.cancel.child_token();
            let result = net.llm.stream(&request, &mut |_| {}, &cancel).await;
            match result {
                Ok(m) => {
                    let cost = net.catalog.cost_usd(&net.fast_model, &m.usage);
                    ctx.spend(tether_proto::TokenUsage::from(&m.usage), cost);
                    let answer: String = m
                        .content()
                        .iter()
                        .filter_map(|b| b["text"].as_str())
                        .collect();
                    ToolOutput::text(format!("{}\n\n(from {})", answer.trim(), page.url))
                }
                Err(e) => ToolOutput::error(format!(
                    "the page was fetched but could not be read by the model: {e}"
                )),
            }
        })
    }
}
