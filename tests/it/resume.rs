//! Memory per resuming watcher is O(1), however far back it resumes.
//!
//! A watcher resuming from a resourceVersion replays the history after it through a cursor into the store's
//! shared, segmented log; before, it copied the tail into a `Vec` (a reconnect storm of 10k watchers resuming
//! 60 s back at 1k events/s held ~5 GB). These tests count the bytes the test thread holds (a counting global
//! allocator, per thread, so nothing else in the process interferes: `crate::alloc`) after watchers were made and each sent
//! its first replayed event.
//!
//! Run: `cargo test -p kache --test it resume:: -- --nocapture` (prints the bytes per watcher).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kache::codec::extract::object_from_json;
use kache::resource::{Gvr, ResourceInfo};
use kache::serve::watch::{Filter, Start, WatchSpec, WatchView, Watcher};
use kache::store::{EventType, Object, Store, StoreConfig, Writer};
use tokio_util::sync::CancellationToken;

/// Bytes this thread holds now (the test binary's counting allocator, `crate::alloc`: per thread, so the
/// other tests running in this process do not interfere).
fn held() -> i64 {
    crate::alloc::held_by_this_thread()
}

// === fixtures ===

fn pods() -> ResourceInfo {
    ResourceInfo {
        gvr: Gvr::new("", "v1", "pods"),
        kind: "Pod".into(),
        list_kind: "PodList".into(),
        namespaced: true,
        list_items_have_type_meta: false,
    }
}

fn pod(i: u64, rv: u64) -> Arc<Object> {
    let raw = format!(
        r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"p{i}","namespace":"storm","uid":"u{i}","resourceVersion":"{rv}"}},"spec":{{"nodeName":"n1"}},"status":{{"phase":"Running"}}}}"#
    );
    Arc::new(object_from_json(Bytes::from(raw), &pods()).expect("valid pod"))
}

/// A store synced at RV 1 whose history then holds `events` changes (RVs 2..=events+1) of 1,000 pods, applied
/// in batches as a reflector does.
fn store_with_history(events: u64) -> (Arc<Store>, Writer) {
    let config = StoreConfig { history_max_events: events as usize + 1, ..StoreConfig::default() };
    let (store, mut writer) = Store::new(pods(), config);
    writer.replace([], 1);
    let mut rv = 1;
    while rv <= events {
        let batch: Vec<_> = (0..1000.min(events + 1 - rv))
            .map(|_| {
                rv += 1;
                let kind = if rv <= 1001 { EventType::Added } else { EventType::Modified };
                (kind, pod(rv % 1000, rv))
            })
            .collect();
        writer.apply(batch);
    }
    assert_eq!(store.load().history.len() as u64, events, "the whole history is retained");
    (store, writer)
}

/// The resourceVersion of every event line of a chunk.
fn rvs_of(chunk: &[u8]) -> Vec<u64> {
    const KEY: &[u8] = br#""resourceVersion":""#;
    let rv = |line: &[u8]| -> Option<u64> {
        let at = line.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
        let end = line[at..].iter().position(|b| *b == b'"')? + at;
        std::str::from_utf8(&line[at..end]).ok()?.parse().ok()
    };
    chunk
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| rv(l).expect("an event with an RV"))
        .collect()
}

fn resume_from(rv: u64) -> WatchSpec {
    WatchSpec {
        start: Start::Resume { rv: Some(rv) },
        filter: Filter::default(),
        view: WatchView::Full,
        bookmarks: true,
        timeout: Duration::from_secs(3600),
        bookmark_interval: Duration::from_secs(60),
        wait_timeout: Duration::from_secs(3),
        indexed: true,
        proto: None,
        matched: None,
        frames: Default::default(),
    }
}

/// Starts `n` watchers resuming from the oldest RV the history serves and has each send its first replayed
/// event; returns them (still replaying) and the bytes this thread holds for them.
async fn resuming_watchers(store: &Arc<Store>, n: usize, token: &CancellationToken) -> (Vec<Watcher>, i64) {
    // Warm-up: one-time allocations (the kache's metrics and the resource's series, the first event's shared
    // frame) are not per watcher.
    let metrics = kache::metrics::Metrics::new();
    // The watchers of one kache share its table of frames.
    let frames = resume_from(1).frames;
    let spec = || WatchSpec { frames: frames.clone(), ..resume_from(1) };
    let mut warm = Watcher::new(&metrics, store.clone(), spec(), token.clone());
    drop(warm.next_frame().await.expect("a replayed event"));
    drop(warm);
    let before = held();
    let mut watchers = Vec::with_capacity(n);
    for _ in 0..n {
        let mut watcher = Watcher::new(&metrics, store.clone(), spec(), token.clone());
        let frame = watcher.next_frame().await.expect("a replayed event");
        assert!(frame.starts_with(br#"{"type":"ADDED","object":{"kind":"Pod""#), "{frame:?}");
        assert_eq!(rvs_of(&frame), [2], "the oldest event first");
        watchers.push(watcher);
    }
    let bytes = held() - before;
    (watchers, bytes)
}

// === tests ===

/// What a resuming watcher holds does not depend on how many events it has left to replay: the same bytes
/// for 1,000 and 50,000 (a copied tail of `Arc`s alone would be 8 bytes per event, 400 KB per watcher).
#[tokio::test]
async fn memory_per_resuming_watcher_does_not_grow_with_the_replay_length() {
    const WATCHERS: usize = 200;
    let token = CancellationToken::new();
    let mut per_watcher = Vec::new();
    for events in [1_000u64, 50_000] {
        let (store, _writer) = store_with_history(events);
        let (watchers, bytes) = resuming_watchers(&store, WATCHERS, &token).await;
        let each = bytes / WATCHERS as i64;
        println!("history of {events} events: {bytes} bytes for {WATCHERS} resuming watchers, {each} each");
        per_watcher.push(each);
        drop(watchers);
    }
    let (short, long) = (per_watcher[0], per_watcher[1]);
    assert!(long <= short, "a watcher resuming 50,000 events back holds {long} bytes, 1,000 back {short}");
    assert!(long < 4096, "a resuming watcher holds {long} bytes");
}

/// A reconnect storm: 10,000 watchers resuming 60 s back at 1,000 events/s (60,000 events to
/// replay each). Copied tails held ~4.8 GB of `Arc`s alone (10,000 × 60,000 × 8 bytes); cursors hold a few
/// hundred bytes per watcher (680 in a debug build when this was written).
#[tokio::test]
async fn reconnect_storm_of_resuming_watchers_stays_bounded() {
    const WATCHERS: usize = 10_000;
    /// 1.6 KiB per watcher (they measured 680 bytes each when this was written).
    const BOUND: i64 = 16 << 20;
    let (store, mut writer) = store_with_history(60_000);
    let token = CancellationToken::new();
    let (mut watchers, bytes) = resuming_watchers(&store, WATCHERS, &token).await;
    println!("storm: {bytes} bytes for {WATCHERS} watchers resuming 60,000 events back");
    assert!(bytes < BOUND, "{WATCHERS} resuming watchers hold {bytes} bytes (bound {BOUND})");

    // The writer goes on (appending and evicting) while they replay: their cursors keep their own window, and
    // each still sends every event exactly once, in order, then the live ones.
    writer.apply([(EventType::Modified, pod(7, 60_002))]);
    let watcher = watchers.last_mut().expect("watchers");
    let mut rvs = vec![2];
    while rvs.len() < 60_001 {
        let frame = watcher.next_frame().await.expect("stream open");
        rvs.extend(rvs_of(&frame));
    }
    assert_eq!(rvs, (2..=60_002).collect::<Vec<_>>());
}
