//! Errors of the model client, classified so callers know what to do: retry, compact, fall back,
//! or tell the user.

use std::time::Duration;

/// What kind of failure an API error is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiErrorKind {
    /// 400: the request is malformed.
    InvalidRequest,
    /// 400 "prompt is too long: N tokens > M maximum".
    PromptTooLong {
        /// Tokens in the prompt, when the message said.
        tokens: Option<u64>,
        /// The model's limit, when the message said.
        max: Option<u64>,
    },
    /// 401: credentials missing or wrong.
    Auth,
    /// 403: the credentials may not do this.
    Permission,
    /// 404: unknown model or endpoint.
    NotFound,
    /// 413: the request body is too large.
    TooLarge,
    /// 429: rate limited.
    RateLimited,
    /// 529 or `overloaded_error`.
    Overloaded,
    /// 408, 409 or another 5xx.
    Server,
    /// Anything else.
    Other,
}

impl ApiErrorKind {
    /// A short stable name, e.g. `prompt_too_long`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid_request",
            Self::PromptTooLong { .. } => "prompt_too_long",
            Self::Auth => "auth",
            Self::Permission => "permission",
            Self::NotFound => "not_found",
            Self::TooLarge => "too_large",
            Self::RateLimited => "rate_limited",
            Self::Overloaded => "overloaded",
            Self::Server => "server",
            Self::Other => "other",
        }
    }
}

/// An error status from the API, with what it said.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// Classification.
    pub kind: ApiErrorKind,
    /// The API's `error.type`, e.g. `overloaded_error`.
    pub error_type: String,
    /// The API's message.
    pub message: String,
    /// The API's `request_id`, for support.
    pub request_id: Option<String>,
    /// From `retry-after-ms` / `retry-after`.
    pub retry_after: Option<Duration>,
    /// From `x-should-retry`.
    pub should_retry: Option<bool>,
}

/// A failure talking to the model.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    /// The API answered with an error status.
    #[error("{} error (HTTP {}): {}", .0.kind.name(), .0.status, .0.message)]
    Api(Box<ApiError>),
    /// An `error` event in the middle of a stream.
    #[error("stream interrupted by {error_type}: {message}")]
    Stream {
        /// The error's type, e.g. `overloaded_error`.
        error_type: String,
        /// Its message.
        message: String,
    },
    /// The connection failed or broke.
    #[error("connection error: {0}")]
    Connection(String),
    /// No byte arrived for too long, or the whole request took too long.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The stream ended before the message was complete.
    #[error("the response stream ended before the message was complete")]
    Truncated,
    /// The stream was not valid SSE / JSON.
    #[error("malformed response stream: {0}")]
    Malformed(String),
    /// No API key or token is configured.
    #[error(
        "no Anthropic credentials: set ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN, or configure apiKeyHelper"
    )]
    NoCredentials,
    /// The apiKeyHelper command failed.
    #[error("apiKeyHelper failed: {0}")]
    KeyHelper(String),
    /// The client could not be built (bad base URL or header).
    #[error("invalid client configuration: {0}")]
    Config(String),
    /// The caller cancelled the request.
    #[error("cancelled")]
    Cancelled,
}

impl LlmError {
    /// Whether retrying the same request may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Api(e) => match e.should_retry {
                Some(v) => v,
                None => {
                    matches!(e.status, 408 | 409 | 429)
                        || e.status >= 500
                        || e.kind == ApiErrorKind::Overloaded
                }
            },
            Self::Stream { .. }
            | Self::Connection(_)
            | Self::Timeout(_)
            | Self::Truncated
            | Self::Malformed(_) => true,
            Self::NoCredentials | Self::KeyHelper(_) | Self::Config(_) | Self::Cancelled => false,
        }
    }

    /// Whether the model is overloaded (a reason to fall back to another model).
    pub fn is_overloaded(&self) -> bool {
        match self {
            Self::Api(e) => e.kind == ApiErrorKind::Overloaded,
            Self::Stream { error_type, .. } => error_type == "overloaded_error",
            _ => false,
        }
    }

    /// A short stable code for events, e.g. `overloaded`, `auth`, `connection`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Api(e) => e.kind.name(),
            Self::Stream { error_type, .. } if error_type == "overloaded_error" => "overloaded",
            Self::Stream { .. } => "stream_error",
            Self::Connection(_) => "connection",
            Self::Timeout(_) => "timeout",
            Self::Truncated => "truncated",
            Self::Malformed(_) => "malformed",
            Self::NoCredentials => "no_credentials",
            Self::KeyHelper(_) => "key_helper",
            Self::Config(_) => "config",
            Self::Cancelled => "cancelled",
        }
    }

    /// Builds the error for a non-success response from its status, headers and body.
    pub fn from_response(status: u16, headers: &reqwest::header::HeaderMap, body: &[u8]) -> Self {
        let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
        let err = parsed.as_ref().and_then(|v| v.get("error"));
        let error_type = err
            .and_then(|e| e.get("type"))
            .and_then(|t| t.as_str())
            .unwrap_or("")
            .to_owned();
        let message = err
            .and_then(|e| e.get("message"))
            .and_then(|m| m.as_str())
            .map(str::to_owned)
            .unwrap_or_else(|| {
                let text = String::from_utf8_lossy(body);
                let text = text.trim();
                if text.is_empty() {
                    format!("HTTP {status} with an empty body")
                } else {
                    text.chars().take(500).collect()
                }
            });
        let request_id = parsed
            .as_ref()
            .and_then(|v| v.get("request_id"))
            .and_then(|r| r.as_str())
            .map(str::to_owned)
            .or_else(|| header(headers, "request-id").map(str::to_owned));
        let kind = classify(status, &error_type, &message);
        Self::Api(Box::new(ApiError {
            status,
            kind,
            error_type,
            message,
            request_id,
            retry_after: retry_after(headers),
            should_retry: header(headers, "x-should-retry").and_then(|v| match v.trim() {
                "true" => Some(true),
                "false" => Some(false),
                _ => None,
            }),
        }))
    }

    /// The API error, when this is one.
    pub fn api(&self) -> Option<&ApiError> {
        match self {
            Self::Api(e) => Some(e),
            _ => None,
        }
    }
}

fn header<'a>(headers: &'a reqwest::header::HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn classify(status: u16, error_type: &str, message: &str) -> ApiErrorKind {
    if let Some((tokens, max)) = prompt_too_long(message) {
        return ApiErrorKind::PromptTooLong { tokens, max };
    }
    match (status, error_type) {
        (_, "overloaded_error") | (529, _) => ApiErrorKind::Overloaded,
        (401, _) | (_, "authentication_error") => ApiErrorKind::Auth,
        (403, _) | (_, "permission_error") => ApiErrorKind::Permission,
        (404, _) | (_, "not_found_error") => ApiErrorKind::NotFound,
        (413, _) | (_, "request_too_large") => ApiErrorKind::TooLarge,
        (429, _) | (_, "rate_limit_error") => ApiErrorKind::RateLimited,
        (400, _) | (_, "invalid_request_error") => ApiErrorKind::InvalidRequest,
        (408 | 409, _) => ApiErrorKind::Server,
        (s, _) if s >= 500 => ApiErrorKind::Server,
        _ => ApiErrorKind::Other,
    }
}

/// Recognises "prompt is too long: 210000 tokens > 200000 maximum" and extracts both numbers.
pub fn prompt_too_long(message: &str) -> Option<(Option<u64>, Option<u64>)> {
    let at = message.to_ascii_lowercase().find("prompt is too long")?;
    let rest = &message[at..];
    let mut numbers = rest
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse::<u64>().ok());
    Some((numbers.next(), numbers.next()))
}

/// `retry-after-ms` (milliseconds), else `retry-after` (seconds or an HTTP date).
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    if let Some(ms) = header(headers, "retry-after-ms")
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|ms| ms.is_finite() && *ms >= 0.0)
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = header(headers, "retry-after")?.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(
        when.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderMap, HeaderValue};

    #[test]
    fn prompt_too_long_numbers() {
        assert_eq!(
            prompt_too_long("prompt is too long: 210000 tokens > 200000 maximum"),
            Some((Some(210000), Some(200000)))
        );
        assert_eq!(prompt_too_long("Prompt is too long"), Some((None, None)));
        assert_eq!(prompt_too_long("max_tokens: 5 > 4"), None);
    }

    #[test]
    fn classification_table() {
        let none = HeaderMap::new();
        let cases: &[(u16, &str, &str, bool)] = &[
            (
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}"#,
                "invalid_request",
                false,
            ),
            (
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 5 tokens > 4 maximum"}}"#,
                "prompt_too_long",
                false,
            ),
            (
                401,
                r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
                "auth",
                false,
            ),
            (
                403,
                r#"{"type":"error","error":{"type":"permission_error","message":"no"}}"#,
                "permission",
                false,
            ),
            (
                404,
                r#"{"type":"error","error":{"type":"not_found_error","message":"model"}}"#,
                "not_found",
                false,
            ),
            (
                413,
                r#"{"error":{"type":"request_too_large","message":"Request exceeds the maximum size"}}"#,
                "too_large",
                false,
            ),
            (
                429,
                r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#,
                "rate_limited",
                true,
            ),
            (
                500,
                r#"{"type":"error","error":{"type":"api_error","message":"oops"}}"#,
                "server",
                true,
            ),
            (
                529,
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                "overloaded",
                true,
            ),
            (502, "<html>bad gateway</html>", "server", true),
        ];
        for (status, body, code, retryable) in cases {
            let e = LlmError::from_response(*status, &none, body.as_bytes());
            assert_eq!(
                (e.code(), e.is_retryable()),
                (*code, *retryable),
                "{status} {body}"
            );
        }
    }

    #[test]
    fn headers_override_retry_and_delay() {
        let mut h = HeaderMap::new();
        h.insert("x-should-retry", HeaderValue::from_static("false"));
        h.insert("retry-after", HeaderValue::from_static("3"));
        let e = LlmError::from_response(500, &h, b"{}");
        assert!(!e.is_retryable());
        assert_eq!(
            e.api().and_then(|a| a.retry_after),
            Some(Duration::from_secs(3))
        );
        let mut h = HeaderMap::new();
        h.insert("retry-after-ms", HeaderValue::from_static("1500"));
        h.insert("retry-after", HeaderValue::from_static("9"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(1500)));
        let mut h = HeaderMap::new();
        h.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(
            retry_after(&h),
            Some(Duration::ZERO),
            "a date in the past means now"
        );
        let mut h = HeaderMap::new();
        h.insert("x-should-retry", HeaderValue::from_static("true"));
        assert!(LlmError::from_response(400, &h, b"{}").is_retryable());
    }
}
