//! Relaying a forwarded body in fewer, larger frames.
//!
//! The apiserver streams a list's JSON item by item through small buffers, so a forwarded 20 MB list
//! arrives as thousands of small TLS records; relayed frame by frame, each became a TLS record and a write of
//! kache's own, and that per-frame cost made kache's CPU per forwarded byte ~15× its CPU per byte served from
//! memory (BENCHMARKS-real.md). [`coalesced`] joins the frames that are *already available* into one of up to
//! [`COALESCE_BYTES`]; it never waits for more (a frame is passed on as soon as the upstream has nothing else
//! ready), so latency is unchanged.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;

use crate::body::{Body, BoxError};

/// Largest frame built from smaller ones (a few TLS records; frames already this large pass unchanged).
pub(crate) const COALESCE_BYTES: usize = 64 << 10;

pin_project_lite::pin_project! {
    struct Coalesced {
        #[pin]
        inner: Body,
        // A trailers frame or an error, held back until the data before it was passed on.
        held: Option<Result<Frame<Bytes>, BoxError>>,
        // The inner body has ended.
        done: bool,
    }
}

/// Wraps `body` so that data frames ready together are passed on as one.
pub(crate) fn coalesced(body: Body) -> Body {
    Coalesced { inner: body, held: None, done: false }.boxed()
}

impl HttpBody for Coalesced {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        if let Some(held) = this.held.take() {
            return Poll::Ready(Some(held));
        }
        let mut first: Option<Bytes> = None;
        let mut joined: Option<BytesMut> = None;
        while !*this.done {
            let len = joined.as_ref().map_or(first.as_ref().map_or(0, Bytes::len), BytesMut::len);
            if len >= COALESCE_BYTES {
                break;
            }
            match this.inner.as_mut().poll_frame(cx) {
                Poll::Pending => break,
                Poll::Ready(None) => *this.done = true,
                Poll::Ready(Some(Err(e))) => {
                    *this.held = Some(Err(e));
                    break;
                }
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => match (&mut joined, first.take()) {
                        (Some(buf), _) => buf.extend_from_slice(&data),
                        (None, None) => first = Some(data),
                        (None, Some(prev)) => {
                            let mut buf =
                                BytesMut::with_capacity((prev.len() + data.len()).max(COALESCE_BYTES));
                            buf.extend_from_slice(&prev);
                            buf.extend_from_slice(&data);
                            joined = Some(buf);
                        }
                    },
                    Err(frame) => {
                        *this.held = Some(Ok(frame));
                        break;
                    }
                },
            }
        }
        if let Some(data) = joined.map(BytesMut::freeze).or(first) {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        if let Some(held) = this.held.take() {
            return Poll::Ready(Some(held));
        }
        if *this.done { Poll::Ready(None) } else { Poll::Pending }
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_none() && (self.done || self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    /// A body that yields `script` in order: `Some(frame)` ready, `None` as one Pending (waking at once).
    struct Scripted(VecDeque<Option<Result<Frame<Bytes>, BoxError>>>);

    impl HttpBody for Scripted {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            match self.0.pop_front() {
                None => Poll::Ready(None),
                Some(Some(frame)) => Poll::Ready(Some(frame)),
                Some(None) => {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
            }
        }
    }

    fn data(n: usize) -> Option<Result<Frame<Bytes>, BoxError>> {
        Some(Ok(Frame::data(Bytes::from(vec![b'x'; n]))))
    }

    async fn sizes(script: Vec<Option<Result<Frame<Bytes>, BoxError>>>) -> Vec<Result<usize, String>> {
        let mut body = coalesced(Scripted(script.into()).boxed());
        let mut out = Vec::new();
        while let Some(frame) = body.frame().await {
            out.push(match frame {
                Ok(f) => Ok(f.into_data().map_or(0, |d| d.len())),
                Err(e) => Err(e.to_string()),
            });
        }
        out
    }

    #[tokio::test]
    async fn ready_frames_are_joined_up_to_the_bound_and_nothing_waits() {
        // 100 ready frames of 4 KiB: joined into 64 KiB frames.
        let got = sizes((0..100).map(|_| data(4096)).collect()).await;
        assert_eq!(got.iter().map(|r| *r.as_ref().unwrap()).sum::<usize>(), 100 * 4096);
        assert_eq!(got.len(), 7, "{got:?}");
        // A frame is passed on as soon as the upstream has nothing else ready.
        let got = sizes(vec![data(10), data(20), None, data(5)]).await;
        assert_eq!(got, vec![Ok(30), Ok(5)]);
        // A large frame passes as it is.
        assert_eq!(sizes(vec![data(100_000), data(1)]).await, vec![Ok(100_000), Ok(1)]);
    }

    #[tokio::test]
    async fn an_error_comes_after_the_data_before_it() {
        let err: BoxError = "reset".into();
        let got = sizes(vec![data(10), data(10), Some(Err(err))]).await;
        assert_eq!(got, vec![Ok(20), Err("reset".to_owned())]);
    }
}
