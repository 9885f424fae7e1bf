//! Black-box tests of kache-sim over HTTP, derived from the apiserver's storage conformance behaviour
//! (k8s.io/apiserver pkg/storage/testing) and bodies recorded from a real apiserver.
//!
//! - `list`: every row of the list table (D1–D14), pagination, 410/504, selectors, key order, encoding.
//! - `watch`: each start mode, initial-events-end bookmark, periodic bookmarks, transitions, 410/504.
//! - `writes`: create/update/patch/delete semantics, preconditions, finalizers, status, dryRun.
//! - `misc`: discovery, admin API, upgrades, logs, bad input.

mod common;
mod list;
mod misc;
mod watch;
mod writes;
