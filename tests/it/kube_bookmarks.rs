//! The pre-deadline bookmark of a quiet resource after a foreign write, kube-apiserver 1.36 (the testbed's
//! cluster) against kache-sim: what kache's freshness proof (`src/fresh/proof.rs`) relies on.
//!
//! A watch with `allowWatchBookmarks=true` and `timeoutSeconds` gets a BOOKMARK shortly before its deadline
//! carrying the revision the resource's watch cache has reached. The cache learns of writes to *other*
//! resources only from etcd's progress notifications, which it asks for while a read waits for it to be
//! fresh (a consistent list, as kache's probe is) and otherwise gets every 10 minutes. So after a foreign
//! write the bookmark of a quiet resource carries a revision at or past that write only once a consistent
//! read of the resource came after the write. Both servers are checked for the same sequence of frames:
//! bookmarks only, then the end of the stream; their revisions against the foreign write's; their bodies
//! equal but for the revision. Times are not compared.

use crate::common;

use http::StatusCode;
use serde_json::{Value, json};

use common::cluster::Cluster;
use common::real::{Endpoint, rv_of, write_kubeconfig};

/// The quiet resource: nothing in the testbed writes secrets or reads them consistently while the test
/// runs (a rare reader's consistent list is what [`not_caught_up`] retries for).
const QUIET: &str = "/api/v1/namespaces/default/secrets";
/// The foreign writes: leases, as a real cluster's nodes renew theirs.
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
/// The watch's `timeoutSeconds`: the pre-deadline bookmark is due 2 s before it (kache's proof uses 3).
const TIMEOUT_SECONDS: u64 = 3;

/// A foreign write: a new lease; its resourceVersion.
async fn foreign_write(side: &Endpoint, n: &mut u32) -> u64 {
    *n += 1;
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": format!("bookmark-foreign-{}-{n}", std::process::id())},
        "spec": {"holderIdentity": "kache-test"}
    });
    common::real::create(side, LEASES, &lease).await
}

/// A consistent list of the quiet resource (kache's probe); its resourceVersion.
async fn consistent_list(side: &Endpoint) -> u64 {
    let r = side.get(QUIET).await;
    assert_eq!(r.status, StatusCode::OK, "{}: GET {QUIET}: {}", side.name, String::from_utf8_lossy(&r.body));
    rv_of(&r.json())
}

/// Every frame of a watch of the quiet resource from `from`, to the end of the stream.
async fn watch_to_the_end(side: &Endpoint, from: u64) -> Vec<Value> {
    let path = format!(
        "{QUIET}?watch=1&allowWatchBookmarks=true&timeoutSeconds={TIMEOUT_SECONDS}&resourceVersion={from}"
    );
    let mut w = side.watch(&path, &[]).await;
    if w.status != StatusCode::OK {
        let (status, body) = (w.status, w.rest().await);
        panic!("{}: {path}: {status} {}", side.name, String::from_utf8_lossy(&body));
    }
    let mut frames = Vec::new();
    while let Some(line) = w.line().await {
        let frame: Value = serde_json::from_slice(&line)
            .unwrap_or_else(|e| panic!("{}: {path}: a frame that is not JSON ({e}): {line:?}", side.name));
        frames.push(frame);
    }
    frames
}

/// The bookmarks' revisions; panics unless the frames are one bookmark or more and nothing else (the
/// apiserver may send the pre-deadline bookmark twice: its buckets are whole seconds).
fn bookmarks(side: &Endpoint, what: &str, frames: &[Value]) -> Vec<u64> {
    assert!(!frames.is_empty(), "{}: {what}: the stream ended without a bookmark", side.name);
    frames
        .iter()
        .map(|f| {
            assert_eq!(f["type"], "BOOKMARK", "{}: {what}: only bookmarks, got {f}", side.name);
            rv_of(&f["object"])
        })
        .collect()
}

/// A bookmark's body with its revision taken out: the shape both servers must share.
fn shape(frame: &Value) -> Value {
    let mut f = frame.clone();
    f["object"]["metadata"]["resourceVersion"] = json!("N");
    f
}

/// The bookmark after a foreign write that no read of the quiet resource followed: its revision is
/// below the write's. A consistent read by someone else, or etcd's periodic progress notification,
/// may land in the window once; it cannot twice in a row.
async fn not_caught_up(side: &Endpoint, from: u64, n: &mut u32) -> Value {
    let mut last = None;
    for _ in 0..2 {
        let foreign = foreign_write(side, n).await;
        let frames = watch_to_the_end(side, from).await;
        let rvs = bookmarks(side, "not caught up", &frames);
        if rvs.iter().all(|rv| *rv < foreign) {
            return frames[0].clone();
        }
        last = Some((foreign, rvs));
    }
    panic!("{}: bookmarks show a foreign write no read of the resource followed: {last:?}", side.name);
}

/// The sequence on one server: (the caught-up bookmark, the not-caught-up bookmark).
async fn sequence(side: &Endpoint) -> (Value, Value) {
    let mut n = 0;
    // Where every watch starts: before the first foreign write, after every write of the quiet resource.
    let from = foreign_write(side, &mut n).await - 1;
    // A foreign write, then a consistent read of the quiet resource (kache's probe): the pre-deadline
    // bookmark carries the read's revision, at or past the write.
    let foreign = foreign_write(side, &mut n).await;
    let probed = consistent_list(side).await;
    assert!(probed >= foreign, "{}: a consistent list at {probed} after a write at {foreign}", side.name);
    let frames = watch_to_the_end(side, from).await;
    let rvs = bookmarks(side, "caught up", &frames);
    assert!(rvs[0] >= probed, "{}: the first bookmark {rvs:?} is at least the probe's {probed}", side.name);
    // Then a foreign write no read of the resource follows: its bookmarks stay behind it.
    let behind = not_caught_up(side, from, &mut n).await;
    (frames[0].clone(), behind)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pre_deadline_bookmark_after_a_foreign_write_is_the_apiservers() {
    // Nothing else may read the quiet resource consistently meanwhile.
    let _one = common::cluster::one_at_a_time().await;
    let Some(cluster) = tokio::task::spawn_blocking(Cluster::shared).await.expect("cluster start") else {
        return;
    };
    let real = Endpoint::from_kubeconfig("kube-apiserver", &cluster.admin_kubeconfig()).await;
    // The sim with the apiserver's bookmark period: the pre-deadline bookmark is the only one a 3 s watch
    // gets, as from the apiserver.
    let sim = kache_sim::Sim::builder().start().await.expect("sim starts");
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("sim.kubeconfig");
    write_kubeconfig(&kubeconfig, &sim.url());
    let simulated = Endpoint::from_kubeconfig("kache-sim", &kubeconfig).await;

    let (real_caught_up, real_behind) = sequence(&real).await;
    let (sim_caught_up, sim_behind) = sequence(&simulated).await;
    assert_eq!(
        shape(&sim_caught_up),
        shape(&real_caught_up),
        "the caught-up bookmark: sim vs kube-apiserver"
    );
    assert_eq!(shape(&sim_behind), shape(&real_behind), "the bookmark behind: sim vs kube-apiserver");
    sim.shutdown().await;
}
