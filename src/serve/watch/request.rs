//! The entry point: from a routed, validated and authorized watch request to its streaming response.

use std::sync::Arc;

use http::Response;
use tokio_util::sync::CancellationToken;

use super::filter::{Filter, Predicate};
use super::frame::WatchView;
use super::proto::ProtoWatch;
use super::stream::{Start, WatchSpec, Watcher};
use super::{WatchConfig, over_limit, respond_watcher};
use crate::codec::status::ApiError;
use crate::front::{self, body::Body};
use crate::metrics::Metrics;
use crate::options::params::ListOptions;
use crate::serve::protobuf::ProtoTarget;
use crate::store::{Object, Store};

/// Seconds a client refused for the per-resource watcher cap should wait.
const OVER_LIMIT_RETRY_AFTER: u32 = 1;

/// One watch, as the dispatcher hands it over.
#[derive(Debug)]
pub struct WatchRequest {
    pub store: Arc<Store>,
    /// Parsed, defaulted (legacy watch-list defaulting applied) and validated options.
    pub opts: ListOptions,
    /// The request's namespace (namespaced resources only).
    pub namespace: Option<String>,
    /// One object: the legacy `/watch/…/NAME` path or a `metadata.name=` field selector.
    pub name: Option<String>,
    /// For RV="" with sendInitialEvents: the RV the dispatcher's freshness proof waited for (the store
    /// is at least there); `None` when not needed.
    pub consistent_rv: Option<u64>,
    /// For RV="" with sendInitialEvents=true proven by a census: the snapshot it matched, which the watch
    /// starts from exactly.
    pub matched: Option<super::stream::Matched>,
    pub view: WatchView,
    /// Frames in protobuf, with objects encoded as this target (`view` is `Full` or the metadata view).
    pub proto: Option<ProtoTarget>,
    /// Whether an error Status before the stream starts is written in protobuf (the error's own negotiation).
    pub proto_errors: bool,
    /// The kache's metrics (the watcher counts itself in `kache_watchers`).
    pub metrics: Metrics,
    /// The kache's table of frames shared between watchers.
    pub frames: Arc<super::shared::SharedFrames>,
}

/// A protobuf watch whose initial state or replayed history holds an object that cannot be transcoded:
/// the request is forwarded instead.
#[derive(Debug)]
pub struct Untranscodable;

/// [`try_serve_watch`] of a JSON watch, which is always served (the tests' entry point).
#[cfg(test)]
fn serve_watch(req: WatchRequest, cfg: &WatchConfig, shutdown: CancellationToken) -> Response<Body> {
    try_serve_watch(req, cfg, shutdown).expect("a JSON watch is always served from memory")
}

/// Serves a watch from memory: a 200 stream, or an error Status response when it cannot start at all; `Err`
/// when a protobuf watch cannot be served from memory (the caller forwards it).
pub fn try_serve_watch(
    req: WatchRequest,
    cfg: &WatchConfig,
    shutdown: CancellationToken,
) -> Result<Response<Body>, Untranscodable> {
    let spec = match resolve(&req, cfg) {
        Ok(spec) => spec,
        Err(e) => return Ok(error_response(&e, req.proto_errors)),
    };
    if over_limit(&req.store, cfg, &req.metrics) {
        req.metrics.refused(crate::metrics::Refusal::Watchers);
        let e = ApiError::TooManyRequests {
            message: format!("too many watchers of {}, please try again later", req.store.info().gvr),
            retry_after: OVER_LIMIT_RETRY_AFTER,
        };
        return Ok(error_response(&e, req.proto_errors));
    }
    let watcher = Watcher::new(&req.metrics, req.store, spec, shutdown);
    if !watcher.proto_ready() {
        return Err(Untranscodable);
    }
    Ok(respond_watcher(watcher))
}

/// The watcher's spec: the start mode (as the cacher's `Cacher.Watch` picks it), the selection and the
/// lifetime.
pub fn resolve(req: &WatchRequest, cfg: &WatchConfig) -> Result<WatchSpec, ApiError> {
    let rv = req.opts.watch_resource_version()?;
    let mut start = start_mode(rv, req.opts.send_initial_events, req.consistent_rv);
    if let Start::Snapshot { end_bookmark, .. } = &mut start {
        // The initial-events-end bookmark only goes to clients that allow bookmarks (`isListWatchRequest`).
        *end_bookmark &= req.opts.allow_watch_bookmarks;
    }
    Ok(WatchSpec {
        start,
        filter: filter(req),
        view: req.view.clone(),
        bookmarks: req.opts.allow_watch_bookmarks,
        timeout: cfg.lifetime(req.opts.timeout_seconds),
        bookmark_interval: cfg.bookmark_interval,
        wait_timeout: cfg.wait_timeout,
        indexed: cfg.indexed,
        proto: req.proto.clone().map(|target| ProtoWatch {
            target,
            gvr: req.store.info().gvr.clone(),
            metrics: req.metrics.clone(),
        }),
        matched: req.matched.clone(),
        frames: req.frames.clone(),
    })
}

/// The start-mode table (staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go: Cacher.Watch and
/// watch_cache.go: watchCache.getAllEventsSinceLocked), after the legacy defaulting of staging/src/k8s.io/
/// apimachinery/pkg/apis/meta/internalversion/defaults.go: SetListOptionsDefaults (so `send_initial_events`
/// is `None` only for RV=N, or when the WatchList gate is off).
pub(crate) fn start_mode(
    rv: Option<u64>,
    send_initial_events: Option<bool>,
    consistent_rv: Option<u64>,
) -> Start {
    match (rv, send_initial_events) {
        // Watch-list: the state of a snapshot at ≥ the requested (or the proven consistent) RV, the
        // initial-events-end bookmark, then live events.
        (Some(0), Some(true)) => Start::Snapshot { wait_for: None, end_bookmark: true },
        (Some(n), Some(true)) => Start::Snapshot { wait_for: Some(n), end_bookmark: true },
        (None, Some(true)) => Start::Snapshot { wait_for: consistent_rv, end_bookmark: true },
        // Legacy RV=""/"0" without WatchList: the state (no bookmark), then live events.
        (None | Some(0), None) => Start::Snapshot { wait_for: None, end_bookmark: false },
        // RV="" without initial events: live events after the upstream's current RV.
        (None, Some(false)) => Start::Resume { rv: consistent_rv },
        // RV="0" without initial events: start anywhere.
        (Some(0), Some(false)) => Start::Resume { rv: None },
        // RV=N: replay the history after N (410 when too old), or wait for it when in the future.
        (Some(n), None | Some(false)) => Start::Resume { rv: Some(n) },
    }
}

fn filter(req: &WatchRequest) -> Filter {
    let labels = req.opts.label_selector.clone();
    let fields = req.opts.field_selector.clone();
    let predicate: Option<Predicate> = if labels.is_empty() && fields.is_empty() {
        None
    } else {
        let kind = req.store.info().field_kind();
        Some(Arc::new(move |o: &Object| labels.matches(o) && fields.matches(o, kind)))
    };
    let namespace = if req.store.info().namespaced { req.namespace.clone() } else { None };
    // The indexed field's pinned value (`spec.nodeName=X`), after the selector's label conversion.
    let field = req.store.indexed_field().and_then(|i| {
        let name = req.store.info().field_kind().extra_fields().get(i)?;
        req.opts.field_selector.exact(name).map(Box::from)
    });
    Filter { namespace, name: req.name.clone(), predicate, field }
}

/// An error Status response (before the stream started), in protobuf when the client negotiated it.
fn error_response(e: &ApiError, proto: bool) -> Response<Body> {
    if proto { front::respond::protobuf_status(e) } else { front::respond::status(e) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::params::parse_list_request;
    use crate::resource::ResourceInfo;
    use crate::store::{StoreConfig, Writer};
    use bytes::Bytes;
    use http::{StatusCode, header};
    use http_body_util::BodyExt;

    fn store() -> (Arc<Store>, Writer) {
        let info = ResourceInfo::pods();
        let (store, mut writer) = Store::new(info.clone(), StoreConfig::default());
        let pods = [("ns1", "a", 3, "web"), ("ns1", "b", 5, "db"), ("ns2", "c", 10, "web")].map(|(ns, name, rv, app)| {
            let raw = format!(
                r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"{ns}","resourceVersion":"{rv}","labels":{{"app":"{app}"}}}},"spec":{{}},"status":{{"phase":"Running"}}}}"#
            );
            Arc::new(crate::codec::extract::object_from_json(Bytes::from(raw), &info).expect("pod"))
        });
        writer.replace(pods, 10);
        (store, writer)
    }

    fn request(store: &Arc<Store>, query: &str, namespace: Option<&str>) -> WatchRequest {
        let opts = parse_list_request(Some(query), false, store.info().field_kind()).expect("valid options");
        WatchRequest {
            store: store.clone(),
            opts,
            namespace: namespace.map(str::to_owned),
            name: None,
            consistent_rv: None,
            matched: None,
            view: WatchView::Full,
            proto: None,
            proto_errors: false,
            metrics: Metrics::default(),
            frames: Arc::default(),
        }
    }

    /// Reads body frames until `lines` event lines arrived.
    async fn lines(response: &mut Response<Body>, lines: usize) -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        while out.len() < lines {
            let frame = response.body_mut().frame().await.expect("stream open").expect("no body error");
            let data = frame.into_data().expect("data frame");
            for line in data.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                out.push(serde_json::from_slice(line).expect("JSON line"));
            }
        }
        out
    }

    #[tokio::test]
    async fn legacy_watch_is_defaulted_to_a_watch_list_with_its_bookmark() {
        let (store, _writer) = store();
        let req = request(&store, "watch=1&allowWatchBookmarks=true&labelSelector=app%3Dweb", None);
        let mut response = serve_watch(req, &WatchConfig::default(), CancellationToken::new());
        assert_eq!(response.status(), StatusCode::OK);
        let got = lines(&mut response, 3).await;
        assert_eq!(got[0]["object"]["metadata"]["name"], "a");
        assert_eq!(got[1]["object"]["metadata"]["name"], "c");
        assert_eq!(got[2]["type"], "BOOKMARK");
        assert_eq!(got[2]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
        assert_eq!(got[2]["object"]["metadata"]["resourceVersion"], "10");
    }

    #[tokio::test]
    async fn namespace_and_field_selector_narrow_the_watch() {
        let (store, _writer) = store();
        let req = request(&store, "watch=1&fieldSelector=status.phase%3DRunning", Some("ns1"));
        let mut response = serve_watch(req, &WatchConfig::default(), CancellationToken::new());
        let got = lines(&mut response, 2).await;
        let names: Vec<_> =
            got.iter().map(|v| v["object"]["metadata"]["name"].as_str().expect("name")).collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[tokio::test]
    async fn too_old_resource_version_is_an_error_event_in_a_200() {
        let (store, _writer) = store();
        let mut response = serve_watch(
            request(&store, "watch=1&resourceVersion=3", None),
            &WatchConfig::default(),
            CancellationToken::new(),
        );
        assert_eq!(response.status(), StatusCode::OK);
        let got = lines(&mut response, 1).await;
        assert_eq!(got[0]["type"], "ERROR");
        assert_eq!(got[0]["object"]["message"], "too old resource version: 3 (10)");
        assert!(response.body_mut().frame().await.is_none(), "the stream ends after the ERROR");
    }

    #[tokio::test]
    async fn unparsable_resource_version_is_a_500() {
        let (store, _writer) = store();
        let response = serve_watch(
            request(&store, "watch=1&resourceVersion=abc", None),
            &WatchConfig::default(),
            CancellationToken::new(),
        );
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = response.into_body().collect().await.expect("body").to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).expect("Status");
        assert_eq!(
            v["message"],
            r#"resourceVersion: Invalid value: "abc": strconv.ParseUint: parsing "abc": invalid syntax"#
        );
    }

    #[tokio::test]
    async fn watchers_over_the_cap_get_429_with_retry_after() {
        let (store, _writer) = store();
        let cfg = WatchConfig { max_watchers_per_resource: 1, ..WatchConfig::default() };
        let first = serve_watch(request(&store, "watch=1", None), &cfg, CancellationToken::new());
        assert_eq!(first.status(), StatusCode::OK);
        let second = serve_watch(request(&store, "watch=1", None), &cfg, CancellationToken::new());
        assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(second.headers()[header::RETRY_AFTER], "1");
        drop(first);
        let third = serve_watch(request(&store, "watch=1", None), &cfg, CancellationToken::new());
        assert_eq!(third.status(), StatusCode::OK, "a closed watch frees its slot");
    }

    #[test]
    fn start_mode_table() {
        let snap = |wait_for, end_bookmark| Start::Snapshot { wait_for, end_bookmark };
        assert_eq!(start_mode(None, Some(true), Some(7)), snap(Some(7), true));
        assert_eq!(start_mode(None, Some(true), None), snap(None, true));
        assert_eq!(start_mode(Some(0), Some(true), None), snap(None, true));
        assert_eq!(start_mode(Some(5), Some(true), None), snap(Some(5), true));
        assert_eq!(start_mode(None, None, None), snap(None, false));
        assert_eq!(start_mode(Some(0), None, None), snap(None, false));
        assert_eq!(start_mode(None, Some(false), Some(9)), Start::Resume { rv: Some(9) });
        assert_eq!(start_mode(Some(0), Some(false), None), Start::Resume { rv: None });
        assert_eq!(start_mode(Some(5), None, None), Start::Resume { rv: Some(5) });
        assert_eq!(start_mode(Some(5), Some(false), None), Start::Resume { rv: Some(5) });
    }
}
