//! Proving the store fresh: consistent reads (resourceVersion unset) and reads at a revision the store has
//! not reached yet (Exact, continue tokens, NotOlderThan minted by the upstream). The policy, its guarantees
//! and its costs are written once in docs/consistency.md; what follows maps them to this module's items.
//!
//! The apiserver serves a consistent read from its watch cache after asking etcd for its current revision
//! and waiting (≤ 3 s, with progress notifications every 100 ms) until the cache reaches it
//! (`cacher.go` `waitUntilFreshAndBlock`, `ConsistentListFromCache`, the progress requester). The upstream
//! offers kache no progress-notify API, so kache does the equivalent with what it does offer:
//!
//! 0. **Forward small reads at once.** A probe costs about what forwarding a get or a small list costs (the
//!    apiserver itself serves every consistent get from etcd, `CacheDelegator.Get`), so probing for them
//!    could only add latency: a read is probed only when serving it from memory saves a measured probe's
//!    worth of time ([`budget::ProbeCost::pays`]: lists of ~100 KB and more; an unmeasured or stale estimate
//!    is explored by one read per 30 s), or when a proof pays (4.).
//! 1. **Probe**: a consistent list of one name of the resource ([`probe`]). Its `metadata.resourceVersion`
//!    is R ≥ the upstream's revision when the probe started. Probes are coalesced per resource (one in flight) and a
//!    request only trusts a probe that *started after the request arrived*, so a write acknowledged before
//!    the request is always reflected. Every probe also raises [`Freshness::known_revision`], the highest
//!    revision the upstream is known to have reached (revisions are global, so any resource's probe counts).
//! 2. **Serve** from memory when the store is at R or beyond.
//! 3. **Wait** only when it can pay off ([`budget`]): the store reaches R only with this resource's next
//!    advance (an event or an upstream bookmark), so kache waits when that advance is expected sooner than
//!    the read would take upstream; otherwise it **forwards at once**. A store already behind the known
//!    revision whose next advance is not expected soon is forwarded without probing at all: the probe could
//!    only return a revision it has not reached. Such a store is caught up in the background by a proof
//!    (4.) at most every [`CATCH_UP_INTERVAL`], so that once the foreign writes pause, reads find it fresh.
//!
//! 4. **Prove** a quiet resource fresh where forwarding costs more than a proof ([`proof`]): a consistent
//!    watch (WatchList: forwarding it would pin the upstream for the watch's lifetime) or a read whose
//!    forwarding cost, times the readers waiting for the same proof, exceeds [`PROOF_COST`]. After the
//!    probe, a short upstream watch from the store's revision whose first frame is the pre-deadline bookmark
//!    at B ≥ R proves no event in between; the proof is offered to the reflector, which applies it as
//!    progress, and every waiting reader is served from memory. Proofs are coalesced per resource.
//!
//! A read at a revision N ahead of the store ([`Freshness::ahead`]) is never answered 504 when the upstream
//! is known to have reached N (a continue token or Exact revision minted by a forwarded answer): it waits
//! under the same rule, then is forwarded. Only when a probe shows the upstream itself has not reached N
//! does kache wait the apiserver's block timeout and answer its 504.
//!
//! Fallbacks are bounded by a semaphore so a slow upstream cannot cause a storm.

pub mod budget;
pub(crate) mod census;
mod probe;
pub mod proof;
mod slot;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::time::Instant;

use tokio::sync::Semaphore;

use crate::resource::Gvr;
use crate::store::{Snapshot, Store};
use crate::upstream::Upstream;
use budget::{ACTIVITY_SAMPLES, Activity, ProbeCost, forward_cost, memory_cost, wait_budget};
pub(crate) use slot::Forwarding;
use slot::{Held, Slot, Waiting};

/// The longest a consistent read waits for the store to reach the probed revision, however much waiting
/// seems to pay off. The apiserver waits up to 3 s (`blockTimeout`) but it can request progress from etcd
/// every 100 ms; kache cannot, so it waits only where [`budget`] expects an advance.
pub(crate) const DEFAULT_CONSISTENT_WAIT: Duration = Duration::from_millis(500);
/// Upper bound on concurrent consistent reads that fell back upstream.
pub(crate) const DEFAULT_FALLBACK_CONCURRENCY: usize = 32;
/// A probe that takes longer than this fails (and the read falls back).
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// What a proof costs the readers waiting for it (the pre-deadline bookmark comes 1–2 s into the proof
/// watch): a read whose forwarding costs more, counting every reader waiting for the same proof, is proven.
pub(crate) const PROOF_COST: Duration = Duration::from_secs(2);
/// A read is only proven when forwarding it costs at least this fraction of a proof (a multi-megabyte list):
/// a proof delays its readers by ~1–2 s, which small reads, however many, should not pay.
const PROOF_MIN_FRACTION: u32 = 10;
/// Background proofs of a quiet store behind the upstream's known revision start at most this often per
/// resource (see `Freshness::catch_up`): one short upstream watch per interval while foreign writes go on.
const CATCH_UP_INTERVAL: Duration = Duration::from_secs(10);
/// How long a read that will need a proof waits before probing, so that readers arriving together (a relist
/// storm: informers restarting at once) share one probe. Small against the proof's 1–2 s, which runs
/// meanwhile.
const PROOF_GATHER: Duration = Duration::from_millis(250);
/// While a proof is in flight, the readers that will need it probe together this long after it started:
/// its first bookmark comes at the watch's deadline − 2 s (`PROOF_WATCH_SECONDS` = 3: ≥ 1 s in), and only
/// a bookmark after the probe's answer (the upstream's cache caught up to the probed revision) proves the
/// readers fresh; one that comes first is followed by another proof.
const PROOF_PROBE_BY: Duration = Duration::from_millis(600);
/// A census that takes longer than this fails (and its readers are forwarded).
const CENSUS_TIMEOUT: Duration = Duration::from_secs(10);
/// Reads smaller than this are never served by a census of the whole resource: forwarding them costs little,
/// and such a census costs at least a round trip plus the metadata of every object.
pub(crate) const CENSUS_MIN_BYTES: usize = 1 << 20;
/// Reads of a part of the resource (a namespace, a first page) smaller than this are never served by a census
/// of that part: a census costs a round trip, as forwarding does, so only the bytes it saves can pay for it
/// (a namespace list of 100 objects, 218 KiB, forwarded in 2.4–3.5 ms on the real apiserver, against a census
/// of 29 KiB in 1.5–1.8 ms).
pub(crate) const CENSUS_MIN_PART_BYTES: usize = 128 << 10;
/// A census is taken for a read when it and serving from memory together cost at most this fraction of
/// forwarding the read (estimates, [`budget::forward_cost`]).
const CENSUS_MAX_FRACTION: f64 = 0.75;
/// How long a read whose census shows writes the store lacks waits for them (their events are on the way:
/// the upstream's cache had them when it answered the census) before comparing again once.
const CENSUS_CATCH_UP: Duration = Duration::from_millis(100);
/// After a probe found the upstream past a held snapshot (foreign writes going on), reads do not try held
/// snapshots for this long: each try costs a probe before the census that decides.
const HELD_BACKOFF: Duration = Duration::from_secs(1);
/// How long a proven reader waits for the reflector to apply the proof.
const PROOF_APPLY_TIMEOUT: Duration = Duration::from_secs(1);

/// What to do when a consistent read cannot be proven fresh in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Fallback {
    /// Forward the request upstream unchanged (default): the client always gets a consistent answer.
    #[default]
    Forward,
    /// Answer 429 with Retry-After: 1, like the apiserver's ConsistentListFromCacheSkipTimeoutFallback.
    TooManyRequests,
}

#[derive(Clone, Debug)]
pub struct FreshnessConfig {
    /// Upper bound of a wait for the store (see [`DEFAULT_CONSISTENT_WAIT`]).
    pub wait: Duration,
    pub fallback: Fallback,
    pub fallback_concurrency: usize,
    /// Prove quiet resources fresh with a short upstream watch where that beats forwarding ([`proof`]).
    pub prove: bool,
    /// What a proof costs its readers; reads whose forwarding (times the waiting readers) costs more are
    /// proven ([`PROOF_COST`]).
    pub proof_cost: Duration,
    /// Probe for every consistent read, also where a probe cannot pay off ([`budget::probe_pays`]: gets and
    /// small lists, which are otherwise forwarded at once). For tests that exercise the memory path with
    /// small objects.
    pub probe_small_reads: bool,
    /// Prove a quiet store behind the upstream fresh by a census ([`census`]) where that beats forwarding a
    /// big list.
    pub census: bool,
    /// Decide every big consistent read (and every consistent watch) of a quiet store behind the upstream by a
    /// census, whatever the costs (for tests of the census path, whose small upstreams make the measured
    /// costs vary).
    pub census_always: bool,
}

impl Default for FreshnessConfig {
    fn default() -> Self {
        Self {
            wait: DEFAULT_CONSISTENT_WAIT,
            fallback: Fallback::Forward,
            fallback_concurrency: DEFAULT_FALLBACK_CONCURRENCY,
            prove: true,
            proof_cost: PROOF_COST,
            probe_small_reads: false,
            census: true,
            census_always: false,
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
    /// The read is too small for a probe to pay off ([`budget::probe_pays`]): forwarded at once.
    #[error("a read of {bytes} bytes costs about what a probe costs: forwarded")]
    Small { bytes: usize },
    /// The probe of the upstream's revision failed.
    #[error("freshness probe failed: {0}")]
    ProbeFailed(String),
    /// The store is behind a revision the upstream is known to have reached and is not expected to
    /// advance soon: forwarded at once, without a probe.
    #[error("store at {current} is behind the upstream's known revision {known} and quiet")]
    Quiet { known: u64, current: u64 },
    /// The store did not reach the probed revision (at once, or within a wait that could pay off).
    #[error("store at {current} did not reach upstream revision {required} in time")]
    Lagging { required: u64, current: u64 },
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
    pub proofs_succeeded: Arc<AtomicU64>,
    /// Of those, the ones that proved nothing (an event, an error or no bookmark came first).
    pub proofs_failed: Arc<AtomicU64>,
    /// Consistent reads served from memory thanks to a proof.
    pub proven: AtomicU64,
    /// Proofs started in the background for a quiet store behind the upstream (no reader waits for them).
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
    /// Reads served from the snapshot an earlier census of the whole resource matched, without a census of
    /// their own: the upstream had not moved past that census's revision ([`slot::Held`]).
    pub census_held: AtomicU64,
}

/// Consistent-read freshness for every cached resource.
pub struct Freshness {
    upstream: Upstream,
    config: FreshnessConfig,
    slots: Mutex<HashMap<Gvr, Arc<Slot>>>,
    fallbacks: Arc<Semaphore>,
    /// The highest revision the upstream is known to have reached (probes, stores).
    known: AtomicU64,
    /// What a probe round trip costs, measured.
    probe_cost: Arc<ProbeCost>,
    /// A filtered mirror's selection as a query string (`--resource-selector`), for proofs.
    selection: OnceLock<SelectionLookup>,
    pub stats: FreshnessStats,
}

/// The query string (`fieldSelector=…&labelSelector=…`) of a resource mirrored filtered, `None` when it is
/// mirrored whole.
pub(crate) type SelectionLookup = Arc<dyn Fn(&Gvr) -> Option<String> + Send + Sync>;

// === impl Freshness ===

impl Freshness {
    pub fn new(upstream: Upstream, config: FreshnessConfig) -> Self {
        let fallbacks = Arc::new(Semaphore::new(config.fallback_concurrency.max(1)));
        Self {
            upstream,
            config,
            slots: Mutex::new(HashMap::new()),
            fallbacks,
            known: AtomicU64::new(0),
            probe_cost: Arc::new(ProbeCost::default()),
            selection: OnceLock::new(),
            stats: FreshnessStats::default(),
        }
    }

    /// Tells proofs which resources are mirrored filtered: a filtered store is proven quiet by a watch of its
    /// own selection, which other selections' events (other nodes' pods) do not interrupt. Set once.
    pub(crate) fn set_selection_lookup(&self, lookup: SelectionLookup) {
        let _ = self.selection.set(lookup);
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
    /// serve at (≥ the probed revision and ≥ `min_rv`, e.g. the last write through kache), or the snapshot a
    /// census matched ([`Freshness::by_census`]). `bytes` is the size of the read (what forwarding it would
    /// cost); `watch` marks a consistent watch, which forwarding would pin upstream for its whole life; a
    /// caller that can serve a matched snapshot passes what a census would cover (`census`: the whole resource,
    /// or the read's namespace or first page); one that cannot (a consistent watch without initial events, a
    /// selector's list) passes `None`.
    pub(crate) async fn ensure(
        &self,
        store: &Arc<Store>,
        arrived: Instant,
        min_rv: u64,
        bytes: usize,
        watch: bool,
        census: Option<&census::Scope>,
    ) -> Result<Fresh, NotFresh> {
        let gvr = &store.info().gvr;
        self.observe(store.resource_version());
        let slot = self.slot(gvr);
        // A snapshot a census matched ([`Held`]) serves what a read of the whole can (a list, a selector's list,
        // a WatchList of initial events); not a watch that starts after the state (it would start past the
        // store's history). It is tried while the upstream is not known to have moved past it, and not again
        // for a while once a probe found it had (foreign writes going on: a census decides at once).
        let can_hold = !watch || census.is_some();
        let known = self.known_revision().max(min_rv);
        // Only a confirmed one ([`Held::confirmed`]): trying it costs a probe before the census that decides.
        let held = self
            .held(store, &slot)
            .filter(|(held, confirmed)| {
                can_hold && *confirmed && held.rv >= known && !Self::held_missed_lately(&slot)
            })
            .map(|(held, _)| held);
        // The store's revision, or the revision a census proved its snapshot at while nothing changed since.
        let store_rv = store.resource_version();
        let current = held.as_ref().map_or(store_rv, |held| held.rv.max(store_rv));
        let budget = self.budget(store, &slot, bytes);
        let prove = self.proof_pays(&slot, bytes, watch, arrived);
        if let Some(scope) = census.filter(|scope| {
            store_rv < known && budget.is_zero() && self.census_pays(store, &slot, bytes, watch, scope)
        }) {
            // Known to be behind, quiet (no advance expected soon), and big: a census shows in one round trip
            // whether the store holds what the upstream holds (a proof takes 1–2 s, forwarding costs more than
            // the census). A busy store is probed and waited for instead: its next event is near.
            let Some(held) = held else {
                return self.by_census(store, arrived, known, scope).await;
            };
            // A census matched the store's snapshot at the latest revision kache knows of: a probe shows whether
            // the upstream is still there (the snapshot serves) or has moved on (a census at the probe's revision).
            let required = self.required(store, &slot, arrived, min_rv).await?;
            if let Some(held) = self.held_through(store, &slot, &held, required) {
                return Ok(self.serve_held(&slot, arrived, bytes, held));
            }
            return self.by_census(store, arrived, required, scope).await;
        }
        if !prove && !self.config.probe_small_reads && !self.probe_cost.pays(bytes, Instant::now()) {
            // A probe costs about what forwarding this read costs: it could only add latency.
            self.stats.small.fetch_add(1, Relaxed);
            return Err(NotFresh::Small { bytes });
        }
        if current < known && budget.is_zero() && !prove {
            // Any probe started now returns ≥ known > current: the read cannot be served without an advance,
            // and none is expected soon. A proof in the background lets later reads find the store caught
            // up once the foreign writes pause (rate-bounded: useless while they go on).
            self.stats.quiet.fetch_add(1, Relaxed);
            self.catch_up(store, &slot);
            return Err(NotFresh::Quiet { known, current });
        }
        if prove && current < known {
            // The store is known to be behind: this read will need a proof (~1–2 s). Start it now; its
            // bookmark comes long after the probe below.
            self.start_proof(store, &slot);
        }
        if prove && (current < known || *slot.running.lock().expect("probe lock poisoned")) {
            // A read that will (likely) need a proof, or that cannot use the probe in flight (it started
            // before the read arrived): let the readers arriving together (a relist storm) gather before
            // probing, so that one probe serves them all. While a proof is in flight, its bookmark comes no
            // sooner than a second after it started: the readers gather until shortly before that, which
            // costs them nothing (they wait for the bookmark anyway) and lets one probe serve the readers
            // of the storm's first [`PROOF_PROBE_BY`] instead of one per [`PROOF_GATHER`].
            let proving = *slot.proving.lock().expect("proof lock poisoned");
            let until =
                proving.map_or(arrived + PROOF_GATHER, |p| (p + PROOF_PROBE_BY).max(arrived + PROOF_GATHER));
            tokio::time::sleep_until(until).await;
        }
        let required = self.required(store, &slot, arrived, min_rv).await?;
        if store.resource_version() < required
            && let Some(held) = held.and_then(|held| self.held_through(store, &slot, &held, required))
        {
            return Ok(self.serve_held(&slot, arrived, bytes, held));
        }
        if store.resource_version() >= required || self.wait(store, &slot, required, budget).await {
            self.stats.fresh.fetch_add(1, Relaxed);
            Self::served(&slot, arrived, bytes);
            return Ok(Fresh::At(store.resource_version()));
        }
        if let Some(scope) = census.filter(|scope| self.census_pays(store, &slot, bytes, watch, scope)) {
            return self.by_census(store, arrived, required, scope).await;
        }
        if prove && self.prove(store, &slot, required).await {
            self.stats.fresh.fetch_add(1, Relaxed);
            self.stats.proven.fetch_add(1, Relaxed);
            Self::served(&slot, arrived, bytes);
            return Ok(Fresh::At(store.resource_version()));
        }
        self.stats.lagging.fetch_add(1, Relaxed);
        Err(NotFresh::Lagging { required, current: store.resource_version() })
    }

    /// The revision a consistent read that arrived at `arrived` must reflect: a probe's started after it (or
    /// `min_rv`, the last write through kache, if higher).
    async fn required(
        &self,
        store: &Store,
        slot: &Arc<Slot>,
        arrived: Instant,
        min_rv: u64,
    ) -> Result<u64, NotFresh> {
        match self.probe_after(store.info(), slot, arrived).await {
            Ok(rv) => Ok(rv.max(min_rv)),
            Err(e) => {
                self.stats.probe_errors.fetch_add(1, Relaxed);
                Err(NotFresh::ProbeFailed(e))
            }
        }
    }

    /// Decides a read at revision `n`, which the store has not reached (`n` > its resourceVersion).
    /// Never answers 504 when the upstream has reached `n`: the read waits where that pays off, otherwise
    /// it is forwarded. Only when the upstream itself has not reached `n` does the read wait up to
    /// `block_timeout` as the apiserver does, and then get the apiserver's 504.
    pub(crate) async fn ahead(
        &self,
        store: &Arc<Store>,
        n: u64,
        arrived: Instant,
        bytes: usize,
        block_timeout: Duration,
        page: Option<&census::Scope>,
    ) -> Ahead {
        let gvr = &store.info().gvr;
        self.observe(store.resource_version());
        let slot = self.slot(gvr);
        if let Some((held, _)) =
            self.held(store, &slot).filter(|(held, _)| held.rv == n && store.resource_version() < n)
        {
            // A page continued at the revision an earlier census proved the store's snapshot at (the first page
            // was served from it), nothing changed since: the same snapshot is the upstream's state at `n`.
            self.stats.census_held.fetch_add(1, Relaxed);
            return Ahead::Matched(held);
        }
        let upstream_reached = n <= self.known_revision()
            || match self.probe_after(store.info(), &slot, arrived).await {
                Ok(rv) => rv >= n,
                Err(_) => {
                    // Unknown: the upstream decides.
                    self.stats.probe_errors.fetch_add(1, Relaxed);
                    true
                }
            };
        if upstream_reached {
            let budget = self.budget(store, &slot, bytes).min(block_timeout);
            if let Some(page) = page.filter(|page| {
                budget.is_zero()
                    && store.resource_version() < n
                    && self.census_pays(store, &slot, bytes, false, page)
            }) {
                // A continued page of a quiet store (no advance expected soon): a census of that page at `n`
                // shows whether the store holds the upstream's objects of the page then.
                if let Ok(Fresh::Matched(matched)) = self.by_census(store, arrived, n, page).await
                    && matched.rv == n
                {
                    return Ahead::Matched(matched);
                }
                if store.resource_version() >= n {
                    // The store reached `n` meanwhile: its snapshot at `n` serves.
                    self.stats.ahead_reached.fetch_add(1, Relaxed);
                    return Ahead::Reached;
                }
                self.stats.ahead_forwarded.fetch_add(1, Relaxed);
                return Ahead::Forward;
            }
            if store.resource_version() >= n || self.wait(store, &slot, n, budget).await {
                self.stats.ahead_reached.fetch_add(1, Relaxed);
                return Ahead::Reached;
            }
            self.stats.ahead_forwarded.fetch_add(1, Relaxed);
            return Ahead::Forward;
        }
        // Not reached upstream either: wait as the apiserver's cache would.
        if store.wait_for(n, block_timeout).await.is_ok() {
            self.stats.ahead_reached.fetch_add(1, Relaxed);
            return Ahead::Reached;
        }
        // The upstream may have reached it meanwhile through other resources' writes: ask again.
        match self.probe_after(store.info(), &slot, Instant::now()).await {
            Ok(rv) if rv < n => {
                self.stats.too_large.fetch_add(1, Relaxed);
                Ahead::TooLarge { requested: n, current: rv }
            }
            _ => {
                self.stats.ahead_forwarded.fetch_add(1, Relaxed);
                Ahead::Forward
            }
        }
    }

    /// Held with the body of a forwarded consistent read of `gvr` that arrived at `arrived`: once the body has
    /// been sent (or given up), the read no longer counts as in flight for proofs ([`Freshness::proof_pays`]).
    pub(crate) fn forwarding(&self, gvr: &Gvr, arrived: Instant) -> Forwarding {
        Forwarding { slot: self.slot(gvr), arrived }
    }

    /// Whether a census ([`census`]) pays for a consistent read of `bytes` bytes of `store`, by measured costs
    /// where kache has them ([`census::Costs`]). For a list: the census and serving the read from memory cost
    /// less than forwarding it, by [`CENSUS_MAX_FRACTION`]. For a consistent watch (WatchList), whose
    /// alternative is a proof (~1–2 s) or a forwarded watch: the census costs less than a proof.
    fn census_pays(
        &self,
        store: &Store,
        slot: &Slot,
        bytes: usize,
        watch: bool,
        scope: &census::Scope,
    ) -> bool {
        if !self.config.census {
            return false;
        }
        let state = store.load();
        let census_took = *slot.census_took.lock().expect("census lock poisoned");
        let costs = census::Costs {
            bytes,
            store_bytes: state.live_bytes,
            // Only needed until a census was measured (the estimate walks the snapshot).
            census_bytes: if census_took.is_none() { census::estimate_bytes(&state) } else { 0 },
            census_took,
            full_list: store.full_list_cost(),
            round_trip: self.probe_cost.get(),
            whole: scope.is_whole(),
        };
        if watch {
            return self.config.prove
                && (self.config.census_always || costs.census() < self.config.proof_cost);
        }
        if bytes < if scope.is_whole() { CENSUS_MIN_BYTES } else { CENSUS_MIN_PART_BYTES } {
            return false;
        }
        self.config.census_always || costs.pays(CENSUS_MAX_FRACTION)
    }

    /// Decides a consistent read of `store` that arrived at `arrived` by a census started after it: the
    /// snapshot to serve, as the upstream's state at the census's revision ([`Matched`]), when it holds the
    /// upstream's objects then (or the store has reached that revision); otherwise the read lags the upstream
    /// at `required` and is forwarded. A census showing writes the store lacks waits up to [`CENSUS_CATCH_UP`]
    /// for their events and compares once more. Censuses are coalesced per resource.
    async fn by_census(
        &self,
        store: &Arc<Store>,
        arrived: Instant,
        required: u64,
        scope: &census::Scope,
    ) -> Result<Fresh, NotFresh> {
        let lagging = || NotFresh::Lagging { required, current: store.resource_version() };
        let slot = self.slot(&store.info().gvr);
        // A census of the whole resource serves every read that arrived before it started; one of a part (a
        // namespace, a first page) is the read's own, as its forwarding would have been.
        let taken = if scope.is_whole() {
            self.census_after(store, &slot, arrived).await
        } else {
            self.census_of(store, scope).await
        };
        let census = match taken {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(resource = %store.info().gvr, error = %e, "census failed");
                self.stats.census_failed.fetch_add(1, Relaxed);
                return Err(lagging());
            }
        };
        self.observe(census.rv);
        for attempt in 0..2 {
            let state = store.load();
            let snapshot = state.snapshot.clone();
            let compared = if snapshot.rv >= census.rv {
                census::Compared::Same
            } else {
                census::compare(&snapshot, &census, scope)
            };
            match compared {
                census::Compared::Same => {
                    self.stats.census_same.fetch_add(1, Relaxed);
                    let rv = census.rv.max(snapshot.rv);
                    if scope.is_whole() {
                        let matched = Held {
                            generation: state.generation,
                            snapshot_rv: snapshot.rv,
                            rv,
                            census: Arc::downgrade(&census),
                            confirmed: false,
                        };
                        self.hold(&slot, matched);
                    }
                    return Ok(Fresh::Matched(Matched { snapshot, generation: state.generation, rv }));
                }
                census::Compared::Behind { upto } if attempt == 0 => {
                    let _ = store.wait_for(upto, CENSUS_CATCH_UP).await;
                }
                census::Compared::Behind { .. } => {}
            }
        }
        self.stats.census_behind.fetch_add(1, Relaxed);
        Err(lagging())
    }

    /// Records that a census of the whole resource matched the store's snapshot at `held.rv`: confirmed when the
    /// previous census (another one: a coalesced census is seen by each of its readers) matched the same snapshot
    /// at the same revision. The latest census of a snapshot wins.
    fn hold(&self, slot: &Slot, mut held: Held) {
        let mut holding = slot.holding.lock().expect("held lock poisoned");
        let key = |h: &Held| (h.generation, h.snapshot_rv);
        match &holding.held {
            Some(h)
                if key(h) == key(&held)
                    && (h.rv > held.rv || std::sync::Weak::ptr_eq(&h.census, &held.census)) => {}
            Some(h) => {
                held.confirmed = key(h) == key(&held) && h.rv == held.rv;
                holding.held = Some(held);
            }
            None => holding.held = Some(held),
        }
    }

    /// `held` if it still serves a read that must reflect the upstream's revision `required` (a probe's, started
    /// after the read arrived): the upstream has not moved past the census's revision and the store's snapshot is
    /// still the one it matched. When the upstream has moved on, held snapshots are not tried for a while.
    fn held_through(&self, store: &Store, slot: &Slot, held: &Matched, required: u64) -> Option<Matched> {
        if held.rv < required {
            slot.holding.lock().expect("held lock poisoned").missed = Some(Instant::now());
            return None;
        }
        self.held(store, slot).map(|(now, _)| now).filter(|now| now.rv >= required)
    }

    /// Whether a probe found the upstream past a held snapshot lately ([`HELD_BACKOFF`]).
    fn held_missed_lately(slot: &Slot) -> bool {
        slot.holding.lock().expect("held lock poisoned").missed.is_some_and(|t| t.elapsed() < HELD_BACKOFF)
    }

    /// A read served from a held snapshot, counted.
    fn serve_held(&self, slot: &Slot, arrived: Instant, bytes: usize, held: Matched) -> Fresh {
        self.stats.fresh.fetch_add(1, Relaxed);
        self.stats.census_held.fetch_add(1, Relaxed);
        Self::served(slot, arrived, bytes);
        Fresh::Matched(held)
    }

    /// The snapshot a census of the whole resource matched ([`Held`]), while it is still the store's current
    /// snapshot, as the upstream's state at the census's revision.
    fn held(&self, store: &Store, slot: &Slot) -> Option<(Matched, bool)> {
        let held = slot.holding.lock().expect("held lock poisoned").held.clone()?;
        let state = store.load();
        (state.generation == held.generation && state.snapshot.rv == held.snapshot_rv).then(|| {
            let matched =
                Matched { snapshot: state.snapshot.clone(), generation: held.generation, rv: held.rv };
            (matched, held.confirmed)
        })
    }

    /// A permit for one fallback (forwarded consistent read); `None` when too many are in flight.
    pub(crate) fn try_fallback(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.fallbacks.clone().try_acquire_owned().ok()
    }

    /// How long a read of `bytes` should wait for the store's next advance (zero: forward at once).
    fn budget(&self, store: &Store, slot: &Slot, bytes: usize) -> Duration {
        let state = store.load();
        let times = state.retained.iter().rev().take(ACTIVITY_SAMPLES).map(|s| s.taken_at);
        let activity = Activity::from_times(times, Instant::now());
        wait_budget(activity, bytes, slot.waiters.load(Relaxed), self.config.wait)
    }

    /// Whether a proof (~[`PROOF_COST`]) pays off: a consistent watch, or a big read whose forwarding costs
    /// more, counting the readers it would serve (those waiting now, or the big consistent reads of this
    /// resource still in flight — a forwarded one until its answer is sent, one served from memory until its
    /// body is sent: a relist storm). One client reading again and again counts once, whether forwarded or
    /// served from memory: each of its reads would wait for a proof of its own, so forwarding is cheaper.
    /// Counts the arrival of a big read (only big reads are proven, so only they count), keyed by `arrived`.
    fn proof_pays(&self, slot: &Slot, bytes: usize, watch: bool, arrived: Instant) -> bool {
        if watch {
            return self.config.prove;
        }
        let cost = forward_cost(bytes);
        if cost < self.config.proof_cost / PROOF_MIN_FRACTION {
            return false;
        }
        let in_flight =
            slot.arrivals.lock().expect("arrivals lock poisoned").note(arrived, Instant::now(), cost);
        let readers = (slot.waiters.load(Relaxed) as u32).saturating_add(1).max(in_flight).min(1000);
        self.config.prove && cost.saturating_mul(readers) >= self.config.proof_cost
    }

    /// The read that arrived at `arrived` is served from memory: it no longer counts as a reader in flight
    /// once its body of `bytes` is sent (a read that was not counted is not found).
    fn served(slot: &Slot, arrived: Instant, bytes: usize) {
        let end = Instant::now() + memory_cost(bytes);
        slot.arrivals.lock().expect("arrivals lock poisoned").served(arrived, end);
    }

    /// Proves the store fresh at `required` (the probed revision): joins the proof watch in flight, or starts
    /// one, and waits for the reflector to apply it. Correctness does not rest on timing: only a proof
    /// reaching `required` counts, whenever it started (it shows no event of the resource up to its
    /// bookmark, which is at or past the read's probe). One that falls short (it started before the probe
    /// and its first bookmark came before the probe's revision) is followed by one more; then the read is
    /// forwarded.
    async fn prove(&self, store: &Arc<Store>, slot: &Arc<Slot>, required: u64) -> bool {
        slot.waiters.fetch_add(1, Relaxed);
        let _waiting = Waiting(&slot.waiters);
        for _ in 0..2 {
            let mut rx = slot.proof.subscribe();
            rx.borrow_and_update();
            self.start_proof(store, slot);
            if rx.changed().await.is_err() {
                return false;
            }
            let outcome = rx.borrow().and_then(|(_, proven)| proven);
            if let Some((_, upto)) = outcome
                && upto >= required
            {
                return store.wait_for(required, PROOF_APPLY_TIMEOUT).await.is_ok();
            }
            if store.resource_version() >= required {
                return true;
            }
        }
        false
    }

    /// Waits up to `budget` for the store to reach `rv`; false when it did not (or `budget` is zero).
    async fn wait(&self, store: &Store, slot: &Slot, rv: u64, budget: Duration) -> bool {
        if budget.is_zero() {
            return false;
        }
        self.stats.waited.fetch_add(1, Relaxed);
        slot.waiters.fetch_add(1, Relaxed);
        let _waiting = Waiting(&slot.waiters);
        let reached = store.wait_for(rv, budget).await.is_ok();
        if !reached {
            self.stats.waits_expired.fetch_add(1, Relaxed);
        }
        reached
    }
}

#[cfg(test)]
mod held_tests {
    use super::*;
    use crate::resource::ResourceInfo;
    use crate::store::StoreConfig;

    /// A census's snapshot is held once two censuses in a row agree on it (same snapshot, same revision), serves
    /// reads up to that revision, and ends with the snapshot.
    #[test]
    fn a_snapshot_is_held_once_two_censuses_agree_and_until_it_changes() {
        let f =
            Freshness::new(Upstream::plain("http://127.0.0.1:1").expect("url"), FreshnessConfig::default());
        let info = ResourceInfo::pods();
        let (store, mut writer) = Store::new(info.clone(), StoreConfig::default());
        writer.replace(std::iter::empty(), 10);
        let slot = f.slot(&info.gvr);
        let state = store.load();
        // Each census alive for the test's length, as the readers it was taken for hold it.
        let censuses = std::cell::RefCell::new(Vec::new());
        let of = |snapshot_rv, rv| {
            let census =
                Arc::new(census::Census { rv, items: Vec::new(), bytes: 0, more: false, remaining: None });
            let weak = Arc::downgrade(&census);
            censuses.borrow_mut().push(census);
            Held { generation: state.generation, snapshot_rv, rv, census: weak, confirmed: false }
        };
        let held = || f.held(&store, &slot).map(|(m, confirmed)| (m.rv, confirmed));
        assert_eq!(held(), None);
        let first = of(10, 20);
        f.hold(&slot, first.clone());
        assert_eq!(held(), Some((20, false)), "one census: not confirmed");
        let (matched, _) = f.held(&store, &slot).expect("held");
        assert!(Arc::ptr_eq(&matched.snapshot, &state.snapshot), "the store's current snapshot");
        f.hold(&slot, first);
        assert_eq!(held(), Some((20, false)), "the same census reported by another of its readers");
        f.hold(&slot, of(10, 20));
        assert_eq!(held(), Some((20, true)), "a second census at the same revision confirms it");
        f.hold(&slot, of(10, 15));
        assert_eq!(held(), Some((20, true)), "an older census finishing late changes nothing");
        f.hold(&slot, of(10, 25));
        assert_eq!(held(), Some((25, false)), "the upstream moved between two censuses");
        f.hold(&slot, of(10, 25));
        let (matched, confirmed) = f.held(&store, &slot).expect("held");
        assert!(confirmed);
        // A read whose probe found the upstream at the revision is served; past it, not, and tries pause.
        assert_eq!(f.held_through(&store, &slot, &matched, 25).map(|m| m.rv), Some(25));
        assert!(!Freshness::held_missed_lately(&slot));
        assert!(f.held_through(&store, &slot, &matched, 26).is_none());
        assert!(Freshness::held_missed_lately(&slot), "a miss pauses tries");
        // A new snapshot (an event, a bookmark) ends it; a census of the new one starts over.
        writer.progress(12);
        assert_eq!(held(), None);
        assert!(f.held_through(&store, &slot, &matched, 25).is_none(), "not the snapshot any more");
        f.hold(&slot, of(12, 25));
        assert_eq!(held(), Some((25, false)));
    }
}
