//! Realistic objects and churn for the sim: what `kache-sim --pods N --namespaces M --nodes K --churn R` seeds
//! and drives, and what load tests use.
//!
//! - [`seed_objects`]: namespaces, then nodes, then pods spread over both, deterministic for a seed.
//! - [`pod`], [`node`], [`namespace`]: object bodies shaped like a real cluster's (pods are 2–4 KiB).
//! - [`apps`]: the Deployments and ReplicaSets that own those pods (`SimHandle::seed_cluster`).
//! - [`churn`]: pod creates/updates/deletes at a steady rate over HTTP until told to stop.
//! - [`foreign`]: the background writes of a real cluster (lease renewals, events) that move the global
//!   revision while the resource under test stays quiet (`SimBuilder::foreign_writes`).

pub mod apps;
mod churn;
pub mod foreign;
mod objects;

use rand::{SeedableRng, rngs::StdRng};
use serde_json::Value;

pub use churn::{ChurnStats, churn, churn_ops, churn_with_stats};
pub use objects::{namespace, node, pod, pod_name};

/// Random pod names tried before falling back to an indexed one.
const NAME_ATTEMPTS: usize = 8;

/// The shape of a simulated cluster and its rate of change.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// Namespaces `ns-0` … (at least one is used when there are pods).
    pub namespaces: usize,
    /// Pods to seed; churn keeps the population near this number.
    pub pods: usize,
    /// Nodes `node-0` …; with none, pods are Pending and unscheduled.
    pub nodes: usize,
    /// Pod writes per second during churn (creates, updates and deletes together); 0 disables churn.
    pub churn_per_sec: f64,
    /// Seed of every random choice, so that a workload is reproducible.
    pub seed: u64,
}

/// The namespace names of a workload: `ns-<i>`, at least one.
pub(crate) fn namespace_names(w: &Workload) -> Vec<String> {
    (0..w.namespaces.max(1)).map(|i| format!("ns-{i}")).collect()
}

/// The node names of a workload: `node-<i>`.
pub(crate) fn node_names(w: &Workload) -> Vec<String> {
    (0..w.nodes).map(|i| format!("node-{i}")).collect()
}

/// Objects to seed, in creation order (namespaces first, then nodes, then pods):
/// `(resource plural, namespace, body)`. Pods go round-robin over namespaces and nodes, so every namespace
/// and node gets its share; names are unique.
pub fn seed_objects(w: &Workload) -> Vec<(&'static str, Option<String>, Value)> {
    let mut rng = StdRng::seed_from_u64(w.seed);
    let namespaces = namespace_names(w);
    let nodes = node_names(w);
    let mut out = Vec::with_capacity(namespaces.len() + nodes.len() + w.pods);
    out.extend(namespaces.iter().map(|ns| ("namespaces", None, namespace(ns))));
    out.extend(nodes.iter().map(|n| ("nodes", None, node(n))));
    let mut names = std::collections::HashSet::with_capacity(w.pods);
    for i in 0..w.pods {
        let ns = &namespaces[i % namespaces.len()];
        let node_name = if nodes.is_empty() { "" } else { nodes[i % nodes.len()].as_str() };
        // A few random tries, then a suffix that cannot collide (the index is unique), so seeding never spins.
        let name = (0..NAME_ATTEMPTS)
            .map(|_| pod_name(&mut rng))
            .find(|candidate| names.insert((i % namespaces.len(), candidate.clone())))
            .unwrap_or_else(|| format!("{}-{i}", pod_name(&mut rng)));
        out.push(("pods", Some(ns.clone()), pod(ns, &name, node_name, &mut rng)));
    }
    out
}

#[cfg(test)]
mod tests;
