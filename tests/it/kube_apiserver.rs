//! kache in front of a real kube-apiserver 1.36 (the testbed's cluster: etcd, the apiserver with RBAC, the
//! controller-manager and scheduler, simulated nodes renewing their leases, Deployments whose pods run):
//! every built-in kind the cluster serves, read directly and through kache with the same client, compared.
//!
//! The cluster never stands still (leases every 10 s per node, node status, events), so reads are compared
//! where both sides must give the same bytes whatever the timing:
//! - **Exact** reads (`resourceVersion=R&resourceVersionMatch=Exact`) of every resource at a revision R both
//!   sides hold: JSON, protobuf (where the apiserver offers it), Table, `PartialObjectMetadataList`, and every
//!   page of a paginated walk with its continue tokens — byte for byte;
//! - field and label selectors the kubelet, the scheduler and kubectl send, at R, byte for byte;
//! - **consistent** lists: kache's answer at revision Y must equal the apiserver's Exact answer at Y, and Y
//!   must not be older than a consistent read made directly just before (linearizable);
//! - gets from memory (`resourceVersion=0`) equal the apiserver's whenever both saw the same object revision;
//! - watches from R: the same events in the same order, byte for byte, up to where both streams reached;
//! - errors (a missing object, a bad selector, a revision too old): the same Status, byte for byte.
//!
//! One normalisation: continue tokens are compared by what they mean (revision and start key). The
//! apiserver writes the start key as `/KEY` when its watch cache answers and as `KEY` when etcd does; it
//! accepts both, and which one a read gets depends on the apiserver's cache at that moment.
//!
//! kache caches every discovered resource (its default); reads it must serve from memory are counted, and
//! the test asserts that Exact and `resourceVersion=0` reads of synced resources were.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use common::Resp;
use common::cluster::Cluster;
use common::real::{Endpoint, write_kubeconfig};
use kache::app::Kache;

/// Page size of the paginated walks: small, so that most resources take several pages.
const PAGE: usize = 7;
pub(crate) const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
const METADATA: &str = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io";

pub(crate) struct Fixture {
    _cluster: Arc<Cluster>,
    pub(crate) kache: Kache,
    pub(crate) api: Endpoint,
    pub(crate) via: Endpoint,
    _dir: tempfile::TempDir,
}

pub(crate) async fn fixture() -> Option<Fixture> {
    let cluster = tokio::task::spawn_blocking(Cluster::shared).await.expect("cluster start")?;
    // The comparisons read small objects, which kache forwards by default without a probe: probe them.
    let kache = cluster.start_kache(|config| config.freshness.probe_small_reads = true).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kache.kubeconfig");
    write_kubeconfig(&kubeconfig, &kache.url());
    let api = Endpoint::from_kubeconfig("kube-apiserver", &cluster.admin_kubeconfig()).await;
    let via = Endpoint::from_kubeconfig("kache", &kubeconfig).await;
    Some(Fixture { _cluster: cluster, kache, api, via, _dir: dir })
}

/// A listable resource of the cluster, from discovery.
#[derive(Clone, Debug)]
pub(crate) struct Resource {
    /// `/api/v1` or `/apis/GROUP/VERSION`.
    pub(crate) prefix: String,
    pub(crate) name: String,
    /// The kind of its objects.
    pub(crate) kind: String,
}

impl Resource {
    pub(crate) fn path(&self) -> String {
        format!("{}/{}", self.prefix, self.name)
    }
}

/// Every resource with list and watch, in each group's preferred version (all built-in: protobuf too).
pub(crate) async fn resources(api: &Endpoint) -> Vec<Resource> {
    resources_in(api, false).await
}

/// Every resource with list and watch, in every version each group serves (`autoscaling/v1` beside `v2`).
pub(crate) async fn resources_of_every_version(api: &Endpoint) -> Vec<Resource> {
    resources_in(api, true).await
}

async fn resources_in(api: &Endpoint, every_version: bool) -> Vec<Resource> {
    let mut prefixes = vec!["/api/v1".to_owned()];
    let groups = api.get("/apis").await.json();
    for g in groups["groups"].as_array().expect("groups") {
        if every_version {
            let versions = g["versions"].as_array().into_iter().flatten();
            prefixes
                .extend(versions.filter_map(|v| v["groupVersion"].as_str()).map(|gv| format!("/apis/{gv}")));
        } else if let Some(gv) = g["preferredVersion"]["groupVersion"].as_str() {
            prefixes.push(format!("/apis/{gv}"));
        }
    }
    let mut out = Vec::new();
    for prefix in prefixes {
        let list = api.get(&prefix).await.json();
        for r in list["resources"].as_array().into_iter().flatten() {
            let name = r["name"].as_str().unwrap_or_default();
            let verbs: Vec<&str> =
                r["verbs"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            if name.contains('/') || !verbs.contains(&"list") || !verbs.contains(&"watch") {
                continue;
            }
            let kind = r["kind"].as_str().unwrap_or_default().to_owned();
            out.push(Resource { prefix: prefix.clone(), name: name.to_owned(), kind });
        }
    }
    out
}

/// Differences found; the test fails once at the end with all of them.
#[derive(Default)]
pub(crate) struct Diffs(pub(crate) Vec<String>);

/// A JSON body with each `"continue":"TOKEN"` replaced by what the token means (its revision and start key,
/// without a leading `/`): the apiserver's watch cache writes the start key as `/KEY`, its etcd path as `KEY`,
/// and it accepts both; which one a given read takes depends on the apiserver's cache, not on kache.
fn tokens_by_meaning(body: &[u8]) -> Vec<u8> {
    use base64::Engine as _;
    let text = String::from_utf8_lossy(body).into_owned();
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(at) = rest.find("\"continue\":\"") {
        let (head, tail) = rest.split_at(at + "\"continue\":\"".len());
        out.push_str(head);
        let end = tail.find('"').unwrap_or(tail.len());
        let token = &tail[..end];
        let meaning = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token)
            .ok()
            .and_then(|raw| serde_json::from_slice::<Value>(&raw).ok())
            .map(|v| {
                format!("rv={} start={}", v["rv"], v["start"].as_str().unwrap_or("").trim_start_matches('/'))
            });
        out.push_str(meaning.as_deref().unwrap_or(token));
        rest = &tail[end..];
    }
    out.push_str(rest);
    out.into_bytes()
}

impl Diffs {
    pub(crate) fn same(&mut self, what: &str, api: &Resp, via: &Resp) {
        if api.status == via.status
            && api.body != via.body
            && tokens_by_meaning(&api.body) == tokens_by_meaning(&via.body)
        {
            return;
        }
        let ct =
            |r: &Resp| r.headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        if api.status != via.status || ct(api) != ct(via) || api.body != via.body {
            // Where the bodies part, with some context: a whole list says little.
            let at = api
                .body
                .iter()
                .zip(via.body.iter())
                .position(|(a, b)| a != b)
                .unwrap_or(api.body.len().min(via.body.len()));
            let window = |b: &[u8]| show(&b[at.saturating_sub(120).min(b.len())..(at + 200).min(b.len())]);
            self.0.push(format!(
                "{what}:\n  kube-apiserver {} {} ({} bytes), from byte {}: {}\n  kache          {} {} ({} bytes): {}",
                api.status,
                ct(api),
                api.body.len(),
                at.saturating_sub(120),
                window(&api.body),
                via.status,
                ct(via),
                via.body.len(),
                window(&via.body)
            ));
        }
    }

    pub(crate) fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.0.push(what());
        }
    }

    pub(crate) fn assert_none(self) {
        assert!(self.0.is_empty(), "{} differences:\n{}", self.0.len(), self.0.join("\n\n"));
    }
}

/// A read of `path` as `accept` on both sides, compared. A Table's age cells ("6s") are printed against each
/// server's clock when it answers, so two answers a second apart differ there: a Table that differs is read
/// again on both sides, a few times; a difference that stays is reported.
async fn compare(diffs: &mut Diffs, f: &Fixture, path: &str, accept: &str) {
    let headers = [("accept", accept)];
    let attempts = if accept == TABLE { 4 } else { 1 };
    for attempt in 1..=attempts {
        let (a, v) = (f.api.get_with(path, &headers).await, f.via.get_with(path, &headers).await);
        if attempt == attempts || (a.status == v.status && a.body == v.body) {
            diffs.same(&format!("GET {path} as {accept}"), &a, &v);
            return;
        }
    }
}

pub(crate) fn show(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    if text.chars().count() > 600 {
        format!("{}… ({} bytes)", text.chars().take(600).collect::<String>(), body.len())
    } else {
        text.into_owned()
    }
}

pub(crate) fn list_rv(r: &Resp) -> u64 {
    r.json()["metadata"]["resourceVersion"].as_str().and_then(|s| s.parse().ok()).unwrap_or(0)
}

pub(crate) fn with_query(path: &str, query: &str) -> String {
    if path.contains('?') { format!("{path}&{query}") } else { format!("{path}?{query}") }
}

/// A revision both sides can serve Exact reads of `path` at: the apiserver's current one, once kache's store
/// has caught up with it (a `resourceVersion=0` list through kache says where the store is; a resource that
/// had no event since is brought there by a consistent read, which proves it fresh).
pub(crate) async fn common_revision(f: &Fixture, path: &str) -> u64 {
    let r = f.api.get(&with_query(path, "limit=1")).await;
    assert_eq!(r.status, 200, "{path}: {}", show(&r.body));
    let rv = list_rv(&r);
    // A consistent read through kache at or after rv: the store reaches it (or kache forwards, and the
    // Exact reads below are forwarded too: still compared).
    let _ = f.via.get(path).await;
    rv
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_built_in_kind_reads_the_same_through_kache() {
    let _one = common::cluster::one_at_a_time().await;
    let Some(f) = fixture().await else { return };
    let mut diffs = Diffs::default();
    let resources = resources(&f.api).await;
    assert!(resources.len() > 30, "the cluster serves the built-in kinds: {resources:?}");
    let mut kinds_seen = BTreeMap::new();
    for r in &resources {
        let path = r.path();
        let rv = common_revision(&f, &path).await;
        let exact = with_query(&path, &format!("resourceVersion={rv}&resourceVersionMatch=Exact"));
        let json_api = f.api.get(&exact).await;
        let json_via = f.via.get(&exact).await;
        diffs.same(&format!("GET {exact}"), &json_api, &json_via);
        kinds_seen.insert(path.clone(), json_api.json()["items"].as_array().map_or(0, Vec::len));
        for accept in [PROTOBUF, TABLE, METADATA] {
            compare(&mut diffs, &f, &exact, accept).await;
        }
        // `resourceVersion=0` (informers' and kubectl's cached reads): both answer from a cache; when both
        // caches are at the same revision the bytes must be equal.
        let rv0 = with_query(&path, "resourceVersion=0");
        let (a, v) = (f.api.get(&rv0).await, f.via.get(&rv0).await);
        if list_rv(&a) == list_rv(&v) {
            diffs.same(&format!("GET {rv0}"), &a, &v);
        }
        // A paginated walk at rv: every page and token.
        let mut next =
            with_query(&path, &format!("limit={PAGE}&resourceVersion={rv}&resourceVersionMatch=Exact"));
        for page in 0.. {
            let (a, v) = (f.api.get(&next).await, f.via.get(&next).await);
            diffs.same(&format!("page {page} of {path}: GET {next}"), &a, &v);
            let token = a.json()["metadata"]["continue"].as_str().unwrap_or_default().to_owned();
            if token.is_empty() || a.status != 200 || page > 50 {
                break;
            }
            next = with_query(&path, &format!("limit={PAGE}&continue={token}"));
        }
        // A consistent list through kache is the apiserver's state at the revision it names, and no older
        // than what a consistent read directly just before saw.
        let before = list_rv(&f.api.get(&with_query(&path, "limit=1")).await);
        let v = f.via.get(&path).await;
        if v.status == 200 {
            let y = list_rv(&v);
            diffs.check(y >= before, || {
                format!("consistent GET {path} through kache at {y}, older than {before}")
            });
            let a = f
                .api
                .get(&with_query(&path, &format!("resourceVersion={y}&resourceVersionMatch=Exact")))
                .await;
            if a.status == 200 {
                diffs.same(&format!("consistent GET {path} through kache vs Exact at {y}"), &a, &v);
            }
        } else {
            diffs.0.push(format!("consistent GET {path} through kache: {} {}", v.status, show(&v.body)));
        }
    }
    let from_memory = f.kache.stats().memory();
    assert!(from_memory > resources.len() as u64, "reads served from memory: {from_memory}");
    eprintln!("compared {} resources: {kinds_seen:?}", resources.len());
    diffs.assert_none();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selectors_of_real_clients_read_the_same_through_kache() {
    let _one = common::cluster::one_at_a_time().await;
    let Some(f) = fixture().await else { return };
    let mut diffs = Diffs::default();
    let nodes = f.api.get("/api/v1/nodes").await.json();
    let node = nodes["items"][0]["metadata"]["name"].as_str().expect("a node").to_owned();
    let cases = [
        // The kubelet's pods.
        format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{node}"),
        // The scheduler's unscheduled and kubectl's non-terminated pods.
        "/api/v1/pods?fieldSelector=status.phase%21%3DSucceeded%2Cstatus.phase%21%3DFailed".to_owned(),
        "/api/v1/pods?fieldSelector=spec.nodeName%3D".to_owned(),
        "/api/v1/pods?fieldSelector=status.phase%3DRunning".to_owned(),
        "/api/v1/pods?labelSelector=app".to_owned(),
        "/api/v1/events?fieldSelector=involvedObject.kind%3DPod".to_owned(),
        "/api/v1/secrets?fieldSelector=type%3Dkubernetes.io%2Fservice-account-token".to_owned(),
        "/api/v1/secrets?fieldSelector=type%3DOpaque".to_owned(),
        "/api/v1/namespaces?fieldSelector=metadata.name%3Ddefault".to_owned(),
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases".to_owned(),
        "/apis/apps/v1/replicasets?labelSelector=pod-template-hash".to_owned(),
    ];
    for path in cases {
        let base = path.split('?').next().expect("a path").to_owned();
        let rv = common_revision(&f, &base).await;
        let exact = with_query(&path, &format!("resourceVersion={rv}&resourceVersionMatch=Exact"));
        for accept in ["application/json", PROTOBUF, TABLE] {
            compare(&mut diffs, &f, &exact, accept).await;
        }
    }
    diffs.assert_none();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gets_watches_and_errors_read_the_same_through_kache() {
    let _one = common::cluster::one_at_a_time().await;
    let Some(f) = fixture().await else { return };
    let mut diffs = Diffs::default();
    // Gets from memory of a few objects of each kind that has them: equal whenever both saw one revision.
    for path in [
        "/api/v1/nodes",
        "/api/v1/pods",
        "/apis/apps/v1/deployments",
        "/api/v1/configmaps",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    ] {
        let list = f.api.get(&with_query(path, "limit=3")).await.json();
        for item in list["items"].as_array().into_iter().flatten() {
            let name = item["metadata"]["name"].as_str().expect("name");
            let one = match item["metadata"]["namespace"].as_str() {
                Some(ns) => {
                    let (prefix, resource) = path.rsplit_once('/').expect("a resource path");
                    format!("{prefix}/namespaces/{ns}/{resource}/{name}")
                }
                None => format!("{path}/{name}"),
            };
            for accept in ["application/json", PROTOBUF, TABLE] {
                let q = with_query(&one, "resourceVersion=0");
                // The object may change between the two reads (a node's status, a lease): read again while
                // the two sides saw different revisions of it; Tables also while their ages differ.
                for attempt in 1..=5 {
                    let (a, v) = (
                        f.api.get_with(&q, &[("accept", accept)]).await,
                        f.via.get_with(&q, &[("accept", accept)]).await,
                    );
                    if (a.status == v.status && a.body == v.body) || attempt == 5 {
                        diffs.same(&format!("GET {q} as {accept}"), &a, &v);
                        break;
                    }
                    let moved = accept == "application/json" && list_rv(&a) != list_rv(&v);
                    if !moved && accept != TABLE && accept != PROTOBUF {
                        diffs.same(&format!("GET {q} as {accept}"), &a, &v);
                        break;
                    }
                }
            }
        }
    }
    // Watches from a revision both hold: the same events, in order, up to where both reached.
    for path in ["/api/v1/pods", "/apis/coordination.k8s.io/v1/leases", "/api/v1/nodes", "/api/v1/events"] {
        let rv = common_revision(&f, path).await;
        let q = with_query(path, &format!("watch=1&resourceVersion={rv}&timeoutSeconds=3"));
        let (a, v) = tokio::join!(watch_lines(&f.api, &q), watch_lines(&f.via, &q));
        let n = a.len().min(v.len());
        diffs.check(a[..n] == v[..n], || {
            format!(
                "watch {q}: first {n} events differ:\n  kube-apiserver: {:?}\n  kache: {:?}",
                &a[..n],
                &v[..n]
            )
        });
    }
    // Errors.
    for path in [
        "/api/v1/namespaces/default/pods/no-such-pod",
        "/api/v1/nodes/no-such-node",
        "/api/v1/pods?labelSelector=a%20in%20(",
        "/api/v1/pods?fieldSelector=spec.noSuchField%3Dx",
        "/api/v1/pods?resourceVersion=1&resourceVersionMatch=Exact",
        "/api/v1/pods?resourceVersion=abc",
        "/apis/apps/v1/namespaces/default/deployments/no-such-deployment",
    ] {
        let (a, v) = (f.api.get(path).await, f.via.get(path).await);
        diffs.same(&format!("GET {path}"), &a, &v);
    }
    diffs.assert_none();
}

/// The event lines of a watch until it ends (its `timeoutSeconds`), bookmarks left out.
async fn watch_lines(side: &Endpoint, path: &str) -> Vec<String> {
    let mut w = side.watch(path, &[]).await;
    let mut out = Vec::new();
    while let Some(line) = w.line().await {
        let text = String::from_utf8_lossy(&line).into_owned();
        if !text.contains("\"type\":\"BOOKMARK\"") {
            out.push(text);
        }
    }
    out
}
