//! kube-rs through kache: reflectors (list-then-watch and streaming lists) converge to the sim's state under
//! churn, restarts of kache (a new kache on the same port) and restarts of the sim; a controller-like loop
//! writes through kache and reads its own writes. Under foreign writes (a real cluster's leases and events
//! moving the global revision), paginated lists and reflectors get no 504 and see the sim's pods.

use crate::common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::net::TcpListener;

use kache::app::{Config, Kache};
use kache_sim::workload::{Workload, churn_ops};
use kache_sim::{Sim, SimHandle};

use common::{TEST_BLOCK_TIMEOUT, start_sim};

/// How long a reflector may take to reach the sim's state after the churn stops.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(45);
/// Pod operations of each churn phase.
const CHURN_OPS: u64 = 150;
/// Read-modify-write rounds of the controller loop.
const CONTROLLER_ROUNDS: u32 = 25;

/// (`ns/name`, resourceVersion) of every pod.
type PodState = BTreeMap<String, String>;

fn workload() -> Workload {
    Workload { namespaces: 4, pods: 120, nodes: 3, churn_per_sec: 0.0, seed: 11 }
}

fn sim_state(sim: &SimHandle) -> PodState {
    let pods = sim.list("pods", None).expect("list pods");
    pods.iter()
        .map(|p| {
            let ns = p["metadata"]["namespace"].as_str().unwrap_or_default();
            let name = p["metadata"]["name"].as_str().unwrap_or_default();
            let rv = p["metadata"]["resourceVersion"].as_str().unwrap_or_default();
            (format!("{ns}/{name}"), rv.to_owned())
        })
        .collect()
}

fn reflector_state(store: &Store<Pod>) -> PodState {
    store
        .state()
        .iter()
        .map(|p| {
            let key = format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any());
            (key, p.resource_version().unwrap_or_default())
        })
        .collect()
}

/// kache in front of `upstream` on `addr` (an ephemeral port when the port is 0), synced.
async fn start_kache_on(upstream: &str, addr: SocketAddr) -> Kache {
    let mut config = Config::for_url(upstream);
    config.handler.block_timeout = TEST_BLOCK_TIMEOUT;
    config.handler.watch.wait_timeout = TEST_BLOCK_TIMEOUT;
    config.freshness.latency_bound = Duration::from_secs(2);
    // Small consistent reads are forwarded by default; probe so these clients exercise the memory path.
    config.freshness.probe_small_reads = true;
    // The old kache's port may take a moment to be released after its shutdown.
    let mut attempt = 0;
    let listener = loop {
        match TcpListener::bind(addr).await {
            Ok(l) => break l,
            Err(e) if attempt < 50 => {
                attempt += 1;
                tracing::debug!(error = %e, "port still busy");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("binding {addr}: {e}"),
        }
    };
    let kache = Kache::start(config, listener).await.expect("kache starts");
    tokio::time::timeout(Duration::from_secs(30), kache.wait_synced()).await.expect("kache syncs");
    kache
}

fn client_for(kache: &Kache) -> Client {
    Client::try_from(kube::Config::new(kache.url().parse().expect("url"))).expect("client")
}

/// Waits until the reflector holds exactly the sim's pods at the sim's resourceVersions.
async fn converges(what: &str, sim: &SimHandle, store: &Store<Pod>) {
    let want = sim_state(sim);
    let deadline = tokio::time::Instant::now() + CONVERGE_TIMEOUT;
    let mut tick = tokio::time::interval(Duration::from_millis(25));
    loop {
        tick.tick().await;
        let got = reflector_state(store);
        if got == want {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            let missing: Vec<_> = want.iter().filter(|(k, v)| got.get(*k) != Some(v)).take(5).collect();
            let extra: Vec<_> = got.iter().filter(|(k, v)| want.get(*k) != Some(v)).take(5).collect();
            panic!(
                "{what}: the reflector did not converge; missing/stale {missing:?}, extra/stale {extra:?}"
            );
        }
    }
}

/// Churns the sim directly and checks every operation was applied.
async fn churn(sim: &SimHandle, seed: u64) {
    let stats = churn_ops(sim.url(), Workload { seed, ..workload() }, CHURN_OPS).await;
    assert_eq!(stats.creates + stats.updates + stats.deletes, CHURN_OPS, "{stats:?}");
}

async fn reflector_survives_churn_and_restarts(config: watcher::Config) {
    let sim = start_sim().await;
    sim.seed(&workload()).expect("seeded");
    let mut kache = start_kache_on(&sim.url(), SocketAddr::from(([127, 0, 0, 1], 0))).await;
    let addr = kache.addr();

    let (store, writer) = reflector::store::<Pod>();
    let stream = watcher(Api::<Pod>::all(client_for(&kache)), config).default_backoff().reflect(writer);
    // Errors are expected while kache or the sim restart; the watcher retries with backoff.
    let consumer = tokio::spawn(stream.for_each(|_| async {}));
    tokio::time::timeout(CONVERGE_TIMEOUT, store.wait_until_ready())
        .await
        .expect("the reflector is ready in time")
        .expect("the store lives");
    converges("initial list", &sim, &store).await;

    churn(&sim, 1).await;
    converges("churn", &sim, &store).await;

    // A new kache on the same port: the client reconnects to it (resuming or relisting).
    kache.shutdown().await;
    churn(&sim, 2).await;
    kache = start_kache_on(&sim.url(), addr).await;
    churn(&sim, 3).await;
    converges("kache restart", &sim, &store).await;

    // The sim restarts (connections and watch history gone) and is compacted: kache relists.
    sim.restart().await;
    churn(&sim, 4).await;
    sim.compact(None);
    sim.drop_watches();
    churn(&sim, 5).await;
    converges("sim restart and compaction", &sim, &store).await;

    assert!(kache.stats().memory() > 0, "kache answered from memory");
    assert!(
        kache::serve::watch::stats(kache.metrics()).started > 0,
        "watches were served from memory (by the kache running now)"
    );
    consumer.abort();
    kache.shutdown().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_then_watch_reflector_converges_through_restarts() {
    reflector_survives_churn_and_restarts(watcher::Config::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_lists_reflector_converges_through_restarts() {
    reflector_survives_churn_and_restarts(watcher::Config::default().streaming_lists()).await;
}

/// A controller's read-modify-write loop through kache: every read after a write sees that write, so no
/// replace ever conflicts, and lists agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_reads_its_own_writes() {
    let sim = start_sim().await;
    sim.seed(&workload()).expect("seeded");
    let kache = start_kache_on(&sim.url(), SocketAddr::from(([127, 0, 0, 1], 0))).await;
    let api = Api::<ConfigMap>::namespaced(client_for(&kache), "ns-0");
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "counter", "labels": {"owner": "controller"}},
        "data": {"count": "0"}
    }))
    .expect("config map");
    api.create(&PostParams::default(), &cm).await.expect("created through kache");

    let churner = tokio::spawn(churn_ops(sim.url(), Workload { seed: 9, ..workload() }, CHURN_OPS));
    for round in 1..=CONTROLLER_ROUNDS {
        let mut cm = api.get("counter").await.expect("get through kache");
        let count: u32 =
            cm.data.as_ref().and_then(|d| d.get("count")).and_then(|c| c.parse().ok()).expect("count");
        assert_eq!(count, round - 1, "the get saw the previous round's write");
        cm.data.get_or_insert_default().insert("count".to_owned(), round.to_string());
        let written =
            api.replace("counter", &PostParams::default(), &cm).await.expect("no conflict: reads were fresh");
        let written_rv: u64 = written.resource_version().and_then(|r| r.parse().ok()).expect("rv");

        let read = api.get("counter").await.expect("get after write");
        assert_eq!(read.resource_version(), written.resource_version(), "round {round}: get sees the write");
        let listed = api.list(&ListParams::default().labels("owner=controller")).await.expect("list");
        let list_rv: u64 =
            listed.metadata.resource_version.as_deref().and_then(|r| r.parse().ok()).expect("rv");
        assert!(list_rv >= written_rv, "round {round}: the list is at least as new as the write");
        assert_eq!(listed.items.len(), 1);
        assert_eq!(
            listed.items[0].resource_version(),
            written.resource_version(),
            "round {round}: list sees it"
        );
    }
    let stats = churner.await.expect("churn joined");
    assert_eq!(stats.failures, 0, "{stats:?}");
    let upstream = sim.get("configmaps", Some("ns-0"), "counter").expect("in the sim");
    assert_eq!(upstream["data"]["count"], CONTROLLER_ROUNDS.to_string());
    assert!(kache.stats().memory() > 0, "reads were answered from memory");
    kache.shutdown().await;
    sim.shutdown().await;
}

/// Background writes per second to leases and events (a real cluster's foreign writes).
const FOREIGN_RATE: f64 = 100.0;

/// kube-rs against kache while leases and events move the global revision (the pods are quiet): pages
/// followed with a foreign write between them, and reflectors (paginated list-then-watch, streaming lists)
/// through churn. No request fails (a 504 would be an error here) and every answer equals the sim's pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_and_reflectors_under_foreign_writes() {
    // The apiserver's bookmark period: the pods' store is not moved by bookmarks during the test.
    let sim = Sim::builder()
        .bookmark_interval(Duration::from_secs(60))
        .wait_timeout(TEST_BLOCK_TIMEOUT)
        .foreign_writes(FOREIGN_RATE)
        .start()
        .await
        .expect("sim starts");
    sim.seed(&workload()).expect("seeded");
    let kache = start_kache_on(&sim.url(), SocketAddr::from(([127, 0, 0, 1], 0))).await;
    let pods = Api::<Pod>::all(client_for(&kache));

    // A paginated consistent list, a foreign write between pages: one revision, every pod once.
    let mut pages = 0;
    let mut got = PodState::new();
    let mut list_rv = None;
    let mut token: Option<String> = None;
    loop {
        let mut params = ListParams::default().limit(7);
        if let Some(t) = &token {
            params = params.continue_token(t);
        }
        let page = pods.list(&params).await.unwrap_or_else(|e| panic!("page {pages}: {e}"));
        pages += 1;
        match &list_rv {
            None => list_rv = page.metadata.resource_version.clone(),
            Some(rv) => {
                assert_eq!(page.metadata.resource_version.as_ref(), Some(rv), "page {pages}: one list")
            }
        }
        for p in &page.items {
            let key = format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any());
            assert!(got.insert(key, p.resource_version().unwrap_or_default()).is_none(), "a pod once");
        }
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            break;
        }
        let cm =
            serde_json::json!({"metadata": {"name": format!("between-{pages}"), "namespace": "default"}});
        sim.create("configmaps", Some("default"), cm).expect("foreign write");
    }
    assert!(pages > 10, "the list was paginated: {pages} pages");
    assert_eq!(got, sim_state(&sim), "the pages hold the sim's pods");

    // The churn seeds of the restart test above, in its order (each churn applies cleanly after the last).
    for (what, config, seed) in [
        ("paginated list-then-watch", watcher::Config::default().page_size(7), 1),
        ("streaming lists", watcher::Config::default().streaming_lists(), 2),
    ] {
        let (store, writer) = reflector::store::<Pod>();
        let errors = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = errors.clone();
        let stream = watcher(pods.clone(), config).default_backoff().reflect(writer);
        let consumer = tokio::spawn(stream.for_each(move |r| {
            if let Err(e) = r {
                seen.lock().expect("errors lock").push(e.to_string());
            }
            async {}
        }));
        tokio::time::timeout(CONVERGE_TIMEOUT, store.wait_until_ready())
            .await
            .expect("the reflector is ready in time")
            .expect("the store lives");
        converges(&format!("{what}: initial state"), &sim, &store).await;
        churn(&sim, seed).await;
        converges(&format!("{what}: churn"), &sim, &store).await;
        consumer.abort();
        assert_eq!(*errors.lock().expect("errors lock"), Vec::<String>::new(), "{what}: no watcher error");
    }
    assert!(sim.foreign_writes() > 0, "the background workload ran");
    assert!(kache.stats().memory() > 0, "kache answered from memory");
    kache.shutdown().await;
    sim.shutdown().await;
}
