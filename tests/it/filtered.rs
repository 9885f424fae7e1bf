//! Node-filtered mirrors. A node-local kache mirrors only its node's pods
//! (`--resource-selector pods:fieldSelector=spec.nodeName=node-1`), in front of the sim:
//!
//! - the mirror's reflector lists and watches only that selection upstream (its store holds node-1's pods);
//! - a kubelet-like watcher (`fieldSelector=spec.nodeName=node-1`) through kache is served from memory and
//!   sees exactly the events a watcher of the upstream sees, through pods rescheduled between nodes
//!   (modelled as delete + create on the other node, since a pod's nodeName is immutable);
//! - reads the selection does not cover — an unfiltered list, another node's list, a get by name (whichever
//!   node the pod is on), an unfiltered watch — are forwarded (kache's forward counter and
//!   `kache_mirror_uncovered_total` move), and answer what the upstream answers;
//! - `/readyz?verbose` and `/metrics` name the selection;
//! - a label-filtered mirror serves narrower label selections and forwards the rest.

use crate::common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use kache::app::{Config, Kache, parse_mirror_selectors};
use kache::resource::Gvr;
use kache::upstream::discovery::{Selection, parse_resource_specs};
use kache_sim::SimHandle;
use serde_json::{Value, json};

const NS: &str = "work";
const NODE_SELECTOR: &str = "pods:fieldSelector=spec.nodeName=node-1";
/// The kubelet's own selector, URL-encoded.
const KUBELET: &str = "fieldSelector=spec.nodeName%3Dnode-1";
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// A sim with five pods on node-1 (`a0`..`a4`) and five on node-2 (`b0`..`b4`), and a kache mirroring pods
/// with `selectors`, with a metrics listener.
async fn node_local(selectors: &[&str]) -> (SimHandle, Kache) {
    node_local_on(start_sim().await, selectors).await
}

/// [`node_local`] in front of `sim`.
async fn node_local_on(sim: SimHandle, selectors: &[&str]) -> (SimHandle, Kache) {
    node_local_with(sim, selectors, true).await
}

/// [`node_local_on`], with censuses on or off (`fresh::census`).
async fn node_local_with(sim: SimHandle, selectors: &[&str], census: bool) -> (SimHandle, Kache) {
    sim.create("namespaces", None, namespace(NS)).expect("namespace");
    for i in 0..5 {
        sim.create("pods", Some(NS), pod(NS, &format!("a{i}"), &[("app", "web")], "node-1")).expect("pod");
        sim.create("pods", Some(NS), pod(NS, &format!("b{i}"), &[("app", "db")], "node-2")).expect("pod");
    }
    let mut config = Config::for_url(sim.url());
    config.handler.block_timeout = TEST_BLOCK_TIMEOUT;
    config.handler.watch.wait_timeout = TEST_BLOCK_TIMEOUT;
    config.freshness.latency_bound = Duration::from_secs(2);
    config.freshness.probe_small_reads = true;
    config.freshness.census = census;
    config.selection =
        Selection { include: Some(parse_resource_specs("pods").expect("specs")), exclude: Vec::new() };
    config.lazy = false;
    let selectors: Vec<String> = selectors.iter().map(|s| (*s).to_owned()).collect();
    config.mirror_selectors = parse_mirror_selectors(&selectors).expect("valid --resource-selector");
    let kache = common::start_with_metrics(config, true).await;
    (sim, kache)
}

fn pods() -> Gvr {
    Gvr::new("", "v1", "pods")
}

/// The sorted names of a list response's items.
fn names(resp: &Resp) -> Vec<String> {
    assert_eq!(resp.status, 200, "list failed: {}", String::from_utf8_lossy(&resp.body));
    let mut out: Vec<String> = resp.json()["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["metadata"]["name"].as_str().expect("name").to_owned())
        .collect();
    out.sort();
    out
}

fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"].as_str().and_then(|s| s.parse().ok()).expect("resourceVersion")
}

/// A watch response read event by event.
struct Watch {
    body: Incoming,
    buf: Vec<u8>,
}

impl Watch {
    async fn open(base: &str, path: &str) -> (http::StatusCode, Watch) {
        let uri: http::Uri = format!("{base}{path}").parse().expect("uri");
        let resp = tokio::time::timeout(
            READ_TIMEOUT,
            client().request(http::Request::get(uri).body(Empty::<Bytes>::new()).expect("request")),
        )
        .await
        .expect("response headers in time")
        .expect("request succeeds");
        (resp.status(), Watch { body: resp.into_body(), buf: Vec::new() })
    }

    /// The next event that is not a BOOKMARK; `None` when the stream ended.
    async fn next_event(&mut self) -> Option<Value> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                let v: Value = serde_json::from_slice(&line).expect("JSON line");
                if v["type"] != "BOOKMARK" {
                    return Some(v);
                }
                continue;
            }
            match tokio::time::timeout(READ_TIMEOUT, self.body.frame()).await.expect("no stall") {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                _ => return None,
            }
        }
    }

    /// `(type, name, nodeName)` of every event up to and including the first about `last`.
    async fn until(&mut self, last: &str) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        loop {
            let ev = self.next_event().await.unwrap_or_else(|| panic!("stream ended before {last}: {out:?}"));
            let name = ev["object"]["metadata"]["name"].as_str().expect("name").to_owned();
            let node = ev["object"]["spec"]["nodeName"].as_str().unwrap_or("").to_owned();
            out.push((ev["type"].as_str().expect("type").to_owned(), name.clone(), node));
            if name == last {
                return out;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_watcher_sees_exactly_its_pods_through_reschedules() {
    let (sim, kache) = node_local(&[NODE_SELECTOR]).await;
    let base = kache.url();
    // The mirror holds node-1's pods only: the reflector asked the upstream for that selection.
    let store = kache.registry().get(&pods()).expect("pods are cached");
    let mut held: Vec<String> = store.current().range_from("").map(|o| o.name().to_owned()).collect();
    held.sort();
    assert_eq!(held, ["a0", "a1", "a2", "a3", "a4"]);

    // The kubelet's list: from memory (at rv 0: any revision), the same items as upstream's.
    let memory = kache.stats().memory();
    let forwarded = kache.stats().forwarded();
    let list = get(&base, &format!("/api/v1/pods?{KUBELET}&resourceVersion=0")).await;
    assert_eq!(names(&list), ["a0", "a1", "a2", "a3", "a4"]);
    assert_eq!(names(&get(&sim.url(), &format!("/api/v1/pods?{KUBELET}")).await), names(&list));
    assert_eq!(
        (kache.stats().memory(), kache.stats().forwarded()),
        (memory + 1, forwarded),
        "served from memory"
    );
    // A consistent list gives the same items; its resourceVersion is the upstream's revision (b4 was
    // created after node-1's last pod), not the mirror's last event.
    let revision = sim.revision();
    let consistent = get(&base, &format!("/api/v1/pods?{KUBELET}")).await;
    assert_eq!(names(&consistent), names(&list));
    let from = rv_of(&consistent.json());
    assert!(from >= revision, "list at {from}, upstream at {revision}");

    // The mirror reaches the upstream's revision through the upstream's bookmarks (no node-1 event since).
    let mut rv = store.watch_rv();
    tokio::time::timeout(READ_TIMEOUT, rv.wait_for(|r| *r >= from))
        .await
        .expect("in time")
        .expect("store open");

    // The same watch from the same revision, through kache and straight to the sim.
    let path = format!("/api/v1/pods?watch=1&{KUBELET}&resourceVersion={from}&allowWatchBookmarks=true");
    let memory = kache.stats().memory();
    let forwarded = kache.stats().forwarded();
    let (status, mut through) = Watch::open(&base, &path).await;
    assert_eq!(status, 200);
    assert_eq!(
        (kache.stats().memory(), kache.stats().forwarded()),
        (memory + 1, forwarded),
        "watch from memory"
    );
    let (status, mut direct) = Watch::open(&sim.url(), &path).await;
    assert_eq!(status, 200);

    // Reschedules: a0 leaves node-1, b0 comes to node-1, b1 leaves node-2 for node-3 (never node-1's).
    let moved = |name: &str, to: &str, app: &str| {
        sim.delete("pods", Some(NS), name).expect("delete");
        sim.create("pods", Some(NS), pod(NS, name, &[("app", app)], to)).expect("create on the new node");
    };
    moved("a0", "node-2", "web");
    moved("b0", "node-1", "db");
    moved("b1", "node-3", "db");
    sim.merge_patch("pods", Some(NS), "b2", json!({"metadata": {"labels": {"touched": "yes"}}}))
        .expect("patch");
    sim.create("pods", Some(NS), pod(NS, "c0", &[], "node-2")).expect("a new pod elsewhere");
    sim.create("pods", Some(NS), pod(NS, "a5", &[], "node-1")).expect("a new pod here");
    sim.merge_patch("pods", Some(NS), "a1", json!({"metadata": {"labels": {"touched": "yes"}}}))
        .expect("patch");
    sim.create("pods", Some(NS), pod(NS, "zz-last", &[], "node-1")).expect("marker");

    let seen = through.until("zz-last").await;
    let expected: Vec<(String, String, String)> = [
        ("DELETED", "a0", "node-1"),
        ("ADDED", "b0", "node-1"),
        ("ADDED", "a5", "node-1"),
        ("MODIFIED", "a1", "node-1"),
        ("ADDED", "zz-last", "node-1"),
    ]
    .iter()
    .map(|(t, n, node)| ((*t).to_owned(), (*n).to_owned(), (*node).to_owned()))
    .collect();
    assert_eq!(seen, expected, "exactly node-1's pods, in order");
    assert_eq!(direct.until("zz-last").await, seen, "what a watcher of the upstream sees");

    // Afterwards the mirror and a kubelet's list agree with the upstream again.
    let mut held: Vec<String> = store.current().range_from("").map(|o| o.name().to_owned()).collect();
    held.sort();
    assert_eq!(held, ["a1", "a2", "a3", "a4", "a5", "b0", "zz-last"]);
    let upstream = names(&get(&sim.url(), &format!("/api/v1/pods?{KUBELET}")).await);
    assert_eq!(names(&get(&base, &format!("/api/v1/pods?{KUBELET}")).await), upstream);
    drop((through, direct));
    kache.shutdown().await;
    sim.shutdown().await;
}

/// Other nodes' pods change all the time in a real cluster. A consistent watch-list (client-go 1.36's
/// informer start) of the mirror's own selection is proven fresh by a proof watch of that selection, which
/// other nodes' events do not interrupt, and served from memory; a proof of the whole collection would meet
/// node-2's change first and the watch would be forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_mirror_is_proven_fresh_by_its_own_selection() {
    let (sim, kache) = filtered_watch_list_from_memory(false).await;
    let f = &kache.freshness().stats;
    assert!(
        f.proven.load(std::sync::atomic::Ordering::Relaxed) >= 1,
        "proven by the selection's proof watch"
    );
    kache.shutdown().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_mirror_is_proven_fresh_by_a_census_of_its_own_selection() {
    let (sim, kache) = filtered_watch_list_from_memory(true).await;
    let f = &kache.freshness().stats;
    // A census of the whole resource would list the other node's pods too and never match the mirror.
    assert!(
        f.census_same.load(std::sync::atomic::Ordering::Relaxed) >= 1,
        "matched by the selection's census"
    );
    assert_eq!(f.proofs.load(std::sync::atomic::Ordering::Relaxed), 0, "no proof watch");
    kache.shutdown().await;
    sim.shutdown().await;
}

/// A node-local mirror's WatchList after a write to another node's pod and a foreign write: served from
/// memory with the mirror's pods and an initial-events-end bookmark reflecting both (proven by a census of
/// the selection when `census`, else by the selection's proof watch).
async fn filtered_watch_list_from_memory(census: bool) -> (SimHandle, Kache) {
    // The apiserver's bookmark period: the store advances past other writes only through a proof.
    let sim = kache_sim::Sim::builder()
        .bookmark_interval(Duration::from_secs(60))
        .wait_timeout(TEST_BLOCK_TIMEOUT)
        .start()
        .await
        .expect("sim starts");
    let (sim, kache) = node_local_with(sim, &[NODE_SELECTOR], census).await;
    // Another node's pod changes after the mirror's last event: the upstream is ahead of the store.
    sim.merge_patch("pods", Some(NS), "b0", json!({"metadata": {"labels": {"moved": "1"}}}))
        .expect("patch b0");
    // And a lease renewal elsewhere moves the revision past it (as on a real apiserver, a watcher gets no
    // bookmark at the revision of an event its selector filtered out: only at a later one).
    let lease = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "lease", "namespace": "default"}});
    sim.create("configmaps", Some("default"), lease).expect("foreign write");
    let written = sim.revision();
    let forwarded = kache.stats().forwarded();
    let path = format!(
        "/api/v1/namespaces/{NS}/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan\
         &allowWatchBookmarks=true&timeoutSeconds=5&{KUBELET}"
    );
    let r = get(&kache.url(), &path).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let events: Vec<Value> =
        String::from_utf8_lossy(&r.body).lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let added: Vec<&str> = events
        .iter()
        .take_while(|e| e["type"] == "ADDED")
        .map(|e| e["object"]["metadata"]["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(added, ["a0", "a1", "a2", "a3", "a4"], "node-1's pods: {events:?}");
    let end = &events[added.len()];
    assert_eq!(end["type"], "BOOKMARK", "{end}");
    assert_eq!(end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true", "{end}");
    assert!(rv_of(&end["object"]) >= written, "the bookmark reflects the write before the watch: {end}");
    assert_eq!(kache.stats().forwarded(), forwarded, "the watch-list was served from memory");
    (sim, kache)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_outside_the_selection_are_forwarded() {
    let (sim, kache) = node_local(&[NODE_SELECTOR]).await;
    let base = kache.url();
    let check = |what: &'static str, before: (u64, u64), forwarded_now: bool| {
        let (memory, forwarded) = (kache.stats().memory(), kache.stats().forwarded());
        if forwarded_now {
            assert_eq!((memory, forwarded), (before.0, before.1 + 1), "{what} is forwarded");
        } else {
            assert_eq!((memory, forwarded), (before.0 + 1, before.1), "{what} is served from memory");
        }
    };
    let counts = || (kache.stats().memory(), kache.stats().forwarded());

    // An unfiltered list: memory holds half of it, so only the upstream can answer.
    let before = counts();
    let all = get(&base, "/api/v1/pods?resourceVersion=0").await;
    check("an unfiltered list", before, true);
    assert_eq!(names(&all).len(), 10);
    let before = counts();
    assert_eq!(names(&get(&base, &format!("/api/v1/namespaces/{NS}/pods")).await).len(), 10);
    check("a namespace's list", before, true);
    // Another node's pods.
    let before = counts();
    let other = get(&base, "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-2&resourceVersion=0").await;
    check("another node's list", before, true);
    assert_eq!(names(&other), ["b0", "b1", "b2", "b3", "b4"]);
    // A get of another node's pod exists upstream (memory would say 404), and a get of this node's pod is
    // not provably on this node either: both forwarded.
    for name in ["b1", "a1"] {
        let before = counts();
        let got = get(&base, &format!("/api/v1/namespaces/{NS}/pods/{name}?resourceVersion=0")).await;
        check("a get by name", before, true);
        assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
        assert_eq!(got.json()["metadata"]["name"], name);
    }
    // An unfiltered watch.
    let before = counts();
    let (status, mut watch) = Watch::open(&base, "/api/v1/pods?watch=1&resourceVersion=0").await;
    assert_eq!(status, 200);
    check("an unfiltered watch", before, true);
    let first = watch.next_event().await.expect("initial events");
    assert_eq!(first["type"], "ADDED");
    drop(watch);
    // A narrower selection is served from memory.
    let before = counts();
    let narrower =
        get(&base, &format!("/api/v1/pods?{KUBELET}&labelSelector=app%3Dweb&resourceVersion=0")).await;
    check("a narrower list", before, false);
    assert_eq!(names(&narrower), ["a0", "a1", "a2", "a3", "a4"]);

    // The selection shows in readiness and metrics, and so do the forwards it caused.
    let metrics_url = kache.metrics_url().expect("metrics listener");
    let ready = get(&metrics_url, "/readyz?verbose").await;
    let ready = String::from_utf8_lossy(&ready.body).into_owned();
    assert!(ready.contains("[+]informer-sync-pods[fieldSelector=spec.nodeName=node-1] ok"), "{ready}");
    let text = String::from_utf8_lossy(&get(&metrics_url, "/metrics").await.body).into_owned();
    let series = |line: &str| text.lines().any(|l| l.starts_with("kache_mirror") && l.contains(line));
    assert!(series(r#"selector="fieldSelector=spec.nodeName=node-1""#), "{text}");
    for verb in ["get", "list", "watch"] {
        assert!(
            text.lines().any(|l| l.starts_with("kache_mirror_uncovered_total")
                && l.contains(&format!(r#"verb="{verb}""#))
                && l.contains(r#"resource="pods""#)
                && !l.ends_with(" 0")),
            "uncovered {verb}s counted: {text}"
        );
    }
    kache.shutdown().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_filtered_mirror_serves_narrower_label_selections() {
    let (sim, kache) = node_local(&["pods:labelSelector=app in (web,api)"]).await;
    let base = kache.url();
    let store = kache.registry().get(&pods()).expect("pods are cached");
    assert_eq!(store.current().len(), 5, "the web pods only");
    for (query, from_memory, expect) in [
        ("labelSelector=app%3Dweb", true, 5),
        ("labelSelector=app%20in%20%28web%2Capi%29", true, 5),
        ("labelSelector=app%3Dweb&fieldSelector=spec.nodeName%3Dnode-2", true, 0),
        ("labelSelector=app%3Ddb", false, 5),
        ("labelSelector=app", false, 10),
        ("", false, 10),
    ] {
        let (memory, forwarded) = (kache.stats().memory(), kache.stats().forwarded());
        let resp = get(&base, &format!("/api/v1/pods?{query}&resourceVersion=0")).await;
        assert_eq!(names(&resp).len(), expect, "{query}");
        let direct = get(&sim.url(), &format!("/api/v1/pods?{query}")).await;
        assert_eq!(names(&resp), names(&direct), "{query}: what the upstream answers");
        let now = (kache.stats().memory(), kache.stats().forwarded());
        let want = if from_memory { (memory + 1, forwarded) } else { (memory, forwarded + 1) };
        assert_eq!(now, want, "{query}: from memory {from_memory}");
    }
    kache.shutdown().await;
    sim.shutdown().await;
}

#[test]
fn resource_selector_flags_are_validated() {
    let ok = parse_mirror_selectors(&[
        "pods:fieldSelector=spec.nodeName=n1".to_owned(),
        "v1/pods:labelSelector=app=web".to_owned(),
    ])
    .expect("valid");
    assert_eq!(ok.len(), 2);
    for bad in ["pods", "pods,nodes:fieldSelector=a=b", "Pods!:fieldSelector=a=b", "pods:fieldSelector=x"] {
        let err = parse_mirror_selectors(&[bad.to_owned()]).expect_err(bad);
        assert!(err.to_string().contains(bad), "{err}");
    }
}

// --- figures (docs/decisions/0005-node-filtered-mirrors.md):
// `cargo test --test it filtered::measure -- --ignored --nocapture` ---

/// Resident memory of this process, from /proc (Linux).
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib * 1024
}

/// Median and p99 of `samples` (sorted in place).
fn median_p99(samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort();
    (samples[samples.len() / 2], samples[(samples.len() * 99 / 100).min(samples.len() - 1)])
}

async fn kache_for(sim: &SimHandle, selectors: &[String]) -> Kache {
    start_kache(&sim.url(), |c| {
        c.selection =
            Selection { include: Some(parse_resource_specs("pods").expect("specs")), exclude: Vec::new() };
        c.lazy = false;
        c.mirror_selectors = parse_mirror_selectors(selectors).expect("valid");
    })
    .await
}

/// A filtered mirror (one node's pods) against a full one, 10 000 pods on 100 nodes: store bytes, process
/// RSS growth, events the upstream sends each mirror's watch under churn, and kubelet-list latency.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; run with --ignored --nocapture"]
async fn measure_filtered_vs_full_mirror() {
    const NODES: usize = 100;
    const PODS: usize = 10_000;
    const WRITES: usize = 2_000;
    const READS: usize = 300;
    let sim = start_sim().await;
    // ~2 KiB pods: a status and an annotation stand in for what real pods carry (managedFields, env, ...).
    let padding = "x".repeat(1500);
    for n in 0..10 {
        sim.create("namespaces", None, namespace(&format!("ns{n}"))).expect("namespace");
    }
    for i in 0..PODS {
        let ns = format!("ns{}", i % 10);
        let mut p = pod(&ns, &format!("p{i:05}"), &[("app", "web")], &format!("node-{}", i % NODES));
        p["metadata"]["annotations"] = json!({"example.com/padding": padding});
        sim.create("pods", Some(&ns), p).expect("pod");
    }
    let object_bytes = get(&sim.url(), "/api/v1/pods?resourceVersion=0").await.body.len();

    let rss0 = rss_bytes();
    let filtered = kache_for(&sim, &["pods:fieldSelector=spec.nodeName=node-7".to_owned()]).await;
    let rss1 = rss_bytes();
    let full = kache_for(&sim, &[]).await;
    let rss2 = rss_bytes();
    let stats = |k: &Kache| k.registry().get(&pods()).expect("pods cached").stats();
    let (fs, us) = (stats(&filtered), stats(&full));

    // Churn: WRITES label patches spread over every node; count what each mirror's watch received.
    let events = |k: &Kache| k.registry().statuses()[0].events_applied;
    let (f0, u0) = (events(&filtered), events(&full));
    for i in 0..WRITES {
        let j = (i * 7919) % PODS;
        let (ns, name) = (format!("ns{}", j % 10), format!("p{j:05}"));
        sim.merge_patch("pods", Some(&ns), &name, json!({"metadata": {"labels": {"gen": i.to_string()}}}))
            .expect("patch");
    }
    let marker_ns = "ns7";
    sim.create("pods", Some(marker_ns), pod(marker_ns, "zz-marker", &[], "node-7")).expect("marker");
    for k in [&filtered, &full] {
        let store = k.registry().get(&pods()).expect("pods cached");
        eventually("the mirror has the marker", Duration::from_secs(60), || {
            let found = store.current().get(&format!("{marker_ns}/zz-marker")).is_some();
            async move { found }
        })
        .await;
    }
    let (fe, ue) = (events(&filtered) - f0, events(&full) - u0);

    // The kubelet's list: through the filtered mirror, the full mirror, and the upstream directly.
    let path = "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-7&resourceVersion=0";
    let mut lat = Vec::new();
    for base in [filtered.url(), full.url(), sim.url()] {
        let mut samples = Vec::with_capacity(READS);
        for _ in 0..READS {
            let t = std::time::Instant::now();
            let r = get(&base, path).await;
            assert_eq!(r.status, 200);
            samples.push(t.elapsed());
        }
        lat.push(median_p99(&mut samples));
    }
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    println!(
        "pods: {PODS} on {NODES} nodes; list body {:.1} MiB ({} B/pod)",
        mib(object_bytes),
        object_bytes / PODS
    );
    println!(
        "| mirror | objects | live MiB | index MiB | history MiB | RSS growth MiB | watch events for {WRITES} writes + 1 |"
    );
    for (name, s, rss, ev) in [("node-filtered", &fs, rss1 - rss0, fe), ("full", &us, rss2 - rss1, ue)] {
        println!(
            "| {name} | {} | {:.2} | {:.2} | {:.2} | {:.1} | {ev} |",
            s.objects,
            mib(s.live_bytes),
            mib(s.index_bytes),
            mib(s.history_bytes),
            rss as f64 / (1 << 20) as f64
        );
    }
    println!("kubelet list (node-7, {READS} sequential reads): median / p99");
    for (name, (m, p)) in ["filtered kache", "full kache", "upstream (sim)"].iter().zip(&lat) {
        println!("| {name} | {:.3} ms | {:.3} ms |", m.as_secs_f64() * 1e3, p.as_secs_f64() * 1e3);
    }
    println!(
        "ratios: live bytes full/filtered {:.0}x; watch events full/filtered {:.0}x; median list full/filtered {:.2}x, upstream/filtered {:.2}x",
        us.live_bytes as f64 / fs.live_bytes.max(1) as f64,
        ue as f64 / fe.max(1) as f64,
        lat[1].0.as_secs_f64() / lat[0].0.as_secs_f64(),
        lat[2].0.as_secs_f64() / lat[0].0.as_secs_f64(),
    );
    filtered.shutdown().await;
    full.shutdown().await;
    sim.shutdown().await;
}
