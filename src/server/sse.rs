//! Writing SSE to the client, shared by the plain path and the agent loop:
//! one `data:` event per chunk, `[DONE]` at the end, and an error after the
//! stream started sent in-band as `{"error": …}` (the OpenAI SDKs raise it),
//! after which the stream ends. Keep-alive comments cover long silences.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;

use crate::error::ErrorObject;
use crate::openai::Chunk;
use crate::provider::UpstreamError;

/// A chunk as an event; `Err` carries the in-band error event that must end
/// the stream.
pub fn chunk(c: &Chunk) -> Result<Event, Event> {
    serde_json::to_string(c)
        .map(|json| Event::default().data(json))
        .map_err(|e| error(&ErrorObject::new("api_error", e.to_string())))
}

/// The in-band error event for an upstream failure mid-stream.
pub fn upstream_error(e: &UpstreamError) -> Event {
    error(&e.to_openai().1)
}

/// An in-band `{"error": …}` event.
pub fn error(e: &ErrorObject) -> Event {
    Event::default().data(e.to_body().to_string())
}

/// The last event of a successful stream.
pub fn done() -> Event {
    Event::default().data("[DONE]")
}

/// The SSE response around a stream of events.
pub fn response(events: impl Stream<Item = Result<Event, Infallible>> + Send + 'static) -> Response {
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response()
}
