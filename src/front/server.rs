//! The HTTP front: listeners, connections, limits and graceful shutdown.
//!
//! One task per connection. Plain TCP speaks HTTP/1.1 and HTTP/2 with prior knowledge (h2c), detected from
//! the first bytes; TLS offers ALPN `h2` and `http/1.1`. HTTP/1.1 upgrades (exec, attach, port-forward) are
//! kept working by `serve_connection_with_upgrades`.
//!
//! Shutdown, in order: stop accepting; end long-running responses (watches end cleanly between frames, the
//! client re-watches elsewhere) and ask every connection to finish its in-flight requests and close; after
//! [`Limits::shutdown_timeout`], close whatever is left.

mod conn;
mod framing;
pub(crate) mod limits;
mod parse_error;
mod request;
mod tls;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::front::body::Body;
use crate::metrics::Metrics;

pub use limits::{LimitFlags, Limits, parse_duration};
pub(crate) use request::{body_too_large, is_upgrade};
pub(crate) use tls::load_pair;
pub use tls::{TlsConfig, TlsError, TlsFlags};

/// Pause after a failed `accept` (e.g. EMFILE) so a persistent error does not spin the accept loop.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// A boxed future, as [`Handler::handle`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What answers requests: `app` plugs the pipeline (memory, else forwarding) in here.
///
/// The request carries, in its extensions, the [`ConnInfo`] of its connection and its parsed
/// [`Route`](super::route::Route). Its body is already bounded by [`Limits::max_body_bytes`]: reading past
/// the bound yields a `http_body_util::LengthLimitError`.
pub trait Handler: Send + Sync + 'static {
    fn handle(&self, req: Request<Body>) -> BoxFuture<'_, Response<Body>>;
}

/// Facts about the client connection a request came on (a request extension).
#[derive(Clone, Debug)]
pub struct ConnInfo {
    pub peer: SocketAddr,
    /// Whether the connection is TLS.
    pub tls: bool,
    /// The request body bound ([`Limits::max_body_bytes`]), for the 413 message of whoever reads the body.
    pub max_body_bytes: u64,
    pub shutdown: ShutdownSignal,
    /// The DER of the client certificate the TLS handshake verified against `--client-ca` (k-sec), if any.
    pub client_cert: Option<Arc<[u8]>>,
}

/// The server's shutdown, as seen by handlers and by tasks that outlive their request (upgraded tunnels).
#[derive(Clone, Debug, Default)]
pub struct ShutdownSignal {
    /// Fired when shutdown starts: long-running streams should end now.
    pub drain: CancellationToken,
    /// Fired when the drain time is up: everything still open is closed.
    pub kill: CancellationToken,
}

/// Serves `listener` until `shutdown` completes, then drains (see the module doc). Returns once every
/// connection is closed or the shutdown timeout has passed.
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsConfig>,
    handler: Arc<dyn Handler>,
    limits: Limits,
    metrics: Metrics,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let signal = ShutdownSignal::default();
    let limits = Arc::new(limits);
    let builder = Arc::new(conn::builder(&limits));
    let connections = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    // Every connection task holds a clone of `alive`; `recv()` returns `None` once all have ended.
    let (alive, mut all_closed) = mpsc::channel::<()>(1);
    tokio::pin!(shutdown);

    loop {
        let permit = match connections.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                // At the bound: stop accepting (the kernel backlog holds new clients) until one closes.
                metrics.limit_rejected(crate::metrics::Limit::Connections);
                tokio::select! {
                    () = &mut shutdown => break,
                    permit = connections.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
                }
            }
        };
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                    continue;
                }
            },
        };
        let ctx = conn::ConnCtx {
            info: ConnInfo {
                peer,
                tls: tls.is_some(),
                max_body_bytes: limits.max_body_bytes,
                shutdown: signal.clone(),
                client_cert: None,
            },
            handler: handler.clone(),
            limits: limits.clone(),
            metrics: metrics.clone(),
        };
        let (builder, tls, alive) = (builder.clone(), tls.clone(), alive.clone());
        tokio::spawn(async move {
            conn::serve_connection(stream, tls, builder, ctx).await;
            drop((permit, alive));
        });
    }

    drop(listener);
    tracing::info!("shutting down: draining connections");
    signal.drain.cancel();
    drop(alive);
    if tokio::time::timeout(limits.shutdown_timeout, all_closed.recv()).await.is_err() {
        tracing::warn!(timeout = ?limits.shutdown_timeout, "shutdown timeout: closing remaining connections");
        signal.kill.cancel();
        all_closed.recv().await;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
