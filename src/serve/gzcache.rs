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
//!   recently used evicted first); an entry unused for [`IDLE_EVICT`] expires, so a snapshot nobody lists
//!   any more does not stay pinned. The entries are kept by [`SnapshotCache`] (moka); the compressions in
//!   progress, one per key, beside it. Only lists at their resource's current snapshot
//!   are cached, so once a resource is listed at a newer snapshot, its entries at older ones are dropped
//!   (under churn: every other namespace's entry of that resource).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

use bytes::Bytes;
use tokio::sync::OnceCell;

use crate::codec::gzip::GzipChunks;
use crate::metrics::{GzipCacheResult, Metrics};
use crate::serve::admit;
use crate::serve::snapcache::{Kind, SnapshotCache};

/// At most this many (resource, namespace, view) entries.
pub(crate) const MAX_ENTRIES: usize = 256;
/// At most this many compressed bytes in all.
pub(crate) const MAX_BYTES: usize = 256 << 20;
/// An entry nobody asked for in this long is dropped: informers relist on their resync period (minutes) or
/// after a watch failure, and a list whose snapshot moved on is never served from the entry again.
pub(crate) const IDLE_EVICT: Duration = Duration::from_secs(120);

/// A compression of one key at one snapshot, awaited by every request for it.
type Compression = Arc<OnceCell<Bytes>>;

/// A bounded cache of compressed list bodies with coalesced, bounded compression.
pub struct GzipCache {
    /// The finished compressions.
    entries: SnapshotCache<Bytes>,
    /// Per key, the snapshot being compressed (at most [`MAX_ENTRIES`] keys; one whose requests all went
    /// away stays until the next request of its key takes it over or a newer snapshot replaces it).
    compressing: Mutex<HashMap<String, (u64, Compression)>>,
    metrics: Metrics,
}

impl Default for GzipCache {
    fn default() -> Self {
        Self::new(MAX_BYTES, Metrics::default())
    }
}

// === impl GzipCache ===

impl GzipCache {
    /// A cache holding at most `max_bytes` compressed bytes, counting into `metrics`.
    pub(crate) fn new(max_bytes: usize, metrics: Metrics) -> Self {
        let entries = SnapshotCache::new(Kind::Gzip, metrics.clone(), max_bytes, MAX_ENTRIES, IDLE_EVICT);
        Self { entries, compressing: Mutex::default(), metrics }
    }

    /// A cache holding at most `max_bytes` compressed bytes, with metrics of its own.
    #[cfg(test)]
    pub(crate) fn with_max_bytes(max_bytes: usize) -> Self {
        Self::new(max_bytes, Metrics::default())
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
        if let Some(body) = self.entries.get(key, rv) {
            self.metrics.gzip_cache(GzipCacheResult::Hit);
            return body;
        }
        let cell = {
            let mut compressing = self.lock();
            match compressing.get(key) {
                Some((at, cell)) if *at == rv => {
                    self.metrics.gzip_cache(GzipCacheResult::Coalesced);
                    Some(cell.clone())
                }
                // An older snapshot than the one compressing or cached (a slow request), or than one its
                // resource was listed at (dead on arrival): compress, do not cache.
                Some((at, _)) if *at > rv => None,
                _ if self.entries.is_outdated(key, rv) => None,
                _ => {
                    if compressing.len() >= MAX_ENTRIES && !compressing.contains_key(key) {
                        compressing.retain(|_, (_, cell)| Arc::strong_count(cell) > 1);
                    }
                    let cell = Compression::default();
                    compressing.insert(key.to_owned(), (rv, cell.clone()));
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
            self.entries.insert(key, rv, body.clone(), body.len());
            let mut compressing = self.lock();
            if compressing.get(key).is_some_and(|(_, c)| Arc::ptr_eq(c, &cell)) {
                compressing.remove(key);
            }
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

    /// Compressed bytes held.
    pub fn bytes(&self) -> usize {
        self.entries.bytes()
    }

    /// Entries held (compressed).
    pub fn entries(&self) -> usize {
        self.entries.entries()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, (u64, Compression)>> {
        self.compressing.lock().expect("gzip cache lock poisoned")
    }
}

#[cfg(test)]
mod tests;
