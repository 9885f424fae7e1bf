//! Seeding a workload through the Rust API: [`SimHandle::seed`] and [`SimHandle::seed_cluster`].

use serde_json::Value;

use super::SimHandle;
use crate::status::ApiError;

/// Adjusts a pod of a seeded workload before it is created (its namespace, its body).
type Owners = Box<dyn Fn(&str, &mut Value)>;

// === impl SimHandle ===

impl SimHandle {
    /// Creates the objects of a workload (namespaces, nodes, pods); returns how many were created.
    /// Objects that already exist are left as they are. The objects are exactly those of
    /// [`workload::seed_objects`](crate::workload::seed_objects), generated one at a time so that seeding
    /// 100k pods never holds them all as JSON trees at once. Pods name a ReplicaSet that does not exist
    /// ([`seed_cluster`](Self::seed_cluster) creates it).
    pub fn seed(&self, w: &crate::workload::Workload) -> Result<usize, ApiError> {
        self.seed_pods(w, None)
    }

    /// [`seed`](Self::seed) as a cluster runs it: the same namespaces, nodes and pods, each pod
    /// controlled by a ReplicaSet of its app's Deployment in its namespace ([`workload::apps`]: every app
    /// and generation of every namespace, replica counts and status as the pods are). Returns how many
    /// objects were created.
    ///
    /// [`workload::apps`]: crate::workload::apps
    pub fn seed_cluster(&self, w: &crate::workload::Workload) -> Result<usize, ApiError> {
        use crate::workload::apps::{self, Replicas};
        use std::collections::HashMap;
        // The counts come first (a dry run over the same random draws), so that each owner is created
        // once with its final state and its uid is known before its pods are.
        let mut counts: HashMap<(String, String), Replicas> = HashMap::new();
        self.each_pod(w, |ns, pod| {
            if let Some(rs) = apps::owner_name(&pod) {
                let c = counts.entry((ns.to_string(), rs.to_string())).or_default();
                c.pods += 1;
                c.ready += usize::from(pod["status"]["phase"] == "Running");
            }
            Ok(())
        })?;
        let mut created = 0;
        let mut uids: HashMap<(String, String), String> = HashMap::new();
        for ns in crate::workload::namespace_names(w) {
            created += usize::from(self.create("namespaces", None, crate::workload::namespace(&ns)).is_ok());
            for app in crate::workload::apps::APPS_IN_ORDER {
                let count = |g: u8| {
                    counts.get(&(ns.clone(), apps::replica_set_name(app, g))).copied().unwrap_or_default()
                };
                let gens: Vec<Replicas> = (0..crate::workload::apps::GENERATIONS).map(count).collect();
                let total = gens.iter().fold(Replicas::default(), |a, r| Replicas {
                    pods: a.pods + r.pods,
                    ready: a.ready + r.ready,
                });
                let newest = gens.last().copied().unwrap_or_default();
                let (d, n) = self.create_or_get(
                    "deployments.apps",
                    &ns,
                    app,
                    apps::deployment(&ns, app, total, newest),
                )?;
                created += n;
                let d_uid = d["metadata"]["uid"].as_str().unwrap_or_default().to_string();
                for (g, r) in gens.iter().enumerate() {
                    let g = u8::try_from(g).expect("few generations");
                    let name = apps::replica_set_name(app, g);
                    let body = apps::replica_set(&ns, app, g, &d_uid, *r);
                    let (rs, n) = self.create_or_get("replicasets.apps", &ns, &name, body)?;
                    created += n;
                    uids.insert(
                        (ns.clone(), name),
                        rs["metadata"]["uid"].as_str().unwrap_or_default().into(),
                    );
                }
            }
        }
        let owners = move |ns: &str, pod: &mut Value| {
            let uid = apps::owner_name(pod).and_then(|rs| uids.get(&(ns.to_string(), rs.to_string())));
            if let Some(uid) = uid.cloned() {
                apps::set_owner(pod, &uid);
            }
        };
        Ok(created + self.seed_pods(w, Some(Box::new(owners)))?)
    }

    /// Creates `body` unless an object of that name exists; returns the object and 1 if it was created.
    fn create_or_get(
        &self,
        resource: &str,
        ns: &str,
        name: &str,
        body: Value,
    ) -> Result<(Value, usize), ApiError> {
        match self.create(resource, Some(ns), body) {
            Ok(o) => Ok((o, 1)),
            Err(e) if e.reason == "AlreadyExists" => Ok((self.get(resource, Some(ns), name)?, 0)),
            Err(e) => Err(e),
        }
    }

    /// [`seed`](Self::seed)'s creation, with `owned` adjusting each pod before it is created.
    fn seed_pods(&self, w: &crate::workload::Workload, owned: Option<Owners>) -> Result<usize, ApiError> {
        use crate::workload::{namespace, namespace_names, node, node_names};
        let mut n = 0;
        let mut put = |resource: &str, ns: Option<&str>, body: Value| match self.create(resource, ns, body) {
            Ok(_) => {
                n += 1;
                Ok(())
            }
            Err(e) if e.reason == "AlreadyExists" => Ok(()),
            Err(e) => Err(e),
        };
        for ns in &namespace_names(w) {
            put("namespaces", None, namespace(ns))?;
        }
        for nd in &node_names(w) {
            put("nodes", None, node(nd))?;
        }
        self.each_pod(w, |ns, mut pod| {
            if let Some(f) = &owned {
                f(ns, &mut pod);
            }
            put("pods", Some(ns), pod)
        })?;
        Ok(n)
    }

    /// Generates a workload's pods one at a time, in [`seed_objects`](crate::workload::seed_objects)'
    /// order and with its random draws (pods only consume the generator).
    fn each_pod(
        &self,
        w: &crate::workload::Workload,
        mut f: impl FnMut(&str, Value) -> Result<(), ApiError>,
    ) -> Result<(), ApiError> {
        use crate::workload::{namespace_names, node_names, pod, pod_name};
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(w.seed);
        let namespaces = namespace_names(w);
        let nodes = node_names(w);
        let mut names = std::collections::HashSet::with_capacity(w.pods);
        for i in 0..w.pods {
            let ns = &namespaces[i % namespaces.len()];
            let node_name = if nodes.is_empty() { "" } else { nodes[i % nodes.len()].as_str() };
            let name = loop {
                let candidate = pod_name(&mut rng);
                if names.insert((i % namespaces.len(), candidate.clone())) {
                    break candidate;
                }
            };
            f(ns, pod(ns, &name, node_name, &mut rng))?;
        }
        Ok(())
    }
}
