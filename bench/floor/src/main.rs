//! The hyper floor (see Cargo.toml): every request is sent on, path and
//! headers as they came, to one upstream over pooled keep-alive connections,
//! and the answer streams back unbuffered, as nginx `proxy_pass` with
//! `proxy_buffering off` does. No routing, parsing, logging or metrics: what
//! is left is the HTTP stack's own cost.
//!
//! Usage: modelshim-bench-floor LISTEN_ADDR UPSTREAM_ADDR [THREADS]

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

type Body = BoxBody<Bytes, hyper::Error>;

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: modelshim-bench-floor LISTEN_ADDR UPSTREAM_ADDR [THREADS]");
        std::process::exit(2);
    }
    let listen: SocketAddr = args[1].parse().map_err(std::io::Error::other)?;
    let upstream: SocketAddr = args[2].parse().map_err(std::io::Error::other)?;
    let threads = match args.get(3) {
        Some(n) => n.parse().map_err(std::io::Error::other)?,
        None => std::thread::available_parallelism().map_or(1, usize::from),
    };
    let listeners = (0..threads).map(|_| bind(listen)).collect::<std::io::Result<Vec<_>>>()?;
    let handles: Vec<_> = listeners
        .into_iter()
        .map(|l| std::thread::spawn(move || serve(l, upstream)))
        .collect();
    for h in handles {
        h.join().map_err(|_| std::io::Error::other("a serving thread panicked"))??;
    }
    Ok(())
}

/// One of a group of listeners on one port (SO_REUSEPORT), as modelshim binds.
fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    s.listen(4096)?;
    Ok(s.into())
}

fn serve(listener: std::net::TcpListener, upstream: SocketAddr) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client: Client<HttpConnector, Incoming> = Client::builder(TokioExecutor::new()).build(connector);
        let base = format!("http://{upstream}");
        loop {
            let Ok((tcp, _)) = listener.accept().await else { continue };
            let _ = tcp.set_nodelay(true);
            let (client, base) = (client.clone(), base.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| forward(client.clone(), base.clone(), req));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    })
}

async fn forward(
    client: Client<HttpConnector, Incoming>,
    base: String,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    if req.uri().path() == "/healthz" {
        return Ok(reply(StatusCode::OK, "ok"));
    }
    let (mut parts, body) = req.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    parts.uri = match format!("{base}{path}").parse() {
        Ok(u) => u,
        Err(_) => return Ok(reply(StatusCode::BAD_REQUEST, "bad path")),
    };
    // The client sets Host from the URI, as nginx's proxy_pass does.
    parts.headers.remove(hyper::header::HOST);
    match client.request(Request::from_parts(parts, body)).await {
        Ok(resp) => Ok(resp.map(BodyExt::boxed)),
        Err(_) => Ok(reply(StatusCode::BAD_GATEWAY, "upstream failed")),
    }
}

fn reply(status: StatusCode, text: &'static str) -> Response<Body> {
    let body = Full::new(Bytes::from_static(text.as_bytes())).map_err(|never: Infallible| match never {}).boxed();
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r
}
