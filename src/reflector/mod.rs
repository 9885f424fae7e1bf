//! Reflectors: one task per cached resource that keeps its [`Store`](crate::store::Store) equal to the upstream.
//!
//! # Layout
//!
//! - `machine`: the list/watch loop of one resource as an explicit `enum State` + `step()`.
//! - `request`: list and watch requests and their typed errors; `stream`: the newline-framed watch body;
//!   `decode`: watch events and list pages into stored objects (through [`crate::codec::extract`]).
//! - `backoff`, `config`: retry delays and every tunable with its reason.
//! - `status`: per-reflector state and counters ([`ReflectorStatus`]) for readiness and metrics.
//! - [`registry`]: which resources are cached, lazily started reflectors, lock-free lookup of their stores.
//! - `supervisor`: one resource's task; restarts a reflector that panicked or ended, with backoff (its store
//!   is down meanwhile: not synced, reads forwarded, readiness failing).
//!
//! # The loop (see `machine`)
//!
//! ```text
//!   Sync ──watch-list──▶ InitialEvents ──initial-events-end bookmark──▶ Watching ◀───────┐
//!    │  rejected (4xx, ERROR, no end bookmark)                            │ closed/stalled │
//!    └──────────────▶ Listing (pages of 500) ──last page──▶ Resume{rv} ◀──┘ ─────────────▶┘
//!   410 (watch or ERROR event) ─▶ Sync: the new state is built to the side and swapped in once
//!   other errors, and unusable frames (oversized, truncated, unparseable) ─▶ Backoff (800 ms → 30 s, jitter,
//!   Retry-After as a floor) ─▶ the state that failed
//! ```
//!
//! Tests: `tests.rs` (every transition against a scripted upstream, paused time), `model_tests.rs` (property
//! test against a randomly faulty upstream), `registry_tests.rs`, and `tests/it/convergence.rs` (against the sim).

mod backoff;
mod config;
mod decode;
mod machine;
pub mod registry;
mod request;
mod stats;
mod status;
mod stream;
mod supervisor;

#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod registry_tests;
#[cfg(test)]
mod tests;

pub use config::ReflectorConfig;
pub use registry::Registry;
pub(crate) use request::selector_query;
pub use status::{ReflectorStatus, SyncState};
