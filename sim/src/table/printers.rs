//! The apiserver's printers (`pkg/printers/internalversion/printers.go`) for the built-in kinds the sim
//! serves: column definitions and the cells of one object. The apiserver prints with `Wide: true`, so
//! every row carries every column and kubectl hides the priority-1 ones unless `-o wide`.

use serde_json::{Value, json};

use super::Column;
use super::descriptions as d;
use super::time::{parse_rfc3339, since};

const fn col(name: &'static str, ty: &'static str, priority: i32, description: &'static str) -> Column {
    Column { name, ty, format: "", description, priority }
}
const NAME: Column = Column { name: "Name", ty: "string", format: "name", description: d::NAME, priority: 0 };
const AGE: Column = col("Age", "string", 0, d::CREATED);
const CONTAINERS: Column = col("Containers", "string", 1, "Names of each container in the template.");
const IMAGES: Column = col("Images", "string", 1, "Images referenced by each container in the template.");

/// The printer columns of a built-in resource, by plural; None for a kind without a printer.
pub fn columns(plural: &str) -> Option<Vec<Column>> {
    Some(match plural {
        "pods" => vec![
            NAME,
            col("Ready", "string", 0, "The aggregate readiness state of this pod for accepting traffic."),
            col("Status", "string", 0, "The aggregate status of the containers in this pod."),
            col(
                "Restarts",
                "string",
                0,
                "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
            ),
            AGE,
            col("IP", "string", 1, d::POD_IP),
            col("Node", "string", 1, d::POD_NODE),
            col("Nominated Node", "string", 1, d::POD_NOMINATED),
            col("Readiness Gates", "string", 1, d::POD_GATES),
        ],
        "namespaces" => vec![NAME, col("Status", "string", 0, "The status of the namespace"), AGE],
        "nodes" => vec![
            NAME,
            col("Status", "string", 0, "The status of the node"),
            col("Roles", "string", 0, "The roles of the node"),
            AGE,
            col("Version", "string", 0, d::NODE_KUBELET),
            col("Internal-IP", "string", 1, d::NODE_ADDRESSES),
            col("External-IP", "string", 1, d::NODE_ADDRESSES),
            col("OS-Image", "string", 1, d::NODE_OS),
            col("Kernel-Version", "string", 1, d::NODE_KERNEL),
            col("Container-Runtime", "string", 1, d::NODE_RUNTIME),
        ],
        "configmaps" => vec![NAME, col("Data", "string", 0, d::CM_DATA), AGE],
        "secrets" => vec![
            NAME,
            col("Type", "string", 0, d::SECRET_TYPE),
            col("Data", "string", 0, d::SECRET_DATA),
            AGE,
        ],
        "services" => vec![
            NAME,
            col("Type", "string", 0, d::SVC_TYPE),
            col("Cluster-IP", "string", 0, d::SVC_CLUSTER_IP),
            col("External-IP", "string", 0, d::SVC_EXTERNAL_IPS),
            col("Port(s)", "string", 0, d::SVC_PORTS),
            AGE,
            col("Selector", "string", 1, d::SVC_SELECTOR),
        ],
        "endpoints" => vec![NAME, col("Endpoints", "string", 0, d::EP_SUBSETS), AGE],
        "events" => vec![
            col("Last Seen", "string", 0, d::EV_LAST),
            col("Type", "string", 0, d::EV_TYPE),
            col("Reason", "string", 0, d::EV_REASON),
            col("Object", "string", 0, d::EV_OBJECT),
            col("Subobject", "string", 1, d::EV_FIELD_PATH),
            col("Source", "string", 1, d::EV_SOURCE),
            col("Message", "string", 0, d::EV_MESSAGE),
            col("First Seen", "string", 1, d::EV_FIRST),
            col("Count", "string", 1, d::EV_COUNT),
            Column { priority: 1, ..NAME },
        ],
        "deployments" => vec![
            NAME,
            col("Ready", "string", 0, "Number of the pod with ready state"),
            col("Up-to-date", "string", 0, d::DEP_UPDATED),
            col("Available", "string", 0, d::DEP_AVAILABLE),
            AGE,
            CONTAINERS,
            IMAGES,
            col("Selector", "string", 1, d::DEP_SELECTOR),
        ],
        "replicasets" => vec![
            NAME,
            col("Desired", "integer", 0, d::RS_DESIRED),
            col("Current", "integer", 0, d::RS_CURRENT),
            col("Ready", "integer", 0, d::RS_READY),
            AGE,
            CONTAINERS,
            IMAGES,
            col("Selector", "string", 1, d::RS_SELECTOR),
        ],
        "leases" => vec![NAME, col("Holder", "string", 0, d::LEASE_HOLDER), AGE],
        _ => return None,
    })
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}
fn i(v: &Value, ptr: &str) -> i64 {
    v.pointer(ptr).and_then(Value::as_i64).unwrap_or(0)
}
fn arr<'a>(v: &'a Value, ptr: &str) -> &'a [Value] {
    v.pointer(ptr).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}
fn len_of(v: &Value, ptr: &str) -> i64 {
    v.pointer(ptr).and_then(Value::as_object).map_or(0, |m| m.len() as i64)
}
fn age(v: &Value, now: i64) -> String {
    since(v.pointer("/metadata/creationTimestamp").and_then(Value::as_str), now)
}
fn or_none(x: &str) -> String {
    if x.is_empty() { "<none>".into() } else { x.into() }
}
/// Whether a timestamp field is set to a non-zero time (`!t.IsZero()`).
fn set(v: &Value, ptr: &str) -> bool {
    v.pointer(ptr)
        .and_then(Value::as_str)
        .and_then(parse_rfc3339)
        .is_some_and(|t| t != super::time::ZERO_TIME_MS)
}

/// The cells (and row conditions) of one object of a built-in kind with a printer.
pub fn cells(plural: &str, v: &Value, now: i64) -> (Vec<Value>, Option<Value>) {
    let name = s(v, "/metadata/name");
    let cells = match plural {
        "pods" => return pod(v, now),
        "namespaces" => vec![json!(name), json!(s(v, "/status/phase")), json!(age(v, now))],
        "nodes" => node(v, now),
        "configmaps" => {
            vec![json!(name), json!(len_of(v, "/data") + len_of(v, "/binaryData")), json!(age(v, now))]
        }
        "secrets" => vec![json!(name), json!(s(v, "/type")), json!(len_of(v, "/data")), json!(age(v, now))],
        "services" => service(v, now),
        "endpoints" => vec![json!(name), json!(endpoints(v)), json!(age(v, now))],
        "events" => event(v, now),
        "deployments" => {
            let (names, images) = containers(v);
            vec![
                json!(name),
                json!(format!("{}/{}", i(v, "/status/readyReplicas"), i(v, "/spec/replicas"))),
                json!(i(v, "/status/updatedReplicas")),
                json!(i(v, "/status/availableReplicas")),
                json!(age(v, now)),
                json!(names),
                json!(images),
                json!(selector(v.pointer("/spec/selector"))),
            ]
        }
        "replicasets" => {
            let (names, images) = containers(v);
            let sel = selector(v.pointer("/spec/selector"));
            vec![
                json!(name),
                json!(i(v, "/spec/replicas")),
                json!(i(v, "/status/replicas")),
                json!(i(v, "/status/readyReplicas")),
                json!(age(v, now)),
                json!(names),
                json!(images),
                json!(if sel.is_empty() { "<none>".to_string() } else { sel }),
            ]
        }
        "leases" => vec![json!(name), json!(s(v, "/spec/holderIdentity")), json!(age(v, now))],
        _ => Vec::new(),
    };
    (cells, None)
}

fn condition_true(v: &Value, ty: &str) -> bool {
    arr(v, "/status/conditions")
        .iter()
        .find(|c| s(c, "/type") == ty)
        .is_some_and(|c| s(c, "/status") == "True")
}

/// `printPod`: READY, STATUS (the aggregate reason), RESTARTS with the last restart's age.
fn pod(v: &Value, now: i64) -> (Vec<Value>, Option<Value>) {
    let phase = s(v, "/status/phase");
    let mut reason =
        if s(v, "/status/reason").is_empty() { phase.to_string() } else { s(v, "/status/reason").into() };
    for c in arr(v, "/status/conditions") {
        if s(c, "/type") == "PodScheduled" && s(c, "/reason") == "SchedulingGated" {
            reason = "SchedulingGated".into();
        }
    }
    let conditions = match phase {
        "Succeeded" => Some(
            json!([{"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."}]),
        ),
        "Failed" => Some(
            json!([{"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}]),
        ),
        _ => None,
    };
    let init_specs = arr(v, "/spec/initContainers");
    let restartable =
        |cname: &str| init_specs.iter().any(|c| s(c, "/name") == cname && s(c, "/restartPolicy") == "Always");
    let mut total = arr(v, "/spec/containers").len() as i64;
    total += init_specs.iter().filter(|c| s(c, "/restartPolicy") == "Always").count() as i64;
    let mut ready = 0;
    let mut restarts = 0i64;
    let mut sidecar_restarts = 0i64;
    let mut last_restart: Option<i64> = None;
    let mut last_sidecar_restart: Option<i64> = None;
    let finished = |c: &Value| c.pointer("/lastState/terminated").map(|t| parse_rfc3339(s(t, "/finishedAt")));
    let later = |cur: Option<i64>, t: Option<i64>| match (cur, t) {
        (Some(a), Some(b)) if b > a => Some(b),
        (None, Some(b)) => Some(b),
        (cur, _) => cur,
    };
    let mut initializing = false;
    for (idx, c) in arr(v, "/status/initContainerStatuses").iter().enumerate() {
        restarts += i(c, "/restartCount");
        if let Some(t) = finished(c) {
            last_restart = later(last_restart, t);
        }
        let sidecar = restartable(s(c, "/name"));
        if sidecar {
            sidecar_restarts += i(c, "/restartCount");
            if let Some(t) = finished(c) {
                last_sidecar_restart = later(last_sidecar_restart, t);
            }
        }
        let term = c.pointer("/state/terminated");
        if term.is_some_and(|t| i(t, "/exitCode") == 0) {
            continue;
        }
        if sidecar && c.get("started").and_then(Value::as_bool) == Some(true) {
            if c.get("ready").and_then(Value::as_bool) == Some(true) {
                ready += 1;
            }
            continue;
        }
        let waiting = s(c, "/state/waiting/reason");
        reason = if let Some(t) = term {
            match (s(t, "/reason"), i(t, "/signal")) {
                ("", 0) => format!("Init:ExitCode:{}", i(t, "/exitCode")),
                ("", sig) => format!("Init:Signal:{sig}"),
                (r, _) => format!("Init:{r}"),
            }
        } else if !waiting.is_empty() && waiting != "PodInitializing" {
            format!("Init:{waiting}")
        } else {
            format!("Init:{idx}/{}", init_specs.len())
        };
        initializing = true;
        break;
    }
    if !initializing || condition_true(v, "Initialized") {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut has_running = false;
        let mut error_reason = String::new();
        for c in arr(v, "/status/containerStatuses").iter().rev() {
            restarts += i(c, "/restartCount");
            if let Some(t) = finished(c) {
                last_restart = later(last_restart, t);
            }
            let waiting = s(c, "/state/waiting/reason");
            if !waiting.is_empty() {
                reason = waiting.into();
            } else if let Some(t) = c.pointer("/state/terminated") {
                reason = match (s(t, "/reason"), i(t, "/signal")) {
                    ("", 0) => format!("ExitCode:{}", i(t, "/exitCode")),
                    ("", sig) => format!("Signal:{sig}"),
                    (r, _) => r.into(),
                };
                if i(t, "/exitCode") != 0 {
                    error_reason = reason.clone();
                }
            } else if c.get("ready").and_then(Value::as_bool) == Some(true)
                && c.pointer("/state/running").is_some()
            {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" {
            if has_running && condition_true(v, "Ready") {
                reason = "Running".into();
            } else if !error_reason.is_empty() {
                reason = error_reason;
            } else if has_running {
                reason = "NotReady".into();
            }
        }
    }
    if set(v, "/metadata/deletionTimestamp") && s(v, "/status/reason") == "NodeLost" {
        reason = "Unknown".into();
    } else if set(v, "/metadata/deletionTimestamp") && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".into();
    }
    let restarts_cell = match last_restart {
        Some(t) if restarts != 0 && t != super::time::ZERO_TIME_MS => {
            format!("{restarts} ({} ago)", super::time::human_duration(now - t))
        }
        _ => restarts.to_string(),
    };
    let ip = arr(v, "/status/podIPs").first().map(|p| s(p, "/ip")).unwrap_or("");
    let gates = arr(v, "/spec/readinessGates");
    let gates_cell = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let conds = arr(v, "/status/conditions");
        let ok = gates
            .iter()
            .filter(|g| {
                conds
                    .iter()
                    .find(|c| s(c, "/type") == s(g, "/conditionType"))
                    .is_some_and(|c| s(c, "/status") == "True")
            })
            .count();
        format!("{ok}/{}", gates.len())
    };
    let cells = vec![
        json!(s(v, "/metadata/name")),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts_cell),
        json!(age(v, now)),
        json!(or_none(ip)),
        json!(or_none(s(v, "/spec/nodeName"))),
        json!(or_none(s(v, "/status/nominatedNodeName"))),
        json!(gates_cell),
    ];
    (cells, conditions)
}

fn node(v: &Value, now: i64) -> Vec<Value> {
    let mut status: Vec<String> = Vec::new();
    if let Some(c) = arr(v, "/status/conditions").iter().rev().find(|c| s(c, "/type") == "Ready") {
        status.push(if s(c, "/status") == "True" { "Ready".into() } else { "NotReady".into() });
    }
    if status.is_empty() {
        status.push("Unknown".into());
    }
    if v.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push("SchedulingDisabled".into());
    }
    let mut roles: Vec<String> = Vec::new();
    if let Some(labels) = v.pointer("/metadata/labels").and_then(Value::as_object) {
        for (k, val) in labels {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/").filter(|r| !r.is_empty()) {
                roles.push(role.into());
            } else if k == "kubernetes.io/role" && val.as_str().is_some_and(|r| !r.is_empty()) {
                roles.push(val.as_str().unwrap_or_default().into());
            }
        }
    }
    roles.sort();
    roles.dedup();
    let addr = |ty: &str| {
        arr(v, "/status/addresses")
            .iter()
            .find(|a| s(a, "/type") == ty)
            .map(|a| s(a, "/address"))
            .unwrap_or("<none>")
            .to_string()
    };
    let unknown = |x: &str| if x.is_empty() { "<unknown>".to_string() } else { x.to_string() };
    vec![
        json!(s(v, "/metadata/name")),
        json!(status.join(",")),
        json!(or_none(&roles.join(","))),
        json!(age(v, now)),
        json!(s(v, "/status/nodeInfo/kubeletVersion")),
        json!(addr("InternalIP")),
        json!(addr("ExternalIP")),
        json!(unknown(s(v, "/status/nodeInfo/osImage"))),
        // kubectl 1.36 shows the architecture after the kernel version.
        json!(match s(v, "/status/nodeInfo/architecture") {
            "" => unknown(s(v, "/status/nodeInfo/kernelVersion")),
            arch => format!("{} ({arch})", unknown(s(v, "/status/nodeInfo/kernelVersion"))),
        }),
        json!(unknown(s(v, "/status/nodeInfo/containerRuntimeVersion"))),
    ]
}

/// `labels.FormatLabels`: sorted `k=v` pairs, `<none>` when empty.
fn format_labels(m: Option<&Value>) -> String {
    let Some(m) = m.and_then(Value::as_object).filter(|m| !m.is_empty()) else { return "<none>".into() };
    let mut pairs: Vec<String> = m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect();
    pairs.sort();
    pairs.join(",")
}

fn service(v: &Value, now: i64) -> Vec<Value> {
    let ty = s(v, "/spec/type");
    let external_ips: Vec<&str> = arr(v, "/spec/externalIPs").iter().filter_map(Value::as_str).collect();
    let external = match ty {
        "ClusterIP" | "NodePort" => or_none(&external_ips.join(",")),
        "LoadBalancer" => {
            let mut lb: Vec<&str> = arr(v, "/status/loadBalancer/ingress")
                .iter()
                .map(|i| if s(i, "/ip").is_empty() { s(i, "/hostname") } else { s(i, "/ip") })
                .filter(|x| !x.is_empty())
                .collect();
            lb.sort();
            lb.dedup();
            let mut all: Vec<&str> = lb.clone();
            all.extend(external_ips.iter());
            if !external_ips.is_empty() {
                all.join(",")
            } else if !lb.is_empty() {
                lb.join(",")
            } else {
                "<pending>".into()
            }
        }
        "ExternalName" => s(v, "/spec/externalName").into(),
        _ => "<unknown>".into(),
    };
    let ports: Vec<String> = arr(v, "/spec/ports")
        .iter()
        .map(|p| {
            let (port, proto, node_port) = (i(p, "/port"), s(p, "/protocol"), i(p, "/nodePort"));
            if node_port > 0 { format!("{port}:{node_port}/{proto}") } else { format!("{port}/{proto}") }
        })
        .collect();
    let cluster_ip = arr(v, "/spec/clusterIPs").first().and_then(Value::as_str).unwrap_or("<none>");
    vec![
        json!(s(v, "/metadata/name")),
        json!(ty),
        json!(cluster_ip),
        json!(external),
        json!(or_none(&ports.join(","))),
        json!(age(v, now)),
        json!(format_labels(v.pointer("/spec/selector"))),
    ]
}

/// `formatEndpoints(endpoints, nil)`: the first three `ip:port`, then `+ N more...`.
fn endpoints(v: &Value) -> String {
    let subsets = arr(v, "/subsets");
    if subsets.is_empty() {
        return "<none>".into();
    }
    const MAX: usize = 3;
    let mut list: Vec<String> = Vec::new();
    let mut more = false;
    let mut count = 0;
    for ss in subsets {
        for p in arr(ss, "/ports") {
            for a in arr(ss, "/addresses") {
                if list.len() == MAX {
                    more = true;
                }
                if !more {
                    let ip = s(a, "/ip");
                    let host = if ip.contains(':') { format!("[{ip}]") } else { ip.to_string() };
                    list.push(format!("{host}:{}", i(p, "/port")));
                }
                count += 1;
            }
        }
    }
    let ret = list.join(",");
    if more { format!("{ret} + {} more...", count - MAX) } else { ret }
}

fn event(v: &Value, now: i64) -> Vec<Value> {
    let ts = |p: &str| v.pointer(p).and_then(Value::as_str);
    let mut first = since(ts("/firstTimestamp"), now);
    if !set(v, "/firstTimestamp") {
        first = since(ts("/eventTime"), now);
    }
    let mut last = since(ts("/lastTimestamp"), now);
    if !set(v, "/lastTimestamp") {
        last = first.clone();
    }
    let mut count = i(v, "/count");
    if let Some(series) = v.get("series").filter(|x| !x.is_null()) {
        last = since(series.get("lastObservedTime").and_then(Value::as_str), now);
        count = i(series, "/count");
    } else if count == 0 {
        count = 1;
    }
    let kind = s(v, "/involvedObject/kind").to_lowercase();
    let target = match s(v, "/involvedObject/name") {
        "" => kind,
        n => format!("{kind}/{n}"),
    };
    let first_non_empty = |a: &str, b: &str| if a.is_empty() { b.to_string() } else { a.to_string() };
    let component = first_non_empty(s(v, "/source/component"), s(v, "/reportingComponent"));
    let host = first_non_empty(s(v, "/source/host"), s(v, "/reportingInstance"));
    let source = if host.is_empty() { component } else { format!("{component}, {host}") };
    vec![
        json!(last),
        json!(s(v, "/type")),
        json!(s(v, "/reason")),
        json!(target),
        json!(s(v, "/involvedObject/fieldPath")),
        json!(source),
        json!(s(v, "/message").trim()),
        json!(first),
        json!(count),
        json!(s(v, "/metadata/name")),
    ]
}

/// `layoutContainerCells` of the pod template.
fn containers(v: &Value) -> (String, String) {
    let cs = arr(v, "/spec/template/spec/containers");
    let names: Vec<&str> = cs.iter().map(|c| s(c, "/name")).collect();
    let images: Vec<&str> = cs.iter().map(|c| s(c, "/image")).collect();
    (names.join(","), images.join(","))
}

/// `metav1.LabelSelectorAsSelector(sel).String()`: requirements sorted by key; "" for an empty or
/// missing selector, `<error>`-free inputs assumed (the apiserver validated them).
fn selector(sel: Option<&Value>) -> String {
    let Some(sel) = sel.filter(|s| s.is_object()) else { return String::new() };
    let mut reqs: Vec<(String, String)> = Vec::new();
    if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in m {
            reqs.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or(""))));
        }
    }
    for e in arr(sel, "/matchExpressions") {
        let key = s(e, "/key");
        let mut vals: Vec<&str> = arr(e, "/values").iter().filter_map(Value::as_str).collect();
        vals.sort();
        vals.dedup();
        let r = match s(e, "/operator") {
            "In" => format!("{key} in ({})", vals.join(",")),
            "NotIn" => format!("{key} notin ({})", vals.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => continue,
        };
        reqs.push((key.to_string(), r));
    }
    reqs.sort_by(|a, b| a.0.cmp(&b.0));
    reqs.into_iter().map(|(_, r)| r).collect::<Vec<_>>().join(",")
}
