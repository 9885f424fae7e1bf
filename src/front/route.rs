//! URL → request classification, as the apiserver's `RequestInfoFactory.NewRequestInfo` does it
//! (k8s.io/apiserver `pkg/endpoints/request/requestinfo.go`).
//!
//! Resource paths look like
//!
//! ```text
//! /api/{version}/{resource}[/{name}[/{subresource}[/...]]]
//! /api/{version}/namespaces/{namespace}/{resource}[/{name}[/{subresource}[/...]]]
//! /apis/{group}/{version}/...                       (same shapes)
//! /api/{version}/watch/...  /api/{version}/proxy/... (deprecated special verbs)
//! ```
//!
//! Everything else (discovery roots, /openapi, /version, /healthz, unknown prefixes) is [`Route::Other`].
//! The parse is pure and total: any input gives a route, never an error; paths the apiserver would reject
//! are classified as `Other` so that they are forwarded and the upstream answers them.

use http::{Method, Uri};

use crate::resource::Gvr;

/// Subresources of `namespaces` reachable as `/api/v1/namespaces/{name}/{sub}` (requestinfo.go
/// `namespaceSubresources`); any other segment after a namespace name starts a namespaced resource path.
const NAMESPACE_SUBRESOURCES: &[&str] = &["status", "finalize"];

/// Requests that stream for as long as the client keeps them (the apiserver's `LongRunningFunc`: verbs
/// watch and proxy, these subresources); they are exempt from the non-watch request timeout.
const LONG_RUNNING_SUBRESOURCES: &[&str] = &["attach", "exec", "proxy", "log", "portforward"];

/// How a request reached the server, classified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// A request on a resource collection or object.
    Resource(ResourceRequest),
    /// Anything else: discovery, /openapi, /version, health, unknown paths.
    Other,
}

/// A request on a resource collection or object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceRequest {
    pub gvr: Gvr,
    /// The namespace from the URL. `None` for cluster-scoped paths and for the `namespaces` resource itself
    /// (`/api/v1/namespaces/{name}` names a cluster-scoped object).
    pub namespace: Option<String>,
    /// The object name from the URL path. Unlike the apiserver's RequestInfo (which fills it from a
    /// `metadata.name=` field selector for authorization), only the path sets it: a list stays a list.
    pub name: Option<String>,
    /// `status`, `scale`, `log`, `exec`, ... when present.
    pub subresource: Option<String>,
    pub verb: Verb,
    /// The request used the deprecated `/watch/` path segment (`/api/v1/watch/namespaces/x/pods`).
    pub legacy_watch_path: bool,
}

/// The request verb, as the apiserver's authorizer sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
    /// The deprecated `/api/v1/proxy/...` paths.
    Proxy,
    /// A method the apiserver maps to no verb (OPTIONS, CONNECT, ...).
    Unknown,
}

// === impl Route ===

impl Route {
    /// Classifies a request by method and URI.
    pub fn parse(method: &Method, uri: &Uri) -> Self {
        parse(method, uri.path(), uri.query()).map_or(Route::Other, Route::Resource)
    }

    /// The resource request, if this is one.
    pub fn resource(&self) -> Option<&ResourceRequest> {
        match self {
            Route::Resource(r) => Some(r),
            Route::Other => None,
        }
    }

    /// Whether the request may legitimately run without bound (watch, proxy, exec, attach, port-forward,
    /// log): the non-watch request timeout does not apply to it.
    pub(crate) fn is_long_running(&self) -> bool {
        self.resource().is_some_and(ResourceRequest::is_long_running)
    }
}

// === impl ResourceRequest ===

impl ResourceRequest {
    /// See [`Route::is_long_running`].
    pub(crate) fn is_long_running(&self) -> bool {
        matches!(self.verb, Verb::Watch | Verb::Proxy)
            || self.subresource.as_deref().is_some_and(|s| LONG_RUNNING_SUBRESOURCES.contains(&s))
    }

    /// Whether the verb changes state upstream (create, update, patch, delete, deletecollection).
    pub(crate) fn is_write(&self) -> bool {
        self.verb.is_write()
    }
}

// === impl Verb ===

impl Verb {
    /// The apiserver's name for the verb (as in audit logs and RBAC rules).
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
            Verb::Proxy => "proxy",
            Verb::Unknown => "",
        }
    }

    /// Whether the verb changes state upstream.
    pub(crate) fn is_write(self) -> bool {
        matches!(self, Verb::Create | Verb::Update | Verb::Patch | Verb::Delete | Verb::DeleteCollection)
    }

    fn from_method(method: &Method) -> Self {
        match *method {
            Method::POST => Verb::Create,
            Method::GET | Method::HEAD => Verb::Get,
            Method::PUT => Verb::Update,
            Method::PATCH => Verb::Patch,
            Method::DELETE => Verb::Delete,
            _ => Verb::Unknown,
        }
    }
}

// === parsing ===

/// The RequestInfoFactory algorithm. `None` means "not a resource request".
fn parse(method: &Method, raw_path: &str, query: Option<&str>) -> Option<ResourceRequest> {
    // Go matches on the decoded path (`req.URL.Path`), split after trimming slashes at both ends.
    let path = percent_decode(raw_path.as_bytes(), false)?;
    let trimmed = path.trim_matches('/');
    if trimmed.is_empty() {
        return None;
    }
    let parts: Vec<&str> = trimmed.split('/').collect();
    if parts.len() < 3 {
        return None;
    }
    let (group, mut rest) = match parts[0] {
        "api" => ("", &parts[1..]),
        "apis" if parts.len() >= 4 => (parts[1], &parts[2..]),
        _ => return None,
    };
    let version = rest[0];
    rest = &rest[1..];

    let mut legacy_watch_path = false;
    let mut verb = match rest[0] {
        special @ ("watch" | "proxy") => {
            if rest.len() < 2 {
                // The apiserver fails here ("unable to determine kind and namespace"); let it answer.
                return None;
            }
            rest = &rest[1..];
            if special == "watch" {
                legacy_watch_path = true;
                Verb::Watch
            } else {
                Verb::Proxy
            }
        }
        _ => Verb::from_method(method),
    };

    // `namespaces/{ns}/{resource}...` moves to the namespaced resource; `namespaces/{name}[/status]` stays
    // the `namespaces` resource itself (cluster-scoped).
    let mut namespace = None;
    if rest[0] == "namespaces" && rest.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&rest[2]) {
        namespace = Some(rest[1]);
        rest = &rest[2..];
    }

    let resource = rest[0];
    let name = rest.get(1).copied();
    let subresource = if verb == Verb::Proxy { None } else { rest.get(2).copied() };
    // Empty segments (`/api/v1//pods`, `/pods//status`) have no meaning the cache could serve.
    if [
        Some(version),
        Some(group).filter(|_| parts[0] == "apis"),
        Some(resource),
        name,
        subresource,
        namespace,
    ]
    .into_iter()
    .flatten()
    .any(str::is_empty)
    {
        return None;
    }

    if name.is_none() {
        if verb == Verb::Get {
            verb = if query_watch(query) { Verb::Watch } else { Verb::List };
        } else if verb == Verb::Delete {
            verb = Verb::DeleteCollection;
        }
    }

    Some(ResourceRequest {
        gvr: Gvr::new(group, version, resource),
        namespace: namespace.map(str::to_owned),
        name: name.map(str::to_owned),
        subresource: subresource.map(str::to_owned),
        verb,
        legacy_watch_path,
    })
}

/// The `watch` query parameter as the apiserver's `Convert_Slice_string_To_bool` reads it: only the first
/// value counts; absent, `0` and `false` (any case) are false, anything else (even empty) is true.
fn query_watch(query: Option<&str>) -> bool {
    let Some(query) = query else { return false };
    for pair in query.split('&') {
        // Go's url.ParseQuery drops pairs containing ';'.
        if pair.contains(';') {
            continue;
        }
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if percent_decode(key.as_bytes(), true).as_deref() != Some("watch") {
            continue;
        }
        let Some(value) = percent_decode(value.as_bytes(), true) else { continue };
        return !(value == "0" || value.eq_ignore_ascii_case("false"));
    }
    false
}

/// Decodes `%XX` escapes (and `+` as space in query components). `None` on a malformed escape or
/// when the result is not UTF-8, which Go's URL parser also rejects.
pub(crate) fn percent_decode(input: &[u8], plus_as_space: bool) -> Option<String> {
    if !input.iter().any(|&b| b == b'%' || (plus_as_space && b == b'+')) {
        return std::str::from_utf8(input).ok().map(str::to_owned);
    }
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        match input[i] {
            b'%' => {
                let hi = hex_value(*input.get(i + 1)?)?;
                let lo = hex_value(*input.get(i + 2)?)?;
                out.push(hi << 4 | lo);
                i += 3;
            }
            b'+' if plus_as_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
