//! The planner's decisions, one row per decision and its reason (as the apiserver tests `ShouldDelegate`,
//! `storage/cacher/delegator_test.go`). Times are made up: nothing here depends on the machine's speed.

use super::*;
use M::*;

const MB: usize = 1_000_000;

/// A big consistent list (2 MB, the whole resource, spec-heavy objects: a census lists 10% of the bytes) of a
/// quiet store at the upstream's known revision (100), nothing probed yet, the default policy.
fn base(now: Instant) -> Observation {
    let census = Some(Cover::Whole);
    Observation {
        now,
        read: Read { kind: Kind::Read, want: Want::Consistent, bytes: 2 * MB, census, arrived: now },
        store: StoreView {
            rv: 100,
            matched: None,
            bytes: 2 * MB,
            census_bytes: 2 * MB / 10,
            activity: Activity::QUIET,
        },
        upstream: UpstreamView { known: 100, probe: Probed::No, etcd: false },
        measured: Measured { round_trip: ms(2), census: None, proof: PROOF_LATENCY },
        flight: InFlight::default(),
        done: Done::default(),
        policy: Policy {
            latency_bound: DEFAULT_LATENCY_BOUND,
            prefer: Prefer::Offload,
            census: true,
            prove: true,
            small_reads: false,
            request_bytes: REQUEST_BYTES,
        },
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// What a row changes in [`base`].
#[derive(Clone, Copy)]
enum M {
    /// A get (3 KB, no census can serve it).
    Get,
    Bytes(usize),
    /// The store's bytes, a census's of them, and the read's.
    Sizes(usize, usize, usize),
    Census(Option<Cover>),
    Watch,
    /// The upstream is known at 120: the store (100) is behind (foreign writes).
    Behind,
    ProbedAt(u64),
    ProbeFailed,
    /// The read's census matched a snapshot at this revision.
    Matched(u64),
    /// The store's mean gap between advances and the time since the last one (ms).
    Moved(u64, u64),
    /// Advances every 10 ms, the last 1 ms ago.
    Busy,
    Latency,
    NoCensus,
    NoProve,
    SmallReads,
    Waited,
    CensusDone,
    Proved,
    Probes(u8),
    /// Arrived this many ms ago.
    Arrived(u64),
    CensusTook(u64),
    ProofTook(u64),
    /// A proof in flight for this many ms.
    Proving(u64),
    /// The last proof started this many ms ago.
    LastProof(u64),
    /// A read at this revision, ahead of the store (block timeout 3 s).
    Ahead(u64),
    /// etcd is the freshness oracle.
    Etcd,
    /// The store's revision (a proof or the oracle moved it).
    StoreAt(u64),
    /// The read asked the oracle already (it proved nothing).
    OracleAsked,
}

fn apply(o: &mut Observation, m: M) {
    match m {
        Get => (o.read.bytes, o.read.census) = (3_000, None),
        Bytes(b) => o.read.bytes = b,
        Sizes(store, census, read) => {
            (o.store.bytes, o.store.census_bytes, o.read.bytes) = (store, census, read)
        }
        Census(c) => o.read.census = c,
        Watch => o.read.kind = Kind::Watch,
        Behind => o.upstream.known = 120,
        ProbedAt(rv) => (o.upstream.probe, o.done.probes) = (Probed::At(rv), 1),
        ProbeFailed => o.upstream.probe = Probed::Failed,
        Matched(rv) => o.store.matched = Some(rv),
        Moved(gap, since) => o.store.activity = Activity { gap: Some(ms(gap)), since_last: ms(since) },
        Busy => apply(o, Moved(10, 1)),
        Latency => o.policy.prefer = Prefer::Latency,
        NoCensus => o.policy.census = false,
        NoProve => o.policy.prove = false,
        SmallReads => o.policy.small_reads = true,
        Waited => o.done.waited = true,
        CensusDone => o.done.census = true,
        Proved => o.done.proved = true,
        Probes(n) => o.done.probes = n,
        Arrived(ago) => o.read.arrived = o.now - ms(ago),
        CensusTook(t) => o.measured.census = Some(ms(t)),
        ProofTook(t) => o.measured.proof = ms(t),
        Proving(t) => o.flight.proof = Some(o.now - ms(t)),
        LastProof(t) => o.flight.last_proof = Some(o.now - ms(t)),
        Ahead(rv) => (o.read.want, o.read.census) = (Want::At { rv, block: Duration::from_secs(3) }, None),
        Etcd => o.upstream.etcd = true,
        StoreAt(rv) => o.store.rv = rv,
        OracleAsked => o.done.oracle = true,
    }
}

fn forward(reason: Reason) -> Step {
    Step::Forward { reason, catch_up: false }
}

fn caught_up(reason: Reason) -> Step {
    Step::Forward { reason, catch_up: true }
}

#[test]
fn decisions() {
    let now = Instant::now() + Duration::from_secs(100);
    let wait = |after: u64| Step::Wait { until: now + ms(after) };
    let real = Sizes(30 * MB, 3_500_000, 1_500_000);
    let namespace = Census(Some(Cover::Part));
    let cases: &[(&str, &[M], Step)] = &[
        // --- the etcd oracle: costs the apiserver nothing, asked first and once ---
        (
            "with etcd, a get: the oracle (a probe would not pay, the oracle costs the apiserver nothing)",
            &[Get, Etcd],
            Step::Oracle,
        ),
        ("with etcd, a big list", &[Etcd], Step::Oracle),
        ("with etcd, a big list of a quiet store behind", &[Etcd, Behind], Step::Oracle),
        ("with etcd, a consistent watch", &[Etcd, Watch, Behind], Step::Oracle),
        (
            "with etcd, preferring latency changes nothing: the oracle is the fastest too",
            &[Etcd, Latency, Behind],
            Step::Oracle,
        ),
        (
            "the oracle proved the store at etcd's revision: served",
            &[Etcd, OracleAsked, ProbedAt(100)],
            Step::Serve(Source::Store),
        ),
        (
            "the oracle proved nothing for a get: the apiserver's way (forwarded, small)",
            &[Get, Etcd, OracleAsked],
            forward(Reason::Small),
        ),
        (
            "the oracle proved nothing for a big list: the apiserver's way (a probe)",
            &[Etcd, OracleAsked],
            Step::Probe,
        ),
        (
            "the oracle proved nothing for a quiet store behind: the apiserver's way (a proof)",
            &[Etcd, OracleAsked, Behind],
            Step::Prove,
        ),
        ("without etcd: the apiserver's way", &[Get], forward(Reason::Small)),
        (
            "with etcd, a read ahead of every known revision: the oracle before a probe",
            &[Etcd, Ahead(200)],
            Step::Oracle,
        ),
        (
            "with etcd, a read ahead at a revision the upstream reached: the oracle before waiting or forwarding",
            &[Etcd, Behind, Ahead(110), Busy],
            Step::Oracle,
        ),
        (
            "ahead, the oracle proved the store at etcd's revision past it (the store moved there): served",
            &[Etcd, OracleAsked, Ahead(110), ProbedAt(120), StoreAt(120)],
            Step::Serve(Source::Store),
        ),
        (
            "ahead, etcd's revision short of it (the oracle's answer counts as the probe): wait the block timeout",
            &[Etcd, OracleAsked, Ahead(200), ProbedAt(150)],
            wait(3_000),
        ),
        (
            "ahead of etcd's revision after the wait: a second ask, a probe",
            &[Etcd, OracleAsked, Ahead(200), ProbedAt(150), Waited],
            Step::Probe,
        ),
        (
            "ahead of etcd's revision and of the probe after the wait: 504",
            &[Etcd, OracleAsked, Ahead(200), ProbedAt(150), Waited, Probes(2)],
            Step::TooLarge { current: 150 },
        ),
        (
            "ahead, the oracle proved nothing: the apiserver's way (a probe)",
            &[Etcd, OracleAsked, Ahead(200)],
            Step::Probe,
        ),
        // --- consistent reads, before the probe ---
        (
            "a get: a probe costs the upstream what the get does (it serves gets from etcd)",
            &[Get],
            forward(Reason::Small),
        ),
        ("a small list (50 KB) likewise", &[Bytes(50_000)], forward(Reason::Small)),
        ("a get, probing small reads (tests of the memory path)", &[Get, SmallReads], Step::Probe),
        ("a big list of a store at the known revision: a probe (O(1)) decides", &[], Step::Probe),
        (
            "a big list of a store behind but busy: a probe, its next event is near",
            &[Behind, Busy],
            Step::Probe,
        ),
        (
            "behind and quiet, offload: a proof (2 requests, O(1)) is cheaper than a census (O(N))",
            &[Behind],
            Step::Prove,
        ),
        (
            "behind and quiet, latency: a census (~7 ms) is faster than forwarding (~52 ms), a proof is not",
            &[Behind, Latency],
            Step::Census(Cover::Whole),
        ),
        (
            "behind and quiet, latency, small objects (a census lists as much as the read): forwarded, caught up",
            &[Behind, Latency, Sizes(2 * MB, 2 * MB, 2 * MB)],
            caught_up(Reason::Quiet),
        ),
        (
            "the same with a proof 5 s ago: no catch-up yet",
            &[Behind, Latency, Sizes(2 * MB, 2 * MB, 2 * MB), LastProof(5_000)],
            forward(Reason::Quiet),
        ),
        (
            "behind and quiet, latency, a census measured at 500 ms: slower than forwarding",
            &[Behind, Latency, CensusTook(500)],
            caught_up(Reason::Quiet),
        ),
        (
            "behind and quiet, offload, proofs measured at 3 s (past the bound): a census",
            &[Behind, ProofTook(3_000)],
            Step::Census(Cover::Whole),
        ),
        ("behind and quiet, offload, censuses off: a proof", &[Behind, NoCensus], Step::Prove),
        (
            "behind and quiet, proofs off (an upstream without pre-deadline bookmarks), census off: forwarded",
            &[Behind, NoProve, NoCensus],
            caught_up(Reason::Quiet),
        ),
        (
            "a namespace's list (200 KB) under a census of the whole (200 KB): no census for a read smaller than \
             what it lists; a proof",
            &[Behind, Bytes(200_000)],
            Step::Prove,
        ),
        ("the same, latency: forwarded", &[Behind, Latency, Bytes(200_000)], caught_up(Reason::Quiet)),
        (
            "a namespace's list (200 KB), a census of its part (20 KB), latency: the census",
            &[Behind, Latency, Bytes(200_000), namespace],
            Step::Census(Cover::Part),
        ),
        (
            "a selector's list (no census can serve it), latency: forwarded",
            &[Behind, Latency, Census(None)],
            caught_up(Reason::Quiet),
        ),
        (
            "the real apiserver's figures (10k flunders, 30 MB, a 3.5 MB census), latency: a page of 500 (1.5 MB) \
             is not worth a census of the whole",
            &[Behind, Latency, real],
            caught_up(Reason::Quiet),
        ),
        (
            "the same page, a census of its part (175 KB)",
            &[Behind, Latency, real, namespace],
            Step::Census(Cover::Part),
        ),
        (
            "the full list (30 MB), a census measured at 50 ms: the census",
            &[Behind, Latency, Sizes(30 * MB, 3_500_000, 30 * MB), CensusTook(50)],
            Step::Census(Cover::Whole),
        ),
        (
            "a consistent watch of a namespace, latency preferred: a census of its namespace (~3 ms) is faster \
             than a proof",
            &[Behind, Latency, Watch, Bytes(50_000), namespace],
            Step::Census(Cover::Part),
        ),
        (
            "a kubelet's WatchList (every namespace, a node's selector: the whole resource's census), offload: a \
             proof (2 requests) is cheaper than a census of the whole (1 request + 200 KB)",
            &[Behind, Watch],
            Step::Prove,
        ),
        (
            "the same, latency: the census (~7 ms) is faster than a proof (~1.5 s), and forwarding would pin the \
             upstream",
            &[Behind, Watch, Latency],
            Step::Census(Cover::Whole),
        ),
        (
            "the same after the probe found the store behind, latency: the census",
            &[ProbedAt(110), Watch, Latency],
            Step::Census(Cover::Whole),
        ),
        (
            "the same, latency, a census measured at 1.8 s: the proof (~1.5 s) is faster",
            &[Behind, Watch, Latency, CensusTook(1_800)],
            Step::Prove,
        ),
        (
            "a consistent watch, latency, a census measured at 1 s: slower than forwarding, but a watch keeps the \
             bound (2 s) as its deadline: the census",
            &[Behind, Watch, Latency, CensusTook(1_000), NoProve],
            Step::Census(Cover::Whole),
        ),
        (
            "a consistent watch, latency, proofs measured at 3 s, censuses off: past the bound, forwarded",
            &[Behind, Watch, Latency, ProofTook(3_000), NoCensus],
            caught_up(Reason::Quiet),
        ),
        (
            "a consistent watch without censuses: a proof (forwarding would pin the upstream)",
            &[Behind, Watch, Bytes(50_000), namespace, NoCensus],
            Step::Prove,
        ),
        (
            "a consistent watch of a store at the known revision, however small: a probe",
            &[Watch, Bytes(1_000)],
            Step::Probe,
        ),
        // --- consistent reads, after the probe ---
        ("the store reached the probed revision: served", &[ProbedAt(100)], Step::Serve(Source::Store)),
        (
            "the probe found the store behind, its census matched a snapshot there: served from it",
            &[ProbedAt(110), Matched(110)],
            Step::Serve(Source::Matched),
        ),
        ("behind a busy store: wait 3 gaps for its next event", &[ProbedAt(110), Busy], wait(31)),
        (
            "behind a store that last moved 300 ms ago: wait, leaving room for a proof after it",
            &[ProbedAt(110), Moved(100, 300)],
            wait(542),
        ),
        (
            "behind a store that last moved 700 ms ago: no room to wait before a proof, a proof",
            &[ProbedAt(110), Moved(100, 700)],
            Step::Prove,
        ),
        (
            "behind a busy store, latency, no censuses: wait, bounded by what forwarding takes (~52 ms)",
            &[ProbedAt(110), Latency, NoCensus, Moved(40, 1)],
            wait(52),
        ),
        ("behind, waited already: a proof", &[ProbedAt(110), Busy, Waited, NoCensus], Step::Prove),
        (
            "behind, the census showed writes it lacks: a proof if it still fits",
            &[ProbedAt(110), CensusDone],
            Step::Prove,
        ),
        (
            "behind, census and proof done: forwarded",
            &[ProbedAt(110), CensusDone, Proved],
            forward(Reason::Lagging),
        ),
        (
            "behind, 1.8 s spent already: a proof no longer fits the bound",
            &[ProbedAt(110), CensusDone, Arrived(1_800)],
            forward(Reason::Lagging),
        ),
        (
            "behind, a proof in flight ends in 100 ms: latency joins it too (faster than forwarding 200 MB)",
            &[ProbedAt(110), Latency, Sizes(200 * MB, 200 * MB, 200 * MB), Proving(1_400)],
            Step::Prove,
        ),
        ("the probe failed: forwarded", &[ProbeFailed], forward(Reason::ProbeFailed)),
        // --- reads at a revision ahead of the store ---
        ("ahead, reached by the store meanwhile: served", &[Ahead(100)], Step::Serve(Source::Store)),
        (
            "ahead, a continued page whose census matched a snapshot at its revision: served from it",
            &[Ahead(110), Matched(110)],
            Step::Serve(Source::Matched),
        ),
        (
            "ahead at a revision the upstream reached, quiet store: forwarded, never 504",
            &[Behind, Ahead(110)],
            forward(Reason::Ahead),
        ),
        ("ahead at a revision the upstream reached, busy store: wait", &[Behind, Ahead(110), Busy], wait(31)),
        (
            "a continued page at a revision the upstream reached, quiet store: a census of the page",
            &[Behind, Ahead(110), namespace, Bytes(500_000)],
            Step::Census(Cover::Part),
        ),
        ("ahead of every known revision: a probe", &[Ahead(200)], Step::Probe),
        (
            "ahead of the probed revision too: wait the block timeout, as the apiserver",
            &[Ahead(200), ProbedAt(150)],
            wait(3_000),
        ),
        ("still ahead after the wait: a second probe", &[Ahead(200), ProbedAt(150), Waited], Step::Probe),
        (
            "still ahead after the second probe: 504",
            &[Ahead(200), ProbedAt(150), Waited, Probes(2)],
            Step::TooLarge { current: 150 },
        ),
        (
            "the second probe found it reached: forwarded",
            &[Ahead(200), ProbedAt(200), Waited, Probes(2)],
            forward(Reason::Ahead),
        ),
        ("ahead, the probe failed: the upstream decides", &[Ahead(200), ProbeFailed], forward(Reason::Ahead)),
    ];
    let mut failed = Vec::new();
    for (name, changes, want) in cases {
        let mut o = base(now);
        changes.iter().for_each(|&m| apply(&mut o, m));
        let got = plan(&o);
        if got != *want {
            failed.push(format!("{name}: got {got:?}, want {want:?}"));
        }
    }
    assert!(failed.is_empty(), "{} of {} decisions wrong:\n{}", failed.len(), cases.len(), failed.join("\n"));
}

/// Whatever the measured times, no step a read takes costs the upstream more than forwarding it: every step
/// the planner returns for a read, in any state, either is forwarding or pays against it.
#[test]
fn no_step_costs_the_upstream_more_than_forwarding() {
    let now = Instant::now() + Duration::from_secs(100);
    for bytes in [1_000, 50_000, 150_000, 2 * MB, 200 * MB] {
        for share in [1, 10, 100] {
            for prefer in [Prefer::Offload, Prefer::Latency] {
                for (known, probe, etcd) in [
                    (100, Probed::No, false),
                    (120, Probed::No, false),
                    (120, Probed::At(120), false),
                    (120, Probed::No, true),
                ] {
                    for round_trip in [ms(1), ms(50), Duration::from_secs(1)] {
                        let mut o = base(now);
                        (o.read.bytes, o.store.census_bytes) = (bytes, o.store.bytes / share);
                        (o.policy.prefer, o.measured.round_trip) = (prefer, round_trip);
                        o.upstream = UpstreamView { known, probe, etcd };
                        let step = plan(&o);
                        let (cost, forward) = (o.cost(step), o.cost(forward(Reason::Small)));
                        assert!(
                            matches!(step, Step::Forward { .. }) || cost.pays_against(forward, REQUEST_BYTES),
                            "{step:?} costs {cost:?} against forwarding's {forward:?}: {o:?}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn activity_from_times() {
    let t0 = Instant::now();
    let a = Activity::from_times([t0, t0 + ms(10), t0 + ms(30)], t0 + ms(40));
    assert_eq!((a.gap, a.since_last), (Some(ms(15)), ms(10)));
    let one = Activity::from_times([t0], t0);
    assert_eq!((one.gap, one.expected_next()), (None, None));
    assert_eq!(Activity::from_times([], t0), Activity::QUIET);
    // A resource that went quiet is not expected within its old gap.
    assert_eq!(Activity { gap: Some(ms(10)), since_last: ms(500) }.expected_next(), Some(ms(500)));
}

#[test]
fn a_reads_cutoff_is_its_deadline_and_the_bound_once_more() {
    let now = Instant::now();
    let mut o = base(now);
    // 2 MB at 40 MB/s after a 2 ms round trip: forwarding takes 52 ms; offloading allows the bound past it.
    let deadline = now + ms(52) + DEFAULT_LATENCY_BOUND;
    assert_eq!(o.cutoff(), deadline + DEFAULT_LATENCY_BOUND);
    apply(&mut o, Latency);
    assert_eq!(o.cutoff(), now + ms(52) + DEFAULT_LATENCY_BOUND, "a read preferring latency: the bound once");
    // A read ahead waits up to its block timeout for a revision the upstream has not reached: the bound after.
    apply(&mut o, Ahead(150));
    assert_eq!(o.cutoff(), now + Duration::from_secs(3) + DEFAULT_LATENCY_BOUND);
}
