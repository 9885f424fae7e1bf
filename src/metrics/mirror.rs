//! Counters other modules keep themselves (process-wide atomics, per-instance stats), mirrored into the
//! exposition at scrape time. Their owners count without knowing about Prometheus; kache exports them here
//! with absolute values, so nothing is counted twice.

use std::sync::atomic::Ordering::Relaxed;

use super::labels::FreshnessOutcome;
use super::names::*;
use super::recorder::{counter, gauge, label};
use crate::fresh::FreshnessStats;
use crate::serve::watch;

/// `kache_watch_streams_ended_total` reasons, in the order of [`watch::WatchStats`]'s fields.
const ENDED_REASONS: [&str; 5] = ["slow", "reset", "expired", "too_large", "rejected"];

/// Mirrors the watch fan-out's process-wide counters.
pub(crate) fn watch_stats() {
    let s = watch::stats();
    counter(WATCH_STREAMS_STARTED_TOTAL, vec![]).absolute(s.started);
    gauge(WATCH_STREAMS_OPEN, vec![]).set(s.active as f64);
    counter(WATCH_EVENTS_SENT_TOTAL, vec![]).absolute(s.events_sent);
    counter(WATCH_BOOKMARKS_SENT_TOTAL, vec![]).absolute(s.bookmarks_sent);
    let ended = [s.closed_slow, s.closed_reset, s.expired, s.too_large, s.rejected];
    for (reason, value) in ENDED_REASONS.iter().zip(ended) {
        counter(WATCH_STREAMS_ENDED_TOTAL, vec![label("reason", reason)]).absolute(value);
    }
    let index = crate::store::index_stats();
    for (kind, value) in crate::store::IndexKind::ALL.iter().zip(index.watchers) {
        gauge(WATCH_INDEXED_WATCHERS, vec![label("index", kind.as_str())]).set(value as f64);
    }
    gauge(WATCH_INDEX_RINGS, vec![]).set(index.rings as f64);
    counter(WATCH_INDEX_FULL_TOTAL, vec![]).absolute(index.full);
}

/// Mirrors the Table row cache's weight (settled at scrape time, not on the rows' path) and the number of
/// resources printed with learned generic columns.
pub(crate) fn table_rows() {
    gauge(TABLE_ROW_CACHE_BYTES, vec![]).set(crate::codec::table::cache::weighted_bytes() as f64);
    gauge(TABLE_GENERIC_RESOURCES, vec![]).set(crate::codec::table::generic::learned_resources() as f64);
    gauge(PROTOBUF_BYTES, vec![]).set(crate::store::proto_bytes_held() as f64);
}

/// Mirrors the consistent-read freshness counters (`None`: this kache has no freshness prober).
pub(crate) fn freshness(stats: Option<&FreshnessStats>) {
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Relaxed);
    let Some(s) = stats else {
        // Register the series at zero so the metric names exist; values stay as they are.
        counter(FRESHNESS_UPSTREAM_PROBES_TOTAL, vec![]).increment(0);
        for o in FreshnessOutcome::ALL {
            counter(FRESHNESS_PROBES_TOTAL, vec![label("outcome", o.as_str())]).increment(0);
        }
        for o in ["reached", "expired"] {
            counter(FRESHNESS_WAITS_TOTAL, vec![label("outcome", o)]).increment(0);
        }
        for o in ["reached", "forwarded"] {
            counter(FRESHNESS_AHEAD_READS_TOTAL, vec![label("outcome", o)]).increment(0);
        }
        for o in ["proven", "failed"] {
            counter(FRESHNESS_PROOFS_TOTAL, vec![label("outcome", o)]).increment(0);
        }
        counter(TOO_LARGE_RESOURCE_VERSION_TOTAL, vec![]).absolute(watch::stats().too_large);
        return;
    };
    counter(FRESHNESS_UPSTREAM_PROBES_TOTAL, vec![]).absolute(load(&s.probes));
    for (outcome, value) in [
        (FreshnessOutcome::Fresh, load(&s.fresh)),
        (FreshnessOutcome::Lagging, load(&s.lagging)),
        (FreshnessOutcome::ProbeError, load(&s.probe_errors)),
        (FreshnessOutcome::Quiet, load(&s.quiet)),
        (FreshnessOutcome::Small, load(&s.small)),
    ] {
        counter(FRESHNESS_PROBES_TOTAL, vec![label("outcome", outcome.as_str())]).absolute(value);
    }
    let (waited, expired) = (load(&s.waited), load(&s.waits_expired));
    counter(FRESHNESS_WAITS_TOTAL, vec![label("outcome", "reached")])
        .absolute(waited.saturating_sub(expired));
    counter(FRESHNESS_WAITS_TOTAL, vec![label("outcome", "expired")]).absolute(expired);
    counter(FRESHNESS_AHEAD_READS_TOTAL, vec![label("outcome", "reached")]).absolute(load(&s.ahead_reached));
    counter(FRESHNESS_AHEAD_READS_TOTAL, vec![label("outcome", "forwarded")])
        .absolute(load(&s.ahead_forwarded));
    let (proven, failed) = (load(&s.proofs_succeeded), load(&s.proofs_failed));
    counter(FRESHNESS_PROOFS_TOTAL, vec![label("outcome", "proven")]).absolute(proven);
    counter(FRESHNESS_PROOFS_TOTAL, vec![label("outcome", "failed")]).absolute(failed);
    // Reads' 504s are decided by the freshness check; watches' by the watch start (`too_large`).
    counter(TOO_LARGE_RESOURCE_VERSION_TOTAL, vec![]).absolute(load(&s.too_large) + watch::stats().too_large);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::install;

    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn freshness_counters_are_mirrored() {
        let handle = install();
        let stats = FreshnessStats::default();
        stats.probes.store(4, Relaxed);
        stats.fresh.store(3, Relaxed);
        stats.lagging.store(1, Relaxed);
        freshness(Some(&stats));
        let text = handle.render();
        assert_eq!(value(&text, "kache_freshness_upstream_probes_total"), Some(4.0), "{text}");
        assert_eq!(value(&text, "kache_freshness_probes_total{outcome=\"fresh\"}"), Some(3.0));
        assert_eq!(value(&text, "kache_freshness_probes_total{outcome=\"lagging\"}"), Some(1.0));
        assert_eq!(value(&text, "kache_freshness_probes_total{outcome=\"probe_error\"}"), Some(0.0));
        assert_eq!(value(&text, "kache_freshness_probes_total{outcome=\"small\"}"), Some(0.0));
        assert!(value(&text, "kache_too_large_resource_version_total").is_some(), "{text}");
    }

    #[test]
    fn watch_counters_are_mirrored() {
        let handle = install();
        watch_stats();
        let text = handle.render();
        let s = watch::stats();
        // Other tests in this process may open watches meanwhile: the mirror is at most what we read after.
        let started = value(&text, "kache_watch_streams_started_total").expect("exported");
        assert!(started <= s.started as f64, "{text}");
        assert!(value(&text, "kache_watch_streams_ended_total{reason=\"slow\"}").is_some(), "{text}");
        assert!(value(&text, "kache_watch_streams_open").is_some(), "{text}");
    }
}
