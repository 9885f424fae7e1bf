//! Every built-in kind in protobuf **from memory**, against the real kube-apiserver 1.36 (the testbed's
//! cluster): one object of every kind the cluster does not hold yet is created first (StatefulSets,
//! DaemonSets and their ControllerRevisions, Jobs, CronJobs, HPAs, Ingresses, NetworkPolicies,
//! webhook configurations and admission policies, CSRs, storage and DRA objects, ...), then for every
//! resource the cluster's discovery lists (list and watch; every version each group serves for the first
//! point, the preferred one, which kache caches, for the others):
//!
//! - each object's JSON, as the apiserver serves it, transcoded by kache equals the real Go encoder's
//!   protobuf for it (`kube-proto`), byte for byte;
//! - a protobuf list from kache's memory equals the apiserver's Exact list at the revision it names, and a
//!   protobuf get of an object and a protobuf watch from a revision up to an event the test causes (an
//!   annotation on that object) read the same bytes through kache as from the apiserver; kache counted
//!   each of them as served from memory
//!   (`HandlerStats::encoding_memory(Protobuf)`, `kache_encoding_total{encoding="protobuf",served="memory"}`),
//!   none as forwarded;
//! - no object was refused by the transcoder (`kache_protobuf_transcode_failures_total` is 0 everywhere).
//!
//! CustomResourceDefinitions included: the test's CRD has every form of JSONSchemaProps' own JSON types the
//! apiserver accepts (`objects::crd`), and the forms it refuses are checked to be refused.

use crate::common;
use crate::kube_apiserver::{
    Diffs, Fixture, PROTOBUF, Resource, common_revision, fixture, resources, resources_of_every_version,
    show, with_query,
};

use http::Method;
use kache::codec::proto;
use kache::pipeline::ResponseEncoding;
use serde_json::value::RawValue;
use serde_json::{Value, json};

mod objects;

/// The namespace of the objects this test creates.
const NS: &str = "kache-kinds";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_built_in_kind_is_served_in_protobuf_from_memory() {
    let _one = common::cluster::one_at_a_time().await;
    let Some(f) = fixture().await else { return };
    let Some(kube_proto) = common::kube_proto::require() else { return };
    let all = resources_of_every_version(&f.api).await;
    // kache caches each group's preferred version; the others (`autoscaling/v1`) are forwarded whatever the
    // encoding, so only their objects' transcoding is checked.
    let preferred: Vec<String> = resources(&f.api).await.iter().map(Resource::path).collect();
    create_one_of_every_kind(&f, &all).await;
    let mut diffs = Diffs::default();
    let mut served = Vec::new();
    let mut corpus = Corpus::default();
    for r in &all {
        let (group, version) = group_version(r);
        let Some(kind) = proto::proto_kind(group, version, &r.kind) else {
            diffs.0.push(format!("{}: kind {} has no protobuf schema", r.path(), r.kind));
            continue;
        };
        let rv = common_revision(&f, &r.path()).await;
        let exact = with_query(&r.path(), &format!("resourceVersion={rv}&resourceVersionMatch=Exact"));

        // Every object as the apiserver serves it in JSON: kache's transcoding vs the Go encoder's.
        let json_list = f.api.get(&exact).await;
        assert_eq!(json_list.status, 200, "GET {exact}: {}", show(&json_list.body));
        let items = raw_items(&json_list.body);
        if items.is_empty() {
            diffs.0.push(format!("{}: no object to read (the test creates one of every kind)", r.path()));
            continue;
        }
        same_as_kube_proto(&mut diffs, &kube_proto, &kind, &r.path(), &items);
        corpus.take(&kind, &r.name, &items);
        if !preferred.contains(&r.path()) {
            continue;
        }

        // A list from kache's memory in protobuf (`resourceVersion=0`: its store at the revision Y it names)
        // equals the apiserver's Exact list at Y. (Which reads kache answers from memory otherwise is the
        // freshness planner's choice: an Exact read ahead of the store or a small consistent list may go
        // upstream.)
        let rv0 = with_query(&r.path(), "resourceVersion=0");
        let counts = Counts::of(&f);
        let v = f.via.get_with(&rv0, &[("accept", PROTOBUF)]).await;
        counts.one_from_memory(&mut diffs, &f, &format!("protobuf list {rv0}"));
        match proto_list_rv(&v.body) {
            Some(y) if v.status == 200 => {
                let at = with_query(&r.path(), &format!("resourceVersion={y}&resourceVersionMatch=Exact"));
                let a = f.api.get_with(&at, &[("accept", PROTOBUF)]).await;
                diffs.same(&format!("GET {rv0} as protobuf through kache vs Exact at {y}"), &a, &v);
            }
            _ => diffs.0.push(format!("GET {rv0} as protobuf through kache: {} {}", v.status, show(&v.body))),
        }

        // A get of the first object, and a watch from rv up to a change of that object.
        let first: Value = serde_json::from_str(items[0].get()).expect("an object");
        let object_path = object_path(r, &first);
        get_from_memory(&mut diffs, &f, &object_path).await;
        watch_from_memory(&mut diffs, &f, r, rv, &object_path).await;
        served.push(r.name.clone());
    }
    assert!(served.len() > 40, "every built-in kind read in protobuf: {served:?}");
    let failures = transcode_failures(&f);
    diffs.check(failures.is_empty(), || format!("objects the transcoder refused: {failures:?}"));
    eprintln!("served in protobuf from memory: {} resources: {served:?}", served.len());
    corpus.write();
    diffs.assert_none();
}

/// The largest object (up to [`Corpus::MAX`] bytes) of each resource but Secrets, with its kind and
/// apiVersion: `protobuf_codec`'s corpus of real objects ([`CORPUS_FILE`]). Written only when
/// `KACHE_WRITE_PROTO_CORPUS=1` (to refresh that file after a Kubernetes upgrade).
#[derive(Default)]
struct Corpus(Vec<String>);

/// The corpus file, in the source tree.
const CORPUS_FILE: &str = "tests/it/protobuf_codec/cluster_objects.jsonl";

impl Corpus {
    const MAX: usize = 12 * 1024;

    fn take(&mut self, kind: &proto::ProtoKind, resource: &str, items: &[Box<RawValue>]) {
        if resource == "secrets" {
            return;
        }
        let Some(item) =
            items.iter().map(|i| i.get()).filter(|i| i.len() <= Self::MAX).max_by_key(|i| i.len())
        else {
            return;
        };
        self.0.push(format!(
            "{{\"kind\":\"{}\",\"apiVersion\":\"{}\",{}",
            kind.kind(),
            kind.api_version(),
            item.strip_prefix('{').expect("an object")
        ));
    }

    fn write(self) {
        if std::env::var_os("KACHE_WRITE_PROTO_CORPUS").is_some_and(|v| v == "1") {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(CORPUS_FILE);
            std::fs::write(&path, self.0.join("\n") + "\n").expect("write the corpus");
            eprintln!("wrote {} objects to {}", self.0.len(), path.display());
        }
    }
}

fn group_version(r: &Resource) -> (&str, &str) {
    match r.prefix.strip_prefix("/apis/") {
        Some(gv) => gv.split_once('/').expect("GROUP/VERSION"),
        None => ("", "v1"),
    }
}

/// The items of a JSON list, as the bytes the apiserver wrote for each.
fn raw_items(body: &[u8]) -> Vec<Box<RawValue>> {
    #[derive(serde::Deserialize)]
    struct List {
        items: Vec<Box<RawValue>>,
    }
    serde_json::from_slice::<List>(body).expect("a JSON list").items
}

/// kache's protobuf of each item equals kube-proto's: the items as ADDED watch frames, one kube-proto
/// run for the whole list.
fn same_as_kube_proto(
    diffs: &mut Diffs,
    kube_proto: &std::path::Path,
    kind: &proto::ProtoKind,
    what: &str,
    items: &[Box<RawValue>],
) {
    let mut events = Vec::new();
    let mut mine = Vec::new();
    for item in items {
        let text = item.get();
        let typed = format!(
            "{{\"kind\":\"{}\",\"apiVersion\":\"{}\",{}",
            kind.kind(),
            kind.api_version(),
            text.strip_prefix('{').expect("an object")
        );
        events.extend_from_slice(format!("{{\"type\":\"ADDED\",\"object\":{typed}}}\n").as_bytes());
        match kind.encode_object(text.as_bytes()) {
            Ok(msg) => mine.extend(proto::watch_frame("ADDED", kind.api_version(), kind.kind(), &msg)),
            Err(e) => {
                diffs.0.push(format!(
                    "{what}: kache cannot transcode an object ({e}): {}",
                    show(text.as_bytes())
                ));
                return;
            }
        }
    }
    let reference = common::kube_proto::run(kube_proto, "encode-watch", &events);
    if mine != reference {
        let (m, r) = (split_frames(&mine), split_frames(&reference));
        let at = m.iter().zip(&r).position(|(a, b)| a != b).unwrap_or(m.len().min(r.len()));
        diffs.0.push(format!(
            "{what}: kache's protobuf of object {at} differs from kube-proto's: {}",
            show(items.get(at).map_or(b"" as &[u8], |i| i.get().as_bytes()))
        ));
    }
}

/// The `metadata.resourceVersion` of a protobuf list (`k8s\0` + Unknown{raw = 2: List{metadata = 1:
/// ListMeta{resourceVersion = 2}}}).
fn proto_list_rv(body: &[u8]) -> Option<u64> {
    let unknown = body.strip_prefix(&proto::MAGIC[..])?;
    let list = len_field(unknown, 2)?;
    let meta = len_field(list, 1)?;
    std::str::from_utf8(len_field(meta, 2)?).ok()?.parse().ok()
}

/// The first length-delimited field `tag` of a message (varint and length-delimited fields only, as in
/// the messages read here).
fn len_field(mut b: &[u8], tag: u64) -> Option<&[u8]> {
    fn varint(b: &mut &[u8]) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&c, rest) = b.split_first()?;
            *b = rest;
            v |= u64::from(c & 0x7f) << shift;
            if c < 0x80 {
                return Some(v);
            }
        }
        None
    }
    while !b.is_empty() {
        let key = varint(&mut b)?;
        match key & 7 {
            0 => {
                varint(&mut b)?;
            }
            2 => {
                let n = usize::try_from(varint(&mut b)?).ok()?;
                let (value, rest) = (b.get(..n)?, b.get(n..)?);
                if key >> 3 == tag {
                    return Some(value);
                }
                b = rest;
            }
            _ => return None,
        }
    }
    None
}

fn split_frames(mut b: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while b.len() >= 4 {
        let n = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
        let end = (4 + n).min(b.len());
        out.push(&b[4..end]);
        b = &b[end..];
    }
    out
}

fn object_path(r: &Resource, obj: &Value) -> String {
    let name = obj["metadata"]["name"].as_str().expect("a name");
    match obj["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{}/namespaces/{ns}/{}/{name}", r.prefix, r.name),
        None => format!("{}/{name}", r.path()),
    }
}

/// A protobuf get through kache, from memory, equal to the apiserver's (read again while the object
/// changes between the two reads: a node's status, a lease).
async fn get_from_memory(diffs: &mut Diffs, f: &Fixture, path: &str) {
    let q = with_query(path, "resourceVersion=0");
    for attempt in 1..=5 {
        let counts = Counts::of(f);
        let (a, v) = (
            f.api.get_with(&q, &[("accept", PROTOBUF)]).await,
            f.via.get_with(&q, &[("accept", PROTOBUF)]).await,
        );
        counts.one_from_memory(diffs, f, &format!("protobuf get {q}"));
        if (a.status == v.status && a.body == v.body) || attempt == 5 {
            diffs.same(&format!("GET {q} as protobuf"), &a, &v);
            return;
        }
    }
}

/// A protobuf watch from `rv` through kache and directly while the test annotates the object at `path`:
/// the same frames up to the one carrying that change, and kache's watch served from memory.
async fn watch_from_memory(diffs: &mut Diffs, f: &Fixture, r: &Resource, rv: u64, path: &str) {
    let q = with_query(&r.path(), &format!("watch=1&resourceVersion={rv}&timeoutSeconds=60"));
    let accept = [("accept", PROTOBUF)];
    let counts = Counts::of(f);
    let (mut a, mut v) = tokio::join!(f.api.watch(&q, &accept), f.via.watch(&q, &accept));
    let marker = format!("kache-touch-{}-{rv}", r.name);
    let patch = json!({"metadata": {"annotations": {"kache.dev/protobuf-watch": marker}}});
    let p = f.api.write(Method::PATCH, path, "application/merge-patch+json", &patch).await;
    if p.status != 200 {
        diffs.0.push(format!("PATCH {path}: {} {}", p.status, show(&p.body)));
        return;
    }
    let (a, v) = tokio::join!(frames_until(&mut a, &marker), frames_until(&mut v, &marker));
    counts.one_from_memory(diffs, f, &format!("protobuf watch {q}"));
    diffs.check(a.is_ok() && a == v, || {
        let found = |r: &Result<Vec<bytes::Bytes>, String>| match r {
            Ok(frames) => format!("{} frames up to the change", frames.len()),
            Err(e) => e.clone(),
        };
        format!("watch {q} as protobuf: kube-apiserver: {}; kache: {}", found(&a), found(&v))
    });
}

/// The frames of a watch up to and including the first that holds `marker`; Err when the stream ends
/// first or stops sending (a hang guard: the change was made, both streams must carry it).
async fn frames_until(w: &mut common::real::Watch, marker: &str) -> Result<Vec<bytes::Bytes>, String> {
    if w.status != 200 {
        let status = w.status;
        return Err(format!("status {status}: {}", show(&w.rest().await)));
    }
    let mut out = Vec::new();
    loop {
        match tokio::time::timeout(common::real::RESPONSE_TIMEOUT / 2, w.frame()).await {
            Ok(Some(frame)) => {
                let done = memchr::memmem::find(&frame, marker.as_bytes()).is_some();
                out.push(frame);
                if done {
                    return Ok(out);
                }
            }
            Ok(None) => {
                return Err(format!("the stream ended after {} frames, before the change", out.len()));
            }
            Err(_) => {
                return Err(format!(
                    "no frame after {} frames: {:?}",
                    out.len(),
                    out.iter().map(|f| show(f)).collect::<Vec<_>>()
                ));
            }
        }
    }
}

/// kache's protobuf read counters, to tell what one read did.
struct Counts {
    memory: u64,
    forwarded: u64,
}

impl Counts {
    fn of(f: &Fixture) -> Counts {
        let s = f.kache.stats();
        Counts {
            memory: s.encoding_memory(ResponseEncoding::Protobuf),
            forwarded: s.encoding_forwarded(ResponseEncoding::Protobuf),
        }
    }

    /// Exactly one protobuf read since `self`, served from memory.
    fn one_from_memory(&self, diffs: &mut Diffs, f: &Fixture, what: &str) {
        let now = Counts::of(f);
        let (m, fw) = (now.memory - self.memory, now.forwarded - self.forwarded);
        diffs.check(m == 1 && fw == 0, || format!("{what}: {m} read(s) from memory, {fw} forwarded"));
    }
}

/// The resources with a non-zero `kache_protobuf_transcode_failures_total`.
fn transcode_failures(f: &Fixture) -> Vec<String> {
    f.kache
        .metrics()
        .render()
        .lines()
        .filter(|l| l.starts_with("kache_protobuf_transcode_failures_total{"))
        .filter(|l| l.rsplit(' ').next().is_some_and(|n| n != "0"))
        .map(str::to_owned)
        .collect()
}

// === one object of every kind ===

/// Creates the namespace and one object of each kind of [`objects::all`] (already there is fine: the
/// cluster is shared by the tests of this process); kinds the cluster does not serve are left out.
async fn create_one_of_every_kind(f: &Fixture, resources: &[Resource]) {
    let served = |path: &str| resources.iter().any(|r| r.path() == path);
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "labels": {"kache-testbed/kinds": "true"}}});
    create(f, "/api/v1/namespaces", &ns).await;
    for (collection, obj) in objects::all() {
        let listed = collection.replace(&format!("/namespaces/{NS}"), "");
        if served(&listed) {
            create(f, &collection, &obj).await;
        }
    }
    // The union forms a CRD cannot have: kache's transcoder never sees them from this apiserver.
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let r = f.api.write(Method::POST, crds, "application/json", &objects::refused_crd()).await;
    let body = String::from_utf8_lossy(&r.body);
    assert!(
        r.status == 422
            && body.contains("items must be a schema object and not an array")
            && body.contains("additionalItems is not supported")
            && body.contains("dependencies is not supported"),
        "POST a CRD with items arrays, additionalItems and dependencies: {} {}",
        r.status,
        show(&r.body)
    );
}

async fn create(f: &Fixture, path: &str, obj: &Value) {
    let r = f.api.write(Method::POST, path, "application/json", obj).await;
    assert!(r.status == 201 || r.status == 409, "POST {path}: {} {}", r.status, show(&r.body));
}
