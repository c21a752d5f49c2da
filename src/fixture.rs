//! Recorded exchanges ("fixtures"): the format `serve --record` writes (see
//! `provider/record.rs`) and the replay server (`server::replay`) serves,
//! and how a request is matched to a recording.
//!
//! A fixture is one JSON file: `{name?, provider?, model?, recorded_at?,
//! client_request?, request: {method, path, headers?, body}, response:
//! {status, headers?, body? | text? | sse?: [{event?, data, delay_ms?}]}}`.
//! Every field added after the first version is optional, so old files stay
//! valid. A request is matched by [`request_key`] (endpoint and canonical
//! body, volatile fields ignored), then by (endpoint, model, stream) and the
//! roles of its messages (so the steps of a tool loop find their own
//! recording even when a system prompt differs), then by (endpoint, model,
//! stream) alone; several recordings that match are served in recording
//! order, round robin.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// One recorded exchange.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fixture {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The provider (config name) the exchange went to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The upstream model name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Milliseconds since the Unix epoch; orders recordings that match the
    /// same request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_at: Option<u64>,
    /// What a client sends through the proxy to cause this exchange, when it
    /// differs from `request.body` beyond the `provider/` model prefix (the
    /// proxy rewrites requests per profile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_request: Option<Value>,
    pub request: RecordedRequest,
    pub response: RecordedResponse,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecordedRequest {
    #[serde(default = "post")]
    pub method: String,
    pub path: String,
    /// Request headers as sent, credentials redacted (informational; not
    /// used for matching).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
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
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// A JSON body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// A body that is not JSON (plain-text errors, SSE under a wrong content
    /// type), replayed byte for byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// A streamed body, one entry per SSE event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sse: Option<Vec<SseEvent>>,
}

fn ok() -> u16 {
    200
}

/// One SSE event as the upstream sent it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SseEvent {
    /// The event name, when the upstream named it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    pub data: String,
    /// Time since the previous event.
    #[serde(default)]
    pub delay_ms: u64,
}

impl SseEvent {
    pub fn data(data: impl Into<String>) -> Self {
        SseEvent { event: None, data: data.into(), delay_ms: 0 }
    }

    /// The event on the wire (multi-line data as several `data:` lines).
    pub(crate) fn to_wire(&self) -> String {
        let mut s = String::new();
        if let Some(e) = &self.event {
            s.push_str("event: ");
            s.push_str(e);
            s.push('\n');
        }
        for line in self.data.split('\n') {
            s.push_str("data: ");
            s.push_str(line);
            s.push('\n');
        }
        s.push('\n');
        s
    }
}

/// A fixture that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    #[error("{path}: cannot read: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: not a fixture: {reason}")]
    Invalid { path: String, reason: String },
}

impl Fixture {
    /// Parses and checks one fixture file's text; `source` names it in errors.
    pub fn parse(source: &str, text: &str) -> Result<Fixture, FixtureError> {
        let invalid = |reason: String| FixtureError::Invalid { path: source.to_string(), reason };
        let fx: Fixture = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let r = &fx.response;
        if axum::http::StatusCode::from_u16(r.status).is_err() {
            return Err(invalid(format!("response.status {} is not an HTTP status", r.status)));
        }
        let bodies = r.body.is_some() as u8 + r.text.is_some() as u8 + r.sse.is_some() as u8;
        if bodies > 1 {
            return Err(invalid("response has more than one of body, text and sse".into()));
        }
        if !fx.request.path.starts_with('/') {
            return Err(invalid(format!("request.path {:?} must start with '/'", fx.request.path)));
        }
        Ok(fx)
    }

    /// Starts a chat-completions fixture for `provider`'s upstream `model`
    /// with a one-line user message; finish it with [`Fixture::stream`] or
    /// [`Fixture::json`]. This is the helper for writing regression cases:
    ///
    /// ```
    /// use modelshim::fixture::Fixture;
    /// use serde_json::json;
    /// let fx = Fixture::chat("ollama", "qwen3:8b")
    ///     .named("ollama/ollama#7881: tool-call deltas without index")
    ///     .stream(vec![json!({"choices": [{"index": 0, "delta": {"content": "hi"}}]})]);
    /// assert!(fx.to_pretty().contains("[DONE]"));
    /// ```
    pub fn chat(provider: &str, model: &str) -> Fixture {
        Fixture {
            name: None,
            provider: Some(provider.to_string()),
            model: Some(model.to_string()),
            recorded_at: None,
            client_request: None,
            request: RecordedRequest {
                method: post(),
                path: "/v1/chat/completions".into(),
                headers: BTreeMap::new(),
                body: json!({"model": model, "messages": [{"role": "user", "content": "Hello!"}]}),
            },
            response: RecordedResponse { status: 200, headers: BTreeMap::new(), body: None, text: None, sse: None },
        }
    }

    pub fn named(mut self, name: &str) -> Self {
        self.name = Some(name.to_string());
        self
    }

    /// Sets a request body field (`messages`, `tools`, …).
    pub fn with(mut self, key: &str, value: Value) -> Self {
        if let Some(o) = self.request.body.as_object_mut() {
            o.insert(key.to_string(), value);
        }
        self
    }

    /// A streamed answer: one SSE event per chunk, then `[DONE]`.
    pub fn stream(mut self, chunks: Vec<Value>) -> Self {
        self = self.with("stream", json!(true));
        let mut events: Vec<SseEvent> = chunks.iter().map(|c| SseEvent::data(c.to_string())).collect();
        events.push(SseEvent::data("[DONE]"));
        self.response.headers.insert("content-type".into(), "text/event-stream".into());
        self.response.sse = Some(events);
        self.response.body = None;
        self
    }

    /// A JSON answer with `status`.
    pub fn json(mut self, status: u16, body: Value) -> Self {
        self = self.with("stream", json!(false));
        self.response.status = status;
        self.response.headers.insert("content-type".into(), "application/json".into());
        self.response.body = Some(body);
        self.response.sse = None;
        self
    }

    /// The file text: pretty JSON.
    pub fn to_pretty(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }

    /// The file name the recorder uses: provider, model and request hash.
    pub fn file_stem(&self) -> String {
        let key = request_key(&self.request.method, &self.request.path, &self.request.body);
        let clean = |s: &str| -> String {
            s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).collect()
        };
        format!(
            "{}__{}__{key}",
            clean(self.provider.as_deref().unwrap_or("upstream")),
            clean(self.model.as_deref().or(self.request.body["model"].as_str()).unwrap_or("none"))
        )
    }
}

/// Fields that change between otherwise equal requests.
const VOLATILE: &[&str] = &["user", "metadata", "request_id", "stream_options"];

/// The API endpoint of a path: what follows the last version segment
/// (`/api/paas/v4/chat/completions` → `/chat/completions`), so a recording
/// replays under any base URL.
pub fn endpoint(path: &str) -> &str {
    let is_version = |s: &str| s.len() > 1 && s.starts_with('v') && s[1..].bytes().all(|b| b.is_ascii_digit());
    let mut cut = None;
    let mut pos = 0;
    for seg in path.split('/') {
        let end = pos + seg.len();
        if is_version(seg) {
            cut = Some(end);
        }
        pos = end + 1;
    }
    match cut {
        Some(c) if c < path.len() => &path[c..],
        Some(_) => "/",
        None => path,
    }
}

/// The hash requests are matched by: method, endpoint and the body with
/// sorted keys and volatile fields removed.
pub fn request_key(method: &str, path: &str, body: &Value) -> String {
    let mut b = body.clone();
    if let Some(o) = b.as_object_mut() {
        for k in VOLATILE {
            o.remove(*k);
        }
    }
    let mut h = Sha256::new();
    h.update(method.to_ascii_uppercase().as_bytes());
    h.update(b" ");
    h.update(endpoint(path).as_bytes());
    h.update(b"\n");
    h.update(canonical(&b).as_bytes());
    h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The roles of a request's messages, in order (`system,user,assistant,tool`).
pub(crate) fn roles(body: &Value) -> String {
    let msgs = body.get("messages").and_then(Value::as_array);
    let roles = msgs.into_iter().flatten().map(|m| m.get("role").and_then(Value::as_str).unwrap_or("?"));
    roles.collect::<Vec<_>>().join(",")
}

/// JSON with object keys sorted, independent of `preserve_order`.
pub(crate) fn canonical(v: &Value) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_strips_the_versioned_base() {
        assert_eq!(endpoint("/v1/chat/completions"), "/chat/completions");
        assert_eq!(endpoint("/api/paas/v4/chat/completions"), "/chat/completions");
        assert_eq!(endpoint("/compatible-mode/v1/embeddings"), "/embeddings");
        assert_eq!(endpoint("/chat/completions"), "/chat/completions");
        assert_eq!(endpoint("/v1"), "/");
    }

    #[test]
    fn volatile_fields_and_key_order_do_not_change_the_key() {
        let a = json!({"model": "m", "messages": [], "user": "u1", "stream_options": {"include_usage": true}});
        let b = json!({"messages": [], "model": "m"});
        assert_eq!(request_key("POST", "/v1/chat/completions", &a), request_key("post", "/v4/chat/completions", &b));
    }

    #[test]
    fn sse_events_keep_multiline_data_and_names() {
        let ev = SseEvent { event: Some("x".into()), data: "a\nb".into(), delay_ms: 0 };
        assert_eq!(ev.to_wire(), "event: x\ndata: a\ndata: b\n\n");
    }
}
