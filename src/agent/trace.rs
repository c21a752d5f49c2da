//! The opt-in tool trace (DESIGN.md "HTTP surface"): header
//! `x-modelshim-trace: comments` adds SSE comment lines `: tool_trace {json}`
//! (ignored by every SSE client), `events` adds named `event: tool_trace`
//! events (for UIs); a non-streamed answer carries the entries in a
//! top-level `modelshim_trace` field. Without the header nothing is added.
//! An event's data is a chunk with no choices and the entry in its
//! `modelshim_trace` field: the OpenAI SDKs parse every event's data as a
//! chunk whatever its name, and one without `choices` breaks them.

use crate::server::sse::Event;
use axum::http::HeaderMap;
use serde_json::{Value, json};

use crate::openai::Chunk;
use crate::tools::CallOutcome;

/// The request header that turns the trace on.
pub const HEADER: &str = "x-modelshim-trace";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceMode {
    Off,
    Comments,
    Events,
}

impl TraceMode {
    pub fn from_headers(h: &HeaderMap) -> Self {
        match h.get(HEADER).and_then(|v| v.to_str().ok()).map(|v| v.trim().to_ascii_lowercase()) {
            Some(v) if v == "comments" => TraceMode::Comments,
            Some(v) if v == "events" => TraceMode::Events,
            _ => TraceMode::Off,
        }
    }

    pub fn on(self) -> bool {
        self != TraceMode::Off
    }

    /// The SSE event that carries a trace entry in this mode; `like` is a
    /// chunk of the answer, whose id, time and model the event's chunk takes.
    pub fn event(self, entry: &Value, like: Option<&Chunk>) -> Option<Event> {
        match self {
            TraceMode::Off => None,
            TraceMode::Comments => Some(Event::comment(&format!("tool_trace {entry}"))),
            TraceMode::Events => {
                let (id, created, model) = like.map_or(("", 0, ""), |c| (c.id.as_str(), c.created, c.model.as_str()));
                let created = if created == 0 { crate::openai::now() } else { created };
                let data = json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                                  "choices": [], "modelshim_trace": entry});
                Some(Event::named("tool_trace", &data.to_string()))
            }
        }
    }
}

/// The trace entry of one finished call; the result is cut to `max_chars`.
pub fn entry(o: &CallOutcome, iteration: u32, max_chars: usize) -> Value {
    let arguments = serde_json::from_str::<Value>(&o.call.arguments).unwrap_or_else(|_| json!(o.call.arguments));
    let text = o.output.model_text(false);
    let truncated = text.chars().count() > max_chars;
    let result: String = if truncated { text.chars().take(max_chars).collect() } else { text };
    json!({
        "type": "tool_call",
        "iteration": iteration,
        "id": o.call.id,
        "tool": o.call.name,
        "arguments": arguments,
        "status": o.status.as_str(),
        "duration_ms": o.duration.as_millis() as u64,
        "result": result,
        "truncated": truncated,
        "images": o.output.images().count(),
    })
}
