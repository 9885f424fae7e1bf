//! The reflector state machine against a scripted upstream, one transition at a time.
//!
//! Table of contents:
//! - streaming list: happy path, live events in the same batch, deletes before the bookmark
//! - streaming list rejected: 422 → list fallback; ERROR event → fallback; stream ends without bookmark → fallback
//! - paginated list: pages with continue; 410 on a continue page restarts the list
//! - watch: bookmark-only progress; closed stream → re-watch from the last RV; 410 → relist built to the side;
//!   HTTP 410 on re-watch; 5xx with Retry-After → backoff; very short watch → backoff; stall → re-watch
//! - bad bytes: invalid JSON mid-stream, object without metadata, truncated frame, oversized frame (each
//!   re-watched after a backoff), a repeating bad frame never re-watched in a tight loop
//! - registry: lazy start, probe of the list format, readiness, statuses

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use tokio::sync::mpsc;

use super::config::ReflectorConfig;
use super::machine::{Reflector, State};
use super::status::{StatusCell, SyncState};
use crate::front::body::{self, Body, BoxError};
use crate::resource::{Gvr, ResourceInfo};
use crate::store::{Store, Writer};
use crate::upstream::{BoxFuture, Transport, UpstreamError};

// === scripted upstream ===

/// One scripted answer.
pub(super) enum Reply {
    /// A complete response.
    Full { status: u16, body: String, retry_after: Option<u64>, warning: Option<&'static str> },
    /// A 200 whose body is fed by the test through the sender; it ends when the sender is dropped.
    Open(mpsc::UnboundedReceiver<Result<Bytes, BoxError>>),
    /// No response: the connection failed.
    Refused,
    /// A 200 whose body is fed by the test: `Some` chunks are data, `None` makes the transport panic (a bug
    /// in a dependency, mid-stream).
    Panicking(mpsc::UnboundedReceiver<Option<Bytes>>),
}

/// An upstream that answers requests in script order; each expected request is checked by URI substrings.
#[derive(Default)]
pub(super) struct Scripted {
    queue: Mutex<VecDeque<(Vec<&'static str>, Reply)>>,
    seen: Mutex<Vec<String>>,
}

impl Scripted {
    pub(super) fn push(&self, expect: &[&'static str], reply: Reply) {
        self.queue.lock().unwrap().push_back((expect.to_vec(), reply));
    }

    pub(super) fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }

    pub(super) fn remaining(&self) -> usize {
        self.queue.lock().unwrap().len()
    }
}

impl Transport for Scripted {
    fn send(&self, req: Request<Body>) -> BoxFuture<'_, Result<Response<Body>, UpstreamError>> {
        let uri = req.uri().to_string();
        self.seen.lock().unwrap().push(uri.clone());
        let next = self.queue.lock().unwrap().pop_front();
        Box::pin(async move {
            let Some((expect, reply)) = next else {
                // Out of script: hang like a dead upstream (the caller's timeouts apply).
                return std::future::pending().await;
            };
            for e in &expect {
                assert!(uri.contains(e), "request {uri} does not contain {e:?}");
            }
            match reply {
                Reply::Full { status, body, retry_after, warning } => {
                    let mut resp = Response::builder().status(StatusCode::from_u16(status).unwrap());
                    if let Some(s) = retry_after {
                        resp = resp.header("retry-after", s.to_string());
                    }
                    if let Some(w) = warning {
                        resp = resp.header("warning", w);
                    }
                    Ok(resp.body(body::full(body)).unwrap())
                }
                Reply::Open(rx) => {
                    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
                        rx.recv().await.map(|chunk| (chunk.map(Frame::data), rx))
                    });
                    Ok(Response::new(StreamBody::new(stream).boxed()))
                }
                Reply::Panicking(rx) => {
                    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
                        let chunk = rx.recv().await?;
                        let data = chunk.expect("scripted: the transport panics mid-stream");
                        Some((Ok::<_, BoxError>(Frame::data(data)), rx))
                    });
                    Ok(Response::new(StreamBody::new(stream).boxed()))
                }
                Reply::Refused => Err(UpstreamError::Transport(Box::new(std::io::Error::from(
                    std::io::ErrorKind::ConnectionRefused,
                )))),
            }
        })
    }
}

pub(super) fn ok(body: impl Into<String>) -> Reply {
    Reply::Full { status: 200, body: body.into(), retry_after: None, warning: None }
}

pub(super) fn status(code: u16, reason: &str, retry_after: Option<u64>) -> Reply {
    Reply::Full { status: code, body: status_json(code, reason), retry_after, warning: None }
}

/// A 200 watch body of these lines that then ends.
pub(super) fn lines(lines: &[String]) -> Reply {
    let mut body = lines.join("\n");
    body.push('\n');
    ok(body)
}

/// A 200 watch body the test keeps feeding.
pub(super) fn open() -> (Reply, mpsc::UnboundedSender<Result<Bytes, BoxError>>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (Reply::Open(rx), tx)
}

/// A 200 watch body the test keeps feeding, whose transport panics when the test sends `None`.
pub(super) fn panicking() -> (Reply, mpsc::UnboundedSender<Option<Bytes>>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (Reply::Panicking(rx), tx)
}

pub(super) fn send_lines(tx: &mpsc::UnboundedSender<Result<Bytes, BoxError>>, lines: &[String]) {
    let mut body = lines.join("\n");
    body.push('\n');
    tx.send(Ok(Bytes::from(body))).unwrap();
}

pub(super) fn status_json(code: u16, reason: &str) -> String {
    format!(
        r#"{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure","message":"scripted {code}","reason":"{reason}","code":{code}}}"#
    )
}

pub(super) fn pod(name: &str, rv: u64) -> String {
    format!(
        r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"default","uid":"u-{name}","resourceVersion":"{rv}","labels":{{"app":"x"}}}},"spec":{{"nodeName":"n1"}},"status":{{"phase":"Running"}}}}"#
    )
}

/// A pod as a built-in list item (no type meta).
pub(super) fn pod_item(name: &str, rv: u64) -> String {
    let full = pod(name, rv);
    format!("{{{}", &full[r#"{"kind":"Pod","apiVersion":"v1","#.len()..])
}

pub(super) fn ev(kind: &str, object: &str) -> String {
    format!(r#"{{"type":"{kind}","object":{object}}}"#)
}

pub(super) fn bookmark(rv: u64, end: bool) -> String {
    let ann = if end { r#","annotations":{"k8s.io/initial-events-end":"true"}"# } else { "" };
    ev(
        "BOOKMARK",
        &format!(
            r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"{ann}}},"spec":{{"containers":null}},"status":{{}}}}"#
        ),
    )
}

pub(super) fn error_event(code: u16, reason: &str) -> String {
    ev("ERROR", &status_json(code, reason))
}

pub(super) fn list_page(rv: u64, cont: Option<&str>, items: &[String]) -> String {
    let cont = cont.map(|c| format!(r#","continue":"{c}""#)).unwrap_or_default();
    format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"{cont}}},"items":[{}]}}"#,
        items.join(",")
    )
}

pub(super) fn pods_info() -> ResourceInfo {
    ResourceInfo {
        gvr: Gvr::new("", "v1", "pods"),
        kind: "Pod".into(),
        list_kind: "PodList".into(),
        namespaced: true,
        list_items_have_type_meta: false,
    }
}

// === harness ===

struct Harness {
    upstream: Arc<Scripted>,
    store: Arc<Store>,
    status: Arc<StatusCell>,
    reflector: Reflector,
}

fn harness() -> Harness {
    harness_with(ReflectorConfig::default())
}

fn harness_with(config: ReflectorConfig) -> Harness {
    let upstream = Arc::new(Scripted::default());
    let (store, writer): (Arc<Store>, Writer) = Store::new(pods_info(), config.store.clone());
    let status = Arc::new(StatusCell::new(store.info().gvr.clone(), true));
    status.set_store(store.clone());
    let reflector = Reflector::new(upstream.clone(), writer, Arc::new(config), status.clone());
    Harness { upstream, store, status, reflector }
}

impl Harness {
    async fn step(&mut self, state: State) -> State {
        self.reflector.step(state).await
    }

    fn keys(&self) -> Vec<(String, u64)> {
        self.store.current().objects.values().map(|o| (o.key.to_string(), o.resource_version)).collect()
    }
}

fn name(state: &State) -> SyncState {
    state.sync_state()
}

// === what the upstream says about the resource ===

#[tokio::test(start_paused = true)]
async fn warnings_of_whole_resource_reads_are_learned_and_follow_the_upstream() {
    let mut h = harness();
    let deprecated = r#"299 - "wardle.example.com/v1alpha1 Flunder is deprecated; use v1beta1""#;
    h.upstream.push(&["sendInitialEvents=true"], status(422, "Invalid", None));
    let state = h.step(State::Sync).await;
    let page = list_page(20, None, &[pod_item("a", 5)]);
    h.upstream.push(
        &["limit=500"],
        Reply::Full { status: 200, body: page, retry_after: None, warning: Some(deprecated) },
    );
    let state = h.step(state).await;
    assert_eq!(h.store.warnings().as_slice(), [deprecated], "learned from the list");
    // The next watch carries none (the upstream stopped deprecating): forgotten.
    h.upstream.push(&["watch=1", "resourceVersion=20"], lines(&[]));
    let _ = h.step(state).await;
    assert!(h.store.warnings().is_empty());
}

// === streaming list ===

#[tokio::test(start_paused = true)]
async fn watch_list_syncs_at_the_bookmark_and_keeps_the_stream() {
    let mut h = harness();
    let (reply, tx) = open();
    h.upstream.push(
        &["sendInitialEvents=true", "resourceVersionMatch=NotOlderThan", "allowWatchBookmarks=true"],
        reply,
    );
    let state = h.step(State::Sync).await;
    assert_eq!(name(&state), SyncState::InitialEvents);

    send_lines(&tx, &[ev("ADDED", &pod("a", 2)), ev("ADDED", &pod("b", 3))]);
    let state = h.step(state).await;
    assert_eq!(name(&state), SyncState::InitialEvents);
    assert!(!h.store.is_synced(), "nothing is published before the bookmark");

    send_lines(&tx, &[ev("ADDED", &pod("c", 4)), bookmark(10, true), ev("MODIFIED", &pod("a", 11))]);
    let state = h.step(state).await;
    let State::Watching { rv, .. } = &state else { panic!("expected Watching, got {state:?}") };
    assert_eq!(*rv, 11);
    assert!(h.store.is_synced());
    assert_eq!(
        h.keys(),
        vec![("default/a".into(), 11), ("default/b".into(), 3), ("default/c".into(), 4)],
        "the event after the bookmark in the same batch is live"
    );
    assert_eq!(h.store.resource_version(), 11);
    let obj = h.store.current().objects.get("default/a").cloned().unwrap();
    assert_eq!(obj.raw, Bytes::from(pod("a", 11)), "objects are stored as sent");
    assert_eq!(obj.label("app"), Some("x"));

    send_lines(&tx, &[ev("DELETED", &pod("b", 12))]);
    let state = h.step(state).await;
    assert!(matches!(state, State::Watching { rv: 12, .. }));
    assert_eq!(h.keys(), vec![("default/a".into(), 11), ("default/c".into(), 4)]);
    assert_eq!(h.status.snapshot().relists, 0);
}

#[tokio::test(start_paused = true)]
async fn initial_events_apply_deletes_to_the_side_state() {
    let mut h = harness();
    h.upstream.push(
        &["sendInitialEvents=true"],
        lines(&[
            ev("ADDED", &pod("a", 2)),
            ev("ADDED", &pod("b", 3)),
            ev("DELETED", &pod("a", 4)),
            bookmark(5, true),
        ]),
    );
    let mut state = State::Sync;
    while !h.store.is_synced() {
        state = h.step(state).await;
    }
    assert_eq!(h.keys(), vec![("default/b".into(), 3)]);
    assert_eq!(h.store.resource_version(), 5);
}

#[tokio::test(start_paused = true)]
async fn watch_list_rejected_falls_back_to_paginated_list() {
    let mut h = harness();
    h.upstream.push(&["sendInitialEvents=true"], status(422, "Invalid", None));
    let state = h.step(State::Sync).await;
    assert_eq!(name(&state), SyncState::Listing);

    h.upstream.push(&["limit=500"], ok(list_page(20, Some("tok1"), &[pod_item("a", 5), pod_item("b", 6)])));
    let state = h.step(state).await;
    assert_eq!(name(&state), SyncState::Listing);
    assert!(!h.store.is_synced(), "a partial list is never published");

    h.upstream.push(&["limit=500", "continue=tok1"], ok(list_page(20, None, &[pod_item("c", 7)])));
    let state = h.step(state).await;
    assert!(matches!(state, State::Resume { rv: 20 }), "{state:?}");
    assert_eq!(h.store.resource_version(), 20);
    assert_eq!(h.keys().len(), 3);
    let c = h.store.current().objects.get("default/c").cloned().unwrap();
    assert_eq!(c.raw, Bytes::from(pod("c", 7)), "type meta added to list items");

    h.upstream
        .push(&["watch=1", "resourceVersion=20", "allowWatchBookmarks=true", "timeoutSeconds="], lines(&[]));
    let state = h.step(state).await;
    assert_eq!(name(&state), SyncState::Watching);

    // Later syncs skip the streaming list.
    let state = h.step(State::Sync).await;
    assert_eq!(name(&state), SyncState::Listing);
    assert!(!h.upstream.seen().last().unwrap().contains("sendInitialEvents"));
}

#[tokio::test(start_paused = true)]
async fn watch_list_error_event_falls_back() {
    let mut h = harness();
    h.upstream.push(&["sendInitialEvents=true"], lines(&[error_event(400, "BadRequest")]));
    let state = h.step(State::Sync).await;
    let state = h.step(state).await;
    assert_eq!(name(&state), SyncState::Listing);
}

#[tokio::test(start_paused = true)]
async fn watch_list_ending_without_bookmark_falls_back() {
    let mut h = harness();
    h.upstream.push(&["sendInitialEvents=true"], lines(&[ev("ADDED", &pod("a", 2))]));
    let mut state = h.step(State::Sync).await;
    while name(&state) == SyncState::InitialEvents {
        state = h.step(state).await;
    }
    assert_eq!(name(&state), SyncState::Listing);
    assert!(!h.store.is_synced());
}

#[tokio::test(start_paused = true)]
async fn watch_list_ignored_by_the_upstream_falls_back() {
    // An old apiserver ignores sendInitialEvents: initial state, then ordinary bookmarks, never the end marker.
    let mut h = harness();
    h.upstream.push(&["sendInitialEvents=true"], lines(&[ev("ADDED", &pod("a", 2)), bookmark(3, false)]));
    let state = h.step(State::Sync).await;
    let state = h.step(state).await;
    assert_eq!(name(&state), SyncState::Listing);
    assert!(!h.store.is_synced());
    assert_eq!(h.status.snapshot().bad_frames, 0);
}

#[tokio::test(start_paused = true)]
async fn watch_list_throttled_backs_off_and_retries_it() {
    let mut h = harness();
    h.upstream.push(&["sendInitialEvents=true"], status(429, "TooManyRequests", Some(5)));
    let state = h.step(State::Sync).await;
    let State::Backoff { delay, then } = state else { panic!("expected backoff") };
    assert!(delay >= Duration::from_secs(5), "Retry-After honoured: {delay:?}");
    assert!(matches!(*then, State::Sync));
}

// === paginated list ===

#[tokio::test(start_paused = true)]
async fn expired_continue_token_restarts_the_list() {
    let mut h = harness_with(ReflectorConfig { watch_list: false, ..Default::default() });
    h.upstream.push(&["limit=500"], ok(list_page(20, Some("tok1"), &[pod_item("a", 5)])));
    h.upstream.push(&["continue=tok1"], status(410, "Expired", None));
    h.upstream.push(&["limit=500"], ok(list_page(30, None, &[pod_item("b", 25)])));
    let mut state = State::Sync;
    while !matches!(state, State::Resume { .. }) {
        state = h.step(state).await;
    }
    assert!(matches!(state, State::Resume { rv: 30 }));
    assert_eq!(h.keys(), vec![("default/b".into(), 25)], "the first attempt's pages are discarded");
    assert!(!h.upstream.seen()[2].contains("continue"));
}

#[tokio::test(start_paused = true)]
async fn list_server_error_retries_the_same_page_after_backoff() {
    let mut h = harness_with(ReflectorConfig { watch_list: false, ..Default::default() });
    h.upstream.push(&["limit=500"], ok(list_page(20, Some("tok1"), &[pod_item("a", 5)])));
    h.upstream.push(&["continue=tok1"], status(500, "InternalError", None));
    h.upstream.push(&["continue=tok1"], ok(list_page(20, None, &[pod_item("b", 6)])));
    let mut state = State::Sync;
    let mut saw_backoff = false;
    while !matches!(state, State::Resume { .. }) {
        saw_backoff |= name(&state) == SyncState::Backoff;
        state = h.step(state).await;
    }
    assert!(saw_backoff);
    assert_eq!(h.keys().len(), 2);
    assert!(h.status.snapshot().last_error.unwrap().contains("500"));
}

// === watch ===

async fn synced_watching(
    h: &mut Harness,
    rv: u64,
) -> (State, mpsc::UnboundedSender<Result<Bytes, BoxError>>) {
    let (reply, tx) = open();
    h.upstream.push(&["sendInitialEvents=true"], reply);
    let state = h.step(State::Sync).await;
    send_lines(&tx, &[ev("ADDED", &pod("a", 2)), bookmark(rv, true)]);
    let state = h.step(state).await;
    assert!(matches!(state, State::Watching { .. }), "{state:?}");
    (state, tx)
}

#[tokio::test(start_paused = true)]
async fn bookmarks_advance_the_resource_version_only() {
    let mut h = harness();
    let (state, tx) = synced_watching(&mut h, 10).await;
    let before = h.store.current().objects.clone();
    send_lines(&tx, &[bookmark(15, false)]);
    let state = h.step(state).await;
    assert!(matches!(state, State::Watching { rv: 15, .. }));
    assert_eq!(h.store.resource_version(), 15);
    assert_eq!(h.store.current().objects, before);
    assert!(h.status.snapshot().since_last_event.is_some());
}

#[tokio::test(start_paused = true)]
async fn offered_proofs_advance_a_watching_store_like_a_bookmark() {
    let mut h = harness();
    let (state, tx) = synced_watching(&mut h, 10).await;
    let before = h.store.current().objects.clone();
    // A reader proved no event in (10, 20]: applied as progress, and a re-watch would start from 20.
    h.store.offer_progress(10, 20);
    let state = h.step(state).await;
    assert!(matches!(state, State::Watching { rv: 20, .. }), "{state:?}");
    assert_eq!(h.store.resource_version(), 20);
    assert_eq!(h.store.current().objects, before);
    // A proof from a revision the store has not reached proves nothing about (20, 25]: ignored.
    h.store.offer_progress(22, 30);
    let state = h.step(state).await;
    assert!(matches!(state, State::Watching { rv: 20, .. }), "{state:?}");
    // One behind the store is a no-op; events keep flowing on the same stream.
    h.store.offer_progress(5, 15);
    let state = h.step(state).await;
    send_lines(&tx, &[ev("ADDED", &pod("b", 21))]);
    let state = h.step(state).await;
    assert!(matches!(state, State::Watching { rv: 21, .. }), "{state:?}");
    assert_eq!(h.store.resource_version(), 21);
}

#[tokio::test(start_paused = true)]
async fn closed_stream_rewatches_from_the_last_resource_version() {
    let mut h = harness();
    let (state, tx) = synced_watching(&mut h, 10).await;
    send_lines(&tx, &[ev("ADDED", &pod("b", 12))]);
    let state = h.step(state).await;
    drop(tx);
    tokio::time::advance(Duration::from_secs(5)).await;
    let state = h.step(state).await;
    assert!(matches!(state, State::Resume { rv: 12 }), "{state:?}");
    h.upstream.push(&["resourceVersion=12"], lines(&[ev("MODIFIED", &pod("b", 13))]));
    let state = h.step(state).await;
    let state = h.step(state).await;
    assert!(matches!(state, State::Watching { rv: 13, .. }));
    assert_eq!(h.status.snapshot().watch_restarts, 1);
    assert_eq!(h.status.snapshot().relists, 0, "no relist for a closed stream");
}

#[tokio::test(start_paused = true)]
async fn very_short_empty_watch_backs_off() {
    let mut h = harness();
    h.upstream.push(&["resourceVersion=7"], lines(&[]));
    let state = h.step(State::Resume { rv: 7 }).await;
    let state = h.step(state).await;
    let State::Backoff { then, .. } = state else { panic!("expected backoff, got {state:?}") };
    assert!(matches!(*then, State::Resume { rv: 7 }));
}

/// A watch that only replays what the store already has and closes at once made no progress: backed off like
/// an empty short watch, so such an upstream cannot make the reflector spin.
#[tokio::test(start_paused = true)]
async fn very_short_watch_of_stale_events_backs_off() {
    let mut h = harness();
    let (state, tx) = synced_watching(&mut h, 10).await;
    drop((state, tx));
    h.upstream.push(&["resourceVersion=10"], lines(&[ev("MODIFIED", &pod("a", 2)), bookmark(10, false)]));
    let state = h.step(State::Resume { rv: 10 }).await;
    let state = h.step(state).await;
    let state = h.step(state).await;
    let State::Backoff { then, .. } = state else { panic!("expected backoff, got {state:?}") };
    assert!(matches!(*then, State::Resume { rv: 10 }));
}

#[tokio::test(start_paused = true)]
async fn gone_mid_watch_relists_to_the_side_then_swaps() {
    let mut h = harness();
    let (state, tx) = synced_watching(&mut h, 10).await;
    send_lines(&tx, &[ev("ADDED", &pod("b", 11)), error_event(410, "Expired")]);
    let state = h.step(state).await;
    assert!(matches!(state, State::Sync), "{state:?}");
    assert_eq!(h.keys().len(), 2, "the event before the ERROR was applied");

    let (reply, tx2) = open();
    h.upstream.push(&["sendInitialEvents=true"], reply);
    let state = h.step(state).await;
    send_lines(&tx2, &[ev("ADDED", &pod("z", 40))]);
    let state = h.step(state).await;
    assert_eq!(h.keys().len(), 2, "old state keeps serving during the relist");
    let generation = h.store.load().generation;
    send_lines(&tx2, &[bookmark(50, true)]);
    let state = h.step(state).await;
    assert!(matches!(state, State::Watching { rv: 50, .. }));
    assert_eq!(h.keys(), vec![("default/z".into(), 40)]);
    assert_eq!(h.store.load().generation, generation + 1, "one swap");
    assert_eq!(h.status.snapshot().relists, 1);
}

#[tokio::test(start_paused = true)]
async fn gone_on_rewatch_relists() {
    let mut h = harness();
    h.upstream.push(&["resourceVersion=7"], status(410, "Expired", None));
    let state = h.step(State::Resume { rv: 7 }).await;
    assert!(matches!(state, State::Sync));
}

#[tokio::test(start_paused = true)]
async fn server_errors_back_off_honouring_retry_after() {
    let mut h = harness();
    h.upstream.push(&["resourceVersion=7"], status(503, "ServiceUnavailable", Some(20)));
    let state = h.step(State::Resume { rv: 7 }).await;
    let State::Backoff { delay, then } = state else { panic!("expected backoff") };
    assert!(delay >= Duration::from_secs(20), "{delay:?}");
    assert!(matches!(*then, State::Resume { rv: 7 }));
    let start = tokio::time::Instant::now();
    let state = h.step(State::Backoff { delay, then }).await;
    assert!(start.elapsed() >= Duration::from_secs(20));
    assert!(matches!(state, State::Resume { rv: 7 }));

    h.upstream.push(&["resourceVersion=7"], Reply::Refused);
    let state = h.step(state).await;
    assert_eq!(name(&state), SyncState::Backoff);
}

#[tokio::test(start_paused = true)]
async fn error_event_other_than_gone_backs_off_and_rewatches() {
    let mut h = harness();
    let (state, tx) = synced_watching(&mut h, 10).await;
    send_lines(&tx, &[error_event(500, "InternalError")]);
    let state = h.step(state).await;
    let State::Backoff { then, .. } = state else { panic!("expected backoff, got {state:?}") };
    assert!(matches!(*then, State::Resume { rv: 10 }));
}

#[tokio::test(start_paused = true)]
async fn stalled_watch_is_reopened() {
    let mut h =
        harness_with(ReflectorConfig { stall_timeout: Duration::from_secs(150), ..Default::default() });
    let (state, tx) = synced_watching(&mut h, 10).await;
    let start = tokio::time::Instant::now();
    let state = h.step(state).await;
    assert!(matches!(state, State::Resume { rv: 10 }), "{state:?}");
    assert!(start.elapsed() >= Duration::from_secs(150));
    assert_eq!(h.status.snapshot().watch_restarts, 1);
    drop(tx);
}

// === bad bytes ===

/// The state a backoff leads to (fails unless `state` is a backoff).
fn backed_off(state: State) -> State {
    let State::Backoff { delay, then } = state else { panic!("expected a backoff, got {state:?}") };
    assert!(delay >= ReflectorConfig::default().backoff_initial, "{delay:?}");
    *then
}

#[tokio::test(start_paused = true)]
async fn invalid_json_mid_stream_rewatches_from_last_good_rv() {
    let mut h = harness();
    let (state, tx) = synced_watching(&mut h, 10).await;
    send_lines(
        &tx,
        &[
            ev("ADDED", &pod("b", 11)),
            "{\"type\":\"ADDED\",\"object\":{\"kind\":".into(),
            ev("ADDED", &pod("c", 12)),
        ],
    );
    let state = backed_off(h.step(state).await);
    assert!(matches!(state, State::Resume { rv: 11 }), "{state:?}");
    assert_eq!(h.keys(), vec![("default/a".into(), 2), ("default/b".into(), 11)]);
    assert_eq!(h.status.snapshot().bad_frames, 1);
}

#[tokio::test(start_paused = true)]
async fn object_without_metadata_is_skipped_and_counted() {
    let mut h = harness();
    let (state, tx) = synced_watching(&mut h, 10).await;
    send_lines(
        &tx,
        &[
            ev("ADDED", r#"{"kind":"Pod","apiVersion":"v1","spec":{}}"#),
            ev(
                "ADDED",
                r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"x","resourceVersion":"abc"}}"#,
            ),
            ev("ADDED", &pod("b", 11)),
        ],
    );
    let state = h.step(state).await;
    assert!(matches!(state, State::Watching { rv: 11, .. }), "{state:?}");
    assert_eq!(h.keys().len(), 2);
    assert_eq!(h.status.snapshot().bad_frames, 2);
}

#[tokio::test(start_paused = true)]
async fn truncated_final_frame_is_counted_and_rewatched() {
    let mut h = harness();
    let (state, tx) = synced_watching(&mut h, 10).await;
    let mut chunk = ev("ADDED", &pod("b", 11));
    chunk.push('\n');
    chunk.push_str(&ev("ADDED", &pod("c", 12))[..40]);
    tx.send(Ok(Bytes::from(chunk))).unwrap();
    drop(tx);
    let mut state = h.step(state).await;
    while matches!(state, State::Watching { .. }) {
        state = h.step(state).await;
    }
    let state = backed_off(state);
    assert!(matches!(state, State::Resume { rv: 11 }), "{state:?}");
    assert_eq!(h.status.snapshot().bad_frames, 1);
    assert_eq!(h.keys().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn oversized_frame_is_rejected_without_buffering_more() {
    let mut h = harness_with(ReflectorConfig { max_frame_bytes: 1024, ..Default::default() });
    let (state, tx) = synced_watching(&mut h, 10).await;
    tx.send(Ok(Bytes::from(vec![b'x'; 4096]))).unwrap();
    let state = backed_off(h.step(state).await);
    assert!(matches!(state, State::Resume { rv: 10 }), "{state:?}");
    assert_eq!(h.status.snapshot().bad_frames, 1);
}

#[tokio::test(start_paused = true)]
async fn garbage_list_body_backs_off() {
    let mut h = harness_with(ReflectorConfig { watch_list: false, ..Default::default() });
    h.upstream.push(&["limit=500"], ok("<html>proxy error</html>"));
    let state = h.step(State::Sync).await;
    let state = h.step(state).await;
    assert_eq!(name(&state), SyncState::Backoff);
    assert_eq!(h.status.snapshot().bad_frames, 1);
    assert!(!h.store.is_synced());
}

#[tokio::test(start_paused = true)]
async fn many_ready_events_are_applied_in_one_batch() {
    let mut h = harness();
    let (state, tx) = synced_watching(&mut h, 10).await;
    let events: Vec<String> = (0..50).map(|i| ev("ADDED", &pod(&format!("p{i}"), 11 + i))).collect();
    send_lines(&tx, &events);
    let mut rv_rx = h.store.watch_rv();
    rv_rx.borrow_and_update();
    let state = h.step(state).await;
    assert!(matches!(state, State::Watching { rv: 60, .. }), "{state:?}");
    assert_eq!(h.keys().len(), 51);
    assert_eq!(h.status.snapshot().events_applied, 50);
    assert_eq!(h.upstream.remaining(), 0);
}

/// An upstream that sends the same unparseable frame on every watch from an RV used to be re-watched
/// at once, in a tight loop. Now each broken stream is counted and backed off (800 ms doubling to 30 s), so
/// in a minute the upstream sees a handful of watches, never hundreds.
#[tokio::test(start_paused = true)]
async fn repeating_bad_frame_is_rewatched_with_backoff_not_in_a_loop() {
    let mut h = harness();
    let (watching, tx) = synced_watching(&mut h, 10).await;
    drop((watching, tx));
    let broken = "{\"type\":\"ADDED\",\"object\":{\"kind\":".to_owned();
    for _ in 0..200 {
        h.upstream.push(&["watch=1", "resourceVersion=10"], lines(std::slice::from_ref(&broken)));
    }
    let start = tokio::time::Instant::now();
    let mut state = State::Resume { rv: 10 };
    while start.elapsed() < Duration::from_secs(60) {
        state = h.step(state).await;
    }
    let watches = h.upstream.seen().iter().filter(|u| !u.contains("sendInitialEvents")).count();
    // Delays are in [d, 2d) for d = 0.8, 1.6, 3.2, 6.4, 12.8, 25.6 s: 6 or 7 watches fit in 60 s.
    assert!((5..=8).contains(&watches), "{watches} watches in 60 s: {:?}", h.upstream.seen());
    let status = h.status.snapshot();
    assert_eq!(status.bad_frames, watches as u64, "every broken stream is counted");
    assert_eq!(status.watch_restarts, watches as u64);
    assert!(status.last_error.is_some_and(|e| !e.is_empty()));
    assert!(h.store.is_synced(), "a broken stream does not take the store down");
}
