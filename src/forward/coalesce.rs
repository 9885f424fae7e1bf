//! Relaying an upstream body in fewer, larger frames.
//!
//! An apiserver streams a list as many small pieces (a TLS record of ~4 KiB, split further by chunked
//! encoding), and hyper hands each piece over as one frame. Written to the client one by one, every piece
//! costs a TLS record, a `writev` and a wake-up of the task on the other side of the relay: a forwarded
//! 230 KiB list took ~110 writes and ~3 ms of kache's CPU. This adapter joins the frames that are
//! *already available* into one, up to a bound. It never waits for more data to arrive, so a watch event
//! or the last piece of a response is passed on as soon as the upstream has sent it.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;

use crate::front::body::{Body, BoxError};

/// The largest frame the adapter builds: large enough that a list is relayed in a handful of writes, small
/// enough to stay a bounded per-response buffer.
pub(crate) const MAX_COALESCED: usize = 64 * 1024;

pin_project_lite::pin_project! {
    struct Coalesce {
        #[pin]
        inner: Body,
        max: usize,
        // A trailers frame or error met while joining data, returned after the data joined before it.
        held: Option<Result<Frame<Bytes>, BoxError>>,
        done: bool,
    }
}

/// Wraps `body` so that data frames already available are passed on joined, up to `max` bytes per frame.
pub(crate) fn coalesced(body: Body, max: usize) -> Body {
    Coalesce { inner: body, max: max.max(1), held: None, done: false }.boxed()
}

impl HttpBody for Coalesce {
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
        if *this.done {
            return Poll::Ready(None);
        }
        // The first frame is awaited; the following ones are only taken while they are ready.
        let first = match std::task::ready!(this.inner.as_mut().poll_frame(cx)) {
            None => {
                *this.done = true;
                return Poll::Ready(None);
            }
            Some(Err(e)) => return Poll::Ready(Some(Err(e))),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => data,
                Err(frame) => return Poll::Ready(Some(Ok(frame))),
            },
        };
        if first.len() >= *this.max {
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        let mut joined: Option<BytesMut> = None;
        let mut len = first.len();
        loop {
            if len >= *this.max {
                break;
            }
            match this.inner.as_mut().poll_frame(cx) {
                Poll::Pending => break,
                Poll::Ready(None) => {
                    *this.done = true;
                    break;
                }
                Poll::Ready(Some(Err(e))) => {
                    *this.held = Some(Err(e));
                    break;
                }
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        let buf = joined.get_or_insert_with(|| {
                            let mut buf = BytesMut::with_capacity((*this.max).max(first.len() + data.len()));
                            buf.extend_from_slice(&first);
                            buf
                        });
                        buf.extend_from_slice(&data);
                        len = buf.len();
                    }
                    Err(frame) => {
                        *this.held = Some(Ok(frame));
                        break;
                    }
                },
            }
        }
        let data = match joined {
            Some(buf) => buf.freeze(),
            None => first,
        };
        Poll::Ready(Some(Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_none() && (self.done || self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        if self.held.is_some() { SizeHint::default() } else { self.inner.size_hint() }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    /// A body whose frames arrive in bursts: `None` entries are points where the upstream has nothing ready.
    struct Bursts {
        items: VecDeque<Option<Result<Frame<Bytes>, BoxError>>>,
    }

    impl HttpBody for Bursts {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            match self.items.pop_front() {
                None => Poll::Ready(None),
                Some(None) => {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
                Some(Some(item)) => Poll::Ready(Some(item)),
            }
        }
    }

    fn data(s: &str) -> Option<Result<Frame<Bytes>, BoxError>> {
        Some(Ok(Frame::data(Bytes::copy_from_slice(s.as_bytes()))))
    }

    async fn frames(body: Body) -> Vec<Result<Frame<Bytes>, String>> {
        let mut body = body;
        let mut out = Vec::new();
        while let Some(f) = body.frame().await {
            out.push(f.map_err(|e| e.to_string()));
        }
        out
    }

    fn as_data(frames: &[Result<Frame<Bytes>, String>]) -> Vec<String> {
        frames
            .iter()
            .map(|f| match f {
                Ok(f) => match f.data_ref() {
                    Some(d) => String::from_utf8_lossy(d).into_owned(),
                    None => "<trailers>".to_owned(),
                },
                Err(e) => format!("<error {e}>"),
            })
            .collect()
    }

    #[tokio::test]
    async fn joins_only_what_is_ready() {
        let items = VecDeque::from([data("ab"), data("cd"), None, data("ef"), None, data("g")]);
        let out = frames(coalesced(Bursts { items }.boxed(), 1024)).await;
        assert_eq!(as_data(&out), ["abcd", "ef", "g"]);
    }

    #[tokio::test]
    async fn respects_the_bound() {
        let items = VecDeque::from([data("abc"), data("def"), data("ghi"), data("j")]);
        let out = frames(coalesced(Bursts { items }.boxed(), 5)).await;
        assert_eq!(as_data(&out), ["abcdef", "ghij"]);
    }

    #[tokio::test]
    async fn trailers_and_errors_follow_the_data_before_them() {
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x", http::HeaderValue::from_static("1"));
        let items = VecDeque::from([
            data("ab"),
            data("cd"),
            Some(Err::<Frame<Bytes>, BoxError>("boom".into())),
            data("late"),
        ]);
        let out = frames(coalesced(Bursts { items }.boxed(), 1024)).await;
        assert_eq!(as_data(&out), ["abcd", "<error boom>", "late"]);

        let items = VecDeque::from([data("ab"), Some(Ok(Frame::trailers(trailers)))]);
        let out = frames(coalesced(Bursts { items }.boxed(), 1024)).await;
        assert_eq!(as_data(&out), ["ab", "<trailers>"]);
    }

    #[tokio::test]
    async fn keeps_every_byte_in_order() {
        // Random frame sizes and ready/pending patterns: the joined stream is the same bytes.
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..200 {
            let mut items = VecDeque::new();
            let mut want = Vec::new();
            for _ in 0..(next() % 40) {
                if next() % 3 == 0 {
                    items.push_back(None);
                }
                let len = (next() % 300) as usize;
                let chunk: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                want.extend_from_slice(&chunk);
                items.push_back(Some(Ok(Frame::data(Bytes::from(chunk)))));
            }
            let max = 1 + (next() % 700) as usize;
            let body = coalesced(Bursts { items }.boxed(), max);
            let mut joined = Vec::new();
            for f in frames(body).await {
                let d = f.expect("no errors").into_data().expect("data only");
                // A frame is closed once it reaches the bound, so it exceeds it by less than one input frame.
                assert!(d.len() < max + 300, "a frame far over the bound");
                joined.extend_from_slice(&d);
            }
            assert_eq!(joined, want);
        }
    }
}
