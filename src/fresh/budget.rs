//! Whether waiting for the store can pay off, as a pure function of what kache observed.
//!
//! A read that needs the store at a revision R it has not reached (a consistent read after the probe, an
//! Exact read or continue token minted by the upstream) is served from memory only once the store reaches
//! R. The store moves only with this resource's own events and the upstream's bookmarks; when the rest
//! of the cluster moves the global revision (leases, events), R is usually past this resource's last
//! event, so the store reaches R only with the *next* advance. Waiting pays off when that advance is
//! expected sooner than the read would take upstream (scaled by how many readers wait for the same proof:
//! one advance serves them all); otherwise the read is forwarded at once.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;
use tokio::time::Instant;

/// Fixed cost of a forwarded read (one upstream round trip and its handling; the apiserver answers a
/// small get in ~5 ms on a real cluster, 6.5 ms measured direct). Where kache has measured its
/// probes (a list of one name: one round trip), the measured figure replaces this guess ([`ProbeCost`]).
pub(crate) const FORWARD_BASE: Duration = Duration::from_millis(5);
/// Throughput of a forwarded read: what the apiserver serialises from its watch cache per second. Measured
/// on the real 1.36 apiserver (docs/decisions/0016-consistent-reads-probe-census-proof.md): a 500-object page
/// of 1.1 MB in 30 ms, a 21.5 MiB list in
/// 560 ms, both ~40 MB/s (a 30 MB list took 279 ms on a faster machine).
pub(crate) const FORWARD_BYTES_PER_SEC: f64 = 40e6;
/// Throughput of a read served from memory (a 21.5 MiB list in 56 ms over TLS, same run: ~400 MB/s).
pub(crate) const MEMORY_BYTES_PER_SEC: f64 = 400e6;
/// A probe is sent for a read only when serving it from memory instead of forwarding saves at least this
/// many probes' worth of time: a probe costs about what a small forwarded read costs (the apiserver serves a
/// consistent get from etcd, `CacheDelegator.Get`, and the probe's list of one name as one storage key after
/// asking etcd for its revision), so for gets and small lists probing can only add latency. One probe's
/// worth is the break-even: a probe wasted on a store found behind (then forwarded) is rare, because a store
/// known to be behind is forwarded without probing (`NotFresh::Quiet`). (It was 2 at first: a
/// namespace list of 100 objects, 216 KiB, saves ~5 ms and was forwarded at 1.4–1.6× direct where memory
/// answers it at 0.4×.)
pub(crate) const PROBE_PAYOFF: u32 = 1;
/// When the probe estimate is this old (or was never measured), a read that would pay with a probe this many
/// times cheaper than estimated probes anyway, once per [`EXPLORE_INTERVAL`]: otherwise a guess that is too
/// high (the [`FORWARD_BASE`] default before any probe, or one slow probe) would keep reads that never pay
/// at that estimate from ever measuring a probe.
pub(crate) const EXPLORE_FACTOR: u32 = 4;
/// See [`EXPLORE_FACTOR`].
pub(crate) const EXPLORE_INTERVAL: Duration = Duration::from_secs(30);
/// Advances of the store looked at to estimate its rate (retained snapshots: one per event or bookmark).
pub(crate) const ACTIVITY_SAMPLES: usize = 8;
/// A wait is bounded by this many expected gaps (plus slack): an advance that did not come by then is not
/// coming soon, and the read is forwarded.
pub(crate) const GAPS_TO_WAIT: u32 = 3;
/// Event propagation from the upstream to the store (watch frame, decode, publish: about a millisecond on a
/// local network).
pub(crate) const PROPAGATION_SLACK: Duration = Duration::from_millis(1);

/// How recently and how often the store advanced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Activity {
    /// Mean time between the last [`ACTIVITY_SAMPLES`] advances; `None` with fewer than two.
    pub gap: Option<Duration>,
    /// Time since the last advance.
    pub since_last: Duration,
}

impl Activity {
    /// From the times of the store's most recent advances (any order), seen at `now`.
    pub(crate) fn from_times(times: impl IntoIterator<Item = Instant>, now: Instant) -> Self {
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
    pub(crate) fn expected_next(&self) -> Option<Duration> {
        self.gap.map(|g| g.max(self.since_last))
    }
}

/// The estimated cost of forwarding a read of `bytes` bytes.
pub fn forward_cost(bytes: usize) -> Duration {
    FORWARD_BASE + transfer(bytes, FORWARD_BYTES_PER_SEC)
}

/// The estimated time to send a read of `bytes` bytes from memory.
pub(crate) fn memory_cost(bytes: usize) -> Duration {
    transfer(bytes, MEMORY_BYTES_PER_SEC)
}

fn transfer(bytes: usize, per_sec: f64) -> Duration {
    Duration::from_secs_f64(bytes as f64 / per_sec)
}

/// Whether probing the upstream's revision can pay off for a read of `bytes` bytes, given what a probe
/// costs (`probe`, measured): only when serving from memory saves [`PROBE_PAYOFF`] probes over forwarding.
/// (Forwarding and probing share the round trip; what differs is the body, sent at the apiserver's
/// throughput or at memory speed.)
pub(crate) fn probe_pays(bytes: usize, probe: Duration) -> bool {
    let saved = transfer(bytes, FORWARD_BYTES_PER_SEC).saturating_sub(transfer(bytes, MEMORY_BYTES_PER_SEC));
    saved >= probe.saturating_mul(PROBE_PAYOFF)
}

/// The cost of a probe round trip, as measured: an exponentially weighted mean of the probes' durations,
/// [`FORWARD_BASE`] until the first one is measured. Lock-free (microseconds in an atomic), with the time of
/// the last sample or exploration ([`EXPLORE_INTERVAL`]).
#[derive(Debug)]
pub(crate) struct ProbeCost {
    mean_us: AtomicU64,
    /// Milliseconds since `epoch` of the last sample or granted exploration; 0: never.
    fresh_at_ms: AtomicU64,
    epoch: Instant,
}

impl Default for ProbeCost {
    fn default() -> Self {
        Self { mean_us: AtomicU64::new(0), fresh_at_ms: AtomicU64::new(0), epoch: Instant::now() }
    }
}

impl ProbeCost {
    /// Weight of the newest sample (1/8: a few probes' memory, so one slow probe does not flip decisions).
    const WEIGHT: u64 = 8;

    pub fn get(&self) -> Duration {
        match self.mean_us.load(Relaxed) {
            0 => FORWARD_BASE,
            us => Duration::from_micros(us),
        }
    }

    pub fn record(&self, took: Duration) {
        self.record_at(took, Instant::now());
    }

    fn record_at(&self, took: Duration, now: Instant) {
        let sample = (took.as_micros() as u64).max(1);
        let _ = self.mean_us.fetch_update(Relaxed, Relaxed, |old| {
            Some(if old == 0 { sample } else { (old * (Self::WEIGHT - 1) + sample) / Self::WEIGHT })
        });
        self.fresh_at_ms.fetch_max(self.ms(now), Relaxed);
    }

    /// Whether a read of `bytes` bytes should be probed: it pays at the estimate ([`probe_pays`]), or it would
    /// pay at an [`EXPLORE_FACTOR`] times cheaper probe and the estimate is stale: then one such read per
    /// [`EXPLORE_INTERVAL`] probes, which measures the probe anew.
    pub fn pays(&self, bytes: usize, now: Instant) -> bool {
        let probe = self.get();
        if probe_pays(bytes, probe) {
            return true;
        }
        if !probe_pays(bytes, probe / EXPLORE_FACTOR) {
            return false;
        }
        let (last, now_ms) = (self.fresh_at_ms.load(Relaxed), self.ms(now));
        let due = last == 0 || now_ms.saturating_sub(last) >= EXPLORE_INTERVAL.as_millis() as u64;
        // One reader wins the exploration; the others keep the estimate's decision.
        due && self.fresh_at_ms.compare_exchange(last, now_ms.max(1), Relaxed, Relaxed).is_ok()
    }

    fn ms(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_millis() as u64
    }
}

/// How long a read of `bytes` bytes should wait for the store's next advance; zero means forward at once.
/// `waiters` readers of the same resource already wait for the same proof; `max` is the configured bound.
pub(crate) fn wait_budget(activity: Activity, bytes: usize, waiters: usize, max: Duration) -> Duration {
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
        // 100 ms between events: not worth it for a get, worth it for a 30 MB list (750 ms upstream).
        assert_eq!(wait_budget(activity(100, 10), 3_000, 0, MAX), Duration::ZERO);
        assert!(wait_budget(activity(100, 10), 30_000_000, 0, MAX) > Duration::from_millis(100));
    }

    #[test]
    fn probes_pay_off_for_lists_not_for_gets() {
        let probe = Duration::from_micros(1500);
        // A 2.5 KiB get: serving it from memory saves ~60 µs, far less than the probe it would need.
        assert!(!probe_pays(2_500, probe));
        // A namespace list of 100 objects (220 KB) saves ~5 ms; a 21.5 MiB list half a second.
        assert!(probe_pays(220_000, probe));
        assert!(probe_pays(22_500_000, probe));
        // A slow upstream makes probes expensive: only big reads still pay.
        assert!(!probe_pays(220_000, Duration::from_millis(20)));
        assert!(probe_pays(22_500_000, Duration::from_millis(20)));
    }

    #[test]
    fn a_stale_estimate_lets_one_read_per_interval_measure_a_probe() {
        let cost = ProbeCost::default();
        let t0 = cost.epoch + Duration::from_secs(1);
        // Unmeasured, the estimate is FORWARD_BASE (5 ms): a 216 KiB namespace list saves ~5 ms, so it does
        // not pay at the estimate, but would at a quarter of it: the first such read explores, the next not.
        assert!(!probe_pays(216 * 1024, cost.get()));
        assert!(cost.pays(216 * 1024, t0), "an unmeasured estimate is explored");
        assert!(!cost.pays(216 * 1024, t0), "one exploration per interval");
        assert!(!cost.pays(216 * 1024, t0 + EXPLORE_INTERVAL / 2));
        // A get never pays, even at a quarter of the estimate: it never explores.
        assert!(!cost.pays(2_500, t0 + EXPLORE_INTERVAL * 4));
        // The probe measured 2 ms: the list now pays at the estimate.
        cost.record_at(Duration::from_millis(2), t0 + Duration::from_millis(5));
        assert!(cost.pays(216 * 1024, t0 + Duration::from_millis(6)));
        // A slow upstream: probes measured at 8 ms, fresh, no exploration; once stale, one read explores.
        let slow = ProbeCost::default();
        slow.record_at(Duration::from_millis(8), t0);
        assert!(!slow.pays(216 * 1024, t0 + Duration::from_secs(1)), "a fresh estimate is trusted");
        assert!(
            slow.pays(216 * 1024, t0 + EXPLORE_INTERVAL + Duration::from_secs(1)),
            "a stale one is explored"
        );
        assert!(!slow.pays(216 * 1024, t0 + EXPLORE_INTERVAL + Duration::from_secs(2)));
    }

    #[test]
    fn probe_cost_is_a_weighted_mean_of_what_probes_took() {
        let cost = ProbeCost::default();
        assert_eq!(cost.get(), FORWARD_BASE, "a guess until measured");
        cost.record(Duration::from_millis(2));
        assert_eq!(cost.get(), Duration::from_millis(2));
        cost.record(Duration::from_millis(10));
        assert_eq!(cost.get(), Duration::from_millis(3), "one slow probe moves it by an eighth");
    }

    #[test]
    fn waiters_for_the_same_proof_make_waiting_worth_more_within_the_bound() {
        assert_eq!(wait_budget(activity(20, 0), 3_000, 0, MAX), Duration::ZERO);
        assert!(wait_budget(activity(20, 0), 3_000, 10, MAX) > Duration::ZERO);
        assert!(wait_budget(activity(20, 0), 3_000, 100_000, MAX) <= MAX);
    }
}
