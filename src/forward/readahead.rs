//! Reading a forwarded body ahead of the client, up to a byte budget.
//!
//! hyper's HTTP/1 client hands a response body over one piece at a time and reads the next piece from the
//! upstream only once the previous one was taken. Relayed straight to the client, a list then moves in
//! stop-and-go steps of a few KiB: read a piece, encrypt and write it to the client, only then read the
//! next. A pump task here keeps taking pieces from the upstream into one buffer while the client's side
//! writes what was already read, and the client's side takes everything buffered at once, so the two
//! connections work in parallel and the client gets few, large writes.
//!
//! The buffer is bounded (`budget`); a slow client stops the pump, which stops reading the upstream, as
//! without it. When the client's side is dropped, the pump stops and drops the upstream body.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::front::body::{Body, BoxError};

/// How many bytes a pump holds ahead of its client at most.
pub(crate) const READ_AHEAD_BUDGET: usize = 256 * 1024;

/// What the pump left for the client's side.
#[derive(Default)]
struct Shared {
    buf: BytesMut,
    /// How the body ended, once it has: `Ok(trailers)` or the upstream's error.
    end: Option<Result<Option<HeaderMap>, BoxError>>,
    /// The client's side is waiting for data.
    waker: Option<Waker>,
}

struct Pipe {
    shared: Mutex<Shared>,
    /// `kache_forward_read_ahead_bytes`: moved by what enters and leaves `buf`, under its lock.
    held: metrics::Gauge,
    /// Signalled when the client's side took data.
    space: Notify,
    /// Cancelled when the client's side is dropped: the pump stops at once, even while it waits for the
    /// upstream (a forwarded watch may send nothing for minutes), and drops the upstream body.
    gone: CancellationToken,
}

impl Pipe {
    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        // The critical sections only move buffers and wakers; a panic inside one leaves them consistent.
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Wraps `body` so that a task reads it ahead of the client by up to `budget` bytes, counted in `held`
/// while buffered. Must be called within a tokio runtime.
pub(crate) fn read_ahead(body: Body, budget: usize, held: metrics::Gauge) -> Body {
    let pipe = Arc::new(Pipe {
        shared: Mutex::new(Shared::default()),
        held,
        space: Notify::new(),
        gone: CancellationToken::new(),
    });
    tokio::spawn(pump(body, pipe.clone(), budget.max(1)));
    ReadAhead { pipe, done: false }.boxed()
}

async fn pump(mut body: Body, pipe: Arc<Pipe>, budget: usize) {
    loop {
        // Wait for room; a frame may take the buffer past the budget by at most its own size.
        loop {
            let notified = pipe.space.notified();
            if pipe.lock().buf.len() < budget {
                break;
            }
            tokio::select! {
                () = pipe.gone.cancelled() => return,
                () = notified => {}
            }
        }
        let frame = tokio::select! {
            () = pipe.gone.cancelled() => return,
            frame = body.frame() => frame,
        };
        let mut shared = pipe.lock();
        // Checked under the lock the client's side clears the buffer under, so nothing is counted after it.
        if pipe.gone.is_cancelled() {
            return;
        }
        let finished = match frame {
            None => {
                shared.end = Some(Ok(None));
                true
            }
            Some(Err(e)) => {
                shared.end = Some(Err(e));
                true
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    shared.buf.extend_from_slice(&data);
                    pipe.held.increment(data.len() as f64);
                    false
                }
                Err(frame) => {
                    shared.end = Some(Ok(frame.into_trailers().ok()));
                    true
                }
            },
        };
        if let Some(waker) = shared.waker.take() {
            waker.wake();
        }
        if finished {
            return;
        }
    }
}

struct ReadAhead {
    pipe: Arc<Pipe>,
    done: bool,
}

impl HttpBody for ReadAhead {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let mut shared = self.pipe.lock();
        if !shared.buf.is_empty() {
            let data = shared.buf.split().freeze();
            self.pipe.held.decrement(data.len() as f64);
            drop(shared);
            self.pipe.space.notify_one();
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        match shared.end.take() {
            Some(Ok(trailers)) => {
                drop(shared);
                self.done = true;
                Poll::Ready(trailers.map(|t| Ok(Frame::trailers(t))))
            }
            Some(Err(e)) => {
                drop(shared);
                self.done = true;
                Poll::Ready(Some(Err(e)))
            }
            None => {
                shared.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        self.pipe.gone.cancel();
        let mut shared = self.pipe.lock();
        self.pipe.held.decrement(shared.buf.len() as f64);
        shared.buf = BytesMut::new();
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use http_body_util::StreamBody;

    fn chunks(parts: Vec<Result<Frame<Bytes>, BoxError>>) -> Body {
        StreamBody::new(futures_util::stream::iter(parts)).boxed()
    }

    #[tokio::test]
    async fn every_byte_arrives_in_order_then_trailers() {
        let mut want = Vec::new();
        let mut parts = Vec::new();
        for i in 0..500u32 {
            let chunk: Vec<u8> = (0..(i % 97 + 1)).map(|j| (i + j) as u8).collect();
            want.extend_from_slice(&chunk);
            parts.push(Ok(Frame::data(Bytes::from(chunk))));
        }
        let mut trailers = HeaderMap::new();
        trailers.insert("x", http::HeaderValue::from_static("1"));
        parts.push(Ok(Frame::trailers(trailers)));
        let mut body = read_ahead(chunks(parts), 1000, metrics::Gauge::noop());
        let mut got = Vec::new();
        let mut saw_trailers = false;
        while let Some(frame) = body.frame().await {
            let frame = frame.expect("no error");
            match frame.into_data() {
                Ok(d) => {
                    assert!(!saw_trailers, "data after trailers");
                    assert!(d.len() < 1000 + 97, "a frame over the budget by more than one piece");
                    got.extend_from_slice(&d);
                }
                Err(f) => {
                    assert!(f.is_trailers());
                    saw_trailers = true;
                }
            }
        }
        assert_eq!(got, want);
        assert!(saw_trailers);
    }

    #[tokio::test]
    async fn an_error_follows_the_data_read_before_it() {
        let parts = vec![
            Ok(Frame::data(Bytes::from_static(b"ab"))),
            Ok(Frame::data(Bytes::from_static(b"cd"))),
            Err::<Frame<Bytes>, BoxError>("boom".into()),
        ];
        let mut body = read_ahead(chunks(parts), 1024, metrics::Gauge::noop());
        let mut data = Vec::new();
        let err = loop {
            match body.frame().await {
                Some(Ok(f)) => data.extend_from_slice(&f.into_data().expect("data")),
                Some(Err(e)) => break e.to_string(),
                None => panic!("the error was lost"),
            }
        };
        assert_eq!(data, b"abcd");
        assert_eq!(err, "boom");
        assert!(body.frame().await.is_none());
    }

    /// Says when it is dropped (with the upstream body that holds it).
    struct DropSignal(Option<tokio::sync::oneshot::Sender<()>>);

    impl Drop for DropSignal {
        fn drop(&mut self) {
            if let Some(tx) = self.0.take() {
                let _ = tx.send(());
            }
        }
    }

    /// An upstream that always has another 10-byte piece ready, counts the pieces taken, and says when it
    /// is dropped.
    struct Endless {
        taken: Arc<std::sync::atomic::AtomicUsize>,
        _dropped: DropSignal,
    }

    impl HttpBody for Endless {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            self.taken.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(&[7u8; 10])))))
        }
    }

    #[tokio::test]
    async fn the_pump_stops_at_the_budget_and_when_the_client_goes() {
        use std::sync::atomic::Ordering::Relaxed;
        let taken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (tx, dropped) = tokio::sync::oneshot::channel();
        let m = crate::metrics::Metrics::default();
        let held = || gauge_value(&m.render(), "kache_forward_read_ahead_bytes");
        let endless = Endless { taken: taken.clone(), _dropped: DropSignal(Some(tx)) }.boxed();
        let mut body = read_ahead(endless, 100, m.read_ahead_bytes());
        let mut read = 0;
        for _ in 0..5 {
            // On this single-threaded runtime the pump runs whenever the test yields: let it fill up.
            for _ in 0..50 {
                tokio::task::yield_now().await;
            }
            let ahead = taken.load(Relaxed) * 10 - read;
            assert!((100..=110).contains(&ahead), "{ahead} bytes read ahead with a budget of 100");
            assert_eq!(held(), ahead as f64, "the gauge counts the bytes held");
            let frame = body.frame().await.expect("data").expect("no error").into_data().expect("data");
            assert_eq!(frame.len(), ahead, "the client takes everything read ahead at once");
            read += frame.len();
        }
        drop(body);
        assert_eq!(held(), 0.0, "bytes left behind by a client that went away are no longer counted");
        dropped.await.expect("the pump drops the upstream once the client is gone");
    }

    /// An upstream that never sends anything (a quiet forwarded watch) and says when it is dropped.
    struct Quiet {
        _dropped: DropSignal,
    }

    impl HttpBody for Quiet {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            Poll::Pending
        }
    }

    #[tokio::test]
    async fn a_quiet_upstream_is_dropped_as_soon_as_the_client_goes() {
        let (tx, dropped) = tokio::sync::oneshot::channel();
        let body = read_ahead(Quiet { _dropped: DropSignal(Some(tx)) }.boxed(), 100, metrics::Gauge::noop());
        // Let the pump start waiting for the upstream's first frame.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        drop(body);
        // A guard, not a timing assertion: before the fix the pump waited for a frame that never came.
        tokio::time::timeout(std::time::Duration::from_secs(30), dropped)
            .await
            .expect("the pump drops the upstream without waiting for a frame")
            .expect("dropped, not leaked");
    }

    fn gauge_value(text: &str, name: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| panic!("{name} not rendered in:\n{text}"))
    }
}
