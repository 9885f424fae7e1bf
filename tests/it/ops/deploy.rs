//! deploy/: every manifest parses, carries the fields Kubernetes requires, is consistent with the others
//! (selectors, ports, service accounts, RBAC) and with kache's own flags, and validates offline against the
//! Kubernetes OpenAPI schemas (kubernetes-validate, installed by scripts/install-test-deps.sh).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize as _;
use serde_json::Value;

use super::support::{find_program, target_dir};

/// Files of Prometheus Operator kinds: kubernetes-validate has no schema for them (it warns and passes);
/// their fields are checked by the tests below and their rules by promtool.
const OPERATOR_FILES: &[&str] = &["servicemonitor.yaml", "prometheus-rules.yaml"];

/// Kinds that live outside namespaces.
const CLUSTER_SCOPED: &[&str] = &["Namespace", "ClusterRole", "ClusterRoleBinding"];

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

fn manifest_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy_dir())
        .expect("deploy/ exists")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml") && !p.ends_with("kustomization.yaml"))
        .collect();
    files.sort();
    files
}

/// Every YAML document of `text`, as JSON (empty documents left out).
fn parse_yaml_str(text: &str, what: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{what} is not valid YAML: {e}")))
        .filter(|doc| !doc.is_null())
        .collect()
}

/// Every YAML document of a file, as JSON.
fn parse_yaml(file: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
    parse_yaml_str(&text, &file.display().to_string())
}

fn str_at<'a>(v: &'a Value, path: &str) -> Option<&'a str> {
    v.pointer(path).and_then(Value::as_str)
}

fn labels(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
        .unwrap_or_default()
}

fn subset(small: &BTreeMap<String, String>, big: &BTreeMap<String, String>) -> bool {
    !small.is_empty() && small.iter().all(|(k, v)| big.get(k) == Some(v))
}

/// Every object of every manifest, tagged with its file.
fn all_objects() -> Vec<(String, Value)> {
    manifest_files()
        .iter()
        .flat_map(|f| {
            let name = f.file_name().expect("file name").to_string_lossy().into_owned();
            parse_yaml(f).into_iter().map(move |d| (name.clone(), d))
        })
        .collect()
}

/// The containers (and init containers) of a workload's pod template.
fn containers(workload: &Value) -> Vec<&Value> {
    ["/spec/template/spec/containers", "/spec/template/spec/initContainers"]
        .iter()
        .filter_map(|p| workload.pointer(p).and_then(Value::as_array))
        .flatten()
        .collect()
}

fn is_workload(v: &Value) -> bool {
    matches!(str_at(v, "/kind"), Some("Deployment" | "DaemonSet" | "StatefulSet"))
}

#[test]
fn manifests_have_required_fields_and_agree_with_each_other() {
    let objects = all_objects();
    assert!(objects.len() >= 10, "expected the full set of manifests, got {}", objects.len());
    let kinds: Vec<&str> = objects.iter().filter_map(|(_, o)| str_at(o, "/kind")).collect();
    for kind in [
        "Deployment",
        "DaemonSet",
        "Service",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ServiceMonitor",
    ] {
        assert!(kinds.contains(&kind), "no {kind} in deploy/");
    }
    for (file, o) in &objects {
        let kind = str_at(o, "/kind").unwrap_or_else(|| panic!("{file}: object without kind"));
        assert!(str_at(o, "/apiVersion").is_some_and(|s| !s.is_empty()), "{file}: {kind} without apiVersion");
        let name =
            str_at(o, "/metadata/name").unwrap_or_else(|| panic!("{file}: {kind} without metadata.name"));
        let namespaced = !CLUSTER_SCOPED.contains(&kind);
        assert_eq!(str_at(o, "/metadata/namespace").is_some(), namespaced, "{file}: {kind}/{name} namespace");
    }
    let find = |kind: &str, ns: Option<&str>, name: &str| {
        objects.iter().any(|(_, o)| {
            str_at(o, "/kind") == Some(kind)
                && str_at(o, "/metadata/name") == Some(name)
                && str_at(o, "/metadata/namespace") == ns
        })
    };
    for (file, w) in objects.iter().filter(|(_, o)| is_workload(o)) {
        let name = str_at(w, "/metadata/name").unwrap_or("?");
        let ns = str_at(w, "/metadata/namespace");
        let selector = labels(w.pointer("/spec/selector/matchLabels"));
        let template = labels(w.pointer("/spec/template/metadata/labels"));
        assert!(subset(&selector, &template), "{file}: {name}'s selector does not match its pod labels");
        let sa = str_at(w, "/spec/template/spec/serviceAccountName").unwrap_or("default");
        assert!(
            sa == "default" || find("ServiceAccount", ns, sa),
            "{file}: {name} uses missing service account {sa}"
        );
        for c in containers(w) {
            assert!(
                str_at(c, "/image").is_some_and(|i| !i.is_empty()),
                "{file}: {name} container without image"
            );
        }
    }
    for (file, b) in objects.iter().filter(|(_, o)| str_at(o, "/kind") == Some("ClusterRoleBinding")) {
        let role = str_at(b, "/roleRef/name").unwrap_or("");
        assert!(find("ClusterRole", None, role), "{file}: binding to missing ClusterRole {role}");
        for s in b.pointer("/subjects").and_then(Value::as_array).into_iter().flatten() {
            let (ns, sa) = (str_at(s, "/namespace"), str_at(s, "/name").unwrap_or(""));
            assert!(find("ServiceAccount", ns, sa), "{file}: binding to missing ServiceAccount {ns:?}/{sa}");
        }
    }
}

/// The kache containers: `kache` in a workload, with their files.
fn kache_containers(objects: &[(String, Value)]) -> Vec<(String, &Value, &Value)> {
    objects
        .iter()
        .filter(|(_, o)| is_workload(o))
        .flat_map(|(f, w)| {
            containers(w)
                .into_iter()
                .filter(|c| str_at(c, "/name") == Some("kache"))
                .map(move |c| (f.clone(), w, c))
        })
        .collect()
}

fn args(c: &Value) -> Vec<String> {
    c.pointer("/args")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect()
}

fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter().find_map(|a| a.strip_prefix(name)?.strip_prefix('='))
}

fn named_port(c: &Value, name: &str) -> Option<u64> {
    c.pointer("/ports")?
        .as_array()?
        .iter()
        .find(|p| str_at(p, "/name") == Some(name))?
        .pointer("/containerPort")?
        .as_u64()
}

#[test]
fn kache_containers_probe_the_metrics_listener_and_use_known_flags() {
    let objects = all_objects();
    let help = Command::new(env!("CARGO_BIN_EXE_kache"))
        .args(["serve", "--help"])
        .output()
        .expect("run kache serve --help");
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let kaches = kache_containers(&objects);
    assert!(kaches.len() >= 4, "deployment, daemonsets and sidecar each run kache");
    for (file, _, c) in &kaches {
        let args = args(c);
        assert_eq!(args.first().map(String::as_str), Some("serve"), "{file}: kache runs `serve`");
        for a in args.iter().skip(1) {
            let name = a.split('=').next().unwrap_or(a);
            assert!(name.starts_with("--"), "{file}: argument {a} is not a --flag");
            let known = [' ', '=', '\n'].iter().any(|end| help.contains(&format!("{name}{end}")));
            assert!(known, "{file}: `kache serve` has no flag {name}");
        }
        let metrics =
            named_port(c, "metrics").unwrap_or_else(|| panic!("{file}: kache without a metrics port"));
        let listen = flag(&args, "--metrics-listen").unwrap_or_else(|| panic!("{file}: no --metrics-listen"));
        assert_eq!(
            listen.rsplit(':').next().and_then(|p| p.parse().ok()),
            Some(metrics),
            "{file}: metrics port"
        );
        for (probe, path) in
            [("readinessProbe", "/readyz"), ("livenessProbe", "/livez"), ("startupProbe", "/readyz")]
        {
            let p = c.pointer(&format!("/{probe}/httpGet")).unwrap_or_else(|| panic!("{file}: no {probe}"));
            assert_eq!(str_at(p, "/path"), Some(path), "{file}: {probe} path");
            assert_eq!(str_at(p, "/port"), Some("metrics"), "{file}: {probe} port");
        }
    }
}

#[test]
fn services_and_servicemonitor_select_kache() {
    let objects = all_objects();
    let services: Vec<&Value> =
        objects.iter().map(|(_, o)| o).filter(|o| str_at(o, "/kind") == Some("Service")).collect();
    for svc in &services {
        let name = str_at(svc, "/metadata/name").unwrap_or("?");
        let selector = labels(svc.pointer("/spec/selector"));
        let backends: Vec<&Value> = objects
            .iter()
            .map(|(_, o)| o)
            .filter(|o| {
                is_workload(o) && str_at(o, "/metadata/namespace") == str_at(svc, "/metadata/namespace")
            })
            .filter(|w| subset(&selector, &labels(w.pointer("/spec/template/metadata/labels"))))
            .collect();
        assert!(!backends.is_empty(), "Service {name} selects no workload");
        for port in svc.pointer("/spec/ports").and_then(Value::as_array).into_iter().flatten() {
            let target =
                str_at(port, "/targetPort").unwrap_or_else(|| panic!("Service {name}: named targetPort"));
            for w in &backends {
                assert!(
                    containers(w).iter().any(|c| named_port(c, target).is_some()),
                    "Service {name}: no port {target}"
                );
            }
        }
    }
    for (file, sm) in objects.iter().filter(|(_, o)| str_at(o, "/kind") == Some("ServiceMonitor")) {
        let selector = labels(sm.pointer("/spec/selector/matchLabels"));
        let selected: Vec<&&Value> =
            services.iter().filter(|s| subset(&selector, &labels(s.pointer("/metadata/labels")))).collect();
        assert!(!selected.is_empty(), "{file}: ServiceMonitor selects no Service");
        for ep in sm.pointer("/spec/endpoints").and_then(Value::as_array).into_iter().flatten() {
            let port = str_at(ep, "/port").unwrap_or("");
            assert_eq!(str_at(ep, "/path"), Some("/metrics"), "{file}: scrape path");
            for s in &selected {
                let ports = s.pointer("/spec/ports").and_then(Value::as_array).cloned().unwrap_or_default();
                assert!(
                    ports.iter().any(|p| str_at(p, "/name") == Some(port)),
                    "{file}: Service lacks port {port}"
                );
            }
        }
    }
}

#[test]
fn rbac_grants_what_kache_needs() {
    let objects = all_objects();
    let role = objects
        .iter()
        .map(|(_, o)| o)
        .find(|o| str_at(o, "/kind") == Some("ClusterRole") && str_at(o, "/metadata/name") == Some("kache"))
        .expect("ClusterRole kache");
    let rules = role.pointer("/rules").and_then(Value::as_array).cloned().unwrap_or_default();
    let grants = |group: &str, resource: &str, verb: &str| {
        rules.iter().any(|r| {
            let has = |key: &str, want: &str| {
                r.pointer(key)
                    .and_then(Value::as_array)
                    .is_some_and(|a| a.iter().any(|x| x.as_str() == Some(want)))
            };
            has("/apiGroups", group) && has("/resources", resource) && has("/verbs", verb)
        })
    };
    for (group, resource, verb) in [
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("apps", "deployments", "watch"),
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
    ] {
        assert!(grants(group, resource, verb), "ClusterRole kache lacks {verb} {resource}.{group}");
    }
    let impersonator = objects
        .iter()
        .map(|(_, o)| o)
        .find(|o| {
            str_at(o, "/kind") == Some("ClusterRole")
                && str_at(o, "/metadata/name") == Some("kache-impersonator")
        })
        .expect("ClusterRole kache-impersonator (forwarding as the client)");
    for resource in ["users", "groups", "serviceaccounts"] {
        let rules = impersonator.pointer("/rules").and_then(Value::as_array).cloned().unwrap_or_default();
        assert!(
            rules.iter().any(|r| r.to_string().contains(&format!("\"{resource}\""))
                && r.to_string().contains("\"impersonate\"")),
            "kache-impersonator cannot impersonate {resource}"
        );
    }
    // kache only reads: nothing in its role may write.
    for r in &rules {
        for verb in r.pointer("/verbs").and_then(Value::as_array).into_iter().flatten() {
            let verb = verb.as_str().unwrap_or("");
            let creates_review = verb == "create"
                && r.pointer("/resources").and_then(Value::as_array).is_some_and(|a| {
                    a.iter().all(|x| matches!(x.as_str(), Some("tokenreviews" | "subjectaccessreviews")))
                });
            assert!(
                matches!(verb, "list" | "watch" | "get") || creates_review,
                "unexpected verb {verb} in {r}"
            );
        }
    }
}

#[test]
fn sidecar_kubeconfig_points_at_the_sidecar() {
    let objects = all_objects();
    let cm = objects
        .iter()
        .map(|(_, o)| o)
        .find(|o| str_at(o, "/metadata/name") == Some("my-controller-kubeconfig"))
        .expect("the controller's kubeconfig");
    let text = str_at(cm, "/data/kubeconfig").expect("kubeconfig key");
    let kubeconfig = parse_yaml_str(text, "the kubeconfig").pop().expect("one kubeconfig document");
    let server = str_at(&kubeconfig, "/clusters/0/cluster/server").expect("cluster server");
    let (_, _, kache) = kache_containers(&objects)
        .into_iter()
        .find(|(f, _, _)| f == "sidecar.yaml")
        .expect("sidecar.yaml runs kache");
    let listen = flag(&args(kache), "--listen").expect("sidecar --listen").to_owned();
    assert_eq!(server, format!("http://{listen}"), "the controller must talk to its sidecar");
    assert!(listen.starts_with("127.0.0.1:"), "a plain-HTTP sidecar listens on loopback only");
}

#[test]
fn manifests_validate_against_kubernetes_schemas() {
    let validator = target_dir().join("ops-venv").join("bin").join("kubernetes-validate");
    if !validator.is_file() {
        crate::common::tools::missing(&format!(
            "{} not found (run scripts/install-test-deps.sh to install kubernetes-validate)",
            validator.display()
        ));
        return;
    }
    let out = Command::new(&validator)
        .args(["--strict", "--no-warn"])
        .args(manifest_files())
        .output()
        .expect("run kubernetes-validate");
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "kubernetes-validate failed:\n{report}");
    for f in manifest_files() {
        let name = f.file_name().expect("file name").to_string_lossy().into_owned();
        assert!(
            OPERATOR_FILES.contains(&name.as_str()) || report.contains(&format!("{name} passed")),
            "{name} not validated:\n{report}"
        );
    }
}

#[test]
fn kustomization_builds() {
    let kustomization = parse_yaml(&deploy_dir().join("kustomization.yaml")).pop().expect("one document");
    let resources =
        kustomization.pointer("/resources").and_then(Value::as_array).cloned().unwrap_or_default();
    assert!(!resources.is_empty());
    for r in &resources {
        let file = r.as_str().expect("resource path");
        assert!(deploy_dir().join(file).is_file(), "kustomization lists missing {file}");
    }
    let Some(kubectl) = find_program("kubectl", &[]) else {
        crate::common::tools::missing("kubectl kustomize: kubectl is not installed");
        return;
    };
    let out =
        Command::new(kubectl).arg("kustomize").arg(deploy_dir()).output().expect("run kubectl kustomize");
    assert!(out.status.success(), "kubectl kustomize: {}", String::from_utf8_lossy(&out.stderr));
    let built = String::from_utf8_lossy(&out.stdout);
    for kind in ["kind: Namespace", "kind: ClusterRole", "kind: Deployment", "kind: ServiceMonitor"] {
        assert!(built.contains(kind), "kustomize output lacks {kind}");
    }
}

/// The alerting rules of deploy/prometheus-rules.yaml as a plain Prometheus rules file (JSON is YAML).
fn rules_file(dir: &Path) -> (PathBuf, Value) {
    let rule = parse_yaml(&deploy_dir().join("prometheus-rules.yaml")).pop().expect("one PrometheusRule");
    assert_eq!(str_at(&rule, "/kind"), Some("PrometheusRule"));
    let groups = rule.pointer("/spec/groups").cloned().expect("spec.groups");
    let path = dir.join("rules.yml");
    let file = serde_json::json!({ "groups": groups });
    std::fs::write(&path, serde_json::to_string_pretty(&file).expect("JSON")).expect("write rules");
    (path, file)
}

#[test]
fn alert_rules_query_exported_metrics() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, file) = rules_file(dir.path());
    let defined: std::collections::BTreeSet<String> =
        kache::metrics::names::ALL.iter().flat_map(kache::metrics::names::series_names).collect();
    let rules = file.pointer("/groups/0/rules").and_then(Value::as_array).cloned().unwrap_or_default();
    assert!(rules.len() >= 5);
    for rule in &rules {
        let expr = str_at(rule, "/expr").expect("rule expr");
        for name in super::dashboards::metric_names(expr) {
            // `up` is Prometheus's own per-target series.
            assert!(name == "up" || defined.contains(&name), "alert {rule} queries unknown metric {name}");
        }
    }
}

#[test]
fn alert_rules_pass_promtool() {
    let Some(promtool) = find_program("promtool", &["/usr/bin/promtool"]) else {
        crate::common::tools::missing(
            "promtool is not installed (it comes with Debian's prometheus package)",
        );
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let (rules, _) = rules_file(dir.path());
    let out = Command::new(&promtool).args(["check", "rules"]).arg(&rules).output().expect("run promtool");
    assert!(
        out.status.success(),
        "promtool check rules: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // Unit tests of two alerts: an unsynced resource fires after 10 minutes, a synced one never does.
    let test = r#"{
      "rule_files": ["rules.yml"],
      "evaluation_interval": "1m",
      "tests": [{
        "interval": "1m",
        "input_series": [
          {"series": "kache_resource_synced{job=\"kache\",instance=\"a:9090\",group=\"\",resource=\"pods\",configured=\"true\"}", "values": "0x20"},
          {"series": "kache_resource_synced{job=\"kache\",instance=\"b:9090\",group=\"\",resource=\"pods\",configured=\"true\"}", "values": "1x20"},
          {"series": "kache_relists_total{job=\"kache\",instance=\"a:9090\",group=\"apps\",resource=\"deployments\"}", "values": "0+1x20"}
        ],
        "alert_rule_test": [
          {"eval_time": "5m", "alertname": "KacheResourceNotSynced", "exp_alerts": []},
          {"eval_time": "15m", "alertname": "KacheResourceNotSynced", "exp_alerts": [{
            "exp_labels": {"severity": "warning", "job": "kache", "instance": "a:9090", "resource": "pods", "configured": "true"},
            "exp_annotations": {
              "summary": "kache a:9090 has not synced pods",
              "description": "A configured resource has had no complete state for 10 minutes: the replica is not ready and its reads are forwarded upstream."
            }
          }]},
          {"eval_time": "20m", "alertname": "KacheRelisting", "exp_alerts": [{
            "exp_labels": {"severity": "warning", "job": "kache", "instance": "a:9090", "group": "apps", "resource": "deployments"},
            "exp_annotations": {
              "summary": "kache a:9090 keeps relisting deployments",
              "description": "More than 3 full relists in 15 minutes: watches fall out of the upstream's history window (410 Gone)."
            }
          }]}
        ]
      }]
    }"#;
    let test_file = dir.path().join("rules_test.yml");
    std::fs::write(&test_file, test).expect("write rule tests");
    let out = Command::new(&promtool).args(["test", "rules"]).arg(&test_file).output().expect("run promtool");
    assert!(
        out.status.success(),
        "promtool test rules: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
