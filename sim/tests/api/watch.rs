use std::time::Duration;

use serde_json::json;

use crate::common::*;

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const PODS: &str = "/api/v1/namespaces/default/pods";

#[tokio::test]
async fn legacy_rv_unset_and_zero_become_watch_lists() {
    let env = start().await;
    env.cm("default", "a").await;
    env.cm("default", "b").await;
    env.cm("kube-system", "elsewhere").await;
    let rv = env.sim.revision();
    for q in ["", "resourceVersion=0&", "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&"] {
        let mut w = env.watch(&format!("{CMS}?watch=1&{q}allowWatchBookmarks=true")).await;
        assert_eq!(w.next_summary().await.0, "ADDED");
        assert_eq!(w.next_summary().await.1, "b");
        let bm = w.next_line().await.expect("bookmark");
        assert_eq!(
            bm,
            format!(
                "{{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{{\"resourceVersion\":\"{rv}\",\"annotations\":{{\"k8s.io/initial-events-end\":\"true\"}}}}}}}}"
            ),
            "{q}"
        );
    }
    // Without allowWatchBookmarks: initial events, then live events, no bookmark.
    let mut w = env.watch(&format!("{CMS}?watch=1")).await;
    assert_eq!(w.next_summary().await.1, "a");
    assert_eq!(w.next_summary().await.1, "b");
    let c = env.cm("default", "c").await;
    assert_eq!(w.next_summary().await, ("ADDED".to_string(), "c".to_string(), c));
}

#[tokio::test]
async fn pod_bookmark_has_the_typed_empty_object() {
    let env = start().await;
    let rv = env.sim.revision();
    let mut w = env.watch(&format!("{PODS}?watch=1&allowWatchBookmarks=true")).await;
    assert_eq!(
        w.next_line().await.expect("bookmark"),
        format!(
            "{{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{{\"resourceVersion\":\"{rv}\",\"annotations\":{{\"k8s.io/initial-events-end\":\"true\"}}}},\"spec\":{{\"containers\":null}},\"status\":{{}}}}}}"
        )
    );
}

#[tokio::test]
async fn rv_n_replays_history_with_deletion_rv() {
    let env = start().await;
    let a = env.cm("default", "a").await;
    let b = env.cm("default", "b").await;
    env.sim.delete("configmaps", Some("default"), "a").expect("delete");
    let del = env.sim.revision();
    let mut w = env.watch(&format!("{CMS}?watch=1&resourceVersion={a}")).await;
    assert_eq!(w.next_summary().await, ("ADDED".to_string(), "b".to_string(), b));
    assert_eq!(w.next_summary().await, ("DELETED".to_string(), "a".to_string(), del));
    let c = env.cm("default", "c").await;
    assert_eq!(w.next_summary().await, ("ADDED".to_string(), "c".to_string(), c));
}

#[tokio::test]
async fn too_old_rv_is_an_error_event() {
    let env = start().await;
    let a = env.cm("default", "a").await;
    env.cm("default", "b").await;
    let compacted = env.sim.compact(None);
    let mut w = env.watch(&format!("{CMS}?watch=1&resourceVersion={}", a - 1)).await;
    assert_eq!(
        w.next_line().await.expect("error"),
        format!(
            "{{\"type\":\"ERROR\",\"object\":{{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{{}},\"status\":\"Failure\",\"message\":\"too old resource version: {} ({compacted})\",\"reason\":\"Expired\",\"code\":410}}}}",
            a - 1
        )
    );
    w.end().await;
    // At the compacted revision the watch is still resumable.
    let mut w = env.watch(&format!("{CMS}?watch=1&resourceVersion={compacted}")).await;
    let c = env.cm("default", "c").await;
    assert_eq!(w.next_summary().await.2, c);
}

#[tokio::test]
async fn future_rv_waits_but_watch_list_times_out_with_504_event() {
    let env = start().await;
    let future = env.sim.revision() + 2;
    let mut w = env.watch(&format!("{CMS}?watch=1&resourceVersion={future}")).await;
    env.cm("default", "skipped").await;
    env.cm("default", "skipped2").await;
    let c = env.cm("default", "seen").await;
    assert_eq!(w.next_summary().await, ("ADDED".to_string(), "seen".to_string(), c));

    let far = env.sim.revision() + 100;
    let mut w = env
        .watch(&format!(
            "{CMS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion={far}"
        ))
        .await;
    let ev = w.next().await;
    assert_eq!(ev["type"], "ERROR");
    assert_eq!(ev["object"]["code"], 504);
    assert_eq!(ev["object"]["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");
    w.end().await;
}

#[tokio::test]
async fn send_initial_events_at_n_and_false() {
    let env = start().await;
    let a = env.cm("default", "a").await;
    env.cm("default", "b").await;
    let rv = env.sim.revision();
    let mut w = env
        .watch(&format!("{CMS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion={a}&allowWatchBookmarks=true"))
        .await;
    assert_eq!(w.next_summary().await.1, "a");
    assert_eq!(w.next_summary().await.1, "b");
    let bm = w.next().await;
    assert_eq!((bm["type"].as_str(), rv_of(&bm["object"])), (Some("BOOKMARK"), rv));
    // sendInitialEvents=false from "": only new events.
    let mut w =
        env.watch(&format!("{CMS}?watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan")).await;
    let c = env.cm("default", "c").await;
    assert_eq!(w.next_summary().await, ("ADDED".to_string(), "c".to_string(), c));
}

#[tokio::test]
async fn watch_validation_is_422_before_the_stream() {
    let env = start().await;
    let r = env.get(&format!("{CMS}?watch=1&sendInitialEvents=true")).await;
    assert_eq!(r.code(), 422);
    assert_eq!(
        r.text(),
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"ListOptions.meta.k8s.io \\\"\\\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan\",\"reason\":\"Invalid\",\"details\":{\"group\":\"meta.k8s.io\",\"kind\":\"ListOptions\",\"causes\":[{\"reason\":\"FieldValueForbidden\",\"message\":\"Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan\",\"field\":\"resourceVersionMatch\"}]},\"code\":422}\n"
    );
    let r = env.get(&format!("{CMS}?watch=1&resourceVersion=abc")).await;
    assert_eq!(r.code(), 500);
}

#[tokio::test]
async fn selector_transitions_are_added_and_deleted() {
    let env = start().await;
    let r = env.post(CMS, json!({"metadata": {"name": "m", "labels": {"app": "x"}}})).await;
    let start_rv = rv_of(&r.json());
    let mut w = env.watch(&format!("{CMS}?watch=1&resourceVersion={start_rv}&labelSelector=app%3Dy")).await;
    let to_y = env
        .sim
        .merge_patch("configmaps", Some("default"), "m", json!({"metadata": {"labels": {"app": "y"}}}))
        .expect("p");
    assert_eq!(w.next_summary().await, ("ADDED".to_string(), "m".to_string(), rv_of(&to_y)));
    let touch =
        env.sim.merge_patch("configmaps", Some("default"), "m", json!({"data": {"k": "v"}})).expect("p");
    assert_eq!(w.next_summary().await, ("MODIFIED".to_string(), "m".to_string(), rv_of(&touch)));
    let away = env
        .sim
        .merge_patch("configmaps", Some("default"), "m", json!({"metadata": {"labels": {"app": "z"}}}))
        .expect("p");
    let ev = w.next().await;
    assert_eq!(ev["type"], "DELETED");
    assert_eq!(rv_of(&ev["object"]), rv_of(&away), "previous object with the RV of the update");
    assert_eq!(ev["object"]["metadata"]["labels"]["app"], "y", "the previous state");
    env.sim.delete("configmaps", Some("default"), "m").expect("delete");
    let n = env.cm("default", "n").await;
    // Nothing for the deletion of a non-matching object; a matching create comes through.
    env.sim
        .merge_patch("configmaps", Some("default"), "n", json!({"metadata": {"labels": {"app": "y"}}}))
        .expect("p");
    assert_eq!(w.next_summary().await.1, "n");
    let _ = n;
}

#[tokio::test]
async fn periodic_bookmarks_need_progress_and_permission() {
    let env = start_with(builder().bookmark_interval(Duration::from_millis(100))).await;
    let start = env.sim.revision();
    let mut w = env.watch(&format!("{CMS}?watch=1&resourceVersion={start}&allowWatchBookmarks=true")).await;
    // A write in another resource moves the global revision; the config maps' watch cache learns of it
    // only when a read makes it catch up (a consistent list here), and its next bookmark carries it.
    env.ns("other").await;
    let moved = env.sim.revision();
    assert_eq!(env.get(CMS).await.code(), 200);
    let ev = w.next().await;
    assert_eq!(
        ev,
        json!({"type": "BOOKMARK", "object": {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"resourceVersion": moved.to_string()}}})
    );
    let c = env.cm("default", "c").await;
    assert_eq!(w.next_summary().await.2, c, "events keep their order relative to bookmarks");
    // Without allowWatchBookmarks, the next line is the next event.
    let mut w = env.watch(&format!("{CMS}?watch=1&resourceVersion={}", env.sim.revision())).await;
    env.ns("other2").await;
    let d = env.cm("default", "d").await;
    assert_eq!(w.next_summary().await, ("ADDED".to_string(), "d".to_string(), d));
}

#[tokio::test]
async fn timeout_drop_and_restart_end_streams() {
    let env = start().await;
    let rv = env.sim.revision();
    let mut w = env.watch(&format!("{CMS}?watch=1&resourceVersion={rv}&timeoutSeconds=1")).await;
    w.end().await;
    let mut w = env.watch(&format!("{CMS}?watch=1&resourceVersion={rv}")).await;
    env.sim.drop_watches();
    w.end().await;
    let a = env.cm("default", "a").await;
    env.sim.restart().await;
    // After a restart the watch cache starts at the current revision: older RVs are 410.
    let mut w = env.watch(&format!("{CMS}?watch=1&resourceVersion={}", a - 1)).await;
    let ev = w.next().await;
    assert_eq!(ev["object"]["code"], 410);
    // Data survives.
    assert_eq!(env.get(&format!("{CMS}/a")).await.code(), 200);
}

#[tokio::test]
async fn single_object_watch_and_legacy_watch_path() {
    let env = start().await;
    env.cm("default", "foo").await;
    env.cm("default", "foobar").await;
    let rv = env.sim.revision();
    let mut w =
        env.watch(&format!("/api/v1/watch/namespaces/default/configmaps/foo?resourceVersion={rv}")).await;
    env.sim.merge_patch("configmaps", Some("default"), "foobar", json!({"data": {"a": "b"}})).expect("p");
    let p =
        env.sim.merge_patch("configmaps", Some("default"), "foo", json!({"data": {"a": "b"}})).expect("p");
    assert_eq!(w.next_summary().await, ("MODIFIED".to_string(), "foo".to_string(), rv_of(&p)));
    let r =
        env.get("/api/v1/watch/namespaces/default/configmaps/foo?fieldSelector=metadata.name%3Dbar").await;
    assert_eq!(r.code(), 400);
}

#[tokio::test]
async fn stalled_watches_resume_or_are_closed() {
    let env = start().await;
    let rv = env.sim.revision();
    let mut w = env.watch(&format!("{CMS}?watch=1&resourceVersion={rv}")).await;
    env.sim.stall_watches(true);
    let a = env.cm("default", "a").await;
    env.sim.stall_watches(false);
    assert_eq!(w.next_summary().await.2, a);
}

#[tokio::test]
async fn watch_scopes_namespace_cluster_and_field_selectors() {
    let env = start().await;
    env.ns("other").await;
    let rv = env.sim.revision();
    let mut ns_w = env.watch(&format!("{CMS}?watch=1&resourceVersion={rv}")).await;
    let mut all_w = env.watch(&format!("/api/v1/configmaps?watch=1&resourceVersion={rv}")).await;
    let mut node_w = env
        .watch(&format!("/api/v1/pods?watch=1&resourceVersion={rv}&fieldSelector=spec.nodeName%3Dn1"))
        .await;
    let mut ns_list = env.watch(&format!("/api/v1/namespaces?watch=1&resourceVersion={rv}")).await;
    let o = env.cm("other", "x").await;
    let d = env.cm("default", "y").await;
    env.post(PODS, json!({"metadata": {"name": "p0"}, "spec": {"nodeName": "n0"}})).await;
    let p1 = env.post(PODS, json!({"metadata": {"name": "p1"}, "spec": {"nodeName": "n1"}})).await;
    env.ns("third").await;
    assert_eq!(ns_w.next_summary().await, ("ADDED".to_string(), "y".to_string(), d));
    assert_eq!(all_w.next_summary().await.2, o);
    assert_eq!(all_w.next_summary().await.2, d);
    assert_eq!(node_w.next_summary().await, ("ADDED".to_string(), "p1".to_string(), rv_of(&p1.json())));
    assert_eq!(ns_list.next_summary().await.1, "third");
}
