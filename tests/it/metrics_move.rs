//! Every documented metric moves: a workload that exercises each part of kache — reads
//! from memory and forwarded, watches of every kind (a WatchList, bookmarks, a watcher too slow to keep up,
//! one from before kache's history), writes, upstream failures, a dropped upstream watch and an upstream
//! restart that forces a relist — then every metric of `kache::metrics::names::ALL` must have a series with
//! a non-zero value. A metric that stayed at zero while what it counts happened is how
//! `kache_slow_watchers_closed_total` and `kache_watchers` went unnoticed once; a new metric fails here
//! until something moves it or [`COVERED_ELSEWHERE`] names the test that does.

use crate::common;

use std::time::Duration;

use serde_json::{Value, json};

use kache::metrics::names::{self, MetricKind};

/// Metrics this workload cannot drive without configuration that would change what it measures, each with
/// the test that proves it moves.
const COVERED_ELSEWHERE: &[(&str, &str)] = &[
    (
        "kache_heap_collects_total",
        "app::idle_collect::tests (a thread collects once per interval as it goes idle); only the binary installs \
         the allocator's collection, so a library kache never collects",
    ),
    (
        "kache_heap_collect_seconds",
        "app::idle_collect::tests (the time collections took, beside their count); 0 in a library kache",
    ),
    (
        "kache_freshness_census_bytes",
        "fresh::census::tests::a_streamed_census_holds_one_entry_and_counts_it (bytes held while a census is read; 0 at scrape time once it ends)",
    ),
    (
        "kache_forward_read_ahead_bytes",
        "forward::readahead::tests (bytes held while the client does not read; 0 at scrape time once bodies are relayed)",
    ),
    (
        "kache_upstream_bad_frames_total",
        "reflector::tests (a scripted upstream sends truncated and invalid frames)",
    ),
    (
        "kache_reflector_restarts_total",
        "reflector::registry_tests (a reflector task that panics is restarted)",
    ),
    ("kache_auth_cache_total", "tests/it/auth.rs (--auth=delegated)"),
    (
        "kache_limit_tracked_clients",
        "tests/it/auth.rs::a_flood_of_new_decisions_costs_at_most_the_review_budget (the per-user review budget tracks one user)",
    ),
    (
        "kache_history_span_seconds",
        "store::tests::history_is_bounded_by_bytes_and_time (the span of the history ring, on a controlled clock) and \
         metrics::stats::tests (its export); here it is 0 whenever the scrape finds fewer than two events kept",
    ),
    (
        "kache_watch_index_full_total",
        "store::dispatch::bound_tests (watchers past the index rings' slot bound; 2M slots are not reached here)",
    ),
    (
        "kache_heavy_bodies_waiting",
        "serve::admit::produce::tests::the_gauges_show_bodies_producing_and_waiting (every producer busy) and \
         metrics::mirror::tests::shared_counters_are_mirrored (its export)",
    ),
    (
        "kache_heavy_bodies_producing",
        "serve::admit::produce::tests::the_gauges_show_bodies_producing_and_waiting",
    ),
    (
        "kache_mirror_selector",
        "tests/it/filtered.rs (a mirror started with --resource-selector names its selection in /metrics)",
    ),
    (
        "kache_mirror_uncovered_total",
        "tests/it/filtered.rs (reads outside a filtered mirror's selection are forwarded and counted)",
    ),
    ("kache_impersonation_total", "tests/it/impersonation.rs"),
    (
        "kache_table_generic_resources",
        "tests/it/table_real.rs (the sample apiserver's flunders and fischers print with the generic columns)",
    ),
    (
        "kache_limit_rejections_total",
        "tests/it/auth.rs and serve::server::tests (client and connection limits)",
    ),
    (
        "kache_freshness_waits_total",
        "tests/it/foreign.rs and serve::fresh tests (a busy resource's reads wait)",
    ),
    (
        "kache_freshness_proofs_total",
        "tests/it/foreign.rs and tests/it/chain.rs (quiet resources proven by bookmarks)",
    ),
    (
        "kache_freshness_censuses_total",
        "tests/it/foreign.rs and tests/it/real_apiserver.rs (big consistent lists of a quiet store behind the upstream, served after a census)",
    ),
    (
        "kache_freshness_upstream_censuses_total",
        "tests/it/foreign.rs and tests/it/real_apiserver.rs (the censuses those lists sent upstream)",
    ),
    ("kache_freshness_ahead_reads_total", "tests/it/foreign.rs (reads at a revision the upstream reached)"),
    ("apiserver_watch_cache_read_wait_seconds", "tests/it/consistency.rs (consistent reads that wait)"),
    (
        "kache_refusals_total",
        "tests/it/foreign.rs (a read at a revision neither kache nor the upstream reached: too_large_resource_version)",
    ),
    (
        "kache_too_large_resource_version_total",
        "tests/it/foreign.rs (the 504 counter stays 0 under foreign writes, counts a read at an unreachable revision)",
    ),
    (
        "kache_etcd_requests_total",
        "tests/it/kube_etcd.rs (--etcd-endpoints against the real cluster: the oracle's counters, which /metrics mirrors)",
    ),
    (
        "kache_etcd_proven_total",
        "tests/it/kube_etcd.rs (--etcd-endpoints against the real cluster: the oracle's counters, which /metrics mirrors)",
    ),
    (
        "kache_etcd_fallbacks_total",
        "tests/it/kube_etcd.rs (--etcd-endpoints against the real cluster: the oracle's counters, which /metrics mirrors)",
    ),
    (
        "kache_etcd_progress_seconds",
        "tests/it/kube_etcd.rs (--etcd-endpoints against the real cluster: the oracle's counters, which /metrics mirrors)",
    ),
    (
        "kache_etcd_progress_total",
        "tests/it/kube_etcd.rs (--etcd-endpoints against the real cluster: the oracle's counters, which /metrics mirrors)",
    ),
    (
        "kache_etcd_watches",
        "tests/it/kube_etcd.rs (--etcd-endpoints against the real cluster: the oracle's counters, which /metrics mirrors)",
    ),
    (
        "kache_etcd_watch_restarts_total",
        "tests/it/kube_etcd.rs (--etcd-endpoints against the real cluster: the oracle's counters, which /metrics mirrors)",
    ),
    // Up only while a read's body is being sent or a compression runs; asserted above while a list body is
    // unread, and the compressions' own histogram moves below.
    ("kache_memory_reads_in_flight", "this test, mid-request (a gauge back at 0 by the final scrape)"),
    ("kache_memory_read_bytes_in_flight", "this test, mid-request (a gauge back at 0 by the final scrape)"),
    (
        "kache_protobuf_bytes",
        "tests/protobuf_serve.rs and store::object::tests (messages cached by protobuf reads from memory; here the relist replaces the objects whose cells were filled)",
    ),
    (
        "kache_compressions_in_flight",
        "kache_compression_seconds (recorded as each compression ends; the gauge is up only while one runs)",
    ),
];

fn pod(name: &str) -> Value {
    common::pod("default", name, &[("app", "web")], "node-1")
}

/// The largest value among the series of `def` in the exposition (`None`: no series at all).
fn largest(text: &str, def: &names::MetricDef) -> Option<f64> {
    let series = match def.kind {
        MetricKind::Histogram => format!("{}_count", def.name),
        _ => def.name.to_owned(),
    };
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.strip_prefix(series.as_str()).is_some_and(|r| r.starts_with('{') || r.starts_with(' ')))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .reduce(f64::max)
}

/// Every series a kache exports is its own (its metrics and the state they mirror belong to it), so other
/// tests running alongside cannot move one for this workload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_metric_moves() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let sim = common::start_sim().await;
    for i in 0..20 {
        sim.create("pods", Some("default"), pod(&format!("p-{i}"))).expect("pod");
    }
    // A small broadcast ring, so a watcher that does not read falls behind quickly.
    let mut config = kache::app::Config::for_url(sim.url());
    config.reflector.store.broadcast_capacity = 64;
    // Small consistent reads from memory after a probe (by default forwarded), so their metrics move.
    config.freshness.probe_small_reads = true;
    let kache = common::start_with_metrics(config, true).await;
    let url = kache.url();
    let pods = "/api/v1/namespaces/default/pods";
    let dir = tempfile::tempdir().expect("temp dir");
    common::real::write_kubeconfig(&dir.path().join("kubeconfig"), &url);
    let via = common::real::Endpoint::from_kubeconfig("kache", &dir.path().join("kubeconfig")).await;

    // Reads from memory (rv=0, consistent, a get, a selector) and a forwarded one (a Table).
    assert_eq!(common::get(&url, &format!("{pods}?resourceVersion=0")).await.status, 200);
    assert_eq!(common::get(&url, pods).await.status, 200);
    assert_eq!(common::get(&url, &format!("{pods}/p-1")).await.status, 200);
    assert_eq!(common::get(&url, &format!("{pods}?labelSelector=app%3Dweb&limit=5")).await.status, 200);
    let table = [("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")];
    let tabled = common::get_with(&url, &format!("{pods}?resourceVersion=0"), &table).await;
    assert_eq!(tabled.status, 200);
    // A write through kache (forwarded).
    let created = via.write(http::Method::POST, pods, "application/json", &pod("via-kache")).await;
    assert_eq!(created.status, 201, "{}", String::from_utf8_lossy(&created.body));

    // A WatchList that stays open (watchers, open streams, events and bookmarks sent).
    let watch_list = format!(
        "{pods}?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"
    );
    let mut open = via.watch(&watch_list, &[]).await;
    // Its initial events end with the initial-events-end bookmark.
    while !open.line().await.expect("the watch-list streams").starts_with(br#"{"type":"BOOKMARK""#) {}

    // A watcher that does not read: closed as too slow while writes pour in.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("rcvbuf");
    let mut stalled = socket.connect(kache.addr()).await.expect("connect");
    // From kache's own revision (an rv=0 list reports it), so the watch is served from memory: a revision
    // its store has not reached yet could be forwarded, and the upstream's watch is not kache's to close.
    let listed = common::get(&url, &format!("{pods}?resourceVersion=0&limit=1")).await;
    let from = serde_json::from_slice::<serde_json::Value>(&listed.body).expect("list")["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_owned();
    let request = format!(
        "GET {pods}?watch=1&resourceVersion={from} HTTP/1.1\r\nHost: kache\r\nConnection: close\r\n\r\n"
    );
    stalled.write_all(request.as_bytes()).await.expect("send request");
    // ~1000 events of ~8 KiB, unread: far more than socket buffers, hyper's write buffer and the ring hold.
    // The watcher notices it fell behind when the client reads again; then its stream ends.
    let padding = "x".repeat(8 << 10);
    for i in 0..1000 {
        let mut p = pod(&format!("big-{i}"));
        p["metadata"]["annotations"] = json!({"padding": padding});
        sim.create("pods", Some("default"), p).expect("pod");
    }
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), stalled.read_to_end(&mut raw))
        .await
        .expect("the stalled watch ends once closed")
        .expect("read");

    // The pods now make a list of ~8 MiB: gzipped once per snapshot through the gzip cache (a miss, then a
    // newer snapshot replaces the entry), and a list whose body is not read yet is in flight.
    let gzip = [("accept-encoding", "gzip")];
    let all = format!("{pods}?resourceVersion=0");
    assert_eq!(common::get_with(&url, &all, &gzip).await.status, 200);
    sim.create("pods", Some("default"), pod("after-gzip")).expect("pod");
    let listed = common::get(&url, &format!("{pods}?resourceVersion=0&limit=1")).await;
    let after: Value = serde_json::from_slice(&listed.body).expect("list");
    assert_eq!(common::get_with(&url, &all, &gzip).await.status, 200, "{after}");
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("rcvbuf");
    let mut pending = socket.connect(kache.addr()).await.expect("connect");
    let request = format!("GET {all} HTTP/1.1\r\nHost: kache\r\nConnection: close\r\n\r\n");
    pending.write_all(request.as_bytes()).await.expect("send request");
    let mut head = [0u8; 64];
    let n = pending.read(&mut head).await.expect("response head");
    assert!(head[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head[..n]));
    let in_flight = common::get(&kache.metrics_url().expect("a metrics listener"), "/metrics").await;
    let in_flight = String::from_utf8_lossy(&in_flight.body).into_owned();
    for gauge in ["kache_memory_reads_in_flight ", "kache_memory_read_bytes_in_flight "] {
        let value = in_flight
            .lines()
            .find_map(|l| l.strip_prefix(gauge))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        assert!(value >= 1.0, "{gauge}while a list body is unread: {value}");
    }
    drop(pending);

    // A watch from before kache's history (it started after revision 1): 410 Expired, an ended stream.
    let mut expired = via.watch(&format!("{pods}?watch=1&resourceVersion=1"), &[]).await;
    let first = expired.line().await.unwrap_or_default();
    assert!(String::from_utf8_lossy(&first).contains("410"), "{}", String::from_utf8_lossy(&first));

    // Upstream trouble: writes kache does not see (its watch stalls), a compaction past them, failures,
    // then its watch dropped: the re-watch fails, then gets 410 and kache relists.
    sim.stall_watches(true);
    for i in 0..3 {
        sim.create("pods", Some("default"), pod(&format!("unseen-{i}"))).expect("pod");
    }
    sim.compact(None);
    sim.fail_next(2, 503);
    sim.drop_watches();
    sim.stall_watches(false);
    let registry = kache.registry().clone();
    common::eventually("kache relists after the compaction", Duration::from_secs(60), || {
        let relisted = registry.statuses().iter().any(|s| s.relists > 0);
        async move { relisted }
    })
    .await;

    // Protobuf from memory (the object's message is cached: bytes held), and an object kache cannot
    // transcode (a field its schema does not know): counted, and the read forwarded.
    tokio::time::timeout(Duration::from_secs(30), kache.wait_synced()).await.expect("kache resyncs");
    let protobuf = [("accept", "application/vnd.kubernetes.protobuf")];
    let mut odd = pod("odd");
    odd["spec"]["futureField"] = json!({"x": 1});
    sim.create("pods", Some("default"), odd).expect("pod");
    // At any revision (`resourceVersion=0`): served from memory without a freshness proof.
    let got = common::get_with(&url, &format!("{pods}/p-1?resourceVersion=0"), &protobuf).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.headers["content-type"], "application/vnd.kubernetes.protobuf");
    let odd = format!("{pods}/odd?resourceVersion=0");
    common::eventually("kache has the odd pod", Duration::from_secs(30), || {
        let (url, odd) = (url.clone(), odd.clone());
        async move { common::get(&url, &odd).await.status == 200 }
    })
    .await;
    let _ = common::get_with(&url, &odd, &protobuf).await;
    // A whole list three times at one snapshot: the second is recorded by the list body cache (the first
    // showed the snapshot is read), the third sent from it; the lists after the next write replace the entry.
    let whole = format!("{pods}?resourceVersion=0");
    let first = common::get(&url, &whole).await;
    assert_eq!(first.status, 200);
    assert_eq!(common::get(&url, &whole).await.body, first.body);
    assert_eq!(common::get(&url, &whole).await.body, first.body);
    // A second event after it, so the history (reset by the relist) spans some time again.
    sim.create("pods", Some("default"), pod("after-odd")).expect("pod");
    common::eventually("kache has the last pod", Duration::from_secs(30), || {
        let url = url.clone();
        async move {
            common::get(&url, "/api/v1/namespaces/default/pods/after-odd?resourceVersion=0").await.status
                == 200
        }
    })
    .await;
    // Twice at the new snapshot: the second list's body replaces the entry (an eviction, reason replaced).
    assert_eq!(common::get(&url, &whole).await.status, 200);
    assert_eq!(common::get(&url, &whole).await.status, 200);

    // Scraped as Prometheus does (store and reflector gauges are refreshed at each scrape).
    let scrape = common::get(&kache.metrics_url().expect("a metrics listener"), "/metrics").await;
    let text = String::from_utf8_lossy(&scrape.body).into_owned();
    let hits = text.lines().find_map(|l| l.strip_prefix("kache_list_body_cache_total{result=\"hit\"} "));
    assert!(
        hits.and_then(|v| v.parse::<f64>().ok()).is_some_and(|v| v > 0.0),
        "a list body cache hit: {hits:?}"
    );
    let mut still = Vec::new();
    for def in names::ALL {
        let covered = COVERED_ELSEWHERE.iter().any(|(n, _)| *n == def.name);
        match (largest(&text, def), covered) {
            (Some(v), _) if v > 0.0 => {}
            (_, true) => {}
            (found, false) => still.push(format!("{} ({:?})", def.name, found)),
        }
    }
    drop(open);
    assert!(still.is_empty(), "documented metrics that never moved: {still:#?}\n\n{text}");
    kache.shutdown().await;
    sim.shutdown().await;
}
