//! Proving the store fresh: consistent reads (resourceVersion unset) and reads at a revision the store has
//! not reached yet (Exact, continue tokens, NotOlderThan minted by the upstream). The policy, its guarantees
//! and its costs are written once in docs/consistency.md; what follows maps them to this module's items.
//!
//! The apiserver serves a consistent read from its watch cache once the cache reaches etcd's revision
//! (`cacher.go` `waitUntilFreshAndBlock`); the upstream offers kache no progress-notify API, so kache proves
//! freshness with what it offers clients: a **probe** ([`probe`], O(1)), the store's own next advance (a
//! **wait**), a **census** ([`census`], O(N) metadata) and a **proof** ([`proof`], a short watch's bookmark,
//! O(1), shared and rolling). The planner ([`plan`]), a pure function tested as a table, decides which;
//! [`Freshness`] only carries the steps out and feeds what it learns back in.

pub(crate) mod census;
pub mod etcd;
pub(crate) mod plan;
mod probe;
pub mod proof;
mod slot;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::time::{Instant, timeout_at};

use crate::resource::Gvr;
use crate::store::{Snapshot, Store};
use crate::upstream::Upstream;
use plan::{
    Activity, Cover, Done, InFlight, Kind, Measured, Observation, Probed, Read, Reason, Source, Step,
};
pub use plan::{DEFAULT_LATENCY_BOUND, Prefer};
use slot::Slot;

/// While a proof is in flight, the readers that need it probe together this long after it started: its
/// first bookmark comes at the watch's deadline − 2 s (≥ 1 s in), and only a bookmark after the probe's
/// answer proves the readers fresh. Readers arriving together (informers restarting at once) share one probe.
const PROOF_PROBE_BY: Duration = Duration::from_millis(600);
/// How long a proven reader waits for the reflector to apply the proof.
const PROOF_APPLY_TIMEOUT: Duration = Duration::from_secs(1);

/// What to do when a consistent read cannot be proven fresh.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Fallback {
    /// Forward the request upstream unchanged (default): the client gets the answer it would get directly.
    #[default]
    Forward,
    /// Answer 429 with Retry-After: 1, like the apiserver's ConsistentListFromCacheSkipTimeoutFallback: a
    /// refusal the apiserver would not give, counted in `kache_refusals_total`.
    TooManyRequests,
}

#[derive(Clone, Debug)]
pub struct FreshnessConfig {
    /// How much later than forwarding a read may be answered to spare the upstream ([`Prefer::Offload`]).
    pub latency_bound: Duration,
    pub prefer: Prefer,
    /// Prove reads fresh by a census ([`census`]) where that pays.
    pub census: bool,
    /// Prove quiet resources fresh by a short watch's bookmark ([`proof`]) where that pays (an upstream that
    /// sends no pre-deadline bookmarks, older than 1.27, would only waste them).
    pub prove: bool,
    /// Probe for every consistent read, also where a probe cannot pay off (gets and small lists, which are
    /// otherwise forwarded at once). For tests that exercise the memory path with small objects.
    pub probe_small_reads: bool,
    /// What one request costs the upstream, in bytes it could encode instead ([`plan::REQUEST_BYTES`]): a
    /// step pays when it saves that much. Tests whose small objects stand for big ones lower it.
    pub request_bytes: usize,
    pub fallback: Fallback,
    /// etcd as the freshness oracle ([`etcd`]), when kache runs beside the control plane.
    pub etcd: Option<etcd::EtcdConfig>,
}

impl Default for FreshnessConfig {
    fn default() -> Self {
        Self {
            latency_bound: DEFAULT_LATENCY_BOUND,
            prefer: Prefer::Offload,
            census: true,
            prove: true,
            probe_small_reads: false,
            request_bytes: plan::REQUEST_BYTES,
            fallback: Fallback::Forward,
            etcd: None,
        }
    }
}

/// A snapshot a census matched: it holds the upstream's objects at `rv` (≥ its own revision). A read
/// answers with it at `rv`, as the apiserver would; a watch sends its state, its initial-events-end bookmark
/// at `rv`, then the store's events after `rv` (those in between, still on their way when it matched, undo
/// each other: an object created and deleted again).
#[derive(Debug, Clone)]
pub struct Matched {
    pub snapshot: Arc<Snapshot>,
    /// The store generation it belongs to (a relist since makes it useless to a watch).
    pub generation: u64,
    pub rv: u64,
}

/// Why a consistent read could not be served from memory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotFresh {
    /// The read is too small for a probe to pay off: forwarded at once.
    #[error("a read of {bytes} bytes costs the upstream about what a probe costs: forwarded")]
    Small { bytes: usize },
    /// The probe of the upstream's revision failed.
    #[error("freshness probe failed")]
    ProbeFailed,
    /// The store is behind a revision the upstream is known to have reached and nothing cheaper than
    /// forwarding fits: forwarded at once, without a probe.
    #[error("store at {current} is behind the upstream's known revision {known} and quiet")]
    Quiet { known: u64, current: u64 },
    /// The store did not reach the probed revision, and nothing cheaper than forwarding fits.
    #[error("store at {current} did not reach upstream revision {required} in time")]
    Lagging { required: u64, current: u64 },
    /// The upstream answered the probe, census or proof too slowly: cut short at the read's cutoff.
    #[error("the upstream answered the freshness check too slowly: forwarded")]
    Slow,
}

/// How a consistent read is served from memory ([`Freshness::ensure`]).
#[derive(Debug, Clone)]
pub enum Fresh {
    /// From the store's current snapshot, at this resourceVersion or later.
    At(u64),
    /// From exactly this snapshot, which a census matched with the upstream's objects.
    Matched(Matched),
}

/// What to do with a read at a revision ahead of the store.
#[derive(Debug, Clone)]
pub enum Ahead {
    /// The store reached it: serve from memory.
    Reached,
    /// A census of the read's page at the revision matched this snapshot: serve the page from it.
    Matched(Matched),
    /// The upstream has reached it and the store has not: forward (the upstream answers from its cache or
    /// etcd).
    Forward,
    /// The upstream itself has not reached it within the block timeout: 504 "Too large resource version".
    TooLarge { requested: u64, current: u64 },
}

/// Outcome counters (exported as metrics; tests assert on them).
#[derive(Debug, Default)]
pub struct FreshnessStats {
    /// Probes sent upstream.
    pub probes: AtomicU64,
    pub probe_errors: AtomicU64,
    /// Consistent reads proven fresh (served from memory).
    pub fresh: AtomicU64,
    /// Consistent reads that probed and did not reach the revision (forwarded at once or after a wait).
    pub lagging: AtomicU64,
    /// Consistent reads forwarded at once without a probe (store behind the known revision, quiet).
    pub quiet: AtomicU64,
    /// Consistent reads forwarded at once without a probe because a probe would cost about as much as
    /// forwarding them (gets, small lists).
    pub small: AtomicU64,
    /// Reads (consistent or ahead) whose steps the upstream answered too slowly: cut short at the read's
    /// cutoff ([`plan::Observation::cutoff`]) and forwarded.
    pub slow: AtomicU64,
    /// 504 "Too large resource version" answers kache gave itself (not the upstream's, relayed): only when
    /// a probe showed the upstream had not reached the revision either.
    pub too_large: AtomicU64,
    /// Reads (consistent or ahead) that waited for the store because an advance was expected soon.
    pub waited: AtomicU64,
    /// Of those, the waits that ran out (the read was then forwarded).
    pub waits_expired: AtomicU64,
    /// Reads at a revision ahead of the store that the upstream had reached: forwarded instead of a 504.
    pub ahead_forwarded: AtomicU64,
    /// Reads at a revision ahead of the store that the store reached: served from memory.
    pub ahead_reached: AtomicU64,
    /// Proof watches opened upstream (coalesced: one in flight per resource).
    pub proofs: AtomicU64,
    /// Of those, the ones whose first frame was a bookmark (the quiet resource was proven fresh).
    pub proofs_succeeded: AtomicU64,
    /// Of those, the ones that proved nothing (an event, an error or no bookmark came first).
    pub proofs_failed: AtomicU64,
    /// Consistent reads served from memory thanks to a proof.
    pub proven: AtomicU64,
    /// Proofs started in the background for a quiet store behind the upstream (no reader waits for them;
    /// [`plan::CATCH_UP_INTERVAL`]).
    pub catch_ups: AtomicU64,
    /// Censuses taken upstream (metadata-only consistent lists, [`census`]).
    pub censuses: AtomicU64,
    /// Those of them that covered a part of the resource (a namespace, a page), for one read each.
    pub census_parts: AtomicU64,
    /// Reads served after a census: the snapshot held the upstream's objects, or the store had reached the
    /// census's revision.
    pub census_same: AtomicU64,
    /// Reads whose census showed writes the store lacked, still lacking after the catch-up wait: forwarded.
    pub census_behind: AtomicU64,
    /// Reads whose census failed: forwarded.
    pub census_failed: AtomicU64,
    /// Bytes the censuses in flight hold to parse their answers (at most one object's metadata, at most
    /// 3 MiB).
    pub census_bytes: AtomicU64,
}

/// Consistent-read freshness for every cached resource.
pub struct Freshness {
    upstream: Upstream,
    config: FreshnessConfig,
    slots: Mutex<HashMap<Gvr, Arc<Slot>>>,
    /// The highest revision the upstream is known to have reached (probes, censuses, proofs, stores).
    known: Arc<AtomicU64>,
    /// A filtered mirror's selection as a query string (`--resource-selector`), for proofs.
    selection: OnceLock<SelectionLookup>,
    /// The etcd oracle, when kache runs beside the control plane (`--etcd-endpoints`).
    etcd: OnceLock<Arc<etcd::Oracle>>,
    pub stats: Arc<FreshnessStats>,
}

/// The query string (`fieldSelector=…&labelSelector=…`) of a resource mirrored filtered, `None` when it is
/// mirrored whole.
pub(crate) type SelectionLookup = Arc<dyn Fn(&Gvr) -> Option<String> + Send + Sync>;

/// What a read has learnt so far: fed back into each observation.
#[derive(Default)]
struct Progress {
    probe: Probed,
    done: Done,
    /// The snapshot this read's own census matched.
    matched: Option<Matched>,
}

/// How a read ended.
enum Outcome {
    Serve(Fresh),
    Forward { reason: Reason, required: u64 },
    TooLarge { current: u64 },
}

// === impl Freshness ===

impl Freshness {
    pub fn new(upstream: Upstream, config: FreshnessConfig) -> Self {
        let etcd = OnceLock::new();
        if let Some(c) = &config.etcd {
            match etcd::Oracle::new(c.clone()) {
                Ok(oracle) => {
                    let _ = etcd.set(Arc::new(oracle));
                }
                Err(e) => tracing::error!(error = %e, "etcd oracle not started"),
            }
        }
        Self {
            upstream,
            config,
            slots: Mutex::new(HashMap::new()),
            known: Arc::new(AtomicU64::new(0)),
            selection: OnceLock::new(),
            etcd,
            stats: Arc::new(FreshnessStats::default()),
        }
    }

    /// Tells proofs which resources are mirrored filtered: a filtered store is proven quiet by a watch of its
    /// own selection, which other selections' events (other nodes' pods) do not interrupt. Set once.
    pub(crate) fn set_selection_lookup(&self, lookup: SelectionLookup) {
        let _ = self.selection.set(lookup);
    }

    /// The etcd oracle's counters, when there is one.
    pub fn etcd_stats(&self) -> Option<etcd::EtcdCounters> {
        self.etcd.get().map(|o| o.stats())
    }

    /// Whether kache runs with the etcd oracle (`--etcd-endpoints`).
    pub(crate) fn has_oracle(&self) -> bool {
        self.etcd.get().is_some()
    }

    /// Starts the etcd oracle's prefix watch of a synced store if it has none yet (nothing without an
    /// oracle), so the first consistent reads of the resource find it ready.
    pub(crate) fn prepare(&self, store: &Arc<Store>) {
        if let Some(oracle) = self.etcd.get() {
            let filtered = self.selection_of(&store.info().gvr).is_some();
            oracle.prepare(store, filtered);
        }
    }

    /// Whether `store`'s oracle watch has been started and its first attempt is over (always, without an
    /// oracle): readiness waits for it, so the first reads after `/readyz` succeeds are proven by etcd.
    pub(crate) fn oracle_settled(&self, store: &Arc<Store>) -> bool {
        self.etcd.get().is_none_or(|oracle| oracle.settled(store))
    }

    /// The selection query of `gvr` when it is mirrored filtered.
    fn selection_of(&self, gvr: &Gvr) -> Option<String> {
        self.selection.get().and_then(|lookup| lookup(gvr))
    }

    pub fn config(&self) -> &FreshnessConfig {
        &self.config
    }

    /// The highest revision the upstream is known to have reached.
    pub(crate) fn known_revision(&self) -> u64 {
        self.known.load(Relaxed)
    }

    /// Records a revision the upstream has reached (from one of its own answers, never from a client).
    pub(crate) fn observe(&self, rv: u64) {
        self.known.fetch_max(rv, Relaxed);
    }

    /// Proves the store at least as fresh as the upstream was at `arrived`: the store's resourceVersion to
    /// serve at (≥ the upstream's revision then and ≥ `min_rv`, e.g. the last write through kache), or the
    /// snapshot a census matched. `bytes` is the size of the read (what forwarding it would cost); `watch`
    /// marks a consistent watch, which forwarding would pin upstream for its whole life; a caller that can
    /// serve a matched snapshot passes what a census would cover (`census`: the whole resource, or the read's
    /// namespace or first page); one that cannot (a consistent watch without initial events, a selector's
    /// list) passes `None`.
    pub(crate) async fn ensure(
        &self,
        store: &Arc<Store>,
        arrived: Instant,
        min_rv: u64,
        bytes: usize,
        watch: bool,
        census: Option<&census::Scope>,
    ) -> Result<Fresh, NotFresh> {
        let read = Read {
            kind: if watch { Kind::Watch } else { Kind::Read },
            want: plan::Want::Consistent,
            bytes,
            census: census.map(cover),
            arrived,
        };
        match self.execute(store, read, min_rv, census).await {
            Outcome::Serve(fresh) => {
                self.stats.fresh.fetch_add(1, Relaxed);
                Ok(fresh)
            }
            Outcome::Forward { reason, required } => {
                let current = store.resource_version();
                Err(match reason {
                    Reason::Small => {
                        self.stats.small.fetch_add(1, Relaxed);
                        NotFresh::Small { bytes }
                    }
                    Reason::ProbeFailed => NotFresh::ProbeFailed,
                    Reason::Slow => NotFresh::Slow,
                    Reason::Quiet => {
                        self.stats.quiet.fetch_add(1, Relaxed);
                        NotFresh::Quiet { known: required, current }
                    }
                    Reason::Lagging | Reason::Ahead => {
                        self.stats.lagging.fetch_add(1, Relaxed);
                        NotFresh::Lagging { required, current }
                    }
                })
            }
            Outcome::TooLarge { .. } => unreachable!("a consistent read is never ahead of the upstream"),
        }
    }

    /// Decides a read at revision `n`, which the store has not reached (`n` > its resourceVersion). Never
    /// answers 504 when the upstream has reached `n`; only when the upstream itself has not reached `n` does
    /// the read wait up to `block_timeout` as the apiserver does, and then get the apiserver's 504. `page`:
    /// a continued page, which a census of that page at `n` may decide.
    pub(crate) async fn ahead(
        &self,
        store: &Arc<Store>,
        n: u64,
        arrived: Instant,
        bytes: usize,
        block_timeout: Duration,
        page: Option<&census::Scope>,
    ) -> Ahead {
        let read = Read {
            kind: Kind::Read,
            want: plan::Want::At { rv: n, block: block_timeout },
            bytes,
            census: page.map(|_| Cover::Part),
            arrived,
        };
        match self.execute(store, read, 0, page).await {
            Outcome::Serve(Fresh::At(_)) => {
                self.stats.ahead_reached.fetch_add(1, Relaxed);
                Ahead::Reached
            }
            Outcome::Serve(Fresh::Matched(matched)) => Ahead::Matched(matched),
            Outcome::Forward { .. } => {
                self.stats.ahead_forwarded.fetch_add(1, Relaxed);
                Ahead::Forward
            }
            Outcome::TooLarge { current } => {
                self.stats.too_large.fetch_add(1, Relaxed);
                Ahead::TooLarge { requested: n, current }
            }
        }
    }

    /// Carries out the planner's steps for `read` until one ends it.
    async fn execute(
        &self,
        store: &Arc<Store>,
        read: Read,
        min_rv: u64,
        scope: Option<&census::Scope>,
    ) -> Outcome {
        self.observe(store.resource_version());
        let slot = self.slot(&store.info().gvr);
        let mut p = Progress::default();
        loop {
            let o = self.observation(store, &slot, &read, &p);
            let step = plan::plan(&o);
            let cutoff = o.cutoff();
            tracing::trace!(resource = %store.info().gvr, ?step, "freshness step");
            // The revision the read needs: the probe's (or census's) answer, else the one it asked for.
            let required = match (read.want, p.probe) {
                (plan::Want::At { rv, .. }, _) | (plan::Want::Consistent, Probed::At(rv)) => rv,
                _ => o.upstream.known.max(min_rv),
            };
            match step {
                Step::Serve(Source::Store) => return Outcome::Serve(Fresh::At(store.resource_version())),
                Step::Serve(Source::Matched) => {
                    let matched = p.matched.take().expect("planned only once the read's census matched");
                    return Outcome::Serve(Fresh::Matched(matched));
                }
                Step::Oracle => {
                    p.done.oracle = true;
                    let filtered = self.selection_of(&store.info().gvr).is_some();
                    let Some(oracle) = self.etcd.get() else { continue };
                    let Ok(proven) = timeout_at(cutoff, oracle.prove(store, read.arrived, filtered)).await
                    else {
                        return self.cut_short(read, required);
                    };
                    if let Ok(rv) = proven {
                        // etcd's revision is the upstream's: it answers as the read's first probe would (for a
                        // read ahead of it, the upstream has not reached the read's revision either).
                        self.observe(rv);
                        p.probe = Probed::At(rv.max(min_rv));
                        p.done.probes += 1;
                    }
                }
                Step::Probe => {
                    let after = if p.done.probes == 0 { read.arrived } else { Instant::now() };
                    p.done.probes += 1;
                    let Ok(probed) = timeout_at(cutoff, self.probe_after(store.info(), &slot, after)).await
                    else {
                        return self.cut_short(read, required);
                    };
                    p.probe = match probed {
                        Ok(rv) => Probed::At(rv.max(min_rv)),
                        Err(e) => {
                            tracing::debug!(resource = %store.info().gvr, error = %e, "freshness probe failed");
                            self.stats.probe_errors.fetch_add(1, Relaxed);
                            Probed::Failed
                        }
                    };
                }
                Step::Wait { until } => {
                    p.done.waited = true;
                    self.stats.waited.fetch_add(1, Relaxed);
                    let wait = until.saturating_duration_since(Instant::now());
                    if store.wait_for(required, wait).await.is_err() {
                        self.stats.waits_expired.fetch_add(1, Relaxed);
                    }
                }
                Step::Census(_) => {
                    p.done.census = true;
                    let scope = scope.expect("a census is planned only for a read that names its scope");
                    let taken =
                        timeout_at(cutoff, self.census_step(store, &slot, read.arrived, scope, &mut p));
                    let Ok(taken) = taken.await else { return self.cut_short(read, required) };
                    if let Some(rv) = taken {
                        p.probe = Probed::At(match p.probe {
                            Probed::At(probed) => probed.max(rv),
                            _ => rv.max(min_rv),
                        });
                    }
                }
                Step::Prove => {
                    p.done.proved = true;
                    let proved = timeout_at(cutoff, self.prove(store, &slot, read.arrived, p.probe, min_rv));
                    let Ok(proved) = proved.await else { return self.cut_short(read, required) };
                    p.probe = proved;
                    if let Probed::At(rv) = p.probe
                        && store.resource_version() >= rv
                    {
                        self.stats.proven.fetch_add(1, Relaxed);
                    }
                }
                Step::Forward { reason, catch_up } => {
                    if catch_up {
                        self.stats.catch_ups.fetch_add(1, Relaxed);
                        self.start_proof(store, &slot);
                    }
                    return Outcome::Forward { reason, required };
                }
                Step::TooLarge { current } => return Outcome::TooLarge { current },
            }
        }
    }

    /// A read whose step the upstream answered too slowly, at its cutoff: forwarded (a read ahead too: the
    /// upstream decides), counted.
    fn cut_short(&self, read: Read, required: u64) -> Outcome {
        self.stats.slow.fetch_add(1, Relaxed);
        tracing::debug!(?read, "freshness steps cut short: the upstream answered too slowly");
        let reason = match read.want {
            plan::Want::Consistent => Reason::Slow,
            plan::Want::At { .. } => Reason::Ahead,
        };
        Outcome::Forward { reason, required }
    }

    /// What the read sees now.
    fn observation(&self, store: &Store, slot: &Slot, read: &Read, p: &Progress) -> Observation {
        let now = Instant::now();
        let state = store.load();
        let times = state.retained.iter().rev().take(plan::ACTIVITY_SAMPLES).map(|s| s.taken_at);
        let activity = Activity::from_times(times, now);
        let mut s = slot.lock();
        let share = *s.census_share.get_or_insert_with(|| census::metadata_share(&state));
        Observation {
            now,
            read: *read,
            store: plan::StoreView {
                rv: state.snapshot.rv,
                matched: p.matched.as_ref().map(|m| m.rv),
                bytes: state.live_bytes,
                census_bytes: (state.live_bytes as f64 * share) as usize,
                activity,
            },
            upstream: plan::UpstreamView {
                known: self.known_revision(),
                probe: p.probe,
                etcd: self.etcd.get().is_some(),
            },
            measured: Measured {
                round_trip: s.round_trip.unwrap_or(plan::ROUND_TRIP),
                census: s.census_took,
                proof: slot::proof_latency(&s),
            },
            flight: InFlight { proof: s.proving, last_proof: s.last_proof },
            done: p.done,
            policy: plan::Policy {
                latency_bound: self.config.latency_bound,
                prefer: self.config.prefer,
                census: self.config.census,
                prove: self.config.prove,
                small_reads: self.config.probe_small_reads,
                request_bytes: self.config.request_bytes,
            },
        }
    }

    /// Takes a census of `scope` started after `arrived` (coalesced for the whole resource), compared with the
    /// store as it arrived (waiting up to [`census`]'s catch-up for writes it showed the store lacked): the
    /// snapshot it matched goes to `p.matched`. Returns the census's revision (≥ the upstream's when it
    /// started).
    async fn census_step(
        &self,
        store: &Arc<Store>,
        slot: &Arc<Slot>,
        arrived: Instant,
        scope: &census::Scope,
        p: &mut Progress,
    ) -> Option<u64> {
        let taken = if scope.is_whole() {
            self.census_after(store, slot, arrived).await
        } else {
            self.census(store, scope.clone()).await
        };
        let taken = match taken {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(resource = %store.info().gvr, error = %e, "census failed");
                self.stats.census_failed.fetch_add(1, Relaxed);
                return None;
            }
        };
        self.observe(taken.rv);
        // The store may have reached the census's revision since (its current snapshot then serves), else the
        // snapshot the census matched does.
        let current = store.load();
        let state = if current.snapshot.rv >= taken.rv { Some(current) } else { taken.matched.clone() };
        match state {
            Some(state) => {
                self.stats.census_same.fetch_add(1, Relaxed);
                let rv = taken.rv.max(state.snapshot.rv);
                p.matched =
                    Some(Matched { snapshot: state.snapshot.clone(), generation: state.generation, rv });
            }
            None => {
                self.stats.census_behind.fetch_add(1, Relaxed);
            }
        }
        Some(taken.rv)
    }

    /// Proves the store fresh at the upstream's revision when the read arrived: joins the proof in flight (or
    /// starts one), probes if the read has not (together with the other readers of the proof, shortly before
    /// its bookmark is due), and waits for a proof reaching the probed revision (the one in flight, else the
    /// next) to be applied. Correctness does not rest on timing: only a proof reaching the probe's revision
    /// counts. Returns what the probe answered.
    async fn prove(
        &self,
        store: &Arc<Store>,
        slot: &Arc<Slot>,
        arrived: Instant,
        probe: Probed,
        min_rv: u64,
    ) -> Probed {
        let started = self.start_proof(store, slot);
        if Instant::now() >= started + PROOF_PROBE_BY {
            // A reader that came after the proof's probe may need the next proof: keep them rolling.
            slot.lock().proof_readers += 1;
        }
        let required = match probe {
            Probed::At(rv) => rv,
            _ => {
                tokio::time::sleep_until((started + PROOF_PROBE_BY).max(arrived)).await;
                match self.probe_after(store.info(), slot, arrived).await {
                    Ok(rv) => rv.max(min_rv),
                    Err(_) => {
                        self.stats.probe_errors.fetch_add(1, Relaxed);
                        return Probed::Failed;
                    }
                }
            }
        };
        let mut rx = slot.proof.subscribe();
        for _ in 0..2 {
            if store.resource_version() >= required {
                break;
            }
            if rx.changed().await.is_err() {
                break;
            }
            let outcome = *rx.borrow_and_update();
            if let Some((_, Some((_, upto)))) = outcome
                && upto >= required
            {
                let _ = store.wait_for(required, PROOF_APPLY_TIMEOUT).await;
                break;
            }
            // Short of it (its bookmark came before the probe's revision): the next one.
            self.start_proof(store, slot);
        }
        Probed::At(required)
    }
}

/// What a census of `scope` covers, as the planner sees it.
fn cover(scope: &census::Scope) -> Cover {
    if scope.is_whole() { Cover::Whole } else { Cover::Part }
}

#[cfg(test)]
#[path = "executor_tests.rs"]
mod executor_tests;
