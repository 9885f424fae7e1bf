//! The compressed form of hot full lists, kept per snapshot so repeated lists are not recompressed.
//!
//! Only unfiltered, unpaginated lists (a whole resource or a whole namespace, as informers' RV=0 relists and
//! `kubectl get -A` ask for) are cached: their bytes depend only on the snapshot and the view. One entry per
//! (resource, namespace, view) holds one snapshot's compressed body; a newer snapshot replaces it.
//!
//! Invariants:
//! - **One compression per (key, snapshot).** Requests that find the entry still being compressed await that
//!   compression (`tokio::sync::OnceCell`); if its request goes away, the next waiter takes over.
//! - **Compression never runs on a runtime worker**: in batches on the blocking pool, under the same
//!   producer permits as every other heavy body ([`admit::collect`]), so it takes turns with them.
//! - **Bounded and not stale**: at most [`MAX_ENTRIES`] entries and [`MAX_BYTES`] compressed bytes (least
//!   recently used evicted first); an entry unused for [`IDLE_EVICT`] is dropped at the next access, so a
//!   snapshot nobody lists any more does not stay pinned. Only lists at their resource's current snapshot
//!   are cached, so once a resource is listed at a newer snapshot, its entries at older ones are dropped
//!   (under churn: every other namespace's entry of that resource).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

use bytes::Bytes;
use tokio::sync::OnceCell;

use crate::codec::gzip::GzipChunks;
use crate::metrics::{GzipCacheResult, GzipEviction, Metrics};
use crate::serve::admit;
use crate::serve::newest::Newest;

/// At most this many (resource, namespace, view) entries.
pub(crate) const MAX_ENTRIES: usize = 256;
/// At most this many compressed bytes in all.
pub(crate) const MAX_BYTES: usize = 256 << 20;
/// An entry nobody asked for in this long is dropped: informers relist on their resync period (minutes) or
/// after a watch failure, and a list whose snapshot moved on is never served from the entry again.
pub(crate) const IDLE_EVICT: Duration = Duration::from_secs(120);

/// One cached snapshot of one key.
struct Entry {
    rv: u64,
    cell: Arc<OnceCell<Bytes>>,
    /// Compressed bytes accounted for this entry (0 while compressing).
    bytes: usize,
    last_used: Instant,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    /// Per resource, the newest snapshot listed: older entries of it are dead. At most [`MAX_ENTRIES`]
    /// resources.
    newest: Newest,
    bytes: usize,
    /// The kache's metrics (here so the `…_locked` helpers can count).
    metrics: Metrics,
}

/// A bounded cache of compressed list bodies with coalesced, bounded compression.
pub struct GzipCache {
    inner: Mutex<Inner>,
    max_bytes: usize,
    metrics: Metrics,
}

impl Default for GzipCache {
    fn default() -> Self {
        Self::with_max_bytes(MAX_BYTES)
    }
}

// === impl GzipCache ===

impl GzipCache {
    /// A cache holding at most `max_bytes` compressed bytes.
    pub(crate) fn with_max_bytes(max_bytes: usize) -> Self {
        Self { inner: Mutex::default(), max_bytes, metrics: Metrics::default() }
    }

    /// Counts into the kache's `metrics` instead of an instance of its own.
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.inner.get_mut().expect("gzip cache lock poisoned").metrics = metrics.clone();
        self.metrics = metrics;
        self
    }

    /// The gzip body of `chunks` (the list of `key` at snapshot `rv`): cached, awaited from a concurrent
    /// request's compression, or compressed here (on the kache's heavy-body `producers`) and cached.
    pub(crate) async fn get_or_compress<I>(
        &self,
        producers: &admit::Producers,
        key: &str,
        rv: u64,
        chunks: I,
    ) -> Bytes
    where
        I: Iterator<Item = Bytes> + Send + 'static,
    {
        let now = Instant::now();
        let cell = {
            let mut inner = self.lock();
            evict_idle_locked(&mut inner, now);
            let i = &mut *inner;
            for old in i.newest.advance(key, rv, MAX_ENTRIES, &mut i.entries, |e| e.rv) {
                remove_accounted_locked(i, &old, GzipEviction::Replaced);
            }
            let dead = inner.newest.is_older(key, rv);
            match inner.entries.get_mut(key) {
                Some(e) if e.rv == rv => {
                    e.last_used = now;
                    self.metrics.gzip_cache(if e.cell.initialized() {
                        GzipCacheResult::Hit
                    } else {
                        GzipCacheResult::Coalesced
                    });
                    Some(e.cell.clone())
                }
                // An older snapshot than the cached one (a slow request): compress, do not cache.
                Some(e) if e.rv > rv => None,
                // Older than a snapshot its resource was listed at: dead on arrival, do not cache.
                _ if dead => None,
                _ => {
                    if let Some(old) = inner.entries.remove(key) {
                        remove_accounted_locked(&mut inner, &old, GzipEviction::Replaced);
                    } else if inner.entries.len() >= MAX_ENTRIES {
                        evict_lru_locked(&mut inner, key);
                    }
                    let cell = Arc::new(OnceCell::new());
                    let entry = Entry { rv, cell: cell.clone(), bytes: 0, last_used: now };
                    inner.entries.insert(key.to_owned(), entry);
                    self.metrics.gzip_cache_size(0, 1);
                    self.metrics.gzip_cache(GzipCacheResult::Miss);
                    Some(cell)
                }
            }
        };
        let Some(cell) = cell else {
            self.metrics.gzip_cache(GzipCacheResult::Bypass);
            return self.compress(producers, chunks).await;
        };
        let mut compressed_here = false;
        let body = cell
            .get_or_init(|| {
                compressed_here = true;
                self.compress(producers, chunks)
            })
            .await
            .clone();
        if compressed_here {
            self.account(key, &cell, body.len());
        }
        body
    }

    /// Compresses in batches on the heavy-body producers ([`admit::collect`]): a whole-list compression
    /// takes its turn with the streamed heavy bodies.
    async fn compress<I>(&self, producers: &admit::Producers, chunks: I) -> Bytes
    where
        I: Iterator<Item = Bytes> + Send + 'static,
    {
        self.metrics.compression(1, None);
        let started = Instant::now();
        let compressed = admit::collect(producers, GzipChunks::new(chunks)).await;
        self.metrics.compression(-1, Some(started.elapsed()));
        compressed.expect("compressing bytes into a Vec does not panic")
    }

    /// Accounts the bytes of a finished compression to its entry (if it is still the cached one) and
    /// evicts least recently used entries until the cache fits its byte bound.
    fn account(&self, key: &str, cell: &Arc<OnceCell<Bytes>>, len: usize) {
        let mut inner = self.lock();
        let Some(e) = inner.entries.get_mut(key).filter(|e| Arc::ptr_eq(&e.cell, cell)) else { return };
        e.bytes = len;
        inner.bytes += len;
        self.metrics.gzip_cache_size(len as i64, 0);
        while inner.bytes > self.max_bytes {
            // Another entry first; this one last (alone, it is simply too big to keep).
            if !evict_lru_locked(&mut inner, key) {
                if let Some(own) = inner.entries.remove(key) {
                    remove_accounted_locked(&mut inner, &own, GzipEviction::Size);
                }
                break;
            }
        }
    }

    /// Compressed bytes held.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Entries held (compressed or being compressed).
    pub fn entries(&self) -> usize {
        self.lock().entries.len()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("gzip cache lock poisoned")
    }
}

impl Drop for GzipCache {
    fn drop(&mut self) {
        let inner = self.lock();
        inner.metrics.gzip_cache_size(-(inner.bytes as i64), -(inner.entries.len() as i64));
    }
}

/// Un-accounts an entry already removed from the map.
fn remove_accounted_locked(inner: &mut Inner, old: &Entry, reason: GzipEviction) {
    inner.bytes -= old.bytes;
    inner.metrics.gzip_cache_size(-(old.bytes as i64), -1);
    inner.metrics.gzip_evicted(reason);
}

/// Drops entries unused for [`IDLE_EVICT`] (at most [`MAX_ENTRIES`] to look at).
fn evict_idle_locked(inner: &mut Inner, now: Instant) {
    let idle: Vec<String> = inner
        .entries
        .iter()
        .filter(|(_, e)| now.duration_since(e.last_used) >= IDLE_EVICT)
        .map(|(k, _)| k.clone())
        .collect();
    for k in idle {
        if let Some(old) = inner.entries.remove(&k) {
            remove_accounted_locked(inner, &old, GzipEviction::Idle);
        }
    }
}

/// Evicts the least recently used entry other than `keep`; false when there is none.
fn evict_lru_locked(inner: &mut Inner, keep: &str) -> bool {
    let Some(victim) = inner
        .entries
        .iter()
        .filter(|(k, _)| k.as_str() != keep)
        .min_by_key(|(_, e)| e.last_used)
        .map(|(k, _)| k.clone())
    else {
        return false;
    };
    let old = inner.entries.remove(&victim).expect("the key was just found");
    remove_accounted_locked(inner, &old, GzipEviction::Size);
    true
}

#[cfg(test)]
mod tests;
