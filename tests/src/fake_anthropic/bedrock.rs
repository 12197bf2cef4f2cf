//! Amazon Bedrock as the fake serves it: `POST /model/{modelId}/invoke-with-response-stream`
//! with a Messages body without `model` and `stream`, `anthropic_version: bedrock-2023-05-31`,
//! authenticated by a SigV4 signature (its shape checked: credential scope, signed headers,
//! signature) or a Bedrock API key; answered with the same script, each stream event in an AWS
//! event-stream `chunk` message.

use super::{Framing, Recorded, Shared, answer, error_body, header_map, json_response, lock};
use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use base64::Engine;
use serde_json::Value;
use std::collections::BTreeMap;

/// The access key id tests give the daemon (`AWS_ACCESS_KEY_ID`).
pub const ACCESS_KEY_ID: &str = "AKIATETHERTEST";

/// One SSE frame (`event: …\ndata: {…}\n\n`) as an event-stream `chunk` message.
pub(super) fn frame(sse: &Bytes) -> Bytes {
    let text = String::from_utf8_lossy(sse);
    let data = text
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap_or("{}");
    let bytes = base64::engine::general_purpose::STANDARD.encode(data);
    let message = Message::new(serde_json::json!({ "bytes": bytes }).to_string())
        .add_header(Header::new(
            ":message-type",
            HeaderValue::String("event".into()),
        ))
        .add_header(Header::new(
            ":event-type",
            HeaderValue::String("chunk".into()),
        ))
        .add_header(Header::new(
            ":content-type",
            HeaderValue::String("application/json".into()),
        ));
    let mut out = Vec::new();
    match aws_smithy_eventstream::frame::write_message_to(&message, &mut out) {
        Ok(()) => Bytes::from(out),
        Err(_) => Bytes::new(),
    }
}

/// What is wrong with a request's authentication, if anything: a Bedrock API key, or a SigV4
/// `Authorization` for the `bedrock` service with the test's access key, the host and date
/// signed, and a date header.
fn auth_problem(headers: &BTreeMap<String, String>) -> Option<String> {
    let auth = headers.get("authorization")?;
    if auth.starts_with("Bearer ") && auth.len() > 7 {
        return None;
    }
    let Some(rest) = auth.strip_prefix("AWS4-HMAC-SHA256 ") else {
        return Some(format!("not a SigV4 or bearer authorization: {auth}"));
    };
    let field = |name: &str| {
        rest.split(", ")
            .find_map(|p| p.strip_prefix(&format!("{name}=")))
            .unwrap_or("")
    };
    let scope: Vec<&str> = field("Credential").split('/').collect();
    let signed = field("SignedHeaders");
    let signature = field("Signature");
    if scope.len() != 5
        || scope[0] != ACCESS_KEY_ID
        || scope[3] != "bedrock"
        || scope[4] != "aws4_request"
    {
        return Some(format!("bad credential scope: {}", field("Credential")));
    }
    if !signed.split(';').any(|h| h == "host") || !signed.split(';').any(|h| h == "x-amz-date") {
        return Some(format!("host and x-amz-date must be signed: {signed}"));
    }
    if signature.len() != 64 || !signature.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Some(format!("bad signature: {signature}"));
    }
    if !headers.contains_key("x-amz-date") {
        return Some("x-amz-date missing".into());
    }
    None
}

/// `POST /model/{modelId}/invoke-with-response-stream`: Bedrock's own rules, then the Messages
/// API's on the same request with the model from the path.
pub(super) async fn invoke_with_response_stream(
    State(state): State<Shared>,
    Path(model): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = format!("/model/{model}/invoke-with-response-stream");
    let mut hmap = header_map(&headers);
    let sent: Result<Value, _> = serde_json::from_slice(&body);
    let as_sent = sent.as_ref().cloned().unwrap_or(Value::Null);
    let rejection = match &sent {
        Err(e) => Some((400, format!("request body is not valid JSON: {e}"))),
        Ok(b) if b.get("model").is_some() || b.get("stream").is_some() => Some((
            400,
            "Malformed input request: extraneous key [model or stream] is not permitted".to_owned(),
        )),
        Ok(b) if b["anthropic_version"] != "bedrock-2023-05-31" => Some((
            400,
            format!(
                "anthropic_version: must be bedrock-2023-05-31, got {}",
                b["anthropic_version"]
            ),
        )),
        _ if !hmap.contains_key("authorization") => {
            Some((403, "Missing Authentication Token".to_owned()))
        }
        _ => auth_problem(&hmap).map(|p| (403, p)),
    };
    if let Some((status, message)) = rejection {
        lock(&state).recorded.push(Recorded {
            path,
            headers: hmap,
            body: as_sent,
            rejected: Some(message.clone()),
        });
        let kind = if status == 403 {
            "permission_error"
        } else {
            "invalid_request_error"
        };
        return json_response(status, &error_body(kind, &message), &BTreeMap::new());
    }
    // Bedrock's body carries the betas the Messages API takes as a header.
    let betas: Vec<String> = as_sent["anthropic_beta"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|b| b.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if !betas.is_empty() {
        hmap.insert("anthropic-beta".into(), betas.join(","));
    }
    let parsed = sent.map(|mut b| {
        if let Some(map) = b.as_object_mut() {
            map.remove("anthropic_version");
            map.remove("anthropic_beta");
            map.insert("model".into(), model.clone().into());
            map.insert("stream".into(), true.into());
        }
        b
    });
    // The Messages API's own header rules do not apply to Bedrock.
    hmap.insert("anthropic-version".into(), "2023-06-01".into());
    hmap.entry("x-api-key".into())
        .or_insert_with(|| "signed".into());
    answer(
        &state,
        &path,
        hmap,
        parsed.map_err(|e| e.to_string()),
        as_sent,
        Framing::EventStream,
    )
}
