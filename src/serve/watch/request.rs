//! The entry point: from a routed, validated and authorized watch request to its streaming response.

use std::sync::Arc;

use http::{HeaderValue, Response, StatusCode, header};
use tokio_util::sync::CancellationToken;

use super::filter::{Filter, Predicate};
use super::frame::WatchView;
use super::stream::{Start, WatchSpec};
use super::{WatchConfig, over_limit, respond};
use crate::body::{self, Body};
use crate::codec::status::ApiError;
use crate::serve::params::ListOptions;
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
    pub view: WatchView,
}

/// Serves a watch from memory: a 200 stream, or an error Status response when it cannot start at all.
pub fn serve_watch(req: WatchRequest, cfg: &WatchConfig, shutdown: CancellationToken) -> Response<Body> {
    let spec = match resolve(&req, cfg) {
        Ok(spec) => spec,
        Err(e) => return error_response(&e),
    };
    if over_limit(&req.store, cfg) {
        let e = ApiError::TooManyRequests {
            message: format!("too many watchers of {}, please try again later", req.store.info().gvr),
            retry_after: OVER_LIMIT_RETRY_AFTER,
        };
        return error_response(&e);
    }
    respond(req.store, spec, shutdown)
}

/// The watcher's spec: the start mode of semantics §3.2, the selection and the lifetime.
pub fn resolve(req: &WatchRequest, cfg: &WatchConfig) -> Result<WatchSpec, ApiError> {
    let rv = req.opts.watch_resource_version()?;
    let start = start_mode(rv, req.opts.send_initial_events, req.consistent_rv);
    Ok(WatchSpec {
        start,
        filter: filter(req),
        view: req.view,
        bookmarks: req.opts.allow_watch_bookmarks,
        timeout: cfg.lifetime(req.opts.timeout_seconds),
        bookmark_interval: cfg.bookmark_interval,
        wait_timeout: cfg.wait_timeout,
    })
}

/// The start-mode table (§3.2), after the legacy defaulting of §3.1 (so `send_initial_events` is `None`
/// only for RV=N, or when the WatchList gate is off).
pub fn start_mode(rv: Option<u64>, send_initial_events: Option<bool>, consistent_rv: Option<u64>) -> Start {
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
    Filter { namespace, name: req.name.clone(), predicate }
}

/// An error Status response (before the stream started), with Retry-After when the Status has one.
fn error_response(e: &ApiError) -> Response<Body> {
    let mut response = Response::new(body::full(e.to_json()));
    *response.status_mut() =
        StatusCode::from_u16(e.status_code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(secs) = e.retry_after() {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

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
