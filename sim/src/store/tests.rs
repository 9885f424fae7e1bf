use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::kinds::{ResourceDef, table};

fn store() -> (Store, ResId) {
    let s = Store::new(table(&[]));
    let cm = s.find("", "configmaps").expect("configmaps");
    let ns = s.find("", "namespaces").expect("namespaces");
    s.write(ns, "default", None, |_, rev| Ok(WriteAction::Put(json!({"rv": rev})))).expect("ns");
    (s, cm)
}

fn put(s: &Store, res: ResId, key: &str) -> u64 {
    s.write(res, key, None, |_, rev| Ok(WriteAction::Put(json!({"k": key, "rv": rev}))))
        .expect("write")
        .obj["rv"]
        .as_u64()
        .expect("rv")
}

#[test]
fn revisions_are_global_and_reads_see_the_past() {
    let (s, cm) = store();
    let r1 = put(&s, cm, "default/a");
    let r2 = put(&s, cm, "default/b");
    assert_eq!(r2, r1 + 1);
    let (_, at1) = s.range(cm, "default/", "", Some(r1)).expect("range");
    assert_eq!(at1.len(), 1);
    let (rev, now) = s.range(cm, "default/", "", None).expect("range");
    assert_eq!((rev, now.len()), (r2, 2));
}

#[test]
fn key_order_is_byte_order() {
    let (s, cm) = store();
    for k in ["kube/x", "kube-system/x", "kube.a/x"] {
        put(&s, cm, k);
    }
    let (_, all) = s.range(cm, "", "", None).expect("range");
    let keys: Vec<&str> = all.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["kube-system/x", "kube.a/x", "kube/x"]);
    let (_, kube) = s.range(cm, "kube/", "", None).expect("range");
    assert_eq!(kube.len(), 1);
}

#[test]
fn compaction_hides_old_revisions_but_keeps_current_state() {
    let (s, cm) = store();
    let r1 = put(&s, cm, "default/a");
    s.write(cm, "default/a", None, |_, rev| Ok(WriteAction::Delete(json!({"rv": rev})))).expect("delete");
    let r3 = put(&s, cm, "default/b");
    assert_eq!(s.compact(Some(r3)), r3);
    assert_eq!(s.range(cm, "", "", Some(r1)).map(|_| ()), Err(ReadError::Compacted(r3)));
    let (_, items) = s.range(cm, "", "", Some(r3)).expect("at compacted rev");
    assert_eq!(items.len(), 1);
    assert_eq!(s.history_and_subscribe(cm, r1).map(|_| ()).err(), Some(r3));
    assert!(s.history_and_subscribe(cm, r3).is_ok());
}

#[test]
fn history_replays_after_rv_and_namespace_must_exist() {
    let (s, cm) = store();
    let r1 = put(&s, cm, "default/a");
    put(&s, cm, "default/b");
    let (_, evs) = s.history_and_subscribe(cm, r1).expect("history");
    assert_eq!(evs.len(), 1);
    let err = s.write(cm, "nope/a", Some("nope"), |_, _| Ok(WriteAction::Put(json!({})))).expect_err("404");
    assert_eq!(err.code, 404);
}

#[tokio::test]
async fn subscribers_get_events_after_their_start() {
    let (s, cm) = store();
    let mut start = s.subscribe(cm);
    let r = put(&s, cm, "default/a");
    let ev = start.rx.recv().await.expect("event");
    assert_eq!((ev.rev, ev.ty), (r, EventType::Added));
    assert!(s.wait_for(r, Duration::from_millis(10)).await);
    assert!(!s.wait_for(r + 5, Duration::from_millis(10)).await);
}

// === Keyspace::page ===

fn cm_def() -> ResourceDef {
    table(&[]).into_iter().find(|r| r.plural == "configmaps").expect("configmaps")
}

fn obj(def: &ResourceDef, key: &str, rev: u64, label: &str) -> Arc<Obj> {
    let v = json!({"metadata": {"name": key, "resourceVersion": rev.to_string(), "labels": {"l": label}}});
    Arc::new(Obj::new(def, &v))
}

fn labelled_x(o: &Obj) -> bool {
    o.labels.get("l").is_some_and(|v| v == "x")
}

/// The read `Keyspace::page` replaces: the whole range copied out, then cut at the limit (the sim's list
/// path before it stopped at the limit).
fn page_by_range(
    ks: &Keyspace,
    prefix: &str,
    from: &str,
    at: u64,
    limit: usize,
    select: Option<&dyn Fn(&Obj) -> bool>,
) -> KeyPage {
    let all = ks.range(prefix, from, at);
    let mut items = Vec::new();
    let mut last_idx = None;
    for (i, (_, obj)) in all.iter().enumerate() {
        if select.is_none_or(|f| f(obj)) {
            items.push(obj.clone());
            if limit > 0 && items.len() >= limit {
                last_idx = Some(i);
                break;
            }
        }
    }
    let more = match last_idx {
        Some(i) if i + 1 < all.len() => Some(More {
            last_key: all[i].0.clone(),
            remaining: select.is_none().then(|| (all.len() - i - 1) as u64),
        }),
        _ => None,
    };
    KeyPage { items, more }
}

#[test]
fn page_stops_at_the_limit() {
    let def = cm_def();
    let mut ks = Keyspace::default();
    for (i, k) in ["a/1", "a/2", "a/3", "a/4", "b/1"].into_iter().enumerate() {
        ks.put(k, i as u64 + 2, Some(obj(&def, k, i as u64 + 2, "x")));
    }
    // A selector is evaluated for the page's items only, not for the rest of the range.
    let calls = std::cell::Cell::new(0);
    let select = |o: &Obj| {
        calls.set(calls.get() + 1);
        labelled_x(o)
    };
    let p = ks.page("a/", "", 10, 2, Some(&select));
    assert_eq!(calls.get(), 2);
    assert_eq!(p.more, Some(More { last_key: "a/2".into(), remaining: None }));
    // Without a selector the rest of the range is counted (a/3, a/4; b/1 is outside the prefix).
    let p = ks.page("a/", "a/2\0", 10, 1, None);
    assert_eq!(p.items.len(), 1);
    assert_eq!(p.more, Some(More { last_key: "a/3".into(), remaining: Some(1) }));
    // A page that ends the range (or is not full) has nothing after it.
    assert_eq!(ks.page("a/", "a/3\0", 10, 1, None).more, None);
    assert_eq!(ks.page("a/", "", 10, 0, None).items.len(), 4);
}

const KEYS: &[&str] = &["a/1", "a/10", "a/2", "a/2/x", "ab/1", "a", "b/1", "b/2", "b/3", "c"];
const PREFIXES: &[&str] = &["", "a/", "ab/", "b/", "z/"];

proptest::proptest! {
    /// Random keyspaces (keys with several versions, deletions, compaction) read at any revision still
    /// readable, from any start: the lazy page equals the full range cut at the limit.
    #[test]
    fn page_agrees_with_full_range_then_cut(
        ops in proptest::collection::vec((0..KEYS.len(), proptest::bool::weighted(0.25), proptest::bool::ANY), 0..40),
        compact_at in 0u64..45,
        at_back in 0u64..45,
        prefix in 0..PREFIXES.len(),
        from in proptest::option::of((0..KEYS.len(), proptest::bool::ANY)),
        limit in 0usize..5,
        selector in proptest::bool::ANY,
    ) {
        let def = cm_def();
        let mut ks = Keyspace::default();
        for (i, &(k, delete, x)) in ops.iter().enumerate() {
            let rev = i as u64 + 2;
            let value = (!delete).then(|| obj(&def, KEYS[k], rev, if x { "x" } else { "y" }));
            ks.put(KEYS[k], rev, value);
        }
        let head = ops.len() as u64 + 1;
        let compacted = compact_at.min(head);
        ks.compact(compacted);
        // Any revision a read may still ask for: from the compacted one to the head.
        let at = head - at_back.min(head - compacted.max(1));
        let from = from.map(|(k, after)| format!("{}{}", KEYS[k], if after { "\0" } else { "" }));
        let from = from.as_deref().unwrap_or("");
        let select: Option<&dyn Fn(&Obj) -> bool> = if selector { Some(&labelled_x) } else { None };
        let prefix = PREFIXES[prefix];
        proptest::prop_assert_eq!(
            ks.page(prefix, from, at, limit, select),
            page_by_range(&ks, prefix, from, at, limit, select)
        );
    }
}
