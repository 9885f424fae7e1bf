//! The one operation a reflector needs from the upstream: send a request, get a streaming response.
//!
//! Reflectors and discovery are written against [`Transport`] so unit tests can script the upstream
//! in-process (deterministic under paused time), while production uses [`Upstream`].

use std::future::Future;
use std::pin::Pin;

use http::{Request, Response};
use http_body_util::BodyExt;

use super::{Upstream, UpstreamError};
use crate::front::body::{Body, BoxError};

/// A boxed, `Send` future (keeps [`Transport`] object-safe).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Sends a request whose URI is a path-and-query to the upstream.
pub trait Transport: Send + Sync + 'static {
    fn send(&self, req: Request<Body>) -> BoxFuture<'_, Result<Response<Body>, UpstreamError>>;
}

// === impl Upstream ===

impl Transport for Upstream {
    fn send(&self, req: Request<Body>) -> BoxFuture<'_, Result<Response<Body>, UpstreamError>> {
        Box::pin(async move {
            let resp = Upstream::send(self, req).await?;
            Ok(resp.map(|b| b.map_err(|e| Box::new(e) as BoxError).boxed()))
        })
    }
}

/// Reading a whole response body failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadBodyError {
    /// The body is longer than the caller's bound.
    #[error("response body longer than {0} bytes")]
    TooLarge(usize),
    /// The transport failed mid-body.
    #[error("reading the response body failed: {0}")]
    Transport(#[source] BoxError),
}

/// Reads a whole body, at most `max` bytes.
///
/// (A plain loop rather than `http_body_util::Limited`: its boxed error type trips rustc's higher-ranked `Send`
/// inference when the future is spawned.)
pub async fn read_body(mut body: Body, max: usize) -> Result<bytes::Bytes, ReadBodyError> {
    let mut out = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(ReadBodyError::Transport)?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > max {
                return Err(ReadBodyError::TooLarge(max));
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out.freeze())
}
