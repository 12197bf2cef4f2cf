//! An OTLP/HTTP receiver for tests: accepts `POST /v1/traces` and `/v1/metrics` (protobuf) and
//! keeps what arrives, decoded with `opentelemetry-proto`.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use std::sync::{Arc, Mutex};

/// What the receiver got.
#[derive(Default)]
pub struct Received {
    /// Every trace export, in arrival order.
    pub traces: Vec<ExportTraceServiceRequest>,
    /// Every metric export, in arrival order.
    pub metrics: Vec<ExportMetricsServiceRequest>,
}

type Shared = Arc<Mutex<Received>>;

/// A running receiver on 127.0.0.1 with its own runtime.
pub struct OtlpReceiver {
    port: u16,
    received: Shared,
    _runtime: tokio::runtime::Runtime,
}

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, Received> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

async fn traces(State(s): State<Shared>, body: Bytes) -> (axum::http::StatusCode, Vec<u8>) {
    match ExportTraceServiceRequest::decode(body) {
        Ok(r) => {
            lock(&s).traces.push(r);
            (axum::http::StatusCode::OK, Vec::new())
        }
        Err(_) => (axum::http::StatusCode::BAD_REQUEST, Vec::new()),
    }
}

async fn metrics(State(s): State<Shared>, body: Bytes) -> (axum::http::StatusCode, Vec<u8>) {
    match ExportMetricsServiceRequest::decode(body) {
        Ok(r) => {
            lock(&s).metrics.push(r);
            (axum::http::StatusCode::OK, Vec::new())
        }
        Err(_) => (axum::http::StatusCode::BAD_REQUEST, Vec::new()),
    }
}

impl OtlpReceiver {
    /// Starts listening on a free port.
    pub fn start() -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let received: Shared = Arc::default();
        let app = Router::new()
            .route("/v1/traces", post(traces))
            .route("/v1/metrics", post(metrics))
            .with_state(received.clone());
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
        let port = listener.local_addr()?.port();
        runtime.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            port,
            received,
            _runtime: runtime,
        })
    }

    /// The base URL (`OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Reads what arrived so far.
    pub fn with<T>(&self, f: impl FnOnce(&Received) -> T) -> T {
        f(&lock(&self.received))
    }
}
