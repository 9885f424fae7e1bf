//! The HTTP body type used on both sides of kache.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
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
pub(crate) fn stream_iter<I>(chunks: I) -> Body
where
    I: Iterator<Item = Bytes> + Send + Sync + 'static,
{
    let stream = futures_util::stream::iter(chunks.map(|c| Ok::<_, BoxError>(hyper::body::Frame::data(c))));
    http_body_util::StreamBody::new(stream).boxed()
}

pin_project_lite::pin_project! {
    /// A body that holds `guard` (e.g. an in-flight permit) until it has ended or is dropped.
    struct Guarded<G> {
        #[pin]
        inner: Body,
        guard: Option<G>,
    }
}

/// Wraps `body` so that `guard` lives until the body is finished.
pub(crate) fn guarded<G: Send + Sync + 'static>(body: Body, guard: G) -> Body {
    Guarded { inner: body, guard: Some(guard) }.boxed()
}

impl<G> HttpBody for Guarded<G> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        let frame = std::task::ready!(this.inner.poll_frame(cx));
        if !matches!(frame, Some(Ok(_))) {
            this.guard.take();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
