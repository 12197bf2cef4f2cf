//! Amazon Bedrock as the fake serves it: `POST /model/{modelId}/invoke-with-response-stream`
//! with a Messages body without `model` and `stream`, `anthropic_version: bedrock-2023-05-31`,
//! authenticated by a SigV4 signature (its shape checked: credential scope, signed headers,
//! signature) or a Bedrock API key; answered with the same script, each stream event in an AWS
//! event-stream `chunk` message.

use super::{Framing, Shared, answer, header_map};
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
/// Its secret (`AWS_SECRET_ACCESS_KEY`): the fake signs each request again with it.
pub const SECRET_ACCESS_KEY: &str = "tether-test-secret";

/// What is signed, for [`signature`].
pub struct Signed<'a> {
    pub method: &'a str,
    pub url: &'a str,
    /// Headers signed besides `host`, `x-amz-date` and `x-amz-security-token`.
    pub headers: Vec<(&'a str, &'a str)>,
    pub body: &'a [u8],
    pub key_id: &'a str,
    pub secret: &'a str,
    pub session_token: Option<&'a str>,
    pub region: &'a str,
    pub service: &'a str,
    pub time: std::time::SystemTime,
}

/// The SigV4 signature of a request (AWS's signer, checked against AWS's published test suite
/// in this module's tests).
pub fn signature(s: &Signed<'_>) -> Result<String, String> {
    let identity = aws_credential_types::Credentials::new(
        s.key_id,
        s.secret,
        s.session_token.map(str::to_owned),
        None,
        "fake",
    )
    .into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(s.region)
        .name(s.service)
        .time(s.time)
        .settings(aws_sigv4::http_request::SigningSettings::default())
        .build()
        .map_err(|e| e.to_string())?
        .into();
    let request = aws_sigv4::http_request::SignableRequest::new(
        s.method,
        s.url,
        s.headers.iter().copied(),
        aws_sigv4::http_request::SignableBody::Bytes(s.body),
    )
    .map_err(|e| e.to_string())?;
    let out = aws_sigv4::http_request::sign(request, &params).map_err(|e| e.to_string())?;
    Ok(out.signature().to_owned())
}

/// `20261204T154000Z` as a time.
fn amz_date(d: &str) -> Option<std::time::SystemTime> {
    let (date, time) = d.strip_suffix('Z')?.split_once('T')?;
    if date.len() != 8 || time.len() != 6 {
        return None;
    }
    let iso = format!(
        "{}-{}-{}T{}:{}:{}Z",
        &date[..4],
        &date[4..6],
        &date[6..],
        &time[..2],
        &time[2..4],
        &time[4..]
    );
    humantime::parse_rfc3339(&iso).ok()
}

/// One SSE frame (`event: …\ndata: {…}\n\n`) as an event-stream message: a `chunk` carrying
/// the event, or — for an `error` event — the exception Bedrock sends for that class.
pub(super) fn frame(sse: &Bytes) -> Bytes {
    let text = String::from_utf8_lossy(sse);
    let data = text
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap_or("{}");
    let event: Value = serde_json::from_str(data).unwrap_or(Value::Null);
    let message = if event["type"] == "error" {
        let exception = match event["error"]["type"].as_str().unwrap_or("") {
            "rate_limit_error" => "throttlingException",
            "overloaded_error" => "serviceUnavailableException",
            "invalid_request_error" => "validationException",
            _ => "internalServerException",
        };
        let message = event["error"]["message"].as_str().unwrap_or("error");
        Message::new(serde_json::json!({ "message": message }).to_string())
            .add_header(Header::new(
                ":message-type",
                HeaderValue::String("exception".into()),
            ))
            .add_header(Header::new(
                ":exception-type",
                HeaderValue::String(exception.into()),
            ))
    } else {
        let bytes = base64::engine::general_purpose::STANDARD.encode(data);
        Message::new(serde_json::json!({ "bytes": bytes }).to_string())
            .add_header(Header::new(
                ":message-type",
                HeaderValue::String("event".into()),
            ))
            .add_header(Header::new(
                ":event-type",
                HeaderValue::String("chunk".into()),
            ))
    }
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
/// `Authorization` for the `bedrock` service with the test's access key whose signature matches
/// the request (`path` as sent, `body`) signed again with the test's secret.
fn auth_problem(headers: &BTreeMap<String, String>, path: &str, body: &[u8]) -> Option<String> {
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
    let sent = field("Signature");
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
    if sent.len() != 64 || !sent.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Some(format!("bad signature: {sent}"));
    }
    let Some(time) = headers.get("x-amz-date").and_then(|d| amz_date(d)) else {
        return Some("x-amz-date missing or malformed".into());
    };
    let url = format!(
        "http://{}{path}",
        headers.get("host").map(String::as_str).unwrap_or("")
    );
    let others: Vec<(&str, &str)> = signed
        .split(';')
        .filter(|h| !matches!(*h, "host" | "x-amz-date" | "x-amz-security-token"))
        .map(|h| (h, headers.get(h).map(String::as_str).unwrap_or("")))
        .collect();
    let expected = signature(&Signed {
        method: "POST",
        url: &url,
        headers: others,
        body,
        key_id: ACCESS_KEY_ID,
        secret: SECRET_ACCESS_KEY,
        session_token: headers.get("x-amz-security-token").map(String::as_str),
        region: scope[2],
        service: "bedrock",
        time,
    });
    match expected {
        Ok(e) if e == sent => None,
        Ok(_) => Some("SignatureDoesNotMatch: the request signature does not match".into()),
        Err(e) => Some(format!("cannot check the signature: {e}")),
    }
}

/// `POST /model/{modelId}/invoke-with-response-stream`: Bedrock's own rules, then the Messages
/// API's on the same request with the model from the path.
pub(super) async fn invoke_with_response_stream(
    State(state): State<Shared>,
    Path(model): Path<String>,
    uri: axum::http::Uri,
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
        _ => auth_problem(&hmap, uri.path(), &body).map(|p| (403, p)),
    };
    if let Some((status, message)) = rejection {
        return super::refuse(&state, path, hmap, as_sent, status, message);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's published SigV4 test suite, case `post-vanilla`: the fake's checker signs as AWS
    /// specifies, so it is not checking the daemon's signer against itself.
    #[test]
    fn the_checker_signs_aws_test_suite_requests_as_published() {
        let time = amz_date("20150830T123600Z").expect("date");
        let sig = signature(&Signed {
            method: "POST",
            url: "https://example.amazonaws.com/",
            headers: vec![],
            body: b"",
            key_id: "AKIDEXAMPLE",
            secret: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            session_token: None,
            region: "us-east-1",
            service: "service",
            time,
        })
        .expect("signs");
        assert_eq!(
            sig,
            "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"
        );
    }
}
