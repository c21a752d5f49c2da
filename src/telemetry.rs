//! Optional OpenTelemetry trace export (`[telemetry]`): the tracing spans of
//! a request (`request` at the edge, one `upstream` per upstream attempt, one
//! `tool` per server-side tool call) sent over OTLP/HTTP (protobuf) to a
//! collector. Off unless an endpoint is configured; when off, nothing of it
//! is on the request path.
//!
//! A client's W3C `traceparent` is adopted as the parent of the `request`
//! span, so the proxy's spans join the app's trace. Nothing is propagated to
//! the vendors: the upstream request carries no client header.

use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};

use tracing_opentelemetry::OpenTelemetrySpanExt;

pub use crate::config::telemetry::TelemetryConfig;

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("[telemetry]: {0}")]
    Exporter(String),
}

/// Whether spans are exported (read on the request path, set once at start).
static ENABLED: OnceLock<()> = OnceLock::new();

/// Keeps the exporter alive; dropping it flushes the spans still queued.
pub struct Guard(Option<SdkTracerProvider>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(p) = self.0.take()
            && let Err(e) = p.shutdown()
        {
            eprintln!("modelshim: flushing OpenTelemetry spans failed: {e}");
        }
    }
}

impl Guard {
    pub fn none() -> Self {
        Guard(None)
    }
}

fn env_endpoint() -> bool {
    ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

/// The tracing layer that exports spans, or `None` when no endpoint is set.
pub fn layer<S>(cfg: &TelemetryConfig) -> Result<(Option<impl tracing_subscriber::Layer<S>>, Guard), TelemetryError>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    if cfg.otlp_endpoint.is_none() && !env_endpoint() {
        return Ok((None, Guard::none()));
    }
    if !(0.0..=1.0).contains(&cfg.sample_ratio) {
        return Err(TelemetryError::Exporter(format!("sample_ratio must be within 0..=1, got {}", cfg.sample_ratio)));
    }
    crate::provider::upstream::install_crypto_provider();
    let mut b = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_timeout(Duration::from_secs(10))
        .with_headers(cfg.headers.clone());
    if let Some(base) = &cfg.otlp_endpoint {
        b = b.with_endpoint(format!("{}/v1/traces", base.trim_end_matches('/')));
    }
    let exporter = b.build().map_err(|e| TelemetryError::Exporter(e.to_string()))?;
    let resource = opentelemetry_sdk::Resource::builder().with_service_name(cfg.service_name.clone()).build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(cfg.sample_ratio))))
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("modelshim");
    let _ = ENABLED.set(());
    Ok((Some(tracing_opentelemetry::layer().with_tracer(tracer)), Guard(Some(provider))))
}

/// Makes a client's `traceparent` (W3C) the parent of `span`.
pub fn adopt_parent(span: &tracing::Span, headers: &axum::http::HeaderMap) {
    if ENABLED.get().is_none() || !headers.contains_key("traceparent") {
        return;
    }
    let cx = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    let _ = span.set_parent(cx);
}

struct HeaderExtractor<'a>(&'a axum::http::HeaderMap);

impl opentelemetry::propagation::Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}
