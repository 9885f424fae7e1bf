//! Realistic pods for the benches: the sim's workload generator (2–4 KiB pods with managedFields and
//! status), extracted into kache's stored form exactly as the reflector does.

use std::sync::Arc;

use bytes::Bytes;
use kache::codec::extract::object_from_json;
use kache::resource::{Gvr, ResourceInfo};
use kache::store::Object;
use rand::SeedableRng as _;
use rand::rngs::StdRng;

/// Namespaces the pods are spread over (100 pods each at 10k).
pub const NAMESPACES: usize = 100;
/// Nodes the pods are spread over.
pub const NODES: usize = 100;

/// The core/v1 pods resource as discovery describes it.
pub fn pod_info() -> ResourceInfo {
    ResourceInfo {
        gvr: Gvr::new("", "v1", "pods"),
        kind: "Pod".into(),
        list_kind: "PodList".into(),
        namespaced: true,
        list_items_have_type_meta: false,
    }
}

/// `n` pods in store key order (namespace/name), deterministic.
#[allow(dead_code)] // not every bench uses every helper
pub fn pods(n: usize) -> Vec<Arc<Object>> {
    let info = pod_info();
    let mut rng = StdRng::seed_from_u64(7);
    let mut out: Vec<Arc<Object>> = (0..n)
        .map(|i| {
            let ns = format!("ns-{}", i % NAMESPACES);
            let name = format!("{}-{i}", kache_sim::workload::pod_name(&mut rng));
            let node = format!("node-{}", i % NODES);
            let mut value = kache_sim::workload::pod(&ns, &name, &node, &mut rng);
            // What the apiserver assigns on create.
            value["metadata"]["resourceVersion"] = serde_json::json!((i + 1).to_string());
            value["metadata"]["uid"] = serde_json::json!(format!("00000000-0000-4000-8000-{i:012}"));
            let raw = Bytes::from(serde_json::to_vec(&value).expect("a Value serialises"));
            Arc::new(object_from_json(raw, &info).expect("the sim's pods are valid objects"))
        })
        .collect();
    out.sort_by(|a, b| a.key.cmp(&b.key));
    out
}

/// Total bytes of the stored objects.
#[allow(dead_code)]
pub fn raw_bytes(objects: &[Arc<Object>]) -> usize {
    objects.iter().map(|o| o.raw.len()).sum()
}
