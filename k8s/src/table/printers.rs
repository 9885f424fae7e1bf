//! kube-apiserver's printers (`pkg/printers/internalversion/printers.go`) for the built-in kinds kache
//! prints exactly, written once for kache and the sim. The apiserver generates Tables with `Wide: true`: every row carries every
//! column, and kubectl drops the priority-1 ones unless `-o wide`.

use std::sync::OnceLock;

use serde_json::Value;

use super::Column;

use super::age;
use super::docs as d;
use super::row::{Cell, Row};

/// A built-in kind with a printer reproduced here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Printer {
    Pods,
    Namespaces,
    Nodes,
    ConfigMaps,
    Secrets,
    Services,
    Endpoints,
    Events,
    Deployments,
    ReplicaSets,
    Leases,
}

/// (name, type, priority, description) of one column; `Name` columns carry `format: name`.
pub type ColumnDef = (&'static str, &'static str, u8, &'static str);

const NAME: ColumnDef = ("Name", "string", 0, d::NAME);
const AGE: ColumnDef = ("Age", "string", 0, d::CREATED);
const CONTAINERS: ColumnDef = ("Containers", "string", 1, "Names of each container in the template.");
const IMAGES: ColumnDef = ("Images", "string", 1, "Images referenced by each container in the template.");

impl Printer {
    /// Every printer.
    pub const BUILT_IN: [Printer; 11] = [
        Printer::Pods,
        Printer::Namespaces,
        Printer::Nodes,
        Printer::ConfigMaps,
        Printer::Secrets,
        Printer::Services,
        Printer::Endpoints,
        Printer::Events,
        Printer::Deployments,
        Printer::ReplicaSets,
        Printer::Leases,
    ];

    /// The resource it prints: (group, plural).
    pub fn resource(self) -> (&'static str, &'static str) {
        match self {
            Printer::Pods => ("", "pods"),
            Printer::Namespaces => ("", "namespaces"),
            Printer::Nodes => ("", "nodes"),
            Printer::ConfigMaps => ("", "configmaps"),
            Printer::Secrets => ("", "secrets"),
            Printer::Services => ("", "services"),
            Printer::Endpoints => ("", "endpoints"),
            Printer::Events => ("", "events"),
            Printer::Deployments => ("apps", "deployments"),
            Printer::ReplicaSets => ("apps", "replicasets"),
            Printer::Leases => ("coordination.k8s.io", "leases"),
        }
    }

    /// The printer of a built-in resource (core `""`, `apps`, `coordination.k8s.io`), if there is one here.
    pub fn for_resource(group: &str, resource: &str) -> Option<Printer> {
        Printer::BUILT_IN.into_iter().find(|p| p.resource() == (group, resource))
    }

    /// The encoded `columnDefinitions` (`Name` columns carry `format: name`), built once.
    pub fn columns_json(self) -> &'static [u8] {
        static ALL: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
        let all = ALL.get_or_init(|| Printer::BUILT_IN.into_iter().map(encode_columns).collect());
        let at = Printer::BUILT_IN.iter().position(|p| *p == self).unwrap_or_default();
        all.get(at).map_or(b"null", Vec::as_slice)
    }

    /// The columns: (name, type, priority, description).
    pub fn columns(self) -> Vec<ColumnDef> {
        match self {
            Printer::Pods => vec![
                NAME,
                ("Ready", "string", 0, "The aggregate readiness state of this pod for accepting traffic."),
                ("Status", "string", 0, "The aggregate status of the containers in this pod."),
                (
                    "Restarts",
                    "string",
                    0,
                    "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
                ),
                AGE,
                ("IP", "string", 1, d::POD_IP),
                ("Node", "string", 1, d::POD_NODE),
                ("Nominated Node", "string", 1, d::POD_NOMINATED),
                ("Readiness Gates", "string", 1, d::POD_GATES),
            ],
            Printer::Namespaces => vec![NAME, ("Status", "string", 0, "The status of the namespace"), AGE],
            Printer::Nodes => vec![
                NAME,
                ("Status", "string", 0, "The status of the node"),
                ("Roles", "string", 0, "The roles of the node"),
                AGE,
                ("Version", "string", 0, d::NODE_KUBELET),
                ("Internal-IP", "string", 1, d::NODE_ADDRESSES),
                ("External-IP", "string", 1, d::NODE_ADDRESSES),
                ("OS-Image", "string", 1, d::NODE_OS),
                ("Kernel-Version", "string", 1, d::NODE_KERNEL),
                ("Container-Runtime", "string", 1, d::NODE_RUNTIME),
            ],
            Printer::ConfigMaps => vec![NAME, ("Data", "string", 0, d::CM_DATA), AGE],
            Printer::Secrets => {
                vec![NAME, ("Type", "string", 0, d::SECRET_TYPE), ("Data", "string", 0, d::SECRET_DATA), AGE]
            }
            Printer::Services => vec![
                NAME,
                ("Type", "string", 0, d::SVC_TYPE),
                ("Cluster-IP", "string", 0, d::SVC_CLUSTER_IP),
                ("External-IP", "string", 0, d::SVC_EXTERNAL_IPS),
                ("Port(s)", "string", 0, d::SVC_PORTS),
                AGE,
                ("Selector", "string", 1, d::SVC_SELECTOR),
            ],
            Printer::Endpoints => vec![NAME, ("Endpoints", "string", 0, d::EP_SUBSETS), AGE],
            Printer::Events => vec![
                ("Last Seen", "string", 0, d::EV_LAST),
                ("Type", "string", 0, d::EV_TYPE),
                ("Reason", "string", 0, d::EV_REASON),
                ("Object", "string", 0, d::EV_OBJECT),
                ("Subobject", "string", 1, d::EV_FIELD_PATH),
                ("Source", "string", 1, d::EV_SOURCE),
                ("Message", "string", 0, d::EV_MESSAGE),
                ("First Seen", "string", 1, d::EV_FIRST),
                ("Count", "string", 1, d::EV_COUNT),
                ("Name", "string", 1, d::NAME),
            ],
            Printer::Deployments => vec![
                NAME,
                ("Ready", "string", 0, "Number of the pod with ready state"),
                ("Up-to-date", "string", 0, d::DEP_UPDATED),
                ("Available", "string", 0, d::DEP_AVAILABLE),
                AGE,
                CONTAINERS,
                IMAGES,
                ("Selector", "string", 1, d::DEP_SELECTOR),
            ],
            Printer::ReplicaSets => vec![
                NAME,
                ("Desired", "integer", 0, d::RS_DESIRED),
                ("Current", "integer", 0, d::RS_CURRENT),
                ("Ready", "integer", 0, d::RS_READY),
                AGE,
                CONTAINERS,
                IMAGES,
                ("Selector", "string", 1, d::RS_SELECTOR),
            ],
            Printer::Leases => vec![NAME, ("Holder", "string", 0, d::LEASE_HOLDER), AGE],
        }
    }

    /// The row of one object.
    pub fn row(self, o: &Value) -> Row {
        let name = Cell::str(text(o, "/metadata/name"));
        let created = Cell::Age(time(o, "/metadata/creationTimestamp"));
        let cells = match self {
            Printer::Pods => return pod(o),
            Printer::Namespaces => vec![name, Cell::str(text(o, "/status/phase")), created],
            Printer::Nodes => node(o, name, created),
            Printer::ConfigMaps => {
                vec![name, Cell::int(members(o, "/data") + members(o, "/binaryData")), created]
            }
            Printer::Secrets => {
                vec![name, Cell::str(text(o, "/type")), Cell::int(members(o, "/data")), created]
            }
            Printer::Services => service(o, name, created),
            Printer::Endpoints => vec![name, Cell::str(&endpoints(o)), created],
            Printer::Events => event(o),
            Printer::Deployments => {
                let (names, images) = template_containers(o);
                let ready = format!("{}/{}", int(o, "/status/readyReplicas"), int(o, "/spec/replicas"));
                vec![
                    name,
                    Cell::str(&ready),
                    Cell::int(int(o, "/status/updatedReplicas")),
                    Cell::int(int(o, "/status/availableReplicas")),
                    created,
                    Cell::str(&names),
                    Cell::str(&images),
                    Cell::str(&label_selector(o.pointer("/spec/selector"))),
                ]
            }
            Printer::ReplicaSets => {
                let (names, images) = template_containers(o);
                let selector = label_selector(o.pointer("/spec/selector"));
                vec![
                    name,
                    Cell::int(int(o, "/spec/replicas")),
                    Cell::int(int(o, "/status/replicas")),
                    Cell::int(int(o, "/status/readyReplicas")),
                    created,
                    Cell::str(&names),
                    Cell::str(&images),
                    // `metav1.FormatLabelSelector`: an empty selector prints as `<none>`.
                    Cell::str(if selector.is_empty() { "<none>" } else { &selector }),
                ]
            }
            Printer::Leases => vec![name, Cell::str(text(o, "/spec/holderIdentity")), created],
        };
        Row { cells: cells.into_boxed_slice(), conditions: None }
    }
}

/// `Name` columns carry `format: name`.
fn encode_columns(p: Printer) -> Vec<u8> {
    super::encode_columns(p.columns().into_iter().map(|(name, ty, priority, description)| Column {
        name,
        ty,
        format: if name == "Name" { "name" } else { "" },
        description,
        priority: i64::from(priority),
    }))
}

// --- field access ---

fn text<'a>(o: &'a Value, ptr: &str) -> &'a str {
    o.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}
fn int(o: &Value, ptr: &str) -> i64 {
    o.pointer(ptr).and_then(Value::as_i64).unwrap_or_default()
}
fn list<'a>(o: &'a Value, ptr: &str) -> &'a [Value] {
    o.pointer(ptr).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}
fn members(o: &Value, ptr: &str) -> i64 {
    o.pointer(ptr).and_then(Value::as_object).map_or(0, |m| m.len() as i64)
}
fn time(o: &Value, ptr: &str) -> Option<i64> {
    o.pointer(ptr).and_then(Value::as_str).and_then(age::parse)
}
/// A `metav1.Time` that is set (`!IsZero()`).
fn is_set(o: &Value, ptr: &str) -> bool {
    time(o, ptr).is_some_and(|t| t != age::GO_ZERO_MS)
}
fn none_if_empty(s: &str) -> &str {
    if s.is_empty() { "<none>" } else { s }
}

// --- printers ---

const POD_SUCCEEDED: &str = r#"[{"type":"Completed","status":"True","reason":"Succeeded","message":"The pod has completed successfully."}]"#;
const POD_FAILED: &str =
    r#"[{"type":"Completed","status":"True","reason":"Failed","message":"The pod failed."}]"#;

fn has_true_condition(o: &Value, ty: &str) -> bool {
    list(o, "/status/conditions")
        .iter()
        .find(|c| text(c, "/type") == ty)
        .is_some_and(|c| text(c, "/status") == "True")
}

/// `printPod`.
fn pod(o: &Value) -> Row {
    let phase = text(o, "/status/phase");
    let mut reason = match text(o, "/status/reason") {
        "" => phase.to_owned(),
        r => r.to_owned(),
    };
    if list(o, "/status/conditions")
        .iter()
        .any(|c| text(c, "/type") == "PodScheduled" && text(c, "/reason") == "SchedulingGated")
    {
        reason = "SchedulingGated".to_owned();
    }
    let init_specs = list(o, "/spec/initContainers");
    let is_sidecar = |name: &str| {
        init_specs.iter().any(|c| text(c, "/name") == name && text(c, "/restartPolicy") == "Always")
    };
    let sidecars = init_specs.iter().filter(|c| text(c, "/restartPolicy") == "Always").count() as i64;
    let total = list(o, "/spec/containers").len() as i64 + sidecars;
    let last_terminated = |c: &Value| c.pointer("/lastState/terminated").map(|t| time(t, "/finishedAt"));
    let latest = |a: Option<i64>, b: Option<i64>| match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    };

    let (mut ready, mut restarts, mut sidecar_restarts) = (0i64, 0i64, 0i64);
    let (mut last_restart, mut last_sidecar_restart) = (None, None);
    let mut initializing = false;
    let statuses = list(o, "/status/initContainerStatuses");
    for (i, c) in statuses.iter().enumerate() {
        restarts += int(c, "/restartCount");
        if let Some(t) = last_terminated(c) {
            last_restart = latest(last_restart, t);
        }
        let sidecar = is_sidecar(text(c, "/name"));
        if sidecar {
            sidecar_restarts += int(c, "/restartCount");
            if let Some(t) = last_terminated(c) {
                last_sidecar_restart = latest(last_sidecar_restart, t);
            }
        }
        let terminated = c.pointer("/state/terminated");
        if terminated.is_some_and(|t| int(t, "/exitCode") == 0) {
            continue;
        }
        if sidecar && c.pointer("/started").and_then(Value::as_bool) == Some(true) {
            ready += i64::from(c.pointer("/ready").and_then(Value::as_bool) == Some(true));
            continue;
        }
        let waiting = text(c, "/state/waiting/reason");
        reason = match terminated {
            Some(t) if !text(t, "/reason").is_empty() => format!("Init:{}", text(t, "/reason")),
            Some(t) if int(t, "/signal") != 0 => format!("Init:Signal:{}", int(t, "/signal")),
            Some(t) => format!("Init:ExitCode:{}", int(t, "/exitCode")),
            None if !waiting.is_empty() && waiting != "PodInitializing" => format!("Init:{waiting}"),
            None => format!("Init:{i}/{}", init_specs.len()),
        };
        initializing = true;
        break;
    }
    if !initializing || has_true_condition(o, "Initialized") {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let (mut running, mut failure) = (false, None);
        for c in list(o, "/status/containerStatuses").iter().rev() {
            restarts += int(c, "/restartCount");
            if let Some(t) = last_terminated(c) {
                last_restart = latest(last_restart, t);
            }
            let waiting = text(c, "/state/waiting/reason");
            if !waiting.is_empty() {
                reason = waiting.to_owned();
            } else if let Some(t) = c.pointer("/state/terminated") {
                reason = if !text(t, "/reason").is_empty() {
                    text(t, "/reason").to_owned()
                } else if int(t, "/signal") != 0 {
                    format!("Signal:{}", int(t, "/signal"))
                } else {
                    format!("ExitCode:{}", int(t, "/exitCode"))
                };
                if int(t, "/exitCode") != 0 {
                    failure = Some(reason.clone());
                }
            } else if c.pointer("/ready").and_then(Value::as_bool) == Some(true)
                && c.pointer("/state/running").is_some()
            {
                running = true;
                ready += 1;
            }
        }
        if reason == "Completed" {
            if running && has_true_condition(o, "Ready") {
                reason = "Running".to_owned();
            } else if let Some(f) = failure {
                reason = f;
            } else if running {
                reason = "NotReady".to_owned();
            }
        }
    }
    if is_set(o, "/metadata/deletionTimestamp") {
        if text(o, "/status/reason") == "NodeLost" {
            reason = "Unknown".to_owned();
        } else if phase != "Succeeded" && phase != "Failed" {
            reason = "Terminating".to_owned();
        }
    }
    let restarts_cell = match last_restart {
        Some(at) if restarts != 0 && at != age::GO_ZERO_MS => Cell::RestartsAgo { count: restarts, at },
        _ => Cell::str(&restarts.to_string()),
    };
    let gates = list(o, "/spec/readinessGates");
    let gates_cell = if gates.is_empty() {
        "<none>".to_owned()
    } else {
        let met = gates.iter().filter(|g| has_true_condition(o, text(g, "/conditionType"))).count();
        format!("{met}/{}", gates.len())
    };
    let ip = list(o, "/status/podIPs").first().map_or("", |p| text(p, "/ip"));
    let cells = vec![
        Cell::str(text(o, "/metadata/name")),
        Cell::str(&format!("{ready}/{total}")),
        Cell::str(&reason),
        restarts_cell,
        Cell::Age(time(o, "/metadata/creationTimestamp")),
        Cell::str(none_if_empty(ip)),
        Cell::str(none_if_empty(text(o, "/spec/nodeName"))),
        Cell::str(none_if_empty(text(o, "/status/nominatedNodeName"))),
        Cell::str(&gates_cell),
    ];
    let conditions = match phase {
        "Succeeded" => Some(POD_SUCCEEDED),
        "Failed" => Some(POD_FAILED),
        _ => None,
    };
    Row { cells: cells.into_boxed_slice(), conditions }
}

/// `printNode` (roles sorted, as `sets.String.List()`).
fn node(o: &Value, name: Cell, created: Cell) -> Vec<Cell> {
    let ready = list(o, "/status/conditions").iter().rfind(|c| text(c, "/type") == "Ready");
    let mut status = match ready {
        Some(c) if text(c, "/status") == "True" => "Ready".to_owned(),
        Some(_) => "NotReady".to_owned(),
        None => "Unknown".to_owned(),
    };
    if o.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push_str(",SchedulingDisabled");
    }
    let mut roles: Vec<&str> = o
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| match k.strip_prefix("node-role.kubernetes.io/") {
            Some(role) if !role.is_empty() => Some(role),
            Some(_) => None,
            None if k == "kubernetes.io/role" => v.as_str().filter(|r| !r.is_empty()),
            None => None,
        })
        .collect();
    roles.sort_unstable();
    roles.dedup();
    let address = |ty: &str| {
        list(o, "/status/addresses")
            .iter()
            .find(|a| text(a, "/type") == ty)
            .map_or("<none>", |a| text(a, "/address"))
    };
    let info = |field: &str| match text(o, &format!("/status/nodeInfo/{field}")) {
        "" => Cell::str("<unknown>"),
        v => Cell::str(v),
    };
    vec![
        name,
        Cell::str(&status),
        Cell::str(none_if_empty(&roles.join(","))),
        created,
        Cell::str(text(o, "/status/nodeInfo/kubeletVersion")),
        Cell::str(address("InternalIP")),
        Cell::str(address("ExternalIP")),
        info("osImage"),
        // The architecture follows the kernel version, also after `<unknown>`.
        match text(o, "/status/nodeInfo/architecture") {
            "" => info("kernelVersion"),
            arch => {
                let kernel = match text(o, "/status/nodeInfo/kernelVersion") {
                    "" => "<unknown>",
                    v => v,
                };
                Cell::str(&format!("{kernel} ({arch})"))
            }
        },
        info("containerRuntimeVersion"),
    ]
}

/// `printService`.
fn service(o: &Value, name: Cell, created: Cell) -> Vec<Cell> {
    let ty = text(o, "/spec/type");
    let external: Vec<&str> = list(o, "/spec/externalIPs").iter().filter_map(Value::as_str).collect();
    let external_ip = match ty {
        "ClusterIP" | "NodePort" => none_if_empty(&external.join(",")).to_owned(),
        "LoadBalancer" => {
            let mut ingress: Vec<&str> = list(o, "/status/loadBalancer/ingress")
                .iter()
                .map(|i| match text(i, "/ip") {
                    "" => text(i, "/hostname"),
                    ip => ip,
                })
                .filter(|s| !s.is_empty())
                .collect();
            ingress.sort_unstable();
            ingress.dedup();
            match (ingress.is_empty(), external.is_empty()) {
                (_, false) => ingress.iter().chain(external.iter()).copied().collect::<Vec<_>>().join(","),
                (false, true) => ingress.join(","),
                (true, true) => "<pending>".to_owned(),
            }
        }
        "ExternalName" => text(o, "/spec/externalName").to_owned(),
        _ => "<unknown>".to_owned(),
    };
    let ports: Vec<String> = list(o, "/spec/ports")
        .iter()
        .map(|p| match int(p, "/nodePort") {
            n if n > 0 => format!("{}:{n}/{}", int(p, "/port"), text(p, "/protocol")),
            _ => format!("{}/{}", int(p, "/port"), text(p, "/protocol")),
        })
        .collect();
    let mut selector: Vec<String> = o
        .pointer("/spec/selector")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    selector.sort_unstable();
    vec![
        name,
        Cell::str(ty),
        Cell::str(list(o, "/spec/clusterIPs").first().and_then(Value::as_str).unwrap_or("<none>")),
        Cell::str(&external_ip),
        Cell::str(none_if_empty(&ports.join(","))),
        created,
        Cell::str(none_if_empty(&selector.join(","))),
    ]
}

/// `formatEndpoints(ep, nil)`: at most three `ip:port`, then `+ N more...`.
fn endpoints(o: &Value) -> String {
    let subsets = list(o, "/subsets");
    if subsets.is_empty() {
        return "<none>".to_owned();
    }
    let mut shown = Vec::new();
    let mut total = 0usize;
    for subset in subsets {
        for port in list(subset, "/ports") {
            for addr in list(subset, "/addresses") {
                total += 1;
                if shown.len() < 3 && total <= 3 {
                    let ip = text(addr, "/ip");
                    let p = int(port, "/port");
                    shown.push(if ip.contains(':') { format!("[{ip}]:{p}") } else { format!("{ip}:{p}") });
                }
            }
        }
    }
    let joined = shown.join(",");
    if total > 3 { format!("{joined} + {} more...", total - 3) } else { joined }
}

/// `printEvent`.
fn event(o: &Value) -> Vec<Cell> {
    let first = if is_set(o, "/firstTimestamp") { time(o, "/firstTimestamp") } else { time(o, "/eventTime") };
    let mut last = if is_set(o, "/lastTimestamp") { time(o, "/lastTimestamp") } else { first };
    let mut count = int(o, "/count");
    match o.get("series").filter(|s| !s.is_null()) {
        Some(series) => {
            last = time(series, "/lastObservedTime");
            count = int(series, "/count");
        }
        None if count == 0 => count = 1,
        None => {}
    }
    let kind = text(o, "/involvedObject/kind").to_lowercase();
    let object = match text(o, "/involvedObject/name") {
        "" => kind,
        n => format!("{kind}/{n}"),
    };
    let pick = |a: &str, b: &str| if a.is_empty() { b.to_owned() } else { a.to_owned() };
    let component = pick(text(o, "/source/component"), text(o, "/reportingComponent"));
    let host = pick(text(o, "/source/host"), text(o, "/reportingInstance"));
    let source = if host.is_empty() { component } else { format!("{component}, {host}") };
    vec![
        Cell::Age(last),
        Cell::str(text(o, "/type")),
        Cell::str(text(o, "/reason")),
        Cell::str(&object),
        Cell::str(text(o, "/involvedObject/fieldPath")),
        Cell::str(&source),
        Cell::str(text(o, "/message").trim()),
        Cell::Age(first),
        Cell::int(count),
        Cell::str(text(o, "/metadata/name")),
    ]
}

/// `layoutContainerCells` of the pod template.
fn template_containers(o: &Value) -> (String, String) {
    let cs = list(o, "/spec/template/spec/containers");
    let join = |field: &str| cs.iter().map(|c| text(c, field)).collect::<Vec<_>>().join(",");
    (join("/name"), join("/image"))
}

/// `metav1.LabelSelectorAsSelector(s).String()`: requirements by key, `""` when empty or unset.
fn label_selector(s: Option<&Value>) -> String {
    let Some(s) = s.filter(|s| s.is_object()) else { return String::new() };
    let mut reqs: Vec<(&str, String)> = Vec::new();
    for (k, v) in s.get("matchLabels").and_then(Value::as_object).into_iter().flatten() {
        reqs.push((k, format!("{k}={}", v.as_str().unwrap_or_default())));
    }
    for e in list(s, "/matchExpressions") {
        let key = text(e, "/key");
        let mut values: Vec<&str> = list(e, "/values").iter().filter_map(Value::as_str).collect();
        values.sort_unstable();
        values.dedup();
        let req = match text(e, "/operator") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            _ => continue,
        };
        reqs.push((key, req));
    }
    reqs.sort_by(|a, b| a.0.cmp(b.0));
    reqs.into_iter().map(|(_, r)| r).collect::<Vec<_>>().join(",")
}
