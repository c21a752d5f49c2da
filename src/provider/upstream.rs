//! The one seam to the network: sends a request to a provider with its key,
//! applies the connect / first-byte / idle timeouts, and turns the answer into
//! either one JSON body or a stream of SSE `data` payloads.

use std::pin::Pin;
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures_util::{Stream, StreamExt};
use serde_json::Value;

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
}

impl Upstream {
    pub fn new(connect_timeout: Duration) -> Result<Self, String> {
        // reqwest is built without a default crypto provider; ring keeps the
        // build free of cmake. A second install attempt is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(90))
            .build()
            .map_err(|e| format!("cannot build HTTP client: {e}"))?;
        Ok(Upstream { client })
    }

    fn request(&self, p: &Provider, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let url = format!("{}/{}", p.base_url, path.trim_start_matches('/'));
        let mut rb = self.client.request(method, url);
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
        let resp = self.send(p, rb).await?;
        let status = resp.status().as_u16();
        let is_sse = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if status >= 400 {
            let retry_after = super::resilience::retry_after(resp.headers());
            let bytes = resp.bytes().await.map_err(|e| UpstreamError::Connect(e.to_string()))?;
            return Err(super::resilience::with_retry_after(map_error(&p.profile, status, &bytes), retry_after));
        }
        if is_sse {
            let idle = Duration::from_secs_f64(p.upstream.idle_timeout_secs);
            return Ok(Reply::Events(sse_events(resp.bytes_stream(), idle)));
        }
        let bytes = resp.bytes().await.map_err(|e| UpstreamError::Connect(e.to_string()))?;
        if looks_like_sse(&bytes) {
            // A stream served under the wrong content type (seen behind
            // misconfigured gateways): parse it as what it is.
            let body = futures_util::stream::once(async move { Ok::<_, std::convert::Infallible>(bytes) });
            return Ok(Reply::Events(sse_events(body, Duration::from_secs_f64(p.upstream.idle_timeout_secs))));
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
        let resp = self.send(p, self.request(p, reqwest::Method::GET, path)).await?;
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.map_err(|e| UpstreamError::Connect(e.to_string()))?;
        if status >= 400 {
            return Err(map_error(&p.profile, status, &bytes));
        }
        serde_json::from_slice(&bytes).map_err(|e| UpstreamError::Protocol(e.to_string()))
    }

    /// Sends with the first-byte timeout (until the response headers).
    async fn send(&self, p: &Provider, rb: reqwest::RequestBuilder) -> Result<reqwest::Response, UpstreamError> {
        let limit = Duration::from_secs_f64(p.upstream.first_byte_timeout_secs);
        match tokio::time::timeout(limit, rb.send()).await {
            Err(_) => Err(UpstreamError::Timeout(format!("{} sent no response within {limit:?}", p.name))),
            Ok(Err(e)) if e.is_timeout() => Err(UpstreamError::Timeout(format!("{}: {e}", p.name))),
            Ok(Err(e)) => Err(UpstreamError::Connect(format!("{}: {}", p.name, error_chain(&e)))),
            Ok(Ok(r)) => Ok(r),
        }
    }
}

/// `data` payloads of an SSE body. Comment lines and keep-alives are skipped
/// by the parser; `[DONE]` ends the stream; a silence longer than `idle`
/// ends it with a timeout error.
fn sse_events<S, B, E>(body: S, idle: Duration) -> Events
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: 'static,
    E: 'static,
    B: AsRef<[u8]> + Send,
    E: std::fmt::Display + Send,
{
    let mut inner = Box::pin(body.eventsource());
    Box::pin(async_stream::stream! {
        loop {
            match tokio::time::timeout(idle, inner.next()).await {
                Err(_) => {
                    yield Err(UpstreamError::Timeout(format!("stream idle for {idle:?}")));
                    break;
                }
                Ok(None) => break,
                Ok(Some(Err(e))) => {
                    yield Err(UpstreamError::Connect(format!("stream broken: {e}")));
                    break;
                }
                Ok(Some(Ok(ev))) => {
                    let data = ev.data.trim();
                    if data == "[DONE]" {
                        break;
                    }
                    if data.is_empty() {
                        continue;
                    }
                    yield Ok(ev.data);
                }
            }
        }
    })
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
