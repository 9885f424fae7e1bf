//! Store state, the single writer, and the reader API.

use std::sync::Arc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use bytes::Bytes;
use imbl::{OrdMap, Vector};
use tokio::sync::{broadcast, watch};

use super::object::{Key, Object};
use crate::resource::ResourceInfo;

/// Default history window: the apiserver's `EventsHistoryWindow` (75 s, `storagebackend/config.go`).
pub const DEFAULT_HISTORY_WINDOW: Duration = Duration::from_secs(75);
/// Upper bound on history events: the apiserver's watch-cache capacity upper bound (100 × 1024).
pub const DEFAULT_HISTORY_MAX_EVENTS: usize = 102_400;
/// Upper bound on bytes referenced by the history (objects also live in snapshots, so this is an upper bound).
pub const DEFAULT_HISTORY_MAX_BYTES: usize = 512 << 20;
/// Snapshots are retained as long as ListFromCacheSnapshot keeps them: the history window.
pub const DEFAULT_RETAIN_WINDOW: Duration = Duration::from_secs(75);
/// Upper bound on retained snapshots (each costs a few KiB of path-copied tree nodes).
pub const DEFAULT_RETAIN_MAX: usize = 10_000;
/// Broadcast ring capacity: a watcher more than this many events behind is cut off (slow watcher).
pub const DEFAULT_BROADCAST_CAPACITY: usize = 4096;

/// Bounds of one store.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    pub history_window: Duration,
    pub history_max_events: usize,
    pub history_max_bytes: usize,
    pub retain_window: Duration,
    pub retain_max: usize,
    pub broadcast_capacity: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            history_window: DEFAULT_HISTORY_WINDOW,
            history_max_events: DEFAULT_HISTORY_MAX_EVENTS,
            history_max_bytes: DEFAULT_HISTORY_MAX_BYTES,
            retain_window: DEFAULT_RETAIN_WINDOW,
            retain_max: DEFAULT_RETAIN_MAX,
            broadcast_capacity: DEFAULT_BROADCAST_CAPACITY,
        }
    }
}

/// The kind of a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One applied change, as kept in the history and broadcast to watchers.
#[derive(Debug)]
pub struct Event {
    /// The event's resourceVersion (the object's RV after the change; for a deletion, the deletion RV).
    pub rv: u64,
    pub kind: EventType,
    /// The object after the change; for `Deleted`, the object as the upstream sent it in the DELETED event.
    pub object: Arc<Object>,
    /// The object before the change (`None` for `Added`); watchers with selectors need it.
    pub prev: Option<Arc<Object>>,
    /// Lazily framed JSON watch line (`{"type":…,"object":…}\n`), built once and shared by all watchers.
    pub json_frame: OnceLock<Bytes>,
    /// When the event was applied (history eviction by time).
    pub applied_at: Instant,
}

/// An immutable view of every object of the resource at one resourceVersion.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub rv: u64,
    pub objects: OrdMap<Key, Arc<Object>>,
    /// When this snapshot was taken (retention by time).
    pub taken_at: Instant,
}

/// What is broadcast to watchers.
#[derive(Clone, Debug)]
pub enum Signal {
    /// A new event was applied.
    Event(Arc<Event>),
    /// The resourceVersion advanced without an event (an upstream bookmark).
    Progress(u64),
    /// The store was rebuilt from a relist; every watcher of an older generation must end.
    Reset { generation: u64 },
}

/// A published, immutable state of the store.
#[derive(Clone, Debug)]
pub struct State {
    /// Bumped on every relist ([`Writer::replace`]).
    pub generation: u64,
    /// True once the first full state was published.
    pub synced: bool,
    pub snapshot: Arc<Snapshot>,
    /// Events in ascending RV order, all with RV > `history_floor`.
    pub history: Vector<Arc<Event>>,
    /// The oldest resourceVersion a watch can resume from: a watch from RV ≥ this replays every later event.
    /// It is the relist RV until events are evicted, then the RV of the last evicted event.
    pub history_floor: u64,
    /// Snapshots in ascending RV order (the current one included), for Exact reads and continue tokens.
    pub retained: Vector<Arc<Snapshot>>,
    /// Bytes of live objects (sum of `Object::heap_bytes`).
    pub live_bytes: usize,
    /// Bytes referenced by history events.
    pub history_bytes: usize,
}

/// A watch asked to resume from a resourceVersion older than the history holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("too old resource version: {requested} ({oldest})")]
pub struct TooOld {
    pub requested: u64,
    /// The apiserver prints `oldest - 1` in parentheses; this is that number.
    pub oldest: u64,
}

/// Waiting for a resourceVersion failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WaitError {
    /// The store did not reach the resourceVersion in time; `current` is where it is.
    #[error("Too large resource version: {requested}, current: {current}")]
    TooLarge { requested: u64, current: u64 },
}

/// Counters for metrics.
#[derive(Clone, Debug, Default)]
pub struct StoreStats {
    pub objects: usize,
    pub live_bytes: usize,
    pub history_events: usize,
    pub history_bytes: usize,
    pub history_span: Duration,
    pub retained_snapshots: usize,
    pub resource_version: u64,
    pub generation: u64,
}

/// One cached resource's store. Shared (`Arc<Store>`) by the reflector's writer and all readers.
pub struct Store {
    info: ResourceInfo,
    config: StoreConfig,
    state: ArcSwap<State>,
    rv: watch::Sender<u64>,
    signals: broadcast::Sender<Signal>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("gvr", &self.info.gvr).finish_non_exhaustive()
    }
}

// === impl Store ===

impl Store {
    /// Creates an empty, unsynced store and its single writer.
    pub fn new(info: ResourceInfo, config: StoreConfig) -> (Arc<Store>, Writer) {
        let now = Instant::now();
        let snapshot = Arc::new(Snapshot { rv: 0, objects: OrdMap::new(), taken_at: now });
        let state = State {
            generation: 0,
            synced: false,
            snapshot,
            history: Vector::new(),
            history_floor: 0,
            retained: Vector::new(),
            live_bytes: 0,
            history_bytes: 0,
        };
        let (signals, _) = broadcast::channel(config.broadcast_capacity.max(1));
        let (rv, _) = watch::channel(0);
        let store = Arc::new(Store { info, config, state: ArcSwap::from_pointee(state), rv, signals });
        let writer = Writer { store: store.clone() };
        (store, writer)
    }

    pub fn info(&self) -> &ResourceInfo {
        &self.info
    }

    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// The current published state. Cheap; never blocks.
    pub fn load(&self) -> Arc<State> {
        self.state.load_full()
    }

    /// The current snapshot.
    pub fn current(&self) -> Arc<Snapshot> {
        self.state.load().snapshot.clone()
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        *self.rv.borrow()
    }

    pub fn is_synced(&self) -> bool {
        self.state.load().synced
    }

    /// Subscribes to new signals. Subscribe *before* reading the history so no event falls in between;
    /// then skip signals with RV ≤ the last replayed one.
    pub fn subscribe(&self) -> broadcast::Receiver<Signal> {
        self.signals.subscribe()
    }

    /// A receiver of the store's resourceVersion, for waiting.
    pub fn watch_rv(&self) -> watch::Receiver<u64> {
        self.rv.subscribe()
    }

    /// Number of live subscribers (watchers).
    pub fn subscribers(&self) -> usize {
        self.signals.receiver_count()
    }

    /// Waits until the store's resourceVersion is ≥ `rv`, at most `timeout`.
    pub async fn wait_for(&self, rv: u64, timeout: Duration) -> Result<(), WaitError> {
        let mut rx = self.rv.subscribe();
        let reached = tokio::time::timeout(timeout, rx.wait_for(|cur| *cur >= rv)).await;
        match reached {
            Ok(Ok(_)) => Ok(()),
            _ => Err(WaitError::TooLarge { requested: rv, current: self.resource_version() }),
        }
    }

    /// The retained snapshot for an exact read at `rv`: the one with the greatest RV ≤ `rv`.
    ///
    /// `None` when `rv` is older than every retained snapshot (the caller forwards upstream) or newer than
    /// the current one (the caller waits first).
    pub fn snapshot_at(&self, rv: u64) -> Option<Arc<Snapshot>> {
        let state = self.state.load();
        if rv > state.snapshot.rv {
            return None;
        }
        if rv == state.snapshot.rv {
            return Some(state.snapshot.clone());
        }
        let retained = &state.retained;
        // Binary search for the last snapshot with rv <= requested.
        let (mut lo, mut hi) = (0usize, retained.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if retained[mid].rv <= rv { lo = mid + 1 } else { hi = mid }
        }
        if lo == 0 { None } else { Some(retained[lo - 1].clone()) }
    }

    /// The oldest resourceVersion an exact read can be served at (`None` before the first sync).
    pub fn oldest_retained_rv(&self) -> Option<u64> {
        let state = self.state.load();
        if !state.synced {
            return None;
        }
        Some(state.retained.front().map_or(state.snapshot.rv, |s| s.rv))
    }

    /// Every history event with RV > `rv`, for a watch resuming at `rv`, plus the state's generation.
    pub fn events_after(&self, rv: u64) -> Result<(Vec<Arc<Event>>, u64), TooOld> {
        let state = self.state.load();
        if rv < state.history_floor {
            return Err(TooOld { requested: rv, oldest: state.history_floor });
        }
        // Events are sorted by rv: find the first one > rv.
        let history = &state.history;
        let (mut lo, mut hi) = (0usize, history.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if history[mid].rv <= rv { lo = mid + 1 } else { hi = mid }
        }
        Ok((history.iter().skip(lo).cloned().collect(), state.generation))
    }

    /// Current sizes, for metrics.
    pub fn stats(&self) -> StoreStats {
        let state = self.state.load();
        let span = match (state.history.front(), state.history.back()) {
            (Some(a), Some(b)) => b.applied_at.saturating_duration_since(a.applied_at),
            _ => Duration::ZERO,
        };
        StoreStats {
            objects: state.snapshot.objects.len(),
            live_bytes: state.live_bytes,
            history_events: state.history.len(),
            history_bytes: state.history_bytes,
            history_span: span,
            retained_snapshots: state.retained.len(),
            resource_version: state.snapshot.rv,
            generation: state.generation,
        }
    }
}

/// The store's single writer. Not `Clone`: only the reflector holds it.
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

// === impl Writer ===

impl Writer {
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
        for object in objects {
            live_bytes += object.heap_bytes();
            map.insert(object.key.clone(), object);
        }
        let old = self.store.state.load_full();
        let generation = old.generation + 1;
        let snapshot = Arc::new(Snapshot { rv, objects: map, taken_at: now });
        let mut retained = Vector::new();
        retained.push_back(snapshot.clone());
        let state = State {
            generation,
            synced: true,
            snapshot,
            history: Vector::new(),
            history_floor: rv,
            retained,
            live_bytes,
            history_bytes: 0,
        };
        self.store.state.store(Arc::new(state));
        self.store.rv.send_replace(rv);
        if old.synced {
            let _ = self.store.signals.send(Signal::Reset { generation });
        }
    }

    /// Applies a batch of changes in order and publishes once. Each item is the event type and the object
    /// as the upstream sent it; the object's resourceVersion is the event's RV.
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
                    state.live_bytes += object.heap_bytes();
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
                state.live_bytes = state.live_bytes.saturating_sub(p.heap_bytes());
            }
            // An ADDED for a key we hold is a MODIFIED for watchers' purposes, and vice versa.
            let kind = match (kind, &prev) {
                (EventType::Added, Some(_)) => EventType::Modified,
                (EventType::Modified, None) => EventType::Added,
                (k, _) => k,
            };
            rv = erv;
            let event =
                Arc::new(Event { rv, kind, object, prev, json_frame: OnceLock::new(), applied_at: now });
            state.history_bytes += event.object.raw.len();
            state.history.push_back(event.clone());
            let snap = Arc::new(Snapshot { rv, objects: objects.clone(), taken_at: now });
            state.retained.push_back(snap);
            new_events.push(event);
            outcome.applied += 1;
        }
        if rv == cur.snapshot.rv {
            return outcome;
        }
        state.snapshot = Arc::new(Snapshot { rv, objects, taken_at: now });
        if state.retained.back().map(|s| s.rv) != Some(rv) {
            state.retained.push_back(state.snapshot.clone());
        }
        self.evict(&mut state, now);
        self.store.state.store(Arc::new(state));
        self.store.rv.send_replace(rv);
        for event in new_events {
            let _ = self.store.signals.send(Signal::Event(event));
        }
        outcome
    }

    /// Advances the resourceVersion without a change (an upstream bookmark or progress signal).
    pub fn progress(&mut self, rv: u64) {
        let cur = self.store.state.load_full();
        if rv <= cur.snapshot.rv {
            return;
        }
        let now = Instant::now();
        let mut state = (*cur).clone();
        state.snapshot = Arc::new(Snapshot { rv, objects: cur.snapshot.objects.clone(), taken_at: now });
        state.retained.push_back(state.snapshot.clone());
        self.evict(&mut state, now);
        self.store.state.store(Arc::new(state));
        self.store.rv.send_replace(rv);
        let _ = self.store.signals.send(Signal::Progress(rv));
    }

    /// Drops history events and retained snapshots beyond the configured bounds.
    fn evict(&self, state: &mut State, now: Instant) {
        let cfg = &self.store.config;
        while let Some(front) = state.history.front() {
            let too_many = state.history.len() > cfg.history_max_events;
            let too_big = state.history_bytes > cfg.history_max_bytes;
            let too_old = now.saturating_duration_since(front.applied_at) > cfg.history_window;
            if !(too_many || too_big || too_old) {
                break;
            }
            let ev = state.history.pop_front().expect("front exists");
            state.history_bytes = state.history_bytes.saturating_sub(ev.object.raw.len());
            state.history_floor = ev.rv;
        }
        // Always keep the current snapshot; drop older ones past the bounds.
        while state.retained.len() > 1 {
            let front = state.retained.front().expect("len > 1");
            let too_many = state.retained.len() > cfg.retain_max;
            let too_old = now.saturating_duration_since(front.taken_at) > cfg.retain_window;
            if !(too_many || too_old) {
                break;
            }
            state.retained.pop_front();
        }
    }
}
