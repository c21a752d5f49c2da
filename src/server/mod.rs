//! The HTTP surface: `app(state)` builds the router, so tests drive exactly
//! what `modelshim serve` runs.

pub(crate) mod chat;
mod models;
mod passthrough;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};

use crate::config::{Config, ConfigError};
use crate::provider::record::Recorder;
use crate::provider::upstream::Upstream;
use crate::provider::{Profile, Providers};
use crate::state::{MemoryStore, StateStore};

/// Everything a request handler needs, built once at startup.
pub struct AppState {
    pub providers: Providers,
    pub upstream: Upstream,
    /// Conversation state (reasoning to replay, hidden tool exchanges).
    pub store: Arc<dyn StateStore>,
    /// How long conversation state is kept.
    pub state_ttl: Duration,
    /// Server-side tools; `None` keeps every request on the plain path.
    pub tools: Option<Arc<crate::tools::Registry>>,
    ready: AtomicBool,
}

pub type Shared = Arc<AppState>;

impl AppState {
    /// Resolves a config against the known profiles.
    pub fn new(config: &Config, profiles: &std::collections::BTreeMap<String, Profile>) -> Result<Shared, ConfigError> {
        Self::build(config, profiles, None)
    }

    /// Like [`AppState::new`]; with `record` every upstream exchange is also
    /// written into that folder (`serve --record`), every provider's key
    /// redacted.
    pub fn build(
        config: &Config,
        profiles: &std::collections::BTreeMap<String, Profile>,
        record: Option<&Path>,
    ) -> Result<Shared, ConfigError> {
        let providers = Providers::resolve(config, profiles)?;
        let mut upstream = Upstream::new(Duration::from_secs_f64(config.upstream.connect_timeout_secs))
            .map_err(ConfigError::Invalid)?;
        if let Some(dir) = record {
            let secrets = providers.iter().filter_map(|p| p.api_key().map(str::to_string));
            let headers = providers.iter().filter_map(|p| p.profile.auth_header.clone());
            let recorder = Recorder::new(dir, secrets.collect::<Vec<_>>(), headers.collect::<Vec<_>>())
                .map_err(|e| ConfigError::Invalid(e.to_string()))?;
            upstream = upstream.with_recorder(recorder);
        }
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new(config.state.max_entries));
        let tools = crate::tools::Registry::new(config.tools.as_ref(), config.mcp.as_ref())
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        Ok(Arc::new(AppState {
            providers,
            upstream,
            store,
            state_ttl: config.state.ttl(),
            tools,
            ready: AtomicBool::new(true),
        }))
    }

    /// Marks the server as not ready (during shutdown).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }
}

/// The router.
pub fn app(state: Shared) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat::completions))
        .route("/v1/models", get(models::list))
        .route("/v1/embeddings", post(passthrough::embeddings))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .fallback(not_found)
        .with_state(state)
}

async fn readyz(State(s): State<Shared>) -> impl IntoResponse {
    if s.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down")
    }
}

async fn not_found(uri: axum::http::Uri) -> impl IntoResponse {
    let e = crate::error::ErrorObject::new("invalid_request_error", format!("Unknown request URL: {uri}"))
        .with_code("unknown_url");
    (StatusCode::NOT_FOUND, axum::Json(e.to_body()))
}
