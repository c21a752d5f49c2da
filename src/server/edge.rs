//! The edge middleware, around every route: request id (`x-request-id` in
//! and out, and the tracing span), proxy-key auth, per-key rate and
//! concurrency limits, body size and request shape limits, and the response
//! body guard that records metrics, holds the concurrency permits and the
//! shutdown tracker token until the last byte of a stream, and ends open
//! streams in-band when the shutdown grace period is over.
//!
//! Handlers learn nothing new: what they need from the edge is the request's
//! observer ([`RequestCtx`]), handed to the hot route's handler and put in
//! the request's extensions for the router's.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::{Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tracing::Instrument;

use super::Shared;
use super::auth::{Auth, AuthError};
use super::limits::{LimitsConfig, Peek, PeekError};
use super::origin::{Browser, Verdict};
pub use crate::core::context::{RequestCtx, Served};
use crate::error::ErrorObject;
use crate::spend::ledger::{DEFAULT_RESERVE_OUTPUT, Hold};
use crate::spend::{Ledger, Refusal, Tokens};

/// Edge settings and shutdown handles, built once.
pub struct Edge {
    pub auth: Auth,
    pub limits: LimitsConfig,
    global: Option<Arc<Semaphore>>,
    /// Cancelled when the shutdown grace period is over.
    pub cut: CancellationToken,
    /// Every request in flight (streams until their last byte).
    pub tracker: TaskTracker,
    /// Open connections per client address (`serve`).
    pub peers: Arc<super::shutdown::Peers>,
    /// Every key's spend today and this month (budgets, `GET /v1/usage`).
    pub ledger: Arc<Ledger>,
    /// Which web pages may call the API, which `Host` is answered.
    pub browser: Browser,
}

impl Edge {
    pub fn new(auth: Auth, limits: LimitsConfig, ledger: Ledger, browser: Browser) -> Self {
        let global = limits.max_concurrent.filter(|n| *n > 0).map(|n| Arc::new(Semaphore::new(n as usize)));
        let peers = super::shutdown::Peers::new(limits.max_connections_per_ip, limits.cap_loopback_connections);
        let ledger = Arc::new(ledger);
        Edge {
            auth,
            limits,
            global,
            cut: CancellationToken::new(),
            tracker: TaskTracker::new(),
            peers,
            ledger,
            browser,
        }
    }
}

/// The spend of a request with no proxy key (auth off) is counted under
/// this name.
pub const ANONYMOUS: &str = "anonymous";

/// The 429 of a key whose budget is used up, OpenAI's `insufficient_quota`.
fn over_budget(r: &Refusal) -> Response {
    crate::metrics::refused("budget");
    let mut resp = error(StatusCode::TOO_MANY_REQUESTS, "insufficient_quota", "insufficient_quota", r.message.clone());
    if let Ok(v) = HeaderValue::from_str(&r.retry_after.to_string()) {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

/// What a request reserves of its key's budgets: tokens (a quarter of the
/// body's bytes for the prompt, plus `max_tokens` or its provider's
/// `reserve_output_tokens`) and their cost at the model's first route's
/// price, when that price is in the budget currency.
fn estimate(s: &Shared, model: Option<&str>, max_tokens: Option<u64>, body_len: usize) -> (u64, u64) {
    let route = model.and_then(|m| s.core.providers.route(m));
    let output = max_tokens
        .or_else(|| route.as_ref().and_then(|r| r.provider.profile.reserve_output_tokens))
        .unwrap_or(DEFAULT_RESERVE_OUTPUT);
    let tokens = Tokens { input: body_len as u64 / 4, output, ..Tokens::default() };
    let cost = route
        .and_then(|r| r.provider.prices.of(&r.model))
        .filter(|p| p.currency == s.edge.ledger.currency)
        .map_or(0, |p| crate::spend::prices::cost(&p, &tokens));
    (tokens.total(), cost)
}

/// Requests that reach an upstream model (and so spend): every POST under
/// `/v1/` but the token count.
fn spends(method: &Method, path: &str) -> bool {
    method == Method::POST && path.starts_with("/v1/") && path != "/v1/messages/count_tokens"
}

const REQUEST_ID: &str = "x-request-id";

/// The client's request id when it is sane, else a new one.
fn request_id(h: &HeaderMap) -> String {
    h.get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map_or_else(new_request_id, str::to_string)
}

/// `req_` and 24 random hex digits, written without the formatting
/// machinery (it showed in the profile of the plain lane).
fn new_request_id() -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut id = String::with_capacity(28);
    id.push_str("req_");
    let (hi, lo) = (fastrand::u64(..), u64::from(fastrand::u32(..)));
    for (n, digits) in [(hi, 16), (lo, 8)] {
        for i in (0..digits).rev() {
            id.push(char::from(HEX[((n >> (i * 4)) & 15) as usize]));
        }
    }
    id
}

fn error(status: StatusCode, kind: &str, code: &str, message: impl Into<String>) -> Response {
    let e = ErrorObject::new(kind, message).with_code(code);
    (status, axum::Json(e.to_body())).into_response()
}

fn refuse_auth(e: &AuthError) -> Response {
    crate::metrics::refused(match e {
        AuthError::Missing => "auth_missing",
        AuthError::Wrong => "auth_wrong",
        AuthError::ModelDenied(_) => "model_denied",
        AuthError::RateLimited(_) => "rate_limited",
    });
    match e {
        AuthError::Missing | AuthError::Wrong => {
            error(StatusCode::UNAUTHORIZED, "invalid_request_error", "invalid_api_key", e.to_string())
        }
        AuthError::ModelDenied(_) => {
            error(StatusCode::FORBIDDEN, "invalid_request_error", "model_not_allowed", e.to_string())
        }
        AuthError::RateLimited(wait) => {
            let mut r = error(StatusCode::TOO_MANY_REQUESTS, "requests", "rate_limit_exceeded", e.to_string());
            let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                r.headers_mut().insert(header::RETRY_AFTER, v);
            }
            r
        }
    }
}

fn too_busy(what: &str) -> Response {
    crate::metrics::refused("concurrency");
    let mut r = error(
        StatusCode::TOO_MANY_REQUESTS,
        "requests",
        "concurrency_limit_exceeded",
        format!("Too many concurrent requests {what}; retry shortly."),
    );
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

fn too_large(max: usize) -> Response {
    crate::metrics::refused("body_too_large");
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        "invalid_request_error",
        "request_too_large",
        format!("The request body is larger than the limit of {max} bytes."),
    )
}

/// A body not sent within `body_read_timeout_secs`: refused, so a slow
/// upload does not hold its concurrency slots (the connection is closed, as
/// its body was not read to the end).
fn too_slow(limit: std::time::Duration) -> Response {
    crate::metrics::refused("body_timeout");
    error(
        StatusCode::REQUEST_TIMEOUT,
        "invalid_request_error",
        "request_timeout",
        format!("The request body did not arrive within {limit:?}."),
    )
}

/// The middleware, as the router's layer.
pub async fn guard(State(s): State<Shared>, req: Request, next: Next) -> Response {
    around(s, req, |mut req, ctx| {
        if let Some(c) = ctx {
            req.extensions_mut().insert(c);
        }
        next.run(req)
    })
    .await
}

/// The edge around `inner` (the router, or the hot route's handler called
/// directly; see [`super::App`]), which gets the request's observer (none
/// for health checks, the scrape and the console's pages).
pub async fn around<F, Fut>(s: Shared, req: Request, inner: F) -> Response
where
    F: FnOnce(Request, Option<Arc<RequestCtx>>) -> Fut,
    Fut: Future<Output = Response>,
{
    let path = req.uri().path();
    if matches!(path, "/healthz" | "/readyz") {
        return inner(req, None).await;
    }
    // DNS rebinding: a page on another name resolving to 127.0.0.1.
    if !s.edge.browser.host_ok(req.uri(), req.headers()) {
        crate::metrics::refused("host");
        return error(
            StatusCode::MISDIRECTED_REQUEST,
            "invalid_request_error",
            "host_not_allowed",
            "This server on a loopback address answers only a loopback Host (localhost, 127.0.0.1) or one in \
             allowed_hosts.",
        );
    }
    // The scrape is open and not counted as a request; the console has its
    // own admin key and its own checks (server/console).
    if path == "/metrics" || super::console::is_console(path) {
        return inner(req, None).await;
    }
    let cors = s.edge.browser.check(req.headers());
    let id = request_id(req.headers());
    let span = tracing::info_span!(
        "request",
        id = %id,
        otel.name = %format_args!("{} {path}", req.method()),
        http.request.method = %req.method(),
        url.path = %path,
        http.response.status_code = tracing::field::Empty,
    );
    crate::telemetry::adopt_parent(&span, req.headers());
    let anthropic = path.starts_with("/v1/messages");
    let mut resp = match cors {
        Verdict::Refused => {
            crate::metrics::refused("cross_site");
            error(
                StatusCode::FORBIDDEN,
                "invalid_request_error",
                "cross_site_request",
                "A web page on another site may not call this API: its origin is not in allowed_origins.",
            )
        }
        Verdict::Allowed(origin) if Browser::is_preflight(req.method(), req.headers()) => {
            Browser::preflight(origin, req.headers())
        }
        Verdict::Allowed(origin) => {
            let mut resp = serve(s, req, inner, id.clone()).instrument(span.clone()).await;
            Browser::allow(resp.headers_mut(), origin);
            resp
        }
        Verdict::Plain => serve(s, req, inner, id.clone()).instrument(span.clone()).await,
    };
    if anthropic && crate::fronts::messages::is_error(resp.status()) {
        resp = anthropic_error(resp).await;
    }
    span.record("http.response.status_code", resp.status().as_u16());
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert(REQUEST_ID, v);
    }
    resp
}

/// The edge's own refusals (auth, limits) on the Messages front's routes,
/// written in OpenAI's shape, in Anthropic's, so the Anthropic SDKs raise
/// the right exception; the front's own errors pass as they are.
async fn anthropic_error(resp: Response) -> Response {
    let (mut parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 64 * 1024).await else {
        return Response::from_parts(parts, Body::empty());
    };
    match crate::fronts::messages::from_openai(parts.status.as_u16(), &bytes) {
        Some(v) => {
            parts.headers.remove(header::CONTENT_LENGTH);
            Response::from_parts(parts, Body::from(v.to_string()))
        }
        None => Response::from_parts(parts, Body::from(bytes)),
    }
}

async fn serve<F, Fut>(s: Shared, req: Request, inner: F, id: String) -> Response
where
    F: FnOnce(Request, Option<Arc<RequestCtx>>) -> Fut,
    Fut: Future<Output = Response>,
{
    let edge = &s.edge;
    let start = Instant::now();
    let mut permits = Vec::new();
    let key = if edge.auth.enabled() {
        // `x-api-key` is how the Anthropic SDKs send a key (Claude Code too,
        // with ANTHROPIC_API_KEY): the same proxy keys as a bearer token.
        let h = req.headers();
        let bearer = h.get(header::AUTHORIZATION).map(HeaderValue::as_bytes);
        let found = match h.get("x-api-key").map(HeaderValue::as_bytes) {
            Some(k) if bearer.is_none() => edge.auth.authenticate_token(k),
            _ => edge.auth.authenticate(bearer),
        };
        let key = match found {
            Ok(k) => k,
            Err(e) => return refuse_auth(&e),
        };
        if let Err(e) = key.admit(s.store.as_ref()).await {
            return refuse_auth(&e);
        }
        if let Some(sem) = &key.concurrency {
            match sem.clone().try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) => return too_busy("for this key"),
            }
        }
        Some(key)
    } else {
        None
    };
    if let Some(sem) = &edge.global {
        match sem.clone().try_acquire_owned() {
            Ok(p) => permits.push(p),
            Err(_) => return too_busy("on this server"),
        }
    }
    let (parts, body) = req.into_parts();
    let mut model = None;
    let mut max_tokens = None;
    let mut body_len = 0;
    // The body the console records, while one is open.
    let mut shown_body = None;
    let req = if parts.method == Method::POST {
        let max = edge.limits.max_body_bytes;
        let declared = parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
        if declared.is_some_and(|n| n > max) {
            return too_large(max);
        }
        let limit = edge.limits.body_read_timeout();
        let read = match tokio::time::timeout(limit, axum::body::to_bytes(body, max)).await {
            Ok(r) => r,
            Err(_) => return too_slow(limit),
        };
        let bytes: Bytes = match read {
            Ok(b) => b,
            Err(e) => {
                // to_bytes fails for the limit or a broken client body.
                if is_length_limit(&e) {
                    return too_large(max);
                }
                return error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    "bad_body",
                    format!("Cannot read the body: {e}"),
                );
            }
        };
        if parts.uri.path().starts_with("/v1/") {
            let peek = match Peek::of(&bytes) {
                Ok(p) => Some(p),
                Err(PeekError::Duplicate(mut k)) => {
                    crate::metrics::refused("duplicate_key");
                    if let Some((cut, _)) = k.char_indices().nth(64) {
                        k.truncate(cut);
                    }
                    let mut e = ErrorObject::new(
                        "invalid_request_error",
                        format!("The body has the key `{k}` twice; every top-level key must appear once."),
                    )
                    .with_code("duplicate_key");
                    e.param = Some(k);
                    return (StatusCode::BAD_REQUEST, axum::Json(e.to_body())).into_response();
                }
                Err(PeekError::Unreadable) => None,
            };
            if let Some(p) = &peek {
                if let Some((param, msg)) = p.over(&edge.limits) {
                    crate::metrics::refused("shape_limit");
                    let mut e = ErrorObject::new("invalid_request_error", msg).with_code("limit_exceeded");
                    e.param = Some(param.to_string());
                    return (StatusCode::BAD_REQUEST, axum::Json(e.to_body())).into_response();
                }
                model = p.model.clone();
                max_tokens = p.max_tokens;
            }
            if let Some(k) = &key {
                match &model {
                    Some(m) if !k.allows(m) => return refuse_auth(&AuthError::ModelDenied(m.clone())),
                    // A body whose model cannot be read is refused for a
                    // restricted key: the handler's parse might read it
                    // differently (duplicate keys).
                    None if peek.is_none() && !k.allows("") => {
                        return error(
                            StatusCode::BAD_REQUEST,
                            "invalid_request_error",
                            "invalid_body",
                            "The body must be a JSON object with a string `model`.",
                        );
                    }
                    _ => {}
                }
            }
        }
        body_len = bytes.len();
        if s.console.as_ref().is_some_and(|c| c.recorder.recording()) {
            shown_body = Some(bytes.clone());
        }
        Request::from_parts(parts, Body::from(bytes))
    } else {
        Request::from_parts(parts, body)
    };
    // Budgets: the request's estimate is reserved before anything goes
    // upstream, and settled to its real spend when the response ends (Done).
    let spending = spends(req.method(), req.uri().path());
    let mut hold = None;
    if spending
        && let Some(k) = &key
        && !k.budget.is_empty()
    {
        let (tokens, cost) = estimate(&s, model.as_deref(), max_tokens, body_len);
        match edge.ledger.reserve(&k.name, &k.budget, tokens, cost).await {
            Ok(h) => hold = h,
            Err(r) => return over_budget(&r),
        }
    }
    let key_name = key.as_ref().map(|k| k.name.clone());
    let shown = s.console.as_ref().and_then(|c| {
        c.recorder.begin(&crate::recorder::Begin {
            id: &id,
            start,
            method: req.method().as_str(),
            path: req.uri().path(),
            key: key_name.as_deref(),
            model: model.as_deref(),
            body: shown_body.as_deref().unwrap_or_default(),
        })
    });
    let ctx = Arc::new(RequestCtx::new(id, start, model, key_name, shown.clone()));
    if key.as_ref().is_some_and(|k| !k.budget.is_empty()) {
        ctx.spend.set_counted();
    }
    ctx.spend.request_bytes(body_len);
    ctx.spend.usage_cap(edge.limits.max_usage_tokens);
    let mut done = Done {
        shown: shown.clone(),
        ctx: ctx.clone(),
        key: key.map(|k| k.name.clone()),
        status: StatusCode::OK,
        ledger: spending.then(|| edge.ledger.clone()),
        hold,
        _permits: permits,
        _token: edge.tracker.token(),
    };
    crate::metrics::in_flight(1.0);
    let resp = inner(req, Some(ctx.clone())).await;
    let (mut parts, body) = resp.into_parts();
    for w in ctx.warnings() {
        if let Ok(v) = HeaderValue::from_str(&header_text(&w)) {
            parts.headers.append(WARNING_HEADER, v);
        }
    }
    if let Some(c) = &shown {
        c.status(parts.status.as_u16());
    }
    let sse = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    done.status = parts.status;
    let body = GuardedBody {
        inner: body,
        done: Some(done),
        cut: sse.then(|| Box::pin(edge.cut.clone().cancelled_owned())),
        finished: false,
    };
    Response::from_parts(parts, Body::new(body))
}

/// The response header of a warning the core told the request's observer.
pub const WARNING_HEADER: &str = "x-modelshim-warning";

/// A warning as a header value: visible ASCII on one line, at most 300 bytes.
fn header_text(w: &str) -> String {
    let mut t: String = w.chars().map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' }).collect();
    t.truncate(300);
    t
}

fn is_length_limit(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(x) = cur {
        if x.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cur = x.source();
    }
    false
}

/// Held until the response body is done (or dropped: client gone).
struct Done {
    /// The console's record, finished with the body.
    shown: Option<Arc<crate::recorder::Entry>>,
    ctx: Arc<RequestCtx>,
    key: Option<String>,
    status: StatusCode,
    /// Where the request's spend is charged (requests that spend).
    ledger: Option<Arc<Ledger>>,
    /// The budget reserved for it, settled with its spend.
    hold: Option<Hold>,
    _permits: Vec<OwnedSemaphorePermit>,
    _token: TaskTrackerToken,
}

impl Drop for Done {
    fn drop(&mut self) {
        let elapsed = self.ctx.start.elapsed();
        let served = self.ctx.served();
        // Unrouted requests are labelled as such: a label per arbitrary
        // client string would grow the series without bound.
        let (p, m, label) = match &served {
            Some(s) => (s.provider.as_str(), s.model.as_str(), s.label()),
            None => ("none", "unrouted", "unrouted"),
        };
        crate::metrics::request_done(p, label, self.status.as_u16(), elapsed);
        crate::metrics::in_flight(-1.0);
        // What the upstream answers used, a stream the client cut too
        // (its usage so far, or the estimate; docs/spend.md).
        let key = self.key.as_deref().unwrap_or(ANONYMOUS);
        let (mut tokens, mut cost) = (0, None);
        if self.ledger.is_some() && self.ctx.spend.is_empty() {
            // Nothing was answered: what it held is released.
            drop(self.hold.take());
        } else if let Some(ledger) = &self.ledger {
            let s = self.ctx.spend.summary(&ledger.currency);
            for turn in &s.turns {
                let t = &turn.tokens;
                let cost = turn.cost.as_ref().map(|(n, cur)| (*n, cur.as_str()));
                crate::metrics::spend(
                    key,
                    &turn.provider,
                    &turn.model,
                    [t.input, t.cached, t.output, t.reasoning],
                    cost,
                );
            }
            match self.hold.take() {
                Some(h) => h.settle(&s.tokens, s.cost),
                None => ledger.charge(key, &s.tokens, s.cost),
            }
            tokens = s.tokens.total();
            cost = s.priced.then(|| format!("{:.9}", crate::spend::amount(s.cost)));
        }
        if let Some(c) = &self.shown {
            if let (Some(amount), Some(ledger)) = (&cost, &self.ledger) {
                c.cost(amount, &ledger.currency);
            }
            c.finish(self.status.as_u16());
        }
        // Written when the body ends, outside the request's span: the id is
        // a field of its own so the access line can be joined to the rest.
        tracing::info!(
            id = self.ctx.id.as_str(),
            status = self.status.as_u16(),
            provider = p,
            model = m,
            key = self.key.as_deref().unwrap_or("-"),
            ms = elapsed.as_millis() as u64,
            tokens,
            cost = cost.as_deref().unwrap_or("-"),
            "request done"
        );
    }
}

/// The in-band event that ends a stream cut at the end of the grace period.
/// The leading newline closes any half-written event line safely.
const SHUTDOWN_EVENT: &[u8] = b"\ndata: {\"error\":{\"message\":\"The server is shutting down and ended this stream before it was complete.\",\"type\":\"server_error\",\"param\":null,\"code\":\"server_shutting_down\"}}\n\n";

/// The response body with the request's guard attached.
struct GuardedBody {
    inner: Body,
    done: Option<Done>,
    cut: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    finished: bool,
}

impl http_body::Body for GuardedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if this.finished {
            return Poll::Ready(None);
        }
        if let Some(cut) = this.cut.as_mut()
            && cut.as_mut().poll(cx).is_ready()
        {
            this.finished = true;
            this.done.take();
            return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(SHUTDOWN_EVENT)))));
        }
        // A recorded body is teed into its record.
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        if let Some(c) = this.done.as_ref().and_then(|d| d.shown.as_ref())
            && let Poll::Ready(Some(Ok(f))) = &r
            && let Some(d) = f.data_ref()
        {
            c.client_bytes(d);
        }
        if let Poll::Ready(None | Some(Err(_))) = &r {
            this.finished = true;
            this.done.take();
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.finished || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids() {
        let id = new_request_id();
        assert_eq!(id.len(), 28, "{id}");
        assert!(id.starts_with("req_") && id[4..].bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(id, new_request_id());
        let mut h = HeaderMap::new();
        h.insert(REQUEST_ID, HeaderValue::from_static("client-id-1"));
        assert_eq!(request_id(&h), "client-id-1");
        h.insert(REQUEST_ID, HeaderValue::from_static("has space"));
        assert!(request_id(&h).starts_with("req_"));
    }
}
