//! Amazon Bedrock: `InvokeModelWithResponseStream` (`POST /model/{modelId}/invoke-with-response-stream`,
//! the Messages body without `model` and `stream`, with `anthropic_version: bedrock-2023-05-31`
//! and the betas as `anthropic_beta`), Bedrock's model ids (`us.anthropic.claude-sonnet-4-5-20250929-v1:0`),
//! requests signed with SigV4 (`aws-sigv4`) from AWS's standard credential chain (`aws-config`:
//! environment, shared config and credentials files and profiles, SSO, web identity, container
//! and instance metadata; credentials cached until shortly before they expire), or a Bedrock API
//! key (`AWS_BEARER_TOKEN_BEDROCK`); and the response's AWS event-stream framing
//! (`aws-smithy-eventstream`), whose `chunk` events carry the Anthropic stream events and whose
//! exceptions map to tether's error classes.
//!
//! Invariant: the only module that imports the AWS crates; a credential never appears in an
//! error.

use super::error::LlmError;
use base64::Engine;
use bytes::{Buf, BytesMut};
use futures::{Stream, StreamExt};
use std::time::{Duration, SystemTime};
use tokio::sync::Mutex;

/// The `anthropic_version` Bedrock takes in the body.
pub const BEDROCK_VERSION: &str = "bedrock-2023-05-31";
/// Credentials are fetched again this long before they expire.
const REFRESH_BEFORE: Duration = Duration::from_secs(5 * 60);

/// How to reach Claude on Amazon Bedrock.
pub struct Bedrock {
    /// The AWS region (`AWS_REGION`, else `AWS_DEFAULT_REGION`).
    pub region: String,
    /// A gateway's base URL (`ANTHROPIC_BEDROCK_BASE_URL`); else Bedrock's runtime endpoint.
    pub base_url: Option<String>,
    /// `false` for a gateway that authenticates itself (`CLAUDE_CODE_SKIP_BEDROCK_AUTH`).
    pub authenticate: bool,
    /// A Bedrock API key (`AWS_BEARER_TOKEN_BEDROCK`), sent instead of a signature.
    api_key: Option<super::auth::Secret>,
    /// The standard chain, built on first use.
    chain: tokio::sync::OnceCell<Option<aws_credential_types::provider::SharedCredentialsProvider>>,
    cached: Mutex<Option<aws_credential_types::Credentials>>,
}

impl std::fmt::Debug for Bedrock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bedrock")
            .field("region", &self.region)
            .field("base_url", &self.base_url)
            .field("authenticate", &self.authenticate)
            .field("api_key", &self.api_key.is_some())
            .finish_non_exhaustive()
    }
}

impl Bedrock {
    /// Bedrock settings; the API key from `AWS_BEARER_TOKEN_BEDROCK`.
    pub fn new(region: String, base_url: Option<String>, authenticate: bool) -> Self {
        let api_key = std::env::var("AWS_BEARER_TOKEN_BEDROCK")
            .ok()
            .filter(|k| !k.trim().is_empty())
            .map(super::auth::Secret::new);
        Self {
            region,
            base_url: base_url.filter(|b| !b.trim().is_empty()),
            authenticate,
            api_key,
            chain: tokio::sync::OnceCell::new(),
            cached: Mutex::new(None),
        }
    }

    /// The streaming endpoint of `model` (a catalog id, a Bedrock id or an ARN).
    pub fn endpoint(&self, model: &str) -> String {
        let base = match &self.base_url {
            Some(b) => b.trim_end_matches('/').to_owned(),
            None => format!("https://bedrock-runtime.{}.amazonaws.com", self.region),
        };
        let id = model_id(model, &self.region);
        let encoded: String =
            percent_encoding::utf8_percent_encode(&id, percent_encoding::NON_ALPHANUMERIC)
                .to_string()
                // Bedrock's own encoding leaves these as they are.
                .replace("%2E", ".")
                .replace("%2D", "-")
                .replace("%5F", "_");
        format!("{base}/model/{encoded}/invoke-with-response-stream")
    }

    /// The body Bedrock takes: the Messages body without `model` and `stream`, with its
    /// version and the betas.
    pub fn body(request: &serde_json::Value, betas: &[String]) -> serde_json::Value {
        let mut body = request.clone();
        if let Some(map) = body.as_object_mut() {
            map.remove("model");
            map.remove("stream");
            map.insert("anthropic_version".into(), BEDROCK_VERSION.into());
            if !betas.is_empty() {
                map.insert("anthropic_beta".into(), betas.into());
            }
        }
        body
    }

    /// The headers that authenticate a POST of `body` to `url` (sent with `content_type`).
    pub async fn auth_headers(
        &self,
        url: &str,
        content_type: &str,
        body: &[u8],
    ) -> Result<Vec<(String, String)>, LlmError> {
        if !self.authenticate {
            return Ok(Vec::new());
        }
        if let Some(key) = &self.api_key {
            return Ok(vec![(
                "authorization".into(),
                format!("Bearer {}", key.expose()),
            )]);
        }
        let credentials = self.credentials().await?;
        let identity = credentials.into();
        let settings = aws_sigv4::http_request::SigningSettings::default();
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("bedrock")
            .time(SystemTime::now())
            .settings(settings)
            .build()
            .map_err(|e| LlmError::Config(format!("cannot sign the request: {e}")))?
            .into();
        let headers = [("content-type", content_type)];
        let signable = aws_sigv4::http_request::SignableRequest::new(
            "POST",
            url,
            headers.into_iter(),
            aws_sigv4::http_request::SignableBody::Bytes(body),
        )
        .map_err(|e| LlmError::Config(format!("cannot sign the request: {e}")))?;
        let (instructions, _) = aws_sigv4::http_request::sign(signable, &params)
            .map_err(|e| LlmError::Config(format!("cannot sign the request: {e}")))?
            .into_parts();
        Ok(instructions
            .headers()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect())
    }

    /// Credentials from the standard chain, cached until shortly before they expire.
    async fn credentials(&self) -> Result<aws_credential_types::Credentials, LlmError> {
        use aws_credential_types::provider::ProvideCredentials;
        let mut cached = self.cached.lock().await;
        if let Some(c) = cached.as_ref()
            && c.expiry()
                .is_none_or(|at| at > SystemTime::now() + REFRESH_BEFORE)
        {
            return Ok(c.clone());
        }
        let chain = self
            .chain
            .get_or_init(|| async {
                let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
                    .region(aws_config::Region::new(self.region.clone()))
                    .load()
                    .await;
                config.credentials_provider()
            })
            .await;
        let no_credentials = |why: String| {
            LlmError::Config(format!(
                "no AWS credentials for Bedrock ({why}); set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, \
                 run `aws sso login`, set AWS_BEARER_TOKEN_BEDROCK, or run on AWS \
                 (CLAUDE_CODE_SKIP_BEDROCK_AUTH=1 for a gateway that authenticates)"
            ))
        };
        let Some(chain) = chain else {
            return Err(no_credentials("no credentials provider".into()));
        };
        let fresh = chain.provide_credentials().await.map_err(|e| {
            no_credentials(aws_smithy_types::error::display::DisplayErrorContext(&e).to_string())
        })?;
        *cached = Some(fresh.clone());
        Ok(fresh)
    }

    /// Forgets the cached credentials (the next request loads them again).
    pub async fn invalidate(&self) {
        *self.cached.lock().await = None;
    }

    /// Where the credentials come from, in words (never a secret).
    pub fn credential_source(&self) -> String {
        if !self.authenticate {
            return "none (CLAUDE_CODE_SKIP_BEDROCK_AUTH: the gateway authenticates)".into();
        }
        if self.api_key.is_some() {
            return "Bedrock API key (AWS_BEARER_TOKEN_BEDROCK)".into();
        }
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        if var("AWS_ACCESS_KEY_ID").is_some() {
            return "AWS access key (AWS_ACCESS_KEY_ID), signed with SigV4".into();
        }
        match var("AWS_PROFILE") {
            Some(p) => format!("AWS profile {p} (AWS_PROFILE), signed with SigV4"),
            None => "AWS's default credential chain (shared files, SSO, web identity, container or instance metadata), signed with SigV4".into(),
        }
    }
}

/// The cross-region inference profile prefix of a region (`us.` for `us-east-1`).
fn profile_prefix(region: &str) -> Option<&'static str> {
    match region.split('-').next()? {
        "us" => Some("us."),
        "eu" => Some("eu."),
        "ap" => Some("apac."),
        _ => None,
    }
}

/// The id Bedrock knows a catalog model by, through the region's cross-region inference
/// profile: `claude-sonnet-4-5` in `us-east-1` → `us.anthropic.claude-sonnet-4-5-20250929-v1:0`;
/// undated newer models as `anthropic.<id>-v1`; a Bedrock id or ARN as given.
pub fn model_id(model: &str, region: &str) -> String {
    let model = model.trim_end_matches("[1m]");
    if model.starts_with("arn:") || model.contains("anthropic.") {
        return model.to_owned();
    }
    let dated = super::models::dated_id(model);
    let base = match dated {
        Some(d) => format!("anthropic.{d}-v1:0"),
        None => format!("anthropic.{model}-v1"),
    };
    format!("{}{base}", profile_prefix(region).unwrap_or(""))
}

/// Decodes Bedrock's event stream into the Anthropic stream events its `chunk` events carry
/// (as the SSE decoder yields them); an exception becomes an Anthropic `error` event of the
/// matching type, so the accumulator classifies it like one from the Anthropic API.
pub fn decode_event_stream<S, B>(bytes: S) -> impl Stream<Item = Result<String, LlmError>>
where
    S: Stream<Item = Result<B, LlmError>> + Unpin,
    B: AsRef<[u8]>,
{
    let state = (
        bytes,
        BytesMut::new(),
        aws_smithy_eventstream::frame::MessageFrameDecoder::new(),
        false,
    );
    futures::stream::unfold(
        state,
        |(mut bytes, mut buf, mut decoder, done)| async move {
            if done {
                return None;
            }
            loop {
                match decoder.decode_frame(&mut buf) {
                    Ok(aws_smithy_eventstream::frame::DecodedFrame::Complete(message)) => {
                        match event_of(&message) {
                            Some(item) => return Some((item, (bytes, buf, decoder, false))),
                            None => continue,
                        }
                    }
                    Ok(aws_smithy_eventstream::frame::DecodedFrame::Incomplete) => {}
                    Err(e) => {
                        return Some((
                            Err(malformed(format!("event stream: {e}"))),
                            (bytes, buf, decoder, true),
                        ));
                    }
                }
                match bytes.next().await {
                    Some(Ok(chunk)) => buf.extend_from_slice(chunk.as_ref()),
                    Some(Err(e)) => return Some((Err(e), (bytes, buf, decoder, true))),
                    None if buf.has_remaining() => {
                        return Some((Err(LlmError::Truncated), (bytes, buf, decoder, true)));
                    }
                    None => return None,
                }
            }
        },
    )
}

fn malformed(why: String) -> LlmError {
    LlmError::Malformed(why)
}

/// A header of an event-stream message, as a string.
fn header<'a>(message: &'a aws_smithy_types::event_stream::Message, name: &str) -> Option<&'a str> {
    message
        .headers()
        .iter()
        .find(|h| h.name().as_str() == name)
        .and_then(|h| h.value().as_string().ok())
        .map(|s| s.as_str())
}

/// One event-stream message: a chunk's Anthropic event, an exception as an `error` event, or
/// nothing (another event type).
fn event_of(message: &aws_smithy_types::event_stream::Message) -> Option<Result<String, LlmError>> {
    let payload: serde_json::Value = match serde_json::from_slice(message.payload()) {
        Ok(v) => v,
        Err(e) => return Some(Err(malformed(format!("event stream payload: {e}")))),
    };
    match header(message, ":message-type") {
        Some("event") if header(message, ":event-type") == Some("chunk") => {
            let Some(encoded) = payload["bytes"].as_str() else {
                return Some(Err(malformed("a chunk without bytes".into())));
            };
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| malformed(format!("a chunk's bytes: {e}")))
                .and_then(|b| {
                    String::from_utf8(b).map_err(|e| malformed(format!("a chunk's bytes: {e}")))
                });
            Some(decoded)
        }
        Some("exception") | Some("error") => {
            let kind = header(message, ":exception-type")
                .or_else(|| header(message, ":error-code"))
                .unwrap_or("unknown");
            let error_type = match kind.to_ascii_lowercase().as_str() {
                k if k.starts_with("throttling") => "rate_limit_error",
                k if k.starts_with("serviceunavailable") || k.starts_with("modelnotready") => {
                    "overloaded_error"
                }
                k if k.starts_with("validation") => "invalid_request_error",
                k if k.starts_with("accessdenied") => "permission_error",
                _ => "api_error",
            };
            let text = payload["message"]
                .as_str()
                .or_else(|| payload["Message"].as_str())
                .unwrap_or("no message");
            Some(Ok(serde_json::json!({
                "type": "error",
                "error": {"type": error_type, "message": format!("Bedrock {kind}: {text}")}
            })
            .to_string()))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_smithy_types::event_stream::{Header, HeaderValue, Message};

    fn frame(message: &Message) -> Vec<u8> {
        let mut out = Vec::new();
        aws_smithy_eventstream::frame::write_message_to(message, &mut out).expect("encode");
        out
    }

    fn chunk(event: &serde_json::Value) -> Message {
        let bytes = base64::engine::general_purpose::STANDARD.encode(event.to_string());
        Message::new(serde_json::json!({"bytes": bytes}).to_string())
            .add_header(Header::new(
                ":message-type",
                HeaderValue::String("event".into()),
            ))
            .add_header(Header::new(
                ":event-type",
                HeaderValue::String("chunk".into()),
            ))
    }

    #[test]
    fn model_ids_through_inference_profiles() {
        assert_eq!(
            model_id("claude-sonnet-4-5", "us-east-1"),
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
        );
        assert_eq!(
            model_id("claude-opus-4-6", "eu-west-1"),
            "eu.anthropic.claude-opus-4-6-v1"
        );
        assert_eq!(
            model_id("claude-3-5-haiku", "ap-northeast-1"),
            "apac.anthropic.claude-3-5-haiku-20241022-v1:0"
        );
        assert_eq!(
            model_id(
                "global.anthropic.claude-haiku-4-5-20251001-v1:0",
                "us-east-1"
            ),
            "global.anthropic.claude-haiku-4-5-20251001-v1:0"
        );
        let b = Bedrock::new("us-west-2".into(), None, false);
        assert_eq!(
            b.endpoint("claude-sonnet-4-5"),
            "https://bedrock-runtime.us-west-2.amazonaws.com/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke-with-response-stream"
        );
        let body = Bedrock::body(
            &serde_json::json!({"model": "m", "stream": true, "max_tokens": 5}),
            &["context-1m-2025-08-07".to_owned()],
        );
        assert_eq!(
            body,
            serde_json::json!({"max_tokens": 5, "anthropic_version": BEDROCK_VERSION, "anthropic_beta": ["context-1m-2025-08-07"]})
        );
    }

    #[tokio::test]
    async fn chunks_in_any_pieces_decode_and_exceptions_become_errors() {
        let start = serde_json::json!({"type": "message_start", "message": {"id": "m"}});
        let stop = serde_json::json!({"type": "message_stop"});
        let throttled = Message::new(r#"{"message":"Too many requests"}"#)
            .add_header(Header::new(
                ":message-type",
                HeaderValue::String("exception".into()),
            ))
            .add_header(Header::new(
                ":exception-type",
                HeaderValue::String("throttlingException".into()),
            ));
        let mut wire = frame(&chunk(&start));
        wire.extend(frame(&chunk(&stop)));
        wire.extend(frame(&throttled));
        // Cut into 7-byte pieces: frames span reads.
        let pieces: Vec<Result<Vec<u8>, LlmError>> =
            wire.chunks(7).map(|c| Ok(c.to_vec())).collect();
        let events: Vec<_> = decode_event_stream(futures::stream::iter(pieces))
            .collect()
            .await;
        assert_eq!(events.len(), 3);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(events[0].as_ref().expect("ok"))
                .expect("json"),
            start
        );
        let error: serde_json::Value =
            serde_json::from_str(events[2].as_ref().expect("ok")).expect("json");
        assert_eq!(error["error"]["type"], "rate_limit_error");
        // A frame whose CRC does not match is a malformed stream, never a silent skip.
        let mut corrupt = frame(&chunk(&start));
        let last = corrupt.len() - 1;
        corrupt[last] ^= 0xFF;
        let events: Vec<_> =
            decode_event_stream(futures::stream::iter(vec![Ok::<_, LlmError>(corrupt)]))
                .collect()
                .await;
        assert!(
            matches!(events.as_slice(), [Err(LlmError::Malformed(m))] if m.contains("event stream")),
            "{events:?}"
        );
        // A stream cut inside a frame is truncated, not complete.
        let cut: Vec<Result<Vec<u8>, LlmError>> = vec![Ok(frame(&chunk(&start))[..20].to_vec())];
        let events: Vec<_> = decode_event_stream(futures::stream::iter(cut))
            .collect()
            .await;
        assert!(matches!(events.as_slice(), [Err(LlmError::Truncated)]));
    }
}
