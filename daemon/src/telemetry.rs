//! OpenTelemetry: the daemon's `tracing` spans (RPC calls, turns, API requests, tool calls)
//! exported as traces, and its metrics, both over OTLP when an endpoint is configured. The
//! standard `OTEL_*` variables are honoured (protocol `http/protobuf` or `grpc`, headers,
//! service name, resource attributes, sampler, batch and export intervals).
//!
//! Invariant: exporting never slows a turn: spans go through the SDK's bounded batch queue (a
//! full queue drops spans and counts them), metrics are read on their own interval. Without an
//! endpoint every instrument is a no-op.

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::sync::OnceLock;
use std::time::Duration;
use tether_proto::TokenUsage;

/// The exporters, kept to flush them at exit.
pub struct Telemetry {
    traces: SdkTracerProvider,
    metrics: SdkMeterProvider,
}

/// The OTLP protocol the standard variables ask for (`http/protobuf` unless `grpc`).
fn grpc(signal_var: &str) -> bool {
    std::env::var(signal_var)
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .is_ok_and(|p| p.trim() == "grpc")
}

/// The endpoint for one signal: its own variable wins (the exporter reads it); else the
/// configured base, with `/v1/<signal>` for HTTP.
fn endpoint(base: &str, signal: &str, grpc: bool) -> Option<String> {
    let own = format!("OTEL_EXPORTER_OTLP_{}_ENDPOINT", signal.to_uppercase());
    if std::env::var_os(&own).is_some() {
        return None;
    }
    let base = base.trim_end_matches('/');
    Some(if grpc {
        base.to_owned()
    } else {
        format!("{base}/v1/{signal}")
    })
}

impl Telemetry {
    /// Sets up export when `telemetry.enabled` and an endpoint is configured (also through
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`). Must run inside the Tokio runtime (gRPC needs it).
    /// Returns the tracer for the `tracing` layer.
    pub fn init(
        enabled: bool,
        base_endpoint: &str,
    ) -> Result<Option<(Self, opentelemetry_sdk::trace::Tracer)>, String> {
        let base = base_endpoint.to_owned();
        let own_traces = std::env::var_os("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some();
        if !enabled || (base.is_empty() && !own_traces) {
            return Ok(None);
        }
        let mut resource = Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("tetherd");
        }
        let resource = resource
            .with_attributes([KeyValue::new("service.version", env!("CARGO_PKG_VERSION"))])
            .build();

        let traces_grpc = grpc("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL");
        let span_exporter = if traces_grpc {
            let mut b = opentelemetry_otlp::SpanExporter::builder().with_tonic();
            if let Some(e) = endpoint(&base, "traces", true) {
                b = b.with_endpoint(e);
            }
            b.build()
        } else {
            let mut b = opentelemetry_otlp::SpanExporter::builder().with_http();
            if let Some(e) = endpoint(&base, "traces", false) {
                b = b.with_endpoint(e);
            }
            b.build()
        }
        .map_err(|e| format!("cannot set up the OTLP trace exporter: {e}"))?;
        let traces = SdkTracerProvider::builder()
            .with_batch_exporter(span_exporter)
            .with_resource(resource.clone())
            .build();

        let metrics_grpc = grpc("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL");
        let metric_exporter = if metrics_grpc {
            let mut b = opentelemetry_otlp::MetricExporter::builder().with_tonic();
            if let Some(e) = endpoint(&base, "metrics", true) {
                b = b.with_endpoint(e);
            }
            b.build()
        } else {
            let mut b = opentelemetry_otlp::MetricExporter::builder().with_http();
            if let Some(e) = endpoint(&base, "metrics", false) {
                b = b.with_endpoint(e);
            }
            b.build()
        }
        .map_err(|e| format!("cannot set up the OTLP metric exporter: {e}"))?;
        let metrics = SdkMeterProvider::builder()
            .with_periodic_exporter(metric_exporter)
            .with_resource(resource)
            .build();
        opentelemetry::global::set_meter_provider(metrics.clone());
        use opentelemetry::trace::TracerProvider as _;
        let tracer = traces.tracer("tetherd");
        Ok(Some((Self { traces, metrics }, tracer)))
    }

    /// Exports what is still queued (bounded by a timeout).
    pub fn shutdown(self) {
        if let Err(e) = self.traces.shutdown_with_timeout(Duration::from_secs(5)) {
            tracing::warn!("could not flush traces: {e}");
        }
        if let Err(e) = self.metrics.shutdown() {
            tracing::warn!("could not flush metrics: {e}");
        }
    }
}

/// The daemon's instruments.
struct Instruments {
    sessions: Counter<u64>,
    turns: Counter<u64>,
    tokens: Counter<u64>,
    cost: Counter<f64>,
    tool_duration: Histogram<f64>,
    retries: Counter<u64>,
    permissions: Counter<u64>,
}

/// Created on first use, after `init` installed the meter provider (or none: no-ops).
fn instruments() -> &'static Instruments {
    static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();
    INSTRUMENTS.get_or_init(|| {
        let meter = opentelemetry::global::meter("tetherd");
        Instruments {
            sessions: meter
                .u64_counter("tether.session.count")
                .with_description("Sessions created")
                .build(),
            turns: meter
                .u64_counter("tether.turn.count")
                .with_description("Turns ended")
                .build(),
            tokens: meter
                .u64_counter("tether.token.usage")
                .with_description("Tokens used, by type and model")
                .with_unit("tokens")
                .build(),
            cost: meter
                .f64_counter("tether.cost.usage")
                .with_description("Cost of model requests, by model")
                .with_unit("USD")
                .build(),
            tool_duration: meter
                .f64_histogram("tether.tool.duration")
                .with_description("Tool call durations, by tool and outcome")
                .with_unit("ms")
                .build(),
            retries: meter
                .u64_counter("tether.api.retry.count")
                .with_description("Retried model requests")
                .build(),
            permissions: meter
                .u64_counter("tether.permission.decision")
                .with_description("Permission decisions, by decision and source")
                .build(),
        }
    })
}

/// A session was created.
/// The span exporter, as [`Telemetry::init`] returns it (callers never name opentelemetry).
pub type Tracer = opentelemetry_sdk::trace::Tracer;

/// The `tracing` layer that exports the daemon's info-level spans to `tracer`, whatever the
/// log level.
pub fn span_layer<S>(tracer: Tracer) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use tracing_subscriber::Layer;
    let spans = tracing_subscriber::EnvFilter::new("tether_daemon=info,tetherd=info");
    tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(spans)
}

pub fn session_created() {
    instruments().sessions.add(1, &[]);
}

/// A turn ended having used `usage` at `cost` (USD; `None` when the price is unknown).
pub fn turn_ended(model: &str, usage: &TokenUsage, cost: Option<f64>) {
    let i = instruments();
    let model = KeyValue::new("model", model.to_owned());
    i.turns.add(1, std::slice::from_ref(&model));
    for (kind, n) in [
        ("input", usage.input_tokens),
        ("output", usage.output_tokens),
        ("cacheRead", usage.cache_read_input_tokens),
        ("cacheCreation", usage.cache_creation_input_tokens),
    ] {
        if n > 0 {
            i.tokens
                .add(n, &[KeyValue::new("type", kind), model.clone()]);
        }
    }
    if let Some(c) = cost.filter(|c| *c > 0.0) {
        i.cost.add(c, &[model]);
    }
}

/// A tool call finished (`outcome`: ok or error).
pub fn tool_finished(tool: &str, duration: Duration, outcome: &'static str) {
    instruments().tool_duration.record(
        duration.as_secs_f64() * 1000.0,
        &[
            KeyValue::new("tool", tool.to_owned()),
            KeyValue::new("outcome", outcome),
        ],
    );
}

/// A model request to `provider` is retried.
pub fn api_retry(model: &str, provider: &'static str) {
    instruments().retries.add(
        1,
        &[
            KeyValue::new("model", model.to_owned()),
            KeyValue::new("provider", provider),
        ],
    );
}

/// A permission decision (`source`: user, rule, hook, mode or policy).
pub fn permission_decision(decision: &str, source: &'static str) {
    instruments().permissions.add(
        1,
        &[
            KeyValue::new("decision", decision.to_owned()),
            KeyValue::new("source", source),
        ],
    );
}
