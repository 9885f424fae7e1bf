//! Whether the upstream answers, for readiness: a replica whose upstream has been unreachable for longer than
//! a grace is not ready (it can only serve reads whose freshness it cannot prove, and forward nothing).
//!
//! A background task asks the upstream for `/version` (public, cheap: the apiserver answers it from memory to
//! anyone) every [`REACH_INTERVAL`]. Any HTTP answer counts as reachable, whatever its status: an apiserver that
//! answers 403 or 500 is up, and its own errors reach the clients as they would directly. A refused or reset
//! connection, a TLS failure or no answer within [`REACH_TIMEOUT`] counts as unreachable. The readiness check
//! fails once the upstream has been unreachable for [`Reach::grace`] without a success in between, and passes
//! again at the next answer.

use std::sync::Mutex;
use std::time::Duration;

use http::{Method, Request};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Upstream;
use crate::front::body::empty;

/// How often the upstream is asked whether it answers.
pub const REACH_INTERVAL: Duration = Duration::from_secs(2);
/// An answer that takes longer than this counts as none.
pub const REACH_TIMEOUT: Duration = Duration::from_secs(5);
/// Default for [`Reach::grace`]: a few missed asks, so that one lost connection (an apiserver rolling, a load
/// balancer moving) does not take every replica out of its Service at once.
pub const DEFAULT_UNREACHABLE_GRACE: Duration = Duration::from_secs(10);

/// The upstream's reachability as last observed.
#[derive(Debug)]
pub struct Reach {
    grace: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Since when every ask failed (`None`: the last one succeeded, or none was made yet).
    failing_since: Option<Instant>,
    /// Why the last ask failed.
    last_error: Option<String>,
}

// === impl Reach ===

impl Reach {
    pub fn new(grace: Duration) -> Self {
        Self { grace, state: Mutex::new(State::default()) }
    }

    /// How long the upstream may be unreachable before the readiness check fails.
    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// An answer came from the upstream.
    pub fn succeeded(&self) {
        let mut state = self.lock();
        state.failing_since = None;
        state.last_error = None;
    }

    /// An ask failed at `now` for `why`.
    pub fn failed(&self, now: Instant, why: String) {
        let mut state = self.lock();
        state.failing_since.get_or_insert(now);
        state.last_error = Some(why);
    }

    /// The readiness check at `now`: `Err` once every ask for longer than the grace failed.
    pub fn check_at(&self, now: Instant) -> Result<(), String> {
        let state = self.lock();
        match state.failing_since {
            Some(since) if now.saturating_duration_since(since) >= self.grace => Err(format!(
                "the upstream has not answered for {} s (grace {} s): {}",
                now.saturating_duration_since(since).as_secs(),
                self.grace.as_secs(),
                state.last_error.as_deref().unwrap_or("no answer")
            )),
            _ => Ok(()),
        }
    }

    /// The readiness check now.
    pub fn check(&self) -> Result<(), String> {
        self.check_at(Instant::now())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is two plain fields, consistent after any panic.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks `upstream` every [`REACH_INTERVAL`] until `stop`, recording each outcome.
    pub async fn watch(self: std::sync::Arc<Self>, upstream: Upstream, stop: CancellationToken) {
        let mut tick = tokio::time::interval(REACH_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            match ask(&upstream).await {
                Ok(()) => self.succeeded(),
                Err(why) => {
                    tracing::debug!(error = %why, "the upstream did not answer");
                    self.failed(Instant::now(), why);
                }
            }
        }
    }
}

/// One ask: any HTTP answer within [`REACH_TIMEOUT`] is a success.
async fn ask(upstream: &Upstream) -> Result<(), String> {
    let req =
        Request::builder().method(Method::GET).uri("/version").body(empty()).map_err(|e| e.to_string())?;
    match tokio::time::timeout(REACH_TIMEOUT, upstream.send(req)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {} s", REACH_TIMEOUT.as_secs())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_until_failing_for_the_grace_then_ready_again_at_the_next_answer() {
        let reach = Reach::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(reach.check_at(t0), Ok(()), "no ask yet: discovery decides");
        reach.failed(t0, "connection refused".into());
        assert_eq!(reach.check_at(t0 + Duration::from_secs(9)), Ok(()), "within the grace");
        reach.failed(t0 + Duration::from_secs(8), "connection refused".into());
        let err = reach.check_at(t0 + Duration::from_secs(10)).expect_err("past the grace");
        assert!(err.contains("10 s") && err.contains("connection refused"), "{err}");
        reach.succeeded();
        assert_eq!(reach.check_at(t0 + Duration::from_secs(11)), Ok(()));
        // A new failure starts a new grace.
        reach.failed(t0 + Duration::from_secs(12), "reset".into());
        assert_eq!(reach.check_at(t0 + Duration::from_secs(13)), Ok(()));
    }
}
