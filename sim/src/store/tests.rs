use serde_json::json;

use super::*;
use crate::kinds::table;

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
