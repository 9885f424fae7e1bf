//! Protobuf served from memory: kache transcodes its stored JSON to the apiserver's
//! protobuf, and what it answers is byte for byte what the upstream (the sim, itself held to the real Go
//! encoder by tests/protobuf.rs) answers directly: gets, lists in every resourceVersion mode, pages,
//! selectors, metadata views, Status errors and watch streams. Each test also proves the answers came from
//! kache's memory (`ResponseEncoding::Protobuf` counted as memory-served), and a real client-go informer in
//! protobuf runs through kache with churn.
//!
//! The informer test needs `informer-check` (built by `testbed/build.sh`): under
//! `KACHE_REQUIRE_TOOLS=1` it fails when that is missing.

use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use kache::pipeline::ResponseEncoding;
use kache::resource::Gvr;
use kache_sim::SimHandle;
use serde_json::json;

use common::{Resp, eventually, get_with, start_kache, start_sim};

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// client-go's Accept when configured for protobuf.
const CLIENT_GO_ACCEPT: &str = "application/vnd.kubernetes.protobuf, application/json";
/// A metadata informer's Accept for lists (protobuf first).
const META_LIST_ACCEPT: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
/// … and for gets and watches.
const META_ACCEPT: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

fn content_type(r: &Resp) -> &str {
    r.headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("")
}

fn assert_same_bytes(what: &str, kache: &[u8], sim: &[u8]) {
    if kache != sim {
        let at = kache.iter().zip(sim).position(|(a, b)| a != b).unwrap_or(kache.len().min(sim.len()));
        panic!(
            "{what}: kache's protobuf differs from the sim's at byte {at} (kache {} bytes, sim {})\n kache: {:02x?}\n   sim: {:02x?}",
            kache.len(),
            sim.len(),
            &kache[at.saturating_sub(16)..kache.len().min(at + 32)],
            &sim[at.saturating_sub(16)..sim.len().min(at + 32)]
        );
    }
}

/// The sim with a workload and kache in front of it, caught up.
struct Fixture {
    sim: SimHandle,
    kache: kache::app::Kache,
}

impl Fixture {
    async fn start() -> Fixture {
        let sim = start_sim().await;
        // Nodes and namespaces of the workload, and pods of our own: the workload's pods carry
        // non-canonical quantities (`1000m`, `1024Mi`) that a real apiserver would have stored as `1` and
        // `1Gi`; the transcoder refuses them (Go would rewrite them), so those pods are forwarded — proven by
        // `objects_that_cannot_be_transcoded_are_forwarded`, not what this fixture measures.
        sim.seed(&kache_sim::workload::Workload {
            namespaces: 3,
            pods: 0,
            nodes: 3,
            churn_per_sec: 0.0,
            seed: 11,
        })
        .expect("workload seeded");
        for ns in ["ns-1", "ns-2", "ns-3"] {
            let _ = sim.create("namespaces", None, common::namespace(ns));
        }
        for i in 0..30 {
            let (ns, node) = (format!("ns-{}", 1 + i % 3), format!("node-{}", 1 + i % 3));
            let pod = common::pod(&ns, &format!("pod-{i:02}"), &[("app", &format!("app-{}", i % 4))], &node);
            sim.create("pods", Some(&ns), pod).expect("pod");
        }
        let kache = start_kache(&sim.url(), |_| {}).await;
        Fixture { sim, kache }
    }

    /// Waits until kache's store of `gvr` reached the sim's current revision (read through a list so that
    /// the resource is cached); returns that revision.
    async fn caught_up(&self, gvr: &Gvr, path: &str) -> u64 {
        let rev = self.sim.revision();
        let _ = get_with(&self.kache.url(), path, &[]).await;
        let registry = self.kache.registry().clone();
        let gvr = gvr.clone();
        eventually("kache reached the sim's revision", Duration::from_secs(20), || {
            let store = registry.get(&gvr);
            async move { store.is_some_and(|s| s.is_synced() && s.resource_version() >= rev) }
        })
        .await;
        rev
    }

    fn served_from_memory(&self) -> u64 {
        self.kache.stats().encoding_memory(ResponseEncoding::Protobuf)
    }

    fn forwarded(&self) -> u64 {
        self.kache.stats().encoding_forwarded(ResponseEncoding::Protobuf)
    }

    /// GETs `path` with `accept` from kache and from the sim; asserts the same status, content type and
    /// bytes (after gunzipping), and returns kache's answer.
    async fn same(&self, path: &str, accept: &str) -> Resp {
        self.same_with(path, &[("accept", accept)]).await
    }

    async fn same_with(&self, path: &str, headers: &[(&str, &str)]) -> Resp {
        let k = get_with(&self.kache.url(), path, headers).await;
        let s = get_with(&self.sim.url(), path, headers).await;
        assert_eq!(k.status, s.status, "GET {path}: kache {} / sim {}", k.status, s.status);
        assert_eq!(content_type(&k), content_type(&s), "GET {path}");
        let kb = gunzipped(&k);
        let sb = gunzipped(&s);
        assert_same_bytes(&format!("GET {path} ({headers:?})"), &kb, &sb);
        k
    }
}

fn gunzipped(r: &Resp) -> Vec<u8> {
    use std::io::Read;
    if r.headers.get(http::header::CONTENT_ENCODING).is_some_and(|v| v == "gzip") {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&r.body[..]).read_to_end(&mut out).expect("gzip");
        out
    } else {
        r.body.to_vec()
    }
}

/// The continue token of a protobuf list, read through the sim's decoder.
fn continue_of(body: &[u8]) -> Option<String> {
    let (_, _, raw) = kache_sim::proto::envelope::unwrap(body).expect("an envelope");
    // ListMeta is field 1 of every list kind; continue is its field 3.
    let meta = field(&raw, 1)?;
    field(meta, 3).map(|c| String::from_utf8_lossy(c).into_owned()).filter(|c| !c.is_empty())
}

/// The first length-delimited field `tag` of a message.
fn field(mut b: &[u8], tag: u64) -> Option<&[u8]> {
    fn varint(b: &[u8]) -> Option<(u64, &[u8])> {
        let mut v = 0u64;
        for (i, &byte) in b.iter().enumerate().take(10) {
            v |= u64::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                return Some((v, &b[i + 1..]));
            }
        }
        None
    }
    while !b.is_empty() {
        let (key, rest) = varint(b)?;
        match key & 7 {
            0 => b = varint(rest)?.1,
            2 => {
                let (len, rest) = varint(rest)?;
                let len = usize::try_from(len).ok()?;
                if key >> 3 == tag {
                    return rest.get(..len);
                }
                b = rest.get(len..)?;
            }
            _ => return None,
        }
    }
    None
}

const PODS: &str = "/api/v1/pods";

fn pods() -> Gvr {
    Gvr::new("", "v1", "pods")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gets_and_lists_match_the_sim_in_every_resource_version_mode() {
    let f = Fixture::start().await;
    let rev = f.caught_up(&pods(), PODS).await;
    for (gvr, path) in [
        (Gvr::new("", "v1", "nodes"), "/api/v1/nodes"),
        (Gvr::new("", "v1", "namespaces"), "/api/v1/namespaces"),
        (Gvr::new("apps", "v1", "deployments"), "/apis/apps/v1/deployments"),
    ] {
        f.caught_up(&gvr, path).await;
    }
    let before = f.served_from_memory();
    let pod = f.sim.list("pods", Some("ns-1")).expect("pods")[0]["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    let mut requests = 0;
    for accept in [CLIENT_GO_ACCEPT, PROTOBUF] {
        for base in [PODS, "/api/v1/namespaces/ns-1/pods", "/api/v1/nodes", "/apis/apps/v1/deployments"] {
            for rv in [
                "",
                "&resourceVersion=0",
                &format!("&resourceVersion={rev}&resourceVersionMatch=NotOlderThan"),
                &format!("&resourceVersion={rev}&resourceVersionMatch=Exact"),
            ] {
                f.same(&format!("{base}?x=1{rv}"), accept).await;
                requests += 1;
            }
            // Pages at the first page's revision, tokens and remainingItemCount as the apiserver's.
            let mut page = f.same(&format!("{base}?limit=4"), accept).await;
            requests += 1;
            while let Some(token) = continue_of(&page.body) {
                page = f.same(&format!("{base}?limit=4&continue={token}"), accept).await;
                requests += 1;
            }
        }
        // Selectors and the indexes behind them.
        for query in [
            "?labelSelector=app%3Dapp-1",
            "?fieldSelector=spec.nodeName%3Dnode-1",
            "?fieldSelector=metadata.namespace%3Dns-2&limit=3",
            "?labelSelector=app%3Dnone",
        ] {
            f.same(&format!("{PODS}{query}"), accept).await;
            requests += 1;
        }
        f.same(&format!("/api/v1/namespaces/ns-1/pods/{pod}"), accept).await;
        f.same(&format!("/api/v1/namespaces/ns-1/pods/{pod}?resourceVersion=0"), accept).await;
        f.same("/api/v1/nodes/node-1", accept).await;
        requests += 3;
    }
    // Metadata views: lists and gets.
    for path in [PODS, "/api/v1/namespaces/ns-2/pods?limit=5", "/api/v1/nodes"] {
        f.same(path, META_LIST_ACCEPT).await;
        requests += 1;
    }
    f.same(&format!("/api/v1/namespaces/ns-1/pods/{pod}"), META_ACCEPT).await;
    requests += 1;
    // gzip, as the apiserver compresses (over 128 KiB, level 1): a whole list and a metadata view.
    f.same_with(PODS, &[("accept", PROTOBUF), ("accept-encoding", "gzip")]).await;
    requests += 1;
    let served = f.served_from_memory() - before;
    assert!(served >= requests - 4, "protobuf answers from kache's memory: {served} of {requests}");
    // Errors answered from memory to a protobuf client are protobuf Status bodies, as the apiserver's.
    let before = f.served_from_memory();
    let missing = f.same("/api/v1/namespaces/ns-1/pods/missing", CLIENT_GO_ACCEPT).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(content_type(&missing), PROTOBUF);
    let bad = f.same(&format!("{PODS}?labelSelector=%3D%3D"), PROTOBUF).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(f.served_from_memory() - before, 2, "the errors were kache's own");
    // A JSON-first client still gets JSON errors.
    let json = f
        .same("/api/v1/namespaces/ns-1/pods/missing", "application/json, application/vnd.kubernetes.protobuf")
        .await;
    assert_eq!(content_type(&json), "application/json");
    f.kache.shutdown().await;
    f.sim.shutdown().await;
}

/// Whole lists are sent from the list body cache when the snapshot was listed before: the repeated list is
/// the sim's bytes still, in each encoding and view, and a write moves every later list to the new snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_whole_lists_are_the_sims_bytes_before_and_after_a_write() {
    let f = Fixture::start().await;
    f.caught_up(&pods(), PODS).await;
    let cases = [
        (PODS, PROTOBUF),
        ("/api/v1/namespaces/ns-1/pods", CLIENT_GO_ACCEPT),
        (PODS, META_LIST_ACCEPT),
        (PODS, "application/json"),
    ];
    let mut before = Vec::new();
    for (path, accept) in cases {
        let first = f.same(&format!("{path}?resourceVersion=0"), accept).await;
        let again = f.same(&format!("{path}?resourceVersion=0"), accept).await;
        assert_eq!(first.body, again.body, "GET {path} ({accept}) twice at one snapshot");
        assert_eq!(again.headers["content-length"], again.body.len().to_string().as_str());
        before.push(again.body);
    }
    let pod = common::pod("ns-1", "written-later", &[("app", "app-1")], "node-1");
    f.sim.create("pods", Some("ns-1"), pod).expect("pod");
    f.caught_up(&pods(), PODS).await;
    for ((path, accept), old) in cases.into_iter().zip(before) {
        let now = f.same(&format!("{path}?resourceVersion=0"), accept).await;
        assert_ne!(now.body, old, "GET {path} ({accept}) after a write is the new snapshot's list");
        f.same(&format!("{path}?resourceVersion=0"), accept).await;
    }
    f.kache.shutdown().await;
    f.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kache_protobuf_decodes_to_its_json() {
    let f = Fixture::start().await;
    f.caught_up(&pods(), PODS).await;
    let json = get_with(&f.kache.url(), "/api/v1/namespaces/ns-1/pods?limit=5", &[]).await.json();
    for item in json["items"].as_array().expect("items") {
        let name = item["metadata"]["name"].as_str().expect("name");
        let path = format!("/api/v1/namespaces/ns-1/pods/{name}");
        let pb = get_with(&f.kache.url(), &path, &[("accept", PROTOBUF)]).await;
        assert_eq!(content_type(&pb), PROTOBUF);
        let decoded = kache_sim::proto::envelope::decode_object(&pb.body).expect("kache's protobuf decodes");
        let js = get_with(&f.kache.url(), &path, &[]).await.json();
        // Protobuf carries Go's empty non-pointer fields (`resources: {}`) that the stored JSON may omit:
        // equal once empty values are dropped on both sides.
        assert_eq!(pruned(decoded), pruned(js), "GET {path}: protobuf decoded ≠ JSON");
    }
    f.kache.shutdown().await;
    f.sim.shutdown().await;
}

/// `v` without empty values (`{}`, `[]`, `""`, `0`, `false`, `null`), recursively.
fn pruned(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    let empty = |v: &Value| match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    };
    match v {
        Value::Object(o) => {
            Value::Object(o.into_iter().map(|(k, v)| (k, pruned(v))).filter(|(_, v)| !empty(v)).collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(pruned).collect()),
        other => other,
    }
}

/// Reads a watch response body until `n` protobuf frames have arrived; returns (content type, bytes).
async fn watch_body(
    base: impl AsRef<str>,
    path: impl AsRef<str>,
    accept: &str,
    n: usize,
) -> (String, Vec<u8>) {
    let (base, path) = (base.as_ref(), path.as_ref());
    let req = Request::get(format!("{base}{path}"))
        .header("accept", accept)
        .body(http_body_util::Empty::<Bytes>::new())
        .expect("request");
    let resp = common::client().request(req).await.expect("response");
    assert_eq!(resp.status(), StatusCode::OK, "watch {path}");
    let ct = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    while frames(&buf).len() < n {
        let frame = tokio::time::timeout(Duration::from_secs(30), body.frame())
            .await
            .unwrap_or_else(|_| panic!("watch {path}: {} of {n} events within 30 s", frames(&buf).len()))
            .expect("stream open")
            .expect("frame");
        if let Ok(data) = frame.into_data() {
            buf.extend_from_slice(&data);
        }
    }
    let end: usize = frames(&buf).iter().take(n).map(|f| f.len() + 4).sum();
    buf.truncate(end);
    (ct, buf)
}

/// The complete length-prefixed frames of a protobuf watch body.
fn frames(b: &[u8]) -> Vec<&[u8]> {
    let (mut i, mut out) = (0, Vec::new());
    while i + 4 <= b.len() {
        let len = u32::from_be_bytes(b[i..i + 4].try_into().expect("4 bytes")) as usize;
        if i + 4 + len > b.len() {
            break;
        }
        out.push(&b[i + 4..i + 4 + len]);
        i += 4 + len;
    }
    out
}

/// A watch frame's type and object (enveloped).
fn event(frame: &[u8]) -> (String, &[u8]) {
    let ty = field(frame, 1).map(|t| String::from_utf8_lossy(t).into_owned()).unwrap_or_default();
    let object = field(frame, 2).and_then(|raw| field(raw, 1)).unwrap_or_default();
    (ty, object)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_streams_match_the_sim() {
    let f = Fixture::start().await;
    f.caught_up(&pods(), PODS).await;
    let start = f.sim.revision();
    for i in 0..3 {
        f.sim
            .create("pods", Some("ns-1"), common::pod("ns-1", &format!("w{i}"), &[("w", "1")], "node-1"))
            .expect("pod");
    }
    let mut w1 = f.sim.get("pods", Some("ns-1"), "w1").expect("w1");
    w1["metadata"]["labels"] = json!({"w": "2"});
    f.sim.update("pods", Some("ns-1"), w1).expect("update");
    f.sim.delete("pods", Some("ns-1"), "w2").expect("delete");
    f.caught_up(&pods(), PODS).await;
    let before = f.served_from_memory();
    // Resume from a revision: replayed history, full objects and the metadata view; a selector watch
    // sees w1 leave its selection (a DELETED at the update's revision).
    for (path, accept, n) in [
        (format!("/api/v1/namespaces/ns-1/pods?watch=1&resourceVersion={start}"), CLIENT_GO_ACCEPT, 5),
        (format!("/api/v1/pods?watch=1&resourceVersion={start}"), META_ACCEPT, 5),
        (format!("/api/v1/pods?watch=1&resourceVersion={start}&labelSelector=w%3D1"), PROTOBUF, 5),
        (format!("/api/v1/pods?watch=1&resourceVersion={start}&labelSelector=w%3D1"), META_ACCEPT, 5),
    ] {
        let (ct, k) = watch_body(&f.kache.url(), &path, accept, n).await;
        assert_eq!(ct, "application/vnd.kubernetes.protobuf;stream=watch", "{path}");
        let (_, s) = watch_body(&f.sim.url(), &path, accept, n).await;
        assert_same_bytes(&format!("watch {path} ({accept})"), &k, &s);
    }
    // A streaming list (WatchList) with its initial-events-end bookmark, and the legacy initial events.
    for (path, n) in [
        (
            "/api/v1/namespaces/ns-1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
            f.sim.list("pods", Some("ns-1")).expect("pods").len() + 1,
        ),
        (
            "/api/v1/namespaces/ns-2/pods?watch=1&resourceVersion=0",
            f.sim.list("pods", Some("ns-2")).expect("pods").len(),
        ),
    ] {
        for accept in [PROTOBUF, META_ACCEPT] {
            let (_, k) = watch_body(&f.kache.url(), path, accept, n).await;
            let (_, s) = watch_body(&f.sim.url(), path, accept, n).await;
            assert_same_bytes(&format!("watch {path} ({accept})"), &k, &s);
            if path.contains("sendInitialEvents") {
                let all = frames(&k);
                let (ty, _) = event(all.last().expect("frames"));
                assert_eq!(ty, "BOOKMARK", "the initial-events-end bookmark comes last");
            }
        }
    }
    // Live events after the watch started, encoded once and shared: two watchers get the same bytes.
    let live = format!("/api/v1/namespaces/ns-1/pods?watch=1&resourceVersion={}", f.sim.revision());
    let store = f.kache.registry().get(&pods()).expect("pods cached");
    let watching = store.subscribers();
    let a = tokio::spawn(watch_body(f.kache.url(), live.clone(), PROTOBUF, 2));
    let b = tokio::spawn(watch_body(f.kache.url(), live.clone(), PROTOBUF, 2));
    eventually("both watches started", Duration::from_secs(10), || {
        let n = store.subscribers();
        async move { n >= watching + 2 }
    })
    .await;
    f.sim.create("pods", Some("ns-1"), common::pod("ns-1", "live-a", &[], "node-2")).expect("pod");
    f.sim.create("pods", Some("ns-1"), common::pod("ns-1", "live-b", &[], "node-2")).expect("pod");
    let (a, b) = (a.await.expect("watch a"), b.await.expect("watch b"));
    assert_eq!(a.1, b.1, "every watcher gets the same frames");
    assert_eq!(frames(&a.1).iter().map(|f| event(f).0).collect::<Vec<_>>(), ["ADDED", "ADDED"]);
    let served = f.served_from_memory() - before;
    assert_eq!(served, 10, "protobuf watches from kache's memory");
    // 410: a revision older than kache's history is an ERROR event with a protobuf Status.
    let gone = "/api/v1/namespaces/ns-1/pods?watch=1&resourceVersion=1";
    let (_, k) = watch_body(&f.kache.url(), gone, PROTOBUF, 1).await;
    let (ty, status) = event(frames(&k)[0]);
    assert_eq!(ty, "ERROR");
    let status = kache_sim::proto::envelope::decode_object(status).expect("a Status");
    assert_eq!((status["kind"].clone(), status["code"].clone()), (json!("Status"), json!(410)), "{status}");
    assert_eq!(status["reason"], json!("Expired"));
    f.kache.shutdown().await;
    f.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_that_cannot_be_transcoded_are_forwarded() {
    let f = Fixture::start().await;
    // A pod with a field kache's schema does not know (a newer apiserver's field): the sim stores it and
    // drops it when encoding, as Go's decoder does; kache's transcoder refuses to guess, so every protobuf
    // read that needs this object is forwarded and answered as the upstream answers it.
    let mut bad = common::pod("ns-1", "bad", &[("odd", "yes")], "node-1");
    bad["spec"]["futureField"] = json!({"x": 1});
    f.sim.create("pods", Some("ns-1"), bad.clone()).expect("the sim stores it");
    let start = f.caught_up(&pods(), PODS).await;
    let before = (f.served_from_memory(), f.forwarded());
    let get = f.same("/api/v1/namespaces/ns-1/pods/bad", PROTOBUF).await;
    let list = f.same("/api/v1/namespaces/ns-1/pods?labelSelector=odd%3Dyes", PROTOBUF).await;
    assert_eq!((get.status, list.status), (StatusCode::OK, StatusCode::OK), "the upstream's answers");
    assert_eq!(f.forwarded() - before.1, 2, "both forwarded");
    // Others in the same namespace are still served from memory, and the metadata view of the odd pod too.
    f.same("/api/v1/namespaces/ns-1/pods?labelSelector=odd%21%3Dyes", PROTOBUF).await;
    f.same("/api/v1/namespaces/ns-1/pods/bad", META_ACCEPT).await;
    assert_eq!(f.served_from_memory() - before.0, 2);
    // A watch whose replay holds it is forwarded too (before anything is sent).
    let before = f.forwarded();
    let path = format!("/api/v1/namespaces/ns-1/pods?watch=1&resourceVersion={}", start - 1);
    let req = Request::get(format!("{}{path}", f.kache.url()))
        .header("accept", PROTOBUF)
        .body(http_body_util::Empty::<Bytes>::new())
        .expect("request");
    let resp = common::client().request(req).await.expect("response");
    drop(resp);
    assert_eq!(f.forwarded() - before, 1, "the watch was forwarded");
    // A live event of such an object ends a watch served from memory at once, with nothing sent for it
    // (the client re-watches, and that watch is forwarded).
    let path = format!("/api/v1/namespaces/ns-1/pods?watch=1&resourceVersion={}", f.sim.revision());
    let req = Request::get(format!("{}{path}", f.kache.url()))
        .header("accept", PROTOBUF)
        .body(http_body_util::Empty::<Bytes>::new())
        .expect("request");
    let resp = common::client().request(req).await.expect("response");
    assert_eq!(resp.status(), StatusCode::OK, "watch {path}");
    bad["metadata"]["name"] = json!("bad-live");
    f.sim.create("pods", Some("ns-1"), bad).expect("the sim stores it");
    let body = tokio::time::timeout(Duration::from_secs(30), resp.into_body().collect())
        .await
        .expect("the watch ends after the untranscodable event, not at its timeout")
        .expect("body")
        .to_bytes();
    assert!(frames(&body).is_empty(), "nothing sent for the untranscodable event: {body:?}");
    f.kache.shutdown().await;
    f.sim.shutdown().await;
}

// === a real client-go informer in protobuf ===

/// informer-check: `$INFORMER_CHECK`, or the testbed's.
fn informer_check() -> Option<PathBuf> {
    static PATH: OnceLock<Option<PathBuf>> = OnceLock::new();
    PATH.get_or_init(|| common::real::testbed_tool("INFORMER_CHECK", "informer-check")).clone()
}

/// client-go's typed pod informer in protobuf through kache in front of the sim, WatchList on and off,
/// with pods created, relabelled and deleted all through its run: its store must equal a consistent list
/// from the sim (exit 0), and kache must have served its protobuf from memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_go_informer_in_protobuf_through_kache() {
    let Some(program) = informer_check() else {
        common::tools::missing(&format!(
            "the testbed's informer-check is not built: {}",
            common::real::BUILD_HINT
        ));
        return;
    };
    let f = Fixture::start().await;
    f.caught_up(&pods(), PODS).await;
    for watchlist in [true, false] {
        let before = f.served_from_memory();
        let args = [
            "--server".to_owned(),
            f.kache.url(),
            "--compare-server".to_owned(),
            f.sim.url(),
            "--resource".to_owned(),
            "pods".to_owned(),
            "--content-type".to_owned(),
            "protobuf".to_owned(),
            format!("--watchlist={watchlist}"),
            "--duration".to_owned(),
            "4s".to_owned(),
            "--sync-timeout".to_owned(),
            "60s".to_owned(),
        ];
        let child = Command::new(&program)
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("informer-check starts");
        // Churn while it lists, syncs and watches.
        let sim = &f.sim;
        let churn = async move {
            for i in 0..40 {
                let name = format!("churn-{watchlist}-{i}");
                let _ = sim.create("pods", Some("ns-1"), common::pod("ns-1", &name, &[("c", "1")], "node-1"));
                if i % 3 == 0
                    && let Ok(mut p) = sim.get("pods", Some("ns-1"), &name)
                {
                    p["metadata"]["labels"] = json!({"c": "2"});
                    let _ = sim.update("pods", Some("ns-1"), p);
                }
                if i % 4 == 1 {
                    let _ = sim.delete("pods", Some("ns-1"), &format!("churn-{watchlist}-{}", i - 1));
                }
                // Spreads the writes over the informer's list, sync and watch (pacing, not synchronisation).
                tokio::time::sleep(Duration::from_millis(75)).await;
            }
        };
        let (out, ()) = tokio::join!(tokio::task::spawn_blocking(move || child.wait_with_output()), churn);
        let out = out.expect("wait thread").expect("informer-check exits");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "informer-check {args:?} exited {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            out.status.code()
        );
        // One streaming list (WatchList), or a list and a watch; re-watches after a stream ends count too.
        let served = f.served_from_memory() - before;
        assert!(
            served > u64::from(!watchlist),
            "the informer's protobuf reads came from kache's memory ({served})"
        );
    }
    f.kache.shutdown().await;
    f.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_and_v1beta1_views_in_protobuf_are_forwarded() {
    let f = Fixture::start().await;
    f.caught_up(&pods(), PODS).await;
    let before = f.forwarded();
    let v1beta1 = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1beta1";
    f.same(PODS, v1beta1).await;
    // A metadata view that does not fit the verb: the upstream's 406.
    let r = f.same(PODS, META_ACCEPT.split(',').next().expect("clause")).await;
    assert_eq!(r.status, StatusCode::NOT_ACCEPTABLE);
    assert_eq!(f.forwarded() - before, 2);
    f.kache.shutdown().await;
    f.sim.shutdown().await;
}

/// Figures for docs/decisions/0006-protobuf-by-transcoding.md (not a check; run with
/// `cargo test -p kache --test protobuf_serve measure -- --ignored --nocapture`): protobuf ÷ JSON bytes of a
/// full list of 10k realistic pods (the sim's workload; the wire form is the same whoever serves it), and the
/// protobuf bytes kache holds after serving a list of 10k plain pods from memory, against its JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, run by hand"]
async fn measure_protobuf_bytes_of_10k_pods() {
    let sim = start_sim().await;
    sim.seed(&kache_sim::workload::Workload {
        namespaces: 10,
        pods: 10_000,
        nodes: 10,
        churn_per_sec: 0.0,
        seed: 3,
    })
    .expect("workload seeded");
    let json = get_with(&sim.url(), "/api/v1/pods", &[]).await;
    let pb = get_with(&sim.url(), "/api/v1/pods", &[("accept", PROTOBUF)]).await;
    let meta_json = get_with(
        &sim.url(),
        "/api/v1/pods",
        &[("accept", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")],
    )
    .await;
    let meta_pb = get_with(&sim.url(), "/api/v1/pods", &[("accept", META_LIST_ACCEPT)]).await;
    eprintln!(
        "workload pods: JSON {} B, protobuf {} B, ratio {:.3}; metadata views: JSON {} B, protobuf {} B, ratio {:.3}",
        json.body.len(),
        pb.body.len(),
        pb.body.len() as f64 / json.body.len() as f64,
        meta_json.body.len(),
        meta_pb.body.len(),
        meta_pb.body.len() as f64 / meta_json.body.len() as f64
    );
    sim.shutdown().await;
    // Plain pods served from kache's memory: bytes held by the protobuf cells after one protobuf list.
    let sim = start_sim().await;
    for n in 0..10 {
        let _ = sim.create("namespaces", None, common::namespace(&format!("ns-{n}")));
    }
    for i in 0..10_000 {
        let ns = format!("ns-{}", i % 10);
        let pod = common::pod(&ns, &format!("pod-{i:05}"), &[("app", &format!("app-{}", i % 7))], "node-1");
        sim.create("pods", Some(&ns), pod).expect("pod");
    }
    let kache = start_kache(&sim.url(), |_| {}).await;
    let json = get_with(&kache.url(), "/api/v1/pods?resourceVersion=0", &[]).await;
    let pb = get_with(&kache.url(), "/api/v1/pods?resourceVersion=0", &[("accept", PROTOBUF)]).await;
    assert_eq!(content_type(&pb), PROTOBUF);
    let held = kache.metrics().protobuf_bytes_held();
    let store_bytes: usize =
        kache.registry().get(&pods()).expect("pods").current().objects.values().map(|o| o.raw.len()).sum();
    eprintln!(
        "plain pods from kache: JSON list {} B, protobuf list {} B (ratio {:.3}); protobuf held {held} B vs stored JSON {store_bytes} B ({:.3})",
        json.body.len(),
        pb.body.len(),
        pb.body.len() as f64 / json.body.len() as f64,
        held as f64 / store_bytes as f64
    );
    kache.shutdown().await;
    sim.shutdown().await;
}
