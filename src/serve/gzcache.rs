//! The compressed form of hot full lists, kept per snapshot so repeated lists are not recompressed.
//!
//! Only unfiltered, unpaginated lists (a whole resource or a whole namespace, as informers' RV=0 relists and
//! `kubectl get -A` ask for) are cached: their bytes depend only on the snapshot. One entry per
//! (resource, namespace) holds the newest snapshot's compressed body; a newer snapshot replaces it.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;

/// At most this many (resource, namespace) entries; beyond it the cache stops admitting new keys.
pub const MAX_ENTRIES: usize = 256;
/// At most this many compressed bytes in all.
pub const MAX_BYTES: usize = 256 << 20;

#[derive(Default)]
struct Inner {
    entries: HashMap<String, (u64, Bytes)>,
    bytes: usize,
}

/// A bounded cache of compressed list bodies.
#[derive(Default)]
pub struct GzipCache {
    inner: Mutex<Inner>,
}

impl GzipCache {
    /// The compressed body of `key` at snapshot `rv`, if cached.
    pub fn get(&self, key: &str, rv: u64) -> Option<Bytes> {
        let inner = self.inner.lock().expect("gzip cache lock poisoned");
        inner.entries.get(key).filter(|(at, _)| *at == rv).map(|(_, b)| b.clone())
    }

    /// Caches `body` for `key` at `rv`, replacing an older snapshot's entry.
    pub fn put(&self, key: &str, rv: u64, body: Bytes) {
        let mut inner = self.inner.lock().expect("gzip cache lock poisoned");
        let old = inner.entries.get(key).map(|(at, b)| (*at, b.len()));
        match old {
            Some((at, _)) if at > rv => return,
            Some((_, len)) => inner.bytes -= len,
            None if inner.entries.len() >= MAX_ENTRIES => return,
            None => {}
        }
        if inner.bytes + body.len() > MAX_BYTES {
            inner.entries.remove(key);
            return;
        }
        inner.bytes += body.len();
        inner.entries.insert(key.to_owned(), (rv, body));
    }

    /// Compressed bytes held.
    pub fn bytes(&self) -> usize {
        self.inner.lock().expect("gzip cache lock poisoned").bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newer_snapshot_replaces_older_and_bytes_are_accounted() {
        let c = GzipCache::default();
        c.put("pods|", 5, Bytes::from_static(b"aaaa"));
        assert_eq!(c.get("pods|", 5).as_deref(), Some(&b"aaaa"[..]));
        assert_eq!(c.get("pods|", 6), None);
        c.put("pods|", 6, Bytes::from_static(b"bb"));
        assert_eq!(c.bytes(), 2);
        c.put("pods|", 5, Bytes::from_static(b"old"));
        assert_eq!(c.get("pods|", 6).as_deref(), Some(&b"bb"[..]));
    }
}
