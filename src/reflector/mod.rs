//! Reflectors: one task per cached resource that keeps its [`Store`](crate::store::Store) equal to the upstream.
//!
//! # Layout
//!
//! - `request`: list and watch requests and their errors; `stream`: the newline-framed watch body.
//! - `decode`: watch events and list pages into stored objects.
//! - `machine`: the list/watch loop as an explicit `enum State` + `step()`.
//! - [`registry`]: which resources are cached, lazily started reflectors, lock-free lookup of stores.
//!
//! # The loop (see `machine`)
//!
//! ```text
//!   Sync ──watch-list──▶ InitialEvents ──initial-events-end bookmark──▶ Watching ◀──┐
//!    │  rejected (4xx, ERROR, no bookmark)                                │  closed │ Resume{rv}
//!    └──────────────▶ Listing (pages of 500) ──last page──▶ Resume{rv} ───┘─────────┘
//!   410 anywhere ─▶ Sync (relist; the new state is built to the side and swapped in once)
//!   other errors ─▶ Backoff (800 ms → 30 s, jitter, Retry-After) ─▶ the state that failed
//! ```

mod backoff;
mod config;
mod decode;
mod machine;
pub mod registry;
mod request;
mod status;
mod stream;

#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod registry_tests;
#[cfg(test)]
mod tests;

pub use config::ReflectorConfig;
pub use registry::Registry;
pub use status::{ReflectorStatus, SyncState};
