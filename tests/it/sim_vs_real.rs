//! kache-sim checked against the real apiserver: one suite of reads sent to four
//! endpoints — the real Kubernetes 1.36 CRD apiserver (`testbed/apiserver/start-crd.sh`: the generic
//! registry, watch cache and etcd3 store serving custom resources), kache in front of it, kache-sim serving
//! the same custom resource, and kache in front of the sim — after the same writes on both upstreams.
//!
//! Three comparisons per read:
//! 1. kache in front of the real apiserver = the real apiserver, byte for byte;
//! 2. kache in front of the sim = the sim, byte for byte;
//! 3. the sim = the real apiserver, after a normalisation of what two independent stores cannot share:
//!    resourceVersions (and the revisions inside continue tokens and Status messages), uids,
//!    creationTimestamps and `managedFields` (their manager is the writing client's user agent, and their
//!    times differ). Key order and the trailing newline are still compared; string escaping is not.
//!    A difference here is the model's: fix the sim, or list it in [`KNOWN_DIFFERENCES`] with the reason.
//!
//! Periodic watch bookmarks are each server's own timing: after the initial events, BOOKMARK lines are
//! skipped, as in tests/it/real_apiserver.rs.

use crate::common;

use std::time::Duration;

use base64::Engine;
use http::{Method, StatusCode};
use serde_json::{Value, json};

use common::Resp;
use common::real::{Endpoint, Flavor, RealApiserver, Watch, write_kubeconfig};
use kache::app::{Config, Kache, UpstreamSource};

const WIDGETS: &str = "/apis/example.com/v1/widgets";
const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const NAMESPACES: [&str; 2] = ["team-a", "team-b"];
const PER_NAMESPACE: usize = 25;
/// Hang guard for syncing and catching up.
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// Reads on which the sim knowingly answers differently from the real apiserver: (request template, why).
/// Each must still differ (a fixed model makes the entry stale, and the test says so).
const KNOWN_DIFFERENCES: &[(&str, &str)] = &[(
    "/apis/example.com/v1/widgets?watch=1&resourceVersion={early}",
    "a watch from a compacted revision: the real watch cache replays the events it still holds (compaction \
     is etcd's; the cache's window is its own), the sim answers 410 at once. Kept: the tests of kache's \
     relists (tests/it/convergence.rs, resume.rs, python.rs, kube_rs.rs, metrics_move.rs) use the sim's \
     compaction as their deterministic way to expire a watch (sim/README.md)",
)];

fn widgets_in(ns: &str) -> String {
    format!("/apis/example.com/v1/namespaces/{ns}/widgets")
}

/// The CRD: no selectableFields and no printer columns (the sim models neither; see sim/README.md).
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
                    "properties": {"color": {"type": "string"}, "size": {"type": "integer"}},
                }}}},
            }],
        },
    })
}

fn widget(ns: &str, i: usize) -> Value {
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": format!("w-{i:03}"), "namespace": ns,
                     "labels": {"tier": if i.is_multiple_of(4) { "gold" } else { "iron" }}},
        "spec": {"color": if i.is_multiple_of(2) { "red" } else { "blue" }, "size": i},
    })
}

fn text(b: &[u8]) -> String {
    const MAX: usize = 1200;
    let s = String::from_utf8_lossy(b);
    if s.len() > MAX { format!("{}… ({} bytes)", &s[..MAX], b.len()) } else { s.into_owned() }
}

fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no rv: {v}"))
}

// === Normalisation (sim vs real only) ===

/// The JSON of one body or watch line with the values two independent stores cannot share replaced.
fn normalise(body: &[u8]) -> String {
    let Ok(mut v) = serde_json::from_slice::<Value>(body) else {
        return String::from_utf8_lossy(body).into();
    };
    scrub(&mut v);
    let newline = if body.ends_with(b"\n") { "\\n" } else { "" };
    format!("{v}{newline}")
}

fn scrub(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.shift_remove("managedFields");
            for (k, val) in map.iter_mut() {
                match (k.as_str(), &*val) {
                    ("resourceVersion", Value::String(_)) => *val = json!("RV"),
                    ("uid", Value::String(_)) => *val = json!("UID"),
                    ("creationTimestamp", Value::String(_)) => *val = json!("TS"),
                    ("continue", Value::String(token)) => *val = json!(continue_start(token)),
                    ("message", Value::String(m)) => *val = json!(digits_to_n(m)),
                    _ => scrub(val),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(scrub),
        _ => {}
    }
}

/// A continue token's position without its revision (`{"v":…,"rv":N,"start":…}`, base64url).
fn continue_start(token: &str) -> String {
    let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token.trim_end_matches('=')).ok();
    let parsed: Option<Value> = decoded.and_then(|d| serde_json::from_slice(&d).ok());
    match parsed {
        Some(t) => format!("CONTINUE(v={}, start={})", t["v"], t["start"]),
        None => token.to_owned(),
    }
}

fn digits_to_n(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_digits = false;
    for c in s.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('N');
            }
            in_digits = true;
        } else {
            in_digits = false;
            out.push(c);
        }
    }
    out
}

// === The four endpoints ===

/// One upstream (real or sim) and kache in front of it.
struct Pair {
    name: &'static str,
    upstream: Endpoint,
    kache: Endpoint,
    kache_handle: Kache,
    /// The last revision written (`{last}` in request templates).
    last: u64,
    /// The continue token of the previous list read (`{cont}`).
    cont: String,
    /// A revision from before the compaction (`{early}`), and a continue token at it (`{early_cont}`).
    early: u64,
    early_cont: String,
}

impl Pair {
    fn expand(&self, template: &str) -> String {
        template
            .replace("{early_cont}", &self.early_cont)
            .replace("{early}", &self.early.to_string())
            .replace("{last}", &self.last.to_string())
            .replace("{future}", &(self.last + 1_000_000).to_string())
            .replace("{cont}", &self.cont)
    }

    async fn write(&mut self, method: Method, path: &str, content_type: &str, body: &Value) -> Value {
        let r = self.upstream.write(method.clone(), path, content_type, body).await;
        assert!(r.status.is_success(), "{}: {method} {path}: {} {}", self.name, r.status, text(&r.body));
        let v = r.json();
        self.last = rv_of(&v);
        v
    }

    /// Waits until kache's widgets store has reached the last write.
    async fn caught_up(&self) {
        let deadline = tokio::time::Instant::now() + SYNC_TIMEOUT;
        while rv_of(&self.kache.get(&format!("{WIDGETS}?resourceVersion=0&limit=1")).await.json()) < self.last
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}: kache never reaches {}",
                self.name,
                self.last
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn kache_in_front(mut config: Config, dir: &std::path::Path, name: &str) -> (Kache, Endpoint) {
    // Small consistent reads from memory after a probe (by default forwarded): the memory path is compared.
    config.freshness.probe_small_reads = true;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let kache = Kache::start(config, listener).await.expect("kache starts");
    tokio::time::timeout(SYNC_TIMEOUT, kache.wait_synced()).await.expect("kache syncs");
    let kubeconfig = dir.join(format!("{name}.kubeconfig"));
    write_kubeconfig(&kubeconfig, &kache.url());
    (kache, Endpoint::from_kubeconfig("kache", &kubeconfig).await)
}

/// Collects the differences of every read.
#[derive(Default)]
struct Suite {
    failures: Vec<String>,
    /// Known differences seen (by template).
    known_seen: Vec<&'static str>,
    compared: usize,
}

const COMPARED_HEADERS: [&str; 4] = ["content-type", "content-encoding", "warning", "retry-after"];

fn gunzip(b: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(b).read_to_end(&mut out).expect("valid gzip");
    out
}

fn plain_body(r: &Resp) -> Vec<u8> {
    if r.headers.get("content-encoding").is_some_and(|v| v == "gzip") {
        gunzip(&r.body)
    } else {
        r.body.to_vec()
    }
}

impl Suite {
    fn exact(&mut self, what: &str, want: &Resp, got: &Resp) {
        self.compared += 1;
        if want.status != got.status {
            self.failures.push(format!(
                "{what}: status {} / {}\n  {}\n  {}",
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
                    "{what}: header {h}: {:?} / {:?}",
                    want.headers.get(h),
                    got.headers.get(h)
                ));
            }
        }
        let (a, b) = (plain_body(want), plain_body(got));
        if a != b {
            self.failures.push(format!("{what}: bodies differ\n  {}\n  {}", text(&a), text(&b)));
        }
    }

    /// The sim against the real apiserver, normalised.
    fn model(&mut self, template: &'static str, what: &str, real: &Resp, sim: &Resp) {
        self.compared += 1;
        let mut diffs = Vec::new();
        if real.status != sim.status {
            diffs.push(format!("status real {} / sim {}", real.status, sim.status));
        }
        for h in COMPARED_HEADERS {
            if real.headers.get(h) != sim.headers.get(h) {
                diffs.push(format!(
                    "header {h}: real {:?} / sim {:?}",
                    real.headers.get(h),
                    sim.headers.get(h)
                ));
            }
        }
        let (a, b) = (normalise(&plain_body(real)), normalise(&plain_body(sim)));
        if a != b {
            let at = a.bytes().zip(b.bytes()).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
            let from = at.saturating_sub(150);
            diffs.push(format!(
                "bodies differ at {at}\n  real: …{}\n  sim:  …{}",
                text(&a.as_bytes()[from..]),
                text(&b.as_bytes()[from..])
            ));
        }
        let known = KNOWN_DIFFERENCES.iter().any(|(t, _)| *t == template);
        match (diffs.is_empty(), known) {
            (true, false) => {}
            (false, true) => self.known_seen.push(template),
            (true, true) => self.failures.push(format!("{what}: listed as a known difference of the sim, but the sim now answers like the real apiserver: drop it from KNOWN_DIFFERENCES")),
            (false, false) => self.failures.push(format!("SIM ≠ REAL: {what}: {}", diffs.join("\n  "))),
        }
    }

    fn finish(self) {
        assert!(
            self.failures.is_empty(),
            "{} differences in {} comparisons:\n\n{}",
            self.failures.len(),
            self.compared,
            self.failures.join("\n\n")
        );
    }
}

/// GETs `template` from all four endpoints and compares; remembers each side's continue token.
async fn read(
    s: &mut Suite,
    real: &mut Pair,
    sim: &mut Pair,
    template: &'static str,
    headers: &[(&str, &str)],
) {
    let mut answers = Vec::new();
    for p in [&*real, &*sim] {
        let path = p.expand(template);
        let direct = p.upstream.get_with(&path, headers).await;
        let via = p.kache.get_with(&path, headers).await;
        s.exact(&format!("{}: GET {path} {headers:?} (kache vs upstream)", p.name), &direct, &via);
        answers.push(direct);
    }
    s.model(template, &format!("GET {template} {headers:?}"), &answers[0], &answers[1]);
    for (p, r) in [(&mut *real, &answers[0]), (&mut *sim, &answers[1])] {
        if let Some(c) = serde_json::from_slice::<Value>(&r.body)
            .ok()
            .and_then(|v| v["metadata"]["continue"].as_str().map(str::to_owned))
        {
            p.cont = c;
        }
    }
}

/// A watch on all four endpoints: [real, kache→real, sim, kache→sim].
struct Watches {
    template: &'static str,
    w: Vec<Watch>,
}

async fn watch(
    s: &mut Suite,
    real: &Pair,
    sim: &Pair,
    template: &'static str,
    headers: &[(&str, &str)],
) -> Watches {
    let mut w = Vec::new();
    for p in [real, sim] {
        let path = p.expand(template);
        w.push(p.upstream.watch(&path, headers).await);
        w.push(p.kache.watch(&path, headers).await);
    }
    let head = |w: &Watch| Resp { status: w.status, headers: w.headers.clone(), body: Default::default() };
    s.exact(&format!("real: WATCH {template}"), &head(&w[0]), &head(&w[1]));
    s.exact(&format!("sim: WATCH {template}"), &head(&w[2]), &head(&w[3]));
    s.model(template, &format!("WATCH {template} {headers:?} (head)"), &head(&w[0]), &head(&w[2]));
    Watches { template, w }
}

fn line_resp(b: bytes::Bytes) -> Resp {
    Resp { status: StatusCode::OK, headers: Default::default(), body: b }
}

fn is_bookmark(line: &[u8]) -> bool {
    line.starts_with(br#"{"type":"BOOKMARK""#)
}

async fn next_event(w: &mut Watch) -> bytes::Bytes {
    loop {
        let line = w.line().await.expect("the watch goes on");
        if !is_bookmark(&line) {
            return line;
        }
    }
}

impl Watches {
    /// The next `n` lines of each, bookmarks included (the initial phase).
    async fn lines(&mut self, s: &mut Suite, n: usize) {
        for i in 0..n {
            let mut l = Vec::new();
            for w in &mut self.w {
                l.push(line_resp(w.line().await.unwrap_or_default()));
            }
            self.compare(s, &format!("line {i}"), &l);
        }
    }

    /// The next non-bookmark line of each.
    async fn event(&mut self, s: &mut Suite) {
        let mut l = Vec::new();
        for w in &mut self.w {
            l.push(line_resp(next_event(w).await));
        }
        self.compare(s, "event", &l);
    }

    /// The whole body of an answer that is not a stream.
    async fn rest(&mut self, s: &mut Suite) {
        let mut l = Vec::new();
        for w in &mut self.w {
            l.push(line_resp(w.rest().await));
        }
        self.compare(s, "body", &l);
    }

    fn compare(&self, s: &mut Suite, what: &str, l: &[Resp]) {
        let t = self.template;
        s.exact(&format!("real: WATCH {t} {what}"), &l[0], &l[1]);
        s.exact(&format!("sim: WATCH {t} {what}"), &l[2], &l[3]);
        s.model(t, &format!("WATCH {t} {what}"), &l[0], &l[2]);
    }
}

// === The suite ===

#[test]
fn the_sim_answers_like_the_real_apiserver() {
    let Some(api) = RealApiserver::start_flavor(Flavor::Crd, "sim-vs-real") else { return };
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async {
        // The real side: the CRD, established.
        let direct = Endpoint::from_kubeconfig("crd-apiserver", &api.kubeconfig).await;
        let r = direct.write(Method::POST, CRDS, "application/json", &widget_crd()).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", text(&r.body));
        common::eventually("the widgets CRD is served", SYNC_TIMEOUT, || {
            let direct = direct.clone();
            async move { direct.get(WIDGETS).await.status == StatusCode::OK }
        })
        .await;
        // The sim side: the same resource, and the namespaces it requires.
        let sim = kache_sim::Sim::builder()
            .crd(kache_sim::Crd::parse("example.com/v1/Widget/widgets/Namespaced").expect("crd"))
            .start()
            .await
            .expect("sim starts");
        for ns in NAMESPACES {
            sim.create("namespaces", None, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
                .expect("namespace");
        }
        let sim_kubeconfig = api.run_dir().join("sim.kubeconfig");
        write_kubeconfig(&sim_kubeconfig, &sim.url());
        let sim_direct = Endpoint::from_kubeconfig("sim", &sim_kubeconfig).await;

        // Both seeded with the same writes, then kache in front of each.
        let mut seeded = Vec::new();
        for upstream in [&direct, &sim_direct] {
            let mut last = 0;
            for ns in NAMESPACES {
                for i in 0..PER_NAMESPACE {
                    let r = upstream.write(Method::POST, &widgets_in(ns), "application/json", &widget(ns, i)).await;
                    assert_eq!(r.status, StatusCode::CREATED, "{}", text(&r.body));
                    last = rv_of(&r.json());
                }
            }
            seeded.push(last);
        }
        let mut real_config = Config::for_url(String::new());
        real_config.upstream = UpstreamSource::Kubeconfig(Some(api.kubeconfig.clone()));
        let (real_kache, real_via) = kache_in_front(real_config, api.run_dir(), "kache-real").await;
        let (sim_kache, sim_via) = kache_in_front(Config::for_url(sim.url()), api.run_dir(), "kache-sim").await;
        let mut real = Pair { name: "real", upstream: direct.clone(), kache: real_via, kache_handle: real_kache, last: seeded[0], cont: String::new(), early: 0, early_cont: String::new() };
        let mut simp = Pair { name: "sim", upstream: sim_direct.clone(), kache: sim_via, kache_handle: sim_kache, last: seeded[1], cont: String::new(), early: 0, early_cont: String::new() };
        real.caught_up().await;
        simp.caught_up().await;
        let mut s = Suite::default();

        // Lists in every resourceVersion mode, pages, selectors, gets, views, gzip.
        const META_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
        const META: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
        for t in [
            WIDGETS,
            "/apis/example.com/v1/widgets?resourceVersion=0",
            "/apis/example.com/v1/widgets?resourceVersion={last}",
            "/apis/example.com/v1/widgets?resourceVersion={last}&resourceVersionMatch=NotOlderThan",
            "/apis/example.com/v1/widgets?resourceVersion={last}&resourceVersionMatch=Exact",
            "/apis/example.com/v1/widgets?resourceVersion=0&limit=5",
            "/apis/example.com/v1/widgets?limit=7",
            "/apis/example.com/v1/widgets?limit=7&continue={cont}",
            "/apis/example.com/v1/widgets?limit=20&resourceVersion={last}",
            "/apis/example.com/v1/widgets?limit=20&continue={cont}",
            "/apis/example.com/v1/namespaces/team-b/widgets",
            "/apis/example.com/v1/namespaces/team-b/widgets?labelSelector=tier%3Dgold",
            "/apis/example.com/v1/widgets?labelSelector=tier%21%3Dgold&limit=9",
            "/apis/example.com/v1/widgets?labelSelector=tier%21%3Dgold&limit=9&continue={cont}",
            "/apis/example.com/v1/widgets?labelSelector=tier",
            "/apis/example.com/v1/widgets?labelSelector=nothing%3Dhere",
            "/apis/example.com/v1/widgets?fieldSelector=metadata.name%3Dw-003",
            "/apis/example.com/v1/widgets?fieldSelector=metadata.namespace%3Dteam-a&limit=4",
            "/apis/example.com/v1/namespaces/team-a/widgets?fieldSelector=metadata.name%3Dw-010",
            "/apis/example.com/v1/namespaces/team-a/widgets/w-007",
            "/apis/example.com/v1/namespaces/team-a/widgets/w-007?resourceVersion=0",
            "/apis/example.com/v1/namespaces/team-a/widgets/missing",
            // Errors.
            "/apis/example.com/v1/widgets?limit=abc",
            "/apis/example.com/v1/widgets?resourceVersion=abc",
            "/apis/example.com/v1/widgets?resourceVersionMatch=Exact",
            "/apis/example.com/v1/widgets?resourceVersion=0&resourceVersionMatch=Exact",
            "/apis/example.com/v1/widgets?resourceVersionMatch=Bogus&resourceVersion=1",
            "/apis/example.com/v1/widgets?continue=garbage",
            "/apis/example.com/v1/widgets?fieldSelector=spec.color%3Dred",
            "/apis/example.com/v1/widgets?labelSelector=a%3D%3D%3D",
            "/apis/example.com/v1/widgets?labelSelector=tier+in+%28",
            "/apis/example.com/v1/widgets?resourceVersion={future}&resourceVersionMatch=Exact",
        ] {
            read(&mut s, &mut real, &mut simp, t, &[]).await;
        }
        read(&mut s, &mut real, &mut simp, "/apis/example.com/v1/widgets?resourceVersion=0", &[("accept-encoding", "gzip")]).await;
        read(&mut s, &mut real, &mut simp, "/apis/example.com/v1/widgets?resourceVersion=0&limit=3", &[("accept", META_LIST)]).await;
        read(&mut s, &mut real, &mut simp, "/apis/example.com/v1/namespaces/team-b/widgets/w-002", &[("accept", META)]).await;
        read(&mut s, &mut real, &mut simp, "/apis/example.com/v1/widgets?resourceVersion=0", &[("accept", "application/*")]).await;
        read(&mut s, &mut real, &mut simp, "/apis/example.com/v1/namespaces/team-b/widgets/w-002", &[("accept", "text/plain")]).await;

        // Watches in every start mode, a selector that objects enter and leave, and refusals.
        let watch_list = "/apis/example.com/v1/namespaces/team-a/widgets?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan";
        let mut wl = watch(&mut s, &real, &simp, watch_list, &[]).await;
        wl.lines(&mut s, PER_NAMESPACE + 1).await;
        let mut zero = watch(&mut s, &real, &simp, "/apis/example.com/v1/namespaces/team-a/widgets?watch=1&resourceVersion=0", &[]).await;
        zero.lines(&mut s, PER_NAMESPACE).await;
        let mut zero_bm = watch(&mut s, &real, &simp, "/apis/example.com/v1/namespaces/team-a/widgets?watch=1&resourceVersion=0&allowWatchBookmarks=true", &[]).await;
        zero_bm.lines(&mut s, PER_NAMESPACE + 1).await;
        let mut from_last = watch(&mut s, &real, &simp, "/apis/example.com/v1/widgets?watch=1&resourceVersion={last}", &[]).await;
        let mut gold = watch(&mut s, &real, &simp, "/apis/example.com/v1/widgets?watch=1&resourceVersion={last}&labelSelector=tier%3Dgold", &[]).await;
        let mut meta = watch(&mut s, &real, &simp, "/apis/example.com/v1/widgets?watch=1&resourceVersion={last}", &[("accept", META)]).await;
        for template in [
            "/apis/example.com/v1/widgets?watch=1&sendInitialEvents=true",
            "/apis/example.com/v1/widgets?watch=1&resourceVersion=abc",
            "/apis/example.com/v1/widgets?watch=1&labelSelector=a%3D%3D%3D",
            "/apis/example.com/v1/widgets?watch=1&fieldSelector=spec.color%3Dred",
        ] {
            let mut w = watch(&mut s, &real, &simp, template, &[]).await;
            w.rest(&mut s).await;
        }
        // The same writes on both: into the selection, inside it, out of it, a new object, a deletion.
        let relabel = |tier: &str| json!({"metadata": {"labels": {"tier": tier}}});
        let mut deleted = Vec::new();
        for p in [&mut real, &mut simp] {
            let a = widgets_in("team-a");
            p.write(Method::PATCH, &format!("{a}/w-001"), "application/merge-patch+json", &relabel("gold")).await;
            p.write(Method::PATCH, &format!("{a}/w-004"), "application/merge-patch+json", &json!({"spec": {"size": 404}})).await;
            p.write(Method::PATCH, &format!("{a}/w-008"), "application/merge-patch+json", &relabel("iron")).await;
            p.write(Method::POST, &a, "application/json", &widget("team-a", 100)).await;
            let r = p.upstream.request(Method::DELETE, &format!("{a}/w-012"), &[], None).await;
            assert_eq!(r.status, StatusCode::OK, "{}: DELETE: {}", p.name, text(&r.body));
            deleted.push(r);
        }
        s.model("DELETE", "DELETE w-012 (the answer)", &deleted[0], &deleted[1]);
        // team-a sees all five; the cluster-wide watches too; gold: w-001 enters, w-004 changes, w-008
        // leaves, w-100 (gold) is added, w-012 (gold) is deleted.
        for w in [&mut wl, &mut zero, &mut zero_bm, &mut from_last, &mut gold, &mut meta] {
            for _ in 0..5 {
                w.event(&mut s).await;
            }
        }
        real.caught_up().await;
        simp.caught_up().await;
        // After the writes: a replay from a revision both have seen, and lists again.
        read(&mut s, &mut real, &mut simp, "/apis/example.com/v1/namespaces/team-a/widgets", &[]).await;
        read(&mut s, &mut real, &mut simp, "/apis/example.com/v1/widgets?labelSelector=tier%3Dgold&resourceVersion=0", &[]).await;

        // Compaction. Reads of compacted revisions are answered by the upstreams (kache serves them from its
        // retained history while it has it: a documented difference), so only the model is compared here.
        for p in [&mut real, &mut simp] {
            p.early = p.last;
            let page = p.upstream.get(&p.expand("/apis/example.com/v1/widgets?limit=7&resourceVersion={early}&resourceVersionMatch=Exact")).await;
            p.early_cont = page.json()["metadata"]["continue"]
                .as_str()
                .unwrap_or_else(|| panic!("{}: no continue token: {}", p.name, text(&page.body)))
                .to_owned();
            p.write(Method::POST, &widgets_in("team-b"), "application/json", &widget("team-b", 101)).await;
        }
        api.compact(real.last);
        sim.compact(Some(simp.last));
        // The apiserver's watch cache learns of the compaction by polling etcd's compact_rev_key (15 s).
        let expired = real.expand("/apis/example.com/v1/widgets?limit=7&continue={early_cont}");
        common::eventually("the real apiserver answers 410 for a compacted token", SYNC_TIMEOUT, || {
            let direct = direct.clone();
            let expired = expired.clone();
            async move { direct.get(&expired).await.status == StatusCode::GONE }
        })
        .await;
        for t in [
            "/apis/example.com/v1/widgets?limit=7&continue={early_cont}",
            "/apis/example.com/v1/widgets?resourceVersion={early}&resourceVersionMatch=Exact",
            "/apis/example.com/v1/widgets?resourceVersion={early}&resourceVersionMatch=Exact&limit=3",
        ] {
            let (a, b) = (real.upstream.get(&real.expand(t)).await, simp.upstream.get(&simp.expand(t)).await);
            s.model(t, &format!("GET {t} (after compaction)"), &a, &b);
        }
        let t = "/apis/example.com/v1/widgets?watch=1&resourceVersion={early}";
        let mut a = real.upstream.watch(&real.expand(t), &[]).await;
        let mut b = simp.upstream.watch(&simp.expand(t), &[]).await;
        let (a, b) = (line_resp(a.line().await.unwrap_or_default()), line_resp(b.line().await.unwrap_or_default()));
        s.model(t, &format!("WATCH {t} (after compaction) first line"), &a, &b);

        let known: Vec<_> = KNOWN_DIFFERENCES.iter().filter(|(t, _)| !s.known_seen.contains(t)).collect();
        eprintln!("{} comparisons; known differences not exercised: {known:?}", s.compared);
        s.finish();
        real.kache_handle.shutdown().await;
        simp.kache_handle.shutdown().await;
        sim.shutdown().await;
    });
}
