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
//!   [`IDLE_EVICT`] expires. A newer snapshot replaces an older one of the same key; an older never replaces
//!   a newer. Only lists at their resource's current snapshot are cached, so once a list of a resource is
//!   looked up at a newer snapshot, every entry of that resource at an older one can never be served again:
//!   it is dropped then (under churn the cache holds next to nothing, instead of its bound in dead bodies of
//!   other namespaces). The entries are kept by [`SnapshotCache`] (moka).
//! - **Assembled on the second miss**: a list is assembled for the cache only when another list of the same
//!   key missed at the same snapshot before it ([`BodyCache::lookup`]), so under churn, where no snapshot is
//!   listed twice, nothing is assembled ahead and the cache costs nothing.
//! - **Waiting is bounded**: an assembly is produced from memory, not paced by any client; one whose list
//!   goes away before the end wakes its waiters, which then assemble their own bodies.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;

use crate::metrics::{BodyCacheResult, Metrics};
use crate::serve::snapcache::{Kind, SnapshotCache};

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
        self.cache.entries.fits(len)
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
            self.cache.entries.insert(&self.key, self.rv, body.clone(), body.len);
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
    /// Per key, the snapshot of its last miss (a second miss there makes the list worth assembling for the
    /// cache). At most [`MAX_MISSED_KEYS`] keys; forgotten all at once beyond (a forgotten key costs one more
    /// assembly).
    missed: HashMap<String, u64>,
    /// Per key, the snapshot whose body a list is assembling, and where it will be announced.
    assembling: HashMap<String, (u64, watch::Receiver<Option<CachedBody>>)>,
}

/// A bounded cache of uncompressed full-list bodies.
pub struct BodyCache {
    /// The published bodies.
    entries: SnapshotCache<CachedBody>,
    /// Misses and assemblies in progress.
    inner: Mutex<Inner>,
    metrics: Metrics,
}

impl Default for BodyCache {
    fn default() -> Self {
        Self::new(MAX_BYTES, Metrics::default())
    }
}

// === impl BodyCache ===

impl BodyCache {
    /// A cache holding at most `max_bytes` body bytes (0: nothing is cached), counting into `metrics`.
    pub(crate) fn new(max_bytes: usize, metrics: Metrics) -> Self {
        let entries = SnapshotCache::new(Kind::Body, metrics.clone(), max_bytes, MAX_ENTRIES, IDLE_EVICT);
        Self { entries, inner: Mutex::default(), metrics }
    }

    /// A cache holding at most `max_bytes` body bytes, with metrics of its own.
    #[cfg(test)]
    pub(crate) fn with_max_bytes(max_bytes: usize) -> Self {
        Self::new(max_bytes, Metrics::default())
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
        if let Some(body) = self.entries.get(key, rv) {
            self.metrics.body_cache(BodyCacheResult::Hit);
            return Lookup::Hit(body);
        }
        let mut inner = self.lock();
        if let Some((_, rx)) = inner.assembling.get(key).filter(|(at, _)| *at == rv) {
            let pending = Pending(rx.clone());
            self.metrics.body_cache(BodyCacheResult::Coalesced);
            return Lookup::Pending(pending);
        }
        self.metrics.body_cache(BodyCacheResult::Miss);
        let second = inner.missed.get(key) == Some(&rv);
        if !second {
            if inner.missed.len() >= MAX_MISSED_KEYS {
                inner.missed.clear();
            }
            inner.missed.insert(key.to_owned(), rv);
            return Lookup::Miss { assembly: None };
        }
        if !self.entries.fits(1) {
            return Lookup::Miss { assembly: None };
        }
        let (done, rx) = watch::channel(None);
        inner.assembling.insert(key.to_owned(), (rv, rx));
        Lookup::Miss { assembly: Some(Assembly { cache: self.clone(), key: key.to_owned(), rv, done }) }
    }

    /// Body bytes held.
    pub fn bytes(&self) -> usize {
        self.entries.bytes()
    }

    /// Entries held.
    pub fn entries(&self) -> usize {
        self.entries.entries()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("body cache lock poisoned")
    }
}

#[cfg(test)]
mod tests;
