//! A kache behind a kache (B → A → sim) in a real cluster's conditions, where other
//! resources (leases, events) move the global resourceVersion all the time, so the cached pods are quiet.
//!
//! A's store moves with the upstream's bookmarks; A passes every such move on to its watchers that allow
//! bookmarks as a BOOKMARK at once (at most one per watcher per second), so:
//! - B's store follows A's within a bookmark interval, not A's one-minute period. (The upstream's bookmarks
//!   of quiet pods carry a foreign write's revision only once a consistent read of pods made its watch cache
//!   catch up, as the apiserver's do: tests/it/kube_bookmarks.rs.)
//! - B proves its consistent reads fresh with a short watch on A whose first frame is such a bookmark, and
//!   serves them from memory, with the sim's answers, while staying linearizable.

use crate::common;

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use common::*;
use kache::app::Kache;
use kache::upstream::discovery::{Selection, parse_resource_specs};
use kache_sim::{Sim, SimHandle};
use serde_json::Value;

/// The upstream's bookmark period, shortened from the apiserver's minute: B proves a read fresh once A's
/// store moved past the read's probe, that is within one such period.
const UPSTREAM_BOOKMARK_PERIOD: Duration = Duration::from_millis(250);
/// Background writes per second to leases and events while a test runs.
const FOREIGN_RATE: f64 = 100.0;
const NAMESPACES: [&str; 3] = ["n0", "n1", "n2"];
const PODS_PER_NAMESPACE: usize = 20;
/// Consistent reads through B before counting (the first ones may meet a store still settling).
const WARM_UP: usize = 3;
/// Consistent reads through B that are counted.
const READS: usize = 30;

/// The sim (pods, foreign writes), kache A in front of it and kache B in front of A, both caching pods.
async fn chain() -> (SimHandle, Kache, Kache) {
    let sim = Sim::builder()
        .bookmark_interval(UPSTREAM_BOOKMARK_PERIOD)
        .wait_timeout(TEST_BLOCK_TIMEOUT)
        .start()
        .await
        .expect("sim starts");
    common::seed_pods(&sim, &NAMESPACES, PODS_PER_NAMESPACE);
    let pods_only = |c: &mut kache::app::Config| {
        c.selection =
            Selection { include: Some(parse_resource_specs("pods").expect("specs")), exclude: Vec::new() };
        c.lazy = false;
    };
    let a = start_kache(&sim.url(), pods_only).await;
    let b = start_kache(&a.url(), |c| {
        pods_only(c);
        // The test's reads are small; requests are made free against their bytes, so that a proof (which
        // waits for A's next bookmark) pays off for them as it does for big reads and WatchLists, and every
        // consistent read through B tries it.
        c.freshness.request_bytes = 1;
    })
    .await;
    sim.set_foreign_writes(FOREIGN_RATE);
    (sim, a, b)
}

fn show(r: &Resp) -> String {
    String::from_utf8_lossy(&r.body[..r.body.len().min(1000)]).into_owned()
}

/// `ns/name@resourceVersion` of every item, in order.
fn items(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .map(|i| {
            let m = &i["metadata"];
            format!(
                "{}/{}@{}",
                m["namespace"].as_str().unwrap_or(""),
                m["name"].as_str().unwrap_or(""),
                m["resourceVersion"].as_str().unwrap_or("")
            )
        })
        .collect()
}

fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"].as_str().and_then(|s| s.parse().ok()).expect("numeric resourceVersion")
}

/// The revision of `kache`'s pods store (an RV=0 list answers with it).
async fn store_rv(kache: &Kache) -> u64 {
    let r = get(&kache.url(), "/api/v1/pods?resourceVersion=0&limit=1").await;
    assert_eq!(r.status, 200, "{}", show(&r));
    rv_of(&r.json())
}

/// One consistent read through B (the `i`-th: a namespace list, a get or the full list), checked against the
/// sim's own state (no pod is written meanwhile) and against the revision before it.
async fn consistent_read(sim: &SimHandle, b: &Kache, i: usize) {
    let before = sim.revision();
    let ns = NAMESPACES[i % NAMESPACES.len()];
    let (path, want) = match i % 3 {
        0 => {
            (format!("/api/v1/namespaces/{ns}/pods"), Some(items(&sim.list("pods", Some(ns)).expect("list"))))
        }
        1 => (format!("/api/v1/namespaces/{ns}/pods/p{:03}", i % PODS_PER_NAMESPACE), None),
        _ => ("/api/v1/pods".to_owned(), Some(items(&sim.list("pods", None).expect("list")))),
    };
    let r = get(&b.url(), &path).await;
    assert_eq!(r.status, 200, "{path} through B: {}", show(&r));
    let got = r.json();
    match want {
        Some(want) => {
            assert_eq!(items(got["items"].as_array().expect("items")), want, "{path}: the sim's pods");
            assert!(
                rv_of(&got) >= before,
                "{path}: the list at {} reflects the revision {before}",
                rv_of(&got)
            );
        }
        None => {
            let name = got["metadata"]["name"].as_str().unwrap_or("");
            assert_eq!(format!("{ns}/{name}"), format!("{ns}/p{:03}", i % PODS_PER_NAMESPACE), "{path}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kache_passes_its_proven_revision_on_to_a_kache_behind_it() {
    let (sim, a, b) = chain().await;
    // The pods are quiet: only the foreign writes move the revision. Once a consistent read through A made
    // the upstream's watch cache of pods catch up, B's store follows the sim's revision through A's
    // bookmarks (A's own periodic bookmark comes once a minute: far beyond this test).
    for round in 0..5 {
        let started = std::time::Instant::now();
        // A foreign write of our own makes sure the revision moved past B's store.
        let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("f{round}"), "namespace": "default"}});
        sim.create("configmaps", Some("default"), cm).expect("foreign write");
        let target = sim.revision();
        // A proves (or forwards) it: either way a consistent list of pods reaches the sim after the write.
        let r = get(&a.url(), "/api/v1/pods").await;
        assert_eq!(r.status, 200, "{}", show(&r));
        eventually(
            &format!("B's pods store reaches the sim's revision {target}"),
            Duration::from_secs(20),
            || async { store_rv(&b).await >= target },
        )
        .await;
        eprintln!("chain: round {round}: B's store reached the sim's revision after {:?}", started.elapsed());
    }
    let b_rv = store_rv(&b).await;
    assert!(store_rv(&a).await >= b_rv, "B never runs ahead of A");
    assert!(sim.foreign_writes() > 0, "the background workload ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistent_reads_through_a_chain_are_served_from_memory_and_linearizable() {
    let (sim, _a, b) = chain().await;
    for i in 0..WARM_UP {
        consistent_read(&sim, &b, i).await;
    }
    let f = &b.freshness().stats;
    let fresh = f.fresh.load(Relaxed);
    let not_fresh = f.lagging.load(Relaxed) + f.quiet.load(Relaxed) + f.probe_errors.load(Relaxed);
    for i in 0..READS {
        consistent_read(&sim, &b, WARM_UP + i).await;
    }
    let (fresh, not_fresh) = (
        f.fresh.load(Relaxed) - fresh,
        f.lagging.load(Relaxed) + f.quiet.load(Relaxed) + f.probe_errors.load(Relaxed) - not_fresh,
    );
    eprintln!(
        "chain: {READS} consistent reads through B: {fresh} from memory ({} proven by A's bookmarks), \
         {not_fresh} forwarded; B: {} proofs ({} succeeded), {} probes",
        f.proven.load(Relaxed),
        f.proofs.load(Relaxed),
        f.proofs_succeeded.load(Relaxed),
        f.probes.load(Relaxed),
    );
    assert_eq!(fresh + not_fresh, READS as u64, "every counted read was decided once");
    assert!(
        fresh * 10 >= READS as u64 * 9,
        "at least 90% of the consistent reads through B were served from memory: {fresh} of {READS}"
    );
    assert!(sim.foreign_writes() > 0, "the background workload ran");

    // Linearizable all the same: a pod written directly to the sim is in the next consistent read through B.
    for round in 0..5 {
        let ns = NAMESPACES[round % NAMESPACES.len()];
        let name = format!("new-{round}");
        sim.create("pods", Some(ns), pod(ns, &name, &[], "node-1")).expect("pod");
        let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
        let r = get(&b.url(), &path).await;
        assert_eq!(r.status, 200, "{path}: the consistent get through B sees the write: {}", show(&r));
        let path = format!("/api/v1/namespaces/{ns}/pods");
        let list = get(&b.url(), &path).await;
        assert_eq!(list.status, 200, "{path}: {}", show(&list));
        let want = items(&sim.list("pods", Some(ns)).expect("list"));
        assert_eq!(items(list.json()["items"].as_array().expect("items")), want, "{path} after the write");
        // And deleted again: the next consistent get through B answers 404.
        sim.delete("pods", Some(ns), &name).expect("delete");
        let r = get(&b.url(), &format!("/api/v1/namespaces/{ns}/pods/{name}")).await;
        assert_eq!(r.status, 404, "the consistent get through B sees the deletion: {}", show(&r));
    }
}
