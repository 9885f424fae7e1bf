//! kache in front of the real Kubernetes apiserver (`testbed/`: k8s.io/sample-apiserver 1.36 on
//! etcd 3.6 — the real registry, watch cache and etcd3 store). Every read goes to the apiserver directly
//! and through kache, both over HTTP/2 and TLS with the same client, and the answers must be equal:
//! status, `Content-Type`, `Content-Encoding`, `Warning`, `Retry-After`, and the body **byte for byte**.
//!
//! The data: namespaced flunders of about 2.5 KiB in three namespaces, and cluster-scoped fischers, whose
//! writes move the global resourceVersion without touching flunders — the "foreign writes" every real
//! cluster has (leases, events). Writes go to the apiserver directly, between pages and between reads.
//!
//! Normalisations (the only ones):
//! - gzip: the compressed bytes depend on the compressor (Go's compress/gzip vs zlib-rs), so both sides
//!   must answer `Content-Encoding: gzip` and the decompressed bodies must be byte-identical.
//! - periodic watch bookmarks: when each server sends them is its own (about once a minute), so after a
//!   watch's initial events the comparison skips BOOKMARK lines; the initial-events-end bookmark is
//!   compared in place.
//! - pre-deadline bookmarks: compared in place on short watches (sent only when the revision moved past what
//!   the watcher has seen), with runs of identical ones collapsed: the apiserver's bookmark tick sometimes
//!   sends the same one twice.
//!
//! No difference is tolerated: the deprecation `Warning` of v1alpha1 reads and the kind's empty
//! `"spec":{},"status":{}` in BOOKMARK objects, once known differences, are now learned from the upstream
//! and compared like everything else.
//!
//! A read that kache must answer from memory is checked through its handler stats (one more read served
//! from memory); a read it must forward (Table, a continue token from before it started) likewise.
//!
//! Each test starts its own etcd and apiserver (`start.sh` under the target dir) and stops them with
//! `stop.sh` when it ends, also on failure; the tests of this file run one at a time.

use crate::common;

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use futures_util::{StreamExt, stream};
use http::{Method, StatusCode};
use serde_json::{Value, json};

use common::Resp;
use common::real::{Endpoint, RealApiserver, create, rv_of, write_kubeconfig};
use kache::app::{Config, Kache, UpstreamSource};
use kache::front::server::TlsConfig;

const GROUP_VERSION: &str = "wardle.example.com/v1beta1";
const FLUNDERS: &str = "/apis/wardle.example.com/v1beta1/flunders";
const FISCHERS: &str = "/apis/wardle.example.com/v1alpha1/fischers";
const NAMESPACES: [&str; 3] = ["ns-a", "ns-b", "ns-c"];
/// Flunders per namespace (300 in all, ~750 KiB: well over the 128 KiB gzip threshold).
const PER_NAMESPACE: usize = 100;
const FISCHER_COUNT: usize = 20;
/// Concurrent creates while seeding.
const SEED_CONCURRENCY: usize = 8;
/// Hang guard for kache's first sync and for catching up with a revision.
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// One test at a time: each runs its own etcd and apiserver, and CI has two cores.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

// === Objects ===

fn ns_path(ns: &str) -> String {
    format!("/apis/wardle.example.com/v1beta1/namespaces/{ns}/flunders")
}

/// A flunder of about 2.5 KiB: labels for selectors, an annotation for size, a reference in its spec.
fn flunder(ns: &str, name: &str, i: usize) -> Value {
    let notes: String = (0..40).map(|k| format!("line {k:02} of the notes of {name} in {ns}; ")).collect();
    json!({
        "apiVersion": GROUP_VERSION,
        "kind": "Flunder",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"app": if i.is_multiple_of(3) { "db" } else { "web" }, "idx": (i % 10).to_string()},
            "annotations": {"example.com/notes": notes},
        },
        "spec": {"referenceType": "Flunder", "flunderReference": format!("f-{:03}", (i + 1) % PER_NAMESPACE)},
    })
}

fn fischer(name: &str) -> Value {
    json!({
        "apiVersion": "wardle.example.com/v1alpha1",
        "kind": "Fischer",
        "metadata": {"name": name},
        "disallowedFlunders": ["f-000", "f-001"],
    })
}

/// A foreign write: a new fischer (cluster-scoped, another resource). Returns the new global revision.
async fn foreign_write(api: &Endpoint, name: &str) -> u64 {
    create(api, FISCHERS, &fischer(name)).await
}

/// Changes a flunder's labels (a MODIFIED event for flunders). Returns its new resourceVersion.
async fn relabel(api: &Endpoint, ns: &str, name: &str, app: &str) -> u64 {
    let path = format!("{}/{name}", ns_path(ns));
    let patch = json!({"metadata": {"labels": {"app": app}}});
    let r = api.write(Method::PATCH, &path, "application/merge-patch+json", &patch).await;
    assert_eq!(r.status, StatusCode::OK, "PATCH {path}: {}", text(&r.body));
    rv_of(&r.json())
}

/// Fischers first, then the flunders: flunders hold the last write. Returns the last flunder's revision.
async fn seed(api: &Endpoint) -> u64 {
    for i in 0..FISCHER_COUNT {
        create(api, FISCHERS, &fischer(&format!("fischer-{i:02}"))).await;
    }
    let creates = NAMESPACES.iter().flat_map(|ns| {
        (0..PER_NAMESPACE).map(move |i| {
            let name = format!("f-{i:03}");
            async move { create(api, &ns_path(ns), &flunder(ns, &name, i)).await }
        })
    });
    let rvs: Vec<u64> = stream::iter(creates).buffer_unordered(SEED_CONCURRENCY).collect().await;
    rvs.into_iter().max().expect("flunders created")
}

// === kache in front of the apiserver ===

/// kache with default settings in front of `api`, serving TLS with the apiserver's own certificate, and
/// an endpoint that reaches it the way the apiserver is reached.
async fn start_kache(api: &RealApiserver) -> (Kache, Endpoint) {
    start_kache_on(api, SocketAddr::from(([127, 0, 0, 1], 0))).await
}

/// As [`start_kache`], on `addr` (a restarted kache takes its predecessor's port).
async fn start_kache_on(api: &RealApiserver, addr: SocketAddr) -> (Kache, Endpoint) {
    start_kache_with(api, addr, |_| {}).await
}

/// As [`start_kache_on`], its configuration changed by `tweak`.
async fn start_kache_with(
    api: &RealApiserver,
    addr: SocketAddr,
    tweak: impl FnOnce(&mut Config),
) -> (Kache, Endpoint) {
    let mut config = Config::for_url(String::new());
    config.upstream = UpstreamSource::Kubeconfig(Some(api.kubeconfig.clone()));
    // The differential compares answers from memory with the apiserver's; its objects are small, which
    // kache would forward by default without a probe (tests/it/foreign.rs), so probe them.
    config.freshness.probe_small_reads = true;
    tweak(&mut config);
    let (cert, key) = api.serving_cert();
    config.tls =
        Some(TlsConfig::from_pem_files(&cert, &key).expect("the apiserver's certificate serves kache"));
    let mut attempt = 0;
    let listener = loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => break l,
            // The previous kache's port may take a moment to be released.
            Err(_) if attempt < 50 => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("binding {addr}: {e}"),
        }
    };
    let kache = Kache::start(config, listener).await.expect("kache starts");
    tokio::time::timeout(SYNC_TIMEOUT, kache.wait_synced())
        .await
        .expect("kache syncs in front of the apiserver");
    assert!(kache.url().starts_with("https://"), "kache serves TLS, its URL says {}", kache.url());
    let kubeconfig = api.run_dir().join("kache.kubeconfig");
    write_kubeconfig(&kubeconfig, &kache.url());
    let via = Endpoint::from_kubeconfig("kache", &kubeconfig).await;
    (kache, via)
}

/// Waits until kache's flunders store has reached `rv` (a list with resourceVersion=0 says where it is).
async fn caught_up(via: &Endpoint, rv: u64) {
    caught_up_at(via, FLUNDERS, rv).await;
}

// === Comparing ===

/// Where kache must have answered a read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    Memory,
    Upstream,
    /// Either is right (the choice depends on when the apiserver reports progress); the answer must match.
    Either,
    /// Answered by kache itself before any store is read (a 406 of content negotiation).
    Local,
}

/// Sends reads to both sides and collects every difference (the test fails at the end with all of them).
struct Differential<'a> {
    api: &'a Endpoint,
    via: &'a Endpoint,
    kache: &'a Kache,
    failures: Vec<String>,
    compared: usize,
}

fn text(b: &[u8]) -> String {
    const MAX: usize = 1500;
    if b.len() > MAX {
        format!("{}… ({} bytes)", String::from_utf8_lossy(&b[..MAX]), b.len())
    } else {
        String::from_utf8_lossy(b).into_owned()
    }
}

fn gunzip(b: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(b).read_to_end(&mut out).expect("valid gzip");
    out
}

/// The headers that carry meaning for a client (never Date, Audit-Id, Content-Length).
const COMPARED_HEADERS: [&str; 5] =
    ["content-type", "content-encoding", "warning", "retry-after", "cache-control"];

impl<'a> Differential<'a> {
    fn new(api: &'a Endpoint, via: &'a Endpoint, kache: &'a Kache) -> Self {
        Differential { api, via, kache, failures: Vec::new(), compared: 0 }
    }

    /// GET `path` from both; compares; checks where kache answered from. Returns the apiserver's answer.
    async fn same(&mut self, path: &str, headers: &[(&str, &str)], source: Source) -> Resp {
        let want = self.api.get_with(path, headers).await;
        let (memory, forwarded) = (self.kache.stats().memory(), self.kache.stats().forwarded());
        let got = self.via.get_with(path, headers).await;
        let (memory, forwarded) =
            (self.kache.stats().memory() - memory, self.kache.stats().forwarded() - forwarded);
        self.compared += 1;
        let what = format!("GET {path} {headers:?}");
        let served = match (memory, forwarded) {
            (1, 0) => Some(Source::Memory),
            (0, 1) => Some(Source::Upstream),
            (0, 0) => Some(Source::Local),
            _ => None,
        };
        if source == Source::Either && served.is_some() {
            eprintln!("SERVED: {what}: from {served:?}");
        } else if served != Some(source) {
            self.failures.push(format!(
                "{what}: kache answered from {served:?} (memory +{memory}, forwarded +{forwarded}), expected {source:?}"
            ));
        }
        self.compare(&what, &want, &got);
        want
    }

    fn compare(&mut self, what: &str, want: &Resp, got: &Resp) {
        if want.status != got.status {
            self.failures.push(format!(
                "{what}: status apiserver {} / kache {}\n  apiserver: {}\n  kache:     {}",
                want.status,
                got.status,
                text(&want.body),
                text(&got.body)
            ));
            return;
        }
        for h in COMPARED_HEADERS {
            if want.headers.get(h) != got.headers.get(h) {
                self.failures.push(format!(
                    "{what}: header {h}: apiserver {:?} / kache {:?}",
                    want.headers.get(h),
                    got.headers.get(h)
                ));
            }
        }
        let gzipped = want.headers.get("content-encoding").is_some_and(|v| v == "gzip");
        let (a, b) = if gzipped && got.headers.get("content-encoding") == want.headers.get("content-encoding")
        {
            (gunzip(&want.body), gunzip(&got.body))
        } else {
            (want.body.to_vec(), got.body.to_vec())
        };
        if a != b {
            let at = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
            let from = at.saturating_sub(200);
            self.failures.push(format!(
                "{what}: bodies differ at byte {at} (apiserver {} bytes, kache {} bytes)\n  apiserver: …{}\n  kache:     …{}",
                a.len(),
                b.len(),
                text(&a[from..]),
                text(&b[from..])
            ));
        }
    }

    fn finish(self) {
        assert!(
            self.failures.is_empty(),
            "{} of {} reads differ between the apiserver and kache:\n\n{}",
            self.failures.len(),
            self.compared,
            self.failures.join("\n\n")
        );
        assert!(self.compared > 0, "nothing compared");
    }
}

fn continue_token(r: &Resp) -> String {
    let v = r.json();
    v["metadata"]["continue"]
        .as_str()
        .unwrap_or_else(|| panic!("no continue token: {}", text(&r.body)))
        .to_owned()
}

const META_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
const META: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
const PB_META_LIST: &str =
    "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
const PB_META: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

// === Tests ===

/// Discovery of an upstream without the core group (`/api` is 404 there) caches flunders in their
/// preferred version and fischers in the only version serving them. Then: lists in every resourceVersion
/// mode, gets, pages with writes and foreign writes between them,
/// selectors, error bodies, gzip, metadata views, Table pass-through.
#[test]
fn reads_match_the_apiserver() {
    let _serial = serial();
    let Some(api) = RealApiserver::start("reads") else { return };
    runtime().block_on(async {
        let direct = Endpoint::from_kubeconfig("apiserver", &api.kubeconfig).await;
        assert_eq!(
            direct.get("/api").await.status,
            StatusCode::NOT_FOUND,
            "the sample apiserver has no core group"
        );
        let last = seed(&direct).await;
        let (kache, via) = start_kache(&api).await;
        let statuses = kache.registry().statuses();
        let cached: Vec<(String, bool)> =
            statuses.iter().filter(|s| s.configured).map(|s| (s.gvr.to_string(), s.synced)).collect();
        let want = ["wardle.example.com/v1alpha1/fischers", "wardle.example.com/v1beta1/flunders"];
        assert_eq!(cached, want.map(|g| (g.to_owned(), true)), "discovered and synced: {statuses:?}");
        caught_up(&via, last).await;
        let mut d = Differential::new(&direct, &via, &kache);
        use Source::*;

        // Lists in each resourceVersion mode; flunders hold the last write, so a consistent read can be
        // proven fresh and is served from memory.
        d.same(FLUNDERS, &[], Memory).await;
        d.same(&format!("{FLUNDERS}?resourceVersion=0"), &[], Memory).await;
        d.same(&format!("{FLUNDERS}?resourceVersion={last}"), &[], Memory).await;
        d.same(&format!("{FLUNDERS}?resourceVersion={last}&resourceVersionMatch=NotOlderThan"), &[], Memory)
            .await;
        d.same(&format!("{FLUNDERS}?resourceVersion={last}&resourceVersionMatch=Exact"), &[], Memory).await;
        d.same(&format!("{FLUNDERS}?resourceVersion=0&limit=10"), &[], Memory).await;
        d.same(&ns_path("ns-b"), &[], Memory).await;
        d.same(&format!("{}?resourceVersion=0", ns_path("ns-b")), &[], Memory).await;
        d.same(&format!("{FISCHERS}?resourceVersion=0"), &[], Memory).await;

        // Gets.
        d.same(&format!("{}/f-007", ns_path("ns-b")), &[], Memory).await;
        d.same(&format!("{}/f-007?resourceVersion=0", ns_path("ns-b")), &[], Memory).await;
        d.same(&format!("{}/missing", ns_path("ns-b")), &[], Memory).await;
        d.same(&format!("{FISCHERS}/fischer-03?resourceVersion=0"), &[], Memory).await;

        // Pages of a consistent list, with writes to flunders and foreign writes between them.
        let page1 = d.same(&format!("{FLUNDERS}?limit=120"), &[], Memory).await;
        let token1 = continue_token(&page1);
        relabel(&direct, "ns-c", "f-050", "db").await; // in a later page
        relabel(&direct, "ns-a", "f-001", "db").await; // in the page already read
        foreign_write(&direct, "fischer-between-1").await;
        let page2 = d.same(&format!("{FLUNDERS}?limit=120&continue={token1}"), &[], Memory).await;
        let token2 = continue_token(&page2);
        foreign_write(&direct, "fischer-between-2").await;
        create(&direct, &ns_path("ns-c"), &flunder("ns-c", "g-late", 7)).await;
        d.same(&format!("{FLUNDERS}?limit=120&continue={token2}"), &[], Memory).await;
        // The page at an exact revision, and the same pages as metadata.
        d.same(&format!("{FLUNDERS}?limit=50&resourceVersion={last}"), &[], Memory).await;
        d.same(
            &format!("{FLUNDERS}?limit=50&resourceVersion={last}&resourceVersionMatch=Exact"),
            &[],
            Memory,
        )
        .await;
        let meta_page = d
            .same(&format!("{FLUNDERS}?limit=100&resourceVersion={last}"), &[("accept", META_LIST)], Memory)
            .await;
        d.same(
            &format!("{FLUNDERS}?limit=100&continue={}", continue_token(&meta_page)),
            &[("accept", META_LIST)],
            Memory,
        )
        .await;

        // Reads naming a revision of a foreign write are served from memory once kache has passed it.
        let now = foreign_write(&direct, "fischer-after").await;
        let flunders_now = relabel(&direct, "ns-b", "f-002", "db").await;
        caught_up(&via, flunders_now).await;
        assert!(flunders_now > now);
        d.same(FLUNDERS, &[], Memory).await;
        d.same(&format!("{FLUNDERS}?resourceVersion={now}"), &[], Memory).await;

        // Selectors.
        for q in [
            "labelSelector=app%3Ddb",
            "labelSelector=app%21%3Ddb%2Cidx+in+%281%2C2%29",
            "labelSelector=idx",
            "labelSelector=%21idx",
            "fieldSelector=metadata.name%3Df-007",
            "fieldSelector=metadata.namespace%3Dns-b",
            "fieldSelector=metadata.namespace%21%3Dns-a,metadata.name%3Df-010",
            "labelSelector=app%3Dnothing",
            "labelSelector=app%3Ddb&limit=25",
        ] {
            d.same(&format!("{FLUNDERS}?resourceVersion=0&{q}"), &[], Memory).await;
            d.same(&format!("{FLUNDERS}?{q}"), &[], Memory).await;
        }
        d.same(&format!("{}?fieldSelector=metadata.name%3Df-007", ns_path("ns-a")), &[], Memory).await;
        d.same(
            &format!("{FISCHERS}?resourceVersion=0&fieldSelector=metadata.name%3Dfischer-05"),
            &[],
            Memory,
        )
        .await;
        let sel = d.same(&format!("{FLUNDERS}?labelSelector=app%3Dweb&limit=40"), &[], Memory).await;
        d.same(
            &format!("{FLUNDERS}?labelSelector=app%3Dweb&limit=40&continue={}", continue_token(&sel)),
            &[],
            Memory,
        )
        .await;

        // Errors: 400, 422, 404, and the 504 of a revision the apiserver has not reached.
        for q in [
            "limit=abc",
            "resourceVersion=abc",
            "resourceVersion=0&resourceVersionMatch=Exact",
            "resourceVersionMatch=Exact",
            "resourceVersionMatch=Bogus&resourceVersion=1",
            "continue=garbage",
            "continue=garbage&resourceVersion=0",
            "fieldSelector=spec.x%3D1",
            "labelSelector=a%3D%3D%3D",
            "labelSelector=app+in+%28",
        ] {
            d.same(&format!("{FLUNDERS}?{q}"), &[], Memory).await;
        }
        d.same(
            &format!("{FLUNDERS}?resourceVersion={}&resourceVersionMatch=Exact", now + 1_000_000),
            &[],
            Memory,
        )
        .await;

        // gzip: a full list is compressed (over 128 KiB), a small get is not.
        let gz = [("accept-encoding", "gzip")];
        d.same(&format!("{FLUNDERS}?resourceVersion=0"), &gz, Memory).await;
        d.same(FLUNDERS, &gz, Memory).await;
        d.same(&format!("{}/f-001", ns_path("ns-a")), &gz, Memory).await;
        // Pretty output (`?pretty=true`, curl's User-Agent) of a list over 128 KiB: streamed through the
        // incremental re-indenter, gzipped on the fly.
        d.same(&format!("{FLUNDERS}?resourceVersion=0&pretty=true"), &[], Memory).await;
        d.same(&format!("{FLUNDERS}?resourceVersion=0"), &[("user-agent", "curl/8.5.0"), gz[0]], Memory)
            .await;

        // Metadata views.
        d.same(&format!("{FLUNDERS}?resourceVersion=0"), &[("accept", META_LIST)], Memory).await;
        d.same(FLUNDERS, &[("accept", META_LIST)], Memory).await;
        d.same(
            &format!("{FLUNDERS}?resourceVersion=0"),
            &[("accept", META_LIST), ("accept-encoding", "gzip")],
            Memory,
        )
        .await;
        d.same(&format!("{}/f-005", ns_path("ns-c")), &[("accept", META)], Memory).await;
        d.same(&format!("{FISCHERS}?resourceVersion=0&labelSelector=x"), &[("accept", META_LIST)], Memory)
            .await;

        // A version nobody configured (v1alpha1 flunders, with the apiserver's deprecation Warning) is
        // cached on its first read, which is forwarded; once synced it is served from memory.
        let alpha = "/apis/wardle.example.com/v1alpha1/flunders";
        d.same(&format!("{alpha}?resourceVersion=0"), &[], Upstream).await;
        let registry = kache.registry().clone();
        common::eventually("v1alpha1 flunders are cached on first read", SYNC_TIMEOUT, || {
            let synced = registry
                .statuses()
                .iter()
                .any(|s| s.gvr.to_string() == "wardle.example.com/v1alpha1/flunders" && s.synced);
            async move { synced }
        })
        .await;
        d.same(&format!("{alpha}?resourceVersion=0"), &[], Memory).await;
        d.same(&format!("{alpha}?labelSelector=app%3Ddb&limit=30"), &[], Memory).await;
        d.same("/apis/wardle.example.com/v1alpha1/namespaces/ns-a/flunders/f-001", &[], Memory).await;

        // YAML and protobuf are the apiserver's: forwarded (the sample kinds have no protobuf, so it
        // answers 406, or JSON when the client also accepts it). The first Table of a kind without a
        // printer is forwarded and teaches kache that the upstream prints it with the generic columns
        // (Either: another test of this process may have taught it already); later ones are from memory
        // (tests/it/table_real.rs covers them).
        let ns_a0 = format!("{}?resourceVersion=0", ns_path("ns-a"));
        d.same(&ns_a0, &[("accept", TABLE)], Source::Either).await;
        d.same(&ns_a0, &[("accept", "application/yaml")], Upstream).await;
        d.same(&ns_a0, &[("accept", "application/vnd.kubernetes.protobuf")], Upstream).await;
        d.same(&ns_a0, &[("accept", "application/vnd.kubernetes.protobuf, */*")], Upstream).await;
        d.same(
            &ns_a0,
            &[("accept", "application/json;as=Table;v=v1;g=meta.k8s.io, application/json")],
            Memory,
        )
        .await;

        // 406s: go-restful's route selection refuses an Accept naming nothing the route produces (bare
        // media types compared exactly: no `application/*`, case-sensitive), with its own wording; a clause
        // it lets through that the apiserver cannot negotiate gets the negotiation's wording. Both are
        // written indented without a trailing newline; a YAML-only watch gets a YAML Status (forwarded).
        let f001 = format!("{}/f-001", ns_path("ns-a"));
        let watch_a = format!("{}?watch=1", ns_path("ns-a"));
        for accept in [
            "application/xml",
            "text/plain",
            "image/*",
            "application/*",
            "APPLICATION/JSON",
            "application/json;as=Foo;g=meta.k8s.io;v=v1",
        ] {
            for path in [&ns_a0, &f001, &watch_a] {
                d.same(path, &[("accept", accept)], Local).await;
            }
        }
        d.same(&watch_a, &[("accept", "application/yaml")], Upstream).await;

        // Last, a foreign write: the flunders store cannot prove itself fresh until the apiserver reports
        // progress (its periodic bookmark), so kache forwards consistent reads meanwhile; whichever it
        // does, the answer must be the apiserver's (one from a stale memory would carry an older
        // resourceVersion).
        foreign_write(&direct, "fischer-last").await;
        d.same(FLUNDERS, &[], Either).await;
        d.same(&format!("{FLUNDERS}?labelSelector=app%3Ddb"), &[], Either).await;
        d.same(&format!("{}/f-001", ns_path("ns-a")), &[], Either).await;
        d.same(&ns_path("ns-c"), &[("accept", META_LIST)], Either).await;

        d.finish();
        kache.shutdown().await;
    });
}

// === Watches ===

/// A watch opened on both sides.
struct WatchPair {
    what: String,
    api: common::real::Watch,
    via: common::real::Watch,
}

fn is_bookmark(line: &[u8]) -> bool {
    line.starts_with(br#"{"type":"BOOKMARK""#)
}

impl Differential<'_> {
    /// Opens `path` as a watch on both sides; compares status and headers and where kache served it from.
    async fn watch(&mut self, path: &str, headers: &[(&str, &str)], source: Source) -> WatchPair {
        let api = self.api.watch(path, headers).await;
        let memory = self.kache.stats().memory();
        let via = self.via.watch(path, headers).await;
        let what = format!("WATCH {path} {headers:?}");
        let served = if self.kache.stats().memory() > memory { Source::Memory } else { Source::Upstream };
        if source == Source::Either {
            eprintln!("SERVED: {what}: from {served:?}");
        } else if served != source {
            self.failures.push(format!("{what}: kache answered from {served:?}, expected {source:?}"));
        }
        let head = |w: &common::real::Watch| Resp {
            status: w.status,
            headers: w.headers.clone(),
            body: Default::default(),
        };
        self.compare(&what, &head(&api), &head(&via));
        WatchPair { what, api, via }
    }

    /// The next `n` lines of both streams, compared one by one (bookmarks included: their place and shape
    /// matter in the initial phase).
    async fn lines(&mut self, w: &mut WatchPair, n: usize) {
        let (a, b) = (w.api.lines(n).await, w.via.lines(n).await);
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            self.compared += 1;
            self.compare(&format!("{} line {i}", w.what), &line_resp(x), &line_resp(y));
        }
    }

    /// The whole body of an error answer, or the first line of a stream, of both sides, compared.
    async fn first(&mut self, w: &mut WatchPair) {
        let (a, b) = if w.api.status == StatusCode::OK {
            (w.api.line().await.unwrap_or_default(), w.via.line().await.unwrap_or_default())
        } else {
            (w.api.rest().await, w.via.rest().await)
        };
        self.compared += 1;
        self.compare(&format!("{} first", w.what), &line_resp(&a), &line_resp(&b));
    }

    /// The next event of both streams that is not a periodic bookmark (their timing is each server's own),
    /// compared.
    async fn event(&mut self, w: &mut WatchPair) {
        let a = next_event(&mut w.api).await;
        let b = next_event(&mut w.via).await;
        self.compared += 1;
        self.compare(&format!("{} event", w.what), &line_resp(&a), &line_resp(&b));
    }
}

/// A stream's lines with runs of identical BOOKMARK lines collapsed to one: the apiserver repeats its
/// pre-deadline bookmark when its bookmark tick (1 s, jittered) first fires just before the pre-deadline
/// time (observed: two at the same revision 1.2 s apart on a 5 s watch, one on a 10 s watch).
fn collapse_bookmarks(stream: &[u8]) -> bytes::Bytes {
    let mut out: Vec<u8> = Vec::new();
    let mut last: &[u8] = b"";
    for line in stream.split_inclusive(|b| *b == b'\n') {
        if is_bookmark(line) && line == last {
            continue;
        }
        out.extend_from_slice(line);
        last = line;
    }
    out.into()
}

/// The next line that is not a bookmark.
async fn next_event(watch: &mut common::real::Watch) -> bytes::Bytes {
    loop {
        let line = watch.line().await.expect("the watch goes on");
        if !is_bookmark(&line) {
            return line;
        }
    }
}

fn line_resp(line: &bytes::Bytes) -> Resp {
    Resp { status: StatusCode::OK, headers: Default::default(), body: line.clone() }
}

/// Every watch start mode (unset, 0, N, WatchList with its initial-events-end bookmark), full objects and
/// metadata, with selectors; events for writes made after the start, with foreign writes in between.
#[test]
fn watches_match_the_apiserver() {
    let _serial = serial();
    let Some(api) = RealApiserver::start("watches") else { return };
    runtime().block_on(async {
        let direct = Endpoint::from_kubeconfig("apiserver", &api.kubeconfig).await;
        let last = seed(&direct).await;
        let (kache, via) = start_kache(&api).await;
        caught_up(&via, last).await;
        let mut d = Differential::new(&direct, &via, &kache);
        use Source::*;
        let ns_a = ns_path("ns-a");

        // WatchList (client-go's streaming list): the initial ADDED events, then the initial-events-end
        // bookmark, whose object is the kind's empty object (`"spec":{},"status":{}` for flunders).
        let watch_list =
            "watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan";
        let mut full = d.watch(&format!("{ns_a}?{watch_list}"), &[], Memory).await;
        d.lines(&mut full, PER_NAMESPACE + 1).await;
        let mut meta = d.watch(&format!("{ns_a}?{watch_list}"), &[("accept", META)], Memory).await;
        d.lines(&mut meta, PER_NAMESPACE + 1).await;
        let mut selected =
            d.watch(&format!("{FLUNDERS}?{watch_list}&labelSelector=app%3Ddb"), &[], Memory).await;
        d.lines(&mut selected, 3 * PER_NAMESPACE.div_ceil(3) + 1).await;

        // rv=0: the current state, then changes (with bookmarks allowed, 1.34+ ends the initial state with a
        // bookmark too); rv=N: only changes after N.
        let mut zero = d.watch(&format!("{ns_a}?watch=1&resourceVersion=0"), &[], Memory).await;
        d.lines(&mut zero, PER_NAMESPACE).await;
        let mut zero_bm =
            d.watch(&format!("{ns_a}?watch=1&resourceVersion=0&allowWatchBookmarks=true"), &[], Memory).await;
        d.lines(&mut zero_bm, PER_NAMESPACE + 1).await;
        let mut unset = d.watch(&format!("{ns_a}?watch=1"), &[], Memory).await;
        d.lines(&mut unset, PER_NAMESPACE).await;
        let mut from_n = d.watch(&format!("{FLUNDERS}?watch=1&resourceVersion={last}"), &[], Memory).await;

        // Writes: a label change into the selection, a foreign write, a new flunder, a label change out of it.
        relabel(&direct, "ns-a", "f-004", "db").await;
        foreign_write(&direct, "fischer-w1").await;
        create(&direct, &ns_a, &flunder("ns-a", "g-new", 1)).await;
        relabel(&direct, "ns-a", "f-003", "web").await;
        // MODIFIED f-004, ADDED g-new, MODIFIED f-003 (nothing for the fischer).
        for w in [&mut full, &mut meta, &mut zero, &mut zero_bm, &mut unset, &mut from_n] {
            for _ in 0..3 {
                d.event(w).await;
            }
        }
        // The selection sees f-004 enter (ADDED) and f-003 leave (DELETED).
        d.event(&mut selected).await;
        d.event(&mut selected).await;

        // A watch from a revision kache has seen replays what came after it, as the apiserver does.
        let mut replay = d.watch(&format!("{FLUNDERS}?watch=1&resourceVersion={last}"), &[], Memory).await;
        d.lines(&mut replay, 3).await;

        // Watches refused before they start (an HTTP error), or started with an ERROR event.
        for q in [
            "watch=1&sendInitialEvents=true",
            "watch=1&sendInitialEvents=true&resourceVersionMatch=Exact&resourceVersion=5",
            "watch=1&resourceVersion=abc",
            "watch=1&labelSelector=a%3D%3D%3D",
            "watch=1&fieldSelector=spec.x%3D1",
        ] {
            let mut w = d.watch(&format!("{FLUNDERS}?{q}"), &[], Memory).await;
            d.first(&mut w).await;
        }

        // After a foreign write, the watches that start with the current state: the same events, and the
        // initial-events-end bookmark at the same revision.
        foreign_write(&direct, "fischer-last").await;
        let ns_b = ns_path("ns-b");
        let mut wl = d.watch(&format!("{ns_b}?{watch_list}"), &[], Either).await;
        d.lines(&mut wl, PER_NAMESPACE + 1).await;
        let mut unset = d.watch(&format!("{ns_b}?watch=1"), &[], Either).await;
        d.lines(&mut unset, PER_NAMESPACE).await;
        let now = relabel(&direct, "ns-b", "f-001", "db").await;
        for w in [&mut wl, &mut unset] {
            d.event(w).await;
        }

        // Bookmark timing: a watch that allows bookmarks, from the current revision, ending after a few
        // seconds with nothing written: the apiserver's cacher sends its pre-deadline bookmark only when its
        // revision moved past what the watcher has seen (its periodic ones are a minute apart), so the whole
        // streams must be equal (and empty).
        caught_up(&via, now).await;
        let mut short = d
            .watch(
                &format!(
                    "{FLUNDERS}?watch=1&resourceVersion={now}&allowWatchBookmarks=true&timeoutSeconds=5"
                ),
                &[],
                Memory,
            )
            .await;
        let (a, b) = (short.api.rest().await, short.via.rest().await);
        d.compared += 1;
        d.compare(&format!("{} whole stream", short.what), &line_resp(&a), &line_resp(&b));
        assert!(a.is_empty(), "nothing moved, nothing sent: {}", text(&a));
        // The same with a write the watch's selector filters out: the revision moved past what the watcher
        // has seen, so the pre-deadline bookmark comes, at the write's revision, from both.
        let mut filtered = d
            .watch(
                &format!("{FLUNDERS}?watch=1&resourceVersion={now}&allowWatchBookmarks=true&timeoutSeconds=5&labelSelector=app%3Dnothing"),
                &[],
                Memory,
            )
            .await;
        relabel(&direct, "ns-c", "f-009", "web").await;
        let (a, b) = (collapse_bookmarks(&filtered.api.rest().await), collapse_bookmarks(&filtered.via.rest().await));
        assert!(is_bookmark(&a), "the apiserver sends its pre-deadline bookmark: {}", text(&a));
        d.compared += 1;
        d.compare(&format!("{} whole stream", filtered.what), &line_resp(&a), &line_resp(&b));

        d.finish();
        kache.shutdown().await;
    });
}

// === Compaction ===

/// After `compact.sh`, a continue token and an Exact list at a compacted revision that kache holds no
/// snapshot of are the apiserver's 410s (forwarded), and kache keeps serving from memory.
#[test]
fn compacted_revisions_answer_like_the_apiserver() {
    let _serial = serial();
    let Some(api) = RealApiserver::start("compaction") else { return };
    runtime().block_on(async {
        let direct = Endpoint::from_kubeconfig("apiserver", &api.kubeconfig).await;
        let early = foreign_write(&direct, "fischer-early").await;
        let last = seed(&direct).await;
        // A page at a revision from before kache started: kache has no snapshot of it.
        let old_page = direct
            .get(&format!("{FLUNDERS}?limit=20&resourceVersion={}&resourceVersionMatch=Exact", last - 5))
            .await;
        assert_eq!(old_page.status, StatusCode::OK, "{}", text(&old_page.body));
        let old_token = continue_token(&old_page);
        let (kache, via) = start_kache(&api).await;
        caught_up(&via, last).await;
        let mut d = Differential::new(&direct, &via, &kache);
        use Source::*;

        relabel(&direct, "ns-b", "f-010", "db").await;
        let now = foreign_write(&direct, "fischer-late").await;
        api.compact(now);
        // The apiserver's watch cache learns of the compaction through compact_rev_key (polled every 15 s).
        let compacted_continue = format!("{FLUNDERS}?limit=20&continue={old_token}");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(45);
        while direct.get(&compacted_continue).await.status != StatusCode::GONE {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the apiserver never answered 410 for a compacted token"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        d.same(&compacted_continue, &[], Upstream).await;
        d.same(
            &format!("{FLUNDERS}?limit=20&resourceVersion={}&resourceVersionMatch=Exact", last - 5),
            &[],
            Upstream,
        )
        .await;
        d.same(&format!("{FLUNDERS}?resourceVersion={early}&resourceVersionMatch=Exact"), &[], Upstream)
            .await;

        // kache's own state is unaffected.
        let flunders_now = relabel(&direct, "ns-b", "f-011", "db").await;
        caught_up(&via, flunders_now).await;
        d.same(FLUNDERS, &[], Memory).await;
        d.same(&format!("{FLUNDERS}?resourceVersion=0&limit=5"), &[], Memory).await;
        d.finish();
        kache.shutdown().await;
    });
}

// === A real client-go informer through kache ===

/// Writes while an informer runs: per round a flunder relabelled, a foreign write (a new fischer), a new
/// flunder, and the previous round's new flunder deleted. `tag` keeps names unique across runs.
async fn churn(api: &Endpoint, tag: &str, rounds: usize) {
    for i in 0..rounds {
        let ns = NAMESPACES[i % NAMESPACES.len()];
        relabel(api, ns, &format!("f-{:03}", i % PER_NAMESPACE), if i % 2 == 0 { "db" } else { "web" }).await;
        foreign_write(api, &format!("fischer-{tag}-{i}")).await;
        create(api, &ns_path(ns), &flunder(ns, &format!("churn-{tag}-{i}"), i)).await;
        if i > 0 {
            let prev = NAMESPACES[(i - 1) % NAMESPACES.len()];
            let path = format!("{}/churn-{tag}-{}", ns_path(prev), i - 1);
            let r = api.request(Method::DELETE, &path, &[], None).await;
            assert_eq!(r.status, StatusCode::OK, "DELETE {path}: {}", text(&r.body));
        }
    }
}

/// Writes made after the informer synced; its --duration leaves it time to see them all before it compares.
const CHURN_ROUNDS: usize = 15;
/// How long each informer runs after its sync (the churn takes about a second of it).
const INFORMER_DURATION: &str = "6s";
/// The same with a kache restart in the middle (the informer backs off and re-watches).
const INFORMER_DURATION_WITH_RESTART: &str = "12s";
/// The same with an apiserver restart in the middle: its start-up (seconds on a loaded machine) and kache's
/// reflector backoff while it is down come on top.
const INFORMER_DURATION_WITH_APISERVER_RESTART: &str = "30s";

/// The period of the background foreign writes while an informer runs (a real cluster's leases and events).
const FOREIGN_PERIOD: Duration = Duration::from_millis(50);

/// Writes, every [`FOREIGN_PERIOD`] until `stop`, to the resource the informer of `resource` does not watch
/// (fischers for flunders, flunders in their own namespace for fischers), so the global revision moves all
/// through the informer's run, its sync (WatchList or list) included. Returns the number of writes.
fn foreign_writer(
    api: &Endpoint,
    resource: &str,
    tag: String,
    stop: tokio_util::sync::CancellationToken,
) -> tokio::task::JoinHandle<usize> {
    let api = api.clone();
    let fischers = resource.contains("flunders");
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(FOREIGN_PERIOD);
        let mut n = 0;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return n,
                _ = tick.tick() => {}
            }
            let name = format!("bg-{tag}-{n}");
            let (path, obj) = if fischers {
                (FISCHERS.to_owned(), fischer(&name))
            } else {
                (ns_path("ns-bg"), flunder("ns-bg", &name, n))
            };
            // While the apiserver restarts, writes fail; the next tick tries again.
            match api.try_request(Method::POST, &path, "application/json", &obj).await {
                Some(r) if r.status == StatusCode::CREATED => n += 1,
                _ => {}
            }
        }
    })
}

/// What restarts in the middle of an informer's run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Restart {
    None,
    /// kache is stopped and started again on its port, with writes while it is down.
    Kache,
    /// The apiserver process restarts (etcd stays): a fresh watch cache, so kache's re-watch from before
    /// it gets 410 and kache relists, with writes around it.
    Apiserver,
}

/// Runs `informer-check` through kache, with foreign writes all through its run: waits for its sync line,
/// writes [`CHURN_ROUNDS`] rounds (with a [`Restart`] in the middle), then requires exit 0 (its store
/// equals a consistent list from the apiserver).
async fn informer_check(
    api: &RealApiserver,
    direct: &Endpoint,
    kache: &mut Option<Kache>,
    restart: Restart,
    resource: &str,
    watchlist: bool,
) {
    use std::io::{BufRead, BufReader, Read};
    let args = [
        "--server".to_owned(),
        kache.as_ref().expect("kache runs").url(),
        "--compare-server".to_owned(),
        api.url.clone(),
        "--insecure".to_owned(),
        "--resource".to_owned(),
        resource.to_owned(),
        format!("--watchlist={watchlist}"),
        "--duration".to_owned(),
        match restart {
            Restart::None => INFORMER_DURATION,
            Restart::Kache => INFORMER_DURATION_WITH_RESTART,
            Restart::Apiserver => INFORMER_DURATION_WITH_APISERVER_RESTART,
        }
        .to_owned(),
        "--sync-timeout".to_owned(),
        "60s".to_owned(),
    ];
    let tag = format!("{}-{watchlist}-{restart:?}", resource.rsplit('/').next().unwrap_or(resource));
    let stop = tokio_util::sync::CancellationToken::new();
    let background = foreign_writer(direct, resource, tag.clone(), stop.clone());
    let program = api.informer_check.as_ref().expect("start.sh prints INFORMER_CHECK");
    let mut child = std::process::Command::new(program)
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("informer-check starts");
    let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    let stdout = child.stdout.take().expect("piped stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut stderr = child.stderr.take().expect("piped stderr");
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let mut seen = Vec::new();
    let synced = tokio::time::timeout(Duration::from_secs(90), async {
        while let Some(line) = lines.recv().await {
            let done = line.starts_with("synced");
            seen.push(line);
            if done {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    if synced {
        if restart == Restart::Apiserver {
            churn(direct, &format!("{tag}-a"), CHURN_ROUNDS / 2).await;
            api.restart_apiserver().await;
            churn(direct, &format!("{tag}-c"), CHURN_ROUNDS / 2).await;
        } else if restart == Restart::Kache {
            churn(direct, &format!("{tag}-a"), CHURN_ROUNDS / 2).await;
            // Its watch ends with kache; it re-watches (or relists on 410) against the new one.
            let old = kache.take().expect("kache runs");
            let addr = old.addr();
            old.shutdown().await;
            churn(direct, &format!("{tag}-b"), CHURN_ROUNDS / 2).await;
            *kache = Some(start_kache_on(api, addr).await.0);
            churn(direct, &format!("{tag}-c"), CHURN_ROUNDS / 2).await;
        } else {
            churn(direct, &tag, CHURN_ROUNDS).await;
        }
    }
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("wait thread")
        .expect("informer-check exits");
    stop.cancel();
    let foreign = background.await.expect("foreign writer");
    while let Some(line) = lines.recv().await {
        seen.push(line);
    }
    let stderr = stderr.join().unwrap_or_default();
    eprintln!("informer-check {args:?} ({foreign} foreign writes during its run):\n{}", seen.join("\n"));
    assert!(
        synced && status.success(),
        "informer-check {args:?} exited {:?} (synced: {synced})\nstdout:\n{}\nstderr:\n{stderr}",
        status.code(),
        seen.join("\n")
    );
    assert!(foreign > 0, "foreign writes went on during the informer's run");
}

/// A client-go informer (`informer-check`) through kache, WatchList on and off, with foreign writes all
/// through its run (as a real cluster's leases and events do) and writes after its sync, once with a
/// kache restart and twice with an apiserver restart in the middle: its store must equal a consistent list
/// from the apiserver (exit 0).
#[test]
fn client_go_informers_through_kache_match_the_apiserver() {
    let _serial = serial();
    let Some(api) = RealApiserver::start("informer") else { return };
    runtime().block_on(async {
        let direct = Endpoint::from_kubeconfig("apiserver", &api.kubeconfig).await;
        let last = seed(&direct).await;
        let (first, via) = start_kache(&api).await;
        caught_up(&via, last).await;
        let memory = first.stats().memory();
        let mut kache = Some(first);
        for (resource, watchlist) in [
            ("wardle.example.com/v1beta1/flunders", true),
            ("wardle.example.com/v1beta1/flunders", false),
            ("fischers", true),
            ("fischers", false),
        ] {
            informer_check(&api, &direct, &mut kache, Restart::None, resource, watchlist).await;
        }
        let kache_stats = kache.as_ref().expect("kache runs").stats().clone();
        assert!(kache_stats.memory() > memory, "kache served the informers from memory");
        // A kache restart in the middle of an informer's run.
        let flunders = "wardle.example.com/v1beta1/flunders";
        informer_check(&api, &direct, &mut kache, Restart::Kache, flunders, true).await;
        // An apiserver restart in the middle (WatchList on and off): kache relists, the informers follow.
        let reconnects = kache_reconnects(kache.as_ref().expect("kache runs"));
        informer_check(&api, &direct, &mut kache, Restart::Apiserver, flunders, true).await;
        informer_check(&api, &direct, &mut kache, Restart::Apiserver, "fischers", false).await;
        assert!(
            kache_reconnects(kache.as_ref().expect("kache runs")) > reconnects,
            "kache's reflectors re-watched or relisted after the apiserver's restarts"
        );
        kache.expect("kache runs").shutdown().await;
    });
}

/// Re-watches and relists of every resource kache caches (from its reflector statuses).
fn kache_reconnects(kache: &Kache) -> u64 {
    kache.registry().statuses().iter().map(|s| s.relists + s.watch_restarts).sum()
}

// === Custom resources: the CRD apiserver ===

const WIDGETS: &str = "/apis/example.com/v1/widgets";
const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
/// Widgets per namespace (two namespaces).
const WIDGETS_PER_NAMESPACE: usize = 60;

fn widgets_in(ns: &str) -> String {
    format!("/apis/example.com/v1/namespaces/{ns}/widgets")
}

/// A namespaced CRD with a `spec.color` selectable field and a printer column.
fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {
                    "type": "object",
                    "properties": {"color": {"type": "string"}, "size": {"type": "integer"}, "notes": {"type": "string"}},
                }}}},
                "selectableFields": [{"jsonPath": ".spec.color"}],
                "additionalPrinterColumns": [{"name": "Color", "type": "string", "jsonPath": ".spec.color"}],
            }],
        },
    })
}

fn widget(ns: &str, i: usize) -> Value {
    let name = format!("w-{i:03}");
    let notes: String = (0..40).map(|k| format!("line {k:02} of the notes of {name} in {ns}; ")).collect();
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": ns, "labels": {"tier": if i.is_multiple_of(4) { "gold" } else { "iron" }}},
        "spec": {"color": if i.is_multiple_of(2) { "red" } else { "blue" }, "size": i, "notes": notes},
    })
}

/// Creates the CRD and waits until its resource is served.
async fn install_widget_crd(api: &Endpoint) {
    create(api, CRDS, &widget_crd()).await;
    let deadline = tokio::time::Instant::now() + SYNC_TIMEOUT;
    loop {
        let crd = api.get(&format!("{CRDS}/widgets.example.com")).await.json();
        let established = crd["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Established" && c["status"] == "True"));
        if established && api.get(WIDGETS).await.status == StatusCode::OK {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "the widgets CRD is never established: {crd}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// kache in front of the CRD apiserver (no core group either): discovers the CRD's resource, serves custom
/// resources byte-identically (unstructured lists: sorted keys, typed items), pages, selectors, metadata
/// views, WatchList.
#[test]
fn custom_resources_match_the_crd_apiserver() {
    let _serial = serial();
    let Some(api) = RealApiserver::start_flavor(common::real::Flavor::Crd, "crd") else { return };
    runtime().block_on(async {
        let direct = Endpoint::from_kubeconfig("crd-apiserver", &api.kubeconfig).await;
        assert_eq!(
            direct.get("/api").await.status,
            StatusCode::NOT_FOUND,
            "the CRD apiserver has no core group"
        );
        install_widget_crd(&direct).await;
        let mut last = 0;
        for ns in ["team-a", "team-b"] {
            for i in 0..WIDGETS_PER_NAMESPACE {
                last = create(&direct, &widgets_in(ns), &widget(ns, i)).await;
            }
        }
        let (kache, via) = start_kache(&api).await;
        let cached: Vec<String> =
            kache.registry().statuses().iter().filter(|s| s.configured).map(|s| s.gvr.to_string()).collect();
        assert!(cached.contains(&"example.com/v1/widgets".to_owned()), "{cached:?}");
        let deadline = tokio::time::Instant::now() + SYNC_TIMEOUT;
        while rv_of(&via.get(&format!("{WIDGETS}?resourceVersion=0&limit=1")).await.json()) < last {
            assert!(tokio::time::Instant::now() < deadline, "kache's widgets never reach {last}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut d = Differential::new(&direct, &via, &kache);
        use Source::*;

        d.same(WIDGETS, &[], Memory).await;
        d.same(&format!("{WIDGETS}?resourceVersion=0"), &[], Memory).await;
        d.same(&format!("{WIDGETS}?resourceVersion={last}&resourceVersionMatch=Exact"), &[], Memory).await;
        d.same(&widgets_in("team-b"), &[], Memory).await;
        d.same(&format!("{}/w-007", widgets_in("team-a")), &[], Memory).await;
        d.same(&format!("{}/w-999", widgets_in("team-a")), &[], Memory).await;
        let page = d.same(&format!("{WIDGETS}?limit=45"), &[], Memory).await;
        let w = create(&direct, &widgets_in("team-b"), &widget("team-b", 500)).await;
        d.same(&format!("{WIDGETS}?limit=45&continue={}", continue_token(&page)), &[], Memory).await;
        caught_up_at(&via, WIDGETS, w).await;
        for q in [
            "labelSelector=tier%3Dgold",
            "labelSelector=tier%3Dnone",
            "fieldSelector=metadata.name%3Dw-010",
            "fieldSelector=metadata.namespace%3Dteam-a&limit=7",
            "limit=abc",
        ] {
            d.same(&format!("{WIDGETS}?{q}"), &[], Memory).await;
        }
        // Field selectors on other fields follow the CRD's selectableFields (learned from kache's own
        // cache of CRDs): the apiserver filters on `spec.color` and refuses the rest with its custom-resource
        // wording; kache does both from memory. A widget without a color selects as "".
        let w = create(&direct, &widgets_in("team-b"), &colorless_widget("team-b", "w-nocolor")).await;
        caught_up_at(&via, WIDGETS, w).await;
        for q in [
            "fieldSelector=spec.color%3Dred",
            "fieldSelector=spec.color%3D%3Dblue&limit=7",
            "fieldSelector=spec.color%21%3Dred,metadata.namespace%3Dteam-b",
            "fieldSelector=spec.color%3D",
            "fieldSelector=spec.color%3Dred,metadata.name%3Dw-010",
            "fieldSelector=spec.color%3Dgreen",
            "fieldSelector=spec.color%3Dred&labelSelector=tier%3Dgold",
            "fieldSelector=spec.size%3D1",
            "fieldSelector=.spec.color%3Dred",
            "fieldSelector=metadata.uid%3Dx",
            "fieldSelector=spec.color%3Dred,spec.size%3D1",
            "fieldSelector=spec.color%3Dred&resourceVersion=0",
        ] {
            d.same(&format!("{WIDGETS}?{q}"), &[], Memory).await;
        }
        d.same(&format!("{}?fieldSelector=spec.color%3Dblue", widgets_in("team-a")), &[], Memory).await;
        let red_page =
            d.same(&format!("{WIDGETS}?fieldSelector=spec.color%3Dred&limit=25"), &[], Memory).await;
        d.same(
            &format!(
                "{WIDGETS}?fieldSelector=spec.color%3Dred&limit=25&continue={}",
                continue_token(&red_page)
            ),
            &[],
            Memory,
        )
        .await;
        d.same(
            &format!("{WIDGETS}?fieldSelector=spec.color%3Dred&resourceVersion=0"),
            &[("accept", META_LIST)],
            Memory,
        )
        .await;
        // The custom resource handler negotiates without go-restful: `application/*` is JSON, and what it
        // cannot negotiate is its 406 (indented, no trailing newline), for gets, lists and watches alike.
        d.same(&format!("{WIDGETS}?resourceVersion=0"), &[("accept", "application/*")], Memory).await;
        for accept in ["application/xml", "text/plain", "image/*", "APPLICATION/JSON"] {
            for path in [
                widgets_in("team-a"),
                format!("{}/w-003", widgets_in("team-b")),
                format!("{}?watch=1", widgets_in("team-a")),
            ] {
                d.same(&path, &[("accept", accept)], Local).await;
            }
        }
        d.same(&format!("{WIDGETS}?resourceVersion=0"), &[("accept-encoding", "gzip")], Memory).await;
        d.same(&format!("{WIDGETS}?resourceVersion=0&limit=5"), &[("accept", META_LIST)], Memory).await;
        d.same(&format!("{}/w-003", widgets_in("team-b")), &[("accept", META)], Memory).await;
        // Protobuf: the custom-resource handler has no protobuf form for the objects themselves (its 406, or
        // JSON when JSON is offered too: the upstream answers both), but the v1 metadata views are meta.k8s.io
        // types it serves in protobuf, and so does kache, from memory, byte for byte.
        let pb = "application/vnd.kubernetes.protobuf";
        d.same(&format!("{WIDGETS}?resourceVersion=0"), &[("accept", pb)], Upstream).await;
        d.same(
            &format!("{WIDGETS}?resourceVersion=0"),
            &[("accept", "application/vnd.kubernetes.protobuf, application/json")],
            Upstream,
        )
        .await;
        d.same(&format!("{WIDGETS}?resourceVersion=0&limit=5"), &[("accept", PB_META_LIST)], Memory).await;
        d.same(&format!("{}/w-003", widgets_in("team-b")), &[("accept", PB_META)], Memory).await;
        // Tables of custom resources are printed from memory with the CRD's columns.
        d.same(&format!("{}?resourceVersion=0", widgets_in("team-a")), &[("accept", TABLE)], Memory).await;

        let watch_list =
            "watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan";
        let mut wl = d.watch(&format!("{}?{watch_list}", widgets_in("team-a")), &[], Memory).await;
        d.lines(&mut wl, WIDGETS_PER_NAMESPACE + 1).await;
        let w = create(&direct, &widgets_in("team-a"), &widget("team-a", 501)).await;
        d.event(&mut wl).await;

        // Watches selecting on `spec.color`: objects enter (ADDED), change inside (MODIFIED) and leave
        // (DELETED, the previous object at the event's revision) the selection as their color changes.
        let red = "fieldSelector=spec.color%3Dred";
        let mut from_w = d.watch(&format!("{WIDGETS}?watch=1&resourceVersion={w}&{red}"), &[], Memory).await;
        let mut wl_red = d.watch(&format!("{}?{watch_list}&{red}", widgets_in("team-a")), &[], Memory).await;
        d.lines(&mut wl_red, WIDGETS_PER_NAMESPACE / 2 + 1).await;
        let mut meta_red =
            d.watch(&format!("{}?watch=1&{red}", widgets_in("team-a")), &[("accept", META)], Memory).await;
        d.lines(&mut meta_red, WIDGETS_PER_NAMESPACE / 2).await;
        let mut bad = d.watch(&format!("{WIDGETS}?watch=1&fieldSelector=spec.size%3D1"), &[], Memory).await;
        d.first(&mut bad).await;
        recolor(&direct, "team-a", "w-001", json!({"color": "red"})).await; // enters
        recolor(&direct, "team-a", "w-003", json!({"size": 1003})).await; // outside, stays outside
        recolor(&direct, "team-a", "w-002", json!({"color": "blue"})).await; // leaves
        recolor(&direct, "team-a", "w-004", json!({"size": 1004})).await; // inside, stays inside
        recolor(&direct, "team-a", "w-006", json!({"color": null})).await; // leaves (absent reads as "")
        for watch in [&mut from_w, &mut wl_red, &mut meta_red] {
            for _ in 0..4 {
                d.event(watch).await;
            }
        }

        // A CRD update that changes selectableFields (`spec.color` out, `spec.size` in) takes effect: the
        // apiserver rebuilds the resource's storage from its CRD informer, kache reads its cached CRD.
        let mut crd = widget_crd();
        crd["spec"]["versions"][0]["selectableFields"] = json!([{"jsonPath": ".spec.size"}]);
        crd["metadata"]["resourceVersion"] = direct.get(&format!("{CRDS}/widgets.example.com")).await.json()
            ["metadata"]["resourceVersion"]
            .clone();
        let r =
            direct.write(Method::PUT, &format!("{CRDS}/widgets.example.com"), "application/json", &crd).await;
        assert_eq!(r.status, StatusCode::OK, "PUT the CRD: {}", text(&r.body));
        let updated = rv_of(&r.json());
        common::eventually("the apiserver selects on spec.size", SYNC_TIMEOUT, || {
            let direct = direct.clone();
            async move {
                direct.get(&format!("{WIDGETS}?fieldSelector=spec.size%3D4")).await.status == StatusCode::OK
            }
        })
        .await;
        caught_up_at(&via, CRDS, updated).await;
        let w = create(&direct, &widgets_in("team-b"), &widget("team-b", 502)).await;
        caught_up_at(&via, WIDGETS, w).await;
        for q in [
            "fieldSelector=spec.size%3D4",
            "fieldSelector=spec.size%21%3D4,metadata.namespace%3Dteam-a",
            "fieldSelector=spec.size%3D1004",
            "fieldSelector=spec.size%3D",
            "fieldSelector=spec.color%3Dred",
        ] {
            d.same(&format!("{WIDGETS}?{q}"), &[], Memory).await;
        }
        let mut sized = d
            .watch(&format!("{WIDGETS}?watch=1&resourceVersion={w}&fieldSelector=spec.size%3D7"), &[], Memory)
            .await;
        recolor(&direct, "team-b", "w-007", json!({"size": 8})).await; // leaves
        recolor(&direct, "team-b", "w-008", json!({"size": 7})).await; // enters
        d.event(&mut sized).await;
        d.event(&mut sized).await;

        d.finish();
        kache.shutdown().await;
    });
}

/// A widget whose spec has no color.
fn colorless_widget(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"size": 7},
    })
}

/// Merge-patches a widget's spec (a `null` member removes it).
async fn recolor(api: &Endpoint, ns: &str, name: &str, spec: Value) -> u64 {
    let path = format!("{}/{name}", widgets_in(ns));
    let r = api.write(Method::PATCH, &path, "application/merge-patch+json", &json!({"spec": spec})).await;
    assert_eq!(r.status, StatusCode::OK, "PATCH {path}: {}", text(&r.body));
    rv_of(&r.json())
}

/// Waits until kache's store behind `path` has reached `rv`.
async fn caught_up_at(via: &Endpoint, path: &str, rv: u64) {
    let deadline = tokio::time::Instant::now() + SYNC_TIMEOUT;
    while rv_of(&via.get(&format!("{path}?resourceVersion=0&limit=1")).await.json()) < rv {
        assert!(tokio::time::Instant::now() < deadline, "kache's {path} never reaches {rv}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// === Censuses: big consistent lists of a quiet resource under foreign writes ===

/// A flunder of about 2.5 KiB whose bytes are in its spec (the reference), as real objects carry theirs in
/// spec and status: a census (the metadata view) costs a fraction of its list.
fn spec_heavy_flunder(ns: &str, name: &str) -> Value {
    let reference: String = (0..60).map(|k| format!("line {k:02} of the reference of {name}; ")).collect();
    json!({
        "apiVersion": GROUP_VERSION,
        "kind": "Flunder",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"referenceType": "Flunder", "flunderReference": reference},
    })
}

/// The items of a list answer (kache's and the apiserver's must be equal; their list revisions may not be).
fn items(r: &Resp) -> Vec<Value> {
    assert_eq!(r.status, StatusCode::OK, "{}", text(&r.body));
    r.json()["items"].as_array().expect("items").clone()
}

#[test]
fn big_consistent_lists_under_foreign_writes_are_served_after_a_census_and_equal_the_apiservers() {
    let _serial = serial();
    let Some(api) = RealApiserver::start("census") else { return };
    runtime().block_on(async {
        let direct = Endpoint::from_kubeconfig("apiserver", &api.kubeconfig).await;
        // ~1.5 MB of flunders in one namespace: a list worth a census.
        let creates =
            (0..600).map(|i| {
                let direct = &direct;
                async move {
                    create(direct, &ns_path("big"), &spec_heavy_flunder("big", &format!("s-{i:03}"))).await
                }
            });
        let _: Vec<u64> = stream::iter(creates).buffer_unordered(SEED_CONCURRENCY).collect().await;
        let (kache, via) = start_kache_with(&api, SocketAddr::from(([127, 0, 0, 1], 0)), |config| {
            // What serves these reads from memory is the census alone (or a probe, when the store is fresh:
            // the apiserver's once-a-minute bookmark to kache's watch may move it past a foreign write).
            config.freshness.prove = false;
            // The census path whatever its measured time (a debug build's own list is slow): the bound is far
            // beyond it, and short of the clients' response timeout (a read may wait up to it for the store).
            config.freshness.latency_bound = Duration::from_secs(10);
        })
        .await;
        let f = &kache.freshness().stats;
        // `path` through kache and directly: the same objects, kache's from memory.
        let from_memory = |path: String| {
            let (kache, via, direct) = (&kache, &via, &direct);
            async move {
                let (memory, forwarded) = (kache.stats().memory(), kache.stats().forwarded());
                let through = via.get(&path).await;
                let answer = direct.get(&path).await;
                assert_eq!(items(&through), items(&answer), "{path}: the same objects");
                assert_eq!(
                    (kache.stats().memory() - memory, kache.stats().forwarded() - forwarded),
                    (1, 0),
                    "{path}: served from memory; freshness {:?}",
                    kache.freshness().stats
                );
                (through.json(), answer.json())
            }
        };

        // Foreign writes only: flunders are quiet, kache's store is behind the upstream's revision.
        for round in 0..3 {
            let global = foreign_write(&direct, &format!("fischer-census-{round}")).await;
            let (through, answer) = from_memory(FLUNDERS.to_owned()).await;
            assert!(rv_of(&answer) >= global);
            let rv = rv_of(&through);
            assert!(
                rv >= global,
                "round {round}: kache's list at {rv} reflects the revision {global}, as the apiserver's"
            );
        }
        // At most one of the three found the store fresh through such a bookmark.
        assert!(f.census_same.load(std::sync::atomic::Ordering::Relaxed) >= 2, "after a census: {f:?}");

        // A namespace's list and a first page: a census of that part (the namespace; its first 200 objects),
        // the apiserver's objects, remainingItemCount and pages after it.
        let big = ns_path("big");
        for (round, path) in [big.clone(), format!("{big}?limit=200")].into_iter().enumerate() {
            let global = foreign_write(&direct, &format!("fischer-census-part-{round}")).await;
            let (t, a) = from_memory(path.clone()).await;
            assert_eq!(t["metadata"]["remainingItemCount"], a["metadata"]["remainingItemCount"], "{path}");
            assert!(
                rv_of(&t) >= global,
                "{path}: kache's list at {} reflects the revision {global}",
                rv_of(&t)
            );
            // The pages after it, each decided by a census of that page at the first page's revision.
            let mut listed = t["items"].as_array().map_or(0, Vec::len);
            let mut page = t;
            while let Some(token) = page["metadata"]["continue"].as_str().filter(|t| !t.is_empty()) {
                let next = format!("{path}&continue={token}");
                let (t, a) = from_memory(next.clone()).await;
                assert_eq!(
                    t["metadata"], a["metadata"],
                    "{next}: the same revision, remainingItemCount and token"
                );
                listed += t["items"].as_array().map_or(0, Vec::len);
                page = t;
            }
            assert_eq!(listed, 600, "{path}: every page through kache");
        }

        // A write to flunders made directly, then a foreign write, then the list through kache: it
        // reflects the write (an update, a deletion) whichever way kache decides.
        for round in 0..4 {
            let name = format!("s-{:03}", 100 + round);
            if round % 2 == 0 {
                relabel(&direct, "big", &name, "written").await;
            } else {
                let path = format!("{}/{name}", ns_path("big"));
                let r = direct.request(Method::DELETE, &path, &[], None).await;
                assert_eq!(r.status, StatusCode::OK, "DELETE {path}: {}", text(&r.body));
            }
            foreign_write(&direct, &format!("fischer-census-w{round}")).await;
            let through = via.get(FLUNDERS).await;
            let answer = direct.get(FLUNDERS).await;
            assert_eq!(items(&through), items(&answer), "write {round} is reflected");
        }

        kache.shutdown().await;
    });
}
