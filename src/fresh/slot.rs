//! One resource's coalescing slot: at most one probe and one proof watch in flight, their results published
//! with their start time so a reader trusts only those that started after it arrived.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use tokio::time::Instant;

use tokio::sync::watch;

use super::census::{self, Census};
use super::{CATCH_UP_INTERVAL, CENSUS_TIMEOUT, Freshness, PROBE_TIMEOUT, probe, proof};
use crate::resource::{Gvr, ResourceInfo};
use crate::store::Store;

/// A coalesced upstream call's latest result, with its start time.
type Started<T> = Option<(Instant, Result<T, String>)>;
type ProbeResult = Started<u64>;
type CensusResult = Started<Arc<Census>>;
/// A proof's outcome, with its start time: `(from, upto)` when proven.
type ProofResult = Option<(Instant, Option<(u64, u64)>)>;

/// One resource's probe slot: at most one probe in flight; results published with their start time.
pub(super) struct Slot {
    pub(super) running: Mutex<bool>,
    /// Whether the upstream takes the probe by name (see [`probe`]); cleared when it answers 400.
    pub(super) probe_by_name: AtomicBool,
    pub(super) result: watch::Sender<ProbeResult>,
    /// Readers currently waiting for this resource's store to advance.
    pub(super) waiters: AtomicUsize,
    /// The latest consistent reads of this resource (see [`Arrivals`]).
    pub(super) arrivals: Mutex<Arrivals>,
    /// The start of the proof watch in flight (at most one); results published with their start time.
    pub(super) proving: Mutex<Option<Instant>>,
    /// When the last proof watch started (rate-bounds background catch-ups).
    pub(super) last_proof: Mutex<Option<Instant>>,
    pub(super) proof: watch::Sender<ProofResult>,
    /// Whether a census is in flight (at most one); results published with their start time.
    pub(super) census_running: Mutex<bool>,
    pub(super) census: watch::Sender<CensusResult>,
    /// How long censuses take (a weighted mean of the recent ones; `None` before the first).
    pub(super) census_took: Mutex<Option<std::time::Duration>>,
    /// The last census of the whole resource that matched the store's snapshot, and when a probe last found the
    /// upstream past it.
    pub(super) holding: Mutex<Holding>,
}

/// A resource's held snapshot ([`Held`]) and its misses.
#[derive(Debug, Default)]
pub(super) struct Holding {
    pub(super) held: Option<Held>,
    /// When a probe last found the upstream past the held snapshot's revision (foreign writes going on).
    pub(super) missed: Option<Instant>,
}

/// A census of the whole resource matched the store's snapshot: the upstream held exactly that snapshot's
/// objects at `rv`. While the snapshot is still the store's current one (same generation, same revision: no
/// event since), it is the upstream's state at `rv` too, and a read the upstream had not moved past `rv` when
/// it arrived is served from it without a census of its own (a quiet cluster: a foreign write now and then).
#[derive(Debug, Clone)]
pub(super) struct Held {
    pub(super) generation: u64,
    pub(super) snapshot_rv: u64,
    pub(super) rv: u64,
    /// Which census it was: a census coalesced for many readers is one census, however many of them report it.
    pub(super) census: std::sync::Weak<Census>,
    /// Two censuses in a row matched this snapshot at this same revision: the upstream did not move between
    /// them, so a probe will likely find it still there. Under steady foreign writes every census finds a
    /// newer revision, and no read pays a probe to try the snapshot before its census.
    pub(super) confirmed: bool,
}

/// The latest big consistent reads of a resource (those a proof may serve), each with when it is expected to
/// end: how many readers overlap a read, and so how many a proof started now would serve. A read is expected
/// to take what forwarding it takes until it is served from memory ([`Arrivals::served`]) or its forwarded
/// answer has been sent ([`Arrivals::forwarded`]), which settle its end: a relist storm shows up as many
/// reads in flight at once; one client reading again and again shows up as one at a time, whether its reads
/// are forwarded or served from memory. (Counting every arrival within one forwarded read's estimated time made a client listing from
/// memory every 25 ms look like twenty readers; and the estimate, 682 ms for a 21.5 MiB list the real
/// apiserver forwarded in 350–400 ms, made one client's forwarded lists look like two or three readers:
/// both waited 1–2 s for proofs they did not need.)
#[derive(Debug, Default)]
pub(super) struct Arrivals {
    reads: std::collections::VecDeque<Read>,
}

/// One read in [`Arrivals`].
#[derive(Debug)]
struct Read {
    /// When it arrived (its key: the pipeline knows it, and no two reads of a resource arrive at the same
    /// nanosecond in practice; if two did, the wrong one of the two would end first, and the count stays exact).
    arrived: Instant,
    /// When it is expected to end, or did.
    end: Instant,
    /// Whether `end` is known (served from memory, or forwarded and sent) rather than estimated.
    settled: bool,
}

impl Arrivals {
    /// Reads remembered: more readers than this in flight count as this many.
    pub(super) const REMEMBERED: usize = 64;

    /// Counts one read that arrived at `arrived`, seen at `now` and expected to take `forward` (the time it
    /// would take upstream); returns the reads in flight, this one included.
    pub(super) fn note(&mut self, arrived: Instant, now: Instant, forward: std::time::Duration) -> u32 {
        if self.reads.len() == Self::REMEMBERED {
            self.reads.pop_front();
        }
        self.reads.push_back(Read { arrived, end: now + forward, settled: false });
        self.reads.iter().filter(|r| r.end > now).count() as u32
    }

    /// The read that arrived at `arrived` is served from memory: it ends by `end`, before a forwarded read
    /// would have.
    pub(super) fn served(&mut self, arrived: Instant, end: Instant) {
        if let Some(r) = self.unsettled(arrived) {
            r.end = r.end.min(end);
            r.settled = true;
        }
    }

    /// The read that arrived at `arrived` was forwarded, and its answer has been sent (or failed, or its client
    /// went away) at `now`: it ends then. A read that was not counted (too small to be proven) ends none.
    pub(super) fn forwarded(&mut self, arrived: Instant, now: Instant) {
        if let Some(r) = self.unsettled(arrived) {
            r.end = now;
            r.settled = true;
        }
    }

    /// The counted read that arrived at `arrived`, while its end is still an estimate.
    fn unsettled(&mut self, arrived: Instant) -> Option<&mut Read> {
        self.reads.iter_mut().rev().find(|r| r.arrived == arrived && !r.settled)
    }
}

/// Held with a forwarded consistent read's body; its drop (the answer sent, failed or abandoned) ends the read
/// in its resource's [`Arrivals`].
pub(crate) struct Forwarding {
    pub(super) slot: Arc<Slot>,
    pub(super) arrived: Instant,
}

impl Drop for Forwarding {
    fn drop(&mut self) {
        self.slot.arrivals.lock().expect("arrivals lock poisoned").forwarded(self.arrived, Instant::now());
    }
}

/// Decrements a slot's waiter count when the wait ends, however it ends.
pub(super) struct Waiting<'a>(pub(super) &'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

// === impl Freshness (slots) ===

impl Freshness {
    /// Starts a proof watch unless one is in flight; its outcome is published on `slot.proof`.
    pub(super) fn start_proof(&self, store: &Arc<Store>, slot: &Arc<Slot>) {
        let started = {
            let mut proving = slot.proving.lock().expect("proof lock poisoned");
            if proving.is_some() {
                return;
            }
            let started = Instant::now();
            *proving = Some(started);
            *slot.last_proof.lock().expect("proof lock poisoned") = Some(started);
            started
        };
        let upstream = self.upstream.clone();
        let gvr = &store.info().gvr;
        let collection = format!("{}/{}", gvr.path_prefix(), gvr.resource);
        // A filtered mirror's store holds only its selection: proving the selection quiet is enough.
        let selection = self.selection_of(gvr);
        let (store2, slot2) = (store.clone(), slot.clone());
        self.stats.proofs.fetch_add(1, Relaxed);
        let (succeeded, failed) = (self.stats.proofs_succeeded.clone(), self.stats.proofs_failed.clone());
        // What the readers waiting now need (every probe they trusted raised it); a reader whose probe ends
        // later may need more, and is forwarded when the proof falls short of it.
        let want = self.known_revision();
        tokio::spawn(async move {
            let from = store2.resource_version();
            let watched = tokio::time::timeout(
                proof::PROOF_TIMEOUT,
                proof::quiet_until(&upstream, &collection, selection.as_deref(), from, want),
            );
            let result = match watched.await {
                Ok(Ok(Some(upto))) if upto > from => {
                    store2.offer_progress(from, upto);
                    succeeded.fetch_add(1, Relaxed);
                    Some((from, upto))
                }
                Ok(Err(e)) => {
                    tracing::debug!(resource = %store2.info().gvr, error = %e, "freshness proof failed");
                    None
                }
                _ => None,
            };
            if result.is_none() {
                failed.fetch_add(1, Relaxed);
            }
            *slot2.proving.lock().expect("proof lock poisoned") = None;
            slot2.proof.send_replace(Some((started, result)));
        });
    }

    /// A proof in the background for a quiet store behind the upstream's known revision, at most once per
    /// [`CATCH_UP_INTERVAL`]: no reader waits for it. Once foreign writes pause, the store it moved up is
    /// at the upstream's revision and later consistent reads are served from memory after their probe;
    /// while they go on, it costs the upstream one short watch per interval (and at most one read a
    /// wasted probe: the caught-up store looks fresh until a probe shows otherwise).
    pub(super) fn catch_up(&self, store: &Arc<Store>, slot: &Arc<Slot>) {
        if !self.config.prove {
            return;
        }
        let due = slot
            .last_proof
            .lock()
            .expect("proof lock poisoned")
            .is_none_or(|last| last.elapsed() >= CATCH_UP_INTERVAL);
        if due {
            self.stats.catch_ups.fetch_add(1, Relaxed);
            self.start_proof(store, slot);
        }
    }

    pub(super) fn slot(&self, gvr: &Gvr) -> Arc<Slot> {
        let mut slots = self.slots.lock().expect("freshness slots lock poisoned");
        slots
            .entry(gvr.clone())
            .or_insert_with(|| {
                Arc::new(Slot {
                    running: Mutex::new(false),
                    probe_by_name: AtomicBool::new(true),
                    result: watch::channel(None).0,
                    waiters: AtomicUsize::new(0),
                    arrivals: Mutex::new(Arrivals::default()),
                    proving: Mutex::new(None),
                    last_proof: Mutex::new(None),
                    proof: watch::channel(None).0,
                    census_running: Mutex::new(false),
                    census: watch::channel(None).0,
                    census_took: Mutex::new(None),
                    holding: Mutex::new(Holding::default()),
                })
            })
            .clone()
    }

    /// The upstream's revision from a probe that started at or after `arrived`.
    pub(super) async fn probe_after(
        &self,
        info: &ResourceInfo,
        slot: &Arc<Slot>,
        arrived: Instant,
    ) -> Result<u64, String> {
        let result = after(&slot.running, &slot.result, arrived, |started| {
            let upstream = self.upstream.clone();
            let info = info.clone();
            let slot2 = slot.clone();
            let cost = self.probe_cost.clone();
            self.stats.probes.fetch_add(1, Relaxed);
            tokio::spawn(async move {
                let result = match tokio::time::timeout(
                    PROBE_TIMEOUT,
                    probe::probe(&upstream, &info, &slot2.probe_by_name),
                )
                .await
                {
                    Ok(r) => r,
                    Err(_) => Err("probe timed out".to_owned()),
                };
                if result.is_ok() {
                    cost.record(started.elapsed());
                }
                *slot2.running.lock().expect("probe lock poisoned") = false;
                slot2.result.send_replace(Some((started, result)));
            });
        })
        .await;
        if let Ok(rv) = result {
            self.observe(rv);
        }
        result
    }

    /// A census of `store`'s resource ([`census`]) that started at or after `arrived`.
    pub(super) async fn census_after(
        &self,
        store: &Arc<Store>,
        slot: &Arc<Slot>,
        arrived: Instant,
    ) -> Result<Arc<Census>, String> {
        after(&slot.census_running, &slot.census, arrived, |started| {
            let taken = self.census(store, census::Scope::default());
            let slot2 = slot.clone();
            tokio::spawn(async move {
                let result = taken.await;
                if let Ok(c) = &result {
                    let took = started.elapsed();
                    tracing::debug!(objects = c.items.len(), bytes = c.bytes, ?took, "census taken");
                    let mut mean = slot2.census_took.lock().expect("census lock poisoned");
                    *mean = Some(mean.map_or(took, |m| (m + took) / 2));
                }
                *slot2.census_running.lock().expect("census lock poisoned") = false;
                slot2.census.send_replace(Some((started, result)));
            });
        })
        .await
    }

    /// A census of a part of `store`'s resource (`scope`: a namespace, a page), taken for one read now.
    pub(super) async fn census_of(
        &self,
        store: &Arc<Store>,
        scope: &census::Scope,
    ) -> Result<Arc<Census>, String> {
        self.stats.census_parts.fetch_add(1, Relaxed);
        self.census(store, scope.clone()).await
    }

    /// A census of `scope` of `store`'s resource (narrowed by a filtered mirror's selection), counted and
    /// bounded in time and size, as a future that owns what it needs (it may run on a task of its own).
    fn census(
        &self,
        store: &Store,
        scope: census::Scope,
    ) -> impl std::future::Future<Output = Result<Arc<Census>, String>> + Send + 'static {
        let upstream = self.upstream.clone();
        let info = store.info().clone();
        let selection = self.selection_of(&info.gvr);
        // The metadata of the objects is at most their whole JSON: the store's bytes bound the answer.
        let max_bytes = store.load().live_bytes.saturating_add(CENSUS_SLACK_BYTES);
        self.stats.censuses.fetch_add(1, Relaxed);
        async move {
            let prefix = info.gvr.path_prefix();
            let collection = (prefix.as_str(), info.gvr.resource.as_str());
            let taken = census::take(&upstream, collection, &scope, selection.as_deref(), max_bytes);
            match tokio::time::timeout(CENSUS_TIMEOUT, taken).await {
                Ok(result) => result.map(Arc::new),
                Err(_) => Err("census timed out".to_owned()),
            }
        }
    }
}

/// Bytes a census's answer may exceed the store's own by (list and metadata framing, an empty store).
const CENSUS_SLACK_BYTES: usize = 16 << 20;

/// The result of a coalesced upstream call (at most one in flight, `running`; results published on
/// `result` with their start time) that started at or after `arrived`: the one in flight when it started
/// late enough, otherwise a new one once it ends. `start` begins a call started at the instant it is given;
/// the call clears `running` and publishes its result.
async fn after<T: Clone>(
    running: &Mutex<bool>,
    result: &watch::Sender<Started<T>>,
    arrived: Instant,
    start: impl Fn(Instant),
) -> Result<T, String> {
    let mut rx = result.subscribe();
    loop {
        {
            let current = rx.borrow_and_update();
            if let Some((started, result)) = &*current
                && *started >= arrived
            {
                return result.clone();
            }
        }
        {
            let mut running = running.lock().expect("coalescing lock poisoned");
            if !*running {
                *running = true;
                start(Instant::now());
            }
        }
        if rx.changed().await.is_err() {
            return Err("freshness prober dropped".into());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn arrivals_count_the_readers_in_flight() {
        let w = Duration::from_millis(500);
        let t0 = Instant::now();
        let mut a = Arrivals::default();
        // A read noted as it arrives (the usual case: `note` runs as the read starts).
        let note = |a: &mut Arrivals, at: Instant| a.note(at, at, w);
        // A burst: every reader overlaps the others.
        for i in 1..=5 {
            assert_eq!(note(&mut a, t0 + Duration::from_millis(i)), i as u32);
        }
        // Within the forwarded time of the burst's readers: counted with them.
        assert_eq!(note(&mut a, t0 + Duration::from_millis(400)), 6);
        // One client reading again and again, each read after the previous one's time: one at a time.
        for i in 1..=10 {
            assert_eq!(note(&mut a, t0 + Duration::from_secs(1) + w * i), 1);
        }
        // One client whose reads are served from memory, each 25 ms after the previous one: one at a time,
        // though twenty arrive within one forwarded read's time.
        let t2 = t0 + Duration::from_secs(30);
        for i in 0..20u32 {
            let at = t2 + Duration::from_millis(25) * i;
            assert_eq!(note(&mut a, at), 1, "read {i}");
            a.served(at, at + Duration::from_millis(20));
        }
        // One client whose reads are forwarded, each faster than estimated: its next read arrives after the
        // previous one was sent, within that one's estimated time, and still counts alone.
        let t3 = t0 + Duration::from_secs(45);
        for i in 0..10u32 {
            let at = t3 + Duration::from_millis(300) * i;
            assert_eq!(note(&mut a, at), 1, "forwarded read {i}");
            a.forwarded(at, at + Duration::from_millis(290));
        }
        // Forwarded reads of a burst end one by one, each its own: the others still count.
        let t4 = t0 + Duration::from_secs(50);
        let burst: Vec<Instant> = (1..=3).map(|i| t4 + Duration::from_millis(i)).collect();
        for at in &burst {
            note(&mut a, *at);
        }
        // A read that was never counted (too small for a proof) ends none of them.
        a.forwarded(
            t4 + Duration::from_millis(2) + Duration::from_micros(500),
            t4 + Duration::from_millis(50),
        );
        assert_eq!(note(&mut a, t4 + Duration::from_millis(51)), 4, "the burst and this one");
        a.forwarded(burst[1], t4 + Duration::from_millis(100));
        a.forwarded(burst[1], t4 + Duration::from_millis(100));
        assert_eq!(
            note(&mut a, t4 + Duration::from_millis(101)),
            4,
            "two of the burst, the one before, this one"
        );
        // A storm larger than what is remembered counts as the remembered number.
        let t1 = t0 + Duration::from_secs(60);
        for i in 0..100 {
            note(&mut a, t1 + Duration::from_micros(i));
        }
        assert_eq!(note(&mut a, t1 + Duration::from_millis(1)), Arrivals::REMEMBERED as u32);
    }
}
