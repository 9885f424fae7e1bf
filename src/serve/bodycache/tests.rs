use super::*;

fn parts(text: &'static str, n: usize) -> Vec<Bytes> {
    vec![Bytes::from_static(text.as_bytes()); n]
}

/// Sends `chunks` through a recording of `key` at `rv` to the end; returns what was sent.
fn send(c: &Arc<BodyCache>, key: &str, rv: u64, chunks: Vec<Bytes>) -> Vec<u8> {
    let len = chunks.iter().map(Bytes::len).sum();
    let items = chunks.len();
    c.record(key.to_owned(), rv, len, items, chunks.into_iter()).collect::<Vec<_>>().concat()
}

fn body_of(hit: &CachedBody) -> Vec<u8> {
    hit.iter().collect::<Vec<_>>().concat()
}

#[test]
fn a_body_sent_to_its_end_is_served_at_its_snapshot_only() {
    let c = Arc::new(BodyCache::default());
    assert!(c.get("pods|", 5).is_none(), "empty cache");
    let sent = send(&c, "pods|", 5, parts("ab", 3));
    assert_eq!(sent, b"ababab");
    let hit = c.get("pods|", 5).expect("recorded");
    assert_eq!((body_of(&hit), hit.len, hit.items), (sent.clone(), 6, 3));
    assert!(c.get("pods|ns-1", 5).is_none(), "another key is a miss");
    assert_eq!((c.entries(), c.bytes()), (1, 6));
    assert!(c.get("pods|", 6).is_none(), "another snapshot is a miss");
    assert_eq!((c.entries(), c.bytes()), (0, 0), "and the older snapshot's entry is dead: dropped");

    // A newer snapshot replaces the older; a slow list of the older one does not displace it.
    send(&c, "pods|", 7, parts("c", 2));
    assert!(c.get("pods|", 5).is_none());
    send(&c, "pods|", 5, parts("ab", 3));
    assert_eq!(body_of(&c.get("pods|", 7).expect("newer kept")), b"cc");
    assert_eq!((c.entries(), c.bytes()), (1, 2));
}

#[test]
fn published_once_the_announced_length_is_produced() {
    // hyper stops polling a body whose Content-Length is sent: the iterator's end is never asked for.
    let c = Arc::new(BodyCache::default());
    let mut rec = c.record("pods|".into(), 3, 4, 2, parts("ab", 2).into_iter());
    assert!(rec.next().is_some() && c.get("pods|", 3).is_none());
    assert!(rec.next().is_some());
    assert_eq!(body_of(&c.get("pods|", 3).expect("complete")), b"abab");
}

#[test]
fn a_body_dropped_before_its_end_is_not_cached() {
    let c = Arc::new(BodyCache::default());
    let mut rec = c.record("pods|".into(), 3, 6, 3, parts("ab", 3).into_iter());
    assert_eq!(rec.next().as_deref(), Some(&b"ab"[..]));
    drop(rec);
    assert!(c.get("pods|", 3).is_none());
    assert_eq!((c.entries(), c.bytes()), (0, 0));
}

#[test]
fn bounded_by_bytes_least_recently_used_first() {
    let c = Arc::new(BodyCache::with_max_bytes(10));
    send(&c, "a", 1, parts("xxxx", 1));
    send(&c, "b", 1, parts("yyyy", 1));
    assert!(c.get("a", 1).is_some(), "a is now the most recently used");
    send(&c, "c", 1, parts("zzzz", 1));
    assert!(c.get("b", 1).is_none(), "b, the least recently used, made room");
    assert!(c.get("a", 1).is_some() && c.get("c", 1).is_some());
    assert_eq!(c.bytes(), 8);
    // Over the whole bound: passed through, not recorded.
    let sent = send(&c, "d", 1, parts("0123456789ab", 1));
    assert_eq!(sent, b"0123456789ab");
    assert!(c.get("d", 1).is_none());
    assert_eq!(c.bytes(), 8);

    let none = Arc::new(BodyCache::with_max_bytes(0));
    send(&none, "a", 1, parts("x", 1));
    assert_eq!((none.entries(), none.bytes()), (0, 0));
}

#[test]
fn a_list_is_worth_recording_only_after_a_miss_at_its_snapshot() {
    let c = Arc::new(BodyCache::default());
    let record = |rv| match c.lookup("pods|", rv) {
        Lookup::Hit(_) => panic!("nothing cached yet"),
        Lookup::Miss { record } => record,
    };
    // Under churn every list is at a new snapshot: none is recorded.
    assert!(!record(1));
    assert!(!record(2));
    assert!(!record(3));
    // A second list of one snapshot is recorded; once published, the next one is a hit.
    assert!(record(3));
    send(&c, "pods|", 3, parts("ab", 2));
    assert!(matches!(c.lookup("pods|", 3), Lookup::Hit(_)));
    // Another key keeps its own memory.
    assert!(matches!(c.lookup("pods|ns-1", 3), Lookup::Miss { record: false }));
}

#[test]
fn the_memory_of_misses_is_bounded() {
    let c = Arc::new(BodyCache::default());
    for i in 0..(MAX_MISSED_KEYS * 3) {
        let _ = c.lookup(&format!("pods|ns-{i}"), 1);
        assert!(c.lock().missed.len() <= MAX_MISSED_KEYS);
    }
}

#[test]
fn a_newer_snapshot_of_a_resource_drops_its_entries_at_older_ones() {
    // Only lists at the current snapshot are cached: once pods are listed at 8, the namespace lists recorded
    // at 5 and 7 can never be served again. Other resources keep theirs.
    let c = Arc::new(BodyCache::default());
    send(&c, "pods|ns-1|Full|json", 5, parts("a", 1));
    send(&c, "pods|ns-2|Full|json", 7, parts("bb", 1));
    send(&c, "pods|ns-3|Full|json", 8, parts("ccc", 1));
    send(&c, "nodes||Full|json", 3, parts("dddd", 1));
    assert_eq!(c.entries(), 4);
    assert!(c.get("pods|ns-9|Full|json", 8).is_none());
    assert_eq!((c.entries(), c.bytes()), (2, 7), "pods at 5 and 7 dropped; pods at 8 and nodes kept");
    assert!(c.get("pods|ns-3|Full|json", 8).is_some());
    assert!(c.get("nodes||Full|json", 3).is_some());
    // A slow list of an older snapshot finishing now is not kept either.
    send(&c, "pods|ns-1|Full|json", 7, parts("e", 1));
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
        assert!(c.lock().newest.len() <= MAX_MISSED_KEYS);
    }
}
