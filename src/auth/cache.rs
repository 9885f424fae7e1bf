//! A bounded cache with a time-to-live per entry, for authentication and authorization decisions, over
//! `moka` (concurrent, O(1), TinyLFU admission and eviction).
//!
//! Bounded by entry count. TinyLFU admits a new key only when it is likely to be used more than the entry it
//! would evict, so a flood of distinct junk tokens cannot push out the decisions real clients keep using.
//! Lookups never extend an entry's life: a revoked permission takes effect at most one TTL after it was
//! cached. Expiry is checked against the caller's clock (`now`, kache's one pausable clock) on every read, and
//! moka drops expired entries on its own (on its own clock: that only frees memory sooner or later).

use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

use moka::Expiry;
use moka::sync::Cache;

#[derive(Clone)]
struct Entry<V> {
    value: V,
    expires: Instant,
    ttl: Duration,
}

/// Each entry lives for its own TTL from its (last) insertion; reads change nothing.
struct PerEntry;

impl<K, V> Expiry<K, Entry<V>> for PerEntry {
    fn expire_after_create(&self, _key: &K, value: &Entry<V>, _now: std::time::Instant) -> Option<Duration> {
        Some(value.ttl)
    }

    fn expire_after_update(
        &self,
        _key: &K,
        value: &Entry<V>,
        _now: std::time::Instant,
        _remaining: Option<Duration>,
    ) -> Option<Duration> {
        Some(value.ttl)
    }
}

/// A bounded TTL cache shared between requests.
pub struct TtlCache<K, V> {
    inner: Cache<K, Entry<V>>,
}

// === impl TtlCache ===

impl<K, V> TtlCache<K, V>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// A cache of at most `capacity` entries (at least one).
    pub fn new(capacity: usize) -> Self {
        let capacity = u64::try_from(capacity.max(1)).unwrap_or(u64::MAX);
        Self { inner: Cache::builder().max_capacity(capacity).expire_after(PerEntry).build() }
    }

    /// The cached value, if present and not expired at `now`.
    pub fn get(&self, key: &K, now: Instant) -> Option<V> {
        let entry = self.inner.get(key)?;
        if entry.expires > now {
            return Some(entry.value);
        }
        self.inner.invalidate(key);
        None
    }

    /// Caches `value` for `ttl` from `now`; a zero TTL caches nothing.
    pub fn insert(&self, key: K, value: V, ttl: Duration, now: Instant) {
        if ttl.is_zero() {
            return;
        }
        self.inner.insert(key, Entry { value, expires: now + ttl, ttl });
    }

    /// Number of entries, after pending evictions and expirations are applied.
    pub fn len(&self) -> usize {
        self.inner.run_pending_tasks();
        usize::try_from(self.inner.entry_count()).unwrap_or(usize::MAX)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_after_their_ttl() {
        let c = TtlCache::new(4);
        let t0 = Instant::now();
        c.insert("a", 1, Duration::from_secs(10), t0);
        assert_eq!(c.get(&"a", t0 + Duration::from_secs(9)), Some(1));
        assert_eq!(c.get(&"a", t0 + Duration::from_secs(10)), None);
        assert!(c.is_empty(), "an expired entry is dropped when read");
    }

    #[test]
    fn zero_ttl_caches_nothing() {
        let c = TtlCache::new(4);
        c.insert("a", 1, Duration::ZERO, Instant::now());
        assert!(c.is_empty());
    }

    #[test]
    fn bounded_and_a_flood_does_not_evict_what_is_used() {
        let c = TtlCache::new(100);
        let t0 = Instant::now();
        for i in 0..50u32 {
            c.insert(i, 'k', Duration::from_secs(100), t0);
        }
        // The kept entries are in use.
        for _ in 0..5 {
            for i in 0..50u32 {
                assert_eq!(c.get(&i, t0), Some('k'));
            }
        }
        // A flood of one-off keys.
        for i in 1_000..21_000u32 {
            c.insert(i, 'x', Duration::from_secs(100), t0);
        }
        assert!(c.len() <= 100, "bounded: {}", c.len());
        let kept = (0..50u32).filter(|i| c.get(i, t0).is_some()).count();
        assert!(kept >= 45, "entries in use survive a flood of one-off keys ({kept} of 50)");
    }

    #[test]
    fn reinserting_refreshes_value_and_ttl() {
        let c = TtlCache::new(2);
        let t0 = Instant::now();
        c.insert("k", 1, Duration::from_secs(5), t0);
        c.insert("k", 2, Duration::from_secs(5), t0 + Duration::from_secs(4));
        assert_eq!(c.get(&"k", t0 + Duration::from_secs(8)), Some(2));
    }
}
