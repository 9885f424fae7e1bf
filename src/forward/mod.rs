//! forward (see lib.rs Layout): transparent pass-through to the upstream for everything not served from
//! memory, including HTTP upgrades, and the read-your-writes record of forwarded writes.

mod forwarder;
mod headers;
pub(crate) mod status;
mod upgrade;
mod writes;

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;

use crate::body::{Body, BoxError};

pub use forwarder::{Forwarder, UpstreamIdentity};
pub use writes::WriteTracker;

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
