//! `kache demo` as a user meets it: the `kache` binary started with a small workload, then read over HTTP
//! and with kubectl through the kubeconfig it wrote. It looks like a cluster (Deployments own ReplicaSets
//! own pods, consistently), serves OpenAPI schemas kubectl explains and validates with, says plainly what
//! it cannot do, and prints its measurement and a block of commands to try.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

use crate::common::{self, tools};

/// Time for the demo to seed, sync and measure its small workload (a debug build on a loaded machine).
const READY_TIMEOUT: Duration = Duration::from_secs(90);
/// The line the demo prints last, once everything is up.
const READY_LINE: &str = "Ctrl-C stops the demo.";

/// A running `kache demo`, killed on drop; its output up to the ready line and the URLs it printed.
struct Demo {
    child: Child,
    output: String,
    kache: String,
    upstream: String,
    kubeconfig: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value after `label` on the line that starts with it (`kache:      http://...` → the URL).
fn field(output: &str, label: &str) -> String {
    output
        .lines()
        .find_map(|l| l.strip_prefix(label))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no {label:?} line in the demo's output:\n{output}"))
        .to_string()
}

fn start() -> Demo {
    let dir = tempfile::tempdir().expect("temporary directory");
    let kubeconfig = dir.path().join("demo.kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kache"))
        .args(["demo", "--pods", "120", "--namespaces", "3", "--nodes", "4", "--churn", "0"])
        .args(["--foreign-writes", "0", "--listen", "127.0.0.1:0", "--metrics-listen", "off"])
        .arg("--kubeconfig-out")
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kache demo starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut output = String::new();
    let deadline = std::time::Instant::now() + READY_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                output.push_str(&line);
                output.push('\n');
                if line == READY_LINE {
                    break;
                }
            }
            Err(e) => {
                let _ = child.kill();
                panic!("kache demo not ready within {READY_TIMEOUT:?} ({e}); its output:\n{output}");
            }
        }
    }
    let kache = field(&output, "kache:");
    let upstream = field(&output, "upstream:");
    Demo { child, output, kache, upstream, kubeconfig, _dir: dir }
}

async fn items(base: &str, path: &str) -> Vec<Value> {
    let r = common::get(base, path).await;
    assert_eq!(r.status, 200, "GET {path}: {}", String::from_utf8_lossy(&r.body));
    r.json()["items"].as_array().cloned().unwrap_or_default()
}

fn key(o: &Value) -> (String, String) {
    let m = &o["metadata"];
    (m["namespace"].as_str().unwrap_or("").to_string(), m["name"].as_str().unwrap_or("").to_string())
}

/// The controller reference of `o`: (kind, name, uid).
fn controller(o: &Value) -> (String, String, String) {
    let refs = o["metadata"]["ownerReferences"].as_array().cloned().unwrap_or_default();
    let c: Vec<&Value> = refs.iter().filter(|r| r["controller"] == true).collect();
    assert_eq!(c.len(), 1, "one controller reference: {}", o["metadata"]);
    let s = |k: &str| c[0][k].as_str().unwrap_or("").to_string();
    (s("kind"), s("name"), s("uid"))
}

fn selects(selector: &Value, labels: &Value) -> bool {
    selector["matchLabels"].as_object().is_some_and(|m| m.iter().all(|(k, v)| labels[k] == *v))
}

#[tokio::test]
async fn the_demo_looks_like_a_cluster_and_says_what_it_cannot_do() {
    let demo = start();
    let out = &demo.output;
    // The measurement, the limits and the block of commands, as printed.
    for expected in [
        "GET /api/v1/pods (",
        "resourceVersion=0 (informers)",
        "consistent (kubectl get)",
        "has no kubelets",
        "export KUBECONFIG=",
        "kubectl explain pods",
    ] {
        assert!(out.contains(expected), "{expected:?} in the demo's output:\n{out}");
    }

    // Through kache: Deployments own ReplicaSets own pods, uids and selectors consistent, counts agreeing.
    let deployments = items(&demo.kache, "/apis/apps/v1/deployments").await;
    let replica_sets = items(&demo.kache, "/apis/apps/v1/replicasets").await;
    let pods = items(&demo.kache, "/api/v1/pods").await;
    assert_eq!(pods.len(), 120);
    assert!(!deployments.is_empty() && !replica_sets.is_empty());
    let by_key = |list: &[Value]| -> std::collections::HashMap<(String, String), Value> {
        list.iter().map(|o| (key(o), o.clone())).collect()
    };
    let (deployments, replica_sets) = (by_key(&deployments), by_key(&replica_sets));
    let mut owned = std::collections::HashMap::<(String, String), u64>::new();
    for pod in &pods {
        let (kind, name, uid) = controller(pod);
        assert_eq!(kind, "ReplicaSet", "{}", pod["metadata"]);
        let ns = key(pod).0;
        let rs =
            replica_sets.get(&(ns.clone(), name.clone())).unwrap_or_else(|| panic!("{ns}/{name} exists"));
        assert_eq!(rs["metadata"]["uid"], uid.as_str(), "the pod names its ReplicaSet's uid");
        assert!(
            selects(&rs["spec"]["selector"], &pod["metadata"]["labels"]),
            "{name} selects {}",
            key(pod).1
        );
        assert_eq!(
            pod["metadata"]["labels"]["pod-template-hash"],
            rs["metadata"]["labels"]["pod-template-hash"]
        );
        *owned.entry((ns, name)).or_default() += 1;
    }
    let mut per_deployment = std::collections::HashMap::<(String, String), u64>::new();
    for (k, rs) in &replica_sets {
        let (kind, name, uid) = controller(rs);
        assert_eq!(kind, "Deployment");
        let d =
            deployments.get(&(k.0.clone(), name.clone())).unwrap_or_else(|| panic!("{}/{name} exists", k.0));
        assert_eq!(d["metadata"]["uid"], uid.as_str(), "the ReplicaSet names its Deployment's uid");
        assert!(selects(&d["spec"]["selector"], &rs["spec"]["template"]["metadata"]["labels"]));
        let n = owned.get(k).copied().unwrap_or(0);
        assert_eq!(rs["spec"]["replicas"], n, "{k:?}: replicas = its pods");
        assert_eq!(rs["status"]["replicas"], n);
        *per_deployment.entry((k.0.clone(), name)).or_default() += n;
    }
    for (k, d) in &deployments {
        assert_eq!(d["spec"]["replicas"], per_deployment.get(k).copied().unwrap_or(0), "{k:?}");
    }

    // OpenAPI v3: the index names a document per group-version, with the kinds' schemas.
    let index = common::get(&demo.kache, "/openapi/v3").await.json();
    let url =
        index["paths"]["api/v1"]["serverRelativeURL"].as_str().expect("api/v1 in the index").to_string();
    assert!(url.contains("?hash="), "{url}");
    let doc = common::get(&demo.kache, &url).await.json();
    assert!(doc["components"]["schemas"]["io.k8s.api.core.v1.Pod"]["properties"]["spec"].is_object());

    // What needs a kubelet answers a Status that says why, through kache as from the sim.
    let pod = key(&pods[0]);
    let exec = format!("/api/v1/namespaces/{}/pods/{}/exec?command=ls&stdout=true", pod.0, pod.1);
    for base in [&demo.kache, &demo.upstream] {
        let r = common::get(base, &exec).await;
        let status = r.json();
        assert_eq!((r.status.as_u16(), status["kind"].as_str()), (501, Some("Status")), "{status}");
        let message = status["message"].as_str().unwrap_or("");
        assert!(message.contains("no kubelets") && message.contains("real cluster"), "{message}");
    }

    if !tools::kubectl_available() {
        tools::missing(
            "kubectl is not installed: `kubectl explain` and validation through the demo not checked",
        );
        return;
    }
    let kubectl = |args: &[&str], stdin: Option<&str>| {
        let mut c = Command::new("kubectl");
        c.arg("--kubeconfig").arg(&demo.kubeconfig).args(args);
        c.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = c.spawn().expect("kubectl runs");
        if let Some(input) = stdin {
            use std::io::Write as _;
            child.stdin.take().expect("piped").write_all(input.as_bytes()).expect("stdin written");
        }
        let o = child.wait_with_output().expect("kubectl ends");
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (ok, stdout, stderr) = kubectl(&["explain", "pods.spec.containers"], None);
    assert!(
        ok && stdout.contains("KIND:") && stdout.contains("Pod") && stdout.contains("image"),
        "{stdout}{stderr}"
    );
    let typo = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: typo\n  namespace: ns-0\nspec:\n  containers:\n  - name: c\n    imagee: nginx\n";
    let (ok, stdout, stderr) = kubectl(&["apply", "--validate=strict", "-f", "-"], Some(typo));
    assert!(!ok && stderr.contains(r#"unknown field "spec.containers[0].imagee""#), "{stdout}{stderr}");
    let (ok, stdout, stderr) = kubectl(&["exec", "-n", &pod.0, &pod.1, "--", "ls"], None);
    assert!(!ok && stderr.contains("no kubelets"), "{stdout}{stderr}");
    let (ok, stdout, stderr) = kubectl(&["get", "deploy,rs,pods", "-n", "ns-0"], None);
    assert!(
        ok && stdout.contains("deployment.apps/") && stdout.contains("replicaset.apps/"),
        "{stdout}{stderr}"
    );
}
