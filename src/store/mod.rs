//! The lock-free snapshot store: one per cached resource.
//!
//! Only the reflector writes (through the single, non-`Clone` [`Writer`]); readers load an immutable
//! [`State`] through arc-swap and never lock. Each published state holds:
//! - the current [`Snapshot`] (an `imbl::OrdMap` keyed in the apiserver's key order),
//! - recently retained snapshots, one per applied event, for Exact reads and continue tokens,
//! - a bounded event history for watch resumption,
//! - for pods, a secondary [`FieldIndex`] by `spec.nodeName`,
//! - estimates of the memory all of these hold ([`StoreStats`]).
//!
//! History and retained snapshots live in segmented append-only [`Log`]s, so appending and evicting are
//! O(1) amortised and never copy what readers hold. New events are broadcast to watchers, indexed by the
//! values their selections pin (name, pods' node, namespace) so an event wakes only the watchers that can
//! select it; a watcher that lags past its ring's capacity is cut off.
//!
//! Files: `object.rs` (one object), `snapshot.rs` (snapshots, range helpers, field index), `log.rs`
//! (the logs), `dispatch.rs` (indexed fan-out to watchers), `state.rs` (published state, reader API),
//! `writer.rs` (the writer), `config.rs` (bounds and memory-estimate constants).

mod config;
mod dispatch;
mod log;
mod object;
mod snapshot;
mod state;
#[cfg(test)]
mod tests;
mod writer;

pub use config::{
    DEFAULT_BROADCAST_CAPACITY, DEFAULT_HISTORY_MAX_BYTES, DEFAULT_HISTORY_MAX_EVENTS,
    DEFAULT_HISTORY_WINDOW, DEFAULT_RETAIN_MAX, DEFAULT_RETAIN_WINDOW, StoreConfig, path_copy_bytes,
};
pub use dispatch::{
    INDEX_RING_CAPACITY, IndexGuard, IndexKey, IndexKind, IndexStats, MAX_INDEX_SLOTS, Subscription,
};
pub use log::{Cursor, Log};
pub use object::{Key, Labels, Object, ProtoCells, make_key};
pub use snapshot::{FieldIndex, Snapshot, namespace_bounds};
pub use state::{Event, EventType, Signal, State, Store, StoreStats, TooOld, WaitError};
pub use writer::{ApplyOutcome, Writer};
