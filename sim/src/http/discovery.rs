//! Discovery documents as the apiserver serves them (legacy, unaggregated): `/api`, `/api/v1`, `/apis`,
//! `/apis/{g}`, `/apis/{g}/{v}` and `/version`. Clients asking for aggregated discovery get these plain
//! documents and fall back, as kubectl does.

use std::collections::BTreeMap;

use http::Response;
use serde_json::{Map, Value, json};

use crate::http::Ctx;
use crate::http::response::Body;
use crate::kinds::ResourceDef;
use crate::openapi;
use crate::status::ApiError;

/// The Kubernetes version the sim reports.
pub const VERSION_MAJOR: &str = "1";
pub const VERSION_MINOR: &str = "35";
pub const GIT_VERSION: &str = "v1.35.0-kache-sim";

/// A discovery document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Doc {
    Version,
    CoreVersions,
    Groups,
    Group(String),
    Resources(String, String),
    /// `/openapi/v3`: the index of per-group-version documents.
    OpenApiIndex,
    /// `/openapi/v3/api/v1`, `/openapi/v3/apis/{g}/{v}`.
    OpenApi(String, String),
}

const VERBS: &[&str] = &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

pub fn serve(ctx: &Ctx, doc: &Doc) -> Response<Body> {
    if let Doc::OpenApi(g, v) = doc
        && let Some(bytes) = served(ctx, g, v).then(|| openapi::document(&gv_path(g, v))).flatten()
    {
        return ctx.out.bytes(200, bytes.to_vec(), "application/json");
    }
    match build(ctx, doc) {
        Some(v) => ctx.out.json(200, &v),
        None => ctx.out.error(&ApiError::path_not_found()),
    }
}

fn build(ctx: &Ctx, doc: &Doc) -> Option<Value> {
    let resources = ctx.state.store.resources();
    match doc {
        Doc::Version => Some(json!({
            "major": VERSION_MAJOR,
            "minor": VERSION_MINOR,
            "emulationMajor": VERSION_MAJOR,
            "emulationMinor": VERSION_MINOR,
            "minCompatibilityMajor": VERSION_MAJOR,
            "minCompatibilityMinor": "34",
            "gitVersion": GIT_VERSION,
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "go1.25.0",
            "compiler": "gc",
            "platform": "linux/amd64"
        })),
        Doc::CoreVersions => Some(json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ctx.state.addr.to_string()}]
        })),
        Doc::Groups => {
            let groups: Vec<Value> =
                groups(resources).into_iter().map(|(g, vs)| group_doc(&g, &vs, false)).collect();
            Some(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
        }
        Doc::Group(g) => groups(resources).remove(g).map(|vs| group_doc(g, &vs, true)),
        Doc::Resources(g, v) => {
            let mut list: Vec<&ResourceDef> =
                resources.iter().map(|r| &**r).filter(|r| &r.group == g && &r.version == v).collect();
            if list.is_empty() {
                return None;
            }
            list.sort_by(|a, b| a.plural.cmp(&b.plural));
            let mut entries = Vec::new();
            for r in list {
                entries.push(resource_entry(r));
                let mut subs: Vec<(&str, &[&str])> = Vec::new();
                if r.builtin && r.plural == "pods" {
                    subs.push(("log", &["get"]));
                }
                if r.has_status {
                    subs.push(("status", &["get", "patch", "update"]));
                }
                for (sub, verbs) in subs {
                    entries.push(json!({
                        "name": format!("{}/{}", r.plural, sub),
                        "singularName": "",
                        "namespaced": r.namespaced,
                        "kind": if sub == "log" { "Pod".to_string() } else { r.kind.clone() },
                        "verbs": verbs
                    }));
                }
            }
            let gv = if g.is_empty() { v.clone() } else { format!("{g}/{v}") };
            let mut m = Map::new();
            m.insert("kind".into(), json!("APIResourceList"));
            if !g.is_empty() {
                m.insert("apiVersion".into(), json!("v1"));
            }
            m.insert("groupVersion".into(), json!(gv));
            m.insert("resources".into(), Value::Array(entries));
            Some(Value::Object(m))
        }
        Doc::OpenApiIndex => {
            let mut paths = Map::new();
            for r in resources {
                let p = gv_path(&r.group, &r.version);
                let hash = openapi::hash(&p).unwrap_or_else(|| OPENAPI_HASH.to_string());
                paths.insert(p.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={hash}")}));
            }
            Some(json!({"paths": paths}))
        }
        Doc::OpenApi(g, v) => openapi_doc(resources, g, v),
    }
}

/// Whether the sim serves any resource of a group-version (a committed document is served only then).
fn served(ctx: &Ctx, g: &str, v: &str) -> bool {
    ctx.state.store.resources().iter().any(|r| r.group == g && r.version == v)
}

/// The hash of a generated document: constant, as these only change with the resource table, which is
/// fixed at start.
const OPENAPI_HASH: &str = "0000000000000000";

fn gv_path(g: &str, v: &str) -> String {
    if g.is_empty() { format!("api/{v}") } else { format!("apis/{g}/{v}") }
}

/// A minimal OpenAPI v3 document (for custom resources; built-in kinds have the apiserver's own, see
/// [`openapi`]): one path per object with its PATCH and PUT operations, tagged with
/// x-kubernetes-group-version-kind and the `fieldValidation` query parameter. kubectl reads exactly this
/// to decide that the server validates fields itself (server-side validation), so it needs no schemas.
fn openapi_doc(resources: &[std::sync::Arc<ResourceDef>], g: &str, v: &str) -> Option<Value> {
    let mut paths = Map::new();
    for r in resources.iter().filter(|r| r.group == g && r.version == v) {
        let base = format!("/{}", gv_path(g, v));
        let item = if r.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}/{{name}}", r.plural)
        } else {
            format!("{base}/{}/{{name}}", r.plural)
        };
        let collection = item.trim_end_matches("/{name}").to_string();
        let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
        let params = json!([
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}}
        ]);
        let op = |verb: &str| {
            json!({"operationId": format!("{verb}{}", r.kind), "parameters": params,
                   "responses": {"200": {"description": "OK"}},
                   "x-kubernetes-action": verb, "x-kubernetes-group-version-kind": gvk})
        };
        paths.insert(item, json!({"put": op("put"), "patch": op("patch")}));
        paths.insert(collection, json!({"post": op("post")}));
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": GIT_VERSION}, "paths": paths}))
}

fn resource_entry(r: &ResourceDef) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), json!(r.plural));
    m.insert("singularName".into(), json!(r.singular()));
    m.insert("namespaced".into(), json!(r.namespaced));
    m.insert("kind".into(), json!(r.kind));
    m.insert("verbs".into(), json!(VERBS));
    if !r.short_names.is_empty() {
        m.insert("shortNames".into(), json!(r.short_names));
    }
    if r.builtin && matches!(r.plural.as_str(), "pods" | "services" | "deployments" | "replicasets") {
        m.insert("categories".into(), json!(["all"]));
    }
    Value::Object(m)
}

/// Non-core groups and their versions, in declaration order of versions.
fn groups(resources: &[std::sync::Arc<ResourceDef>]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in resources.iter().filter(|r| !r.group.is_empty()) {
        let vs = out.entry(r.group.clone()).or_default();
        if !vs.contains(&r.version) {
            vs.push(r.version.clone());
        }
    }
    out
}

fn group_doc(g: &str, versions: &[String], with_type: bool) -> Value {
    let vs: Vec<Value> =
        versions.iter().map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v})).collect();
    let preferred = vs.first().cloned().unwrap_or(Value::Null);
    let mut m = Map::new();
    if with_type {
        m.insert("kind".into(), json!("APIGroup"));
        m.insert("apiVersion".into(), json!("v1"));
    }
    m.insert("name".into(), json!(g));
    m.insert("versions".into(), Value::Array(vs));
    m.insert("preferredVersion".into(), preferred);
    Value::Object(m)
}
