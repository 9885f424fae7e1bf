//! The planner's decisions, one row per decision and its reason (as the apiserver tests `ShouldDelegate`,
//! `storage/cacher/delegator_test.go`). Times are made up: nothing here depends on the machine's speed.

use super::*;

const MB: usize = 1_000_000;

/// A big consistent list (2 MB, the whole resource, spec-heavy objects: a census lists 10% of the bytes) of a
/// quiet store at the upstream's known revision, nothing probed yet, the default policy.
fn base(now: Instant) -> Observation {
    Observation {
        now,
        read: Read {
            kind: Kind::Read,
            want: Want::Consistent,
            bytes: 2 * MB,
            census: Some(Cover::Whole),
            arrived: now,
        },
        store: StoreView {
            rv: 100,
            held: None,
            bytes: 2 * MB,
            census_bytes: 2 * MB / 10,
            activity: Activity::QUIET,
        },
        upstream: UpstreamView { known: 100, probe: Probed::No },
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

/// The store advances every 10 ms, the last advance 1 ms ago.
fn busy() -> Activity {
    Activity { gap: Some(ms(10)), since_last: ms(1) }
}

fn get(o: &mut Observation) {
    o.read.bytes = 3_000;
    o.read.census = None;
}

/// The store behind a revision the upstream is known to have reached (foreign writes).
fn behind(o: &mut Observation) {
    o.upstream.known = 120;
}

fn probed(o: &mut Observation, rv: u64) {
    o.upstream.probe = Probed::At(rv);
    o.done.probes = 1;
}

fn latency(o: &mut Observation) {
    o.policy.prefer = Prefer::Latency;
}

fn forward(reason: Reason) -> Step {
    Step::Forward { reason, catch_up: false }
}

#[test]
fn decisions() {
    let now = Instant::now() + Duration::from_secs(100);
    type Case = (&'static str, fn(&mut Observation), Step);
    let cases: &[Case] = &[
        // --- consistent reads, before the probe ---
        (
            "a get: a probe costs the upstream what the get does (it serves consistent gets from etcd)",
            get,
            forward(Reason::Small),
        ),
        ("a small list (50 KB) likewise", |o| o.read.bytes = 50_000, forward(Reason::Small)),
        (
            "a get, probing small reads (tests of the memory path)",
            |o| {
                get(o);
                o.policy.small_reads = true;
            },
            Step::Probe,
        ),
        ("a big list of a store at the known revision: a probe (O(1)) decides", |_| {}, Step::Probe),
        (
            "a big list of a store behind but busy: a probe, its next event is near",
            |o| {
                behind(o);
                o.store.activity = busy();
            },
            Step::Probe,
        ),
        (
            "a big list of a store behind, whose held snapshot is at the known revision: a probe",
            |o| {
                behind(o);
                o.store.held = Some(120);
            },
            Step::Probe,
        ),
        (
            "behind and quiet, offload: a proof (2 requests, O(1)) is cheaper than a census (O(N) metadata)",
            behind,
            Step::Prove,
        ),
        (
            "behind and quiet, latency: a census (~7 ms) is faster than forwarding (~52 ms), a proof is not",
            |o| {
                behind(o);
                latency(o);
            },
            Step::Census(Cover::Whole),
        ),
        (
            "behind and quiet, latency, small objects (a census lists as much as the read): forwarded, caught up",
            |o| {
                behind(o);
                latency(o);
                o.store.census_bytes = o.store.bytes;
            },
            Step::Forward { reason: Reason::Quiet, catch_up: true },
        ),
        (
            "the same with a proof 5 s ago: no catch-up yet",
            |o| {
                behind(o);
                latency(o);
                o.store.census_bytes = o.store.bytes;
                o.flight.last_proof = Some(o.now - Duration::from_secs(5));
            },
            forward(Reason::Quiet),
        ),
        (
            "behind and quiet, latency, a census measured at 500 ms: slower than forwarding",
            |o| {
                behind(o);
                latency(o);
                o.measured.census = Some(ms(500));
            },
            Step::Forward { reason: Reason::Quiet, catch_up: true },
        ),
        (
            "behind and quiet, offload, proofs measured at 3 s (past the bound): a census",
            |o| {
                behind(o);
                o.measured.proof = Duration::from_secs(3);
            },
            Step::Census(Cover::Whole),
        ),
        (
            "behind and quiet, offload, censuses off: a proof",
            |o| {
                behind(o);
                o.policy.census = false;
            },
            Step::Prove,
        ),
        (
            "a namespace's list (200 KB) under a census of the whole (200 KB of metadata): no census for a \
             read smaller than what it lists; a proof",
            |o| {
                behind(o);
                o.read.bytes = 200_000;
            },
            Step::Prove,
        ),
        (
            "the same, latency: forwarded",
            |o| {
                behind(o);
                latency(o);
                o.read.bytes = 200_000;
            },
            Step::Forward { reason: Reason::Quiet, catch_up: true },
        ),
        (
            "a namespace's list (200 KB), census of its part (20 KB), latency: the census",
            |o| {
                behind(o);
                latency(o);
                o.read.bytes = 200_000;
                o.read.census = Some(Cover::Part);
            },
            Step::Census(Cover::Part),
        ),
        (
            "a selector's list (no census can serve it), latency: forwarded",
            |o| {
                behind(o);
                latency(o);
                o.read.census = None;
            },
            Step::Forward { reason: Reason::Quiet, catch_up: true },
        ),
        (
            "a consistent watch of a namespace, latency preferred: a watch offloads, and a census of its \
             namespace (1 request, 5 KB) is cheaper than a proof",
            |o| {
                behind(o);
                latency(o);
                o.read.kind = Kind::Watch;
                o.read.bytes = 50_000;
                o.read.census = Some(Cover::Part);
            },
            Step::Census(Cover::Part),
        ),
        (
            "a consistent watch without censuses: a proof (forwarding would pin the upstream)",
            |o| {
                behind(o);
                o.read.kind = Kind::Watch;
                o.read.bytes = 50_000;
                o.read.census = Some(Cover::Part);
                o.policy.census = false;
            },
            Step::Prove,
        ),
        (
            "a consistent watch of a store at the known revision, however small: a probe",
            |o| {
                o.read.kind = Kind::Watch;
                o.read.bytes = 1_000;
            },
            Step::Probe,
        ),
        // --- consistent reads, after the probe ---
        ("the store reached the probed revision: served", |o| probed(o, 100), Step::Serve(Source::Store)),
        (
            "the probe found the store behind, a held snapshot at that revision: served from it",
            |o| {
                probed(o, 110);
                o.store.held = Some(110);
            },
            Step::Serve(Source::Held),
        ),
        (
            "a held snapshot serves a selector's list (it is the whole resource's state)",
            |o| {
                probed(o, 110);
                o.store.held = Some(110);
                o.read.census = None;
            },
            Step::Serve(Source::Held),
        ),
        (
            "a held snapshot does not serve a watch that starts after the state (it has no history there)",
            |o| {
                probed(o, 110);
                o.store.held = Some(110);
                o.read.kind = Kind::Watch;
                o.read.census = None;
                o.policy.prove = false;
            },
            forward(Reason::Lagging),
        ),
        (
            "behind and quiet, proofs off (an upstream without pre-deadline bookmarks), census off: forwarded",
            |o| {
                behind(o);
                o.policy.prove = false;
                o.policy.census = false;
            },
            Step::Forward { reason: Reason::Quiet, catch_up: true },
        ),
        (
            "behind a busy store: wait 3 gaps for its next event",
            |o| {
                probed(o, 110);
                o.store.activity = busy();
            },
            Step::Wait { until: now + ms(31) },
        ),
        (
            "behind a store that last moved 300 ms ago: wait, leaving room for a proof after it",
            |o| {
                probed(o, 110);
                o.store.activity = Activity { gap: Some(ms(100)), since_last: ms(300) };
            },
            Step::Wait { until: now + ms(542) },
        ),
        (
            "behind a store that last moved 700 ms ago: no room to wait before a proof, a proof",
            |o| {
                probed(o, 110);
                o.store.activity = Activity { gap: Some(ms(100)), since_last: ms(700) };
            },
            Step::Prove,
        ),
        (
            "behind a busy store, latency, no censuses: wait, bounded by what forwarding takes (~52 ms)",
            |o| {
                probed(o, 110);
                latency(o);
                o.policy.census = false;
                o.store.activity = Activity { gap: Some(ms(40)), since_last: ms(1) };
            },
            Step::Wait { until: now + ms(52) },
        ),
        (
            "behind, waited already: a proof",
            |o| {
                probed(o, 110);
                o.store.activity = busy();
                o.done.waited = true;
                o.policy.census = false;
            },
            Step::Prove,
        ),
        (
            "behind, the census showed writes it lacks: a proof if it still fits",
            |o| {
                probed(o, 110);
                o.done.census = true;
            },
            Step::Prove,
        ),
        (
            "behind, census and proof done: forwarded",
            |o| {
                probed(o, 110);
                o.done.census = true;
                o.done.proved = true;
            },
            forward(Reason::Lagging),
        ),
        (
            "behind, 1.8 s spent already: a proof no longer fits the bound",
            |o| {
                probed(o, 110);
                o.done.census = true;
                o.read.arrived = o.now - ms(1800);
            },
            forward(Reason::Lagging),
        ),
        (
            "behind, a proof in flight ends in 100 ms: latency joins it too (faster than forwarding 200 MB)",
            |o| {
                probed(o, 110);
                latency(o);
                o.read.bytes = 200 * MB;
                o.store.bytes = 200 * MB;
                o.store.census_bytes = 200 * MB;
                o.flight.proof = Some(o.now - ms(1400));
            },
            Step::Prove,
        ),
        (
            "the real apiserver's figures (10k flunders, 30 MB, a 3.5 MB census), latency: a page of 500 \
             (1.5 MB) is not worth a census of the whole",
            |o| {
                behind(o);
                latency(o);
                (o.store.bytes, o.store.census_bytes, o.read.bytes) = (30 * MB, 3_500_000, 1_500_000);
            },
            Step::Forward { reason: Reason::Quiet, catch_up: true },
        ),
        (
            "the same page, a census of its part (175 KB)",
            |o| {
                behind(o);
                latency(o);
                (o.store.bytes, o.store.census_bytes, o.read.bytes) = (30 * MB, 3_500_000, 1_500_000);
                o.read.census = Some(Cover::Part);
            },
            Step::Census(Cover::Part),
        ),
        (
            "the full list (30 MB), a census measured at 50 ms: the census",
            |o| {
                behind(o);
                latency(o);
                (o.store.bytes, o.store.census_bytes, o.read.bytes) = (30 * MB, 3_500_000, 30 * MB);
                o.measured.census = Some(ms(50));
            },
            Step::Census(Cover::Whole),
        ),
        ("the probe failed: forwarded", |o| o.upstream.probe = Probed::Failed, forward(Reason::ProbeFailed)),
        // --- reads at a revision ahead of the store ---
        ("ahead, reached by the store meanwhile: served", |o| ahead(o, 100), Step::Serve(Source::Store)),
        (
            "ahead, a continued page at the revision a census proved the snapshot at: served from it",
            |o| {
                ahead(o, 110);
                o.store.held = Some(110);
            },
            Step::Serve(Source::Held),
        ),
        (
            "ahead at a revision the upstream reached, quiet store: forwarded, never 504",
            |o| {
                behind(o);
                ahead(o, 110);
            },
            forward(Reason::Ahead),
        ),
        (
            "ahead at a revision the upstream reached, busy store: wait",
            |o| {
                behind(o);
                ahead(o, 110);
                o.store.activity = busy();
            },
            Step::Wait { until: now + ms(31) },
        ),
        (
            "a continued page at a revision the upstream reached, quiet store: a census of the page",
            |o| {
                behind(o);
                ahead(o, 110);
                o.read.census = Some(Cover::Part);
                o.read.bytes = 500_000;
            },
            Step::Census(Cover::Part),
        ),
        ("ahead of every known revision: a probe", |o| ahead(o, 200), Step::Probe),
        (
            "ahead of the probed revision too: wait the block timeout, as the apiserver",
            |o| {
                ahead(o, 200);
                probed(o, 150);
            },
            Step::Wait { until: now + Duration::from_secs(3) },
        ),
        (
            "still ahead after the wait: a second probe",
            |o| {
                ahead(o, 200);
                probed(o, 150);
                o.done.waited = true;
            },
            Step::Probe,
        ),
        (
            "still ahead after the second probe: 504",
            |o| {
                ahead(o, 200);
                probed(o, 150);
                o.done.waited = true;
                o.done.probes = 2;
            },
            Step::TooLarge { current: 150 },
        ),
        (
            "the second probe found the revision reached: forwarded",
            |o| {
                ahead(o, 200);
                probed(o, 200);
                o.done.waited = true;
                o.done.probes = 2;
            },
            forward(Reason::Ahead),
        ),
        (
            "ahead, the probe failed: the upstream decides",
            |o| {
                ahead(o, 200);
                o.upstream.probe = Probed::Failed;
            },
            forward(Reason::Ahead),
        ),
    ];
    let mut failed = Vec::new();
    for (name, tweak, want) in cases {
        let mut o = base(now);
        tweak(&mut o);
        let got = plan(&o);
        if got != *want {
            failed.push(format!("{name}: got {got:?}, want {want:?}"));
        }
    }
    assert!(failed.is_empty(), "{} of {} decisions wrong:\n{}", failed.len(), cases.len(), failed.join("\n"));
}

fn ahead(o: &mut Observation, rv: u64) {
    o.read.want = Want::At { rv, block: Duration::from_secs(3) };
    o.read.census = None;
}

/// Whatever the measured times, no step a read takes costs the upstream more than forwarding it: every step
/// the planner returns for a read, in any state, either is forwarding or pays against it.
#[test]
fn no_step_costs_the_upstream_more_than_forwarding() {
    let now = Instant::now() + Duration::from_secs(100);
    for bytes in [1_000, 50_000, 150_000, 2 * MB, 200 * MB] {
        for census_share in [1, 10, 100] {
            for prefer in [Prefer::Offload, Prefer::Latency] {
                for (known, probe) in [(100, Probed::No), (120, Probed::No), (120, Probed::At(120))] {
                    for round_trip in [ms(1), ms(50), Duration::from_secs(1)] {
                        let mut o = base(now);
                        o.read.bytes = bytes;
                        o.store.census_bytes = o.store.bytes / census_share;
                        o.policy.prefer = prefer;
                        o.upstream = UpstreamView { known, probe };
                        o.measured.round_trip = round_trip;
                        let step = plan(&o);
                        let forward = o.cost(Step::Forward { reason: Reason::Small, catch_up: false });
                        let cost = o.cost(step);
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
    let times = [t0, t0 + ms(10), t0 + ms(30)];
    let a = Activity::from_times(times, t0 + ms(40));
    assert_eq!(a.gap, Some(ms(15)));
    assert_eq!(a.since_last, ms(10));
    let one = Activity::from_times([t0], t0);
    assert_eq!(one.gap, None);
    assert_eq!(one.expected_next(), None);
    assert_eq!(Activity::from_times([], t0), Activity::QUIET);
    // A resource that went quiet is not expected within its old gap.
    assert_eq!(Activity { gap: Some(ms(10)), since_last: ms(500) }.expected_next(), Some(ms(500)));
}
