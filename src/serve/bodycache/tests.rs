use super::*;

fn parts(text: &'static str, n: usize) -> Vec<Bytes> {
    vec![Bytes::from_static(text.as_bytes()); n]
}

/// The assembly a list of `key` at `rv` gets: the second miss of that snapshot.
fn assembly(c: &Arc<BodyCache>, key: &str, rv: u64) -> Assembly {
    for _ in 0..2 {
        match c.lookup(key, rv) {
            Lookup::Miss { assembly: Some(a) } => return a,
            Lookup::Miss { assembly: None } => {}
            Lookup::Hit(_) | Lookup::Pending(_) => panic!("{key} at {rv} is cached or being assembled"),
        }
    }
    panic!("the second miss of {key} at {rv} did not assemble")
}

/// Assembles `chunks` as the list of `key` at `rv`; returns what the list sends.
async fn send(c: &Arc<BodyCache>, key: &str, rv: u64, chunks: Vec<Bytes>) -> Vec<u8> {
    let len = chunks.iter().map(Bytes::len).sum();
    let items = chunks.len();
    body_of(&assembly(c, key, rv).finish(len, items, chunks.into_iter()).await)
}

fn body_of(hit: &CachedBody) -> Vec<u8> {
    hit.iter().collect::<Vec<_>>().concat()
}

#[tokio::test]
async fn a_body_sent_to_its_end_is_served_at_its_snapshot_only() {
    let c = Arc::new(BodyCache::default());
    assert!(c.get("pods|", 5).is_none(), "empty cache");
    let sent = send(&c, "pods|", 5, parts("ab", 3)).await;
    assert_eq!(sent, b"ababab");
    let hit = c.get("pods|", 5).expect("published");
    assert_eq!((body_of(&hit), hit.len, hit.items), (sent.clone(), 6, 3));
    assert!(c.get("pods|ns-1", 5).is_none(), "another key is a miss");
    assert_eq!((c.entries(), c.bytes()), (1, 6));
    assert!(c.get("pods|", 6).is_none(), "another snapshot is a miss");
    assert_eq!((c.entries(), c.bytes()), (0, 0), "and the older snapshot's entry is dead: dropped");

    // A newer snapshot replaces the older; a slow list of the older one does not displace it.
    send(&c, "pods|", 7, parts("c", 2)).await;
    assert!(c.get("pods|", 5).is_none());
    send(&c, "pods|", 5, parts("ab", 3)).await;
    assert_eq!(body_of(&c.get("pods|", 7).expect("newer kept")), b"cc");
    assert_eq!((c.entries(), c.bytes()), (1, 2));
}

#[tokio::test]
async fn a_body_shorter_than_announced_is_sent_but_not_cached() {
    let c = Arc::new(BodyCache::default());
    let a = assembly(&c, "pods|", 3);
    let body = a.finish(6, 3, parts("ab", 2).into_iter()).await;
    assert_eq!(body_of(&body), b"abab");
    assert!(c.get("pods|", 3).is_none());
    assert_eq!((c.entries(), c.bytes()), (0, 0));
}

#[tokio::test]
async fn lists_arriving_during_an_assembly_wait_for_it() {
    let c = Arc::new(BodyCache::default());
    let a = assembly(&c, "pods|", 3);
    // A storm: the lists arriving now wait for the one assembly instead of assembling again.
    let waiting: Vec<Pending> = (0..3)
        .map(|_| match c.lookup("pods|", 3) {
            Lookup::Pending(p) => p,
            _ => panic!("a list arriving during the assembly must wait for it"),
        })
        .collect();
    let waiters = tokio::spawn(async move {
        let mut bodies = Vec::new();
        for p in waiting {
            bodies.push(body_of(&p.wait().await.expect("assembled")));
        }
        bodies
    });
    a.finish(4, 2, parts("ab", 2).into_iter()).await;
    assert_eq!(waiters.await.expect("waiters"), vec![b"abab".to_vec(); 3]);
    assert!(matches!(c.lookup("pods|", 3), Lookup::Hit(_)), "then it is cached");
    let rendered = c.metrics.render();
    assert!(rendered.contains("kache_list_body_cache_total{result=\"coalesced\"} 3"), "{rendered}");
}

#[tokio::test]
async fn an_abandoned_assembly_sends_its_waiters_to_assemble_their_own() {
    let c = Arc::new(BodyCache::default());
    let a = assembly(&c, "pods|", 3);
    let Lookup::Pending(p) = c.lookup("pods|", 3) else { panic!("waits") };
    drop(a); // its list went away before producing the body
    assert!(p.wait().await.is_none(), "the waiter is released empty-handed, not left waiting");
    // The next list is not sent to wait for an assembly that no longer runs.
    assert!(matches!(c.lookup("pods|", 3), Lookup::Miss { .. }));
}

#[tokio::test]
async fn bounded_by_bytes_least_recently_used_first() {
    let c = Arc::new(BodyCache::with_max_bytes(10));
    send(&c, "a", 1, parts("xxxx", 1)).await;
    send(&c, "b", 1, parts("yyyy", 1)).await;
    assert!(c.get("a", 1).is_some(), "a is now the most recently used");
    send(&c, "c", 1, parts("zzzz", 1)).await;
    assert!(c.get("b", 1).is_none(), "b, the least recently used, made room");
    assert!(c.get("a", 1).is_some() && c.get("c", 1).is_some());
    assert_eq!(c.bytes(), 8);
    // Over the whole bound: not assembled for the cache at all.
    assert!(!assembly(&c, "d", 1).fits(12));
    assert_eq!(c.bytes(), 8);

    let none = Arc::new(BodyCache::with_max_bytes(0));
    for _ in 0..3 {
        assert!(
            matches!(none.lookup("a", 1), Lookup::Miss { assembly: None }),
            "a disabled cache never assembles"
        );
    }
    assert_eq!((none.entries(), none.bytes()), (0, 0));
}

#[test]
fn a_list_is_assembled_for_the_cache_only_after_a_miss_at_its_snapshot() {
    let c = Arc::new(BodyCache::default());
    let assembles = |rv| match c.lookup("pods|", rv) {
        Lookup::Hit(_) | Lookup::Pending(_) => panic!("nothing cached yet"),
        Lookup::Miss { assembly } => assembly.is_some(),
    };
    // Under churn every list is at a new snapshot: none is assembled ahead.
    assert!(!assembles(1));
    assert!(!assembles(2));
    assert!(!assembles(3));
    // A second list of one snapshot assembles it (dropped here: abandoned).
    assert!(assembles(3));
    // Another key keeps its own memory.
    assert!(matches!(c.lookup("pods|ns-1", 3), Lookup::Miss { assembly: None }));
}

#[test]
fn the_memory_of_misses_is_bounded() {
    let c = Arc::new(BodyCache::default());
    for i in 0..(MAX_MISSED_KEYS * 3) {
        let _ = c.lookup(&format!("pods|ns-{i}"), 1);
        assert!(c.lock().missed.len() <= MAX_MISSED_KEYS);
    }
}

#[tokio::test]
async fn a_newer_snapshot_of_a_resource_drops_its_entries_at_older_ones() {
    // Only lists at the current snapshot are cached: once pods are listed at 8, the namespace lists assembled
    // at 5 can never be served again. Other resources keep theirs.
    let c = Arc::new(BodyCache::default());
    send(&c, "pods|ns-1|Full|json", 5, parts("a", 1)).await;
    send(&c, "pods|ns-2|Full|json", 5, parts("bb", 1)).await;
    send(&c, "nodes||Full|json", 3, parts("dddd", 1)).await;
    assert_eq!((c.entries(), c.bytes()), (3, 7));
    assert!(c.get("pods|ns-9|Full|json", 8).is_none());
    assert_eq!((c.entries(), c.bytes()), (1, 4), "pods at 5 dropped; nodes kept");
    assert!(c.get("nodes||Full|json", 3).is_some());
    send(&c, "pods|ns-3|Full|json", 8, parts("ccc", 1)).await;
    assert_eq!(c.entries(), 2);
    // A slow list of an older snapshot finishing now is not kept.
    let slow = assembly(&c, "pods|ns-1|Full|json", 7);
    slow.finish(1, 1, parts("e", 1).into_iter()).await;
    assert_eq!(c.entries(), 2);
    // Looking up an older snapshot drops nothing.
    assert!(c.get("pods|ns-1|Full|json", 6).is_none());
    assert!(c.get("pods|ns-3|Full|json", 8).is_some());
}

#[test]
fn the_memory_of_resources_is_bounded() {
    let c = Arc::new(BodyCache::default());
    for i in 0..(MAX_MISSED_KEYS * 3) {
        let _ = c.lookup(&format!("r{i}|ns|Full|json"), 1);
        assert!(c.entries.resources() <= crate::serve::snapcache::NEWEST_RESOURCES);
    }
}

/// The hot path: a hit on a warm cache (`cargo test -p kache --lib serve::bodycache -- --ignored --nocapture`).
#[tokio::test]
#[ignore = "a measurement, not a check"]
async fn measure_hits() {
    let c = Arc::new(BodyCache::default());
    let keys: Vec<String> = (0..48).map(|i| format!("r{i}|ns|Full|json")).collect();
    for k in &keys {
        send(&c, k, 5, parts("x", 1)).await;
    }
    let n = 1_000_000;
    let started = std::time::Instant::now();
    let mut found = 0;
    for i in 0..n {
        found += usize::from(c.get(&keys[i % keys.len()], 5).is_some());
    }
    let took = started.elapsed();
    assert_eq!(found, n);
    println!("bodycache hit: {:.0} ns per lookup", took.as_nanos() as f64 / n as f64);
}
