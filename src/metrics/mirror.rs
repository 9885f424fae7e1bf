//! Counters other modules keep themselves, mirrored into the exposition at scrape time with absolute values
//! (so nothing is counted twice). Their owners count without knowing about Prometheus; `app` reads them into
//! the plain structs below through its [`StatsSource`](super::StatsSource), so `metrics` depends on none of
//! the modules that keep them.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::instance::Metrics;
use super::labels::FreshnessOutcome;
use super::names::*;
use super::recorder::label;
use crate::store::IndexKind;

/// `kache_watch_streams_ended_total` reasons.
const ENDED_REASONS: [&str; 5] = ["slow", "reset", "expired", "too_large", "rejected"];

/// The watch fan-out's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchCounters {
    pub started: u64,
    /// Streams open now.
    pub active: u64,
    pub events_sent: u64,
    pub bookmarks_sent: u64,
    pub closed_slow: u64,
    pub closed_reset: u64,
    pub expired: u64,
    /// Watches answered 504 (the store did not reach the requested resourceVersion in time).
    pub too_large: u64,
    pub rejected: u64,
    /// Indexed watchers now, in the order of [`IndexKind::ALL`].
    pub indexed_watchers: [u64; IndexKind::ALL.len()],
    /// Index rings now.
    pub index_rings: u64,
    /// Watchers that got the shared ring because their store's index rings were all taken.
    pub index_full: u64,
}

/// One kache's watch fan-out counters, kept by its watchers (`serve::watch`) through [`Metrics::watch_cells`]
/// and mirrored at scrape time. Plain atomics: a watcher counts each event it writes, which must stay cheap.
#[derive(Debug, Default)]
pub struct WatchCells {
    pub started: AtomicU64,
    pub active: AtomicU64,
    pub events_sent: AtomicU64,
    pub bookmarks_sent: AtomicU64,
    pub closed_slow: AtomicU64,
    pub closed_reset: AtomicU64,
    pub expired: AtomicU64,
    pub too_large: AtomicU64,
    pub rejected: AtomicU64,
}

// === impl WatchCells ===

impl WatchCells {
    /// `into` with its fan-out fields replaced by these counters (the index fields are the store's).
    pub fn fill(&self, into: &mut WatchCounters) {
        into.started = self.started.load(Relaxed);
        into.active = self.active.load(Relaxed);
        into.events_sent = self.events_sent.load(Relaxed);
        into.bookmarks_sent = self.bookmarks_sent.load(Relaxed);
        into.closed_slow = self.closed_slow.load(Relaxed);
        into.closed_reset = self.closed_reset.load(Relaxed);
        into.expired = self.expired.load(Relaxed);
        into.too_large = self.too_large.load(Relaxed);
        into.rejected = self.rejected.load(Relaxed);
    }

    /// The fan-out counters alone (index fields zero).
    pub fn snapshot(&self) -> WatchCounters {
        let mut counters = WatchCounters::default();
        self.fill(&mut counters);
        counters
    }
}

/// The consistent-read freshness counters (`kache_freshness_*`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FreshnessCounters {
    pub probes: u64,
    pub fresh: u64,
    pub lagging: u64,
    pub probe_errors: u64,
    pub quiet: u64,
    pub small: u64,
    /// Reads whose freshness steps the upstream answered too slowly: forwarded at their cutoff.
    pub slow: u64,
    /// Reads that waited for the store, and of those the waits that ran out.
    pub waited: u64,
    pub waits_expired: u64,
    pub ahead_reached: u64,
    pub ahead_forwarded: u64,
    pub proofs_succeeded: u64,
    pub proofs_failed: u64,
    pub censuses: u64,
    pub census_same: u64,
    pub census_behind: u64,
    pub census_failed: u64,
    /// Bytes the censuses in flight hold.
    pub census_bytes: u64,
    /// 504s decided by the freshness check.
    pub too_large: u64,
    /// The etcd oracle's, when there is one.
    pub etcd: Option<crate::fresh::etcd::EtcdCounters>,
}

/// Counters of structures read at scrape time: the kache's Table state (row cache, learned generic columns)
/// and its heavy-body producers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SharedCounters {
    /// The kache's Table row cache: lookups answered from it and rows printed, and its weight.
    pub table_row_hits: u64,
    pub table_row_misses: u64,
    pub table_row_cache_bytes: u64,
    /// Resources printed with learned generic columns.
    pub table_generic_resources: u64,
    /// Heavy bodies waiting for a producer permit, and batches running on the blocking pool.
    pub heavy_bodies_waiting: u64,
    pub heavy_bodies_producing: u64,
    /// Heavy-body producer threads, at lowered and at normal OS priority.
    pub heavy_body_threads_lowered: u64,
    pub heavy_body_threads_normal: u64,
    /// Idle collections of the threads' heaps, and the nanoseconds they took (process-wide).
    pub heap_collects: u64,
    pub heap_collect_nanos: u64,
}

// === impl Metrics (mirrors) ===

impl Metrics {
    /// Mirrors the watch fan-out's counters.
    pub(crate) fn mirror_watch(&self, s: &WatchCounters) {
        self.counter(WATCH_STREAMS_STARTED_TOTAL, vec![]).absolute(s.started);
        self.gauge(WATCH_STREAMS_OPEN, vec![]).set(s.active as f64);
        self.counter(WATCH_EVENTS_SENT_TOTAL, vec![]).absolute(s.events_sent);
        self.counter(WATCH_BOOKMARKS_SENT_TOTAL, vec![]).absolute(s.bookmarks_sent);
        let ended = [s.closed_slow, s.closed_reset, s.expired, s.too_large, s.rejected];
        for (reason, value) in ENDED_REASONS.iter().zip(ended) {
            self.counter(WATCH_STREAMS_ENDED_TOTAL, vec![label("reason", reason)]).absolute(value);
        }
        for (kind, value) in IndexKind::ALL.iter().zip(s.indexed_watchers) {
            self.gauge(WATCH_INDEXED_WATCHERS, vec![label("index", kind.as_str())]).set(value as f64);
        }
        self.gauge(WATCH_INDEX_RINGS, vec![]).set(s.index_rings as f64);
        self.counter(WATCH_INDEX_FULL_TOTAL, vec![]).absolute(s.index_full);
    }

    /// Mirrors the counters of [`SharedCounters`].
    pub(crate) fn mirror_shared(&self, s: &SharedCounters) {
        self.counter(TABLE_ROWS_TOTAL, vec![label("result", "hit")]).absolute(s.table_row_hits);
        self.counter(TABLE_ROWS_TOTAL, vec![label("result", "miss")]).absolute(s.table_row_misses);
        self.gauge(TABLE_ROW_CACHE_BYTES, vec![]).set(s.table_row_cache_bytes as f64);
        self.gauge(TABLE_GENERIC_RESOURCES, vec![]).set(s.table_generic_resources as f64);
        // Kept by the kache's object versions themselves.
        self.gauge(PROTOBUF_BYTES, vec![])
            .set(self.proto_bytes().load(std::sync::atomic::Ordering::Relaxed) as f64);
        self.gauge(HEAVY_BODIES_WAITING, vec![]).set(s.heavy_bodies_waiting as f64);
        self.gauge(HEAVY_BODIES_PRODUCING, vec![]).set(s.heavy_bodies_producing as f64);
        let threads = [("lowered", s.heavy_body_threads_lowered), ("normal", s.heavy_body_threads_normal)];
        for (priority, n) in threads {
            self.gauge(HEAVY_BODY_THREADS, vec![label("priority", priority)]).set(n as f64);
        }
        self.counter(HEAP_COLLECTS_TOTAL, vec![]).absolute(s.heap_collects);
        self.gauge(HEAP_COLLECT_SECONDS, vec![]).set(s.heap_collect_nanos as f64 / 1e9);
    }

    /// Mirrors the consistent-read freshness counters (`None`: this kache has no freshness prober).
    /// `watch_too_large`: the watches' 504s, which `kache_too_large_resource_version_total` also counts.
    pub(crate) fn mirror_freshness(&self, stats: Option<&FreshnessCounters>, watch_too_large: u64) {
        let Some(s) = stats else {
            // Register the series at zero so the metric names exist; values stay as they are.
            self.counter(FRESHNESS_UPSTREAM_PROBES_TOTAL, vec![]).increment(0);
            for o in FreshnessOutcome::ALL {
                self.counter(FRESHNESS_PROBES_TOTAL, vec![label("outcome", o.as_str())]).increment(0);
            }
            for o in ["reached", "expired"] {
                self.counter(FRESHNESS_WAITS_TOTAL, vec![label("outcome", o)]).increment(0);
            }
            for o in ["reached", "forwarded"] {
                self.counter(FRESHNESS_AHEAD_READS_TOTAL, vec![label("outcome", o)]).increment(0);
            }
            for o in ["proven", "failed"] {
                self.counter(FRESHNESS_PROOFS_TOTAL, vec![label("outcome", o)]).increment(0);
            }
            for o in ["served", "behind", "failed"] {
                self.counter(FRESHNESS_CENSUSES_TOTAL, vec![label("outcome", o)]).increment(0);
            }
            self.counter(FRESHNESS_UPSTREAM_CENSUSES_TOTAL, vec![]).increment(0);
            self.gauge(FRESHNESS_CENSUS_BYTES, vec![]).set(0.0);
            self.counter(TOO_LARGE_RESOURCE_VERSION_TOTAL, vec![]).absolute(watch_too_large);
            self.mirror_etcd(None);
            return;
        };
        self.mirror_etcd(s.etcd.as_ref());
        self.counter(FRESHNESS_UPSTREAM_PROBES_TOTAL, vec![]).absolute(s.probes);
        for (outcome, value) in [
            (FreshnessOutcome::Fresh, s.fresh),
            (FreshnessOutcome::Lagging, s.lagging),
            (FreshnessOutcome::ProbeError, s.probe_errors),
            (FreshnessOutcome::Quiet, s.quiet),
            (FreshnessOutcome::Slow, s.slow),
            (FreshnessOutcome::Small, s.small),
        ] {
            self.counter(FRESHNESS_PROBES_TOTAL, vec![label("outcome", outcome.as_str())]).absolute(value);
        }
        self.counter(FRESHNESS_WAITS_TOTAL, vec![label("outcome", "reached")])
            .absolute(s.waited.saturating_sub(s.waits_expired));
        self.counter(FRESHNESS_WAITS_TOTAL, vec![label("outcome", "expired")]).absolute(s.waits_expired);
        self.counter(FRESHNESS_AHEAD_READS_TOTAL, vec![label("outcome", "reached")])
            .absolute(s.ahead_reached);
        self.counter(FRESHNESS_AHEAD_READS_TOTAL, vec![label("outcome", "forwarded")])
            .absolute(s.ahead_forwarded);
        self.counter(FRESHNESS_PROOFS_TOTAL, vec![label("outcome", "proven")]).absolute(s.proofs_succeeded);
        self.counter(FRESHNESS_PROOFS_TOTAL, vec![label("outcome", "failed")]).absolute(s.proofs_failed);
        self.counter(FRESHNESS_UPSTREAM_CENSUSES_TOTAL, vec![]).absolute(s.censuses);
        self.gauge(FRESHNESS_CENSUS_BYTES, vec![]).set(s.census_bytes as f64);
        for (outcome, value) in
            [("served", s.census_same), ("behind", s.census_behind), ("failed", s.census_failed)]
        {
            self.counter(FRESHNESS_CENSUSES_TOTAL, vec![label("outcome", outcome)]).absolute(value);
        }
        // Reads' 504s are decided by the freshness check; watches' by the watch start.
        self.counter(TOO_LARGE_RESOURCE_VERSION_TOTAL, vec![]).absolute(s.too_large + watch_too_large);
    }
}

impl Metrics {
    /// Mirrors the etcd oracle's counters (`None`: no oracle; the series are registered at zero).
    fn mirror_etcd(&self, stats: Option<&crate::fresh::etcd::EtcdCounters>) {
        use crate::fresh::etcd::{EtcdCounters, Unproven, WatchState};
        let none = EtcdCounters::default();
        let s = stats.unwrap_or(&none);
        for (kind, value) in [
            ("revision", s.revisions),
            ("progress", s.progress_requests),
            ("verify", s.verifies),
            ("watch", s.watches_opened),
        ] {
            self.counter(ETCD_REQUESTS_TOTAL, vec![label("kind", kind)]).absolute(value);
        }
        self.counter(ETCD_PROVEN_TOTAL, vec![]).absolute(s.proven);
        for reason in Unproven::ALL {
            let value = s.fallbacks.iter().find(|(r, _)| *r == reason.as_str()).map_or(0, |(_, v)| *v);
            self.counter(ETCD_FALLBACKS_TOTAL, vec![label("reason", reason.as_str())]).absolute(value);
        }
        self.gauge(ETCD_PROGRESS_SECONDS, vec![]).set(s.progress_recent_micros as f64 / 1e6);
        self.counter(ETCD_PROGRESS_TOTAL, vec![]).absolute(s.progress_count);
        self.counter(ETCD_WATCH_RESTARTS_TOTAL, vec![]).absolute(s.watch_restarts);
        for state in WatchState::ALL {
            let value = s.watch_states.iter().find(|(w, _)| *w == state.as_str()).map_or(0, |(_, v)| *v);
            self.gauge(ETCD_WATCHES, vec![label("state", state.as_str())]).set(value as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn freshness_counters_are_mirrored() {
        let metrics = Metrics::new();
        let stats = FreshnessCounters { probes: 4, fresh: 3, lagging: 1, too_large: 2, ..Default::default() };
        metrics.mirror_freshness(Some(&stats), 5);
        let text = metrics.render();
        assert_eq!(value(&text, "kache_freshness_upstream_probes_total"), Some(4.0), "{text}");
        assert_eq!(value(&text, "kache_freshness_probes_total{outcome=\"fresh\"}"), Some(3.0));
        assert_eq!(value(&text, "kache_freshness_probes_total{outcome=\"lagging\"}"), Some(1.0));
        assert_eq!(value(&text, "kache_freshness_probes_total{outcome=\"probe_error\"}"), Some(0.0));
        assert_eq!(value(&text, "kache_freshness_probes_total{outcome=\"small\"}"), Some(0.0));
        assert_eq!(value(&text, "kache_too_large_resource_version_total"), Some(7.0), "{text}");
    }

    #[test]
    fn watch_counters_are_mirrored() {
        let metrics = Metrics::new();
        let stats = WatchCounters {
            started: 3,
            active: 2,
            closed_slow: 1,
            indexed_watchers: [0, 4, 0],
            ..Default::default()
        };
        metrics.mirror_watch(&stats);
        let text = metrics.render();
        assert_eq!(value(&text, "kache_watch_streams_started_total"), Some(3.0), "{text}");
        assert_eq!(value(&text, "kache_watch_streams_open"), Some(2.0), "{text}");
        assert_eq!(value(&text, "kache_watch_streams_ended_total{reason=\"slow\"}"), Some(1.0), "{text}");
        assert_eq!(value(&text, "kache_watch_indexed_watchers{index=\"field\"}"), Some(4.0), "{text}");
    }

    #[test]
    fn shared_counters_are_mirrored() {
        let metrics = Metrics::new();
        let shared = SharedCounters { table_row_hits: 5, heavy_bodies_waiting: 2, ..Default::default() };
        metrics.mirror_shared(&shared);
        let text = metrics.render();
        assert_eq!(value(&text, "kache_table_rows_total{result=\"hit\"}"), Some(5.0), "{text}");
        assert_eq!(value(&text, "kache_table_rows_total{result=\"miss\"}"), Some(0.0), "{text}");
        assert_eq!(value(&text, "kache_heavy_bodies_waiting"), Some(2.0), "{text}");
    }
}
