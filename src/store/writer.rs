//! The store's single writer: relists, batches of events, progress; bounded history and retention.

use std::sync::Arc;
use std::sync::OnceLock;
use tokio::time::Instant;

use imbl::OrdMap;

use super::config::{EVENT_OVERHEAD, MAP_ENTRY_OVERHEAD};
use super::log::Log;
use super::object::Object;
use super::snapshot::{FieldIndex, Snapshot};
use super::state::{Counters, Event, EventType, State, Store, retained_cost};

/// The store's single writer. Not `Clone`: only the reflector holds it.
///
/// Dropping it (the reflector stopped, panicked or ended) takes the store down: it stops counting as synced,
/// so reads are forwarded and readiness fails, and its watchers are ended, since nothing keeps the state equal
/// to the upstream any more. [`Store::reopen`] hands out a new writer for the same store.
pub struct Writer {
    store: Arc<Store>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("gvr", &self.store.info.gvr).finish()
    }
}

/// Outcome of applying a batch, for metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ApplyOutcome {
    pub applied: usize,
    /// Events at or below the current RV (duplicates after a re-watch), skipped.
    pub stale: usize,
    /// Deletions of objects the store does not hold, skipped.
    pub unknown_deletes: usize,
}

/// Estimated bytes of one object in the live map.
fn live_cost(object: &Object) -> usize {
    object.heap_bytes() + MAP_ENTRY_OVERHEAD
}

/// Estimated bytes an event keeps alive beyond the live objects: itself, the version it replaced, and
/// for a deletion the object the upstream sent with it. The same for an event whenever it is computed,
/// so adding at append and subtracting at eviction balance exactly.
fn event_cost(event: &Event) -> usize {
    let prev = event.prev.as_ref().map_or(0, |p| p.heap_bytes());
    let tombstone = if event.kind == EventType::Deleted { event.object.heap_bytes() } else { 0 };
    EVENT_OVERHEAD + prev + tombstone
}

// === impl Writer ===

impl Drop for Writer {
    fn drop(&mut self) {
        self.abandon();
        self.store.writer_alive.store(false, std::sync::atomic::Ordering::Release);
    }
}

impl Writer {
    pub(super) fn new(store: Arc<Store>) -> Self {
        Self { store }
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Replaces the whole state with a fresh list at `rv` (initial sync or relist), built to the side and
    /// published in one swap. Bumps the generation, clears the history and retained snapshots, and tells every
    /// watcher to end.
    pub fn replace(&mut self, objects: impl IntoIterator<Item = Arc<Object>>, rv: u64) {
        let now = Instant::now();
        let mut map = OrdMap::new();
        let mut live_bytes = 0;
        let mut index = self.store.indexed_field.map(FieldIndex::new);
        let mut index_bytes = 0;
        for object in objects {
            live_bytes += live_cost(&object);
            if let Some(index) = &mut index {
                index_bytes += index.insert(&object);
            }
            // A duplicate key in a list cannot happen upstream; the last one wins, accounted once.
            if let Some(dup) = map.insert(object.key.clone(), object) {
                live_bytes -= live_cost(&dup);
            }
        }
        let old = self.store.state.load_full();
        let generation = old.generation + 1;
        let snapshot = Arc::new(Snapshot { rv, objects: map, taken_at: now });
        let mut retained = Log::new();
        retained.push(snapshot.clone());
        let state = State {
            generation,
            synced: true,
            snapshot,
            history: Log::new(),
            history_floor: rv,
            retained,
            index,
            live_bytes,
            history_bytes: 0,
            retained_bytes: 0,
            index_bytes,
            updated_at: now,
        };
        self.store.state.store(Arc::new(state));
        self.store.rv.send_replace(rv);
        // Any earlier state (synced, or taken down when a previous writer was dropped) is replaced: its
        // watchers end.
        if old.generation > 0 {
            Counters::add(&self.store.counters.relists, 1);
            self.store.dispatch.reset(generation);
        }
        // After the reset: a watcher of the old generation that sees the new revision also has the reset
        // in its ring, so it cannot claim that revision in a bookmark (dispatch.rs invariants).
        self.store.dispatch.rewind(rv);
    }

    /// Takes the store down (see the type's doc): publishes it unsynced under a new generation and ends
    /// every watcher. A store that never synced has nothing to take down.
    fn abandon(&mut self) {
        let cur = self.store.state.load_full();
        if !cur.synced {
            return;
        }
        let mut state = (*cur).clone();
        state.synced = false;
        state.generation += 1;
        state.updated_at = Instant::now();
        let generation = state.generation;
        self.store.state.store(Arc::new(state));
        self.store.dispatch.reset(generation);
    }

    /// Applies a batch of changes in order and publishes once. Each item is the event type and the object
    /// as the upstream sent it; the object's resourceVersion is the event's RV.
    ///
    /// Events at or below the store's RV are skipped as stale (a re-watch may replay them); a deletion of
    /// an unknown key advances the RV without an event. Every applied event gets a retained snapshot.
    pub fn apply(&mut self, batch: impl IntoIterator<Item = (EventType, Arc<Object>)>) -> ApplyOutcome {
        let now = Instant::now();
        let cur = self.store.state.load_full();
        let mut state = (*cur).clone();
        let mut objects = state.snapshot.objects.clone();
        let mut rv = state.snapshot.rv;
        let mut outcome = ApplyOutcome::default();
        let mut new_events = Vec::new();
        for (kind, object) in batch {
            let erv = object.resource_version;
            if erv <= rv {
                outcome.stale += 1;
                continue;
            }
            let prev = match kind {
                EventType::Added | EventType::Modified => {
                    state.live_bytes += live_cost(&object);
                    objects.insert(object.key.clone(), object.clone())
                }
                EventType::Deleted => match objects.remove(&object.key) {
                    Some(prev) => Some(prev),
                    None => {
                        outcome.unknown_deletes += 1;
                        rv = erv;
                        continue;
                    }
                },
            };
            if let Some(p) = &prev {
                state.live_bytes = state.live_bytes.saturating_sub(live_cost(p));
            }
            if let Some(index) = &mut state.index {
                state.index_bytes = match (kind, &prev) {
                    (EventType::Deleted, Some(p)) => state.index_bytes.saturating_sub(index.remove(p)),
                    (_, Some(p)) => state.index_bytes.saturating_add_signed(index.update(p, &object)),
                    (_, None) => state.index_bytes + index.insert(&object),
                };
            }
            // An ADDED for a key we hold is a MODIFIED for watchers' purposes, and vice versa.
            let kind = match (kind, &prev) {
                (EventType::Added, Some(_)) => EventType::Modified,
                (EventType::Modified, None) => EventType::Added,
                (k, _) => k,
            };
            rv = erv;
            let event = Arc::new(Event {
                rv,
                kind,
                object,
                prev,
                json_frame: OnceLock::new(),
                proto_frame: OnceLock::new(),
                applied_at: now,
            });
            state.history_bytes += event_cost(&event);
            state.history.push(event.clone());
            self.retain(&mut state, Arc::new(Snapshot { rv, objects: objects.clone(), taken_at: now }));
            new_events.push(event);
            outcome.applied += 1;
        }
        let counters = &self.store.counters;
        Counters::add(&counters.applied, outcome.applied as u64);
        Counters::add(&counters.stale, outcome.stale as u64);
        Counters::add(&counters.unknown_deletes, outcome.unknown_deletes as u64);
        if rv == cur.snapshot.rv {
            return outcome;
        }
        match state.retained.back() {
            // The last event's snapshot is the new current one.
            Some(last) if last.rv == rv => state.snapshot = last.clone(),
            // Only unknown deletions since the last event: the RV moved without a change.
            _ => {
                let snapshot = Arc::new(Snapshot { rv, objects, taken_at: now });
                state.snapshot = snapshot.clone();
                self.retain(&mut state, snapshot);
            }
        }
        state.updated_at = now;
        self.evict(&mut state, now);
        self.store.state.store(Arc::new(state));
        self.store.rv.send_replace(rv);
        for event in new_events {
            self.store.dispatch.event(event);
        }
        outcome
    }

    /// Advances the resourceVersion without a change (an upstream bookmark or progress signal).
    /// Records what follows `metadata` in the upstream's BOOKMARK objects (kache's bookmarks then carry
    /// the same typed zero value); a no-op when unchanged.
    pub(crate) fn learn_bookmark_tail(&self, tail: bytes::Bytes) {
        let current = self.store.bookmark_tail.load();
        if current.as_deref() != Some(&tail) {
            self.store.bookmark_tail.store(Some(Arc::new(tail)));
        }
    }

    /// Records the `Warning` headers the upstream attached to the latest list or watch of the whole
    /// resource (bounded by the reflector); a no-op when unchanged.
    pub(crate) fn learn_warnings(&self, warnings: Vec<http::HeaderValue>) {
        if **self.store.warnings.load() != warnings {
            self.store.warnings.store(Arc::new(warnings));
        }
    }

    pub fn progress(&mut self, rv: u64) {
        let now = Instant::now();
        let cur = self.store.state.load_full();
        if rv <= cur.snapshot.rv {
            return;
        }
        let mut state = (*cur).clone();
        let snapshot = Arc::new(Snapshot { rv, objects: cur.snapshot.objects.clone(), taken_at: now });
        state.snapshot = snapshot.clone();
        self.retain(&mut state, snapshot);
        state.updated_at = now;
        self.evict(&mut state, now);
        self.store.state.store(Arc::new(state));
        self.store.rv.send_replace(rv);
        Counters::add(&self.store.counters.progress, 1);
        self.store.dispatch.progress(rv);
    }

    /// Appends a snapshot to the retained log. The previous newest snapshot now shares its map with a
    /// newer one, so from here on it costs a path copy (see [`retained_cost`]).
    fn retain(&self, state: &mut State, snapshot: Arc<Snapshot>) {
        if let Some(prev) = state.retained.back() {
            state.retained_bytes += retained_cost(prev.objects.len());
        }
        state.retained.push(snapshot);
    }

    /// Drops history events and retained snapshots beyond the configured bounds. Each entry is evicted
    /// once and the logs pop in O(1), so eviction is O(1) amortised per applied event.
    fn evict(&self, state: &mut State, now: Instant) {
        let cfg = &self.store.config;
        while let Some(front) = state.history.front() {
            let too_many = state.history.len() > cfg.history_max_events;
            let too_big = state.history_bytes > cfg.history_max_bytes;
            let too_old = now.saturating_duration_since(front.applied_at) > cfg.history_window;
            if !(too_many || too_big || too_old) {
                break;
            }
            let Some(event) = state.history.pop_front() else { break };
            state.history_bytes = state.history_bytes.saturating_sub(event_cost(&event));
            state.history_floor = event.rv;
        }
        // Always keep the current snapshot; drop older ones past the bounds.
        while state.retained.len() > 1 {
            let Some(front) = state.retained.front() else { break };
            let too_many = state.retained.len() > cfg.retain_max;
            let too_old = now.saturating_duration_since(front.taken_at) > cfg.retain_window;
            if !(too_many || too_old) {
                break;
            }
            if let Some(dropped) = state.retained.pop_front() {
                state.retained_bytes =
                    state.retained_bytes.saturating_sub(retained_cost(dropped.objects.len()));
            }
        }
    }
}
