//! Recording for reads from memory: the read byte budget, whole-list compression and the gzip cache.
//!
//! Gauges move by deltas, not absolute values: several kaches in one test process share the series, and each
//! adds only its own share.

use std::time::Duration;

use super::labels::{GzipCacheResult, GzipEviction};
use super::names::*;
use super::recorder::{counter, gauge, histogram, label};

/// A memory-served list was admitted (`bytes` > 0 charged) or finished (negative).
pub fn memory_read(reads: i64, bytes: i64) {
    gauge(MEMORY_READS_IN_FLIGHT, vec![]).increment(reads as f64);
    gauge(MEMORY_READ_BYTES_IN_FLIGHT, vec![]).increment(bytes as f64);
}

/// How the gzip cache answered one request.
pub fn gzip_cache(result: GzipCacheResult) {
    counter(GZIP_CACHE_TOTAL, vec![label("result", result.as_str())]).increment(1);
}

/// The gzip cache's size changed by `bytes` and `entries`.
pub fn gzip_cache_size(bytes: i64, entries: i64) {
    gauge(GZIP_CACHE_BYTES, vec![]).increment(bytes as f64);
    gauge(GZIP_CACHE_ENTRIES, vec![]).increment(entries as f64);
}

/// An entry left the gzip cache.
pub fn gzip_evicted(reason: GzipEviction) {
    counter(GZIP_CACHE_EVICTIONS_TOTAL, vec![label("reason", reason.as_str())]).increment(1);
}

/// A whole-list compression started (1) or ended (-1, with its duration).
pub fn compression(delta: i64, took: Option<Duration>) {
    gauge(COMPRESSIONS_IN_FLIGHT, vec![]).increment(delta as f64);
    if let Some(took) = took {
        histogram(COMPRESSION_SECONDS, vec![]).record(took.as_secs_f64());
    }
}

/// A heavy body started (1) or stopped (-1) waiting for a producer permit.
pub fn heavy_bodies_waiting(delta: i64) {
    gauge(HEAVY_BODIES_WAITING, vec![]).increment(delta as f64);
}

/// A heavy body's batch started (1) or ended (-1) on the blocking pool.
pub fn heavy_bodies_producing(delta: i64) {
    gauge(HEAVY_BODIES_PRODUCING, vec![]).increment(delta as f64);
}

/// A heavy-body producer thread started (1) or ended (-1); `priority` is "lowered" or "normal".
pub fn heavy_body_threads(priority: &'static str, delta: i64) {
    gauge(HEAVY_BODY_THREADS, vec![label("priority", priority)]).increment(delta as f64);
}

/// Registers the fixed label sets at zero.
pub(crate) fn register_fixed_series() {
    for r in GzipCacheResult::ALL {
        counter(GZIP_CACHE_TOTAL, vec![label("result", r.as_str())]).increment(0);
    }
    for r in GzipEviction::ALL {
        counter(GZIP_CACHE_EVICTIONS_TOTAL, vec![label("reason", r.as_str())]).increment(0);
    }
    for p in ["lowered", "normal"] {
        gauge(HEAVY_BODY_THREADS, vec![label("priority", p)]).increment(0.0);
    }
    for g in [
        MEMORY_READS_IN_FLIGHT,
        MEMORY_READ_BYTES_IN_FLIGHT,
        GZIP_CACHE_BYTES,
        GZIP_CACHE_ENTRIES,
        COMPRESSIONS_IN_FLIGHT,
        HEAVY_BODIES_WAITING,
        HEAVY_BODIES_PRODUCING,
    ] {
        gauge(g, vec![]).increment(0.0);
    }
    // Registered before the first compression, so its buckets are exported from the start.
    let _ = histogram(COMPRESSION_SECONDS, vec![]);
}
