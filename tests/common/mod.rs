//! Shared helpers of the integration tests: start the sim and kache on ephemeral ports, talk HTTP.
#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use kache::app::{Config, Kache};

pub mod alone;
pub mod auth;
pub mod cluster;
pub mod gate;
pub mod tls;
use kache_sim::{Sim, SimHandle};

pub mod kube_proto;
pub mod real;
pub mod tools;

/// How long tests let reads wait for a resourceVersion (the apiserver's 3 s, shortened).
pub const TEST_BLOCK_TIMEOUT: Duration = Duration::from_millis(300);

/// A sim with fast bookmarks and a short freshness wait, for tests.
pub async fn start_sim() -> SimHandle {
    Sim::builder()
        .bookmark_interval(Duration::from_millis(100))
        .wait_timeout(TEST_BLOCK_TIMEOUT)
        .start()
        .await
        .expect("sim starts")
}

/// kache in front of `upstream`, with test-friendly timeouts; `tweak` adjusts the config.
pub async fn start_kache(upstream: &str, tweak: impl FnOnce(&mut Config)) -> Kache {
    let mut config = Config::for_url(upstream);
    config.handler.block_timeout = TEST_BLOCK_TIMEOUT;
    config.handler.watch.wait_timeout = TEST_BLOCK_TIMEOUT;
    config.freshness.latency_bound = Duration::from_secs(2);
    // Tests of the serving paths read small objects; a probe would not pay off for them, so by default
    // kache forwards them. Probe anyway so the memory path is what they exercise (tests/it/foreign.rs tests
    // the default decision).
    config.freshness.probe_small_reads = true;
    tweak(&mut config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let kache = Kache::start(config, listener).await.expect("kache starts");
    tokio::time::timeout(Duration::from_secs(30), kache.wait_synced())
        .await
        .expect("kache syncs within 30 s");
    kache
}

/// kache started with `config` and a metrics listener, on loopback ports; waits (30 s at most) for its
/// initial sync when `synced`.
pub async fn start_with_metrics(config: Config, synced: bool) -> Kache {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind metrics");
    let kache = Kache::start_with_metrics(config, listener, Some(metrics)).await.expect("kache starts");
    if synced {
        tokio::time::timeout(Duration::from_secs(30), kache.wait_synced()).await.expect("kache syncs");
    }
    kache
}

/// A response, read whole.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

pub fn client() -> Client<HttpConnector, Empty<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// GET `base` + `path_and_query` with optional headers.
pub async fn get_with(base: &str, path: &str, headers: &[(&str, &str)]) -> Resp {
    let mut req = Request::get(format!("{base}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client().request(req.body(Empty::new()).expect("request")).await.expect("response");
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    Resp { status, headers, body }
}

pub async fn get(base: &str, path: &str) -> Resp {
    get_with(base, path, &[]).await
}

/// Polls `check` until it returns true (at most `timeout`); panics with `what` otherwise.
pub async fn eventually<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if check().await {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("not reached within {timeout:?}: {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A pod object with labels and a node.
pub fn pod(ns: &str, name: &str, labels: &[(&str, &str)], node: &str) -> Value {
    let labels: serde_json::Map<String, Value> =
        labels.iter().map(|(k, v)| ((*k).to_owned(), Value::String((*v).to_owned()))).collect();
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running"}
    })
}

pub fn namespace(name: &str) -> Value {
    serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

/// Creates `namespaces` with `per_namespace` pods each (`p000`, `p001`, … on `node-1`).
pub fn seed_pods(sim: &SimHandle, namespaces: &[&str], per_namespace: usize) {
    for ns in namespaces {
        sim.create("namespaces", None, namespace(ns)).expect("namespace");
        for i in 0..per_namespace {
            sim.create("pods", Some(ns), pod(ns, &format!("p{i:03}"), &[], "node-1")).expect("pod");
        }
    }
}
