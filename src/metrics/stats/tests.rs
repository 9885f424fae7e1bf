use std::sync::Mutex;

use super::*;

/// A scripted source: whatever the test puts in.
#[derive(Default)]
pub(crate) struct Fake {
    pub(crate) resources: Mutex<Vec<ResourceSnapshot>>,
}

impl StatsSource for Fake {
    fn resources(&self) -> Vec<ResourceSnapshot> {
        self.resources.lock().expect("test lock").clone()
    }
}

pub(crate) fn snapshot(gvr: Gvr, synced: bool, state: &'static str, objects: usize) -> ResourceSnapshot {
    let stats = StoreStats {
        objects,
        live_bytes: objects * 100,
        history_events: 7,
        history_bytes: 700,
        history_span: Duration::from_millis(2500),
        retained_snapshots: 3,
        retained_bytes: 50,
        index_bytes: 10,
        resource_version: 42,
        generation: 1,
        ..StoreStats::default()
    };
    ResourceSnapshot {
        gvr,
        configured: true,
        synced,
        state,
        store: Some(stats),
        relists: 2,
        watch_restarts: 5,
        events_received: 11,
        bad_frames: 0,
        restarts: 1,
        since_last_event: Some(Duration::from_secs(4)),
        last_error: None,
        selector: None,
    }
}

fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn refresh_exports_store_and_reflector_state() {
    let handle = Metrics::new();
    let fake = Fake::default();
    let gvr = Gvr::new("stats.example.com", "v1", "widgets");
    fake.resources.lock().expect("test lock").push(snapshot(gvr.clone(), true, "watching", 12));
    refresh(&handle, &fake);
    let text = handle.render();
    let gr = "group=\"stats.example.com\",resource=\"widgets\"";
    assert_eq!(value(&text, &format!("kache_store_objects{{{gr}}}")), Some(12.0), "{text}");
    assert_eq!(value(&text, &format!("kache_store_bytes{{{gr},kind=\"live\"}}")), Some(1200.0));
    assert_eq!(value(&text, &format!("kache_store_bytes{{{gr},kind=\"history\"}}")), Some(700.0));
    assert_eq!(value(&text, &format!("kache_store_bytes{{{gr},kind=\"snapshots\"}}")), Some(50.0));
    assert_eq!(value(&text, &format!("kache_store_bytes{{{gr},kind=\"index\"}}")), Some(10.0));
    assert_eq!(value(&text, &format!("kache_history_events{{{gr}}}")), Some(7.0));
    assert_eq!(value(&text, &format!("kache_history_span_seconds{{{gr}}}")), Some(2.5));
    assert_eq!(value(&text, &format!("kache_retained_snapshots{{{gr}}}")), Some(3.0));
    assert_eq!(value(&text, &format!("apiserver_watch_cache_resource_version{{{gr}}}")), Some(42.0));
    assert_eq!(value(&text, &format!("apiserver_watch_cache_events_received_total{{{gr}}}")), Some(11.0));
    assert_eq!(value(&text, &format!("kache_relists_total{{{gr}}}")), Some(2.0));
    assert_eq!(value(&text, &format!("kache_watch_restarts_total{{{gr}}}")), Some(5.0));
    assert_eq!(value(&text, &format!("kache_reflector_restarts_total{{{gr}}}")), Some(1.0));
    assert_eq!(value(&text, &format!("kache_reflector_state{{{gr},state=\"watching\"}}")), Some(1.0));
    assert_eq!(value(&text, &format!("kache_reflector_state{{{gr},state=\"backoff\"}}")), Some(0.0));
    assert_eq!(value(&text, &format!("kache_resource_synced{{{gr},configured=\"true\"}}")), Some(1.0));
    assert_eq!(value(&text, &format!("kache_seconds_since_last_event{{{gr}}}")), Some(4.0));

    // The resource goes away: its gauges drop to zero, its state reads stopped.
    fake.resources.lock().expect("test lock").clear();
    refresh(&handle, &fake);
    let text = handle.render();
    assert_eq!(value(&text, &format!("kache_store_objects{{{gr}}}")), Some(0.0), "{text}");
    assert_eq!(value(&text, &format!("kache_reflector_state{{{gr},state=\"watching\"}}")), Some(0.0));
    assert_eq!(value(&text, &format!("kache_reflector_state{{{gr},state=\"stopped\"}}")), Some(1.0));
    assert_eq!(value(&text, &format!("kache_resource_synced{{{gr},configured=\"true\"}}")), Some(0.0));
}

#[test]
fn export_store_stats_sets_one_resource() {
    let handle = Metrics::new();
    let stats = StoreStats { objects: 9, ..StoreStats::default() };
    export_store_stats(&handle, "exported.apps", &stats);
    let text = handle.render();
    assert_eq!(
        value(&text, "kache_store_objects{group=\"apps\",resource=\"exported\"}"),
        Some(9.0),
        "{text}"
    );
}

#[test]
fn readiness_counts_configured_resources_only() {
    let mut lazy = snapshot(Gvr::new("", "v1", "configmaps"), false, "listing", 0);
    lazy.configured = false;
    let mut pending = snapshot(Gvr::new("apps", "v1", "deployments"), false, "backoff", 0);
    pending.last_error = Some("connection refused".into());
    let checks = ready_checks(&[snapshot(Gvr::new("", "v1", "pods"), true, "watching", 1), lazy, pending]);
    assert_eq!(
        checks,
        vec![
            ("informer-sync-pods".to_owned(), Ok(())),
            ("informer-sync-deployments.apps".to_owned(), Err("connection refused".to_owned())),
        ]
    );
}

#[test]
fn a_filtered_mirror_names_its_selection_in_its_check() {
    let mut pods = snapshot(Gvr::new("", "v1", "pods"), true, "watching", 1);
    pods.selector = Some("fieldSelector=spec.nodeName=node-1".to_owned());
    let checks = ready_checks(&[pods]);
    assert_eq!(checks, vec![("informer-sync-pods[fieldSelector=spec.nodeName=node-1]".to_owned(), Ok(()))]);
}

#[test]
fn two_instances_refresh_independently() {
    let (a, b) = (Metrics::new(), Metrics::new());
    let fake = Fake::default();
    let gvr = Gvr::new("", "v1", "twins");
    fake.resources.lock().expect("test lock").push(snapshot(gvr, true, "watching", 3));
    refresh(&a, &fake);
    let series = "kache_store_objects{group=\"\",resource=\"twins\"}";
    assert_eq!(value(&a.render(), series), Some(3.0));
    assert_eq!(value(&b.render(), series), None, "{}", b.render());
}
