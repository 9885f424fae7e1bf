//! The upstream HTTP client.

use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::body::{Body, BoxError};

/// Failure to get a response from the upstream.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The configured address is not a usable URL.
    #[error("invalid upstream URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    /// Connecting or exchanging with the upstream failed.
    #[error("upstream request failed: {0}")]
    Transport(#[source] BoxError),
}

/// A client of the upstream apiserver. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Upstream {
    base: Uri,
    client: Client<HttpConnector, Body>,
}

impl Upstream {
    /// A client for a plain `http://host:port` upstream (tests, chaining behind another kache).
    pub fn plain(url: &str) -> Result<Self, UpstreamError> {
        let base: Uri = url.trim_end_matches('/').parse().map_err(|e: http::uri::InvalidUri| {
            UpstreamError::InvalidUrl { url: url.into(), reason: e.to_string() }
        })?;
        if base.scheme_str() != Some("http") || base.authority().is_none() {
            return Err(UpstreamError::InvalidUrl {
                url: url.into(),
                reason: "expected http://host:port".into(),
            });
        }
        let client = Client::builder(TokioExecutor::new()).build_http();
        Ok(Self { base, client })
    }

    /// The upstream's base URL.
    pub fn base(&self) -> &Uri {
        &self.base
    }

    /// Sends a request whose URI is a path-and-query (e.g. `/api/v1/pods?watch=1`), resolved against the base.
    pub async fn send(&self, mut req: Request<Body>) -> Result<Response<Incoming>, UpstreamError> {
        let pq = req.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/").to_owned();
        let uri = Uri::builder()
            .scheme(self.base.scheme_str().unwrap_or("http"))
            .authority(self.base.authority().expect("checked at construction").as_str())
            .path_and_query(pq)
            .build()
            .map_err(|e| UpstreamError::Transport(Box::new(e)))?;
        *req.uri_mut() = uri;
        self.client.request(req).await.map_err(|e| UpstreamError::Transport(Box::new(e)))
    }
}
