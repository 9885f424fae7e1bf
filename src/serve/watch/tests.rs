//! Watcher tests against a store filled through its writer (no network). Time is paused where timers
//! matter, so bookmark and deadline behaviour is exact and no test sleeps.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::resource::{Gvr, ResourceInfo};
use crate::serve::watch::stream::Matched;
use crate::store::{EventType, Object, StoreConfig, Writer};

const SECOND: Duration = Duration::from_secs(1);

pub(super) fn pods() -> ResourceInfo {
    ResourceInfo {
        gvr: Gvr::new("", "v1", "pods"),
        kind: "Pod".into(),
        list_kind: "PodList".into(),
        namespaced: true,
        list_items_have_type_meta: false,
    }
}

/// A pod as the upstream would send it, with the ingest fields filled in.
fn pod(ns: &str, name: &str, rv: u64, app: &str) -> Arc<Object> {
    let raw = format!(
        concat!(
            r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"{ns}","#,
            r#""resourceVersion":"{rv}","labels":{{"app":"{app}"}}}},"spec":{{"containers":[]}},"status":{{}}}}"#
        ),
        name = name,
        ns = ns,
        rv = rv,
        app = app
    );
    let raw = Bytes::from(raw);
    let meta = frame::top_level_member(&raw, b"metadata").expect("metadata");
    let (key, ns_len) = crate::store::make_key(Some(ns), name);
    Arc::new(Object {
        key,
        ns_len,
        uid: format!("uid-{ns}-{name}").into(),
        resource_version: rv,
        labels: Box::new([("app".into(), app.into())]),
        fields: Box::new([]),
        raw,
        body_offset: 1,
        metadata_range: meta.start as u32..meta.end as u32,
        proto: Default::default(),
    })
}

fn store_with(capacity: usize) -> (Arc<Store>, Writer) {
    let config = StoreConfig { broadcast_capacity: capacity, ..StoreConfig::default() };
    Store::new(pods(), config)
}

/// A store synced at RV 10 with pods a (rv 3), b (rv 5) in ns1 and c (rv 10) in ns2.
fn synced() -> (Arc<Store>, Writer) {
    let (store, mut writer) = store_with(64);
    writer.replace([pod("ns1", "a", 3, "web"), pod("ns1", "b", 5, "db"), pod("ns2", "c", 10, "web")], 10);
    (store, writer)
}

fn spec(start: Start) -> WatchSpec {
    WatchSpec {
        start,
        filter: Filter::default(),
        view: WatchView::Full,
        bookmarks: true,
        timeout: Duration::from_secs(600),
        bookmark_interval: Duration::from_secs(60),
        wait_timeout: Duration::from_secs(3),
        indexed: true,
        proto: None,
        matched: None,
        frames: Arc::default(),
    }
}

const WATCH_LIST: Start = Start::Snapshot { wait_for: None, end_bookmark: true };

/// One parsed event line.
#[derive(Debug, Clone, PartialEq)]
struct Ev {
    kind: String,
    name: Option<String>,
    rv: String,
    annotated: bool,
}

fn parse(chunk: &[u8]) -> Vec<Ev> {
    assert_eq!(chunk.last(), Some(&b'\n'), "every chunk ends a line: {:?}", String::from_utf8_lossy(chunk));
    chunk
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|line| {
            let v: Value = serde_json::from_slice(line).expect("event line is JSON");
            let meta = &v["object"]["metadata"];
            Ev {
                kind: v["type"].as_str().expect("type").to_owned(),
                name: meta["name"].as_str().map(str::to_owned),
                rv: meta["resourceVersion"].as_str().unwrap_or_default().to_owned(),
                annotated: meta["annotations"]["k8s.io/initial-events-end"] == "true",
            }
        })
        .collect()
}

fn ev(kind: &str, name: Option<&str>, rv: u64) -> Ev {
    Ev { kind: kind.into(), name: name.map(str::to_owned), rv: rv.to_string(), annotated: false }
}

/// Reads events until `n` have arrived (chunks may hold several).
async fn take(w: &mut Watcher, n: usize) -> Vec<Ev> {
    let mut out = Vec::new();
    while out.len() < n {
        let chunk = w.next_frame().await.unwrap_or_else(|| panic!("stream ended after {out:?}"));
        out.extend(parse(&chunk));
    }
    assert_eq!(out.len(), n, "more events than expected: {out:?}");
    out
}

/// Reads everything until the stream ends.
async fn drain(w: &mut Watcher) -> Vec<Ev> {
    let mut out = Vec::new();
    while let Some(chunk) = w.next_frame().await {
        out.extend(parse(&chunk));
    }
    out
}

fn watcher(store: &Arc<Store>, spec: WatchSpec) -> Watcher {
    watcher_in(&Metrics::default(), store, spec)
}

/// A watcher counting into `metrics` (tests that read the watch counters own their instance).
fn watcher_in(metrics: &Metrics, store: &Arc<Store>, spec: WatchSpec) -> Watcher {
    Watcher::new(metrics, store.clone(), spec, CancellationToken::new())
}

// --- start modes ---

#[tokio::test(start_paused = true)]
async fn watch_list_sends_state_in_key_order_then_end_bookmark_then_live() {
    let (store, mut writer) = synced();
    let mut w = watcher(&store, spec(WATCH_LIST));
    let initial = take(&mut w, 4).await;
    let end = Ev { annotated: true, ..ev("BOOKMARK", None, 10) };
    assert_eq!(
        initial,
        [ev("ADDED", Some("a"), 3), ev("ADDED", Some("b"), 5), ev("ADDED", Some("c"), 10), end]
    );
    writer.apply([(EventType::Added, pod("ns1", "d", 11, "web"))]);
    assert_eq!(take(&mut w, 1).await, [ev("ADDED", Some("d"), 11)]);
}

#[tokio::test(start_paused = true)]
async fn a_watch_list_from_a_matched_snapshot_sends_its_state_then_every_event_after_it() {
    let (store, mut writer) = synced();
    // The snapshot at 10, which a census at 12 matched; the store moved on before the watch started: the
    // object created and deleted again before the census (which cannot see such pairs), then an update.
    let state = store.load();
    let matched = Matched { snapshot: state.snapshot.clone(), generation: state.generation, rv: 12 };
    writer.apply([(EventType::Added, pod("ns1", "tmp", 11, "web"))]);
    writer.apply([(EventType::Deleted, pod("ns1", "tmp", 12, "web"))]);
    writer.apply([(EventType::Modified, pod("ns1", "a", 13, "db"))]);
    let mut w = watcher(&store, WatchSpec { matched: Some(matched.clone()), ..spec(WATCH_LIST) });
    let end = Ev { annotated: true, ..ev("BOOKMARK", None, 12) };
    assert_eq!(
        take(&mut w, 5).await,
        [
            ev("ADDED", Some("a"), 3),
            ev("ADDED", Some("b"), 5),
            ev("ADDED", Some("c"), 10),
            end,
            ev("MODIFIED", Some("a"), 13),
        ],
        "the matched state as the state at the census's revision, then the history after that revision"
    );
    writer.apply([(EventType::Added, pod("ns1", "d", 14, "web"))]);
    assert_eq!(take(&mut w, 1).await, [ev("ADDED", Some("d"), 14)], "then live events, once each");

    // A store rebuilt by a relist since the census has lost the matched snapshot's history: 410.
    writer.replace([pod("ns1", "a", 20, "web")], 20);
    let mut stale = watcher(&store, WatchSpec { matched: Some(matched), ..spec(WATCH_LIST) });
    let events = drain(&mut stale).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].kind, "ERROR");
}

#[tokio::test(start_paused = true)]
async fn watch_list_bookmark_shape_is_the_pod_zero_value() {
    let (store, _writer) = synced();
    let mut w = watcher(&store, WatchSpec { filter: ns("ns2"), ..spec(WATCH_LIST) });
    let chunk = w.next_frame().await.expect("initial events");
    let text = String::from_utf8(chunk.to_vec()).expect("utf8");
    let last = text.lines().last().expect("a line");
    assert_eq!(
        last,
        concat!(
            r#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"10","#,
            r#""annotations":{"k8s.io/initial-events-end":"true"}},"spec":{"containers":null},"status":{}}}"#
        )
    );
}

#[tokio::test(start_paused = true)]
async fn initial_events_without_bookmarks_have_no_end_bookmark() {
    let (store, mut writer) = synced();
    let mut w = watcher(&store, WatchSpec { bookmarks: false, ..spec(WATCH_LIST) });
    assert_eq!(take(&mut w, 3).await.iter().filter(|e| e.kind == "BOOKMARK").count(), 0);
    writer.apply([(EventType::Deleted, pod("ns1", "a", 12, "web"))]);
    assert_eq!(take(&mut w, 1).await, [ev("DELETED", Some("a"), 12)]);
}

#[tokio::test(start_paused = true)]
async fn resume_replays_history_after_rv_without_gap_or_duplicate() {
    let (store, mut writer) = synced();
    writer.apply([(EventType::Modified, pod("ns1", "a", 11, "web"))]);
    writer.apply([(EventType::Added, pod("ns1", "d", 12, "web"))]);
    // Subscribed here; the next event lands between subscribe and the history read: sent exactly once.
    let mut w = watcher(&store, spec(Start::Resume { rv: Some(11) }));
    writer.apply([(EventType::Deleted, pod("ns1", "d", 13, "web"))]);
    let got = take(&mut w, 2).await;
    assert_eq!(got, [ev("ADDED", Some("d"), 12), ev("DELETED", Some("d"), 13)]);
    writer.apply([(EventType::Modified, pod("ns2", "c", 14, "web"))]);
    assert_eq!(take(&mut w, 1).await, [ev("MODIFIED", Some("c"), 14)]);
}

#[tokio::test(start_paused = true)]
async fn start_anywhere_sends_only_live_events() {
    let (store, mut writer) = synced();
    let mut w = watcher(&store, spec(Start::Resume { rv: None }));
    writer.apply([(EventType::Added, pod("ns1", "d", 11, "web"))]);
    assert_eq!(take(&mut w, 1).await, [ev("ADDED", Some("d"), 11)]);
}

#[tokio::test(start_paused = true)]
async fn too_old_rv_gets_410_then_end() {
    let (store, _writer) = synced();
    let metrics = Metrics::new();
    let mut w = watcher_in(&metrics, &store, spec(Start::Resume { rv: Some(3) }));
    let chunk = w.next_frame().await.expect("error event");
    assert_eq!(
        &chunk[..],
        concat!(
            r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","#,
            r#""message":"too old resource version: 3 (10)","reason":"Expired","code":410}}"#,
            "\n"
        )
        .as_bytes()
    );
    assert!(w.next_frame().await.is_none());
    assert_eq!(stats(&metrics).expired, 1, "counted once, in this kache's metrics");
}

#[tokio::test(start_paused = true)]
async fn future_rv_waits_for_later_events_only() {
    let (store, mut writer) = synced();
    let mut w = watcher(&store, spec(Start::Resume { rv: Some(12) }));
    writer.apply([(EventType::Added, pod("ns1", "d", 11, "web"))]);
    writer.apply([(EventType::Added, pod("ns1", "e", 12, "web"))]);
    writer.apply([(EventType::Added, pod("ns1", "f", 13, "web"))]);
    assert_eq!(take(&mut w, 1).await, [ev("ADDED", Some("f"), 13)]);
}

#[tokio::test(start_paused = true)]
async fn watch_list_at_future_rv_waits_for_the_store() {
    let (store, mut writer) = synced();
    let mut w = watcher(&store, spec(Start::Snapshot { wait_for: Some(11), end_bookmark: true }));
    let reader = tokio::spawn(async move { take(&mut w, 5).await });
    tokio::task::yield_now().await;
    writer.apply([(EventType::Added, pod("ns1", "d", 11, "web"))]);
    let got = reader.await.expect("reader");
    let names: Vec<_> = got[..4].iter().map(|e| e.name.as_deref().expect("name")).collect();
    assert_eq!(names, ["a", "b", "d", "c"], "key order: ns1/d sorts before ns2/c");
    assert_eq!(got[4], Ev { annotated: true, ..ev("BOOKMARK", None, 11) });
}

#[tokio::test(start_paused = true)]
async fn watch_list_at_unreached_rv_gets_504_after_the_wait() {
    let (store, _writer) = synced();
    let mut w = watcher(&store, spec(Start::Snapshot { wait_for: Some(50), end_bookmark: true }));
    let started = tokio::time::Instant::now();
    let chunk = w.next_frame().await.expect("error event");
    assert!(started.elapsed() >= Duration::from_secs(3), "waited the wait timeout first");
    let v: Value = serde_json::from_slice(&chunk).expect("json");
    assert_eq!(v["type"], "ERROR");
    assert_eq!(v["object"]["code"], 504);
    assert_eq!(v["object"]["message"], "Timeout: Too large resource version: 50, current: 10");
    assert!(w.next_frame().await.is_none());
}

// --- selectors and scope ---

fn ns(namespace: &str) -> Filter {
    Filter { namespace: Some(namespace.into()), ..Filter::default() }
}

fn app(value: &'static str) -> Filter {
    Filter { predicate: Some(Arc::new(move |o: &Object| o.label("app") == Some(value))), ..Filter::default() }
}

#[tokio::test(start_paused = true)]
async fn namespace_and_label_filters_apply_to_initial_and_live_events() {
    let (store, mut writer) = synced();
    let mut by_ns = watcher(&store, WatchSpec { bookmarks: false, filter: ns("ns1"), ..spec(WATCH_LIST) });
    let mut by_label =
        watcher(&store, WatchSpec { bookmarks: false, filter: app("web"), ..spec(WATCH_LIST) });
    assert_eq!(take(&mut by_ns, 2).await, [ev("ADDED", Some("a"), 3), ev("ADDED", Some("b"), 5)]);
    assert_eq!(take(&mut by_label, 2).await, [ev("ADDED", Some("a"), 3), ev("ADDED", Some("c"), 10)]);
    writer.apply([
        (EventType::Added, pod("ns2", "x", 11, "db")),
        (EventType::Added, pod("ns1", "y", 12, "web")),
    ]);
    assert_eq!(take(&mut by_ns, 1).await, [ev("ADDED", Some("y"), 12)]);
    assert_eq!(take(&mut by_label, 1).await, [ev("ADDED", Some("y"), 12)]);
}

#[tokio::test(start_paused = true)]
async fn selector_transitions_send_added_modified_and_deleted_with_previous_object() {
    let (store, mut writer) = synced();
    let mut w = watcher(&store, WatchSpec { filter: app("web"), ..spec(Start::Resume { rv: None }) });
    // b enters (db → web), stays (web → web), leaves (web → db).
    writer.apply([(EventType::Modified, pod("ns1", "b", 11, "web"))]);
    writer.apply([(EventType::Modified, pod("ns1", "b", 12, "web"))]);
    writer.apply([(EventType::Modified, pod("ns1", "b", 13, "db"))]);
    let mut lines = Vec::new();
    while lines.len() < 3 {
        lines.push(w.next_frame().await.expect("event"));
    }
    let kinds: Vec<_> = lines.iter().flat_map(|l| parse(l)).collect();
    assert_eq!(
        kinds,
        [ev("ADDED", Some("b"), 11), ev("MODIFIED", Some("b"), 12), ev("DELETED", Some("b"), 13)]
    );
    // The DELETED object is the previous version (still labelled web) with the event's RV.
    let deleted: Value = serde_json::from_slice(&lines[2]).expect("json");
    assert_eq!(deleted["object"]["metadata"]["labels"]["app"], "web");
    assert_eq!(deleted["object"]["metadata"]["resourceVersion"], "13");
}

#[tokio::test(start_paused = true)]
async fn single_name_watch_sees_only_that_object() {
    let (store, mut writer) = synced();
    let filter =
        Filter { namespace: Some("ns1".into()), name: Some("b".into()), predicate: None, field: None };
    let mut w = watcher(&store, WatchSpec { filter, ..spec(WATCH_LIST) });
    let end = Ev { annotated: true, ..ev("BOOKMARK", None, 10) };
    assert_eq!(take(&mut w, 2).await, [ev("ADDED", Some("b"), 5), end]);
    writer.apply([
        (EventType::Modified, pod("ns1", "a", 11, "web")),
        (EventType::Modified, pod("ns1", "b", 12, "x")),
    ]);
    assert_eq!(take(&mut w, 1).await, [ev("MODIFIED", Some("b"), 12)]);
}

// --- fan-out ---

#[tokio::test(start_paused = true)]
async fn every_watcher_gets_the_same_shared_frame() {
    let (store, mut writer) = synced();
    let mut w1 = watcher(&store, spec(Start::Resume { rv: None }));
    let mut w2 = watcher(&store, spec(Start::Resume { rv: None }));
    writer.apply([(EventType::Added, pod("ns1", "d", 11, "web"))]);
    let f1 = w1.next_frame().await.expect("frame");
    let f2 = w2.next_frame().await.expect("frame");
    assert_eq!(f1, f2);
    assert_eq!(f1.as_ptr(), f2.as_ptr(), "one allocation shared by both watchers");
}

#[tokio::test(start_paused = true)]
async fn transition_and_metadata_frames_are_shared_too() {
    let (store, mut writer) = synced();
    // The watchers of one kache share its frame table.
    let one_kache = spec(Start::Resume { rv: None });
    let live = || one_kache.clone();
    let mut sel1 = watcher(&store, WatchSpec { filter: app("web"), ..live() });
    let mut sel2 = watcher(&store, WatchSpec { filter: app("web"), ..live() });
    let view = WatchView::PartialObjectMetadata;
    let mut meta1 = watcher(&store, WatchSpec { view: view.clone(), ..live() });
    let mut meta2 = watcher(&store, WatchSpec { view, ..live() });
    // b enters the app=web selection.
    writer.apply([(EventType::Modified, pod("ns1", "b", 11, "web"))]);
    let (s1, s2) = (sel1.next_frame().await.expect("s1"), sel2.next_frame().await.expect("s2"));
    assert_eq!(parse(&s1), [ev("ADDED", Some("b"), 11)]);
    assert_eq!(s1.as_ptr(), s2.as_ptr(), "one ADDED frame for both selector watchers");
    let (m1, m2) = (meta1.next_frame().await.expect("m1"), meta2.next_frame().await.expect("m2"));
    assert_eq!(parse(&m1), [ev("MODIFIED", Some("b"), 11)]);
    assert_eq!(m1.as_ptr(), m2.as_ptr(), "one metadata frame for both metadata watchers");
}

#[tokio::test(start_paused = true)]
async fn slow_watcher_is_closed_while_fast_watcher_gets_everything() {
    let (store, mut writer) = store_with(8);
    writer.replace([], 1);
    let metrics = Metrics::new();
    let mut fast = watcher_in(&metrics, &store, spec(Start::Resume { rv: None }));
    let mut slow = watcher_in(&metrics, &store, spec(Start::Resume { rv: None }));
    assert!(slow.next_frame().now_or_never_pending(), "idle watcher waits");
    let mut got = Vec::new();
    for rv in 2..=40 {
        writer.apply([(EventType::Added, pod("ns", &format!("p{rv}"), rv, "x"))]);
        got.extend(take(&mut fast, 1).await);
    }
    assert_eq!(
        got.iter().map(|e| e.rv.clone()).collect::<Vec<_>>(),
        (2..=40).map(|r| r.to_string()).collect::<Vec<_>>()
    );
    // The slow one lagged past the ring: its stream ends cleanly, without an ERROR event.
    let rest = drain(&mut slow).await;
    assert!(rest.iter().all(|e| e.kind == "ADDED"), "no ERROR on slow close: {rest:?}");
    assert!(rest.len() < 39);
    assert_eq!(stats(&metrics).closed_slow, 1, "counted once, in this kache's metrics");
}

/// A resuming watcher that falls further behind the live ring than it holds while it still replays
/// the history is closed as slow within a few dozen events, not after replaying all of it for nothing.
#[tokio::test(start_paused = true)]
async fn replaying_watcher_that_fell_behind_the_ring_is_closed_early() {
    let (store, mut writer) = store_with(8);
    writer.replace([], 1);
    for rv in 2..=1000 {
        writer.apply([(EventType::Added, pod("ns", &format!("p{rv}"), rv, "x"))]);
    }
    let metrics = Metrics::new();
    let mut w = watcher_in(&metrics, &store, spec(Start::Resume { rv: Some(1) }));
    let mut keeping_up = watcher_in(&metrics, &store, spec(Start::Resume { rv: Some(1) }));
    assert_eq!(take(&mut w, 1).await, [ev("ADDED", Some("p2"), 2)]);
    assert_eq!(take(&mut keeping_up, 1).await, [ev("ADDED", Some("p2"), 2)]);
    for rv in 1001..=1008 {
        writer.apply([(EventType::Added, pod("ns", &format!("p{rv}"), rv, "x"))]);
    }
    // Eight live events fit the ring (8): the watcher may go on.
    assert_eq!(take(&mut keeping_up, 100).await.len(), 100);
    writer.apply([(EventType::Added, pod("ns", "p1009", 1009, "x"))]);
    // The ninth overwrote one it has not received: it ends cleanly within a lag check.
    let rest = drain(&mut w).await;
    assert!(rest.len() <= 64, "{} more events replayed for nothing", rest.len());
    assert!(rest.iter().all(|e| e.kind == "ADDED"), "no ERROR on slow close");
    assert_eq!(stats(&metrics).closed_slow, 1, "counted once, in this kache's metrics");
}

#[tokio::test(start_paused = true)]
async fn relist_reset_ends_the_stream() {
    let (store, mut writer) = synced();
    let mut w = watcher(&store, spec(Start::Resume { rv: None }));
    assert!(w.next_frame().now_or_never_pending(), "started and waiting");
    writer.apply([(EventType::Added, pod("ns1", "d", 11, "web"))]);
    writer.replace([pod("ns1", "a", 20, "web")], 20);
    assert_eq!(drain(&mut w).await, [ev("ADDED", Some("d"), 11)]);
    // A later watch from before the relist gets 410.
    let mut late = watcher(&store, spec(Start::Resume { rv: Some(11) }));
    let v: Value = serde_json::from_slice(&late.next_frame().await.expect("error")).expect("json");
    assert_eq!(v["object"]["code"], 410);
}

#[tokio::test(start_paused = true)]
async fn shutdown_ends_streams_cleanly() {
    let (store, _writer) = synced();
    let token = CancellationToken::new();
    let mut w = Watcher::new(
        &crate::metrics::Metrics::default(),
        store.clone(),
        spec(Start::Resume { rv: None }),
        token.clone(),
    );
    let reader = tokio::spawn(async move { drain(&mut w).await });
    tokio::task::yield_now().await;
    token.cancel();
    assert!(reader.await.expect("reader").is_empty());
}

// --- bookmarks and lifetime ---

#[tokio::test(start_paused = true)]
async fn periodic_bookmarks_only_after_the_rv_moved_and_once_before_the_deadline() {
    let (store, mut writer) = synced();
    let spec = WatchSpec {
        timeout: Duration::from_secs(10),
        bookmark_interval: SECOND * 3,
        ..spec(Start::Resume { rv: None })
    };
    let start = tokio::time::Instant::now();
    let mut w = watcher(&store, spec);
    let reader = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(chunk) = w.next_frame().await {
            for e in parse(&chunk) {
                seen.push((start.elapsed().as_secs(), e));
            }
        }
        (seen, start.elapsed())
    });
    // Nothing moved by t=3: no bookmark. Then an event at t=4 moves the RV to 11.
    tokio::time::sleep(SECOND * 4).await;
    writer.apply([(EventType::Added, pod("ns1", "d", 11, "web"))]);
    let (seen, lifetime) = reader.await.expect("reader");
    assert_eq!(
        seen,
        [(4, ev("ADDED", Some("d"), 11)), (6, ev("BOOKMARK", None, 11)), (8, ev("BOOKMARK", None, 11))],
        "bookmarks at t=6 (periodic) and t=8 (deadline − 2 s)"
    );
    assert_eq!(lifetime, Duration::from_secs(10));
}

#[tokio::test(start_paused = true)]
async fn no_bookmarks_without_allow_watch_bookmarks() {
    let (store, mut writer) = synced();
    let spec = WatchSpec {
        bookmarks: false,
        timeout: SECOND * 10,
        bookmark_interval: SECOND,
        ..spec(Start::Resume { rv: None })
    };
    let mut w = watcher(&store, spec);
    writer.apply([(EventType::Added, pod("ns1", "d", 11, "web"))]);
    writer.progress(15);
    assert_eq!(drain(&mut w).await, [ev("ADDED", Some("d"), 11)]);
}

#[tokio::test(start_paused = true)]
async fn bookmark_carries_progress_rv() {
    let (store, mut writer) = synced();
    let spec =
        WatchSpec { timeout: SECOND * 4, bookmark_interval: SECOND, ..spec(Start::Resume { rv: None }) };
    let mut w = watcher(&store, spec);
    assert!(w.next_frame().now_or_never_pending(), "started and waiting");
    writer.progress(15);
    // At once (the store's proven revision moved), then periodic at t=1 and before the deadline at t=2.
    assert_eq!(
        drain(&mut w).await,
        [ev("BOOKMARK", None, 15), ev("BOOKMARK", None, 15), ev("BOOKMARK", None, 15)]
    );
}

/// Reads frames with the (paused) time each arrived at, until the stream ends.
async fn timed(w: &mut Watcher, start: tokio::time::Instant) -> Vec<(Duration, Ev)> {
    let mut seen = Vec::new();
    while let Some(chunk) = w.next_frame().await {
        for e in parse(&chunk) {
            seen.push((start.elapsed(), e));
        }
    }
    seen
}

#[tokio::test(start_paused = true)]
async fn progress_is_passed_on_as_a_bookmark_at_most_once_per_gap() {
    let (store, mut writer) = synced();
    // A long periodic interval: every bookmark here comes from store progress.
    let spec = WatchSpec { timeout: SECOND * 30, ..spec(Start::Resume { rv: None }) };
    let start = tokio::time::Instant::now();
    let mut w = watcher(&store, spec);
    let reader = tokio::spawn(async move { timed(&mut w, start).await });
    tokio::time::sleep(SECOND / 2).await;
    writer.progress(15);
    // Within the gap: the first is held back, the second only moves what the held-back one will carry.
    tokio::time::sleep(SECOND / 4).await;
    writer.progress(16);
    tokio::time::sleep(SECOND / 4).await;
    writer.progress(17);
    // An event after a held-back progress: the bookmark that follows carries it too.
    tokio::time::sleep(SECOND / 4).await;
    writer.apply([(EventType::Added, pod("ns1", "d", 18, "web"))]);
    // Long after the gap: at once again.
    tokio::time::sleep(SECOND * 3).await;
    writer.progress(20);
    let seen = reader.await.expect("reader");
    let ms = Duration::from_millis;
    assert_eq!(
        seen,
        [
            (ms(500), ev("BOOKMARK", None, 15)),
            (ms(1250), ev("ADDED", Some("d"), 18)),
            (ms(1500), ev("BOOKMARK", None, 18)),
            (ms(4250), ev("BOOKMARK", None, 20)),
            // The pre-deadline bookmark (t = 30 − 2 s).
            (SECOND * 28, ev("BOOKMARK", None, 20)),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn progress_bookmarks_never_run_ahead_of_events_and_need_allow_watch_bookmarks() {
    let (store, mut writer) = synced();
    let mut w = watcher(&store, WatchSpec { timeout: SECOND * 30, ..spec(Start::Resume { rv: Some(10) }) });
    let mut quiet = watcher(
        &store,
        WatchSpec { bookmarks: false, timeout: SECOND * 3, ..spec(Start::Resume { rv: None }) },
    );
    writer.apply([(EventType::Added, pod("ns1", "d", 11, "web"))]);
    writer.progress(12);
    assert_eq!(take(&mut w, 2).await, [ev("ADDED", Some("d"), 11), ev("BOOKMARK", None, 12)]);
    assert_eq!(drain(&mut quiet).await, [ev("ADDED", Some("d"), 11)]);
    // A watch-list's end bookmark counts for the rate bound: progress right after it waits for the gap.
    let start = tokio::time::Instant::now();
    let mut list = watcher(&store, WatchSpec { timeout: SECOND * 4, ..spec(WATCH_LIST) });
    let initial = take(&mut list, 5).await;
    assert_eq!(initial[4], Ev { annotated: true, ..ev("BOOKMARK", None, 12) });
    writer.progress(13);
    // One bookmark at t=1 serves the periodic one due then too; the last comes before the deadline.
    assert_eq!(
        timed(&mut list, start).await,
        [(SECOND, ev("BOOKMARK", None, 13)), (SECOND * 2, ev("BOOKMARK", None, 13))]
    );
}

#[tokio::test(start_paused = true)]
async fn zero_lifetime_ends_at_once() {
    let (store, _writer) = synced();
    let mut w = watcher(&store, WatchSpec { timeout: Duration::ZERO, ..spec(WATCH_LIST) });
    assert!(w.next_frame().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn absurd_timeout_does_not_overflow() {
    let (store, mut writer) = synced();
    let lifetime = WatchConfig::default().lifetime(Some(i64::MAX));
    let mut w = watcher(&store, WatchSpec { timeout: lifetime, ..spec(Start::Resume { rv: None }) });
    writer.apply([(EventType::Added, pod("ns1", "d", 11, "web"))]);
    assert_eq!(take(&mut w, 1).await, [ev("ADDED", Some("d"), 11)]);
    let _ = watcher(&store, WatchSpec { timeout: Duration::MAX, ..spec(Start::Resume { rv: None }) });
}

#[test]
fn lifetime_uses_timeout_seconds_or_jittered_default() {
    let cfg = WatchConfig::default();
    assert_eq!(cfg.lifetime(Some(30)), Duration::from_secs(30));
    assert_eq!(cfg.lifetime(Some(-5)), Duration::ZERO);
    for _ in 0..100 {
        let d = cfg.lifetime(None);
        assert!(d >= Duration::from_secs(1800) && d < Duration::from_secs(3600), "{d:?}");
        let d = cfg.lifetime(Some(0));
        assert!(d >= Duration::from_secs(1800) && d < Duration::from_secs(3600), "{d:?}");
    }
}

// --- views and HTTP ---

#[tokio::test(start_paused = true)]
async fn partial_object_metadata_view() {
    let (store, mut writer) = synced();
    let view = WatchView::PartialObjectMetadata;
    let mut w = watcher(&store, WatchSpec { view, filter: ns("ns2"), ..spec(WATCH_LIST) });
    let chunk = w.next_frame().await.expect("initial");
    let lines: Vec<Value> = chunk
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("json"))
        .collect();
    assert_eq!(lines[0]["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(lines[0]["object"]["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(lines[0]["object"]["metadata"]["name"], "c");
    assert!(lines[0]["object"].get("spec").is_none());
    assert_eq!(lines[1]["object"]["kind"], "PartialObjectMetadata");
    writer.apply([(EventType::Modified, pod("ns2", "c", 11, "web"))]);
    let v: Value = serde_json::from_slice(&w.next_frame().await.expect("live")).expect("json");
    assert_eq!(v["type"], "MODIFIED");
    assert_eq!(v["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(v["object"]["metadata"]["resourceVersion"], "11");
}

#[tokio::test(start_paused = true)]
async fn response_is_a_streaming_json_200() {
    use http_body_util::BodyExt;
    let (store, mut writer) = synced();
    let mut response = respond(
        &crate::metrics::Metrics::default(),
        store.clone(),
        spec(Start::Resume { rv: None }),
        CancellationToken::new(),
    );
    assert_eq!(response.status(), http::StatusCode::OK);
    assert_eq!(response.headers()[http::header::CONTENT_TYPE], "application/json");
    // As on every apiserver response (the real apiserver's watches carry it: tests/it/real_apiserver.rs).
    assert_eq!(response.headers()[http::header::CACHE_CONTROL], "no-cache, private");
    writer.apply([(EventType::Added, pod("ns1", "d", 11, "web"))]);
    let frame = response.body_mut().frame().await.expect("a frame").expect("no error");
    let data = frame.into_data().expect("data frame");
    assert_eq!(parse(&data), [ev("ADDED", Some("d"), 11)]);
}

#[tokio::test(start_paused = true)]
async fn large_initial_state_is_batched_and_complete() {
    let (store, mut writer) = store_with(64);
    let objects: Vec<_> = (0..3000).map(|i| pod("ns", &format!("p{i:05}"), 1 + i, "x")).collect();
    writer.replace(objects, 3000);
    let mut w = watcher(&store, spec(WATCH_LIST));
    let mut events = Vec::new();
    let mut chunks = 0;
    while events.last().is_none_or(|e: &Ev| e.kind != "BOOKMARK") {
        events.extend(parse(&w.next_frame().await.expect("chunk")));
        chunks += 1;
    }
    assert_eq!(events.len(), 3001);
    assert!(chunks > 1 && chunks < 100, "batched into frames: {chunks}");
    let names: Vec<_> = events[..3000].iter().map(|e| e.name.clone().expect("name")).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
}

trait NowOrNeverPending {
    fn now_or_never_pending(self) -> bool;
}

impl<F: std::future::Future> NowOrNeverPending for F {
    /// Polls once; true when the future is still pending.
    fn now_or_never_pending(self) -> bool {
        futures_util::FutureExt::now_or_never(self).is_none()
    }
}

// --- event-sequence checker under churn ---

mod churn {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeMap;

    /// One upstream change as the model saw it.
    struct Change {
        rv: u64,
        kind: EventType,
        ns: String,
        name: String,
        app: String,
        prev_app: Option<String>,
    }

    #[derive(Clone)]
    struct Selection {
        ns: Option<&'static str>,
        app: Option<&'static str>,
    }

    impl Selection {
        fn filter(&self) -> Filter {
            let predicate: Option<Predicate> = self.app.map(|want| {
                let p: Predicate = Arc::new(move |o: &Object| o.label("app") == Some(want));
                p
            });
            Filter { namespace: self.ns.map(str::to_owned), name: None, predicate, field: None }
        }

        fn selects(&self, ns: &str, app: &str) -> bool {
            self.ns.is_none_or(|n| n == ns) && self.app.is_none_or(|a| a == app)
        }

        /// What the apiserver sends this selection for the history after `after` (the transition table).
        fn expected(&self, history: &[Change], after: u64) -> Vec<Ev> {
            let mut out = Vec::new();
            for c in history.iter().filter(|c| c.rv > after) {
                let cur = c.kind != EventType::Deleted && self.selects(&c.ns, &c.app);
                let prev = c.prev_app.as_deref().is_some_and(|p| self.selects(&c.ns, p));
                let kind = match (prev, cur) {
                    (false, false) => continue,
                    (true, true) => "MODIFIED",
                    (false, true) => "ADDED",
                    (true, false) => "DELETED",
                };
                out.push(ev(kind, Some(&c.name), c.rv));
            }
            out
        }

        /// What a watch-list sees when its snapshot is at `at`: the selected state in key order, the
        /// initial-events-end bookmark, then the history after `at`.
        fn expected_list(&self, history: &[Change], at: u64) -> Vec<Ev> {
            let mut state = BTreeMap::new();
            for c in history.iter().filter(|c| c.rv <= at) {
                let key = format!("{}/{}", c.ns, c.name);
                match c.kind {
                    EventType::Deleted => state.remove(&key),
                    _ => state.insert(key, (c.ns.clone(), c.name.clone(), c.app.clone(), c.rv)),
                };
            }
            let mut out: Vec<Ev> = state
                .values()
                .filter(|(ns, _, app, _)| self.selects(ns, app))
                .map(|(_, name, _, rv)| ev("ADDED", Some(name), *rv))
                .collect();
            out.push(Ev { annotated: true, ..ev("BOOKMARK", None, at) });
            out.extend(self.expected(history, at));
            out
        }
    }

    /// Applies random batches of churn; returns the history. Labels flip between two apps so objects
    /// enter and leave selections.
    fn churn(
        writer: &mut Writer,
        model: &mut BTreeMap<(String, String), String>,
        rng: &mut StdRng,
        rv: &mut u64,
    ) -> Vec<Change> {
        let mut history = Vec::new();
        let batch_len = rng.random_range(1..5);
        let mut batch = Vec::new();
        for _ in 0..batch_len {
            *rv += 1;
            let ns = ["ns1", "ns2"][rng.random_range(0..2)].to_owned();
            let name = format!("p{}", rng.random_range(0..12));
            let app = ["web", "db"][rng.random_range(0..2)].to_owned();
            let key = (ns.clone(), name.clone());
            let prev_app = model.get(&key).cloned();
            let kind = match (&prev_app, rng.random_range(0..4)) {
                (None, _) => EventType::Added,
                (Some(_), 0) => EventType::Deleted,
                (Some(_), _) => EventType::Modified,
            };
            let shown_app = if kind == EventType::Deleted { prev_app.clone().expect("exists") } else { app };
            match kind {
                EventType::Deleted => model.remove(&key),
                _ => model.insert(key, shown_app.clone()),
            };
            batch.push((kind, pod(&ns, &name, *rv, &shown_app)));
            history.push(Change { rv: *rv, kind, ns, name, app: shown_app, prev_app });
        }
        writer.apply(batch);
        history
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_watcher_sees_exactly_its_selection_of_the_history() {
        let selections = [
            Selection { ns: None, app: None },
            Selection { ns: Some("ns1"), app: None },
            Selection { ns: None, app: Some("web") },
            Selection { ns: Some("ns2"), app: Some("db") },
        ];
        for seed in 0..4u64 {
            let mut rng = StdRng::seed_from_u64(seed);
            let (store, mut writer) = store_with(1 << 14);
            writer.replace([], 1);
            let mut model = BTreeMap::new();
            let mut rv = 1;
            let mut history = Vec::new();
            for _ in 0..20 {
                history.extend(churn(&mut writer, &mut model, &mut rng, &mut rv));
            }
            // Watchers resuming from every few RVs of the history, plus start-anywhere, per selection.
            let mut readers = Vec::new();
            for sel in &selections {
                for from in [1, rv / 3, rv / 2, rv] {
                    let spec = WatchSpec {
                        filter: sel.filter(),
                        bookmarks: false,
                        ..spec(Start::Resume { rv: Some(from) })
                    };
                    let mut w = watcher(&store, spec);
                    readers.push((sel.clone(), from, tokio::spawn(async move { drain(&mut w).await })));
                }
            }
            let mut lists = Vec::new();
            for round in 0..200 {
                history.extend(churn(&mut writer, &mut model, &mut rng, &mut rv));
                if rng.random_range(0..20) == 0 {
                    tokio::task::yield_now().await;
                }
                if round % 50 == 25 {
                    for sel in &selections {
                        let spec = WatchSpec { filter: sel.filter(), ..spec(WATCH_LIST) };
                        let mut w = watcher(&store, spec);
                        lists.push((sel.clone(), rv, tokio::spawn(async move { drain(&mut w).await })));
                    }
                }
            }
            // A relist ends every stream (then each must be a prefix of its expected sequence).
            writer.replace([], rv + 1);
            for (sel, from, reader) in readers {
                let got = reader.await.expect("reader");
                let want = sel.expected(&history, from);
                assert!(
                    got.len() <= want.len() && got[..] == want[..got.len()],
                    "seed {seed} from {from}: got {} events, not a prefix of the {} expected: {:?} vs {:?}",
                    got.len(),
                    want.len(),
                    &got[..got.len().min(3)],
                    &want[..want.len().min(3)]
                );
                assert_eq!(
                    got.len(),
                    want.len(),
                    "seed {seed} from {from}: no watcher lagged, so all arrive"
                );
            }
            for (sel, at, reader) in lists {
                let got = reader.await.expect("reader");
                // A periodic bookmark may come in on a slow machine; it must never run ahead of events.
                let mut last_rv = 0;
                let initial_end = got.iter().position(|e| e.annotated).expect("initial-events-end bookmark");
                for e in &got[initial_end..] {
                    let rv: u64 = e.rv.parse().expect("rv");
                    assert!(rv >= last_rv, "seed {seed}: RVs never go back: {e:?} after {last_rv}");
                    last_rv = rv;
                }
                let got: Vec<_> = got.into_iter().filter(|e| e.kind != "BOOKMARK" || e.annotated).collect();
                assert_eq!(got, sel.expected_list(&history, at), "seed {seed}: watch-list at {at}");
            }
        }
    }
}
