//! The opt-in tool trace of the agent loop on chat completions (DESIGN.md
//! "HTTP surface"): header `x-modelshim-trace: comments` adds SSE comment
//! lines `: tool_trace {json}` (ignored by every SSE client), `events` adds
//! named `event: tool_trace` events (for UIs); a non-streamed answer carries
//! the entries in a top-level `modelshim_trace` field. Without the header
//! nothing is added. An event's data is a chunk with no choices and the
//! entry in its `modelshim_trace` field: the OpenAI SDKs parse every event's
//! data as a chunk whatever its name, and one without `choices` breaks them.

use std::sync::Arc;

use axum::Json;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use serde_json::{Map, Value, json};

use crate::core::Core;
use crate::core::agent::{self, Item};
use crate::error::ApiError;
use crate::fronts::sse::{self, Event};
use crate::openai::{ChatRequest, Chunk};
use crate::provider::{Route, UpstreamError};
use crate::stream::Assembler;
use crate::tools::Registry;

/// The request header that turns the trace on.
pub const HEADER: &str = "x-modelshim-trace";

/// How the client asked for the trace.
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

/// Runs a chat request through the agent loop.
pub async fn run(
    s: Arc<Core>,
    ctx: Arc<crate::core::context::RequestCtx>,
    registry: Arc<Registry>,
    routes: Vec<Route>,
    req: ChatRequest,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let trace = TraceMode::from_headers(headers);
    let client_stream = req.is_stream();
    let items = agent::items(s, ctx, registry, routes, req, trace.on()).await?;
    if client_stream { Ok(sse(items, trace)) } else { whole(items, trace).await }
}

/// A non-streamed answer: the chunks assembled, the trace attached when asked.
async fn whole(
    mut items: BoxStream<'static, Result<Item, UpstreamError>>,
    mode: TraceMode,
) -> Result<Response, ApiError> {
    let mut a = Assembler::default();
    let mut traces = Vec::new();
    while let Some(it) = items.next().await {
        match it? {
            Item::Started => {}
            Item::Chunk(c) => a.push(c),
            Item::Trace(t) => traces.push(t),
        }
    }
    let mut body = a.finish();
    if mode.on()
        && let Some(o) = body.as_object_mut()
    {
        o.insert("modelshim_trace".into(), Value::Array(traces));
    }
    Ok(Json(body).into_response())
}

/// SSE out, like the plain path, plus trace lines when asked.
fn sse(items: BoxStream<'static, Result<Item, UpstreamError>>, mode: TraceMode) -> Response {
    let events = async_stream::stream! {
        let mut items = items;
        // The answer's id, time and model, for the trace events' chunks.
        let mut like: Option<Chunk> = None;
        while let Some(it) = items.next().await {
            match it {
                Ok(Item::Started) => {}
                Ok(Item::Chunk(c)) => {
                    if like.is_none() && mode == TraceMode::Events {
                        like = Some(Chunk {
                            id: c.id.clone(),
                            object: String::new(),
                            created: c.created,
                            model: c.model.clone(),
                            choices: Vec::new(),
                            usage: None,
                            extra: Map::new(),
                        });
                    }
                    match sse::chunk(&c) {
                        Ok(ev) => yield ev,
                        Err(ev) => {
                            yield ev;
                            return;
                        }
                    }
                }
                Ok(Item::Trace(t)) => {
                    if let Some(ev) = mode.event(&t, like.as_ref()) {
                        yield ev;
                    }
                }
                Err(e) => {
                    yield sse::upstream_error(&e);
                    return;
                }
            }
        }
        yield sse::done();
    };
    sse::response(events)
}
