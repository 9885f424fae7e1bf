//! The registry against a scripted upstream: probe, lazy start, readiness, discovery changes.

use std::sync::Arc;

use super::config::ReflectorConfig;
use super::registry::Registry;
use super::status::SyncState;
use super::tests::{Scripted, bookmark, ev, lines, list_page, ok, pod, pod_item, pods_info, status};
use crate::resource::{Gvr, ResourceInfo};
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
