//! What the upstream can serve: discovery of list+watch resources, and `--resources` / `--exclude` selection.
//!
//! Reads `/api`, `/api/v1`, `/apis` and `/apis/{group}/{version}` for every served version. A resource's
//! preferred version is the first of its group's versions, in the group's priority order (the preferred
//! version, then the rest as listed), that serves it — client-go's `ServerPreferredResources`: a resource
//! that only an older version serves (the sample apiserver's v1alpha1 fischers) is still preferred there.
//! "Everything" caches preferred versions only, while an explicit spec or a client's read may pick another
//! served version.
//!
//! An upstream without the core group is valid: `/api` answering 404 (an aggregated apiserver such as
//! k8s.io/sample-apiserver, or the apiextensions-apiserver on its own) means no core versions.

use std::collections::HashSet;
use std::time::Duration;

use futures_util::{StreamExt, stream};
use http::{Method, Request, header};
use serde::Deserialize;
use tracing::warn;

use super::{ReadBodyError, Transport, UpstreamError, read_body};
use crate::front::body;
use crate::resource::{Gvr, ResourceInfo};

/// Group versions fetched concurrently (a cluster has a few dozen).
const DISCOVERY_CONCURRENCY: usize = 8;
/// Deadline of one discovery request.
pub(crate) const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(30);
/// Upper bound on one discovery document.
const MAX_DISCOVERY_BYTES: usize = 16 << 20;

/// Discovery failed as a whole (a single group version failing is only logged and reported).
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// The request did not get a response.
    #[error("discovery GET {path}: {source}")]
    Upstream {
        path: String,
        #[source]
        source: UpstreamError,
    },
    /// The upstream answered with an error status.
    #[error("discovery GET {path}: upstream answered {code}")]
    Status { path: String, code: u16 },
    /// Reading the body failed or it was too large.
    #[error("discovery GET {path}: reading the body failed: {source}")]
    Body {
        path: String,
        #[source]
        source: ReadBodyError,
    },
    /// The body is not the expected discovery document.
    #[error("discovery GET {path}: invalid document: {source}")]
    Decode {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    /// No answer in time.
    #[error("discovery GET {path}: no response within {timeout:?}")]
    Timeout { path: String, timeout: Duration },
}

/// One discovered resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoveredResource {
    pub info: ResourceInfo,
    /// This version is the resource's preferred one (see the module doc).
    pub preferred: bool,
    pub singular: String,
    pub short_names: Vec<String>,
}

/// The result of one discovery round.
#[derive(Clone, Debug, Default)]
pub struct Discovery {
    /// Every cacheable (list + watch, not a subresource) resource of every served group version.
    pub resources: Vec<DiscoveredResource>,
    /// Group versions (`v1`, `apps/v1`) that could not be read this round: their resources are unknown, not gone.
    pub failed: Vec<String>,
}

impl Discovery {
    /// Whether this round read `gvr`'s group version.
    pub fn covers(&self, gvr: &Gvr) -> bool {
        !self.failed.contains(&gvr.api_version())
    }
}

#[derive(Deserialize)]
struct ApiVersions {
    #[serde(default)]
    versions: Vec<String>,
}

#[derive(Deserialize)]
struct ApiGroupList {
    #[serde(default)]
    groups: Vec<ApiGroup>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ApiGroup {
    name: String,
    #[serde(default)]
    versions: Vec<GroupVersion>,
    preferred_version: Option<GroupVersion>,
}

#[derive(Deserialize)]
struct GroupVersion {
    version: String,
}

#[derive(Deserialize)]
struct ApiResourceList {
    #[serde(default)]
    resources: Vec<ApiResource>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ApiResource {
    name: String,
    #[serde(default)]
    singular_name: String,
    #[serde(default)]
    namespaced: bool,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    verbs: Option<Vec<String>>,
    #[serde(default)]
    short_names: Option<Vec<String>>,
}

/// Whether a group is built into the apiserver (typed objects: list items carry no `kind`/`apiVersion`).
/// A guess used only when the upstream's own lists cannot tell (the resource has no objects yet).
pub fn is_builtin_group(group: &str) -> bool {
    group.is_empty() || !group.contains('.') || group.ends_with(".k8s.io")
}

/// `/api`, or no core versions when the upstream has no core group (404).
async fn core_versions(transport: &dyn Transport) -> Result<ApiVersions, DiscoveryError> {
    match get_json(transport, "/api").await {
        Err(DiscoveryError::Status { code: 404, .. }) => Ok(ApiVersions { versions: Vec::new() }),
        other => other,
    }
}

async fn get_json<T: serde::de::DeserializeOwned>(
    transport: &dyn Transport,
    path: &str,
) -> Result<T, DiscoveryError> {
    let req = Request::builder()
        .method(Method::GET)
        .uri(path)
        .header(header::ACCEPT, "application/json")
        .header(header::USER_AGENT, concat!("kache/", env!("CARGO_PKG_VERSION"), " (discovery)"))
        .body(body::empty())
        .map_err(|e| DiscoveryError::Body {
            path: path.into(),
            source: ReadBodyError::Transport(Box::new(e)),
        })?;
    let read = async {
        let resp = transport
            .send(req)
            .await
            .map_err(|source| DiscoveryError::Upstream { path: path.into(), source })?;
        if !resp.status().is_success() {
            return Err(DiscoveryError::Status { path: path.into(), code: resp.status().as_u16() });
        }
        let bytes = read_body(resp.into_body(), MAX_DISCOVERY_BYTES)
            .await
            .map_err(|source| DiscoveryError::Body { path: path.into(), source })?;
        serde_json::from_slice(&bytes).map_err(|source| DiscoveryError::Decode { path: path.into(), source })
    };
    tokio::time::timeout(DISCOVERY_TIMEOUT, read)
        .await
        .map_err(|_| DiscoveryError::Timeout { path: path.into(), timeout: DISCOVERY_TIMEOUT })?
}

/// The cacheable resources of the preferred version of every group.
pub async fn discover(transport: &dyn Transport) -> Result<Vec<ResourceInfo>, DiscoveryError> {
    let all = discover_all(transport).await?;
    Ok(all.resources.into_iter().filter(|r| r.preferred).map(|r| r.info).collect())
}

/// Every cacheable resource of every served group version.
pub async fn discover_all(transport: &dyn Transport) -> Result<Discovery, DiscoveryError> {
    let core = core_versions(transport).await?;
    let groups: ApiGroupList = get_json(transport, "/apis").await?;
    // (group, version) in discovery order; each group's versions in its priority order (preferred first).
    let mut targets: Vec<(String, String)> =
        core.versions.iter().map(|v| (String::new(), v.clone())).collect();
    for group in groups.groups {
        let preferred =
            group.preferred_version.as_ref().or(group.versions.first()).map(|v| v.version.clone());
        let (first, rest): (Vec<_>, Vec<_>) =
            group.versions.iter().partition(|v| Some(&v.version) == preferred.as_ref());
        for v in first.into_iter().chain(rest) {
            targets.push((group.name.clone(), v.version.clone()));
        }
    }
    let fetches: Vec<_> = targets.into_iter().map(|(g, v)| fetch_group_version(transport, g, v)).collect();
    let results: Vec<_> = stream::iter(fetches).buffered(DISCOVERY_CONCURRENCY).collect().await;
    let mut out = Discovery::default();
    // Per group: the resources an earlier (higher-priority) version serves, and whether one failed (then
    // a later version cannot know whether it is a resource's preferred one: not preferred this round).
    let mut seen: HashSet<(String, String)> = HashSet::new();
    let mut group_failed: HashSet<String> = HashSet::new();
    for (group, version, list) in results {
        match list {
            Ok(list) => {
                for mut r in cacheable(&group, &version, list) {
                    let first = seen.insert((group.clone(), r.info.gvr.resource.clone()));
                    r.preferred = first && !group_failed.contains(&group);
                    out.resources.push(r);
                }
            }
            Err(error) => {
                warn!(%error, "group version not discovered this round");
                out.failed.push(Gvr::new(&group, &version, "").api_version());
                group_failed.insert(group);
            }
        }
    }
    Ok(out)
}

type GroupVersionResult = (String, String, Result<ApiResourceList, DiscoveryError>);

async fn fetch_group_version(
    transport: &dyn Transport,
    group: String,
    version: String,
) -> GroupVersionResult {
    let path = Gvr::new(&group, &version, "").path_prefix();
    let list = get_json::<ApiResourceList>(transport, &path).await;
    (group, version, list)
}

/// The list+watch resources of one group version (`preferred` is decided by the caller).
fn cacheable(group: &str, version: &str, list: ApiResourceList) -> Vec<DiscoveredResource> {
    list.resources
        .into_iter()
        .filter(|r| !r.name.contains('/') && !r.name.is_empty() && !r.kind.is_empty())
        .filter(|r| {
            let verbs = r.verbs.as_deref().unwrap_or_default();
            verbs.iter().any(|v| v == "list") && verbs.iter().any(|v| v == "watch")
        })
        .map(|r| DiscoveredResource {
            info: ResourceInfo {
                gvr: Gvr::new(group, version, &r.name),
                list_kind: format!("{}List", r.kind),
                kind: r.kind,
                namespaced: r.namespaced,
                list_items_have_type_meta: !is_builtin_group(group),
            },
            preferred: false,
            singular: r.singular_name,
            short_names: r.short_names.unwrap_or_default(),
        })
        .collect()
}

mod spec;
pub use spec::{ResourceSpec, Selection, SpecError, parse_resource_specs};

#[cfg(test)]
mod tests;
