//! The one driver of the core's chunks for the fronts that translate them
//! into events of their own (Messages, Responses): each front's state
//! machine implements [`Translate`]; reading a whole answer, streaming it
//! as typed SSE events, and failing mid-stream are written once here.

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{Stream, StreamExt};
use serde_json::Value;

use super::sse::Event;
use crate::openai::Chunk;
use crate::provider::UpstreamError;

/// The core's answer as the fronts receive it.
pub type Chunks = BoxStream<'static, Result<Chunk, UpstreamError>>;

/// A front's state machine: normalized chunks in, its own events out.
pub trait Translate: Send + 'static {
    /// The events that open a stream.
    fn start(&mut self) -> Vec<Value>;
    /// One chunk's events, appended to `out`.
    fn push(&mut self, chunk: Chunk, out: &mut Vec<Value>);
    /// The events that close the answer.
    fn finish(&mut self) -> Vec<Value>;
    /// The in-band event of an upstream that failed mid-stream.
    fn fail(&mut self, e: &UpstreamError) -> Value;
}

/// Reads the whole answer into the state machine (no events kept).
pub async fn whole<T: Translate>(b: &mut T, mut chunks: Chunks) -> Result<(), UpstreamError> {
    let mut out = Vec::new();
    while let Some(c) = chunks.next().await {
        b.push(c?, &mut out);
        out.clear();
    }
    Ok(())
}

/// What a stream does once the answer is read, before its closing events go
/// out (the Responses front stores the response there); it may add events.
pub type Then<T> = Box<dyn FnOnce(T, Vec<Value>) -> BoxFuture<'static, Vec<Value>> + Send>;

/// The answer as typed SSE events (`event: <type>`): the opening events,
/// each chunk's, then `then` with the closing ones. An upstream failure is
/// its in-band event and the end.
pub fn events<T: Translate>(mut b: T, mut chunks: Chunks, then: Then<T>) -> impl Stream<Item = Event> + Send {
    async_stream::stream! {
        for e in b.start() {
            yield event(&e);
        }
        let mut out = Vec::new();
        while let Some(c) = chunks.next().await {
            match c {
                Ok(c) => {
                    b.push(c, &mut out);
                    for e in out.drain(..) {
                        yield event(&e);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the upstream failed mid-stream");
                    yield event(&b.fail(&e));
                    return;
                }
            }
        }
        let closing = b.finish();
        for e in then(b, closing).await {
            yield event(&e);
        }
    }
}

/// A typed SSE event: its `type` is the event name.
pub fn event(e: &Value) -> Event {
    Event::named(e["type"].as_str().unwrap_or("message"), &e.to_string())
}
