use std::collections::HashMap;

use serde_json::Value;

use crate::Sim;
use crate::workload::{Workload, churn_ops};

fn key(o: &Value) -> (String, String) {
    let m = &o["metadata"];
    (m["namespace"].as_str().unwrap_or("").into(), m["name"].as_str().unwrap_or("").into())
}

fn owner(o: &Value) -> (String, String) {
    let r = &o["metadata"]["ownerReferences"][0];
    assert_eq!(r["controller"], true, "{}", o["metadata"]);
    (r["name"].as_str().unwrap_or("").into(), r["uid"].as_str().unwrap_or("").into())
}

/// Every pod's controller is an existing ReplicaSet (by uid), whose controller is an existing Deployment;
/// returns the pods per ReplicaSet.
fn check_owners(sim: &crate::SimHandle) -> HashMap<(String, String), usize> {
    let uids = |resource: &str| -> HashMap<(String, String), (String, Value)> {
        let list = sim.list(resource, None).expect("listed");
        list.into_iter()
            .map(|o| (key(&o), (o["metadata"]["uid"].as_str().unwrap_or("").to_string(), o)))
            .collect()
    };
    let (deployments, replica_sets) = (uids("deployments.apps"), uids("replicasets.apps"));
    let mut per_rs = HashMap::new();
    for pod in sim.list("pods", None).expect("listed") {
        let (ns, _) = key(&pod);
        let (name, uid) = owner(&pod);
        let (rs_uid, rs) = &replica_sets[&(ns.clone(), name.clone())];
        assert_eq!(&uid, rs_uid, "{}", pod["metadata"]);
        let labels = &pod["metadata"]["labels"];
        for (k, v) in rs["spec"]["selector"]["matchLabels"].as_object().expect("selector") {
            assert_eq!(&labels[k], v, "{name} selects the pod by {k}");
        }
        *per_rs.entry((ns, name)).or_default() += 1;
    }
    for ((ns, _), (_, rs)) in &replica_sets {
        let (name, uid) = owner(rs);
        assert_eq!(deployments[&(ns.clone(), name)].0, uid);
    }
    per_rs
}

#[tokio::test]
async fn seeded_pods_belong_to_replica_sets_of_deployments_and_churn_keeps_it_so() {
    let sim = Sim::builder().start().await.expect("sim starts");
    let w = Workload { namespaces: 2, pods: 40, nodes: 3, churn_per_sec: 0.0, seed: 5 };
    let created = sim.seed_cluster(&w).expect("seeded");
    // 2 namespaces, 3 nodes, 40 pods, and per namespace 10 Deployments of 3 ReplicaSets each.
    assert_eq!(created, 2 + 3 + 40 + 2 * 10 * 4);
    let per_rs = check_owners(&sim);
    assert_eq!(per_rs.values().sum::<usize>(), 40);
    for rs in sim.list("replicasets.apps", None).expect("listed") {
        let n = per_rs.get(&key(&rs)).copied().unwrap_or(0);
        assert_eq!(
            (rs["spec"]["replicas"].as_u64(), rs["status"]["readyReplicas"].as_u64()),
            (Some(n as u64), (n > 0).then_some(n as u64))
        );
    }
    for d in sim.list("deployments.apps", None).expect("listed") {
        let (ns, app) = key(&d);
        let n: usize = per_rs
            .iter()
            .filter(|((n, rs), _)| *n == ns && rs.starts_with(&format!("{app}-")))
            .map(|(_, c)| c)
            .sum();
        assert_eq!(d["spec"]["replicas"].as_u64(), Some(n as u64), "{ns}/{app}");
    }
    // Seeding again creates nothing; the pods are those `seed` creates, with their owners' uids.
    assert_eq!(sim.seed_cluster(&w).expect("seeded again"), 0);

    let stats = churn_ops(sim.url(), Workload { churn_per_sec: 0.0, ..w }, 40).await;
    assert!(stats.creates > 0 && stats.failures == 0, "{stats:?}");
    check_owners(&sim);
    sim.shutdown().await;
}
