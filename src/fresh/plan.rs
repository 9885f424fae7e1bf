//! The freshness planner: what a read that must reflect the upstream's revision does next, as a pure function
//! of what kache observed ([`plan`]). No I/O, no clock: the time comes in the [`Observation`]. The executor
//! ([`super::Freshness`]) carries out the [`Step`], records what it learnt and asks again, until a step ends
//! the read (serve, forward, 504).
//!
//! **The objective is the upstream's cost.** Each step costs the upstream requests and bytes ([`Cost`]); a
//! read is served from memory only by steps that cost the upstream less than forwarding it would (by at least
//! one request's worth: [`REQUEST_BYTES`]), so a read through kache never costs the upstream more than the
//! same read direct. Among the steps that pay, the [`Policy`] chooses: [`Prefer::Offload`] (the default) the
//! cheapest for the upstream that ends within the operator's latency bound past what forwarding would take;
//! [`Prefer::Latency`] the fastest that ends no later than forwarding would. Measured times (round trip,
//! census, proof) only decide whether a step fits in time; what a step costs the upstream is estimated from
//! bytes and requests, which do not depend on the machine's speed.
//! The steps, their cost to the upstream and when each is taken: the table in docs/consistency.md ("The
//! policy").

use std::time::Duration;
use tokio::time::Instant;

/// What one request costs the apiserver, in bytes of list it could encode instead: a get or a probe is
/// answered in ~2.5 ms on the real 1.36 apiserver (docs/decisions/0016-consistent-reads-probe-census-proof.md),
/// what it takes to encode ~100 KB from its watch cache at ~40 MB/s. A step pays only when it saves at least
/// this much.
pub(crate) const REQUEST_BYTES: usize = 100_000;
/// Throughput of a forwarded read: what the apiserver serialises from its watch cache per second (measured
/// on the real 1.36 apiserver: a 500-object page of 1.1 MB in 30 ms, a 21.5 MiB list in 560 ms).
pub(crate) const FORWARD_BYTES_PER_SEC: f64 = 40e6;
/// A round trip to the upstream until probes have measured one (a small get answered in ~5 ms on a real
/// cluster).
pub(crate) const ROUND_TRIP: Duration = Duration::from_millis(5);
/// What a proof takes until proofs have measured one: the proof watch's pre-deadline bookmark comes 1–1.25 s
/// after it opens (the cacher's bookmark tick), plus the probe.
pub(crate) const PROOF_LATENCY: Duration = Duration::from_millis(1500);
/// The default latency bound ([`Policy::latency_bound`]): a proof fits in it (~1–1.25 s, [`PROOF_LATENCY`])
/// with room for a probe, and it is below the 3 s the apiserver itself may hold a consistent read while its
/// cache catches up (`blockTimeout`, `waitUntilFreshAndBlock`): clients already allow for such a delay.
pub const DEFAULT_LATENCY_BOUND: Duration = Duration::from_secs(2);
/// A wait lasts at most this many of the store's mean gaps between advances: an advance that did not come by
/// then is not coming soon.
pub(crate) const GAPS_TO_WAIT: u32 = 3;
/// A store behind the upstream and quiet is caught up by a background proof at most this often, while reads
/// are forwarded ([`Step::Forward`] `catch_up`): once the foreign writes pause, reads find it fresh.
pub(crate) const CATCH_UP_INTERVAL: Duration = Duration::from_secs(10);
/// A wait that leaves room for a step after it ends this much earlier still: the timer and the scheduler may
/// wake it late, and the step must still fit.
pub(crate) const WAKE_SLACK: Duration = Duration::from_millis(10);
/// Advances of the store looked at to estimate its rate (retained snapshots: one per event or bookmark).
pub(crate) const ACTIVITY_SAMPLES: usize = 8;

/// What the operator trades: the upstream's cost against the client's latency.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Prefer {
    /// Take load off the upstream: of the steps that pay, the cheapest for the upstream that ends within the
    /// latency bound past what forwarding the read would take (a proof, O(1), before a census, O(N)).
    #[default]
    Offload,
    /// The client's latency: of the steps that pay, the fastest that ends no later than forwarding would; a
    /// read that cannot be served as fast is forwarded. A consistent watch keeps the latency bound as its
    /// deadline (forwarding it would pin the upstream for its whole life) but still takes the fastest step
    /// within it: a census of its part or of the whole before a proof's ~1–1.5 s.
    Latency,
}

/// The operator's policy, as the planner sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Policy {
    /// How much later than forwarding a read may be answered to spare the upstream ([`Prefer::Offload`]).
    pub(crate) latency_bound: Duration,
    pub(crate) prefer: Prefer,
    /// Whether censuses, and proofs, may be taken.
    pub(crate) census: bool,
    pub(crate) prove: bool,
    /// Probe even reads too small to pay for a probe (tests whose small objects exercise the memory path).
    pub(crate) small_reads: bool,
    /// What one request costs the upstream, in bytes ([`REQUEST_BYTES`]).
    pub(crate) request_bytes: usize,
}

/// What kind of read it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A get or a list.
    Read,
    /// A consistent watch (WatchList): forwarding it pins the upstream for the watch's whole life.
    Watch,
}

/// The revision the read must reflect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Want {
    /// Resource version unset: the upstream's revision when the read arrived (a probe started after it).
    Consistent,
    /// A revision ahead of the store (Exact, NotOlderThan or a continue token minted upstream); the read
    /// waits at most `block` for a revision the upstream has not reached either, as the apiserver does.
    At { rv: u64, block: Duration },
}

/// What a census deciding the read covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cover {
    /// The whole resource (shared by every read of it that arrived before the census started).
    Whole,
    /// The read's own part (a namespace, a page): as many objects as the read has.
    Part,
}

/// The read being decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Read {
    pub(crate) kind: Kind,
    pub(crate) want: Want,
    /// Its estimated size: what forwarding it costs the upstream to encode.
    pub(crate) bytes: usize,
    /// What a census would cover; `None` when its answer cannot come from a snapshot a census matched (a
    /// selector's list: forwarding it costs the upstream a scan, however small its answer).
    pub(crate) census: Option<Cover>,
    pub(crate) arrived: Instant,
}

/// The store, as the read sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StoreView {
    pub(crate) rv: u64,
    /// The revision this read's census proved a snapshot at, if it matched.
    pub(crate) matched: Option<u64>,
    /// Its objects' bytes (what a full list costs) and the estimated bytes of a census of all of them.
    pub(crate) bytes: usize,
    pub(crate) census_bytes: usize,
    pub(crate) activity: Activity,
}

/// What is known of the upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UpstreamView {
    /// The highest revision the upstream is known to have reached (any resource's answers).
    pub(crate) known: u64,
    /// The answer of a probe (or census, or the etcd oracle) started after the read arrived.
    pub(crate) probe: Probed,
    /// Whether etcd is the freshness oracle ([`super::etcd`]); whether it can prove this resource's reads
    /// (its prefix watch verified and open) it answers at once.
    pub(crate) etcd: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) enum Probed {
    #[default]
    No,
    At(u64),
    Failed,
}

/// Measured times (only ever used to decide whether a step fits in time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Measured {
    pub(crate) round_trip: Duration,
    /// A census of the whole resource.
    pub(crate) census: Option<Duration>,
    pub(crate) proof: Duration,
}

/// Upstream calls of the resource in flight or recent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct InFlight {
    /// When the proof in flight started.
    pub(crate) proof: Option<Instant>,
    /// When the last proof started.
    pub(crate) last_proof: Option<Instant>,
}

/// What this read has done already.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Done {
    /// Asked the etcd oracle.
    pub(crate) oracle: bool,
    pub(crate) probes: u8,
    pub(crate) waited: bool,
    pub(crate) census: bool,
    pub(crate) proved: bool,
}

/// Everything the planner decides on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Observation {
    pub(crate) now: Instant,
    pub(crate) read: Read,
    pub(crate) store: StoreView,
    pub(crate) upstream: UpstreamView,
    pub(crate) measured: Measured,
    pub(crate) flight: InFlight,
    pub(crate) done: Done,
    pub(crate) policy: Policy,
}

/// What to do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Answer from memory: the store's current snapshot, or the snapshot the read's census matched.
    Serve(Source),
    /// Ask the etcd oracle ([`super::etcd`]): etcd's revision read after the read arrived and its watch's
    /// progress to it prove the store at that revision, at no cost to the apiserver.
    Oracle,
    /// Learn the upstream's revision by a probe started after the read arrived (after the last wait, for a
    /// second probe of a read ahead).
    Probe,
    /// Wait for the store to reach the revision the read needs, until then.
    Wait { until: Instant },
    /// Compare the store with a census of what the read covers.
    Census(Cover),
    /// Prove the store quiet up to the upstream's revision by a short watch's bookmark (shared).
    Prove,
    /// Forward the read; `catch_up`: also start a proof in the background.
    Forward { reason: Reason, catch_up: bool },
    /// The upstream has not reached the revision either: 504, as the apiserver answers.
    TooLarge { current: u64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    Store,
    Matched,
}

/// Why a read is forwarded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reason {
    /// A probe costs the upstream about what the read does (a get, a small list).
    Small,
    /// Behind the upstream's known revision, no advance expected in time, nothing cheaper fits: no probe.
    Quiet,
    /// The probe showed the store behind, and nothing cheaper fits.
    Lagging,
    ProbeFailed,
    /// The upstream answered a step too slowly: the read reached its cutoff ([`Observation::cutoff`]).
    Slow,
    /// At a revision the upstream reached and the store has not.
    Ahead,
}

/// What a step costs the upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cost {
    pub(crate) requests: u32,
    /// Bytes the upstream encodes.
    pub(crate) bytes: usize,
    /// Whether the upstream holds it open for its lifetime (a forwarded watch): worth any bounded step.
    pub(crate) open: bool,
}

impl Cost {
    /// In bytes, a request at `request` bytes.
    fn weight(self, request: usize) -> u64 {
        if self.open {
            return u64::MAX;
        }
        u64::from(self.requests) * request as u64 + self.bytes as u64
    }

    /// Whether this step saves the upstream at least one request's worth against `forward`.
    pub(crate) fn pays_against(self, forward: Cost, request: usize) -> bool {
        self.weight(request).saturating_add(request as u64) <= forward.weight(request)
    }
}

/// How recently and how often the store advanced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Activity {
    /// Mean time between the last [`ACTIVITY_SAMPLES`] advances; `None` with fewer than two.
    pub(crate) gap: Option<Duration>,
    /// Time since the last advance.
    pub(crate) since_last: Duration,
}

impl Activity {
    /// A store that never advanced within what is retained.
    #[cfg(test)]
    pub(crate) const QUIET: Self = Self { gap: None, since_last: Duration::MAX };

    /// From the times of the store's most recent advances (any order), seen at `now`.
    pub(crate) fn from_times(times: impl IntoIterator<Item = Instant>, now: Instant) -> Self {
        let (mut n, mut first, mut last) = (0u32, None::<Instant>, None::<Instant>);
        for t in times {
            n += 1;
            first = Some(first.map_or(t, |f| f.min(t)));
            last = Some(last.map_or(t, |l| l.max(t)));
        }
        let since_last = last.map_or(Duration::MAX, |l| now.saturating_duration_since(l));
        let gap = match (first, last) {
            (Some(f), Some(l)) if n >= 2 => Some(l.saturating_duration_since(f) / (n - 1)),
            _ => None,
        };
        Self { gap, since_last }
    }

    /// When the next advance is expected: the mean gap, but at least the time already passed since the
    /// last one (a resource that went quiet is not expected to move within its old gap).
    pub(crate) fn expected_next(&self) -> Option<Duration> {
        self.gap.map(|g| g.max(self.since_last))
    }
}

/// The next step for the read observed.
pub(crate) fn plan(o: &Observation) -> Step {
    match o.read.want {
        Want::Consistent => o.consistent(),
        Want::At { rv, block } => o.ahead(rv, block),
    }
}

// === impl Observation ===

impl Observation {
    fn consistent(&self) -> Step {
        // etcd proves any consistent read, a get as well as a watch, in a few of its round trips without a
        // request to the apiserver: asked first, once; whatever it cannot prove goes the apiserver's way.
        if self.oracle_first() {
            return Step::Oracle;
        }
        let required = match self.upstream.probe {
            Probed::Failed => return forward(Reason::ProbeFailed, false),
            Probed::At(rv) => Some(rv),
            Probed::No => None,
        };
        if let Some(required) = required {
            if self.store.rv >= required {
                return Step::Serve(Source::Store);
            }
            if self.store.matched.is_some_and(|rv| rv >= required) {
                return Step::Serve(Source::Matched);
            }
            // A wait leaves room for what would follow it if the advance does not come.
            let instead = self.instead_of_forwarding();
            let reserve = instead.map_or(Duration::ZERO, |step| self.latency(step));
            if let Some(until) = self.wait_until(reserve).filter(|_| !self.done.waited) {
                return Step::Wait { until };
            }
            return instead.unwrap_or(forward(Reason::Lagging, false));
        }
        let probe = Cost { requests: 1, bytes: 0, open: false };
        if !(self.read.kind == Kind::Watch || self.policy.small_reads || self.pays(probe)) {
            return forward(Reason::Small, false);
        }
        let known = self.upstream.known;
        if self.store.rv >= known || self.wait_until(Duration::ZERO).is_some() {
            // Likely fresh, or about to be: a probe (O(1)) decides.
            return Step::Probe;
        }
        // Behind a revision the upstream is known to have reached, and no advance expected in time: any
        // probe would find it behind.
        self.instead_of_forwarding().unwrap_or(forward(Reason::Quiet, self.catch_up_due()))
    }

    fn ahead(&self, n: u64, block: Duration) -> Step {
        if self.store.rv >= n {
            return Step::Serve(Source::Store);
        }
        if self.store.matched == Some(n) {
            // A continued page whose census matched at its revision.
            return Step::Serve(Source::Matched);
        }
        // etcd's revision R, read after the read arrived, is the upstream's: R ≥ n proves the store at R at no
        // cost to the apiserver; R < n answers as a probe would (the upstream has not reached n either).
        if self.oracle_first() {
            return Step::Oracle;
        }
        let probed = match self.upstream.probe {
            Probed::At(rv) => Some(rv),
            // Unknown: the upstream decides.
            Probed::Failed => return forward(Reason::Ahead, false),
            Probed::No => None,
        };
        if n <= self.upstream.known || probed.is_some_and(|rv| rv >= n) {
            let census = self.census_step().filter(|_| self.read.census == Some(Cover::Part));
            let reserve = census.map_or(Duration::ZERO, |step| self.latency(step));
            if let Some(until) = self.wait_until(reserve).filter(|_| !self.done.waited) {
                return Step::Wait { until };
            }
            return census.unwrap_or(forward(Reason::Ahead, false));
        }
        match probed {
            None => Step::Probe,
            // Not reached upstream either: wait as the apiserver's cache would, then ask again once.
            Some(_) if !self.done.waited => Step::Wait { until: self.read.arrived + block },
            Some(_) if self.done.probes < 2 => Step::Probe,
            Some(current) => Step::TooLarge { current },
        }
    }

    /// Whether to ask the etcd oracle now: configured, not asked yet, and nothing probed (it is asked first).
    fn oracle_first(&self) -> bool {
        self.upstream.etcd && !self.done.oracle && self.upstream.probe == Probed::No
    }

    /// A census or a proof in place of forwarding, when one pays and fits ([`Prefer`]).
    fn instead_of_forwarding(&self) -> Option<Step> {
        let census = self.census_step();
        let prove = self.prove_step();
        match (census, prove) {
            (Some(c), Some(p)) => {
                let key = |s: Step| match self.policy.prefer {
                    Prefer::Offload => (self.cost(s).weight(self.policy.request_bytes), self.latency(s)),
                    Prefer::Latency => (0, self.latency(s)),
                };
                Some(if key(p) <= key(c) { p } else { c })
            }
            (c, p) => c.or(p),
        }
    }

    fn census_step(&self) -> Option<Step> {
        let cover = self.read.census.filter(|_| self.policy.census && !self.done.census)?;
        Some(Step::Census(cover)).filter(|&s| self.pays_and_fits(s))
    }

    fn prove_step(&self) -> Option<Step> {
        Some(Step::Prove).filter(|&s| self.policy.prove && !self.done.proved && self.pays_and_fits(s))
    }

    fn pays_and_fits(&self, step: Step) -> bool {
        self.pays(self.cost(step)) && self.now + self.latency(step) <= self.deadline()
    }

    fn pays(&self, cost: Cost) -> bool {
        cost.pays_against(self.forward_cost(), self.policy.request_bytes)
    }

    /// When the read must be answered by: what forwarding it would take, plus the latency bound when
    /// offloading, and for a consistent watch whatever the preference (forwarding it would pin the upstream
    /// for the watch's whole life: worth any step within the bound).
    fn deadline(&self) -> Instant {
        let allowance = match (self.policy.prefer, self.read.kind) {
            (Prefer::Offload, _) | (Prefer::Latency, Kind::Watch) => self.policy.latency_bound,
            (Prefer::Latency, Kind::Read) => Duration::ZERO,
        };
        self.read.arrived + self.transfer(self.read.bytes) + allowance
    }

    /// When a step still running is abandoned and the read forwarded, however slowly the upstream answers:
    /// the deadline plus the latency bound once more (a step planned to fit overruns it only when the
    /// upstream is slow), and a read ahead's block timeout plus the bound. Each step's own timeout (a probe's
    /// or a census's 10 s, a proof's 5 s) bounds it alone; this bounds the read, whatever steps it took.
    pub(crate) fn cutoff(&self) -> Instant {
        let bound = self.policy.latency_bound;
        let cutoff = self.deadline() + bound;
        match self.read.want {
            Want::Consistent => cutoff,
            Want::At { block, .. } => cutoff.max(self.read.arrived + block + bound),
        }
    }

    /// How long to wait for the store's next advance, when it is expected before the deadline less
    /// `reserve` (what the step after a vain wait would take).
    fn wait_until(&self, reserve: Duration) -> Option<Instant> {
        let expected = self.store.activity.expected_next()?;
        let reserve = if reserve.is_zero() { reserve } else { reserve + WAKE_SLACK };
        let deadline = self.deadline().checked_sub(reserve)?;
        (self.now + expected <= deadline).then(|| {
            deadline.min(self.now + expected.saturating_mul(GAPS_TO_WAIT) + Duration::from_millis(1))
        })
    }

    fn catch_up_due(&self) -> bool {
        self.flight.proof.is_none()
            && self
                .flight
                .last_proof
                .is_none_or(|last| self.now.saturating_duration_since(last) >= CATCH_UP_INTERVAL)
    }

    fn forward_cost(&self) -> Cost {
        Cost { requests: 1, bytes: self.read.bytes, open: self.read.kind == Kind::Watch }
    }

    /// The bytes of a census of `cover`: the metadata share of the whole store, or of the read's part.
    fn census_bytes(&self, cover: Cover) -> usize {
        match cover {
            Cover::Whole => self.store.census_bytes,
            Cover::Part if self.store.bytes == 0 => 0,
            Cover::Part => {
                (self.store.census_bytes as f64 * (self.read.bytes as f64 / self.store.bytes as f64).min(1.0))
                    as usize
            }
        }
    }

    /// What `step` costs the upstream (a proof in flight is joined: only its probe is this read's).
    pub(crate) fn cost(&self, step: Step) -> Cost {
        let (requests, bytes) = match step {
            Step::Serve(_) | Step::Wait { .. } | Step::TooLarge { .. } | Step::Oracle => (0, 0),
            Step::Probe => (1, 0),
            Step::Census(cover) => (1, self.census_bytes(cover)),
            Step::Prove if self.flight.proof.is_some() => (1, 0),
            Step::Prove => (2, 0),
            Step::Forward { .. } => return self.forward_cost(),
        };
        Cost { requests, bytes, open: false }
    }

    /// How long `step` is expected to take.
    fn latency(&self, step: Step) -> Duration {
        let rt = self.measured.round_trip;
        match step {
            Step::Census(Cover::Whole) => {
                self.measured.census.unwrap_or_else(|| rt + self.transfer(self.census_bytes(Cover::Whole)))
            }
            Step::Census(Cover::Part) => rt + self.transfer(self.census_bytes(Cover::Part)),
            Step::Prove => match self.flight.proof {
                Some(started) => (started + self.measured.proof).saturating_duration_since(self.now).max(rt),
                None => self.measured.proof,
            },
            Step::Probe | Step::Oracle => rt,
            Step::Wait { until } => until.saturating_duration_since(self.now),
            Step::Forward { .. } => self.transfer(self.read.bytes),
            Step::Serve(_) | Step::TooLarge { .. } => Duration::ZERO,
        }
    }

    /// A round trip and `bytes` at the apiserver's throughput.
    fn transfer(&self, bytes: usize) -> Duration {
        self.measured.round_trip + Duration::from_secs_f64(bytes as f64 / FORWARD_BYTES_PER_SEC)
    }
}

fn forward(reason: Reason, catch_up: bool) -> Step {
    Step::Forward { reason, catch_up }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
