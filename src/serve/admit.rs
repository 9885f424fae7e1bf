//! Admission of reads from memory: a byte budget for the list responses being sent.
//!
//! A list served from memory holds its snapshot's objects (`Arc`s) until its body is sent; when the store
//! moves on, the objects it replaced stay alive for as long as such a response is in flight. So the bytes a
//! response still has to send bound the memory it can pin, and their sum over all responses in flight is
//! what the budget limits. A list is charged its uncompressed size at admission and released when its body
//! ends or is dropped. Over the budget it gets the apiserver's answer to an overloaded server: 429 with
//! `Retry-After` (the max-in-flight / priority-and-fairness filters' `tooManyRequests`).
//!
//! A single list larger than the whole budget is admitted when nothing else is in flight, so every list can
//! be served; it then runs alone.
//!
//! The CPU of admitted lists is bounded too: heavy bodies (pretty-printed, gzipped) are produced off the
//! runtime workers by a few producers taking turns ([`produce`]), so small requests never queue behind them.

mod produce;

pub use produce::{BATCH_BYTES, Producers, collect, offloaded, producers};

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

use crate::front::body::{self, Body};
use crate::metrics::{Limit, Metrics};

/// Default budget (`--max-read-bytes-inflight`, a server limit).
pub use crate::front::server::limits::DEFAULT_MAX_READ_BYTES_IN_FLIGHT;
/// The `Retry-After` of a refused read, in seconds (the apiserver's max-in-flight filter sends 1).
pub(crate) const RETRY_AFTER_SECONDS: u32 = 1;
/// The body of the apiserver's 429 (`http.Error(w, "Too many requests, please try again later.", 429)`).
const TOO_MANY_REQUESTS: &str = "Too many requests, please try again later.\n";

/// Heavy bodies (see [`produce`]) admitted at once per producer (`--max-heavy-bodies-inflight`, a server
/// limit). Every heavy body in flight takes its turn at the producers, so this bounds how long an admitted
/// list waits for its next batch: at most this many batches of [`BATCH_BYTES`] (1–3 ms each on one core) per
/// producer, ~10–25 ms on any machine. Eight keeps the producers busy while clients read what was produced.
pub use crate::front::server::limits::HEAVY_BODIES_PER_PRODUCER;

/// The bytes of memory-served lists in flight, against a limit, and the heavy bodies among them.
#[derive(Debug)]
pub struct ReadBudget {
    /// 0: unlimited.
    limit: usize,
    in_flight: AtomicUsize,
    /// Heavy bodies admitted at once (0: unlimited).
    heavy_limit: usize,
    heavy_in_flight: AtomicUsize,
    /// The kache's metrics: admitted bytes and refusals are counted there.
    metrics: Metrics,
    /// The kache's heavy-body producers, which produce the heavy bodies admitted here.
    producers: Arc<Producers>,
}

/// The budget was exhausted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OverBudget;

// === impl ReadBudget ===

impl ReadBudget {
    /// A budget of `limit` bytes (0: unlimited) admitting [`HEAVY_BODIES_PER_PRODUCER`] heavy bodies per
    /// producer.
    pub fn new(limit: usize) -> Self {
        Self::with_heavy_limit(limit, HEAVY_BODIES_PER_PRODUCER * producers())
    }

    /// A budget with an explicit heavy-body limit (0: unlimited).
    pub(crate) fn with_heavy_limit(limit: usize, heavy_limit: usize) -> Self {
        Self {
            limit,
            in_flight: AtomicUsize::new(0),
            heavy_limit,
            heavy_in_flight: AtomicUsize::new(0),
            metrics: Metrics::default(),
            producers: Arc::default(),
        }
    }

    /// Produces heavy bodies on the kache's `producers` instead of a pool of its own.
    pub(crate) fn with_producers(mut self, producers: Arc<Producers>) -> Self {
        self.producers = producers;
        self
    }

    /// The kache's heavy-body producers.
    pub(crate) fn producers(&self) -> &Arc<Producers> {
        &self.producers
    }

    /// Counts into the kache's `metrics` instead of an instance of its own.
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Admits one more heavy body (pretty-printed or gzipped on the fly) if fewer than the limit are in
    /// flight; the slot is released when the returned guard drops (with the body). Refused: the caller
    /// answers 429 before sending anything, as for the byte budget.
    pub(crate) fn try_heavy(self: &Arc<Self>) -> Result<HeavySlot, OverBudget> {
        let admitted = self.heavy_in_flight.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
            (self.heavy_limit == 0 || n < self.heavy_limit).then_some(n + 1)
        });
        match admitted {
            Ok(_) => Ok(HeavySlot { budget: self.clone() }),
            Err(_) => {
                self.metrics.limit_rejected(Limit::HeavyBodies);
                Err(OverBudget)
            }
        }
    }

    /// Heavy bodies admitted now.
    pub fn heavy_in_flight(&self) -> usize {
        self.heavy_in_flight.load(Ordering::Relaxed)
    }

    /// Charges `bytes` if they fit (or nothing else is in flight); the charge is released when the returned
    /// guard drops.
    pub(crate) fn try_charge(self: &Arc<Self>, bytes: usize) -> Result<Charge, OverBudget> {
        let mut current = self.in_flight.load(Ordering::Relaxed);
        loop {
            if !self.fits(current, bytes) {
                self.metrics.limit_rejected(Limit::ReadBytes);
                return Err(OverBudget);
            }
            match self.in_flight.compare_exchange_weak(
                current,
                current + bytes,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => current = now,
            }
        }
        self.metrics.memory_read(1, bytes as i64);
        Ok(Charge { budget: self.clone(), bytes })
    }

    /// The budget's rule: `bytes` more fit beside `current` (always under no limit, or with nothing in flight).
    fn fits(&self, current: usize, bytes: usize) -> bool {
        self.limit == 0 || current == 0 || current.saturating_add(bytes) <= self.limit
    }

    /// Whether `bytes` would be charged now ([`Self::try_charge`]'s rule, nothing charged).
    pub(crate) fn would_fit(&self, bytes: usize) -> bool {
        self.fits(self.in_flight.load(Ordering::Relaxed), bytes)
    }

    /// [`Self::would_fit`] for a list judged by its estimated size before its objects are walked; a refusal is
    /// counted like [`Self::try_charge`]'s.
    pub(crate) fn has_room(&self, bytes: usize) -> bool {
        let room = self.would_fit(bytes);
        if !room {
            self.metrics.limit_rejected(Limit::ReadBytes);
        }
        room
    }

    /// Bytes charged now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }
}

/// Bytes charged to a [`ReadBudget`], released on drop.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<ReadBudget>,
    bytes: usize,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.in_flight.fetch_sub(self.bytes, Ordering::AcqRel);
        self.budget.metrics.memory_read(-1, -(self.bytes as i64));
    }
}

/// A heavy body's place in a [`ReadBudget`], released on drop.
#[derive(Debug)]
pub(crate) struct HeavySlot {
    budget: Arc<ReadBudget>,
}

impl Drop for HeavySlot {
    fn drop(&mut self) {
        self.budget.heavy_in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What a list response is admitted under: the byte budget it is charged to, and the heavy-body slot its list
/// took before its objects were walked (see [`Admission::heavy`]).
#[derive(Default)]
pub(crate) struct Admission<'a> {
    pub budget: Option<&'a Arc<ReadBudget>>,
    pub slot: Option<HeavySlot>,
}

impl<'a> Admission<'a> {
    /// Under `budget`, no slot taken yet.
    pub fn new(budget: Option<&'a Arc<ReadBudget>>) -> Self {
        Self { budget, slot: None }
    }

    /// The heavy-body slot a body produced on the fly needs: the one taken ahead, or a new one.
    pub fn heavy(&mut self) -> Result<Option<HeavySlot>, OverBudget> {
        match (self.slot.take(), self.budget) {
            (Some(slot), _) => Ok(Some(slot)),
            (None, Some(b)) => b.try_heavy().map(Some),
            (None, None) => Ok(None),
        }
    }

    /// The producers of a heavy body: the budget's (a fresh pool of its own without a budget).
    pub fn producers(&self) -> Arc<Producers> {
        self.budget.map_or_else(Arc::default, |b| b.producers().clone())
    }

    /// Charges `len` bytes to the budget (none: unlimited).
    pub fn charge(&self, len: usize) -> Result<Option<Charge>, OverBudget> {
        self.budget.map(|b| b.try_charge(len)).transpose()
    }
}

/// `resp` with `charge` held until its body is done or dropped.
pub fn hold(resp: Response<Body>, charge: Charge) -> Response<Body> {
    resp.map(|inner| body::guarded(inner, charge))
}

/// The apiserver's 429 for an overloaded server: plain text, `Retry-After`, `nosniff` (Go's `http.Error`).
pub(crate) fn too_many_requests() -> Response<Body> {
    Response::builder()
        .status(StatusCode::TOO_MANY_REQUESTS)
        .header(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS))
        .header(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"))
        .header("x-content-type-options", HeaderValue::from_static("nosniff"))
        .body(body::full(Bytes::from_static(TOO_MANY_REQUESTS.as_bytes())))
        .expect("static headers are valid")
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt as _;

    use super::*;

    #[test]
    fn admits_within_the_budget_and_refuses_beyond() {
        let b = Arc::new(ReadBudget::new(100));
        let first = b.try_charge(60).expect("fits");
        let second = b.try_charge(40).expect("fits exactly");
        assert_eq!(b.try_charge(1).unwrap_err(), OverBudget);
        assert_eq!(b.in_flight(), 100);
        drop(first);
        assert_eq!(b.in_flight(), 40);
        let third = b.try_charge(60).expect("room again");
        drop((second, third));
        assert_eq!(b.in_flight(), 0);
    }

    #[test]
    fn a_list_larger_than_the_budget_runs_alone() {
        let b = Arc::new(ReadBudget::new(100));
        let big = b.try_charge(500).expect("nothing else in flight");
        assert_eq!(b.try_charge(1).unwrap_err(), OverBudget);
        drop(big);
        assert!(b.try_charge(1).is_ok());
    }

    #[test]
    fn zero_is_unlimited() {
        let b = Arc::new(ReadBudget::new(0));
        let _a = b.try_charge(usize::MAX / 2).expect("unlimited");
        let _b = b.try_charge(usize::MAX / 4).expect("unlimited");
    }

    #[tokio::test]
    async fn the_charge_is_released_when_the_body_ends_or_is_dropped() {
        let b = Arc::new(ReadBudget::new(100));
        let resp =
            hold(Response::new(body::full(Bytes::from_static(b"abc"))), b.try_charge(70).expect("fits"));
        assert_eq!(b.in_flight(), 70);
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(&bytes[..], b"abc");
        assert_eq!(b.in_flight(), 0, "released at the end of the stream");

        let resp =
            hold(Response::new(body::full(Bytes::from_static(b"abc"))), b.try_charge(70).expect("fits"));
        drop(resp);
        assert_eq!(b.in_flight(), 0, "released when the client went away");
    }

    #[test]
    fn heavy_bodies_are_admitted_up_to_the_limit() {
        let b = Arc::new(ReadBudget::with_heavy_limit(1 << 30, 2));
        let first = b.try_heavy().expect("first");
        let _second = b.try_heavy().expect("second");
        assert_eq!(b.try_heavy().unwrap_err(), OverBudget);
        assert_eq!(b.heavy_in_flight(), 2);
        drop(first);
        let _third = b.try_heavy().expect("a slot was released");
        // 0 bounds no heavy bodies.
        let unlimited = Arc::new(ReadBudget::with_heavy_limit(0, 0));
        let held: Vec<_> = (0..100).map(|_| unlimited.try_heavy().expect("unlimited")).collect();
        assert_eq!(unlimited.heavy_in_flight(), 100);
        drop(held);
        assert_eq!(unlimited.heavy_in_flight(), 0);
        // The default scales with the producers, and the flag's default is the same.
        assert_eq!(ReadBudget::new(1).heavy_limit, HEAVY_BODIES_PER_PRODUCER * producers());
        assert_eq!(
            crate::front::server::limits::default_max_heavy_bodies(),
            HEAVY_BODIES_PER_PRODUCER * producers()
        );
    }

    #[tokio::test]
    async fn refusal_is_the_apiservers_429() {
        let resp = too_many_requests();
        assert_eq!(resp.status(), 429);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
        assert_eq!(resp.headers()[header::CONTENT_TYPE], "text/plain; charset=utf-8");
        assert_eq!(resp.headers()["x-content-type-options"], "nosniff");
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(&body[..], b"Too many requests, please try again later.\n");
    }
}
