//! Serving with a graceful shutdown: when the signal comes, `/readyz` turns
//! 503, the listener stops accepting, and in-flight requests and streams
//! run to their end for up to the grace period. Streams still open then are
//! ended with an in-band error event (see [`super::edge`]), and the server
//! returns shortly after whatever is left.

use std::future::Future;
use std::time::Duration;

use tokio::net::TcpListener;

use super::{Shared, app};

/// After the grace period, how long cut streams get to flush their last
/// event before the connections are dropped.
const FLUSH: Duration = Duration::from_secs(2);

/// Accepted sockets with Nagle off: SSE writes are small, and with Nagle on
/// they wait on the client's delayed ACK (about 40 ms per stall on Linux).
pub fn nodelay(
    listener: TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr> {
    use axum::serve::ListenerExt;
    listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY: {e}");
        }
    })
}

/// Serves `state` on `listener` until `signal` completes, then drains.
pub async fn serve(
    listener: TcpListener,
    state: Shared,
    signal: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let st = state.clone();
    let server = axum::serve(nodelay(listener), app(state.clone())).with_graceful_shutdown(async move {
        signal.await;
        st.set_ready(false);
        tracing::info!(
            in_flight = st.edge.tracker.len(),
            grace_secs = grace.as_secs_f64(),
            "shutting down: no new connections, finishing in-flight requests"
        );
        let _ = tx.send(());
    });
    let mut server = std::pin::pin!(server.into_future());
    tokio::select! {
        r = &mut server => return r,
        _ = rx => {}
    }
    state.edge.tracker.close();
    if let Ok(r) = tokio::time::timeout(grace, &mut server).await {
        tracing::info!("all requests finished; bye");
        return r;
    }
    tracing::warn!(open = state.edge.tracker.len(), "grace period over: ending open streams");
    state.edge.cut.cancel();
    match tokio::time::timeout(FLUSH, &mut server).await {
        Ok(r) => r,
        Err(_) => {
            tracing::warn!(open = state.edge.tracker.len(), "closing remaining connections");
            Ok(())
        }
    }
}
