//! The chat completions front (`POST /v1/chat/completions`): the body
//! parsed with OpenAI's 400s, the core's answer written back as one JSON
//! body or as SSE, and the agent loop's trace as the client asked for it
//! ([`trace`]). The hot path: a plain streamed delta the normalizer would
//! not change goes out as the upstream wrote it.

pub mod trace;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt};
use serde_json::Value;

use super::sse;
use crate::core::Core;
use crate::core::context::RequestCtx;
use crate::core::pipeline::{self, Out, Started, start};
use crate::core::{self};
use crate::error::ApiError;
use crate::openai::{ChatRequest, Chunk};
use crate::provider::UpstreamError;
use crate::stream::Assembler;
use std::sync::Arc;

pub async fn completions(
    State(s): State<Arc<Core>>,
    Extension(ctx): Extension<Arc<RequestCtx>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req = parse(&body)?;
    if core::structured::wanted(&req) {
        // Held to its schema (core/structured.rs); no tool trace on this path.
        let client_stream = req.is_stream();
        let mut chunks = core::answer(&s, &ctx, req).await?;
        if client_stream {
            return Ok(sse(chunks));
        }
        let mut all = Vec::new();
        while let Some(c) = chunks.next().await {
            all.push(c?);
        }
        return Ok(Json(assemble(all)).into_response());
    }
    if let Some(tools) = core::looping(&s) {
        let routes = core::route::routes(&s, &req)?;
        return trace::run(s.clone(), ctx, tools, routes, req, &headers).await;
    }
    let client_stream = req.is_stream();
    let started = start(&s, &ctx, req, !client_stream).await?;
    if client_stream {
        return Ok(match started {
            // The stream's own path, so plain content deltas can be forwarded as they came.
            // Nothing of it is held, so no cap on its size.
            Started::Stream { events, first, norm, conversation, meter } => {
                let reading = pipeline::Reading { meter, memo: pipeline::memo(&s, conversation), max: usize::MAX };
                sse(pipeline::outs(events, first, norm, reading))
            }
            whole => sse(whole.chunks(&s)),
        });
    }
    if let Started::AsIs(body) = started {
        return Ok(([(axum::http::header::CONTENT_TYPE, "application/json")], body.into_bytes()).into_response());
    }
    let mut all = Vec::new();
    let mut chunks = started.chunks(&s);
    while let Some(c) = chunks.next().await {
        all.push(c?);
    }
    Ok(Json(assemble(all)).into_response())
}

/// [`completions`] as [`crate::server::App`] calls it, past the router: the edge has
/// read the body already, so this takes its bytes back out.
pub async fn direct(s: Arc<Core>, ctx: Arc<RequestCtx>, req: axum::extract::Request) -> Response {
    let (parts, body) = req.into_parts();
    match axum::body::to_bytes(body, usize::MAX).await {
        Ok(body) => completions(State(s), Extension(ctx), parts.headers, body).await.into_response(),
        Err(e) => ApiError::invalid(format!("Cannot read the body: {e}")).into_response(),
    }
}

/// Parses the body with OpenAI-style 400s for every kind of bad input.
fn parse(body: &[u8]) -> Result<ChatRequest, ApiError> {
    // The common case straight into the struct; anything it refuses takes the
    // slow path below, which names what is wrong.
    if let Ok(req) = serde_json::from_slice::<ChatRequest>(body)
        && !req.model.is_empty()
        && !req.messages.is_empty()
    {
        return Ok(req);
    }
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("The request body is not valid JSON: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::invalid("The request body must be a JSON object."));
    }
    match v.get("model") {
        Some(Value::String(m)) if !m.is_empty() => {}
        Some(_) => {
            return Err(ApiError::invalid_param("model", "`model` must be a non-empty string."));
        }
        None => {
            return Err(ApiError::invalid_param("model", "Missing required parameter: 'model'."));
        }
    }
    match v.get("messages") {
        Some(Value::Array(m)) if !m.is_empty() => {}
        Some(Value::Array(_)) => {
            return Err(ApiError::invalid_param("messages", "`messages` must not be empty."));
        }
        Some(_) => {
            return Err(ApiError::invalid_param("messages", "`messages` must be an array."));
        }
        None => {
            return Err(ApiError::invalid_param("messages", "Missing required parameter: 'messages'."));
        }
    }
    if v.get("stream").is_some_and(|s| !s.is_boolean() && !s.is_null()) {
        return Err(ApiError::invalid_param("stream", "`stream` must be a boolean."));
    }
    if v.get("tools").is_some_and(|t| !t.is_array() && !t.is_null()) {
        return Err(ApiError::invalid_param("tools", "`tools` must be an array."));
    }
    serde_json::from_value(v).map_err(|e| ApiError::invalid(format!("Invalid request: {e}")))
}

fn assemble(chunks: Vec<Chunk>) -> Value {
    let mut a = Assembler::default();
    for c in chunks {
        a.push(c);
    }
    a.finish()
}

/// SSE out (see [`super::sse`]).
fn sse<C: Into<Out> + Send + 'static>(
    chunks: impl Stream<Item = Result<C, UpstreamError>> + Send + 'static,
) -> Response {
    sse::response(SseEvents { chunks: Box::pin(chunks), ended: false })
}

/// Normalized chunks as SSE events: `[DONE]` after the last, and after an
/// error its in-band event and nothing more. A plain stream rather than a
/// generator, whose slots for the chunk and the events in flight took room
/// in every open stream.
struct SseEvents<S> {
    chunks: std::pin::Pin<Box<S>>,
    ended: bool,
}

impl<C: Into<Out>, S: Stream<Item = Result<C, UpstreamError>>> Stream for SseEvents<S> {
    type Item = sse::Event;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        if self.ended {
            return Poll::Ready(None);
        }
        let ev = match std::task::ready!(self.chunks.as_mut().poll_next(cx)) {
            Some(Ok(c)) => match c.into() {
                Out::Same(wire) => sse::Event::forwarded(wire),
                Out::Chunk(c) => sse::chunk(&c).unwrap_or_else(|ev| {
                    self.ended = true;
                    ev
                }),
            },
            Some(Err(e)) => {
                self.ended = true;
                sse::upstream_error(&e)
            }
            None => {
                self.ended = true;
                sse::done()
            }
        };
        Poll::Ready(Some(ev))
    }
}
