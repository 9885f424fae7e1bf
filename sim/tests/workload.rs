//! The workload generator against the sim itself: seeded objects are accepted as they are, and churn's
//! creates, metadata patches, status patches and deletes all succeed and leave the state they claim.
//!
//! Run: `cargo test -p kache-sim --test workload`.

use kache_sim::Sim;
use kache_sim::workload::{Workload, churn_ops, seed_objects};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_and_churn_against_the_sim() {
    let sim = Sim::builder().start().await.expect("sim starts");
    let w = Workload { namespaces: 3, pods: 300, nodes: 4, churn_per_sec: 0.0, seed: 5 };
    for (resource, ns, body) in seed_objects(&w) {
        let stored = sim.create(resource, ns.as_deref(), body.clone()).expect("seed object is accepted");
        assert_eq!(stored["metadata"]["name"], body["metadata"]["name"]);
        assert!(stored["metadata"]["uid"].is_string(), "the sim assigns a uid");
    }
    let pods = sim.list("pods", None).expect("list");
    assert_eq!(pods.len(), 300);
    // Stored pods (with the sim's uid, resourceVersion, timestamps and managedFields) stay 2–4 KiB.
    let sizes: Vec<usize> = pods.iter().map(|p| serde_json::to_vec(p).expect("JSON").len()).collect();
    let (min, max) = (sizes.iter().min().copied().unwrap_or(0), sizes.iter().max().copied().unwrap_or(0));
    eprintln!("stored pod sizes: {min}..={max} bytes");
    // The generator's bodies are 2–4 KiB (checked in the workload unit tests); the sim adds uid,
    // resourceVersion, timestamps and a managedFields entry on top, so stored pods may exceed 4 KiB slightly.
    assert!(min >= 2048 && max <= 4608, "stored pod sizes {min}..={max}");
    assert_eq!(sim.list("nodes", None).expect("list").len(), 4);

    let stats = churn_ops(sim.url(), w.clone(), 300).await;
    assert_eq!(stats.failures, 0, "{stats:?}");
    assert_eq!(stats.creates + stats.updates + stats.deletes, 300, "{stats:?}");
    assert!(stats.creates > 0 && stats.updates > 0 && stats.deletes > 0, "{stats:?}");

    let pods = sim.list("pods", None).expect("list");
    assert_eq!(pods.len() as u64, 300 + stats.creates - stats.deletes);
    let annotated = pods
        .iter()
        .filter(|p| p.pointer("/metadata/annotations/sim.kache.io~1churn").and_then(Value::as_str).is_some())
        .count();
    assert!(annotated > 0, "metadata patches landed");
    let ns: Vec<&str> =
        pods.iter().filter_map(|p| p.pointer("/metadata/namespace").and_then(Value::as_str)).collect();
    assert!(ns.iter().all(|n| ["ns-0", "ns-1", "ns-2"].contains(n)));
    sim.shutdown().await;
}
