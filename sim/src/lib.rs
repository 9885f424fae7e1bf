//! kache-sim: a simulated kube-apiserver.

pub mod selector;
pub mod workload;
