//! The uncompressed body of hot full lists, kept per snapshot so a repeated list is sent from the buffers of
//! the first one instead of being assembled (and copied item by item) again.
//!
//! Only the lists the gzip cache would key (a whole resource or namespace, no selector, no pagination, not a
//! Table, not pretty-printed) are cached, by the same key — (resource, namespace, view, encoding) — and the
//! list's resourceVersion. Recording costs no copy: a list streamed from memory hands each chunk it sends to
//! [`Recording`] as a refcounted `Bytes`, and a body that was produced to its end is published as the entry;
//! later lists at the same snapshot send those chunks (many 64 KiB frames per vectored write, like a static
//! buffer). A write moves the snapshot on, so under churn lists miss and record, which costs what a list
//! cost before the cache.
//!
//! Invariants:
//! - **Byte-identical**: an entry is exactly the body its first list sent, published only when that body
//!   was produced to its end; it is served only for the same key and resourceVersion.
//! - **Bounded and not stale**: at most [`MAX_ENTRIES`] entries and the cache's byte bound (least recently
//!   used evicted first; a body over the bound is not recorded at all); an entry unused for [`IDLE_EVICT`] is
//!   dropped at the next access. A newer snapshot replaces an older one of the same key; an older never
//!   replaces a newer. Only lists at their resource's current snapshot are cached, so once a list of a
//!   resource is looked up at a newer snapshot, every entry of that resource at an older one can never be
//!   served again: it is dropped then (under churn the cache holds next to nothing, instead of its bound in
//!   dead bodies of other namespaces).
//! - No coalescing: lists that miss at the same time each assemble their body (as without the cache) and the
//!   first to finish publishes it.
//! - **Recorded on the second miss**: a list records its body only when another list of the same key missed
//!   at the same snapshot before it ([`BodyCache::lookup`]), so under churn, where no snapshot is listed
//!   twice, nothing is recorded and the cache costs nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

use bytes::Bytes;

use crate::metrics::{BodyCacheResult, GzipEviction, Metrics};

/// At most this many (resource, namespace, view, encoding) entries.
pub(crate) const MAX_ENTRIES: usize = 64;
/// Keys whose last missed snapshot is remembered.
const MAX_MISSED_KEYS: usize = 4 * MAX_ENTRIES;
/// At most this many body bytes in all, by default (`--list-body-cache-bytes`).
pub(crate) const MAX_BYTES: usize = crate::front::server::limits::DEFAULT_LIST_BODY_CACHE_BYTES;
/// An entry nobody asked for in this long is dropped (as the gzip cache's: informers relist on their resync
/// period or after a watch failure).
pub(crate) const IDLE_EVICT: Duration = Duration::from_secs(120);

/// One snapshot's body of one key.
struct Entry {
    rv: u64,
    body: CachedBody,
    last_used: Instant,
}

/// A cached list body: its chunks as first sent, its length and item count.
#[derive(Clone)]
pub struct CachedBody {
    pub chunks: Arc<[Bytes]>,
    pub len: usize,
    pub items: usize,
}

// === impl CachedBody ===

impl CachedBody {
    /// The chunks, as an owned iterator of refcounted clones (for [`crate::front::body::stream_iter`]).
    pub fn iter(&self) -> impl Iterator<Item = Bytes> + Send + Sync + 'static {
        let chunks = self.chunks.clone();
        (0..chunks.len()).map(move |i| chunks[i].clone())
    }
}

/// What [`BodyCache::lookup`] found.
pub enum Lookup {
    Hit(CachedBody),
    /// Not cached; `record`: this list is the second of its snapshot to miss, so its body is worth recording.
    Miss {
        record: bool,
    },
}

#[derive(Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    /// Per key, the snapshot of its last miss (a second miss there makes the list worth recording). At most
    /// [`MAX_MISSED_KEYS`] keys; forgotten all at once beyond (a forgotten key costs one more assembly).
    missed: HashMap<String, u64>,
    /// Per resource (the key's first field), the newest snapshot a list was looked up at: entries of the
    /// resource at older snapshots are dead. Forgotten all at once beyond [`MAX_MISSED_KEYS`] resources.
    newest: HashMap<String, u64>,
    bytes: usize,
    /// The kache's metrics (here so the `…_locked` helpers can count).
    metrics: Metrics,
}

/// A bounded cache of uncompressed full-list bodies.
pub struct BodyCache {
    inner: Mutex<Inner>,
    max_bytes: usize,
}

impl Default for BodyCache {
    fn default() -> Self {
        Self::with_max_bytes(MAX_BYTES)
    }
}

// === impl BodyCache ===

impl BodyCache {
    /// A cache holding at most `max_bytes` body bytes (0: nothing is cached).
    pub(crate) fn with_max_bytes(max_bytes: usize) -> Self {
        Self { inner: Mutex::default(), max_bytes }
    }

    /// Counts into the kache's `metrics` instead of an instance of its own.
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.inner.get_mut().expect("body cache lock poisoned").metrics = metrics;
        self
    }

    /// The body of `key` at `rv`, when cached (counted as a hit or a miss).
    pub fn get(&self, key: &str, rv: u64) -> Option<CachedBody> {
        match self.lookup(key, rv) {
            Lookup::Hit(body) => Some(body),
            Lookup::Miss { .. } => None,
        }
    }

    /// The body of `key` at `rv` when cached; otherwise whether this list should be recorded: only when
    /// another list of the same key missed at the same snapshot before it (counted as a hit or a miss).
    ///
    /// A body is recorded only once a second list of its snapshot shows the snapshot is read again. Under
    /// churn every list of a key is at a new snapshot, and recording each one only to replace it unread made
    /// a 30-minute soak's RSS ~3× the same run's without the cache (BENCHMARKS-harden.md); a relist storm or
    /// a repeated list of a quiet resource pays one extra assembly before its hits.
    pub fn lookup(&self, key: &str, rv: u64) -> Lookup {
        let now = Instant::now();
        let mut inner = self.lock();
        evict_idle_locked(&mut inner, now);
        evict_older_snapshots_locked(&mut inner, key, rv);
        let found = inner.entries.get_mut(key).filter(|e| e.rv == rv).map(|e| {
            e.last_used = now;
            e.body.clone()
        });
        inner.metrics.body_cache(if found.is_some() { BodyCacheResult::Hit } else { BodyCacheResult::Miss });
        if let Some(body) = found {
            return Lookup::Hit(body);
        }
        let record = inner.missed.get(key) == Some(&rv);
        if !record {
            if inner.missed.len() >= MAX_MISSED_KEYS {
                inner.missed.clear();
            }
            inner.missed.insert(key.to_owned(), rv);
        }
        Lookup::Miss { record }
    }

    /// Records the body of `key` at `rv` as it is produced, when it can fit the cache.
    pub fn record<I>(
        self: &Arc<Self>,
        key: String,
        rv: u64,
        len: usize,
        items: usize,
        chunks: I,
    ) -> Recording<I>
    where
        I: Iterator<Item = Bytes>,
    {
        let sink = (len <= self.max_bytes).then(|| Sink {
            cache: self.clone(),
            key,
            rv,
            items,
            parts: Vec::with_capacity(len / crate::codec::list::LIST_CHUNK_BYTES + 2),
            len: 0,
            expected: len,
        });
        Recording { inner: chunks, sink }
    }

    /// Publishes a finished body (unless a newer snapshot of its key is cached already, or its resource has
    /// been listed at a newer snapshot since) and evicts least recently used entries until the cache fits its
    /// bounds.
    fn publish(&self, key: String, rv: u64, body: CachedBody) {
        let now = Instant::now();
        let mut inner = self.lock();
        evict_idle_locked(&mut inner, now);
        if inner.entries.get(&key).is_some_and(|e| e.rv >= rv)
            || inner.newest.get(resource_of(&key)).is_some_and(|&newest| newest > rv)
        {
            return;
        }
        if let Some(old) = inner.entries.remove(&key) {
            remove_accounted_locked(&mut inner, &old, GzipEviction::Replaced);
        }
        while inner.bytes + body.len > self.max_bytes || inner.entries.len() >= MAX_ENTRIES {
            if !evict_lru_locked(&mut inner) {
                break;
            }
        }
        if inner.bytes + body.len > self.max_bytes {
            return;
        }
        inner.bytes += body.len;
        inner.metrics.body_cache_size(body.len as i64, 1);
        inner.entries.insert(key, Entry { rv, body, last_used: now });
    }

    /// Body bytes held.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Entries held.
    pub fn entries(&self) -> usize {
        self.lock().entries.len()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("body cache lock poisoned")
    }
}

impl Drop for BodyCache {
    fn drop(&mut self) {
        let inner = self.lock();
        inner.metrics.body_cache_size(-(inner.bytes as i64), -(inner.entries.len() as i64));
    }
}

/// Un-accounts an entry already removed from the map.
fn remove_accounted_locked(inner: &mut Inner, old: &Entry, reason: GzipEviction) {
    inner.bytes -= old.body.len;
    inner.metrics.body_cache_size(-(old.body.len as i64), -1);
    inner.metrics.body_cache_evicted(reason);
}

/// Drops entries unused for [`IDLE_EVICT`].
fn evict_idle_locked(inner: &mut Inner, now: Instant) {
    let idle: Vec<String> = inner
        .entries
        .iter()
        .filter(|(_, e)| now.duration_since(e.last_used) >= IDLE_EVICT)
        .map(|(k, _)| k.clone())
        .collect();
    for k in idle {
        if let Some(old) = inner.entries.remove(&k) {
            remove_accounted_locked(inner, &old, GzipEviction::Idle);
        }
    }
}

/// The resource of a key (`{gvr}|{namespace}|{view}|{encoding}`).
fn resource_of(key: &str) -> &str {
    key.split('|').next().unwrap_or(key)
}

/// A list of `key` is looked up at snapshot `rv`: when that is the newest seen for its resource, drops the
/// resource's entries at older snapshots (lists are cached only at their resource's current snapshot, so
/// those can never be served again).
fn evict_older_snapshots_locked(inner: &mut Inner, key: &str, rv: u64) {
    let resource = resource_of(key);
    match inner.newest.get_mut(resource) {
        Some(newest) if *newest >= rv => return,
        Some(newest) => *newest = rv,
        None => {
            if inner.newest.len() >= MAX_MISSED_KEYS {
                inner.newest.clear();
            }
            inner.newest.insert(resource.to_owned(), rv);
        }
    }
    let dead: Vec<String> = inner
        .entries
        .iter()
        .filter(|(k, e)| e.rv < rv && resource_of(k) == resource)
        .map(|(k, _)| k.clone())
        .collect();
    for k in dead {
        if let Some(old) = inner.entries.remove(&k) {
            remove_accounted_locked(inner, &old, GzipEviction::Replaced);
        }
    }
}

/// Drops the least recently used entry; false when there is none.
fn evict_lru_locked(inner: &mut Inner) -> bool {
    let Some(key) = inner.entries.iter().min_by_key(|(_, e)| e.last_used).map(|(k, _)| k.clone()) else {
        return false;
    };
    if let Some(old) = inner.entries.remove(&key) {
        remove_accounted_locked(inner, &old, GzipEviction::Size);
    }
    true
}

/// Where a recorded body goes once produced to its end.
struct Sink {
    cache: Arc<BodyCache>,
    key: String,
    rv: u64,
    items: usize,
    parts: Vec<Bytes>,
    len: usize,
    /// The body's announced length: reached, the body is complete (hyper stops polling a body whose
    /// Content-Length has been sent, so the end of the iterator may never be seen).
    expected: usize,
}

// === impl Sink ===

impl Sink {
    fn publish(self) {
        let Self { cache, key, rv, items, parts, len, expected } = self;
        if len == expected {
            cache.publish(key, rv, CachedBody { chunks: parts.into(), len, items });
        }
    }
}

/// A list body's chunks, passed through unchanged while refcounted clones are kept; published to the cache
/// when the announced length has been produced (a body dropped before its end is not cached).
pub struct Recording<I> {
    inner: I,
    sink: Option<Sink>,
}

impl<I: Iterator<Item = Bytes>> Iterator for Recording<I> {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        match self.inner.next() {
            Some(chunk) => {
                let complete = self.sink.as_mut().is_some_and(|sink| {
                    sink.len += chunk.len();
                    sink.parts.push(chunk.clone());
                    sink.len >= sink.expected
                });
                if complete && let Some(sink) = self.sink.take() {
                    sink.publish();
                }
                Some(chunk)
            }
            None => {
                // An empty body, or one shorter than announced (never published).
                if let Some(sink) = self.sink.take() {
                    sink.publish();
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests;
