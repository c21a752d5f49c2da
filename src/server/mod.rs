//! The HTTP surface: `app(state)` builds the service, so tests drive exactly
//! what `modelshim serve` runs.

pub mod auth;
pub mod console;
pub mod edge;
mod error;
pub mod limits;
pub mod models;
pub mod origin;
mod passthrough;
pub mod replay;
pub mod shutdown;

use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Extension, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::config::{Config, ConfigError};
use crate::core::Core;
use crate::fronts::{chat, messages, responses};
use crate::provider::record::Recorder;
use crate::provider::upstream::Upstream;
use crate::provider::{Profile, Providers};
use crate::state::{MemoryStore, StateStore};

/// Everything a request handler needs, built once at startup: the core
/// (what every request's way through the proxy needs) and the edge's own.
pub struct AppState {
    pub core: Arc<Core>,
    /// Auth, limits and shutdown handles of the edge middleware.
    pub edge: edge::Edge,
    /// Every provider key and proxy key of this state (also added to the
    /// process-wide redactor every exit uses, [`crate::redact`]).
    pub redactor: Arc<crate::redact::Redactor>,
    /// The upstreams' own model lists, for providers that name no models.
    pub discovery: models::Discovery,
    /// The live console (`[console] enabled`): its recorder and admin key.
    pub console: Option<console::Site>,
    ready: AtomicBool,
}

impl std::ops::Deref for AppState {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
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
        let mut upstream = Upstream::new(limits::secs(config.upstream.connect_timeout_secs))
            .map_err(ConfigError::Invalid)?
            .with_max_answer_bytes(config.limits.max_answer_bytes);
        // Every provider key and proxy key, redacted wherever text leaves
        // the process (crate::redact).
        let mut secrets: Vec<String> = providers.iter().flat_map(|p| p.keys.all().iter().cloned()).collect();
        secrets.extend(auth::raw_keys(config.auth.as_ref()));
        secrets.extend(crate::state::sealed::Keyring::secrets_in_env(&config.responses.reasoning_keys_env));
        secrets.extend(crate::state::redis_secrets(&config.state));
        let console = console::Site::new(&config.console, &mut secrets);
        let redactor = crate::redact::install(secrets);
        if let Some(dir) = record {
            let headers = providers.iter().filter_map(|p| p.profile.auth_header.clone());
            let recorder = Recorder::new(dir, redactor.clone(), headers.collect::<Vec<_>>())
                .map_err(|e| ConfigError::Invalid(e.to_string()))?;
            upstream = upstream.with_recorder(recorder);
        }
        let store: Arc<dyn StateStore> = if config.state.uses_redis() {
            let store = crate::state::RedisStore::from_config(&config.state);
            Arc::new(store.map_err(|e| ConfigError::Invalid(e.to_string()))?)
        } else {
            Arc::new(MemoryStore::bounded(config.state.max_entries, config.state.max_bytes))
        };
        let auth = auth::Auth::new(config.auth.as_ref(), config.limits.max_concurrent_per_key)
            .map_err(ConfigError::Invalid)?;
        crate::metrics::init();
        let skills = config.skills.as_ref().filter(|c| c.enabled).map(|c| {
            let skills = crate::skills::Skills::load(c);
            skills.watch();
            skills
        });
        let tools = crate::tools::Registry::new(config.tools.as_ref(), config.mcp.as_ref(), skills)
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        let discovery = models::Discovery::new(&providers);
        let sealer = crate::state::sealed::Keyring::from_env(&config.responses.reasoning_keys_env)
            .map_err(ConfigError::Invalid)?;
        if !sealer.shared {
            tracing::debug!(
                "no reasoning keys in {}: encrypted reasoning uses a random key of this process",
                config.responses.reasoning_keys_env
            );
        }
        if let Some(b) = &config.vision_bridge {
            let routes = providers.routes(&b.model);
            if !routes.iter().any(|r| r.provider.sees(&r.model) != Some(false)) {
                return Err(ConfigError::Invalid(format!(
                    "[vision_bridge] model {:?} {}: name a provider/model or alias that takes images (docs/vision.md)",
                    b.model,
                    if routes.is_empty() { "is not routed" } else { "cannot see images" }
                )));
            }
        }
        let core = Core {
            providers,
            upstream,
            store,
            state_ttl: config.state.ttl(),
            tools,
            limits: config.limits.clone(),
            responses: config.responses.clone(),
            sealer: Arc::new(sealer),
            vision_bridge: config.vision_bridge.clone(),
        };
        let core = Arc::new(core);
        Ok(Arc::new(AppState {
            core: core.clone(),
            edge: edge::Edge::new(
                auth,
                config.limits.clone(),
                crate::spend::Ledger::new(core.store.clone(), config.auth.as_ref().and_then(|a| a.currency.as_deref())),
                origin::Browser::new(&config.allowed_origins, &config.allowed_hosts, config.listen.as_deref()),
            ),
            redactor,
            discovery,
            console,
            ready: AtomicBool::new(true),
        }))
    }

    /// Marks the server as (not) ready, e.g. during shutdown; returns
    /// whether that changed it.
    pub fn set_ready(&self, ready: bool) -> bool {
        self.ready.swap(ready, Ordering::Relaxed) != ready
    }
}

/// What the server serves: every route behind the edge (auth, limits,
/// request id, metrics; see [`edge`]).
pub fn app(state: Shared) -> App {
    App { router: router(state.clone()), state }
}

/// The service `modelshim serve` runs. The hot route, `POST
/// /v1/chat/completions`, goes through the edge straight to its handler;
/// everything else through the axum router, behind the same edge. The
/// router's per-request machinery (a clone of the route's boxed service,
/// boxed futures per layer, request extensions) is a real share of a
/// proxied request's work, so the route nearly all traffic takes skips it.
#[derive(Clone)]
pub struct App {
    state: Shared,
    router: Router,
}

pub(crate) type HotFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response, Infallible>> + Send>>;

impl<B> tower_service::Service<axum::http::Request<B>> for App
where
    B: http_body::Body<Data = axum::body::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = futures_util::future::Either<HotFuture, axum::routing::future::RouteFuture<Infallible>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: axum::http::Request<B>) -> Self::Future {
        use futures_util::future::Either;
        if is_hot(&req) {
            return Either::Left(self.hot(req.map(axum::body::Body::new)));
        }
        Either::Right(tower_service::Service::call(&mut self.router, req))
    }
}

impl App {
    /// The hot route through the edge to its handler, past the router.
    fn hot(&self, req: axum::extract::Request) -> HotFuture {
        let s = self.state.clone();
        Box::pin(async move {
            Ok(edge::around(s.clone(), req, |req, ctx| {
                chat::direct(s.core.clone(), ctx.unwrap_or_else(edge::RequestCtx::detached), req)
            })
            .await)
        })
    }
}

/// The chat route, served past the router (see [`App`]).
fn is_hot<B>(req: &axum::http::Request<B>) -> bool {
    req.method() == axum::http::Method::POST && req.uri().path() == "/v1/chat/completions"
}

/// hyper's side of [`App`], what `modelshim serve` gives hyper. hyper keeps
/// the future of a connection's request in flight in a box made once per
/// connection and sized for this type: a boxed future makes it 16 bytes,
/// where hyper-util's tower adapter kept the request there (320 bytes in
/// every open connection). The hot route's future is boxed already; the
/// router's is boxed here.
impl hyper::service::Service<axum::http::Request<hyper::body::Incoming>> for App {
    type Response = Response;
    type Error = Infallible;
    type Future = HotFuture;

    fn call(&self, req: axum::http::Request<hyper::body::Incoming>) -> HotFuture {
        if is_hot(&req) {
            return self.hot(req.map(axum::body::Body::new));
        }
        Box::pin(tower_service::Service::call(&mut self.router.clone(), req))
    }
}

/// For `axum::serve(listener, app(state))` (the tests, the replay servers'
/// style): every connection gets a clone.
impl<L: axum::serve::Listener> tower_service::Service<axum::serve::IncomingStream<'_, L>> for App {
    type Response = App;
    type Error = Infallible;
    type Future = std::future::Ready<Result<App, Infallible>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: axum::serve::IncomingStream<'_, L>) -> Self::Future {
        std::future::ready(Ok(self.clone()))
    }
}

/// The router behind the edge middleware.
fn router(state: Shared) -> Router {
    // The edge reads the body within its own limit and answers 413 in
    // OpenAI's shape; the extractor's limit is raised to match.
    let body_limit = DefaultBodyLimit::max(state.edge.limits.max_body_bytes);
    // The fronts know the core only.
    let fronts = Router::new()
        .route("/v1/chat/completions", post(chat::completions))
        .route("/v1/responses", post(responses::create))
        .route("/v1/responses/compact", post(responses::compact))
        .route("/v1/responses/{id}", get(responses::retrieve).delete(responses::delete))
        .route("/v1/responses/{id}/input_items", get(responses::input_items))
        .route("/v1/messages", post(messages::create))
        .route("/v1/messages/count_tokens", post(messages::count_tokens))
        .with_state(state.core.clone());
    Router::new()
        .merge(fronts)
        .route("/v1/models", get(models::list))
        // Ids contain `/` (`deepseek/deepseek-chat`): the rest of the path.
        .route("/v1/models/{*id}", get(models::retrieve))
        .route("/v1/embeddings", post(passthrough::embeddings))
        .route("/v1/usage", get(usage))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .merge(console::routes())
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(state.clone(), edge::guard))
        .layer(body_limit)
        .with_state(state)
}

async fn metrics() -> impl IntoResponse {
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], crate::metrics::render())
}

/// `GET /v1/usage`: the calling key's spend and budgets (docs/spend.md).
async fn usage(State(s): State<Shared>, Extension(ctx): Extension<Arc<edge::RequestCtx>>) -> Response {
    let key = ctx.key.clone();
    let name = key.as_deref().unwrap_or(edge::ANONYMOUS);
    let budget = key.as_deref().and_then(|k| s.edge.auth.named(k)).map(|k| k.budget).unwrap_or_default();
    let mut report = s.edge.ledger.report(name, &budget).await;
    // The prompt-cache hit share of this key per model, on this replica.
    let cache: Vec<_> = crate::metrics::cache_hits()
        .into_iter()
        .filter(|c| c.key == name)
        .map(|c| {
            serde_json::json!({"provider": c.provider, "model": c.model, "input_tokens": c.input_tokens,
                               "cached_input_tokens": c.cached_input_tokens, "hit_share": c.hit_share})
        })
        .collect();
    report["cache"] = serde_json::Value::Array(cache);
    axum::Json(report).into_response()
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
