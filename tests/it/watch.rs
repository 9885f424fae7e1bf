//! Watch, end to end. Contents:
//!
//! - `fanout`: many watchers on one store, each polled by its own task as a server connection polls its
//!   body: every watcher gets every event; `#[ignore]`d measurements of delivery latency, CPU per delivery
//!   and memory per idle watcher.
//! - `blackbox`: kache in front of `kache_sim` over HTTP: differential tests (the same watch to the sim
//!   and through kache gives the same lines: replay from an RV, watch-list, selector transitions, 410,
//!   bookmarks), a stalled client cut off while a fast one gets everything, and an event-sequence checker
//!   under churn with dropped upstream watches, compaction and an upstream restart (clients re-watch and
//!   relist like client-go); `#[ignore]`d: memory per idle HTTP watcher.
//! - `kube_client`: kube-rs's watcher, in streaming-lists and list-then-watch modes, reaches the sim's state
//!   through kache.
//!
//! Measurements: `cargo test -p kache --test it watch:: -- --ignored --nocapture --test-threads=1` (add
//! `--config 'profile.dev.package.kache.opt-level=3'` for optimised kache code).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kache::codec::extract::object_from_json;
use kache::resource::{Gvr, ResourceInfo};
use kache::serve::watch::{Filter, Start, WatchSpec, WatchView, Watcher};
use kache::store::{EventType, Object, Store, StoreConfig, Writer};
use tokio_util::sync::CancellationToken;

fn pods() -> ResourceInfo {
    ResourceInfo {
        gvr: Gvr::new("", "v1", "pods"),
        kind: "Pod".into(),
        list_kind: "PodList".into(),
        namespaced: true,
        list_items_have_type_meta: false,
    }
}

/// A realistic ~1 KiB pod.
fn pod(name: &str, rv: u64) -> Arc<Object> {
    let raw = format!(
        concat!(
            r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"bench","#,
            r#""uid":"6f1e0c9a-0000-4000-8000-{rv:012}","resourceVersion":"{rv}","#,
            r#""creationTimestamp":"2026-11-22T05:00:00Z","labels":{{"app":"bench","tier":"web"}}}},"#,
            r#""spec":{{"containers":[{{"name":"main","image":"registry.example/app:1.0","#,
            r#""resources":{{"requests":{{"cpu":"100m","memory":"128Mi"}}}}}}],"nodeName":"node-1","#,
            r#""restartPolicy":"Always","schedulerName":"default-scheduler","serviceAccountName":"default"}},"#,
            r#""status":{{"phase":"Running","podIP":"10.0.0.1","hostIP":"192.0.2.1","#,
            r#""conditions":[{{"type":"Ready","status":"True","lastTransitionTime":"2026-11-22T05:00:01Z"}}],"#,
            r#""startTime":"2026-11-22T05:00:00Z"}}}}"#
        ),
        name = name,
        rv = rv
    );
    Arc::new(object_from_json(Bytes::from(raw), &pods()).expect("valid pod"))
}

fn live_spec() -> WatchSpec {
    WatchSpec {
        start: Start::Resume { rv: None },
        filter: Filter::default(),
        view: WatchView::Full,
        bookmarks: true,
        timeout: Duration::from_secs(3600),
        bookmark_interval: Duration::from_secs(60),
        wait_timeout: Duration::from_secs(3),
        indexed: true,
        proto: None,
        matched: None,
        frames: Default::default(),
    }
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}

/// User + system CPU time of the process.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = [11, 12].iter().filter_map(|&i| fields.get(i)?.parse::<u64>().ok()).sum();
    Duration::from_millis(ticks * 10)
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

struct Run {
    delivered: u64,
    p50_us: u32,
    p99_us: u32,
    max_us: u32,
    cpu_per_event: Duration,
    idle_bytes_per_watcher: u64,
}

/// Starts `watchers` watcher tasks, then applies `rate` events/s for `secs` seconds.
async fn fanout(watchers: usize, rate: u64, secs: u64) -> Run {
    let (store, mut writer): (Arc<Store>, Writer) = Store::new(pods(), StoreConfig::default());
    writer.replace([], 1);
    let events = rate * secs;
    // Apply time of each event RV (nanoseconds since `base`), written before the event is published.
    let base = Instant::now();
    let sent: Arc<Vec<AtomicU64>> = Arc::new((0..events + 2).map(|_| AtomicU64::new(0)).collect());
    let token = CancellationToken::new();

    let rss_before = rss_bytes();
    let mut tasks = Vec::with_capacity(watchers);
    for _ in 0..watchers {
        let mut watcher = Watcher::new(&Default::default(), store.clone(), live_spec(), token.clone());
        let sent = sent.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(events as usize);
            let mut rv = 1u64;
            while let Some(chunk) = watcher.next_frame().await {
                let now = base.elapsed().as_nanos() as u64;
                // Live events arrive one per chunk, in RV order; bookmarks cannot occur in this run.
                debug_assert!(chunk.starts_with(b"{\"type\":\"ADDED\""));
                rv += 1;
                let at = sent[rv as usize].load(Ordering::Acquire);
                latencies.push(((now.saturating_sub(at)) / 1000) as u32);
                if rv == events + 1 {
                    break;
                }
            }
            latencies
        }));
    }
    // Let every task reach its first wait before measuring idle memory.
    while store.subscribers() < watchers {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let idle_bytes_per_watcher = rss_bytes().saturating_sub(rss_before) / watchers as u64;

    let cpu_before = cpu_time();
    let period = Duration::from_nanos(1_000_000_000 / rate);
    let mut ticker = tokio::time::interval(period);
    for i in 0..events {
        ticker.tick().await;
        let rv = i + 2;
        sent[rv as usize].store(base.elapsed().as_nanos() as u64, Ordering::Release);
        writer.apply([(EventType::Added, pod(&format!("p{rv}"), rv))]);
    }
    let mut all = Vec::with_capacity((events as usize) * watchers);
    for task in tasks {
        all.extend(task.await.expect("watcher task"));
    }
    let cpu = cpu_time().saturating_sub(cpu_before);
    token.cancel();
    all.sort_unstable();
    let delivered = all.len() as u64;
    Run {
        delivered,
        p50_us: percentile(&all, 0.50),
        p99_us: percentile(&all, 0.99),
        max_us: all.last().copied().unwrap_or(0),
        cpu_per_event: cpu / delivered.max(1) as u32,
        idle_bytes_per_watcher,
    }
}

mod fanout {
    use super::*;

    fn report(name: &str, watchers: usize, run: &Run) {
        println!(
            "{name}: {watchers} watchers, {} deliveries: latency p50 {} µs, p99 {} µs, max {} µs; \
             CPU {:?}/delivery; idle memory {} B/watcher",
            run.delivered, run.p50_us, run.p99_us, run.max_us, run.cpu_per_event, run.idle_bytes_per_watcher
        );
    }

    /// A quick always-on check: every watcher gets every event.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn hundred_watchers_all_receive_every_event() {
        let run = fanout(100, 200, 1).await;
        assert_eq!(run.delivered, 100 * 200);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "measurement; run with --ignored --nocapture"]
    async fn measure_1k_watchers_100_events_per_second() {
        let run = fanout(1_000, 100, 5).await;
        report("fanout-1k", 1_000, &run);
        assert_eq!(run.delivered, 1_000 * 500);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "measurement; run with --ignored --nocapture"]
    async fn measure_10k_watchers_100_events_per_second() {
        let run = fanout(10_000, 100, 5).await;
        report("fanout-10k", 10_000, &run);
        assert_eq!(run.delivered, 10_000 * 500);
    }
}

/// kache in front of the simulated apiserver, over HTTP.
pub mod blackbox {
    use std::collections::BTreeMap;

    use bytes::Bytes;
    use http::StatusCode;
    use http_body_util::{BodyExt, Empty};
    use hyper::body::Incoming;
    use hyper_util::client::legacy::Client;
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::rt::TokioExecutor;
    use kache::app::{Config, Kache};
    use kache::resource::Gvr;
    use kache_sim::{Sim, SimHandle};
    use serde_json::{Value, json};
    use tokio::net::TcpListener;

    use super::*;

    /// How long any single read may take before a test fails (never hit when things work).
    const READ_TIMEOUT: Duration = Duration::from_secs(15);

    pub struct Env {
        pub sim: SimHandle,
        pub kache: Kache,
        pub http: Client<HttpConnector, Empty<Bytes>>,
    }

    impl Env {
        pub async fn start() -> Env {
            Self::start_with(|_| {}).await
        }

        /// Starts with a tweaked kache configuration.
        pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> Env {
            // Logs go to the test's captured output (shown for failing tests).
            let _ = tracing_subscriber::fmt()
                .with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "kache=info".into()))
                .with_test_writer()
                .try_init();
            let sim =
                Sim::builder().bookmark_interval(Duration::from_secs(1)).start().await.expect("sim starts");
            let mut config = Config::for_url(sim.url());
            config.handler.watch.bookmark_interval = Duration::from_secs(1);
            tweak(&mut config);
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let kache = Kache::start(config, listener).await.expect("kache starts");
            tokio::time::timeout(READ_TIMEOUT, kache.wait_synced()).await.expect("kache syncs");
            let http = Client::builder(TokioExecutor::new()).build_http();
            Env { sim, kache, http }
        }

        pub fn pods_store(&self) -> Arc<Store> {
            self.kache.registry().get(&Gvr::new("", "v1", "pods")).expect("pods are cached")
        }

        /// Waits until kache's pod store has caught up with the sim's revision.
        pub async fn caught_up(&self) {
            let target = self.sim.revision();
            let mut rv = self.pods_store().watch_rv();
            let reached = tokio::time::timeout(READ_TIMEOUT, rv.wait_for(|r| *r >= target)).await;
            assert!(reached.is_ok(), "kache's pod store reaches revision {target}");
        }

        pub async fn watch(&self, base: &str, path_and_query: &str) -> (StatusCode, Lines) {
            let uri: http::Uri = format!("{base}{path_and_query}").parse().expect("uri");
            let response = tokio::time::timeout(READ_TIMEOUT, self.http.get(uri))
                .await
                .expect("response headers in time")
                .expect("request succeeds");
            let status = response.status();
            (status, Lines { body: response.into_body(), buf: Vec::new() })
        }

        pub fn create_pod(&self, ns: &str, name: &str, app: &str) -> u64 {
            let pod = json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "labels": {"app": app}},
                "spec": {"containers": [{"name": "c", "image": "img"}]}
            });
            rv_of(&self.sim.create("pods", Some(ns), pod).expect("create"))
        }

        pub fn relabel_pod(&self, ns: &str, name: &str, app: &str) -> u64 {
            let patch = json!({"metadata": {"labels": {"app": app}}});
            rv_of(&self.sim.merge_patch("pods", Some(ns), name, patch).expect("patch"))
        }

        pub fn delete_pod(&self, ns: &str, name: &str) -> u64 {
            self.sim.delete("pods", Some(ns), name).expect("delete");
            self.sim.revision()
        }

        pub async fn stop(self) {
            self.kache.shutdown().await;
            self.sim.shutdown().await;
        }
    }

    pub fn rv_of(obj: &Value) -> u64 {
        obj["metadata"]["resourceVersion"].as_str().and_then(|s| s.parse().ok()).expect("resourceVersion")
    }

    /// A watch body read line by line.
    pub struct Lines {
        body: Incoming,
        buf: Vec<u8>,
    }

    impl Lines {
        /// The next event line; `None` when the stream ended.
        pub async fn next(&mut self) -> Option<Bytes> {
            loop {
                if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = self.buf.drain(..=pos).collect();
                    return Some(Bytes::from(line));
                }
                let frame = tokio::time::timeout(READ_TIMEOUT, self.body.frame()).await.expect("no stall");
                match frame {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            self.buf.extend_from_slice(&data);
                        }
                    }
                    _ => return None,
                }
            }
        }

        /// The next `n` lines (panics if the stream ends first).
        pub async fn take(&mut self, n: usize) -> Vec<Bytes> {
            let mut out = Vec::with_capacity(n);
            while out.len() < n {
                out.push(
                    self.next().await.unwrap_or_else(|| panic!("stream ended after {} lines", out.len())),
                );
            }
            out
        }

        /// The next line that is not a periodic (un-annotated) BOOKMARK.
        pub async fn next_event(&mut self) -> Option<Value> {
            loop {
                let line = self.next().await?;
                let v: Value = serde_json::from_slice(&line).expect("JSON line");
                let periodic = v["type"] == "BOOKMARK"
                    && v["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] != "true";
                if !periodic {
                    return Some(v);
                }
            }
        }
    }

    fn text(lines: &[Bytes]) -> Vec<String> {
        lines.iter().map(|l| String::from_utf8_lossy(l).into_owned()).collect()
    }

    // --- differential: the same request to the sim and through kache gives the same events ---

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn replay_from_rv_is_identical() {
        let env = Env::start().await;
        let first = env.create_pod("default", "p1", "web");
        env.create_pod("default", "p2", "db");
        env.relabel_pod("default", "p1", "db");
        env.delete_pod("default", "p2");
        let q = format!("/api/v1/namespaces/default/pods?watch=1&resourceVersion={first}");
        let (s1, mut direct) = env.watch(&env.sim.url(), &q).await;
        let (s2, mut cached) = env.watch(&env.kache.url(), &q).await;
        assert_eq!((s1, s2), (StatusCode::OK, StatusCode::OK));
        assert_eq!(text(&cached.take(3).await), text(&direct.take(3).await));
        env.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn watch_list_is_identical() {
        let env = Env::start().await;
        for (i, app) in ["web", "db", "web"].iter().enumerate() {
            env.create_pod("default", &format!("p{i}"), app);
        }
        env.create_pod("kube-system", "sys", "web");
        env.caught_up().await;
        for q in [
            "/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
            "/api/v1/namespaces/default/pods?watch=1&allowWatchBookmarks=true&labelSelector=app%3Dweb",
            "/api/v1/pods?watch=1&resourceVersion=0&allowWatchBookmarks=true",
        ] {
            let (_, mut direct) = env.watch(&env.sim.url(), q).await;
            let (_, mut cached) = env.watch(&env.kache.url(), q).await;
            let mut want = Vec::new();
            loop {
                let v = direct.next_event().await.expect("sim event");
                let end = v["type"] == "BOOKMARK";
                want.push(v);
                if end {
                    break;
                }
            }
            let mut got = Vec::new();
            while got.len() < want.len() {
                got.push(cached.next_event().await.expect("kache event"));
            }
            assert_eq!(got, want, "{q}");
        }
        env.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn selector_transitions_are_identical() {
        let env = Env::start().await;
        env.create_pod("default", "a", "db");
        env.caught_up().await;
        let from = env.sim.revision();
        let q =
            format!("/api/v1/namespaces/default/pods?watch=1&resourceVersion={from}&labelSelector=app%3Dweb");
        let (_, mut direct) = env.watch(&env.sim.url(), &q).await;
        let (_, mut cached) = env.watch(&env.kache.url(), &q).await;
        env.relabel_pod("default", "a", "web"); // enters: ADDED
        env.sim
            .merge_patch("pods", Some("default"), "a", json!({"metadata": {"annotations": {"x": "1"}}}))
            .expect("patch"); // stays: MODIFIED
        env.relabel_pod("default", "a", "db"); // leaves: DELETED (previous object, new RV)
        env.create_pod("default", "b", "web");
        env.delete_pod("default", "b"); // deleted while selected: DELETED
        let want = text(&direct.take(5).await);
        let kinds: Vec<_> = want.iter().map(|l| l[9..l.find("\",").unwrap_or(9)].to_owned()).collect();
        assert_eq!(kinds, ["ADDED", "MODIFIED", "DELETED", "ADDED", "DELETED"]);
        assert_eq!(text(&cached.take(5).await), want);
        env.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn too_old_resource_version_is_410_on_both() {
        let env = Env::start().await;
        env.create_pod("default", "a", "web");
        env.sim.compact(None);
        let (_, mut direct) = env.watch(&env.sim.url(), "/api/v1/pods?watch=1&resourceVersion=1").await;
        let (_, mut cached) = env.watch(&env.kache.url(), "/api/v1/pods?watch=1&resourceVersion=1").await;
        for lines in [&mut direct, &mut cached] {
            let v = lines.next_event().await.expect("error event");
            assert_eq!(v["type"], "ERROR");
            assert_eq!(v["object"]["code"], 410);
            assert_eq!(v["object"]["reason"], "Expired");
            assert!(
                v["object"]["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("too old resource version: 1 ("))
            );
            assert!(lines.next().await.is_none(), "stream ends after the ERROR");
        }
        env.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn watch_list_at_unreached_rv_is_504_on_both() {
        let env = Env::start().await;
        let future = env.sim.revision() + 1000;
        let q = format!(
            "/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan\
             &allowWatchBookmarks=true&resourceVersion={future}"
        );
        let (_, mut direct) = env.watch(&env.sim.url(), &q).await;
        let (_, mut cached) = env.watch(&env.kache.url(), &q).await;
        let (want, got) = tokio::join!(direct.next_event(), cached.next_event());
        for v in [want.expect("sim error event"), got.expect("kache error event")] {
            assert_eq!(v["type"], "ERROR", "{v}");
            assert_eq!(v["object"]["code"], 504);
            assert_eq!(v["object"]["reason"], "Timeout");
            assert_eq!(v["object"]["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");
            let prefix = format!("Timeout: Too large resource version: {future}, current: ");
            assert!(v["object"]["message"].as_str().is_some_and(|m| m.starts_with(&prefix)), "{v}");
        }
        assert!(direct.next().await.is_none() && cached.next().await.is_none(), "both streams end");
        env.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn periodic_bookmarks_come_through_kache() {
        let env = Env::start().await;
        let from = env.sim.revision();
        let q =
            format!("/api/v1/pods?watch=1&resourceVersion={from}&allowWatchBookmarks=true&timeoutSeconds=30");
        let (_, mut cached) = env.watch(&env.kache.url(), &q).await;
        let rv = env.create_pod("default", "a", "web");
        let added: Value = serde_json::from_slice(&cached.next().await.expect("event")).expect("json");
        assert_eq!(added["type"], "ADDED");
        let bookmark: Value = serde_json::from_slice(&cached.next().await.expect("bookmark")).expect("json");
        assert_eq!(bookmark["type"], "BOOKMARK");
        let bookmark_rv: u64 =
            bookmark["object"]["metadata"]["resourceVersion"].as_str().expect("rv").parse().expect("n");
        assert!(bookmark_rv >= rv);
        assert_eq!(bookmark["object"]["spec"], json!({"containers": null}));
        env.stop().await;
    }

    /// The slow-watcher counter is this kache's own (its `Metrics`), so other tests' slow watchers do not move it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stalled_watcher_is_closed_while_a_fast_one_gets_every_event() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        // A small broadcast ring, so a stalled reader falls behind after a few hundred events.
        let env = Env::start_with(|c| c.reflector.store.broadcast_capacity = 64).await;
        let from = env.sim.revision();
        let q = format!("/api/v1/namespaces/default/pods?watch=1&resourceVersion={from}");
        let (_, mut fast) = env.watch(&env.kache.url(), &q).await;
        // The stalled client: a raw connection with a tiny receive buffer that does not read.
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.set_recv_buffer_size(4096).expect("rcvbuf");
        let mut stalled = socket.connect(env.kache.addr()).await.expect("connect");
        let request = format!("GET {q} HTTP/1.1\r\nHost: kache\r\nConnection: close\r\n\r\n");
        stalled.write_all(request.as_bytes()).await.expect("send request");
        while env.pods_store().subscribers() < 2 {
            tokio::task::yield_now().await;
        }
        let slow_before = kache::serve::watch::stats(env.kache.metrics()).closed_slow;
        // The per-resource series move too (they stayed at zero once; a test keeps them honest).
        let metrics = env.kache.metrics().clone();
        let metric = |name: &str| {
            let text = metrics.render();
            let series = format!("{name}{{group=\"\",resource=\"pods\"}}");
            text.lines()
                .find(|l| l.starts_with(&series))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        assert!(metric("kache_watchers") >= 2.0, "open watchers are counted");
        let (slow_metric, terminated) =
            (metric("kache_slow_watchers_closed_total"), metric("apiserver_terminated_watchers_total"));
        // ~1000 events of ~8 KiB: far more than socket buffers, hyper's write buffer and the ring hold.
        let padding = "x".repeat(8 << 10);
        let total = 1000;
        // The writer stays within half the ring of the fast watcher (awaiting its progress), so only the stalled
        // one falls behind however loaded the machine is.
        let (progress, mut read) = tokio::sync::watch::channel(0usize);
        let fast_reader = tokio::spawn(async move {
            let mut rvs = Vec::new();
            while rvs.len() < total {
                let v = fast.next_event().await.expect("fast watcher keeps streaming");
                rvs.push(rv_of(&v["object"]));
                progress.send_replace(rvs.len());
            }
            rvs
        });
        let mut written = Vec::new();
        for i in 0..total {
            read.wait_for(|&n| n + 32 >= i).await.expect("the fast reader runs until it has every event");
            let pod = json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("big-{i}"), "annotations": {"padding": padding}},
                "spec": {"containers": [{"name": "c", "image": "img"}]}
            });
            written.push(rv_of(&env.sim.create("pods", Some("default"), pod).expect("create")));
        }
        let rvs =
            tokio::time::timeout(READ_TIMEOUT, fast_reader).await.expect("fast in time").expect("reader");
        assert_eq!(rvs, written, "the fast watcher got every event, in order");
        // Now the stalled client reads: what was buffered, then a clean end (no ERROR event).
        let mut raw = Vec::new();
        tokio::time::timeout(READ_TIMEOUT, stalled.read_to_end(&mut raw))
            .await
            .expect("stream ends")
            .expect("read");
        let text = String::from_utf8_lossy(&raw);
        let events = text.matches("{\"type\":\"ADDED\"").count();
        assert!(text.starts_with("HTTP/1.1 200 OK"), "{}", &text[..text.len().min(200)]);
        assert!(!text.contains("\"type\":\"ERROR\""), "a slow watcher is closed without an ERROR event");
        assert!(text.ends_with("0\r\n\r\n"), "the chunked body ends cleanly");
        println!("stalled watcher: {events} of {total} events before it was closed");
        assert!(events < total, "the stalled watcher was cut off ({events} of {total} events)");
        assert!(
            kache::serve::watch::stats(env.kache.metrics()).closed_slow > slow_before,
            "counted as a slow watcher"
        );
        assert!(metric("kache_slow_watchers_closed_total") > slow_metric, "kache_slow_watchers_closed_total");
        assert!(
            metric("apiserver_terminated_watchers_total") > terminated,
            "apiserver_terminated_watchers_total"
        );
        env.stop().await;
    }

    /// Memory per idle watcher over HTTP/1.1 (server side: connection, body state machine, receiver), and
    /// the time until every one of them has an event.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "measurement; run with --ignored --nocapture"]
    async fn measure_idle_http_watchers() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        const WATCHERS: usize = 5_000;
        let env = Env::start().await;
        let from = env.sim.revision();
        let request = format!(
            "GET /api/v1/namespaces/default/pods?watch=1&resourceVersion={from} HTTP/1.1\r\nHost: k\r\n\r\n"
        );
        let rss_before = rss_bytes();
        let mut conns = Vec::with_capacity(WATCHERS);
        for _ in 0..WATCHERS {
            let mut c = tokio::net::TcpStream::connect(env.kache.addr()).await.expect("connect");
            c.write_all(request.as_bytes()).await.expect("request");
            conns.push(c);
        }
        let store = env.pods_store();
        while store.subscribers() < WATCHERS {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let per_watcher = rss_bytes().saturating_sub(rss_before) / WATCHERS as u64;
        let started = Instant::now();
        env.create_pod("default", "ping", "web");
        let mut buf = vec![0u8; 4096];
        for c in &mut conns {
            // Headers, then the chunk with the event (possibly in one read).
            let mut seen = Vec::new();
            while !String::from_utf8_lossy(&seen).contains("\"ADDED\"") {
                let n = c.read(&mut buf).await.expect("read");
                assert!(n > 0, "connection closed");
                seen.extend_from_slice(&buf[..n]);
            }
        }
        println!(
            "idle-http: {WATCHERS} watchers, {per_watcher} B RSS per idle watcher (server and client sockets in \
             one process); one event reached all of them in {:?}",
            started.elapsed()
        );
        env.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_watches_share_one_http2_connection() {
        let env = Env::start().await;
        let h2: Client<HttpConnector, Empty<Bytes>> =
            Client::builder(TokioExecutor::new()).http2_only(true).build_http();
        let from = env.sim.revision();
        let mut streams = Vec::new();
        for i in 0..50 {
            let selector = if i % 2 == 0 { "" } else { "&labelSelector=app%3Dweb" };
            let uri: http::Uri = format!(
                "{}/api/v1/namespaces/default/pods?watch=1&resourceVersion={from}{selector}",
                env.kache.url()
            )
            .parse()
            .expect("uri");
            let response =
                tokio::time::timeout(READ_TIMEOUT, h2.get(uri)).await.expect("in time").expect("h2");
            assert_eq!(response.version(), http::Version::HTTP_2);
            assert_eq!(response.status(), StatusCode::OK);
            streams.push(Lines { body: response.into_body(), buf: Vec::new() });
        }
        let rv = env.create_pod("default", "shared", "web");
        for lines in &mut streams {
            let v = lines.next_event().await.expect("event");
            assert_eq!((v["type"].as_str(), rv_of(&v["object"])), (Some("ADDED"), rv));
        }
        env.stop().await;
    }

    // --- event-sequence checker under churn with upstream faults ---

    /// One write as the test made it (the only writer of pods).
    #[derive(Debug, Clone)]
    struct Write {
        rv: u64,
        deleted: bool,
        ns: String,
        name: String,
        app: String,
        prev_app: Option<String>,
    }

    #[derive(Debug, Clone, Copy)]
    struct Sel {
        ns: Option<&'static str>,
        app: Option<&'static str>,
    }

    impl Sel {
        fn query(&self) -> (String, String) {
            let path = match self.ns {
                Some(ns) => format!("/api/v1/namespaces/{ns}/pods"),
                None => "/api/v1/pods".to_owned(),
            };
            let selector = self.app.map(|a| format!("&labelSelector=app%3D{a}")).unwrap_or_default();
            (path, selector)
        }

        fn selects(&self, ns: &str, app: &str) -> bool {
            self.ns.is_none_or(|n| n == ns) && self.app.is_none_or(|a| a == app)
        }

        /// (type, name, rv) the apiserver sends this selection for the writes after `after`.
        fn expected(&self, writes: &[Write], after: u64) -> Vec<(String, String, u64)> {
            let mut out = Vec::new();
            for w in writes.iter().filter(|w| w.rv > after) {
                let cur = !w.deleted && self.selects(&w.ns, &w.app);
                let prev = w.prev_app.as_deref().is_some_and(|p| self.selects(&w.ns, p));
                let kind = match (prev, cur) {
                    (false, false) => continue,
                    (true, true) => "MODIFIED",
                    (false, true) => "ADDED",
                    (true, false) => "DELETED",
                };
                out.push((kind.to_owned(), w.name.clone(), w.rv));
            }
            out
        }
    }

    /// What one watch request of a client saw.
    #[derive(Debug)]
    struct Segment {
        /// The RV the watch resumed from, or the RV of the initial-events-end bookmark of a watch-list.
        from: u64,
        /// For a watch-list: the initial state (`ns/name`, RV) in the order received.
        initial: Option<Vec<(String, u64)>>,
        /// Live events: (type, name, RV).
        events: Vec<(String, String, u64)>,
    }

    /// One downstream client, like client-go ≥ 1.35: re-watches from its last RV when a stream ends, and
    /// on 410 "relists" with a watch-list (initial state up to the initial-events-end bookmark, then live
    /// events on the same stream).
    async fn client(
        env: Arc<Env>,
        sel: Sel,
        start: u64,
        stop: CancellationToken,
        progress: tokio::sync::watch::Sender<u64>,
    ) -> Vec<Segment> {
        let (path, selector) = sel.query();
        let mut segments = Vec::new();
        let mut from = start;
        let mut relist = false;
        while !stop.is_cancelled() {
            let q = if relist {
                format!(
                    "{path}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan\
                     &allowWatchBookmarks=true&timeoutSeconds=5{selector}"
                )
            } else {
                format!(
                    "{path}?watch=1&resourceVersion={from}&allowWatchBookmarks=true&timeoutSeconds=5{selector}"
                )
            };
            let (status, mut lines) = env.watch(&env.kache.url(), &q).await;
            assert_eq!(status, StatusCode::OK, "{q}");
            let mut segment = Segment { from, initial: relist.then(Vec::new), events: Vec::new() };
            let mut in_initial = relist;
            let mut expired = false;
            let mut last = from;
            loop {
                let line = tokio::select! {
                    line = lines.next() => line,
                    () = stop.cancelled() => None,
                };
                let Some(line) = line else { break };
                let v: Value = serde_json::from_slice(&line).expect("json");
                let kind = v["type"].as_str().expect("type").to_owned();
                if kind == "ERROR" {
                    assert_eq!(v["object"]["code"], 410, "only 410 errors expected: {v}");
                    expired = true;
                    break;
                }
                let meta = &v["object"]["metadata"];
                let rv = rv_of(&v["object"]);
                if in_initial {
                    if kind == "BOOKMARK" {
                        assert_eq!(meta["annotations"]["k8s.io/initial-events-end"], "true", "{v}");
                        in_initial = false;
                        segment.from = rv;
                        last = rv;
                        progress.send_replace(rv);
                    } else {
                        assert_eq!(kind, "ADDED");
                        let key = format!(
                            "{}/{}",
                            meta["namespace"].as_str().expect("ns"),
                            meta["name"].as_str().expect("name")
                        );
                        segment.initial.get_or_insert_with(Vec::new).push((key, rv));
                    }
                    continue;
                }
                assert!(rv >= last, "RVs never go back: {rv} after {last} in {q}");
                last = rv;
                progress.send_replace(rv);
                if kind != "BOOKMARK" {
                    let name = meta["name"].as_str().expect("name").to_owned();
                    segment.events.push((kind, name, rv));
                }
            }
            let finished_list = !in_initial;
            segments.push(segment);
            relist = expired || !finished_list;
            from = last;
        }
        segments
    }

    /// The state a watch-list of `sel` must start with at `at`: (`ns/name`, RV) in key order.
    fn state_at(sel: &Sel, writes: &[Write], at: u64) -> Vec<(String, u64)> {
        let mut state = BTreeMap::new();
        for w in writes.iter().filter(|w| w.rv <= at) {
            let key = format!("{}/{}", w.ns, w.name);
            if w.deleted {
                state.remove(&key);
            } else {
                state.insert(key, (w.ns.clone(), w.app.clone(), w.rv));
            }
        }
        state
            .into_iter()
            .filter(|(_, (ns, app, _))| sel.selects(ns, app))
            .map(|(k, (_, _, rv))| (k, rv))
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn watchers_see_gap_free_in_order_history_under_churn_and_faults() {
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};

        let env = Arc::new(Env::start().await);
        for ns in ["ns1", "ns2"] {
            let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            env.sim.create("namespaces", None, namespace).expect("namespace");
        }
        let start = env.sim.revision();
        let stop = CancellationToken::new();
        let selections = [
            Sel { ns: None, app: None },
            Sel { ns: Some("ns1"), app: None },
            Sel { ns: None, app: Some("web") },
            Sel { ns: Some("ns2"), app: Some("db") },
        ];
        let (clients, progress): (Vec<_>, Vec<_>) = selections
            .iter()
            .map(|sel| {
                let (tx, rx) = tokio::sync::watch::channel(start);
                (tokio::spawn(client(env.clone(), *sel, start, stop.clone(), tx)), rx)
            })
            .unzip();

        let mut rng = StdRng::seed_from_u64(7);
        let mut model: BTreeMap<(String, String), String> = BTreeMap::new();
        let mut writes = Vec::new();
        for i in 0..300 {
            let ns = ["ns1", "ns2"][rng.random_range(0..2)].to_owned();
            let name = format!("p{}", rng.random_range(0..10));
            let app = ["web", "db"][rng.random_range(0..2)].to_owned();
            let key = (ns.clone(), name.clone());
            let prev_app = model.get(&key).cloned();
            let write = match (&prev_app, rng.random_range(0..4)) {
                (None, _) => {
                    let rv = env.create_pod(&ns, &name, &app);
                    model.insert(key, app.clone());
                    Write { rv, deleted: false, ns, name, app, prev_app }
                }
                (Some(prev), 0) => {
                    let rv = env.delete_pod(&ns, &name);
                    model.remove(&key);
                    Write { rv, deleted: true, ns, name, app: prev.clone(), prev_app }
                }
                (Some(_), _) => {
                    let rv = env.relabel_pod(&ns, &name, &app);
                    model.insert(key, app.clone());
                    Write { rv, deleted: false, ns, name, app, prev_app }
                }
            };
            // A patch that changes nothing is a no-op upstream: no new RV, no event.
            if writes.last().is_none_or(|w: &Write| w.rv < write.rv) {
                writes.push(write);
            }
            // Upstream faults: dropped watches (kache re-watches), a compaction, a restart.
            match i {
                60 | 180 => env.sim.drop_watches(),
                120 => {
                    env.sim.compact(None);
                }
                240 => env.sim.restart().await,
                _ => {}
            }
            if i % 10 == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        env.caught_up().await;
        // Wait until every client has seen the last event of its selection, then stop them.
        for (sel, mut rx) in selections.iter().zip(progress) {
            let final_rv = sel.expected(&writes, 0).last().map_or(0, |e| e.2);
            let reached = tokio::time::timeout(READ_TIMEOUT, rx.wait_for(|rv| *rv >= final_rv)).await;
            assert!(
                reached.is_ok_and(|r| r.is_ok()),
                "{sel:?} reaches RV {final_rv}, stuck at {}",
                *rx.borrow()
            );
        }
        stop.cancel();
        for (sel, handle) in selections.iter().zip(clients) {
            let segments = handle.await.expect("client");
            let mut total = 0;
            for Segment { from, initial, events } in &segments {
                if let Some(initial) = initial {
                    assert_eq!(
                        initial,
                        &state_at(sel, &writes, *from),
                        "{sel:?}: watch-list state at {from}"
                    );
                }
                let want = sel.expected(&writes, *from);
                let diverge = events.iter().zip(&want).position(|(g, w)| g != w);
                let at = diverge.unwrap_or(events.len().min(want.len()));
                assert!(
                    diverge.is_none() && events.len() <= want.len(),
                    "{sel:?} from {from}: {} events are not a gap-free prefix of the {} expected; first \
                     difference at {at}\n got {:?}\nwant {:?}",
                    events.len(),
                    want.len(),
                    &events[at.saturating_sub(2)..(at + 3).min(events.len())],
                    &want[at.saturating_sub(2)..(at + 3).min(want.len())]
                );
                total += events.len();
            }
            let relists = segments.iter().filter(|s| s.initial.is_some()).count();
            let last = segments.last().map_or(0, |s| s.events.last().map_or(s.from, |e| e.2));
            println!(
                "{sel:?}: {total} events in {} segments, {relists} relists, last RV {last}",
                segments.len()
            );
            // Every client ends up at the end of the history for its selection.
            let final_rv = sel.expected(&writes, 0).last().map_or(0, |e| e.2);
            assert!(last >= final_rv, "{sel:?}: reached RV {last}, history for it ends at {final_rv}");
        }
        Arc::into_inner(env).expect("clients done").stop().await;
    }
}

/// kube-rs's watcher (a real client) through kache reaches the sim's state.
mod kube_client {
    use std::collections::BTreeMap;

    use futures_util::StreamExt;
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::{reflector, watcher};
    use kube::{Api, Client};

    use super::blackbox::{Env, rv_of};
    use super::*;

    /// (`ns/name`, RV) of every pod.
    type PodState = BTreeMap<String, u64>;

    fn sim_state(env: &Env) -> PodState {
        let pods = env.sim.list("pods", None).expect("list");
        pods.iter()
            .map(|p| {
                let ns = p["metadata"]["namespace"].as_str().unwrap_or_default();
                let name = p["metadata"]["name"].as_str().unwrap_or_default();
                (format!("{ns}/{name}"), rv_of(p))
            })
            .collect()
    }

    fn cache_state(reader: &reflector::Store<Pod>) -> PodState {
        reader
            .state()
            .iter()
            .map(|p| {
                let ns = p.metadata.namespace.clone().unwrap_or_default();
                let name = p.metadata.name.clone().unwrap_or_default();
                let rv = p.metadata.resource_version.as_deref().and_then(|r| r.parse().ok()).unwrap_or(0);
                (format!("{ns}/{name}"), rv)
            })
            .collect()
    }

    async fn reaches_sim_state(config: watcher::Config) {
        let env = Env::start().await;
        for i in 0..20 {
            env.create_pod("default", &format!("before-{i}"), if i % 2 == 0 { "web" } else { "db" });
        }
        let watches_before = kache::serve::watch::stats(env.kache.metrics()).started;
        let client =
            Client::try_from(kube::Config::new(env.kache.url().parse().expect("url"))).expect("client");
        let (reader, writer) = reflector::store::<Pod>();
        let stream = reflector(writer, watcher(Api::<Pod>::all(client), config));
        let consumer = tokio::spawn(stream.for_each(|event| async move {
            assert!(event.is_ok(), "watcher error: {event:?}");
        }));
        tokio::time::timeout(Duration::from_secs(15), reader.wait_until_ready())
            .await
            .expect("ready")
            .expect("store");
        // Churn while the watcher runs, with one dropped upstream watch in the middle.
        for i in 0..10 {
            env.relabel_pod("default", &format!("before-{i}"), if i % 2 == 0 { "db" } else { "web" });
            env.delete_pod("default", &format!("before-{}", 10 + i));
            env.create_pod("default", &format!("after-{i}"), "web");
            if i == 5 {
                env.sim.drop_watches();
            }
        }
        let want = sim_state(&env);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        loop {
            tick.tick().await;
            let got = cache_state(&reader);
            if got == want {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "kube-rs cache never reached the sim's state:\n got {got:?}\nwant {want:?}"
            );
        }
        assert!(
            kache::serve::watch::stats(env.kache.metrics()).started > watches_before,
            "the watch was served from memory"
        );
        consumer.abort();
        env.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn streaming_lists_watcher_reaches_the_sim_state() {
        reaches_sim_state(watcher::Config::default().streaming_lists()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn list_then_watch_watcher_reaches_the_sim_state() {
        reaches_sim_state(watcher::Config::default()).await;
    }
}
