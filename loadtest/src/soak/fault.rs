//! The soak's upstream faults: a reverse proxy in front of the sim.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use bytes::Bytes;
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt as _, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// A reverse proxy in front of the sim that can cut every open connection at once (what kache sees when
/// an apiserver restarts or a load balancer drops it) and answer 503 to everything for a while (an
/// apiserver shedding load).
pub(super) struct FaultProxy {
    pub(super) url: String,
    kill: watch::Sender<u64>,
    refusing: Arc<AtomicBool>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    pub(super) async fn start(upstream: &str) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let client: HyperClient<HttpConnector, Incoming> =
            HyperClient::builder(TokioExecutor::new()).build(HttpConnector::new());
        let upstream: Arc<str> = upstream.trim_end_matches('/').into();
        let refusing = Arc::new(AtomicBool::new(false));
        let (kill, kill_rx) = watch::channel(0u64);
        let shared = refusing.clone();
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (client, upstream, refusing) = (client.clone(), upstream.clone(), shared.clone());
                let mut kill = kill_rx.clone();
                kill.mark_unchanged();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| {
                        proxy(client.clone(), upstream.clone(), refusing.load(Relaxed), req)
                    });
                    let builder = auto::Builder::new(TokioExecutor::new());
                    let conn = builder.serve_connection(TokioIo::new(stream), svc);
                    // Dropping the connection closes the socket mid-stream, as a crashed upstream would.
                    tokio::select! {
                        _ = conn => {}
                        _ = kill.changed() => {}
                    }
                });
            }
        });
        Ok(Self { url, kill, refusing, accept })
    }

    /// Closes every open connection (streams end mid-flight).
    pub(super) fn cut(&self) {
        self.kill.send_modify(|g| *g += 1);
    }

    /// While on, every request gets a 503 and open connections are cut (so watches re-open into it).
    pub(super) fn refuse(&self, on: bool) {
        self.refusing.store(on, Relaxed);
        if on {
            self.cut();
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// The apiserver's Status for an unavailable server.
const UNAVAILABLE: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server is currently unable to handle the request","reason":"ServiceUnavailable","details":{"retryAfterSeconds":1},"code":503}"#;

async fn proxy(
    client: HyperClient<HttpConnector, Incoming>,
    upstream: Arc<str>,
    refusing: bool,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    if refusing {
        return Ok(status(StatusCode::SERVICE_UNAVAILABLE, UNAVAILABLE));
    }
    let (mut parts, body) = req.into_parts();
    let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let Ok(uri) = format!("{upstream}{pq}").parse::<Uri>() else {
        return Ok(status(StatusCode::BAD_GATEWAY, "bad gateway"));
    };
    parts.uri = uri;
    parts.version = http::Version::HTTP_11;
    parts.headers.remove(http::header::HOST);
    match client.request(Request::from_parts(parts, body)).await {
        Ok(resp) => Ok(resp.map(|b| b.boxed())),
        Err(_) => Ok(status(StatusCode::BAD_GATEWAY, "bad gateway")),
    }
}

fn status(code: StatusCode, body: &'static str) -> Response<ProxyBody> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())).map_err(|n| match n {}).boxed());
    *r.status_mut() = code;
    r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    if code == StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut().insert(http::header::RETRY_AFTER, http::HeaderValue::from_static("1"));
    }
    r
}
