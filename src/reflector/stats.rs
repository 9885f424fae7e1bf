//! The registry as the metrics listener's source of per-resource snapshots and readiness.

use super::registry::Registry;
use crate::metrics::{ResourceSnapshot, StatsSource};

impl StatsSource for Registry {
    fn resources(&self) -> Vec<ResourceSnapshot> {
        self.statuses()
            .into_iter()
            .map(|s| ResourceSnapshot {
                store: self.get(&s.gvr).map(|store| store.stats()),
                configured: s.configured,
                synced: s.synced,
                state: s.state.as_str(),
                relists: s.relists,
                watch_restarts: s.watch_restarts,
                events_received: s.events_applied,
                bad_frames: s.bad_frames,
                restarts: s.restarts,
                since_last_event: s.since_last_event,
                last_error: s.last_error,
                selector: self.mirror_selector(&s.gvr).map(|sel| sel.to_string()),
                gvr: s.gvr,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::SyncState;
    use crate::metrics::REFLECTOR_STATES;

    /// The metrics register every state's series at zero from their own list: it must name every state.
    #[test]
    fn metrics_know_every_reflector_state() {
        let all = [
            SyncState::Starting,
            SyncState::InitialEvents,
            SyncState::Listing,
            SyncState::Resuming,
            SyncState::Watching,
            SyncState::Backoff,
            SyncState::Restarting,
            SyncState::Stopped,
        ];
        // A new state must be added here (the match is exhaustive) and to REFLECTOR_STATES.
        for s in all {
            match s {
                SyncState::Starting
                | SyncState::InitialEvents
                | SyncState::Listing
                | SyncState::Resuming
                | SyncState::Watching
                | SyncState::Backoff
                | SyncState::Restarting
                | SyncState::Stopped => {}
            }
        }
        let names: Vec<&str> = all.iter().map(|s| s.as_str()).collect();
        assert_eq!(names, REFLECTOR_STATES);
    }
}
