//! `--resources` / `--exclude` specs and the selection of cached resources.

use super::DiscoveredResource;
use crate::resource::{Gvr, ResourceInfo};

/// A resource named on the command line.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ResourceSpec {
    /// `pods`, `pod`, `po`: a plural, singular or short name in any group (the core group wins, then discovery
    /// order).
    Name(String),
    /// `deployments.apps`, `apps/deployments`: a resource of a group, in its preferred version.
    GroupResource { group: String, resource: String },
    /// `v1/pods`, `apps/v1/deployments`, `example.com/v1/widgets`.
    Exact(Gvr),
}

/// As a person wrote it: `pods`, `deployments.apps`, `apps/v1/deployments`.
impl std::fmt::Display for ResourceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Name(name) => f.write_str(name),
            Self::GroupResource { group, resource } => write!(f, "{resource}.{group}"),
            Self::Exact(gvr) if gvr.group.is_empty() => write!(f, "{}/{}", gvr.version, gvr.resource),
            Self::Exact(gvr) => write!(f, "{}/{}/{}", gvr.group, gvr.version, gvr.resource),
        }
    }
}

/// A spec that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid resource {spec:?}: {reason}")]
pub struct SpecError {
    pub spec: String,
    pub reason: &'static str,
}

/// Parses a comma-separated list of specs (whitespace around entries and empty entries are ignored).
pub fn parse_resource_specs(specs: &str) -> Result<Vec<ResourceSpec>, SpecError> {
    specs.split(',').map(str::trim).filter(|s| !s.is_empty()).map(parse_one).collect()
}

fn parse_one(spec: &str) -> Result<ResourceSpec, SpecError> {
    let err = |reason| SpecError { spec: spec.to_owned(), reason };
    let parts: Vec<&str> = spec.split('/').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(err("empty segment"));
    }
    let parsed = match parts.as_slice() {
        [name] => match name.split_once('.') {
            Some((resource, group)) => {
                ResourceSpec::GroupResource { group: group.to_owned(), resource: resource.to_owned() }
            }
            None => ResourceSpec::Name((*name).to_owned()),
        },
        [first, resource] if is_version(first) => ResourceSpec::Exact(Gvr::new("", first, resource)),
        [group, resource] => {
            ResourceSpec::GroupResource { group: (*group).to_owned(), resource: (*resource).to_owned() }
        }
        [group, version, resource] => {
            if !is_version(version) {
                return Err(err("expected group/version/resource with a version such as v1 or v1beta1"));
            }
            let group = if *group == "core" { "" } else { group };
            ResourceSpec::Exact(Gvr::new(group, version, resource))
        }
        _ => {
            return Err(err("expected resource, resource.group, version/resource or group/version/resource"));
        }
    };
    let (group, resource) = match &parsed {
        ResourceSpec::Name(r) => ("", r.as_str()),
        ResourceSpec::GroupResource { group, resource } => (group.as_str(), resource.as_str()),
        ResourceSpec::Exact(gvr) => (gvr.group.as_str(), gvr.resource.as_str()),
    };
    if !is_dns_label_ish(resource) {
        return Err(err("resource names are lowercase letters, digits and '-'"));
    }
    if !group.is_empty() && !group.split('.').all(is_dns_label_ish) {
        return Err(err("a group is a DNS subdomain"));
    }
    Ok(parsed)
}

/// `v1`, `v2`, `v1beta1`, `v1alpha2`: the Kubernetes version format.
fn is_version(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('v') else { return false };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || rest.starts_with('0') {
        return false;
    }
    let tail = &rest[digits..];
    if tail.is_empty() {
        return true;
    }
    let Some(n) = tail.strip_prefix("alpha").or_else(|| tail.strip_prefix("beta")) else { return false };
    !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && !n.starts_with('0')
}

fn is_dns_label_ish(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

// === impl ResourceSpec ===

impl ResourceSpec {
    /// Whether the spec names this resource (in any version unless the spec is exact).
    pub fn matches(&self, r: &DiscoveredResource) -> bool {
        let gvr = &r.info.gvr;
        match self {
            Self::Name(name) => {
                gvr.resource == *name || r.singular == *name || r.short_names.iter().any(|s| s == name)
            }
            Self::GroupResource { group, resource } => gvr.group == *group && gvr.resource == *resource,
            Self::Exact(want) => gvr == want,
        }
    }

    /// The one resource this spec selects: an exact match, else the preferred version, core group first.
    pub fn resolve<'a>(&self, all: &'a [DiscoveredResource]) -> Option<&'a DiscoveredResource> {
        let mut candidates = all.iter().filter(|r| self.matches(r));
        if let Self::Exact(_) = self {
            return candidates.next();
        }
        let preferred: Vec<_> = candidates.filter(|r| r.preferred).collect();
        preferred.iter().find(|r| r.info.gvr.group.is_empty()).or(preferred.first()).copied()
    }
}

/// Which resources are cached up front.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// `--resources`; `None` means every discovered resource (preferred versions).
    pub include: Option<Vec<ResourceSpec>>,
    /// `--exclude`: matches every version of a resource.
    pub exclude: Vec<ResourceSpec>,
}

// === impl Selection ===

impl Selection {
    /// The selected resources, and the include specs that matched nothing (yet: a CRD may appear later).
    pub fn select(&self, all: &[DiscoveredResource]) -> (Vec<ResourceInfo>, Vec<ResourceSpec>) {
        let excluded = |r: &DiscoveredResource| self.exclude.iter().any(|s| s.matches(r));
        let mut chosen: Vec<ResourceInfo> = Vec::new();
        let mut unresolved = Vec::new();
        match &self.include {
            None => chosen.extend(all.iter().filter(|r| r.preferred && !excluded(r)).map(|r| r.info.clone())),
            Some(specs) => {
                for spec in specs {
                    match spec.resolve(all) {
                        Some(r) if !excluded(r) => {
                            if !chosen.iter().any(|c| c.gvr == r.info.gvr) {
                                chosen.push(r.info.clone());
                            }
                        }
                        Some(_) => {}
                        None => unresolved.push(spec.clone()),
                    }
                }
            }
        }
        (chosen, unresolved)
    }

    /// Whether a resource may be cached at all (not excluded), e.g. lazily on a client's read.
    pub fn allows(&self, r: &DiscoveredResource) -> bool {
        !self.exclude.iter().any(|s| s.matches(r))
    }
}
