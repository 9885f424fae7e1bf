//! kubectl through kache: every command runs once against kache and once against the sim directly, and the
//! outputs must be equal. The only normalisation is the AGE column of table output (kubectl computes it
//! from the clock at print time, so two runs a second apart may differ).
//!
//! kubectl comes from the machine (`scripts/install-test-deps.sh` installs Debian's kubernetes-client); a
//! test prints SKIPPED when it is missing, and fails instead under `KACHE_REQUIRE_TOOLS=1` (CI).

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kache::app::Kache;
use kache_sim::SimHandle;
use serde_json::Value;
use tokio::sync::mpsc;

use common::{namespace, pod, start_kache, start_sim};

/// How long a `kubectl get -w` may take to show an expected line.
const WATCH_TIMEOUT: Duration = Duration::from_secs(30);
/// Lines buffered from a running `kubectl get -w` before its reader thread waits.
const WATCH_LINE_BUFFER: usize = 1024;

// === kubectl availability ===

macro_rules! require_kubectl {
    () => {
        if !common::tools::kubectl_available() {
            common::tools::missing("kubectl is not installed (scripts/install-test-deps.sh installs it)");
            return;
        }
    };
}

// === Fixture ===

/// The sim, kache in front of it, and a kubeconfig (with its own discovery cache) for each.
struct Fixture {
    sim: SimHandle,
    kache: Kache,
    _dir: tempfile::TempDir,
    via_kache: Target,
    via_sim: Target,
}

/// One kubeconfig and its kubectl cache directory.
#[derive(Clone)]
struct Target {
    kubeconfig: PathBuf,
    cache: PathBuf,
}

/// What a kubectl run produced.
#[derive(Debug, PartialEq, Eq)]
struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// A kubeconfig for a plain-http server, no credentials, default namespace `default`.
fn kubeconfig_yaml(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n\
         users:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n    \
         namespace: default\ncurrent-context: c\n"
    )
}

impl Fixture {
    /// Seeds two namespaces of labelled pods on two nodes, and config maps, then starts kache.
    async fn start() -> Fixture {
        let sim = start_sim().await;
        for ns in ["ns-a", "ns-b", "kx", "sx"] {
            sim.create("namespaces", None, namespace(ns)).expect("namespace created");
        }
        for node in ["node-1", "node-2"] {
            sim.create("nodes", None, serde_json::json!({"metadata": {"name": node}})).expect("node created");
        }
        for (i, ns) in ["ns-a", "ns-a", "ns-a", "ns-b", "ns-b", "ns-a", "ns-b"].iter().enumerate() {
            let app = if i % 2 == 0 { "web" } else { "db" };
            let node = if i % 3 == 0 { "node-1" } else { "node-2" };
            sim.create("pods", Some(ns), pod(ns, &format!("{app}-{i}"), &[("app", app)], node))
                .expect("pod created");
        }
        for ns in ["ns-a", "ns-b"] {
            sim.create(
                "configmaps",
                Some(ns),
                serde_json::json!({"metadata": {"name": "conf", "labels": {"tier": "gold"}}, "data": {"k": ns}}),
            )
            .expect("config map created");
        }
        let kache = start_kache(&sim.url(), |_| {}).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let target = |name: &str, server: String| {
            let kubeconfig = dir.path().join(format!("{name}.kubeconfig"));
            std::fs::write(&kubeconfig, kubeconfig_yaml(&server)).expect("write kubeconfig");
            Target { kubeconfig, cache: dir.path().join(format!("{name}-cache")) }
        };
        let via_kache = target("kache", kache.url());
        let via_sim = target("sim", sim.url());
        Fixture { sim, kache, _dir: dir, via_kache, via_sim }
    }

    /// Runs `args` through kache and against the sim; asserts equal outcomes; returns kache's.
    async fn same(&self, args: &[&str]) -> Run {
        let through = kubectl(&self.via_kache, args).await;
        let direct = kubectl(&self.via_sim, args).await;
        assert_eq!(
            normalise(&through),
            normalise(&direct),
            "kubectl {} differs through kache (left) and against the sim (right)",
            args.join(" ")
        );
        through
    }
}

/// Runs kubectl with `target`'s kubeconfig and cache.
async fn kubectl(target: &Target, args: &[&str]) -> Run {
    let mut cmd = command(target, args);
    let out = tokio::task::spawn_blocking(move || cmd.output()).await.expect("joined").expect("kubectl runs");
    Run {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn command(target: &Target, args: &[&str]) -> Command {
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig").arg(&target.kubeconfig).arg("--cache-dir").arg(&target.cache).args(args);
    cmd.env_remove("KUBECONFIG");
    cmd
}

// === Normalisation ===

/// A run with the AGE column of table output removed (see the module comment); nothing else changes.
fn normalise(run: &Run) -> (bool, String, String) {
    (run.ok, without_age(&run.stdout), run.stderr.clone())
}

/// Table columns are separated by at least two spaces (kubectl's tabwriter padding); header names and
/// values may contain single spaces (`NOMINATED NODE`).
fn columns(line: &str) -> Vec<&str> {
    line.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect()
}

/// Drops the AGE column from every table row when the first line is a table header with AGE.
fn without_age(text: &str) -> String {
    let mut lines = text.lines();
    let Some(header) = lines.next() else { return String::new() };
    let head = columns(header);
    let Some(age) = head.iter().position(|c| *c == "AGE") else { return text.to_owned() };
    let strip = |line: &str| {
        let mut cols = columns(line);
        if cols.len() == head.len() {
            cols.remove(age);
        }
        cols.join(" | ")
    };
    std::iter::once(header).chain(lines).map(strip).collect::<Vec<_>>().join("\n")
}

// === Watching ===

/// A running `kubectl get -w`, its stdout and stderr lines delivered as they come.
struct Watching {
    child: Child,
    stdout: mpsc::Receiver<String>,
    stderr: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Watching {
    fn spawn(target: &Target, args: &[&str]) -> Watching {
        let mut cmd = command(target, args);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).stdin(Stdio::null());
        let mut child = cmd.spawn().expect("kubectl starts");
        let stdout = lines(child.stdout.take().expect("piped stdout"));
        let stderr = lines(child.stderr.take().expect("piped stderr"));
        Watching { child, stdout, stderr, seen: Vec::new() }
    }

    /// Waits for the watch request to be answered (kubectl -v=6 logs each response on stderr).
    async fn wait_watching(&mut self) {
        let wait = async {
            while let Some(line) = self.stderr.recv().await {
                if line.contains("watch=true") && line.contains("200 OK") {
                    return;
                }
            }
            panic!("kubectl exited before its watch was answered");
        };
        tokio::time::timeout(WATCH_TIMEOUT, wait).await.expect("the watch request is answered");
    }

    /// Reads stdout until a new line satisfies `done`; returns all lines read so far.
    async fn until(&mut self, what: &str, done: impl Fn(&str) -> bool) -> &[String] {
        let read = async {
            while let Some(line) = self.stdout.recv().await {
                let hit = done(&line);
                self.seen.push(line);
                if hit {
                    return;
                }
            }
            panic!("kubectl exited before {what}; printed {:?}", self.seen);
        };
        tokio::time::timeout(WATCH_TIMEOUT, read)
            .await
            .unwrap_or_else(|_| panic!("no {what} within the timeout"));
        &self.seen
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Forwards the lines of `from` (a reader thread; the channel is bounded, the thread waits when full).
fn lines(from: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel(WATCH_LINE_BUFFER);
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { return };
            if tx.blocking_send(line).is_err() {
                return;
            }
        }
    });
    rx
}

// === Tests ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_and_list_match_the_apiserver() {
    require_kubectl!();
    let f = Fixture::start().await;
    let cases: &[&[&str]] = &[
        &["get", "pods", "-A"],
        &["get", "pods", "-n", "ns-a"],
        &["get", "pods", "-A", "-l", "app=web"],
        &["get", "pods", "-A", "-l", "app in (db),app!=web"],
        &["get", "pods", "-A", "--field-selector", "spec.nodeName=node-1"],
        &["get", "pods", "-A", "--field-selector", "metadata.namespace!=ns-a,status.phase=Running"],
        &["get", "pods", "-A", "--chunk-size=2"],
        &["get", "pods", "-A", "--chunk-size=2", "-o", "json"],
        &["get", "pods", "-A", "--chunk-size=3", "-o", "name"],
        &["get", "pods", "-n", "ns-a", "-o", "json"],
        &["get", "pods", "-n", "ns-b", "-o", "yaml"],
        &["get", "pods", "-A", "-o", "name"],
        &["get", "pods", "-A", "-o", "wide"],
        &["get", "pods", "-A", "-l", "app=web", "--field-selector", "spec.nodeName=node-2", "-o", "json"],
        &["get", "pod", "web-0", "-n", "ns-a", "-o", "json"],
        &["get", "pod", "web-0", "-n", "ns-a", "-o", "yaml"],
        &["get", "pod", "web-0", "-n", "ns-a"],
        &["get", "configmaps", "-A", "-l", "tier=gold", "-o", "yaml"],
        &["get", "namespaces"],
        &["get", "namespaces", "-o", "name"],
        &["get", "nodes", "-o", "json"],
        &["get", "pods", "-n", "empty-namespace"],
        &["get", "pods", "-n", "empty-namespace", "-o", "json"],
        &["get", "pod", "missing", "-n", "ns-a"],
        &["get", "pod", "missing", "-n", "ns-a", "-o", "json"],
    ];
    for args in cases {
        f.same(args).await;
    }
    // The comparisons saw real data, and reads of JSON were answered by kache itself.
    let run = f.same(&["get", "pods", "-A", "-o", "name"]).await;
    assert_eq!(run.stdout.lines().count(), 7, "{}", run.stdout);
    let run = f.same(&["get", "pods", "-A", "-l", "app=web", "-o", "name"]).await;
    assert_eq!(run.stdout.lines().count(), 4, "{}", run.stdout);
    let run = f.same(&["get", "pod", "missing", "-n", "ns-a"]).await;
    assert!(!run.ok && run.stderr.contains("(NotFound)"), "{}", run.stderr);
    let run = f.same(&["get", "pods", "-A", "--chunk-size=2", "-o", "json"]).await;
    let list: Value = serde_json::from_str(&run.stdout).expect("JSON list");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(7));
    let before = f.kache.stats().memory();
    f.same(&["get", "pods", "-A", "-o", "json"]).await;
    assert!(f.kache.stats().memory() > before, "kubectl's JSON list was answered from kache's memory");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_lists_under_foreign_writes_match() {
    // Leases and events move the global revision between kubectl's pages, so page 1 of the quiet
    // pods is forwarded and its continue token is ahead of kache's store; every page must still be answered
    // (no 504 and no retry) and the output must equal the sim's.
    require_kubectl!();
    let f = Fixture::start().await;
    for i in 0..30 {
        let ns = if i % 2 == 0 { "ns-a" } else { "ns-b" };
        f.sim
            .create("pods", Some(ns), pod(ns, &format!("bulk-{i:02}"), &[("app", "bulk")], "node-1"))
            .expect("pod");
    }
    f.sim.set_foreign_writes(300.0);
    let cases: &[&[&str]] = &[
        &["get", "pods", "-A", "--chunk-size=4", "-o", "json"],
        &["get", "pods", "-A", "--chunk-size=5", "-o", "name"],
        &["get", "pods", "-n", "ns-a", "--chunk-size=3", "-o", "json"],
        &["get", "pods", "-A", "-l", "app=bulk", "--chunk-size=2", "-o", "name"],
    ];
    for args in cases {
        let run = f.same(args).await;
        assert!(run.ok && run.stderr.is_empty(), "kubectl {}: {}", args.join(" "), run.stderr);
    }
    let run = f.same(&["get", "pods", "-A", "--chunk-size=4", "-o", "name"]).await;
    assert_eq!(run.stdout.lines().count(), 37, "{}", run.stdout);
    assert!(f.sim.foreign_writes() > 0, "the background workload ran");
    f.sim.set_foreign_writes(0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_lists_with_resource_version_limit_and_continue_match() {
    require_kubectl!();
    let f = Fixture::start().await;
    let rv = f.sim.revision().to_string();
    // Exact reads at a past revision, and pages: the same bytes from both (continue tokens included).
    for (base, query, total) in [
        ("/api/v1/pods", format!("limit=3&resourceVersion={rv}&resourceVersionMatch=Exact"), 7),
        ("/api/v1/pods", "limit=2".to_owned(), 7),
        ("/api/v1/namespaces/ns-a/pods", "limit=1&labelSelector=app%3Dweb".to_owned(), 2),
        ("/api/v1/pods", format!("resourceVersion={rv}&resourceVersionMatch=NotOlderThan"), 7),
        ("/api/v1/pods", "resourceVersion=0&limit=2".to_owned(), 7),
    ] {
        // Continue requests keep the selectors and limit but carry no resourceVersion.
        let keep: Vec<&str> = query.split('&').filter(|p| !p.starts_with("resourceVersion")).collect();
        let mut path = format!("{base}?{query}");
        let mut names = Vec::new();
        for _ in 0..=total {
            let run = f.same(&["get", "--raw", &path]).await;
            assert!(run.ok, "{path}: {}", run.stderr);
            let list: Value = serde_json::from_str(&run.stdout).expect("JSON list");
            for item in list["items"].as_array().expect("items") {
                names.push(item["metadata"]["name"].as_str().expect("name").to_owned());
            }
            let token = list["metadata"]["continue"].as_str().unwrap_or("");
            if token.is_empty() {
                break;
            }
            path = format!("{base}?{}&continue={token}", keep.join("&"));
        }
        assert_eq!(names.len(), total, "{base}?{query}: {names:?}");
    }
    // A revision the upstream compacted before kache started: 410 Expired, the same Status from both.
    // (A compacted revision kache still holds in its own history is served by kache; the sim says 410.)
    let first = f.sim.revision();
    f.sim.create("pods", Some("ns-a"), pod("ns-a", "late", &[], "node-1")).expect("pod created");
    f.sim.compact(None);
    assert!(first > 2);
    let run =
        f.same(&["get", "--raw", "/api/v1/pods?limit=1&resourceVersion=2&resourceVersionMatch=Exact"]).await;
    assert!(!run.ok && run.stderr.contains("(Expired)"), "{}{}", run.stdout, run.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_show_the_same_changes() {
    require_kubectl!();
    let f = Fixture::start().await;
    let shapes: &[&[&str]] = &[
        &["get", "pods", "-n", "ns-a", "-w"],
        &["get", "pods", "-n", "ns-a", "-w", "-o", "name"],
        &["get", "pods", "-n", "ns-a", "--watch-only", "-o", "json"],
        &["get", "pods", "-A", "-l", "app=web", "--watch-only", "-o", "name"],
    ];
    for (round, args) in shapes.iter().enumerate() {
        let mut argv = args.to_vec();
        argv.push("-v=6");
        let mut through = Watching::spawn(&f.via_kache, &argv);
        let mut direct = Watching::spawn(&f.via_sim, &argv);
        through.wait_watching().await;
        direct.wait_watching().await;
        // A pod appears, changes (leaving `app=web`), goes away; then a marker pod every shape shows.
        let name = format!("web-new-{round}");
        let marker = format!("web-marker-{round}");
        let json = args.contains(&"json");
        let mut a = Vec::new();
        let mut b = Vec::new();
        for step in 0..4 {
            let wanted = match step {
                0 => {
                    f.sim
                        .create("pods", Some("ns-a"), pod("ns-a", &name, &[("app", "web")], "node-1"))
                        .expect("pod created");
                    &name
                }
                1 => {
                    f.sim
                        .merge_patch(
                            "pods",
                            Some("ns-a"),
                            &name,
                            serde_json::json!({"metadata": {"labels": {"app": "db"}}}),
                        )
                        .expect("pod relabelled");
                    &name
                }
                2 => {
                    f.sim.delete("pods", Some("ns-a"), &name).expect("pod deleted");
                    f.sim
                        .create("pods", Some("ns-a"), pod("ns-a", &marker, &[("app", "web")], "node-1"))
                        .expect("marker created");
                    &marker
                }
                _ => break,
            };
            // With `-l app=web` the relabelling is a DELETED event and the deletion is not shown: wait for
            // the marker only.
            if args.contains(&"app=web") && step == 1 {
                continue;
            }
            for w in [&mut through, &mut direct] {
                w.until("the change", |l| l.contains(wanted.as_str())).await;
                // JSON watch output is one pretty-printed object per event: read to its end.
                if json {
                    w.until("the end of the object", |l| l == "}").await;
                }
            }
        }
        a.extend_from_slice(&through.seen);
        b.extend_from_slice(&direct.seen);
        assert!(a.iter().any(|l| l.contains(&marker)), "{a:?}");
        assert_eq!(
            without_age(&a.join("\n")),
            without_age(&b.join("\n")),
            "kubectl {} differs through kache and against the sim",
            args.join(" ")
        );
        // Killing kubectl ends its watch (Drop); kache keeps serving.
        drop(through);
        drop(direct);
    }
    assert!(f.kache.registry().all_synced());
}

/// The write commands print the same through kache (namespace kx) as against the sim (namespace sx), and
/// every read through kache right after a write sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_patch_label_delete_through_kache() {
    require_kubectl!();
    let f = Fixture::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("cm.yaml");
    let write_manifest = |mode: &str| {
        std::fs::write(
            &manifest,
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  mode: {mode}\n"),
        )
        .expect("write manifest");
    };
    let m = manifest.to_str().expect("utf-8 path").to_owned();
    // Each write runs through kache in kx and directly in sx; then kx is read through both.
    let both = |args: Vec<String>| {
        let f = &f;
        async move {
            let with = |ns: &str| {
                let mut a = args.clone();
                a.extend(["-n".to_owned(), ns.to_owned()]);
                a
            };
            let (k, s) = (with("kx"), with("sx"));
            let through = kubectl(&f.via_kache, &k.iter().map(String::as_str).collect::<Vec<_>>()).await;
            let direct = kubectl(&f.via_sim, &s.iter().map(String::as_str).collect::<Vec<_>>()).await;
            assert_eq!(through, direct, "kubectl {} through kache and against the sim", args.join(" "));
            through
        }
    };
    let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let read_kx = |what: &'static str| {
        let f = &f;
        async move {
            let run = f.same(&["get", "configmap", "settings", "-n", "kx", "-o", "yaml"]).await;
            assert!(run.ok, "{what}: {}", run.stderr);
            run.stdout
        }
    };

    write_manifest("fast");
    let run = both(args(&["apply", "--validate=false", "-f", &m])).await;
    assert_eq!(run.stdout, "configmap/settings created\n");
    assert!(read_kx("after apply").await.contains("mode: fast"));

    write_manifest("slower");
    let run = both(args(&["apply", "--validate=false", "-f", &m])).await;
    assert_eq!(run.stdout, "configmap/settings configured\n");
    assert!(read_kx("after re-apply").await.contains("mode: slower"));

    let run = both(args(&["label", "configmap", "settings", "tier=gold"])).await;
    assert_eq!(run.stdout, "configmap/settings labeled\n");
    assert!(read_kx("after label").await.contains("tier: gold"));

    let run =
        both(args(&["patch", "configmap", "settings", "--type=merge", "-p", r#"{"data":{"mode":"slow"}}"#]))
            .await;
    assert_eq!(run.stdout, "configmap/settings patched\n");
    let run = both(args(&[
        "patch",
        "configmap",
        "settings",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/data/x","value":"1"}]"#,
    ]))
    .await;
    assert_eq!(run.stdout, "configmap/settings patched\n");
    let run =
        both(args(&["patch", "configmap", "settings", "-p", r#"{"metadata":{"annotations":{"a":"b"}}}"#]))
            .await;
    assert_eq!(run.stdout, "configmap/settings patched\n");
    let yaml = read_kx("after patches").await;
    assert!(yaml.contains("mode: slow") && yaml.contains("x: \"1\"") && yaml.contains("a: b"), "{yaml}");
    let run = f.same(&["get", "configmaps", "-n", "kx", "-l", "tier=gold", "-o", "name"]).await;
    assert_eq!(run.stdout, "configmap/settings\n");

    let run = both(args(&["label", "configmap", "settings", "tier-"])).await;
    assert_eq!(run.stdout, "configmap/settings unlabeled\n");
    let run = f.same(&["get", "configmaps", "-n", "kx", "-l", "tier=gold", "-o", "name"]).await;
    assert_eq!(run.stdout, "");

    let run = both(args(&["delete", "configmap", "settings"])).await;
    assert_eq!(run.stdout, "configmap \"settings\" deleted\n");
    let run = f.same(&["get", "configmap", "settings", "-n", "kx"]).await;
    assert!(!run.ok && run.stderr.contains("(NotFound)"), "{}", run.stderr);
    let run = both(args(&["delete", "configmap", "settings"])).await;
    assert!(!run.ok && run.stderr.contains("(NotFound)"), "{}", run.stderr);
    assert!(f.sim.get("configmaps", Some("kx"), "settings").is_err(), "deleted upstream");
}

#[test]
fn age_is_the_only_column_dropped() {
    let a = "NAMESPACE   NAME    READY   STATUS    AGE\nns-a        web-0   0/1     Running   5s\n";
    let b = "NAMESPACE   NAME    READY   STATUS    AGE\nns-a        web-0   0/1     Running   12s\n";
    let c = "NAMESPACE   NAME    READY   STATUS    AGE\nns-a        web-0   0/1     Pending   5s\n";
    assert_eq!(without_age(a), without_age(b));
    assert_ne!(without_age(a), without_age(c));
    assert_eq!(without_age("pod/a\npod/b\n"), "pod/a\npod/b\n");
}
