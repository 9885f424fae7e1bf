//! Differential tests of content negotiation: every Accept header real clients send goes to the sim directly
//! and through kache, and status, Content-Type, Content-Encoding and the (decompressed) body bytes must be
//! equal. JSON and the PartialObjectMetadata views are answered from memory; Table, protobuf and the rest are
//! forwarded; nothing acceptable is a 406 kache writes itself.

use crate::common;

use std::io::Read;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use serde_json::{Value, json};

use common::*;
use kache::pipeline::ResponseEncoding;
use kache_sim::{Crd, Sim, SimHandle};

/// `kubectl get` (Table, falling back to JSON).
const KUBECTL_GET: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
/// `kubectl get -o json`.
const KUBECTL_JSON: &str = "application/json";
/// client-go's JSON default.
const CLIENT_GO_JSON: &str = "application/json, */*";
/// client-go's protobuf default.
const CLIENT_GO_PROTOBUF: &str = "application/vnd.kubernetes.protobuf, */*";
/// The metadata client's list (metadata informers: garbage collector, namespace controller, operators).
const METADATA_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1beta1,application/json";
/// The metadata client's get and watch.
const METADATA_OBJECT: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1,application/json";
/// A browser.
const BROWSER: &str = "*/*";

const ACCEPTS: &[&str] = &[
    KUBECTL_GET,
    KUBECTL_JSON,
    CLIENT_GO_JSON,
    CLIENT_GO_PROTOBUF,
    METADATA_LIST,
    METADATA_OBJECT,
    BROWSER,
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1beta1",
    "application/yaml",
    "application/xml",
    "text/plain",
];

/// Large enough annotations that the lists (full and metadata-only) pass the 128 KiB gzip threshold.
const BIG_ANNOTATION_BYTES: usize = 1500;
const BIG_CONFIGMAPS: usize = 120;

async fn seeded() -> (SimHandle, kache::app::Kache) {
    let crd = Crd::parse("example.com/v1/Widget/widgets/Namespaced").expect("crd");
    let sim = Sim::builder()
        .crd(crd)
        .bookmark_interval(Duration::from_millis(100))
        .wait_timeout(TEST_BLOCK_TIMEOUT)
        .start()
        .await
        .expect("sim starts");
    for ns in ["a", "b", "big", "empty"] {
        sim.create("namespaces", None, namespace(ns)).expect("namespace");
    }
    for ns in ["a", "b"] {
        for n in 0..3 {
            let mut p = pod(ns, &format!("p{n}"), &[("app", "x"), ("n", &n.to_string())], "node1");
            p["metadata"]["annotations"] = json!({"note": "<&>", "b": "2"});
            p["metadata"]["finalizers"] = json!(["example.com/keep"]);
            p["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "rs", "uid": "6f1f7b8e-0000-4000-8000-000000000001", "controller": true,
                "blockOwnerDeletion": true}]);
            sim.create("pods", Some(ns), p).expect("pod");
            sim.create("widgets.example.com", Some(ns), widget(ns, &format!("w{n}"))).expect("widget");
        }
    }
    let filler = "x".repeat(BIG_ANNOTATION_BYTES);
    for n in 0..BIG_CONFIGMAPS {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm{n:03}"), "namespace": "big", "annotations": {"filler": filler}},
            "data": {"k": "v"}});
        sim.create("configmaps", Some("big"), cm).expect("configmap");
    }
    let kache = start_kache(&sim.url(), |_| {}).await;
    (sim, kache)
}

/// A custom resource with every metadata member whose order the metadata view must fix.
fn widget(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": name, "namespace": ns, "labels": {"tier": "gold"}, "annotations": {"a": "1"},
            "finalizers": ["example.com/w"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                "uid": "6f1f7b8e-0000-4000-8000-000000000002", "controller": false}]},
        "spec": {"size": 3}})
}

/// Waits until kache has seen the sim's current revision on `path`. An `resourceVersion=0` list is always
/// answered from kache's memory and reports its store's revision (a NotOlderThan read ahead of the store is
/// forwarded, so its success says nothing about the store).
async fn caught_up(sim: &SimHandle, kache: &kache::app::Kache, path: &str) {
    // A quiet resource's upstream bookmarks carry the global revision only once a consistent read of it made
    // the upstream's watch cache catch up (as kube-apiserver's: tests/it/kube_bookmarks.rs); read it so.
    let r = get(&sim.url(), path).await;
    assert_eq!(r.status, 200, "GET {path} from the sim: {}", String::from_utf8_lossy(&r.body));
    let target = sim.revision();
    let url = kache.url();
    let probe = format!("{path}?resourceVersion=0");
    eventually("kache reaches the sim's revision", Duration::from_secs(10), || {
        let (url, probe) = (url.clone(), probe.clone());
        async move {
            let r = get(&url, &probe).await;
            let rv = serde_json::from_slice::<serde_json::Value>(&r.body)
                .ok()
                .and_then(|v| v["metadata"]["resourceVersion"].as_str().and_then(|s| s.parse::<u64>().ok()));
            rv >= Some(target)
        }
    })
    .await;
}

fn gunzip(r: &Resp) -> Vec<u8> {
    match r.headers.get("content-encoding").map(|v| v.as_bytes()) {
        Some(b"gzip") => {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(&r.body[..]).read_to_end(&mut out).expect("valid gzip");
            out
        }
        _ => r.body.to_vec(),
    }
}

fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(&b[..b.len().min(1500)]).into_owned()
}

/// Sends `path` with `headers` to both and asserts byte-equal answers; returns kache's decoded body.
async fn same(sim: &str, kache: &str, path: &str, headers: &[(&str, &str)]) -> (u16, Vec<u8>) {
    let (a, b) = (get_with(sim, path, headers).await, get_with(kache, path, headers).await);
    let what = format!("{path} {headers:?}");
    let (mut da, db) = (gunzip(&a), gunzip(&b));
    // Table ages tick with the clock: a direct answer taken after kache's may carry kache's second.
    if da != db {
        let again = gunzip(&get_with(sim, path, headers).await);
        if again == db {
            da = again;
        }
    }
    assert_eq!(a.status, b.status, "status of {what}\n sim:   {}\n kache: {}", show(&da), show(&db));
    for h in ["content-type", "content-encoding", "vary"] {
        assert_eq!(a.headers.get(h), b.headers.get(h), "{h} of {what}");
    }
    assert!(da == db, "body of {what}\n sim:   {}\n kache: {}", show(&da), show(&db));
    (b.status.as_u16(), db)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_accept_header_matches_the_apiserver() {
    let (sim, kache) = seeded().await;
    caught_up(&sim, &kache, "/api/v1/configmaps").await;
    caught_up(&sim, &kache, "/apis/example.com/v1/widgets").await;
    let (s, k) = (sim.url(), kache.url());
    let paths = [
        "/api/v1/pods",
        "/api/v1/namespaces/a/pods",
        "/api/v1/pods?limit=2",
        "/api/v1/pods?labelSelector=n%3D1",
        "/api/v1/namespaces/a/pods/p1",
        "/api/v1/namespaces/a/pods/missing",
        "/api/v1/namespaces/empty/pods",
        "/apis/example.com/v1/widgets",
        "/apis/example.com/v1/namespaces/b/widgets?limit=1",
        "/apis/example.com/v1/namespaces/b/widgets/w2",
        "/api/v1/namespaces/big/configmaps",
    ];
    let memory_before = kache.stats().memory();
    let forwarded_before = kache.stats().forwarded();
    let mut metadata_views = 0;
    let mut metadata_v1beta1 = 0;
    for accept in ACCEPTS {
        for path in paths {
            for gzip in [false, true] {
                let mut headers = vec![("accept", *accept)];
                if gzip {
                    headers.push(("accept-encoding", "gzip"));
                }
                let (status, body) = same(&s, &k, path, &headers).await;
                if status == 200 && body.starts_with(b"{\"kind\":\"PartialObjectMetadata") {
                    let v1beta1 = body.windows(33).any(|w| w == b"\"apiVersion\":\"meta.k8s.io/v1beta1");
                    if v1beta1 { metadata_v1beta1 += 1 } else { metadata_views += 1 }
                }
            }
        }
    }
    // Lists under METADATA_LIST and gets under METADATA_OBJECT: 8 lists + 2 gets that exist, with and without gzip.
    assert_eq!(metadata_views, (8 + 2) * 2, "metadata views answered");
    // The v1beta1 list view (forwarded: the sim answers it) for the 8 lists.
    assert_eq!(metadata_v1beta1, 8 * 2, "v1beta1 metadata lists");
    assert!(kache.stats().memory() > memory_before, "JSON and metadata views come from memory");
    assert!(
        kache.stats().forwarded() > forwarded_before,
        "YAML (and custom resources' protobuf) are forwarded"
    );
    let stats = kache.stats();
    // Tables of pods and config maps are printed from memory; custom resources' are forwarded.
    for e in [ResponseEncoding::Json, ResponseEncoding::PartialMetadata, ResponseEncoding::Table] {
        assert!(stats.encoding_memory(e) > 0, "{e:?} served from memory");
    }
    assert!(stats.encoding_forwarded(ResponseEncoding::Table) > 0, "custom resources' Tables forwarded");
    assert!(stats.encoding_forwarded(ResponseEncoding::Yaml) > 0, "YAML forwarded");
    assert_eq!(stats.encoding_memory(ResponseEncoding::Yaml), 0, "YAML never from memory");
    // Protobuf of built-in kinds comes from memory, byte for byte the sim's; custom resources'
    // protobuf is the upstream's to answer.
    assert!(stats.encoding_memory(ResponseEncoding::Protobuf) > 0, "protobuf of built-in kinds from memory");
    assert!(stats.encoding_forwarded(ResponseEncoding::Protobuf) > 0, "custom resources' protobuf forwarded");

    // Pretty output of a metadata list, and the metadata view as kubectl asks with ?pretty.
    same(&s, &k, "/api/v1/namespaces/a/pods?pretty=true", &[("accept", METADATA_LIST)]).await;
    same(&s, &k, "/apis/example.com/v1/namespaces/a/widgets/w0?pretty=true", &[("accept", METADATA_OBJECT)])
        .await;

    // The big metadata list is compressed as the apiserver would.
    let r = get_with(
        &k,
        "/api/v1/namespaces/big/configmaps",
        &[("accept", METADATA_LIST), ("accept-encoding", "gzip")],
    )
    .await;
    assert_eq!(r.headers.get("content-encoding").map(|v| v.as_bytes()), Some(&b"gzip"[..]));
    let v: Value = serde_json::from_slice(&gunzip(&r)).expect("json");
    assert_eq!(v["kind"], "PartialObjectMetadataList");
    assert_eq!(v["items"].as_array().map(Vec::len), Some(BIG_CONFIGMAPS));
    assert!(v["items"][0].get("data").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_acceptable_answers_match() {
    let (sim, kache) = seeded().await;
    let (s, k) = (sim.url(), kache.url());
    let forwarded_before = kache.stats().forwarded();
    for accept in ["application/xml", "text/plain", "application/json;as=Foo;g=meta.k8s.io;v=v1", "image/*"] {
        for path in [
            "/api/v1/pods",
            "/api/v1/namespaces/a/pods/p0",
            "/api/v1/pods?watch=true&timeoutSeconds=1",
            "/apis/example.com/v1/widgets",
        ] {
            let (status, body) = same(&s, &k, path, &[("accept", accept)]).await;
            assert_eq!(status, 406, "{path} {accept}: {}", show(&body));
        }
    }
    // go-restful's route selection (built-in kinds only) matches bare media types exactly: no `type/*`,
    // case-sensitive; the custom resource's handler negotiates `application/*` as JSON.
    for accept in ["application/*", "APPLICATION/JSON"] {
        for path in
            ["/api/v1/pods", "/api/v1/namespaces/a/pods/p0", "/api/v1/pods?watch=true&timeoutSeconds=1"]
        {
            let (status, body) = same(&s, &k, path, &[("accept", accept)]).await;
            assert_eq!(status, 406, "{path} {accept}: {}", show(&body));
        }
    }
    assert_eq!(kache.stats().forwarded(), forwarded_before, "406s are answered by kache itself");
    // YAML cannot stream: a watch asking only for it gets the stream 406, which the apiserver writes in the
    // negotiated type (YAML): the upstream's to answer.
    let (status, body) =
        same(&s, &k, "/api/v1/pods?watch=true&timeoutSeconds=1", &[("accept", "application/yaml")]).await;
    assert_eq!(status, 406);
    assert!(show(&body).contains("application/json;stream=watch"), "{}", show(&body));
    assert_eq!(kache.stats().forwarded(), forwarded_before + 1, "the stream 406 is forwarded");
}

/// Reads a watch stream's lines until `done` says so (or the stream ends).
async fn watch_lines(base: &str, path: &str, accept: &str, done: impl Fn(&[String]) -> bool) -> Vec<String> {
    let req = Request::get(format!("{base}{path}"))
        .header("accept", accept)
        .body(Empty::<Bytes>::new())
        .expect("req");
    let resp = client().request(req).await.expect("watch response");
    assert_eq!(resp.status(), 200, "watch {path}");
    assert_eq!(resp.headers().get("content-type").map(|v| v.as_bytes()), Some(&b"application/json"[..]));
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    let mut lines = Vec::new();
    let read = async {
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { break };
            if let Ok(data) = frame.into_data() {
                buf.extend_from_slice(&data);
                while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=nl).collect();
                    lines.push(String::from_utf8_lossy(&line[..nl]).into_owned());
                }
                if done(&lines) {
                    break;
                }
            }
        }
    };
    // A stream that stops early shows up as a difference in the caller's assertions.
    let _ = tokio::time::timeout(Duration::from_secs(10), read).await;
    lines
}

fn is_bookmark(line: &str) -> bool {
    line.starts_with("{\"type\":\"BOOKMARK\"")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_informer_list_and_watch_match() {
    let (sim, kache) = seeded().await;
    caught_up(&sim, &kache, "/apis/example.com/v1/widgets").await;
    let (s, k) = (sim.url(), kache.url());
    for resource in ["/api/v1/namespaces/a/pods", "/apis/example.com/v1/namespaces/a/widgets"] {
        // The informer's list.
        let (_, body) =
            same(&s, &k, &format!("{resource}?limit=500&resourceVersion=0"), &[("accept", METADATA_LIST)])
                .await;
        let list: Value = serde_json::from_slice(&body).expect("list");
        let rv = list["metadata"]["resourceVersion"].as_str().expect("rv").to_owned();

        // Its watch from the list's RV, on both, then changes.
        let path =
            format!("{resource}?watch=true&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds=30");
        let until_deleted = |lines: &[String]| lines.iter().any(|l| l.starts_with("{\"type\":\"DELETED\""));
        let (ws, wk, ()) = tokio::join!(
            watch_lines(&s, &path, METADATA_OBJECT, until_deleted),
            watch_lines(&k, &path, METADATA_OBJECT, until_deleted),
            async {
                // Both watches are open once they have had time to register; the events start after `rv`,
                // so a watch that opens later still replays them.
                let (plural, obj) = if resource.contains("widgets") {
                    ("widgets.example.com", {
                        let mut w = widget("a", "wnew");
                        w["metadata"].as_object_mut().map(|m| m.remove("finalizers"));
                        w
                    })
                } else {
                    ("pods", pod("a", "pnew", &[("app", "y")], "node2"))
                };
                let mut created = sim.create(plural, Some("a"), obj).expect("create");
                created["metadata"]["labels"]["app"] = json!("z");
                sim.update(plural, Some("a"), created).expect("update");
                sim.delete(plural, Some("a"), if plural == "pods" { "pnew" } else { "wnew" })
                    .expect("delete");
            }
        );
        let events = |lines: &[String]| lines.iter().filter(|l| !is_bookmark(l)).cloned().collect::<Vec<_>>();
        assert_eq!(events(&ws), events(&wk), "watch events of {resource}\n sim: {ws:?}\n kache: {wk:?}");
        assert_eq!(events(&wk).len(), 3, "{wk:?}");
        for line in &wk {
            let v: Value = serde_json::from_str(line).expect("frame");
            assert_eq!(v["object"]["kind"], "PartialObjectMetadata", "{line}");
            assert!(v["object"].get("spec").is_none(), "{line}");
        }

        // A watch-list in the metadata view: initial events and the initial-events-end bookmark.
        let path = format!(
            "{resource}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=30"
        );
        caught_up(&sim, &kache, "/apis/example.com/v1/widgets").await;
        caught_up(&sim, &kache, "/api/v1/pods").await;
        let until_end = |lines: &[String]| lines.iter().any(|l| l.contains("k8s.io/initial-events-end"));
        let ws = watch_lines(&s, &path, METADATA_OBJECT, until_end).await;
        let wk = watch_lines(&k, &path, METADATA_OBJECT, until_end).await;
        assert_eq!(ws, wk, "watch-list of {resource}");
        assert!(wk.last().is_some_and(|l| l.starts_with(
            "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{\"resourceVersion\":\""
        )), "{wk:?}");
    }
}
