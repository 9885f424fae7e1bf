//! One resource's slot: what its reads share. At most one probe, one census of the whole resource and one
//! proof watch in flight, each result published with its start time so a reader trusts only those that
//! started after it arrived. One lock (`state`) guards everything else; the channels only publish.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

use tokio::sync::watch;

use super::census::{self, Taken};
use super::plan::PROOF_LATENCY;
use super::{Freshness, probe, proof};
use crate::resource::{Gvr, ResourceInfo};
use crate::store::Store;

/// A probe that takes longer than this fails (and the read is forwarded).
pub(super) const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// A census that takes longer than this fails (and its readers are forwarded).
const CENSUS_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes a census's answer may exceed the store's own by (list and metadata framing, an empty store).
const CENSUS_SLACK_BYTES: usize = 16 << 20;

/// A coalesced upstream call's latest result, with its start time.
pub(super) type Started<T> = Option<(Instant, Result<T, String>)>;
/// A proof's outcome, with its start time: `(from, upto)` when proven.
pub(super) type ProofResult = Option<(Instant, Option<(u64, u64)>)>;

/// One resource's slot.
pub(super) struct Slot {
    state: Mutex<SlotState>,
    pub(super) probe: watch::Sender<Started<u64>>,
    pub(super) census: watch::Sender<Started<Arc<Taken>>>,
    pub(super) proof: watch::Sender<ProofResult>,
}

/// What a slot's lock guards.
#[derive(Debug)]
pub(super) struct SlotState {
    pub(super) probing: bool,
    /// What a probe's round trip takes (a mean of the recent ones).
    pub(super) round_trip: Option<Duration>,
    /// Whether the upstream takes the probe by name (see [`probe`]); cleared when it answers 400.
    pub(super) probe_by_name: bool,
    pub(super) census_running: bool,
    /// How long censuses of the whole resource take (a mean of the recent ones).
    pub(super) census_took: Option<Duration>,
    /// The share of the store's bytes a census lists (its objects' metadata), once estimated or measured.
    pub(super) census_share: Option<f64>,
    /// The start of the proof watch in flight, and of the last one.
    pub(super) proving: Option<Instant>,
    pub(super) last_proof: Option<Instant>,
    /// How long proofs take to prove (a mean of the recent ones).
    pub(super) proof_took: Option<Duration>,
    /// Readers that joined the proof in flight after its readers' probe: while proofs have such readers (a
    /// steady stream, not one burst), the next one starts as one ends (a rolling proof), so a reader waits
    /// for at most about one proof.
    pub(super) proof_readers: u32,
}

/// A mean that follows recent samples (each new one counts for half).
fn mean(old: Option<Duration>, new: Duration) -> Option<Duration> {
    Some(old.map_or(new, |m| (m + new) / 2))
}

// === impl Slot ===

impl Slot {
    fn new() -> Self {
        Self {
            state: Mutex::new(SlotState {
                probing: false,
                round_trip: None,
                probe_by_name: true,
                census_running: false,
                census_took: None,
                census_share: None,
                proving: None,
                last_proof: None,
                proof_took: None,
                proof_readers: 0,
            }),
            probe: watch::channel(None).0,
            census: watch::channel(None).0,
            proof: watch::channel(None).0,
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, SlotState> {
        self.state.lock().expect("freshness slot lock poisoned")
    }
}

// === impl Freshness (slots) ===

impl Freshness {
    pub(super) fn slot(&self, gvr: &Gvr) -> Arc<Slot> {
        let mut slots = self.slots.lock().expect("freshness slots lock poisoned");
        slots.entry(gvr.clone()).or_insert_with(|| Arc::new(Slot::new())).clone()
    }

    /// Starts a proof watch unless one is in flight; returns when the one in flight started. Its outcome is
    /// published on `slot.proof`. While proofs have readers the next starts as one ends (a rolling proof):
    /// the store's proven revision trails the upstream's by about a proof, one short watch at a time.
    pub(super) fn start_proof(&self, store: &Arc<Store>, slot: &Arc<Slot>) -> Instant {
        let mut started = {
            let mut state = slot.lock();
            if let Some(started) = state.proving {
                return started;
            }
            let started = Instant::now();
            (state.proving, state.last_proof, state.proof_readers) = (Some(started), Some(started), 0);
            started
        };
        let first = started;
        let upstream = self.upstream.clone();
        let gvr = &store.info().gvr;
        let collection = format!("{}/{}", gvr.path_prefix(), gvr.resource);
        // A filtered mirror's store holds only its selection: proving the selection quiet is enough.
        let selection = self.selection_of(gvr);
        let (store, slot, stats, known) =
            (store.clone(), slot.clone(), self.stats.clone(), self.known.clone());
        tokio::spawn(async move {
            loop {
                stats.proofs.fetch_add(1, Relaxed);
                // What the readers waiting now need (every probe they trusted raised it); a reader whose probe
                // ends later may need more, and waits for the next proof.
                let want = known.load(Relaxed);
                let from = store.resource_version();
                let watched = tokio::time::timeout(
                    proof::PROOF_TIMEOUT,
                    proof::quiet_until(&upstream, &collection, selection.as_deref(), from, want),
                );
                let result = match watched.await {
                    Ok(Ok(Some(upto))) if upto > from => {
                        store.offer_progress(from, upto);
                        known.fetch_max(upto, Relaxed);
                        Some((from, upto))
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(resource = %store.info().gvr, error = %e, "freshness proof failed");
                        None
                    }
                    _ => None,
                };
                let counter = if result.is_some() { &stats.proofs_succeeded } else { &stats.proofs_failed };
                counter.fetch_add(1, Relaxed);
                let next = {
                    let mut state = slot.lock();
                    if result.is_some() {
                        state.proof_took = mean(state.proof_took, started.elapsed());
                    }
                    let next = (state.proof_readers > 0).then(Instant::now);
                    (state.proving, state.proof_readers) = (next, 0);
                    if next.is_some() {
                        state.last_proof = next;
                    }
                    next
                };
                slot.proof.send_replace(Some((started, result)));
                match next {
                    Some(at) => started = at,
                    None => return,
                }
            }
        });
        first
    }

    /// The upstream's revision from a probe that started at or after `after`.
    pub(super) async fn probe_after(
        &self,
        info: &ResourceInfo,
        slot: &Arc<Slot>,
        after: Instant,
    ) -> Result<u64, String> {
        let result = coalesced(
            slot,
            &slot.probe,
            after,
            |state| &mut state.probing,
            |started| {
                let upstream = self.upstream.clone();
                let info = info.clone();
                let slot2 = slot.clone();
                self.stats.probes.fetch_add(1, Relaxed);
                tokio::spawn(async move {
                    let by_name = slot2.lock().probe_by_name;
                    let (result, by_name) =
                        match tokio::time::timeout(PROBE_TIMEOUT, probe::probe(&upstream, &info, by_name))
                            .await
                        {
                            Ok(r) => r,
                            Err(_) => (Err("probe timed out".to_owned()), by_name),
                        };
                    {
                        let mut state = slot2.lock();
                        if result.is_ok() {
                            state.round_trip = mean(state.round_trip, started.elapsed());
                        }
                        state.probing = false;
                        state.probe_by_name = by_name;
                    }
                    slot2.probe.send_replace(Some((started, result)));
                });
            },
        )
        .await;
        if let Ok(rv) = result {
            self.observe(rv);
        }
        result
    }

    /// A census of `store`'s whole resource ([`census`]) that started at or after `arrived`.
    pub(super) async fn census_after(
        &self,
        store: &Arc<Store>,
        slot: &Arc<Slot>,
        arrived: Instant,
    ) -> Result<Arc<Taken>, String> {
        coalesced(
            slot,
            &slot.census,
            arrived,
            |state| &mut state.census_running,
            |started| {
                let taken = self.census(store, census::Scope::default());
                let slot2 = slot.clone();
                let store_bytes = store.load().live_bytes;
                tokio::spawn(async move {
                    let result = taken.await;
                    {
                        let mut state = slot2.lock();
                        if let Ok(c) = &result {
                            let took = started.elapsed();
                            let (compared, matched, complete) = (c.compared, c.matched.is_some(), c.complete);
                            tracing::debug!(
                                compared,
                                matched,
                                complete,
                                bytes = c.bytes,
                                ?took,
                                "census taken"
                            );
                            state.census_took = mean(state.census_took, took);
                            // A census that ended early still knows its answer's length (the envelope's).
                            if store_bytes > 0 {
                                state.census_share = Some((c.bytes as f64 / store_bytes as f64).min(1.0));
                            }
                        }
                        state.census_running = false;
                    }
                    slot2.census.send_replace(Some((started, result)));
                });
            },
        )
        .await
    }

    /// A census of `scope` of `store`'s resource (narrowed by a filtered mirror's selection) compared with the
    /// store as it arrives, counted and bounded in time and size, as a future that owns what it needs (it may
    /// run on a task of its own).
    pub(super) fn census(
        &self,
        store: &Arc<Store>,
        scope: census::Scope,
    ) -> impl std::future::Future<Output = Result<Arc<Taken>, String>> + Send + 'static {
        let upstream = self.upstream.clone();
        let info = store.info().clone();
        let (store, stats) = (store.clone(), self.stats.clone());
        let selection = self.selection_of(&info.gvr);
        // The metadata of the objects is at most their whole JSON: the store's bytes bound the answer.
        let max_bytes = store.load().live_bytes.saturating_add(CENSUS_SLACK_BYTES);
        self.stats.censuses.fetch_add(1, Relaxed);
        if !scope.is_whole() {
            self.stats.census_parts.fetch_add(1, Relaxed);
        }
        async move {
            let prefix = info.gvr.path_prefix();
            let collection = (prefix.as_str(), info.gvr.resource.as_str());
            let held = &stats.census_bytes;
            let taken =
                census::take(&upstream, collection, &scope, selection.as_deref(), (&store, max_bytes), held);
            match tokio::time::timeout(CENSUS_TIMEOUT, taken).await {
                Ok(result) => result.map(Arc::new),
                Err(_) => Err("census timed out".to_owned()),
            }
        }
    }
}

/// What a proof is expected to take for `slot`'s resource.
pub(super) fn proof_latency(state: &SlotState) -> Duration {
    state.proof_took.unwrap_or(PROOF_LATENCY)
}

/// The result of a coalesced upstream call (at most one in flight, flagged by `running` under the slot's
/// lock; results published on `result` with their start time) that started at or after `after`: the one in
/// flight when it started late enough, otherwise a new one once it ends. `start` begins a call started at
/// the instant it is given; the call clears its flag and publishes its result.
async fn coalesced<T: Clone>(
    slot: &Slot,
    result: &watch::Sender<Started<T>>,
    after: Instant,
    running: impl Fn(&mut SlotState) -> &mut bool,
    start: impl Fn(Instant),
) -> Result<T, String> {
    let mut rx = result.subscribe();
    loop {
        {
            let current = rx.borrow_and_update();
            if let Some((started, result)) = &*current
                && *started >= after
            {
                return result.clone();
            }
        }
        {
            let mut state = slot.lock();
            let flag = running(&mut state);
            if !*flag {
                *flag = true;
                drop(state);
                start(Instant::now());
            }
        }
        if rx.changed().await.is_err() {
            return Err("freshness prober dropped".into());
        }
    }
}
