//! The physical limit: an in-process HTTP server that answers each prepared request with a body held in
//! memory (the exact bytes kache sent for it), so kache's figures can be set against pure transport cost.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A prepared answer: the body and whether it is gzip-encoded (as the system it was copied from sent it).
#[derive(Clone)]
struct Prepared {
    body: Bytes,
    gzip: bool,
}

/// Answers by request key (see [`key`]).
type Bodies = Arc<RwLock<HashMap<String, Prepared>>>;

/// A running static server.
pub struct StaticServer {
    pub url: String,
    bodies: Bodies,
    accept: JoinHandle<()>,
}

/// The lookup key: gzip or not, the Accept header (a protobuf and a JSON list of the same URL are different
/// bodies), then the path and query exactly as requested.
fn key(gzip: bool, accept: Option<&str>, path_and_query: &str) -> String {
    format!("{}|{}|{path_and_query}", if gzip { "gz" } else { "id" }, accept.unwrap_or(""))
}

// === impl StaticServer ===

impl StaticServer {
    pub async fn start() -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let bodies: Bodies = Arc::default();
        let shared = bodies.clone();
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                let bodies = shared.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| answer(bodies.clone(), req));
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Ok(Self { url, bodies, accept })
    }

    /// Prepares the answer to `path_and_query` requested with or without `Accept-Encoding: gzip` and with
    /// `accept` as its Accept header; `encoded` says whether `body` is gzip (sent with `Content-Encoding: gzip`).
    pub fn insert(
        &self,
        accept_gzip: bool,
        accept: Option<&str>,
        path_and_query: &str,
        body: Bytes,
        encoded: bool,
    ) {
        let p = Prepared { body, gzip: encoded };
        self.bodies
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key(accept_gzip, accept, path_and_query), p);
    }

    /// Forgets every prepared body (between suites, so memory stays bounded).
    pub fn clear(&self) {
        self.bodies.write().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

impl Drop for StaticServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn answer(bodies: Bodies, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let gzip = req
        .headers()
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("gzip"));
    let pq = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let accept = req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let found = bodies.read().unwrap_or_else(|p| p.into_inner()).get(&key(gzip, accept, pq)).cloned();
    let (mut resp, encoded) = match found {
        Some(p) => (Response::new(Full::new(p.body)), p.gzip),
        None => {
            let mut r = Response::new(Full::new(Bytes::from_static(b"not prepared\n")));
            *r.status_mut() = StatusCode::NOT_FOUND;
            return Ok(r);
        }
    };
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if encoded {
        resp.headers_mut().insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::{client, get};

    #[tokio::test]
    async fn answers_prepared_bodies_by_encoding() {
        let s = StaticServer::start().await.expect("bind");
        s.insert(false, None, "/api/v1/pods?limit=1", Bytes::from_static(b"{\"items\":[]}"), false);
        let c = client(2);
        let got = get(&c, &format!("{}/api/v1/pods?limit=1", s.url), None, false).await.expect("prepared");
        assert_eq!(got.bytes, 12);
        assert_eq!(&got.head[..], b"{\"items\":[]}");
        assert!(get(&c, &format!("{}/api/v1/pods?limit=1", s.url), None, true).await.is_err());
        // Small answers to gzip-accepting requests stay uncompressed, as kache sends them.
        // The same URL with another Accept header is another body.
        let pb = "application/vnd.kubernetes.protobuf";
        s.insert(false, Some(pb), "/api/v1/pods?limit=1", Bytes::from_static(b"k8s\0pb"), false);
        let got =
            get(&c, &format!("{}/api/v1/pods?limit=1", s.url), Some(pb), false).await.expect("prepared");
        assert_eq!(&got.head[..], b"k8s\0pb");
        s.insert(
            true,
            None,
            "/small",
            Bytes::from_static(b"{\"metadata\":{\"continue\":\"t\"},\"items\":[]}"),
            false,
        );
        let got = get(&c, &format!("{}/small", s.url), None, true).await.expect("prepared");
        assert!(!got.gzipped);
        assert_eq!(crate::http::continue_token(&got.head).as_deref(), Some("t"));
        s.clear();
        assert!(get(&c, &format!("{}/api/v1/pods?limit=1", s.url), None, false).await.is_err());
    }
}
