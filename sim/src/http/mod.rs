//! The HTTP front: routing of apiserver paths to list/get/watch/write handlers, discovery and the
//! `/sim/` admin API.

pub mod admin;
pub mod authz;
#[cfg(test)]
mod cluster_tests;
pub mod discovery;
pub mod list;
pub mod objects;
pub mod response;
pub mod server;
pub mod view;
pub mod watch;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, Request, Response};
use hyper::body::Incoming;
use tokio::sync::watch as tokio_watch;

use crate::auth::AuthConfig;
use crate::options::{ListOptions, Query};
use crate::status::ApiError;
use crate::store::{ResId, Store};
use response::{Body, Out};

/// Settings fixed at start.
#[derive(Debug, Clone)]
pub struct Config {
    /// Period of bookmarks on watches that allow them (the apiserver's is 1 min).
    pub bookmark_interval: Duration,
    /// How long reads wait for a future resourceVersion before 504 (the cache's 3 s blockTimeout).
    pub wait_timeout: Duration,
    /// Whether pods have kubelets behind them: logs answer a fixed text and exec/attach/portforward echo
    /// bytes (what kache's forwarding tests need); without, they answer a 501 that says so.
    pub kubelets: bool,
    /// Time added to a list response per MiB of its body, modelling an apiserver that encodes every
    /// object for every list (the sim writes stored bytes); None (the default) adds nothing.
    pub list_cost_per_mib: Option<Duration>,
}

/// Test hooks, shared by the admin API and the Rust handle.
pub struct Admin {
    /// Remaining injected failures and their status code.
    pub fail: Mutex<(u32, u16)>,
    /// Delay added before every non-admin response.
    pub delay: Mutex<Duration>,
    /// While true, watches deliver nothing (their buffers fill and they are closed as too slow).
    pub stall: tokio_watch::Sender<bool>,
    /// Bumped to end every open watch.
    pub drop_watches: tokio_watch::Sender<u64>,
    /// Bumped to drop every connection (restart).
    pub drop_connections: tokio_watch::Sender<u64>,
    /// What the API answered (the admin API not counted).
    pub served: Served,
}

/// The work the sim did for its clients: API requests answered and the body bytes of complete responses
/// (as sent: gzipped when negotiated; streams such as watches and followed logs count 0 bytes). What
/// `kache demo` compares to show what a cache in front saves the upstream.
#[derive(Debug, Default)]
pub struct Served {
    pub requests: std::sync::atomic::AtomicU64,
    pub bytes: std::sync::atomic::AtomicU64,
}

impl Served {
    /// Counts one answered request.
    fn count<B: hyper::body::Body>(&self, body: &B) {
        use std::sync::atomic::Ordering::Relaxed;
        self.requests.fetch_add(1, Relaxed);
        self.bytes.fetch_add(body.size_hint().exact().unwrap_or(0), Relaxed);
    }

    /// `(requests, bytes)` so far.
    pub fn get(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.requests.load(Relaxed), self.bytes.load(Relaxed))
    }
}

impl Admin {
    pub fn new() -> Admin {
        Admin {
            fail: Mutex::new((0, 500)),
            delay: Mutex::new(Duration::ZERO),
            stall: tokio_watch::channel(false).0,
            drop_watches: tokio_watch::channel(0).0,
            drop_connections: tokio_watch::channel(0).0,
            served: Served::default(),
        }
    }

    /// Takes one injected failure, if any are pending.
    pub fn take_failure(&self) -> Option<u16> {
        let mut f = self.fail.lock().unwrap_or_else(|p| p.into_inner());
        if f.0 == 0 {
            return None;
        }
        f.0 -= 1;
        Some(f.1)
    }

    pub fn delay(&self) -> Duration {
        *self.delay.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Default for Admin {
    fn default() -> Self {
        Self::new()
    }
}

/// Everything a request handler can reach.
pub struct State {
    pub store: Arc<Store>,
    pub cfg: Config,
    /// Authentication and authorization; None serves everyone.
    pub auth: Option<Arc<AuthConfig>>,
    pub admin: Admin,
    pub addr: SocketAddr,
}

/// One request's view: the shared state and its output negotiation.
pub struct Ctx {
    pub state: Arc<State>,
    pub out: Out,
    /// The negotiated view of resource responses (objects or their metadata).
    pub view: view::View,
}

/// What a resource path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub id: ResId,
    pub ns: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
    pub watch_path: bool,
}

/// A routed path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Resource(Target),
    /// Discovery documents (`/api`, `/apis`, ...) and `/version`.
    Discovery(discovery::Doc),
    /// Liveness/readiness.
    Health,
    NotFound,
}

/// Maps a path to what it names.
pub fn route(store: &Store, path: &str) -> Route {
    let mut segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    if segs.len() > 1 && segs.last() == Some(&"") {
        segs.pop();
    }
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return Route::Discovery(discovery::Doc::Version),
        ["healthz" | "readyz" | "livez", ..] => return Route::Health,
        ["api"] => return Route::Discovery(discovery::Doc::CoreVersions),
        ["apis"] => return Route::Discovery(discovery::Doc::Groups),
        ["apis", g] => return Route::Discovery(discovery::Doc::Group(g.to_string())),
        ["openapi", "v3"] => return Route::Discovery(discovery::Doc::OpenApiIndex),
        ["openapi", "v3", "api", v] => {
            return Route::Discovery(discovery::Doc::OpenApi(String::new(), v.to_string()));
        }
        ["openapi", "v3", "apis", g, v] => {
            return Route::Discovery(discovery::Doc::OpenApi(g.to_string(), v.to_string()));
        }
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Route::NotFound,
    };
    if rest.is_empty() {
        return Route::Discovery(discovery::Doc::Resources(group.to_string(), version.to_string()));
    }
    let (watch_path, rest) = match rest {
        ["watch", rest @ ..] => (true, rest),
        _ => (false, rest),
    };
    let (ns, rest) = match rest {
        ["namespaces", ns, res, rest @ ..] if *res != "status" && *res != "finalize" => (Some(*ns), {
            let mut v = vec![*res];
            v.extend_from_slice(rest);
            v
        }),
        _ => (None, rest.to_vec()),
    };
    let Some(id) = rest.first().and_then(|r| store.find(group, r)) else { return Route::NotFound };
    let res = store.resource(id);
    if res.version != version || (ns.is_some() && !res.namespaced) || rest.len() > 3 {
        return Route::NotFound;
    }
    if let Some(ns) = ns
        && ns.is_empty()
    {
        return Route::NotFound;
    }
    let name = rest.get(1).filter(|n| !n.is_empty()).map(|s| s.to_string());
    let sub = rest.get(2).map(|s| s.to_string());
    // Namespaced objects are addressed by name only under their namespace.
    if res.namespaced && ns.is_none() && name.is_some() {
        return Route::NotFound;
    }
    match sub.as_deref() {
        None => {}
        Some("status") if res.has_status => {}
        Some("log" | "exec" | "attach" | "portforward") if res.builtin && res.plural == "pods" => {}
        Some(_) => return Route::NotFound,
    }
    Route::Resource(Target { id, ns: ns.map(str::to_string), name, sub, watch_path })
}

/// Handles one request.
pub async fn handle(state: Arc<State>, req: Request<Incoming>) -> Response<Body> {
    let admin = req.uri().path() == "/sim" || req.uri().path().starts_with("/sim/");
    let mut resp = serve(state.clone(), req).await;
    if !admin {
        state.admin.served.count(resp.body());
    }
    // Every apiserver response carries an audit ID.
    if let Ok(v) = http::HeaderValue::from_str(&crate::write::meta::new_uid()) {
        resp.headers_mut().insert("audit-id", v);
    }
    resp
}

async fn serve(state: Arc<State>, req: Request<Incoming>) -> Response<Body> {
    let q = Query::parse(req.uri().query());
    let mut out = Out::negotiate(req.headers(), q.get("pretty"));
    let path = req.uri().path().to_string();
    let accept = req.headers().get(http::header::ACCEPT).and_then(|v| v.to_str().ok());
    let watching = q.flag("watch") || path.split('/').any(|s| s == "watch");
    // Built-in kinds' objects have a protobuf form; custom resources' only their metadata views and
    // errors; discovery and the rest none.
    let (protobuf, resource) = match route(&state.store, &path) {
        Route::Resource(t) => (state.store.resource(t.id).builtin, true),
        _ => (false, false),
    };
    let negotiated = view::negotiate(accept, watching, protobuf);
    out.proto_errors = resource && view::error_in_protobuf(accept);
    let view = match negotiated {
        view::Negotiated::Json(v) => v,
        view::Negotiated::Protobuf(v) => {
            out.proto = true;
            v
        }
        view::Negotiated::NotAcceptable { .. } => view::View::Object,
    };
    let ctx = Ctx { state, out, view };
    if path == "/sim" || path.starts_with("/sim/") {
        return admin::handle(&ctx, req, &q).await;
    }
    if let Some(code) = ctx.state.admin.take_failure() {
        return out.error(&ApiError::injected(code));
    }
    let delay = ctx.state.admin.delay();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    // A built-in kind's request reaches its handler through go-restful, whose route selection refuses an
    // Accept header naming nothing the route produces; custom resources have no such step.
    if let Route::Resource(t) = route(&ctx.state.store, &path)
        && ctx.state.store.resource(t.id).builtin
        && !t.watch_path
    {
        let list = t.name.is_none() || watching;
        if !view::route_accepts(accept) {
            let err = ApiError::route_not_acceptable(list);
            // The error itself is negotiated on the same header: `application/*` gets JSON as usual.
            return match negotiated {
                view::Negotiated::Json(_) | view::Negotiated::Protobuf(_) => out.error(&err),
                view::Negotiated::NotAcceptable { .. } => response::raw_json(406, &err.to_status()),
            };
        }
    }
    if let view::Negotiated::NotAcceptable { stream } = negotiated {
        // A custom resource asked for protobuf: the error's own negotiation picks protobuf.
        if out.proto_errors {
            return out.error(&ApiError::not_acceptable(stream));
        }
        // The error's own negotiation fails on the same Accept: `WriteRawJSON`.
        return response::raw_json(406, &ApiError::not_acceptable(stream).to_status());
    }
    if let Some(auth) = ctx.state.auth.clone() {
        let mut req = req;
        let r = route(&ctx.state.store, &path);
        let user = match authz::check(&ctx, &auth, &mut req, &q, &r) {
            Ok(user) => user,
            Err(e) => return out.error(&e),
        };
        if authz::is_review(&path) {
            return authz::review(&ctx, &auth, &user, req).await;
        }
        return routed(&ctx, req, &q, &path).await;
    }
    if path == authz::SELF_SUBJECT_ACCESS_REVIEW_PATH {
        return authz::allow_all_review(&ctx, req).await;
    }
    routed(&ctx, req, &q, &path).await
}

/// Serves a request that passed the filters.
async fn routed(ctx: &Ctx, req: Request<Incoming>, q: &Query, path: &str) -> Response<Body> {
    let out = ctx.out;
    match route(&ctx.state.store, path) {
        Route::Health => response::text(200, "ok"),
        Route::Discovery(doc) if req.method() == Method::GET => discovery::serve(ctx, &doc),
        Route::Discovery(_) => out.error(&ApiError::method_not_allowed()),
        Route::NotFound => out.error(&ApiError::path_not_found()),
        Route::Resource(t) => match resource(ctx, req, q, t).await {
            Ok(r) => r,
            Err(e) => out.error(&e),
        },
    }
}

async fn resource(
    ctx: &Ctx,
    req: Request<Incoming>,
    q: &Query,
    t: Target,
) -> Result<Response<Body>, ApiError> {
    let method = req.method().clone();
    let is_watch = t.watch_path || q.flag("watch");
    // Namespaced resources take writes only under their namespace (the apiserver registers
    // cluster-wide routes for list and watch only).
    if method != Method::GET && t.ns.is_none() && ctx.state.store.resource(t.id).namespaced {
        return Err(ApiError::method_not_allowed());
    }
    match (method, t.name.as_deref(), t.sub.as_deref()) {
        (Method::GET, None, None) => {
            let res = ctx.state.store.resource(t.id).clone();
            let opts = ListOptions::from_query(q, &res, is_watch)?;
            if is_watch {
                return watch::watch(ctx, q, t.id, t.ns.as_deref(), None, opts);
            }
            let page = list::list(ctx, t.id, t.ns.as_deref(), &opts).await?;
            if let Some(e) = view::mismatch(&res, ctx.view, true) {
                return Err(e);
            }
            if ctx.out.proto && !matches!(ctx.view, view::View::Table(_)) {
                let body = list::encode_list_proto(&res, ctx.view, &page)?;
                list_cost(ctx, body.len()).await;
                return Ok(ctx.out.bytes(200, body, crate::proto::MEDIA_TYPE));
            }
            let body = match ctx.view {
                view::View::MetaList(v) => view::encode_list(&page, &page.items, v, ctx.out.pretty),
                view::View::Table(v) => {
                    let include = crate::table::Include::from_query(q)?;
                    crate::json::body(&crate::table::list_table(&res, &page, include, v), ctx.out.pretty)
                }
                _ => list::encode_list(&res, list::list_meta(&res, &page), &page.items, ctx.out.pretty),
            };
            list_cost(ctx, body.len()).await;
            Ok(ctx.out.bytes(200, body, "application/json"))
        }
        (Method::GET, Some(name), None) if is_watch => {
            let res = ctx.state.store.resource(t.id).clone();
            let opts = ListOptions::from_query(q, &res, true)?;
            if opts.pinned_name().is_some_and(|n| n != name) {
                return Err(ApiError::bad_request(
                    "fieldSelector metadata.name doesn't match requested name",
                ));
            }
            watch::watch(ctx, q, t.id, t.ns.as_deref(), Some(name), opts)
        }
        (Method::GET | Method::POST, Some(_), Some(sub @ ("log" | "exec" | "attach" | "portforward")))
            if !ctx.state.cfg.kubelets =>
        {
            Err(ApiError::no_kubelet(match sub {
                "log" => "kubectl logs",
                "exec" => "kubectl exec",
                "attach" => "kubectl attach",
                _ => "kubectl port-forward",
            }))
        }
        (Method::GET, Some(name), Some("log")) => admin::pod_log(ctx, t.ns.as_deref(), name, q),
        (Method::GET | Method::POST, Some(name), Some("exec" | "attach" | "portforward")) => {
            admin::pod_stream(ctx, req, t.ns.as_deref(), name)
        }
        (Method::GET, Some(name), _) => objects::get(ctx, t.id, t.ns.as_deref(), name, q).await,
        (Method::POST, None, None) if !t.watch_path => objects::create(ctx, req, q, &t).await,
        (Method::PUT, Some(_), _) if !t.watch_path => objects::update(ctx, req, q, &t).await,
        (Method::PATCH, Some(_), _) if !t.watch_path => objects::patch(ctx, req, q, &t).await,
        (Method::DELETE, Some(_), None) if !t.watch_path => objects::delete(ctx, req, q, &t).await,
        (Method::DELETE, None, None) if !t.watch_path => objects::delete_collection(ctx, q, &t).await,
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// The modelled time an apiserver spends producing a list of `bytes` ([`Config::list_cost_per_mib`]).
async fn list_cost(ctx: &Ctx, bytes: usize) {
    if let Some(per_mib) = ctx.state.cfg.list_cost_per_mib {
        tokio::time::sleep(per_mib.mul_f64(bytes as f64 / (1024.0 * 1024.0))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::{Crd, table};

    #[test]
    fn routes_apiserver_paths() {
        let crd = Crd::parse("example.com/v1/Widget/widgets/Cluster").expect("crd");
        let s = Store::new(table(&[crd]));
        let pods = s.find("", "pods").expect("pods");
        let ns = s.find("", "namespaces").expect("namespaces");
        let t = |id, ns: Option<&str>, name: Option<&str>, sub: Option<&str>, w| {
            Route::Resource(Target {
                id,
                ns: ns.map(str::to_string),
                name: name.map(str::to_string),
                sub: sub.map(str::to_string),
                watch_path: w,
            })
        };
        assert_eq!(route(&s, "/api/v1/pods"), t(pods, None, None, None, false));
        assert_eq!(route(&s, "/api/v1/namespaces/a/pods/p"), t(pods, Some("a"), Some("p"), None, false));
        assert_eq!(
            route(&s, "/api/v1/namespaces/a/pods/p/status"),
            t(pods, Some("a"), Some("p"), Some("status"), false)
        );
        assert_eq!(route(&s, "/api/v1/watch/namespaces/a/pods"), t(pods, Some("a"), None, None, true));
        assert_eq!(route(&s, "/api/v1/namespaces/a"), t(ns, None, Some("a"), None, false));
        assert_eq!(route(&s, "/api/v1/namespaces/a/status"), t(ns, None, Some("a"), Some("status"), false));
        assert_eq!(route(&s, "/api/v1/pods/p"), Route::NotFound);
        assert_eq!(route(&s, "/api/v1/foos"), Route::NotFound);
        assert_eq!(route(&s, "/api/v2/pods"), Route::NotFound);
        assert_eq!(route(&s, "/api/v1/namespaces/a/widgets"), Route::NotFound);
        assert_eq!(route(&s, "/api/v1/namespaces/a/configmaps/c/status"), Route::NotFound);
        let w = s.find("example.com", "widgets").expect("widgets");
        assert_eq!(route(&s, "/apis/example.com/v1/widgets/x"), t(w, None, Some("x"), None, false));
        assert_eq!(route(&s, "/apis"), Route::Discovery(discovery::Doc::Groups));
        assert_eq!(route(&s, "/"), Route::NotFound);
    }
}
