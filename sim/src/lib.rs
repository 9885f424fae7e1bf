//! kache-sim: a simulated kube-apiserver.
