//! Reading an upstream SSE body: the `data` payloads in order, `[DONE]` as
//! the end, an idle timeout, a cap on one event's size, and the events seen
//! handed to a recording.
//!
//! The body is cut into event-aligned pieces first (one memchr pass). A
//! piece that is one event of one `data:` line — what vendors send for every
//! chunk — is read right there, its payload being the line, provided the
//! parser holds nothing from earlier pieces. Everything else (several data
//! lines, `event:`/`id:` fields, comments, CR line ends, events split across
//! reads) goes to [`Parser`], one per body, which reads each byte once: an
//! event split over many reads costs its length (eventsource-stream, used
//! before, scanned its whole buffer again on every read, so one 16 MB event
//! took 31 s). The idle timer is armed once and moved only when it fires,
//! not re-registered per read.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::idle::Silence;
use bytes::Bytes;
use futures_util::Stream;

use super::UpstreamError;
use super::record::Recording;
use crate::stream::Data;

/// A stream of SSE `data` payloads, ending at `[DONE]` or end of body. Its
/// first payload may have been read already and put back
/// ([`with_first`](Self::with_first)): held here, not chained in front as a
/// stream of its own, which every later payload would pass through.
pub struct Events {
    first: Option<Data>,
    rest: Pin<Box<dyn Stream<Item = Result<Data, UpstreamError>> + Send>>,
}

impl Events {
    pub fn new(rest: impl Stream<Item = Result<Data, UpstreamError>> + Send + 'static) -> Self {
        Events { first: None, rest: Box::pin(rest) }
    }

    /// No payload at all.
    pub fn empty() -> Self {
        Events::new(futures_util::stream::empty())
    }

    /// `first`, read already, is given again before the rest.
    pub fn with_first(self, first: Data) -> Self {
        Events { first: Some(first), rest: self.rest }
    }
}

impl Stream for Events {
    type Item = Result<Data, UpstreamError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(first)));
        }
        self.rest.as_mut().poll_next(cx)
    }
}

/// `data` payloads of an SSE body. Comment lines and keep-alives are skipped;
/// `[DONE]` ends the stream; a body that ends without it ends with
/// [`UpstreamError::Incomplete`] (the reader of the chunks knows whether
/// every choice had finished, which makes that a clean end). `idle` is the
/// longest wait for the next complete line (a keep-alive comment counts; a
/// trickle of bytes that completes nothing does not), and an event held
/// longer than `max_event` bytes ends the stream with an error. A recording
/// sees each event as it is passed on and is written when the body ends
/// (a broken stream is not recorded).
pub(super) fn events<S, E>(body: S, idle: Duration, max_event: usize, rec: Option<Recording>) -> Events
where
    S: Stream<Item = Result<Bytes, E>> + Send + Unpin + 'static,
    E: std::fmt::Display + Send + 'static,
{
    Events::new(Payloads {
        body,
        read: Bytes::new(),
        parser: None,
        parsing: false,
        started: false,
        fresh: false,
        max_event,
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
    /// Something was read (a byte-order mark counts only first).
    started: bool,
    /// The silence was not yet broken by an event of the current read (the
    /// events of one read arrived at one moment: the clock is read once).
    fresh: bool,
    max_event: usize,
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
    type Item = Result<Data, UpstreamError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.state == State::Ended {
                return Poll::Ready(None);
            }
            if this.parsing {
                match this.parser.as_mut().and_then(|p| p.ready.pop_front()) {
                    Some(ev) => {
                        if let Some(r) = this.rec.as_mut() {
                            r.event(ev.kind.as_deref().unwrap_or("message"), &ev.data);
                        }
                        match payload(ev.data.as_bytes()) {
                            Payload::Done => return this.end(),
                            Payload::Skip => continue,
                            Payload::Data => return Poll::Ready(Some(Ok(Data::from(ev.data)))),
                        }
                    }
                    None => this.parsing = false,
                }
            }
            if this.state == State::Draining {
                return this.end_without_done();
            }
            if this.read.is_empty() {
                match Pin::new(&mut this.body).poll_next(cx) {
                    Poll::Ready(Some(Ok(mut read))) => {
                        if !this.started && !read.is_empty() {
                            this.started = true;
                            if read.starts_with(BOM) {
                                let _ = read.split_to(BOM.len());
                            }
                        }
                        this.read = read;
                        this.fresh = true;
                    }
                    Poll::Ready(Some(Err(e))) => {
                        return this.fail(UpstreamError::Connect(format!("stream broken: {e}")));
                    }
                    // The end of the body: the parser gives what it still holds.
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
            let (piece, one_line) = next_piece(&mut this.read);
            if this.parser.as_ref().is_none_or(|p| p.is_idle())
                && let Some((start, end)) = one_data_line(&piece, one_line)
            {
                if std::mem::take(&mut this.fresh) {
                    this.silence.touch();
                }
                let data = Data::in_event(piece, start, end);
                if let Some(r) = this.rec.as_mut() {
                    r.event("message", &data.lossy());
                }
                match payload(data.bytes()) {
                    Payload::Done => return this.end(),
                    Payload::Skip => {}
                    Payload::Data => return Poll::Ready(Some(Ok(data))),
                }
                continue;
            }
            let max = this.max_event;
            let parser = this.parser.get_or_insert_with(|| Box::new(Parser::new(max)));
            match parser.push(&piece) {
                Ok(lines) => {
                    if lines {
                        this.silence.touch();
                    }
                    this.parsing = true;
                }
                Err(e) => return this.fail(e),
            }
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

    /// The body ended without `[DONE]`: recorded as it came (vendors that
    /// end after their finish chunk are fine), reported as the last item.
    fn end_without_done(&mut self) -> Poll<Option<Result<Data, UpstreamError>>> {
        let _ = self.end::<()>();
        Poll::Ready(Some(Err(UpstreamError::Incomplete("the stream ended without [DONE]".into()))))
    }

    /// The last item: nothing is read after an error.
    fn fail(&mut self, e: UpstreamError) -> Poll<Option<Result<Data, UpstreamError>>> {
        self.state = State::Ended;
        self.rec = None;
        Poll::Ready(Some(Err(e)))
    }
}

const BOM: &[u8] = "\u{feff}".as_bytes();

/// One dispatched event.
struct Event {
    /// The `event:` field, when there was one.
    kind: Option<String>,
    data: String,
}

/// The event-stream grammar (WHATWG HTML, "Server-sent events"): lines end
/// with LF, CR or CRLF; a blank line dispatches the event; `data:` lines
/// are joined with LF; `:` lines are comments. Each byte is looked at once:
/// a line's bytes are kept only while its end has not arrived.
struct Parser {
    /// The line whose end has not arrived yet.
    line: Vec<u8>,
    /// The last byte given was a CR: an LF first in the next piece ends nothing.
    after_cr: bool,
    kind: Option<String>,
    /// The data lines so far, each followed by LF.
    data: String,
    ready: VecDeque<Event>,
    /// The most bytes one event may hold (line and data together).
    max: usize,
}

impl Parser {
    fn new(max: usize) -> Self {
        Parser { line: Vec::new(), after_cr: false, kind: None, data: String::new(), ready: VecDeque::new(), max }
    }

    /// Nothing held from earlier pieces: the next piece starts a line and an event.
    fn is_idle(&self) -> bool {
        self.line.is_empty() && !self.after_cr && self.data.is_empty() && self.kind.is_none()
    }

    /// Reads a piece; true when it completed a line.
    fn push(&mut self, mut b: &[u8]) -> Result<bool, UpstreamError> {
        if self.after_cr && !b.is_empty() {
            self.after_cr = false;
            if let Some(rest) = b.strip_prefix(b"\n") {
                b = rest;
            }
        }
        let mut lines = false;
        while let Some(i) = memchr::memchr2(b'\n', b'\r', b) {
            if self.line.is_empty() {
                self.take_line(&b[..i])?;
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(&b[..i]);
                let r = self.take_line(&line);
                line.clear();
                self.line = line;
                r?;
            }
            lines = true;
            let end = if b[i] == b'\r' && b.get(i + 1) == Some(&b'\n') { i + 2 } else { i + 1 };
            self.after_cr = b[i] == b'\r' && i + 1 == b.len();
            b = &b[end..];
        }
        self.line.extend_from_slice(b);
        self.check()?;
        Ok(lines)
    }

    /// The body ended: an event whose blank line never came is still given
    /// (a last `data: [DONE]` without its blank line ends the stream).
    fn close(&mut self) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            // Its size was checked as it came; a line that is not UTF-8 is dropped.
            let _ = self.take_line(&line);
        }
        let _ = self.take_line(b"");
    }

    fn take_line(&mut self, line: &[u8]) -> Result<(), UpstreamError> {
        if line.is_empty() {
            if self.data.is_empty() {
                self.kind = None;
                return Ok(());
            }
            let mut data = std::mem::take(&mut self.data);
            data.pop();
            self.ready.push_back(Event { kind: self.kind.take(), data });
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let line = std::str::from_utf8(line)
            .map_err(|_| UpstreamError::Protocol("stream broken: an event is not UTF-8".into()))?;
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
                self.check()?;
            }
            "event" => self.kind = Some(value.to_string()),
            _ => {}
        }
        Ok(())
    }

    fn check(&self) -> Result<(), UpstreamError> {
        let held = self.line.len() + self.data.len();
        if held > self.max {
            return Err(UpstreamError::Protocol(format!(
                "an upstream event is larger than the limit of {} bytes ([limits] max_answer_bytes)",
                self.max
            )));
        }
        Ok(())
    }
}

enum Payload {
    Data,
    /// Empty: nothing to pass on.
    Skip,
    /// `[DONE]`: the end.
    Done,
}

fn payload(data: &[u8]) -> Payload {
    // A JSON payload starts with `{`: most are told apart by their first byte.
    match data.first() {
        Some(b'{') => Payload::Data,
        _ => match data.trim_ascii() {
            b"[DONE]" => Payload::Done,
            b"" => Payload::Skip,
            _ => Payload::Data,
        },
    }
}

/// Where the payload is in a piece that is exactly `data:[ ]<payload>\n\n`
/// with no other line break in it (`one_line`, from [`next_piece`]): the SSE
/// grammar gives that one event, whose data is the payload. Not checked for
/// UTF-8 here: whoever reads the payload does (the fast path its text, the
/// parser all of it).
fn one_data_line(piece: &[u8], one_line: bool) -> Option<(usize, usize)> {
    let rest = piece.strip_prefix(b"data:")?;
    if !one_line {
        return None;
    }
    let start = if rest.first() == Some(&b' ') { 6 } else { 5 };
    Some((start, piece.len() - 2))
}

/// The next piece of a read: up to and including its first blank line
/// (`\n\n` or `\n\r\n`), or all of it. Cutting never changes what the parser
/// reads (it keeps what is unfinished across pieces); the pieces share the
/// read's memory. True when the piece is one line ending in `\n\n`, with no
/// other line break: what vendors send for every event, found in one pass.
fn next_piece(rest: &mut Bytes) -> (Bytes, bool) {
    let b = &rest[..];
    if let Some(i) = memchr::memchr2(b'\n', b'\r', b)
        && b[i] == b'\n'
        && b.get(i + 1) == Some(&b'\n')
    {
        return (rest.split_to(i + 2), true);
    }
    (next_blank(rest), false)
}

/// [`next_piece`] of a piece of several lines (or none complete).
fn next_blank(rest: &mut Bytes) -> Bytes {
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
    use futures_util::StreamExt;

    fn pieces(s: &str) -> Vec<String> {
        let mut read = Bytes::copy_from_slice(s.as_bytes());
        std::iter::from_fn(|| {
            (!read.is_empty()).then(|| String::from_utf8_lossy(&next_piece(&mut read).0).into_owned())
        })
        .collect()
    }

    /// Where the payload of the first piece of `read` is, when it is one data line.
    fn one_data_line(read: &'static [u8]) -> Option<(usize, usize)> {
        let (piece, one_line) = next_piece(&mut Bytes::from_static(read));
        super::one_data_line(&piece, one_line)
    }

    #[test]
    fn one_data_line_events_are_read_in_place() {
        assert_eq!(one_data_line(b"data: {}\n\n"), Some((6, 8)));
        assert_eq!(one_data_line(b"data:{}\n\n"), Some((5, 7)));
        assert_eq!(one_data_line(b"data:  x\n\n"), Some((6, 8)), "one space is the field's");
        assert_eq!(one_data_line(b"data: a\ndata: b\n\n"), None);
        assert_eq!(one_data_line(b"data: a\r\n\r\n"), None);
        assert_eq!(one_data_line(b"event: x\ndata: a\n\n"), None);
        assert_eq!(one_data_line(b"data: a\n"), None);
        assert_eq!(one_data_line(b"data: a\rb\n\n"), None, "a lone CR ends a line too");
        assert_eq!(one_data_line(b"data: a\n\r\n"), None);
        assert_eq!(one_data_line(b"data: a\n\ndata: b\n\n"), Some((6, 7)), "the first event of a read");
        assert_eq!(one_data_line(b": data: a\n\n"), None);
        // Read as it is: whoever reads the payload checks it is UTF-8.
        assert_eq!(one_data_line(b"data: \xff\n\n"), Some((6, 7)));
    }

    #[test]
    fn the_parser_is_idle_after_a_blank_line() {
        let idle = |parts: &[&str]| {
            let mut p = Parser::new(1 << 20);
            for part in parts {
                p.push(part.as_bytes()).expect("parses");
            }
            p.ready.clear();
            p.is_idle()
        };
        for yes in [
            &[][..],
            &["data: a\n\n"],
            &["data: a\n", "\n"],
            &["data: a\r\n", "\r\n"],
            &["data: a\r\r\n"],
            &["\n", "\n"],
        ] {
            assert!(idle(yes), "{yes:?}");
        }
        for no in
            [&["data: a\n"][..], &["data: a\r\n"], &["data: a"], &["data: a\r\r"], &["data: a\n\r"], &["event: x\n"]]
        {
            assert!(!idle(no), "{no:?}");
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
            let got: Vec<String> = events(futures_util::stream::iter(reads), Duration::from_secs(5), 1 << 20, None)
                .map(|r| r.map_or_else(|e| e.to_string(), |d| d.lossy().into_owned()))
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
        let got: Vec<_> = events(done, Duration::from_secs(5), 1 << 20, None).collect().await;
        assert!(matches!(&got[..], [Ok(d)] if d == "1"));

        // The parser's path (an event split across reads), then a broken body.
        let split = [&b"data: 1\n"[..], b"\n"].map(|b| Ok(Bytes::from_static(b)));
        let broken = then_unread(split.into_iter().chain([Err("reset".to_string())]).collect());
        let got: Vec<_> = events(broken, Duration::from_secs(5), 1 << 20, None).collect().await;
        let ok = matches!(&got[..], [Ok(d), Err(UpstreamError::Connect(e))] if d == "1" && e.contains("reset"));
        assert!(ok, "{got:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn silence_longer_than_idle_is_a_timeout() {
        let body = futures_util::stream::iter([Ok::<_, std::convert::Infallible>(Bytes::from_static(b"data: 1\n\n"))])
            .chain(futures_util::stream::pending());
        // `take`: a stream that went on after its error would fail here, not hang.
        let got: Vec<_> = events(body, Duration::from_secs(2), 1 << 20, None).take(3).collect().await;
        assert_eq!(got.len(), 2);
        assert!(matches!(&got[0], Ok(d) if d == "1"));
        assert!(matches!(&got[1], Err(UpstreamError::Timeout(_))));
    }

    type Reads = futures_util::stream::Iter<std::vec::IntoIter<Result<Bytes, std::convert::Infallible>>>;

    fn body_of(reads: Vec<&[u8]>) -> Reads {
        futures_util::stream::iter(reads.into_iter().map(|r| Ok(Bytes::copy_from_slice(r))).collect::<Vec<_>>())
    }

    /// One 4 MiB event in 256-byte reads: each byte is looked at once.
    /// eventsource-stream scanned its whole buffer again on every read
    /// (here 16,384 reads of 2 MiB on average).
    #[tokio::test]
    async fn a_huge_event_in_small_reads_is_read_once() {
        const SIZE: usize = 4 << 20;
        let mut body = b"data: ".to_vec();
        body.resize(6 + SIZE, b'x');
        body.extend_from_slice(b"\n\ndata: [DONE]\n\n");
        let got: Vec<_> =
            events(body_of(body.chunks(256).collect()), Duration::from_secs(5), 8 << 20, None).collect().await;
        assert_eq!(got.len(), 1);
        assert!(
            matches!(&got[0], Ok(d) if d.len() == SIZE && d.bytes().starts_with(b"xxx") && d.bytes().ends_with(b"xxx"))
        );
    }

    #[tokio::test]
    async fn an_event_over_the_cap_ends_the_stream_without_reading_on() {
        let endless = futures_util::stream::iter([Ok::<_, std::convert::Infallible>(Bytes::from_static(b"data: "))])
            .chain(futures_util::stream::repeat_with(|| Ok(Bytes::from_static(&[b'z'; 512]))));
        let got: Vec<_> = events(endless, Duration::from_secs(5), 4096, None).take(2).collect().await;
        let ok = matches!(&got[..], [Err(UpstreamError::Protocol(m))] if m.contains("max_answer_bytes"));
        assert!(ok, "{got:?}");
        // Many lines of one event count together.
        let lines = futures_util::stream::repeat_with(|| {
            Ok::<_, std::convert::Infallible>(Bytes::from_static(b"data: 0123456789\n"))
        });
        let got: Vec<_> = events(lines, Duration::from_secs(5), 4096, None).take(2).collect().await;
        assert!(matches!(&got[..], [Err(UpstreamError::Protocol(_))]), "{got:?}");
    }

    /// Without `[DONE]` the body's end is reported (the chunk reader decides
    /// whether it was complete); an event whose blank line never came is given.
    #[tokio::test]
    async fn a_body_that_ends_without_done_says_so() {
        let read = |reads: Vec<&'static [u8]>| async move {
            events(body_of(reads), Duration::from_secs(5), 1 << 20, None)
                .map(|r| r.map(|d| d.lossy().into_owned()).map_err(|e| matches!(e, UpstreamError::Incomplete(_))))
                .collect::<Vec<_>>()
                .await
        };
        assert_eq!(read(vec![b"data: 1\n\n"]).await, [Ok("1".to_string()), Err(true)]);
        assert_eq!(read(vec![b"data: 1\n\ndata: 2"]).await, [Ok("1".to_string()), Ok("2".to_string()), Err(true)]);
        assert_eq!(read(vec![b"data: 1\n\ndata: [DONE]"]).await, [Ok("1".to_string())]);
        assert_eq!(read(vec![b"data: [DONE]\r"]).await, []);
        assert_eq!(read(vec![]).await, [Err(true)]);
        assert_eq!(read(vec!["\u{feff}data: bom\n\ndata: [DONE]\n\n".as_bytes()]).await, [Ok("bom".to_string())]);
    }

    /// Bytes that complete no line do not keep a stream alive.
    #[tokio::test(start_paused = true)]
    async fn a_trickle_that_completes_nothing_is_idle() {
        let first =
            futures_util::stream::iter([Ok::<_, std::convert::Infallible>(Bytes::from_static(b"data: 1\n\ndata: {"))]);
        let drip = Box::pin(futures_util::stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            Some((Ok(Bytes::from_static(b"x")), ()))
        }));
        let got: Vec<_> = events(first.chain(drip), Duration::from_secs(2), 1 << 20, None).take(3).collect().await;
        assert!(matches!(&got[..], [Ok(d), Err(UpstreamError::Timeout(_))] if d == "1"), "{got:?}");
        // Keep-alive comment lines do keep it alive.
        let alive = Box::pin(futures_util::stream::unfold(0, |n| async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let read = if n < 10 { &b": keep-alive\n"[..] } else { &b"data: 2\n\ndata: [DONE]\n\n"[..] };
            (n <= 10).then(|| (Ok::<_, std::convert::Infallible>(Bytes::from_static(read)), n + 1))
        }));
        let got: Vec<_> = events(alive, Duration::from_secs(2), 1 << 20, None).collect().await;
        assert!(matches!(&got[..], [Ok(d)] if d == "2"), "{got:?}");
    }
}
