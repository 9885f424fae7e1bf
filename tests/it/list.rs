//! Differential tests of get and list: the same requests go to the sim directly and through kache; status,
//! body (items, order, list resourceVersion, continue, remainingItemCount) and the headers that matter must be
//! equal, and kache must have answered from memory.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::Value;

/// Seeds a small cluster whose namespace names exercise the apiserver's key order (`kube-system` sorts
/// before `kube/`).
async fn seeded() -> (kache_sim::SimHandle, kache::app::Kache) {
    let sim = start_sim().await;
    // kube-system exists from the start, as in a real cluster.
    for ns in ["a", "b", "kube", "kube2"] {
        sim.create("namespaces", None, namespace(ns)).expect("namespace");
    }
    let mut i = 0;
    for ns in ["a", "b", "kube", "kube-system", "kube2"] {
        for n in 0..4 {
            i += 1;
            let app = if i % 2 == 0 { "x" } else { "y" };
            let node = if i % 3 == 0 { "n1" } else { "n2" };
            sim.create(
                "pods",
                Some(ns),
                pod(ns, &format!("p{n}"), &[("app", app), ("idx", &i.to_string())], node),
            )
            .expect("pod");
        }
    }
    let kache = start_kache(&sim.url(), |_| {}).await;
    (sim, kache)
}

/// Sends `path` to both and asserts equal answers. Returns the sim's JSON.
async fn same(sim: &str, kache: &str, path: &str) -> Value {
    let (a, b) = (get(sim, path).await, get(kache, path).await);
    assert_eq!(a.status, b.status, "status of {path}: sim {} / kache {}", body(&a.body), body(&b.body));
    assert_eq!(a.headers.get("retry-after"), b.headers.get("retry-after"), "Retry-After of {path}");
    assert_eq!(a.headers.get("content-type"), b.headers.get("content-type"), "Content-Type of {path}");
    let (ja, jb) = (a.json(), b.json());
    assert_eq!(ja, jb, "body of {path}\n sim:   {}\n kache: {}", body(&a.body), body(&b.body));
    ja
}

fn body(b: &[u8]) -> String {
    String::from_utf8_lossy(&b[..b.len().min(2000)]).into_owned()
}

/// Waits until kache's pods store has caught up with the sim's revision (events or bookmarks).
async fn caught_up(sim: &kache_sim::SimHandle, kache: &kache::app::Kache) {
    let target = sim.revision();
    let url = kache.url();
    eventually("kache reaches the sim's revision", Duration::from_secs(10), || {
        let url = url.clone();
        async move {
            let r = get(&url, "/api/v1/pods?resourceVersion=0").await;
            r.json()["metadata"]["resourceVersion"].as_str().and_then(|s| s.parse::<u64>().ok())
                >= Some(target)
        }
    })
    .await;
}

fn token(v: &Value) -> Option<String> {
    v["metadata"]["continue"].as_str().map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_table_rows_match_the_apiserver() {
    let (sim, kache) = seeded().await;
    caught_up(&sim, &kache).await;
    let (s, k) = (sim.url(), kache.url());
    let before = kache.stats().memory();

    // D1/D2: consistent reads, whole and paginated; namespace and key order.
    same(&s, &k, "/api/v1/pods").await;
    same(&s, &k, "/api/v1/namespaces/kube/pods").await;
    same(&s, &k, "/api/v1/namespaces/kube-system/pods?limit=3").await;
    // D4/D5: RV=0 ignores limit.
    same(&s, &k, "/api/v1/pods?resourceVersion=0&limit=2").await;
    same(&s, &k, "/api/v1/pods?resourceVersion=0&resourceVersionMatch=NotOlderThan&limit=2").await;
    // Selectors: page filling, no remainingItemCount, field selectors and the pod fields.
    same(&s, &k, "/api/v1/pods?labelSelector=app%3Dx&limit=2").await;
    same(&s, &k, "/api/v1/pods?labelSelector=app+in+(x,y),idx!%3D3").await;
    same(&s, &k, "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1").await;
    same(&s, &k, "/api/v1/pods?fieldSelector=status.phase%3DRunning,metadata.namespace!%3Da").await;
    // metadata.namespace narrowing on a cluster-wide list, with pagination.
    same(&s, &k, "/api/v1/pods?fieldSelector=metadata.namespace%3Dkube&limit=1").await;
    // Single-key list (staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go: Store.ListPredicate).
    same(&s, &k, "/api/v1/namespaces/a/pods?fieldSelector=metadata.name%3Dp1").await;
    // Cluster-scoped.
    same(&s, &k, "/api/v1/namespaces?limit=2").await;
    // Gets.
    same(&s, &k, "/api/v1/namespaces/a/pods/p1").await;
    same(&s, &k, "/api/v1/namespaces/a/pods/p1?resourceVersion=0").await;
    same(&s, &k, "/api/v1/namespaces/a/pods/missing").await;
    same(&s, &k, "/api/v1/namespaces/kube").await;

    let served = kache.stats().memory() - before;
    assert_eq!(served, 16, "every request above was served from memory");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_reads_and_continue_tokens_follow_snapshots() {
    let (sim, kache) = seeded().await;
    caught_up(&sim, &kache).await;
    let (s, k) = (sim.url(), kache.url());
    let rv1 = sim.revision();
    // Change the state after rv1: exact reads at rv1 must not see it.
    sim.create("pods", Some("a"), pod("a", "late", &[("app", "x")], "n1")).expect("pod");
    sim.delete("pods", Some("b"), "p0").expect("delete");
    caught_up(&sim, &kache).await;

    // D9, D10: exact at rv1 (legacy limit+RV and Exact), D8 NotOlderThan.
    same(&s, &k, &format!("/api/v1/pods?resourceVersion={rv1}&resourceVersionMatch=Exact")).await;
    same(&s, &k, &format!("/api/v1/pods?resourceVersion={rv1}&limit=3")).await;
    same(
        &s,
        &k,
        &format!("/api/v1/namespaces/a/pods?resourceVersion={rv1}&resourceVersionMatch=NotOlderThan&limit=2"),
    )
    .await;

    // A paginated list while writes happen: page 2 comes from page 1's snapshot on both sides.
    let p1 = same(&s, &k, "/api/v1/pods?limit=4").await;
    sim.create("pods", Some("kube"), pod("kube", "zz-new", &[], "n1")).expect("pod");
    caught_up(&sim, &kache).await;
    let mut tok = token(&p1).expect("page 1 has a token");
    let mut pages = 1;
    loop {
        let page = same(&s, &k, &format!("/api/v1/pods?limit=4&continue={tok}")).await;
        pages += 1;
        let names: Vec<&str> =
            page["items"].as_array().unwrap().iter().filter_map(|i| i["metadata"]["name"].as_str()).collect();
        assert!(!names.contains(&"zz-new"), "a page sequence never shows an object created after page 1");
        match token(&page) {
            Some(t) => tok = t,
            None => break,
        }
    }
    assert!(pages >= 5);
    // D11 exception: RV=0 + continue ignores the limit.
    let p1 = same(&s, &k, "/api/v1/pods?limit=2").await;
    same(&s, &k, &format!("/api/v1/pods?resourceVersion=0&limit=2&continue={}", token(&p1).unwrap())).await;
    assert_eq!(kache.stats().forwarded(), 0, "nothing was forwarded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_match_the_apiserver() {
    let (sim, kache) = seeded().await;
    let (s, k) = (sim.url(), kache.url());
    let tok = "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6Niwic3RhcnQiOiIvZjJcdTAwMDAifQ";
    for path in [
        "/api/v1/pods?limit=abc",
        "/api/v1/pods?timeoutSeconds=x",
        "/api/v1/pods?resourceVersionMatch=Exact",
        "/api/v1/pods?resourceVersion=0&resourceVersionMatch=Exact",
        "/api/v1/pods?resourceVersion=1&resourceVersionMatch=Bogus",
        "/api/v1/pods?sendInitialEvents=false",
        "/api/v1/pods?resourceVersion=abc",
        "/api/v1/pods?resourceVersion=-1",
        "/api/v1/pods?continue=abc!",
        "/api/v1/pods?continue=e30",
        &format!("/api/v1/pods?resourceVersion=5&continue={tok}"),
        &format!("/api/v1/pods?resourceVersionMatch=NotOlderThan&resourceVersion=1&continue={tok}"),
        "/api/v1/pods?labelSelector=a+in",
        "/api/v1/pods?labelSelector=a%3D%3D%3Db",
        "/api/v1/pods?fieldSelector=spec.foo%3Dx",
        "/api/v1/configmaps?fieldSelector=data.x%3Dy",
        "/api/v1/pods?fieldSelector=a%3Db%3Dc",
        // 504 after the (shortened) block timeout, with Retry-After: 1.
        "/api/v1/pods?resourceVersion=99999999&resourceVersionMatch=NotOlderThan",
        "/api/v1/namespaces/a/pods/p1?resourceVersion=99999999",
    ] {
        same(&s, &k, path).await;
    }
    assert_eq!(kache.stats().forwarded(), 0, "errors were answered from memory");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pretty_and_gzip_as_the_apiserver() {
    let (sim, kache) = seeded().await;
    caught_up(&sim, &kache).await;
    for headers in [&[("user-agent", "curl/8.0")][..], &[("accept-encoding", "gzip")][..]] {
        let a = get_with(&sim.url(), "/api/v1/namespaces/a/pods", headers).await;
        let b = get_with(&kache.url(), "/api/v1/namespaces/a/pods", headers).await;
        assert_eq!(a.body, b.body, "same bytes for {headers:?}");
        assert_eq!(a.headers.get("content-encoding"), b.headers.get("content-encoding"));
    }
    // Over 128 KiB, gzip applies on both sides.
    for n in 0..80 {
        let mut p = pod("b", &format!("big-{n}"), &[], "n1");
        p["metadata"]["annotations"] = serde_json::json!({"pad": "x".repeat(2048)});
        sim.create("pods", Some("b"), p).expect("pod");
    }
    caught_up(&sim, &kache).await;
    let a = get_with(&sim.url(), "/api/v1/pods", &[("accept-encoding", "deflate, gzip")]).await;
    let b = get_with(&kache.url(), "/api/v1/pods", &[("accept-encoding", "deflate, gzip")]).await;
    assert_eq!(a.headers.get("content-encoding").map(|v| v.as_bytes()), Some(&b"gzip"[..]));
    assert_eq!(b.headers.get("content-encoding").map(|v| v.as_bytes()), Some(&b"gzip"[..]));
    let gunzip = |b: &[u8]| {
        use std::io::Read;
        let mut s = String::new();
        flate2::read::GzDecoder::new(b).read_to_string(&mut s).expect("gzip");
        serde_json::from_str::<Value>(&s).expect("json")
    };
    assert_eq!(gunzip(&a.body), gunzip(&b.body));
}
