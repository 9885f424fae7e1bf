//! Per-client limits: a request rate (token bucket) and a number of concurrent watches, keyed by the
//! authenticated user, or by the peer's IP address when nobody is authenticated (`--auth=none`).
//!
//! Both maps are bounded: buckets by [`MAX_TRACKED_CLIENTS`] (idle buckets, which are full again, are
//! dropped first; past the bound a new client is not rate-limited rather than refused, so a flood of
//! distinct clients cannot lock out legitimate ones), watch counts by the number of open watches (an entry
//! is removed when its count returns to zero).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::time::Instant;

use crate::codec::status::ApiError;

/// Bound of the rate-limiter map.
pub const MAX_TRACKED_CLIENTS: usize = 10_000;
/// The message of a per-client 429 (the apiserver's max-in-flight and APF wording).
const TOO_MANY: &str = "Too many requests, please try again later.";

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

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    updated: Instant,
}

/// The limiter shared by all requests.
#[derive(Debug)]
pub struct ClientLimits {
    settings: ClientLimitSettings,
    buckets: Mutex<HashMap<ClientKey, Bucket>>,
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
        Self { settings, buckets: Mutex::default(), watches: Arc::default() }
    }

    pub fn settings(&self) -> ClientLimitSettings {
        self.settings
    }

    fn burst(&self) -> f64 {
        f64::from(self.settings.burst.max(1))
    }

    /// Takes one request token for `key` at `now`; `Err` is the 429 with the seconds until one is back.
    pub(crate) fn check_rate(&self, key: &ClientKey, now: Instant) -> Result<(), ApiError> {
        if self.settings.qps <= 0.0 {
            return Ok(());
        }
        let (qps, burst) = (self.settings.qps, self.burst());
        let mut buckets = lock(&self.buckets);
        if !buckets.contains_key(key) && buckets.len() >= MAX_TRACKED_CLIENTS {
            buckets.retain(|_, b| b.tokens + now.duration_since(b.updated).as_secs_f64() * qps < burst);
            if buckets.len() >= MAX_TRACKED_CLIENTS {
                return Ok(());
            }
        }
        let b = buckets.entry(key.clone()).or_insert(Bucket { tokens: burst, updated: now });
        b.tokens = (b.tokens + now.saturating_duration_since(b.updated).as_secs_f64() * qps).min(burst);
        b.updated = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            return Ok(());
        }
        let wait = ((1.0 - b.tokens) / qps).ceil().max(1.0);
        Err(too_many(wait as u32))
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

    #[test]
    fn token_bucket_allows_the_burst_then_the_rate() {
        let l = ClientLimits::new(ClientLimitSettings { qps: 2.0, burst: 3, max_watches: 0 });
        let t0 = Instant::now();
        for _ in 0..3 {
            l.check_rate(&user("a"), t0).expect("within the burst");
        }
        let err = l.check_rate(&user("a"), t0).expect_err("burst used up");
        assert_eq!(err.status_code(), 429);
        assert_eq!(err.retry_after(), Some(1));
        l.check_rate(&user("b"), t0).expect("other clients are not affected");
        // Half a second at 2 qps gives one token back.
        l.check_rate(&user("a"), t0 + Duration::from_millis(500)).expect("refilled");
        assert!(l.check_rate(&user("a"), t0 + Duration::from_millis(500)).is_err());
    }

    #[test]
    fn slow_rates_say_how_long_to_wait() {
        let l = ClientLimits::new(ClientLimitSettings { qps: 0.1, burst: 1, max_watches: 0 });
        let t0 = Instant::now();
        l.check_rate(&user("a"), t0).expect("first");
        assert_eq!(l.check_rate(&user("a"), t0).expect_err("limited").retry_after(), Some(10));
    }

    #[test]
    fn off_by_default() {
        let l = ClientLimits::new(ClientLimitSettings::default());
        let t0 = Instant::now();
        for _ in 0..1000 {
            l.check_rate(&user("a"), t0).expect("no rate limit");
        }
        let slots: Vec<_> = (0..1000).map(|_| l.begin_watch(&user("a")).expect("no watch limit")).collect();
        assert!(slots.iter().all(Option::is_none));
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

    #[test]
    fn the_bucket_map_stays_bounded() {
        let l = ClientLimits::new(ClientLimitSettings { qps: 1.0, burst: 1, max_watches: 0 });
        let t0 = Instant::now();
        for i in 0..(MAX_TRACKED_CLIENTS + 100) {
            let _ = l.check_rate(&ClientKey::User(format!("u{i}")), t0);
        }
        assert!(lock(&l.buckets).len() <= MAX_TRACKED_CLIENTS);
    }
}
