//! Whether waiting for the store can pay off, as a pure function of what kache observed.
//!
//! A read that needs the store at a revision R it has not reached (a consistent read after the probe, an
//! Exact read or continue token minted by the upstream) is served from memory only once the store reaches
//! R. The store moves only with this resource's own events and the upstream's bookmarks; when the rest
//! of the cluster moves the global revision (leases, events), R is usually past this resource's last
//! event, so the store reaches R only with the *next* advance. Waiting pays off when that advance is
//! expected sooner than the read would take upstream (scaled by how many readers wait for the same proof:
//! one advance serves them all); otherwise the read is forwarded at once.

use std::time::{Duration, Instant};

/// Fixed cost of a forwarded read (one upstream round trip and its handling; the apiserver answers a
/// small get in ~5 ms on a real cluster: issue 16's table, 6.5 ms direct).
pub const FORWARD_BASE: Duration = Duration::from_millis(5);
/// Throughput of a forwarded read (a 30 MB list took 279 ms direct in issue 16: ~100 MB/s).
pub const FORWARD_BYTES_PER_SEC: f64 = 100e6;
/// Advances of the store looked at to estimate its rate (retained snapshots: one per event or bookmark).
pub const ACTIVITY_SAMPLES: usize = 8;
/// A wait is bounded by this many expected gaps (plus slack): an advance that did not come by then is not
/// coming soon, and the read is forwarded.
pub const GAPS_TO_WAIT: u32 = 3;
/// Event propagation from the upstream to the store (watch frame, decode, publish: about a millisecond on a
/// local network).
pub const PROPAGATION_SLACK: Duration = Duration::from_millis(1);

/// How recently and how often the store advanced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Activity {
    /// Mean time between the last [`ACTIVITY_SAMPLES`] advances; `None` with fewer than two.
    pub gap: Option<Duration>,
    /// Time since the last advance.
    pub since_last: Duration,
}

impl Activity {
    /// From the times of the store's most recent advances (any order), seen at `now`.
    pub fn from_times(times: impl IntoIterator<Item = Instant>, now: Instant) -> Self {
        let (mut n, mut first, mut last) = (0u32, None::<Instant>, None::<Instant>);
        for t in times {
            n += 1;
            first = Some(first.map_or(t, |f| f.min(t)));
            last = Some(last.map_or(t, |l| l.max(t)));
        }
        let since_last = last.map_or(Duration::MAX, |l| now.saturating_duration_since(l));
        let gap = match (first, last) {
            (Some(f), Some(l)) if n >= 2 => Some(l.saturating_duration_since(f) / (n - 1)),
            _ => None,
        };
        Self { gap, since_last }
    }

    /// When the next advance is expected: the mean gap, but at least the time already passed since the
    /// last one (a resource that went quiet is not expected to move within its old gap).
    pub fn expected_next(&self) -> Option<Duration> {
        self.gap.map(|g| g.max(self.since_last))
    }
}

/// The estimated cost of forwarding a read of `bytes` bytes.
pub fn forward_cost(bytes: usize) -> Duration {
    FORWARD_BASE + Duration::from_secs_f64(bytes as f64 / FORWARD_BYTES_PER_SEC)
}

/// How long a read of `bytes` bytes should wait for the store's next advance; zero means forward at once.
/// `waiters` readers of the same resource already wait for the same proof; `max` is the configured bound.
pub fn wait_budget(activity: Activity, bytes: usize, waiters: usize, max: Duration) -> Duration {
    let Some(expected) = activity.expected_next() else { return Duration::ZERO };
    let worth = forward_cost(bytes).saturating_mul(1 + waiters.min(1000) as u32).min(max);
    if expected + PROPAGATION_SLACK > worth {
        return Duration::ZERO;
    }
    worth.min(expected.saturating_mul(GAPS_TO_WAIT) + PROPAGATION_SLACK)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: Duration = Duration::from_millis(500);

    fn activity(gap_ms: u64, since_ms: u64) -> Activity {
        Activity { gap: Some(Duration::from_millis(gap_ms)), since_last: Duration::from_millis(since_ms) }
    }

    #[test]
    fn activity_from_times() {
        let t0 = Instant::now();
        let times = [t0, t0 + Duration::from_millis(10), t0 + Duration::from_millis(30)];
        let a = Activity::from_times(times, t0 + Duration::from_millis(40));
        assert_eq!(a.gap, Some(Duration::from_millis(15)));
        assert_eq!(a.since_last, Duration::from_millis(10));
        let one = Activity::from_times([t0], t0);
        assert_eq!(one.gap, None);
        assert_eq!(one.expected_next(), None);
        assert_eq!(Activity::from_times([], t0).since_last, Duration::MAX);
    }

    #[test]
    fn a_quiet_resource_never_waits() {
        // Unknown rate, or a resource whose last advance is long past: forward at once.
        let unknown = Activity { gap: None, since_last: Duration::ZERO };
        assert_eq!(wait_budget(unknown, 30_000_000, 100, MAX), Duration::ZERO);
        assert_eq!(wait_budget(activity(1, 60_000), 30_000_000, 100, MAX), Duration::ZERO);
    }

    #[test]
    fn a_busy_resource_waits_a_few_gaps_bounded_by_the_forward_cost() {
        // 1 ms between events; a 3 KB get costs ~5 ms upstream: wait up to 3 gaps + slack.
        assert_eq!(wait_budget(activity(1, 0), 3_000, 0, MAX), Duration::from_millis(3) + PROPAGATION_SLACK);
        // 100 ms between events: not worth it for a get, worth it for a 30 MB list (300 ms upstream).
        assert_eq!(wait_budget(activity(100, 10), 3_000, 0, MAX), Duration::ZERO);
        assert!(wait_budget(activity(100, 10), 30_000_000, 0, MAX) > Duration::from_millis(100));
    }

    #[test]
    fn waiters_for_the_same_proof_make_waiting_worth_more_within_the_bound() {
        assert_eq!(wait_budget(activity(20, 0), 3_000, 0, MAX), Duration::ZERO);
        assert!(wait_budget(activity(20, 0), 3_000, 10, MAX) > Duration::ZERO);
        assert!(wait_budget(activity(20, 0), 3_000, 100_000, MAX) <= MAX);
    }
}
