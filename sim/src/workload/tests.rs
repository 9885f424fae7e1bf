use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rand::{SeedableRng, rngs::StdRng};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use super::*;
use crate::selector::{FieldSelector, LabelSelector, field_set};

fn workload(namespaces: usize, pods: usize, nodes: usize) -> Workload {
    Workload { namespaces, pods, nodes, churn_per_sec: 0.0, seed: 42 }
}

fn keys(v: &Value) -> Vec<&str> {
    v.as_object().map(|m| m.keys().map(String::as_str).collect()).unwrap_or_default()
}

// === seeding ===

#[test]
fn seed_order_counts_and_spread() {
    let objects = seed_objects(&workload(3, 30, 4));
    let kinds: Vec<&str> = objects.iter().map(|(r, _, _)| *r).collect();
    assert_eq!(&kinds[..3], ["namespaces"; 3]);
    assert_eq!(&kinds[3..7], ["nodes"; 4]);
    assert!(kinds[7..].iter().all(|k| *k == "pods"));
    assert_eq!(objects.len(), 3 + 4 + 30);

    let mut names = HashSet::new();
    let mut per_ns = std::collections::HashMap::new();
    let mut per_node = std::collections::HashMap::new();
    for (resource, ns, body) in &objects {
        match *resource {
            "pods" => {
                let ns = ns.as_deref().expect("pods are namespaced");
                assert_eq!(body["metadata"]["namespace"], ns);
                assert!(
                    names.insert((
                        ns.to_string(),
                        body["metadata"]["name"].as_str().unwrap_or("").to_string()
                    ))
                );
                *per_ns.entry(ns.to_string()).or_insert(0) += 1;
                *per_node.entry(body["spec"]["nodeName"].as_str().unwrap_or("").to_string()).or_insert(0) +=
                    1;
            }
            _ => assert!(ns.is_none(), "{resource} are cluster-scoped"),
        }
    }
    assert_eq!(per_ns.len(), 3);
    assert!(per_ns.values().all(|n| *n == 10));
    assert_eq!(per_node.len(), 4);
    assert!(per_node.values().all(|n| (7..=8).contains(n)));
}

#[test]
fn seeding_is_deterministic_per_seed() {
    let a = seed_objects(&workload(2, 10, 2));
    let b = seed_objects(&workload(2, 10, 2));
    assert_eq!(a, b);
    let mut other = workload(2, 10, 2);
    other.seed = 43;
    assert_ne!(a, seed_objects(&other));
}

#[test]
fn pods_without_namespaces_or_nodes() {
    let objects = seed_objects(&workload(0, 3, 0));
    assert_eq!(objects[0].0, "namespaces", "one namespace is always there for pods");
    let pod = &objects[1].2;
    assert_eq!(pod["status"]["phase"], "Pending");
    assert!(pod["spec"].get("nodeName").is_none());
    assert!(pod["status"].get("podIP").is_none());
}

// === object shapes ===

#[test]
fn pods_are_two_to_four_kib() {
    let mut rng = StdRng::seed_from_u64(1);
    let (mut min, mut max) = (usize::MAX, 0);
    for i in 0..2000 {
        let node = if i % 10 == 0 { String::new() } else { format!("node-{i}") };
        let name = pod_name(&mut rng);
        let body = pod("some-namespace", &name, &node, &mut rng);
        let size = serde_json::to_vec(&body).expect("serialises").len();
        (min, max) = (min.min(size), max.max(size));
    }
    assert!(min >= 2048 && max <= 4096, "pod sizes range over {min}..={max} bytes");
}

#[test]
fn pod_fields_are_in_apiserver_order_and_selectable() {
    let mut rng = StdRng::seed_from_u64(2);
    let name = pod_name(&mut rng);
    let body = pod("team-a", &name, "node-3", &mut rng);
    assert_eq!(keys(&body), ["kind", "apiVersion", "metadata", "spec", "status"]);
    assert_eq!(
        keys(&body["metadata"]),
        ["name", "generateName", "namespace", "labels", "ownerReferences", "managedFields"]
    );
    let spec_keys = keys(&body["spec"]);
    let pos = |k: &str| spec_keys.iter().position(|x| *x == k).unwrap_or_else(|| panic!("spec.{k} missing"));
    assert!(pos("volumes") < pos("containers"));
    assert!(pos("serviceAccountName") < pos("nodeName"));
    assert!(pos("nodeName") < pos("schedulerName"));
    let status_keys = keys(&body["status"]);
    assert_eq!(&status_keys[..2], ["phase", "conditions"]);

    let owner = &body["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "ReplicaSet");
    assert_eq!(format!("{}-", owner["name"].as_str().unwrap_or("")), body["metadata"]["generateName"]);
    let app = body["metadata"]["labels"]["app"].as_str().unwrap_or("").to_string();
    assert!(name.starts_with(&format!("{app}-")));

    let labels = body["metadata"]["labels"].as_object().expect("labels");
    assert!(LabelSelector::parse(&format!("app={app},pod-template-hash")).expect("valid").matches(labels));
    let fields = field_set("", "Pod", true, &body);
    assert!(
        FieldSelector::parse("spec.nodeName=node-3,status.phase=Running").expect("valid").matches(&fields)
    );
    assert!(fields["status.podIP"].starts_with("10.244."));
    assert_eq!(fields["spec.serviceAccountName"], "default");
}

#[test]
fn nodes_and_namespaces() {
    let n = node("node-7");
    assert_eq!(keys(&n), ["kind", "apiVersion", "metadata", "spec", "status"]);
    assert_eq!(n["metadata"]["labels"]["kubernetes.io/hostname"], "node-7");
    assert_eq!(field_set("", "Node", false, &n)["spec.unschedulable"], "false");
    assert_ne!(node("node-7")["status"]["addresses"], node("node-8")["status"]["addresses"]);
    let ns = namespace("team-a");
    assert_eq!(ns["metadata"]["labels"]["kubernetes.io/metadata.name"], "team-a");
    assert_eq!(ns["status"]["phase"], "Active");
}

// === churn against a recording fake apiserver ===

#[derive(Debug)]
struct Recorded {
    method: String,
    path_and_query: String,
    content_type: String,
    body: Bytes,
}

const LISTED: [(&str, &str); 2] = [("ns-0", "web-aaa-bbbbb"), ("ns-1", "api-ccc-ddddd")];

/// Serves a two-page pod list (the continue token needs escaping) and answers every write with success.
async fn fake_apiserver(tx: mpsc::UnboundedSender<Recorded>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let tx = tx.clone();
                    async move {
                        let method = req.method().to_string();
                        let path_and_query =
                            req.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
                        let content_type = req
                            .headers()
                            .get(http::header::CONTENT_TYPE)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_string();
                        let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                        let (status, answer) = match (method.as_str(), path_and_query.as_str()) {
                            ("GET", "/api/v1/pods?limit=500") => (StatusCode::OK, page(LISTED[0], "a+b/c=")),
                            ("GET", "/api/v1/pods?limit=500&continue=a%2Bb%2Fc%3D") => {
                                (StatusCode::OK, page(LISTED[1], ""))
                            }
                            ("POST", _) => (StatusCode::CREATED, "{}".to_string()),
                            _ => (StatusCode::OK, "{}".to_string()),
                        };
                        let _ = tx.send(Recorded { method, path_and_query, content_type, body });
                        Ok::<_, std::convert::Infallible>(
                            Response::builder()
                                .status(status)
                                .body(Full::new(Bytes::from(answer)))
                                .expect("static response"),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

fn page((ns, name): (&str, &str), next: &str) -> String {
    serde_json::json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "5", "continue": next},
                       "items": [{"metadata": {"name": name, "namespace": ns}}]})
    .to_string()
}

#[tokio::test]
async fn churn_creates_updates_and_deletes_until_stopped() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let addr = fake_apiserver(tx).await;
    let (stop_tx, stop_rx) = watch::channel(false);
    let w = Workload { namespaces: 2, pods: 2, nodes: 2, churn_per_sec: 2000.0, seed: 9 };
    let task = tokio::spawn(churn_with_stats(format!("http://{addr}/"), w, stop_rx));

    let mut seen = Vec::new();
    let mut writes = 0;
    while writes < 80 {
        let r = tokio::time::timeout(Duration::from_secs(60), rx.recv())
            .await
            .expect("churn keeps writing")
            .expect("server alive");
        writes += usize::from(r.method != "GET");
        seen.push(r);
    }
    stop_tx.send(true).expect("churn listens");
    let stats = task.await.expect("churn task completes");
    while let Ok(r) = rx.try_recv() {
        seen.push(r);
    }

    let lists: Vec<&Recorded> = seen.iter().filter(|r| r.method == "GET").collect();
    let pod_lists = lists.iter().filter(|r| r.path_and_query.starts_with("/api/v1/pods")).count();
    assert_eq!(pod_lists, 2, "the initial list follows the continue token once");
    let owner_lists: Vec<&str> =
        lists.iter().map(|r| r.path_and_query.as_str()).filter(|p| !p.starts_with("/api/v1/pods")).collect();
    assert_eq!(owner_lists, ["/apis/apps/v1/replicasets"], "the ReplicaSets are listed once, for their uids");
    let write_count = seen.len() - lists.len();
    assert_eq!(stats.failures, 0);
    assert_eq!((stats.creates + stats.updates + stats.deletes) as usize, write_count, "{stats:?}");
    assert!(stats.creates > 0 && stats.updates > 0 && stats.deletes > 0, "{stats:?}");

    // Every update or delete targets a pod that was listed or created, and no pod is deleted twice. (Requests
    // run concurrently, so arrival order is not issue order: the checks are order-independent.)
    let mut known: HashSet<String> =
        LISTED.iter().map(|(ns, name)| format!("/api/v1/namespaces/{ns}/pods/{name}")).collect();
    for r in seen.iter().filter(|r| r.method == "POST") {
        assert_eq!(r.content_type, "application/json");
        let body: Value = serde_json::from_slice(&r.body).expect("pod JSON");
        let ns = body["metadata"]["namespace"].as_str().expect("namespace");
        assert!(ns == "ns-0" || ns == "ns-1");
        assert_eq!(r.path_and_query, format!("/api/v1/namespaces/{ns}/pods"));
        assert_eq!(body["kind"], "Pod");
        known.insert(format!("{}/{}", r.path_and_query, body["metadata"]["name"].as_str().unwrap_or("")));
    }
    let mut deleted = HashSet::new();
    for r in seen.iter().filter(|r| r.method != "GET" && r.method != "POST") {
        match r.method.as_str() {
            "PATCH" => {
                assert_eq!(r.content_type, "application/merge-patch+json");
                let target = r.path_and_query.trim_end_matches("/status");
                assert!(known.contains(target), "update of unknown pod {target}");
                let patch: Value = serde_json::from_slice(&r.body).expect("patch JSON");
                assert!(patch.get("metadata").is_some() || patch["status"]["conditions"].is_array());
            }
            "DELETE" => {
                assert!(known.contains(&r.path_and_query), "delete of unknown pod {}", r.path_and_query);
                assert!(deleted.insert(r.path_and_query.clone()), "{} deleted twice", r.path_and_query);
            }
            other => panic!("unexpected method {other}"),
        }
    }
}

#[tokio::test]
async fn churn_without_rate_waits_for_the_stop_signal() {
    let (stop_tx, stop_rx) = watch::channel(false);
    let task = tokio::spawn(churn_with_stats("http://127.0.0.1:9".into(), workload(1, 1, 1), stop_rx));
    drop(stop_tx);
    assert_eq!(task.await.expect("completes"), ChurnStats::default());
}

#[tokio::test]
async fn churn_ops_issues_exactly_that_many_operations() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let addr = fake_apiserver(tx).await;
    let w = Workload { namespaces: 1, pods: 3, nodes: 1, churn_per_sec: f64::MAX, seed: 3 };
    let stats = churn_ops(format!("http://{addr}"), w, 50).await;
    assert_eq!(stats.creates + stats.updates + stats.deletes, 50, "{stats:?}");
    assert_eq!(stats.failures, 0);
    let mut writes = 0;
    while let Ok(r) = rx.try_recv() {
        writes += usize::from(r.method != "GET");
    }
    assert_eq!(writes, 50);
}
