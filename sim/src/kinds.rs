//! The resources the sim serves: a table of built-in kinds plus custom resources declared at start.
//!
//! Each entry carries what the apiserver's typed registry would know: scope, whether it has a status
//! subresource and a generation, what DELETE answers, the field order of the Go struct and the JSON of an
//! empty object of the kind (bookmark objects are `newFunc()` instances serialised as-is).

use serde_json::{Map, Value, json};

use crate::status::Details;

/// A custom resource declared at start (served as a CRD-backed, unstructured resource).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crd {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
    /// The version's `additionalPrinterColumns` (Table output); empty = the CRD default (Age).
    pub printer_columns: Vec<crate::table::PrinterColumn>,
}

impl Crd {
    /// Declares the version's `additionalPrinterColumns`.
    pub fn with_columns(mut self, cols: Vec<crate::table::PrinterColumn>) -> Crd {
        self.printer_columns = cols;
        self
    }

    /// Parses the CLI form `group/version/Kind/plural/Namespaced|Cluster`.
    pub fn parse(s: &str) -> Result<Crd, String> {
        let parts: Vec<&str> = s.split('/').collect();
        let [group, version, kind, plural, scope] = parts.as_slice() else {
            return Err(format!("expected group/version/Kind/plural/scope, got {s:?}"));
        };
        let namespaced = match scope.to_ascii_lowercase().as_str() {
            "namespaced" => true,
            "cluster" => false,
            other => return Err(format!("scope must be Namespaced or Cluster, got {other:?}")),
        };
        if group.is_empty() || version.is_empty() || kind.is_empty() || plural.is_empty() {
            return Err(format!("empty component in {s:?}"));
        }
        Ok(Crd {
            group: group.to_string(),
            version: version.to_string(),
            kind: kind.to_string(),
            plural: plural.to_string(),
            namespaced,
            printer_columns: Vec::new(),
        })
    }
}

/// Everything the sim knows about one resource.
#[derive(Debug, Clone)]
pub struct ResourceDef {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
    /// Built-in (typed) resources: list items carry no kind/apiVersion and keys follow struct order.
    /// Custom resources are unstructured: keys are sorted and list items keep their TypeMeta.
    pub builtin: bool,
    pub short_names: Vec<String>,
    pub has_status: bool,
    /// Whether writes keep `metadata.generation` (bumped when the spec changes).
    pub has_generation: bool,
    /// DELETE answers the deleted object (pods) instead of a Status "Success".
    pub delete_returns_object: bool,
    /// Top-level fields in Go struct order, after kind/apiVersion/metadata.
    pub field_order: Vec<&'static str>,
    /// Top-level fields of an empty object (besides kind/apiVersion/metadata), for bookmarks.
    pub empty_fields: Map<String, Value>,
    /// Custom resources' printer columns (Table output).
    pub printer_columns: Vec<crate::table::PrinterColumn>,
}

/// Metadata fields in `metav1.ObjectMeta` order.
pub const META_ORDER: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Parses a literal of the built-in table (checked by `every_builtin_empty_object_parses`).
fn fields(json: &str) -> Map<String, Value> {
    serde_json::from_str::<Value>(json).ok().and_then(|v| v.as_object().cloned()).unwrap_or_default()
}

struct Builtin {
    group: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    has_status: bool,
    has_generation: bool,
    delete_returns_object: bool,
    order: &'static [&'static str],
    empty: &'static str,
}

/// The built-in resources. Empty objects are what Go's typed structs serialise to (omitempty rules).
const BUILTINS: &[Builtin] = &[
    Builtin {
        group: "",
        kind: "Namespace",
        plural: "namespaces",
        namespaced: false,
        short: &["ns"],
        has_status: true,
        has_generation: false,
        delete_returns_object: false,
        order: &["spec", "status"],
        empty: r#"{"spec":{},"status":{}}"#,
    },
    Builtin {
        group: "",
        kind: "Pod",
        plural: "pods",
        namespaced: true,
        short: &["po"],
        has_status: true,
        has_generation: true,
        delete_returns_object: true,
        order: &["spec", "status"],
        empty: r#"{"spec":{"containers":null},"status":{}}"#,
    },
    Builtin {
        group: "",
        kind: "ConfigMap",
        plural: "configmaps",
        namespaced: true,
        short: &["cm"],
        has_status: false,
        has_generation: false,
        delete_returns_object: false,
        order: &["immutable", "data", "binaryData"],
        empty: "{}",
    },
    Builtin {
        group: "",
        kind: "Secret",
        plural: "secrets",
        namespaced: true,
        short: &[],
        has_status: false,
        has_generation: false,
        delete_returns_object: false,
        order: &["immutable", "data", "stringData", "type"],
        empty: "{}",
    },
    Builtin {
        group: "",
        kind: "Service",
        plural: "services",
        namespaced: true,
        short: &["svc"],
        has_status: true,
        has_generation: false,
        delete_returns_object: false,
        order: &["spec", "status"],
        empty: r#"{"spec":{},"status":{"loadBalancer":{}}}"#,
    },
    Builtin {
        group: "",
        kind: "Endpoints",
        plural: "endpoints",
        namespaced: true,
        short: &["ep"],
        has_status: false,
        has_generation: false,
        delete_returns_object: false,
        order: &["subsets"],
        empty: "{}",
    },
    Builtin {
        group: "",
        kind: "Node",
        plural: "nodes",
        namespaced: false,
        short: &["no"],
        has_status: true,
        has_generation: false,
        delete_returns_object: false,
        order: &["spec", "status"],
        empty: r#"{"spec":{},"status":{"daemonEndpoints":{"kubeletEndpoint":{"Port":0}},"nodeInfo":{"machineID":"","systemUUID":"","bootID":"","kernelVersion":"","osImage":"","containerRuntimeVersion":"","kubeletVersion":"","kubeProxyVersion":"","operatingSystem":"","architecture":""}}}"#,
    },
    Builtin {
        group: "",
        kind: "Event",
        plural: "events",
        namespaced: true,
        short: &["ev"],
        has_status: false,
        has_generation: false,
        delete_returns_object: false,
        order: &[
            "involvedObject",
            "reason",
            "message",
            "source",
            "firstTimestamp",
            "lastTimestamp",
            "count",
            "type",
            "eventTime",
            "series",
            "action",
            "related",
            "reportingComponent",
            "reportingInstance",
        ],
        empty: r#"{"involvedObject":{},"source":{},"firstTimestamp":null,"lastTimestamp":null,"eventTime":null,"reportingComponent":"","reportingInstance":""}"#,
    },
    Builtin {
        group: "apps",
        kind: "Deployment",
        plural: "deployments",
        namespaced: true,
        short: &["deploy"],
        has_status: true,
        has_generation: true,
        delete_returns_object: false,
        order: &["spec", "status"],
        empty: r#"{"spec":{"selector":null,"template":{"metadata":{},"spec":{"containers":null}},"strategy":{}},"status":{}}"#,
    },
    Builtin {
        group: "apps",
        kind: "ReplicaSet",
        plural: "replicasets",
        namespaced: true,
        short: &["rs"],
        has_status: true,
        has_generation: true,
        delete_returns_object: false,
        order: &["spec", "status"],
        empty: r#"{"spec":{"selector":null,"template":{"metadata":{},"spec":{"containers":null}}},"status":{"replicas":0}}"#,
    },
    // Node heartbeats and leader election: what moves a real cluster's global revision most (one renewal per
    // node every 10 s); the background workload (`workload::foreign`) renews them.
    Builtin {
        group: "coordination.k8s.io",
        kind: "Lease",
        plural: "leases",
        namespaced: true,
        short: &[],
        has_status: false,
        has_generation: false,
        delete_returns_object: false,
        order: &["spec"],
        empty: r#"{"spec":{}}"#,
    },
];

/// Builds the resource table: all built-ins, then the given custom resources.
pub fn table(crds: &[Crd]) -> Vec<ResourceDef> {
    let mut out: Vec<ResourceDef> = BUILTINS
        .iter()
        .map(|b| ResourceDef {
            group: b.group.to_string(),
            version: "v1".to_string(),
            kind: b.kind.to_string(),
            plural: b.plural.to_string(),
            namespaced: b.namespaced,
            builtin: true,
            short_names: b.short.iter().map(|s| s.to_string()).collect(),
            has_status: b.has_status,
            has_generation: b.has_generation,
            delete_returns_object: b.delete_returns_object,
            field_order: b.order.to_vec(),
            empty_fields: fields(b.empty),
            printer_columns: Vec::new(),
        })
        .collect();
    for c in crds {
        out.push(ResourceDef {
            group: c.group.clone(),
            version: c.version.clone(),
            kind: c.kind.clone(),
            plural: c.plural.clone(),
            namespaced: c.namespaced,
            builtin: false,
            short_names: Vec::new(),
            has_status: true,
            has_generation: true,
            delete_returns_object: false,
            field_order: Vec::new(),
            empty_fields: Map::new(),
            printer_columns: c.printer_columns.clone(),
        });
    }
    out
}

// === impl ResourceDef ===

impl ResourceDef {
    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// `pods` or `deployments.apps`, as error messages name the resource.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() { self.plural.clone() } else { format!("{}.{}", self.plural, self.group) }
    }

    pub fn singular(&self) -> String {
        self.kind.to_ascii_lowercase()
    }

    /// `details` naming an object of this resource.
    pub fn details(&self, name: &str) -> Details {
        Details {
            name: name.to_string(),
            group: self.group.clone(),
            kind: self.plural.clone(),
            ..Details::default()
        }
    }

    /// The empty object of this kind carrying only the given metadata (bookmarks).
    pub fn empty_object(&self, metadata: Value) -> Value {
        let mut m = Map::new();
        m.insert("kind".into(), json!(self.kind));
        m.insert("apiVersion".into(), json!(self.api_version()));
        m.insert("metadata".into(), metadata);
        m.extend(self.empty_fields.clone());
        let mut v = Value::Object(m);
        if !self.builtin {
            crate::json::sort_keys(&mut v);
        }
        v
    }

    /// Puts an object's keys in the order the apiserver serialises them.
    pub fn normalize(&self, obj: &mut Value) {
        if !self.builtin {
            crate::json::sort_keys(obj);
            return;
        }
        let Value::Object(m) = obj else { return };
        if let Some(Value::Object(meta)) = m.get_mut("metadata") {
            crate::json::reorder(meta, META_ORDER);
        }
        let mut order = vec!["kind", "apiVersion", "metadata"];
        order.extend(self.field_order.iter().copied());
        crate::json::reorder(m, &order);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_empty_object_parses() {
        for b in BUILTINS {
            assert!(serde_json::from_str::<Value>(b.empty).is_ok_and(|v| v.is_object()), "{}", b.kind);
        }
    }

    #[test]
    fn pod_bookmark_shape() {
        let t = table(&[]);
        let pod = t.iter().find(|r| r.plural == "pods").expect("pods");
        let v = pod.empty_object(json!({"resourceVersion": "12"}));
        assert_eq!(
            crate::json::compact(&v),
            br#"{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"12"},"spec":{"containers":null},"status":{}}"#
                .to_vec()
        );
    }

    #[test]
    fn crd_parse_and_sorted_empty_object() {
        let c = Crd::parse("example.com/v1/Widget/widgets/Namespaced").expect("parse");
        assert!(c.namespaced);
        assert!(Crd::parse("a/b/c").is_err());
        assert!(Crd::parse("a/v1/K/ks/Weird").is_err());
        let t = table(&[c]);
        let w = t.last().expect("crd");
        let v = w.empty_object(json!({"resourceVersion": "3"}));
        assert_eq!(
            crate::json::compact(&v),
            br#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"resourceVersion":"3"}}"#.to_vec()
        );
    }
}
