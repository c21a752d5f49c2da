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

use std::pin::Pin;
use std::task::{Context, Poll};
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
/// written when the body ends cleanly (a broken stream is not recorded).
pub(super) fn events<S, E>(body: S, idle: Duration, rec: Option<Recording>) -> Events
where
    S: Stream<Item = Result<Bytes, E>> + Send + Unpin + 'static,
    E: std::fmt::Display + Send + 'static,
{
    Box::pin(Payloads {
        body,
        read: Bytes::new(),
        parser: None,
        parsing: false,
        fed_tail: Tail::default(),
        silence: Silence::new(idle),
        rec: rec.map(Box::new),
        state: State::Reading,
    })
}

/// The stream [`events`] returns. A plain state machine, not a generator:
/// it is held for the life of every proxied stream, and a generator keeps
/// slots for the values live at each of its yields (496 bytes against ~250).
struct Payloads<S> {
    body: S,
    /// What is left of the last read, handed out in event-aligned pieces.
    read: Bytes,
    /// Made when a piece first needs it: most bodies never do.
    parser: Option<Box<Parser>>,
    /// The parser was given something since it last had nothing to give.
    parsing: bool,
    /// The last bytes given to the parser: it holds nothing when they end
    /// a blank line.
    fed_tail: Tail,
    silence: Silence,
    /// Boxed: most streams are not recorded.
    rec: Option<Box<Recording>>,
    state: State,
}

#[derive(PartialEq)]
enum State {
    Reading,
    /// The body has ended; the parser gives what it still holds.
    Draining,
    Ended,
}

impl<S, E> Stream for Payloads<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    type Item = Result<String, UpstreamError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.state == State::Ended {
                return Poll::Ready(None);
            }
            if this.parsing {
                match this.parser.as_mut().and_then(|p| p.next()) {
                    Some(Ok(ev)) => {
                        if let Some(r) = this.rec.as_mut() {
                            r.event(&ev.event, &ev.data);
                        }
                        match payload(&ev.data) {
                            Payload::Done => return this.end(),
                            Payload::Skip => continue,
                            Payload::Data => return Poll::Ready(Some(Ok(ev.data))),
                        }
                    }
                    Some(Err(e)) => return this.fail(UpstreamError::Connect(format!("stream broken: {e}"))),
                    None => this.parsing = false,
                }
            }
            if this.state == State::Draining {
                return this.end();
            }
            if this.read.is_empty() {
                match Pin::new(&mut this.body).poll_next(cx) {
                    Poll::Ready(Some(Ok(read))) => {
                        this.silence.touch();
                        this.read = read;
                    }
                    Poll::Ready(Some(Err(e))) => {
                        return this.fail(UpstreamError::Connect(format!("stream broken: {e}")));
                    }
                    // The end of the body: the parser reads what it still holds.
                    Poll::Ready(None) => {
                        this.state = State::Draining;
                        if let Some(p) = this.parser.as_mut() {
                            p.close();
                            this.parsing = true;
                        }
                    }
                    Poll::Pending => {
                        if this.silence.poll_elapsed(cx).is_ready() {
                            let idle = this.silence.period();
                            return this.fail(UpstreamError::Timeout(format!("stream idle for {idle:?}")));
                        }
                        return Poll::Pending;
                    }
                }
                continue;
            }
            let piece = next_piece(&mut this.read);
            if this.fed_tail.ends_event()
                && let Some(data) = one_data_line(&piece)
            {
                if let Some(r) = this.rec.as_mut() {
                    r.event("message", data);
                }
                match payload(data) {
                    Payload::Done => return this.end(),
                    Payload::Skip => {}
                    Payload::Data => return Poll::Ready(Some(Ok(data.to_owned()))),
                }
                continue;
            }
            this.fed_tail.push(&piece);
            this.parser.get_or_insert_with(|| Box::new(Parser::new())).push(piece);
            this.parsing = true;
        }
    }
}

impl<S> Payloads<S> {
    /// A clean end: the recording is written.
    fn end<T>(&mut self) -> Poll<Option<T>> {
        self.state = State::Ended;
        if let Some(r) = self.rec.take() {
            r.finish();
        }
        Poll::Ready(None)
    }

    /// The last item: nothing is read after an error.
    fn fail(&mut self, e: UpstreamError) -> Poll<Option<Result<String, UpstreamError>>> {
        self.state = State::Ended;
        self.rec = None;
        Poll::Ready(Some(Err(e)))
    }
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

/// The next piece of a read: up to and including its first blank line
/// (`\n\n` or `\n\r\n`), or all of it. Cutting never changes what the parser
/// reads (it buffers across pieces); the pieces share the read's memory.
fn next_piece(rest: &mut Bytes) -> Bytes {
    let b = &rest[..];
    let mut from = 0;
    while let Some(i) = memchr::memchr(b'\n', &b[from..]).map(|i| from + i) {
        let end = match (b.get(i + 1), b.get(i + 2)) {
            (Some(b'\n'), _) => Some(i + 2),
            (Some(b'\r'), Some(b'\n')) => Some(i + 3),
            _ => None,
        };
        if let Some(end) = end {
            return rest.split_to(end);
        }
        from = i + 1;
    }
    std::mem::take(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(s: &str) -> Vec<String> {
        let mut read = Bytes::copy_from_slice(s.as_bytes());
        std::iter::from_fn(|| (!read.is_empty()).then(|| String::from_utf8_lossy(&next_piece(&mut read)).into_owned()))
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

    /// A stream that panics if read after its items.
    fn then_unread(items: Vec<Result<Bytes, String>>) -> impl Stream<Item = Result<Bytes, String>> + Unpin {
        let after = |_: &mut Context<'_>| -> Poll<Option<Result<Bytes, String>>> { panic!("read after the end") };
        futures_util::stream::iter(items).chain(futures_util::stream::poll_fn(after))
    }

    #[tokio::test]
    async fn the_body_is_not_read_after_done_or_an_error() {
        let done = then_unread(vec![Ok(Bytes::from_static(b"data: 1\n\ndata: [DONE]\n\n"))]);
        let got: Vec<_> = events(done, Duration::from_secs(5), None).collect().await;
        assert!(matches!(&got[..], [Ok(d)] if d == "1"));

        // The parser's path (an event split across reads), then a broken body.
        let split = [&b"data: 1\n"[..], b"\n"].map(|b| Ok(Bytes::from_static(b)));
        let broken = then_unread(split.into_iter().chain([Err("reset".to_string())]).collect());
        let got: Vec<_> = events(broken, Duration::from_secs(5), None).collect().await;
        let ok = matches!(&got[..], [Ok(d), Err(UpstreamError::Connect(e))] if d == "1" && e.contains("reset"));
        assert!(ok, "{got:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn silence_longer_than_idle_is_a_timeout() {
        let body = futures_util::stream::iter([Ok::<_, std::convert::Infallible>(Bytes::from_static(b"data: 1\n\n"))])
            .chain(futures_util::stream::pending());
        // `take`: a stream that went on after its error would fail here, not hang.
        let got: Vec<_> = events(body, Duration::from_secs(2), None).take(3).collect().await;
        assert_eq!(got.len(), 2);
        assert!(matches!(&got[0], Ok(d) if d == "1"));
        assert!(matches!(&got[1], Err(UpstreamError::Timeout(_))));
    }
}
