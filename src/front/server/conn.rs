//! One client connection: TLS handshake, protocol detection, idle and shutdown handling.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::Instant;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::parse_error::{EmptyErrors, GoErrors, MAX_HEADER_FIELDS};
use super::{ConnInfo, Handler, Limits, TlsConfig, request};
use crate::metrics::Metrics;

/// Room hyper's own HTTP/1.1 read buffer leaves above our header and URL limits, so requests slightly over
/// them reach our check (and get a Status) instead of hyper's bare 431.
const H1_BUFFER_SLACK: usize = 64 << 10;
/// hyper's header count bound for HTTP/1.1: above kache's own ([`MAX_HEADER_FIELDS`], the apiserver's), so
/// that a request just over it gets kache's answer; further over, hyper's answer is rewritten to the same.
const H1_MAX_HEADERS: usize = 512;
const _: () = assert!(H1_MAX_HEADERS > MAX_HEADER_FIELDS);
/// HTTP/2 keep-alive pings keep idle watch streams alive through middleboxes and detect dead peers.
const H2_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
const H2_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// Smallest interval at which idleness is checked.
const MIN_IDLE_CHECK: Duration = Duration::from_millis(50);

/// Everything a connection task needs.
pub(super) struct ConnCtx {
    pub info: ConnInfo,
    pub handler: Arc<dyn Handler>,
    pub limits: Arc<Limits>,
    pub metrics: Metrics,
}

/// The protocol builder shared by all connections.
pub(super) fn builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    let head_bound =
        limits.max_header_bytes.saturating_add(limits.max_url_bytes).saturating_add(H1_BUFFER_SLACK);
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(head_bound.max(8192))
        .max_headers(H1_MAX_HEADERS);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.h2_max_streams)
        .max_header_list_size(u32::try_from(head_bound).unwrap_or(u32::MAX))
        .keep_alive_interval(H2_KEEPALIVE_INTERVAL)
        .keep_alive_timeout(H2_KEEPALIVE_TIMEOUT)
        .adaptive_window(true);
    builder
}

/// Serves one accepted connection to completion.
pub(super) async fn serve_connection(
    stream: TcpStream,
    tls: Option<TlsConfig>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    mut ctx: ConnCtx,
) {
    let _ = stream.set_nodelay(true);
    match tls {
        None => drive(stream, &builder, ctx).await,
        Some(tls) => {
            let handshake = tls.acceptor().accept(stream);
            let shutdown = ctx.info.shutdown.drain.clone();
            let tls_stream = tokio::select! {
                res = tokio::time::timeout(ctx.limits.header_read_timeout, handshake) => match res {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        tracing::debug!(peer = %ctx.info.peer, error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(peer = %ctx.info.peer, "TLS handshake timed out");
                        return;
                    }
                },
                () = shutdown.cancelled() => return,
            };
            // The verified client certificate, for authentication (k-sec).
            ctx.info.client_cert = tls_stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| Arc::from(c.as_ref()));
            drive(tls_stream, &builder, ctx).await
        }
    }
}

/// Runs the HTTP connection, closing it gracefully when idle or on shutdown.
async fn drive<I>(io: I, builder: &auto::Builder<TokioExecutor>, ctx: ConnCtx)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let empty_errors = EmptyErrors::default();
    let io = TokioIo::new(GoErrors::new(io, empty_errors.clone(), ctx.limits.max_url_bytes));
    let activity = Arc::new(Activity::new());
    let idle_timeout = ctx.limits.idle_timeout;
    let signal = ctx.info.shutdown.clone();
    let peer = ctx.info.peer;
    let ctx = Arc::new(request::RequestCtx {
        info: ctx.info,
        handler: ctx.handler,
        limits: ctx.limits,
        metrics: ctx.metrics,
        activity: activity.clone(),
        empty_errors,
    });
    let service = service_fn(move |req: hyper::Request<Incoming>| request::handle(req, ctx.clone()));
    let conn = builder.serve_connection_with_upgrades(io, service);
    tokio::pin!(conn);

    let mut idle_check = tokio::time::interval((idle_timeout / 4).max(MIN_IDLE_CHECK));
    idle_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut closing = false;
    loop {
        tokio::select! {
            res = conn.as_mut() => {
                if let Err(e) = res {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                return;
            }
            () = signal.drain.cancelled(), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = idle_check.tick(), if !closing => {
                if activity.idle_for() >= idle_timeout {
                    tracing::debug!(%peer, "closing idle connection");
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
            () = signal.kill.cancelled() => return,
        }
    }
}

/// Requests in flight on a connection and when the last one ended, for the idle timeout.
pub(super) struct Activity {
    start: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds since `start` at which the connection last went from busy to idle.
    idle_since_ms: AtomicU64,
}

// === impl Activity ===

impl Activity {
    fn new() -> Self {
        Self { start: Instant::now(), in_flight: AtomicUsize::new(0), idle_since_ms: AtomicU64::new(0) }
    }

    /// Marks a request as started; the guard marks it finished when its response body is done or dropped.
    pub(super) fn begin(self: &Arc<Self>) -> ActiveGuard {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        ActiveGuard(self.clone())
    }

    /// How long the connection has had no request in flight (zero while one is).
    fn idle_for(&self) -> Duration {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return Duration::ZERO;
        }
        let since = Duration::from_millis(self.idle_since_ms.load(Ordering::Acquire));
        self.start.elapsed().saturating_sub(since)
    }
}

/// A request in flight; see [`Activity::begin`].
pub(super) struct ActiveGuard(Arc<Activity>);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        let now = u64::try_from(self.0.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.0.idle_since_ms.store(now, Ordering::Release);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}
