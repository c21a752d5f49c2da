//! The console's recorder (docs/console.md): a bounded ring of the recent
//! requests of this replica, each with its route, timings, tokens, retries
//! and fallbacks, its bodies (capped) and the agent loop's timeline, pushed
//! live to the open consoles.
//!
//! Off the hot path: the edge starts a record only while a console is open
//! (or `record_always`), one atomic load per request. A request's record
//! is an [`Entry`] its observer (`core::context::RequestCtx`) holds and
//! passes, as `Option<&Arc<Entry>>`, to the layers that record into it.
//!
//! Secrets: bodies are redacted whole (a key split across two stream frames
//! too) before anything is read out, and every answer the console serves is
//! redacted again; request headers are never kept.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::config::console::ConsoleConfig;
use crate::redact::Redactor;

/// Timeline entries kept per request (a loop runs `max_iterations` at most,
/// but a batch may be wide).
const MAX_TIMELINE: usize = 512;
/// Upstream exchanges kept per request (iterations, retries, fallbacks).
const MAX_EXCHANGES: usize = 64;
/// Bytes kept past a body's cap until it is redacted, so a secret cut by the
/// cap is still whole when the redactor looks for it.
const REDACT_MARGIN: usize = 512;
/// What one record keeps in all (bodies, tool results, images), in bodies'
/// caps: beyond it bytes are counted, not kept.
const RECORD_BODIES: usize = 8;
/// Live events an open console may lag behind before it skips some.
const CHANNEL: usize = 512;

/// A request's record, where one is kept, as the layers below its
/// observer are handed it.
pub type Shown<'a> = Option<&'a Arc<Entry>>;

/// The recorder of one server (one `AppState`).
pub struct Console {
    ring_size: usize,
    max_body: usize,
    always: bool,
    ring: Mutex<VecDeque<Arc<Entry>>>,
    watchers: AtomicUsize,
    events: tokio::sync::broadcast::Sender<Arc<str>>,
    redactor: Arc<Redactor>,
}

impl Console {
    /// A recorder redacting every one of `secrets` (provider, proxy and
    /// admin keys).
    pub fn new(cfg: &ConsoleConfig, secrets: &[String]) -> Arc<Console> {
        let (events, _) = tokio::sync::broadcast::channel(CHANNEL);
        Arc::new(Console {
            ring_size: cfg.ring_size.max(1),
            max_body: cfg.max_body_bytes,
            always: cfg.record_always,
            ring: Mutex::new(VecDeque::new()),
            watchers: AtomicUsize::new(0),
            events,
            redactor: Arc::new(Redactor::new(secrets)),
        })
    }

    /// Whether a request starting now is recorded.
    pub fn recording(&self) -> bool {
        self.always || self.watchers.load(Ordering::Relaxed) > 0
    }

    /// The open consoles (live streams).
    pub fn watchers(&self) -> usize {
        self.watchers.load(Ordering::Relaxed)
    }

    /// Counts an open console until the guard is dropped.
    pub fn watch(self: &Arc<Self>) -> Watch {
        self.watchers.fetch_add(1, Ordering::Relaxed);
        Watch(self.clone())
    }

    /// The live events (one JSON object each).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Arc<str>> {
        self.events.subscribe()
    }

    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// Starts the record of a request when recording; the oldest falls out
    /// of the ring.
    pub fn begin(&self, start: &Begin<'_>) -> Option<Arc<Entry>> {
        if !self.recording() {
            return None;
        }
        let mut budget = self.max_body.saturating_mul(RECORD_BODIES);
        let mut client_request = Body::default();
        client_request.push(start.body, self.max_body, &mut budget);
        let data = Data {
            budget,
            method: start.method.to_string(),
            path: start.path.to_string(),
            front: front(start.path),
            key: start.key.map(str::to_string),
            model: start.model.map(str::to_string),
            client_request,
            ..Data::default()
        };
        let entry = Arc::new(Entry {
            id: start.id.to_string(),
            at_ms: unix_ms(),
            start: start.start,
            max_body: self.max_body,
            events: self.events.clone(),
            redactor: self.redactor.clone(),
            data: Mutex::new(data),
        });
        if let Ok(mut ring) = self.ring.lock() {
            while ring.len() >= self.ring_size {
                ring.pop_front();
            }
            ring.push_back(entry.clone());
        }
        entry.changed();
        Some(entry)
    }

    /// Every request in the ring, newest first, as summaries.
    pub fn list(&self) -> Vec<Value> {
        let entries: Vec<Arc<Entry>> = self.ring.lock().map(|r| r.iter().rev().cloned().collect()).unwrap_or_default();
        entries.iter().map(|e| e.summary()).collect()
    }

    /// One request with its bodies and timeline.
    pub fn get(&self, id: &str) -> Option<Value> {
        let entry = self.ring.lock().ok()?.iter().rev().find(|e| e.id == id).cloned()?;
        Some(entry.detail())
    }

    /// How many requests the ring holds.
    pub fn len(&self) -> usize {
        self.ring.lock().map(|r| r.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An open console, counted while it lives.
pub struct Watch(Arc<Console>);

impl Drop for Watch {
    fn drop(&mut self) {
        self.0.watchers.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What the edge knows when a request starts.
pub struct Begin<'a> {
    pub id: &'a str,
    pub start: Instant,
    pub method: &'a str,
    pub path: &'a str,
    /// The proxy key's name (never the key).
    pub key: Option<&'a str>,
    pub model: Option<&'a str>,
    pub body: &'a [u8],
}

/// The API front a path belongs to.
fn front(path: &str) -> &'static str {
    if path.starts_with("/v1/chat/") {
        "chat"
    } else if path.starts_with("/v1/responses") {
        "responses"
    } else if path.starts_with("/v1/messages") {
        "messages"
    } else if path.starts_with("/v1/embeddings") {
        "embeddings"
    } else if path.starts_with("/v1/models") {
        "models"
    } else {
        "other"
    }
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A body as recorded: its first bytes (redacted when read out), its size.
#[derive(Default)]
struct Body {
    raw: Vec<u8>,
    bytes: usize,
}

impl Body {
    /// Keeps what fits under the cap and the record's `budget`.
    fn push(&mut self, b: &[u8], cap: usize, budget: &mut usize) {
        self.bytes += b.len();
        let room = (cap + REDACT_MARGIN).saturating_sub(self.raw.len()).min(*budget);
        let n = b.len().min(room);
        self.raw.extend_from_slice(&b[..n]);
        *budget -= n;
    }

    /// The text, redacted, then cut to `cap` bytes.
    fn show(&self, cap: usize, redactor: &Redactor) -> Value {
        let text = String::from_utf8_lossy(&self.raw);
        // A stream: a key split over two events is redacted in the
        // assembled text, not event by event.
        let stream = text.starts_with("data:") || text.starts_with("event:") || text.contains("\ndata:");
        let mut text = if stream { redactor.sse_text(&text) } else { redactor.text(&text).into_owned() };
        let truncated = text.len() > cap || self.bytes > self.raw.len();
        if text.len() > cap {
            let mut cut = cap;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        json!({"text": text, "bytes": self.bytes, "truncated": truncated})
    }
}

/// One upstream call.
#[derive(Default)]
struct Exchange {
    provider: String,
    path: String,
    at_ms: u64,
    request: Body,
    status: Option<u16>,
    response: Body,
}

#[derive(Default)]
struct Data {
    /// Bytes this record may still keep.
    budget: usize,
    method: String,
    path: String,
    front: &'static str,
    key: Option<String>,
    model: Option<String>,
    provider: Option<String>,
    upstream_model: Option<String>,
    status: Option<u16>,
    ttft_ms: Option<u64>,
    duration_ms: Option<u64>,
    done: bool,
    usage: Option<Value>,
    /// What the request cost (`docs/spend.md`), once it ended.
    cost: Option<Value>,
    recovered: u32,
    tool_calls: u32,
    retries: Vec<Value>,
    fallbacks: Vec<Value>,
    error: Option<String>,
    client_request: Body,
    client_response: Body,
    upstream: Vec<Exchange>,
    timeline: Vec<Value>,
}

/// The record of one request.
pub struct Entry {
    pub id: String,
    at_ms: u64,
    start: Instant,
    max_body: usize,
    events: tokio::sync::broadcast::Sender<Arc<str>>,
    redactor: Arc<Redactor>,
    data: Mutex<Data>,
}

impl Entry {
    fn update(&self, f: impl FnOnce(&mut Data)) {
        if let Ok(mut d) = self.data.lock() {
            f(&mut d);
        }
    }

    /// Tells the open consoles (nothing is built when none listens).
    fn changed(&self) {
        if self.events.receiver_count() == 0 {
            return;
        }
        let mut v = json!({"type": "request", "request": self.summary()});
        self.redactor.value(&mut v);
        let _ = self.events.send(Arc::from(v.to_string()));
    }

    fn elapsed_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// The route that serves it (the last tried).
    pub fn served(&self, provider: &str, model: &str) {
        self.update(|d| {
            d.provider = Some(provider.to_string());
            d.upstream_model = Some(model.to_string());
        });
        self.changed();
    }

    /// The response's status, known before its body.
    pub fn status(&self, status: u16) {
        self.update(|d| d.status = Some(status));
        self.changed();
    }

    /// The first answer from upstream arrived (the first one counts).
    pub fn first_token(&self) {
        let ms = self.elapsed_ms();
        let mut first = false;
        self.update(|d| {
            if d.ttft_ms.is_none() {
                d.ttft_ms = Some(ms);
                first = true;
            }
        });
        if first {
            self.changed();
        }
    }

    /// Token usage of one upstream answer, added up.
    pub fn usage(&self, u: &Value) {
        self.update(|d| {
            let total = d.usage.get_or_insert_with(|| json!({}));
            for k in ["prompt_tokens", "completion_tokens", "total_tokens"] {
                if let Some(n) = u.get(k).and_then(Value::as_u64) {
                    total[k] = json!(total.get(k).and_then(Value::as_u64).unwrap_or(0) + n);
                }
            }
        });
    }

    /// The usage of the whole request (the agent loop sums its own).
    pub fn set_usage(&self, u: &Value) {
        self.update(|d| d.usage = Some(u.clone()));
    }

    pub fn recovered(&self, n: u32) {
        self.update(|d| d.recovered += n);
    }

    pub fn retry(&self, provider: &str, reason: &str, error: &str) {
        let ms = self.elapsed_ms();
        self.update(|d| {
            if d.retries.len() < MAX_EXCHANGES {
                d.retries.push(json!({"provider": provider, "reason": reason, "error": error, "at_ms": ms}));
            }
        });
        self.changed();
    }

    pub fn fallback(&self, from: &str, to: &str, error: &str) {
        let ms = self.elapsed_ms();
        self.update(|d| {
            if d.fallbacks.len() < MAX_EXCHANGES {
                d.fallbacks.push(json!({"from": from, "to": to, "error": error, "at_ms": ms}));
            }
        });
        self.changed();
    }

    /// The error the client was given, when there was one.
    pub fn error(&self, message: &str) {
        self.update(|d| d.error = Some(message.chars().take(2000).collect()));
        self.changed();
    }

    /// A request sent upstream, as sent (after every rewrite).
    pub fn upstream_request(&self, provider: &str, path: &str, body: &[u8]) {
        let (cap, at_ms) = (self.max_body, self.elapsed_ms());
        self.update(|d| {
            if d.upstream.len() < MAX_EXCHANGES {
                let mut request = Body::default();
                request.push(body, cap, &mut d.budget);
                d.upstream.push(Exchange {
                    provider: provider.to_string(),
                    path: path.to_string(),
                    at_ms,
                    request,
                    ..Exchange::default()
                });
            }
        });
        self.changed();
    }

    /// The status of the last upstream request.
    pub fn upstream_status(&self, status: u16) {
        self.update(|d| {
            if let Some(x) = d.upstream.last_mut() {
                x.status = Some(status);
            }
        });
    }

    /// Bytes of the last upstream answer, as they came (a whole body, or
    /// one stream event's data).
    pub fn upstream_answer(&self, bytes: &[u8]) {
        let cap = self.max_body;
        self.update(|d| {
            if let Some(x) = d.upstream.last_mut() {
                x.response.push(bytes, cap, &mut d.budget);
            }
        });
    }

    /// One SSE event of the last upstream answer (its data).
    pub fn upstream_event(&self, data: &str) {
        let cap = self.max_body;
        self.update(|d| {
            if let Some(x) = d.upstream.last_mut() {
                for piece in [b"data: ".as_slice(), data.as_bytes(), b"\n\n"] {
                    x.response.push(piece, cap, &mut d.budget);
                }
            }
        });
    }

    /// Bytes the client was sent.
    pub fn client_bytes(&self, bytes: &[u8]) {
        let cap = self.max_body;
        self.update(|d| d.client_response.push(bytes, cap, &mut d.budget));
    }

    /// One entry of the agent loop's timeline (an iteration, a tool call,
    /// an early stop), pushed live.
    pub fn timeline(&self, mut entry: Value) {
        self.redactor.value(&mut entry);
        self.update(|d| {
            if entry["type"] == "tool_call" {
                d.tool_calls += 1;
            }
            if d.timeline.len() >= MAX_TIMELINE {
                return;
            }
            // Images, then the result, go first when the record is full.
            let mut size = entry.to_string().len();
            if size > d.budget
                && let Some(o) = entry.as_object_mut()
            {
                if o.remove("image_urls").is_some() {
                    o.insert("images_not_kept".into(), Value::Bool(true));
                }
                if o.contains_key("result") {
                    o.insert("result".into(), json!("(not kept: this record is full)"));
                }
                size = entry.to_string().len();
            }
            d.budget = d.budget.saturating_sub(size);
            d.timeline.push(entry);
        });
        self.changed();
    }

    /// The request's spend, summed over its upstream answers.
    pub fn cost(&self, amount: &str, currency: &str) {
        let c = json!({"amount": amount, "currency": currency});
        self.update(|d| d.cost = Some(c));
    }

    /// The body's end (or the client gone): status and duration.
    pub fn finish(&self, status: u16) {
        let ms = self.elapsed_ms();
        self.update(|d| {
            d.status = Some(status);
            d.duration_ms = Some(ms);
            d.done = true;
            if status >= 400 && d.error.is_none() {
                let v: Value = serde_json::from_slice(&d.client_response.raw).unwrap_or(Value::Null);
                let m = v["error"]["message"].as_str().map(|m| m.chars().take(2000).collect());
                d.error = m.or_else(|| Some(format!("HTTP {status}")));
            }
        });
        self.changed();
    }

    /// The row of the live list.
    pub fn summary(&self) -> Value {
        let Ok(d) = self.data.lock() else { return json!({"id": self.id}) };
        let ms = if d.done { d.duration_ms } else { Some(self.elapsed_ms()) };
        json!({
            "id": self.id,
            "at_ms": self.at_ms,
            "method": d.method,
            "path": d.path,
            "front": d.front,
            "key": d.key,
            "model": d.model,
            "provider": d.provider,
            "upstream_model": d.upstream_model,
            "status": d.status,
            "done": d.done,
            "ttft_ms": d.ttft_ms,
            "duration_ms": ms,
            "usage": d.usage,
            "cost": d.cost,
            "recovered": d.recovered,
            "tool_calls": d.tool_calls,
            "retries": d.retries.len(),
            "fallbacks": d.fallbacks.len(),
            "upstream_calls": d.upstream.len(),
            "timeline_len": d.timeline.len(),
            "error": d.error,
        })
    }

    /// The whole record, redacted.
    pub fn detail(&self) -> Value {
        let mut v = self.summary();
        let Ok(d) = self.data.lock() else { return v };
        let (cap, r) = (self.max_body, &*self.redactor);
        let upstream: Vec<Value> = d
            .upstream
            .iter()
            .map(|x| {
                json!({"provider": x.provider, "path": x.path, "at_ms": x.at_ms, "status": x.status,
                       "request": x.request.show(cap, r), "response": x.response.show(cap, r)})
            })
            .collect();
        if let Some(o) = v.as_object_mut() {
            o.insert("client_request".into(), d.client_request.show(cap, r));
            o.insert("client_response".into(), d.client_response.show(cap, r));
            o.insert("upstream".into(), Value::Array(upstream));
            o.insert("timeline".into(), Value::Array(d.timeline.clone()));
            o.insert("retry_list".into(), Value::Array(d.retries.clone()));
            o.insert("fallback_list".into(), Value::Array(d.fallbacks.clone()));
        }
        drop(d);
        self.redactor.value(&mut v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn console(ring: usize, body: usize, secrets: &[&str]) -> Arc<Console> {
        let cfg = ConsoleConfig { ring_size: ring, max_body_bytes: body, record_always: true, ..Default::default() };
        Console::new(&cfg, &secrets.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    fn begin<'a>(id: &'a str, body: &'a [u8]) -> Begin<'a> {
        Begin {
            id,
            start: Instant::now(),
            method: "POST",
            path: "/v1/chat/completions",
            key: Some("team"),
            model: Some("m"),
            body,
        }
    }

    #[test]
    fn nothing_is_recorded_while_no_console_is_open() {
        let c = Console::new(&ConsoleConfig::default(), &[]);
        assert!(c.begin(&begin("a", b"{}")).is_none());
        let w = c.watch();
        assert!(c.begin(&begin("b", b"{}")).is_some());
        drop(w);
        assert!(c.begin(&begin("c", b"{}")).is_none());
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn the_ring_keeps_the_newest() {
        let c = console(3, 100, &[]);
        for i in 0..5 {
            c.begin(&begin(&format!("r{i}"), b"{}"));
        }
        let ids: Vec<String> = c.list().iter().map(|s| s["id"].as_str().unwrap().to_string()).collect();
        assert_eq!(ids, ["r4", "r3", "r2"]);
        assert!(c.get("r0").is_none());
    }

    #[test]
    fn bodies_are_capped_and_a_key_split_over_frames_is_redacted() {
        let c = console(3, 40, &["sk-secret-key-123456"]);
        let e = c.begin(&begin("x", b"{\"k\":\"sk-secret-key-123456\"}")).unwrap();
        e.client_bytes(b"data: sk-secret-");
        e.client_bytes(b"key-123456 and more");
        e.client_bytes(&[b'z'; 1000]);
        let d = c.get("x").unwrap();
        let text = d.to_string();
        assert!(!text.contains("sk-secret-key"), "{text}");
        let resp = &d["client_response"];
        assert_eq!(resp["truncated"], true);
        assert!(resp["text"].as_str().unwrap().len() <= 40);
        assert_eq!(resp["bytes"], 1035);
        assert!(resp["text"].as_str().unwrap().contains(crate::redact::REDACTED));
    }

    #[test]
    fn a_record_keeps_eight_caps_in_all() {
        let c = console(3, 100, &[]);
        let e = c.begin(&begin("x", &[b'a'; 100])).unwrap();
        for _ in 0..20 {
            e.upstream_request("p", "chat/completions", &[b'b'; 100]);
            e.upstream_answer(&[b'c'; 100]);
        }
        let big = "r".repeat(500);
        e.timeline(json!({"type": "tool_call", "result": big, "image_urls": ["data:image/png;base64,AAAA"]}));
        let d = c.get("x").unwrap();
        let kept: usize = d["upstream"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["request"]["text"].as_str().unwrap().len() + x["response"]["text"].as_str().unwrap().len())
            .sum();
        assert!(kept + 100 <= 800, "{kept}");
        assert_eq!(d["upstream"][19]["request"]["bytes"], 100, "still counted");
        assert_eq!(d["timeline"][0]["images_not_kept"], true);
        assert_eq!(d["timeline"][0]["result"], "(not kept: this record is full)");
    }
}
