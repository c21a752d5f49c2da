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
    Json(Value),
    Events(Events),
}

/// The shared HTTP client (one connection pool for every upstream).
#[derive(Clone)]
pub struct Upstream {
    client: reqwest::Client,
    recorder: Option<Arc<Recorder>>,
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
        let client = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(90))
            .build()
            .map_err(|e| format!("cannot build HTTP client: {e}"))?;
        Ok(Upstream { client, recorder: None })
    }

    /// Records every exchange from now on.
    pub fn with_recorder(mut self, recorder: Recorder) -> Self {
        self.recorder = Some(Arc::new(recorder));
        self
    }

    fn request(&self, p: &Provider, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut rb = match p.parsed_url(path) {
            Some(url) => self.client.request(method, url),
            None => self.client.request(method, format!("{}/{}", p.base_url, path.trim_start_matches('/'))),
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
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| {
            UpstreamError::Protocol(format!(
                "not JSON ({e}): {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
            ))
        })?;
        if let Some(err) = error_in_success(&p.profile, &v) {
            return Err(err);
        }
        Ok(Reply::Json(v))
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
        let req = rb.build().map_err(|e| UpstreamError::Connect(format!("{}: {}", p.name, error_chain(&e))))?;
        let rec = self.recorder.as_ref().map(|r| r.start(&p.name, &req, body()));
        let limit = Duration::from_secs_f64(p.upstream.first_byte_timeout_secs);
        match tokio::time::timeout(limit, self.client.execute(req)).await {
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
