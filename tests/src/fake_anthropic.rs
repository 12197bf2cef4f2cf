//! A scripted fake of the Anthropic Messages API: a real HTTP server on `127.0.0.1` that answers
//! from a script, injects faults, checks every request against the API's rules and records it.
//!
//! A script is an ordered list of responses (`responses`, served one per request) and `rules`
//! (served whenever a request matches, before the list). Each step is a body — an SSE file, raw
//! SSE, a list of events, or a `text` shorthand for a complete reply — or an HTTP error, plus
//! faults: a mid-stream `error` event, a cut connection, a stall, slow chunks. One chunk is one
//! SSE event.

pub mod bedrock;
pub mod cache;
mod script;
mod validate;
pub mod vertex;

pub use script::{MidStreamError, NOW_US, Rule, Script, Step};
pub use validate::validate;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;
use futures::StreamExt;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// `/v1/messages` or `/v1/messages/count_tokens`.
    pub path: String,
    /// Headers, names lowercase.
    pub headers: BTreeMap<String, String>,
    /// The JSON body (`Null` if it was not JSON).
    pub body: Value,
    /// Why validation rejected it, if it did.
    pub rejected: Option<String>,
}

#[derive(Default)]
struct Inner {
    responses: std::collections::VecDeque<Step>,
    rules: Vec<(Rule, Option<regex::Regex>)>,
    recorded: Vec<Recorded>,
    /// signature → thinking text, for every thinking block served.
    signatures: HashMap<String, String>,
    served: u64,
    /// The simulated prompt cache, when the script asks for one.
    cache: Option<cache::PromptCache>,
    /// The fake's clock: real time since start plus what tests skipped ahead.
    started: Option<std::time::Instant>,
    clock_offset: std::time::Duration,
}

type Shared = Arc<Mutex<Inner>>;

fn lock(state: &Shared) -> std::sync::MutexGuard<'_, Inner> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running fake server; stops when dropped.
pub struct FakeAnthropic {
    addr: SocketAddr,
    state: Shared,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl FakeAnthropic {
    /// Starts a server on `127.0.0.1:port` (0 = any free port) with `script`.
    pub async fn start_on(script: Script, port: u16) -> anyhow::Result<Self> {
        let mut inner = Inner {
            cache: script.simulate_cache.then(cache::PromptCache::default),
            ..Inner::default()
        };
        for step in script.responses {
            inner.responses.push_back(step);
        }
        for rule in script.rules {
            let re = match &rule.last_user_matches {
                Some(r) => Some(regex::Regex::new(r)?),
                None => None,
            };
            inner.rules.push((rule, re));
        }
        let state: Shared = Arc::new(Mutex::new(inner));
        let app = Router::new()
            .route("/v1/messages", post(messages))
            .route("/v1/messages/count_tokens", post(count_tokens))
            .route("/v1/models", axum::routing::get(models))
            .route(
                "/v1/projects/{project}/locations/{region}/publishers/anthropic/models/{model}",
                post(vertex::stream_raw_predict),
            )
            .route("/token", post(vertex::token))
            .route(
                "/model/{model}/invoke-with-response-stream",
                post(bedrock::invoke_with_response_stream),
            )
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(Self {
            addr,
            state,
            _stop: stop,
        })
    }

    /// Starts a server on a free port.
    pub async fn start(script: Script) -> anyhow::Result<Self> {
        Self::start_on(script, 0).await
    }

    /// The base URL (`ANTHROPIC_BASE_URL`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Moves the fake's clock ahead, as if `by` passed (cache entries expire by it).
    pub fn advance(&self, by: std::time::Duration) {
        lock(&self.state).clock_offset += by;
    }

    /// Appends a response to the script.
    pub fn push(&self, step: Step) {
        lock(&self.state).responses.push_back(step);
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.state).recorded.clone()
    }

    /// Every request received since the last call, removed from the record (a long run keeps
    /// its memory flat by taking them as it goes).
    pub fn take_requests(&self) -> Vec<Recorded> {
        std::mem::take(&mut lock(&self.state).recorded)
    }

    /// The `/v1/messages` requests received so far.
    pub fn message_requests(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.path == "/v1/messages")
            .collect()
    }
}

fn header_map(headers: &HeaderMap) -> BTreeMap<String, String> {
    headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                v.to_str().unwrap_or("<binary>").to_owned(),
            )
        })
        .collect()
}

/// The API's error envelope.
pub fn error_body(error_type: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": error_type, "message": message}, "request_id": "req_fake"})
}

fn json_response(status: u16, body: &Value, headers: &BTreeMap<String, String>) -> Response {
    let mut builder = Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", "application/json")
        .header("request-id", "req_fake");
    for (k, v) in headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    builder
        .body(Body::from(body.to_string()))
        .unwrap_or_else(|_| Response::new(Body::from("fake-anthropic: bad response")))
}

async fn count_tokens(State(state): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    lock(&state).recorded.push(Recorded {
        path: "/v1/messages/count_tokens".into(),
        headers: header_map(&headers),
        body: value.clone(),
        rejected: None,
    });
    let estimate = value.to_string().len() / 4;
    json_response(200, &json!({"input_tokens": estimate}), &BTreeMap::new())
}

/// `GET /v1/models`: one page with two models, one newer than any catalog; 401 without a credential, like the API.
async fn models(headers: HeaderMap) -> Response {
    let hmap = header_map(&headers);
    let has_key = ["x-api-key", "authorization"]
        .iter()
        .any(|h| hmap.get(*h).is_some_and(|v| !v.is_empty()));
    if !has_key {
        return json_response(
            401,
            &error_body("authentication_error", "x-api-key header is required"),
            &BTreeMap::new(),
        );
    }
    json_response(
        200,
        &json!({"data": [
                {"type": "model", "id": "claude-sonnet-5-5", "display_name": "Claude Sonnet 5.5", "created_at": "2026-09-29T00:00:00Z", "max_input_tokens": 1_000_000, "max_tokens": 128_000},
                // A model newer than any catalog: clients learn it from this list.
                {"type": "model", "id": "claude-nova-1", "display_name": "Claude Nova 1", "created_at": "2026-12-01T00:00:00Z", "max_input_tokens": 2_000_000, "max_tokens": 100_000}
            ],
            "has_more": false, "first_id": "claude-sonnet-5-5", "last_id": "claude-nova-1"}),
        &BTreeMap::new(),
    )
}

async fn messages(State(state): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let hmap = header_map(&headers);
    let parsed: Result<Value, _> = serde_json::from_slice(&body);
    let as_sent = parsed.as_ref().cloned().unwrap_or(Value::Null);
    let parsed = parsed.map_err(|e| format!("request body is not valid JSON: {e}"));
    answer(&state, "/v1/messages", hmap, parsed, as_sent, Framing::Sse)
}

/// Records a request a provider's own rules refused, and answers it with `status`.
fn refuse(
    state: &Shared,
    path: String,
    headers: BTreeMap<String, String>,
    body: Value,
    status: u16,
    message: String,
) -> Response {
    lock(state).recorded.push(Recorded {
        path,
        headers,
        body,
        rejected: Some(message.clone()),
    });
    let kind = match status {
        401 => "authentication_error",
        403 => "permission_error",
        _ => "invalid_request_error",
    };
    json_response(status, &error_body(kind, &message), &BTreeMap::new())
}

/// How a streamed reply is framed on the wire.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// Server-sent events (the Anthropic API, Vertex AI).
    Sse,
    /// AWS event-stream messages whose `chunk` events carry the same events (Bedrock).
    EventStream,
}

/// Validates a Messages request (`parsed`, as the Messages API takes it), records it as it was
/// sent at `path`, and streams the scripted reply.
fn answer(
    state: &Shared,
    path: &str,
    hmap: BTreeMap<String, String>,
    parsed: Result<Value, String>,
    as_sent: Value,
    framing: Framing,
) -> Response {
    let (step, rejection) = {
        let mut inner = lock(state);
        let verdict = match &parsed {
            Ok(v) => validate(&hmap, v, &inner.signatures),
            Err(e) => Err((400, e.clone())),
        };
        let body_value = parsed.as_ref().cloned().unwrap_or(Value::Null);
        let step = match &verdict {
            Ok(()) => pick(&mut inner, &body_value),
            Err(_) => None,
        };
        inner.recorded.push(Recorded {
            path: path.into(),
            headers: hmap,
            body: as_sent,
            rejected: verdict.as_ref().err().map(|(_, m)| m.clone()),
        });
        (step, verdict.err())
    };
    if let Some((status, message)) = rejection {
        let error_type = if status == 401 {
            "authentication_error"
        } else {
            "invalid_request_error"
        };
        return json_response(status, &error_body(error_type, &message), &BTreeMap::new());
    }
    let request = parsed.unwrap_or(Value::Null);
    let Some(step) = step else {
        return json_response(
            400,
            &error_body(
                "invalid_request_error",
                "fake-anthropic: the script has no response left for this request",
            ),
            &BTreeMap::new(),
        );
    };
    serve_step(state, step, &request, framing)
}

/// The first matching rule, else the next scripted response.
fn pick(inner: &mut Inner, request: &Value) -> Option<Step> {
    let last_user = validate::last_user_text(request);
    let has_tool_result = validate::last_user_has_tool_result(request);
    for (rule, re) in inner.rules.iter_mut() {
        if rule.times == Some(0) {
            continue;
        }
        let text_ok = re.as_ref().is_none_or(|re| re.is_match(&last_user));
        let tool_ok = rule
            .has_tool_result
            .is_none_or(|want| want == has_tool_result);
        if text_ok && tool_ok {
            if let Some(t) = rule.times.as_mut() {
                *t -= 1;
            }
            return Some(rule.step.clone());
        }
    }
    inner.responses.pop_front()
}

fn serve_step(state: &Shared, step: Step, request: &Value, framing: Framing) -> Response {
    if let Some(status) = step.status {
        let body = step.body.clone().unwrap_or_else(|| {
            error_body(
                "api_error",
                &format!("fake-anthropic: scripted HTTP {status}"),
            )
        });
        return json_response(status, &body, &step.headers);
    }
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("claude-fake");
    let serial = {
        let mut inner = lock(state);
        inner.served += 1;
        inner.served
    };
    let billed = {
        let mut inner = lock(state);
        let now = inner
            .started
            .get_or_insert_with(std::time::Instant::now)
            .elapsed()
            + inner.clock_offset;
        inner
            .cache
            .as_mut()
            .map(|c| c.account(request, now).to_json())
    };
    let events = match step.events(model, serial, billed.as_ref()) {
        Ok(e) => e,
        Err(e) => {
            return json_response(
                500,
                &error_body("api_error", &format!("fake-anthropic: {e}")),
                &BTreeMap::new(),
            );
        }
    };
    {
        let mut inner = lock(state);
        for (sig, text) in script::thinking_signatures(&events) {
            inner.signatures.insert(sig, text);
        }
    }
    let streaming = request
        .get("stream")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if !streaming {
        return match script::assemble(&events) {
            Some(message) => json_response(200, &message, &step.headers),
            None => json_response(
                500,
                &error_body("api_error", "fake-anthropic: cannot assemble"),
                &BTreeMap::new(),
            ),
        };
    }
    let mut chunks: Vec<Bytes> = events.iter().map(|e| Bytes::from(e.clone())).collect();
    if let Some(fault) = &step.mid_stream_error {
        let (at, error_type) = (fault.after_chunk.min(chunks.len()), &fault.error_type);
        chunks.truncate(at);
        let err = json!({"type": "error", "error": {"type": error_type, "message": "fake-anthropic: scripted mid-stream error"}});
        chunks.push(Bytes::from(format!("event: error\ndata: {err}\n\n")));
    }
    if framing == Framing::EventStream {
        chunks = chunks.iter().map(bedrock::frame).collect();
    }
    let cut = step.cut_after_chunk;
    let stall = step.stall_after_chunk;
    let delay = step.chunk_delay_ms.map(Duration::from_millis);
    let burst = step.chunks_per_delay.unwrap_or(1).max(1);
    let stamp = step.stamp_time;
    let stream =
        futures::stream::iter(chunks.into_iter().enumerate()).then(move |(i, chunk)| async move {
            if let Some(d) = delay.filter(|_| i % burst == 0) {
                tokio::time::sleep(d).await;
            }
            let chunk = if stamp { stamp_now(chunk) } else { chunk };
            if stall.is_some_and(|k| i >= k) {
                futures::future::pending::<()>().await;
            }
            if cut.is_some_and(|k| i >= k) {
                return Err(std::io::Error::other("fake-anthropic: scripted cut"));
            }
            Ok(chunk)
        });
    // Stop after the first error so the connection is aborted there.
    let stream = stream.scan(false, |failed, item| {
        let out = if *failed { None } else { Some(item) };
        if matches!(out, Some(Err(_))) {
            *failed = true;
        }
        futures::future::ready(out)
    });
    let mut builder = Response::builder()
        .status(StatusCode::OK)
        .header(
            "content-type",
            match framing {
                Framing::Sse => "text/event-stream",
                Framing::EventStream => "application/vnd.amazon.eventstream",
            },
        )
        .header("request-id", "req_fake");
    for (k, v) in &step.headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    builder
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| Response::new(Body::from("fake-anthropic: bad response")))
}

/// `chunk` with [`script::NOW_US`] replaced by the time now, in microseconds since the epoch.
fn stamp_now(chunk: Bytes) -> Bytes {
    let Ok(text) = std::str::from_utf8(&chunk) else {
        return chunk;
    };
    if !text.contains(script::NOW_US) {
        return chunk;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    Bytes::from(text.replace(script::NOW_US, &now.to_string()))
}
