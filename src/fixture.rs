//! Recorded exchanges ("fixtures") and the replay server that serves them as
//! an OpenAI-compatible upstream. The bundled `demo` provider is this server
//! running in-process on a loopback port, so the demo goes through exactly
//! the same proxy path as a real vendor.
//!
//! A fixture is one JSON file: `{name?, provider?, model?, request: {method,
//! path, body}, response: {status, headers?, body? | sse?: [{data,
//! delay_ms?}]}}`. A request is matched by its canonical body hash, then by
//! (path, model, stream) in recording order.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// One recorded exchange.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fixture {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub provider: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    pub request: RecordedRequest,
    pub response: RecordedResponse,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecordedRequest {
    #[serde(default = "post")]
    pub method: String,
    pub path: String,
    #[serde(default)]
    pub body: Value,
}

fn post() -> String {
    "POST".into()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecordedResponse {
    #[serde(default = "ok")]
    pub status: u16,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub body: Option<Value>,
    #[serde(default)]
    pub sse: Option<Vec<SseEvent>>,
}

fn ok() -> u16 {
    200
}

/// One SSE event as the upstream sent it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SseEvent {
    pub data: String,
    /// Time since the previous event.
    #[serde(default)]
    pub delay_ms: u64,
}

/// Fields that change between otherwise equal requests.
const VOLATILE: &[&str] = &["user", "metadata", "request_id", "stream_options"];

/// The hash requests are matched by: method, path and the body with sorted
/// keys and volatile fields removed.
pub fn request_key(method: &str, path: &str, body: &Value) -> String {
    let mut b = body.clone();
    if let Some(o) = b.as_object_mut() {
        for k in VOLATILE {
            o.remove(*k);
        }
    }
    let mut h = Sha256::new();
    h.update(method.as_bytes());
    h.update(b" ");
    h.update(path.as_bytes());
    h.update(b"\n");
    h.update(canonical(&b).as_bytes());
    h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// JSON with object keys sorted, independent of `preserve_order`.
fn canonical(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> =
                keys.iter().map(|k| format!("{}:{}", Value::String((*k).clone()), canonical(&m[*k]))).collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(a) => format!("[{}]", a.iter().map(canonical).collect::<Vec<_>>().join(",")),
        other => other.to_string(),
    }
}

struct Entry {
    source: String,
    key: String,
    fx: Fixture,
}

/// The replay server's state.
pub struct Replay {
    entries: Vec<Entry>,
    /// Round-robin position per (path, model, stream) fallback group.
    cursors: std::sync::Mutex<BTreeMap<String, usize>>,
    served: AtomicUsize,
    /// Multiplier on recorded delays (0 = as fast as possible).
    speed: f64,
}

impl Replay {
    /// Builds the server from `(source name, file text)` pairs; a file that
    /// does not parse is reported and skipped.
    pub fn new(files: impl IntoIterator<Item = (String, String)>, speed: f64) -> (Self, Vec<String>) {
        let mut entries = Vec::new();
        let mut problems = Vec::new();
        for (source, text) in files {
            match serde_json::from_str::<Fixture>(&text) {
                Ok(fx) => {
                    let key = request_key(&fx.request.method, &fx.request.path, &fx.request.body);
                    entries.push(Entry { source, key, fx });
                }
                Err(e) => problems.push(format!("{source}: not a fixture: {e}")),
            }
        }
        (Replay { entries, cursors: Default::default(), served: AtomicUsize::new(0), speed }, problems)
    }

    /// The bundled demo fixtures.
    pub fn demo() -> Self {
        static DEMO: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/bundled_demo.rs"));
        Self::new(DEMO.iter().map(|(n, t)| (format!("demo/{n}.json"), t.to_string())), 0.0).0
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn find(&self, method: &str, path: &str, body: &Value) -> Option<&Entry> {
        let key = request_key(method, path, body);
        if let Some(e) = self.entries.iter().find(|e| e.key == key) {
            return Some(e);
        }
        let group = |b: &Value| {
            format!(
                "{method} {path} {} {}",
                b.get("model").unwrap_or(&Value::Null),
                b.get("stream").and_then(Value::as_bool).unwrap_or(false)
            )
        };
        let g = group(body);
        let candidates: Vec<&Entry> = self
            .entries
            .iter()
            .filter(|e| {
                e.fx.request.method.eq_ignore_ascii_case(method)
                    && e.fx.request.path == path
                    && group(&e.fx.request.body) == g
            })
            .collect();
        if candidates.is_empty() {
            return None;
        }
        let mut cur = self.cursors.lock().unwrap_or_else(|p| p.into_inner());
        let n = cur.entry(g).or_insert(0);
        let e = candidates[*n % candidates.len()];
        *n += 1;
        Some(e)
    }

    /// The recording most like a request, for the 404 message.
    fn closest(&self, path: &str, body: &Value) -> Option<&Entry> {
        let model = body.get("model");
        self.entries
            .iter()
            .max_by_key(|e| (e.fx.request.path == path) as u8 * 2 + (e.fx.request.body.get("model") == model) as u8)
    }

    fn respond(&self, e: &Entry) -> Response {
        self.served.fetch_add(1, Ordering::Relaxed);
        let r = &e.fx.response;
        let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::OK);
        let mut builder = Response::builder().status(status);
        for (k, v) in &r.headers {
            if !k.eq_ignore_ascii_case("content-length") && !k.eq_ignore_ascii_case("transfer-encoding") {
                builder = builder.header(k, v);
            }
        }
        let body = match &r.sse {
            Some(events) => {
                if !r.headers.keys().any(|k| k.eq_ignore_ascii_case("content-type")) {
                    builder = builder.header("content-type", "text/event-stream");
                }
                let events = events.clone();
                let speed = self.speed;
                Body::from_stream(async_stream::stream! {
                    for ev in events {
                        if speed > 0.0 && ev.delay_ms > 0 {
                            tokio::time::sleep(Duration::from_secs_f64(ev.delay_ms as f64 * speed / 1000.0)).await;
                        }
                        yield Ok::<_, std::convert::Infallible>(Bytes::from(format!("data: {}\n\n", ev.data)));
                    }
                })
            }
            None => {
                if !r.headers.keys().any(|k| k.eq_ignore_ascii_case("content-type")) {
                    builder = builder.header("content-type", "application/json");
                }
                Body::from(r.body.as_ref().map(Value::to_string).unwrap_or_default())
            }
        };
        builder.body(body).unwrap_or_else(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response())
    }
}

/// The replay server's router: every path is answered from the recordings.
pub fn router(replay: Arc<Replay>) -> Router {
    Router::new().fallback(serve).with_state(replay)
}

async fn serve(State(r): State<Arc<Replay>>, method: Method, uri: Uri, body: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let path = uri.path();
    if let Some(e) = r.find(method.as_str(), path, &body) {
        return r.respond(e);
    }
    let hint = match r.closest(path, &body) {
        Some(e) => format!(
            " The closest recording is {} ({} {}, model {}).",
            e.source,
            e.fx.request.method,
            e.fx.request.path,
            e.fx.request.body.get("model").unwrap_or(&Value::Null)
        ),
        None => " There are no recordings.".to_string(),
    };
    let err = crate::error::ErrorObject::new(
        "invalid_request_error",
        format!("No recording matches {method} {path} (model {}).{hint}", body.get("model").unwrap_or(&Value::Null)),
    )
    .with_code("no_recording");
    (StatusCode::NOT_FOUND, axum::Json(err.to_body())).into_response()
}

/// Starts a replay server on `addr`; returns its bound address.
pub async fn spawn(replay: Arc<Replay>, addr: &str) -> std::io::Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router(replay)).await {
            tracing::error!("replay server stopped: {e}");
        }
    });
    Ok(local)
}
