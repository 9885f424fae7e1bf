//! The lock-free snapshot store: one per cached resource.
//!
//! Only the reflector writes (through the single, non-`Clone` [`Writer`]); readers load an immutable
//! [`State`] through arc-swap and never lock. Each published state holds:
//! - the current [`Snapshot`] (an `imbl::OrdMap` keyed in the apiserver's key order),
//! - recently retained snapshots, one per applied event, for Exact reads and continue tokens,
//! - a bounded event history for watch resumption.
//!
//! New events are broadcast to watchers; a watcher that lags past the broadcast capacity is cut off.

mod object;
mod state;

pub use object::{Key, Labels, Object, make_key};
pub use state::{
    Event, EventType, Signal, Snapshot, State, Store, StoreConfig, StoreStats, TooOld, WaitError, Writer,
};
