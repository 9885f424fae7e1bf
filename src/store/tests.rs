//! Store tests: edge cases of the writer, retention, eviction, index and accounting; a model-based
//! property test lives in `tests/model.rs`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::config::{MAP_ENTRY_OVERHEAD, path_copy_bytes};
use super::*;
use crate::resource::{FieldKind, Gvr, ResourceInfo};

mod model;

pub(super) fn pods_info() -> ResourceInfo {
    ResourceInfo {
        gvr: Gvr::new("", "v1", "pods"),
        kind: "Pod".into(),
        list_kind: "PodList".into(),
        namespaced: true,
        list_items_have_type_meta: false,
    }
}

/// A pod object at `rv` on `node` (spec.nodeName is extra field 0 of pods).
pub(super) fn pod(key: &str, rv: u64, node: Option<&str>) -> Arc<Object> {
    let (ns, name) = key.split_once('/').expect("namespaced key");
    let (key, ns_len) = make_key(Some(ns), name);
    let fields_len = FieldKind::Pod.extra_fields().len();
    let mut fields = vec![None; fields_len];
    fields[0] = node.map(Box::from);
    let raw = format!(
        r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"{ns}","resourceVersion":"{rv}"}}}}"#
    );
    Arc::new(Object {
        key,
        ns_len,
        uid: format!("uid-{name}").into(),
        resource_version: rv,
        labels: Box::new([(Box::from("app"), Box::from("web"))]),
        fields: fields.into(),
        body_offset: 32,
        metadata_range: 0..0,
        proto: Default::default(),
        raw: Bytes::from(raw),
    })
}

fn new_store(config: StoreConfig) -> (Arc<Store>, Writer) {
    Store::new(pods_info(), config)
}

fn keys(snapshot: &Snapshot) -> Vec<String> {
    snapshot.objects.keys().map(|k| k.to_string()).collect()
}

use EventType::{Added, Deleted, Modified};

#[test]
fn relist_bumps_generation_and_resets_watchers() {
    let (store, mut writer) = new_store(StoreConfig::default());
    assert!(!store.is_synced());
    assert_eq!(store.oldest_retained_rv(), None);
    let mut signals = store.subscribe();
    writer.replace([pod("a/x", 3, None), pod("a/y", 5, None)], 10);
    assert!(store.is_synced());
    assert_eq!(store.load().generation, 1);
    assert!(signals.try_recv().is_err(), "the initial sync resets nobody");
    writer.apply([(Added, pod("a/z", 11, None))]);
    writer.replace([pod("b/x", 20, None)], 20);
    let state = store.load();
    assert_eq!((state.generation, state.history.len(), state.history_floor), (2, 0, 20));
    assert_eq!(keys(&state.snapshot), ["b/x"]);
    assert_eq!(store.oldest_retained_rv(), Some(20));
    assert!(matches!(signals.try_recv(), Ok(Signal::Event(e)) if e.rv == 11));
    assert!(matches!(signals.try_recv(), Ok(Signal::Reset { generation: 2 })));
    assert_eq!(store.stats().relists, 1);
    assert!(store.events_after(11).is_err(), "history before the relist is gone");
}

/// A store whose writer is gone (its reflector panicked) is not served from and ends its watchers;
/// a new writer (the restarted reflector) brings it back with a full state.
#[test]
fn a_dropped_writer_takes_the_store_down_until_a_new_one_resyncs() {
    let (store, writer) = new_store(StoreConfig::default());
    assert!(store.reopen().is_none(), "one writer at a time");
    drop(writer);
    assert_eq!(store.load().generation, 0, "a store that never synced has nothing to take down");
    let mut writer = store.reopen().expect("the first writer is gone");
    writer.replace([pod("a/x", 3, None)], 10);
    writer.apply([(Added, pod("a/y", 11, None))]);
    let mut signals = store.subscribe();
    drop(writer);
    assert!(!store.is_synced());
    assert_eq!(store.oldest_retained_rv(), None, "exact reads are not served either");
    assert!(matches!(signals.try_recv(), Ok(Signal::Reset { generation: 2 })), "watchers end");
    let mut writer = store.reopen().expect("the writer is gone");
    assert!(store.reopen().is_none());
    writer.replace([pod("a/x", 3, None), pod("a/y", 11, None)], 12);
    assert!(store.is_synced());
    assert!(matches!(signals.try_recv(), Ok(Signal::Reset { generation: 3 })));
    assert_eq!(store.stats().relists, 1);
    assert!(store.events_after(11).is_err(), "history from before the restart is gone");
}

#[test]
fn stale_and_duplicate_events_are_skipped() {
    let (store, mut writer) = new_store(StoreConfig::default());
    writer.replace([pod("a/x", 5, None)], 10);
    let out = writer.apply([(Modified, pod("a/x", 12, None)), (Modified, pod("a/x", 12, None))]);
    assert_eq!((out.applied, out.stale), (1, 1));
    let before = store.load();
    let out = writer.apply([(Modified, pod("a/x", 9, None)), (Added, pod("a/new", 12, None))]);
    assert_eq!((out.applied, out.stale), (0, 2));
    assert!(Arc::ptr_eq(&before, &store.load()), "a batch of stale events publishes nothing");
    let stats = store.stats();
    assert_eq!((stats.events_applied, stats.events_stale), (1, 3));
}

#[test]
fn event_kinds_follow_what_the_store_holds() {
    let (store, mut writer) = new_store(StoreConfig::default());
    writer.replace([pod("a/x", 5, None)], 10);
    writer.apply([(Added, pod("a/x", 11, None)), (Modified, pod("a/y", 12, None))]);
    let (events, generation) = store.events_after(10).expect("in history");
    assert_eq!(generation, 1);
    let seen: Vec<_> =
        events.iter().map(|e| (e.rv, e.kind, e.prev.as_ref().map(|p| p.resource_version))).collect();
    assert_eq!(seen, [(11, Modified, Some(5)), (12, Added, None)]);
}

#[test]
fn deletes_of_unknown_keys_advance_the_rv_only() {
    let (store, mut writer) = new_store(StoreConfig::default());
    writer.replace([pod("a/x", 5, None)], 10);
    let out = writer.apply([(Deleted, pod("a/ghost", 13, None))]);
    assert_eq!((out.applied, out.unknown_deletes), (0, 1));
    assert_eq!(store.resource_version(), 13);
    assert_eq!(store.load().history.len(), 0);
    assert_eq!(store.snapshot_at(13).map(|s| s.rv), Some(13));
    assert_eq!(store.stats().unknown_deletes, 1);
    let out = writer.apply([(Deleted, pod("a/x", 14, None))]);
    assert_eq!(out.applied, 1);
    let (events, _) = store.events_after(13).unwrap();
    assert_eq!(events[0].kind, Deleted);
    assert_eq!(events[0].prev.as_ref().map(|p| p.resource_version), Some(5));
    assert!(store.current().objects.is_empty());
}

#[test]
fn history_floor_follows_eviction_by_count() {
    let config = StoreConfig { history_max_events: 3, ..StoreConfig::default() };
    let (store, mut writer) = new_store(config);
    writer.replace([], 10);
    assert_eq!(store.events_after(10).map(|(e, _)| e.len()), Ok(0));
    assert_eq!(store.events_after(9).err(), Some(TooOld { requested: 9, oldest: 10 }));
    for rv in [11, 13, 15, 17, 19] {
        writer.apply([(Added, pod(&format!("a/p{rv}"), rv, None))]);
    }
    let state = store.load();
    assert_eq!(state.history.len(), 3);
    assert_eq!(state.history_floor, 13, "the last evicted event");
    let rvs = |after| store.events_after(after).map(|(e, _)| e.iter().map(|e| e.rv).collect::<Vec<_>>());
    assert_eq!(rvs(13), Ok(vec![15, 17, 19]));
    assert_eq!(rvs(14), Ok(vec![15, 17, 19]));
    assert_eq!(rvs(17), Ok(vec![19]));
    assert_eq!(rvs(19), Ok(vec![]));
    // The apiserver names the RV before the oldest event held.
    assert_eq!(rvs(12), Err(TooOld { requested: 12, oldest: 14 }));
}

#[tokio::test(start_paused = true)]
async fn history_is_bounded_by_bytes_and_time() {
    let one = {
        let (store, mut writer) = new_store(StoreConfig::default());
        writer.replace([pod("a/x", 1, None)], 10);
        writer.apply([(Modified, pod("a/x", 11, None))]);
        store.stats().history_bytes
    };
    // Room for two such events (later RVs are a digit longer).
    let config = StoreConfig { history_max_bytes: one * 2 + 16, ..StoreConfig::default() };
    let (store, mut writer) = new_store(config);
    writer.replace([pod("a/x", 1, None)], 10);
    for rv in 11..20 {
        writer.apply([(Modified, pod("a/x", rv, None))]);
    }
    let stats = store.stats();
    assert_eq!(stats.history_events, 2);
    assert!(stats.history_bytes <= one * 2 + 16);
    assert_eq!(stats.history_floor, 17);

    let config = StoreConfig { history_window: Duration::from_secs(75), ..StoreConfig::default() };
    let (store, mut writer) = new_store(config);
    writer.replace([], 10);
    // The clock is tokio's, paused by the test: each `advance` is the time between two events.
    writer.apply([(Added, pod("a/1", 11, None))]);
    tokio::time::advance(Duration::from_secs(30)).await;
    writer.apply([(Added, pod("a/2", 12, None))]);
    tokio::time::advance(Duration::from_secs(46)).await;
    writer.apply([(Added, pod("a/3", 13, None))]);
    assert_eq!(store.load().history_floor, 11, "older than the window");
    // The span exported as kache_history_span_seconds: from the oldest event kept (30 s) to the newest (76 s).
    assert_eq!(store.stats().history_span, Duration::from_secs(46));
    // A bookmark also evicts by time.
    tokio::time::advance(Duration::from_secs(44)).await;
    writer.progress(14);
    let state = store.load();
    assert_eq!((state.history.len(), state.history_floor), (1, 12), "rv 13 is 44 s old");
    assert_eq!(store.events_after(12).map(|(e, _)| e.len()).ok(), Some(1));
    assert!(store.events_after(11).is_err());
}

#[test]
fn snapshots_are_served_at_and_between_event_rvs() {
    let (store, mut writer) = new_store(StoreConfig::default());
    writer.replace([pod("a/x", 5, None)], 10);
    writer.apply([(Added, pod("a/y", 12, None)), (Deleted, pod("a/x", 15, None))]);
    writer.progress(20);
    let at = |rv| store.snapshot_at(rv).map(|s| (s.rv, keys(&s)));
    assert_eq!(at(9), None, "older than every retained snapshot");
    assert_eq!(at(10), Some((10, vec!["a/x".into()])));
    assert_eq!(at(11), Some((10, vec!["a/x".into()])), "between events: the state as of 11");
    assert_eq!(at(12), Some((12, vec!["a/x".into(), "a/y".into()])));
    assert_eq!(at(14), Some((12, vec!["a/x".into(), "a/y".into()])));
    assert_eq!(at(15), Some((15, vec!["a/y".into()])));
    assert_eq!(at(19), Some((15, vec!["a/y".into()])));
    assert_eq!(at(20), Some((20, vec!["a/y".into()])));
    assert_eq!(at(21), None, "newer than the store: wait first");
    assert_eq!(store.oldest_retained_rv(), Some(10));
}

#[tokio::test(start_paused = true)]
async fn retention_is_bounded_by_count_and_time() {
    let config = StoreConfig { retain_max: 3, ..StoreConfig::default() };
    let (store, mut writer) = new_store(config);
    writer.replace([], 10);
    for rv in 11..=15 {
        writer.apply([(Added, pod(&format!("a/{rv}"), rv, None))]);
    }
    let state = store.load();
    assert_eq!(state.retained.iter().map(|s| s.rv).collect::<Vec<_>>(), [13, 14, 15]);
    assert_eq!(store.oldest_retained_rv(), Some(13));
    assert_eq!(store.snapshot_at(12).map(|s| s.rv), None);
    let expected: usize = state.retained.iter().take(2).map(|s| 96 + path_copy_bytes(s.objects.len())).sum();
    assert_eq!(state.retained_bytes, expected, "every retained snapshot but the current costs a path copy");

    let config = StoreConfig { retain_window: Duration::from_secs(75), ..StoreConfig::default() };
    let (store, mut writer) = new_store(config);
    writer.replace([], 10);
    tokio::time::advance(Duration::from_secs(100)).await;
    writer.apply([(Added, pod("a/1", 11, None))]);
    tokio::time::advance(Duration::from_secs(80)).await;
    writer.progress(12);
    let state = store.load();
    assert_eq!(
        state.retained.iter().map(|s| s.rv).collect::<Vec<_>>(),
        [12],
        "the current one is always kept"
    );
    assert_eq!(state.retained_bytes, 0);
}

#[test]
fn namespace_ranges_follow_key_order() {
    let (store, mut writer) = new_store(StoreConfig::default());
    let all = ["kube-system/a", "kube/b", "kube/c", "kube0x/d", "kube.x/e", "kubf/f"];
    writer.replace(all.iter().map(|k| pod(k, 1, None)), 10);
    let snap = store.current();
    let names =
        |it: &mut dyn Iterator<Item = &Arc<Object>>| it.map(|o| o.key.to_string()).collect::<Vec<_>>();
    assert_eq!(names(&mut snap.namespace_range("kube")), ["kube/b", "kube/c"]);
    assert_eq!(names(&mut snap.namespace_range("kube-system")), ["kube-system/a"]);
    assert_eq!(names(&mut snap.namespace_range_from("kube", "kube/c")), ["kube/c"]);
    assert_eq!(names(&mut snap.namespace_range_from("kube", "a")), ["kube/b", "kube/c"]);
    assert_eq!(names(&mut snap.namespace_range("none")), Vec::<String>::new());
    assert_eq!(names(&mut snap.range_from("kube0")), ["kube0x/d", "kubf/f"]);
    assert_eq!(keys(&snap), ["kube-system/a", "kube.x/e", "kube/b", "kube/c", "kube0x/d", "kubf/f"]);
}

#[test]
fn pods_are_indexed_by_node() {
    let (store, mut writer) = new_store(StoreConfig::default());
    assert_eq!(store.indexed_field(), Some(0));
    writer.replace([pod("a/1", 1, Some("n1")), pod("a/2", 2, None), pod("b/3", 3, Some("n1"))], 10);
    let on = |node: &str, start: &str| {
        let state = store.load();
        state.by_field(0, node, start).expect("indexed").map(|o| o.key.to_string()).collect::<Vec<_>>()
    };
    assert_eq!(on("n1", ""), ["a/1", "b/3"]);
    assert_eq!(on("n1", "a/2"), ["b/3"]);
    assert_eq!(on("", ""), ["a/2"], "unscheduled pods select with spec.nodeName=");
    writer.apply([(Modified, pod("a/2", 11, Some("n2"))), (Modified, pod("a/1", 12, Some("n1")))]);
    assert_eq!((on("n2", ""), on("", "")), (vec!["a/2".to_string()], vec![]));
    assert_eq!(
        store.load().by_field(0, "n1", "").unwrap().map(|o| o.resource_version).collect::<Vec<_>>(),
        [12, 3]
    );
    writer.apply([(Deleted, pod("b/3", 13, Some("n1")))]);
    assert_eq!(on("n1", ""), ["a/1"]);
    assert!(store.load().by_field(1, "x", "").is_none(), "other fields are not indexed");
    let nodes = ResourceInfo { kind: "Node".into(), namespaced: false, ..pods_info() };
    let (nodes, _) = Store::new(nodes, StoreConfig::default());
    assert_eq!(nodes.indexed_field(), None);
}

#[test]
fn memory_accounting_balances() {
    let config = StoreConfig { history_max_events: 4, retain_max: 3, ..StoreConfig::default() };
    let (store, mut writer) = new_store(config);
    writer.replace((0..10).map(|i| pod(&format!("a/{i}"), 1, Some("n"))), 10);
    let live: usize = store.current().objects.values().map(|o| o.heap_bytes() + MAP_ENTRY_OVERHEAD).sum();
    assert_eq!(store.stats().live_bytes, live);
    assert!(store.stats().index_bytes > 0);
    for rv in 11..40u64 {
        let key = format!("a/{}", rv % 12);
        let kind = if rv % 5 == 0 { Deleted } else { Modified };
        writer.apply([(kind, pod(&key, rv, Some(if rv % 2 == 0 { "n" } else { "m" })))]);
    }
    let state = store.load();
    let live: usize = state.snapshot.objects.values().map(|o| o.heap_bytes() + MAP_ENTRY_OVERHEAD).sum();
    assert_eq!(state.live_bytes, live);
    let index: usize =
        state.snapshot.objects.values().map(|o| 64 + o.fields[0].as_deref().unwrap_or("").len()).sum();
    assert_eq!(state.index_bytes, index);
    assert_eq!(state.retained.len(), 3);
    assert_eq!(
        state.retained_bytes,
        state.retained.iter().take(2).map(|s| 96 + path_copy_bytes(s.objects.len())).sum::<usize>()
    );
    assert!(state.history_bytes > 0 && state.memory_bytes() > state.live_bytes);
}

#[tokio::test]
async fn wait_for_reaches_or_times_out() {
    let (store, mut writer) = new_store(StoreConfig::default());
    writer.replace([], 10);
    assert_eq!(store.wait_for(10, Duration::ZERO).await, Ok(()));
    let waiter = {
        let store = store.clone();
        tokio::spawn(async move { store.wait_for(12, Duration::from_secs(30)).await })
    };
    let mut rv = store.watch_rv();
    writer.apply([(Added, pod("a/x", 11, None))]);
    writer.progress(12);
    rv.wait_for(|v| *v >= 12).await.expect("writer alive");
    assert_eq!(waiter.await.expect("task"), Ok(()));
    let err = store.wait_for(99, Duration::from_millis(5)).await;
    assert_eq!(err, Err(WaitError::TooLarge { requested: 99, current: 12 }));
}

#[test]
fn signals_arrive_in_order() {
    let (store, mut writer) = new_store(StoreConfig::default());
    writer.replace([], 10);
    let mut signals = store.subscribe();
    writer.apply([(Added, pod("a/x", 11, None)), (Added, pod("a/y", 12, None))]);
    writer.progress(15);
    writer.progress(14);
    let mut got = Vec::new();
    while let Ok(signal) = signals.try_recv() {
        got.push(match signal {
            Signal::Event(e) => format!("event {}", e.rv),
            Signal::Progress(rv) => format!("progress {rv}"),
            Signal::Reset { generation } => format!("reset {generation}"),
        });
    }
    assert_eq!(got, ["event 11", "event 12", "progress 15"]);
    assert_eq!(store.stats().progress_updates, 1);
}
