use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http_body_util::BodyExt as _;

#[cfg(target_os = "linux")]
use super::pool;
use super::*;

/// Chunks of `size` bytes, `n` of them, each tagged with its index.
fn chunks(n: usize, size: usize) -> Vec<Bytes> {
    (0..n).map(|i| Bytes::from(format!("{i:08}").repeat(size / 8))).collect()
}

/// A hang would be a failure, not a slow pass: bound every await on a body.
const GUARD: Duration = Duration::from_secs(30);

#[tokio::test]
async fn an_offloaded_body_is_every_chunk_in_order() {
    let producers = Arc::new(Producers::default());
    let input = chunks(100, 16 * 1024); // 1.6 MB: several batches
    let expected = input.concat();
    let body = offloaded(producers.clone(), input.into_iter());
    let got = tokio::time::timeout(GUARD, body.collect()).await.expect("no hang").expect("body").to_bytes();
    assert_eq!(got.len(), expected.len());
    assert!(got == expected, "the bytes, in order");

    let empty = offloaded(producers.clone(), std::iter::empty());
    assert!(empty.collect().await.expect("body").to_bytes().is_empty());
}

#[tokio::test]
async fn collect_concatenates_every_batch() {
    let producers = Arc::new(Producers::default());
    let input = chunks(40, 10_000);
    let expected = input.concat();
    assert_eq!(collect(&producers, input.into_iter()).await.expect("collected"), expected);
}

/// The current-thread runtime's only worker is the test's thread: production must happen elsewhere.
#[tokio::test]
async fn chunks_are_never_produced_on_a_runtime_worker() {
    let producers = Arc::new(Producers::default());
    let worker = std::thread::current().id();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let input = chunks(50, 8 * 1024).into_iter().inspect(move |_| {
        log.lock().expect("not poisoned").push(std::thread::current().id());
    });
    let got = tokio::time::timeout(GUARD, offloaded(producers.clone(), input).collect())
        .await
        .expect("no hang")
        .expect("body");
    assert_eq!(got.to_bytes().len(), 50 * 8 * 1024);
    let seen = seen.lock().expect("not poisoned");
    assert_eq!(seen.len(), 50);
    assert!(seen.iter().all(|t| *t != worker), "a chunk was produced on the runtime worker");
}

/// Each chunk takes a while to produce, as indenting or compressing one does; without the permits, eight
/// bodies' batches would run side by side on the blocking pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn at_most_producers_batches_run_at_once() {
    let producers = Arc::new(Producers::default());
    let (active, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut bodies = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (active, peak, producers) = (active.clone(), peak.clone(), producers.clone());
        let input = chunks(12, 32 * 1024).into_iter().inspect(move |_| {
            let now = active.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(2)); // the work of producing a chunk
            active.fetch_sub(1, Ordering::SeqCst);
        });
        bodies.spawn(async move {
            offloaded(producers.clone(), input).collect().await.map(|c| c.to_bytes().len())
        });
    }
    let lens = tokio::time::timeout(GUARD, bodies.join_all()).await.expect("no hang");
    assert!(lens.into_iter().all(|l| l.expect("body") == 12 * 32 * 1024));
    let peak = peak.load(Ordering::SeqCst);
    assert!(
        peak >= 1 && peak <= super::producers(),
        "{peak} chunks produced at once, at most {} allowed",
        super::producers()
    );
}

/// A client that stops reading holds its batch, never a permit: another heavy body still streams to the end.
#[tokio::test]
async fn a_stalled_body_holds_no_permit() {
    let producers = Arc::new(Producers::default());
    let mut stalled = offloaded(producers.clone(), chunks(100, 16 * 1024).into_iter());
    let first = tokio::time::timeout(GUARD, stalled.frame()).await.expect("no hang");
    assert!(first.expect("a frame").expect("data").is_data());
    // `stalled` is neither read further nor dropped while the next bodies stream.
    for _ in 0..=super::producers() {
        let other = offloaded(producers.clone(), chunks(100, 16 * 1024).into_iter());
        let got =
            tokio::time::timeout(GUARD, other.collect()).await.expect("not blocked by the stalled body");
        assert_eq!(got.expect("body").to_bytes().len(), 100 * 16 * 1024);
    }
    drop(stalled);
}

/// The queue is visible: `kache_heavy_bodies_producing` while batches run, `kache_heavy_bodies_waiting` for
/// a body whose turn has not come (every producer busy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gauges_show_bodies_producing_and_waiting() {
    let producers = Arc::new(Producers::default());
    // The same figures a kache's scrape mirrors (app reads `heavy_bodies()` into its SharedCounters).
    let value = |name: &str| -> f64 {
        let (waiting, producing) = producers.heavy_bodies();
        (if name == "kache_heavy_bodies_waiting" { waiting } else { producing }) as f64
    };
    let gate = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
    let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
    let n = super::producers();
    let mut bodies = tokio::task::JoinSet::new();
    for _ in 0..=n {
        let (gate, started, producers) = (gate.clone(), started_tx.clone(), producers.clone());
        // The first chunk blocks until the gate opens, so the batch holds its producer meanwhile.
        let input = (0..2).map(move |i| {
            if i == 0 {
                let _ = started.send(());
                let (open, cv) = &*gate;
                let mut open = open.lock().expect("not poisoned");
                while !*open {
                    open = cv.wait(open).expect("not poisoned");
                }
            }
            Bytes::from_static(b"chunk")
        });
        bodies.spawn(async move {
            offloaded(producers.clone(), input).collect().await.map(|c| c.to_bytes().len())
        });
    }
    // Every producer is busy once `n` first chunks have started.
    let rx = tokio::task::spawn_blocking(move || {
        for _ in 0..n {
            started_rx.recv_timeout(GUARD).expect("a batch started");
        }
        started_rx
    });
    let started_rx = tokio::time::timeout(GUARD, rx).await.expect("no hang").expect("joined");
    assert!(value("kache_heavy_bodies_producing") >= 1.0, "{:?}", producers.heavy_bodies());
    // The last body asks for a producer as soon as its task is first polled.
    tokio::time::timeout(GUARD, async {
        while value("kache_heavy_bodies_waiting") < 1.0 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("a body waits for a producer");
    {
        let (open, cv) = &*gate;
        *open.lock().expect("not poisoned") = true;
        cv.notify_all();
    }
    let lens = tokio::time::timeout(GUARD, bodies.join_all()).await.expect("no hang");
    assert!(lens.into_iter().all(|l| l.expect("body") == 10));
    drop(started_rx);
}

/// Heavy bodies are produced on the dedicated producer threads, whose nice value is raised by
/// [`pool::NICE`] so that the runtime workers preempt them (Linux).
#[cfg(target_os = "linux")]
#[tokio::test]
async fn chunks_are_produced_on_lowered_priority_producer_threads() {
    let producers = Arc::new(Producers::default());
    let base = pool::own_nice();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let input = chunks(40, 8 * 1024).into_iter().inspect(move |_| {
        let name = std::thread::current().name().map(str::to_owned);
        log.lock().expect("not poisoned").push((name, pool::own_nice()));
    });
    let got = tokio::time::timeout(GUARD, offloaded(producers.clone(), input).collect())
        .await
        .expect("no hang")
        .expect("body");
    assert_eq!(got.to_bytes().len(), 40 * 8 * 1024);
    let seen = seen.lock().expect("not poisoned");
    assert_eq!(seen.len(), 40);
    for (name, nice) in seen.iter() {
        assert!(name.as_deref().is_some_and(|n| n.starts_with("kache-heavy-")), "produced on {name:?}");
        assert_eq!(*nice, (base + pool::NICE).min(19), "the producer's nice value (the caller's is {base})");
    }
}

/// A pool's threads are counted for `kache_heavy_body_threads{priority="lowered"}`, survive a job that panics, and
/// end with the pool.
#[cfg(target_os = "linux")]
#[test]
fn a_pool_counts_its_threads_and_survives_a_panicking_job() {
    let counts = Arc::new(pool::Counts::default());
    let lowered = || counts.get().0;
    let base = pool::own_nice();
    let p = pool::Pool::start(1, &counts).expect("a thread starts");
    let (tx, rx) = std::sync::mpsc::channel();
    let panicking: pool::Job = Box::new(|| panic!("an iterator bug"));
    assert!(p.submit(panicking).is_ok());
    let tx2 = tx.clone();
    // The queue holds one job per thread (the permits keep callers within it): the next job is taken once
    // the thread has picked up the first.
    let mut next: pool::Job = Box::new(move || tx2.send(pool::own_nice()).expect("receiver alive"));
    let deadline = std::time::Instant::now() + GUARD;
    while let Err(back) = p.submit(next) {
        assert!(std::time::Instant::now() < deadline, "the thread never took the first job");
        next = back;
        std::thread::yield_now();
    }
    let nice = rx.recv_timeout(GUARD).expect("the thread outlived the panicking job");
    assert_eq!(nice, (base + pool::NICE).min(19));
    // The thread counted itself before running its first job.
    assert_eq!(lowered(), 1, "counted among the lowered-priority threads");
    drop(tx);
    // Dropped, the pool ends its threads and joins them.
    drop(p);
    assert_eq!(counts.get(), (0, 0), "no producer thread left");
}

/// A kache's producers are its own: their threads start with the first batch and are joined when they are
/// dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_producers_leave_no_thread() {
    let producers = Arc::new(Producers::new(2));
    let other = Producers::new(1);
    assert_eq!(producers.heavy_body_threads(), (0, 0), "started on first use");
    let got = collect(&producers, chunks(4, 1024).into_iter()).await.expect("collected");
    assert_eq!(got.len(), 4 * 1024);
    // The thread that ran a batch has counted itself (the other counts itself once it runs).
    let (lowered, normal) = producers.heavy_body_threads();
    assert!(lowered + normal >= 1);
    assert_eq!(other.heavy_body_threads(), (0, 0), "another kache's producers are not these");
    let counts = producers.counts.clone();
    drop(producers);
    assert_eq!(counts.get(), (0, 0));
}
