//! etcd as kache's freshness oracle (`--etcd-endpoints`) in front of the testbed's real cluster: consistent
//! reads (get, namespace list, cluster-wide list, WatchList start) are linearizable — every write the
//! apiserver acknowledged before a read began is in the read — under a writer loop and the cluster's own
//! foreign writes (the nodes' leases), across an etcd restart, an apiserver restart and a compaction; with
//! the oracle the reads are served from memory (gets included, which kache otherwise forwards), and with etcd
//! unreachable they go the apiserver's way without an error; reads at a revision ahead of kache's store
//! (NotOlderThan, a get at a revision) are proven by etcd too. etcd's revision is the apiserver's
//! resourceVersion.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::{Value, json};

use common::cluster::Cluster;
use common::eventually;
use common::real::{Endpoint, create, rv_of, write_kubeconfig};
use kache::app::Kache;
use kache::fresh::etcd::{EtcdConfig, EtcdCounters};
use kache::upstream::discovery::{Selection, parse_resource_specs};

const NS: &str = "etcd-oracle";
const NODES: usize = 3;
/// Reads checked after each disturbance (each of the four kinds once per round).
const ROUNDS: usize = 15;
/// WatchLists started at once right after kache is ready.
const FIRST_READS: usize = 20;
/// A hang guard for the oracle to prove reads again after a disturbance.
const RECOVER: Duration = Duration::from_secs(60);
const COUNTER: &str = "/api/v1/namespaces/etcd-oracle/configmaps/counter";

fn etcd(url: &str) -> EtcdConfig {
    EtcdConfig { endpoints: vec![url.to_owned()], prefix: "/registry".into(), ..EtcdConfig::default() }
}

fn oracle(kache: &Kache) -> EtcdCounters {
    kache.freshness().etcd_stats().expect("the oracle is configured")
}

/// The writer's acknowledged writes: the counter's value and the last configmap created.
#[derive(Default)]
struct Acked {
    counter: AtomicU64,
    created: AtomicU64,
}

/// Updates the counter (and creates a configmap every fifth time) directly on the apiserver until `stop`;
/// a write counts once the apiserver acknowledged it. Writes that fail (a restart) are tried again.
async fn writer(api: Endpoint, acked: Arc<Acked>, stop: Arc<AtomicBool>) {
    let mut n = 0u64;
    while !stop.load(SeqCst) {
        n += 1;
        let patch = json!({"data": {"n": n.to_string()}});
        match api.try_request(Method::PATCH, COUNTER, "application/merge-patch+json", &patch).await {
            Some(r) if r.status == StatusCode::OK => acked.counter.store(n, SeqCst),
            _ => {
                n -= 1;
                continue;
            }
        }
        if n.is_multiple_of(5) {
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("w-{n}")}});
            let path = format!("/api/v1/namespaces/{NS}/configmaps");
            if let Some(r) = api.try_request(Method::POST, &path, "application/json", &cm).await
                && r.status == StatusCode::CREATED
            {
                acked.created.store(n, SeqCst);
            }
        }
    }
}

/// The counter's value in a configmap object.
fn counter_of(cm: &Value) -> u64 {
    cm["data"]["n"].as_str().and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// Checks a list's items: the counter at least `counter`, the configmap `w-created` present.
fn check_items(what: &str, items: &[Value], counter: u64, created: u64) {
    let name = |v: &Value| v["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    let c = items.iter().find(|i| name(i) == "counter").unwrap_or_else(|| panic!("{what}: no counter"));
    assert!(counter_of(c) >= counter, "{what}: stale counter {} < acknowledged {counter}", counter_of(c));
    if created > 0 {
        let want = format!("w-{created}");
        assert!(items.iter().any(|i| name(i) == want), "{what}: acknowledged {want} missing");
    }
}

/// One consistent read of each kind through `via`, each checked against the writes acknowledged before it
/// began. `strict`: every read must answer 200; otherwise (during a restart) an error answer is allowed,
/// never a stale one. Returns how many answered 200.
async fn round(via: &Endpoint, acked: &Acked, strict: bool) -> usize {
    let mut ok = 0;
    let reads = [
        ("get", COUNTER.to_owned()),
        ("namespace list", format!("/api/v1/namespaces/{NS}/configmaps")),
        ("list", "/api/v1/configmaps".to_owned()),
    ];
    for (what, path) in reads {
        let (counter, created) = (acked.counter.load(SeqCst), acked.created.load(SeqCst));
        let resp = match via.try_get(&path).await {
            Some(r) if r.status == StatusCode::OK => r,
            other => {
                assert!(!strict, "{what} {path}: {:?}", other.map(|r| (r.status, r.body)));
                continue;
            }
        };
        let body = resp.json();
        if what == "get" {
            assert!(
                counter_of(&body) >= counter,
                "get: stale counter {} < acknowledged {counter}",
                counter_of(&body)
            );
        } else {
            let items = body["items"].as_array().cloned().unwrap_or_default();
            check_items(what, &items, counter, created);
        }
        ok += 1;
    }
    if strict {
        let (counter, created) = (acked.counter.load(SeqCst), acked.created.load(SeqCst));
        let items = watch_list(via).await;
        check_items("WatchList", &items, counter, created);
        ok += 1;
    }
    ok
}

/// The initial events of a WatchList of the namespace's configmaps (up to the initial-events-end bookmark).
async fn watch_list(via: &Endpoint) -> Vec<Value> {
    let path = format!(
        "/api/v1/namespaces/{NS}/configmaps?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan\
         &allowWatchBookmarks=true&timeoutSeconds=30"
    );
    let mut w = via.watch(&path, &[]).await;
    assert_eq!(w.status, StatusCode::OK, "WatchList {path}");
    let mut items = Vec::new();
    while let Some(line) = w.line().await {
        let event: Value = serde_json::from_slice(&line).expect("a watch event");
        match event["type"].as_str() {
            Some("ADDED") => items.push(event["object"].clone()),
            Some("BOOKMARK")
                if event["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true" =>
            {
                return items;
            }
            Some("BOOKMARK") => {}
            other => panic!("WatchList: unexpected {other:?}: {event}"),
        }
    }
    panic!("WatchList ended before its initial-events-end bookmark")
}

/// Rounds until the oracle has proven more reads than `before` (a hang guard of [`RECOVER`]).
async fn until_proven(kache: &Kache, via: &Endpoint, acked: &Acked, what: &str) {
    let before = oracle(kache).proven;
    eventually(what, RECOVER, || async {
        round(via, acked, false).await;
        oracle(kache).proven > before
    })
    .await;
}

async fn kubeconfig_endpoint(name: &'static str, kache: &Kache, dir: &tempfile::TempDir) -> Endpoint {
    let path = dir.path().join(format!("{name}.kubeconfig"));
    write_kubeconfig(&path, &kache.url());
    Endpoint::from_kubeconfig(name, &path).await
}

/// The testbed cluster `name` (`None` when its tools are missing: the test skips) with the test's namespace
/// created, and the admin's endpoint on the apiserver.
async fn cluster_with_namespace(name: &'static str) -> Option<(Cluster, Endpoint)> {
    let cluster =
        tokio::task::spawn_blocking(move || Cluster::start(name, NODES)).await.expect("cluster start")?;
    let api = Endpoint::from_kubeconfig("kube-apiserver", &cluster.admin_kubeconfig()).await;
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}});
    create(&api, "/api/v1/namespaces", &ns).await;
    Some((cluster, api))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistent_reads_proven_by_etcd_are_linearizable_through_restarts_and_compaction() {
    let _one = common::cluster::one_at_a_time().await;
    let Some((cluster, api)) = cluster_with_namespace("etcd-oracle").await else { return };
    let etcd_url = cluster.var("ETCD_URL").to_owned();
    let counter =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "counter"}, "data": {"n": "0"}});
    let counter_rv = create(&api, &format!("/api/v1/namespaces/{NS}/configmaps"), &counter).await;

    // etcd's revision is the apiserver's resourceVersion: the object's key was last written at its RV.
    let mut client = etcd_client::Client::connect([etcd_url.as_str()], None).await.expect("etcd client");
    let got = client
        .get(
            format!("/registry/configmaps/{NS}/counter"),
            Some(etcd_client::GetOptions::new().with_keys_only()),
        )
        .await
        .expect("etcd get");
    assert_eq!(got.kvs().first().map(|kv| kv.mod_revision() as u64), Some(counter_rv), "mod_revision == RV");
    let listed = api.get(&format!("/api/v1/namespaces/{NS}/configmaps")).await.json();
    let after =
        client.get("/registry/configmaps/", None).await.expect("etcd get").header().map(|h| h.revision());
    assert!(rv_of(&listed) <= after.unwrap_or(0) as u64, "a consistent list's RV is an etcd revision");

    let dir = tempfile::tempdir().expect("temp dir");
    let kache = cluster.start_kache(|c| c.freshness.etcd = Some(etcd(&etcd_url))).await;
    // etcd unreachable (a closed port): every read goes the apiserver's way.
    let dark = cluster.start_kache(|c| c.freshness.etcd = Some(etcd("http://127.0.0.1:9"))).await;
    // A wrong prefix for configmaps (one etcd holds nothing under, as a quiet resource's would look): its
    // verification against the store fails, and its reads go the apiserver's way.
    let wrong = cluster
        .start_kache(|c| {
            let mut config = etcd(&etcd_url);
            config.resource_prefixes = vec!["configmaps=/registry/nothing-here".into()];
            c.freshness.etcd = Some(config);
        })
        .await;
    let via = kubeconfig_endpoint("kache", &kache, &dir).await;
    let via_dark = kubeconfig_endpoint("kache-dark", &dark, &dir).await;
    let via_wrong = kubeconfig_endpoint("kache-wrong", &wrong, &dir).await;

    // The first reads after kache is ready, all at once (informers starting with it): the prefix watches
    // started with the stores and readiness waited for them, so none of these reads finds its watch not ready.
    let first = futures_util::future::join_all((0..FIRST_READS).map(|_| watch_list(&via))).await;
    assert_eq!(first.len(), FIRST_READS);
    let o = oracle(&kache);
    let not_ready = o.fallbacks.iter().find(|(why, _)| *why == "not_ready").map_or(0, |(_, n)| *n);
    eprintln!("first {FIRST_READS} WatchLists after readiness: {o:?}");
    assert_eq!(not_ready, 0, "the first reads found the prefix watch started: {o:?}");

    let (acked, stop) = (Arc::new(Acked::default()), Arc::new(AtomicBool::new(false)));
    let writing = tokio::spawn(writer(api.clone(), acked.clone(), stop.clone()));
    eventually("the writer is acknowledged", RECOVER, || async { acked.counter.load(SeqCst) > 0 }).await;

    // Steady: the oracle proves reads, gets included, and they are served from memory.
    until_proven(&kache, &via, &acked, "the oracle proves a read").await;
    let (proven, memory) = (oracle(&kache).proven, kache.stats().memory());
    for _ in 0..ROUNDS {
        assert_eq!(round(&via, &acked, true).await, 4);
    }
    let (proven, memory) = (oracle(&kache).proven - proven, kache.stats().memory() - memory);
    eprintln!("steady: {proven} of {} reads proven by etcd, {memory} served from memory", ROUNDS * 4);
    assert!(proven > 0 && memory >= proven, "served from memory: {:?}", oracle(&kache));

    // Disturbances: reads go on during each (an error answer allowed, a stale one never), every read after
    // it answers, and the oracle proves reads again.
    let reading = Arc::new(AtomicBool::new(true));
    let background = {
        let (via, acked, reading) = (via.clone(), acked.clone(), reading.clone());
        tokio::spawn(async move {
            let mut answered = 0;
            while reading.load(SeqCst) {
                answered += round(&via, &acked, false).await;
            }
            answered
        })
    };
    let mut cluster = cluster;
    for component in ["etcd", "kube-apiserver"] {
        cluster = tokio::task::spawn_blocking(move || {
            let mut cluster = cluster;
            cluster.restart(component);
            cluster
        })
        .await
        .expect("restart");
        until_proven(&kache, &via, &acked, &format!("the oracle proves reads after a {component} restart"))
            .await;
        for _ in 0..ROUNDS {
            assert_eq!(round(&via, &acked, true).await, 4);
        }
    }
    // Compaction at the current revision, as the apiserver's compactor does it.
    let mut client = etcd_client::Client::connect([etcd_url.as_str()], None).await.expect("etcd client");
    let rev =
        client.get("compact_rev_key", None).await.expect("etcd get").header().map_or(0, |h| h.revision());
    client.put("compact_rev_key", rev.to_string(), None).await.expect("etcd put");
    client.compact(rev, None).await.expect("etcd compact");
    until_proven(&kache, &via, &acked, "the oracle proves reads after a compaction").await;
    for _ in 0..ROUNDS {
        assert_eq!(round(&via, &acked, true).await, 4);
    }
    reading.store(false, SeqCst);
    let answered = background.await.expect("background reader");
    eprintln!("background: {answered} reads answered during the disturbances, none stale");

    // etcd unreachable: the same reads, linearizable, answered without an error, none proven by etcd.
    for _ in 0..ROUNDS {
        assert_eq!(round(&via_dark, &acked, true).await, 4);
    }
    let d = oracle(&dark);
    assert_eq!(d.proven, 0, "{d:?}");
    let fell_back: u64 = d.fallbacks.iter().map(|(_, n)| n).sum();
    assert!(fell_back >= ROUNDS as u64, "every consistent read fell back: {d:?}");
    // A prefix that does not match the store: never trusted.
    for _ in 0..ROUNDS {
        assert_eq!(round(&via_wrong, &acked, true).await, 4);
    }
    eventually("the wrong prefix fails its verification", RECOVER, || async {
        round(&via_wrong, &acked, true).await;
        oracle(&wrong).watch_states.contains(&("layout", 1))
    })
    .await;
    let w = oracle(&wrong);
    assert_eq!(w.proven, 0, "{w:?}");
    eprintln!("oracle: {:?}\nunreachable: {d:?}\nwrong prefix: {w:?}", oracle(&kache));

    stop.store(true, SeqCst);
    writing.await.expect("writer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_at_a_revision_ahead_of_the_store_are_proven_by_etcd() {
    // kache caches configmaps only: a write to a secret moves the revision past the configmaps' store, which
    // reaches it only by a bookmark (once a minute) or a proof. A read at that revision, NotOlderThan, is then
    // ahead of the store and reached upstream: without the oracle it waits or is forwarded; with it etcd's
    // revision proves the store at a revision past it, and it is served from memory.
    let _one = common::cluster::one_at_a_time().await;
    let Some((cluster, api)) = cluster_with_namespace("etcd-ahead").await else { return };
    let etcd_url = cluster.var("ETCD_URL").to_owned();
    let kache = cluster
        .start_kache(|c| {
            c.selection = Selection {
                include: Some(parse_resource_specs("configmaps").expect("specs")),
                exclude: Vec::new(),
            };
            c.lazy = false;
            c.freshness.etcd = Some(etcd(&etcd_url));
        })
        .await;
    let dir = tempfile::tempdir().expect("temp dir");
    let via = kubeconfig_endpoint("kache", &kache, &dir).await;
    let configmaps = format!("/api/v1/namespaces/{NS}/configmaps");
    let cm =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "written"}, "data": {"n": "1"}});
    create(&api, &configmaps, &cm).await;
    let secret =
        |n: usize| json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": format!("s{n}")}});
    let secrets = format!("/api/v1/namespaces/{NS}/secrets");
    let counters = |k: &Kache| (oracle(k).proven, k.stats().forwarded());

    let rv = create(&api, &secrets, &secret(1)).await;
    let before = counters(&kache);
    let path = format!("{configmaps}?resourceVersion={rv}&resourceVersionMatch=NotOlderThan");
    let r = via.get(&path).await;
    assert_eq!(r.status, StatusCode::OK, "{path}: {}", String::from_utf8_lossy(&r.body));
    let list = r.json();
    assert!(rv_of(&list) >= rv, "{path}: the list at {} is at least at {rv}", rv_of(&list));
    let items = list["items"].as_array().cloned().unwrap_or_default();
    assert!(items.iter().any(|i| i["metadata"]["name"] == "written"), "{path}: the write is listed: {list}");
    let after = counters(&kache);
    assert_eq!(after.1, before.1, "{path}: not forwarded: {:?}", kache.freshness().stats);
    assert!(after.0 > before.0, "{path}: proven by etcd: {:?}", oracle(&kache));

    // A get at a revision ahead of the store.
    let rv = create(&api, &secrets, &secret(2)).await;
    let before = counters(&kache);
    let path = format!("{configmaps}/written?resourceVersion={rv}");
    let r = via.get(&path).await;
    assert_eq!(r.status, StatusCode::OK, "{path}: {}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["data"]["n"], "1", "{path}");
    let after = counters(&kache);
    assert_eq!(after.1, before.1, "{path}: not forwarded: {:?}", kache.freshness().stats);
    assert!(after.0 > before.0, "{path}: proven by etcd: {:?}", oracle(&kache));
    let f = &kache.freshness().stats;
    assert_eq!(f.ahead_forwarded.load(SeqCst), 0, "{f:?}");
    assert!(f.ahead_reached.load(SeqCst) >= 2, "{f:?}");
}

/// The time of `read`, run `n` times one after the other: (median, p99) in ms.
async fn timed<F, Fut>(n: usize, mut read: F) -> (f64, f64)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut took = Vec::with_capacity(n);
    for _ in 0..n {
        let start = std::time::Instant::now();
        read().await;
        took.push(start.elapsed().as_secs_f64() * 1e3);
    }
    took.sort_by(f64::total_cmp);
    (took[n / 2], took[(n * 99 / 100).min(n - 1)])
}

/// Latency of consistent reads of a quiet namespace (3 configmaps, no writes; the nodes' leases move the
/// revision) in one run: a get and a WatchList's initial events, direct, through kache proven by etcd, and
/// through kache without etcd (the get forwarded, the WatchList proven by a bookmark). Prints medians and
/// p99; asserts nothing about time. `cargo test -p kache --test it kube_etcd::measure -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run by hand"]
async fn measure() {
    const N: usize = 300;
    /// A bookmark proof takes ~1–1.5 s: fewer of them.
    const PROOFS: usize = 40;
    let _one = common::cluster::one_at_a_time().await;
    let Some((cluster, api)) = cluster_with_namespace("etcd-measure").await else { return };
    let etcd_url = cluster.var("ETCD_URL").to_owned();
    for name in ["counter", "a", "b"] {
        let cm =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"n": "1"}});
        create(&api, &format!("/api/v1/namespaces/{NS}/configmaps"), &cm).await;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let with_etcd = cluster.start_kache(|c| c.freshness.etcd = Some(etcd(&etcd_url))).await;
    // Without etcd, and without a census: a consistent WatchList of the quiet namespace is proven by a bookmark.
    let without = cluster.start_kache(|c| c.freshness.census = false).await;
    let via_etcd = kubeconfig_endpoint("kache-etcd", &with_etcd, &dir).await;
    let via_plain = kubeconfig_endpoint("kache", &without, &dir).await;
    let get = |e: Endpoint| async move {
        let r = e.get(COUNTER).await;
        assert_eq!(r.status, StatusCode::OK);
    };
    let watch = |e: Endpoint| async move {
        assert!(watch_list(&e).await.len() >= 3);
    };
    // Warm each path once (the oracle's prefix watch, connections).
    for e in [&api, &via_etcd, &via_plain] {
        get(e.clone()).await;
        watch(e.clone()).await;
    }
    let proven = oracle(&with_etcd).proven;
    let proofs = without.freshness().stats.proofs_succeeded.load(SeqCst);
    let rows = [
        ("get, direct", timed(N, || get(api.clone())).await, N),
        ("get, kache + etcd (memory)", timed(N, || get(via_etcd.clone())).await, N),
        ("get, kache without etcd (forwarded)", timed(N, || get(via_plain.clone())).await, N),
        ("WatchList, direct", timed(N, || watch(api.clone())).await, N),
        ("WatchList, kache + etcd (memory)", timed(N, || watch(via_etcd.clone())).await, N),
        (
            "WatchList, kache, bookmark proof (memory)",
            timed(PROOFS, || watch(via_plain.clone())).await,
            PROOFS,
        ),
    ];
    println!("| read | n | median ms | p99 ms |\n|---|---|---|---|");
    for (what, (median, p99), n) in rows {
        println!("| {what} | {n} | {median:.2} | {p99:.2} |");
    }
    let proven = oracle(&with_etcd).proven - proven;
    let proofs = without.freshness().stats.proofs_succeeded.load(SeqCst) - proofs;
    println!(
        "reads proven by etcd: {proven} of {}; bookmark proofs: {proofs}\n{:?}",
        2 * N,
        oracle(&with_etcd)
    );
}
