//! Direct requests: chat requests to a cleartext upstream that no proxy
//! setting intercepts (see [`direct_uri`]), sent over HTTP/1.1 connections
//! this module keeps idle per thread, with hyper's connection API.
//!
//! Why not hyper-util's pooled client (reqwest's engine): per request it
//! locks a pool shared by every thread and finds the host in it by a SipHash
//! of the authority, rewrites the absolute URI into origin form, stores the
//! connection's details in the response's extensions, and spawns a task that
//! waits for the connection to be free again to put it back. Here a thread's
//! idle connections are a short list per authority, the request line is the
//! path the provider parsed once, and the answer's body puts its connection
//! back, on the thread that reads it, once read to the end or dropped.
//!
//! Connections are opened with hyper-util's `HttpConnector` (DNS, happy
//! eyeballs, connect timeout, `TCP_NODELAY`, TCP keepalive), driven by a
//! task on the runtime that opened them, and closed after [`IDLE_LIMIT`]
//! unused, as hyper-util's pool does. At most [`MAX_IDLE`] per authority and
//! thread are kept: after a burst of streams the rest close at once instead
//! of holding their buffers here, and a socket and a worker at the upstream,
//! for the idle limit (nginx's `keepalive N` does the same; hyper-util keeps
//! any number).

use std::cell::RefCell;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::HeaderValue;
use http_body::{Frame, SizeHint};
use http_body_util::Full;
use hyper::client::conn::http1::SendRequest;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::time::Instant;
use tower_service::Service;

/// How long an unused connection is kept for the next request.
pub const IDLE_LIMIT: Duration = Duration::from_secs(90);
/// Idle connections kept per authority and serving thread; the least
/// recently used one closes when another comes back.
pub const MAX_IDLE: usize = 64;
/// Idle time before the first TCP keepalive probe, and between probes.
const TCP_KEEPALIVE: Duration = Duration::from_secs(15);

/// An upstream URL that requests may send directly (see [`direct_uri`]):
/// where to connect, the request target and the `Host` header, made once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectUrl {
    /// The absolute URL, for the connector (host and port).
    connect: http::Uri,
    /// The request target in origin form (`/v1/chat/completions`).
    pub target: http::Uri,
    /// `Host`, as hyper's client writes it: the port only when not 80. Also
    /// the key of the idle connections that fit this URL.
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
    Send(hyper::Error),
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
    /// connection of this thread to `url`, else on a new one. A request an
    /// idle connection could not take (the upstream had closed it) is sent
    /// again on the next, as it never left.
    pub async fn send(
        &self,
        url: &DirectUrl,
        mut req: http::Request<Full<Bytes>>,
    ) -> Result<http::Response<Body>, Failed> {
        loop {
            let (mut conn, reused) = match take_idle(&url.host) {
                Some(conn) => (conn, true),
                None => (self.open(url).await?, false),
            };
            conn.busy();
            match conn.sender.try_send_request(req).await {
                Ok(resp) => {
                    let (head, body) = resp.into_parts();
                    let body = Body { inner: body, conn: Some(conn), host: url.host.clone() };
                    return Ok(http::Response::from_parts(head, body));
                }
                Err(mut e) => match e.take_message() {
                    Some(unsent) if reused => req = unsent,
                    _ => return Err(Failed::Send(e.into_error())),
                },
            }
        }
    }

    async fn open(&self, url: &DirectUrl) -> Result<Conn, Failed> {
        let mut http = self.http.clone();
        let io = http.call(url.connect.clone()).await.map_err(|e| Failed::Connect(e.into()))?;
        let (sender, connection) =
            hyper::client::conn::http1::handshake::<_, Full<Bytes>>(io).await.map_err(Failed::Send)?;
        let idle_since = Arc::new(AtomicU64::new(BUSY));
        tokio::spawn(Drive::new(connection, idle_since.clone()));
        Ok(Conn { sender, idle_since })
    }
}

/// `idle_since` of a connection in use.
const BUSY: u64 = u64::MAX;

/// Milliseconds since this process's first use of the clock: a connection's
/// idle time in one atomic. Tokio's clock, the one the idle check's timer
/// runs on.
fn now_ms() -> u64 {
    static START: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);
    START.elapsed().as_millis() as u64
}

/// The task of one connection: runs it until it closes, or until it has
/// been idle for [`IDLE_LIMIT`] (checked every tenth of it: one timer per
/// connection, never moved by requests). A plain struct rather than an
/// `async fn`, whose state would hold the connection twice (the argument and
/// its pinned copy) in every open stream's task.
struct Drive {
    connection: hyper::client::conn::http1::Connection<TokioIo<tokio::net::TcpStream>, Full<Bytes>>,
    tick: tokio::time::Interval,
    idle_since: Arc<AtomicU64>,
}

impl Drive {
    fn new(
        connection: hyper::client::conn::http1::Connection<TokioIo<tokio::net::TcpStream>, Full<Bytes>>,
        idle_since: Arc<AtomicU64>,
    ) -> Self {
        let mut tick = tokio::time::interval(IDLE_LIMIT / 10);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Drive { connection, tick, idle_since }
    }
}

impl std::future::Future for Drive {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        if let Poll::Ready(r) = Pin::new(&mut this.connection).poll(cx) {
            if let Err(e) = r {
                tracing::debug!(error = %e, "upstream connection closed");
            }
            return Poll::Ready(());
        }
        let limit = IDLE_LIMIT.as_millis() as u64;
        while this.tick.poll_tick(cx).is_ready() {
            let since = this.idle_since.load(Ordering::Relaxed);
            if since != BUSY && now_ms().saturating_sub(since) >= limit {
                // Dropping the connection closes it.
                return Poll::Ready(());
            }
        }
        Poll::Pending
    }
}

/// A connection with its idle clock.
struct Conn {
    sender: SendRequest<Full<Bytes>>,
    idle_since: Arc<AtomicU64>,
}

impl Conn {
    fn busy(&self) {
        self.idle_since.store(BUSY, Ordering::Relaxed);
    }
}

thread_local! {
    /// This thread's idle connections, by `Host` (authority), the most
    /// recently used last.
    static IDLE: RefCell<Vec<(HeaderValue, Vec<Conn>)>> = const { RefCell::new(Vec::new()) };
}

/// The most recently used connection to `host` that is free now; lets go of
/// the closed ones on the way. One that is neither (its task has not yet
/// seen the end of the last answer) stays for a later request: waiting for
/// it could take as long as the upstream's next byte.
fn take_idle(host: &HeaderValue) -> Option<Conn> {
    // `try_with`: nothing to take from a thread that is ending.
    IDLE.try_with(|idle| {
        let mut idle = idle.borrow_mut();
        let (_, conns) = idle.iter_mut().find(|(h, _)| h == host)?;
        conns.retain(|c| !c.sender.is_closed());
        let free = conns.iter().rposition(|c| c.sender.is_ready())?;
        Some(conns.remove(free))
    })
    .ok()
    .flatten()
}

/// Puts a connection back for the next request to `host` once its answer is
/// done with: read to the end, or dropped (hyper then reads what is left
/// of it if that is already there, as after an SSE stream's `[DONE]`, and
/// the connection is free again; or closes it).
fn put_back(host: &HeaderValue, conn: Conn) {
    conn.idle_since.store(now_ms(), Ordering::Relaxed);
    // A body dropped as its thread ends closes its connection instead.
    let _ = IDLE.try_with(|idle| {
        let mut idle = idle.borrow_mut();
        // Closed ones are let go by the next `take_idle`, not here too.
        match idle.iter_mut().find(|(h, _)| h == host) {
            Some((_, conns)) => {
                if conns.len() >= MAX_IDLE {
                    // Dropping it closes it.
                    conns.remove(0);
                }
                conns.push(conn);
            }
            None => idle.push((host.clone(), vec![conn])),
        }
    });
}

/// An answer's body: hyper's, and the connection it came on, which goes
/// back to this thread's list when the body has been read to the end or is
/// dropped (see [`put_back`]), unless reading it failed.
pub struct Body {
    inner: hyper::body::Incoming,
    conn: Option<Conn>,
    host: HeaderValue,
}

impl Body {
    fn done(&mut self) {
        if let Some(conn) = self.conn.take() {
            put_back(&self.host, conn);
        }
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        match &r {
            Poll::Ready(None) => this.done(),
            Poll::Ready(Some(Err(_))) => this.conn = None,
            _ if this.inner.is_end_stream() => this.done(),
            _ => {}
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        self.done();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn request(url: &DirectUrl) -> http::Request<Full<Bytes>> {
        let mut req = http::Request::new(Full::new(Bytes::from_static(b"{}")));
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
}
