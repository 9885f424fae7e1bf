//! Tables of kinds without a printer of their own, against the real Kubernetes 1.36 apiservers
//! (`testbed/`): the sample apiserver's flunders and fischers, printed by the generic table
//! convertor (Name, Created At), and custom resources whose CRD declares no `additionalPrinterColumns`
//! (Name, Age). kache learns the generic columns from the upstream's first answer (forwarded) and serves
//! every later Table from memory: lists in every resourceVersion mode, pages, gets, `includeObject`
//! None|Metadata|Object, `meta.k8s.io/v1` and `v1beta1`, and Table watches with bookmarks and WatchList
//! (the initial-events-end bookmark's row included) — byte for byte what the apiserver answers. Bad input
//! (an unknown `includeObject`, `as=`/`g=`/`v=` outside the Table kinds) gets the apiserver's 400 / 406.
//!
//! Periodic bookmarks are sent at each server's discretion, so after a watch's initial events BOOKMARK lines
//! are skipped (as in tests/it/real_apiserver.rs); the initial-events-end bookmark is compared in place.

use crate::common;

use std::time::Duration;

use http::StatusCode;
use serde_json::{Value, json};

use common::real::{Endpoint, Flavor, RealApiserver, create, rv_of, write_kubeconfig};
use kache::app::{Config, Kache, UpstreamSource};
use kache::pipeline::ResponseEncoding;

const V1: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
const V1BETA1: &str = "application/json;as=Table;v=v1beta1;g=meta.k8s.io";
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);
const INCLUDES: [&str; 4] = ["", "&includeObject=None", "&includeObject=Metadata", "&includeObject=Object"];

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// How many objects a list has.
async fn items(api: &Endpoint, path: &str) -> usize {
    api.get(path).await.json()["items"].as_array().map_or(0, Vec::len)
}

/// kache over plain HTTP in front of `api`, synced; small consistent reads probed (served from memory).
async fn start_kache(api: &RealApiserver) -> (Kache, Endpoint) {
    let mut config = Config::for_url(String::new());
    config.upstream = UpstreamSource::Kubeconfig(Some(api.kubeconfig.clone()));
    config.freshness.probe_small_reads = true;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let kache = Kache::start_with_metrics(config, listener, Some(metrics)).await.expect("kache starts");
    tokio::time::timeout(SYNC_TIMEOUT, kache.wait_synced()).await.expect("kache syncs");
    let kubeconfig = api.run_dir().join("kache-table.kubeconfig");
    write_kubeconfig(&kubeconfig, &kache.url());
    let via = Endpoint::from_kubeconfig("kache", &kubeconfig).await;
    (kache, via)
}

/// Waits until kache's store of `path` has reached `rv`.
async fn caught_up(via: &Endpoint, path: &str, rv: u64) {
    let deadline = tokio::time::Instant::now() + SYNC_TIMEOUT;
    while rv_of(&via.get(&format!("{path}?resourceVersion=0&limit=1")).await.json()) < rv {
        assert!(tokio::time::Instant::now() < deadline, "kache's {path} never reaches {rv}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Where kache answered a read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// A Table from memory.
    Memory,
    /// Forwarded upstream.
    Upstream,
    /// Answered by kache before any store is read (a 406 of content negotiation).
    Local,
}

struct Differential<'a> {
    api: &'a Endpoint,
    via: &'a Endpoint,
    kache: &'a Kache,
    /// Age cells (custom resources' `date` columns) move with the clock: retried a few times.
    ages: bool,
}

impl Differential<'_> {
    fn counters(&self) -> (u64, u64) {
        (self.kache.stats().encoding_memory(ResponseEncoding::Table), self.kache.stats().forwarded())
    }

    /// GET `path` as `accept` from both; status, Content-Type and body must be equal, and kache must have
    /// answered from `source`. Returns kache's answer.
    async fn same(&self, path: &str, accept: &str, source: Source) -> common::Resp {
        let headers = [("accept", accept)];
        let mut last = None;
        for _ in 0..if self.ages { 3 } else { 1 } {
            let want = self.api.get_with(path, &headers).await;
            let (memory, forwarded) = self.counters();
            let got = self.via.get_with(path, &headers).await;
            let (memory, forwarded) = (self.counters().0 - memory, self.counters().1 - forwarded);
            let served = match (memory, forwarded) {
                (1, 0) => Some(Source::Memory),
                (0, 1) => Some(Source::Upstream),
                (0, 0) => Some(Source::Local),
                _ => None,
            };
            assert_eq!(served, Some(source), "GET {path} (Accept {accept}): where kache answered from");
            if want.status == got.status
                && want.headers.get("content-type") == got.headers.get("content-type")
                && want.body == got.body
            {
                return got;
            }
            last = Some((want, got));
        }
        let (want, got) = last.expect("one attempt");
        panic!(
            "GET {path} (Accept {accept}):\n  apiserver {} {:?}: {}\n  kache     {} {:?}: {}",
            want.status,
            want.headers.get("content-type"),
            text(&want.body),
            got.status,
            got.headers.get("content-type"),
            text(&got.body)
        );
    }

    /// Waits until kache prints `base`'s Tables from memory: it learns the columns when the forwarded
    /// answer's body has been relayed whole, which can be just after the client has read it.
    async fn learned(&self, base: &str) {
        let deadline = tokio::time::Instant::now() + SYNC_TIMEOUT;
        loop {
            let before = self.counters().0;
            let r = self.via.get_with(&format!("{base}?resourceVersion=0"), &[("accept", V1)]).await;
            assert_eq!(r.status, StatusCode::OK, "{}", text(&r.body));
            if self.counters().0 > before {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "kache never prints {base}'s Tables from memory");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Every page of a chunked Table list (`limit`), each page compared.
    async fn pages(&self, path: &str, limit: usize, include: &str) -> usize {
        let mut page = self.same(&format!("{path}?limit={limit}{include}"), V1, Source::Memory).await.json();
        let mut pages = 1;
        while let Some(token) = page["metadata"]["continue"].as_str().filter(|c| !c.is_empty()) {
            let next = format!("{path}?limit={limit}&continue={token}{include}");
            page = self.same(&next, V1, Source::Memory).await.json();
            pages += 1;
        }
        pages
    }

    /// The 400 and 406 answers to bad Table requests.
    async fn bad_input(&self, path: &str) {
        let r = self.same(&format!("{path}?includeObject=Everything"), V1, Source::Upstream).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", text(&r.body));
        for accept in [
            "application/json;as=Table;v=v2;g=meta.k8s.io",
            "application/json;as=Table;v=v1;g=example.com",
            "application/json;as=Tables;v=v1;g=meta.k8s.io",
            "application/json;as=Table",
        ] {
            let r = self.same(path, accept, Source::Local).await;
            assert_eq!(r.status, StatusCode::NOT_ACCEPTABLE, "{accept}: {}", text(&r.body));
        }
    }
}

/// A Table watch line with the age cells of its row blanked (`date` columns print ages), bookmarks aside.
fn without_ages(line: &[u8], ages: bool) -> Value {
    let mut v: Value = serde_json::from_slice(line).unwrap_or_else(|e| panic!("{e}: {}", text(line)));
    if ages && v["type"] != json!("BOOKMARK") {
        for r in v["object"]["rows"].as_array_mut().into_iter().flatten() {
            if let Some(cells) = r["cells"].as_array_mut() {
                cells.truncate(1);
            }
        }
    }
    v
}

/// The next line that is not a periodic BOOKMARK.
async fn next_event(w: &mut common::real::Watch) -> Vec<u8> {
    loop {
        let line = w.line().await.expect("the watch goes on");
        if !line.starts_with(br#"{"type":"BOOKMARK""#) {
            return line.to_vec();
        }
    }
}

/// A Table watch through kache and directly: the initial events and the initial-events-end bookmark
/// (`initial` lines) compared in place, then the event of `write` (run after both watches started).
async fn same_watch<F, Fut>(d: &Differential<'_>, path: &str, initial: usize, write: F)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let headers = [("accept", V1)];
    let before = d.counters().0;
    let mut a = d.api.watch(path, &headers).await;
    let mut k = d.via.watch(path, &headers).await;
    assert_eq!(d.counters().0, before + 1, "the Table watch {path} is served from kache's memory");
    assert_eq!((a.status, k.status), (StatusCode::OK, StatusCode::OK), "{path}");
    let (la, lk) = (a.lines(initial).await, k.lines(initial).await);
    for (i, (x, y)) in la.iter().zip(&lk).enumerate() {
        assert_eq!(
            without_ages(y, d.ages),
            without_ages(x, d.ages),
            "{path}: line {i} through kache (left) and directly:\n{}\n{}",
            text(y),
            text(x)
        );
        if !d.ages {
            assert_eq!(text(y), text(x), "{path}: line {i} byte for byte");
        }
    }
    if initial > 0 {
        let last: Value = serde_json::from_slice(&la[initial - 1]).expect("json");
        assert_eq!(last["type"], json!("BOOKMARK"), "{path}: the initial events end with a bookmark");
    }
    write().await;
    let (x, y) = (next_event(&mut a).await, next_event(&mut k).await);
    assert_eq!(without_ages(&y, d.ages), without_ages(&x, d.ages), "{path}: the write's event");
}

// === The generic convertor: the sample apiserver ===

const FLUNDERS_V1ALPHA1: &str = "/apis/wardle.example.com/v1alpha1/flunders";
const FLUNDERS_V1BETA1: &str = "/apis/wardle.example.com/v1beta1/flunders";
const FISCHERS: &str = "/apis/wardle.example.com/v1alpha1/fischers";

fn flunders_in(ns: &str) -> String {
    format!("/apis/wardle.example.com/v1beta1/namespaces/{ns}/flunders")
}

fn flunder(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "wardle.example.com/v1beta1", "kind": "Flunder",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": "t"}, "annotations": {"note": "<&>"}},
        "spec": {"reference": "x"}})
}

/// The generic columns a kache learns are its own (as is the gauge that counts them): a fresh kache has
/// learned nothing, whatever other kaches of the process have printed.
#[test]
fn generic_tables_match_the_sample_apiserver() {
    let Some(api) = RealApiserver::start("table-generic") else { return };
    runtime().block_on(async {
        let direct = Endpoint::from_kubeconfig("apiserver", &api.kubeconfig).await;
        for i in 0..4 {
            create(&direct, FISCHERS, &json!({"apiVersion": "wardle.example.com/v1alpha1", "kind": "Fischer",
                "metadata": {"name": format!("fi-{i}")}, "disallowedFlunders": ["a"]}))
            .await;
        }
        let mut rv = 0;
        for (ns, n) in [("t-a", 23), ("t-b", 3)] {
            for i in 0..n {
                rv = create(&direct, &flunders_in(ns), &flunder(ns, &format!("f-{i:02}"))).await;
            }
        }
        let (kache, via) = start_kache(&api).await;
        caught_up(&via, FLUNDERS_V1BETA1, rv).await;
        caught_up(&via, FISCHERS, rv).await;
        let d = Differential { api: &direct, via: &via, kache: &kache, ages: false };

        // Before kache has seen the upstream print a resource, its Tables are forwarded; the first answer
        // teaches the generic columns, then they are printed from memory.
        for base in [FLUNDERS_V1ALPHA1, FLUNDERS_V1BETA1, FISCHERS] {
            d.same(&format!("{base}?limit=2"), V1, Source::Upstream).await;
            d.learned(base).await;
            d.same(&format!("{base}?limit=2"), V1, Source::Memory).await;
        }
        // `kache_table_generic_resources` counts them: these three, this kache's own.
        let scrape = common::get(&kache.metrics_url().expect("a metrics listener"), "/metrics").await;
        let scrape = text(&scrape.body);
        let learned = scrape
            .lines()
            .find_map(|l| l.strip_prefix("kache_table_generic_resources "))
            .and_then(|v| v.trim().parse::<f64>().ok());
        assert_eq!(learned, Some(3.0), "kache_table_generic_resources");
        let lists = [
            FLUNDERS_V1BETA1.to_owned(),
            FLUNDERS_V1ALPHA1.to_owned(),
            flunders_in("t-a"),
            flunders_in("t-empty"),
            FISCHERS.to_owned(),
        ];
        for base in &lists {
            for include in INCLUDES {
                for rv_mode in ["", "&resourceVersion=0", &format!("&resourceVersion={rv}&resourceVersionMatch=NotOlderThan")] {
                    d.same(&format!("{base}?x=1{rv_mode}{include}"), V1, Source::Memory).await;
                }
                d.same(&format!("{base}?x=1{include}"), V1BETA1, Source::Memory).await;
                d.same(&format!("{base}?labelSelector=app%3Dt&fieldSelector=metadata.name%3Df-01{include}"), V1, Source::Memory).await;
            }
            d.same(&format!("{base}?pretty=true&includeObject=Object"), V1, Source::Memory).await;
        }
        // An empty Table has `"rows":null` (the generic convertor appends to a nil slice).
        let empty = d.same(&flunders_in("t-empty"), V1, Source::Memory).await;
        assert!(text(&empty.body).contains(r#""rows":null"#), "{}", text(&empty.body));
        // kubectl's chunked get: every page, tokens and remaining counts equal.
        for include in INCLUDES {
            assert_eq!(d.pages(FLUNDERS_V1BETA1, 5, include).await, 6);
        }
        assert_eq!(d.pages(FISCHERS, 3, "").await, 2);
        // Gets: one row at the object's resourceVersion; a missing one is the apiserver's 404.
        for include in INCLUDES {
            d.same(&format!("{}/f-01?x=1{include}", flunders_in("t-a")), V1, Source::Memory).await;
            d.same(&format!("{FISCHERS}/fi-2?x=1{include}"), V1BETA1, Source::Memory).await;
        }
        let missing = d.same(&format!("{}/nope", flunders_in("t-a")), V1, Source::Memory).await;
        assert_eq!(missing.status, StatusCode::NOT_FOUND);
        d.bad_input(&flunders_in("t-a")).await;

        // Table watches: WatchList (initial events, then the initial-events-end bookmark), an empty one
        // (the bookmark is the first event: it carries the column definitions), and a watch from a
        // resourceVersion that allows bookmarks; each then sees a new flunder.
        let mut n = 0;
        for include in INCLUDES {
            for ns in ["t-b", "t-none"] {
                let initial = items(&direct, &flunders_in(ns)).await + 1;
                let path = format!(
                    "{}?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan{include}",
                    flunders_in(ns)
                );
                n += 1;
                let name = format!("w-{n:02}");
                same_watch(&d, &path, initial, || async {
                    create(&direct, &flunders_in(ns), &flunder(ns, &name)).await;
                })
                .await;
            }
            let rv = rv_of(&direct.get(&flunders_in("t-b")).await.json());
            caught_up(&via, FLUNDERS_V1BETA1, rv).await;
            let path = format!("{}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true{include}", flunders_in("t-b"));
            n += 1;
            let name = format!("w-{n:02}");
            same_watch(&d, &path, 0, || async {
                create(&direct, &flunders_in("t-b"), &flunder("t-b", &name)).await;
            })
            .await;
        }
        drop(kache);
    });
}

// === Custom resources without printer columns: the CRD apiserver ===

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

fn plain_crd() -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "plains.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "plains", "singular": "plain", "kind": "Plain", "listKind": "PlainList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}})
}

fn plains_in(ns: &str) -> String {
    format!("/apis/example.com/v1/namespaces/{ns}/plains")
}

fn plain(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Plain", "metadata": {"name": name, "namespace": ns},
        "spec": {"n": 1}})
}

#[test]
fn custom_resources_without_printer_columns_match_the_crd_apiserver() {
    let Some(api) = RealApiserver::start_flavor(Flavor::Crd, "table-plain-crd") else { return };
    runtime().block_on(async {
        let direct = Endpoint::from_kubeconfig("crd-apiserver", &api.kubeconfig).await;
        create(&direct, CRDS, &plain_crd()).await;
        let deadline = tokio::time::Instant::now() + SYNC_TIMEOUT;
        while direct.get(&plains_in("p-a")).await.status != StatusCode::OK {
            assert!(tokio::time::Instant::now() < deadline, "the plains CRD is never served");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut rv = 0;
        for (ns, n) in [("p-a", 7), ("p-b", 2)] {
            for i in 0..n {
                rv = create(&direct, &plains_in(ns), &plain(ns, &format!("p-{i}"))).await;
            }
        }
        let (kache, via) = start_kache(&api).await;
        caught_up(&via, "/apis/example.com/v1/plains", rv).await;
        let d = Differential { api: &direct, via: &via, kache: &kache, ages: true };
        // The CRD convertor's columns (Name, Age) come from kache's own cached CRD: from memory at once.
        for base in ["/apis/example.com/v1/plains".to_owned(), plains_in("p-a"), plains_in("p-empty")] {
            for include in INCLUDES {
                d.same(&format!("{base}?x=1{include}"), V1, Source::Memory).await;
                d.same(&format!("{base}?resourceVersion=0{include}"), V1BETA1, Source::Memory).await;
            }
        }
        assert_eq!(d.pages(&plains_in("p-a"), 3, "&includeObject=Object").await, 3);
        d.same(&format!("{}/p-1?includeObject=None", plains_in("p-a")), V1, Source::Memory).await;
        let missing = d.same(&format!("{}/nope", plains_in("p-a")), V1, Source::Memory).await;
        assert_eq!(missing.status, StatusCode::NOT_FOUND);
        d.bad_input(&plains_in("p-a")).await;
        let mut n = 0;
        for include in INCLUDES {
            for ns in ["p-b", "p-none"] {
                let initial = items(&direct, &plains_in(ns)).await + 1;
                let path = format!(
                    "{}?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan{include}",
                    plains_in(ns)
                );
                n += 1;
                let name = format!("w-{n:02}");
                same_watch(&d, &path, initial, || async {
                    create(&direct, &plains_in(ns), &plain(ns, &name)).await;
                })
                .await;
            }
        }
        drop(kache);
    });
}
