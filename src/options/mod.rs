//! The apiserver's request options. Query decoding, list/get/watch options and selectors are pure
//! Kubernetes semantics (`kache_k8s::options`, re-exported here); which reads a filtered mirror's selection
//! covers (`coverage`) is kache's own.

pub mod coverage;

pub use kache_k8s::options::{params, query, selector};
