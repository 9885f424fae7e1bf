//! The executor carries out the planner's steps: paused time, no upstream (one that refuses connections),
//! so what is asserted is the step taken, never how long something took on this machine.

use super::*;
use crate::resource::ResourceInfo;
use crate::store::{StoreConfig, Writer};

fn freshness(config: FreshnessConfig) -> Freshness {
    Freshness::new(Upstream::plain("http://127.0.0.1:1").expect("url"), config)
}

/// A store of pods at revision 10 with 2 MB of objects counted, and its writer.
fn store() -> (Arc<Store>, Writer) {
    let (store, mut writer) = Store::new(ResourceInfo::pods(), StoreConfig::default());
    writer.replace(std::iter::empty(), 10);
    (store, writer)
}

/// The store advances every 10 ms for a while (its events or bookmarks): it is busy.
async fn busy(writer: &mut Writer, from: u64) -> u64 {
    let mut rv = from;
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        rv += 1;
        writer.progress(rv);
    }
    rv
}

const BLOCK: Duration = Duration::from_secs(3);
const BIG: usize = 2_000_000;

#[tokio::test(start_paused = true)]
async fn a_read_ahead_of_a_busy_store_waits_for_it() {
    let f = freshness(FreshnessConfig::default());
    let (store, mut writer) = store();
    let rv = busy(&mut writer, 10).await;
    f.observe(rv + 1);
    let read = f.ahead(&store, rv + 1, Instant::now(), BIG, BLOCK, None);
    let advance = async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        writer.progress(rv + 1);
    };
    let (outcome, ()) = tokio::join!(read, advance);
    assert!(matches!(outcome, Ahead::Reached), "{outcome:?}");
    assert_eq!(f.stats.waited.load(Relaxed), 1);
    assert_eq!(f.stats.probes.load(Relaxed), 0, "the upstream was known to have reached it");
}

#[tokio::test(start_paused = true)]
async fn a_read_ahead_of_a_quiet_store_is_forwarded_at_once() {
    let f = freshness(FreshnessConfig::default());
    let (store, _writer) = store();
    f.observe(20);
    let t0 = Instant::now();
    let outcome = f.ahead(&store, 15, t0, BIG, BLOCK, None).await;
    assert!(matches!(outcome, Ahead::Forward), "{outcome:?}");
    assert_eq!(Instant::now(), t0, "no wait");
    assert_eq!((f.stats.waited.load(Relaxed), f.stats.ahead_forwarded.load(Relaxed)), (0, 1));
}

#[tokio::test(start_paused = true)]
async fn a_get_is_forwarded_without_a_probe() {
    let f = freshness(FreshnessConfig::default());
    let (store, _writer) = store();
    let outcome = f.ensure(&store, Instant::now(), 0, 3_000, false, None).await;
    assert_eq!(outcome.err(), Some(NotFresh::Small { bytes: 3_000 }));
    assert_eq!(f.stats.probes.load(Relaxed), 0);
}

#[tokio::test(start_paused = true)]
async fn a_quiet_store_behind_is_forwarded_and_caught_up_in_the_background_at_most_every_interval() {
    // Latency preferred, no censuses: nothing but forwarding fits (a proof takes longer than forwarding).
    let config = FreshnessConfig { prefer: Prefer::Latency, census: false, ..FreshnessConfig::default() };
    let f = freshness(config);
    let (store, _writer) = store();
    f.observe(20);
    let read = || f.ensure(&store, Instant::now(), 0, BIG, false, None);
    assert_eq!(read().await.err(), Some(NotFresh::Quiet { known: 20, current: 10 }));
    assert_eq!(
        (f.stats.probes.load(Relaxed), f.stats.catch_ups.load(Relaxed)),
        (0, 1),
        "no probe, a catch-up"
    );
    // The proof fails (no upstream); the next read within the interval starts none.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(read().await.is_err());
    assert_eq!(f.stats.catch_ups.load(Relaxed), 1);
    tokio::time::sleep(plan::CATCH_UP_INTERVAL).await;
    assert!(read().await.is_err());
    assert_eq!(f.stats.catch_ups.load(Relaxed), 2, "one per interval");
}

#[tokio::test(start_paused = true)]
async fn a_failed_probe_forwards() {
    let f = freshness(FreshnessConfig::default());
    let (store, _writer) = store();
    let outcome = f.ensure(&store, Instant::now(), 0, BIG, false, None).await;
    assert_eq!(outcome.err(), Some(NotFresh::ProbeFailed));
    assert_eq!((f.stats.probes.load(Relaxed), f.stats.probe_errors.load(Relaxed)), (1, 1));
}

/// Real time, asserting only a lower bound: the upstream (answering every probe at 42) has not reached the
/// revision either, and the 504 comes only after the apiserver's block timeout.
#[tokio::test]
async fn a_read_ahead_of_the_upstream_too_waits_the_block_timeout_before_its_504() {
    let (url, _) = super::probe::tests::upstream(false).await;
    let f = Freshness::new(Upstream::plain(&url).expect("url"), FreshnessConfig::default());
    let (store, _writer) = store();
    let block = Duration::from_millis(300);
    let t0 = Instant::now();
    let outcome = f.ahead(&store, 200, t0, BIG, block, None).await;
    assert!(matches!(outcome, Ahead::TooLarge { requested: 200, current: 42 }), "{outcome:?}");
    assert!(t0.elapsed() >= block, "answered after {:?}", t0.elapsed());
    assert_eq!(
        (f.stats.probes.load(Relaxed), f.stats.too_large.load(Relaxed)),
        (2, 1),
        "asked again after the wait"
    );
}

/// An upstream that accepts connections and never answers: every step that asks it hangs.
async fn silent_upstream() -> Upstream {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    Upstream::plain(&url).expect("url")
}

#[tokio::test(start_paused = true)]
async fn a_read_whose_upstream_answers_too_slowly_is_forwarded_at_its_cutoff() {
    let f = Freshness::new(silent_upstream().await, FreshnessConfig::default());
    let (store, _writer) = store();
    let t0 = Instant::now();
    let outcome = f.ensure(&store, t0, 0, BIG, false, None).await;
    assert_eq!(outcome.err(), Some(NotFresh::Slow));
    // Paused time: the instant the read gave up is the executor's decision, not this machine's speed. The
    // probe's own timeout would have failed it only later.
    let took = t0.elapsed();
    let bound = FreshnessConfig::default().latency_bound;
    assert!(took >= 2 * bound && took < slot::PROBE_TIMEOUT, "cut short after {took:?}");
    assert_eq!((f.stats.probes.load(Relaxed), f.stats.slow.load(Relaxed)), (1, 1));
    assert_eq!(f.stats.probe_errors.load(Relaxed), 0, "a slow answer is not a failed probe");

    // A read ahead of the store and of what the upstream is known to have reached: forwarded at its cutoff
    // (the apiserver decides), not after the probe's timeout.
    let t0 = Instant::now();
    let outcome = f.ahead(&store, 50, t0, BIG, BLOCK, None).await;
    assert!(matches!(outcome, Ahead::Forward), "{outcome:?}");
    assert!(
        t0.elapsed() >= BLOCK && t0.elapsed() < slot::PROBE_TIMEOUT,
        "cut short after {:?}",
        t0.elapsed()
    );
    assert_eq!((f.stats.slow.load(Relaxed), f.stats.ahead_forwarded.load(Relaxed)), (2, 1));
}
