//! Where the kube-apiserver keeps each resource in etcd: `<etcd prefix>/<resource prefix>/` followed by the
//! object's key (`namespace/name`, or `name` for a cluster-scoped object), exactly kache's store key.
//!
//! The resource prefixes are the apiserver's (1.36): its storage factory
//! (`pkg/kubeapiserver/default_storage_factory_builder.go`, `DefaultStorageFactory.ResourcePrefix`) stores a
//! built-in resource under its lower-case plural alone, whatever its group (cohabiting resources share the
//! first group's storage: `events.k8s.io` events are the core group's), but for a few historical names
//! (`SpecialDefaultResourcePrefixes`). The apiextensions and aggregator servers inside the kube-apiserver use
//! the generic `SimpleRestOptionsFactory` (`<group>/<resource>`), and custom resources are stored under
//! `<group>/<plural>` (the CRD REST options getter). A resource served by an aggregated apiserver lives in that
//! server's own storage, often another etcd with other revisions: its prefix is not guessed — the operator
//! names it (`--etcd-resource-prefix`) or the oracle stays off for it. A guessed prefix is never trusted
//! before it is verified against the store ([`super::watch`]).

use crate::resource::Gvr;

/// How a resource's prefix was found, which decides how much verification it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// Given by the operator (`--etcd-resource-prefix`).
    Configured,
    /// A built-in resource of the kube-apiserver, from its storage factory's rules.
    BuiltIn,
    /// Assumed to be a custom resource (`<group>/<plural>`): an aggregated apiserver's resource would be
    /// elsewhere, so it is trusted only once the store's objects were found under it.
    Custom,
}

/// The groups the kube-apiserver itself stores with its storage factory (1.36): their resources live under
/// their plural alone.
const BUILT_IN_GROUPS: &[&str] = &[
    "",
    "admissionregistration.k8s.io",
    "apps",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "flowcontrol.apiserver.k8s.io",
    "internal.apiserver.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
    "storagemigration.k8s.io",
];

/// The groups served by the kube-apiserver's own apiextensions and aggregator servers, stored as
/// `<group>/<resource>` (their generic REST options).
const GROUP_QUALIFIED: &[&str] = &["apiextensions.k8s.io", "apiregistration.k8s.io"];

/// Built-in resources stored under another name (`SpecialDefaultResourcePrefixes`).
const SPECIAL: &[(&str, &str, &str)] = &[
    ("", "replicationcontrollers", "controllers"),
    ("", "endpoints", "services/endpoints"),
    ("", "nodes", "minions"),
    ("", "services", "services/specs"),
    ("networking.k8s.io", "ingresses", "ingress"),
];

/// The etcd key layout: the apiserver's `--etcd-prefix` and the operator's per-resource overrides.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    root: String,
    /// `(resource, group)` → full key prefix, ending in `/`.
    overrides: Vec<((String, String), String)>,
}

impl Layout {
    /// `root`: the apiserver's `--etcd-prefix` (`/registry`); `overrides`: `RESOURCE.GROUP=/prefix` (a core
    /// resource without the dot: `pods=/registry/pods`).
    pub(crate) fn new(root: &str, overrides: &[String]) -> Result<Self, String> {
        let root = format!("/{}", root.trim_matches('/'));
        let mut parsed = Vec::new();
        for o in overrides {
            let (name, prefix) = o
                .split_once('=')
                .ok_or_else(|| format!("--etcd-resource-prefix {o:?}: want RESOURCE.GROUP=/PREFIX"))?;
            let (resource, group) = name.split_once('.').unwrap_or((name, ""));
            if resource.is_empty() || !prefix.starts_with('/') || prefix.trim_matches('/').is_empty() {
                return Err(format!("--etcd-resource-prefix {o:?}: want RESOURCE.GROUP=/PREFIX"));
            }
            parsed.push(((resource.to_owned(), group.to_owned()), slash(prefix)));
        }
        Ok(Self { root, overrides: parsed })
    }

    /// The key prefix of `gvr`'s objects (ending in `/`) and how it was found; `None` when it is unknown (a
    /// group neither built in nor plausibly custom: never, as any other group may be a custom resource's;
    /// kept for an empty resource name).
    pub(crate) fn prefix(&self, gvr: &Gvr) -> Option<(String, Origin)> {
        if gvr.resource.is_empty() {
            return None;
        }
        let id = (gvr.resource.clone(), gvr.group.clone());
        if let Some((_, p)) = self.overrides.iter().find(|(k, _)| *k == id) {
            return Some((p.clone(), Origin::Configured));
        }
        let group = gvr.group.as_str();
        let resource = gvr.resource.to_ascii_lowercase();
        if BUILT_IN_GROUPS.contains(&group) {
            let special = SPECIAL.iter().find(|(g, r, _)| *g == group && *r == resource);
            let name = special.map_or(resource.as_str(), |(_, _, p)| *p);
            return Some((slash(&format!("{}/{name}", self.root)), Origin::BuiltIn));
        }
        let origin = if GROUP_QUALIFIED.contains(&group) { Origin::BuiltIn } else { Origin::Custom };
        Some((slash(&format!("{}/{group}/{resource}", self.root)), origin))
    }
}

/// `p` ending in exactly one `/`.
fn slash(p: &str) -> String {
    format!("{}/", p.trim_end_matches('/'))
}

/// The store key (`namespace/name` or `name`) of an etcd key under `prefix`, if the key has the layout of
/// the resource's objects; `None` for anything else (another resource's keys under a wrong prefix, such as
/// `services/endpoints/…` under `services/`).
pub(crate) fn object_key<'a>(prefix: &str, key: &'a [u8], namespaced: bool) -> Option<&'a str> {
    let rest = std::str::from_utf8(key.strip_prefix(prefix.as_bytes())?).ok()?;
    let mut parts = rest.split('/');
    let ok = match (parts.next(), parts.next(), parts.next()) {
        (Some(name), None, None) => !namespaced && !name.is_empty(),
        (Some(ns), Some(name), None) => namespaced && !ns.is_empty() && !name.is_empty(),
        _ => false,
    };
    ok.then_some(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gvr(group: &str, resource: &str) -> Gvr {
        Gvr { group: group.into(), version: "v1".into(), resource: resource.into() }
    }

    fn prefix(layout: &Layout, group: &str, resource: &str) -> (String, Origin) {
        layout.prefix(&gvr(group, resource)).expect("known")
    }

    #[test]
    fn built_in_resources_live_under_their_plural_whatever_their_group() {
        let l = Layout::new("/registry", &[]).expect("layout");
        let built_in =
            |g, r, p: &str| assert_eq!(prefix(&l, g, r), (p.to_owned(), Origin::BuiltIn), "{g}/{r}");
        built_in("", "pods", "/registry/pods/");
        built_in("", "configmaps", "/registry/configmaps/");
        built_in("apps", "deployments", "/registry/deployments/");
        built_in("coordination.k8s.io", "leases", "/registry/leases/");
        built_in("discovery.k8s.io", "endpointslices", "/registry/endpointslices/");
        built_in("rbac.authorization.k8s.io", "clusterroles", "/registry/clusterroles/");
        // Cohabiting: events.k8s.io events are stored as the core group's.
        built_in("", "events", "/registry/events/");
        built_in("events.k8s.io", "events", "/registry/events/");
        // SpecialDefaultResourcePrefixes.
        built_in("", "services", "/registry/services/specs/");
        built_in("", "endpoints", "/registry/services/endpoints/");
        built_in("", "nodes", "/registry/minions/");
        built_in("", "replicationcontrollers", "/registry/controllers/");
        built_in("networking.k8s.io", "ingresses", "/registry/ingress/");
        // The apiextensions and aggregator servers qualify by group.
        built_in(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "/registry/apiextensions.k8s.io/customresourcedefinitions/",
        );
        built_in("apiregistration.k8s.io", "apiservices", "/registry/apiregistration.k8s.io/apiservices/");
    }

    #[test]
    fn other_groups_are_custom_resources_and_overrides_win() {
        let overrides = [
            "flunders.wardle.example.com=/registry/wardle.example.com/flunders".to_owned(),
            "pods=/other/pods/".to_owned(),
        ];
        let l = Layout::new("registry/", &overrides).expect("layout");
        assert_eq!(
            prefix(&l, "stable.example.com", "crontabs"),
            ("/registry/stable.example.com/crontabs/".into(), Origin::Custom)
        );
        assert_eq!(
            prefix(&l, "wardle.example.com", "flunders"),
            ("/registry/wardle.example.com/flunders/".into(), Origin::Configured)
        );
        assert_eq!(prefix(&l, "", "pods"), ("/other/pods/".into(), Origin::Configured));
        let l = Layout::new("/custom-root", &[]).expect("layout");
        assert_eq!(prefix(&l, "", "pods").0, "/custom-root/pods/");
        for bad in ["pods", "pods=relative", "=/registry/x", "pods=/"] {
            assert!(Layout::new("/registry", &[bad.to_owned()]).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_keys_of_the_resources_layout_are_objects() {
        let p = "/registry/services/";
        assert_eq!(object_key("/registry/pods/", b"/registry/pods/ns/a", true), Some("ns/a"));
        assert_eq!(object_key("/registry/minions/", b"/registry/minions/node-1", false), Some("node-1"));
        // A wrong prefix for services shows the endpoints' keys: not objects of the resource.
        assert_eq!(object_key(p, b"/registry/services/endpoints/ns/a", true), None);
        assert_eq!(object_key("/registry/pods/", b"/registry/pods/a", true), None);
        assert_eq!(object_key("/registry/minions/", b"/registry/minions/ns/a", false), None);
        assert_eq!(object_key("/registry/pods/", b"/registry/pods//a", true), None);
        assert_eq!(object_key("/registry/pods/", b"/registry/podsx/ns/a", true), None);
        assert_eq!(object_key("/registry/pods/", b"/registry/pods/ns/\xff", true), None);
    }
}
