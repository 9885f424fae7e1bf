//! Protobuf end to end: the sim speaks the apiserver's protobuf, byte for byte what
//! the real Go encoder writes, and kubectl's protobuf writes work through kache (which forwards them).
//!
//! The reference is `kube-proto` (the testbed: the real k8s.io/api types and serializers): for the
//! same JSON, the sim's protobuf object, list and watch stream must equal what kube-proto encodes. The
//! sim's JSON is the input, so these tests also hold the sim's JSON to the Go types (a field the Go types
//! do not have, or a value they would print differently, shows up as a byte difference).
//!
//! Tests that need kube-proto or kubectl fail under `KACHE_REQUIRE_TOOLS=1` when the tool is missing.

use crate::common;

use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use kache_sim::SimHandle;
use serde_json::{Value, json};

use common::{Resp, get_with, start_kache, start_sim};

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// client-go's Accept when configured for protobuf.
const CLIENT_GO_ACCEPT: &str = "application/vnd.kubernetes.protobuf, application/json";

// === kube-proto ===

// === HTTP ===

async fn send(base: &str, method: Method, path: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Resp {
    let mut req = Request::builder().method(method).uri(format!("{base}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let resp =
        client.request(req.body(Full::new(Bytes::from(body))).expect("request")).await.expect("response");
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    Resp { status, headers, body }
}

fn content_type(r: &Resp) -> &str {
    r.headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("")
}

/// GET as JSON and as protobuf; asserts both succeed.
async fn both(base: &str, path: &str, accept_pb: &str, accept_json: &str) -> (Resp, Resp) {
    let j = get_with(base, path, &[("accept", accept_json)]).await;
    let p = get_with(base, path, &[("accept", accept_pb)]).await;
    assert_eq!(j.status, StatusCode::OK, "GET {path} (JSON): {}", String::from_utf8_lossy(&j.body));
    assert_eq!(p.status, StatusCode::OK, "GET {path} (protobuf): {}", String::from_utf8_lossy(&p.body));
    assert_eq!(content_type(&p), PROTOBUF, "GET {path}");
    (j, p)
}

fn assert_same_bytes(what: &str, sim: &[u8], reference: &[u8]) {
    if sim != reference {
        let at =
            sim.iter().zip(reference).position(|(a, b)| a != b).unwrap_or(sim.len().min(reference.len()));
        panic!(
            "{what}: the sim's protobuf differs from kube-proto's at byte {at} (sim {} bytes, kube-proto {})\n sim: {:02x?}\n ref: {:02x?}",
            sim.len(),
            reference.len(),
            &sim[at.saturating_sub(16)..sim.len().min(at + 32)],
            &reference[at.saturating_sub(16)..reference.len().min(at + 32)]
        );
    }
}

// === Fixture: one rich object of every built-in kind the sim models ===

fn objects() -> Vec<(&'static str, Option<&'static str>, Value)> {
    let meta = |name: &str| json!({"name": name, "labels": {"app": "web", "tier": "a"}, "annotations": {"note": "<&>"}});
    let pod_spec = json!({
        "volumes": [{"name": "cfg", "configMap": {"name": "cm", "defaultMode": 420}},
                    {"name": "tok", "projected": {"sources": [{"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}],
        "initContainers": [{"name": "init", "image": "busybox", "command": ["sh", "-c", "true"]}],
        "containers": [{"name": "c", "image": "nginx:1.27", "args": ["-g", "daemon off;"],
            "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}],
            "env": [{"name": "A", "value": "1"}, {"name": "POD", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}],
            "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "100m", "memory": "64Mi"}},
            "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
            "readinessProbe": {"tcpSocket": {"port": "http"}, "initialDelaySeconds": 5},
            "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg", "readOnly": true}],
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent",
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "capabilities": {"drop": ["ALL"]}}}],
        "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
        "nodeSelector": {"kubernetes.io/os": "linux"}, "serviceAccountName": "default",
        "securityContext": {"fsGroup": 2000}, "schedulerName": "default-scheduler",
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}}]}},
        "priority": 0, "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority"
    });
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta("web-0"), "spec": pod_spec.clone(),
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2024-05-06T07:08:09Z"}],
            "hostIP": "192.168.0.2", "hostIPs": [{"ip": "192.168.0.2"}], "podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}],
            "startTime": "2024-05-06T07:08:00Z", "qosClass": "Burstable",
            "containerStatuses": [{"name": "c", "state": {"running": {"startedAt": "2024-05-06T07:08:05Z"}}, "lastState": {}, "ready": true, "restartCount": 0, "image": "nginx:1.27", "imageID": "docker.io/library/nginx@sha256:00", "containerID": "containerd://abc", "started": true}]}});
    pod["spec"]["nodeName"] = json!("node-1");
    let template = json!({"metadata": {"labels": {"app": "web"}}, "spec": pod_spec});
    vec![
        ("namespaces", None, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": meta("team-a")})),
        (
            "nodes",
            None,
            json!({"apiVersion": "v1", "kind": "Node", "metadata": meta("node-1"),
            "spec": {"podCIDR": "10.0.0.0/24", "podCIDRs": ["10.0.0.0/24"], "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
            "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"}, "allocatable": {"cpu": "3800m", "memory": "15Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2024-05-06T07:08:09Z", "lastTransitionTime": "2024-05-06T07:00:00Z", "reason": "KubeletReady", "message": "ok"}],
                "addresses": [{"type": "InternalIP", "address": "192.168.0.2"}, {"type": "Hostname", "address": "node-1"}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {"machineID": "m", "systemUUID": "s", "bootID": "b", "kernelVersion": "6.1", "osImage": "Debian", "containerRuntimeVersion": "containerd://1.7", "kubeletVersion": "v1.36.0", "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
                "images": [{"names": ["nginx:1.27"], "sizeBytes": 70000000}]}}),
        ),
        ("pods", Some("team-a"), pod),
        (
            "configmaps",
            Some("team-a"),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("cm"), "data": {"b": "2", "a": "1", "empty": ""}, "binaryData": {"bin": "AAEC"}}),
        ),
        (
            "secrets",
            Some("team-a"),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta("s"), "data": {"password": "aHVudGVyMg==", "z": ""}, "type": "Opaque"}),
        ),
        (
            "services",
            Some("team-a"),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": meta("web"),
            "spec": {"ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": "http"}, {"name": "m", "protocol": "TCP", "port": 9090, "targetPort": 9090}],
                "selector": {"app": "web"}, "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"], "type": "ClusterIP", "sessionAffinity": "None",
                "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack", "internalTrafficPolicy": "Cluster"},
            "status": {"loadBalancer": {}}}),
        ),
        (
            "endpoints",
            Some("team-a"),
            json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": meta("web"),
            "subsets": [{"addresses": [{"ip": "10.0.0.5", "nodeName": "node-1", "targetRef": {"kind": "Pod", "namespace": "team-a", "name": "web-0", "uid": "u"}}],
                "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}]}),
        ),
        (
            "events",
            Some("team-a"),
            json!({"apiVersion": "v1", "kind": "Event", "metadata": meta("web-0.17a"),
            "involvedObject": {"kind": "Pod", "namespace": "team-a", "name": "web-0", "uid": "u", "apiVersion": "v1", "resourceVersion": "5"},
            "reason": "Scheduled", "message": "assigned", "source": {"component": "scheduler"},
            "firstTimestamp": "2024-05-06T07:08:00Z", "lastTimestamp": "2024-05-06T07:08:01Z", "count": 2, "type": "Normal",
            "eventTime": "2024-05-06T07:08:00.123456Z", "reportingComponent": "default-scheduler", "reportingInstance": "s-1"}),
        ),
        (
            "deployments.apps",
            Some("team-a"),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("web"),
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": template.clone(),
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": 1}},
                "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600},
            "status": {"observedGeneration": 1, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 3, "availableReplicas": 3,
                "conditions": [{"type": "Available", "status": "True", "lastUpdateTime": "2024-05-06T07:08:09Z", "lastTransitionTime": "2024-05-06T07:08:09Z", "reason": "MinimumReplicasAvailable", "message": "ok"}]}}),
        ),
        (
            "replicasets.apps",
            Some("team-a"),
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": meta("web-5d8"),
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": template},
            "status": {"replicas": 3, "fullyLabeledReplicas": 3, "readyReplicas": 3, "availableReplicas": 3, "observedGeneration": 1}}),
        ),
        (
            "leases.coordination.k8s.io",
            Some("team-a"),
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta("node-1"),
            "spec": {"holderIdentity": "node-1", "leaseDurationSeconds": 40, "renewTime": "2024-05-06T07:08:09.000000Z", "leaseTransitions": 1}}),
        ),
    ]
}

fn path_of(resource: &str, ns: Option<&str>, name: &str) -> String {
    let (resource, group) = match resource.split_once('.') {
        Some((plural, group)) => (plural, format!("/apis/{group}/v1")),
        None => (resource, "/api/v1".to_string()),
    };
    match ns {
        Some(ns) => format!("{group}/namespaces/{ns}/{resource}/{name}"),
        None => format!("{group}/{resource}/{name}"),
    }
    .trim_end_matches('/')
    .to_string()
}

/// A sim holding `objects()` (and the `team-a` namespace they live in).
async fn seeded_sim() -> SimHandle {
    let sim = start_sim().await;
    for (resource, ns, obj) in objects() {
        sim.create(resource, ns, obj).unwrap_or_else(|e| panic!("create {resource}: {e:?}"));
    }
    sim
}

// === Tests ===

#[tokio::test]
async fn every_modelled_kind_encodes_as_the_go_encoder() {
    let Some(bin) = common::kube_proto::require() else { return };
    let sim = seeded_sim().await;
    for (resource, ns, obj) in objects() {
        let name = obj["metadata"]["name"].as_str().expect("name");
        let path = path_of(resource, ns, name);
        let (j, p) = both(&sim.url(), &path, CLIENT_GO_ACCEPT, "application/json").await;
        assert_same_bytes(&format!("GET {path}"), &p.body, &common::kube_proto::run(&bin, "encode", &j.body));
        // Decoding the sim's bytes gives what Go prints for the sim's object (its JSON normalised by the Go
        // types: the sim's own JSON keeps nested keys in the order they were written).
        let decoded: Value =
            serde_json::from_slice(&common::kube_proto::run(&bin, "decode", &p.body)).expect("JSON");
        let normalized: Value =
            serde_json::from_slice(&common::kube_proto::run(&bin, "normalize", &j.body)).expect("JSON");
        assert_eq!(decoded, normalized, "kube-proto decode of GET {path}");
        // The metadata view.
        let meta = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
        let (j, p) =
            both(&sim.url(), &path, meta, "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1")
                .await;
        assert_same_bytes(
            &format!("GET {path} as PartialObjectMetadata"),
            &p.body,
            &common::kube_proto::run(&bin, "encode", &j.body),
        );
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn lists_encode_as_the_go_encoder() {
    let Some(bin) = common::kube_proto::require() else { return };
    let sim = seeded_sim().await;
    for i in 0..5 {
        let pod = common::pod("team-a", &format!("p{i}"), &[("i", &i.to_string())], "node-2");
        sim.create("pods", Some("team-a"), pod).expect("pod");
    }
    let paths = [
        "/api/v1/pods",
        "/api/v1/namespaces/team-a/pods?limit=2",
        "/api/v1/namespaces/team-a/pods?labelSelector=app%3Dnone",
        "/api/v1/namespaces",
        "/api/v1/nodes",
        "/apis/apps/v1/deployments",
        "/apis/coordination.k8s.io/v1/namespaces/team-a/leases",
        "/api/v1/namespaces/team-a/secrets",
        "/api/v1/events",
    ];
    for path in paths {
        let (j, p) = both(&sim.url(), path, CLIENT_GO_ACCEPT, "application/json").await;
        assert_same_bytes(&format!("GET {path}"), &p.body, &common::kube_proto::run(&bin, "encode", &j.body));
    }
    // Paginated with the continue token the protobuf page carries.
    let first = get_with(&sim.url(), "/api/v1/pods?limit=3", &[("accept", PROTOBUF)]).await;
    let json_first = get_with(&sim.url(), "/api/v1/pods?limit=3", &[]).await.json();
    let token = json_first["metadata"]["continue"].as_str().expect("a continue token").to_string();
    let decoded: Value =
        serde_json::from_slice(&common::kube_proto::run(&bin, "decode", &first.body)).expect("JSON");
    assert_eq!(decoded["metadata"]["continue"], json!(token));
    let next = format!("/api/v1/pods?limit=3&continue={token}");
    let (j, p) = both(&sim.url(), &next, PROTOBUF, "application/json").await;
    assert_same_bytes("second page", &p.body, &common::kube_proto::run(&bin, "encode", &j.body));
    // PartialObjectMetadataList.
    let path = "/api/v1/namespaces/team-a/pods";
    let (j, p) = both(
        &sim.url(),
        path,
        "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
    )
    .await;
    assert_same_bytes(
        "PartialObjectMetadataList",
        &p.body,
        &common::kube_proto::run(&bin, "encode", &j.body),
    );
    sim.shutdown().await;
}

/// Reads a watch response body until `n` protobuf frames (or JSON lines) have arrived.
async fn watch_body(base: &str, path: &str, accept: &str, n: usize) -> (String, Vec<u8>) {
    let req = Request::get(format!("{base}{path}"))
        .header("accept", accept)
        .body(http_body_util::Empty::<Bytes>::new())
        .expect("request");
    let resp = common::client().request(req).await.expect("response");
    assert_eq!(resp.status(), StatusCode::OK, "watch {path}");
    let ct = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let pb = ct.starts_with(PROTOBUF);
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    let count = |b: &[u8]| -> usize {
        if !pb {
            return b.iter().filter(|c| **c == b'\n').count();
        }
        let (mut i, mut k) = (0, 0);
        while i + 4 <= b.len() {
            let len = u32::from_be_bytes(b[i..i + 4].try_into().expect("4 bytes")) as usize;
            if i + 4 + len > b.len() {
                break;
            }
            i += 4 + len;
            k += 1;
        }
        k
    };
    while count(&buf) < n {
        let frame = tokio::time::timeout(Duration::from_secs(30), body.frame())
            .await
            .unwrap_or_else(|_| panic!("watch {path}: {} of {n} events within 30 s", count(&buf)))
            .expect("stream open")
            .expect("frame");
        if let Ok(data) = frame.into_data() {
            buf.extend_from_slice(&data);
        }
    }
    (ct, buf)
}

#[tokio::test]
async fn watch_streams_encode_as_the_go_encoder() {
    let Some(bin) = common::kube_proto::require() else { return };
    let sim = start_sim().await;
    sim.create("namespaces", None, common::namespace("w")).expect("namespace");
    let start = sim.revision();
    for i in 0..3 {
        sim.create("pods", Some("w"), common::pod("w", &format!("p{i}"), &[], "node-1")).expect("pod");
    }
    let mut p1 = sim.get("pods", Some("w"), "p1").expect("p1");
    p1["metadata"]["labels"] = json!({"changed": "yes"});
    sim.update("pods", Some("w"), p1).expect("update");
    sim.delete("pods", Some("w"), "p2").expect("delete");
    sim.create("configmaps", Some("w"), json!({"metadata": {"name": "c"}, "data": {"k": "v"}}))
        .expect("configmap");
    let n = 5;
    for (path, accept_pb, accept_json) in [
        (
            format!("/api/v1/namespaces/w/pods?watch=1&resourceVersion={start}"),
            CLIENT_GO_ACCEPT,
            "application/json",
        ),
        (
            format!("/api/v1/pods?watch=1&resourceVersion={start}"),
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json",
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        ),
    ] {
        let (ct, pb) = watch_body(&sim.url(), &path, accept_pb, n).await;
        assert_eq!(ct, "application/vnd.kubernetes.protobuf;stream=watch", "{path}");
        let (_, js) = watch_body(&sim.url(), &path, accept_json, n).await;
        assert_same_bytes(&format!("watch {path}"), &pb, &common::kube_proto::run(&bin, "encode-watch", &js));
    }
    // A streaming list (WatchList) with its bookmark, and a 410 ERROR event, in protobuf.
    let wl = "/api/v1/namespaces/w/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";
    let (_, pb) = watch_body(&sim.url(), wl, PROTOBUF, 3).await;
    let (_, js) = watch_body(&sim.url(), wl, "application/json", 3).await;
    assert_same_bytes("watch-list", &pb, &common::kube_proto::run(&bin, "encode-watch", &js));
    sim.compact(None);
    let gone = format!("/api/v1/namespaces/w/pods?watch=1&resourceVersion={start}");
    let (_, pb) = watch_body(&sim.url(), &gone, PROTOBUF, 1).await;
    let (_, js) = watch_body(&sim.url(), &gone, "application/json", 1).await;
    assert!(
        String::from_utf8_lossy(&js).contains("\"ERROR\""),
        "a 410 event: {}",
        String::from_utf8_lossy(&js)
    );
    assert_same_bytes("ERROR event", &pb, &common::kube_proto::run(&bin, "encode-watch", &js));
    sim.shutdown().await;
}

#[tokio::test]
async fn protobuf_bodies_create_and_update_objects() {
    let Some(bin) = common::kube_proto::require() else { return };
    let sim = start_sim().await;
    let base = sim.url();
    let ns =
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "pb", "labels": {"a": "b"}}});
    let body = common::kube_proto::run(&bin, "encode", ns.to_string().as_bytes());
    let r = send(
        &base,
        Method::POST,
        "/api/v1/namespaces",
        &[("content-type", PROTOBUF), ("accept", CLIENT_GO_ACCEPT)],
        body,
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(content_type(&r), PROTOBUF);
    let created: Value =
        serde_json::from_slice(&common::kube_proto::run(&bin, "decode", &r.body)).expect("JSON");
    assert_eq!(created["metadata"]["labels"]["a"], json!("b"));
    assert_eq!(sim.get("namespaces", None, "pb").expect("stored")["metadata"]["labels"]["a"], json!("b"));
    // A deployment, then an update of it, both in protobuf.
    let (_, _, dep) = objects().into_iter().find(|(r, _, _)| *r == "deployments.apps").expect("deployment");
    let path = "/apis/apps/v1/namespaces/pb/deployments";
    let r = send(
        &base,
        Method::POST,
        path,
        &[("content-type", PROTOBUF)],
        common::kube_proto::run(&bin, "encode", dep.to_string().as_bytes()),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&r.body));
    let mut stored = sim.get("deployments.apps", Some("pb"), "web").expect("stored");
    assert_eq!(
        stored["spec"]["template"]["spec"]["containers"][0]["resources"],
        dep["spec"]["template"]["spec"]["containers"][0]["resources"]
    );
    assert_eq!(stored["spec"]["strategy"], dep["spec"]["strategy"]);
    stored["spec"]["replicas"] = json!(5);
    let r = send(
        &base,
        Method::PUT,
        &format!("{path}/web"),
        &[("content-type", PROTOBUF)],
        common::kube_proto::run(&bin, "encode", stored.to_string().as_bytes()),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(sim.get("deployments.apps", Some("pb"), "web").expect("stored")["spec"]["replicas"], json!(5));
    // A protobuf DeleteOptions body (client-go sends one in its content type).
    let opts = common::kube_proto::run(
        &bin,
        "encode",
        br#"{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background"}"#,
    );
    let r = send(&base, Method::DELETE, &format!("{path}/web"), &[("content-type", PROTOBUF)], opts).await;
    assert_eq!(r.status, StatusCode::OK, "{}", String::from_utf8_lossy(&r.body));
    sim.shutdown().await;
}

#[tokio::test]
async fn malformed_protobuf_bodies_get_a_400_status() {
    let Some(bin) = common::kube_proto::require() else { return };
    let sim = kache_sim::Sim::builder()
        .crd(kache_sim::Crd::parse("example.com/v1/Widget/widgets/Namespaced").expect("crd"))
        .start()
        .await
        .expect("sim starts");
    let base = sim.url();
    let valid = common::kube_proto::run(
        &bin,
        "encode",
        br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"a":"b"}}"#,
    );
    let mut bodies: Vec<Vec<u8>> =
        vec![b"not protobuf".to_vec(), b"k8s\0".to_vec(), b"k8s\0\xff\xff\xff".to_vec()];
    for cut in [5, 10, valid.len() / 2, valid.len() - 1] {
        bodies.push(valid[..cut].to_vec());
    }
    let mut flipped = valid.clone();
    flipped[12] ^= 0x07; // a wire type changed inside the envelope
    bodies.push(flipped);
    for body in bodies {
        for accept in ["application/json", PROTOBUF] {
            let r = send(
                &base,
                Method::POST,
                "/api/v1/namespaces/default/configmaps",
                &[("content-type", PROTOBUF), ("accept", accept)],
                body.clone(),
            )
            .await;
            assert_eq!(
                r.status,
                StatusCode::BAD_REQUEST,
                "body {body:02x?}: {}",
                String::from_utf8_lossy(&r.body)
            );
            let status: Value = if accept == PROTOBUF {
                assert_eq!(content_type(&r), PROTOBUF);
                serde_json::from_slice(&common::kube_proto::run(&bin, "decode", &r.body))
                    .expect("a protobuf Status")
            } else {
                r.json()
            };
            assert_eq!(
                (status["kind"].as_str(), status["reason"].as_str(), status["code"].as_i64()),
                (Some("Status"), Some("BadRequest"), Some(400)),
                "{status}"
            );
            assert!(
                status["message"].as_str().is_some_and(
                    |m| m.starts_with("the object provided is unrecognized (must be of type ConfigMap)")
                ),
                "{status}"
            );
        }
    }
    // Custom resources (as the real CRD apiserver answers): no protobuf body (415); no protobuf object (a
    // protobuf-only Accept is a 406 whose Status is itself in protobuf; with JSON after it, JSON); their
    // metadata views and errors in protobuf.
    let widgets = "/apis/example.com/v1/namespaces/default/widgets";
    let r = send(&base, Method::POST, widgets, &[("content-type", PROTOBUF)], valid).await;
    assert_eq!(r.status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{}", String::from_utf8_lossy(&r.body));
    sim.create(
        "widgets.example.com",
        Some("default"),
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}}),
    )
    .expect("widget");
    let r = get_with(&base, widgets, &[("accept", PROTOBUF)]).await;
    assert_eq!(
        (r.status, content_type(&r)),
        (StatusCode::NOT_ACCEPTABLE, PROTOBUF),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let status: Value =
        serde_json::from_slice(&common::kube_proto::run(&bin, "decode", &r.body)).expect("a protobuf Status");
    assert_eq!(
        status["message"],
        json!(
            "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf"
        )
    );
    let r = get_with(&base, widgets, &[("accept", CLIENT_GO_ACCEPT)]).await;
    assert_eq!((r.status, content_type(&r)), (StatusCode::OK, "application/json"));
    let (j, p) = both(
        &base,
        widgets,
        "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
    )
    .await;
    assert_same_bytes(
        "a custom resource's PartialObjectMetadataList",
        &p.body,
        &common::kube_proto::run(&bin, "encode", &j.body),
    );
    let r = get_with(&base, &format!("{widgets}/nope"), &[("accept", CLIENT_GO_ACCEPT)]).await;
    assert_eq!((r.status, content_type(&r)), (StatusCode::NOT_FOUND, PROTOBUF));
    // A protobuf error for a built-in kind.
    let r = get_with(&base, "/api/v1/namespaces/default/pods/nope", &[("accept", CLIENT_GO_ACCEPT)]).await;
    assert_eq!((r.status, content_type(&r)), (StatusCode::NOT_FOUND, PROTOBUF));
    let json_404 = get_with(&base, "/api/v1/namespaces/default/pods/nope", &[]).await;
    assert_same_bytes("404 Status", &r.body, &common::kube_proto::run(&bin, "encode", &json_404.body));
    sim.shutdown().await;
}

// === kubectl through kache ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_creates_through_kache() {
    if !common::tools::kubectl_available() {
        common::tools::missing("kubectl is not installed (scripts/install-test-deps.sh installs it)");
        return;
    }
    let sim = start_sim().await;
    let kache = start_kache(&sim.url(), |_| {}).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\nusers:\n- name: u\n  user: {{}}\n\
             contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n    namespace: default\ncurrent-context: c\n",
            kache.url()
        ),
    )
    .expect("kubeconfig");
    let cache = dir.path().join("cache");
    let run = |args: &[&str]| {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--cache-dir")
            .arg(&cache)
            .args(args)
            .output()
            .expect("kubectl runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let steps: [(&[&str], &str); 3] = [
        (&["create", "namespace", "x"], "namespace/x created"),
        (&["create", "configmap", "settings", "-n", "x", "--from-literal=a=1"], "configmap/settings created"),
        (
            &["create", "deployment", "web", "-n", "x", "--image=nginx", "--replicas=2"],
            "deployment.apps/web created",
        ),
    ];
    for (args, expected) in steps {
        let (ok, stdout, stderr) = tokio::task::block_in_place(|| run(args));
        assert!(
            ok && stdout.trim() == expected,
            "kubectl {}: ok={ok} stdout={stdout:?} stderr={stderr:?}",
            args.join(" ")
        );
    }
    assert_eq!(sim.get("configmaps", Some("x"), "settings").expect("stored")["data"], json!({"a": "1"}));
    let dep = sim.get("deployments.apps", Some("x"), "web").expect("stored");
    assert_eq!(dep["spec"]["replicas"], json!(2));
    assert_eq!(dep["spec"]["template"]["spec"]["containers"][0]["image"], json!("nginx"));
    kache.shutdown().await;
    sim.shutdown().await;
}
