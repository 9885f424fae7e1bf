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

/// Bodies by request key (see [`key`]).
type Bodies = Arc<RwLock<HashMap<String, Bytes>>>;

/// A running static server.
pub struct StaticServer {
    pub url: String,
    bodies: Bodies,
    accept: JoinHandle<()>,
}

/// The lookup key: gzip or not, then the path and query exactly as requested.
fn key(gzip: bool, path_and_query: &str) -> String {
    format!("{}|{path_and_query}", if gzip { "gz" } else { "id" })
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

    /// Prepares the answer to `path_and_query` (with or without gzip).
    pub fn insert(&self, gzip: bool, path_and_query: &str, body: Bytes) {
        self.bodies.write().unwrap_or_else(|p| p.into_inner()).insert(key(gzip, path_and_query), body);
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
    let found = bodies.read().unwrap_or_else(|p| p.into_inner()).get(&key(gzip, pq)).cloned();
    let mut resp = match found {
        Some(body) => Response::new(Full::new(body)),
        None => {
            let mut r = Response::new(Full::new(Bytes::from_static(b"not prepared\n")));
            *r.status_mut() = StatusCode::NOT_FOUND;
            return Ok(r);
        }
    };
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if gzip {
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
        s.insert(false, "/api/v1/pods?limit=1", Bytes::from_static(b"{\"items\":[]}"));
        let c = client(2);
        let got = get(&c, &format!("{}/api/v1/pods?limit=1", s.url), None, false).await.expect("prepared");
        assert_eq!(got.bytes, 12);
        assert_eq!(&got.head[..], b"{\"items\":[]}");
        assert!(get(&c, &format!("{}/api/v1/pods?limit=1", s.url), None, true).await.is_err());
        s.clear();
        assert!(get(&c, &format!("{}/api/v1/pods?limit=1", s.url), None, false).await.is_err());
    }
}
