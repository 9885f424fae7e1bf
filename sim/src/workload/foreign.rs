//! The "foreign" background workload: what moves a real cluster's global revision while the resource under
//! test stays quiet. Node leases are renewed (`kube-node-lease`) and events are written (`default`, the
//! oldest deleted past a bound), at a rate that can be changed (or set to 0) while the sim runs.
//!
//! Writes go through the same code path as `PATCH`/`POST`/`DELETE` (in process, no HTTP), so they move the
//! global revision and reach watchers exactly like a client's writes.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;

use crate::http::State;
use crate::write::{self, Part, PatchType, Preconditions, WriteOpts};

/// Node leases renewed in turn (a real cluster has one per node).
pub const LEASES: usize = 16;
/// Events kept; older ones are deleted (a real cluster's events expire after an hour).
pub const EVENTS_KEPT: usize = 64;
/// The namespace of node leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// The namespace events are written in.
pub const EVENT_NAMESPACE: &str = "default";
/// The field manager of the background writes.
const MANAGER: &str = "kache-sim-foreign";
/// The slowest tick: a rate below 1/this is treated as off.
const MAX_PERIOD: Duration = Duration::from_secs(3600);

/// What the background workload has written so far (shared with the [`SimHandle`](crate::SimHandle)).
#[derive(Debug, Default)]
pub struct ForeignStats {
    /// Successful writes (lease renewals, event creations and deletions).
    pub writes: AtomicU64,
    /// Writes that failed (for example a namespace deleted by a test).
    pub failures: AtomicU64,
}

/// Runs until `shutdown` turns true: one write per `1 / rate` seconds, `rate` read from `rate_rx` (writes per
/// second; 0 pauses).
pub(crate) async fn run(
    state: Arc<State>,
    mut rate_rx: watch::Receiver<f64>,
    mut shutdown: watch::Receiver<bool>,
    stats: Arc<ForeignStats>,
) {
    let opts = WriteOpts { dry_run: false, manager: MANAGER.to_string() };
    let mut events: VecDeque<String> = VecDeque::new();
    let mut tick: u64 = 0;
    loop {
        let rate = *rate_rx.borrow_and_update();
        let period = period_of(rate);
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            r = rate_rx.changed() => if r.is_err() { return } else { continue },
            _ = sleep_opt(period) => {}
        }
        tick += 1;
        let ok = if tick.is_multiple_of(2) {
            write_event(&state, &opts, tick, &mut events)
        } else {
            renew_lease(&state, &opts, tick)
        };
        let counter = if ok { &stats.writes } else { &stats.failures };
        counter.fetch_add(1, Relaxed);
    }
}

fn period_of(rate: f64) -> Option<Duration> {
    if !(rate.is_finite() && rate > 0.0) {
        return None;
    }
    Some(Duration::from_secs_f64(1.0 / rate).min(MAX_PERIOD))
}

async fn sleep_opt(period: Option<Duration>) {
    match period {
        Some(p) => tokio::time::sleep(p).await,
        None => std::future::pending().await,
    }
}

/// Ensures a namespace exists (a test may run the sim without the default namespaces).
fn ensure_namespace(state: &State, opts: &WriteOpts, ns: &str) {
    if let Some(id) = state.store.find("", "namespaces") {
        let _ = write::create(&state.store, id, None, json!({"metadata": {"name": ns}}), opts);
    }
}

/// Renews node lease `tick % LEASES` (creating it the first time).
fn renew_lease(state: &State, opts: &WriteOpts, tick: u64) -> bool {
    let Some(id) = state.store.find("coordination.k8s.io", "leases") else { return false };
    let name = format!("node-{}", tick % LEASES as u64);
    let now = write::meta::now_rfc3339();
    let patch = json!({"spec": {"renewTime": now}});
    let patched = write::patch(
        &state.store,
        id,
        Some(LEASE_NAMESPACE),
        &name,
        PatchType::Merge,
        &patch,
        Part::Main,
        opts,
    );
    if patched.is_ok() {
        return true;
    }
    ensure_namespace(state, opts, LEASE_NAMESPACE);
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": LEASE_NAMESPACE},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now},
    });
    write::create(&state.store, id, Some(LEASE_NAMESPACE), lease, opts).is_ok()
}

/// Writes one event, deleting the oldest past [`EVENTS_KEPT`].
fn write_event(state: &State, opts: &WriteOpts, tick: u64, events: &mut VecDeque<String>) -> bool {
    let Some(id) = state.store.find("", "events") else { return false };
    if events.len() >= EVENTS_KEPT
        && let Some(old) = events.pop_front()
    {
        let _ = write::delete(&state.store, id, Some(EVENT_NAMESPACE), &old, &Preconditions::default(), opts);
    }
    let name = format!("node-{}.{tick:x}", tick % LEASES as u64);
    let event: Value = json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": EVENT_NAMESPACE},
        "involvedObject": {"kind": "Node", "name": format!("node-{}", tick % LEASES as u64)},
        "reason": "NodeHeartbeat", "message": "foreign background write", "type": "Normal",
        "source": {"component": MANAGER}, "count": 1,
    });
    let created = write::create(&state.store, id, Some(EVENT_NAMESPACE), event.clone(), opts);
    if created.is_err() {
        ensure_namespace(state, opts, EVENT_NAMESPACE);
        if write::create(&state.store, id, Some(EVENT_NAMESPACE), event, opts).is_err() {
            return false;
        }
    }
    events.push_back(name);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_to_period() {
        assert_eq!(period_of(0.0), None);
        assert_eq!(period_of(-1.0), None);
        assert_eq!(period_of(f64::NAN), None);
        assert_eq!(period_of(10.0), Some(Duration::from_millis(100)));
    }
}
