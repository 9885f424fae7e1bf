//! Realistic object bodies, shaped like `kubectl get -o json` output of a kubeadm-style cluster: a pod of a
//! Deployment's ReplicaSet as the kubelet reports it (2–4 KiB), a node, a namespace.
//!
//! Fields are inserted in the apiserver's order (Go struct order: kind, apiVersion, metadata, spec, status;
//! metadata: name, generateName, namespace, labels, annotations, ownerReferences, managedFields); serde_json's
//! `preserve_order` keeps that order on the wire. uid, resourceVersion and creationTimestamp are left out:
//! the sim's storage sets them on create.

use rand::Rng;
use serde_json::{Value, json};

/// Apps a namespace runs; each becomes a Deployment-style name prefix and the `app` label.
pub(crate) const APPS: &[&str] =
    &["web", "api", "worker", "cache", "frontend", "auth", "billing", "search", "ingest", "notifier"];
/// Images by app index (same length as [`APPS`]).
pub(crate) const IMAGES: &[&str] = &[
    "registry.k8s.io/nginx-slim:0.27",
    "ghcr.io/example/api-server:v2.14.3",
    "ghcr.io/example/worker:v2.14.3",
    "docker.io/library/redis:7.4.1-alpine",
    "ghcr.io/example/frontend:1.9.0",
    "ghcr.io/example/auth:3.2.1",
    "ghcr.io/example/billing:0.41.7",
    "docker.io/library/opensearch:2.17.1",
    "ghcr.io/example/ingest:5.0.2",
    "ghcr.io/example/notifier:1.1.12",
];
/// Template generations (rollouts) per app: each has its own `pod-template-hash` and ReplicaSet.
pub const GENERATIONS: u8 = 3;
/// The alphabet of generated name suffixes (`utilrand.String`: no vowels, no confusable characters).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
/// The managedFields/conditions timestamps all fall on this day (the sim sets creationTimestamp itself).
const TIMESTAMP_DAY: &str = "2026-11-21";

fn random_string(rng: &mut impl Rng, len: usize) -> String {
    (0..len).map(|_| NAME_ALPHABET[rng.random_range(0..NAME_ALPHABET.len())] as char).collect()
}

fn hex(rng: &mut impl Rng, len: usize) -> String {
    (0..len).map(|_| char::from_digit(rng.random_range(0..16), 16).unwrap_or('0')).collect()
}

fn uuid(rng: &mut impl Rng) -> String {
    format!("{}-{}-4{}-a{}-{}", hex(rng, 8), hex(rng, 4), hex(rng, 3), hex(rng, 3), hex(rng, 12))
}

fn timestamp(rng: &mut impl Rng) -> String {
    let secs = rng.random_range(0..86_400u32);
    format!("{TIMESTAMP_DAY}T{:02}:{:02}:{:02}Z", secs / 3600, secs / 60 % 60, secs % 60)
}

/// The index of a node called `node-<i>`, used to give it a stable address; other names hash.
fn node_index(node: &str) -> u32 {
    node.strip_prefix("node-")
        .and_then(|i| i.parse().ok())
        .unwrap_or_else(|| node.bytes().fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b.into())))
}

fn node_ip(node: &str) -> String {
    let i = node_index(node);
    format!("10.0.{}.{}", (i / 250) % 256, i % 250 + 2)
}

/// A pod name in the ReplicaSet style: `<app>-<template hash>-<5 random>`, with the app and hash chosen by the
/// caller's generator so that pods of one namespace share a few owners.
pub fn pod_name(rng: &mut impl Rng) -> String {
    let app = APPS[rng.random_range(0..APPS.len())];
    // Three template hashes per app, so label selectors on pod-template-hash select groups.
    let generation = rng.random_range(0..GENERATIONS);
    format!("{app}-{}-{}", template_hash(app, generation), random_string(rng, 5))
}

/// A stable 10-character `pod-template-hash` for an app's generation.
pub(crate) fn template_hash(app: &str, generation: u8) -> String {
    let mut h =
        app.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    h ^= u64::from(generation);
    (0..10)
        .map(|_| {
            h = h.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            NAME_ALPHABET[(h >> 33) as usize % NAME_ALPHABET.len()] as char
        })
        .collect()
}

/// Splits `<app>-<hash>-<suffix>` back into app and hash; other names are their own app with no hash.
pub(crate) fn app_and_hash(name: &str) -> (String, String) {
    let mut parts = name.rsplitn(3, '-');
    let (_suffix, hash, app) = (parts.next(), parts.next(), parts.next());
    match (app, hash) {
        (Some(app), Some(hash)) => (app.to_string(), hash.to_string()),
        _ => (name.to_string(), String::new()),
    }
}

/// A running pod of a ReplicaSet on `node` (or a Pending, unscheduled one when `node` is empty): containers
/// with image, ports, env, resources, probes and volume mounts; a configMap and a projected token volume;
/// ownerReferences; managedFields of the controller manager and the kubelet; status with conditions, IPs and
/// container statuses. Serialised, it is 2–4 KiB.
pub fn pod(namespace: &str, name: &str, node: &str, rng: &mut impl Rng) -> Value {
    let (app, hash) = app_and_hash(name);
    let app_index = APPS.iter().position(|a| *a == app).unwrap_or(0);
    let image = IMAGES[app_index];
    let rs_name = if hash.is_empty() { app.clone() } else { format!("{app}-{hash}") };
    let rs_uid = uuid(rng);
    let token_volume = format!("kube-api-access-{}", random_string(rng, 5));
    let created = timestamp(rng);
    let scheduled = !node.is_empty();

    let sidecar = rng.random_bool(0.25);
    let mut containers = vec![container(&app, image, &token_volume, rng)];
    if sidecar {
        containers.push(json!({
            "name": "log-shipper",
            "image": "fluent/fluent-bit:3.1.9",
            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}}
        }));
    }

    let mut spec = json!({
        "volumes": [
            {"name": "config", "configMap": {"name": format!("{app}-config"), "defaultMode": 420}},
            {"name": token_volume, "projected": {"sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
            ], "defaultMode": 420}}
        ],
        "containers": containers,
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
    });
    if scheduled {
        spec["nodeName"] = json!(node);
    }
    spec["securityContext"] = json!({});
    spec["schedulerName"] = json!("default-scheduler");

    let status = if scheduled {
        running_status(node, &app, image, sidecar, &created, rng)
    } else {
        pending_status(&created)
    };
    json!({
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "generateName": format!("{rs_name}-"),
            "namespace": namespace,
            "labels": {"app": app, "pod-template-hash": hash},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs_name, "uid": rs_uid,
                                 "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": created,
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:generateName": {},
                    "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}},
                    "f:ownerReferences": {".": {}, format!("k:{{\"uid\":\"{rs_uid}\"}}"): {}}},
                    "f:spec": {"f:containers": {format!("k:{{\"name\":\"{app}\"}}"): {".": {}, "f:env": {},
                        "f:image": {}, "f:name": {}, "f:ports": {}}},
                        "f:volumes": {}}}},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": created,
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {},
                    "f:hostIP": {}, "f:hostIPs": {}, "f:phase": {}, "f:podIP": {}, "f:podIPs": {}, "f:startTime": {}}},
                 "subresource": "status"}
            ]
        },
        "spec": spec,
        "status": status
    })
}

fn container(app: &str, image: &str, token_volume: &str, rng: &mut impl Rng) -> Value {
    let port = [8080, 8443, 9090, 6379, 3000][rng.random_range(0..5)];
    let mut env = vec![
        json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}),
    ];
    const SETTINGS: &[(&str, &str)] = &[
        ("LOG_LEVEL", "info"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel-collector:4317"),
        ("GOMAXPROCS", "2"),
    ];
    for (name, value) in SETTINGS.iter().take(rng.random_range(0..=SETTINGS.len())) {
        env.push(json!({"name": name, "value": value}));
    }
    let cpu = [50, 100, 250, 500][rng.random_range(0..4)];
    let mem = [64, 128, 256, 512][rng.random_range(0..4)];
    // Quantities in the canonical form an apiserver stores (Go's `Quantity.String()`): `1` rather than
    // `1000m`, `1Gi` rather than `1024Mi`, as a real cluster's objects have them.
    let cpu_q = |m: u32| if m.is_multiple_of(1000) { format!("{}", m / 1000) } else { format!("{m}m") };
    let mem_q =
        |mi: u32| if mi.is_multiple_of(1024) { format!("{}Gi", mi / 1024) } else { format!("{mi}Mi") };
    json!({
        "name": app,
        "image": image,
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "env": env,
        "resources": {"limits": {"cpu": cpu_q(cpu * 2), "memory": mem_q(mem * 2)},
                      "requests": {"cpu": cpu_q(cpu), "memory": mem_q(mem)}},
        "volumeMounts": [
            {"name": "config", "readOnly": true, "mountPath": format!("/etc/{app}")},
            {"name": token_volume, "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
        ],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent"
    })
}

fn condition(kind: &str, at: &str) -> Value {
    json!({"type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": at})
}

fn running_status(node: &str, app: &str, image: &str, sidecar: bool, at: &str, rng: &mut impl Rng) -> Value {
    let host_ip = node_ip(node);
    let pod_ip = format!("10.244.{}.{}", node_index(node) % 256, rng.random_range(2..254));
    let mut statuses = vec![container_status(app, image, at, rng)];
    if sidecar {
        statuses.push(container_status("log-shipper", "fluent/fluent-bit:3.1.9", at, rng));
    }
    let conditions: Vec<Value> = ["Initialized", "Ready", "ContainersReady", "PodScheduled"]
        .iter()
        .map(|c| condition(c, at))
        .collect();
    json!({
        "phase": "Running",
        "conditions": conditions,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": at,
        "containerStatuses": statuses,
        "qosClass": "Burstable"
    })
}

fn container_status(name: &str, image: &str, at: &str, rng: &mut impl Rng) -> Value {
    let repo = image.split(':').next().unwrap_or(image);
    json!({
        "name": name,
        "state": {"running": {"startedAt": at}},
        "lastState": {},
        "ready": true,
        "restartCount": rng.random_range(0..3),
        "image": image,
        "imageID": format!("{repo}@sha256:{}", hex(rng, 64)),
        "containerID": format!("containerd://{}", hex(rng, 64)),
        "started": true
    })
}

fn pending_status(at: &str) -> Value {
    json!({
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "lastProbeTime": null, "lastTransitionTime": at,
                        "reason": "Unschedulable", "message": "0/0 nodes are available."}],
        "qosClass": "Burstable"
    })
}

/// A Ready linux node with capacity, addresses and node info.
pub fn node(name: &str) -> Value {
    let i = node_index(name);
    let ip = node_ip(name);
    let zone = ["a", "b", "c"][i as usize % 3];
    json!({
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "labels": {
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "m5.xlarge",
                "topology.kubernetes.io/region": "eu-west-1",
                "topology.kubernetes.io/zone": format!("eu-west-1{zone}")
            },
            "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                            "volumes.kubernetes.io/controller-managed-attach-detach": "true"}
        },
        "spec": {"podCIDR": format!("10.244.{}.0/24", i % 256), "podCIDRs": [format!("10.244.{}.0/24", i % 256)],
                 "providerID": format!("aws:///eu-west-1{zone}/i-{:017x}", u64::from(i) * 7919)},
        "status": {
            "capacity": {"cpu": "4", "ephemeral-storage": "104845292Ki", "memory": "16069176Ki", "pods": "110"},
            "allocatable": {"cpu": "3920m", "ephemeral-storage": "96625420948", "memory": "15069176Ki", "pods": "110"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": format!("{TIMESTAMP_DAY}T00:00:00Z"),
                 "lastTransitionTime": format!("{TIMESTAMP_DAY}T00:00:00Z"), "reason": "KubeletHasSufficientMemory",
                 "message": "kubelet has sufficient memory available"},
                {"type": "Ready", "status": "True", "lastHeartbeatTime": format!("{TIMESTAMP_DAY}T00:00:00Z"),
                 "lastTransitionTime": format!("{TIMESTAMP_DAY}T00:00:00Z"), "reason": "KubeletReady",
                 "message": "kubelet is posting ready status"}
            ],
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": format!("{:032x}", u128::from(i) * 0x9e37_79b9), "systemUUID": format!("ec2{:05x}-0000-0000-0000-000000000000", i),
                         "bootID": format!("{:08x}-0000-4000-8000-000000000000", i), "kernelVersion": "6.1.112-124.190.amzn2023.x86_64",
                         "osImage": "Amazon Linux 2023.6.20241031", "containerRuntimeVersion": "containerd://1.7.23",
                         "kubeletVersion": "v1.32.4", "kubeProxyVersion": "v1.32.4", "operatingSystem": "linux",
                         "architecture": "amd64"}
        }
    })
}

/// An Active namespace with the `kubernetes.io/metadata.name` label the apiserver adds.
pub fn namespace(name: &str) -> Value {
    json!({
        "kind": "Namespace",
        "apiVersion": "v1",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"}
    })
}
