//! Gauges refreshed right before each scrape (no background task) from a [`StatsSource`] — the stores,
//! reflectors and counters `app` reads for this module, which depends on none of them — and the readiness
//! view the health endpoints use.

use std::collections::HashSet;
use std::time::Duration;

use super::health::PING;
use super::instance::Metrics;
use super::labels::AsResource;
use super::mirror::{FreshnessCounters, SharedCounters, WatchCounters};
use super::names::{REFLECTOR_STATE, RESOURCE_SYNCED, SECONDS_SINCE_LAST_EVENT};
use super::resource::ResourceMetrics;
use crate::resource::Gvr;
use crate::store::StoreStats;

/// Every reflector state (`reflector::SyncState::as_str`, whose tests check this list), registered at zero
/// so each state's series exists from the start.
pub const REFLECTOR_STATES: &[&str] =
    &["starting", "initial-events", "listing", "resuming", "watching", "backoff", "restarting", "stopped"];
/// The state of a resource no longer cached.
const STOPPED: &str = "stopped";

/// A point-in-time view of one cached resource.
#[derive(Clone, Debug)]
pub struct ResourceSnapshot {
    pub gvr: Gvr,
    /// Configured resources count for readiness; lazily cached ones do not.
    pub configured: bool,
    /// The store holds a complete state.
    pub synced: bool,
    /// The reflector's state (`watching`, `backoff`, ...).
    pub state: &'static str,
    /// `None` until the store exists.
    pub store: Option<StoreStats>,
    pub relists: u64,
    pub watch_restarts: u64,
    pub events_received: u64,
    pub bad_frames: u64,
    /// Times the reflector task was restarted after it panicked or ended.
    pub restarts: u64,
    pub since_last_event: Option<Duration>,
    /// Why the resource is not synced (for logs; never shown on the public health endpoints).
    pub last_error: Option<String>,
    /// A filtered mirror's selector (`--resource-selector`), shown in its readiness check's name.
    pub selector: Option<String>,
}

/// What the metrics listener reads: the cached resources, and extra readiness checks.
pub trait StatsSource: Send + Sync {
    /// Every cached resource, sorted by resource.
    fn resources(&self) -> Vec<ResourceSnapshot>;

    /// Readiness checks beyond per-resource sync (e.g. `discovery`), in order: name, then `Err(reason)`
    /// when failing.
    fn extra_ready_checks(&self) -> Vec<(String, Result<(), String>)> {
        Vec::new()
    }

    /// The consistent-read freshness counters, when this kache probes for freshness.
    fn freshness(&self) -> Option<FreshnessCounters> {
        None
    }

    /// The counters of the structures shared across the process.
    fn shared(&self) -> SharedCounters {
        SharedCounters::default()
    }
}

/// Sets one resource's store gauges.
pub fn export_store_stats<R: AsResource + ?Sized>(metrics: &Metrics, resource: &R, stats: &StoreStats) {
    set_store_gauges(&metrics.resource(resource), stats);
}

fn set_store_gauges(m: &ResourceMetrics, stats: &StoreStats) {
    m.store_objects.set(stats.objects as f64);
    m.store_live_bytes.set(stats.live_bytes as f64);
    m.store_history_bytes.set(stats.history_bytes as f64);
    m.store_snapshot_bytes.set(stats.retained_bytes as f64);
    m.store_index_bytes.set(stats.index_bytes as f64);
    m.history_events.set(stats.history_events as f64);
    m.history_span.set(stats.history_span.as_secs_f64());
    m.retained_snapshots.set(stats.retained_snapshots as f64);
    m.set_resource_version(stats.resource_version);
}

/// Refreshes every per-resource gauge from `source`. Resources that are no longer cached drop to zero (their
/// series stay, so a stopped resource reads as empty and unsynced rather than frozen at its last value).
pub fn refresh(metrics: &Metrics, source: &dyn StatsSource) -> Vec<ResourceSnapshot> {
    let snapshots = source.resources();
    // The fan-out counters are the instance's own; the index's are its stores', summed.
    let mut watch = WatchCounters::default();
    metrics.watch_cells().fill(&mut watch);
    for index in snapshots.iter().filter_map(|s| s.store.as_ref()).map(|s| s.index) {
        for (sum, n) in watch.indexed_watchers.iter_mut().zip(index.watchers) {
            *sum += n;
        }
        watch.index_rings += index.rings;
        watch.index_full += index.full;
    }
    metrics.mirror_watch(&watch);
    metrics.mirror_shared(&source.shared());
    metrics.mirror_freshness(source.freshness().as_ref(), watch.too_large);
    let mut seen = HashSet::new();
    for snap in &snapshots {
        let m = metrics.resource(&snap.gvr);
        seen.insert((m.group().to_owned(), m.resource().to_owned()));
        if let Some(stats) = &snap.store {
            set_store_gauges(&m, stats);
        }
        // Counters mirrored from the reflector's own (absolute values; a restarted reflector reads as a reset).
        m.relists.absolute(snap.relists);
        m.watch_restarts.absolute(snap.watch_restarts);
        m.bad_frames.absolute(snap.bad_frames);
        m.restarts.absolute(snap.restarts);
        m.events_received_absolute(snap.events_received);
        set_dynamic(metrics, &m, Some(snap));
    }
    for m in metrics.all_resources() {
        if !seen.contains(&(m.group().to_owned(), m.resource().to_owned())) && m.has_dynamic() {
            set_store_gauges(&m, &StoreStats::default());
            set_dynamic(metrics, &m, None);
        }
    }
    snapshots
}

/// Reflector state, synced flag and event age of one resource (`None`: no longer cached).
fn set_dynamic(metrics: &Metrics, m: &ResourceMetrics, snap: Option<&ResourceSnapshot>) {
    let gauge = |name, labels| metrics.gauge(name, labels);
    let mut dynamic = m.dynamic.lock().unwrap_or_else(|p| p.into_inner());
    if dynamic.states.is_empty() {
        for &s in REFLECTOR_STATES {
            dynamic.states.insert(s, gauge(REFLECTOR_STATE, m.labels(&[("state", s)])));
        }
    }
    let current = snap.map_or(STOPPED, |s| s.state);
    if !dynamic.states.contains_key(current) {
        dynamic.states.insert(current, gauge(REFLECTOR_STATE, m.labels(&[("state", current)])));
    }
    for (state, g) in &dynamic.states {
        g.set(if *state == current { 1.0 } else { 0.0 });
    }
    let configured = snap.is_some_and(|s| s.configured);
    let synced = dynamic.synced.entry(configured).or_insert_with(|| {
        gauge(RESOURCE_SYNCED, m.labels(&[("configured", if configured { "true" } else { "false" })]))
    });
    synced.set(if snap.is_some_and(|s| s.synced) { 1.0 } else { 0.0 });
    for (c, g) in &dynamic.synced {
        if *c != configured {
            g.set(0.0);
        }
    }
    let age = snap.and_then(|s| s.since_last_event);
    if let Some(age) = age {
        dynamic
            .since_last_event
            .get_or_insert_with(|| gauge(SECONDS_SINCE_LAST_EVENT, m.labels(&[])))
            .set(age.as_secs_f64());
    }
}

// === impl ResourceMetrics (stats) ===

impl ResourceMetrics {
    fn has_dynamic(&self) -> bool {
        !self.dynamic.lock().unwrap_or_else(|p| p.into_inner()).states.is_empty()
    }
}

/// The readiness of a set of resources as the apiserver's health checks print them: one named check per
/// configured resource (`informer-sync-<resource>[.<group>]`, with `[<selector>]` appended for a filtered
/// mirror), failing until its store is synced.
pub(crate) fn ready_checks(snapshots: &[ResourceSnapshot]) -> Vec<(String, Result<(), String>)> {
    snapshots
        .iter()
        .filter(|s| s.configured)
        .map(|s| {
            let name = match &s.selector {
                // `informer-sync-pods[fieldSelector=spec.nodeName=node-1]`: which selection is synced.
                Some(selector) => format!("{}[{selector}]", check_name(&s.gvr)),
                None => check_name(&s.gvr),
            };
            let result = if s.synced {
                Ok(())
            } else {
                Err(s
                    .last_error
                    .clone()
                    .unwrap_or_else(|| format!("{} is {}, not synced yet", s.gvr, s.state)))
            };
            (name, result)
        })
        .collect()
}

/// Liveness: the process answers. Upstream trouble never fails it (a restart would not fix the upstream).
pub fn liveness() -> Vec<(String, Result<(), String>)> {
    vec![(PING.to_owned(), Ok(()))]
}

/// Readiness: ping, the source's extra checks, then one check per configured resource.
pub fn readiness(source: &dyn StatsSource) -> Vec<(String, Result<(), String>)> {
    let mut checks = liveness();
    checks.extend(source.extra_ready_checks());
    checks.extend(ready_checks(&source.resources()));
    checks
}

/// `informer-sync-pods`, `informer-sync-deployments.apps`.
pub fn check_name(gvr: &Gvr) -> String {
    if gvr.group.is_empty() {
        format!("informer-sync-{}", gvr.resource)
    } else {
        format!("informer-sync-{}.{}", gvr.resource, gvr.group)
    }
}

#[cfg(test)]
pub(crate) mod tests;
