//! Rows computed once per object version and shared by every request and watcher.
//!
//! A row is a pure function of (printer, object bytes), and an object version's bytes never change, so
//! the memo is keyed by the printer, the object's uid and its resourceVersion. It is process-wide (like
//! an interner: invisible to semantics) and bounded by the bytes its rows hold; the least recently used
//! rows go first. It counts its lookups ([`lookups`]: `kache_table_rows_total{result=hit|miss}`) and
//! reports its weight ([`weighted_bytes`]: `kache_table_row_cache_bytes`); every kache in the process
//! mirrors these at scrape time, like the cache they describe.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

use super::printers::Printer;
use super::row::Row;
use crate::store::Object;

/// Bytes of rows kept at most: ~100 k pod rows (about 0.6 KiB each), a large cluster's worth.
pub(crate) const ROW_CACHE_BYTES: u64 = 64 * 1024 * 1024;

type Key = (Printer, Box<str>, u64);

fn cache() -> &'static moka::sync::Cache<Key, Arc<Row>> {
    static CACHE: OnceLock<moka::sync::Cache<Key, Arc<Row>>> = OnceLock::new();
    CACHE.get_or_init(|| {
        moka::sync::Cache::builder()
            .max_capacity(ROW_CACHE_BYTES)
            .weigher(|k: &Key, r: &Arc<Row>| (k.1.len() + 48 + r.heap_bytes()).try_into().unwrap_or(u32::MAX))
            .build()
    })
}

/// The row of `object`, from the cache or computed (and kept).
pub fn row(printer: Printer, object: &Object) -> Arc<Row> {
    let key = (printer, object.uid.clone(), object.resource_version);
    if let Some(hit) = cache().get(&key) {
        HITS.fetch_add(1, Relaxed);
        return hit;
    }
    MISSES.fetch_add(1, Relaxed);
    let row = Arc::new(compute(printer, &object.raw));
    cache().insert(key, row.clone());
    row
}

/// Computes a row without the cache (bookmarks and departures, whose bytes are not a stored version).
pub fn compute(printer: Printer, raw: &[u8]) -> Row {
    let value: serde_json::Value = serde_json::from_slice(raw).unwrap_or_default();
    printer.row(&value)
}

/// Lookups answered from the cache and rows printed, since the process started.
static HITS: AtomicU64 = AtomicU64::new(0);
static MISSES: AtomicU64 = AtomicU64::new(0);

/// (hits, misses) so far.
pub(crate) fn lookups() -> (u64, u64) {
    (HITS.load(Relaxed), MISSES.load(Relaxed))
}

/// The bytes the cache holds now (after its pending inserts and evictions, which moka applies lazily):
/// `kache_table_row_cache_bytes`, read at scrape time.
pub(crate) fn weighted_bytes() -> u64 {
    cache().run_pending_tasks();
    cache().weighted_size()
}
