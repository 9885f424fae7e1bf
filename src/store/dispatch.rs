//! Indexed dispatch of store signals to watchers: the apiserver cacher's "triggers"
//! (`cacher.go` `indexedTriggerFunc`, `dispatchEvent`, `triggerValues`).
//!
//! Unindexed watchers share one broadcast ring that receives every signal. A watcher whose selection pins
//! an index value (an object name, the kind's indexed field — pods' `spec.nodeName` — or a namespace)
//! subscribes to a ring of its own per index value instead, shared by the watchers of that value. An
//! event goes to the shared ring and to the rings of the values of its object **and of its previous
//! version** (so a pod moving off a node still reaches that node's watchers, which then send DELETED),
//! so it wakes only the watchers that could select it. Progress and resets go to every ring: bookmarks
//! and relists reach every watcher as before.
//!
//! Invariants:
//! - Signals are sent under the read lock of the ring table and rings are made under its write lock, so
//!   a watcher's ring either received a signal or was made after the signal's state was published (the
//!   watcher then reads that state from the snapshot or history it starts from).
//! - `dispatched` is stored (release) after a signal was sent to every ring it goes to. A watcher that
//!   loads it (acquire) and then finds its ring empty has received every signal up to it: an indexed
//!   watcher's bookmarks carry that revision, though its ring saw no event for it (the cacher's bookmarks
//!   likewise carry the cache's revision to every watcher).
//! - Bounded: a ring per index value with watchers, of [`INDEX_RING_CAPACITY`] signals, at most
//!   [`MAX_INDEX_SLOTS`] signals in all per store (a watcher beyond that uses the shared ring, correct but
//!   woken by every event); a ring goes when its last watcher does.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use tokio::sync::broadcast;

use super::object::Object;
use super::state::{Event, Signal};

/// Signals an index ring holds, by [`IndexKind`]: a watcher this many signals behind on its ring is cut off
/// as slow. Its ring carries only the events of its value, so this is at least as lenient as the shared
/// ring for watchers of one object or one node; namespaces, which can be busy, get more. (The apiserver's
/// indexed watchers buffer 10 to 1000 events, `suggestedWatchChannelSize`.) A slot costs about 48 bytes.
pub const INDEX_RING_CAPACITY: [usize; KINDS] = [64, 128, 1024];

/// Slots of all index rings of a store together (about 100 MiB): 16k node rings, or 2k namespace rings.
/// A watcher whose ring would exceed it uses the shared ring (correct, but woken by every event).
pub const MAX_INDEX_SLOTS: usize = 1 << 21;

/// What a watcher's index value is the value of, in the order a watcher picks them (most selective first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IndexKind {
    /// `metadata.name` (a single-object watch).
    Name = 0,
    /// The kind's indexed field ([`super::Store::indexed_field`]: pods' `spec.nodeName`).
    Field = 1,
    /// The namespace.
    Namespace = 2,
}

const KINDS: usize = 3;

/// One index value of a watcher's selection: every object it can select has this value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IndexKey {
    pub kind: IndexKind,
    pub value: Box<str>,
}

struct Ring {
    tx: broadcast::Sender<Signal>,
    watchers: usize,
}

#[derive(Default)]
struct Rings {
    by_kind: [HashMap<Box<str>, Ring>; KINDS],
    /// Slots of all rings (bounded by [`MAX_INDEX_SLOTS`]).
    slots: usize,
}

/// The fan-out of one store's signals (see the module doc).
pub(crate) struct Dispatcher {
    all: broadcast::Sender<Signal>,
    all_capacity: usize,
    /// Index ring capacities by kind ([`INDEX_RING_CAPACITY`], at most the shared ring's).
    ring_capacity: [usize; KINDS],
    /// The kind's indexed field, if any.
    field: Option<usize>,
    rings: RwLock<Rings>,
    /// Watchers on index rings (not counted by `all`'s receivers).
    indexed: AtomicUsize,
    /// See the module invariants.
    dispatched: AtomicU64,
    /// The bound on all rings' slots ([`MAX_INDEX_SLOTS`]; smaller in tests).
    max_slots: usize,
    /// The index's figures (`kache_watch_index_*`).
    cells: IndexCells,
}

/// A watcher's receiver of signals, and its place in the index while it lives.
pub struct Subscription {
    pub rx: broadcast::Receiver<Signal>,
    /// The ring's capacity (a receiver further behind than this has lost signals).
    pub capacity: usize,
    /// Present iff the receiver is an index ring's.
    pub index: Option<IndexGuard>,
}

/// Unregisters an indexed watcher when dropped (the ring goes with its last watcher).
pub struct IndexGuard {
    dispatcher: Arc<Dispatcher>,
    key: IndexKey,
}

/// The index's figures of one store (summed over a kache's stores at scrape time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexStats {
    /// Indexed watchers now, by [`IndexKind`] (name, field, namespace).
    pub watchers: [u64; KINDS],
    /// Index rings now.
    pub rings: u64,
    /// Watchers that pinned an index value but got the shared ring because their store's rings had
    /// [`MAX_INDEX_SLOTS`] already.
    pub full: u64,
}

/// The live counters behind [`IndexStats`].
#[derive(Debug, Default)]
struct IndexCells {
    watchers: [AtomicU64; KINDS],
    rings: AtomicU64,
    full: AtomicU64,
}

// === impl IndexKind ===

impl IndexKind {
    pub const ALL: [IndexKind; KINDS] = [IndexKind::Name, IndexKind::Field, IndexKind::Namespace];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Name => "name",
            Self::Field => "field",
            Self::Namespace => "namespace",
        }
    }
}

// === impl Dispatcher ===

impl Dispatcher {
    pub(super) fn new(capacity: usize, field: Option<usize>) -> Arc<Self> {
        let all_capacity = capacity.max(1);
        let (all, _) = broadcast::channel(all_capacity);
        Arc::new(Self {
            all,
            all_capacity,
            ring_capacity: INDEX_RING_CAPACITY.map(|c| c.min(all_capacity)),
            field,
            rings: RwLock::new(Default::default()),
            indexed: AtomicUsize::new(0),
            dispatched: AtomicU64::new(0),
            max_slots: MAX_INDEX_SLOTS,
            cells: IndexCells::default(),
        })
    }

    /// This store's index figures.
    pub(crate) fn index_stats(&self) -> IndexStats {
        let c = &self.cells;
        IndexStats {
            watchers: std::array::from_fn(|i| c.watchers[i].load(Ordering::Relaxed)),
            rings: c.rings.load(Ordering::Relaxed),
            full: c.full.load(Ordering::Relaxed),
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, Rings> {
        // A panic while holding the lock leaves the table consistent (every change is one insert/remove).
        self.rings.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A receiver of every signal.
    pub(crate) fn subscribe_all(&self) -> broadcast::Receiver<Signal> {
        self.all.subscribe()
    }

    /// A receiver for a watcher whose selection pins `key` (every signal when `None`, when `key` is the
    /// indexed field of a store without one, or when the store's rings are at [`MAX_INDEX_SLOTS`]).
    pub fn subscribe(self: &Arc<Self>, key: Option<IndexKey>) -> Subscription {
        let key = key.filter(|k| k.kind != IndexKind::Field || self.field.is_some());
        if let Some(key) = key {
            let mut rings = self.rings.write().unwrap_or_else(|poisoned| poisoned.into_inner());
            let capacity = self.ring_capacity[key.kind as usize];
            let fits = rings.slots + capacity <= self.max_slots;
            let map = &mut rings.by_kind[key.kind as usize];
            let rx = match map.get_mut(&key.value) {
                Some(ring) => {
                    ring.watchers += 1;
                    Some(ring.tx.subscribe())
                }
                None if fits => {
                    let (tx, rx) = broadcast::channel(capacity);
                    map.insert(key.value.clone(), Ring { tx, watchers: 1 });
                    rings.slots += capacity;
                    self.cells.rings.fetch_add(1, Ordering::Relaxed);
                    Some(rx)
                }
                None => {
                    self.cells.full.fetch_add(1, Ordering::Relaxed);
                    None
                }
            };
            if let Some(rx) = rx {
                self.indexed.fetch_add(1, Ordering::Relaxed);
                self.cells.watchers[key.kind as usize].fetch_add(1, Ordering::Relaxed);
                let index = IndexGuard { dispatcher: self.clone(), key };
                return Subscription { rx, capacity, index: Some(index) };
            }
        }
        Subscription { rx: self.all.subscribe(), capacity: self.all_capacity, index: None }
    }

    /// Watchers subscribed now, indexed or not.
    pub fn subscribers(&self) -> usize {
        self.all.receiver_count() + self.indexed.load(Ordering::Relaxed)
    }

    /// Index rings now.
    pub fn rings(&self) -> usize {
        self.read().by_kind.iter().map(HashMap::len).sum()
    }

    /// The revision up to which every signal was sent (see the module invariants).
    pub(crate) fn dispatched(&self) -> u64 {
        self.dispatched.load(Ordering::Acquire)
    }

    /// Sends an applied event to the shared ring and to the rings of its object's and its previous
    /// version's index values.
    pub(super) fn event(&self, event: Arc<Event>) {
        let rv = event.rv;
        if self.indexed.load(Ordering::Relaxed) > 0 {
            let rings = self.read();
            for_each_key(self.field, &event, |kind, value| {
                if let Some(ring) = rings.by_kind[kind as usize].get(value) {
                    let _ = ring.tx.send(Signal::Event(event.clone()));
                }
            });
        }
        let _ = self.all.send(Signal::Event(event));
        self.dispatched.store(rv, Ordering::Release);
    }

    /// Sends a progress signal to every watcher.
    pub(super) fn progress(&self, rv: u64) {
        self.to_every_ring(Signal::Progress(rv));
        self.dispatched.store(rv, Ordering::Release);
    }

    /// Tells every watcher that the store was rebuilt under `generation`.
    pub(super) fn reset(&self, generation: u64) {
        self.to_every_ring(Signal::Reset { generation });
    }

    /// A relist published revision `rv` (which may be lower than what was dispatched before, e.g. after an
    /// etcd restore): watchers of the new generation must not be told of more.
    pub(super) fn rewind(&self, rv: u64) {
        self.dispatched.store(rv, Ordering::Release);
    }

    fn to_every_ring(&self, signal: Signal) {
        if self.indexed.load(Ordering::Relaxed) > 0 {
            for ring in self.read().by_kind.iter().flat_map(HashMap::values) {
                let _ = ring.tx.send(signal.clone());
            }
        }
        let _ = self.all.send(signal);
    }
}

/// Calls `f` with each distinct index value of `event`: the name and namespace (the same in both
/// versions: they make the key), the indexed field's value in the object and, when it differs, in the
/// previous version (`triggerValues` of the object and of its previous version).
fn for_each_key(field: Option<usize>, event: &Event, mut f: impl FnMut(IndexKind, &str)) {
    let object = &event.object;
    f(IndexKind::Name, object.name());
    if let Some(ns) = object.namespace() {
        f(IndexKind::Namespace, ns);
    }
    if let Some(field) = field {
        let now = field_value(object, field);
        f(IndexKind::Field, now);
        if let Some(prev) = event.prev.as_deref().map(|p| field_value(p, field))
            && prev != now
        {
            f(IndexKind::Field, prev);
        }
    }
}

/// The value a field selector compares for an extra field: absent reads as "".
fn field_value(object: &Object, field: usize) -> &str {
    object.fields.get(field).and_then(|v| v.as_deref()).unwrap_or("")
}

// === impl IndexGuard ===

impl IndexGuard {
    pub fn kind(&self) -> IndexKind {
        self.key.kind
    }
}

impl Drop for IndexGuard {
    fn drop(&mut self) {
        let d = &self.dispatcher;
        let mut rings = d.rings.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        let map = &mut rings.by_kind[self.key.kind as usize];
        let gone = match map.get_mut(&self.key.value) {
            Some(ring) => {
                ring.watchers -= 1;
                ring.watchers == 0
            }
            None => false,
        };
        if gone {
            map.remove(&self.key.value);
            rings.slots -= d.ring_capacity[self.key.kind as usize];
            d.cells.rings.fetch_sub(1, Ordering::Relaxed);
        }
        drop(rings);
        d.indexed.fetch_sub(1, Ordering::Relaxed);
        d.cells.watchers[self.key.kind as usize].fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for IndexGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexGuard").field("key", &self.key).finish()
    }
}

#[cfg(test)]
mod bound_tests {
    use super::*;

    fn namespace(value: &str) -> Option<IndexKey> {
        Some(IndexKey { kind: IndexKind::Namespace, value: value.into() })
    }

    /// Past the slot bound a watcher that pins a new value gets the shared ring (still correct: it filters
    /// every event itself), and `kache_watch_index_full_total` counts it; a value with a ring still shares it.
    #[test]
    fn watchers_past_the_slot_bound_share_the_shared_ring_and_are_counted() {
        let mut dispatcher = Dispatcher::new(4096, None);
        let one_ring = dispatcher.ring_capacity[IndexKind::Namespace as usize];
        Arc::get_mut(&mut dispatcher).expect("not shared yet").max_slots = one_ring;

        let first = dispatcher.subscribe(namespace("a"));
        assert!(first.index.is_some(), "the first ring fits");
        let second = dispatcher.subscribe(namespace("b"));
        assert!(second.index.is_none(), "a second ring would pass the bound");
        assert_eq!(second.capacity, 4096, "the shared ring");
        assert_eq!(dispatcher.index_stats().full, 1, "counted");
        let again = dispatcher.subscribe(namespace("a"));
        assert!(again.index.is_some(), "an existing ring is shared without new slots");
        assert_eq!(dispatcher.rings(), 1);
    }
}
