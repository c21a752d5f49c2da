//! Writing SSE to the client, shared by the plain path, the agent loop and
//! `/v1/responses`: one `data:` event per chunk, `[DONE]` at the end, and an
//! error after the stream started sent in-band as `{"error": …}` (the OpenAI
//! SDKs raise it), after which the stream ends. Keep-alive comments cover
//! long silences.
//!
//! This is the streaming hot path, so an event is serialized straight into
//! the bytes that go on the wire (`data: ` + JSON + blank line, no
//! intermediate string), and the events that are ready together leave in one
//! body frame (one chunk of the chunked encoding, one write) instead of one
//! frame each.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::BytesMut;
use futures_util::Stream;

use crate::error::ErrorObject;
use crate::idle::Silence;
use crate::openai::Chunk;
use crate::provider::UpstreamError;
use crate::stream::Forwarded;

/// How long the stream may be silent before a keep-alive comment goes out.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Events ready at the same time are joined into one frame up to this size.
const MAX_FRAME: usize = 16 * 1024;

/// One SSE event.
#[derive(Debug, Clone)]
pub struct Event(Wire);

#[derive(Debug, Clone)]
enum Wire {
    /// Already in wire form.
    Bytes(Bytes),
    /// An upstream payload sent on (one line): an event the upstream wrote
    /// so is written as it came.
    Forwarded(Forwarded),
}

impl Event {
    /// `data: <text>`. `text` is JSON (or `[DONE]`) everywhere we send it;
    /// a line break in it would still be split into `data:` lines.
    pub fn data(text: &str) -> Self {
        Self::build(None, text)
    }

    /// A payload the normalizer forwarded (see
    /// [`Normalizer::forward`](crate::stream::Normalizer::forward)).
    pub fn forwarded(f: Forwarded) -> Self {
        if f.one_line() { Event(Wire::Forwarded(f)) } else { Self::data(&f.text()) }
    }

    /// `event: <name>` then `data: <text>`.
    pub fn named(name: &str, text: &str) -> Self {
        Self::build(Some(name), text)
    }

    /// A `: ` comment (ignored by SSE clients).
    pub fn comment(text: &str) -> Self {
        let mut b = BytesMut::with_capacity(text.len() + 4);
        for line in text.split('\n') {
            b.extend_from_slice(b": ");
            b.extend_from_slice(line.as_bytes());
            b.extend_from_slice(b"\n");
        }
        b.extend_from_slice(b"\n");
        Event(Wire::Bytes(b.freeze()))
    }

    fn build(name: Option<&str>, text: &str) -> Self {
        let one = memchr::memchr(b'\n', text.as_bytes()).is_none();
        fn line(l: &str) -> &str {
            l.trim_end_matches('\r')
        }
        // Exactly the size written: a buffer with room left over becomes
        // `Bytes` through a second allocation.
        let head = name.map_or(0, |n| n.len() + 8);
        let size = if one {
            head + line(text).len() + 8
        } else {
            head + text.split('\n').map(|l| line(l).len() + 7).sum::<usize>() + 1
        };
        let mut b = Vec::with_capacity(size);
        if let Some(n) = name {
            b.extend_from_slice(b"event: ");
            b.extend_from_slice(n.as_bytes());
            b.extend_from_slice(b"\n");
        }
        if one {
            // One line, as every JSON payload: no per-character split.
            b.extend_from_slice(b"data: ");
            b.extend_from_slice(line(text).as_bytes());
            b.extend_from_slice(b"\n\n");
        } else {
            for l in text.split('\n') {
                b.extend_from_slice(b"data: ");
                b.extend_from_slice(line(l).as_bytes());
                b.extend_from_slice(b"\n");
            }
            b.extend_from_slice(b"\n");
        }
        debug_assert_eq!(b.len(), size);
        Event(Wire::Bytes(Bytes::from(b)))
    }

    /// `data: <json>` serialized in place (JSON has no raw line breaks).
    fn json(value: &impl serde::Serialize) -> Result<Self, serde_json::Error> {
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(b"data: ");
        serde_json::to_writer(&mut buf, value)?;
        buf.extend_from_slice(b"\n\n");
        Ok(Event(Wire::Bytes(Bytes::from(buf))))
    }

    fn len(&self) -> usize {
        match &self.0 {
            Wire::Bytes(b) => b.len(),
            Wire::Forwarded(f) => f.event().map_or(f.size() + 8, Bytes::len),
        }
    }

    fn write_to(&self, frame: &mut BytesMut) {
        match &self.0 {
            Wire::Bytes(b) => frame.extend_from_slice(b),
            Wire::Forwarded(f) => f.write_event(frame),
        }
    }

    /// The event in wire form.
    pub fn into_bytes(self) -> Bytes {
        match self.0 {
            Wire::Bytes(b) => b,
            // Copied, not handed on as a slice: a slice would keep the whole
            // read it came in (4 KiB or more) alive while hyper queues it for
            // a slow client, up to its sixteen queued buffers per stream.
            Wire::Forwarded(f) => match f.event() {
                Some(ev) => Bytes::copy_from_slice(ev),
                None => {
                    let mut b = BytesMut::with_capacity(f.size() + 8);
                    Event(Wire::Forwarded(f)).write_to(&mut b);
                    b.freeze()
                }
            },
        }
    }
}

/// A chunk as an event; `Err` carries the in-band error event that must end
/// the stream.
pub fn chunk(c: &Chunk) -> Result<Event, Event> {
    Event::json(c).map_err(|e| error(&ErrorObject::new("api_error", e.to_string())))
}

/// The in-band error event for an upstream failure mid-stream.
pub fn upstream_error(e: &UpstreamError) -> Event {
    error(&e.to_openai().1)
}

/// An in-band `{"error": …}` event.
pub fn error(e: &ErrorObject) -> Event {
    Event::data(&e.to_body().to_string())
}

/// The last event of a successful stream.
pub fn done() -> Event {
    Event(Wire::Bytes(Bytes::from_static(b"data: [DONE]\n\n")))
}

/// The SSE response around a stream of events.
pub fn response(events: impl Stream<Item = Event> + Send + 'static) -> Response {
    let body = Body::from_stream(Frames::new(events));
    let mut resp = body.into_response();
    // Sized for these two and the request id (the default grows to eight
    // entries, held as long as the stream is open).
    *resp.headers_mut() = axum::http::HeaderMap::with_capacity(3);
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// Body frames from events: the events ready now joined into one frame, and a
/// keep-alive comment after [`KEEP_ALIVE`] of silence. Generic, not a `dyn`
/// stream: the events are polled once per event, the frames once per write.
struct Frames<S> {
    events: Pin<Box<S>>,
    idle: Silence,
    ended: bool,
}

impl<S: Stream<Item = Event> + Send + 'static> Frames<S> {
    fn new(events: S) -> Self {
        Frames { events: Box::pin(events), idle: Silence::new(KEEP_ALIVE), ended: false }
    }
}

impl<S: Stream<Item = Event>> Stream for Frames<S> {
    type Item = Result<Bytes, std::convert::Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        let mut frame: Option<BytesMut> = None;
        let mut single: Option<Event> = None;
        loop {
            match this.events.as_mut().poll_next(cx) {
                Poll::Ready(Some(ev)) => {
                    match (&mut frame, single.take()) {
                        (Some(f), _) => ev.write_to(f),
                        (None, Some(first)) => {
                            let mut f = BytesMut::with_capacity((first.len() + ev.len()).max(4096));
                            first.write_to(&mut f);
                            ev.write_to(&mut f);
                            frame = Some(f);
                        }
                        (None, None) => single = Some(ev),
                    }
                    if frame.as_ref().is_some_and(|f| f.len() >= MAX_FRAME) {
                        break;
                    }
                }
                Poll::Ready(None) => {
                    this.ended = true;
                    break;
                }
                Poll::Pending => break,
            }
        }
        if let Some(out) = frame.map(BytesMut::freeze).or_else(|| single.map(Event::into_bytes)) {
            this.idle.touch();
            return Poll::Ready(Some(Ok(out)));
        }
        if this.ended {
            return Poll::Ready(None);
        }
        this.idle.poll_elapsed(cx).map(|()| Some(Ok(Bytes::from_static(b":\n\n"))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::Data;
    use futures_util::StreamExt;
    use tokio::time::Instant;

    proptest::proptest! {
        #[test]
        fn a_forwarded_payload_is_the_same_event(text in "(?s).{0,40}") {
            let want = Event::data(&text).into_bytes();
            let check = |ev: Event| {
                let mut frame = BytesMut::new();
                ev.write_to(&mut frame);
                (frame.freeze(), ev.len(), ev.into_bytes())
            };
            let owned = Forwarded::AsIs(Data::from(text.as_str()));
            proptest::prop_assert_eq!(check(Event::forwarded(owned)), (want.clone(), want.len(), want.clone()));
            if !text.contains(['\n', '\r']) {
                let piece = Bytes::from(format!("data: {text}\n\n"));
                let read = Forwarded::AsIs(Data::in_event(piece.clone(), 6, piece.len() - 2));
                proptest::prop_assert_eq!(check(Event::forwarded(read)), (want.clone(), want.len(), want));
            }
        }
    }

    /// A lone forwarded event goes to hyper in memory of its own size: as a
    /// slice it kept the whole read alive for as long as hyper queued it.
    #[test]
    fn a_lone_forwarded_event_does_not_hold_the_read_it_came_in() {
        let mut read = b"data: {\"a\":1}\n\n".to_vec();
        read.resize(4096, b' ');
        let read = Bytes::from(read);
        let f = Forwarded::AsIs(Data::in_event(read.slice(..15), 6, 13));
        let out = Event::forwarded(f).into_bytes();
        assert_eq!(out, &b"data: {\"a\":1}\n\n"[..]);
        let inside = read.as_ptr_range().contains(&out.as_ptr());
        assert!(!inside, "the event is a slice of the read");
    }

    #[test]
    fn events_in_wire_form() {
        assert_eq!(Event::data("{\"a\":1}").into_bytes(), &b"data: {\"a\":1}\n\n"[..]);
        assert_eq!(Event::named("response.created", "{}").into_bytes(), &b"event: response.created\ndata: {}\n\n"[..]);
        assert_eq!(Event::data("a\nb").into_bytes(), &b"data: a\ndata: b\n\n"[..]);
        assert_eq!(Event::data("a\r\nb\r").into_bytes(), &b"data: a\ndata: b\n\n"[..]);
        assert_eq!(Event::data("a\r").into_bytes(), &b"data: a\n\n"[..]);
        assert_eq!(Event::comment("tool_trace {}").into_bytes(), &b": tool_trace {}\n\n"[..]);
        assert_eq!(done().into_bytes(), &b"data: [DONE]\n\n"[..]);
    }

    #[tokio::test]
    async fn ready_events_share_a_frame() {
        let events = futures_util::stream::iter([Event::data("1"), Event::data("2"), done()]);
        let frames: Vec<Bytes> = Frames::new(events).map(|f| f.unwrap_or_default()).collect().await;
        assert_eq!(frames, vec![Bytes::from_static(b"data: 1\n\ndata: 2\n\ndata: [DONE]\n\n")]);
    }

    #[tokio::test(start_paused = true)]
    async fn keep_alive_only_while_silent() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Event>(4);
        let events = tokio_stream_from(rx);
        let mut frames = Frames::new(events);
        tx.send(Event::data("1")).await.unwrap_or(());
        assert_eq!(frames.next().await.and_then(Result::ok), Some(Bytes::from_static(b"data: 1\n\n")));
        // Nothing for longer than the keep-alive interval: a comment.
        assert_eq!(frames.next().await.and_then(Result::ok), Some(Bytes::from_static(b":\n\n")));
        drop(tx);
        assert_eq!(frames.next().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn keep_alive_counts_from_the_last_write() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Event>(4);
        let mut frames = Frames::new(tokio_stream_from(rx));
        let feeder = tokio::spawn(async move {
            for i in 0..3 {
                tx.send(Event::data(&i.to_string())).await.unwrap_or(());
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
            tokio::time::sleep(Duration::from_secs(60)).await;
        });
        let mut got = Vec::new();
        let mut last_data = Instant::now();
        while got.len() < 5 {
            let Some(Ok(f)) = frames.next().await else { break };
            if f.as_ref() == b":\n\n" {
                // Silence since the last event, not since the timer was armed.
                assert!(last_data.elapsed() >= KEEP_ALIVE, "{:?}", last_data.elapsed());
            } else {
                last_data = Instant::now();
            }
            got.push(f);
        }
        let comments = got.iter().filter(|f| f.as_ref() == b":\n\n").count();
        assert_eq!((got.len(), comments), (5, 2), "{got:?}");
        feeder.abort();
    }

    fn tokio_stream_from(mut rx: tokio::sync::mpsc::Receiver<Event>) -> impl Stream<Item = Event> + Send {
        async_stream::stream! {
            while let Some(e) = rx.recv().await {
                yield e;
            }
        }
    }
}
