//! Reads from memory are streamed with bounded buffers and admitted against a byte budget.
//!
//! The heap bound is measured over every heap allocation of the process (sim, kache and clients; the test
//! binary's counting allocator, `crate::alloc`), so that test runs alone in a child process: the growth of
//! the live heap during a burst of reads is then what kache's responses hold (the sim is idle, the lists are
//! served from kache's memory, and the clients count bytes without keeping them).

use crate::common;

use bytes::Bytes;
use common::*;
use http::{Request, StatusCode, header};
use http_body_util::{BodyExt, Empty};
use kache::upstream::discovery::{Selection, parse_resource_specs};

/// Pods in the big list, each with a 1 KiB annotation: a ~30 MB list, ~75 MB pretty-printed.
const PODS: usize = 20_000;
/// Concurrent pretty lists and concurrent gzip lists.
const CLIENTS: usize = 20;
/// The stated bound on the live heap's growth while 40 full lists are in flight. Collecting and
/// re-indenting each pretty list, as kache did before, held about 2.5× the list per request (~1.5 GB here);
/// streamed, each response holds its item handles (8 bytes a pod), a chunk or two (64 KiB) and its share of
/// one compression (the compressed list is cached: a few MB).
const HEAP_GROWTH_BOUND: isize = 96 << 20;

fn pods_only(c: &mut kache::app::Config) {
    c.selection =
        Selection { include: Some(parse_resource_specs("pods").expect("specs")), exclude: Vec::new() };
    c.lazy = false;
}

async fn big_cluster() -> (kache_sim::SimHandle, kache::app::Kache) {
    let sim = start_sim().await;
    sim.create("namespaces", None, namespace("big")).expect("namespace");
    let filler = "x".repeat(1024);
    for i in 0..PODS {
        let mut p = pod("big", &format!("p{i:05}"), &[("app", "a")], "node-1");
        p["metadata"]["annotations"] = serde_json::json!({ "filler": filler });
        sim.create("pods", Some("big"), p).expect("pod");
    }
    // Every heavy body admitted at once (no heavy-body limit): the heap bound must hold for all of them; the
    // limit itself is tested by `pretty_lists_beyond_the_heavy_body_limit_get_429`.
    let kache = start_kache(&sim.url(), |c| {
        pods_only(c);
        c.limits.max_heavy_bodies_in_flight = 0;
    })
    .await;
    (sim, kache)
}

/// GETs and drains the body, keeping only its length and encoding.
async fn drain(url: String, headers: &[(&'static str, &'static str)]) -> (StatusCode, Option<String>, usize) {
    let mut req = Request::get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client().request(req.body(Empty::<Bytes>::new()).expect("request")).await.expect("response");
    let status = resp.status();
    let encoding =
        resp.headers().get(header::CONTENT_ENCODING).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let mut body = resp.into_body();
    let mut n = 0;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.expect("body frame").into_data() {
            n += data.len();
        }
    }
    (status, encoding, n)
}

/// The live heap of the whole process is what this bounds, so it runs alone in a child process.
#[test]
fn regression_18_concurrent_pretty_and_gzip_lists_stay_within_a_heap_bound() {
    let stderr = common::alone::run_in_own_process(
        "memory::regression_18_concurrent_pretty_and_gzip_lists_stay_within_a_heap_bound_in_own_process",
    );
    eprintln!("{}", stderr.lines().filter(|l| l.contains("live heap")).collect::<Vec<_>>().join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "run alone by regression_18_concurrent_pretty_and_gzip_lists_stay_within_a_heap_bound"]
async fn regression_18_concurrent_pretty_and_gzip_lists_stay_within_a_heap_bound_in_own_process() {
    let (_sim, kache) = big_cluster().await;
    let base = kache.url();
    let list = format!("{base}/api/v1/namespaces/big/pods?resourceVersion=0");
    // Warm the connection pool and code paths with a compact list (not gzip: the gzip cache stays cold).
    let (status, _, compact_len) = drain(list.clone(), &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(compact_len > PODS * 1024, "a big list: {compact_len} bytes");

    let baseline = crate::alloc::reset_peak();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..CLIENTS {
        set.spawn(drain(format!("{list}&pretty=true"), &[]));
        set.spawn(drain(list.clone(), &[("accept-encoding", "gzip")]));
    }
    let results = set.join_all().await;
    let growth = crate::alloc::peak() - baseline;

    assert!(
        growth < HEAP_GROWTH_BOUND,
        "live heap grew by {} MiB with {CLIENTS} pretty and {CLIENTS} gzip lists of {} MiB in flight (bound {} MiB)",
        growth >> 20,
        compact_len >> 20,
        HEAP_GROWTH_BOUND >> 20
    );
    eprintln!("live heap growth: {} MiB (list {} MiB)", growth >> 20, compact_len >> 20);
    let pretty: Vec<_> = results.iter().filter(|r| r.1.is_none()).collect();
    let gzipped: Vec<_> = results.iter().filter(|r| r.1.as_deref() == Some("gzip")).collect();
    assert_eq!((pretty.len(), gzipped.len()), (CLIENTS, CLIENTS), "{results:?}");
    assert!(results.iter().all(|r| r.0 == StatusCode::OK), "{results:?}");
    assert!(pretty.iter().all(|r| r.2 > compact_len + PODS * 20), "pretty bodies are indented: {pretty:?}");
    assert!(
        gzipped.iter().all(|r| r.2 == gzipped[0].2 && r.2 < compact_len / 4),
        "one compressed body: {gzipped:?}"
    );
}

/// A streamed pretty list is exactly the indented compact list (Go's `MarshalIndent` layout).
#[tokio::test]
async fn streamed_pretty_list_equals_the_indented_compact_list() {
    let sim = start_sim().await;
    seed_pods(&sim, &["a"], 300);
    let kache = start_kache(&sim.url(), pods_only).await;
    let path = "/api/v1/namespaces/a/pods?resourceVersion=0";
    let compact = get(&kache.url(), path).await;
    let pretty = get_with(&kache.url(), path, &[("user-agent", "curl/8.5.0")]).await;
    assert_eq!(pretty.status, StatusCode::OK);
    assert!(compact.body.len() > 128 << 10, "over the gzip threshold, so the streamed path");
    let value: serde_json::Value = serde_json::from_slice(&compact.body).expect("json");
    let expected = serde_json::to_string_pretty(&value).expect("pretty");
    // serde_json sorts keys unless preserve_order; compare as values and as layout of the same text.
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&pretty.body).expect("json"), value);
    assert_eq!(pretty.body.len(), expected.len(), "same layout, byte for byte in length");
    assert!(!pretty.body.ends_with(b"\n"), "MarshalIndent writes no trailing newline");
}

/// Over the read byte budget: the apiserver's 429 with Retry-After; released when the body is done.
#[tokio::test]
async fn lists_over_the_read_budget_get_429_until_others_finish() {
    let sim = start_sim().await;
    sim.create("namespaces", None, namespace("a")).expect("namespace");
    // A list larger than the sockets' buffers, so an unread response stays in flight.
    let filler = "x".repeat(10 << 10);
    for i in 0..2000 {
        let mut p = pod("a", &format!("p{i:04}"), &[], "node-1");
        p["metadata"]["annotations"] = serde_json::json!({ "filler": filler });
        sim.create("pods", Some("a"), p).expect("pod");
    }
    let probe = start_kache(&sim.url(), pods_only).await;
    let path = "/api/v1/namespaces/a/pods?resourceVersion=0";
    let size = get(&probe.url(), path).await.body.len();
    // Room for one list and a half.
    let kache = start_kache(&sim.url(), |c| {
        pods_only(c);
        c.limits.max_read_bytes_in_flight = size * 3 / 2;
    })
    .await;
    let url = format!("{}{path}", kache.url());
    let open = || client().request(Request::get(url.as_str()).body(Empty::<Bytes>::new()).expect("request"));

    // The first response is held unread: its bytes stay charged.
    let first = open().await.expect("response");
    assert_eq!(first.status(), StatusCode::OK);
    let refused = get(&kache.url(), path).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS, "{:?}", refused.headers);
    assert_eq!(refused.headers[header::RETRY_AFTER], "1");
    assert_eq!(&refused.body[..], b"Too many requests, please try again later.\n");

    // Reading the first to the end releases its charge.
    first.into_body().collect().await.expect("body");
    assert_eq!(get(&kache.url(), path).await.status, StatusCode::OK);
}

/// Heavy bodies (pretty-printed, gzipped on the fly) beyond `max_heavy_bodies_in_flight` get the same 429
/// before anything is sent; plain lists are not heavy; the slot is released with the body.
#[tokio::test]
async fn pretty_lists_beyond_the_heavy_body_limit_get_429() {
    let sim = start_sim().await;
    sim.create("namespaces", None, namespace("a")).expect("namespace");
    // A list larger than the sockets' buffers, so an unread response stays in flight.
    let filler = "x".repeat(10 << 10);
    for i in 0..2000 {
        let mut p = pod("a", &format!("p{i:04}"), &[], "node-1");
        p["metadata"]["annotations"] = serde_json::json!({ "filler": filler });
        sim.create("pods", Some("a"), p).expect("pod");
    }
    let kache = start_kache(&sim.url(), |c| {
        pods_only(c);
        c.limits.max_heavy_bodies_in_flight = 1;
    })
    .await;
    let plain = "/api/v1/namespaces/a/pods?resourceVersion=0";
    let pretty = "/api/v1/namespaces/a/pods?resourceVersion=0&pretty=true";
    let url = format!("{}{pretty}", kache.url());
    let open = || client().request(Request::get(url.as_str()).body(Empty::<Bytes>::new()).expect("request"));

    // The first pretty list is held unread: it keeps its heavy-body slot.
    let first = open().await.expect("response");
    assert_eq!(first.status(), StatusCode::OK);
    let refused = get(&kache.url(), pretty).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS, "{:?}", refused.headers);
    assert_eq!(refused.headers[header::RETRY_AFTER], "1");
    assert_eq!(&refused.body[..], b"Too many requests, please try again later.\n");
    // A plain list is sent as stored, not produced: not a heavy body.
    assert_eq!(get(&kache.url(), plain).await.status, StatusCode::OK);

    // Reading the first to the end releases its slot.
    first.into_body().collect().await.expect("body");
    assert_eq!(get(&kache.url(), pretty).await.status, StatusCode::OK);
}

/// The nice value in a `/proc/…/stat` line (field 19; the command name before it may hold spaces).
#[cfg(target_os = "linux")]
fn nice_of(stat: &str) -> i32 {
    let after_name = &stat[stat.rfind(')').expect("stat has the command in parentheses") + 2..];
    after_name.split(' ').nth(16).and_then(|n| n.parse().ok()).expect("the nice field")
}

/// Heavy bodies are produced on kache's own producer threads, at a lowered OS scheduling priority (nice
/// raised by 10, so the runtime workers that serve small requests preempt them), and the body is unchanged.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn heavy_bodies_are_produced_on_lowered_priority_threads() {
    let sim = start_sim().await;
    seed_pods(&sim, &["a"], 300);
    let kache = start_kache(&sim.url(), pods_only).await;
    let path = "/api/v1/namespaces/a/pods?resourceVersion=0";
    let compact = get(&kache.url(), path).await;
    assert!(compact.body.len() > 128 << 10, "over the heavy-body threshold, so produced by the pool");
    let pretty = get(&kache.url(), &format!("{path}&pretty=true")).await;
    assert_eq!(pretty.status, StatusCode::OK);
    let value: serde_json::Value = serde_json::from_slice(&compact.body).expect("json");
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&pretty.body).expect("json"), value);

    // The threads spawned by this process's first heavy body inherit the nice value of the worker that
    // spawned them (this process's), then raise their own.
    let own = nice_of(&std::fs::read_to_string("/proc/thread-self/stat").expect("own stat"));
    let mut producers = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").expect("tasks").flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.starts_with("kache-heavy-") {
            let stat = std::fs::read_to_string(task.path().join("stat")).expect("thread stat");
            producers.push((comm.trim().to_owned(), nice_of(&stat)));
        }
    }
    assert!(!producers.is_empty(), "no heavy-body producer thread in this process");
    for (name, nice) in &producers {
        assert_eq!(*nice, (own + 10).min(19), "{name}'s nice value (this thread's: {own})");
    }
}
