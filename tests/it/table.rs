//! Table output: `kubectl get` through kache and directly against the sim print the same, for
//! every built-in kind kache prints from memory, in every output shape kubectl has (default, `-o wide`,
//! `--show-labels`, `-L`, `--sort-by`, `--chunk-size`, `-w`); the Table bytes are identical to the sim's in
//! every resourceVersion mode; and the sim's custom-resource columns equal the real CRD apiserver's.
//!
//! Ages are printed from the clock when a response is written, so two answers a second apart may differ
//! in an age cell: kubectl outputs are compared without their age columns, and raw Tables are compared
//! against two direct answers taken around kache's (one of them has kache's second).

use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use kache::app::Kache;
use kache::pipeline::ResponseEncoding;
use kache_sim::SimHandle;
use kache_sim::table::PrinterColumn;
use serde_json::{Value, json};

use common::real::{Endpoint, Flavor, RealApiserver};
use common::{eventually, get_with, start_kache, start_sim};

/// The Accept header of `kubectl get` (Table, with the JSON fallback).
const KUBECTL_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
/// How long a `kubectl get -w` may take to print an expected line.
const WATCH_TIMEOUT: Duration = Duration::from_secs(30);

// === kubectl ===

macro_rules! require_kubectl {
    () => {
        if !common::tools::kubectl_available() {
            common::tools::missing("kubectl is not installed (scripts/install-test-deps.sh installs it)");
            return;
        }
    };
}

/// A kubeconfig (and its discovery cache) for one server.
struct Target {
    kubeconfig: PathBuf,
    cache: PathBuf,
}

impl Target {
    fn new(dir: &std::path::Path, name: &str, server: &str) -> Target {
        let kubeconfig = dir.join(format!("{name}.kubeconfig"));
        common::real::write_kubeconfig(&kubeconfig, server);
        Target { kubeconfig, cache: dir.join(format!("{name}-cache")) }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("kubectl");
        cmd.arg("--kubeconfig").arg(&self.kubeconfig).arg("--cache-dir").arg(&self.cache).args(args);
        cmd.env_remove("KUBECONFIG");
        cmd
    }

    async fn run(&self, args: &[&str]) -> (bool, String, String) {
        let mut cmd = self.command(args);
        let out =
            tokio::task::spawn_blocking(move || cmd.output()).await.expect("joined").expect("kubectl runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

/// Columns of kubectl's table output (separated by at least two spaces; names may hold single spaces).
fn columns(line: &str) -> Vec<&str> {
    line.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect()
}

/// Where each header column starts (kubectl's tabwriter aligns rows to them).
fn column_starts(header: &str) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut prev_blank = 2;
    for (i, ch) in header.char_indices() {
        if ch != ' ' && prev_blank >= 2 {
            starts.push(i);
        }
        prev_blank = if ch == ' ' { prev_blank + 1 } else { 0 };
    }
    starts
}

/// Table output without the columns that print the clock (AGE, LAST SEEN, FIRST SEEN).
fn without_ages(text: &str) -> String {
    let mut lines = text.lines();
    let Some(header) = lines.next() else { return String::new() };
    let head = columns(header);
    let starts = column_starts(header);
    let clock: Vec<usize> = head
        .iter()
        .enumerate()
        .filter(|(_, c)| matches!(**c, "AGE" | "LAST SEEN" | "FIRST SEEN"))
        .map(|(i, _)| i)
        .collect();
    let strip = |line: &str| {
        let mut cols = columns(line);
        // Empty cells (`-L` of a missing label) collapse in a split: cut at the header's offsets instead.
        if cols.len() != head.len() && starts.len() == head.len() {
            cols = (0..starts.len())
                .map(|i| {
                    line.get(starts[i]..starts.get(i + 1).copied().unwrap_or(line.len()).min(line.len()))
                })
                .map(|c| c.unwrap_or("").trim())
                .collect();
        }
        if cols.len() != head.len() {
            return cols.join(" | ");
        }
        cols.iter()
            .enumerate()
            .filter(|(i, _)| !clock.contains(i))
            .map(|(_, c)| *c)
            .collect::<Vec<_>>()
            .join(" | ")
    };
    std::iter::once(header).chain(lines).map(strip).collect::<Vec<_>>().join("\n")
}

// === Fixture ===

struct Fixture {
    sim: SimHandle,
    kache: Kache,
    _dir: tempfile::TempDir,
    via_kache: Target,
    via_sim: Target,
}

fn meta(ns: &str, name: &str, labels: Value) -> Value {
    json!({"name": name, "namespace": ns, "labels": labels})
}

impl Fixture {
    /// Waits until kache's pods have reached the sim's current revision; returns that revision.
    async fn caught_up(&self) -> u64 {
        let rev = self.sim.revision();
        let kache_url = self.kache.url();
        eventually("kache reached the revision", Duration::from_secs(10), || {
            let url = kache_url.clone();
            async move { get_with(&url, &format!("/api/v1/pods?resourceVersion={rev}"), &[]).await.status == 200 }
        })
        .await;
        rev
    }

    /// The sim with a realistic workload (pods on nodes in namespaces) plus one or two objects of every
    /// other printed kind, and kache in front of it.
    async fn start() -> Fixture {
        let sim = start_sim().await;
        sim.seed(&kache_sim::workload::Workload {
            namespaces: 3,
            pods: 24,
            nodes: 3,
            churn_per_sec: 0.0,
            seed: 7,
        })
        .expect("workload seeded");
        let template = |app: &str| {
            json!({"metadata": {"labels": {"app": app}}, "spec": {"containers": [
                {"name": "main", "image": format!("registry.example/{app}:1.0")},
                {"name": "sidecar", "image": "registry.example/proxy:2.1"}]}})
        };
        for (ns, app) in [("ns-0", "web"), ("ns-1", "api")] {
            let labels = json!({"app": app, "tier": "gold"});
            sim.create(
                "deployments.apps",
                Some(ns),
                json!({"metadata": meta(ns, app, labels.clone()),
                "spec": {"replicas": 3, "selector": {"matchLabels": {"app": app}}, "template": template(app)},
                "status": {"replicas": 3, "readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}}),
            )
            .expect("deployment");
            sim.create("replicasets.apps", Some(ns), json!({"metadata": meta(ns, &format!("{app}-5d9c8"), labels.clone()),
                "spec": {"replicas": 3, "selector": {"matchLabels": {"app": app}, "matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["gold", "bronze"]}]}, "template": template(app)},
                "status": {"replicas": 3, "readyReplicas": 3}}))
                .expect("replicaset");
            sim.create("services", Some(ns), json!({"metadata": meta(ns, app, labels.clone()),
                "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                         "ports": [{"name": "http", "port": 80, "protocol": "TCP"}], "selector": {"app": app}}}))
                .expect("service");
            sim.create("services", Some(ns), json!({"metadata": meta(ns, &format!("{app}-np"), labels.clone()),
                "spec": {"type": "NodePort", "clusterIPs": ["10.96.0.11"],
                         "ports": [{"port": 443, "protocol": "TCP", "nodePort": 30443}, {"port": 53, "protocol": "UDP"}]}}))
                .expect("node port service");
            sim.create(
                "configmaps",
                Some(ns),
                json!({"metadata": meta(ns, &format!("{app}-conf"), labels.clone()),
                "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}}),
            )
            .expect("config map");
            sim.create(
                "secrets",
                Some(ns),
                json!({"metadata": meta(ns, &format!("{app}-token"), labels.clone()),
                "type": "kubernetes.io/service-account-token", "data": {"token": "dA=="}}),
            )
            .expect("secret");
            sim.create(
                "events",
                Some(ns),
                json!({"metadata": meta(ns, &format!("{app}.17a"), json!({})),
                "involvedObject": {"kind": "Deployment", "name": app, "namespace": ns},
                "reason": "ScalingReplicaSet", "message": format!("Scaled up replica set {app}-5d9c8 to 3 "),
                "type": "Normal", "source": {"component": "deployment-controller"}, "count": 2,
                "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:05:00Z"}),
            )
            .expect("event");
        }
        let kache = start_kache(&sim.url(), |_| {}).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let via_kache = Target::new(dir.path(), "kache", &kache.url());
        let via_sim = Target::new(dir.path(), "sim", &sim.url());
        Fixture { sim, kache, _dir: dir, via_kache, via_sim }
    }

    /// `kubectl args` through kache and directly; the outputs must be equal without their ages.
    async fn same(&self, args: &[&str]) -> String {
        let through = self.via_kache.run(args).await;
        let direct = self.via_sim.run(args).await;
        assert!(through.0 && direct.0, "kubectl {} failed: {} / {}", args.join(" "), through.2, direct.2);
        assert_eq!(
            without_ages(&through.1),
            without_ages(&direct.1),
            "kubectl {} differs through kache (left) and directly (right)",
            args.join(" ")
        );
        assert_eq!(through.2, direct.2, "stderr of kubectl {}", args.join(" "));
        through.1
    }

    fn tables_from_memory(&self) -> u64 {
        self.kache.stats().encoding_memory(ResponseEncoding::Table)
    }
}

// === Tests ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_prints_the_same_through_kache() {
    require_kubectl!();
    let f = Fixture::start().await;
    let kinds = [
        "pods",
        "nodes",
        "namespaces",
        "deployments",
        "replicasets",
        "services",
        "configmaps",
        "secrets",
        "events",
    ];
    for kind in kinds {
        let before = f.tables_from_memory();
        let shapes: &[&[&str]] = &[
            &["get", kind, "-A"],
            &["get", kind, "-A", "-o", "wide"],
            &["get", kind, "-A", "--show-labels"],
            &["get", kind, "-A", "-L", "app", "-L", "tier"],
            &["get", kind, "-A", "--sort-by=.metadata.name"],
            &["get", kind, "-A", "--chunk-size=2", "-o", "wide"],
        ];
        let mut printed = String::new();
        for args in shapes {
            printed = f.same(args).await;
        }
        assert!(printed.lines().count() >= 3, "kubectl get {kind} printed rows: {printed}");
        assert!(
            f.tables_from_memory() >= before + shapes.len() as u64,
            "{kind}: Tables answered from kache's memory"
        );
    }
    // Scoped and single-object reads, and what the printers compute, as kubectl shows it.
    f.same(&["get", "pods", "-n", "ns-1", "-o", "wide", "--sort-by=.spec.nodeName"]).await;
    let pod = f.sim.list("pods", Some("ns-2")).expect("pods")[0]["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    f.same(&["get", "pod", &pod, "-n", "ns-2", "-o", "wide"]).await;
    let deploy = f.same(&["get", "deployments", "-n", "ns-0", "-o", "wide"]).await;
    assert!(
        deploy.contains("2/3") && deploy.contains("main,sidecar") && deploy.contains("app=web"),
        "{deploy}"
    );
    let rs = f.same(&["get", "rs", "-n", "ns-0", "-o", "wide"]).await;
    assert!(rs.contains("app=web,tier in (bronze,gold)"), "{rs}");
    let svc = f.same(&["get", "svc", "-n", "ns-1"]).await;
    assert!(svc.contains("443:30443/TCP,53/UDP"), "{svc}");
    let ev = f.same(&["get", "events", "-n", "ns-1", "-o", "wide"]).await;
    assert!(ev.contains("deployment/api") && ev.contains("deployment-controller"), "{ev}");
    f.same(&["get", "pods", "-n", "no-such-namespace"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_watch_prints_the_same_through_kache() {
    require_kubectl!();
    let f = Fixture::start().await;
    let existing = f.sim.list("pods", Some("ns-0")).expect("pods").len();
    let watch = |t: &Target| {
        let mut cmd = t.command(&["get", "pods", "-n", "ns-0", "-w"]);
        cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null());
        cmd.spawn().expect("kubectl -w starts")
    };
    let before = f.tables_from_memory();
    let mut children = [watch(&f.via_kache), watch(&f.via_sim)];
    // The header and one line per existing pod, then one line for a pod created while watching.
    let readers: Vec<_> = children
        .iter_mut()
        .map(|c| {
            let out = c.stdout.take().expect("piped");
            let (tx, rx) = std::sync::mpsc::channel::<String>();
            std::thread::spawn(move || {
                use std::io::BufRead;
                for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        return;
                    }
                }
            });
            rx
        })
        .collect();
    let read = |rx: &std::sync::mpsc::Receiver<String>, n: usize| -> Vec<String> {
        (0..n).map(|_| rx.recv_timeout(WATCH_TIMEOUT).expect("kubectl -w prints a line")).collect()
    };
    let first: Vec<Vec<String>> = readers.iter().map(|rx| read(rx, existing + 1)).collect();
    f.sim
        .create("pods", Some("ns-0"), common::pod("ns-0", "watched-0", &[("app", "w")], "node-1"))
        .expect("pod");
    let next: Vec<Vec<String>> = readers.iter().map(|rx| read(rx, 1)).collect();
    for c in &mut children {
        let _ = c.kill();
        let _ = c.wait();
    }
    let norm = |lines: &[String]| without_ages(&lines.join("\n"));
    assert_eq!(
        norm(&first[0]),
        norm(&first[1]),
        "kubectl get -w: initial lines through kache (left) and directly"
    );
    let header = &first[0][0];
    let with_header = |l: &[String]| norm(&[vec![header.clone()], l.to_vec()].concat());
    assert_eq!(with_header(&next[0]), with_header(&next[1]), "kubectl get -w: the event's line");
    assert!(next[0][0].starts_with("watched-0"), "{:?}", next[0]);
    // kubectl's list and its watch were both Tables from kache's memory.
    assert!(f.tables_from_memory() >= before + 2, "kubectl get -w served from memory");
}

/// A watch over plain HTTP, read line by line.
struct PlainWatch {
    body: hyper::body::Incoming,
    buf: Vec<u8>,
}

impl PlainWatch {
    async fn start(base: &str, path: &str, headers: &[(&str, &str)]) -> PlainWatch {
        let mut req = http::Request::get(format!("{base}{path}"));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = common::client()
            .request(req.body(http_body_util::Empty::new()).expect("request"))
            .await
            .expect("response");
        assert_eq!(resp.status(), 200, "GET {base}{path}");
        PlainWatch { body: resp.into_body(), buf: Vec::new() }
    }

    async fn lines(&mut self, n: usize) -> Vec<Vec<u8>> {
        use http_body_util::BodyExt;
        let mut out = Vec::new();
        while out.len() < n {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                out.push(self.buf.drain(..=i).collect());
                continue;
            }
            let frame = tokio::time::timeout(WATCH_TIMEOUT, self.body.frame())
                .await
                .expect("a watch event in time")
                .expect("the stream is open")
                .expect("a frame");
            if let Ok(data) = frame.into_data() {
                self.buf.extend_from_slice(&data);
            }
        }
        out
    }
}

/// A Table watch event with the pods' Age cell blanked (a second may tick between the two servers).
fn event_without_age(line: &[u8]) -> Value {
    let mut v: Value = serde_json::from_slice(line).expect("a JSON watch event");
    if let Some(rows) = v["object"]["rows"].as_array_mut() {
        for r in rows {
            r["cells"][4] = Value::Null;
        }
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_watch_events_match_the_sim() {
    let f = Fixture::start().await;
    f.caught_up().await;
    let before = f.tables_from_memory();
    let accept = [("accept", KUBECTL_ACCEPT)];
    for include in ["Object", "Metadata", "None"] {
        let path = format!(
            "/api/v1/namespaces/ns-0/pods?watch=1&resourceVersion={}&includeObject={include}&labelSelector=app%3Dw",
            f.sim.revision()
        );
        let mut a = PlainWatch::start(&f.kache.url(), &path, &accept).await;
        let mut b = PlainWatch::start(&f.sim.url(), &path, &accept).await;
        let name = format!("w-{include}").to_lowercase();
        let created = f
            .sim
            .create("pods", Some("ns-0"), common::pod("ns-0", &name, &[("app", "w")], "node-1"))
            .expect("pod");
        let mut moved = created.clone();
        moved["metadata"]["labels"] = json!({"app": "gone"});
        f.sim.update("pods", Some("ns-0"), moved).expect("pod leaves the selector");
        let (la, lb) = (a.lines(2).await, b.lines(2).await);
        for (x, y) in la.iter().zip(&lb) {
            assert_eq!(
                event_without_age(x),
                event_without_age(y),
                "{path}: through kache (left) and directly"
            );
        }
        let first = event_without_age(&la[0]);
        assert!(first["object"]["columnDefinitions"].is_array(), "the first event carries the columns");
        let second = event_without_age(&la[1]);
        assert_eq!(second["type"], json!("DELETED"), "leaving the selector");
        assert!(second["object"]["columnDefinitions"].is_null(), "later events carry no columns");
    }
    assert!(f.tables_from_memory() >= before + 3, "Table watches served from memory");
}

/// A Table watch event with every age-like cell (`5s`, `3m2s`) blanked; `<unknown>` (a bookmark's) stays.
fn event_without_age_cells(line: &[u8]) -> Value {
    let mut v: Value = serde_json::from_slice(line).expect("a JSON watch event");
    let age =
        |s: &str| s.starts_with(|c: char| c.is_ascii_digit()) && s.chars().all(|c| c.is_ascii_alphanumeric());
    for r in v["object"]["rows"].as_array_mut().into_iter().flatten() {
        for c in r["cells"].as_array_mut().into_iter().flatten() {
            if c.as_str().is_some_and(age) {
                *c = Value::Null;
            }
        }
    }
    v
}

/// Table watches that stream their initial events (WatchList) and allow bookmarks: the initial events,
/// then the initial-events-end BOOKMARK — a one-row Table of the kind's empty bookmark object, printed by
/// the kind's printer, its row object the bookmark's metadata even for `includeObject=None` — equal to the
/// sim's, and served from memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_watch_lists_with_bookmarks_match_the_sim() {
    let f = Fixture::start().await;
    let rev = f.caught_up().await;
    let before = f.tables_from_memory();
    let accept = [("accept", KUBECTL_ACCEPT)];
    let mut watches = 0;
    for include in ["Object", "Metadata", "None"] {
        for (resource, ns, base) in [
            ("pods", Some("ns-1"), "/api/v1/namespaces/ns-1/pods"),
            ("pods", Some("ns-empty"), "/api/v1/namespaces/ns-empty/pods"),
            ("nodes", None, "/api/v1/nodes"),
            ("deployments.apps", None, "/apis/apps/v1/deployments"),
        ] {
            let initial = f.sim.list(resource, ns).expect("list").len() + 1;
            let path = format!(
                "{base}?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&resourceVersion={rev}&includeObject={include}"
            );
            let mut a = PlainWatch::start(&f.kache.url(), &path, &accept).await;
            let mut b = PlainWatch::start(&f.sim.url(), &path, &accept).await;
            watches += 1;
            let (la, lb) = (a.lines(initial).await, b.lines(initial).await);
            for (x, y) in la.iter().zip(&lb) {
                assert_eq!(
                    event_without_age_cells(x),
                    event_without_age_cells(y),
                    "{path}: through kache (left) and directly"
                );
            }
            let first = event_without_age_cells(&la[0]);
            assert!(
                first["object"]["columnDefinitions"].is_array(),
                "{path}: the first event carries the columns"
            );
            let end = event_without_age_cells(&la[initial - 1]);
            assert_eq!(end["type"], json!("BOOKMARK"), "{path}");
            let row = &end["object"]["rows"][0];
            assert_eq!(
                row["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
                json!("true"),
                "{path}: the bookmark's row carries its object's metadata"
            );
        }
    }
    assert!(f.tables_from_memory() >= before + watches, "Table watch-lists served from memory");
}

/// Fetches `path` as a Table from the sim, kache, and the sim again: kache's bytes must equal one of the
/// direct answers (an age cell may tick between them). Returns kache's response.
async fn same_table(f: &Fixture, path: &str, accept: &str) -> common::Resp {
    let headers = [("accept", accept), ("user-agent", "kubectl/v1.36.0")];
    for _ in 0..3 {
        let before = get_with(&f.sim.url(), path, &headers).await;
        let through = get_with(&f.kache.url(), path, &headers).await;
        let after = get_with(&f.sim.url(), path, &headers).await;
        if through.body == before.body || through.body == after.body {
            assert!(through.status == before.status || through.status == after.status);
            return through;
        }
    }
    let direct = get_with(&f.sim.url(), path, &headers).await;
    let through = get_with(&f.kache.url(), path, &headers).await;
    assert_eq!(
        String::from_utf8_lossy(&through.body),
        String::from_utf8_lossy(&direct.body),
        "GET {path} (Accept {accept}) through kache (left) and directly (right)"
    );
    through
}

fn continue_of(r: &common::Resp) -> Option<String> {
    r.json()["metadata"]["continue"].as_str().filter(|c| !c.is_empty()).map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_bytes_match_the_sim_in_every_resource_version_mode() {
    let f = Fixture::start().await;
    let rev = f.sim.revision();
    let kache_url = f.kache.url();
    eventually("kache has the pods at the revision", Duration::from_secs(10), || {
        let url = kache_url.clone();
        async move {
            let r = get_with(&url, &format!("/api/v1/pods?resourceVersion={rev}"), &[]).await;
            r.status == 200
        }
    })
    .await;
    let before = f.tables_from_memory();
    let v1beta1 = "application/json;as=Table;v=v1beta1;g=meta.k8s.io";
    for include in ["", "&includeObject=Object", "&includeObject=None", "&includeObject=Metadata"] {
        for base in
            ["/api/v1/pods", "/api/v1/namespaces/ns-1/pods", "/api/v1/nodes", "/apis/apps/v1/deployments"]
        {
            for rv in [
                "",
                "&resourceVersion=0",
                &format!("&resourceVersion={rev}&resourceVersionMatch=NotOlderThan"),
                &format!("&resourceVersion={rev}&resourceVersionMatch=Exact"),
            ] {
                same_table(&f, &format!("{base}?x=1{rv}{include}"), KUBECTL_ACCEPT).await;
            }
            same_table(&f, &format!("{base}?x=1{include}"), v1beta1).await;
            // kubectl's chunked get: pages at the first page's revision, tokens interchangeable.
            let mut page = same_table(&f, &format!("{base}?limit=5{include}"), KUBECTL_ACCEPT).await;
            while let Some(token) = continue_of(&page) {
                page = same_table(&f, &format!("{base}?limit=5&continue={token}{include}"), KUBECTL_ACCEPT)
                    .await;
            }
        }
    }
    let pod = f.sim.list("pods", Some("ns-1")).expect("pods")[0]["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    let got =
        same_table(&f, &format!("/api/v1/namespaces/ns-1/pods/{pod}?includeObject=Object"), KUBECTL_ACCEPT)
            .await;
    assert_eq!(got.json()["rows"][0]["object"]["kind"], json!("Pod"));
    same_table(&f, "/api/v1/nodes/node-1", v1beta1).await;
    // Indented as Go's MarshalIndent writes it (`?pretty=true`, as curl gets it).
    same_table(&f, "/api/v1/namespaces/ns-1/pods?limit=3&pretty=true&includeObject=Object", KUBECTL_ACCEPT)
        .await;
    same_table(&f, "/api/v1/nodes/node-1?pretty=true", KUBECTL_ACCEPT).await;
    same_table(&f, "/api/v1/namespaces/ns-1/pods/missing", KUBECTL_ACCEPT).await;
    let served = f.tables_from_memory() - before;
    assert!(served >= 100, "Tables answered from kache's memory: {served}");
    // Bad input gets the apiserver's answers (400 for includeObject, 406 for a Table outside meta v1/v1beta1).
    let bad = same_table(&f, "/api/v1/pods?includeObject=Everything", KUBECTL_ACCEPT).await;
    assert_eq!(bad.status, 400);
    let bad = same_table(&f, "/api/v1/pods", "application/json;as=Table;v=v2;g=meta.k8s.io").await;
    assert_eq!(bad.status, 406);
    // A regression guard on content: pods' Tables carry the printer's columns.
    let t = same_table(&f, "/api/v1/pods?limit=1&includeObject=None", KUBECTL_ACCEPT).await.json();
    let names: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .expect("columns")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node", "Readiness Gates"]
    );
    assert_eq!(t["rows"][0]["object"], Value::Null);
}

// === Custom resources against the real CRD apiserver ===

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

fn gadget_crd() -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "additionalPrinterColumns": printer_columns_json()}]}})
}

fn printer_columns() -> Vec<PrinterColumn> {
    vec![
        PrinterColumn::new("Color", "string", ".spec.color").description("the color"),
        PrinterColumn::new("Size", "integer", ".spec.size"),
        PrinterColumn::new("Weight", "number", ".spec.weight").priority(1),
        PrinterColumn::new("Ready", "boolean", ".status.ready"),
        PrinterColumn::new("Tags", "string", ".spec.tags"),
        PrinterColumn::new("First", "string", ".spec.items[0].name").priority(1),
        PrinterColumn::new("Age", "date", ".metadata.creationTimestamp"),
    ]
}

fn printer_columns_json() -> Value {
    Value::Array(
        printer_columns()
            .iter()
            .map(|c| {
                let mut v =
                    json!({"name": c.name, "type": c.ty, "jsonPath": c.json_path, "priority": c.priority});
                if !c.description.is_empty() {
                    v["description"] = json!(c.description);
                }
                v
            })
            .collect(),
    )
}

fn gadgets() -> Vec<Value> {
    vec![
        json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g1", "namespace": "team-a"},
            "spec": {"color": "red", "size": 3, "weight": 1.5, "tags": ["a", "b"], "items": [{"name": "x"}]}, "status": {"ready": true}}),
        json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g2", "namespace": "team-a"},
            "spec": {"size": "big", "weight": 2, "color": 7}}),
    ]
}

/// `path` as a Table from the real apiserver and through kache: equal bytes (one of two direct answers
/// taken around kache's, as an age may tick).
async fn same_real_table(direct: &Endpoint, via: &Endpoint, path: &str, accept: &[(&str, &str)]) {
    for _ in 0..3 {
        let a = direct.get_with(path, accept).await;
        let k = via.get_with(path, accept).await;
        let b = direct.get_with(path, accept).await;
        if k.body == a.body || k.body == b.body {
            return;
        }
    }
    let a = direct.get_with(path, accept).await;
    let k = via.get_with(path, accept).await;
    assert_eq!(
        String::from_utf8_lossy(&k.body),
        String::from_utf8_lossy(&a.body),
        "GET {path}: kache (left), the CRD apiserver (right)"
    );
}

/// A Table with its age cells blanked (the two servers created the objects at different times).
fn without_age_cells(mut t: Value) -> Value {
    if let Some(rows) = t["rows"].as_array_mut() {
        for r in rows {
            if let Some(cells) = r["cells"].as_array_mut() {
                cells.pop();
            }
        }
    }
    t["metadata"] = json!({});
    t
}

#[test]
fn custom_resource_tables_match_the_crd_apiserver() {
    let Some(api) = RealApiserver::start_flavor(Flavor::Crd, "table-crd") else { return };
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async {
        let direct = Endpoint::from_kubeconfig("crd-apiserver", &api.kubeconfig).await;
        let created = direct.write(http::Method::POST, CRDS, "application/json", &gadget_crd()).await;
        assert!(created.status.is_success(), "{}", String::from_utf8_lossy(&created.body));
        let path = "/apis/example.com/v1/namespaces/team-a/gadgets";
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while direct.get(path).await.status != 200 {
            assert!(tokio::time::Instant::now() < deadline, "the gadgets CRD is never served");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for g in gadgets() {
            let r = direct.write(http::Method::POST, path, "application/json", &g).await;
            assert!(r.status.is_success(), "{}", String::from_utf8_lossy(&r.body));
        }
        // The sim, declaring the same columns, prints the same Table (but for the objects' ages and RVs).
        let crd = kache_sim::Crd::parse("example.com/v1/Gadget/gadgets/Namespaced")
            .expect("crd")
            .with_columns(printer_columns());
        let sim = kache_sim::Sim::builder().crd(crd).start().await.expect("sim starts");
        sim.create("namespaces", None, common::namespace("team-a")).expect("namespace");
        for g in gadgets() {
            sim.create("gadgets.example.com", Some("team-a"), g).expect("gadget");
        }
        let accept = [("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")];
        let real = direct.get_with(&format!("{path}?includeObject=None"), &accept).await;
        let ours = get_with(&sim.url(), &format!("{path}?includeObject=None"), &accept).await;
        assert_eq!(real.status, 200);
        assert_eq!(
            without_age_cells(ours.json()),
            without_age_cells(real.json()),
            "the sim (left) and the real CRD apiserver"
        );
        let real = direct.get_with("/apis/example.com/v1/namespaces/empty/gadgets", &accept).await.json();
        let ours =
            get_with(&sim.url(), "/apis/example.com/v1/namespaces/empty/gadgets", &accept).await.json();
        assert_eq!(without_age_cells(ours), without_age_cells(real), "an empty list's rows");

        // kache in front of the CRD apiserver prints custom resources from memory, with the columns of the
        // CRD in its own store: the Table bytes equal the real apiserver's in every shape.
        let mut config = kache::app::Config::for_url(String::new());
        config.upstream = kache::app::UpstreamSource::Kubeconfig(Some(api.kubeconfig.clone()));
        config.handler.block_timeout = common::TEST_BLOCK_TIMEOUT;
        // Small consistent reads are served from memory after a probe (by default they are forwarded).
        config.freshness.probe_small_reads = true;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let kache = Kache::start(config, listener).await.expect("kache starts");
        tokio::time::timeout(Duration::from_secs(60), kache.wait_synced()).await.expect("kache syncs");
        let dir = tempfile::tempdir().expect("tempdir");
        let kache_kubeconfig = dir.path().join("kache-endpoint.kubeconfig");
        common::real::write_kubeconfig(&kache_kubeconfig, &kache.url());
        let via = Endpoint::from_kubeconfig("kache", &kache_kubeconfig).await;
        let before = kache.stats().encoding_memory(ResponseEncoding::Table);
        let rv =
            direct.get(path).await.json()["metadata"]["resourceVersion"].as_str().expect("rv").to_owned();
        for q in [
            "?includeObject=None".to_owned(),
            "?includeObject=Object".to_owned(),
            "?includeObject=Metadata&limit=1".to_owned(),
            format!("?resourceVersion={rv}&resourceVersionMatch=Exact"),
            "?resourceVersion=0".to_owned(),
        ] {
            for p in [format!("{path}{q}"), format!("/apis/example.com/v1/gadgets{q}")] {
                same_real_table(&direct, &via, &p, &accept).await;
            }
        }
        same_real_table(&direct, &via, &format!("{path}/g1"), &accept).await;
        same_real_table(&direct, &via, &format!("{path}/g2?includeObject=Object"), &accept).await;
        let served = kache.stats().encoding_memory(ResponseEncoding::Table) - before;
        assert!(served >= 10, "custom resources' Tables from kache's memory: {served}");

        if !common::tools::kubectl_available() {
            common::tools::missing(
                "kubectl is not installed: the CRD's columns are not compared through kubectl",
            );
        } else {
            let via_kache = Target::new(dir.path(), "kache", &kache.url());
            let via_real =
                Target { kubeconfig: api.kubeconfig.clone(), cache: dir.path().join("real-cache") };
            for args in [
                &["get", "gadgets", "-A"][..],
                &["get", "gadgets", "-n", "team-a", "-o", "wide", "--show-labels"],
            ] {
                let a = via_kache.run(args).await;
                let b = via_real.run(args).await;
                assert!(a.0 && b.0, "{} / {}", a.2, b.2);
                assert_eq!(without_ages(&a.1), without_ages(&b.1), "kubectl {}", args.join(" "));
            }
        }
        sim.shutdown().await;
    });
}
