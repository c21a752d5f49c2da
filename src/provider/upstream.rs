//! The one seam to the network: sends a request to a provider with its key,
//! applies the connect / first-byte / idle timeouts, and turns the answer into
//! either one JSON body or a stream of SSE `data` payloads. With a
//! [`Recorder`] every exchange is also written as a fixture (`serve --record`).

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use serde_json::Value;

use super::record::{Recorder, Recording};
use super::{Provider, UpstreamError, error_in_success, map_error};

/// A stream of SSE `data` payloads, ending at `[DONE]` or end of body.
pub type Events = Pin<Box<dyn Stream<Item = Result<String, UpstreamError>> + Send>>;

/// What an upstream answered.
pub enum Reply {
    Json(JsonBody),
    Events(Events),
}

/// A whole JSON answer as the upstream sent it. Each reader parses it into
/// what it needs (the chat path straight into a typed completion), so no
/// JSON tree is built and thrown away on the way.
pub struct JsonBody(bytes::Bytes);

impl JsonBody {
    /// The body as the upstream sent it.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn into_bytes(self) -> bytes::Bytes {
        self.0
    }

    /// Parses the body as `what` (`"a chat completion"`); an error quotes
    /// the start of the body, so nothing the upstream said is lost.
    pub fn parse<T: serde::de::DeserializeOwned>(&self, what: &str) -> Result<T, UpstreamError> {
        serde_json::from_slice(&self.0).map_err(|e| {
            UpstreamError::Protocol(format!(
                "not {what} ({e}): {}",
                String::from_utf8_lossy(&self.0[..self.0.len().min(300)])
            ))
        })
    }
}

/// The HTTP client to every upstream: one connection pool per serving
/// thread (see [`use_thread_clients`]), one shared by every other thread.
#[derive(Clone)]
pub struct Upstream {
    client: reqwest::Client,
    connect_timeout: Duration,
    /// Tells this `Upstream`'s per-thread clients from another's.
    id: u64,
    recorder: Option<Arc<Recorder>>,
}

thread_local! {
    /// On a serving thread: its own clients, by `Upstream::id`. A client's
    /// connections are driven by tasks on the runtime that opened them, so a
    /// pool shared between the threads' runtimes would hand a request to
    /// another thread's connection and wake that thread for every read.
    static THREAD_CLIENTS: std::cell::RefCell<Option<Vec<(u64, reqwest::Client)>>> =
        const { std::cell::RefCell::new(None) };
}

/// Makes the calling thread (a serving thread with a runtime of its own)
/// open its own upstream connections.
pub fn use_thread_clients() {
    THREAD_CLIENTS.with(|c| *c.borrow_mut() = Some(Vec::new()));
}

fn build_client(connect_timeout: Duration) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .pool_idle_timeout(Duration::from_secs(90))
        .build()
        .map_err(|e| format!("cannot build HTTP client: {e}"))
}

/// reqwest (and every HTTP client of ours: http_fetch, MCP, OTLP) is built
/// without a default crypto provider; ring keeps the build free of cmake.
/// Installing twice is harmless.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Upstream {
    pub fn new(connect_timeout: Duration) -> Result<Self, String> {
        install_crypto_provider();
        static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let id = IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Upstream { client: build_client(connect_timeout)?, connect_timeout, id, recorder: None })
    }

    /// This thread's client (see [`use_thread_clients`]), else the shared one.
    fn client(&self) -> reqwest::Client {
        THREAD_CLIENTS.with(|c| {
            let mut c = c.borrow_mut();
            let Some(mine) = c.as_mut() else { return self.client.clone() };
            if let Some((_, client)) = mine.iter().find(|(id, _)| *id == self.id) {
                return client.clone();
            }
            // Built like the shared one, which proved the settings valid.
            let client = build_client(self.connect_timeout).unwrap_or_else(|_| self.client.clone());
            mine.push((self.id, client.clone()));
            client
        })
    }

    /// Records every exchange from now on.
    pub fn with_recorder(mut self, recorder: Recorder) -> Self {
        self.recorder = Some(Arc::new(recorder));
        self
    }

    fn request(&self, p: &Provider, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let client = self.client();
        let mut rb = match p.parsed_url(path) {
            Some(url) => client.request(method, url),
            None => client.request(method, format!("{}/{}", p.base_url, path.trim_start_matches('/'))),
        };
        if let Some(key) = p.api_key() {
            rb = match &p.profile.auth_header {
                Some(h) => rb.header(h.as_str(), key),
                None => rb.bearer_auth(key),
            };
        }
        rb
    }

    /// POSTs a JSON body and classifies the answer.
    pub async fn post(&self, p: &Provider, path: &str, body: &impl serde::Serialize) -> Result<Reply, UpstreamError> {
        let rb = self.request(p, reqwest::Method::POST, path).json(body);
        let recorded = || serde_json::to_value(body).unwrap_or(Value::Null);
        let (resp, mut rec) = self.send(p, rb, recorded).await?;
        let status = resp.status().as_u16();
        if let Some(r) = rec.as_mut() {
            r.head(status, resp.headers());
        }
        let is_sse = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if status >= 400 {
            let retry_after = super::resilience::retry_after(resp.headers());
            let bytes = read(resp, rec).await?;
            return Err(super::resilience::with_retry_after(map_error(&p.profile, status, &bytes), retry_after));
        }
        let idle = Duration::from_secs_f64(p.upstream.idle_timeout_secs);
        if is_sse {
            return Ok(Reply::Events(super::sse_in::events(resp.bytes_stream(), idle, rec)));
        }
        let bytes = read(resp, rec).await?;
        if looks_like_sse(&bytes) {
            // A stream served under the wrong content type (seen behind
            // misconfigured gateways): parse it as what it is.
            let body = futures_util::stream::once(async move { Ok::<_, std::convert::Infallible>(bytes) });
            return Ok(Reply::Events(super::sse_in::events(body, idle, None)));
        }
        let body = JsonBody(bytes);
        // Errors sent with a 200 (`base_resp`, `error_code`, `error` bodies)
        // need the tree; only a body that names one of those keys pays for
        // it, or one that is not even shaped like an object (an HTML page, a
        // plain-text error), which fails here as a protocol error, as before:
        // it counts against the circuit breaker and moves a chain along.
        let trimmed = body.0.trim_ascii();
        let object_like = trimmed.first() == Some(&b'{') && trimmed.last() == Some(&b'}');
        if !object_like
            || memchr::memmem::find(trimmed, b"\"error").is_some()
            || memchr::memmem::find(trimmed, b"\"base_resp").is_some()
        {
            let v: Value = body.parse("JSON")?;
            if let Some(err) = error_in_success(&p.profile, &v) {
                return Err(err);
            }
        }
        Ok(Reply::Json(body))
    }

    /// GETs a path and returns the JSON body.
    pub async fn get_json(&self, p: &Provider, path: &str) -> Result<Value, UpstreamError> {
        let (resp, mut rec) = self.send(p, self.request(p, reqwest::Method::GET, path), || Value::Null).await?;
        let status = resp.status().as_u16();
        if let Some(r) = rec.as_mut() {
            r.head(status, resp.headers());
        }
        let bytes = read(resp, rec).await?;
        if status >= 400 {
            return Err(map_error(&p.profile, status, &bytes));
        }
        serde_json::from_slice(&bytes).map_err(|e| UpstreamError::Protocol(e.to_string()))
    }

    /// Sends with the first-byte timeout (until the response headers); starts
    /// a recording when recording (`body` gives the request body for it).
    async fn send(
        &self,
        p: &Provider,
        rb: reqwest::RequestBuilder,
        body: impl FnOnce() -> Value,
    ) -> Result<(reqwest::Response, Option<Recording>), UpstreamError> {
        let (client, req) = rb.build_split();
        let req = req.map_err(|e| UpstreamError::Connect(format!("{}: {}", p.name, error_chain(&e))))?;
        let rec = self.recorder.as_ref().map(|r| r.start(&p.name, &req, body()));
        let limit = Duration::from_secs_f64(p.upstream.first_byte_timeout_secs);
        match tokio::time::timeout(limit, client.execute(req)).await {
            Err(_) => Err(UpstreamError::Timeout(format!("{} sent no response within {limit:?}", p.name))),
            Ok(Err(e)) if e.is_timeout() => Err(UpstreamError::Timeout(format!("{}: {e}", p.name))),
            Ok(Err(e)) => Err(UpstreamError::Connect(format!("{}: {}", p.name, error_chain(&e)))),
            Ok(Ok(r)) => Ok((r, rec)),
        }
    }
}

/// Reads a whole body (and records it).
async fn read(resp: reqwest::Response, rec: Option<Recording>) -> Result<bytes::Bytes, UpstreamError> {
    let bytes = resp.bytes().await.map_err(|e| UpstreamError::Connect(e.to_string()))?;
    if let Some(r) = rec {
        r.body(&bytes);
    }
    Ok(bytes)
}

fn looks_like_sse(body: &[u8]) -> bool {
    let start = body.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(body.len());
    let b = &body[start..];
    b.starts_with(b"data:") || b.starts_with(b": ") || b.starts_with(b"event:")
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        s.push_str(": ");
        s.push_str(&x.to_string());
        src = x.source();
    }
    s
}
