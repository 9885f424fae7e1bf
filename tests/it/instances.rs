//! Kaches are instances: two in one process share no cache, counter or thread, and a stopped kache leaves
//! no thread behind. (What the process does share by design — the heavy-body producer pool, held protobuf
//! bytes — is said in docs/architecture.md.)

use crate::common;

use kache::app::{Config, Kache};

use common::{get_with, start_sim};

/// The Accept header of `kubectl get`.
const TABLE_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

async fn start(upstream: &str) -> Kache {
    let mut config = Config::for_url(upstream);
    config.freshness.probe_small_reads = true;
    common::start_with_metrics(config, true).await
}

/// The value of a series (`name{labels}` as exported) in a scrape; 0 when absent.
fn series(scrape: &str, name: &str) -> f64 {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Each kache prints with its own Table state: rows printed by one are not in another's row cache (nor
/// counted in its metrics), even in one process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_kaches_in_one_process_share_no_table_rows() {
    let sim = start_sim().await;
    common::seed_pods(&sim, &["ns-a"], 5);
    let (a, b) = (start(&sim.url()).await, start(&sim.url()).await);
    let accept = [("accept", TABLE_ACCEPT)];
    for _ in 0..2 {
        let r = get_with(&a.url(), "/api/v1/namespaces/ns-a/pods?resourceVersion=0", &accept).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert!(String::from_utf8_lossy(&r.body).contains(r#""kind":"Table""#));
    }
    let scrape = |k: &Kache| {
        let url = k.metrics_url().expect("a metrics listener");
        async move { String::from_utf8_lossy(&common::get(&url, "/metrics").await.body).into_owned() }
    };
    let (of_a, of_b) = (scrape(&a).await, scrape(&b).await);
    assert_eq!(series(&of_a, r#"kache_table_rows_total{result="miss"}"#), 5.0, "{of_a}");
    assert_eq!(series(&of_a, r#"kache_table_rows_total{result="hit"}"#), 5.0, "{of_a}");
    assert!(series(&of_a, "kache_table_row_cache_bytes") > 0.0, "{of_a}");
    assert_eq!(series(&of_b, r#"kache_table_rows_total{result="miss"}"#), 0.0, "{of_b}");
    assert_eq!(series(&of_b, r#"kache_table_rows_total{result="hit"}"#), 0.0, "{of_b}");
    assert_eq!(series(&of_b, "kache_table_row_cache_bytes"), 0.0, "{of_b}");
    // B prints the same rows afresh.
    let r = get_with(&b.url(), "/api/v1/namespaces/ns-a/pods?resourceVersion=0", &accept).await;
    assert_eq!(r.status, 200);
    assert_eq!(series(&scrape(&b).await, r#"kache_table_rows_total{result="miss"}"#), 5.0);
    a.shutdown().await;
    b.shutdown().await;
}

/// The names of this process's threads (Linux: `/proc/self/task/*/comm`).
fn thread_names() -> Vec<String> {
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_owned())
        .collect()
}

/// A kache's threads of its own (the forward thread of its upstream client, named after the upstream's port)
/// are stopped and joined when it shuts down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_kache_leaves_no_thread_behind() {
    let sim = start_sim().await;
    common::seed_pods(&sim, &["ns-a"], 3);
    let port = sim.url().rsplit(':').next().expect("a port").trim_end_matches('/').to_owned();
    let name = format!("kache-fwd-{port}");
    let kache = start(&sim.url()).await;
    // A list memory does not answer (an Exact read older than its history) is forwarded.
    let r = get_with(&kache.url(), "/api/v1/pods?resourceVersion=1&resourceVersionMatch=Exact", &[]).await;
    assert!(r.status.is_success() || r.status.is_client_error(), "{}", r.status);
    assert!(thread_names().contains(&name), "{name} among {:?}", thread_names());
    kache.shutdown().await;
    let left: Vec<String> = thread_names().into_iter().filter(|n| *n == name).collect();
    assert!(left.is_empty(), "threads left behind: {left:?}");
}
