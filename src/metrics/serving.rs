//! Recording for reads from memory: the read byte budget, whole-list compression and the gzip cache.
//!
//! Gauges move by deltas: each stage adds its own share (admitted reads, cache entries) and takes it back.

use std::time::Duration;

use super::instance::Metrics;
use super::labels::{BodyCacheResult, GzipCacheResult, GzipEviction};
use super::names::*;
use super::recorder::label;

// === impl Metrics (serving) ===

impl Metrics {
    /// A memory-served list was admitted (`bytes` > 0 charged) or finished (negative).
    pub(crate) fn memory_read(&self, reads: i64, bytes: i64) {
        self.gauge(MEMORY_READS_IN_FLIGHT, vec![]).increment(reads as f64);
        self.gauge(MEMORY_READ_BYTES_IN_FLIGHT, vec![]).increment(bytes as f64);
    }

    /// How the gzip cache answered one request.
    pub(crate) fn gzip_cache(&self, result: GzipCacheResult) {
        self.counter(GZIP_CACHE_TOTAL, vec![label("result", result.as_str())]).increment(1);
    }

    /// The gzip cache's size changed by `bytes` and `entries`.
    pub(crate) fn gzip_cache_size(&self, bytes: i64, entries: i64) {
        self.gauge(GZIP_CACHE_BYTES, vec![]).increment(bytes as f64);
        self.gauge(GZIP_CACHE_ENTRIES, vec![]).increment(entries as f64);
    }

    /// An entry left the gzip cache.
    pub(crate) fn gzip_evicted(&self, reason: GzipEviction) {
        self.counter(GZIP_CACHE_EVICTIONS_TOTAL, vec![label("reason", reason.as_str())]).increment(1);
    }

    /// How the list body cache answered one whole list.
    pub(crate) fn body_cache(&self, result: BodyCacheResult) {
        self.counter(LIST_BODY_CACHE_TOTAL, vec![label("result", result.as_str())]).increment(1);
    }

    /// The list body cache's size changed by `bytes` and `entries`.
    pub(crate) fn body_cache_size(&self, bytes: i64, entries: i64) {
        self.gauge(LIST_BODY_CACHE_BYTES, vec![]).increment(bytes as f64);
        self.gauge(LIST_BODY_CACHE_ENTRIES, vec![]).increment(entries as f64);
    }

    /// An entry left the list body cache.
    pub(crate) fn body_cache_evicted(&self, reason: GzipEviction) {
        self.counter(LIST_BODY_CACHE_EVICTIONS_TOTAL, vec![label("reason", reason.as_str())]).increment(1);
    }

    /// A whole-list compression started (1) or ended (-1, with its duration).
    pub fn compression(&self, delta: i64, took: Option<Duration>) {
        self.gauge(COMPRESSIONS_IN_FLIGHT, vec![]).increment(delta as f64);
        if let Some(took) = took {
            self.histogram(COMPRESSION_SECONDS, vec![]).record(took.as_secs_f64());
        }
    }

    /// Registers the fixed label sets at zero.
    pub(crate) fn register_serving_series(&self) {
        for r in GzipCacheResult::ALL {
            self.counter(GZIP_CACHE_TOTAL, vec![label("result", r.as_str())]).increment(0);
        }
        for r in GzipEviction::ALL {
            self.counter(GZIP_CACHE_EVICTIONS_TOTAL, vec![label("reason", r.as_str())]).increment(0);
            self.counter(LIST_BODY_CACHE_EVICTIONS_TOTAL, vec![label("reason", r.as_str())]).increment(0);
        }
        for r in BodyCacheResult::ALL {
            self.counter(LIST_BODY_CACHE_TOTAL, vec![label("result", r.as_str())]).increment(0);
        }
        for g in [
            MEMORY_READS_IN_FLIGHT,
            MEMORY_READ_BYTES_IN_FLIGHT,
            GZIP_CACHE_BYTES,
            GZIP_CACHE_ENTRIES,
            LIST_BODY_CACHE_BYTES,
            LIST_BODY_CACHE_ENTRIES,
            COMPRESSIONS_IN_FLIGHT,
            HEAVY_BODIES_WAITING,
            HEAVY_BODIES_PRODUCING,
        ] {
            self.gauge(g, vec![]).increment(0.0);
        }
        // Registered before the first compression, so its buckets are exported from the start.
        let _ = self.histogram(COMPRESSION_SECONDS, vec![]);
    }
}
