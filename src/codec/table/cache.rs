//! Rows computed once per object version and shared by every request and watcher of one kache.
//!
//! A row is a pure function of (printer, object bytes), and an object version's bytes never change, so
//! the memo is keyed by the printer, the object's uid and its resourceVersion. It is bounded by the bytes
//! its rows hold; the least recently used rows go first. It counts its lookups ([`RowCache::lookups`]:
//! `kache_table_rows_total{result=hit|miss}`) and reports its weight ([`RowCache::weighted_bytes`]:
//! `kache_table_row_cache_bytes`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::printers::Printer;
use super::row::Row;
use crate::store::Object;

/// Bytes of rows kept at most: ~100 k pod rows (about 0.6 KiB each), a large cluster's worth.
pub(crate) const ROW_CACHE_BYTES: u64 = 64 * 1024 * 1024;

type Key = (Printer, Box<str>, u64);

/// The row cache of one kache.
pub(crate) struct RowCache {
    rows: moka::sync::Cache<Key, Arc<Row>>,
    /// Lookups answered from the cache, and rows printed.
    hits: AtomicU64,
    misses: AtomicU64,
}

impl Default for RowCache {
    fn default() -> Self {
        RowCache::with_max_bytes(ROW_CACHE_BYTES)
    }
}

impl RowCache {
    pub(crate) fn with_max_bytes(max_bytes: u64) -> Self {
        let rows = moka::sync::Cache::builder()
            .max_capacity(max_bytes)
            .weigher(|k: &Key, r: &Arc<Row>| (k.1.len() + 48 + r.heap_bytes()).try_into().unwrap_or(u32::MAX))
            .build();
        RowCache { rows, hits: AtomicU64::new(0), misses: AtomicU64::new(0) }
    }

    /// The row of `object`, from the cache or computed with `compute` (and kept).
    pub(crate) fn row(&self, printer: Printer, object: &Object, compute: impl FnOnce() -> Row) -> Arc<Row> {
        let key = (printer, object.uid.clone(), object.resource_version);
        if let Some(hit) = self.rows.get(&key) {
            self.hits.fetch_add(1, Relaxed);
            return hit;
        }
        self.misses.fetch_add(1, Relaxed);
        let row = Arc::new(compute());
        self.rows.insert(key, row.clone());
        row
    }

    /// (hits, misses) so far.
    pub(crate) fn lookups(&self) -> (u64, u64) {
        (self.hits.load(Relaxed), self.misses.load(Relaxed))
    }

    /// The bytes the cache holds now (after its pending inserts and evictions, which moka applies lazily):
    /// `kache_table_row_cache_bytes`, read at scrape time.
    pub(crate) fn weighted_bytes(&self) -> u64 {
        self.rows.run_pending_tasks();
        self.rows.weighted_size()
    }
}
