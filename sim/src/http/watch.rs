//! WATCH: start modes (staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go: Cacher.Watch), the
//! initial-events-end bookmark (cache_watcher.go: cacheWatcher.processInterval), periodic bookmarks
//! (cacher.go: Cacher.dispatchEvents), selector transitions (cache_watcher.go:
//! cacheWatcher.convertToWatchEvent), timeoutSeconds and stream framing (endpoints/handlers/get.go:
//! ListResource, handlers/watch.go: serveWatch).
//!
//! Bookmarks (periodic, and the one due 2 s before a `timeoutSeconds` deadline) carry the revision the
//! resource's watch cache has reached (`Store::cache_rev`), as the cacher's do: writes to other resources
//! move it only after a read made the cache catch up with etcd.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;

use crate::http::response::Body;
use crate::http::view::{self, View};
use crate::http::{Ctx, State};
use crate::kinds::ResourceDef;
use crate::options::{ListOptions, Rv};
use crate::status::{ApiError, TOO_LARGE_RETRY_AFTER_SECONDS};
use crate::store::{Event, EventType, Obj, ResId};

/// Frames buffered between the watch task and the connection (the apiserver's result channel).
const FRAME_BUFFER: usize = 64;
/// Default watch timeout base (`--min-request-timeout`), scaled by [1, 2).
const MIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(1800);
/// The last bookmark is due this long before the deadline (`cache_watcher.go`).
const PRE_DEADLINE_BOOKMARK: Duration = Duration::from_secs(2);

/// What a watch sees: scope, selectors and the resource.
struct Watcher {
    res: Arc<ResourceDef>,
    ns: Option<String>,
    /// A single watched name (legacy `/watch/.../NAME` paths and `GET .../NAME?watch=1`).
    name: Option<String>,
    opts: ListOptions,
    tx: mpsc::Sender<Bytes>,
    /// The highest RV delivered (or started from); bookmarks must exceed it.
    last_rv: u64,
    /// Objects, or their PartialObjectMetadata, or Tables.
    view: View,
    /// Table watches: what rows carry, and whether the next event is the first (with headers).
    include: crate::table::Include,
    table_headers: std::cell::Cell<bool>,
    /// Frames are protobuf `WatchEvent`s (length-prefixed) instead of JSON lines.
    proto: bool,
}

/// Starts a watch stream; its errors after this point are ERROR events.
pub fn watch(
    ctx: &Ctx,
    q: &crate::options::Query,
    id: ResId,
    ns: Option<&str>,
    name: Option<&str>,
    opts: ListOptions,
) -> Result<Response<Body>, ApiError> {
    // Table options are decoded before the stream starts (`serveWatch`'s `optionsForTransform`).
    let include = match ctx.view {
        View::Table(_) => crate::table::Include::from_query(q)?,
        _ => crate::table::Include::Metadata,
    };
    let (tx, mut rx) = mpsc::channel::<Bytes>(FRAME_BUFFER);
    let state = ctx.state.clone();
    let res = state.store.resource(id).clone();
    let w = Watcher {
        res,
        ns: ns.map(str::to_string),
        name: name.map(str::to_string),
        opts,
        tx,
        last_rv: 0,
        view: ctx.view,
        include,
        table_headers: std::cell::Cell::new(true),
        proto: ctx.out.proto,
    };
    let content_type = if ctx.out.proto { crate::proto::STREAM_MEDIA_TYPE } else { "application/json" };
    tokio::spawn(run(state, id, w));
    let stream =
        futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b)))));
    Ok(Response::builder()
        .status(200)
        .header(http::header::CONTENT_TYPE, content_type)
        .header("cache-control", "no-cache, private")
        .body(StreamBody::new(stream).boxed())
        .expect("static headers are valid"))
}

fn timeout_of(opts: &ListOptions) -> Option<Duration> {
    match opts.timeout_seconds {
        Some(s) if s < 0 => None,
        Some(s) if s > 0 => Some(Duration::from_secs(s as u64)),
        _ => Some(MIN_REQUEST_TIMEOUT.mul_f64(1.0 + rand::random::<f64>())),
    }
}

async fn run(state: Arc<State>, id: ResId, mut w: Watcher) {
    let Some(timeout) = timeout_of(&w.opts) else { return };
    let deadline = Instant::now() + timeout;
    let mut drop_rx = state.admin.drop_watches.subscribe();
    let mut stall_rx = state.admin.stall.subscribe();
    let store = &state.store;
    let prefix = match (&w.ns, w.res.namespaced) {
        (Some(ns), true) => format!("{ns}/"),
        _ => String::new(),
    };

    // Start: initial events, history replay, or live from now / from a future RV.
    let mut after = 0;
    let mut rx = if w.opts.send_initial_events == Some(true) {
        if let Rv::At(n) = w.opts.rv
            && !store.wait_for(n, state.cfg.wait_timeout).await
        {
            let e = ApiError::too_large(n, store.current_rev(), TOO_LARGE_RETRY_AFTER_SECONDS);
            let _ = w.tx.send(error_frame(&e, w.proto)).await;
            return;
        }
        crate::http::list::cache_catches_up(store, id, w.opts.rv);
        let (start, items) = store.snapshot_and_subscribe(id, &prefix);
        for (_, obj) in items {
            if w.matches(&obj) && !w.send_frame(w.frame("ADDED", &obj)).await {
                return;
            }
        }
        w.last_rv = start.rev;
        if w.opts.allow_bookmarks {
            let meta = json!({"resourceVersion": start.rev.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}});
            if !w.send_frame(w.bookmark(meta)).await {
                return;
            }
        }
        start.rx
    } else {
        match w.opts.rv {
            Rv::At(n) if n > store.current_rev() => {
                after = n;
                w.last_rv = n;
                store.subscribe(id).rx
            }
            Rv::At(n) => match store.history_and_subscribe(id, n) {
                Ok((start, events)) => {
                    w.last_rv = n;
                    for ev in events {
                        if !w.deliver(&ev).await {
                            return;
                        }
                    }
                    start.rx
                }
                Err(oldest) => {
                    let _ = w.tx.send(error_frame(&ApiError::watch_too_old(n, oldest), w.proto)).await;
                    return;
                }
            },
            rv => {
                // Without a resourceVersion the watch starts from a fresh cache (a consistent read).
                crate::http::list::cache_catches_up(store, id, rv);
                let start = store.subscribe(id);
                w.last_rv = start.rev;
                start.rx
            }
        }
    };

    let pre_deadline = deadline.checked_sub(PRE_DEADLINE_BOOKMARK);
    let mut next_bookmark = next_bookmark_time(&state, pre_deadline);
    let mut stalled = *stall_rx.borrow_and_update();
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return,
            _ = drop_rx.changed() => return,
            _ = w.tx.closed() => return,
            r = stall_rx.changed() => {
                if r.is_err() { return; }
                stalled = *stall_rx.borrow_and_update();
            }
            _ = sleep_until_opt(next_bookmark), if w.opts.allow_bookmarks && !stalled => {
                // What the resource's watch cache knows, not the global revision: writes to other resources
                // show only once a read made the cache catch up (see `Store::catch_up`).
                let cur = store.cache_rev(id);
                // Every event at or below `cur` is already queued: deliver them before the bookmark.
                if !w.drain(&mut rx, after).await { return; }
                if cur > w.last_rv {
                    let meta = json!({"resourceVersion": cur.to_string()});
                    if !w.send_frame(w.bookmark(meta)).await { return; }
                    w.last_rv = cur;
                }
                next_bookmark = if next_bookmark == pre_deadline { None } else { next_bookmark_time(&state, pre_deadline) };
            }
            ev = rx.recv(), if !stalled => match ev {
                Ok(ev) => if ev.rev > after && !w.deliver(&ev).await { return; },
                // Too slow: closed like the apiserver's terminated watchers; the client re-watches.
                Err(broadcast::error::RecvError::Lagged(_)) | Err(broadcast::error::RecvError::Closed) => return,
            },
        }
    }
}

fn next_bookmark_time(state: &State, pre_deadline: Option<Instant>) -> Option<Instant> {
    let next = Instant::now() + state.cfg.bookmark_interval;
    match pre_deadline {
        Some(p) if p > Instant::now() => Some(next.min(p)),
        _ => None,
    }
}

async fn sleep_until_opt(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

fn error_frame(e: &ApiError, proto: bool) -> Bytes {
    if proto {
        let status =
            crate::proto::envelope::encode_object(&e.to_status()).expect("Status has a protobuf form");
        return Bytes::from(crate::proto::envelope::watch_frame("ERROR", status));
    }
    let mut out = br#"{"type":"ERROR","object":"#.to_vec();
    out.extend(crate::json::compact(&e.to_status()));
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

fn value_frame(ty: &str, v: &Value) -> Bytes {
    let mut out = br#"{"type":""#.to_vec();
    out.extend_from_slice(ty.as_bytes());
    out.extend_from_slice(br#"","object":"#);
    out.extend(crate::json::compact(v));
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

/// `{"type":"T","object":<full object>}\n`.
fn frame(ty: &str, obj: &Obj) -> Bytes {
    let mut out = bytes::BytesMut::with_capacity(obj.item_json().len() + 96);
    out.extend_from_slice(br#"{"type":""#);
    out.extend_from_slice(ty.as_bytes());
    out.extend_from_slice(br#"","object":"#);
    obj.write_full(&mut out);
    out.extend_from_slice(b"}\n");
    out.freeze()
}

/// A DELETED object for an object leaving the selector: its previous state with the event's RV.
fn deleted_with_rv(prev: &Obj, rev: u64) -> Value {
    let mut v = prev.value();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("resourceVersion".into(), json!(rev.to_string()));
    }
    v
}

// === impl Watcher ===

impl Watcher {
    fn in_scope(&self, obj: &Obj) -> bool {
        if let Some(name) = &self.name
            && obj.name != *name
        {
            return false;
        }
        match &self.ns {
            Some(ns) if self.res.namespaced => obj.namespace == *ns,
            _ => true,
        }
    }

    fn matches(&self, obj: &Obj) -> bool {
        self.in_scope(obj) && self.opts.matches(obj)
    }

    async fn send_raw(&mut self, b: Bytes) -> bool {
        self.tx.send(b).await.is_ok()
    }

    /// Sends a frame; `None` (an event the view cannot encode) ends the watch, as the apiserver's watch
    /// encoder does when its transformation fails.
    async fn send_frame(&mut self, f: Option<Bytes>) -> bool {
        match f {
            Some(b) => self.send_raw(b).await,
            None => false,
        }
    }

    /// An event's frame in this watch's view (`as=PartialObjectMetadataList` cannot encode any event).
    fn value_frame(&self, ty: &str, v: &Value) -> Option<Bytes> {
        if self.proto {
            let v = match self.view {
                View::Object => std::borrow::Cow::Borrowed(v),
                View::Meta(version) => std::borrow::Cow::Owned(view::partial_value(v, version)),
                // Negotiation never pairs protobuf with these.
                View::MetaList(_) | View::Table(_) => return None,
            };
            // An object that does not fit its Go type ends the watch (it cannot be sent).
            let obj = crate::proto::envelope::encode_object(&v).ok()?;
            return Some(Bytes::from(crate::proto::envelope::watch_frame(ty, obj)));
        }
        match self.view {
            View::Object => Some(value_frame(ty, v)),
            View::Meta(version) => Some(value_frame(ty, &view::partial_value(v, version))),
            View::MetaList(_) => None,
            View::Table(version) => {
                // Only the first event carries the column definitions (`NoHeaders` afterwards).
                let headers = self.table_headers.replace(false);
                // A bookmark's row always carries its object's metadata (kube-apiserver 1.36 sends the
                // PartialObjectMetadata for `includeObject=None` too), so clients can read its annotation.
                let include = match (ty, self.include) {
                    ("BOOKMARK", crate::table::Include::None) => crate::table::Include::Metadata,
                    (_, include) => include,
                };
                Some(value_frame(ty, &crate::table::event_table(&self.res, v, headers, include, version)))
            }
        }
    }

    fn frame(&self, ty: &str, obj: &Obj) -> Option<Bytes> {
        match self.view {
            View::Object if !self.proto => Some(frame(ty, obj)),
            _ => self.value_frame(ty, &obj.value()),
        }
    }

    fn bookmark(&self, metadata: Value) -> Option<Bytes> {
        self.value_frame("BOOKMARK", &self.res.empty_object(metadata))
    }

    /// Sends what a change means to this watcher: ADDED/MODIFIED/DELETED per selector transition.
    async fn deliver(&mut self, ev: &Event) -> bool {
        let prev_match = ev.prev.as_deref().is_some_and(|p| self.matches(p));
        let f = match ev.ty {
            EventType::Added => self.matches(&ev.obj).then(|| self.frame("ADDED", &ev.obj)),
            EventType::Deleted => prev_match.then(|| self.frame("DELETED", &ev.obj)),
            EventType::Modified => match (prev_match, self.matches(&ev.obj)) {
                (false, true) => Some(self.frame("ADDED", &ev.obj)),
                (true, true) => Some(self.frame("MODIFIED", &ev.obj)),
                (true, false) => {
                    ev.prev.as_deref().map(|p| self.value_frame("DELETED", &deleted_with_rv(p, ev.rev)))
                }
                (false, false) => None,
            },
        };
        let ok = match f {
            Some(f) => self.send_frame(f).await,
            None => true,
        };
        if ok {
            self.last_rv = self.last_rv.max(ev.rev);
        }
        ok
    }

    /// Delivers every event already queued.
    async fn drain(&mut self, rx: &mut broadcast::Receiver<Arc<Event>>, after: u64) -> bool {
        loop {
            match rx.try_recv() {
                Ok(ev) => {
                    if ev.rev > after && !self.deliver(&ev).await {
                        return false;
                    }
                }
                Err(broadcast::error::TryRecvError::Empty) => return true,
                Err(_) => return false,
            }
        }
    }
}
