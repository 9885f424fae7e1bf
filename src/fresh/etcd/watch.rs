//! One etcd watch per cached resource, on its key prefix: what it tells the oracle is which revisions wrote
//! to the prefix and up to which revision it has told everything (its progress). Only keys and revisions
//! are read: the values etcd sends with each event are dropped undecoded (etcd has no keys-only watch).
//!
//! The watch starts when its resource's store is synced ([`super::Oracle::watch_of`], called for every synced
//! store by the freshness task), not at the first consistent read, so the first reads find it ready.
//!
//! An attempt: wait for the store to be synced; **verify** the prefix against the store's snapshot at its
//! revision X (etcd, read at X, holds as many keys under the prefix as the snapshot holds objects, and the
//! snapshot's first object's key with its resourceVersion as mod_revision: a wrong prefix, another etcd or
//! a revision space that is not the apiserver's fails it); then watch from X + 1, so every write after X is
//! seen and writes up to X are in the store already. Events whose key is not an object key of the resource
//! ([`super::layout::object_key`]), a cancelled or compacted watch, an error or the end of the stream end the
//! attempt: the oracle is off for the resource until a new attempt is verified.
//!
//! A watch is ready only once etcd has answered a progress request on it, or etcd's revision shows nothing was
//! written since X. etcd (3.6 `progressIfSync`) drops a progress request, without an answer, while any watcher
//! of the stream is still catching up from its start revision (an "unsynced" watcher, moved to the synced
//! group by a loop that runs every 100 ms) or while etcd's revision is below the watch's start: before that, a
//! reader's progress request could go unanswered and the read would fall back for nothing.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use etcd_client::{GetOptions, WatchOptions};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::layout::{Origin, object_key};
use super::{Inner, WatchState};
use crate::store::Store;

/// Write revisions remembered per prefix: older ones are folded into the base (a safe over-estimate of the
/// last write at or below a revision).
const MAX_WRITES: usize = 4096;
/// Wait between attempts after a failure (etcd down, a cancelled watch).
const RETRY: Duration = Duration::from_secs(1);
/// Wait before verifying again a prefix that did not match the store (or could not be verified yet: an
/// empty store under a guessed prefix).
const REVERIFY: Duration = Duration::from_secs(10);
/// An etcd request of an attempt that takes longer fails it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a new watch asks for its first progress until etcd answers: etcd moves a watcher that started in
/// the past to its synced group every 100 ms (`watchResyncPeriod`) and drops progress requests before that.
const FIRST_PROGRESS_RETRY: Duration = Duration::from_millis(100);

/// What the watch knows. Invariant: while `ready`, every write to the prefix in `(base, progress]` is in
/// `writes` or at or below `base`.
#[derive(Debug, Default)]
pub(super) struct Known {
    pub(super) ready: bool,
    pub(super) base: u64,
    pub(super) progress: u64,
    writes: VecDeque<u64>,
}

impl Known {
    /// The revision of the last write to the prefix at or below `r` (over-estimated at worst), once the
    /// watch's progress has reached `r`.
    pub(super) fn floor(&self, r: u64) -> Option<u64> {
        if !self.ready || self.progress < r {
            return None;
        }
        let last = self.writes.iter().rev().find(|&&w| w <= r).copied().unwrap_or(0);
        Some(self.base.max(last))
    }

    fn write(&mut self, rev: u64) {
        if self.writes.back().is_none_or(|&last| rev > last) {
            self.writes.push_back(rev);
        }
        if self.writes.len() > MAX_WRITES
            && let Some(old) = self.writes.pop_front()
        {
            self.base = self.base.max(old);
        }
        self.progress = self.progress.max(rev);
    }
}

/// One resource's prefix watch, shared by its readers.
pub(super) struct PrefixWatch {
    pub(super) prefix: String,
    origin: Origin,
    namespaced: bool,
    filtered: bool,
    pub(super) known: Mutex<Known>,
    /// The watch's progress, published for readers waiting for a revision.
    pub(super) progress: watch::Sender<u64>,
    /// When the last progress request was asked for (coalescing: one request serves every reader whose
    /// revision was known by then).
    pub(super) requested: Mutex<Option<Instant>>,
    pub(super) nudge: Notify,
    pub(super) state: watch::Sender<WatchState>,
    /// Set when the first attempt ended or made the watch ready: readiness waits for it (`/readyz`'s `etcd`).
    pub(super) settled: AtomicBool,
    /// The store it vouches for (a resource's store replaced gets a watch of its own).
    pub(super) store: Weak<Store>,
    /// Cancelled when the watch is replaced: its task ends.
    pub(super) retired: CancellationToken,
}

/// Why an attempt ended.
enum End {
    /// Try again soon (etcd unreachable, the watch cancelled, compacted or ended).
    Retry(&'static str),
    /// The prefix does not hold the resource as the store does: try again much later.
    Layout(&'static str),
}

impl PrefixWatch {
    pub(super) fn new(
        prefix: String,
        origin: Origin,
        namespaced: bool,
        filtered: bool,
        store: Weak<Store>,
    ) -> Self {
        Self {
            prefix,
            origin,
            namespaced,
            filtered,
            known: Mutex::new(Known::default()),
            progress: watch::channel(0).0,
            requested: Mutex::new(None),
            nudge: Notify::new(),
            state: watch::channel(WatchState::Starting).0,
            settled: AtomicBool::new(false),
            store,
            retired: CancellationToken::new(),
        }
    }

    pub(super) fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        self.known.lock().expect("etcd watch lock poisoned")
    }

    pub(super) fn state(&self) -> WatchState {
        *self.state.borrow()
    }

    fn set_state(&self, state: WatchState) {
        self.state.send_replace(state);
        if state != WatchState::Starting {
            self.settled.store(true, Relaxed);
        }
    }

    /// Whether this watch is the one of `store` (not of a store its resource had before).
    pub(super) fn vouches_for(&self, store: &Arc<Store>) -> bool {
        std::ptr::eq(self.store.as_ptr(), Arc::as_ptr(store))
    }

    /// Whether the first attempt has ended or made the watch ready.
    pub(super) fn settled(&self) -> bool {
        self.settled.load(Relaxed)
    }

    /// Waits at most `limit` for the watch to leave `Starting`; its state then.
    pub(super) async fn started(&self, limit: Duration) -> WatchState {
        let mut rx = self.state.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|s| *s != WatchState::Starting)).await;
        self.state()
    }

    /// Runs attempts until the store is gone.
    pub(super) async fn run(self: Arc<Self>, inner: Arc<Inner>) {
        loop {
            if self.store.strong_count() == 0 || self.retired.is_cancelled() {
                return;
            }
            let end = tokio::select! {
                end = self.attempt(&inner) => end,
                () = self.retired.cancelled() => return,
            };
            *self.known() = Known::default();
            let pause = match end {
                End::Retry(why) => {
                    tracing::debug!(prefix = %self.prefix, why, "etcd watch attempt ended");
                    self.set_state(WatchState::Down);
                    RETRY
                }
                End::Layout(why) => {
                    tracing::info!(prefix = %self.prefix, why, "etcd prefix does not match the store: oracle off for it");
                    self.set_state(WatchState::Layout);
                    REVERIFY
                }
            };
            inner.stats.watch_restarts.fetch_add(1, Relaxed);
            tokio::time::sleep(pause).await;
        }
    }

    async fn attempt(&self, inner: &Inner) -> End {
        self.set_state(WatchState::Starting);
        // The store synced first (its resourceVersion is 0 before), waited for without holding it.
        let Some(mut rv) = self.store.upgrade().map(|s| s.watch_rv()) else {
            return End::Retry("store gone");
        };
        if rv.wait_for(|rv| *rv > 0).await.is_err() {
            return End::Retry("store gone");
        }
        let Ok(mut client) = inner.client().await else { return End::Retry("etcd unreachable") };
        // Only the snapshot is needed (the watch itself never holds the store).
        let Some(snapshot) = self.store.upgrade().map(|s| s.load().snapshot.clone()) else {
            return End::Retry("store gone");
        };
        let x = snapshot.rv;
        if x == 0 {
            return End::Retry("store not synced");
        }
        // Verify the prefix at the snapshot's revision.
        inner.stats.verifies.fetch_add(1, Relaxed);
        if !self.filtered {
            let counted = client.get(
                self.prefix.as_str(),
                Some(GetOptions::new().with_prefix().with_count_only().with_revision(x as i64)),
            );
            match tokio::time::timeout(REQUEST_TIMEOUT, counted).await {
                Ok(Ok(resp)) if resp.count() == snapshot.len() as i64 => {}
                Ok(Ok(_)) => return End::Layout("key count differs from the store's"),
                _ => return End::Retry("verification failed"),
            }
        }
        match snapshot.objects.values().next() {
            Some(object) => {
                let key = format!("{}{}", self.prefix, object.key);
                let got = client.get(key, Some(GetOptions::new().with_keys_only().with_revision(x as i64)));
                match tokio::time::timeout(REQUEST_TIMEOUT, got).await {
                    Ok(Ok(resp)) => match resp.kvs().first() {
                        Some(kv) if kv.mod_revision() as u64 == object.resource_version => {}
                        _ => return End::Layout("an object's key or revision differs from the store's"),
                    },
                    _ => return End::Retry("verification failed"),
                }
            }
            // Nothing to compare a guessed prefix with (or, filtered, no count either): not before the store
            // holds an object.
            None if self.origin == Origin::Custom || self.filtered => {
                return End::Layout("nothing to verify yet");
            }
            None => {}
        }
        let options = WatchOptions::new().with_prefix().with_start_revision(x as i64 + 1);
        inner.stats.watches.fetch_add(1, Relaxed);
        let opened =
            tokio::time::timeout(REQUEST_TIMEOUT, client.watch(self.prefix.as_str(), Some(options))).await;
        let Ok(Ok(stream)) = opened else { return End::Retry("watch failed") };
        let (mut sender, mut responses) = stream.split();
        {
            let mut known = self.known();
            *known = Known { ready: true, base: x, progress: x, writes: VecDeque::new() };
        }
        self.progress.send_replace(x);
        // Ready at etcd's first progress answer (see the module's doc); asked again until it comes.
        let mut ready = false;
        let first_progress_by = Instant::now() + REQUEST_TIMEOUT;
        let mut ask_first = tokio::time::interval(FIRST_PROGRESS_RETRY);
        loop {
            tokio::select! {
                _ = ask_first.tick(), if !ready => {
                    if Instant::now() > first_progress_by {
                        return End::Retry("etcd did not answer the first progress request");
                    }
                    // etcd answers no progress request while its revision is below the watch's start (nothing
                    // written since X, a quiet etcd): the watch then has nothing to tell up to etcd's revision,
                    // and is ready as it is (etcd put it with its synced watchers from the start).
                    inner.stats.revisions.fetch_add(1, Relaxed);
                    let read = client.get(self.prefix.as_str(), Some(GetOptions::new().with_keys_only().with_limit(1)));
                    match tokio::time::timeout(REQUEST_TIMEOUT, read).await {
                        Ok(Ok(resp)) if resp.header().is_some_and(|h| h.revision() as u64 <= x) => {
                            ready = true;
                            self.set_state(WatchState::Ready);
                            continue;
                        }
                        Ok(Ok(_)) => {}
                        _ => return End::Retry("etcd revision read failed"),
                    }
                    inner.stats.progress_requests.fetch_add(1, Relaxed);
                    if sender.request_progress().await.is_err() {
                        return End::Retry("progress request failed");
                    }
                }
                () = self.nudge.notified() => {
                    inner.stats.progress_requests.fetch_add(1, Relaxed);
                    if sender.request_progress().await.is_err() {
                        return End::Retry("progress request failed");
                    }
                }
                message = responses.message() => {
                    let resp = match message {
                        Ok(Some(resp)) => resp,
                        Ok(None) => return End::Retry("watch ended"),
                        Err(_) => return End::Retry("watch failed"),
                    };
                    if resp.canceled() || resp.compact_revision() > 0 {
                        return End::Retry("watch cancelled or compacted");
                    }
                    let progress = if resp.events().is_empty() {
                        if resp.created() {
                            continue;
                        }
                        // A progress notification: every event up to its revision was sent.
                        if !ready {
                            ready = true;
                            self.set_state(WatchState::Ready);
                        }
                        resp.header().map_or(0, |h| h.revision() as u64)
                    } else {
                        let mut known = self.known();
                        for event in resp.events() {
                            let Some(kv) = event.kv() else { return End::Layout("an event without a key") };
                            if object_key(&self.prefix, kv.key(), self.namespaced).is_none() {
                                return End::Layout("a key outside the resource's layout");
                            }
                            known.write(kv.mod_revision() as u64);
                        }
                        known.progress
                    };
                    let mut known = self.known();
                    known.progress = known.progress.max(progress);
                    let now = known.progress;
                    drop(known);
                    self.progress.send_if_modified(|p| {
                        let moved = now > *p;
                        *p = (*p).max(now);
                        moved
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_is_the_last_write_at_or_below_the_revision_once_progress_reached_it() {
        let mut k = Known { ready: true, base: 10, progress: 10, writes: VecDeque::new() };
        assert_eq!(k.floor(10), Some(10));
        assert_eq!(k.floor(11), None, "progress not there yet");
        k.write(15);
        k.write(20);
        k.progress = 30;
        assert_eq!(k.floor(14), Some(10));
        assert_eq!(k.floor(17), Some(15));
        assert_eq!(k.floor(30), Some(20));
        assert_eq!(k.floor(31), None);
        k.ready = false;
        assert_eq!(k.floor(20), None, "a watch that is not ready knows nothing");
    }

    #[test]
    fn forgotten_writes_raise_the_base() {
        let mut k = Known { ready: true, base: 0, progress: 0, writes: VecDeque::new() };
        for rev in 1..=(MAX_WRITES as u64 + 2) {
            k.write(rev);
        }
        assert_eq!(k.base, 2);
        // Never below a write it forgot.
        assert_eq!(k.floor(1), Some(2));
        assert_eq!(k.floor(MAX_WRITES as u64 + 2), Some(MAX_WRITES as u64 + 2));
    }
}
