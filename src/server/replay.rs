//! The replay server: recorded exchanges ([`crate::fixture`]) served as an
//! OpenAI-compatible upstream. The bundled `demo` provider is this server
//! running in-process on a loopback port, so the demo goes through exactly
//! the same proxy path as a real vendor.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::fixture::{Fixture, FixtureError, endpoint, request_key, roles};

struct Entry {
    source: String,
    key: String,
    fx: Fixture,
}

/// How a request was matched (for tests and logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matched {
    /// Same canonical body.
    Exact,
    /// Same endpoint, model, stream flag and message roles.
    Shape,
    /// Same endpoint, model and stream flag, in recording order.
    Fallback,
}

/// The replay server's state.
pub struct Replay {
    entries: Vec<Entry>,
    /// Round-robin position per match group (exact key or fallback group).
    cursors: std::sync::Mutex<BTreeMap<String, usize>>,
    served: AtomicUsize,
    exact: AtomicUsize,
    /// Multiplier on recorded delays (0 = as fast as possible).
    speed: f64,
}

impl Replay {
    /// Builds the server from `(source name, file text)` pairs; a file that
    /// is not a valid fixture is reported (naming it) and skipped, so one
    /// bad file does not take the others down.
    pub fn new(files: impl IntoIterator<Item = (String, String)>, speed: f64) -> (Self, Vec<FixtureError>) {
        let mut entries = Vec::new();
        let mut problems = Vec::new();
        for (source, text) in files {
            match Fixture::parse(&source, &text) {
                Ok(fx) => {
                    let key = request_key(&fx.request.method, &fx.request.path, &fx.request.body);
                    entries.push(Entry { source, key, fx });
                }
                Err(e) => problems.push(e),
            }
        }
        // Recording order: by timestamp where recorded, else as given (stable).
        entries.sort_by_key(|e| e.fx.recorded_at.unwrap_or(0));
        let speed = if speed.is_finite() && speed > 0.0 { speed } else { 0.0 };
        let replay = Replay {
            entries,
            cursors: Default::default(),
            served: AtomicUsize::new(0),
            exact: AtomicUsize::new(0),
            speed,
        };
        (replay, problems)
    }

    /// Loads every `*.json` under `dir` (recursively, in path order). A
    /// missing or unreadable directory is an error; a bad file is a problem
    /// reported next to the server that serves the rest.
    pub fn load_dir(dir: &Path, speed: f64) -> Result<(Self, Vec<FixtureError>), FixtureError> {
        let mut paths = Vec::new();
        collect_json(dir, &mut paths)?;
        paths.sort();
        let mut problems = Vec::new();
        let mut files = Vec::new();
        for path in paths {
            match std::fs::read_to_string(&path) {
                Ok(t) => files.push((path.display().to_string(), t)),
                Err(source) => problems.push(FixtureError::Read { path, source }),
            }
        }
        let (replay, mut bad) = Replay::new(files, speed);
        problems.append(&mut bad);
        Ok((replay, problems))
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

    /// Requests answered so far, and how many of them matched exactly.
    pub fn served(&self) -> (usize, usize) {
        (self.served.load(Ordering::Relaxed), self.exact.load(Ordering::Relaxed))
    }

    /// The next recording of a group, round robin in recording order.
    fn next<'a>(&'a self, group: String, candidates: &[&'a Entry]) -> Option<&'a Entry> {
        if candidates.is_empty() {
            return None;
        }
        let mut cur = self.cursors.lock().unwrap_or_else(|p| p.into_inner());
        let n = cur.entry(group).or_insert(0);
        let e = candidates[*n % candidates.len()];
        *n += 1;
        Some(e)
    }

    fn find(&self, method: &str, path: &str, body: &Value) -> Option<(&Entry, Matched)> {
        let key = request_key(method, path, body);
        let same: Vec<&Entry> = self.entries.iter().filter(|e| e.key == key).collect();
        if let Some(e) = self.next(format!("key {key}"), &same) {
            return Some((e, Matched::Exact));
        }
        let group = |m: &str, p: &str, b: &Value| {
            format!(
                "{} {} {} {}",
                m.to_ascii_uppercase(),
                endpoint(p),
                b.get("model").unwrap_or(&Value::Null),
                b.get("stream").and_then(Value::as_bool).unwrap_or(false)
            )
        };
        let g = group(method, path, body);
        let candidates: Vec<&Entry> = self
            .entries
            .iter()
            .filter(|e| group(&e.fx.request.method, &e.fx.request.path, &e.fx.request.body) == g)
            .collect();
        let shape = roles(body);
        let same_shape: Vec<&Entry> =
            candidates.iter().copied().filter(|e| roles(&e.fx.request.body) == shape).collect();
        if let Some(e) = self.next(format!("{g} {shape}"), &same_shape) {
            return Some((e, Matched::Shape));
        }
        self.next(g, &candidates).map(|e| (e, Matched::Fallback))
    }

    /// The recording most like a request, for the 404 message.
    fn closest(&self, path: &str, body: &Value) -> Option<&Entry> {
        let model = body.get("model");
        let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
        self.entries.iter().max_by_key(|e| {
            let b = &e.fx.request.body;
            (endpoint(&e.fx.request.path) == endpoint(path)) as u8 * 4
                + (b.get("model") == model) as u8 * 2
                + (b.get("stream").and_then(Value::as_bool).unwrap_or(false) == stream) as u8
        })
    }

    fn respond(&self, e: &Entry, how: Matched) -> Response {
        self.served.fetch_add(1, Ordering::Relaxed);
        if how == Matched::Exact {
            self.exact.fetch_add(1, Ordering::Relaxed);
        }
        tracing::debug!(fixture = %e.source, ?how, "replaying");
        let r = &e.fx.response;
        let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::OK);
        let mut builder = Response::builder().status(status);
        for (k, v) in &r.headers {
            if !k.eq_ignore_ascii_case("content-length") && !k.eq_ignore_ascii_case("transfer-encoding") {
                builder = builder.header(k, v);
            }
        }
        let has_type = r.headers.keys().any(|k| k.eq_ignore_ascii_case("content-type"));
        let body = match (&r.sse, &r.text) {
            (Some(events), _) => {
                if !has_type {
                    builder = builder.header("content-type", "text/event-stream");
                }
                let events = events.clone();
                let speed = self.speed;
                // One body chunk per recorded event keeps the recorded chunk
                // boundaries; the pause before each is its recorded delay.
                Body::from_stream(async_stream::stream! {
                    for ev in events {
                        if speed > 0.0 && ev.delay_ms > 0 {
                            tokio::time::sleep(Duration::from_secs_f64(ev.delay_ms as f64 * speed / 1000.0)).await;
                        }
                        yield Ok::<_, std::convert::Infallible>(Bytes::from(ev.to_wire()));
                    }
                })
            }
            (None, Some(text)) => {
                if !has_type {
                    builder = builder.header("content-type", "text/plain");
                }
                Body::from(text.clone())
            }
            (None, None) => {
                if !has_type {
                    builder = builder.header("content-type", "application/json");
                }
                Body::from(r.body.as_ref().map(Value::to_string).unwrap_or_default())
            }
        };
        builder.body(body).unwrap_or_else(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response())
    }
}

fn collect_json(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), FixtureError> {
    let read = std::fs::read_dir(dir).map_err(|source| FixtureError::Read { path: dir.into(), source })?;
    for e in read {
        let path = e.map_err(|source| FixtureError::Read { path: dir.into(), source })?.path();
        if path.is_dir() {
            collect_json(&path, out)?;
        } else if path.extension().is_some_and(|x| x == "json") {
            out.push(path);
        }
    }
    Ok(())
}

/// The replay server's router: every path is answered from the recordings.
pub fn router(replay: Arc<Replay>) -> Router {
    Router::new().fallback(serve).with_state(replay)
}

async fn serve(State(r): State<Arc<Replay>>, method: Method, uri: Uri, body: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let path = uri.path();
    if let Some((e, how)) = r.find(method.as_str(), path, &body) {
        return r.respond(e, how);
    }
    let hint = match r.closest(path, &body) {
        Some(e) => format!(
            " The closest recording is {} ({} {}, model {}, stream {}).",
            e.source,
            e.fx.request.method,
            e.fx.request.path,
            e.fx.request.body.get("model").unwrap_or(&Value::Null),
            e.fx.request.body.get("stream").and_then(Value::as_bool).unwrap_or(false)
        ),
        None => " There are no recordings.".to_string(),
    };
    tracing::warn!("no recording for {method} {path}");
    let err = crate::error::ErrorObject::new(
        "invalid_request_error",
        format!(
            "No recording matches {method} {path} (model {}, stream {}).{hint}",
            body.get("model").unwrap_or(&Value::Null),
            body.get("stream").and_then(Value::as_bool).unwrap_or(false)
        ),
    )
    .with_code("no_recording");
    (StatusCode::NOT_FOUND, axum::Json(err.to_body())).into_response()
}

/// Starts a replay server on `addr`; returns its bound address.
pub async fn spawn(replay: Arc<Replay>, addr: &str) -> std::io::Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(crate::server::shutdown::nodelay(listener), router(replay)).await {
            tracing::error!("replay server stopped: {e}");
        }
    });
    Ok(local)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bad_files_are_named_and_skipped() {
        let good = Fixture::chat("p", "m").json(200, json!({"ok": true})).to_pretty();
        let files = vec![
            ("a.json".to_string(), good),
            ("b.json".to_string(), "{not json".to_string()),
            ("c.json".to_string(), r#"{"request": {"path": "/v1/x"}, "response": {"status": 1000}}"#.to_string()),
        ];
        let (r, problems) = Replay::new(files, 0.0);
        assert_eq!(r.len(), 1);
        let msgs: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert!(msgs[0].starts_with("b.json: not a fixture"), "{msgs:?}");
        assert!(msgs[1].starts_with("c.json: not a fixture") && msgs[1].contains("1000"), "{msgs:?}");
    }

    #[test]
    fn steps_of_a_tool_loop_match_by_their_message_roles() {
        let step = |msgs: Value, text: &str| {
            Fixture::chat("p", "m").with("messages", msgs).json(200, json!({"text": text})).to_pretty()
        };
        let first = json!([{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]);
        let second = json!([{"role": "system", "content": "S"}, {"role": "user", "content": "Q"},
                            {"role": "assistant", "content": null}, {"role": "tool", "content": "R"}]);
        let files = vec![("a.json".to_string(), step(first, "one")), ("b.json".to_string(), step(second, "two"))];
        let (r, _) = Replay::new(files, 0.0);
        let ask = |msgs: Value| json!({"model": "m", "stream": false, "messages": msgs});
        let other_second = json!([{"role": "system", "content": "other"}, {"role": "user", "content": "Q2"},
                                  {"role": "assistant", "content": "x"}, {"role": "tool", "content": "R2"}]);
        for _ in 0..2 {
            let (e, how) = r.find("POST", "/v1/chat/completions", &ask(other_second.clone())).unwrap();
            assert_eq!((e.source.as_str(), how), ("b.json", Matched::Shape));
        }
        let (_, how) = r.find("POST", "/v1/chat/completions", &ask(json!([{"role": "user"}]))).unwrap();
        assert_eq!(how, Matched::Fallback);
    }
}
