//! Reading a forwarded body ahead of the client, up to a byte budget.
//!
//! hyper's HTTP/1 client hands a response body over one piece at a time and reads the next piece from the
//! upstream only once the previous one was taken. Relayed straight to the client, a list then moves in
//! stop-and-go steps of a few KiB: read a piece, encrypt and write it to the client, only then read the
//! next. A pump task here keeps taking pieces from the upstream into one buffer while the client's side
//! writes what was already read, and the client's side takes everything buffered at once, so the two
//! connections work in parallel and the client gets few, large writes.
//!
//! A response that ends with its body (a list, a get) is handed to the client's side in **batches**
//! ([`Handoff::Batched`]): the pump wakes the client's side once [`BATCH_BYTES`] are buffered, the body ended,
//! or [`BATCH_HOLD`] passed since the oldest byte not yet handed over. An apiserver sends a list as ~16 KiB TLS
//! records that arrive ~4 KiB at a time, so handing over each piece as it came cost a wake-up, a TLS record and
//! a `writev` per ~29 KiB: ~230 ms of kache's CPU to relay a 21.5 MiB list, ten times what serving it from
//! memory costs, on cores the apiserver needs to produce the list
//! (docs/decisions/0015-forwarding-transport.md). A client reads
//! such a body to its end before using it, so a batch held for a millisecond or two delays nothing it can
//! see. A watch is handed over frame by frame ([`Handoff::Immediate`]): an event must not wait.
//!
//! The buffer is bounded (`budget`); a slow client stops the pump, which stops reading the upstream, as
//! without it. When the client's side is dropped, the pump stops and drops the upstream body.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::front::body::{Body, BoxError};

/// How many bytes a pump holds ahead of its client at most.
pub(crate) const READ_AHEAD_BUDGET: usize = 256 * 1024;
/// A batched body is handed over once this much is buffered (below the budget, so a full buffer has always
/// woken the client's side).
pub(crate) const BATCH_BYTES: usize = 128 * 1024;
/// ... or once its oldest byte not yet handed over has waited this long (an upstream sending slowly).
pub(crate) const BATCH_HOLD: Duration = Duration::from_millis(2);

/// When the pump hands what it read to the client's side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Handoff {
    /// Every piece as soon as it arrives: watches, whose events must not wait.
    Immediate,
    /// At `bytes` buffered, at the end of the body, or `hold` after the oldest byte not handed over yet:
    /// bodies that end with the response (lists), which clients read to the end before using.
    Batched { bytes: usize, hold: Duration },
}

impl Handoff {
    /// The batching of a list: [`BATCH_BYTES`], [`BATCH_HOLD`].
    pub(crate) const LIST: Handoff = Handoff::Batched { bytes: BATCH_BYTES, hold: BATCH_HOLD };
}

/// What the pump left for the client's side.
#[derive(Default)]
struct Shared {
    buf: BytesMut,
    /// How the body ended, once it has: `Ok(trailers)` or the upstream's error.
    end: Option<Result<Option<HeaderMap>, BoxError>>,
    /// The client's side is waiting for data.
    waker: Option<Waker>,
    /// What is buffered may be taken: the pump sets it when it hands data over (every piece, for
    /// [`Handoff::Immediate`]; a complete or long-held batch otherwise), the client's side clears it when it
    /// takes the buffer.
    release: bool,
}

impl Shared {
    /// Lets the client's side take what is buffered, and wakes it if it waits.
    fn hand_over(&mut self) {
        self.release = true;
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
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

/// Wraps `body` so that a task, started by `spawn` (a forwarded list's on the forward thread, beside its
/// upstream connection: `upstream::fwdrt`), reads it ahead of the client by up to `budget` bytes, counted in
/// `held` while buffered, and hands it over as `handoff` says.
pub(crate) fn read_ahead(
    body: Body,
    budget: usize,
    handoff: Handoff,
    held: metrics::Gauge,
    spawn: impl FnOnce(std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>),
) -> Body {
    let budget = budget.max(1);
    // A batch larger than the budget would never be complete: the pump stops reading at the budget.
    let handoff = match handoff {
        Handoff::Batched { bytes, hold } => Handoff::Batched { bytes: bytes.clamp(1, budget), hold },
        Handoff::Immediate => Handoff::Immediate,
    };
    let pipe = Arc::new(Pipe {
        shared: Mutex::new(Shared::default()),
        held,
        space: Notify::new(),
        gone: CancellationToken::new(),
    });
    spawn(Box::pin(pump(body, pipe.clone(), budget, handoff)));
    ReadAhead { pipe, done: false }.boxed()
}

async fn pump(mut body: Body, pipe: Arc<Pipe>, budget: usize, handoff: Handoff) {
    // Armed (batched bodies only) when bytes wait to be handed over: fires when the oldest of them must be.
    let hold = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(hold);
    let mut armed = false;
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
            () = &mut hold, if armed => {
                armed = false;
                let mut shared = pipe.lock();
                if !shared.buf.is_empty() {
                    shared.hand_over();
                }
                continue;
            }
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
                    if let Handoff::Batched { bytes, .. } = handoff
                        && shared.buf.capacity() - shared.buf.len() < data.len()
                    {
                        // The client's side took the last batch whole: start the next one at a batch's size
                        // rather than growing it piece by piece. (A watch event is handed over alone: no
                        // batch to reserve for.)
                        shared.buf.reserve(data.len().max(bytes));
                    }
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
        let hand_over = match handoff {
            Handoff::Immediate => true,
            Handoff::Batched { bytes, hold: wait } => {
                if finished || shared.buf.len() >= bytes {
                    true
                } else {
                    if !shared.buf.is_empty() && !armed {
                        hold.as_mut().reset(tokio::time::Instant::now() + wait);
                        armed = true;
                    }
                    false
                }
            }
        };
        if hand_over {
            armed = false;
            shared.hand_over();
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
        if !shared.buf.is_empty() && (shared.release || shared.end.is_some()) {
            shared.release = false;
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

    /// [`read_ahead`] with the pump on the test's runtime.
    fn spawned(body: Body, budget: usize, handoff: Handoff, held: metrics::Gauge) -> Body {
        read_ahead(body, budget, handoff, held, |pump| drop(tokio::spawn(pump)))
    }
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
        let mut body = spawned(chunks(parts), 1000, Handoff::Immediate, metrics::Gauge::noop());
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
        let mut body = spawned(chunks(parts), 1024, Handoff::Immediate, metrics::Gauge::noop());
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

    /// An upstream whose pieces arrive one at a time: it has nothing ready between two pieces.
    struct Trickle {
        pieces: std::collections::VecDeque<Bytes>,
        ready: bool,
    }

    impl HttpBody for Trickle {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            let ready = self.ready;
            self.ready = !ready;
            if !ready {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Poll::Ready(self.pieces.pop_front().map(|b| Ok(Frame::data(b))))
        }
    }

    #[tokio::test]
    async fn a_list_is_handed_over_in_batches_and_whatever_is_left_at_its_end() {
        // 500 pieces of 1–97 bytes arriving one by one (handed over as they come, each would be its own
        // frame): every frame but the last is a whole batch.
        let (mut want, mut pieces) = (Vec::new(), std::collections::VecDeque::new());
        for i in 0..500u32 {
            let chunk: Vec<u8> = (0..(i % 97 + 1)).map(|j| (i * 7 + j) as u8).collect();
            want.extend_from_slice(&chunk);
            pieces.push_back(Bytes::from(chunk));
        }
        let upstream = Trickle { pieces, ready: false }.boxed();
        let handoff = Handoff::Batched { bytes: 1000, hold: Duration::from_secs(3600) };
        let mut body = spawned(upstream, 4000, handoff, metrics::Gauge::noop());
        // The client's side is a task like the pump (as hyper's connection task is), so the two take turns.
        let frames = tokio::spawn(async move {
            let mut frames = Vec::new();
            while let Some(frame) = body.frame().await {
                frames.push(frame.expect("no error").into_data().expect("data"));
            }
            frames
        })
        .await
        .expect("the client's side ran");
        let (last, whole) = frames.split_last().expect("frames");
        assert!(whole.iter().all(|f| f.len() >= 1000), "a frame before the end was not a whole batch");
        assert!(!last.is_empty());
        assert_eq!(frames.concat(), want, "every byte, in order");
    }

    /// An upstream that sends `first` and then nothing, without ending (a stalled list).
    struct Stalls {
        first: Option<Bytes>,
    }

    impl HttpBody for Stalls {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            match self.first.take() {
                Some(b) => Poll::Ready(Some(Ok(Frame::data(b)))),
                None => Poll::Pending,
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_partial_batch_is_handed_over_once_held_long_enough() {
        // The batch (1 MB) never fills and the body never ends: the hold releases what came. With the clock
        // paused, time advances only when every task waits, so the hold fires before the guard.
        let upstream = Stalls { first: Some(Bytes::from_static(b"partial")) }.boxed();
        let handoff = Handoff::Batched { bytes: 1 << 20, hold: Duration::from_millis(2) };
        let mut body = spawned(upstream, 2 << 20, handoff, metrics::Gauge::noop());
        let frame = tokio::time::timeout(Duration::from_secs(3600), body.frame())
            .await
            .expect("the held bytes are handed over after the hold")
            .expect("a frame")
            .expect("no error");
        assert_eq!(frame.into_data().expect("data"), Bytes::from_static(b"partial"));
        // Nothing more comes and the body has not ended.
        assert!(tokio::time::timeout(Duration::from_secs(3600), body.frame()).await.is_err());
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
        let mut body = spawned(endless, 100, Handoff::Immediate, m.read_ahead_bytes());
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
        let body = spawned(
            Quiet { _dropped: DropSignal(Some(tx)) }.boxed(),
            100,
            Handoff::Immediate,
            metrics::Gauge::noop(),
        );
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
