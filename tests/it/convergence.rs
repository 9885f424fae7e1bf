//! Convergence: kache's reflectors follow the sim while it churns and faults are injected (dropped watches,
//! compaction + restart forcing 410 and a relist, 5xx and 429 bursts, stalled streams, restarts). After the
//! faults stop, every store equals the sim's state byte for byte (keys, resourceVersions, object bytes), and
//! the events applied were real writes, never duplicated, never reordered. Several seeds.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;
use kache::codec::extract;
use kache::reflector::{ReflectorConfig, Registry, SyncState};
use kache::resource::ResourceInfo;
use kache::store::{EventType, Signal, Store};
use kache::upstream::Upstream;
use kache::upstream::discovery::{self, Selection, parse_resource_specs};
use kache_sim::{Crd, Sim, SimHandle};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

const NAMESPACES: [&str; 3] = ["default", "kube-system", "kube-public"];
const NAMES: usize = 12;
const OPS: usize = 300;
/// Longest wait for a store to reach the sim's state once faults stop.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(60);
/// The stall detector of the test reflectors.
const STALL: Duration = Duration::from_millis(1000);

/// How the reflectors sync: streaming lists, or paginated lists with small pages (continue tokens, and pages
/// that expire when the sim restarts).
#[derive(Clone, Copy, Debug)]
enum Mode {
    WatchList,
    Paginated,
}

fn config(mode: Mode) -> ReflectorConfig {
    ReflectorConfig {
        watch_list: matches!(mode, Mode::WatchList),
        page_size: 5,
        backoff_initial: Duration::from_millis(20),
        backoff_max: Duration::from_millis(300),
        stall_timeout: STALL,
        min_watch_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(5),
        ..ReflectorConfig::default()
    }
}

/// `resource` → (key, rv) of every object version the churn wrote.
type Written = Arc<Mutex<HashSet<(String, String, u64)>>>;

struct Recorder {
    /// (rv, key, deleted) of every applied event, in order.
    events: Arc<Mutex<Vec<(u64, String, bool)>>>,
    lagged: Arc<Mutex<bool>>,
}

/// Records every event a store applies, in order.
fn record(store: &Arc<Store>) -> Recorder {
    let events = Arc::new(Mutex::new(Vec::new()));
    let lagged = Arc::new(Mutex::new(false));
    let mut rx = store.subscribe();
    let (r, l) = (events.clone(), lagged.clone());
    tokio::spawn(async move {
        loop {
            match rx.recv().await {
                Ok(Signal::Event(e)) => {
                    r.lock().unwrap().push((e.rv, e.object.key.to_string(), e.kind == EventType::Deleted))
                }
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => *l.lock().unwrap() = true,
                Err(RecvError::Closed) => return,
            }
        }
    });
    Recorder { events, lagged }
}

fn object_rv(obj: &Value) -> u64 {
    obj.pointer("/metadata/resourceVersion").and_then(Value::as_str).and_then(|s| s.parse().ok()).unwrap_or(0)
}

fn key(ns: Option<&str>, name: &str) -> String {
    ns.map_or_else(|| name.to_owned(), |ns| format!("{ns}/{name}"))
}

/// One random write; records what it wrote.
fn churn_once(sim: &SimHandle, rng: &mut StdRng, written: &Written, step: usize) {
    let (resource, ns) = if rng.random_bool(0.7) {
        ("configmaps", Some(NAMESPACES[rng.random_range(0..NAMESPACES.len())]))
    } else {
        ("widgets.example.com", None)
    };
    let name = format!("obj-{}", rng.random_range(0..NAMES));
    let exists = sim.get(resource, ns, &name).is_ok();
    let result = if !exists {
        let obj = if resource == "configmaps" {
            json!({"metadata": {"name": name, "labels": {"step": step.to_string()}}, "data": {"v": step.to_string()}})
        } else {
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": {"size": step}})
        };
        sim.create(resource, ns, obj).map(Some)
    } else if rng.random_bool(0.7) {
        let patch = if resource == "configmaps" {
            json!({"data": {"v": step.to_string()}})
        } else {
            json!({"spec": {"size": step}})
        };
        sim.merge_patch(resource, ns, &name, patch).map(Some)
    } else {
        sim.delete(resource, ns, &name).map(|_| None)
    };
    if let Ok(Some(obj)) = result {
        let plural = resource.split('.').next().unwrap_or(resource).to_owned();
        written.lock().unwrap().insert((plural, key(ns, &name), object_rv(&obj)));
    }
}

fn clone_get(req: &Request<kache::front::body::Body>) -> Request<kache::front::body::Body> {
    Request::get(req.uri().clone())
        .header("accept", "application/json")
        .body(kache::front::body::empty())
        .unwrap()
}

/// The sim's current state of a resource as the bytes it sends: a plain consistent list, items completed with
/// their type meta exactly as the reflector stores them.
async fn sim_state(upstream: &Upstream, info: &ResourceInfo) -> BTreeMap<String, (u64, Bytes)> {
    let uri = format!("{}/{}", info.gvr.path_prefix(), info.gvr.resource);
    let req =
        Request::get(uri).header("accept", "application/json").body(kache::front::body::empty()).unwrap();
    let mut attempts = 0;
    let resp = loop {
        // The sim's restarts reset pooled connections: retry those (this is the test's client, not kache's).
        match upstream.send(clone_get(&req)).await {
            Ok(resp) => break resp,
            Err(e) if attempts < 5 => {
                attempts += 1;
                eprintln!("retrying the verification list: {e}");
            }
            Err(e) => panic!("list the sim: {e}"),
        }
    };
    assert!(resp.status().is_success(), "list status {}", resp.status());
    let body = resp.into_body().collect().await.expect("list body").to_bytes();
    let parts = extract::split_list(&body).expect("a list");
    parts
        .items
        .iter()
        .map(|item| {
            let full = extract::with_type_meta(item, &info.kind, &info.api_version());
            let obj = extract::object_from_json(full, info).expect("a valid object");
            (obj.key.to_string(), (obj.resource_version, obj.raw))
        })
        .collect()
}

fn store_state(store: &Store) -> BTreeMap<String, (u64, Bytes)> {
    store
        .current()
        .objects
        .values()
        .map(|o| (o.key.to_string(), (o.resource_version, o.raw.clone())))
        .collect()
}

async fn converge(upstream: &Upstream, store: &Arc<Store>) {
    let info = store.info().clone();
    let mut rv = store.watch_rv();
    let deadline = tokio::time::Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let want = sim_state(upstream, &info).await;
        let have = store_state(store);
        if want == have {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            let missing: Vec<_> = want.keys().filter(|k| !have.contains_key(*k)).collect();
            let extra: Vec<_> = have.keys().filter(|k| !want.contains_key(*k)).collect();
            let differ: Vec<_> =
                want.iter().filter(|(k, v)| have.get(*k).is_some_and(|h| h != *v)).map(|(k, _)| k).collect();
            panic!(
                "{} did not converge: missing {missing:?}, extra {extra:?}, different {differ:?}",
                info.gvr
            );
        }
        // Re-check when the store moves (or periodically: a sim-side change needs no store signal).
        let _ = tokio::time::timeout(Duration::from_millis(200), rv.changed()).await;
    }
}

async fn run(seed: u64, mode: Mode) {
    let crd = Crd::parse("example.com/v1/Widget/widgets/Cluster").expect("crd");
    let sim = Sim::builder()
        .crd(crd)
        .bookmark_interval(Duration::from_millis(500))
        .compaction_interval(None)
        .start()
        .await
        .expect("sim starts");
    let upstream = Upstream::plain(&sim.url()).expect("upstream");
    let mut rng = StdRng::seed_from_u64(seed);
    let written: Written = Arc::default();
    // Some objects before kache starts (initial sync), then discovery selects what to cache.
    for step in 0..40 {
        churn_once(&sim, &mut rng, &written, step);
    }
    let registry = Registry::new(upstream.clone(), config(mode));
    registry.set_selection(Selection {
        include: Some(parse_resource_specs("configmaps,widgets.example.com").unwrap()),
        exclude: vec![],
    });
    let found = discovery::discover_all(&upstream).await.expect("discovery");
    let started = registry.apply_discovery(found);
    assert_eq!(started.len(), 2, "{started:?}");
    let mut stores = Vec::new();
    for gvr in &started {
        let store = loop {
            if let Some(store) = registry.get(gvr) {
                break store;
            }
            tokio::task::yield_now().await;
        };
        stores.push(store);
    }
    let recorders: Vec<Recorder> = stores.iter().map(record).collect();

    let t = tokio::time::Instant::now();
    // Churn with faults.
    for step in 40..OPS {
        churn_once(&sim, &mut rng, &written, step);
        if step % 25 == 0 {
            match rng.random_range(0..6) {
                0 => sim.drop_watches(),
                1 => sim.fail_next(rng.random_range(1..5), 500),
                2 => sim.fail_next(rng.random_range(1..4), 429),
                3 => {
                    sim.compact(None);
                    sim.restart().await;
                }
                4 => {
                    sim.stall_watches(true);
                    for s in 0..5 {
                        churn_once(&sim, &mut rng, &written, step * 1000 + s);
                    }
                    tokio::time::sleep(STALL * 2).await;
                    sim.stall_watches(false);
                }
                _ => sim.restart().await,
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..4))).await;
    }
    eprintln!("seed {seed} {mode:?}: churn took {:?}", t.elapsed());
    // A last, deterministic relist: the reflectors are behind a compacted, restarted sim. Open watches are
    // stalled and new requests fail, so no reflector can see the writes below before the restart (a new
    // watch's history replay would otherwise deliver them despite the stall).
    sim.stall_watches(true);
    sim.fail_next(u32::MAX, 503);
    for s in 0..3 {
        churn_once(&sim, &mut rng, &written, 1_000_000 + s);
    }
    // One write per resource for sure, so every reflector is behind.
    let cm = sim
        .create("configmaps", Some("default"), json!({"metadata": {"name": "final"}, "data": {"v": "x"}}))
        .expect("create final configmap");
    let widget = sim
        .create(
            "widgets.example.com",
            None,
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "final"}, "spec": {"size": 0}}),
        )
        .expect("create final widget");
    written.lock().unwrap().insert(("configmaps".into(), "default/final".into(), object_rv(&cm)));
    written.lock().unwrap().insert(("widgets".into(), "final".into(), object_rv(&widget)));
    sim.compact(None);
    sim.restart().await;
    // Nothing reaches the reflectors until requests are let through again: a store behind the restart's
    // revision must relist (its watch resumes below the new history floor and gets 410). One that saw the
    // writes anyway (the sim's stall is not instantaneous) may resume. The restart drops connections
    // asynchronously: wait until every reflector has seen its old watch end (its next request met the
    // injected 503), so no frame still in flight on an old connection lands after `behind` is sampled.
    let deadline = tokio::time::Instant::now() + CONVERGE_TIMEOUT;
    while !registry.statuses().iter().all(|s| s.last_error.as_deref().is_some_and(|e| e.contains("503"))) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "reflectors never saw the restart: {:#?}",
            registry.statuses()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let floor = sim.revision();
    let behind: Vec<bool> = stores.iter().map(|s| s.resource_version() < floor).collect();
    sim.fail_next(0, 200);
    sim.stall_watches(false);

    let t = tokio::time::Instant::now();
    for store in &stores {
        converge(&upstream, store).await;
    }
    // The reflectors settle into watching (no endless relist), and the stores still match.
    let deadline = tokio::time::Instant::now() + CONVERGE_TIMEOUT;
    while !registry.statuses().iter().all(|s| s.state == SyncState::Watching) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "reflectors never settled: {:#?}",
            registry.statuses()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for store in &stores {
        converge(&upstream, store).await;
    }
    eprintln!("seed {seed} {mode:?}: converged and settled in {:?}", t.elapsed());

    let written = written.lock().unwrap().clone();
    for (store, recorder) in stores.iter().zip(&recorders) {
        let gvr = &store.info().gvr;
        assert!(!*recorder.lagged.lock().unwrap(), "{gvr}: recorder lagged");
        let events = recorder.events.lock().unwrap().clone();
        assert!(!events.is_empty(), "{gvr}: no live events applied");
        for pair in events.windows(2) {
            assert!(pair[0].0 < pair[1].0, "{gvr}: events out of order or duplicated: {pair:?}");
        }
        // Every applied change is a version the churn wrote (deletions carry the deletion RV: not recorded).
        for (rv, key, deleted) in &events {
            let k = (gvr.resource.clone(), key.clone(), *rv);
            assert!(*deleted || written.contains(&k), "{gvr}: applied a version nobody wrote: {k:?}");
        }
    }
    let statuses = registry.statuses();
    assert_eq!(statuses.len(), 2);
    for s in &statuses {
        assert!(s.synced, "{s:?}");
        let was_behind = stores.iter().zip(&behind).any(|(store, b)| store.info().gvr == s.gvr && *b);
        assert!(!was_behind || s.relists >= 1, "a store behind the restarted sim must relist: {s:?}");
        assert!(s.watch_restarts >= 1, "{s:?}");
        assert_eq!(s.bad_frames, 0, "{s:?}");
    }
    assert!(registry.all_synced());
    drop(registry);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_list_seed_1() {
    run(1, Mode::WatchList).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_list_seed_7() {
    run(7, Mode::WatchList).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paginated_seed_42() {
    run(42, Mode::Paginated).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paginated_seed_5() {
    run(5, Mode::Paginated).await;
}
