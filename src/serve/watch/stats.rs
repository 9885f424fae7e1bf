//! Process-wide watch counters (exported as metrics by `metrics`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

static STARTED: AtomicU64 = AtomicU64::new(0);
static ACTIVE: AtomicU64 = AtomicU64::new(0);
static CLOSED_SLOW: AtomicU64 = AtomicU64::new(0);
static CLOSED_RESET: AtomicU64 = AtomicU64::new(0);
static EXPIRED: AtomicU64 = AtomicU64::new(0);
static TOO_LARGE: AtomicU64 = AtomicU64::new(0);
static REJECTED: AtomicU64 = AtomicU64::new(0);
static EVENTS: AtomicU64 = AtomicU64::new(0);
static BOOKMARKS: AtomicU64 = AtomicU64::new(0);

/// A copy of the counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WatchStats {
    /// Watch streams opened since start.
    pub started: u64,
    /// Watch streams currently open.
    pub active: u64,
    /// Watchers closed because they fell behind the store's broadcast ring (slow clients); the
    /// counterpart of `apiserver_terminated_watchers_total`.
    pub closed_slow: u64,
    /// Watchers closed because the store was rebuilt from a relist.
    pub closed_reset: u64,
    /// Watches answered with 410 Expired (resourceVersion older than the history).
    pub expired: u64,
    /// Watches answered with 504 (the store did not reach the requested resourceVersion in time).
    pub too_large: u64,
    /// Watches refused because the resource had too many watchers.
    pub rejected: u64,
    /// ADDED/MODIFIED/DELETED events sent.
    pub events_sent: u64,
    /// BOOKMARK events sent.
    pub bookmarks_sent: u64,
}

/// The current counters.
pub fn stats() -> WatchStats {
    WatchStats {
        started: STARTED.load(Relaxed),
        active: ACTIVE.load(Relaxed),
        closed_slow: CLOSED_SLOW.load(Relaxed),
        closed_reset: CLOSED_RESET.load(Relaxed),
        expired: EXPIRED.load(Relaxed),
        too_large: TOO_LARGE.load(Relaxed),
        rejected: REJECTED.load(Relaxed),
        events_sent: EVENTS.load(Relaxed),
        bookmarks_sent: BOOKMARKS.load(Relaxed),
    }
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

pub(crate) fn record_end(reason: EndReason) {
    let counter = match reason {
        EndReason::Slow => &CLOSED_SLOW,
        EndReason::Reset => &CLOSED_RESET,
        EndReason::Expired => &EXPIRED,
        EndReason::TooLarge => &TOO_LARGE,
        EndReason::Normal => return,
    };
    counter.fetch_add(1, Relaxed);
}

pub(crate) fn record_rejected() {
    REJECTED.fetch_add(1, Relaxed);
}

pub(crate) fn record_events(n: u64) {
    EVENTS.fetch_add(n, Relaxed);
}

pub(crate) fn record_bookmark() {
    BOOKMARKS.fetch_add(1, Relaxed);
}

/// Counts a watcher as active while alive.
#[derive(Debug)]
pub(crate) struct ActiveGuard(());

impl ActiveGuard {
    pub(crate) fn new() -> Self {
        STARTED.fetch_add(1, Relaxed);
        ACTIVE.fetch_add(1, Relaxed);
        Self(())
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        ACTIVE.fetch_sub(1, Relaxed);
    }
}
