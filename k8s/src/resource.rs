//! What a cached resource is: its group/version/resource and the facts discovery tells about it.

use std::fmt;

/// Group, version and resource (plural), e.g. `("", "v1", "pods")` or `("apps", "v1", "deployments")`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gvr {
    /// API group; empty for the core group.
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Plural resource name, e.g. `pods`.
    pub resource: String,
}

impl Gvr {
    pub fn new(group: &str, version: &str, resource: &str) -> Self {
        Self { group: group.to_owned(), version: version.to_owned(), resource: resource.to_owned() }
    }

    /// `v1` for the core group, `group/version` otherwise (the `apiVersion` of objects).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// The URL path prefix of the group version: `/api/v1` or `/apis/{group}/{version}`.
    pub fn path_prefix(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }
}

impl fmt::Display for Gvr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}/{}", self.version, self.resource)
        } else {
            write!(f, "{}/{}/{}", self.group, self.version, self.resource)
        }
    }
}

/// Everything kache knows about a cached resource, from discovery and from the first list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceInfo {
    pub gvr: Gvr,
    /// Kind of one object, e.g. `Pod`.
    pub kind: String,
    /// Kind of the list, e.g. `PodList`.
    pub list_kind: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Whether items inside a list response carry `kind`/`apiVersion`.
    ///
    /// The apiserver omits them for built-in (typed) resources and keeps them for custom resources
    /// (unstructured). The reflector learns this from the upstream's own list responses.
    pub list_items_have_type_meta: bool,
}

impl ResourceInfo {
    /// Core v1 pods, as discovery describes them (for unit tests).
    /// Fixture for tests and benches.
    pub fn pods() -> Self {
        Self {
            gvr: Gvr::new("", "v1", "pods"),
            kind: "Pod".into(),
            list_kind: "PodList".into(),
            namespaced: true,
            list_items_have_type_meta: false,
        }
    }

    /// The sample apiserver's v1beta1 flunders (for unit tests).
    /// Fixture for tests and benches.
    pub fn flunders() -> Self {
        Self {
            gvr: Gvr::new("wardle.example.com", "v1beta1", "flunders"),
            kind: "Flunder".into(),
            list_kind: "FlunderList".into(),
            namespaced: true,
            list_items_have_type_meta: true,
        }
    }

    /// The `apiVersion` of objects of this resource.
    pub fn api_version(&self) -> String {
        self.gvr.api_version()
    }

    /// The field-selector fields this kind supports, beyond `metadata.name` / `metadata.namespace`.
    pub fn field_kind(&self) -> FieldKind {
        FieldKind::of(&self.gvr.group, &self.kind)
    }
}

/// Which field-label conversion the apiserver applies to a kind, and so which field selectors it accepts
/// (kubernetes/kubernetes pkg/apis/core/v1/conversion.go: AddFieldLabelConversionsForPod and its siblings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldKind {
    Pod,
    Node,
    Namespace,
    Secret,
    Service,
    ReplicationController,
    Event,
    ReplicaSet,
    /// `DefaultMetaV1FieldSelectorConversion`: only `metadata.name` and `metadata.namespace`.
    Generic,
}

impl FieldKind {
    pub fn of(group: &str, kind: &str) -> Self {
        match (group, kind) {
            ("", "Pod") => Self::Pod,
            ("", "Node") => Self::Node,
            ("", "Namespace") => Self::Namespace,
            ("", "Secret") => Self::Secret,
            ("", "Service") => Self::Service,
            ("", "ReplicationController") => Self::ReplicationController,
            ("", "Event") => Self::Event,
            ("apps", "ReplicaSet") => Self::ReplicaSet,
            _ => Self::Generic,
        }
    }

    /// The extra fields (beyond metadata.name/namespace) extracted at ingest, as dotted JSON paths.
    pub fn extra_fields(self) -> &'static [&'static str] {
        match self {
            Self::Pod => &[
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            ],
            Self::Node => &["spec.unschedulable"],
            Self::Namespace => &["status.phase"],
            Self::Secret => &["type"],
            Self::Service => &["spec.clusterIP", "spec.type"],
            Self::ReplicationController | Self::ReplicaSet => &["status.replicas"],
            Self::Event => &[
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
            ],
            Self::Generic => &[],
        }
    }
}
