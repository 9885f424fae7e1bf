//! The uncompressed body of hot full lists, kept per snapshot so a repeated list is sent from the buffers of
//! the first one instead of being assembled (and copied item by item) again.
//!
//! Only the lists the gzip cache would key (a whole resource or namespace, no selector, no pagination, not a
//! Table, not pretty-printed) are cached, by the same key — (resource, namespace, view, encoding) — and the
//! list's resourceVersion. A list worth caching is **assembled once** ([`Assembly`]): its chunks are produced
//! to the end (yielding the worker every [`YIELD_EVERY`] chunks), published as the entry, and sent from it;
//! the lists of the same key and snapshot that arrive meanwhile wait for that assembly ([`Lookup::Pending`])
//! instead of each assembling the same body. (A relist storm released at once by a proof is the case: 98
//! lists of 21.5 MiB assembled one each cost kache ~16 s of CPU, against ~4 s sent from one body.)
//!
//! Invariants:
//! - **Byte-identical**: an entry is exactly the body its list produced, published only when produced to its
//!   end; it is served only for the same key and resourceVersion.
//! - **Bounded and not stale**: at most [`MAX_ENTRIES`] entries and the cache's byte bound (least recently
//!   used evicted first; a body over the bound is neither assembled nor cached); an entry unused for
//!   [`IDLE_EVICT`] is dropped at the next access. A newer snapshot replaces an older one of the same key; an
//!   older never replaces a newer. Only lists at their resource's current snapshot are cached, so once a
//!   list of a resource is looked up at a newer snapshot, every entry of that resource at an older one can
//!   never be served again: it is dropped then (under churn the cache holds next to nothing, instead of its
//!   bound in dead bodies of other namespaces).
//! - **Assembled on the second miss**: a list is assembled for the cache only when another list of the same
//!   key missed at the same snapshot before it ([`BodyCache::lookup`]), so under churn, where no snapshot is
//!   listed twice, nothing is assembled ahead and the cache costs nothing.
//! - **Waiting is bounded**: an assembly is produced from memory, not paced by any client; one whose list
//!   goes away before the end wakes its waiters, which then assemble their own bodies.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

use bytes::Bytes;
use tokio::sync::watch;

use crate::metrics::{BodyCacheResult, GzipEviction, Metrics};
use crate::serve::newest::Newest;

/// At most this many (resource, namespace, view, encoding) entries.
pub(crate) const MAX_ENTRIES: usize = 64;
/// Keys whose last missed snapshot is remembered.
const MAX_MISSED_KEYS: usize = 4 * MAX_ENTRIES;
/// At most this many body bytes in all, by default (`--list-body-cache-bytes`).
pub(crate) const MAX_BYTES: usize = crate::front::server::limits::DEFAULT_LIST_BODY_CACHE_BYTES;
/// An entry nobody asked for in this long is dropped (as the gzip cache's: informers relist on their resync
/// period or after a watch failure).
pub(crate) const IDLE_EVICT: Duration = Duration::from_secs(120);
/// An assembly yields its runtime worker after this many chunks (1 MiB of 64 KiB chunks), so the requests
/// queued behind it wait a millisecond, not the whole body.
pub(crate) const YIELD_EVERY: usize = 16;

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
    /// Another list of the same key and snapshot is assembling the body: [`Pending::wait`] for it.
    Pending(Pending),
    /// Not cached. `assembly`: this list is the second of its snapshot to miss, so it assembles the body
    /// for the cache (and the lists arriving meanwhile wait for it).
    Miss {
        assembly: Option<Assembly>,
    },
}

/// A body being assembled by another list.
pub struct Pending(watch::Receiver<Option<CachedBody>>);

impl Pending {
    /// The body once assembled; `None` if its list went away first (then assemble your own).
    pub async fn wait(mut self) -> Option<CachedBody> {
        self.0.wait_for(Option::is_some).await.ok().and_then(|body| body.clone())
    }
}

/// The right, and duty, to assemble one key's body at one snapshot for the cache: [`Assembly::finish`]
/// produces it, publishes it and wakes the waiting lists; dropped before, it wakes them empty-handed.
pub struct Assembly {
    cache: Arc<BodyCache>,
    key: String,
    rv: u64,
    done: watch::Sender<Option<CachedBody>>,
}

impl Assembly {
    /// Whether a body of `len` bytes can be cached at all (within the cache's byte bound).
    pub fn fits(&self, len: usize) -> bool {
        len <= self.cache.max_bytes
    }

    /// Produces `chunks` (`len` bytes, `items` items) to their end, yielding the worker every [`YIELD_EVERY`]
    /// chunks; publishes the body (when it has its announced length) and hands it to the waiting lists.
    pub async fn finish<I>(self, len: usize, items: usize, chunks: I) -> CachedBody
    where
        I: Iterator<Item = Bytes>,
    {
        let mut parts = Vec::with_capacity(len / crate::codec::list::LIST_CHUNK_BYTES + 2);
        let mut produced = 0;
        for (i, chunk) in chunks.enumerate() {
            produced += chunk.len();
            parts.push(chunk);
            if (i + 1) % YIELD_EVERY == 0 {
                tokio::task::yield_now().await;
            }
        }
        let body = CachedBody { chunks: parts.into(), len: produced, items };
        if produced == len {
            self.cache.publish(self.key.clone(), self.rv, body.clone());
        }
        self.done.send_replace(Some(body.clone()));
        body
    }
}

impl Drop for Assembly {
    fn drop(&mut self) {
        // Finished or not, it no longer assembles: later lists look up the cache (or assemble their own).
        let mut inner = self.cache.lock();
        if inner.assembling.get(&self.key).is_some_and(|(rv, _)| *rv == self.rv) {
            inner.assembling.remove(&self.key);
        }
    }
}

#[derive(Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    /// Per key, the snapshot of its last miss (a second miss there makes the list worth assembling for the
    /// cache). At most [`MAX_MISSED_KEYS`] keys; forgotten all at once beyond (a forgotten key costs one more
    /// assembly).
    missed: HashMap<String, u64>,
    /// Per resource, the newest snapshot a list was looked up at: entries of the resource at older snapshots
    /// are dead. At most [`MAX_MISSED_KEYS`] resources.
    newest: Newest,
    /// Per key, the snapshot whose body a list is assembling, and where it will be announced.
    assembling: HashMap<String, (u64, watch::Receiver<Option<CachedBody>>)>,
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

    /// The body of `key` at `rv`, when cached (counted as a hit or a miss; a miss that would assemble gives
    /// its assembly up at once).
    #[cfg(test)]
    pub fn get(self: &Arc<Self>, key: &str, rv: u64) -> Option<CachedBody> {
        match self.lookup(key, rv) {
            Lookup::Hit(body) => Some(body),
            Lookup::Pending(_) | Lookup::Miss { .. } => None,
        }
    }

    /// The body of `key` at `rv` when cached; a body another list is assembling for it; otherwise a miss, which
    /// assembles the body for the cache when another list of the same key missed at the same snapshot before
    /// it (counted as a hit, a coalesced wait or a miss).
    ///
    /// A body is assembled for the cache only once a second list of its snapshot shows the snapshot is read
    /// again. Under churn every list of a key is at a new snapshot, and recording each one only to replace it
    /// unread made a 30-minute soak's RSS ~3× the same run's without the cache
    /// (docs/decisions/0009-list-body-cache.md); a relist
    /// storm or a repeated list of a quiet resource pays one extra assembly before its hits.
    pub fn lookup(self: &Arc<Self>, key: &str, rv: u64) -> Lookup {
        let now = Instant::now();
        let mut inner = self.lock();
        evict_idle_locked(&mut inner, now);
        let i = &mut *inner;
        for old in i.newest.advance(key, rv, MAX_MISSED_KEYS, &mut i.entries, |e| e.rv) {
            remove_accounted_locked(i, &old, GzipEviction::Replaced);
        }
        let found = inner.entries.get_mut(key).filter(|e| e.rv == rv).map(|e| {
            e.last_used = now;
            e.body.clone()
        });
        if let Some(body) = found {
            inner.metrics.body_cache(BodyCacheResult::Hit);
            return Lookup::Hit(body);
        }
        if let Some((_, rx)) = inner.assembling.get(key).filter(|(at, _)| *at == rv) {
            let pending = Pending(rx.clone());
            inner.metrics.body_cache(BodyCacheResult::Coalesced);
            return Lookup::Pending(pending);
        }
        inner.metrics.body_cache(BodyCacheResult::Miss);
        let second = inner.missed.get(key) == Some(&rv);
        if !second {
            if inner.missed.len() >= MAX_MISSED_KEYS {
                inner.missed.clear();
            }
            inner.missed.insert(key.to_owned(), rv);
            return Lookup::Miss { assembly: None };
        }
        if self.max_bytes == 0 {
            return Lookup::Miss { assembly: None };
        }
        let (done, rx) = watch::channel(None);
        inner.assembling.insert(key.to_owned(), (rv, rx));
        Lookup::Miss { assembly: Some(Assembly { cache: self.clone(), key: key.to_owned(), rv, done }) }
    }

    /// Publishes a finished body (unless a newer snapshot of its key is cached already, or its resource has
    /// been listed at a newer snapshot since) and evicts least recently used entries until the cache fits its
    /// bounds.
    fn publish(&self, key: String, rv: u64, body: CachedBody) {
        let now = Instant::now();
        let mut inner = self.lock();
        evict_idle_locked(&mut inner, now);
        if inner.entries.get(&key).is_some_and(|e| e.rv >= rv) || inner.newest.is_older(&key, rv) {
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

#[cfg(test)]
mod tests;
