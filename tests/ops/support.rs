//! Running kaches for the ops tests: a real kache (over the simulated apiserver) with its metrics listener,
//! and a small HTTP client.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use kache::app::{Config, Kache};
use kache::metrics::{self, KacheStats, StatsSource};
use kache::resource::Gvr;
use kache::upstream::discovery::{Selection, parse_resource_specs};
use kache_sim::{Sim, SimHandle};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Serves the metrics endpoints of `source` on an ephemeral loopback port until dropped.
pub struct MetricsListener {
    pub addr: SocketAddr,
    shutdown: CancellationToken,
}

impl MetricsListener {
    pub async fn start(source: Arc<dyn StatsSource>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let addr = listener.local_addr().expect("bound address");
        let shutdown = CancellationToken::new();
        tokio::spawn(metrics::serve_metrics(listener, metrics::install(), source, shutdown.clone()));
        Self { addr, shutdown }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for MetricsListener {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A simulated apiserver with `pods` pods in `default`, and a kache caching pods from it, with its
/// metrics listener.
pub struct RunningKache {
    pub sim: SimHandle,
    pub kache: Kache,
    pub metrics: MetricsListener,
}

impl RunningKache {
    pub async fn start(pods: usize) -> Self {
        kache::upstream::install_crypto_provider();
        let sim = Sim::builder().start().await.expect("sim starts");
        for i in 0..pods {
            let pod = serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("ops-{i}"), "namespace": "default", "labels": {"app": "ops"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}
            });
            sim.create("pods", Some("default"), pod).expect("create pod");
        }
        let mut config = Config::for_url(sim.url());
        config.selection =
            Selection { include: Some(parse_resource_specs("pods").expect("spec")), exclude: vec![] };
        config.lazy = false;
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let kache = Kache::start(config, listener).await.expect("kache starts");
        let source = Arc::new(KacheStats::new(kache.registry().clone()));
        let metrics = MetricsListener::start(source).await;
        tokio::time::timeout(Duration::from_secs(30), kache.wait_synced()).await.expect("kache syncs pods");
        Self { sim, kache, metrics }
    }

    pub async fn stop(self) {
        drop(self.metrics);
        self.kache.shutdown().await;
        self.sim.shutdown().await;
    }
}

/// Records the traffic a kache serving reads from memory and forwarding the rest records, so every
/// request-time series exists.
pub fn representative_traffic(gvr: &Gvr) {
    use metrics::{ForwardKind, Source};
    metrics::request("list", gvr, 200, Source::Memory, Duration::from_millis(1));
    metrics::request("create", gvr, 201, Source::Upstream, Duration::from_millis(20));
    metrics::list_served(gvr, 3, 2);
    metrics::consistent_read(gvr, true, false);
    metrics::read_wait(gvr, Duration::from_millis(3));
    metrics::watch_list_done(gvr, Duration::from_millis(40));
    metrics::watchers(gvr, 1);
    metrics::forwarded(ForwardKind::Write, 201);
}

/// `GET url`: status and body.
pub async fn get(url: &str) -> (u16, String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<bytes::Bytes>>();
    let uri: http::Uri = url.parse().expect("valid URL");
    let resp = client.get(uri).await.unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap_or_else(|e| panic!("GET {url} body: {e}")).to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
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
