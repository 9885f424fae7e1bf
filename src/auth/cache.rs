//! A small bounded cache with a time-to-live per entry, for authentication and authorization decisions.
//!
//! Bounded by entry count: when full, expired entries are dropped first, then the oldest inserted ones
//! (insertion order kept in a queue). Lookups never extend an entry's life: a revoked permission takes
//! effect at most one TTL after it was cached.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

struct Entry<V> {
    value: V,
    expires: Instant,
}

struct Inner<K, V> {
    map: HashMap<K, Entry<V>>,
    /// Keys in insertion order (may hold keys already replaced or removed; skipped on eviction).
    order: VecDeque<(K, Instant)>,
}

/// A bounded TTL cache shared between requests.
pub struct TtlCache<K, V> {
    inner: Mutex<Inner<K, V>>,
    capacity: usize,
}

// === impl TtlCache ===

impl<K: Hash + Eq + Clone, V: Clone> TtlCache<K, V> {
    /// A cache of at most `capacity` entries (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            inner: Mutex::new(Inner { map: HashMap::new(), order: VecDeque::new() }),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<K, V>> {
        // A poisoned lock only means a panic elsewhere while holding it; the map is still consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached value, if present and not expired at `now`.
    pub fn get(&self, key: &K, now: Instant) -> Option<V> {
        let mut inner = self.lock();
        match inner.map.get(key) {
            Some(e) if e.expires > now => Some(e.value.clone()),
            Some(_) => {
                inner.map.remove(key);
                None
            }
            None => None,
        }
    }

    /// Caches `value` for `ttl` from `now`; a zero TTL caches nothing.
    pub fn insert(&self, key: K, value: V, ttl: Duration, now: Instant) {
        if ttl.is_zero() {
            return;
        }
        let mut inner = self.lock();
        if !inner.map.contains_key(&key) && inner.map.len() >= self.capacity {
            inner.map.retain(|_, e| e.expires > now);
            while inner.map.len() >= self.capacity {
                let Some((old, inserted)) = inner.order.pop_front() else { break };
                // Only evict the entry this queue slot stands for, not a later re-insert of the same key.
                if inner.map.get(&old).is_some_and(|e| e.expires == inserted) {
                    inner.map.remove(&old);
                }
            }
        }
        let expires = now + ttl;
        inner.map.insert(key.clone(), Entry { value, expires });
        inner.order.push_back((key, expires));
        // Keep the queue bounded too: drop slots whose entries are gone or were replaced.
        if inner.order.len() > self.capacity.saturating_mul(2) {
            let Inner { map, order } = &mut *inner;
            order.retain(|(k, at)| map.get(k).is_some_and(|e| e.expires == *at));
        }
    }

    /// Number of entries (expired ones included until touched).
    pub fn len(&self) -> usize {
        self.lock().map.len()
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
    fn bounded_evicting_expired_then_oldest() {
        let c = TtlCache::new(3);
        let t0 = Instant::now();
        c.insert(1, 'a', Duration::from_secs(1), t0);
        c.insert(2, 'b', Duration::from_secs(100), t0);
        c.insert(3, 'c', Duration::from_secs(100), t0);
        // Full; 1 has expired by now and goes first.
        let t1 = t0 + Duration::from_secs(2);
        c.insert(4, 'd', Duration::from_secs(100), t1);
        assert_eq!(c.len(), 3);
        assert_eq!(c.get(&2, t1), Some('b'));
        // Full again, nothing expired: the oldest insert (2) goes.
        c.insert(5, 'e', Duration::from_secs(100), t1);
        assert_eq!(c.len(), 3);
        assert_eq!(c.get(&2, t1), None);
        assert_eq!(c.get(&5, t1), Some('e'));
        for i in 0..1000 {
            c.insert(i, 'x', Duration::from_secs(100), t1);
        }
        assert_eq!(c.len(), 3);
        assert!(c.lock().order.len() <= 6, "the order queue stays bounded");
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
