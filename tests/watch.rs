//! Watch tests that need more than one module: fan-out measurements against a real store.
//!
//! Contents:
//! - `fanout`: many concurrent watchers, each polled by its own task as a server connection would poll its
//!   body; delivery latency, CPU per delivered event and memory per idle watcher. The measurement runs are
//!   `#[ignore]`d (they take seconds); run them with
//!   `cargo test -p kache --test watch -- --ignored --nocapture --test-threads=1`.

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
        let mut watcher = Watcher::new(store.clone(), live_spec(), token.clone());
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
