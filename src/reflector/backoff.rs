//! Exponential backoff with jitter, honouring the upstream's Retry-After.

use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use super::config::{MAX_RETRY_AFTER, ReflectorConfig};

/// client-go's jitter factor: a delay `d` becomes a uniform pick in `[d, 2d)`, capped at the maximum.
const JITTER: f64 = 1.0;

/// Delays between failed attempts: `initial · 2^n` with jitter, capped at `max`; forgotten after `reset` without
/// a failure (or an explicit [`Backoff::reset`] after a success).
#[derive(Debug)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    reset_after: Duration,
    failures: u32,
    last_failure: Option<Instant>,
}

// === impl Backoff ===

impl Backoff {
    pub(crate) fn new(config: &ReflectorConfig) -> Self {
        Self {
            initial: config.backoff_initial,
            max: config.backoff_max.max(config.backoff_initial),
            reset_after: config.backoff_reset,
            failures: 0,
            last_failure: None,
        }
    }

    /// The delay before the next attempt after a failure. `retry_after` (from the upstream) is a floor.
    pub(crate) fn next_delay(&mut self, retry_after: Option<Duration>) -> Duration {
        let now = Instant::now();
        if self.last_failure.is_some_and(|t| now.saturating_duration_since(t) >= self.reset_after) {
            self.failures = 0;
        }
        self.last_failure = Some(now);
        let exp = self.failures.min(16);
        self.failures = self.failures.saturating_add(1);
        let base = self.initial.saturating_mul(1u32 << exp).min(self.max);
        let jittered = base.mul_f64(1.0 + JITTER * rand::rng().random::<f64>()).min(self.max);
        match retry_after {
            Some(ra) => jittered.max(ra.min(MAX_RETRY_AFTER)),
            None => jittered,
        }
    }

    /// Forgets past failures (after a successful sync or a watch that delivered events).
    pub(crate) fn reset(&mut self) {
        self.failures = 0;
        self.last_failure = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backoff() -> Backoff {
        Backoff::new(&ReflectorConfig::default())
    }

    #[tokio::test(start_paused = true)]
    async fn grows_with_jitter_and_caps() {
        let mut b = backoff();
        let first = b.next_delay(None);
        assert!(first >= Duration::from_millis(800) && first <= Duration::from_millis(1600), "{first:?}");
        let second = b.next_delay(None);
        assert!(second >= Duration::from_millis(1600) && second <= Duration::from_millis(3200), "{second:?}");
        for _ in 0..20 {
            assert!(b.next_delay(None) <= Duration::from_secs(30));
        }
        assert!(b.next_delay(None) >= Duration::from_secs(15), "stays near the cap");
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_is_a_floor_and_capped() {
        let mut b = backoff();
        assert!(b.next_delay(Some(Duration::from_secs(7))) >= Duration::from_secs(7));
        assert_eq!(b.next_delay(Some(Duration::from_secs(100_000))), MAX_RETRY_AFTER);
    }

    #[tokio::test(start_paused = true)]
    async fn resets_explicitly_and_after_quiet_period() {
        let mut b = backoff();
        for _ in 0..10 {
            b.next_delay(None);
        }
        b.reset();
        assert!(b.next_delay(None) <= Duration::from_millis(1600));
        for _ in 0..10 {
            b.next_delay(None);
        }
        tokio::time::advance(Duration::from_secs(121)).await;
        assert!(b.next_delay(None) <= Duration::from_millis(1600));
    }
}
