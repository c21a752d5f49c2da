//! Reading an upstream SSE body: the `data` payloads in order, `[DONE]` as
//! the end, an idle timeout between events, and the events seen handed to a
//! recording.
//!
//! Parsing is eventsource-stream's. Two things keep it linear and cheap on
//! the hot path: the body is cut into event-aligned pieces before the parser
//! sees it (the parser moves its whole remaining buffer for every line it
//! consumes, which is quadratic in a network read that carries many events),
//! and the idle timer is armed once and moved only when it fires, not
//! re-registered per event.

use std::time::Duration;

use bytes::Bytes;
use eventsource_stream::Eventsource;
use futures_util::{Stream, StreamExt};
use tokio::time::Instant;

use super::UpstreamError;
use super::record::Recording;
use super::upstream::Events;

/// `data` payloads of an SSE body. Comment lines and keep-alives are skipped
/// by the parser; `[DONE]` ends the stream; a silence longer than `idle`
/// ends it with a timeout error. A recording sees each event as it is passed
/// on and is written when the stream ends.
pub(super) fn events<S, E>(body: S, idle: Duration, mut rec: Option<Recording>) -> Events
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let mut inner = Box::pin(event_aligned(body).eventsource());
    Box::pin(async_stream::stream! {
        let mut last = Instant::now();
        let timer = tokio::time::sleep_until(last + idle);
        tokio::pin!(timer);
        loop {
            let next = tokio::select! {
                biased;
                ev = inner.next() => ev,
                () = &mut timer => {
                    if Instant::now() < last + idle {
                        // Events came since the timer was set: move it.
                        timer.as_mut().reset(last + idle);
                        continue;
                    }
                    yield Err(UpstreamError::Timeout(format!("stream idle for {idle:?}")));
                    break;
                }
            };
            last = Instant::now();
            match next {
                None => break,
                Some(Err(e)) => {
                    yield Err(UpstreamError::Connect(format!("stream broken: {e}")));
                    break;
                }
                Some(Ok(ev)) => {
                    if let Some(r) = rec.as_mut() {
                        r.event(&ev.event, &ev.data);
                    }
                    let data = ev.data.trim();
                    if data == "[DONE]" {
                        break;
                    }
                    if data.is_empty() {
                        continue;
                    }
                    yield Ok(ev.data);
                }
            }
        }
        if let Some(r) = rec.take() {
            r.finish();
        }
    })
}

/// The body re-cut so every piece but the last of a read ends at an event
/// boundary (a blank line). Cutting never changes what the parser reads (it
/// buffers across pieces); the pieces share the read's memory.
fn event_aligned<S, E>(body: S) -> impl Stream<Item = Result<Bytes, E>> + Send
where
    S: Stream<Item = Result<Bytes, E>> + Send,
    E: Send,
{
    body.flat_map(|read| {
        futures_util::stream::iter(match read {
            Ok(b) => Pieces::Of(b),
            Err(e) => Pieces::Failed(Some(e)),
        })
    })
}

/// The pieces of one read: cut after each `\n\n` or `\n\r\n`.
enum Pieces<E> {
    Of(Bytes),
    Failed(Option<E>),
}

impl<E> Iterator for Pieces<E> {
    type Item = Result<Bytes, E>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = match self {
            Pieces::Failed(e) => return e.take().map(Err),
            Pieces::Of(rest) if rest.is_empty() => return None,
            Pieces::Of(rest) => rest,
        };
        let b = &rest[..];
        let mut from = 0;
        while let Some(i) = memchr::memchr(b'\n', &b[from..]).map(|i| from + i) {
            let end = match (b.get(i + 1), b.get(i + 2)) {
                (Some(b'\n'), _) => Some(i + 2),
                (Some(b'\r'), Some(b'\n')) => Some(i + 3),
                _ => None,
            };
            if let Some(end) = end {
                return Some(Ok(rest.split_to(end)));
            }
            from = i + 1;
        }
        Some(Ok(std::mem::take(rest)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(s: &str) -> Vec<String> {
        Pieces::<()>::Of(Bytes::copy_from_slice(s.as_bytes()))
            .map(|b| b.map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default())
            .collect()
    }

    #[test]
    fn cuts_after_blank_lines() {
        assert_eq!(pieces("data: a\n\ndata: b\n\ndata: c"), ["data: a\n\n", "data: b\n\n", "data: c"]);
        assert_eq!(pieces("data: a\r\n\r\n: x\n\n"), ["data: a\r\n\r\n", ": x\n\n"]);
        assert_eq!(pieces("data: a\ndata: b\n"), ["data: a\ndata: b\n"]);
        assert!(pieces("").is_empty());
    }

    /// However the body is cut into reads, the same payloads come out.
    #[tokio::test]
    async fn any_read_boundaries_give_the_same_payloads() {
        let body =
            "data: {\"a\":1}\n\n: keep-alive\n\ndata: é😀\r\n\r\nevent: x\ndata: two\ndata: lines\n\ndata: [DONE]\n\n";
        let want = vec!["{\"a\":1}".to_string(), "é😀".to_string(), "two\nlines".to_string()];
        for size in 1..body.len() {
            let reads: Vec<Result<Bytes, std::convert::Infallible>> =
                body.as_bytes().chunks(size).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
            let got: Vec<String> = events(futures_util::stream::iter(reads), Duration::from_secs(5), None)
                .map(|r| r.unwrap_or_else(|e| e.to_string()))
                .collect()
                .await;
            assert_eq!(got, want, "reads of {size} bytes");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn silence_longer_than_idle_is_a_timeout() {
        let body = futures_util::stream::iter([Ok::<_, std::convert::Infallible>(Bytes::from_static(b"data: 1\n\n"))])
            .chain(futures_util::stream::pending());
        let got: Vec<_> = events(body, Duration::from_secs(2), None).collect().await;
        assert_eq!(got.len(), 2);
        assert!(matches!(&got[0], Ok(d) if d == "1"));
        assert!(matches!(&got[1], Err(UpstreamError::Timeout(_))));
    }
}
