//! The store shared by the list caches (gzip bodies, uncompressed bodies): per key one snapshot's value, on
//! `moka` (concurrent, O(1) per access, least recently used evicted first, idle entries expired).
//!
//! Invariants:
//! - **Bounded in bytes and in entries**: an entry weighs its bytes, but at least `max_bytes / max_entries`,
//!   so the one byte bound of the moka cache holds both: at most `max_bytes` value bytes and at most
//!   `max_entries` entries. A value over the byte bound is not kept at all.
//! - **Not stale**: an entry unused for `idle` is expired; a newer snapshot of a key replaces the older one,
//!   an older never replaces a newer. Only lists at their resource's current snapshot are kept, so once a
//!   resource is looked up at a newer snapshot, its entries at older ones are removed ([`Newest`]).
//! - **Every bound has its figure**: the bytes and entries held are kept from the inserts and moka's removal
//!   listener (gauges `…_bytes`, `…_entries`), each removal counted by reason (`…_evictions_total`).
//!   moka applies evictions lazily: [`SnapshotCache::bytes`] and [`SnapshotCache::entries`] run its pending
//!   work first, so they are exact when read.

use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use moka::notification::RemovalCause;
use moka::ops::compute::Op;
use moka::policy::EvictionPolicy;
use moka::sync::Cache;

use crate::metrics::{GzipEviction, Metrics};
use crate::serve::newest::{Newest, resource_of};

/// Resources whose newest snapshot is remembered, at most (forgotten all at once beyond: a forgotten
/// resource only keeps its dead entries until they are evicted or expire).
pub(crate) const NEWEST_RESOURCES: usize = 256;

/// Which cache: the metrics it counts into.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    Gzip,
    Body,
}

impl Kind {
    fn size(self, metrics: &Metrics, bytes: i64, entries: i64) {
        match self {
            Kind::Gzip => metrics.gzip_cache_size(bytes, entries),
            Kind::Body => metrics.body_cache_size(bytes, entries),
        }
    }

    fn evicted(self, metrics: &Metrics, reason: GzipEviction) {
        match self {
            Kind::Gzip => metrics.gzip_evicted(reason),
            Kind::Body => metrics.body_cache_evicted(reason),
        }
    }
}

/// One snapshot's value of one key.
#[derive(Clone)]
struct Slot<V> {
    rv: u64,
    value: V,
    len: usize,
    weight: u32,
}

/// Bytes and entries held (from the inserts and the removal listener).
#[derive(Default)]
struct Held {
    bytes: AtomicI64,
    entries: AtomicI64,
}

/// A bounded cache of one snapshot's value per key.
pub(crate) struct SnapshotCache<V: Clone + Send + Sync + 'static> {
    entries: Cache<String, Slot<V>>,
    /// Per resource, the newest snapshot looked up at. At most [`NEWEST_RESOURCES`] resources.
    newest: Mutex<Newest>,
    held: Arc<Held>,
    kind: Kind,
    metrics: Metrics,
    max_bytes: usize,
    max_entries: usize,
}

// === impl SnapshotCache ===

impl<V: Clone + Send + Sync + 'static> SnapshotCache<V> {
    /// At most `max_bytes` value bytes in at most `max_entries` entries, each dropped after `idle` unused.
    pub(crate) fn new(
        kind: Kind,
        metrics: Metrics,
        max_bytes: usize,
        max_entries: usize,
        idle: Duration,
    ) -> Self {
        let held = Arc::new(Held::default());
        let (h, m) = (held.clone(), metrics.clone());
        let entries = Cache::builder()
            .max_capacity(max_bytes as u64)
            .weigher(|_: &String, s: &Slot<V>| s.weight)
            .eviction_policy(EvictionPolicy::lru())
            .time_to_idle(idle)
            .eviction_listener(move |_, s: Slot<V>, cause| {
                h.bytes.fetch_sub(s.len as i64, Relaxed);
                h.entries.fetch_sub(1, Relaxed);
                kind.size(&m, -(s.len as i64), -1);
                let reason = match cause {
                    RemovalCause::Expired => GzipEviction::Idle,
                    RemovalCause::Size => GzipEviction::Size,
                    RemovalCause::Explicit | RemovalCause::Replaced => GzipEviction::Replaced,
                };
                kind.evicted(&m, reason);
            })
            .build();
        Self { entries, newest: Mutex::default(), held, kind, metrics, max_bytes, max_entries }
    }

    /// Whether a value of `len` bytes can be kept at all.
    pub(crate) fn fits(&self, len: usize) -> bool {
        len <= self.max_bytes
    }

    /// The value of `key` at `rv`, if kept. A lookup at a newer snapshot than any of its resource's first
    /// removes that resource's entries at older ones (dead: never served again).
    pub(crate) fn get(&self, key: &str, rv: u64) -> Option<V> {
        self.observe(key, rv);
        self.entries.get(key).filter(|s| s.rv == rv).map(|s| s.value)
    }

    /// Whether a value of `key` at `rv` would not be kept: a newer snapshot of the key is, or its resource
    /// was looked up at a newer one.
    pub(crate) fn is_outdated(&self, key: &str, rv: u64) -> bool {
        self.lock_newest().is_older(key, rv) || self.entries.get(key).is_some_and(|s| s.rv > rv)
    }

    /// Keeps `value` (`len` bytes) as `key` at `rv`, unless it is outdated or over the byte bound; evicts
    /// least recently used entries as needed.
    pub(crate) fn insert(&self, key: &str, rv: u64, value: V, len: usize) {
        if !self.fits(len) || self.lock_newest().is_older(key, rv) {
            return;
        }
        let floor = self.max_bytes / self.max_entries.max(1);
        let weight = u32::try_from(len.max(floor)).unwrap_or(u32::MAX);
        let slot = Slot { rv, value, len, weight };
        let (held, kind, metrics) = (&self.held, self.kind, &self.metrics);
        self.entries.entry_by_ref(key).and_compute_with(|cur| match cur {
            Some(e) if e.value().rv >= rv => Op::Nop,
            _ => {
                held.bytes.fetch_add(len as i64, Relaxed);
                held.entries.fetch_add(1, Relaxed);
                kind.size(metrics, len as i64, 1);
                Op::Put(slot)
            }
        });
        // Evict now, not at moka's next maintenance: the bound holds as soon as the entry is in.
        self.entries.run_pending_tasks();
    }

    /// Records a lookup of `key` at `rv`; when newer than its resource's newest, removes the resource's
    /// entries at older snapshots.
    fn observe(&self, key: &str, rv: u64) {
        if !self.lock_newest().raise(key, rv, NEWEST_RESOURCES) {
            return;
        }
        let resource = resource_of(key);
        let dead: Vec<Arc<String>> = self
            .entries
            .iter()
            .filter(|(k, s)| s.rv < rv && resource_of(k) == resource)
            .map(|(k, _)| k)
            .collect();
        for k in dead {
            self.entries.entry_by_ref(k.as_str()).and_compute_with(|cur| match cur {
                Some(e) if e.value().rv < rv => Op::Remove,
                _ => Op::Nop,
            });
        }
    }

    /// Value bytes held (after moka's pending evictions).
    pub(crate) fn bytes(&self) -> usize {
        self.entries.run_pending_tasks();
        self.held.bytes.load(Relaxed).max(0) as usize
    }

    /// Entries held (after moka's pending evictions).
    pub(crate) fn entries(&self) -> usize {
        self.entries.run_pending_tasks();
        self.held.entries.load(Relaxed).max(0) as usize
    }

    /// Resources whose newest snapshot is remembered.
    #[cfg(test)]
    pub(crate) fn resources(&self) -> usize {
        self.lock_newest().len()
    }

    fn lock_newest(&self) -> std::sync::MutexGuard<'_, Newest> {
        self.newest.lock().expect("list cache lock poisoned")
    }
}

impl<V: Clone + Send + Sync + 'static> Drop for SnapshotCache<V> {
    fn drop(&mut self) {
        self.entries.run_pending_tasks();
        let (bytes, entries) = (self.held.bytes.load(Relaxed), self.held.entries.load(Relaxed));
        self.kind.size(&self.metrics, -bytes, -entries);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_and_entry_bounds_hold_under_many_inserts() {
        let max_bytes = 64 * 1024;
        let c: SnapshotCache<usize> = SnapshotCache::new(Kind::Gzip, Metrics::default(), max_bytes, 16, IDLE);
        for i in 0..10_000usize {
            // Bodies from 1 byte to 9 KiB, on keys of 50 resources, snapshots moving on.
            let len = (i * 7919) % (9 * 1024) + 1;
            c.insert(&format!("r{}|ns-{}", i % 50, i % 97), (i / 500) as u64, i, len);
            if i % 100 == 0 {
                assert!(c.bytes() <= max_bytes, "{} bytes held after {i} inserts", c.bytes());
                assert!(c.entries() <= 16, "{} entries held after {i} inserts", c.entries());
            }
        }
        assert!(c.bytes() <= max_bytes && c.entries() <= 16);
        let rendered = c.metrics.render();
        let gauge = |name: &str| {
            rendered
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        };
        assert_eq!(gauge("kache_gzip_cache_bytes "), Some(c.bytes() as f64), "{rendered}");
        assert_eq!(gauge("kache_gzip_cache_entries "), Some(c.entries() as f64), "{rendered}");
    }

    #[test]
    fn a_value_over_the_byte_bound_is_not_kept() {
        let c: SnapshotCache<u8> = SnapshotCache::new(Kind::Body, Metrics::default(), 10, 4, IDLE);
        c.insert("a", 1, 0, 11);
        assert_eq!((c.get("a", 1), c.entries(), c.bytes()), (None, 0, 0));
    }

    #[test]
    fn entries_unused_for_the_idle_time_expire() {
        // moka keeps time on its own clock (not tokio's): a short idle time, waited out.
        let idle = Duration::from_millis(20);
        let c: SnapshotCache<u8> = SnapshotCache::new(Kind::Gzip, Metrics::default(), 1 << 20, 8, idle);
        c.insert("a", 1, 7, 3);
        assert_eq!(c.entries(), 1);
        std::thread::sleep(idle * 3);
        assert_eq!(c.get("a", 1), None);
        assert_eq!((c.entries(), c.bytes()), (0, 0));
        let rendered = c.metrics.render();
        assert!(rendered.contains("kache_gzip_cache_evictions_total{reason=\"idle\"} 1"), "{rendered}");
    }

    /// The hot path: a hit on a warm cache (`cargo test -p kache --lib serve::snapcache -- --ignored
    /// --nocapture`).
    #[test]
    #[ignore = "a measurement, not a check"]
    fn measure_hits() {
        let c: SnapshotCache<usize> =
            SnapshotCache::new(Kind::Gzip, Metrics::default(), 256 << 20, 256, IDLE);
        let keys: Vec<String> = (0..48).map(|i| format!("r{i}|ns|Full|json")).collect();
        for (i, k) in keys.iter().enumerate() {
            c.insert(k, 5, i, 1024);
        }
        let n = 1_000_000;
        let started = std::time::Instant::now();
        let mut found = 0;
        for i in 0..n {
            found += usize::from(c.get(&keys[i % keys.len()], 5).is_some());
        }
        let took = started.elapsed();
        assert_eq!(found, n);
        println!("snapcache hit: {:.0} ns per lookup", took.as_nanos() as f64 / n as f64);
    }

    const IDLE: Duration = Duration::from_secs(120);
}
