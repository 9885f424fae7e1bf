//! Per-client limits: a request rate (token bucket) and a number of concurrent watches, keyed by the
//! authenticated user, or by the peer's IP address when nobody is authenticated (`--auth=none`).
//!
//! The rate is `governor`'s keyed GCRA limiter (a token bucket kept as one theoretical arrival time per
//! client, O(1) per request), on tokio's clock ([`TokioClock`]: paused time in tests moves it).
//!
//! Both maps are bounded: clients by [`MAX_TRACKED_CLIENTS`] ([`BoundedStore`]: at the bound, idle clients,
//! whose buckets are full again, are dropped first; past it a new client is not rate-limited rather than
//! refused, so a flood of distinct clients cannot lock out legitimate ones, and the clients already tracked
//! stay limited), watch counts by the number of open watches (an entry is removed when its count returns to
//! zero).

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use governor::nanos::Nanos;
use governor::state::StateStore;
use governor::state::keyed::ShrinkableKeyedStateStore;
use governor::{Quota, RateLimiter};

use crate::codec::status::ApiError;

/// Bound of the rate-limiter map.
pub const MAX_TRACKED_CLIENTS: usize = 10_000;
/// The message of a per-client 429 (the apiserver's max-in-flight and APF wording).
const TOO_MANY: &str = "Too many requests, please try again later.";
/// The longest time between two tokens (a rate below one per year is one per year).
const LONGEST_PERIOD: Duration = Duration::from_secs(365 * 24 * 3600);

/// Who a limit applies to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ClientKey {
    User(String),
    Ip(IpAddr),
}

/// Per-client limit settings; zero turns a limit off.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ClientLimitSettings {
    /// Sustained requests per second per client.
    pub qps: f64,
    /// Requests a client may send at once before the rate applies (at least 1 when `qps` > 0).
    pub burst: u32,
    /// Concurrent watches per client.
    pub max_watches: usize,
}

/// governor's clock on tokio's time (paused and advanced by tests like every other timer of kache).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TokioClock;

impl governor::clock::Clock for TokioClock {
    type Instant = std::time::Instant;

    fn now(&self) -> std::time::Instant {
        tokio::time::Instant::now().into_std()
    }
}

/// governor's keyed state, bounded: per client its theoretical arrival time, under one lock held O(1) per
/// request; at most `cap` clients (a new client past it is measured as a fresh one and not kept).
#[derive(Debug)]
pub(crate) struct BoundedStore<K> {
    tats: Mutex<HashMap<K, u64>>,
    cap: usize,
}

impl<K: Hash + Eq + Clone> StateStore for BoundedStore<K> {
    type Key = K;

    fn measure_and_replace<T, F, E>(&self, key: &K, f: F) -> Result<T, E>
    where
        F: Fn(Option<Nanos>) -> Result<(T, Nanos), E>,
    {
        let mut tats = lock(&self.tats);
        let prev = tats.get(key).copied();
        let (out, tat) = f(prev.map(Nanos::from))?;
        if prev.is_some() || tats.len() < self.cap {
            tats.insert(key.clone(), tat.into());
        }
        Ok(out)
    }
}

impl<K: Hash + Eq + Clone> ShrinkableKeyedStateStore<K> for BoundedStore<K> {
    fn retain_recent(&self, drop_below: Nanos) {
        let drop_below = u64::from(drop_below);
        lock(&self.tats).retain(|_, tat| *tat > drop_below);
    }

    fn shrink_to_fit(&self) {
        lock(&self.tats).shrink_to_fit();
    }

    fn len(&self) -> usize {
        lock(&self.tats).len()
    }

    fn is_empty(&self) -> bool {
        lock(&self.tats).is_empty()
    }
}

type Limiter = RateLimiter<ClientKey, BoundedStore<ClientKey>, TokioClock>;

/// The limiter shared by all requests.
#[derive(Debug)]
pub struct ClientLimits {
    settings: ClientLimitSettings,
    /// `None` when the rate is not limited.
    rate: Option<Limiter>,
    watches: Arc<Mutex<HashMap<ClientKey, usize>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An open watch; dropping it (when the response body ends) frees the client's slot.
#[derive(Debug)]
pub struct WatchSlot {
    key: ClientKey,
    watches: Arc<Mutex<HashMap<ClientKey, usize>>>,
}

impl Drop for WatchSlot {
    fn drop(&mut self) {
        let mut w = lock(&self.watches);
        if let Some(n) = w.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                w.remove(&self.key);
            }
        }
    }
}

// === impl ClientLimits ===

impl ClientLimits {
    pub fn new(settings: ClientLimitSettings) -> Self {
        let rate = (settings.qps > 0.0).then(|| {
            let period = Duration::try_from_secs_f64(1.0 / settings.qps)
                .unwrap_or(LONGEST_PERIOD)
                .clamp(Duration::from_nanos(1), LONGEST_PERIOD);
            let burst = NonZeroU32::new(settings.burst).unwrap_or(NonZeroU32::MIN);
            let quota = Quota::with_period(period).expect("a period of at least 1 ns").allow_burst(burst);
            let store = BoundedStore { tats: Mutex::default(), cap: MAX_TRACKED_CLIENTS };
            RateLimiter::new(quota, store, TokioClock)
        });
        Self { settings, rate, watches: Arc::default() }
    }

    pub fn settings(&self) -> ClientLimitSettings {
        self.settings
    }

    /// Takes one request token for `key` now; `Err` is the 429 with the seconds until one is back.
    pub(crate) fn check_rate(&self, key: &ClientKey) -> Result<(), ApiError> {
        let Some(rate) = &self.rate else { return Ok(()) };
        if rate.len() >= MAX_TRACKED_CLIENTS {
            // At the bound: forget the clients whose buckets are full again (they are measured as new).
            rate.retain_recent();
        }
        rate.check_key(key).map_err(|not_until| {
            let wait = not_until.wait_time_from(governor::clock::Clock::now(&TokioClock));
            too_many(wait.as_secs_f64().ceil().clamp(1.0, f64::from(u32::MAX)) as u32)
        })
    }

    /// Opens a watch for `key`; `Err` is the 429 when the client already has `max_watches` open.
    pub(crate) fn begin_watch(&self, key: &ClientKey) -> Result<Option<WatchSlot>, ApiError> {
        if self.settings.max_watches == 0 {
            return Ok(None);
        }
        let mut w = lock(&self.watches);
        let n = w.entry(key.clone()).or_insert(0);
        if *n >= self.settings.max_watches {
            return Err(too_many(1));
        }
        *n += 1;
        Ok(Some(WatchSlot { key: key.clone(), watches: self.watches.clone() }))
    }

    /// Open watches of `key` (tests, metrics).
    pub fn watches(&self, key: &ClientKey) -> usize {
        lock(&self.watches).get(key).copied().unwrap_or(0)
    }

    /// Clients whose rate is tracked.
    pub fn tracked_clients(&self) -> usize {
        self.rate.as_ref().map_or(0, |r| r.len())
    }
}

fn too_many(retry_after: u32) -> ApiError {
    ApiError::TooManyRequests { message: TOO_MANY.to_owned(), retry_after }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn user(u: &str) -> ClientKey {
        ClientKey::User(u.into())
    }

    #[tokio::test(start_paused = true)]
    async fn token_bucket_allows_the_burst_then_the_rate() {
        let l = ClientLimits::new(ClientLimitSettings { qps: 2.0, burst: 3, max_watches: 0 });
        for _ in 0..3 {
            l.check_rate(&user("a")).expect("within the burst");
        }
        let err = l.check_rate(&user("a")).expect_err("burst used up");
        assert_eq!(err.status_code(), 429);
        assert_eq!(err.retry_after(), Some(1));
        l.check_rate(&user("b")).expect("other clients are not affected");
        // Half a second at 2 qps gives one token back.
        tokio::time::advance(Duration::from_millis(500)).await;
        l.check_rate(&user("a")).expect("refilled");
        assert!(l.check_rate(&user("a")).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn slow_rates_say_how_long_to_wait() {
        let l = ClientLimits::new(ClientLimitSettings { qps: 0.1, burst: 1, max_watches: 0 });
        l.check_rate(&user("a")).expect("first");
        assert_eq!(l.check_rate(&user("a")).expect_err("limited").retry_after(), Some(10));
    }

    #[test]
    fn off_by_default() {
        let l = ClientLimits::new(ClientLimitSettings::default());
        for _ in 0..1000 {
            l.check_rate(&user("a")).expect("no rate limit");
        }
        let slots: Vec<_> = (0..1000).map(|_| l.begin_watch(&user("a")).expect("no watch limit")).collect();
        assert!(slots.iter().all(Option::is_none));
    }

    #[test]
    fn absurd_rates_do_not_panic() {
        for qps in [f64::MIN_POSITIVE, 1e-30, 1e30, f64::MAX, f64::INFINITY] {
            let l = ClientLimits::new(ClientLimitSettings { qps, burst: 0, max_watches: 0 });
            l.check_rate(&user("a")).expect("the first request is within the burst");
            let _ = l.check_rate(&user("a"));
        }
    }

    #[test]
    fn watch_slots_are_freed_when_dropped() {
        let l = ClientLimits::new(ClientLimitSettings { qps: 0.0, burst: 0, max_watches: 2 });
        let ip = ClientKey::Ip("10.0.0.1".parse().expect("ip"));
        let a = l.begin_watch(&ip).expect("1");
        let _b = l.begin_watch(&ip).expect("2");
        let err = l.begin_watch(&ip).expect_err("3rd is over the limit");
        assert_eq!(err.status_code(), 429);
        assert_eq!(l.watches(&ip), 2);
        drop(a);
        assert_eq!(l.watches(&ip), 1);
        let _c = l.begin_watch(&ip).expect("a slot is free again");
    }

    #[tokio::test(start_paused = true)]
    async fn the_bucket_map_stays_bounded_and_known_clients_stay_limited() {
        let l = ClientLimits::new(ClientLimitSettings { qps: 1.0, burst: 1, max_watches: 0 });
        l.check_rate(&user("known")).expect("first");
        for i in 0..(MAX_TRACKED_CLIENTS + 100) {
            let _ = l.check_rate(&ClientKey::User(format!("u{i}")));
        }
        assert!(l.tracked_clients() <= MAX_TRACKED_CLIENTS);
        l.check_rate(&user("new")).expect("past the bound a new client is not limited");
        l.check_rate(&user("new")).expect("nor tracked");
        assert!(l.check_rate(&user("known")).is_err(), "a tracked client stays limited");
        // Once the buckets are full again, the idle clients are forgotten and new ones tracked.
        tokio::time::advance(Duration::from_secs(2)).await;
        l.check_rate(&user("later")).expect("first");
        assert!(l.tracked_clients() < 10, "{} clients tracked", l.tracked_clients());
        assert!(l.check_rate(&user("later")).is_err(), "tracked again");
    }

    /// A request's rate check (`cargo test -p kache --lib auth::limits -- --ignored --nocapture`).
    #[tokio::test(start_paused = true)]
    #[ignore = "a measurement, not a check"]
    async fn measure_checks() {
        let l = ClientLimits::new(ClientLimitSettings { qps: 1e9, burst: 1000, max_watches: 0 });
        let keys: Vec<ClientKey> = (0..1000).map(|i| ClientKey::User(format!("u{i}"))).collect();
        let n = 1_000_000;
        let started = std::time::Instant::now();
        for i in 0..n {
            let _ = l.check_rate(&keys[i % keys.len()]);
        }
        let took = started.elapsed();
        println!("rate check: {:.0} ns per request", took.as_nanos() as f64 / n as f64);
    }
}
