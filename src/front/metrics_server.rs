//! The metrics listener (`--metrics-listen`, default [`DEFAULT_METRICS_LISTEN`]): `/metrics`, `/healthz`,
//! `/livez`, `/readyz` (and `/<endpoint>/<check>`). A tiny hyper server, separate from the API listener so
//! scrapes and probes never queue behind client traffic and need no credentials. It renders one kache's
//! [`Metrics`] after refreshing them from its [`StatsSource`]; the checks are `metrics::health`'s.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::codec::gzip;
use crate::front::body::{self, Body};
use crate::front::negotiate::accepts_gzip;
pub use crate::metrics::DEFAULT_METRICS_LISTEN;
use crate::metrics::health::{self, CheckResult, HealthResponse};
use crate::metrics::{Limit, Metrics, StatsSource, liveness, readiness, refresh};
/// Concurrent connections to the metrics listener (Prometheus, kubelet probes, a human with curl).
const MAX_CONNECTIONS: usize = 64;
/// A client must send its request headers within this time.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long open connections may finish their request after shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// The Prometheus text exposition format's content type.
const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
const TEXT_CONTENT_TYPE: &str = "text/plain; charset=utf-8";

/// What the handlers share.
struct Shared {
    metrics: Metrics,
    source: Arc<dyn StatsSource>,
}

/// Serves the metrics and health endpoints on `listener` until `shutdown` is cancelled.
pub(crate) async fn serve_metrics(
    listener: TcpListener,
    metrics: Metrics,
    source: Arc<dyn StatsSource>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let shared = Arc::new(Shared { metrics, source });
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT);
    loop {
        let (stream, _peer) = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(error) => {
                    // Per-connection errors (EMFILE, aborted handshakes) must not end the listener.
                    tracing::debug!(%error, "metrics listener accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            shared.metrics.limit_rejected(Limit::Connections);
            drop(stream);
            continue;
        };
        let shared = shared.clone();
        let service = service_fn(move |req| {
            let shared = shared.clone();
            async move { Ok::<_, Infallible>(route(&shared, req)) }
        });
        let conn = builder.serve_connection(TokioIo::new(stream), service).into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(error) = conn.await {
                tracing::debug!(%error, "metrics connection ended with an error");
            }
            drop(permit);
        });
    }
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await.is_err() {
        tracing::debug!("metrics connections did not finish within the shutdown grace period");
    }
    Ok(())
}

/// Routes one request.
fn route(shared: &Shared, req: Request<Incoming>) -> Response<Body> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed\n".to_owned());
    }
    let path = req.uri().path();
    let query = req.uri().query();
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let (endpoint, check) = (parts.next().unwrap_or(""), parts.next());
    match (endpoint, check) {
        ("metrics", None) => {
            refresh(&shared.metrics, &*shared.source);
            let accept =
                req.headers().get(header::ACCEPT_ENCODING).and_then(|v| v.to_str().ok()).unwrap_or("");
            exposition(shared.metrics.render(), accept)
        }
        ("healthz" | "livez", check) => health_response(endpoint, &liveness(), check, query),
        ("readyz", check) => health_response(endpoint, &readiness(&*shared.source), check, query),
        _ => text(StatusCode::NOT_FOUND, "404 page not found\n".to_owned()),
    }
}

/// The exposition response, gzipped like the apiserver's responses (level 1, above 128 KiB) when the
/// scraper accepts it: a cluster with many resources renders hundreds of kilobytes per scrape.
fn exposition(text: String, accept_encoding: &str) -> Response<Body> {
    let gzip = accepts_gzip(accept_encoding) && gzip::should_compress(text.len());
    let body = if gzip { gzip::compress(&[Bytes::from(text)]) } else { Bytes::from(text) };
    let mut resp = Response::new(body::full(body));
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, header::HeaderValue::from_static(METRICS_CONTENT_TYPE));
    if gzip {
        headers.insert(header::CONTENT_ENCODING, header::HeaderValue::from_static("gzip"));
    }
    resp
}

fn health_response(
    endpoint: &str,
    checks: &[CheckResult],
    check: Option<&str>,
    query: Option<&str>,
) -> Response<Body> {
    let answer = match check {
        None | Some("") => health::root(endpoint, checks, query),
        Some(name) => match health::single(checks, name) {
            Some(answer) => answer,
            None => HealthResponse { status: 404, body: "404 page not found\n".to_owned() },
        },
    };
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    text(status, answer.body)
}

/// A plain-text answer with the headers Go's `http.Error` and the healthz handler set.
fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut resp = Response::new(body::full(body));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, header::HeaderValue::from_static(TEXT_CONTENT_TYPE));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, header::HeaderValue::from_static("nosniff"));
    resp
}

#[cfg(test)]
mod tests;
