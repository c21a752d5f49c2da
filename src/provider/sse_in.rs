//! Reading an upstream SSE body: the `data` payloads in order, `[DONE]` as
//! the end, an idle timeout between reads, and the events seen handed to a
//! recording.
//!
//! The body is cut into event-aligned pieces first (one memchr pass). A
//! piece that is one event of one `data:` line — what vendors send for every
//! chunk — is read right there, its payload being the line, provided the
//! parser holds nothing from earlier pieces. Everything else (several data
//! lines, `event:`/`id:` fields, comments, CR line ends, events split across
//! reads) goes to eventsource-stream's parser, one parser per body, fed
//! through a channel. The parser was the largest single cost of a proxied
//! stream: it copies its remaining buffer for every line and builds several
//! strings per event. The idle timer is armed once and moved only when it
//! fires, not re-registered per read.

use std::time::Duration;

use crate::idle::Silence;
use bytes::Bytes;
use eventsource_stream::EventStream;
use futures_util::{FutureExt, Stream, StreamExt};

use super::UpstreamError;
use super::record::Recording;
use super::upstream::Events;

/// `data` payloads of an SSE body. Comment lines and keep-alives are skipped;
/// `[DONE]` ends the stream; a silence longer than `idle` ends it with a
/// timeout error. A recording sees each event as it is passed on and is
/// written when the stream ends.
pub(super) fn events<S, E>(body: S, idle: Duration, rec: Option<Recording>) -> Events
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let mut pieces = Box::pin(event_aligned(body));
    // Boxed: the generator keeps a slot for it all stream long, recording or not.
    let mut rec = rec.map(Box::new);
    Box::pin(async_stream::stream! {
        // Made when a piece first needs it: most bodies never do.
        // Boxed: the generator keeps its slot all stream long.
        let mut parser: Option<Box<Parser>> = None;
        let mut ended = false;
        // The last bytes given to the parser: it holds nothing when they end
        // a blank line.
        let mut fed_tail = Tail::default();
        let mut silence = Silence::new(idle);
        'body: loop {
            let next = tokio::select! {
                biased;
                piece = pieces.next() => piece,
                () = silence.elapsed() => {
                    yield Err(UpstreamError::Timeout(format!("stream idle for {idle:?}")));
                    break;
                }
            };
            silence.touch();
            match next {
                Some(Err(e)) => {
                    yield Err(UpstreamError::Connect(format!("stream broken: {e}")));
                    break;
                }
                Some(Ok(piece)) => {
                    if fed_tail.ends_event()
                        && let Some(data) = one_data_line(&piece)
                    {
                        if let Some(r) = rec.as_mut() {
                            r.event("message", data);
                        }
                        match payload(data) {
                            Payload::Done => break,
                            Payload::Skip => {}
                            Payload::Data => yield Ok(data.to_owned()),
                        }
                        continue;
                    }
                    fed_tail.push(&piece);
                    parser.get_or_insert_with(|| Box::new(Parser::new())).push(piece);
                }
                // The end of the body: the parser reads what it still holds.
                None => {
                    ended = true;
                    if let Some(p) = parser.as_mut() {
                        p.close();
                    }
                }
            }
            while let Some(ev) = parser.as_mut().and_then(|p| p.next()) {
                let ev = match ev {
                    Ok(ev) => ev,
                    Err(e) => {
                        yield Err(UpstreamError::Connect(format!("stream broken: {e}")));
                        break 'body;
                    }
                };
                if let Some(r) = rec.as_mut() {
                    r.event(&ev.event, &ev.data);
                }
                match payload(&ev.data) {
                    Payload::Done => break 'body,
                    Payload::Skip => {}
                    Payload::Data => yield Ok(ev.data),
                }
            }
            if ended {
                break;
            }
        }
        if let Some(r) = rec.take() {
            r.finish();
        }
    })
}

type Feed = Result<Bytes, std::convert::Infallible>;

/// eventsource-stream's parser, given pieces one at a time through a channel.
struct Parser {
    feed: Option<futures_channel::mpsc::UnboundedSender<Feed>>,
    events: EventStream<futures_channel::mpsc::UnboundedReceiver<Feed>>,
}

impl Parser {
    fn new() -> Self {
        let (feed, fed) = futures_channel::mpsc::unbounded();
        Parser { feed: Some(feed), events: EventStream::new(fed) }
    }

    fn push(&mut self, piece: Bytes) {
        if let Some(f) = &self.feed {
            // The receiver lives in `events`, as long as the sender.
            let _ = f.unbounded_send(Ok(piece));
        }
    }

    /// No more pieces: the parser reads what it still holds.
    fn close(&mut self) {
        self.feed = None;
    }

    /// The next event in what it was given, without waiting for more.
    fn next(
        &mut self,
    ) -> Option<Result<eventsource_stream::Event, eventsource_stream::EventStreamError<std::convert::Infallible>>> {
        self.events.next().now_or_never().flatten()
    }
}

enum Payload {
    Data,
    /// Empty: nothing to pass on.
    Skip,
    /// `[DONE]`: the end.
    Done,
}

fn payload(data: &str) -> Payload {
    match data.trim() {
        "[DONE]" => Payload::Done,
        "" => Payload::Skip,
        _ => Payload::Data,
    }
}

/// The payload of a piece that is exactly `data:[ ]<payload>\n\n` with no
/// other line break in it (the SSE grammar gives that one event, whose data
/// is the payload).
fn one_data_line(piece: &[u8]) -> Option<&str> {
    let rest = piece.strip_prefix(b"data:")?.strip_suffix(b"\n\n")?;
    let rest = rest.strip_prefix(b" ").unwrap_or(rest);
    if memchr::memchr2(b'\n', b'\r', rest).is_some() {
        return None;
    }
    std::str::from_utf8(rest).ok()
}

/// The last three bytes fed to the parser.
#[derive(Default)]
struct Tail {
    bytes: [u8; 3],
    len: usize,
}

impl Tail {
    fn push(&mut self, piece: &[u8]) {
        for b in piece.iter().skip(piece.len().saturating_sub(3)) {
            self.bytes = [self.bytes[1], self.bytes[2], *b];
            self.len = (self.len + 1).min(3);
        }
    }

    /// Nothing fed yet, or the bytes end with a blank line the parser has
    /// read (LF or CRLF line ends; a trailing CR waits for the next byte).
    fn ends_event(&self) -> bool {
        let t = &self.bytes[3 - self.len..];
        self.len == 0 || [&b"\n\n"[..], b"\n\r\n", b"\r\r\n"].iter().any(|end| t.ends_with(end))
    }
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
    fn one_data_line_events_are_read_in_place() {
        assert_eq!(one_data_line(b"data: {}\n\n"), Some("{}"));
        assert_eq!(one_data_line(b"data:{}\n\n"), Some("{}"));
        assert_eq!(one_data_line(b"data: a\ndata: b\n\n"), None);
        assert_eq!(one_data_line(b"data: a\r\n\r\n"), None);
        assert_eq!(one_data_line(b"event: x\ndata: a\n\n"), None);
        assert_eq!(one_data_line(b"data: a\n"), None);
        assert_eq!(one_data_line(b": data: a\n\n"), None);
        assert_eq!(one_data_line(b"data: \xff\n\n"), None);
    }

    #[test]
    fn the_parser_is_idle_after_a_blank_line() {
        let tail = |parts: &[&str]| {
            let mut t = Tail::default();
            for p in parts {
                t.push(p.as_bytes());
            }
            t.ends_event()
        };
        for yes in [
            &[][..],
            &["data: a\n\n"],
            &["data: a\n", "\n"],
            &["data: a\r\n", "\r\n"],
            &["data: a\r\r\n"],
            &["\n", "\n"],
        ] {
            assert!(tail(yes), "{yes:?}");
        }
        for no in [&["data: a\n"][..], &["data: a\r\n"], &["data: a"], &["data: a\r\r"], &["data: a\n\r"], &["\n"]] {
            assert!(!tail(no), "{no:?}");
        }
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
        let body = "data: {\"a\":1}\n\n: keep-alive\n\ndata: é😀\r\n\r\nevent: x\ndata: two\ndata: lines\n\n\
                    data:tight\n\ndata:  spaced\n\nid: 7\ndata: with id\n\ndata: \n\ndata: last\n\ndata: cr\r\rdata: crlf\r\n\r\ndata: [DONE]\n\n";
        let want: Vec<String> = ["{\"a\":1}", "é😀", "two\nlines", "tight", " spaced", "with id", "last", "cr", "crlf"]
            .map(String::from)
            .to_vec();
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
