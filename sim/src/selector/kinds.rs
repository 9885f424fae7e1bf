//! Per-kind field selectors: which fields a kind accepts (the field-label conversion functions registered in
//! k/k `pkg/apis/core/v1/conversion.go`, `runtime.DefaultMetaV1FieldSelectorConversion`, and the CRD
//! converter) and the field set computed for an object (each registry's `ToSelectableFields`).

use std::collections::BTreeMap;

use serde_json::Value;

use super::fields::{FieldSelector, LEGACY_POD_HOST_FIELD, POD_NODE_NAME_FIELD};

const NAME: &str = "metadata.name";
const NAMESPACE: &str = "metadata.namespace";

/// `AddFieldLabelConversionsForPod` (+ `spec.host`, handled separately).
const POD_FIELDS: &[&str] = &[
    NAME,
    NAMESPACE,
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.podIPs",
    "status.nominatedNodeName",
];
const NODE_FIELDS: &[&str] = &[NAME, "spec.unschedulable"];
const REPLICATION_CONTROLLER_FIELDS: &[&str] = &[NAME, NAMESPACE, "status.replicas"];
const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
    NAMESPACE,
    NAME,
];
const NAMESPACE_FIELDS: &[&str] = &["status.phase", NAME];
const SECRET_FIELDS: &[&str] = &["type", NAMESPACE, NAME];
const SERVICE_FIELDS: &[&str] = &[NAMESPACE, NAME, "spec.clusterIP", "spec.type"];

// === impl Conversion ===

/// How a kind's field labels are converted (and therefore validated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Conversion {
    /// A core/v1 kind with its own conversion function: anything else is `field label not supported: <f>`.
    Custom(&'static [&'static str]),
    /// `DefaultMetaV1FieldSelectorConversion`: only `metadata.name` and `metadata.namespace`.
    DefaultMeta,
    /// The CRD converter: `metadata.name`, `metadata.namespace` when namespaced, else "not supported".
    CustomResource { namespaced: bool },
}

/// True for API groups served by kube-apiserver itself: the legacy core group, the unsuffixed groups
/// (`apps`, `batch`, `policy`, ...) and `*.k8s.io`. Every other group (it contains a dot) is a CRD's.
fn is_builtin_group(group: &str) -> bool {
    !group.contains('.') || group.ends_with(".k8s.io")
}

fn conversion_for(group: &str, kind: &str, namespaced: bool) -> Conversion {
    if !is_builtin_group(group) {
        return Conversion::CustomResource { namespaced };
    }
    if !group.is_empty() {
        return Conversion::DefaultMeta;
    }
    match kind {
        "Pod" => Conversion::Custom(POD_FIELDS),
        "Node" => Conversion::Custom(NODE_FIELDS),
        "ReplicationController" => Conversion::Custom(REPLICATION_CONTROLLER_FIELDS),
        "Event" => Conversion::Custom(EVENT_FIELDS),
        "Namespace" => Conversion::Custom(NAMESPACE_FIELDS),
        "Secret" => Conversion::Custom(SECRET_FIELDS),
        "Service" => Conversion::Custom(SERVICE_FIELDS),
        _ => Conversion::DefaultMeta,
    }
}

impl Conversion {
    /// Converts one field label, as `Scheme.ConvertFieldLabel` does.
    fn convert(self, kind: &str, field: &str) -> Result<String, String> {
        match self {
            Conversion::Custom(allowed) => {
                if allowed.contains(&field) {
                    Ok(field.to_string())
                } else if kind == "Pod" && field == LEGACY_POD_HOST_FIELD {
                    Ok(POD_NODE_NAME_FIELD.to_string())
                } else {
                    Err(format!("field label not supported: {field}"))
                }
            }
            Conversion::DefaultMeta => match field {
                NAME | NAMESPACE => Ok(field.to_string()),
                _ => Err(format!(
                    "{} is not a known field selector: only \"{NAME}\", \"{NAMESPACE}\"",
                    super::validation::go_quote(field)
                )),
            },
            Conversion::CustomResource { namespaced } => match field {
                NAME => Ok(field.to_string()),
                NAMESPACE if namespaced => Ok(field.to_string()),
                _ => Err(format!("field label not supported: {field}")),
            },
        }
    }
}

fn convert_with(conversion: Conversion, kind: &str, sel: &FieldSelector) -> Result<FieldSelector, String> {
    // Terms are converted in their sorted order and the first failure is reported (`andTerm.Transform`).
    let mut terms = Vec::with_capacity(sel.terms().len());
    for (field, eq, value) in sel.terms() {
        terms.push((conversion.convert(kind, field)?, *eq, value.clone()));
    }
    Ok(FieldSelector::from_terms(terms))
}

/// Validates every field of the selector for a kind; `Err` is the apiserver's 400 message, e.g.
/// `field label not supported: spec.foo` or
/// `"spec.foo" is not a known field selector: only "metadata.name", "metadata.namespace"`.
///
/// Groups that are not built in are treated as namespaced custom resources; use
/// [`convert_custom_fields`] to honour a cluster-scoped CRD.
pub fn validate_fields(group: &str, kind: &str, sel: &FieldSelector) -> Result<(), String> {
    convert_fields(group, kind, sel).map(|_| ())
}

/// Like [`validate_fields`], returning the converted selector (the legacy pod `spec.host` becomes
/// `spec.nodeName`), which is the one the apiserver filters with.
pub fn convert_fields(group: &str, kind: &str, sel: &FieldSelector) -> Result<FieldSelector, String> {
    convert_with(conversion_for(group, kind, true), kind, sel)
}

/// The CRD converter's rules for a custom resource of the given scope: `metadata.name` always,
/// `metadata.namespace` only when namespaced, anything else `field label not supported: <f>`.
pub fn convert_custom_fields(namespaced: bool, sel: &FieldSelector) -> Result<FieldSelector, String> {
    convert_with(Conversion::CustomResource { namespaced }, "", sel)
}

// === field sets ===

fn str_at<'a>(obj: &'a Value, path: &[&str]) -> &'a str {
    path.iter().try_fold(obj, |v, key| v.get(key)).and_then(Value::as_str).unwrap_or("")
}

fn bool_at(obj: &Value, path: &[&str]) -> bool {
    path.iter().try_fold(obj, |v, key| v.get(key)).and_then(Value::as_bool).unwrap_or(false)
}

fn int_at(obj: &Value, path: &[&str]) -> i64 {
    path.iter().try_fold(obj, |v, key| v.get(key)).and_then(Value::as_i64).unwrap_or(0)
}

/// The pod's primary IP as the internal object has it after v1 conversion: `status.podIP` when set (it is
/// authoritative when it disagrees with `podIPs`), otherwise the first `status.podIPs` entry.
fn pod_primary_ip(pod: &Value) -> &str {
    let pod_ip = str_at(pod, &["status", "podIP"]);
    if !pod_ip.is_empty() {
        return pod_ip;
    }
    pod.pointer("/status/podIPs/0/ip").and_then(Value::as_str).unwrap_or("")
}

/// The field set of an object: `metadata.name`, `metadata.namespace` when namespaced, and the kind's own
/// selectable fields, with values formatted as the apiserver formats them (booleans as `true`/`false`,
/// integers in decimal, missing strings as `""`).
pub fn field_set(group: &str, kind: &str, namespaced: bool, obj: &Value) -> BTreeMap<String, String> {
    let mut set = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        set.insert(k.to_string(), v);
    };
    put(NAME, str_at(obj, &["metadata", "name"]).to_string());
    if namespaced {
        put(NAMESPACE, str_at(obj, &["metadata", "namespace"]).to_string());
    }
    let s = |path: &[&str]| str_at(obj, path).to_string();
    match (group, kind) {
        ("", "Pod") => {
            put("spec.nodeName", s(&["spec", "nodeName"]));
            put("spec.restartPolicy", s(&["spec", "restartPolicy"]));
            put("spec.schedulerName", s(&["spec", "schedulerName"]));
            put("spec.serviceAccountName", s(&["spec", "serviceAccountName"]));
            put("spec.hostNetwork", bool_at(obj, &["spec", "hostNetwork"]).to_string());
            put("status.phase", s(&["status", "phase"]));
            put("status.podIP", pod_primary_ip(obj).to_string());
            put("status.nominatedNodeName", s(&["status", "nominatedNodeName"]));
        }
        ("", "Node") => put("spec.unschedulable", bool_at(obj, &["spec", "unschedulable"]).to_string()),
        ("", "Namespace") => {
            put("status.phase", s(&["status", "phase"]));
            // NamespaceToSelectableFields keeps a bare "name" for backward compatibility.
            put("name", s(&["metadata", "name"]));
        }
        ("", "Secret") => put("type", s(&["type"])),
        ("", "Service") => {
            put("spec.clusterIP", s(&["spec", "clusterIP"]));
            put("spec.type", s(&["spec", "type"]));
        }
        ("", "ReplicationController") | ("apps", "ReplicaSet") => {
            put("status.replicas", int_at(obj, &["status", "replicas"]).to_string());
        }
        ("", "Event") => {
            for f in ["kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath"] {
                put(&format!("involvedObject.{f}"), s(&["involvedObject", f]));
            }
            put("reason", s(&["reason"]));
            let reporting = s(&["reportingComponent"]);
            let component = s(&["source", "component"]);
            put("source", if component.is_empty() { reporting.clone() } else { component });
            put("reportingComponent", reporting);
            put("type", s(&["type"]));
        }
        _ => {}
    }
    set
}
