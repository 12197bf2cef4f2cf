//! The HTTP side: sends a request, classifies failures, retries with backoff, and streams the
//! response through the accumulator.

use super::accumulate::{Accumulator, AssembledMessage, StreamUpdate, decode_stream};
use super::auth::{Auth, Credential};
use super::bedrock::{Bedrock, decode_event_stream};
use super::error::LlmError;
use super::provider::{Provider, Vertex};
use super::request::MessagesRequest;
use super::retry::RetryPolicy;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How the client talks to the API.
#[derive(Debug, Clone)]
pub struct LlmConfig {
    /// `ANTHROPIC_BASE_URL`, default `https://api.anthropic.com`.
    pub base_url: String,
    /// Retries.
    pub retry: RetryPolicy,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Longest silence inside a stream.
    pub idle_timeout: Duration,
    /// Longest whole request.
    pub overall_timeout: Duration,
    /// Extra headers (`ANTHROPIC_CUSTOM_HEADERS`).
    pub custom_headers: Vec<(String, String)>,
}

impl Default for LlmConfig {
    fn default() -> Self {
        Self {
            base_url: "https://api.anthropic.com".into(),
            retry: RetryPolicy::default(),
            connect_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(90),
            overall_timeout: Duration::from_secs(600),
            custom_headers: Vec::new(),
        }
    }
}

/// The Anthropic Messages API client.
#[derive(Debug)]
pub struct AnthropicClient {
    http: reqwest::Client,
    config: LlmConfig,
    endpoint: String,
    headers: HeaderMap,
    auth: Auth,
    provider: Provider,
}

/// A streamed reply: the assembled message, or why there is none.
pub type Streaming<'a> =
    Pin<Box<dyn Future<Output = Result<AssembledMessage, LlmError>> + Send + 'a>>;

/// A model that streams replies: the Anthropic client, or a scripted one in tests of the query
/// loop.
pub trait Model: Send + Sync {
    /// Streams `request`, handing each piece to `on_update` (retries included), until the
    /// message is complete, a non-retryable error, or `cancel`.
    fn stream<'a>(
        &'a self,
        request: &'a MessagesRequest,
        on_update: &'a mut (dyn FnMut(StreamUpdate) + Send),
        cancel: &'a CancellationToken,
    ) -> Streaming<'a>;
}

impl Model for AnthropicClient {
    fn stream<'a>(
        &'a self,
        request: &'a MessagesRequest,
        on_update: &'a mut (dyn FnMut(StreamUpdate) + Send),
        cancel: &'a CancellationToken,
    ) -> Streaming<'a> {
        Box::pin(AnthropicClient::stream(self, request, on_update, cancel))
    }
}

impl AnthropicClient {
    /// A client for `config` with credentials from `auth`.
    pub fn new(config: LlmConfig, auth: Auth) -> Result<Self, LlmError> {
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .read_timeout(config.idle_timeout)
            .timeout(config.overall_timeout)
            .build()
            .map_err(|e| LlmError::Config(e.to_string()))?;
        let mut headers = HeaderMap::new();
        headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        headers.insert("accept", HeaderValue::from_static("text/event-stream"));
        for (name, value) in &config.custom_headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| LlmError::Config(format!("invalid header name {name:?}")))?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| LlmError::Config(format!("invalid value for header {name}")))?;
            headers.insert(name, value);
        }
        let endpoint = format!("{}/v1/messages", config.base_url.trim_end_matches('/'));
        Ok(Self {
            http,
            config,
            endpoint,
            headers,
            auth,
            provider: Provider::Anthropic,
        })
    }

    /// The same client sending its requests to `provider` instead.
    pub fn with_provider(mut self, provider: Provider) -> Self {
        if !matches!(provider, Provider::Anthropic) {
            // Vertex and Bedrock take the version in the body.
            self.headers.remove("anthropic-version");
        }
        if matches!(provider, Provider::Bedrock(_)) {
            self.headers.insert(
                "accept",
                HeaderValue::from_static("application/vnd.amazon.eventstream"),
            );
        }
        self.provider = provider;
        self
    }

    /// The provider requests go to.
    pub fn provider(&self) -> &Provider {
        &self.provider
    }

    /// Where a request for `model` goes, and its body (encoded once; every attempt sends the
    /// same bytes).
    fn target(&self, request: &MessagesRequest) -> Result<(String, Bytes), LlmError> {
        let encode =
            |e: serde_json::Error| LlmError::Config(format!("cannot encode the request: {e}"));
        let (url, body) = match &self.provider {
            Provider::Anthropic => (
                self.endpoint.clone(),
                serde_json::to_vec(request).map_err(encode)?,
            ),
            Provider::Vertex(v) => {
                let value = serde_json::to_value(request).map_err(encode)?;
                (
                    v.endpoint(&request.model),
                    serde_json::to_vec(&Vertex::body(&value)).map_err(encode)?,
                )
            }
            Provider::Bedrock(b) => {
                let value = serde_json::to_value(request).map_err(encode)?;
                (
                    b.endpoint(&request.model),
                    serde_json::to_vec(&Bedrock::body(&value, &request.betas)).map_err(encode)?,
                )
            }
        };
        Ok((url, Bytes::from(body)))
    }

    /// Streams `request`, retrying what is retryable, handing each piece to `on_update` (retries
    /// included), until the message is complete, a non-retryable error, or `cancel`.
    pub async fn stream(
        &self,
        request: &MessagesRequest,
        on_update: &mut (dyn FnMut(StreamUpdate) + Send),
        cancel: &CancellationToken,
    ) -> Result<AssembledMessage, LlmError> {
        let (url, body) = self.target(request)?;
        let betas = request.beta_header();
        let mut retry = 0u32;
        let mut overloaded = 0u32;
        let mut reauthenticated = false;
        loop {
            let mut streamed = false;
            // Model, attempt, status and tokens; never the prompt or a credential.
            let span = tracing::info_span!(
                "api.request",
                provider = self.provider.name(),
                model = %request.model,
                attempt = retry + 1,
                http.status = tracing::field::Empty,
                tokens.input = tracing::field::Empty,
                tokens.output = tracing::field::Empty,
                stop_reason = tracing::field::Empty,
                error.code = tracing::field::Empty,
            );
            let attempt = tracing::Instrument::instrument(
                self.attempt(&url, &body, &betas, on_update, &mut streamed),
                span.clone(),
            );
            let result = tokio::select! {
                r = attempt => r,
                _ = cancel.cancelled() => return Err(LlmError::Cancelled),
            };
            let error = match result {
                Ok(message) => {
                    span.record("http.status", 200);
                    span.record("tokens.input", message.usage.input_tokens);
                    span.record("tokens.output", message.usage.output_tokens);
                    if let Some(r) = message.stop_reason.as_deref() {
                        span.record("stop_reason", r);
                    }
                    return Ok(message);
                }
                Err(e) => {
                    if let Some(api) = e.api() {
                        span.record("http.status", api.status);
                    }
                    span.record("error.code", e.code());
                    e
                }
            };
            if error.api().is_some_and(|e| e.status == 401)
                && self.auth.has_helper()
                && !reauthenticated
            {
                // The helper's key may have rotated: ask it again, once.
                reauthenticated = true;
                self.auth.invalidate().await;
                continue;
            }
            if let Provider::Bedrock(b) = &self.provider
                && error.api().is_some_and(|e| e.status == 403)
                && !reauthenticated
            {
                // Temporary credentials may have expired early: load them again, once.
                reauthenticated = true;
                b.invalidate().await;
                continue;
            }
            overloaded = if error.is_overloaded() {
                overloaded + 1
            } else {
                0
            };
            if !error.is_retryable()
                || retry >= self.config.retry.max_retries
                || request.overloaded_limit.is_some_and(|l| overloaded >= l)
            {
                return Err(error);
            }
            let delay = self.config.retry.delay(retry, &error);
            retry += 1;
            crate::telemetry::api_retry(&request.model, self.provider.name());
            tracing::warn!(
                attempt = retry,
                delay_ms = delay.as_millis() as u64,
                "model request failed, retrying: {error}"
            );
            on_update(StreamUpdate::Retrying {
                attempt: retry,
                delay,
                error,
                discarded: streamed,
            });
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = cancel.cancelled() => return Err(LlmError::Cancelled),
            }
        }
    }

    /// Which credential the client sends (never its value).
    pub fn credential_kind(&self) -> Option<String> {
        match &self.provider {
            Provider::Anthropic => self.auth.describe().map(str::to_owned),
            Provider::Vertex(v) => Some(v.credential_source()),
            Provider::Bedrock(b) => Some(b.credential_source()),
        }
    }

    /// Checks that the API answers with these credentials: `GET /v1/models` (free, no tokens);
    /// on Vertex AI, that Google issues an access token. Returns what answered.
    pub async fn ping(&self) -> Result<String, LlmError> {
        match &self.provider {
            Provider::Vertex(v) => {
                return Ok(match v.token().await? {
                    Some(_) => "Google issued an access token".into(),
                    None => "no authentication (the gateway authenticates)".into(),
                });
            }
            Provider::Bedrock(b) => {
                let headers = b
                    .auth_headers(&b.endpoint("ping"), "application/json", b"")
                    .await?;
                return Ok(if headers.is_empty() {
                    "no authentication (the gateway authenticates)".into()
                } else {
                    "AWS credentials loaded and a request signed".into()
                });
            }
            Provider::Anthropic => {}
        }
        let url = self.endpoint.replace("/v1/messages", "/v1/models?limit=1");
        let req = self
            .authorized(self.http.get(url).headers(self.headers.clone()))
            .await?;
        let response = tokio::time::timeout(self.config.connect_timeout * 3, req.send())
            .await
            .map_err(|_| LlmError::Timeout("no answer from the API".into()))?
            .map_err(transport_error)?;
        let status = response.status();
        if status.is_success() {
            return Ok(status.to_string());
        }
        let headers = response.headers().clone();
        let body = response.bytes().await.map_err(transport_error)?;
        Err(LlmError::from_response(status.as_u16(), &headers, &body))
    }

    /// `req` with the credential's header (`x-api-key`, or a bearer token).
    async fn authorized(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<reqwest::RequestBuilder, LlmError> {
        if let Provider::Vertex(v) = &self.provider {
            return Ok(match v.token().await? {
                Some(token) => req.header("authorization", format!("Bearer {token}")),
                None => req,
            });
        }
        Ok(match self.auth.credential().await? {
            Credential::ApiKey(k) => req.header("x-api-key", k.expose()),
            Credential::Bearer(t) => req.header("authorization", format!("Bearer {}", t.expose())),
        })
    }

    /// The models the API offers (`GET /v1/models`, every page; Vertex AI has no such list, and
    /// the built-in catalog stands).
    pub async fn list_models(&self) -> Result<Vec<super::ListedModel>, LlmError> {
        if !matches!(self.provider, Provider::Anthropic) {
            return Ok(Vec::new());
        }
        let base = self
            .endpoint
            .replace("/v1/messages", "/v1/models?limit=1000");
        let mut out = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..20 {
            let url = match &after {
                Some(id) => format!("{base}&after_id={id}"),
                None => base.clone(),
            };
            let req = self
                .authorized(self.http.get(url).headers(self.headers.clone()))
                .await?;
            let response = tokio::time::timeout(self.config.connect_timeout * 6, req.send())
                .await
                .map_err(|_| LlmError::Timeout("no answer from the API".into()))?
                .map_err(transport_error)?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = response.bytes().await.map_err(transport_error)?;
            if !status.is_success() {
                return Err(LlmError::from_response(status.as_u16(), &headers, &body));
            }
            #[derive(serde::Deserialize)]
            struct Page {
                #[serde(default)]
                data: Vec<super::ListedModel>,
                #[serde(default)]
                has_more: bool,
                #[serde(default)]
                last_id: Option<String>,
            }
            let page: Page = serde_json::from_slice(&body)
                .map_err(|e| LlmError::Config(format!("GET /v1/models answered: {e}")))?;
            out.extend(page.data);
            match (page.has_more, page.last_id) {
                (true, Some(last)) => after = Some(last),
                _ => break,
            }
        }
        Ok(out)
    }

    async fn attempt(
        &self,
        url: &str,
        body: &Bytes,
        betas: &str,
        on_update: &mut (dyn FnMut(StreamUpdate) + Send),
        streamed: &mut bool,
    ) -> Result<AssembledMessage, LlmError> {
        let mut req = self
            .http
            .post(url)
            .headers(self.headers.clone())
            .body(body.clone());
        if let Provider::Bedrock(b) = &self.provider {
            // Betas travel in the body; the request is signed as sent.
            for (name, value) in b.auth_headers(url, "application/json", body).await? {
                req = req.header(name, value);
            }
        } else {
            if !betas.is_empty() {
                req = req.header("anthropic-beta", betas);
            }
            req = self.authorized(req).await?;
        }
        let response = req.send().await.map_err(transport_error)?;
        let status = response.status();
        if !status.is_success() {
            let headers = response.headers().clone();
            let body = response.bytes().await.map_err(transport_error)?;
            return Err(LlmError::from_response(status.as_u16(), &headers, &body));
        }
        let bytes = response.bytes_stream().map_err(transport_error);
        let events: Pin<Box<dyn futures::Stream<Item = Result<String, LlmError>> + Send>> =
            match self.provider {
                Provider::Bedrock(_) => Box::pin(decode_event_stream(Box::pin(bytes))),
                _ => Box::pin(decode_stream(bytes)),
            };
        futures::pin_mut!(events);
        let mut acc = Accumulator::new();
        while let Some(data) = events.next().await {
            if let Some(update) = acc.apply(&data?)? {
                *streamed = true;
                on_update(update);
            }
        }
        acc.finish()
    }
}

/// Maps a reqwest failure to our classes, without its URL (which could carry a secret).
fn transport_error(e: reqwest::Error) -> LlmError {
    let e = e.without_url();
    if e.is_timeout() {
        LlmError::Timeout(e.to_string())
    } else {
        LlmError::Connection(error_chain(&e))
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
