//! kache-sim: a simulated kube-apiserver.

pub mod auth;
pub mod selector;
pub mod workload;
