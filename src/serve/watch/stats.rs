//! The watch fan-out's counters: kept in the kache's own [`Metrics`] ([`WatchCells`]) and exported by it.

use std::sync::atomic::Ordering::Relaxed;

use crate::metrics::{Metrics, WatchCells, WatchCounters};

/// A copy of one kache's watch counters (the fan-out fields of [`WatchCounters`]).
pub type WatchStats = WatchCounters;

/// The current watch counters of the kache that owns `metrics`.
pub fn stats(metrics: &Metrics) -> WatchStats {
    metrics.watch_cells().snapshot()
}

/// How a watcher ended, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EndReason {
    Slow,
    Reset,
    Expired,
    TooLarge,
    /// Deadline, shutdown, the store going away: nothing to count beyond `active`.
    Normal,
}

pub(crate) fn record_end(metrics: &Metrics, reason: EndReason) {
    let cells = metrics.watch_cells();
    let counter = match reason {
        EndReason::Slow => &cells.closed_slow,
        EndReason::Reset => &cells.closed_reset,
        EndReason::Expired => &cells.expired,
        EndReason::TooLarge => &cells.too_large,
        EndReason::Normal => return,
    };
    counter.fetch_add(1, Relaxed);
}

pub(crate) fn record_rejected(metrics: &Metrics) {
    metrics.watch_cells().rejected.fetch_add(1, Relaxed);
}

pub(crate) fn record_events(metrics: &Metrics, n: u64) {
    metrics.watch_cells().events_sent.fetch_add(n, Relaxed);
}

pub(crate) fn record_bookmark(metrics: &Metrics) {
    metrics.watch_cells().bookmarks_sent.fetch_add(1, Relaxed);
}

/// Counts a watcher as active while alive.
#[derive(Debug)]
pub(crate) struct ActiveGuard(Metrics);

impl ActiveGuard {
    pub(crate) fn new(metrics: &Metrics) -> Self {
        let cells: &WatchCells = metrics.watch_cells();
        cells.started.fetch_add(1, Relaxed);
        cells.active.fetch_add(1, Relaxed);
        Self(metrics.clone())
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.watch_cells().active.fetch_sub(1, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_belong_to_one_kache() {
        let (a, b) = (Metrics::new(), Metrics::new());
        {
            let _watcher = ActiveGuard::new(&a);
            record_events(&a, 3);
            record_bookmark(&a);
            record_end(&a, EndReason::Slow);
            record_end(&a, EndReason::Normal);
            assert_eq!(stats(&a).active, 1);
        }
        let s = stats(&a);
        assert_eq!((s.started, s.active, s.events_sent, s.bookmarks_sent, s.closed_slow), (1, 0, 3, 1, 1));
        assert_eq!(stats(&b), WatchStats::default(), "another kache's counters did not move");
    }
}
