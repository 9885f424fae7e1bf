//! A counting reverse proxy between kache and the sim: the informer storm reads from it how many
//! requests (lists, watches, others) kache sent upstream.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use bytes::Bytes;
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt as _, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// Requests seen, by kind.
#[derive(Debug, Default)]
pub struct Counts {
    pub lists: AtomicU64,
    pub watches: AtomicU64,
    pub other: AtomicU64,
}

/// A copy of [`Counts`].
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct CountsSnapshot {
    pub lists: u64,
    pub watches: u64,
    pub other: u64,
}

impl Counts {
    pub fn snapshot(&self) -> CountsSnapshot {
        CountsSnapshot {
            lists: self.lists.load(Relaxed),
            watches: self.watches.load(Relaxed),
            other: self.other.load(Relaxed),
        }
    }

    pub fn reset(&self) {
        self.lists.store(0, Relaxed);
        self.watches.store(0, Relaxed);
        self.other.store(0, Relaxed);
    }
}

/// How a request is counted: GET with `watch=` (or a /watch/ path) is a watch, other GETs are lists or
/// gets (discovery included), everything else "other".
fn classify(method: &http::Method, uri: &Uri) -> Kind {
    if method != http::Method::GET {
        return Kind::Other;
    }
    let q = uri.query().unwrap_or("");
    let watch = uri.path().contains("/watch/")
        || q.split('&').any(|p| p == "watch=true" || p == "watch=1" || p == "watch");
    if watch { Kind::Watch } else { Kind::List }
}

#[derive(Debug, PartialEq, Eq)]
enum Kind {
    List,
    Watch,
    Other,
}

/// A running proxy.
pub struct CountingProxy {
    pub url: String,
    pub counts: Arc<Counts>,
    accept: JoinHandle<()>,
}

impl CountingProxy {
    pub async fn start(upstream: &str) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let counts: Arc<Counts> = Arc::default();
        let client: HyperClient<HttpConnector, Incoming> =
            HyperClient::builder(TokioExecutor::new()).build(HttpConnector::new());
        let upstream: Arc<str> = upstream.trim_end_matches('/').into();
        let shared = counts.clone();
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (client, upstream, counts) = (client.clone(), upstream.clone(), shared.clone());
                tokio::spawn(async move {
                    let svc =
                        service_fn(move |req| forward(client.clone(), upstream.clone(), counts.clone(), req));
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Ok(Self { url, counts, accept })
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn forward(
    client: HyperClient<HttpConnector, Incoming>,
    upstream: Arc<str>,
    counts: Arc<Counts>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    match classify(req.method(), req.uri()) {
        Kind::List => counts.lists.fetch_add(1, Relaxed),
        Kind::Watch => counts.watches.fetch_add(1, Relaxed),
        Kind::Other => counts.other.fetch_add(1, Relaxed),
    };
    let (mut parts, body) = req.into_parts();
    let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let Ok(uri) = format!("{upstream}{pq}").parse::<Uri>() else {
        return Ok(bad_gateway());
    };
    parts.uri = uri;
    parts.version = http::Version::HTTP_11;
    parts.headers.remove(http::header::HOST);
    match client.request(Request::from_parts(parts, body)).await {
        Ok(resp) => Ok(resp.map(|b| b.boxed())),
        Err(_) => Ok(bad_gateway()),
    }
}

fn bad_gateway() -> Response<ProxyBody> {
    let mut r =
        Response::new(Full::new(Bytes::from_static(b"bad gateway\n")).map_err(|n| match n {}).boxed());
    *r.status_mut() = StatusCode::BAD_GATEWAY;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_requests() {
        let get = http::Method::GET;
        let u = |s: &str| s.parse::<Uri>().expect("uri");
        assert_eq!(classify(&get, &u("/api/v1/pods?watch=true&resourceVersion=1")), Kind::Watch);
        assert_eq!(classify(&get, &u("/api/v1/watch/pods")), Kind::Watch);
        assert_eq!(classify(&get, &u("/api/v1/pods?limit=500")), Kind::List);
        assert_eq!(classify(&http::Method::POST, &u("/api/v1/namespaces/a/pods")), Kind::Other);
    }
}
