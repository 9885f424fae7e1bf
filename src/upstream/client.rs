//! The upstream HTTP client.
//!
//! One entry point, [`Upstream::send`], for everything kache sends upstream; [`Upstream::send_upgrade`] for
//! the HTTP/1.1 protocol upgrades of exec, attach and port-forward. Against a TLS apiserver requests are
//! spread round-robin over a small pool of HTTP/2 connections, so hundreds of watches do not queue behind
//! one connection's stream limit (kube-apiserver allows 250–1000 streams per connection).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tower::ServiceExt;
use tower::util::BoxCloneSyncService;

use crate::front::body::{Body, BoxError};

/// Time allowed to establish a TCP connection upstream; past it the request fails (503 to clients) instead
/// of hanging on an unreachable apiserver.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// TCP keep-alive on upstream connections, to notice dead peers under long-lived watches.
pub(crate) const TCP_KEEPALIVE: Duration = Duration::from_secs(30);
/// Idle pooled connections are closed after this long.
pub(crate) const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// A type-erased HTTP client stack (connector, TLS, auth layers).
pub(crate) type HttpService = BoxCloneSyncService<Request<Body>, Response<Incoming>, BoxError>;

/// Failure to get a response from the upstream.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The configured address is not a usable URL.
    #[error("invalid upstream URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    /// The kubeconfig or in-cluster configuration could not be loaded or used.
    #[error("upstream configuration: {}", causes(.0))]
    Config(#[source] BoxError),
    /// No connection could be established (refused, unreachable, DNS, connect timeout, TLS handshake).
    #[error("connecting to the upstream failed: {}", causes(.0))]
    Connect(#[source] BoxError),
    /// Credentials for the upstream could not be obtained (exec plugin, token file, OIDC refresh).
    #[error("upstream credentials: {}", causes(.0))]
    Auth(#[source] BoxError),
    /// The exchange failed after connecting (reset, protocol error, request body error).
    #[error("upstream request failed: {}", causes(.0))]
    Transport(#[source] BoxError),
}

/// An error and its causes as one line a person can act on: hyper's outer errors say only which step failed
/// (`client error (Connect)`), the cause says why (`Connection refused (os error 111)`). Messages that
/// an outer message already holds, and hyper's step names, are left out.
fn causes(err: &BoxError) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err.as_ref());
    while let Some(e) = cur {
        let text = e.to_string();
        let generic = text.starts_with("client error (") || text.is_empty();
        if !generic && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cur = e.source();
    }
    if parts.is_empty() {
        return err.to_string();
    }
    parts.join(": ")
}

// === impl UpstreamError ===

impl UpstreamError {
    /// No connection to the upstream could be made: the upstream is down or unreachable.
    pub fn is_connect(&self) -> bool {
        matches!(self, Self::Connect(_))
    }

    /// Whether trying again later may succeed (as opposed to a configuration problem).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Connect(_) | Self::Transport(_) | Self::Auth(_))
    }

    /// Whether an error of type `E` is in the source chain (e.g. the request body's
    /// `http_body_util::LengthLimitError` when the front's body limit cut the upload).
    pub(crate) fn caused_by<E: std::error::Error + 'static>(&self) -> bool {
        let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(err) = cur {
            if err.is::<E>() {
                return true;
            }
            cur = err.source();
        }
        false
    }

    fn classify(err: BoxError) -> Self {
        match err.downcast_ref::<hyper_util::client::legacy::Error>() {
            Some(e) if e.is_connect() => Self::Connect(err),
            Some(_) => Self::Transport(err),
            // Only the auth layers produce errors of other types.
            None => Self::Auth(err),
        }
    }
}

/// How the upstream is authenticated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// kache sends no credentials of its own (plain URL): clients' `Authorization` passes through.
    PassThrough,
    /// kache authenticates as itself (kubeconfig, in-cluster): clients' credentials must not be forwarded.
    Own,
}

/// A client of the upstream apiserver. Cheap to clone.
#[derive(Clone)]
pub struct Upstream {
    inner: Arc<Inner>,
}

struct Inner {
    base: Uri,
    /// The whole client stack: auth layers over a [`Dispatch`].
    svc: HttpService,
    /// Number of clients requests are spread over (for Debug).
    pool_size: usize,
    credentials: Credentials,
    /// The thread forwarded lists are read on (stopped when the last clone of this client is dropped).
    forward: Option<super::fwdrt::ForwardThread>,
}

/// Marks a request for the HTTP/1.1-only upgrade client (a request extension read by [`Dispatch`]).
#[derive(Clone, Copy, Debug)]
struct UpgradeRequest;

/// The innermost service: spreads requests round-robin over `pool`, except upgrades, which go to the
/// HTTP/1.1-only `upgrade` client. One auth stack sits above it, so credentials (an exec plugin, a token
/// file) are obtained and refreshed once for all connections.
pub(crate) struct Dispatch<C> {
    pool: Arc<[Client<C, Body>]>,
    next: Arc<AtomicUsize>,
    upgrade: Client<C, Body>,
    /// HTTP/1.1 for forwarded lists, its connections on the forward thread ([`super::fwdrt`]).
    lists: Client<C, Body>,
}

impl<C: Clone> Clone for Dispatch<C> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            next: self.next.clone(),
            upgrade: self.upgrade.clone(),
            lists: self.lists.clone(),
        }
    }
}

impl<C> Dispatch<C> {
    pub(crate) fn new(pool: Vec<Client<C, Body>>, upgrade: Client<C, Body>, lists: Client<C, Body>) -> Self {
        assert!(!pool.is_empty(), "an upstream needs at least one client");
        Self { pool: pool.into(), next: Arc::new(AtomicUsize::new(0)), upgrade, lists }
    }
}

impl<C> tower::Service<Request<Body>> for Dispatch<C>
where
    C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
{
    type Response = Response<Incoming>;
    type Error = hyper_util::client::legacy::Error;
    type Future = hyper_util::client::legacy::ResponseFuture;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        // The legacy client queues internally and is always ready.
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        if short_reads_over_http1() && is_short_read(&req) {
            // A forwarded list on the forward thread's connections, any other short read on the main ones.
            return match req.extensions().get::<super::fwdrt::ForwardedList>() {
                Some(_) => self.lists.request(req),
                None => self.upgrade.request(req),
            };
        }
        if req.extensions().get::<UpgradeRequest>().is_some() {
            return self.upgrade.request(req);
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.pool.len();
        self.pool[i].request(req)
    }
}

/// Whether a request is a read that ends with its response (a get or list, not a watch): those go over
/// the HTTP/1.1 client. A Go apiserver sends a large body markedly slower over HTTP/2 (one writer per
/// connection, 16 KiB frames, flow-control round trips: a 21.5 MiB list took ~1.6× as long through kache
/// over HTTP/2 as directly over HTTP/1.1, docs/decisions/0015-forwarding-transport.md), and a short read has
/// nothing to gain from
/// multiplexing; watches, which are long-lived and many, stay on the HTTP/2 pool.
fn is_short_read(req: &Request<Body>) -> bool {
    if req.method() != http::Method::GET {
        return false;
    }
    let uri = req.uri();
    let watch_query = uri.query().is_some_and(|q| {
        q.split('&').any(|kv| {
            matches!(kv, "watch=1" | "watch=t" | "watch=T" | "watch=true" | "watch=True" | "watch=TRUE")
        })
    });
    !watch_query && !uri.path().contains("/watch/")
}

/// `KACHE_UPSTREAM_SHORT_READS=h2` keeps short reads on the HTTP/2 pool (for comparisons); the default is
/// HTTP/1.1 (see [`is_short_read`]).
fn short_reads_over_http1() -> bool {
    static H1: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *H1.get_or_init(|| std::env::var("KACHE_UPSTREAM_SHORT_READS").map_or(true, |v| v != "h2"))
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("base", &self.inner.base)
            .field("pool_size", &self.inner.pool_size)
            .field("credentials", &self.inner.credentials)
            .finish()
    }
}

// === impl Upstream ===

impl Upstream {
    /// A client for a plain `http://host:port` upstream (tests, chaining behind another kache).
    ///
    /// HTTP/1.1 with a connection pool: without TLS there is no ALPN to negotiate HTTP/2, and the pool opens
    /// a connection per concurrent request, so watches never queue behind a stream limit.
    pub fn plain(url: &str) -> Result<Self, UpstreamError> {
        let base = parse_base(url)?;
        if base.scheme_str() != Some("http") {
            return Err(UpstreamError::InvalidUrl {
                url: url.into(),
                reason: "expected http://host:port".into(),
            });
        }
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .pool_timer(TokioTimer::new())
            .build(http_connector());
        let svc = HttpService::new(
            Dispatch::new(vec![client.clone()], client.clone(), client).map_err(BoxError::from),
        );
        let forward = super::fwdrt::ForwardThread::start(base.port_u16().unwrap_or(80));
        Ok(Self::from_parts(base, svc, 1, Credentials::PassThrough, forward))
    }

    pub(crate) fn from_parts(
        base: Uri,
        svc: HttpService,
        pool_size: usize,
        credentials: Credentials,
        forward: Option<super::fwdrt::ForwardThread>,
    ) -> Self {
        Self { inner: Arc::new(Inner { base, svc, pool_size, credentials, forward }) }
    }

    /// The runtime of this client's forward thread, if it has one (see [`super::fwdrt`]).
    pub(crate) fn forward_thread(&self) -> Option<&tokio::runtime::Handle> {
        self.inner.forward.as_ref().map(super::fwdrt::ForwardThread::handle)
    }

    /// The upstream's base URL.
    pub fn base(&self) -> &Uri {
        &self.inner.base
    }

    /// How the upstream is authenticated, and so whether clients' credentials may be forwarded.
    pub fn credentials(&self) -> Credentials {
        self.inner.credentials
    }

    /// Sends a request whose URI is a path-and-query (e.g. `/api/v1/pods?watch=1`), resolved against the base.
    pub async fn send(&self, req: Request<Body>) -> Result<Response<Incoming>, UpstreamError> {
        self.dispatch(req).await
    }

    /// Sends a protocol-upgrade request (exec, attach, port-forward) over HTTP/1.1. On `101 Switching
    /// Protocols`, `hyper::upgrade::on(response)` yields the upstream side of the tunnel.
    pub async fn send_upgrade(&self, mut req: Request<Body>) -> Result<Response<Incoming>, UpstreamError> {
        req.extensions_mut().insert(UpgradeRequest);
        self.dispatch(req).await
    }

    async fn dispatch(&self, mut req: Request<Body>) -> Result<Response<Incoming>, UpstreamError> {
        *req.uri_mut() = self.resolve(req.uri())?;
        // Boxed with an explicit type: it pins the service's request type, which otherwise trips the
        // compiler's higher-ranked lifetime inference when callers box this future as `Send`.
        let fut: Pin<Box<dyn Future<Output = Result<Response<Incoming>, BoxError>> + Send>> =
            Box::pin(self.inner.svc.clone().oneshot(req));
        fut.await.map_err(UpstreamError::classify)
    }

    /// `base` joined with the request's path and query (the base may carry a path prefix, e.g. behind a
    /// proxy such as Rancher's `/k8s/clusters/{id}`).
    fn resolve(&self, uri: &Uri) -> Result<Uri, UpstreamError> {
        let base = &self.inner.base;
        let prefix = base.path().trim_end_matches('/');
        let pq = uri.path_and_query().map_or("/", |p| p.as_str());
        Uri::builder()
            .scheme(base.scheme_str().unwrap_or("http"))
            .authority(base.authority().expect("checked at construction").as_str())
            .path_and_query(format!("{prefix}{pq}"))
            .build()
            .map_err(|e| UpstreamError::Transport(Box::new(e)))
    }
}

/// Parses and checks an upstream base URL (scheme and authority required).
pub(crate) fn parse_base(url: &str) -> Result<Uri, UpstreamError> {
    let base: Uri = url.trim_end_matches('/').parse().map_err(|e: http::uri::InvalidUri| {
        UpstreamError::InvalidUrl { url: url.into(), reason: e.to_string() }
    })?;
    if !matches!(base.scheme_str(), Some("http" | "https")) || base.authority().is_none() {
        return Err(UpstreamError::InvalidUrl {
            url: url.into(),
            reason: "expected http(s)://host:port".into(),
        });
    }
    Ok(base)
}

/// The TCP connector every client stack uses.
pub(crate) fn http_connector() -> HttpConnector {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    http.set_keepalive(Some(TCP_KEEPALIVE));
    http
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gets_and_lists_are_short_reads_watches_and_writes_are_not() {
        let req = |m: http::Method, uri: &str| {
            Request::builder().method(m).uri(uri).body(crate::front::body::empty()).unwrap()
        };
        assert!(is_short_read(&req(http::Method::GET, "/api/v1/pods?limit=500")));
        assert!(is_short_read(&req(http::Method::GET, "/api/v1/namespaces/a/pods/b")));
        assert!(is_short_read(&req(http::Method::GET, "/api/v1/pods?watchers=1")));
        assert!(!is_short_read(&req(http::Method::GET, "/api/v1/pods?watch=1&resourceVersion=5")));
        assert!(!is_short_read(&req(http::Method::GET, "/api/v1/pods?resourceVersion=5&watch=true")));
        assert!(!is_short_read(&req(http::Method::GET, "/api/v1/watch/pods")));
        assert!(!is_short_read(&req(http::Method::POST, "/api/v1/namespaces/a/pods")));
    }

    #[test]
    fn plain_urls() {
        assert!(Upstream::plain("http://127.0.0.1:8080").is_ok());
        assert!(Upstream::plain("http://127.0.0.1:8080/").is_ok());
        assert!(matches!(Upstream::plain("https://x:1"), Err(UpstreamError::InvalidUrl { .. })));
        assert!(matches!(Upstream::plain("127.0.0.1:8080"), Err(UpstreamError::InvalidUrl { .. })));
        assert!(matches!(Upstream::plain("not a url"), Err(UpstreamError::InvalidUrl { .. })));
    }

    #[test]
    fn resolves_against_a_base_with_a_path_prefix() {
        let up = Upstream::plain("http://h:1/k8s/clusters/c1/").expect("valid");
        let uri: Uri = "/api/v1/pods?watch=1".parse().expect("valid");
        assert_eq!(
            up.resolve(&uri).expect("resolves").to_string(),
            "http://h:1/k8s/clusters/c1/api/v1/pods?watch=1"
        );
        let up = Upstream::plain("http://h:1").expect("valid");
        assert_eq!(up.resolve(&uri).expect("resolves").to_string(), "http://h:1/api/v1/pods?watch=1");
    }

    #[tokio::test]
    async fn unreachable_upstream_is_a_connect_error() {
        // Bind then drop a listener to get a port nobody listens on.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").port()
        };
        let up = Upstream::plain(&format!("http://127.0.0.1:{port}")).expect("valid");
        let err = up.send(Request::new(crate::front::body::empty())).await.expect_err("nothing listens");
        assert!(err.is_connect(), "{err:?}");
        assert!(err.is_retryable());
    }
}
