//! Running kaches for the ops tests: a real kache (over the simulated apiserver) with its metrics listener,
//! and a small HTTP client.

use std::path::PathBuf;

use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use kache::app::{Config, Kache};
use kache::upstream::discovery::{Selection, parse_resource_specs};
use kache_sim::{Sim, SimHandle};

/// A simulated apiserver with `pods` pods in `default`, and a kache caching pods from it with its metrics
/// listener, both on ephemeral loopback ports.
pub struct RunningKache {
    pub sim: SimHandle,
    pub kache: Kache,
}

impl RunningKache {
    pub async fn start(pods: usize) -> Self {
        kache::upstream::install_crypto_provider();
        let sim = Sim::builder().start().await.expect("sim starts");
        for i in 0..pods {
            sim.create("pods", Some("default"), pod(&format!("ops-{i}"))).expect("create pod");
        }
        let mut config = Config::for_url(sim.url());
        config.selection =
            Selection { include: Some(parse_resource_specs("pods").expect("spec")), exclude: vec![] };
        config.lazy = false;
        // Pods mirrored filtered to `default`, where every pod of these tests lives: reads stay served from
        // memory, and the filtered-mirror series (`kache_mirror_*`) are exported.
        config.mirror_selectors =
            kache::app::parse_mirror_selectors(&["pods:fieldSelector=metadata.namespace=default".to_owned()])
                .expect("valid selector");
        let kache = crate::common::start_with_metrics(config, true).await;
        Self { sim, kache }
    }

    /// `http://ADDR{path}` on the metrics listener.
    pub fn metrics_url(&self, path: &str) -> String {
        format!("{}{path}", self.kache.metrics_url().expect("started with a metrics listener"))
    }

    /// `host:port` of the metrics listener (a Prometheus target).
    pub fn metrics_target(&self) -> String {
        self.metrics_url("").trim_start_matches("http://").to_owned()
    }

    /// Client traffic: a list and a get answered from memory, a create forwarded upstream.
    pub async fn traffic(&self) {
        let base = self.kache.url();
        let (status, body) = get(&format!("{base}/api/v1/namespaces/default/pods?resourceVersion=0")).await;
        assert_eq!(status, 200, "{body}");
        let (status, body) = get(&format!("{base}/api/v1/namespaces/default/pods/ops-0")).await;
        assert_eq!(status, 200, "{body}");
        let (status, body) =
            post(&format!("{base}/api/v1/namespaces/default/pods"), &pod("ops-traffic")).await;
        assert_eq!(status, 201, "{body}");
    }

    pub async fn stop(self) {
        self.kache.shutdown().await;
        self.sim.shutdown().await;
    }
}

/// A minimal pod.
pub fn pod(name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "ops"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    })
}

/// `GET url`: status and body.
pub async fn get(url: &str) -> (u16, String) {
    send(http::Method::GET, url, None).await
}

/// `POST url` with a JSON body: status and body.
pub async fn post(url: &str, body: &serde_json::Value) -> (u16, String) {
    send(http::Method::POST, url, Some(body.to_string())).await
}

async fn send(method: http::Method, url: &str, body: Option<String>) -> (u16, String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<bytes::Bytes>>();
    let mut req = http::Request::builder().method(method.clone()).uri(url);
    if body.is_some() {
        req = req.header(http::header::CONTENT_TYPE, "application/json");
    }
    let req = req.body(Full::new(bytes::Bytes::from(body.unwrap_or_default()))).expect("valid request");
    let resp = client.request(req).await.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = resp.status().as_u16();
    let bytes =
        resp.into_body().collect().await.unwrap_or_else(|e| panic!("{method} {url} body: {e}")).to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// The series names (left of `{` or the value) in a text exposition.
pub fn exposed_series(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

/// The cargo target directory this test binary was built into (`target/debug/deps/ops-*` → `target`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.ancestors().nth(3).map(PathBuf::from).unwrap_or_else(|| PathBuf::from("target"))
}

/// An executable on PATH (or at one of `fallbacks`).
pub fn find_program(name: &str, fallbacks: &[&str]) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join(name)).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path.into_iter().chain(fallbacks.iter().map(PathBuf::from)).find(|p| p.is_file())
}
