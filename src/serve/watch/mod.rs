//! Watch served from memory: start modes, watch-list, bookmarks, selector transitions and fan-out.
//!
//! Layout:
//! - [`stream`]: the per-watcher state machine ([`Watcher`]) that the HTTP body polls;
//! - [`frame`]: event lines built from stored bytes (one shared frame per store event);
//! - [`shared`]: the other per-event frames (metadata view, selector transitions), also built once;
//! - [`bookmark`]: BOOKMARK object shapes per kind and the bookmark schedule;
//! - [`filter`]: namespace/name/selector scope and enter/leave transitions;
//! - [`request`]: the entry point [`serve_watch`]: options to start mode (as the cacher's `Cacher.Watch`),
//!   selection;
//! - [`error`]: the ERROR events that end a watch before it starts (410, 504);
//! - [`stats`]: process-wide counters.
//!
//! Fan-out costs no task and no queue per watcher: every watcher's body pulls from its own receiver of a
//! broadcast ring of the store (the shared one, or the ring of the index value its selection pins: see
//! `store::dispatch`), and each event's JSON line is built once (`Event::json_frame`) and shared.

pub mod bookmark;
pub mod error;
pub mod filter;
pub mod frame;
pub mod proto;
pub mod request;
pub mod shared;
pub mod stats;
pub mod stream;

#[cfg(test)]
mod index_tests;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use tokio_util::sync::CancellationToken;

use crate::front::body::{Body, BoxError};
use crate::metrics::Metrics;
use crate::store::Store;

pub use bookmark::DEFAULT_BOOKMARK_INTERVAL;
pub use filter::{Filter, Predicate};
pub use frame::WatchView;
pub use request::{WatchRequest, try_serve_watch};
pub use stats::{WatchStats, stats};
pub use stream::{Start, WatchSpec, Watcher};

/// The apiserver's `--min-request-timeout` default: watches without timeoutSeconds live this long times a
/// random factor in [1, 2) (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/get.go: ListResource).
pub(crate) const DEFAULT_MIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(1800);
/// How long a sendInitialEvents watch at RV=N waits for the store (`blockTimeout` in
/// staging/src/k8s.io/apiserver/pkg/storage/cacher/watch_cache.go).
pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(3);
/// Per-resource watcher cap: far above what one apiserver serves for a resource, low enough that memory
/// stays bounded (each idle watcher costs about a kilobyte here, plus its connection).
pub(crate) const DEFAULT_MAX_WATCHERS_PER_RESOURCE: usize = 100_000;

/// Watch tunables.
#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// Period of bookmarks for clients that allow them (the apiserver's `defaultBookmarkFrequency`, 60 s).
    pub bookmark_interval: Duration,
    /// Base lifetime of a watch without timeoutSeconds; each watch gets it × a random factor in [1, 2).
    pub default_timeout: Duration,
    pub max_watchers_per_resource: usize,
    /// How long a sendInitialEvents watch at RV=N waits for the store before its 504 ERROR event.
    pub wait_timeout: Duration,
    /// Indexed dispatch (`store::dispatch`): a watcher whose selection pins a name, pods' node or a
    /// namespace is woken only by events that can concern it. Off (`--watch-index=false`), every watcher
    /// is woken by every event and filters it itself (the behaviour before indexing; for comparison).
    pub indexed: bool,
}

impl Default for WatchConfig {
    fn default() -> Self {
        Self {
            bookmark_interval: DEFAULT_BOOKMARK_INTERVAL,
            default_timeout: DEFAULT_MIN_REQUEST_TIMEOUT,
            max_watchers_per_resource: DEFAULT_MAX_WATCHERS_PER_RESOURCE,
            wait_timeout: DEFAULT_WAIT_TIMEOUT,
            indexed: true,
        }
    }
}

impl WatchConfig {
    /// The lifetime of one watch: `timeoutSeconds` when set and non-zero (negative means already expired),
    /// otherwise the default with jitter, like `handlers/get.go`.
    pub fn lifetime(&self, timeout_seconds: Option<i64>) -> Duration {
        match timeout_seconds {
            Some(secs) if secs != 0 => Duration::from_secs(secs.max(0).unsigned_abs()),
            _ => self.default_timeout.mul_f64(1.0 + rand::random::<f64>()),
        }
    }
}

/// The streaming 200 response of one watcher. Subscribes to the store immediately.
pub fn respond(
    metrics: &Metrics,
    store: Arc<Store>,
    spec: WatchSpec,
    shutdown: CancellationToken,
) -> Response<Body> {
    respond_watcher(Watcher::new(metrics, store, spec, shutdown))
}

/// The streaming 200 response of a watcher already built.
pub(crate) fn respond_watcher(watcher: Watcher) -> Response<Body> {
    // JSON watches are `application/json` even when the client asked for `;stream=watch`; other media
    // types get `;stream=watch` appended (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/watch.go:
    // serveWatch).
    let content_type =
        if watcher.is_proto() { crate::codec::proto::STREAM_MEDIA_TYPE } else { "application/json" };
    let mut response = Response::new(watcher_body(watcher));
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Every apiserver response carries it (`filters.WithCacheControl`), watches included.
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    response
}

/// The body that pulls frames from the watcher: one data frame per chunk, flushed by hyper as it goes.
pub(crate) fn watcher_body(watcher: Watcher) -> Body {
    let frames = futures_util::stream::unfold(watcher, |mut watcher| async move {
        let chunk = watcher.next_frame().await?;
        Some((Ok::<_, BoxError>(Frame::data(chunk)), watcher))
    });
    StreamBody::new(frames).boxed()
}

/// Whether a new watcher of `store` would exceed the per-resource cap (counted as a rejection when so).
pub(crate) fn over_limit(store: &Store, cfg: &WatchConfig, metrics: &Metrics) -> bool {
    let over = store.subscribers() >= cfg.max_watchers_per_resource;
    if over {
        stats::record_rejected(metrics);
    }
    over
}
