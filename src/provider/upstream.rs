//! The one seam to the network: sends a request to a provider with its key,
//! applies the connect / first-byte / idle timeouts, and turns the answer into
//! either one JSON body or a stream of SSE `data` payloads. With a
//! [`Recorder`] every exchange is also written as a fixture (`serve --record`).
//!
//! Two clients, one behaviour: chat requests to a cleartext upstream that no
//! proxy setting intercepts (a self-hosted engine next door, where the
//! proxy's own cost is most of the added latency) go over this thread's own
//! HTTP/1.1 connections (`direct.rs`), with the URL parsed once per provider;
//! everything else (TLS, proxies from the environment, other paths) through
//! reqwest.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST, HeaderMap, HeaderName, HeaderValue};
use http_body_util::{BodyExt, Either};
use memchr::memmem;
use serde_json::Value;

use super::direct::{DirectUrl, Failed};
use super::record::{Recorder, Recording};
use super::{Provider, UpstreamError, error_in_success, map_error};
use crate::recorder::Shown;

pub use super::sse_in::Events;

/// What an upstream answered.
pub enum Reply {
    Json(JsonBody),
    Events(Events),
}

/// A whole JSON answer as the upstream sent it. Each reader parses it into
/// what it needs (the chat path straight into a typed completion), so no
/// JSON tree is built and thrown away on the way.
pub struct JsonBody(Bytes);

impl JsonBody {
    /// The body as the upstream sent it.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn into_bytes(self) -> Bytes {
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

/// An answer from either client.
type Answer = http::Response<Either<super::direct::Body, reqwest::Body>>;

/// reqwest's client, with one connection pool: a serving thread's own, or
/// the shared one. Redirects are not followed (the 3xx is an upstream
/// error): reqwest would resend the body, and a key in a profile's own
/// `auth_header`, to wherever the upstream points. With `follow` (a
/// profile's `follow_redirects`) they are, within the request's origin only.
fn pooled_client(connect_timeout: Duration, follow: bool) -> Result<reqwest::Client, String> {
    let redirects = if follow {
        reqwest::redirect::Policy::custom(|attempt| {
            let origin = attempt.previous().first();
            let next = attempt.url();
            let same = origin.is_some_and(|o| {
                o.scheme() == next.scheme()
                    && o.host_str() == next.host_str()
                    && o.port_or_known_default() == next.port_or_known_default()
            });
            if same && attempt.previous().len() <= MAX_REDIRECTS { attempt.follow() } else { attempt.stop() }
        })
    } else {
        reqwest::redirect::Policy::none()
    };
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .pool_idle_timeout(super::direct::IDLE_LIMIT)
        .redirect(redirects)
        .build()
        .map_err(|e| format!("cannot build HTTP client: {e}"))
}

/// Same-origin redirects followed in a row with `follow_redirects`.
const MAX_REDIRECTS: usize = 5;

/// The HTTP clients to every upstream: on a serving thread, its own reqwest
/// pool (see [`use_thread_clients`]) and its own direct connections
/// (`direct.rs`, per thread wherever it runs); elsewhere one shared reqwest
/// pool.
#[derive(Clone)]
pub struct Upstream {
    pooled: reqwest::Client,
    /// The same, following same-origin redirects (`follow_redirects`).
    pooled_follow: reqwest::Client,
    connect_timeout: Duration,
    /// Tells this `Upstream`'s per-thread pools from another's.
    id: u64,
    direct: super::direct::Connector,
    recorder: Option<Arc<Recorder>>,
    /// The most bytes of one answer read (`[limits] max_answer_bytes`).
    max_answer: usize,
}

/// A serving thread's reqwest client, by `Upstream::id` and whether it
/// follows same-origin redirects.
type ThreadClient = ((u64, bool), reqwest::Client);

thread_local! {
    /// On a serving thread: its own reqwest clients, by `Upstream::id`. A client's
    /// connections are driven by tasks on the runtime that opened them, so a
    /// pool shared between the threads' runtimes would hand a request to
    /// another thread's connection and wake that thread for every read.
    static THREAD_CLIENTS: std::cell::RefCell<Option<Vec<ThreadClient>>> =
        const { std::cell::RefCell::new(None) };
}

/// Makes the calling thread (a serving thread with a runtime of its own)
/// keep its own reqwest pool (direct connections are per thread anyway).
pub fn use_thread_clients() {
    THREAD_CLIENTS.with(|c| *c.borrow_mut() = Some(Vec::new()));
}

/// reqwest (and every HTTP client of ours: http_fetch, MCP, OTLP) is built
/// without a default crypto provider; ring keeps the build free of cmake.
/// Installing twice is harmless.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// One request, built for the client that sends it.
enum Outgoing<'a> {
    Direct(&'a DirectUrl, http::Request<Bytes>),
    Pooled(reqwest::Client, reqwest::Request),
}

impl Outgoing<'_> {
    fn parts(&self) -> (&http::Method, &str, &HeaderMap) {
        match self {
            Outgoing::Direct(_, r) => (r.method(), r.uri().path(), r.headers()),
            Outgoing::Pooled(_, r) => (r.method(), r.url().path(), r.headers()),
        }
    }
}

impl Upstream {
    pub fn new(connect_timeout: Duration) -> Result<Self, String> {
        install_crypto_provider();
        static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let id = IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Upstream {
            pooled: pooled_client(connect_timeout, false)?,
            pooled_follow: pooled_client(connect_timeout, true)?,
            connect_timeout,
            id,
            direct: super::direct::Connector::new(connect_timeout),
            recorder: None,
            max_answer: 64 * 1024 * 1024,
        })
    }

    /// Caps what is read of one answer: a JSON body, one SSE event.
    pub fn with_max_answer_bytes(mut self, max: usize) -> Self {
        self.max_answer = max;
        self
    }

    /// This thread's reqwest client (see [`use_thread_clients`]), else the
    /// shared one; `follow` picks the one following same-origin redirects.
    fn pooled(&self, follow: bool) -> reqwest::Client {
        let shared = if follow { &self.pooled_follow } else { &self.pooled };
        THREAD_CLIENTS.with(|c| {
            let mut c = c.borrow_mut();
            let Some(mine) = c.as_mut() else { return shared.clone() };
            let key = (self.id, follow);
            if let Some((_, client)) = mine.iter().find(|(k, _)| *k == key) {
                return client.clone();
            }
            // Built like the shared one, which proved the settings valid.
            let client = pooled_client(self.connect_timeout, follow).unwrap_or_else(|_| shared.clone());
            mine.push((key, client.clone()));
            client
        })
    }

    /// Records every exchange from now on.
    pub fn with_recorder(mut self, recorder: Recorder) -> Self {
        self.recorder = Some(Arc::new(recorder));
        self
    }

    /// Builds a request to `path` with the provider's key and, if given, a
    /// JSON body.
    fn request<'a>(
        &self,
        p: &'a Provider,
        method: http::Method,
        path: &str,
        json: Option<Vec<u8>>,
        key: Option<&str>,
    ) -> Result<Outgoing<'a>, UpstreamError> {
        let mut headers = HeaderMap::with_capacity(4);
        headers.insert(ACCEPT, HeaderValue::from_static("*/*"));
        if json.is_some() {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        if let Some(key) = key {
            let (name, value) = match &p.profile.auth_header {
                Some(h) => {
                    (HeaderName::from_bytes(h.as_bytes()).map_err(|e| bad_request(p, &e))?, HeaderValue::from_str(key))
                }
                None => (AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {key}"))),
            };
            let mut value = value.map_err(|e| bad_request(p, &e))?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        let body = json.map(Bytes::from).unwrap_or_default();
        if let Some(url) = p.direct_url(path) {
            headers.insert(HOST, url.host.clone());
            let mut req = http::Request::new(body);
            *req.method_mut() = method;
            *req.uri_mut() = url.target.clone();
            *req.headers_mut() = headers;
            return Ok(Outgoing::Direct(url, req));
        }
        let client = self.pooled(p.profile.follow_redirects);
        let rb = match p.parsed_url(path) {
            Some(url) => client.request(method, url),
            None => client.request(method, format!("{}/{}", p.base_url, path.trim_start_matches('/'))),
        };
        let req = rb.headers(headers).body(body).build().map_err(|e| bad_request(p, &e))?;
        Ok(Outgoing::Pooled(client, req))
    }

    /// POSTs a JSON body with the provider's first key and classifies the answer.
    pub async fn post(
        &self,
        p: &Provider,
        path: &str,
        body: &impl serde::Serialize,
        shown: Shown<'_>,
    ) -> Result<Reply, UpstreamError> {
        self.post_with(p, path, body, p.api_key(), shown).await
    }

    /// POSTs a JSON body with `key` (one of the provider's) and classifies
    /// the answer.
    pub async fn post_with(
        &self,
        p: &Provider,
        path: &str,
        body: &impl serde::Serialize,
        key: Option<&str>,
        shown: Shown<'_>,
    ) -> Result<Reply, UpstreamError> {
        let json = serde_json::to_vec(body).map_err(|e| bad_request(p, &e))?;
        if let Some(c) = shown {
            c.upstream_request(&p.name, path, &json);
        }
        let out = self.request(p, http::Method::POST, path, Some(json), key)?;
        let recorded = || serde_json::to_value(body).unwrap_or(Value::Null);
        let sent = self.send(p, out, recorded).await;
        if let (Some(c), Err(e)) = (shown, &sent) {
            c.upstream_answer(e.to_string().as_bytes());
        }
        let (resp, mut rec) = sent?;
        let status = resp.status().as_u16();
        if let Some(r) = rec.as_mut() {
            r.head(status, resp.headers());
        }
        if let Some(c) = shown {
            c.upstream_status(status);
        }
        let is_sse = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if (300..400).contains(&status) {
            return Err(redirected(p, &resp, rec).await);
        }
        encoded(p, resp.headers())?;
        if status >= 400 {
            let retry_after = super::errors::retry_after(resp.headers());
            let bytes = self.read(p, resp, rec, self.max_answer).await?;
            if let Some(c) = shown {
                c.upstream_answer(&bytes);
            }
            return Err(super::errors::with_retry_after(map_error(&p.profile, status, &bytes), retry_after));
        }
        let idle = crate::config::limits::secs(p.upstream.idle_timeout_secs);
        if is_sse {
            let body = resp.into_body().into_data_stream();
            let events = super::sse_in::events(body, idle, self.max_answer, rec);
            return Ok(Reply::Events(match shown {
                None => events,
                Some(c) => {
                    use futures_util::StreamExt as _;
                    let c = c.clone();
                    Events::new(events.inspect(move |ev| {
                        if let Ok(data) = ev {
                            c.upstream_event(&data.lossy());
                        }
                    }))
                }
            }));
        }
        let bytes = self.read(p, resp, rec, self.max_answer).await?;
        if let Some(c) = shown {
            c.upstream_answer(&bytes);
        }
        if looks_like_sse(&bytes) {
            // A stream served under the wrong content type (seen behind
            // misconfigured gateways): parse it as what it is.
            let body = futures_util::stream::iter([Ok::<_, std::convert::Infallible>(bytes)]);
            return Ok(Reply::Events(super::sse_in::events(body, idle, self.max_answer, None)));
        }
        let body = JsonBody(bytes);
        // Errors sent with a 200 (`base_resp`, `error_code`, `error` bodies)
        // need the tree; only a body that names one of those keys pays for
        // it, or one that is not even shaped like an object (an HTML page, a
        // plain-text error), which fails here as a protocol error, as before:
        // it counts against the circuit breaker and moves a chain along.
        let trimmed = body.0.trim_ascii();
        let object_like = trimmed.first() == Some(&b'{') && trimmed.last() == Some(&b'}');
        // Built once: a searcher made per call cost more than the search.
        static ERROR: LazyLock<memmem::Finder<'static>> = LazyLock::new(|| memmem::Finder::new(b"\"error"));
        static BASE_RESP: LazyLock<memmem::Finder<'static>> = LazyLock::new(|| memmem::Finder::new(b"\"base_resp"));
        if !object_like || ERROR.find(trimmed).is_some() || BASE_RESP.find(trimmed).is_some() {
            let v: Value = body.parse("JSON")?;
            if let Some(err) = error_in_success(&p.profile, &v) {
                return Err(err);
            }
        }
        Ok(Reply::Json(body))
    }

    /// GETs a path and returns the JSON body, read up to `max_bytes` (and
    /// `[limits] max_answer_bytes`).
    pub async fn get_json(&self, p: &Provider, path: &str, max_bytes: usize) -> Result<Value, UpstreamError> {
        let out = self.request(p, http::Method::GET, path, None, p.api_key())?;
        let (resp, mut rec) = self.send(p, out, || Value::Null).await?;
        let status = resp.status().as_u16();
        if let Some(r) = rec.as_mut() {
            r.head(status, resp.headers());
        }
        if (300..400).contains(&status) {
            return Err(redirected(p, &resp, rec).await);
        }
        encoded(p, resp.headers())?;
        let bytes = self.read(p, resp, rec, max_bytes.min(self.max_answer)).await?;
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
        out: Outgoing<'_>,
        body: impl FnOnce() -> Value,
    ) -> Result<(Answer, Option<Recording>), UpstreamError> {
        let rec = self.recorder.as_ref().map(|r| {
            let (method, path, headers) = out.parts();
            r.start(&p.name, method.as_str(), path, headers, body())
        });
        let limit = Duration::from_secs_f64(p.upstream.first_byte_timeout_secs);
        let sent = async {
            match out {
                Outgoing::Direct(url, req) => match self.direct.send(url, req).await {
                    Ok(r) => Ok(r.map(Either::Left)),
                    Err(Failed::Connect(e)) if timed_out(&*e) => {
                        Err(UpstreamError::Timeout(format!("{}: {}", p.name, error_chain(&*e))))
                    }
                    Err(Failed::Connect(e)) => Err(UpstreamError::Connect(format!("{}: {}", p.name, error_chain(&*e)))),
                    Err(Failed::Send(e)) => Err(UpstreamError::Connect(format!("{}: {}", p.name, error_chain(&e)))),
                },
                Outgoing::Pooled(client, req) => match client.execute(req).await {
                    Ok(r) => Ok(http::Response::from(r).map(Either::Right)),
                    Err(e) if e.is_timeout() => Err(UpstreamError::Timeout(format!("{}: {e}", p.name))),
                    Err(e) => Err(UpstreamError::Connect(format!("{}: {}", p.name, error_chain(&e)))),
                },
            }
        };
        match tokio::time::timeout(limit, sent).await {
            Err(_) => Err(UpstreamError::Timeout(format!("{} sent no response within {limit:?}", p.name))),
            Ok(r) => r.map(|resp| (resp, rec)),
        }
    }
}

/// A request that cannot be built (a key or auth header name that is not a
/// valid header): reported like a failed connection, as it never left.
fn bad_request(p: &Provider, e: &dyn std::error::Error) -> UpstreamError {
    UpstreamError::Connect(format!("{}: cannot build the request: {e}", p.name))
}

/// Whether hyper's client gave up connecting because of the connect timeout.
fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut src = Some(e);
    while let Some(x) = src {
        if x.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut) {
            return true;
        }
        src = x.source();
    }
    false
}

/// A redirect that was not followed (see [`pooled_client`]): a 502 that
/// says where it pointed.
async fn redirected(p: &Provider, resp: &Answer, rec: Option<Recording>) -> UpstreamError {
    let status = resp.status().as_u16();
    let to = resp.headers().get(http::header::LOCATION).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    if let Some(r) = rec {
        r.body(b"");
    }
    let to: String = to.map_or_else(|| "nowhere".into(), |t| t.chars().take(200).collect());
    let why = if p.profile.follow_redirects {
        "it leaves the upstream's origin, or redirects too often"
    } else {
        "redirects are followed only when the profile sets follow_redirects"
    };
    UpstreamError::Protocol(format!("{} answered HTTP {status}, a redirect to {to}; not followed: {why}", p.name))
}

impl Upstream {
    /// Reads a whole body (and records it): at most `cap` bytes, all
    /// of it within the provider's `idle_timeout_secs` of the headers (an
    /// upstream that sends its headers and then nothing, or trickles, is
    /// not waited on for ever).
    async fn read(
        &self,
        p: &Provider,
        resp: Answer,
        rec: Option<Recording>,
        cap: usize,
    ) -> Result<Bytes, UpstreamError> {
        let limit = crate::config::limits::secs(p.upstream.idle_timeout_secs);
        let body = http_body_util::Limited::new(resp.into_body(), cap);
        let bytes = match tokio::time::timeout(limit, body.collect()).await {
            Err(_) => {
                return Err(UpstreamError::Timeout(format!("{} sent no whole body within {limit:?}", p.name)));
            }
            Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
                let key = if cap == self.max_answer { " ([limits] max_answer_bytes)" } else { "" };
                return Err(UpstreamError::Protocol(format!(
                    "{}: the answer is larger than the limit of {cap} bytes{key}",
                    p.name
                )));
            }
            Ok(Err(e)) => return Err(UpstreamError::Connect(error_chain(&*e))),
            Ok(Ok(b)) => b.to_bytes(),
        };
        if let Some(r) = rec {
            r.body(&bytes);
        }
        Ok(bytes)
    }
}

/// A body in a content coding: never asked for (no `Accept-Encoding` is
/// sent) and never decoded, so it is refused rather than read as garbage.
fn encoded(p: &Provider, headers: &HeaderMap) -> Result<(), UpstreamError> {
    match headers.get(http::header::CONTENT_ENCODING).map(HeaderValue::as_bytes) {
        None => Ok(()),
        Some(v) if v.eq_ignore_ascii_case(b"identity") => Ok(()),
        Some(v) => Err(UpstreamError::Protocol(format!(
            "{} sent a body with content-encoding {}, which was not asked for",
            p.name,
            String::from_utf8_lossy(v)
        ))),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connect_timeout_is_told_from_other_failures() {
        let timeout = std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timeout");
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert!(timed_out(&timeout));
        assert!(!timed_out(&refused));
    }
}
