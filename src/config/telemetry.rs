//! The `[telemetry]` section (OpenTelemetry export, see `telemetry`).

use serde::Deserialize;

/// The `[telemetry]` section.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP base URL (`http://collector:4318`); spans
    /// go to `<endpoint>/v1/traces`. Without it, `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) from the environment is used;
    /// with neither, nothing is exported.
    #[serde(default)]
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the exported spans.
    #[serde(default = "d_service")]
    pub service_name: String,
    /// Fraction of new traces sampled (a sampled client parent is followed).
    #[serde(default = "d_ratio")]
    pub sample_ratio: f64,
    /// Extra headers for the collector (e.g. an auth token).
    #[serde(default)]
    pub headers: std::collections::HashMap<String, String>,
}

fn d_service() -> String {
    "modelshim".into()
}
fn d_ratio() -> f64 {
    1.0
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            otlp_endpoint: None,
            service_name: d_service(),
            sample_ratio: d_ratio(),
            headers: Default::default(),
        }
    }
}
