//! The published state, the store and its reader API. Readers load a whole [`State`] through arc-swap
//! and never lock; only the [`Writer`] (writer.rs) publishes.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

use arc_swap::ArcSwap;
use bytes::Bytes;
use imbl::OrdMap;
use tokio::sync::{broadcast, watch};

use super::dispatch::{Dispatcher, IndexKey, Subscription};

use super::config::{SNAPSHOT_OVERHEAD, StoreConfig, path_copy_bytes};
use super::log::{Cursor, Log};
use super::object::Object;
use super::snapshot::{FieldIndex, Snapshot};
use super::writer::Writer;
use crate::resource::{FieldKind, ResourceInfo};

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
    /// Lazily framed protobuf watch frame (length-prefixed `WatchEvent`) of the full object, shared likewise;
    /// `None` when the object could not be transcoded.
    pub proto_frame: OnceLock<Option<Bytes>>,
    /// When the event was applied (history eviction by time).
    pub applied_at: Instant,
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
    /// True from the first full state published by the live writer; false again once that writer is gone.
    pub synced: bool,
    pub snapshot: Arc<Snapshot>,
    /// Events in ascending RV order, all with RV > `history_floor`.
    pub history: Log<Arc<Event>>,
    /// The oldest resourceVersion a watch can resume from: a watch from RV ≥ this replays every later event.
    /// It is the relist RV until events are evicted, then the RV of the last evicted event.
    pub history_floor: u64,
    /// Snapshots in ascending RV order (the current one included), for Exact reads and continue tokens.
    pub retained: Log<Arc<Snapshot>>,
    /// Secondary index of the current snapshot (pods by `spec.nodeName`); `None` for other kinds.
    pub index: Option<FieldIndex>,
    /// Estimated bytes of the live objects and of the map holding them.
    pub live_bytes: usize,
    /// Estimated bytes the history keeps alive beyond the live objects: the versions replaced or deleted
    /// by its events (each counted once, by the event that replaced it) and the events themselves.
    pub history_bytes: usize,
    /// Estimated bytes of retained snapshots beyond the current one: one map path copy each.
    pub retained_bytes: usize,
    /// Estimated bytes of the secondary index.
    pub index_bytes: usize,
    /// When the last change, relist or progress was published.
    pub updated_at: Instant,
}

// === impl State ===

impl State {
    /// Objects whose extra field `field` equals `value`, with key ≥ `start`, in key order, from the
    /// current snapshot's index. `None` when that field is not indexed (the caller scans).
    pub fn by_field<'a>(
        &'a self,
        field: usize,
        value: &'a str,
        start: &str,
    ) -> Option<impl Iterator<Item = &'a Arc<Object>> + 'a> {
        let index = self.index.as_ref().filter(|i| i.field() == field)?;
        let objects = &self.snapshot.objects;
        // Every indexed key is in the snapshot (both change together in the writer).
        Some(index.keys(value, start).filter_map(move |key| objects.get(key)))
    }

    /// Total estimated bytes of this state.
    pub fn memory_bytes(&self) -> usize {
        self.live_bytes + self.history_bytes + self.retained_bytes + self.index_bytes
    }
}

/// Estimated bytes one retained snapshot of a map of `len` entries costs beyond the current one.
pub(super) fn retained_cost(len: usize) -> usize {
    SNAPSHOT_OVERHEAD + path_copy_bytes(len)
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

/// Sizes and counters, for metrics.
#[derive(Clone, Debug, Default)]
pub struct StoreStats {
    pub synced: bool,
    pub objects: usize,
    /// Estimated bytes of live objects (and their map).
    pub live_bytes: usize,
    pub history_events: usize,
    /// Estimated bytes the history keeps alive beyond the live objects.
    pub history_bytes: usize,
    pub history_span: Duration,
    pub history_floor: u64,
    pub retained_snapshots: usize,
    /// Estimated bytes of retained snapshots beyond the current one.
    pub retained_bytes: usize,
    pub index_bytes: usize,
    pub resource_version: u64,
    pub generation: u64,
    /// Time since the last published change, relist or bookmark.
    pub since_last_update: Duration,
    /// Events applied since the store was created.
    pub events_applied: u64,
    /// Events skipped as stale or duplicate (RV ≤ the store's; e.g. replayed after a re-watch).
    pub events_stale: u64,
    /// Deletions of objects the store did not hold (skipped, RV advanced).
    pub unknown_deletes: u64,
    /// Full replacements after the initial sync (relists).
    pub relists: u64,
    /// Resource-version advances without a change (bookmarks).
    pub progress_updates: u64,
    /// The watch index's figures.
    pub index: super::dispatch::IndexStats,
}

impl StoreStats {
    /// All estimated bytes: live objects, history, retained snapshots and index.
    pub fn memory_bytes(&self) -> usize {
        self.live_bytes + self.history_bytes + self.retained_bytes + self.index_bytes
    }
}

/// Monotonic counters kept outside the published state (a batch of only stale events publishes nothing).
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub applied: AtomicU64,
    pub stale: AtomicU64,
    pub unknown_deletes: AtomicU64,
    pub relists: AtomicU64,
    pub progress: AtomicU64,
}

impl Counters {
    pub fn add(counter: &AtomicU64, n: u64) {
        if n > 0 {
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// One cached resource's store. Shared (`Arc<Store>`) by the reflector's writer and all readers.
pub struct Store {
    pub(super) info: ResourceInfo,
    pub(super) config: StoreConfig,
    pub(super) state: ArcSwap<State>,
    pub(super) rv: watch::Sender<u64>,
    /// The latest freshness proof offered from outside the reflector: `(from, upto)` means the upstream has
    /// no event of this resource in `(from, upto]` (see [`Store::offer_progress`]).
    pub(super) offered: watch::Sender<(u64, u64)>,
    /// The fan-out of signals to watchers, indexed (dispatch.rs).
    pub(super) dispatch: Arc<Dispatcher>,
    pub(super) counters: Counters,
    /// The extra field indexed for this kind, if any.
    pub(super) indexed_field: Option<usize>,
    /// What follows `metadata` in the upstream's own BOOKMARK objects of this kind (its typed zero value,
    /// e.g. `,"spec":{},"status":{}`), learned from the watch stream; `None` until one was seen.
    pub(super) bookmark_tail: arc_swap::ArcSwapOption<Bytes>,
    /// The upstream's `Warning` headers on reads of this resource (a deprecated version's notice), learned
    /// from the reflector's own lists and watches; repeated on answers from memory.
    pub(super) warnings: ArcSwap<Vec<http::HeaderValue>>,
    /// Whether a [`Writer`] exists: at most one does (see [`Store::reopen`]).
    pub(super) writer_alive: AtomicBool,
    /// How long the last full list of the resource from the upstream took, in µs (0: none yet): what
    /// forwarding a list of the whole resource costs, measured (see [`Store::record_full_list`]).
    pub(super) full_list_micros: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("gvr", &self.info.gvr).finish_non_exhaustive()
    }
}

/// The field indexed for a kind: pods by `spec.nodeName` (what kubelets select on).
fn indexed_field(info: &ResourceInfo) -> Option<usize> {
    let kind = info.field_kind();
    (kind == FieldKind::Pod).then(|| kind.extra_fields().iter().position(|f| *f == "spec.nodeName"))?
}

// === impl Store ===

impl Store {
    /// The upstream's BOOKMARK object tail for this kind, once learned (see [`Writer::learn_bookmark_tail`]).
    pub fn bookmark_tail(&self) -> Option<Bytes> {
        self.bookmark_tail.load_full().map(|b| (*b).clone())
    }

    /// The upstream's `Warning` headers on reads of this resource (see [`Writer::learn_warnings`]).
    pub fn warnings(&self) -> Arc<Vec<http::HeaderValue>> {
        self.warnings.load_full()
    }

    /// Creates an empty, unsynced store and its single writer.
    pub fn new(info: ResourceInfo, config: StoreConfig) -> (Arc<Store>, Writer) {
        let indexed_field = indexed_field(&info);
        let state = State {
            generation: 0,
            synced: false,
            snapshot: Arc::new(Snapshot::new(0, OrdMap::new())),
            history: Log::new(),
            history_floor: 0,
            retained: Log::new(),
            index: indexed_field.map(FieldIndex::new),
            live_bytes: 0,
            history_bytes: 0,
            retained_bytes: 0,
            index_bytes: 0,
            updated_at: Instant::now(),
        };
        let dispatch = Dispatcher::new(config.broadcast_capacity, indexed_field);
        let (rv, _) = watch::channel(0);
        let (offered, _) = watch::channel((0, 0));
        let store = Arc::new(Store {
            info,
            config,
            state: ArcSwap::from_pointee(state),
            rv,
            offered,
            dispatch,
            counters: Counters::default(),
            bookmark_tail: arc_swap::ArcSwapOption::empty(),
            warnings: ArcSwap::from_pointee(Vec::new()),
            writer_alive: AtomicBool::new(true),
            indexed_field,
            full_list_micros: std::sync::atomic::AtomicU64::new(0),
        });
        let writer = Writer::new(store.clone());
        (store, writer)
    }

    /// A new writer for a store whose writer was dropped (its reflector panicked or ended and is being
    /// restarted); `None` while a writer exists, so there is never more than one. The store stays unsynced
    /// until the new writer publishes a full state ([`Writer::replace`]).
    pub(crate) fn reopen(self: &Arc<Self>) -> Option<Writer> {
        self.writer_alive.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).ok()?;
        Some(Writer::new(self.clone()))
    }

    pub fn info(&self) -> &ResourceInfo {
        &self.info
    }

    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// The extra field (index into `FieldKind::extra_fields`) that [`State::by_field`] serves, if any.
    pub(crate) fn indexed_field(&self) -> Option<usize> {
        self.indexed_field
    }

    /// The current published state. Cheap; never blocks.
    pub fn load(&self) -> Arc<State> {
        self.state.load_full()
    }

    /// The current snapshot.
    pub fn current(&self) -> Arc<Snapshot> {
        self.state.load().snapshot.clone()
    }

    /// Records how long a full list of the resource from the upstream took (the reflector's sync).
    pub fn record_full_list(&self, took: Duration) {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX).max(1);
        self.full_list_micros.store(micros, Ordering::Relaxed);
    }

    /// How long the last full list of the resource from the upstream took; `None` before the first.
    pub fn full_list_cost(&self) -> Option<Duration> {
        match self.full_list_micros.load(Ordering::Relaxed) {
            0 => None,
            micros => Some(Duration::from_micros(micros)),
        }
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        *self.rv.borrow()
    }

    /// Whether the store holds a full state kept up to date by its writer: false before the first sync and
    /// from the moment its writer is dropped (its reflector died) until a new one synced it again.
    pub fn is_synced(&self) -> bool {
        self.state.load().synced
    }

    /// Subscribes to new signals. Subscribe *before* reading the history so no event falls in between;
    /// then skip signals with RV ≤ the last replayed one.
    pub fn subscribe(&self) -> broadcast::Receiver<Signal> {
        self.dispatch.subscribe_all()
    }

    /// Like [`Store::subscribe`], for a watcher whose selection pins `key`: it receives only the events
    /// whose object or previous version has that index value, and every progress and reset (dispatch.rs).
    pub(crate) fn subscribe_indexed(&self, key: Option<IndexKey>) -> Subscription {
        self.dispatch.subscribe(key)
    }

    /// Index rings of this store now (one per index value with watchers).
    pub fn index_rings(&self) -> usize {
        self.dispatch.rings()
    }

    /// The revision up to which every signal reached every watcher's ring (dispatch.rs invariants).
    pub(crate) fn dispatched_rv(&self) -> u64 {
        self.dispatch.dispatched()
    }

    /// A receiver of the store's resourceVersion, for waiting.
    pub fn watch_rv(&self) -> watch::Receiver<u64> {
        self.rv.subscribe()
    }

    /// Offers a proof that the upstream has no event of this resource in `(from, upto]` (an upstream watch
    /// from `from` whose first frame was a bookmark at `upto`). Only the reflector writes: it applies the
    /// offer as progress when its store is at `from` or beyond.
    pub(crate) fn offer_progress(&self, from: u64, upto: u64) {
        self.offered.send_replace((from, upto));
    }

    /// A receiver of offered proofs, for the reflector.
    pub(crate) fn offered_progress(&self) -> watch::Receiver<(u64, u64)> {
        self.offered.subscribe()
    }

    /// Number of live subscribers (watchers).
    pub fn subscribers(&self) -> usize {
        self.dispatch.subscribers()
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
        let after = state.retained.partition_point(|s| s.rv <= rv);
        after.checked_sub(1).and_then(|i| state.retained.get(i)).cloned()
    }

    /// The oldest resourceVersion an exact read can be served at (`None` before the first sync).
    pub fn oldest_retained_rv(&self) -> Option<u64> {
        let state = self.state.load();
        if !state.synced {
            return None;
        }
        Some(state.retained.front().map_or(state.snapshot.rv, |s| s.rv))
    }

    /// A lazy reader of every history event with RV > `rv`, for a watch resuming at `rv`, plus the state's
    /// generation. The cursor shares the history's segments (O(1) memory however far back `rv` is); it reads
    /// the history as published now, so the caller subscribes first (see [`Store::subscribe`]).
    pub(crate) fn history_after(&self, rv: u64) -> Result<(Cursor<Arc<Event>>, u64), TooOld> {
        let state = self.state.load();
        if rv < state.history_floor {
            // Like the apiserver, name the RV just before the oldest event still held.
            let oldest = state.history.front().map_or(state.history_floor, |e| e.rv - 1);
            return Err(TooOld { requested: rv, oldest: oldest.max(state.history_floor) });
        }
        let from = state.history.partition_point(|e| e.rv <= rv);
        Ok((state.history.cursor_from(from), state.generation))
    }

    /// [`Store::history_after`], collected (tests compare whole replays).
    #[cfg(test)]
    pub(crate) fn events_after(&self, rv: u64) -> Result<(Vec<Arc<Event>>, u64), TooOld> {
        self.history_after(rv).map(|(events, generation)| (events.collect(), generation))
    }

    /// Current sizes and counters, for metrics.
    pub fn stats(&self) -> StoreStats {
        let state = self.state.load();
        let span = match (state.history.front(), state.history.back()) {
            (Some(a), Some(b)) => b.applied_at.saturating_duration_since(a.applied_at),
            _ => Duration::ZERO,
        };
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StoreStats {
            synced: state.synced,
            objects: state.snapshot.objects.len(),
            live_bytes: state.live_bytes,
            history_events: state.history.len(),
            history_bytes: state.history_bytes,
            history_span: span,
            history_floor: state.history_floor,
            retained_snapshots: state.retained.len(),
            retained_bytes: state.retained_bytes,
            index_bytes: state.index_bytes,
            resource_version: state.snapshot.rv,
            generation: state.generation,
            since_last_update: state.updated_at.elapsed(),
            events_applied: load(&self.counters.applied),
            events_stale: load(&self.counters.stale),
            unknown_deletes: load(&self.counters.unknown_deletes),
            relists: load(&self.counters.relists),
            progress_updates: load(&self.counters.progress),
            index: self.dispatch.index_stats(),
        }
    }
}
