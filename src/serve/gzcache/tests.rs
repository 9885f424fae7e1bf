use std::io::Read as _;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

/// Chunks that count how many times a compression consumed them.
fn chunks(text: &'static str, consumed: &Arc<AtomicUsize>) -> impl Iterator<Item = Bytes> + Send + 'static {
    let consumed = consumed.clone();
    let mut first = true;
    std::iter::repeat_n(Bytes::from_static(text.as_bytes()), 4).inspect(move |_| {
        if std::mem::take(&mut first) {
            consumed.fetch_add(1, Ordering::SeqCst);
        }
    })
}

fn gunzip(b: &[u8]) -> String {
    let mut out = String::new();
    flate2::read::GzDecoder::new(b).read_to_string(&mut out).expect("valid gzip");
    out
}

#[tokio::test]
async fn hit_after_miss_newer_snapshot_replaces_older_is_bypassed() {
    let c = GzipCache::default();
    let n = Arc::new(AtomicUsize::new(0));
    let a = c.get_or_compress(&producers(), "pods|", 5, chunks("a", &n)).await;
    assert_eq!(gunzip(&a), "aaaa");
    let again = c.get_or_compress(&producers(), "pods|", 5, chunks("a", &n)).await;
    assert_eq!(again, a);
    assert_eq!(n.load(Ordering::SeqCst), 1, "the second request was a hit");
    assert_eq!(c.bytes(), a.len());

    let b = c.get_or_compress(&producers(), "pods|", 6, chunks("b", &n)).await;
    assert_eq!(gunzip(&b), "bbbb");
    assert_eq!((c.entries(), c.bytes()), (1, b.len()), "the newer snapshot replaced the older");
    // A slow request still at snapshot 5 is answered but does not displace 6.
    let old = c.get_or_compress(&producers(), "pods|", 5, chunks("a", &n)).await;
    assert_eq!(gunzip(&old), "aaaa");
    assert_eq!(c.get_or_compress(&producers(), "pods|", 6, chunks("x", &n)).await, b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_for_one_snapshot_compress_once() {
    let c = Arc::new(GzipCache::default());
    let n = Arc::new(AtomicUsize::new(0));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let (c, n) = (c.clone(), n.clone());
        set.spawn(async move { c.get_or_compress(&producers(), "pods|ns", 9, chunks("z", &n)).await });
    }
    let bodies = set.join_all().await;
    assert!(bodies.iter().all(|b| gunzip(b) == "zzzz"));
    assert_eq!(n.load(Ordering::SeqCst), 1, "one compression for 20 requests");
}

#[tokio::test]
async fn least_recently_used_goes_first_when_over_the_byte_bound() {
    let n = Arc::new(AtomicUsize::new(0));
    let one = GzipCache::default().get_or_compress(&producers(), "k", 1, chunks("a", &n)).await.len();
    // Room for two entries, not three.
    let c = GzipCache::with_max_bytes(one * 2 + one / 2);
    c.get_or_compress(&producers(), "a", 1, chunks("a", &n)).await;
    c.get_or_compress(&producers(), "b", 1, chunks("a", &n)).await;
    c.get_or_compress(&producers(), "a", 1, chunks("a", &n)).await; // a is now more recent than b
    c.get_or_compress(&producers(), "c", 1, chunks("a", &n)).await;
    assert_eq!(c.entries(), 2);
    let before = n.load(Ordering::SeqCst);
    c.get_or_compress(&producers(), "a", 1, chunks("a", &n)).await;
    assert_eq!(n.load(Ordering::SeqCst), before, "a stayed (hit)");
    c.get_or_compress(&producers(), "b", 1, chunks("a", &n)).await;
    assert_eq!(n.load(Ordering::SeqCst), before + 1, "b was evicted (miss)");
    assert!(c.bytes() <= one * 2 + one / 2);
}

#[tokio::test]
async fn a_newer_snapshot_of_a_resource_drops_its_entries_at_older_ones() {
    // Lists are cached only at the current snapshot: once pods are listed at 8, the other namespaces'
    // entries at 5 are dead. Other resources keep theirs; a list of an older snapshot is not cached.
    let c = GzipCache::default();
    let n = Arc::new(AtomicUsize::new(0));
    c.get_or_compress(&producers(), "pods|ns-1|Full|json", 5, chunks("a", &n)).await;
    c.get_or_compress(&producers(), "pods|ns-2|Full|json", 5, chunks("a", &n)).await;
    c.get_or_compress(&producers(), "nodes||Full|json", 3, chunks("a", &n)).await;
    assert_eq!(c.entries(), 3);
    c.get_or_compress(&producers(), "pods|ns-3|Full|json", 8, chunks("a", &n)).await;
    assert_eq!(c.entries(), 2, "pods at 5 dropped; pods at 8 and nodes kept");
    let before = n.load(Ordering::SeqCst);
    c.get_or_compress(&producers(), "nodes||Full|json", 3, chunks("a", &n)).await;
    assert_eq!(n.load(Ordering::SeqCst), before, "nodes stayed (hit)");
    c.get_or_compress(&producers(), "pods|ns-1|Full|json", 6, chunks("a", &n)).await;
    assert_eq!(c.entries(), 2, "a list older than the resource's newest is not cached");
}

/// Producers of the tests' own (one thread, joined when dropped).
fn producers() -> crate::serve::admit::Producers {
    crate::serve::admit::Producers::new(1)
}
