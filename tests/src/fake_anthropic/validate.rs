//! The API's rules, checked on every request the fake receives. A broken rule gets the answer the
//! real API gives: 400 `invalid_request_error` (401 without a credential).

use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};

type Verdict = Result<(), (u16, String)>;

fn bad(message: impl Into<String>) -> Verdict {
    Err((400, message.into()))
}

fn valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn count_cache_control(v: &Value) -> usize {
    match v {
        Value::Object(m) => {
            usize::from(m.contains_key("cache_control"))
                + m.values().map(count_cache_control).sum::<usize>()
        }
        Value::Array(a) => a.iter().map(count_cache_control).sum(),
        _ => 0,
    }
}

fn blocks(message: &Value) -> Vec<Value> {
    match &message["content"] {
        Value::String(s) => vec![serde_json::json!({"type": "text", "text": s})],
        Value::Array(a) => a.clone(),
        _ => Vec::new(),
    }
}

/// Betas the fake knows; any other in `anthropic-beta` is refused as the API refuses it.
const KNOWN_BETAS: &[&str] = &[
    "interleaved-thinking-2025-05-14",
    "context-management-2025-06-27",
    "effort-2025-11-24",
    "context-1m-2025-08-07",
    "thinking-display-updates-2026-08-18",
    "prompt-caching-2024-07-31",
    "extended-cache-ttl-2025-04-11",
    "web-search-2025-03-05",
];

/// `thinking`, `output_config.effort` and `context_management` in the shapes the API takes, with
/// the betas they need.
fn check_features(headers: &BTreeMap<String, String>, body: &Value) -> Verdict {
    let betas: Vec<&str> = headers
        .get("anthropic-beta")
        .map(|b| {
            b.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default();
    if let Some(unknown) = betas.iter().find(|b| !KNOWN_BETAS.contains(b)) {
        return bad(format!(
            "Unexpected value(s) `{unknown}` for the `anthropic-beta` header. Please consult our documentation at docs.claude.com or try again without the header."
        ));
    }
    let max_tokens = body["max_tokens"].as_u64().unwrap_or(0);
    match &body["thinking"] {
        Value::Null => {}
        t => match t["type"].as_str() {
            Some("enabled") => match t["budget_tokens"].as_u64() {
                Some(b) if b >= 1024 && b < max_tokens => {}
                Some(b) if b >= max_tokens => {
                    return bad(format!(
                        "`max_tokens` must be greater than `thinking.budget_tokens`. Got max_tokens={max_tokens} and budget_tokens={b}"
                    ));
                }
                _ => {
                    return bad(
                        "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024",
                    );
                }
            },
            Some("adaptive") => match t.get("display").map(|d| d.as_str()) {
                None | Some(Some("summarized" | "omitted")) => {}
                Some(Some("updates")) if betas.contains(&"thinking-display-updates-2026-08-18") => {
                }
                Some(Some("updates")) => {
                    return bad(
                        "thinking.adaptive.display: \"updates\" requires the thinking-display-updates-2026-08-18 beta",
                    );
                }
                Some(other) => {
                    return bad(format!(
                        "thinking.adaptive.display: Input should be 'summarized', 'omitted' or 'updates', got {other:?}"
                    ));
                }
            },
            Some("disabled") => {}
            _ => {
                return bad(
                    "thinking: Input tag does not match any of the expected tags: 'enabled', 'disabled', 'adaptive'",
                );
            }
        },
    }
    if let Some(effort) = body.get("output_config").and_then(|c| c.get("effort")) {
        if !matches!(
            effort.as_str(),
            Some("low" | "medium" | "high" | "xhigh" | "max")
        ) {
            return bad(format!(
                "output_config.effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max', got {effort}"
            ));
        }
        if !betas.contains(&"effort-2025-11-24") {
            return bad("output_config.effort: this field requires the effort-2025-11-24 beta");
        }
    }
    if let Some(cm) = body.get("context_management") {
        if !betas.contains(&"context-management-2025-06-27") {
            return bad(
                "context_management: Extra inputs are not permitted (this field requires the context-management-2025-06-27 beta)",
            );
        }
        let Some(edits) = cm["edits"].as_array() else {
            return bad("context_management.edits: Input should be a valid list");
        };
        for (i, e) in edits.iter().enumerate() {
            match e["type"].as_str() {
                Some("clear_thinking_20251015") if body["thinking"].is_object() => {}
                Some("clear_thinking_20251015") => {
                    return bad(format!(
                        "context_management.edits.{i}: clear_thinking requires thinking to be enabled"
                    ));
                }
                Some("clear_tool_uses_20250919") => {}
                _ => {
                    return bad(format!(
                        "context_management.edits.{i}.type: unknown edit type"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// A breakpoint with the 1-hour lifetime may not follow one with 5 minutes in prefix order
/// (tools, system, messages).
fn check_ttl_order(body: &Value) -> Verdict {
    fn walk(v: &Value, out: &mut Vec<bool>) {
        match v {
            Value::Object(m) => {
                if let Some(cc) = m.get("cache_control") {
                    out.push(cc.get("ttl").and_then(Value::as_str) == Some("1h"));
                }
                for (k, x) in m {
                    if k != "cache_control" {
                        walk(x, out);
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut hours = Vec::new();
    for part in ["tools", "system", "messages"] {
        walk(&body[part], &mut hours);
    }
    if hours.windows(2).any(|w| !w[0] && w[1]) {
        return bad("a ttl='1h' cache_control block must not come after a ttl='5m' one");
    }
    Ok(())
}

/// Checks headers and body; `signatures` maps every thinking signature the fake issued to its
/// text, so a thinking block sent back altered is caught.
pub fn validate(
    headers: &BTreeMap<String, String>,
    body: &Value,
    signatures: &HashMap<String, String>,
) -> Verdict {
    let has_key = headers.get("x-api-key").is_some_and(|k| !k.is_empty());
    let has_bearer = headers
        .get("authorization")
        .is_some_and(|a| a.starts_with("Bearer ") && a.len() > 7);
    if !has_key && !has_bearer {
        return Err((401, "x-api-key header is required".into()));
    }
    if !headers.contains_key("anthropic-version") {
        return bad("anthropic-version: header is required");
    }
    if !body.is_object() {
        return bad("the request body must be a JSON object");
    }
    if body["model"].as_str().is_none_or(str::is_empty) {
        return bad("model: field required");
    }
    match body["max_tokens"].as_u64() {
        Some(n) if n >= 1 => {}
        _ => return bad("max_tokens: must be an integer greater than or equal to 1"),
    }
    let Some(messages) = body["messages"].as_array() else {
        return bad("messages: field required");
    };
    if messages.is_empty() {
        return bad("messages: at least one message is required");
    }
    match &body["system"] {
        Value::Null | Value::String(_) => {}
        Value::Array(system) => {
            for (i, b) in system.iter().enumerate() {
                if b["type"] != "text" || b["text"].as_str().is_none_or(str::is_empty) {
                    return bad(format!(
                        "system.{i}: system blocks must be non-empty text blocks"
                    ));
                }
            }
        }
        _ => return bad("system: must be a string or a list of text blocks"),
    }
    if let Some(tools) = body["tools"].as_array() {
        for (i, t) in tools.iter().enumerate() {
            let name = t["name"].as_str().unwrap_or("");
            // Server tools (web_search, …) have a `type` and no schema.
            if t.get("type").is_none() && !t["input_schema"].is_object() {
                return bad(format!("tools.{i}.input_schema: field required"));
            }
            if !valid_tool_name(name) {
                return bad(format!(
                    "tools.{i}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
                ));
            }
        }
    }
    check_features(headers, body)?;
    check_ttl_order(body)?;
    let breakpoints = count_cache_control(&body["system"])
        + count_cache_control(&body["tools"])
        + count_cache_control(&body["messages"]);
    if breakpoints > 4 {
        return bad(format!(
            "A maximum of 4 blocks with cache_control may be provided. Found {breakpoints}."
        ));
    }

    let mut pending_tool_uses: Vec<String> = Vec::new();
    // Counts the user and assistant messages, which alternate; a `system` message between
    // them (newer models take one right after a user turn, to update the instructions
    // without touching the cached prefix) is not one of them.
    let mut turn = 0;
    for (i, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or("");
        if role == "system" {
            if i == 0 || messages[i - 1]["role"] != "user" {
                return bad(format!(
                    "messages.{i}: a system message must come right after a user message"
                ));
            }
            let text_only = blocks(message)
                .iter()
                .all(|b| b["type"] == "text" && b["text"].as_str().is_some_and(|t| !t.is_empty()));
            if blocks(message).is_empty() || !text_only {
                return bad(format!(
                    "messages.{i}: a system message holds non-empty text blocks only"
                ));
            }
            continue;
        }
        let expected = if turn % 2 == 0 { "user" } else { "assistant" };
        turn += 1;
        if role != expected {
            return bad(format!(
                "messages.{i}.role: roles must alternate between \"user\" and \"assistant\" starting with \"user\", got {role:?}"
            ));
        }
        let content = blocks(message);
        if content.is_empty() {
            return bad(format!(
                "messages.{i}: all messages must have non-empty content"
            ));
        }
        let is_last = i + 1 == messages.len();
        for (j, b) in content.iter().enumerate() {
            let kind = b["type"].as_str().unwrap_or("");
            match kind {
                "text" => {
                    let empty = b["text"].as_str().is_none_or(|t| t.is_empty());
                    // A final assistant message may be a prefill, but never empty.
                    if empty {
                        return bad(format!(
                            "messages.{i}.content.{j}.text: text content blocks must be non-empty"
                        ));
                    }
                }
                "thinking" => {
                    let sig = b["signature"].as_str().unwrap_or("");
                    if sig.is_empty() {
                        return bad(format!(
                            "messages.{i}.content.{j}.thinking.signature: Field required"
                        ));
                    }
                    if signatures
                        .get(sig)
                        .is_some_and(|original| b["thinking"].as_str() != Some(original.as_str()))
                    {
                        return bad(format!(
                            "messages.{i}.content.{j}: thinking blocks must be passed back unmodified"
                        ));
                    }
                }
                "tool_use" => {
                    if role != "assistant" {
                        return bad(format!(
                            "messages.{i}.content.{j}: tool_use blocks are only allowed in assistant messages"
                        ));
                    }
                    if !b["input"].is_object() {
                        return bad(format!(
                            "messages.{i}.content.{j}.tool_use.input: Input should be a valid dictionary"
                        ));
                    }
                }
                _ => {}
            }
        }
        // tool_use → tool_result pairing.
        let results: Vec<&str> = content
            .iter()
            .filter(|b| b["type"] == "tool_result")
            .filter_map(|b| b["tool_use_id"].as_str())
            .collect();
        // What a tool_result may hold: text, images and documents (PDFs), as the API says.
        for (j, b) in content.iter().enumerate() {
            for (k, inner) in b["content"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
                .filter(|_| b["type"] == "tool_result")
            {
                let at = format!("messages.{i}.content.{j}.tool_result.content.{k}");
                match inner["type"].as_str() {
                    Some("text" | "image" | "search_result") => {}
                    Some("document") => {
                        let source = &inner["source"];
                        let ok = match source["type"].as_str() {
                            Some("base64") => {
                                source["media_type"] == "application/pdf"
                                    && source["data"].as_str().is_some_and(|d| !d.is_empty())
                            }
                            Some("text") => source["data"].is_string(),
                            _ => false,
                        };
                        if !ok {
                            return bad(format!(
                                "{at}.document.source: a base64 `application/pdf` or a text source is required"
                            ));
                        }
                    }
                    other => {
                        return bad(format!(
                            "{at}: Input tag '{}' found using 'type' does not match any of the expected tags: 'text', 'image', 'search_result', 'document'",
                            other.unwrap_or("")
                        ));
                    }
                }
            }
        }
        if role == "user" {
            let leading = content
                .iter()
                .take_while(|b| b["type"] == "tool_result")
                .count();
            if leading != results.len() {
                return bad(format!(
                    "messages.{i}: tool_result blocks must come first in the user message, before any other content"
                ));
            }
            let mut seen = HashSet::new();
            for id in &results {
                if !pending_tool_uses.iter().any(|p| p == id) {
                    return bad(format!(
                        "messages.{i}.content: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                    ));
                }
                if !seen.insert(*id) {
                    return bad(format!(
                        "messages.{i}.content: duplicate tool_result for {id}"
                    ));
                }
            }
            if let Some(missing) = pending_tool_uses
                .iter()
                .find(|p| !seen.contains(p.as_str()))
            {
                return bad(format!(
                    "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {missing}. Each `tool_use` block must have a corresponding `tool_result` block in the next message."
                ));
            }
            pending_tool_uses.clear();
        } else {
            if !results.is_empty() {
                return bad(format!(
                    "messages.{i}: tool_result blocks are only allowed in user messages"
                ));
            }
            pending_tool_uses = content
                .iter()
                .filter(|b| b["type"] == "tool_use")
                .filter_map(|b| b["id"].as_str().map(str::to_owned))
                .collect();
            if is_last && !pending_tool_uses.is_empty() {
                return bad(format!(
                    "messages.{i}: the final assistant message cannot end with unanswered tool_use blocks"
                ));
            }
        }
    }
    Ok(())
}

/// The text of the last user message (its text blocks joined).
pub fn last_user_text(request: &Value) -> String {
    request["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .map(|m| {
            blocks(m)
                .iter()
                .filter_map(|b| b["text"].as_str().map(str::to_owned))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// Whether the last user message carries tool results.
pub fn last_user_has_tool_result(request: &Value) -> bool {
    request["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .is_some_and(|m| blocks(m).iter().any(|b| b["type"] == "tool_result"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn headers() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("x-api-key".into(), "k".into()),
            ("anthropic-version".into(), "2023-06-01".into()),
        ])
    }

    fn check(body: Value) -> Result<(), String> {
        validate(&headers(), &body, &HashMap::new()).map_err(|(_, m)| m)
    }

    fn req(messages: Value) -> Value {
        json!({"model": "m", "max_tokens": 10, "messages": messages})
    }

    #[test]
    fn table() {
        let tool_turn = json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]},
        ]);
        let with_result = |content: Value| {
            req(json!([
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": content}]},
            ]))
        };
        let cases: Vec<(Value, Option<&str>)> = vec![
            (req(json!([{"role": "user", "content": "hi"}])), None),
            (req(tool_turn), None),
            (
                with_result(json!([{"type": "document", "source": {"type": "base64",
                    "media_type": "application/pdf", "data": "JVBERg=="}}])),
                None,
            ),
            (
                with_result(json!([{"type": "document", "source": {"type": "base64",
                    "media_type": "image/png", "data": "x"}}])),
                Some("application/pdf"),
            ),
            (
                with_result(json!([{"type": "tool_use", "id": "x", "name": "n", "input": {}}])),
                Some("does not match any of the expected tags"),
            ),
            (
                req(json!([{"role": "assistant", "content": "hi"}])),
                Some("alternate"),
            ),
            (
                req(json!([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])),
                Some("alternate"),
            ),
            (
                req(json!([
                    {"role": "user", "content": "hi"},
                    {"role": "system", "content": "Be brief from here on."},
                    {"role": "assistant", "content": "ok"},
                    {"role": "user", "content": "go on"},
                ])),
                None,
            ),
            (
                req(json!([
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "ok"},
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "go on"},
                ])),
                Some("right after a user message"),
            ),
            (
                req(json!([{"role": "user", "content": [{"type": "text", "text": ""}]}])),
                Some("non-empty"),
            ),
            (
                req(json!([
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
                    {"role": "user", "content": "forgot the result"},
                ])),
                Some("without `tool_result`"),
            ),
            (
                req(json!([
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "zz", "content": "x"}]},
                ])),
                Some("unexpected `tool_use_id`"),
            ),
            (
                req(json!([
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
                    {"role": "user", "content": [{"type": "text", "text": "first"}, {"type": "tool_result", "tool_use_id": "t1", "content": "x"}]},
                ])),
                Some("must come first"),
            ),
            (
                req(json!([
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"}, {"type": "text", "text": "ok"}]},
                    {"role": "user", "content": "more"},
                ])),
                Some("signature"),
            ),
            (
                json!({"model": "m", "max_tokens": 0, "messages": [{"role": "user", "content": "hi"}]}),
                Some("max_tokens"),
            ),
            (
                json!({"max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}),
                Some("model"),
            ),
            (
                json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}],
                    "tools": [{"name": "bad name!", "description": "", "input_schema": {"type": "object"}}]}),
                Some("pattern"),
            ),
            (
                json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": [
                {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "c", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "d", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "e", "cache_control": {"type": "ephemeral"}}]}]}),
                Some("maximum of 4"),
            ),
        ];
        for (body, expect) in cases {
            let got = check(body.clone());
            match expect {
                None => assert!(got.is_ok(), "{body} → {got:?}"),
                Some(needle) => {
                    let msg = got.expect_err(&format!("{body} should be rejected"));
                    assert!(msg.contains(needle), "{body} → {msg}");
                }
            }
        }
    }

    #[test]
    fn credentials_and_version_header() {
        let body = req(json!([{"role": "user", "content": "hi"}]));
        let no_key = BTreeMap::from([("anthropic-version".to_owned(), "2023-06-01".to_owned())]);
        assert_eq!(
            validate(&no_key, &body, &HashMap::new()).map_err(|e| e.0),
            Err(401)
        );
        let no_version = BTreeMap::from([("authorization".to_owned(), "Bearer t".to_owned())]);
        assert_eq!(
            validate(&no_version, &body, &HashMap::new()).map_err(|e| e.0),
            Err(400)
        );
    }

    #[test]
    fn altered_thinking_is_caught() {
        let sigs = HashMap::from([("s1".to_owned(), "original".to_owned())]);
        let body = |thinking: &str| {
            req(json!([
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": thinking, "signature": "s1"}, {"type": "text", "text": "ok"}]},
                {"role": "user", "content": "more"},
            ]))
        };
        assert!(validate(&headers(), &body("original"), &sigs).is_ok());
        assert!(validate(&headers(), &body("edited"), &sigs).is_err());
    }
}
