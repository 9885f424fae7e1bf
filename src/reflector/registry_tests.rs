//! The registry against a scripted upstream: probe, lazy start, readiness, discovery changes.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::config::ReflectorConfig;
use super::registry::Registry;
use super::status::SyncState;
use super::tests::{
    Scripted, bookmark, ev, lines, list_page, ok, panicking, pod, pod_item, pods_info, status,
};
use crate::resource::{Gvr, ResourceInfo};
use crate::store::Signal;
use crate::upstream::discovery::{DiscoveredResource, Discovery, Selection, parse_resource_specs};

/// Polls `cond` while letting the spawned reflector tasks run (bounded, so a broken reflector fails the test).
async fn eventually(mut cond: impl FnMut() -> bool) {
    for _ in 0..10_000 {
        if cond() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("condition not reached");
}

fn discovered(info: ResourceInfo) -> DiscoveredResource {
    DiscoveredResource { info, preferred: true, singular: String::new(), short_names: Vec::new() }
}

fn widgets_info() -> ResourceInfo {
    ResourceInfo {
        gvr: Gvr::new("example.com", "v1", "widgets"),
        kind: "Widget".into(),
        list_kind: "WidgetList".into(),
        namespaced: false,
        list_items_have_type_meta: true,
    }
}

fn script_pods(upstream: &Scripted) {
    upstream.push(&["limit=1"], ok(list_page(5, None, &[pod_item("a", 2)])));
    upstream.push(&["sendInitialEvents=true"], lines(&[ev("ADDED", &pod("a", 2)), bookmark(5, true)]));
}

#[tokio::test(start_paused = true)]
async fn started_resources_sync_and_count_for_readiness() {
    let upstream = Arc::new(Scripted::default());
    script_pods(&upstream);
    let registry = Registry::with_transport(upstream.clone(), ReflectorConfig::default());
    let gvr = pods_info().gvr;
    assert!(registry.get(&gvr).is_none());
    registry.start(vec![pods_info()]);
    assert!(!registry.all_synced());
    eventually(|| registry.get(&gvr).is_some_and(|s| s.is_synced())).await;
    assert!(registry.all_synced());
    let store = registry.get(&gvr).unwrap();
    assert!(!store.info().list_items_have_type_meta, "learned from the probe");
    assert_eq!(store.resource_version(), 5);
    let statuses = registry.statuses();
    assert_eq!(statuses.len(), 1);
    assert!(statuses[0].configured && statuses[0].synced);
    assert_eq!(statuses[0].objects, 1);
    assert_eq!(registry.lookup("", "v1", "pods").unwrap().kind, "Pod");
}

#[tokio::test(start_paused = true)]
async fn probe_learns_type_meta_of_custom_resources_and_guesses_when_empty() {
    let upstream = Arc::new(Scripted::default());
    // A custom resource whose items carry type meta, then a built-in-looking group with an empty list.
    let widget =
        r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","resourceVersion":"3"}}"#;
    upstream.push(&["limit=1"], ok(format!(r#"{{"kind":"WidgetList","apiVersion":"example.com/v1","metadata":{{"resourceVersion":"3"}},"items":[{widget}]}}"#)));
    let registry = Registry::with_transport(upstream.clone(), ReflectorConfig::default());
    registry.start(vec![ResourceInfo { list_items_have_type_meta: false, ..widgets_info() }]);
    let gvr = widgets_info().gvr;
    eventually(|| registry.get(&gvr).is_some()).await;
    assert!(registry.get(&gvr).unwrap().info().list_items_have_type_meta);

    upstream.push(&["limit=1"], ok(r#"{"kind":"DeploymentList","apiVersion":"apps/v1","metadata":{"resourceVersion":"3"},"items":[]}"#));
    let deployments = ResourceInfo {
        gvr: Gvr::new("apps", "v1", "deployments"),
        kind: "Deployment".into(),
        list_kind: "DeploymentList".into(),
        namespaced: true,
        list_items_have_type_meta: true,
    };
    registry.start(vec![deployments.clone()]);
    eventually(|| registry.get(&deployments.gvr).is_some()).await;
    assert!(!registry.get(&deployments.gvr).unwrap().info().list_items_have_type_meta, "guessed by group");
}

#[tokio::test(start_paused = true)]
async fn ensure_starts_discovered_resources_lazily() {
    let upstream = Arc::new(Scripted::default());
    let registry = Registry::with_transport(upstream.clone(), ReflectorConfig::default());
    registry
        .set_selection(Selection { include: Some(vec![]), exclude: parse_resource_specs("nodes").unwrap() });
    let gvr = pods_info().gvr;
    assert!(!registry.ensure(&gvr), "unknown resources are not cached");

    let nodes = ResourceInfo {
        gvr: Gvr::new("", "v1", "nodes"),
        kind: "Node".into(),
        list_kind: "NodeList".into(),
        namespaced: false,
        list_items_have_type_meta: false,
    };
    let started = registry.apply_discovery(Discovery {
        resources: vec![discovered(pods_info()), discovered(nodes.clone())],
        failed: vec![],
    });
    assert!(started.is_empty(), "nothing selected up front");
    assert!(!registry.ensure(&nodes.gvr), "excluded resources are never cached");

    script_pods(&upstream);
    assert!(registry.ensure(&gvr));
    assert!(registry.ensure(&gvr), "idempotent");
    eventually(|| registry.get(&gvr).is_some_and(|s| s.is_synced())).await;
    assert!(registry.all_synced(), "lazily cached resources do not gate readiness");
    assert!(!registry.statuses()[0].configured);
    registry.start(vec![pods_info()]);
    assert!(registry.statuses()[0].configured, "configuring a lazily cached resource keeps its reflector");
    assert_eq!(registry.statuses().len(), 1);
    assert_eq!(upstream.seen().iter().filter(|u| u.contains("sendInitialEvents")).count(), 1);
}

#[tokio::test(start_paused = true)]
async fn rediscovery_starts_new_resources_and_stops_vanished_ones() {
    let upstream = Arc::new(Scripted::default());
    let registry = Registry::with_transport(upstream.clone(), ReflectorConfig::default());
    script_pods(&upstream);
    let started =
        registry.apply_discovery(Discovery { resources: vec![discovered(pods_info())], failed: vec![] });
    assert_eq!(started, [pods_info().gvr]);
    eventually(|| registry.get(&pods_info().gvr).is_some_and(|s| s.is_synced())).await;

    // The widgets CRD appears; pods' group version fails this round (unknown, not gone).
    upstream.push(&["limit=1"], ok(r#"{"kind":"WidgetList","apiVersion":"example.com/v1","metadata":{"resourceVersion":"9"},"items":[]}"#));
    upstream.push(&["widgets", "sendInitialEvents=true"], lines(&[bookmark(9, true)]));
    let started = registry.apply_discovery(Discovery {
        resources: vec![discovered(widgets_info())],
        failed: vec!["v1".into()],
    });
    assert_eq!(started, [widgets_info().gvr]);
    assert!(registry.get(&pods_info().gvr).is_some(), "a failed group version keeps its reflectors");
    eventually(|| registry.get(&widgets_info().gvr).is_some_and(|s| s.is_synced())).await;

    // Now pods are really gone.
    let started =
        registry.apply_discovery(Discovery { resources: vec![discovered(widgets_info())], failed: vec![] });
    assert!(started.is_empty());
    assert!(registry.get(&pods_info().gvr).is_none());
    assert!(registry.info(&pods_info().gvr).is_none());
    let statuses = registry.statuses();
    assert_eq!(statuses.len(), 1);
    assert_eq!(statuses[0].gvr, widgets_info().gvr);
    assert_ne!(statuses[0].state, SyncState::Stopped);
}

#[tokio::test(start_paused = true)]
async fn resources_the_upstream_refuses_do_not_gate_readiness() {
    let upstream = Arc::new(Scripted::default());
    upstream.push(&["limit=1"], status(403, "Forbidden", None));
    upstream.push(&["sendInitialEvents=true"], status(403, "Forbidden", None));
    upstream.push(&["limit=500"], status(403, "Forbidden", None));
    let registry = Registry::with_transport(upstream.clone(), ReflectorConfig::default());
    registry.start(vec![pods_info()]);
    eventually(|| registry.statuses()[0].rejected).await;
    assert!(registry.all_synced(), "a forbidden resource does not keep kache unready");
    assert!(!registry.get(&pods_info().gvr).unwrap().is_synced());
    assert!(registry.statuses()[0].last_error.as_deref().unwrap_or("").contains("403"));
}

/// A reflector whose transport panics mid-stream used to leave its store synced and frozen (served
/// as ready, stale for ever). Now the store goes down at once (not synced: reads are forwarded; readiness names
/// the resource; watchers end), and the reflector is restarted after a backoff and resyncs from scratch.
#[tokio::test(start_paused = true)]
async fn reflector_whose_transport_panics_is_restarted_and_resyncs() {
    let upstream = Arc::new(Scripted::default());
    let (reply, tx) = panicking();
    upstream.push(&["limit=1"], ok(list_page(5, None, &[pod_item("a", 2)])));
    upstream.push(&["sendInitialEvents=true"], reply);
    let registry = Registry::with_transport(upstream.clone(), ReflectorConfig::default());
    let gvr = pods_info().gvr;
    registry.start(vec![pods_info()]);
    let lines_of = |events: &[String]| Some(Bytes::from(events.join("\n") + "\n"));
    tx.send(lines_of(&[ev("ADDED", &pod("a", 2)), bookmark(5, true)])).unwrap();
    eventually(|| registry.get(&gvr).is_some_and(|s| s.is_synced())).await;
    let store = registry.get(&gvr).unwrap();
    let mut signals = store.subscribe();

    // The restarted reflector syncs again (no new probe: the store is kept), at a later RV.
    upstream.push(
        &["sendInitialEvents=true"],
        lines(&[ev("ADDED", &pod("a", 2)), ev("ADDED", &pod("b", 7)), bookmark(8, true)]),
    );
    tx.send(None).unwrap();
    eventually(|| registry.statuses()[0].state == SyncState::Restarting).await;
    assert!(!store.is_synced(), "a dead reflector's store is not served");
    assert!(!registry.all_synced());
    let checks = crate::metrics::readiness(&*registry);
    let (name, result) = checks.last().expect("one check per configured resource");
    assert_eq!(name, "informer-sync-pods");
    assert!(result.as_ref().is_err_and(|e| e.contains("panicked")), "{result:?}");
    assert!(matches!(signals.try_recv(), Ok(Signal::Reset { .. })), "its watchers are ended");
    assert_eq!(registry.statuses()[0].restarts, 1);

    // Restarted after the backoff (at most 1.6 s for a first failure), on the same store.
    tokio::time::sleep(Duration::from_secs(2)).await;
    eventually(|| store.is_synced()).await;
    assert!(Arc::ptr_eq(&store, &registry.get(&gvr).unwrap()));
    assert_eq!(store.resource_version(), 8);
    assert_eq!(store.current().objects.len(), 2);
    assert!(registry.all_synced());
    assert_eq!(upstream.seen().iter().filter(|u| u.contains("limit=1")).count(), 1, "probed once");
    assert_eq!(upstream.remaining(), 0);
    let status = &registry.statuses()[0];
    assert_eq!((status.restarts, status.synced), (1, true));
}

/// A stopped resource's reflector is not restarted, and its store is taken down with it.
#[tokio::test(start_paused = true)]
async fn stopped_reflectors_stay_stopped_and_take_their_store_down() {
    let upstream = Arc::new(Scripted::default());
    script_pods(&upstream);
    let registry = Registry::with_transport(upstream.clone(), ReflectorConfig::default());
    let gvr = pods_info().gvr;
    registry.start(vec![pods_info()]);
    eventually(|| registry.get(&gvr).is_some_and(|s| s.is_synced())).await;
    let store = registry.get(&gvr).unwrap();
    registry.stop(&gvr);
    eventually(|| !store.is_synced()).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(registry.get(&gvr).is_none());
    assert!(store.reopen().is_some(), "no reflector holds a writer any more");
    assert_eq!(upstream.seen().len(), 2, "nothing restarted");
}
