//! Bounds of a store and the constants of its memory estimates.

use std::time::Duration;

/// Default history window: the apiserver's `EventsHistoryWindow` (75 s, `storagebackend/config.go`).
pub const DEFAULT_HISTORY_WINDOW: Duration = Duration::from_secs(75);
/// Upper bound on history events: the apiserver's watch-cache capacity upper bound (100 × 1024).
pub const DEFAULT_HISTORY_MAX_EVENTS: usize = 102_400;
/// Upper bound on the bytes the history keeps alive beyond the live objects (replaced and deleted object
/// versions, see [`super::StoreStats::history_bytes`]).
pub const DEFAULT_HISTORY_MAX_BYTES: usize = 512 << 20;
/// Snapshots are retained as long as ListFromCacheSnapshot keeps them: the history window.
pub const DEFAULT_RETAIN_WINDOW: Duration = Duration::from_secs(75);
/// Upper bound on retained snapshots. Each costs one path copy of the ordered map (about 2 KiB at 100k
/// objects, see [`path_copy_bytes`]), so 10,000 cost about 20 MiB.
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

/// Bytes of one node of `imbl::OrdMap<Arc<str>, Arc<Object>>`: 16 entries of 24 bytes (or 16 keys and 17
/// child pointers in a branch), the chunk's bookkeeping and the shared pointer's header.
pub(crate) const ORD_NODE_BYTES: usize = 16 * 24 + 40;
/// Average fill of B-tree nodes (imbl's node size is 16; nodes are kept between a third and full, about
/// two thirds full after random inserts), i.e. the effective branching factor.
pub(crate) const ORD_FANOUT: usize = 11;
/// Per-object bytes of the ordered map itself: the entry's share of its leaf and of the branches above.
pub(crate) const MAP_ENTRY_OVERHEAD: usize =
    ORD_NODE_BYTES / ORD_FANOUT + ORD_NODE_BYTES / (ORD_FANOUT * ORD_FANOUT);
/// A retained snapshot's own allocation (`Arc<Snapshot>`) plus its slot in the retained log.
pub(crate) const SNAPSHOT_OVERHEAD: usize = 96;
/// An event's own allocation (`Arc<Event>`) plus its slot in the history log.
pub(crate) const EVENT_OVERHEAD: usize = 112;

/// Levels of an ordered map of `len` entries.
pub(crate) fn ord_depth(len: usize) -> usize {
    let mut depth = 1;
    let mut reach = ORD_FANOUT;
    while reach < len {
        reach = reach.saturating_mul(ORD_FANOUT);
        depth += 1;
    }
    depth
}

/// What one change to a map of `len` entries copies when an older snapshot shares the map: one node per
/// level (path copying). This is the memory a retained snapshot costs beyond the objects it keeps alive.
pub fn path_copy_bytes(len: usize) -> usize {
    ord_depth(len) * ORD_NODE_BYTES
}
