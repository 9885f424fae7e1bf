//! Per-reflector status for readiness and metrics.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::resource::Gvr;
use crate::store::Store;

/// Where a reflector is in its loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SyncState {
    /// Learning how the upstream lists the resource, before the store exists.
    Starting,
    /// Receiving a streaming list's initial events.
    InitialEvents,
    /// Reading a paginated list.
    Listing,
    /// (Re-)opening a watch from the last resourceVersion.
    Resuming,
    /// Following the upstream's watch.
    Watching,
    /// Waiting after a failure.
    Backoff,
    /// The reflector task panicked or ended; it is restarted after a backoff (its store is not synced).
    Restarting,
    /// The reflector ended (the resource disappeared or kache is shutting down).
    Stopped,
}

impl SyncState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::InitialEvents => "initial-events",
            Self::Listing => "listing",
            Self::Resuming => "resuming",
            Self::Watching => "watching",
            Self::Backoff => "backoff",
            Self::Restarting => "restarting",
            Self::Stopped => "stopped",
        }
    }
}

/// A point-in-time view of one reflector, for metrics and debugging.
#[derive(Clone, Debug)]
pub struct ReflectorStatus {
    pub gvr: Gvr,
    pub state: SyncState,
    /// Whether the store holds a full state (it stays true during a relist: the old state keeps serving).
    pub synced: bool,
    /// Configured (`--resources` / everything) rather than started lazily by a read.
    pub configured: bool,
    pub resource_version: u64,
    pub objects: usize,
    /// Bytes of live objects in the store.
    pub live_bytes: usize,
    pub last_error: Option<String>,
    /// Full syncs after the first (410 Expired, or a failed stream needing a new list).
    pub relists: u64,
    /// Watches re-opened from the last resourceVersion (closed, stalled or broken streams).
    pub watch_restarts: u64,
    pub events_applied: u64,
    /// Times the reflector task was restarted after it panicked or ended.
    pub restarts: u64,
    /// Upstream bytes that could not be used (invalid JSON, objects without metadata, truncated frames).
    pub bad_frames: u64,
    /// Time since the last event or bookmark (`None` before the first).
    pub since_last_event: Option<Duration>,
    /// The upstream refuses to list the resource (403, 404, ...) and it has not synced since: it does not gate
    /// readiness (reads of it are forwarded, and answered by the upstream as they would be without kache).
    pub rejected: bool,
}

#[derive(Debug)]
struct Inner {
    state: SyncState,
    store: Option<Arc<Store>>,
    last_error: Option<String>,
    relists: u64,
    watch_restarts: u64,
    events_applied: u64,
    restarts: u64,
    bad_frames: u64,
    last_event: Option<Instant>,
    rejected: bool,
}

/// The shared, updatable status of one reflector. Updated at state changes and once per applied batch.
#[derive(Debug)]
pub(crate) struct StatusCell {
    gvr: Gvr,
    /// Set once a resource is configured, also after it was first cached lazily.
    configured: AtomicBool,
    inner: Mutex<Inner>,
}

// === impl StatusCell ===

impl StatusCell {
    pub(crate) fn new(gvr: Gvr, configured: bool) -> Self {
        let inner = Inner {
            state: SyncState::Starting,
            store: None,
            last_error: None,
            relists: 0,
            watch_restarts: 0,
            events_applied: 0,
            restarts: 0,
            bad_frames: 0,
            last_event: None,
            rejected: false,
        };
        Self { gvr, configured: AtomicBool::new(configured), inner: Mutex::new(inner) }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        // A poisoned lock only means a panic elsewhere while updating counters; the counters stay usable.
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }

    pub(crate) fn configured(&self) -> bool {
        self.configured.load(Ordering::Relaxed)
    }

    pub(crate) fn set_configured(&self) {
        self.configured.store(true, Ordering::Relaxed);
    }

    pub(crate) fn set_store(&self, store: Arc<Store>) {
        self.with(|i| i.store = Some(store));
    }

    /// Records the reflector's state; a stopped reflector stays stopped.
    pub(crate) fn set_state(&self, state: SyncState) {
        self.with(|i| {
            if i.state != SyncState::Stopped {
                i.state = state;
            }
        });
    }

    pub(crate) fn stop(&self) {
        self.with(|i| i.state = SyncState::Stopped);
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.with(|i| i.state == SyncState::Stopped)
    }

    pub(crate) fn set_error(&self, error: String) {
        self.with(|i| i.last_error = Some(error));
    }

    /// Records whether the last failure was a permanent refusal (cleared by a successful sync).
    pub(crate) fn set_rejected(&self, rejected: bool) {
        self.with(|i| i.rejected = rejected);
    }

    /// Refused by the upstream and not synced since.
    pub(crate) fn is_rejected(&self) -> bool {
        self.with(|i| i.rejected)
    }

    pub(crate) fn add_relist(&self) {
        self.with(|i| i.relists += 1);
    }

    pub(crate) fn add_watch_restart(&self) {
        self.with(|i| i.watch_restarts += 1);
    }

    pub(crate) fn add_restart(&self) {
        self.with(|i| i.restarts += 1);
    }

    pub(crate) fn add_bad_frames(&self, n: u64) {
        self.with(|i| i.bad_frames += n);
    }

    /// Events applied (or a bookmark received) now.
    pub(crate) fn add_events(&self, n: u64) {
        self.with(|i| {
            i.events_applied += n;
            i.last_event = Some(Instant::now());
        });
    }

    pub(crate) fn snapshot(&self) -> ReflectorStatus {
        self.with(|i| {
            let stats = i.store.as_ref().map(|s| (s.is_synced(), s.stats()));
            ReflectorStatus {
                gvr: self.gvr.clone(),
                state: i.state,
                synced: stats.as_ref().is_some_and(|(synced, _)| *synced),
                configured: self.configured(),
                resource_version: stats.as_ref().map_or(0, |(_, s)| s.resource_version),
                objects: stats.as_ref().map_or(0, |(_, s)| s.objects),
                live_bytes: stats.as_ref().map_or(0, |(_, s)| s.live_bytes),
                last_error: i.last_error.clone(),
                relists: i.relists,
                watch_restarts: i.watch_restarts,
                events_applied: i.events_applied,
                restarts: i.restarts,
                bad_frames: i.bad_frames,
                since_last_event: i.last_event.map(|t| t.elapsed()),
                rejected: i.rejected,
            }
        })
    }
}
