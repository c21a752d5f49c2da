//! Direct requests: chat requests to a cleartext upstream that no proxy
//! setting intercepts (see [`direct_uri`]), sent over HTTP/1.1 connections
//! this module keeps idle per thread, and spoken here.
//!
//! Why not hyper's client connection: it runs in a task of its own that
//! hands every read to the request's task through a channel (two wake-ups
//! per read), and holds per connection a request channel (9 KB) and two
//! 8 KB buffers, most of what an open stream cost (`bench/heap.py`). Here
//! the request is one write, and the answer's body reads the socket itself,
//! on the request's task, into one buffer per connection that starts at
//! [`READ_SIZE`]. Why not hyper-util's pooled client (reqwest's engine)
//! either: per request it locks a pool shared by every thread and finds the
//! host in it by a SipHash of the authority. Here a thread's idle
//! connections are a short list per authority, the request line is the path
//! the provider parsed once, and the answer's body puts its connection back
//! once read to the end or dropped with its end in hand.
//!
//! Connections are opened with hyper-util's `HttpConnector` (DNS, happy
//! eyeballs, connect timeout, `TCP_NODELAY`, TCP keepalive). An idle
//! connection is looked at when it is taken: one the upstream closed, or
//! idle for [`IDLE_LIMIT`], is let go; a request a reused connection got no
//! answer byte for (the upstream closed it meanwhile) is sent again on the
//! next. At most [`MAX_IDLE`] per authority and thread are kept: after a
//! burst of streams the rest close at once instead of holding their buffers
//! here, and a socket and a worker at the upstream (nginx's `keepalive N`
//! does the same).

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Version};
use http_body::{Frame, SizeHint};
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tower_service::Service;

/// How long an unused connection is kept for the next request.
pub const IDLE_LIMIT: Duration = Duration::from_secs(90);
/// Idle connections kept per authority and serving thread; the least
/// recently used one closes when another comes back.
pub const MAX_IDLE: usize = 64;
/// Idle time before the first TCP keepalive probe, and between probes.
const TCP_KEEPALIVE: Duration = Duration::from_secs(15);
/// A connection's read buffer: what one read may take (more while a body
/// of known length is larger), and what an open stream holds.
const READ_SIZE: usize = 4096;
/// What one read may take while a body of known length is larger.
const READ_MAX: usize = 64 * 1024;
/// The longest response head (status line and headers), and the most
/// headers in it.
const MAX_HEAD: usize = 64 * 1024;
const MAX_HEADERS: usize = 128;
/// Headers an answer's head is first parsed with room for (see [`parse_head`]).
const FEW_HEADERS: usize = 24;
/// The longest chunk-size or trailer line.
const MAX_LINE: usize = 4096;
/// What dropping an unfinished body reads, at most, to find its end.
const MAX_DRAIN: usize = 64 * 1024;
/// A request body up to this size goes in one write with its head.
const ONE_WRITE: usize = 64 * 1024;

/// An upstream URL that requests may send directly (see [`direct_uri`]):
/// where to connect, the request target and the `Host` header, made once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectUrl {
    /// The absolute URL, for the connector (host and port).
    connect: http::Uri,
    /// The request target in origin form (`/v1/chat/completions`).
    pub target: http::Uri,
    /// `Host`: the port only when not 80. Also the key of the idle
    /// connections that fit this URL.
    pub host: HeaderValue,
}

/// The upstream URL of `url` when requests to it may skip reqwest: plain
/// `http` and not intercepted by the proxy settings of the environment
/// (`HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`: read as reqwest reads them).
pub fn direct_uri(url: &str) -> Option<DirectUrl> {
    static PROXIES: std::sync::LazyLock<hyper_util::client::proxy::matcher::Matcher> =
        std::sync::LazyLock::new(hyper_util::client::proxy::matcher::Matcher::from_system);
    let uri: http::Uri = url.parse().ok()?;
    if uri.scheme_str() != Some("http") || PROXIES.intercept(&uri).is_some() {
        return None;
    }
    let host = match (uri.host()?, uri.port_u16()) {
        (h, Some(port)) if port != 80 => HeaderValue::from_str(&format!("{h}:{port}")),
        (h, _) => HeaderValue::from_str(h),
    };
    let target = uri.path_and_query().map_or("/", |p| p.as_str()).parse().ok()?;
    Some(DirectUrl { host: host.ok()?, target, connect: uri })
}

/// Opens direct connections (the connect settings of one `Upstream`).
#[derive(Clone)]
pub struct Connector {
    http: HttpConnector,
}

/// Why a direct request failed.
#[derive(Debug)]
pub enum Failed {
    Connect(Box<dyn std::error::Error + Send + Sync>),
    Send(io::Error),
}

impl Connector {
    pub fn new(connect_timeout: Duration) -> Self {
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(connect_timeout));
        http.set_nodelay(true);
        // TCP keepalive as reqwest sets it: a long stream through a NAT or a
        // load balancer is not dropped as idle, and a dead peer is noticed.
        http.set_keepalive(Some(TCP_KEEPALIVE));
        http.set_keepalive_interval(Some(TCP_KEEPALIVE));
        http.set_keepalive_retries(Some(3));
        Connector { http }
    }

    /// Sends `req` (its URI the target, its headers with `Host`) on an idle
    /// connection of this thread to `url`, else on a new one, and reads the
    /// answer's head. A request a reused connection got no answer byte for
    /// (the upstream had closed it) is sent again on the next.
    pub async fn send(&self, url: &DirectUrl, req: http::Request<Bytes>) -> Result<http::Response<Body>, Failed> {
        let (parts, body) = req.into_parts();
        let head = request_head(&parts.method, &url.target, &parts.headers, &body);
        let bodiless = parts.method == http::Method::HEAD;
        loop {
            let (mut conn, reused) = match take_idle(&url.host) {
                Some(conn) => (conn, true),
                None => (self.open(url).await?, false),
            };
            match conn.exchange(&head, &body).await {
                Ok(h) => {
                    let (kind, reuse) = framing(&h, bodiless).map_err(Failed::Send)?;
                    let body = Body { conn: Some(conn), host: url.host.clone(), kind, reuse, eof: false };
                    let mut resp = http::Response::new(body);
                    *resp.status_mut() = h.status;
                    *resp.version_mut() = h.version;
                    *resp.headers_mut() = h.headers;
                    return Ok(resp);
                }
                Err(Exchange { unanswered: true, .. }) if reused => {}
                Err(e) => return Err(Failed::Send(e.error)),
            }
        }
    }

    async fn open(&self, url: &DirectUrl) -> Result<Conn, Failed> {
        let mut http = self.http.clone();
        let io = http.call(url.connect.clone()).await.map_err(|e| Failed::Connect(e.into()))?;
        Ok(Conn { io: io.into_inner(), buf: BytesMut::new(), idle_since: Instant::now() })
    }
}

/// The request line and headers, with the body's length.
fn request_head(method: &http::Method, target: &http::Uri, headers: &HeaderMap, body: &[u8]) -> Vec<u8> {
    let mut h = Vec::with_capacity(256);
    h.extend_from_slice(method.as_str().as_bytes());
    h.push(b' ');
    h.extend_from_slice(target.path_and_query().map_or("/", |p| p.as_str()).as_bytes());
    h.extend_from_slice(b" HTTP/1.1\r\n");
    for (k, v) in headers {
        h.extend_from_slice(k.as_str().as_bytes());
        h.extend_from_slice(b": ");
        h.extend_from_slice(v.as_bytes());
        h.extend_from_slice(b"\r\n");
    }
    if !body.is_empty() || !matches!(*method, http::Method::GET | http::Method::HEAD) {
        h.extend_from_slice(b"content-length: ");
        h.extend_from_slice(body.len().to_string().as_bytes());
        h.extend_from_slice(b"\r\n");
    }
    h.extend_from_slice(b"\r\n");
    h
}

/// An answer's status line and headers.
struct Head {
    status: StatusCode,
    version: Version,
    headers: HeaderMap,
}

/// A failed exchange, and whether no byte of an answer came.
struct Exchange {
    error: io::Error,
    unanswered: bool,
}

fn invalid(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("the upstream's answer is not HTTP/1.1: {what}"))
}

fn truncated() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "the upstream closed the connection before the answer's end")
}

/// The answer's head from the front of `buf`, once it is all there (1xx
/// answers skipped).
fn parse_head(buf: &mut BytesMut) -> io::Result<Option<Head>> {
    while !buf.is_empty() {
        // Room for a few headers first: the array is initialised on every
        // call, and most answers have a dozen.
        let parsed = match head_of(buf, &mut [httparse::EMPTY_HEADER; FEW_HEADERS]) {
            Some(r) => r,
            None => head_of(buf, &mut [httparse::EMPTY_HEADER; MAX_HEADERS])
                .unwrap_or_else(|| Err(invalid(format!("more than {MAX_HEADERS} headers")))),
        };
        let Some((n, head)) = parsed? else { return Ok(None) };
        buf.advance(n);
        if head.status.is_informational() && head.status != StatusCode::SWITCHING_PROTOCOLS {
            continue;
        }
        return Ok(Some(head));
    }
    Ok(None)
}

/// The head at the front of `buf` and its length, `Ok(None)` while part of
/// it is still to come; `None` when it has more headers than `headers`
/// has room for.
fn head_of<'b>(buf: &'b [u8], headers: &mut [httparse::Header<'b>]) -> Option<io::Result<Option<(usize, Head)>>> {
    let mut r = httparse::Response::new(headers);
    let n = match r.parse(buf) {
        Ok(httparse::Status::Partial) => return Some(Ok(None)),
        Ok(httparse::Status::Complete(n)) => n,
        Err(httparse::Error::TooManyHeaders) => return None,
        Err(e) => return Some(Err(invalid(e))),
    };
    Some(head(&r).map(|h| Some((n, h))))
}

/// The status, version and headers of a head `httparse` read whole.
fn head(r: &httparse::Response<'_, '_>) -> io::Result<Head> {
    let status = StatusCode::from_u16(r.code.unwrap_or(0)).map_err(invalid)?;
    let version = if r.version == Some(0) { Version::HTTP_10 } else { Version::HTTP_11 };
    let mut headers = HeaderMap::with_capacity(r.headers.len());
    for h in r.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes()).map_err(invalid)?;
        headers.append(name, HeaderValue::from_bytes(h.value).map_err(invalid)?);
    }
    Ok(Head { status, version, headers })
}

/// How the body of `h` ends, and whether its connection may serve another
/// request after it.
fn framing(h: &Head, bodiless: bool) -> io::Result<(Kind, bool)> {
    let token = |name: http::header::HeaderName, t: &str| {
        h.headers
            .get_all(name)
            .iter()
            .any(|v| v.to_str().is_ok_and(|v| v.split(',').any(|x| x.trim().eq_ignore_ascii_case(t))))
    };
    let mut reuse = h.version == Version::HTTP_11 && !token(http::header::CONNECTION, "close");
    let kind = if bodiless || h.status == StatusCode::NO_CONTENT || h.status == StatusCode::NOT_MODIFIED {
        Kind::Length(0)
    } else if let Some(te) = h.headers.get_all(http::header::TRANSFER_ENCODING).iter().next_back() {
        let last = te.to_str().ok().and_then(|v| v.rsplit(',').next()).map(str::trim);
        if last.is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
            Kind::Chunked(Chunk::Size)
        } else {
            Kind::UntilClose
        }
    } else {
        let mut lengths = h.headers.get_all(http::header::CONTENT_LENGTH).iter();
        match lengths.next() {
            None => Kind::UntilClose,
            Some(v) => {
                let n = v
                    .to_str()
                    .ok()
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .ok_or_else(|| invalid("content-length"))?;
                if lengths.any(|w| w != v) {
                    return Err(invalid("content-length given twice, differently"));
                }
                Kind::Length(n)
            }
        }
    };
    if matches!(kind, Kind::UntilClose) {
        reuse = false;
    }
    Ok((kind, reuse))
}

/// How far through its body an answer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// This many bytes left.
    Length(u64),
    Chunked(Chunk),
    /// Until the upstream closes the connection.
    UntilClose,
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    Size,
    /// This many bytes left of the chunk.
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    Trailers,
}

/// What the buffered bytes give.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Data(Bytes),
    /// More bytes are needed.
    More,
    End,
}

/// The next piece of the body out of `buf` (`eof`: nothing more will come).
fn decode(kind: &mut Kind, buf: &mut BytesMut, eof: bool) -> io::Result<Step> {
    // More bytes needed: an error when none will come.
    let more = || if eof { Err(truncated()) } else { Ok(Step::More) };
    loop {
        match *kind {
            Kind::Done => return Ok(Step::End),
            Kind::Length(0) => {
                *kind = Kind::Done;
                return Ok(Step::End);
            }
            Kind::Length(n) => {
                if buf.is_empty() {
                    return more();
                }
                let take = (buf.len() as u64).min(n);
                *kind = Kind::Length(n - take);
                return Ok(Step::Data(buf.split_to(take as usize).freeze()));
            }
            Kind::UntilClose => {
                if !buf.is_empty() {
                    return Ok(Step::Data(buf.split().freeze()));
                }
                if eof {
                    *kind = Kind::Done;
                    return Ok(Step::End);
                }
                return Ok(Step::More);
            }
            Kind::Chunked(Chunk::Size) => {
                let Some(end) = memchr::memmem::find(buf, b"\r\n") else {
                    return if buf.len() > MAX_LINE { Err(invalid("a chunk-size line too long")) } else { more() };
                };
                let line = &buf[..end];
                let hex = line.split(|b| *b == b';').next().unwrap_or_default().trim_ascii();
                let size = std::str::from_utf8(hex)
                    .ok()
                    .filter(|h| !h.is_empty() && h.len() <= 16)
                    .and_then(|h| u64::from_str_radix(h, 16).ok())
                    .ok_or_else(|| invalid("a chunk size"))?;
                buf.advance(end + 2);
                *kind = Kind::Chunked(if size == 0 { Chunk::Trailers } else { Chunk::Data(size) });
            }
            Kind::Chunked(Chunk::Data(n)) => {
                if buf.is_empty() {
                    return more();
                }
                let take = (buf.len() as u64).min(n);
                *kind = Kind::Chunked(if take == n { Chunk::DataEnd } else { Chunk::Data(n - take) });
                return Ok(Step::Data(buf.split_to(take as usize).freeze()));
            }
            Kind::Chunked(Chunk::DataEnd) => {
                if buf.len() < 2 {
                    return more();
                }
                if &buf[..2] != b"\r\n" {
                    return Err(invalid("a chunk without its CRLF"));
                }
                buf.advance(2);
                *kind = Kind::Chunked(Chunk::Size);
            }
            Kind::Chunked(Chunk::Trailers) => match memchr::memmem::find(buf, b"\r\n") {
                Some(0) => {
                    buf.advance(2);
                    *kind = Kind::Done;
                    return Ok(Step::End);
                }
                // A trailer: not passed on.
                Some(end) => buf.advance(end + 2),
                None if buf.len() > MAX_LINE => return Err(invalid("a trailer line too long")),
                None => return more(),
            },
        }
    }
}

/// Reads what the socket has into `buf`, with room for at least `want`
/// more bytes (0: the upstream closed the connection).
///
/// The room is made once the socket has bytes, not while waiting for them:
/// an empty buffer is let go first, so a stream waiting for its model's next
/// token holds no read buffer (its storage is freed when the pieces given
/// out are), and thousands of slow streams share a few.
///
/// The read is tokio's own `poll_read`, which forgets the socket's readiness
/// after a short read: the next wait costs no `recvfrom` that finds nothing,
/// and [`Conn::usable`] can trust the readiness of an idle connection.
fn poll_read(io: &mut TcpStream, buf: &mut BytesMut, want: usize, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
    if buf.is_empty() && buf.capacity() > 0 {
        *buf = BytesMut::new();
    }
    ready!(io.poll_read_ready(cx))?;
    if buf.capacity() - buf.len() < want.min(READ_SIZE) / 4 + 1 {
        buf.reserve(want);
    }
    let r = tokio_util::io::poll_read_buf(Pin::new(io), cx, buf);
    // A stale readiness: nothing came after all, and the wait holds nothing.
    if r.is_pending() && buf.is_empty() {
        *buf = BytesMut::new();
    }
    r
}

/// A connection and what was read on it beyond the last answer (nothing,
/// for an idle one).
struct Conn {
    io: TcpStream,
    buf: BytesMut,
    idle_since: Instant,
}

impl Conn {
    /// Writes the request and reads the answer's head.
    async fn exchange(&mut self, head: &[u8], body: &[u8]) -> Result<Head, Exchange> {
        use tokio::io::AsyncWriteExt;
        let unanswered = |error| Exchange { error, unanswered: true };
        if body.len() <= ONE_WRITE {
            let mut all = Vec::with_capacity(head.len() + body.len());
            all.extend_from_slice(head);
            all.extend_from_slice(body);
            self.io.write_all(&all).await.map_err(unanswered)?;
        } else {
            self.io.write_all(head).await.map_err(unanswered)?;
            self.io.write_all(body).await.map_err(unanswered)?;
        }
        loop {
            let answered = !self.buf.is_empty();
            let fail = |error| Exchange { error, unanswered: !answered };
            if let Some(h) = parse_head(&mut self.buf).map_err(fail)? {
                return Ok(h);
            }
            if self.buf.len() >= MAX_HEAD {
                return Err(fail(invalid("a head longer than 64 KiB")));
            }
            let (io, buf) = (&mut self.io, &mut self.buf);
            match std::future::poll_fn(|cx| poll_read(io, buf, READ_SIZE, cx)).await {
                Ok(0) => return Err(fail(truncated())),
                Ok(_) => {}
                Err(e) => return Err(fail(e)),
            }
        }
    }

    /// Whether an idle connection may take a request: not idle too long,
    /// not closed by the upstream, nothing unasked-for sent on it.
    ///
    /// No readiness since its last read (which was short, see [`poll_read`])
    /// means nothing came since, no byte and no close, and costs no syscall;
    /// else one read looks. A close not yet seen by the runtime is the case
    /// [`Connector::send`] sends again for.
    fn usable(&self) -> bool {
        if self.idle_since.elapsed() >= IDLE_LIMIT {
            return false;
        }
        match self.io.poll_read_ready(&mut Context::from_waker(Waker::noop())) {
            Poll::Pending => true,
            Poll::Ready(Err(_)) => false,
            Poll::Ready(Ok(())) => {
                let mut probe = [0u8; 1];
                matches!(self.io.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            }
        }
    }
}

thread_local! {
    /// This thread's idle connections, by `Host` (authority), the most
    /// recently used last.
    static IDLE: RefCell<Vec<(HeaderValue, Vec<Conn>)>> = const { RefCell::new(Vec::new()) };
}

/// The most recently used idle connection to `host` that may take a
/// request; lets go of the others on the way.
fn take_idle(host: &HeaderValue) -> Option<Conn> {
    // `try_with`: nothing to take from a thread that is ending.
    IDLE.try_with(|idle| {
        let mut idle = idle.borrow_mut();
        let (_, conns) = idle.iter_mut().find(|(h, _)| h == host)?;
        while let Some(conn) = conns.pop() {
            if conn.usable() {
                return Some(conn);
            }
        }
        None
    })
    .ok()
    .flatten()
}

/// Puts a connection whose answer was read to its end back for the next
/// request to `host`.
fn put_back(host: &HeaderValue, mut conn: Conn) {
    conn.idle_since = Instant::now();
    // A body dropped as its thread ends closes its connection instead.
    let _ = IDLE.try_with(|idle| {
        let mut idle = idle.borrow_mut();
        match idle.iter_mut().find(|(h, _)| h == host) {
            Some((_, conns)) => {
                // Dropping one closes it: those idle too long, and the least
                // recently used beyond the cap.
                conns.retain(|c| c.idle_since.elapsed() < IDLE_LIMIT);
                if conns.len() >= MAX_IDLE {
                    conns.remove(0);
                }
                conns.push(conn);
            }
            None => idle.push((host.clone(), vec![conn])),
        }
    });
}

/// An answer's body, read off its connection by whoever polls it. The
/// connection goes back to this thread's list once the body's end is read
/// (or, when it is dropped, already there), unless the answer said it is
/// the last or reading failed.
pub struct Body {
    conn: Option<Conn>,
    host: HeaderValue,
    kind: Kind,
    reuse: bool,
    eof: bool,
}

impl Body {
    fn ended(&mut self) {
        if let Some(conn) = self.conn.take()
            && self.reuse
            && conn.buf.is_empty()
        {
            put_back(&self.host, conn);
        }
    }

    fn want(&self) -> usize {
        match self.kind {
            Kind::Length(n) => (n as usize).clamp(READ_SIZE, READ_MAX),
            _ => READ_SIZE,
        }
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = &mut *self;
        loop {
            let want = this.want();
            let Some(conn) = this.conn.as_mut() else { return Poll::Ready(None) };
            let r = match decode(&mut this.kind, &mut conn.buf, this.eof) {
                Ok(Step::Data(b)) => Ok(b),
                Ok(Step::End) => {
                    this.ended();
                    return Poll::Ready(None);
                }
                Ok(Step::More) => match ready!(poll_read(&mut conn.io, &mut conn.buf, want, cx)) {
                    Ok(n) => {
                        this.eof = n == 0;
                        continue;
                    }
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            };
            return Poll::Ready(Some(match r {
                Ok(b) => Ok(Frame::data(b)),
                Err(e) => {
                    this.conn = None;
                    Err(e)
                }
            }));
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.kind, Kind::Done | Kind::Length(0))
    }

    fn size_hint(&self) -> SizeHint {
        match self.kind {
            Kind::Length(n) => SizeHint::with_exact(n),
            Kind::Done => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}

impl Drop for Body {
    /// A body dropped before its end keeps its connection when the end is
    /// already there or arrives without waiting (as after an SSE stream's
    /// `[DONE]`, whose reader stops there); else the connection closes.
    fn drop(&mut self) {
        let mut cx = Context::from_waker(Waker::noop());
        let mut drained = 0;
        while let Some(conn) = self.conn.as_mut() {
            match decode(&mut self.kind, &mut conn.buf, self.eof) {
                Ok(Step::Data(b)) if drained + b.len() <= MAX_DRAIN => drained += b.len(),
                Ok(Step::End) => self.ended(),
                Ok(Step::More) => match poll_read(&mut conn.io, &mut conn.buf, READ_SIZE, &mut cx) {
                    Poll::Ready(Ok(n)) if n > 0 => {}
                    _ => self.conn = None,
                },
                _ => self.conn = None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn only_cleartext_urls_may_go_direct() {
        assert_eq!(direct_uri("https://api.deepseek.com/chat/completions"), None);
        assert_eq!(direct_uri("not a url"), None);
        assert_eq!(direct_uri("/chat/completions"), None);
        let host = |url: &str| direct_uri(url).map(|d| d.host);
        assert_eq!(host("http://127.0.0.1:8000/v1/chat/completions"), Some(HeaderValue::from_static("127.0.0.1:8000")));
        assert_eq!(host("http://vllm.internal/v1/chat/completions"), Some(HeaderValue::from_static("vllm.internal")));
        assert_eq!(host("http://[::1]:9/v1/chat/completions"), Some(HeaderValue::from_static("[::1]:9")));
        let target = direct_uri("http://h:1/v1/chat/completions?api-version=2").map(|d| d.target);
        assert_eq!(target.as_ref().map(|t| t.to_string()).as_deref(), Some("/v1/chat/completions?api-version=2"));
        // Whether a cleartext URL goes direct also depends on the
        // environment's proxies (tests/it/production.rs covers both ways).
    }

    /// Connections a test [`server`] accepted, and those the client closed.
    #[derive(Clone, Default)]
    struct Counts {
        accepted: Arc<AtomicU64>,
        closed: Arc<AtomicU64>,
    }

    /// A bare HTTP/1.1 server on loopback answering each request on a
    /// connection with `answers` in turn, then closing it.
    async fn server(answers: Vec<&'static str>) -> (u16, Counts) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let counts = Counts::default();
        let c = counts.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                c.accepted.fetch_add(1, Ordering::Relaxed);
                let (answers, closed) = (answers.clone(), c.closed.clone());
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    for a in answers {
                        let mut got = Vec::new();
                        // Small request bodies: the head and the body end with the body's
                        // closing brace.
                        while !got.ends_with(b"}") {
                            match s.read(&mut buf).await {
                                Ok(0) | Err(_) => {
                                    closed.fetch_add(1, Ordering::Relaxed);
                                    return;
                                }
                                Ok(n) => got.extend_from_slice(&buf[..n]),
                            }
                        }
                        if s.write_all(a.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (port, counts)
    }

    /// A client for a fresh [`server`], with the server's accept count.
    async fn setup(answers: Vec<&'static str>) -> (Connector, DirectUrl, Arc<AtomicU64>) {
        let (c, url, counts) = setup_counted(answers).await;
        (c, url, counts.accepted)
    }

    async fn setup_counted(answers: Vec<&'static str>) -> (Connector, DirectUrl, Counts) {
        let (port, counts) = server(answers).await;
        let url = direct_uri(&format!("http://127.0.0.1:{port}/v1/chat/completions")).expect("direct");
        (Connector::new(Duration::from_secs(1)), url, counts)
    }

    fn request(url: &DirectUrl) -> http::Request<Bytes> {
        let mut req = http::Request::new(Bytes::from_static(b"{}"));
        *req.method_mut() = http::Method::POST;
        *req.uri_mut() = url.target.clone();
        req.headers_mut().insert(http::header::HOST, url.host.clone());
        req
    }

    async fn text(resp: http::Response<Body>) -> String {
        use http_body_util::BodyExt;
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    const OK: &str = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

    #[tokio::test]
    async fn a_connection_is_reused_once_its_answer_was_read() {
        let (c, url, accepted) = setup(vec![OK, OK, OK]).await;
        for _ in 0..3 {
            let resp = c.send(&url, request(&url)).await.expect("sent");
            assert_eq!(text(resp).await, "ok");
        }
        assert_eq!(accepted.load(Ordering::Relaxed), 1);
        // An answer still being read holds its connection: a second request
        // at the same time gets a new one.
        let (c, url, accepted) = setup(vec![OK]).await;
        let first = c.send(&url, request(&url)).await.expect("first");
        let second = c.send(&url, request(&url)).await.expect("second");
        assert_eq!((text(first).await, text(second).await), ("ok".into(), "ok".into()));
        assert_eq!(accepted.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn an_idle_connection_is_taken_back_without_a_read() {
        // Its answer read to the end, the socket's readiness is spent: taking
        // the connection back needs no read that finds nothing.
        let (c, url, accepted) = setup(vec![OK, OK]).await;
        let resp = c.send(&url, request(&url)).await.expect("sent");
        assert_eq!(text(resp).await, "ok");
        let ready = IDLE.with(|idle| {
            let idle = idle.borrow();
            let conn = idle.iter().find(|(h, _)| *h == url.host).and_then(|(_, conns)| conns.last()).expect("kept");
            conn.io.poll_read_ready(&mut Context::from_waker(Waker::noop())).is_ready()
        });
        assert!(!ready, "an idle connection is still marked readable");
        let resp = c.send(&url, request(&url)).await.expect("sent");
        assert_eq!(text(resp).await, "ok");
        assert_eq!(accepted.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_connection_the_upstream_closed_is_replaced() {
        // One answer per connection, then the server closes it.
        let (c, url, accepted) = setup(vec![OK]).await;
        for _ in 0..3 {
            let resp = c.send(&url, request(&url)).await.expect("sent");
            assert_eq!(text(resp).await, "ok");
            // Let the connection's task see the close.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(accepted.load(Ordering::Relaxed), 3);
    }

    #[tokio::test]
    async fn a_body_dropped_before_its_end_does_not_come_back() {
        const PARTIAL: &str = "HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly part";
        let (c, url, accepted) = setup(vec![PARTIAL, OK]).await;
        drop(c.send(&url, request(&url)).await.expect("sent"));
        // Every connection of this server answers the partial body first.
        drop(c.send(&url, request(&url)).await.expect("sent"));
        assert_eq!(accepted.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn a_body_left_after_its_last_byte_arrived_keeps_its_connection() {
        // As an SSE reader stops at `[DONE]`: the chunked body's end is in
        // hand but not read.
        const CHUNKED: &str = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n";
        let (c, url, accepted) = setup(vec![CHUNKED, CHUNKED]).await;
        for _ in 0..2 {
            let mut body = c.send(&url, request(&url)).await.expect("sent").into_body();
            let frame = http_body_util::BodyExt::frame(&mut body).await;
            let data = frame.and_then(|f| f.ok()).and_then(|f| f.into_data().ok());
            assert_eq!(data.as_deref(), Some(&b"ok"[..]));
            drop(body);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(accepted.load(Ordering::Relaxed), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_is_closed_after_the_idle_limit() {
        // The server would answer three requests on one connection.
        let (c, url, accepted) = setup(vec![OK, OK, OK]).await;
        let resp = c.send(&url, request(&url)).await.expect("sent");
        assert_eq!(text(resp).await, "ok");
        tokio::time::advance(IDLE_LIMIT / 2).await;
        let resp = c.send(&url, request(&url)).await.expect("sent");
        assert_eq!(text(resp).await, "ok");
        assert_eq!(accepted.load(Ordering::Relaxed), 1, "reused within the limit");
        tokio::time::advance(IDLE_LIMIT + IDLE_LIMIT / 5).await;
        tokio::time::sleep(Duration::from_millis(1)).await;
        let resp = c.send(&url, request(&url)).await.expect("sent");
        assert_eq!(text(resp).await, "ok");
        assert_eq!(accepted.load(Ordering::Relaxed), 2, "closed after the limit");
    }

    #[tokio::test]
    async fn at_most_max_idle_connections_are_kept() {
        let (c, url, counts) = setup_counted(vec![OK, OK]).await;
        // All answers held at once: one connection each.
        let mut held = Vec::new();
        for _ in 0..MAX_IDLE + 2 {
            held.push(c.send(&url, request(&url)).await.expect("sent"));
        }
        for resp in held {
            assert_eq!(text(resp).await, "ok");
        }
        // The server sees the closes when its tasks next run.
        for _ in 0..200 {
            if counts.closed.load(Ordering::Relaxed) >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(counts.accepted.load(Ordering::Relaxed), MAX_IDLE as u64 + 2);
        assert_eq!(counts.closed.load(Ordering::Relaxed), 2, "the two least recently used closed");
        // The kept ones serve the next requests.
        let resp = c.send(&url, request(&url)).await.expect("sent");
        assert_eq!(text(resp).await, "ok");
        assert_eq!(counts.accepted.load(Ordering::Relaxed), MAX_IDLE as u64 + 2);
    }

    #[tokio::test]
    async fn refused_connections_fail_to_connect() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").port()
        };
        let url = direct_uri(&format!("http://127.0.0.1:{port}/v1/chat/completions")).expect("direct");
        let r = Connector::new(Duration::from_secs(1)).send(&url, request(&url)).await;
        assert!(matches!(r, Err(Failed::Connect(_))), "{:?}", r.err());
    }

    /// The body `kind` gives for `wire` fed in pieces of `cuts`, and how it ended.
    fn decoded(mut kind: Kind, wire: &[u8], cuts: &[usize], eof_at_end: bool) -> (Vec<u8>, io::Result<()>) {
        let (mut buf, mut out, mut at) = (BytesMut::new(), Vec::new(), 0);
        let mut pieces = cuts.iter().copied().chain(std::iter::repeat(usize::MAX));
        loop {
            let eof = at == wire.len() && eof_at_end;
            match decode(&mut kind, &mut buf, eof) {
                Ok(Step::Data(b)) => out.extend_from_slice(&b),
                Ok(Step::End) => return (out, Ok(())),
                Ok(Step::More) if at == wire.len() && !eof_at_end => return (out, Err(truncated())),
                Ok(Step::More) => {
                    let n = pieces.next().unwrap_or(usize::MAX).max(1).min(wire.len() - at);
                    buf.extend_from_slice(&wire[at..at + n]);
                    at += n;
                }
                Err(e) => return (out, Err(e)),
            }
        }
    }

    fn chunked(body: &[u8], sizes: &[usize]) -> Vec<u8> {
        let mut wire = Vec::new();
        let mut rest = body;
        for &n in sizes.iter().chain(std::iter::repeat(&7)) {
            if rest.is_empty() {
                break;
            }
            let (a, b) = rest.split_at(n.max(1).min(rest.len()));
            wire.extend_from_slice(format!("{:x};ext=1\r\n", a.len()).as_bytes());
            wire.extend_from_slice(a);
            wire.extend_from_slice(b"\r\n");
            rest = b;
        }
        wire.extend_from_slice(b"0\r\nx-trailer: 1\r\n\r\n");
        wire
    }

    proptest::proptest! {
        #[test]
        fn chunked_and_sized_bodies_decode_the_same_in_any_split(
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            sizes in proptest::collection::vec(1usize..90, 0..12),
            cuts in proptest::collection::vec(1usize..40, 0..40),
        ) {
            let (out, end) = decoded(Kind::Chunked(Chunk::Size), &chunked(&body, &sizes), &cuts, false);
            proptest::prop_assert!(end.is_ok());
            proptest::prop_assert_eq!(&out, &body);
            let (out, end) = decoded(Kind::Length(body.len() as u64), &body, &cuts, false);
            proptest::prop_assert!(end.is_ok());
            proptest::prop_assert_eq!(&out, &body);
            let (out, end) = decoded(Kind::UntilClose, &body, &cuts, true);
            proptest::prop_assert!(end.is_ok());
            proptest::prop_assert_eq!(&out, &body);
        }

        #[test]
        fn any_bytes_as_a_chunked_body_end_or_fail_without_panicking(
            wire in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            cuts in proptest::collection::vec(1usize..40, 0..20),
        ) {
            let _ = decoded(Kind::Chunked(Chunk::Size), &wire, &cuts, true);
        }
    }

    #[test]
    fn a_head_is_read_whatever_its_number_of_headers_up_to_the_cap() {
        let head = |n: usize| {
            let mut h = String::from("HTTP/1.1 200 OK\r\n");
            for i in 0..n {
                h.push_str(&format!("x-h{i}: v{i}\r\n"));
            }
            BytesMut::from(format!("{h}\r\nbody").as_bytes())
        };
        for n in [0, 1, FEW_HEADERS, FEW_HEADERS + 1, MAX_HEADERS] {
            let mut buf = head(n);
            let h = parse_head(&mut buf).expect("a head").expect("whole");
            assert_eq!(h.headers.len(), n);
            if n > 0 {
                let last = format!("v{}", n - 1);
                assert_eq!(h.headers.get(format!("x-h{}", n - 1)).map(|v| v.as_bytes()), Some(last.as_bytes()));
            }
            assert_eq!(&buf[..], b"body", "the head is taken off, the body left");
        }
        assert!(parse_head(&mut head(MAX_HEADERS + 1)).is_err());
        let mut part = BytesMut::from(&head(FEW_HEADERS + 1)[..40]);
        assert!(parse_head(&mut part).expect("no error").is_none());
        assert_eq!(part.len(), 40, "a partial head is left for the next read");
        assert!(parse_head(&mut BytesMut::new()).expect("no error").is_none());
        // 1xx answers are skipped, the final one read.
        let mut two = BytesMut::from(&b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"[..]);
        assert_eq!(parse_head(&mut two).expect("a head").map(|h| h.status), Some(StatusCode::NO_CONTENT));
    }

    #[test]
    fn broken_framing_is_an_error_not_a_body() {
        let err = |kind, wire: &[u8], eof| decoded(kind, wire, &[], eof).1.map_err(|e| e.kind());
        assert_eq!(err(Kind::Chunked(Chunk::Size), b"zz\r\nok\r\n0\r\n\r\n", false), Err(io::ErrorKind::InvalidData));
        assert_eq!(err(Kind::Chunked(Chunk::Size), b"2\r\nokX\r\n0\r\n\r\n", false), Err(io::ErrorKind::InvalidData));
        assert_eq!(err(Kind::Chunked(Chunk::Size), &[b'1'; MAX_LINE + 10], false), Err(io::ErrorKind::InvalidData));
        assert_eq!(err(Kind::Chunked(Chunk::Size), b"5\r\nok", true), Err(io::ErrorKind::UnexpectedEof));
        assert_eq!(err(Kind::Length(10), b"short", true), Err(io::ErrorKind::UnexpectedEof));
        let h = |raw: &str| parse_head(&mut BytesMut::from(raw)).map(|h| h.map(|h| framing(&h, false)));
        assert!(h("HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n").unwrap().unwrap().is_err());
        assert!(h("HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n").unwrap().unwrap().is_err());
        assert!(h("NOT HTTP\r\n\r\n").is_err());
        assert!(h("HTTP/1.1 200 OK\r\ncontent-le").unwrap().is_none(), "a head in parts waits for the rest");
    }

    #[test]
    fn framing_follows_the_head() {
        let f = |raw: &str| {
            let h = parse_head(&mut BytesMut::from(raw)).unwrap().unwrap();
            framing(&h, false).unwrap()
        };
        assert_eq!(f("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"), (Kind::Length(5), true));
        assert_eq!(
            f("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n"),
            (Kind::Chunked(Chunk::Size), true)
        );
        assert_eq!(f("HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 5\r\n\r\n"), (Kind::Length(5), false));
        assert_eq!(f("HTTP/1.1 200 OK\r\n\r\n"), (Kind::UntilClose, false));
        assert_eq!(f("HTTP/1.0 200 OK\r\ncontent-length: 5\r\n\r\n"), (Kind::Length(5), false));
        assert_eq!(f("HTTP/1.1 204 No Content\r\n\r\n"), (Kind::Length(0), true));
        assert_eq!(
            f("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n"),
            (Kind::Length(1), true)
        );
    }

    #[tokio::test]
    async fn an_answer_that_says_close_does_not_keep_its_connection() {
        const CLOSE: &str = "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok";
        let (c, url, accepted) = setup(vec![CLOSE, CLOSE]).await;
        for _ in 0..2 {
            let resp = c.send(&url, request(&url)).await.expect("sent");
            assert_eq!(text(resp).await, "ok");
        }
        assert_eq!(accepted.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn a_chunked_stream_arrives_piece_by_piece() {
        const STREAM: &str =
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n6\r\ndata: \r\n3\r\n{}\n\r\n0\r\n\r\n";
        let (c, url, accepted) = setup(vec![STREAM, STREAM]).await;
        for _ in 0..2 {
            let resp = c.send(&url, request(&url)).await.expect("sent");
            assert_eq!(text(resp).await, "data: {}\n");
        }
        assert_eq!(accepted.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_request_the_upstream_closed_its_connection_under_goes_again() {
        // One answer per connection and no pause: the close may not be seen
        // before the next request is written on the connection.
        let (c, url, accepted) = setup(vec![OK]).await;
        for _ in 0..5 {
            let resp = c.send(&url, request(&url)).await.expect("sent");
            assert_eq!(text(resp).await, "ok");
        }
        assert_eq!(accepted.load(Ordering::Relaxed), 5);
    }

    #[tokio::test]
    async fn a_stream_waiting_for_its_next_piece_holds_no_read_buffer() {
        use http_body::Body as _;
        // The first piece, then nothing: the model is thinking.
        const FIRST: &str = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\na\r\ndata: {}\n\n\r\n";
        // A second answer keeps the server's side open, waiting for a second request.
        let (c, url, _) = setup(vec![FIRST, FIRST]).await;
        let mut body = c.send(&url, request(&url)).await.expect("sent").into_body();
        let piece = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        let piece = piece.expect("a frame").expect("data").into_data().expect("data");
        assert_eq!(&piece[..], b"data: {}\n\n");
        drop(piece);
        let mut cx = Context::from_waker(Waker::noop());
        assert!(Pin::new(&mut body).poll_frame(&mut cx).is_pending());
        let held = body.conn.as_ref().map(|c| c.buf.capacity());
        assert_eq!(held, Some(0), "the waiting stream holds a read buffer");
    }
}
