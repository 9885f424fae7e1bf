//! Bytes in and out: field extraction at ingest, list and watch assembly, Status errors, continue tokens, gzip.
//! Pure functions over bytes; no I/O.

pub mod extract;
pub mod gzip;
pub mod list;
pub mod meta_view;
pub mod pretty;
pub mod table;

// Pure Kubernetes semantics, at the paths kache's modules have always named them.
pub use kache_k8s::{proto, status, token};

#[cfg(test)]
mod proto_tests;
