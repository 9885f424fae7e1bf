//! kubectl against the sim: the real client's discovery, table and JSON output, chunked lists, watch,
//! client-side apply and delete must all work on the simulated apiserver.
//!
//! Every test starts its own sim on an ephemeral port, seeds it with the workload generator, and drives
//! kubectl through a temporary kubeconfig (plain http, no credentials) and a private discovery cache.
//! When `kubectl` is not on PATH the tests print a notice and pass, or fail under `KACHE_REQUIRE_TOOLS=1`
//! (CI; the workspace's one rule, `tests/common/tools.rs`). (Authentication is tested over HTTP in
//! `tests/it/auth.rs`: client-go does not send bearer tokens to a plain-http server.)
//!
//! Run: `cargo test -p kache-sim --test kubectl`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use kache_sim::workload::{Workload, seed_objects};
use kache_sim::{Sim, SimHandle};
use serde_json::{Value, json};

/// Upper bound on waiting for a line from `kubectl get -w` (a guard against hangs, not a synchronisation).
const WATCH_LINE_TIMEOUT: Duration = Duration::from_secs(60);

/// The workspace's rule for missing tools (a plain source file; the sim still does not depend on kache).
#[path = "../../tests/common/tools.rs"]
mod tools;

static NEXT_DIR: AtomicUsize = AtomicUsize::new(0);

// === harness ===

/// A running sim with seeded objects and a kubeconfig pointing at it.
struct Env {
    runtime: tokio::runtime::Runtime,
    sim: Option<SimHandle>,
    dir: PathBuf,
    kubeconfig: PathBuf,
}

impl Env {
    /// `None` (after printing a notice) when kubectl is unavailable.
    fn start(w: &Workload) -> Option<Env> {
        if !tools::kubectl_available() {
            tools::missing("kubectl is not on PATH (scripts/install-test-deps.sh installs it)");
            return None;
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let sim = runtime.block_on(Sim::builder().start()).expect("sim starts");
        for (resource, ns, body) in seed_objects(w) {
            sim.create(resource, ns.as_deref(), body).expect("seed object is accepted");
        }
        let dir = std::env::temp_dir().join(format!(
            "kache-sim-kubectl-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let kubeconfig = dir.join("kubeconfig");
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: sim\n  cluster:\n    server: {}\n\
             contexts:\n- name: sim\n  context:\n    cluster: sim\n    user: sim\n    namespace: default\n\
             current-context: sim\nusers:\n- name: sim\n  user: {{}}\n",
            sim.url()
        );
        std::fs::write(&kubeconfig, config).expect("write kubeconfig");
        Some(Env { runtime, sim: Some(sim), dir, kubeconfig })
    }

    fn sim(&self) -> &SimHandle {
        self.sim.as_ref().expect("sim runs until drop")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("kubectl");
        cmd.arg("--kubeconfig").arg(&self.kubeconfig).arg("--cache-dir").arg(self.dir.join("cache"));
        cmd.args(args);
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("kubectl runs")
    }

    /// Runs kubectl and returns stdout, failing with the full exchange when it does not succeed.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed ({})\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Extra flags for commands that validate manifests: client-side validation downloads the OpenAPI
    /// documents, so when a sim build does not serve `/openapi/v3` yet, validation is skipped with a notice.
    fn validation_flags(&self) -> Vec<&'static str> {
        if self.run(&["get", "--raw", "/openapi/v3"]).status.success() {
            Vec::new()
        } else {
            eprintln!("NOTICE: the sim serves no /openapi/v3; running kubectl with --validate=false");
            vec!["--validate=false"]
        }
    }

    /// `kubectl <verb> -f <file> [-n ns]` with the validation flags.
    fn with_file(&self, verb: &str, file: &Path, namespace: Option<&str>) -> String {
        let mut args = vec![verb, "-f", path_arg(file)];
        if let Some(ns) = namespace {
            args.extend(["-n", ns]);
        }
        args.extend(self.validation_flags());
        self.ok(&args)
    }

    fn write_file(&self, name: &str, content: &str) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::write(&path, content).expect("write manifest");
        path
    }

    fn pod_names(&self, namespace: Option<&str>) -> Vec<String> {
        let pods = self.sim().list("pods", namespace).expect("list pods");
        pods.iter()
            .filter_map(|p| p.pointer("/metadata/name").and_then(Value::as_str).map(String::from))
            .collect()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(sim) = self.sim.take() {
            self.runtime.block_on(sim.shutdown());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn workload(namespaces: usize, pods: usize) -> Workload {
    Workload { namespaces, pods, nodes: 3, churn_per_sec: 0.0, seed: 11 }
}

fn path_arg(p: &Path) -> &str {
    p.to_str().expect("temp paths are UTF-8")
}

/// Kills a `kubectl get -w` child when the test ends, however it ends.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// === tests ===

#[test]
fn get_pods_all_namespaces_prints_a_table() {
    let Some(env) = Env::start(&workload(3, 9)) else { return };
    let out = env.ok(&["get", "pods", "-A"]);
    let header = out.lines().next().unwrap_or("");
    // The sim prints Tables as the apiserver's pod printer does (pkg/printers/internalversion/printers.go:
    // printPod).
    for column in ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"] {
        assert!(header.contains(column), "header {header:?} lacks {column}");
    }
    for name in env.pod_names(None) {
        assert!(out.contains(&name), "pod {name} missing from:\n{out}");
    }
    assert_eq!(out.lines().count(), 1 + 9, "{out}");
    assert!(out.contains("ns-0") && out.contains("ns-2"));
}

#[test]
fn chunked_list_pages_through_everything() {
    let Some(env) = Env::start(&workload(2, 7)) else { return };
    // -v=6 logs each request URL: the pages must actually be requested with limit and continue.
    let out = env.run(&["get", "pods", "-A", "--chunk-size=2", "-o", "name", "-v=6"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "stderr:\n{stderr}");
    assert!(stderr.contains("limit=2"), "no chunked request in:\n{stderr}");
    assert!(stderr.contains("continue="), "no continue request in:\n{stderr}");
    let mut listed: Vec<&str> = stdout.lines().map(|l| l.trim_start_matches("pod/")).collect();
    listed.sort_unstable();
    let mut want = env.pod_names(None);
    want.sort_unstable();
    assert_eq!(listed, want);
}

#[test]
fn output_json_is_a_list_of_the_objects() {
    let Some(env) = Env::start(&workload(2, 6)) else { return };
    let out = env.ok(&["get", "pods", "-n", "ns-1", "-o", "json"]);
    let list: Value = serde_json::from_str(&out).expect("kubectl prints JSON");
    assert_eq!(list["kind"], "List");
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 3);
    for item in items {
        assert_eq!(item["kind"], "Pod");
        assert_eq!(item["metadata"]["namespace"], "ns-1");
        assert!(item["metadata"]["resourceVersion"].as_str().is_some_and(|rv| !rv.is_empty()));
        assert!(item["spec"]["containers"].is_array());
    }
    let one = &items[0]["metadata"]["name"];
    let single: Value = serde_json::from_str(&env.ok(&[
        "get",
        "pod",
        "-n",
        "ns-1",
        one.as_str().unwrap_or(""),
        "-o",
        "json",
    ]))
    .expect("JSON");
    assert_eq!(&single["metadata"]["name"], one);
}

#[test]
fn get_watch_sees_changes() {
    let Some(env) = Env::start(&workload(1, 2)) else { return };
    let existing = env.pod_names(Some("ns-0"));
    let mut child = KillOnDrop(
        env.command(&["get", "pods", "-n", "ns-0", "-w", "--output-watch-events"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl get -w starts"),
    );
    let stdout = child.0.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Lines are `EVENT NAME AGE` (`--output-watch-events`), after an `EVENT NAME AGE` header.
    let wait_for = |event: &str, name: &str| loop {
        match rx.recv_timeout(WATCH_LINE_TIMEOUT) {
            Ok(line) => {
                let mut cols = line.split_whitespace();
                if (cols.next(), cols.next()) == (Some(event), Some(name)) {
                    return;
                }
            }
            Err(e) => panic!("kubectl get -w never printed {event} {name}: {e}"),
        }
    };
    // The initial list comes first, as ADDED events; the watch starts from the list's resourceVersion.
    for name in &existing {
        wait_for("ADDED", name);
    }
    env.sim()
        .create(
            "pods",
            Some("ns-0"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "watched-new"},
                   "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
        )
        .expect("create");
    wait_for("ADDED", "watched-new");
    env.sim()
        .merge_patch("pods", Some("ns-0"), &existing[0], json!({"metadata": {"labels": {"changed": "yes"}}}))
        .expect("patch");
    wait_for("MODIFIED", &existing[0]);
    env.sim().delete("pods", Some("ns-0"), "watched-new").expect("delete");
    wait_for("DELETED", "watched-new");
}

#[test]
fn apply_creates_then_updates() {
    let Some(env) = Env::start(&workload(1, 1)) else { return };
    let manifest = |value: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: ns-0\n  labels:\n    \
             app: demo\ndata:\n  mode: {value}\n"
        )
    };
    let file = env.write_file("cm.yaml", &manifest("fast"));
    let out = env.with_file("apply", &file, None);
    assert!(out.contains("configmap/settings created"), "{out}");
    let stored = env.sim().get("configmaps", Some("ns-0"), "settings").expect("created");
    assert_eq!(stored["data"]["mode"], "fast");
    assert!(
        stored["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"].is_string(),
        "client-side apply records its configuration"
    );

    let out = env.with_file("apply", &file, None);
    assert!(out.contains("configmap/settings unchanged"), "{out}");

    let file = env.write_file("cm.yaml", &manifest("safe"));
    let out = env.with_file("apply", &file, None);
    assert!(out.contains("configmap/settings configured"), "{out}");
    let got = env.ok(&["get", "configmap", "settings", "-n", "ns-0", "-o", "jsonpath={.data.mode}"]);
    assert_eq!(got, "safe");
}

#[test]
fn delete_removes_objects() {
    let Some(env) = Env::start(&workload(1, 3)) else { return };
    let victim = env.pod_names(Some("ns-0")).remove(0);
    let out = env.ok(&["delete", "pod", "-n", "ns-0", &victim]);
    assert!(out.contains(&format!("pod \"{victim}\" deleted")), "{out}");
    let after = env.run(&["get", "pod", "-n", "ns-0", &victim]);
    assert!(!after.status.success());
    let stderr = String::from_utf8_lossy(&after.stderr);
    assert!(stderr.contains(&format!("pods \"{victim}\" not found")), "{stderr}");
    assert_eq!(env.pod_names(Some("ns-0")).len(), 2);

    // `kubectl create configmap` would send protobuf, which the sim does not decode; a manifest is JSON.
    let file = env.write_file(
        "doomed.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: doomed\ndata:\n  k: v\n",
    );
    let out = env.with_file("create", &file, Some("ns-0"));
    assert!(out.contains("configmap/doomed created"), "{out}");
    let out = env.ok(&["delete", "configmap", "doomed", "-n", "ns-0"]);
    assert!(out.contains("configmap \"doomed\" deleted"), "{out}");
    assert!(env.sim().get("configmaps", Some("ns-0"), "doomed").is_err());
}

#[test]
fn selectors_reach_the_server() {
    let Some(env) = Env::start(&workload(2, 12)) else { return };
    let pods = env.sim().list("pods", None).expect("list");
    let label = |p: &Value, k: &str| {
        p.pointer(&format!("/metadata/labels/{k}")).and_then(Value::as_str).map(String::from)
    };
    let app = label(&pods[0], "app").expect("pods have an app label");
    let mut want: Vec<String> = pods
        .iter()
        .filter(|p| label(p, "app").as_deref() == Some(app.as_str()))
        .filter_map(|p| p.pointer("/metadata/name").and_then(Value::as_str).map(|n| format!("pod/{n}")))
        .collect();
    want.sort_unstable();
    let out = env.ok(&["get", "pods", "-A", "-l", &format!("app={app}"), "-o", "name"]);
    let mut got: Vec<&str> = out.lines().collect();
    got.sort_unstable();
    assert_eq!(got, want);

    let on_node0 = pods.iter().filter(|p| p.pointer("/spec/nodeName") == Some(&json!("node-0"))).count();
    let out = env.ok(&[
        "get",
        "pods",
        "-A",
        "--field-selector",
        "spec.nodeName=node-0,status.phase=Running",
        "-o",
        "name",
    ]);
    assert_eq!(out.lines().count(), on_node0, "{out}");

    for (flag, selector, message) in [
        ("--field-selector", "foo=bar", "field label not supported: foo"),
        ("--field-selector", "a=b=c", "invalid field selector: unescaped character in value: 61"),
        ("-l", "a in (x", "unable to parse requirement: found '', expected: ',' or ')'"),
    ] {
        let out = env.run(&["get", "pods", flag, selector]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            stderr.contains("Error from server (BadRequest)") && stderr.contains(message),
            "{selector}: {stderr}"
        );
    }
}
