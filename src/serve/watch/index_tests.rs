//! Indexed dispatch (`store::dispatch`) against the unindexed fan-out: the same selections, the same
//! events, byte for byte, whatever the selectors and the transitions (pods moving between nodes, relabels,
//! deletes and re-creations in other namespaces); plus the index's own bounds and bookmarks.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;
use tokio_util::sync::CancellationToken;

use super::tests::pods;
use super::*;
use crate::resource::{FieldKind, Gvr, ResourceInfo};
use crate::store::{EventType, IndexKind, Object, StoreConfig, Writer};

const NAMESPACES: [&str; 3] = ["ns0", "ns1", "ns2"];
/// "" is an unscheduled pod (what `spec.nodeName=` selects).
const NODES: [&str; 4] = ["", "n0", "n1", "n2"];
const APPS: [&str; 2] = ["web", "db"];
const NAMES: usize = 5;

fn node_field() -> usize {
    FieldKind::Pod.extra_fields().iter().position(|f| *f == "spec.nodeName").expect("pods have spec.nodeName")
}

/// A pod on `node` ("" for none) with label `app`.
fn pod(ns: &str, name: &str, rv: u64, node: &str, app: &str) -> Arc<Object> {
    let node_json = if node.is_empty() { String::new() } else { format!(r#","nodeName":"{node}""#) };
    let raw = Bytes::from(format!(
        concat!(
            r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"{ns}","#,
            r#""resourceVersion":"{rv}","labels":{{"app":"{app}"}}}},"spec":{{"containers":[]{node}}}}}"#
        ),
        name = name,
        ns = ns,
        rv = rv,
        app = app,
        node = node_json
    ));
    let meta = frame::top_level_member(&raw, b"metadata").expect("metadata");
    let (key, ns_len) = crate::store::make_key(Some(ns), name);
    let mut fields = vec![None; FieldKind::Pod.extra_fields().len()];
    if !node.is_empty() {
        fields[node_field()] = Some(node.into());
    }
    Arc::new(Object {
        key,
        ns_len,
        uid: format!("uid-{ns}-{name}-{rv}").into(),
        resource_version: rv,
        labels: Box::new([("app".into(), app.into())]),
        fields: fields.into_boxed_slice(),
        raw,
        body_offset: 1,
        metadata_range: meta.start as u32..meta.end as u32,
        proto: Default::default(),
    })
}

/// A random selection, as the request layer would build it.
#[derive(Clone, Debug)]
struct Selection {
    ns: Option<usize>,
    name: Option<usize>,
    /// `spec.nodeName=` (true) or `spec.nodeName!=` (false) a node.
    node: Option<(bool, usize)>,
    app: Option<usize>,
}

impl Selection {
    fn filter(&self) -> Filter {
        let node = self.node.map(|(eq, n)| (eq, NODES[n]));
        let app = self.app.map(|a| APPS[a]);
        let field = node_field();
        let predicate: Option<Predicate> = (node.is_some() || app.is_some()).then(|| {
            let p: Predicate = Arc::new(move |o: &Object| {
                let value = o.fields.get(field).and_then(|v| v.as_deref()).unwrap_or("");
                node.is_none_or(|(eq, want)| (value == want) == eq)
                    && app.is_none_or(|a| o.label("app") == Some(a))
            });
            p
        });
        Filter {
            namespace: self.ns.map(|n| NAMESPACES[n].to_owned()),
            name: self.name.map(|n| format!("p{n}")),
            predicate,
            field: node.filter(|(eq, _)| *eq).map(|(_, want)| want.into()),
        }
    }
}

/// One upstream change: an add or update of `ns/p{name}` (on a node, with a label), or its delete.
#[derive(Clone, Debug)]
enum Op {
    Put { ns: usize, name: usize, node: usize, app: usize },
    Delete { ns: usize, name: usize },
}

fn selection() -> impl Strategy<Value = Selection> {
    (
        proptest::option::of(0..NAMESPACES.len()),
        proptest::option::weighted(0.2, 0..NAMES),
        proptest::option::of((proptest::bool::weighted(0.8), 0..NODES.len())),
        proptest::option::weighted(0.3, 0..APPS.len()),
    )
        .prop_map(|(ns, name, node, app)| Selection { ns, name, node, app })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..NAMESPACES.len(), 0..NAMES, 0..NODES.len(), 0..APPS.len())
            .prop_map(|(ns, name, node, app)| Op::Put { ns, name, node, app }),
        1 => (0..NAMESPACES.len(), 0..NAMES).prop_map(|(ns, name)| Op::Delete { ns, name }),
    ]
}

fn spec(filter: Filter, indexed: bool) -> WatchSpec {
    WatchSpec {
        start: Start::Resume { rv: None },
        filter,
        view: WatchView::Full,
        // Events only: bookmarks' timing is not what this compares.
        bookmarks: false,
        timeout: Duration::from_secs(600),
        bookmark_interval: Duration::from_secs(60),
        wait_timeout: Duration::from_secs(3),
        indexed,
        proto: None,
        matched: None,
        frames: std::sync::Arc::default(),
    }
}

/// Applies `ops` in batches of `batch`; deletes of absent keys are skipped (the upstream has none).
fn apply(writer: &mut Writer, ops: &[Op], batch: usize, mut rv: u64) {
    let mut live = std::collections::HashSet::new();
    for (ns, name) in writer.store().current().objects.keys().map(|k| k.to_string()).filter_map(|k| {
        let (ns, name) = k.split_once('/')?;
        Some((ns.to_owned(), name.to_owned()))
    }) {
        live.insert((ns, name));
    }
    for chunk in ops.chunks(batch.max(1)) {
        let mut changes = Vec::new();
        for op in chunk {
            rv += 1;
            match *op {
                Op::Put { ns, name, node, app } => {
                    let (ns, name) = (NAMESPACES[ns], format!("p{name}"));
                    let kind = if live.insert((ns.to_owned(), name.clone())) {
                        EventType::Added
                    } else {
                        EventType::Modified
                    };
                    changes.push((kind, pod(ns, &name, rv, NODES[node], APPS[app])));
                }
                Op::Delete { ns, name } => {
                    let (ns, name) = (NAMESPACES[ns], format!("p{name}"));
                    if live.remove(&(ns.to_owned(), name.clone())) {
                        changes.push((EventType::Deleted, pod(ns, &name, rv, "", "gone")));
                    }
                }
            }
        }
        writer.apply(changes);
    }
}

/// Everything a watcher sends until its deadline (time is paused: the deadline comes as soon as every
/// task is idle, i.e. once the watcher has sent all it will).
async fn drain(mut w: Watcher) -> Vec<Bytes> {
    let mut out = Vec::new();
    while let Some(chunk) = w.next_frame().await {
        out.push(chunk);
    }
    out
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().expect("runtime")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Indexed delivery equals unindexed delivery, frame for frame, for every selection.
    #[test]
    fn indexed_delivery_equals_unindexed_delivery(
        initial in proptest::collection::vec(op(), 0..12),
        ops in proptest::collection::vec(op(), 1..40),
        selections in proptest::collection::vec(selection(), 1..10),
        batch in 1usize..4,
    ) {
        let rt = paused_runtime();
        let (indexed, unindexed) = rt.block_on(async {
            let (store, mut writer) = Store::new(pods(), StoreConfig::default());
            writer.replace([], 1);
            apply(&mut writer, &initial, 3, 1);
            let token = CancellationToken::new();
            let open = |indexed: bool| -> Vec<Watcher> {
                selections
                    .iter()
                    .map(|s| Watcher::new(&crate::metrics::Metrics::default(), store.clone(), spec(s.filter(), indexed), token.clone()))
                    .collect()
            };
            let (by_index, by_scan) = (open(true), open(false));
            let rv = store.resource_version();
            apply(&mut writer, &ops, batch, rv);
            // Drained together: they share one deadline, which the paused clock reaches once all are idle.
            let spawn = |ws: Vec<Watcher>| ws.into_iter().map(|w| tokio::spawn(drain(w))).collect::<Vec<_>>();
            let (by_index, by_scan) = (spawn(by_index), spawn(by_scan));
            let mut indexed = Vec::new();
            for h in by_index {
                indexed.push(h.await.expect("drain"));
            }
            let mut unindexed = Vec::new();
            for h in by_scan {
                unindexed.push(h.await.expect("drain"));
            }
            (indexed, unindexed)
        });
        for ((i, u), s) in indexed.iter().zip(&unindexed).zip(&selections) {
            prop_assert_eq!(i, u, "selection {:?}", s);
        }
    }
}

fn synced_with(capacity: usize) -> (Arc<Store>, Writer) {
    let config = StoreConfig { broadcast_capacity: capacity, ..StoreConfig::default() };
    let (store, mut writer) = Store::new(pods(), config);
    writer.replace([pod("ns0", "a", 1, "n0", "web"), pod("ns0", "b", 2, "n1", "web")], 2);
    (store, writer)
}

fn node_filter(node: &'static str) -> Filter {
    let field = node_field();
    Filter {
        predicate: Some(Arc::new(move |o: &Object| {
            o.fields.get(field).and_then(|v| v.as_deref()).unwrap_or("") == node
        })),
        field: Some(node.into()),
        ..Filter::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_pod_moving_off_a_node_reaches_that_nodes_watcher_as_deleted() {
    let (store, mut writer) = synced_with(64);
    let n0 = Watcher::new(
        &crate::metrics::Metrics::default(),
        store.clone(),
        spec(node_filter("n0"), true),
        CancellationToken::new(),
    );
    let n1 = Watcher::new(
        &crate::metrics::Metrics::default(),
        store.clone(),
        spec(node_filter("n1"), true),
        CancellationToken::new(),
    );
    assert_eq!(store.index_rings(), 2);
    writer.apply([(EventType::Modified, pod("ns0", "a", 3, "n1", "web"))]);
    drop(writer);
    let text = |frames: Vec<Bytes>| {
        frames.iter().map(|f| String::from_utf8_lossy(f).into_owned()).collect::<String>()
    };
    let (n0, n1) = (text(drain(n0).await), text(drain(n1).await));
    assert!(n0.starts_with(r#"{"type":"DELETED""#) && n0.contains(r#""resourceVersion":"3""#), "{n0}");
    assert!(n1.starts_with(r#"{"type":"ADDED""#) && n1.contains(r#""nodeName":"n1""#), "{n1}");
    assert_eq!(store.index_rings(), 0, "a ring goes with its last watcher");
    assert_eq!(store.subscribers(), 0);
}

#[tokio::test(start_paused = true)]
async fn events_of_other_nodes_neither_wake_nor_cut_off_a_node_watcher() {
    // Rings of 4 (the shared ring's capacity bounds the index rings'): an unpolled watcher 5 signals behind
    // on its ring is cut off.
    let (store, mut writer) = synced_with(4);
    let mut idle = Watcher::new(
        &crate::metrics::Metrics::default(),
        store.clone(),
        spec(node_filter("n0"), true),
        CancellationToken::new(),
    );
    let mut busy = Watcher::new(
        &crate::metrics::Metrics::default(),
        store.clone(),
        spec(node_filter("n1"), true),
        CancellationToken::new(),
    );
    let mut all = Watcher::new(
        &crate::metrics::Metrics::default(),
        store.clone(),
        spec(node_filter("n1"), false),
        CancellationToken::new(),
    );
    assert_eq!(store.subscribers(), 3);
    for rv in 3..13 {
        writer.apply([(EventType::Modified, pod("ns0", "b", rv, "n1", "web"))]);
    }
    // The unindexed watcher of node n1 and the n1 ring's watcher fell behind their rings: both closed.
    assert!(busy.next_frame().await.is_none(), "the n1 ring overflowed");
    assert!(all.next_frame().await.is_none(), "the shared ring overflowed");
    // The n0 watcher's ring saw none of it: it is still live and gets its own node's next event.
    writer.apply([(EventType::Modified, pod("ns0", "a", 13, "n0", "db"))]);
    let frame = idle.next_frame().await.expect("the n0 watcher is live");
    assert!(String::from_utf8_lossy(&frame).contains(r#""resourceVersion":"13""#));
}

#[tokio::test(start_paused = true)]
async fn an_indexed_watchers_bookmarks_carry_the_stores_revision() {
    let (store, mut writer) = synced_with(64);
    let mut w = Watcher::new(
        &crate::metrics::Metrics::default(),
        store.clone(),
        WatchSpec { bookmarks: true, ..spec(node_filter("n0"), true) },
        CancellationToken::new(),
    );
    // Events of another node only: the n0 ring receives nothing.
    for rv in 3..8 {
        writer.apply([(EventType::Modified, pod("ns0", "b", rv, "n1", "web"))]);
    }
    let frame = w.next_frame().await.expect("the periodic bookmark");
    let line = String::from_utf8_lossy(&frame);
    assert!(line.starts_with(r#"{"type":"BOOKMARK""#) && line.contains(r#""resourceVersion":"7""#), "{line}");
}

#[test]
fn the_selection_picks_the_most_selective_index() {
    let key = |f: Filter| f.index_key().map(|k| (k.kind, k.value.to_string()));
    let ns = |n: &str| Filter { namespace: Some(n.into()), ..Filter::default() };
    assert_eq!(key(Filter::default()), None);
    assert_eq!(key(ns("a")), Some((IndexKind::Namespace, "a".into())));
    assert_eq!(key(Filter { field: Some("n1".into()), ..ns("a") }), Some((IndexKind::Field, "n1".into())));
    let named = Filter { name: Some("x".into()), field: Some("n1".into()), ..ns("a") };
    assert_eq!(key(named), Some((IndexKind::Name, "x".into())));
}

#[tokio::test]
async fn a_store_without_the_indexed_field_keeps_field_watchers_on_the_shared_ring() {
    let info = ResourceInfo { gvr: Gvr::new("", "v1", "configmaps"), kind: "ConfigMap".into(), ..pods() };
    let (store, mut writer) = Store::new(info, StoreConfig::default());
    writer.replace([], 1);
    let filter = Filter { field: Some("n0".into()), ..Filter::default() };
    let _w = Watcher::new(
        &crate::metrics::Metrics::default(),
        store.clone(),
        spec(filter, true),
        CancellationToken::new(),
    );
    assert_eq!((store.index_rings(), store.subscribers()), (0, 1));
}
