//! Serving: the listening sockets, the serving threads, and the graceful
//! shutdown. When the signal comes, `/readyz` turns 503, the listeners stop
//! accepting, and in-flight requests and streams run to their end for up to
//! the grace period. Streams still open then are ended with an in-band error
//! event (see [`super::edge`]), and the server returns shortly after
//! whatever is left.
//!
//! The binary serves thread-per-core ([`serve_threads`]): each serving
//! thread runs its own single-threaded runtime with its own listening socket
//! and its own upstream connection pool, so a request is accepted, proxied
//! and answered on one thread, with no cross-thread wake-up on its path.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;

use super::{Shared, app};

/// After the grace period, how long cut streams get to flush their last
/// event before the connections are dropped.
const FLUSH: Duration = Duration::from_secs(2);

/// Accepted sockets with Nagle off (for the replay servers, which use
/// `axum::serve`; see [`no_delay`]).
pub fn nodelay(
    listener: TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr> {
    use axum::serve::ListenerExt;
    listener.tap_io(no_delay)
}

/// Nagle off on an accepted socket: SSE writes are small, and with Nagle on
/// they wait on the client's delayed ACK (about 40 ms per stall on Linux).
fn no_delay(tcp: &mut tokio::net::TcpStream) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!("cannot set TCP_NODELAY: {e}");
    }
}

/// Serves `state` on `listener` until `signal` completes, then drains.
pub async fn serve(
    listener: TcpListener,
    state: Shared,
    signal: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    let r = drain(listener, state, signal, grace).await;
    tracing::info!("server stopped; bye");
    r
}

/// The largest request head a connection reads (request line and headers):
/// hyper's smallest allowed buffer limit. A larger head is answered 431. It
/// also keeps each connection's read buffer at 8 KiB; hyper's default limit
/// let the buffer double on a request's first reads, and it stayed doubled
/// for the life of the connection.
pub const MAX_HEAD: usize = 8 * 1024;

/// [`serve`] without the last word (serving threads share one).
async fn drain(
    listener: TcpListener,
    state: Shared,
    signal: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    let st = state.clone();
    let open = accept(listener, &state, async move {
        signal.await;
        // Every serving thread gets the signal; the first one says so.
        if st.set_ready(false) {
            tracing::info!(
                in_flight = st.edge.tracker.len(),
                grace_secs = grace.as_secs_f64(),
                "shutting down: no new connections, finishing in-flight requests"
            );
        }
    })
    .await;
    state.edge.tracker.close();
    // Idle keep-alive connections close now; the others after their
    // in-flight request.
    let mut all = std::pin::pin!(open.shutdown());
    if tokio::time::timeout(grace, &mut all).await.is_ok() {
        return Ok(());
    }
    tracing::warn!(open = state.edge.tracker.len(), "grace period over: ending open streams");
    state.edge.cut.cancel();
    if tokio::time::timeout(FLUSH, &mut all).await.is_err() {
        tracing::warn!(open = state.edge.tracker.len(), "closing remaining connections");
    }
    Ok(())
}

/// Accepts connections and serves each on a task of its own (HTTP/1.1, or
/// HTTP/2 when the client opens with its preface), until `stop` completes.
/// Returns the connections still open.
async fn accept(
    listener: TcpListener,
    state: &Shared,
    stop: impl Future<Output = ()>,
) -> hyper_util::server::graceful::GracefulShutdown {
    let app = app(state.clone());
    let header_timeout = state.edge.limits.header_read_timeout();
    let mut h1 = hyper::server::conn::http1::Builder::new();
    // The header timeout also closes a keep-alive connection idle that long.
    h1.max_buf_size(MAX_HEAD).timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(header_timeout);
    let mut h2 = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
    // One head limit for both protocols (HTTP/1.1 answers 431 above it).
    h2.max_header_list_size(MAX_HEAD as u32).timer(hyper_util::rt::TokioTimer::new());
    let builders = Arc::new((h1, h2));
    let open = hyper_util::server::graceful::GracefulShutdown::new();
    // Connections still waiting for their first bytes when `stop` comes
    // are closed at once (they are not watched yet).
    let closing = tokio_util::sync::CancellationToken::new();
    let _closed = closing.clone().drop_guard();
    let mut stop = std::pin::pin!(stop);
    loop {
        let (mut tcp, peer) = tokio::select! {
            biased;
            () = &mut stop => return open,
            r = listener.accept() => match r {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Per-connection failures (reset before accept) are
                    // nothing; others (out of file descriptors) are waited out.
                    if !matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionAborted
                            | std::io::ErrorKind::ConnectionReset
                            | std::io::ErrorKind::ConnectionRefused
                    ) {
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    continue;
                }
            },
        };
        let Some(slot) = state.edge.peers.admit(peer.ip()) else {
            tracing::debug!(peer = %peer.ip(), "too many connections from one address: closed");
            continue;
        };
        no_delay(&mut tcp);
        let service = app.clone();
        let (builders, watcher, closing) = (builders.clone(), open.watcher(), closing.clone());
        tokio::spawn(async move {
            let _slot = slot;
            // A connection that sends nothing is closed after the header timeout.
            let proto = tokio::select! {
                biased;
                () = closing.cancelled() => return,
                p = tokio::time::timeout(header_timeout, sniff(&tcp)) => match p {
                    Ok(p) => p,
                    Err(_) => return,
                },
            };
            let io = hyper_util::rt::TokioIo::new(tcp);
            let (h1, h2) = &*builders;
            let r = match proto {
                Proto::H1 => watcher.watch(h1.serve_connection(io, service)).await,
                // Boxed, so the task is sized for the common HTTP/1.1 connection.
                Proto::H2 => {
                    let seen = Arc::new(AtomicBool::new(false));
                    let service = Seen { app: service, seen: seen.clone() };
                    let mut conn = Box::pin(watcher.watch(h2.serve_connection(io, service)));
                    tokio::select! {
                        r = &mut conn => r,
                        // HTTP/2 has no header timeout of its own: a
                        // connection that opens no stream in time is closed.
                        () = unused(seen, header_timeout) => return,
                    }
                }
            };
            if let Err(e) = r {
                tracing::trace!("connection ended: {e}");
            }
        });
    }
}

/// Completes when `seen` is still false after `limit`; never otherwise.
async fn unused(seen: Arc<AtomicBool>, limit: Duration) {
    tokio::time::sleep(limit).await;
    if seen.load(Ordering::Relaxed) {
        std::future::pending::<()>().await;
    }
}

/// [`super::App`] noting that its HTTP/2 connection made a request.
struct Seen {
    app: super::App,
    seen: Arc<AtomicBool>,
}

impl hyper::service::Service<axum::http::Request<hyper::body::Incoming>> for Seen {
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = super::HotFuture;

    fn call(&self, req: axum::http::Request<hyper::body::Incoming>) -> Self::Future {
        self.seen.store(true, Ordering::Relaxed);
        hyper::service::Service::call(&self.app, req)
    }
}

/// Open connections per client address, shared by the serving threads
/// (`[limits] max_connections_per_ip`; IPv6 counted per /64, what one
/// client is usually given).
pub struct Peers {
    max: u32,
    /// Loopback clients are held to `max` too (`cap_loopback_connections`).
    loopback: bool,
    open: Mutex<HashMap<IpAddr, u32>>,
}

impl Peers {
    pub fn new(max: u32, loopback: bool) -> Arc<Self> {
        Arc::new(Peers { max, loopback, open: Mutex::new(HashMap::new()) })
    }

    /// A slot for one more connection from `ip`, held until dropped; `None`
    /// when that address has all of its slots.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<PeerSlot> {
        // A sidecar's app connects from 127.0.0.1 only: one address is
        // every client there (`max_concurrent` still bounds them).
        if self.max == 0 || (!self.loopback && ip.to_canonical().is_loopback()) {
            return Some(PeerSlot { peers: None, ip });
        }
        let ip = match ip.to_canonical() {
            IpAddr::V6(v6) => IpAddr::V6(std::net::Ipv6Addr::from_bits(v6.to_bits() & !u128::from(u64::MAX))),
            v4 => v4,
        };
        let mut open = self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = open.entry(ip).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(PeerSlot { peers: Some(self.clone()), ip })
    }
}

/// One connection's place in [`Peers`].
pub struct PeerSlot {
    peers: Option<Arc<Peers>>,
    ip: IpAddr,
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let Some(peers) = &self.peers else { return };
        let mut open = peers.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// The HTTP/2 client preface (RFC 9113 §3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

#[derive(Debug, PartialEq, Eq)]
enum Proto {
    H1,
    H2,
}

/// Which protocol a new connection speaks, from its first bytes, peeked and
/// left in the socket for hyper to read. This is what hyper-util's `auto`
/// builder does, without its read-ahead wrapper on every later read and
/// without a connection state sized for both protocols (larger for every
/// connection). No HTTP/1 method starts with `PRI`, so three bytes
/// decide; a read error or an end is left for HTTP/1.1 to report.
async fn sniff(tcp: &tokio::net::TcpStream) -> Proto {
    let mut buf = [0u8; 3];
    // A first segment of one or two bytes: look again a few times.
    for _ in 0..100 {
        let n = match tcp.peek(&mut buf).await {
            Ok(n) => n,
            Err(_) => return Proto::H1,
        };
        if n == 0 || buf[..n] != H2_PREFACE[..n] {
            return Proto::H1;
        }
        if n == buf.len() {
            return Proto::H2;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Proto::H1
}

/// Binds `addr` for `threads` serving threads. On Linux each thread gets a
/// socket of its own on the port (`SO_REUSEPORT`): the kernel spreads the
/// connections over them and no thread is woken for another's. Elsewhere
/// the threads share one socket.
pub fn bind(addr: &str, threads: usize) -> std::io::Result<Vec<std::net::TcpListener>> {
    use std::net::ToSocketAddrs as _;
    let mut last = std::io::Error::new(std::io::ErrorKind::InvalidInput, "no address");
    for a in addr.to_socket_addrs()? {
        match bind_group(a, threads.max(1)) {
            Ok(group) => return Ok(group),
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn bind_group(addr: SocketAddr, threads: usize) -> std::io::Result<Vec<std::net::TcpListener>> {
    #[cfg(target_os = "linux")]
    {
        // A port shared with SO_REUSEPORT also admits another process of the
        // same user: refuse a port someone already listens on, as a plain
        // bind would, instead of silently splitting its traffic.
        if addr.port() != 0 {
            drop(socket(addr, false)?);
        }
        let first = socket(addr, true)?;
        let actual = first.local_addr()?;
        let mut group = vec![first];
        for _ in 1..threads {
            group.push(socket(actual, true)?);
        }
        Ok(group)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let first = socket(addr, false)?;
        let mut group = Vec::with_capacity(threads);
        for _ in 1..threads {
            group.push(first.try_clone()?);
        }
        group.push(first);
        Ok(group)
    }
}

fn socket(addr: SocketAddr, reuse_port: bool) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    // As tokio's own bind: a restart does not wait for TIME_WAIT sockets.
    #[cfg(unix)]
    s.set_reuse_address(true)?;
    #[cfg(target_os = "linux")]
    s.set_reuse_port(reuse_port)?;
    #[cfg(not(target_os = "linux"))]
    let _ = reuse_port;
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    s.listen(1024)?;
    Ok(s.into())
}

/// Serves `state` with one thread per listener (see [`bind`]), each with a
/// single-threaded runtime, until `signal` completes; then every thread
/// drains as [`serve`] does. Returns when all of them have finished.
pub async fn serve_threads(
    listeners: Vec<std::net::TcpListener>,
    state: Shared,
    signal: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    let stop = tokio_util::sync::CancellationToken::new();
    let mut done = Vec::with_capacity(listeners.len());
    for (i, listener) in listeners.into_iter().enumerate() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (state, stop) = (state.clone(), stop.clone());
        std::thread::Builder::new().name(format!("modelshim-serve-{i}")).spawn(move || {
            let _ = tx.send(serve_thread(listener, state, stop, grace));
        })?;
        done.push(rx);
    }
    let watch = stop.clone();
    tokio::spawn(async move {
        signal.await;
        watch.cancel();
    });
    let mut result = Ok(());
    for rx in done {
        let r = rx.await.unwrap_or_else(|_| Err(std::io::Error::other("a serving thread panicked")));
        if r.is_err() {
            // One thread failing ends the others: a half-served port is worse
            // than a clean exit the supervisor restarts.
            stop.cancel();
            result = result.and(r);
        }
    }
    tracing::info!("server stopped; bye");
    result
}

fn serve_thread(
    listener: std::net::TcpListener,
    state: Shared,
    stop: tokio_util::sync::CancellationToken,
    grace: Duration,
) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    crate::provider::upstream::use_thread_clients();
    rt.block_on(async move {
        let listener = TcpListener::from_std(listener)?;
        drain(listener, state, stop.cancelled_owned(), grace).await
    })
}
