//! The control plane's own clients through kache: kube-controller-manager, kube-scheduler and the simulated
//! nodes (kwok) of a real 1.36 cluster send every request to a kache in front of the apiserver, with their
//! own tokens (`--auth=delegated`: TokenReview and SubjectAccessReview against the real RBAC). Their
//! informers (protobuf, WatchList) are served from kache's memory; their writes (bindings, pod status, node
//! leases, leader-election leases, ReplicaSets) are forwarded. The cluster must behave as it does without
//! kache: nodes Ready, every Deployment's pods bound and Running, a scale-up and a delete carried out, the
//! leader-election leases renewed.

use crate::common;

use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::{Value, json};

use common::cluster::Cluster;
use common::eventually;
use common::real::Endpoint;

const NODES: usize = 6;
/// How long a change may take to be carried out by the controllers, scheduler and nodes; a hang guard.
const CONVERGE: Duration = Duration::from_secs(120);

/// The pods of Deployment `app` in `ns` that are Running (and not being deleted).
async fn running(api: &Endpoint, ns: &str, app: &str) -> usize {
    let pods = api.get(&format!("/api/v1/namespaces/{ns}/pods?labelSelector=app%3D{app}")).await.json();
    pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["status"]["phase"] == "Running" && p["metadata"]["deletionTimestamp"].is_null())
        .filter(|p| p["spec"]["nodeName"].as_str().is_some_and(|n| !n.is_empty()))
        .count()
}

async fn lease_renewed_at(api: &Endpoint, name: &str) -> Option<String> {
    let lease = api.get(&format!("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{name}")).await;
    (lease.status == StatusCode::OK)
        .then(|| lease.json()["spec"]["renewTime"].as_str().unwrap_or_default().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_plane_runs_through_kache() {
    let _one = common::cluster::one_at_a_time().await;
    let Some(cluster) = tokio::task::spawn_blocking(|| {
        Cluster::start_with("through-kache", NODES, &["--no-clients", "--pods-per-node", "3"])
    })
    .await
    .expect("cluster start") else {
        return;
    };
    // The apiserver's own serving certificate and client CA, as the clients expect of their server.
    let kache = cluster.start_kache(|config| cluster.delegated(config)).await;
    let url = kache.url();
    let ca = cluster.ca();
    // The controller-manager, the scheduler and kwok, pointed at kache; cluster.sh waits until every node is
    // Ready and every Deployment's pods are Running.
    let cluster = tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        cluster.clients_via(&url, &ca);
        cluster
    })
    .await
    .expect("clients through kache");
    assert_eq!(cluster.var("KUBE_CLIENTS_URL"), kache.url(), "the clients' server is kache");
    let api = Endpoint::from_kubeconfig("kube-apiserver", &cluster.admin_kubeconfig()).await;
    let from_memory = kache.stats().memory();
    // The informers of the controller-manager, the scheduler and kwok: dozens of lists and watches.
    assert!(from_memory >= 20, "the clients' informers were served from memory: {from_memory}");
    assert!(kache.stats().forwarded() > 0, "their writes were forwarded");

    // Leader election: both leases are held and renewed, through kache.
    for lease in ["kube-controller-manager", "kube-scheduler"] {
        let first = lease_renewed_at(&api, lease).await.unwrap_or_else(|| panic!("{lease} lease exists"));
        eventually(&format!("the {lease} lease is renewed"), CONVERGE, || async {
            lease_renewed_at(&api, lease).await.is_some_and(|t| t != first)
        })
        .await;
    }

    // A scale-up: the ReplicaSet controller creates pods, the scheduler binds them, the nodes run them.
    let deployment = "/apis/apps/v1/namespaces/team-a/deployments/web";
    let replicas = api.get(deployment).await.json()["spec"]["replicas"].as_u64().expect("replicas") as usize;
    let scale = json!({"spec": {"replicas": replicas + 3}});
    let r = api.write(Method::PATCH, deployment, "application/merge-patch+json", &scale).await;
    assert_eq!(r.status, StatusCode::OK, "{}", String::from_utf8_lossy(&r.body));
    eventually("the scaled Deployment's pods run", CONVERGE, || async {
        running(&api, "team-a", "web").await == replicas + 3
    })
    .await;

    // A delete: the garbage collector removes its ReplicaSets and their pods.
    let r = api.request(Method::DELETE, "/apis/apps/v1/namespaces/team-b/deployments/api", &[], None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", String::from_utf8_lossy(&r.body));
    eventually("the deleted Deployment's pods are gone", CONVERGE, || async {
        let pods = api.get("/api/v1/namespaces/team-b/pods?labelSelector=app%3Dapi").await.json();
        pods["items"].as_array().is_some_and(Vec::is_empty)
    })
    .await;

    // The final state is what the same cluster reaches without kache: every Deployment available with its
    // replicas, every pod bound to a node and Running.
    eventually("every Deployment is available", CONVERGE, || async {
        let deployments =
            api.get("/apis/apps/v1/deployments?labelSelector=kache-testbed%2Fworkload").await.json();
        deployments["items"].as_array().is_some_and(|items| {
            !items.is_empty()
                && items.iter().all(|d| {
                    d["status"]["readyReplicas"] == d["spec"]["replicas"]
                        && d["status"]["updatedReplicas"] == d["spec"]["replicas"]
                })
        })
    })
    .await;
    let pods = api.get("/api/v1/pods?labelSelector=app").await.json();
    let items: Vec<&Value> = pods["items"].as_array().into_iter().flatten().collect();
    assert!(!items.is_empty());
    for p in &items {
        assert!(p["spec"]["nodeName"].as_str().is_some_and(|n| n.starts_with("kwok-node-")), "bound: {p}");
    }
    eprintln!("through kache: {from_memory} reads from memory, {} forwarded", kache.stats().forwarded());
    kache.shutdown().await;
    drop(cluster);
}

/// A client-go informer (`informer-check`, built here from client-go 1.36) over pods in protobuf, WatchList
/// on and off, through kache with the admin's token while the real controllers scale a Deployment up and
/// down (pods created, bound by the scheduler, run by kwok, deleted) and the nodes renew their leases: when
/// it stops, its store equals a consistent list from the apiserver (same keys, resourceVersions and uids).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_go_informers_through_kache_match_the_cluster() {
    // It scales a Deployment of the shared cluster: the byte-for-byte comparisons wait.
    let _one = common::cluster::one_at_a_time().await;
    let Some(cluster) = tokio::task::spawn_blocking(Cluster::shared).await.expect("cluster start") else {
        return;
    };
    let kache = cluster.start_kache(|config| cluster.delegated(config)).await;
    let program = common::real::testbed_bin().join("informer-check");
    let kubectl = |args: &[&str]| {
        let out = std::process::Command::new(cluster.var("KUBECTL"))
            .arg("--kubeconfig")
            .arg(cluster.admin_kubeconfig())
            .args(args)
            .output()
            .expect("kubectl runs");
        assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    for watchlist in [true, false] {
        let mut child = std::process::Command::new(&program)
            .args(["--server", &kache.url(), "--compare-server", cluster.url(), "--insecure"])
            .args([
                "--token",
                cluster.var("KUBE_ADMIN_TOKEN"),
                "--resource",
                "pods",
                "--content-type",
                "protobuf",
            ])
            .arg(format!("--watchlist={watchlist}"))
            .args(["--duration", "25s", "--sync-timeout", "90s"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("informer-check starts");
        let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel::<String>();
        let stdout = child.stdout.take().expect("piped stdout");
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut seen = Vec::new();
        let synced = tokio::time::timeout(Duration::from_secs(120), async {
            while let Some(line) = lines.recv().await {
                let done = line.starts_with("synced");
                seen.push(line);
                if done {
                    return true;
                }
            }
            false
        })
        .await
        .unwrap_or(false);
        if !synced {
            let _ = child.kill();
        }
        assert!(synced, "informer-check (WatchList {watchlist}) synced through kache: {seen:?}");
        // The controllers carry the scale out while the informer watches: creates, binds, status, deletes.
        let replicas = if watchlist { "6" } else { "2" };
        kubectl(&["scale", "deploy/worker", "-n", "team-c", "--replicas", replicas]);
        let out = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .expect("wait thread")
            .expect("informer-check exits");
        while let Some(line) = lines.recv().await {
            seen.push(line);
        }
        assert!(
            out.status.success(),
            "informer-check (protobuf, WatchList {watchlist}) through kache: its store differs from the apiserver's \
             list ({:?})\n{}\nstderr:\n{}",
            out.status,
            seen.join("\n"),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
