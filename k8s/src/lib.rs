//! Kubernetes API semantics as pure functions and value types: no I/O, no runtime.
//!
//! # Layout
//!
//! - [`json`]: the bytes of Go's `encoding/json` as the apiserver writes them (string escaping, compact and
//!   indented encoding) and Go's `strconv.Quote`.
//!
//! kache, its simulated upstream (`kache-sim`), the fuzz targets and the load tool all depend on this crate,
//! so a rule of the apiserver is written once. The sim keeps its own model of storage, the watch cache,
//! revisions and timing: where independence is the point, it does not come from here.

pub mod json;
