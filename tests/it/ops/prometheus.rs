//! A real Prometheus (Debian's `prometheus` package, installed by scripts/install-test-deps.sh) scrapes a
//! running kache, and PromQL over its HTTP API returns kache's series with the values kache holds.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::support::{self, RunningKache, find_program};

/// Upper bound on waiting for Prometheus to start and scrape (it scrapes every second here).
const SCRAPE_DEADLINE: Duration = Duration::from_secs(90);
/// How often the test asks Prometheus again while waiting.
const POLL: Duration = Duration::from_millis(250);

/// A Prometheus process, killed on drop.
struct Prometheus {
    child: Child,
    url: String,
    log: PathBuf,
}

impl Prometheus {
    fn start(binary: &Path, dir: &Path, target: &str) -> Self {
        let config = dir.join("prometheus.yml");
        let yaml = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: kache\n    \
             static_configs:\n      - targets: ['{target}']\n"
        );
        std::fs::write(&config, yaml).expect("write prometheus.yml");
        // An ephemeral port: bind, read it, release it for Prometheus.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let log = dir.join("prometheus.log");
        let log_file = std::fs::File::create(&log).expect("create log");
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("spawn prometheus");
        Self { child, url: format!("http://127.0.0.1:{port}"), log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// An instant query's result vector (empty until the series exists; also while Prometheus starts).
    async fn query(&self, promql: &str) -> Vec<Value> {
        let url = format!("{}/api/v1/query?query={}", self.url, encode(promql));
        let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http::<http_body_util::Empty<bytes::Bytes>>();
        let Ok(resp) = client.get(url.parse().expect("query URL")).await else { return Vec::new() };
        let Ok(body) = http_body_util::BodyExt::collect(resp.into_body()).await else { return Vec::new() };
        let json: Value = serde_json::from_slice(&body.to_bytes()).unwrap_or(Value::Null);
        json.pointer("/data/result").and_then(Value::as_array).cloned().unwrap_or_default()
    }

    /// Polls `promql` until `accept` holds for its result, or the deadline passes.
    async fn eventually(&mut self, promql: &str, accept: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let start = Instant::now();
        loop {
            let result = self.query(promql).await;
            if accept(&result) {
                return result;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("prometheus exited with {status}:\n{}", self.log());
            }
            assert!(
                start.elapsed() < SCRAPE_DEADLINE,
                "{promql} never returned the expected series; last result {result:?}\nprometheus log:\n{}",
                self.log()
            );
            tokio::time::sleep(POLL).await;
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percent-encodes a query parameter value.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The sample value of a one-element result.
fn single_value(result: &[Value]) -> Option<f64> {
    match result {
        [one] => one.pointer("/value/1")?.as_str()?.parse().ok(),
        _ => None,
    }
}

#[tokio::test]
async fn prometheus_scrapes_kache() {
    let Some(binary) = find_program("prometheus", &["/usr/bin/prometheus"]) else {
        crate::common::tools::missing(
            "prometheus is not installed (scripts/install-test-deps.sh installs Debian's package)",
        );
        return;
    };
    let running = RunningKache::start(3).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let target = running.metrics_target();
    let mut prom = Prometheus::start(&binary, dir.path(), &target);

    let up = prom.eventually(r#"up{job="kache"}"#, |r| single_value(r) == Some(1.0)).await;
    assert_eq!(up[0].pointer("/metric/instance").and_then(Value::as_str), Some(target.as_str()));

    let objects = r#"kache_store_objects{job="kache",group="",resource="pods"}"#;
    prom.eventually(objects, |r| single_value(r) == Some(3.0)).await;
    let synced = r#"kache_resource_synced{job="kache",resource="pods",configured="true"}"#;
    prom.eventually(synced, |r| single_value(r) == Some(1.0)).await;
    let watching = r#"kache_reflector_state{job="kache",resource="pods",state="watching"}"#;
    prom.eventually(watching, |r| single_value(r) == Some(1.0)).await;

    // A new pod upstream reaches kache's store, and the next scrape shows it.
    running.sim.create("pods", Some("default"), support::pod("ops-late")).expect("create pod");
    prom.eventually(objects, |r| single_value(r) == Some(4.0)).await;
    let rv = prom
        .eventually(r#"apiserver_watch_cache_resource_version{resource="pods"}"#, |r| {
            single_value(r).is_some()
        })
        .await;
    assert!(single_value(&rv).is_some_and(|v| v >= running.sim.revision() as f64 - 1.0), "{rv:?}");

    // Requests served from memory show up with source="memory", labelled like the apiserver's.
    running.traffic().await;
    let served =
        r#"sum(apiserver_request_total{job="kache",verb="LIST",resource="pods",source="memory",code="200"})"#;
    prom.eventually(served, |r| single_value(r).is_some_and(|v| v >= 1.0)).await;

    drop(prom);
    running.stop().await;
}

#[tokio::test]
async fn exposition_passes_promtool_lint() {
    let Some(promtool) = find_program("promtool", &["/usr/bin/promtool"]) else {
        crate::common::tools::missing(
            "promtool is not installed (it comes with Debian's prometheus package)",
        );
        return;
    };
    let running = RunningKache::start(1).await;
    running.traffic().await;
    let (status, text) = support::get(&running.metrics_url("/metrics")).await;
    assert_eq!(status, 200);
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn promtool");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("promtool stdin");
        stdin.write_all(text.as_bytes()).expect("write exposition");
    }
    let out = child.wait_with_output().expect("promtool result");
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // Test-only series registered by unit tests do not exist here: this is a separate test binary.
    assert!(out.status.success(), "promtool check metrics:\n{report}");
    running.stop().await;
}
