//! The HTTP body type used on both sides of kache.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full, combinators::BoxBody};

/// Boxed error for bodies and transports.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A boxed, streaming HTTP body: what kache's handlers return and what it sends upstream.
pub type Body = BoxBody<Bytes, BoxError>;

/// A body of one buffer.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed()
}

/// An empty body.
pub fn empty() -> Body {
    Empty::<Bytes>::new().map_err(|never| match never {}).boxed()
}

/// A body streaming the buffers an iterator produces, one frame each, as hyper asks for them.
pub fn stream_iter<I>(chunks: I) -> Body
where
    I: Iterator<Item = Bytes> + Send + Sync + 'static,
{
    let stream = futures_util::stream::iter(chunks.map(|c| Ok::<_, BoxError>(hyper::body::Frame::data(c))));
    http_body_util::StreamBody::new(stream).boxed()
}
