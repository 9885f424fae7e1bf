//! Storage: an etcd-like multi-version keyspace per resource, one global revision, per-resource event
//! history and a broadcast of new events to watchers.
//!
//! Invariants:
//! - `rev` strictly increases by one per write, across all resources (etcd's global revision).
//! - every version of a key has a distinct revision; versions are kept until compaction, which keeps
//!   the newest version at or below the compacted revision (dropping it when it is a tombstone).
//! - events are appended to a resource's history and sent on its broadcast channel while the lock is
//!   held, so subscribers see them in revision order and a snapshot taken under the same lock
//!   together with a subscription neither misses nor repeats an event.
//! - a resource's `cache_rev` (what its watch cache knows of the global revision) never exceeds `rev` and
//!   is at least the revision of the resource's last event: bookmarks carry it.

mod keyspace;
mod obj;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{broadcast, watch};

use crate::kinds::ResourceDef;
use crate::status::ApiError;
pub use keyspace::{KeyPage, Keyspace, More};
pub use obj::Obj;

/// Events buffered per resource for watchers; a watcher that falls this far behind is closed (the
/// apiserver terminates watchers that cannot keep up; the client re-watches from its last RV).
pub const WATCH_BUFFER: usize = 16 * 1024;

/// Upper bound on the retained event history per resource (the apiserver's ring is 100..102,400).
pub const MAX_HISTORY: usize = 100 * 1024;

/// Index of a resource in the table.
pub type ResId = usize;

/// Objects with their keys, in key order.
pub type Items = Vec<(String, Arc<Obj>)>;

/// The type of a watch event stored in history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

/// One change of one object.
#[derive(Debug)]
pub struct Event {
    pub rev: u64,
    pub ty: EventType,
    /// The new object; for deletions the last state with `resourceVersion` set to the deletion revision.
    pub obj: Arc<Obj>,
    /// The state before this change (None for creations).
    pub prev: Option<Arc<Obj>>,
}

/// What a write closure decides to do with a key.
pub enum WriteAction {
    /// Store this object (its resourceVersion must already be set to the write's revision).
    Put(Value),
    /// Delete the key; the value is the deleted object as the DELETED event carries it.
    Delete(Value),
    /// Change nothing and answer this object.
    Unchanged(Value),
}

/// The outcome of a write.
#[derive(Debug, Clone)]
pub struct Written {
    /// The object after the write (for deletes: the deleted object), as the write computed it.
    pub obj: Value,
    /// The state before the write.
    pub prev: Option<Arc<Obj>>,
    pub deleted: bool,
}

/// Why a read at a revision failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The revision is below the compacted revision.
    #[error("required revision {0} has been compacted")]
    Compacted(u64),
}

struct Space {
    keys: Keyspace,
    history: VecDeque<Arc<Event>>,
    /// Watches from an RV >= this are resumable from history (events with rev > floor are kept).
    history_floor: u64,
    /// The revision the resource's watch cache has reached, which its bookmarks carry: its own last event,
    /// or the global revision when a read last made the cache catch up ([`Store::catch_up`]). The
    /// apiserver's cache learns of writes to *other* resources only from etcd's progress notifications,
    /// which it requests while a read waits for it to be fresh (`watch_cache.go`
    /// `waitUntilFreshAndBlock`, `progress/watchdog.go`) and otherwise gets every 10 minutes (etcd's
    /// default): a quiet resource's bookmarks stay behind foreign writes until then.
    cache_rev: u64,
    tx: broadcast::Sender<Arc<Event>>,
}

struct Inner {
    rev: u64,
    compacted: u64,
    spaces: Vec<Space>,
}

/// The whole storage; cheap to share behind an `Arc`.
pub struct Store {
    inner: Mutex<Inner>,
    rev_tx: watch::Sender<u64>,
    resources: Vec<Arc<ResourceDef>>,
}

/// The start of a watch, taken atomically with its subscription.
pub struct WatchStart {
    /// The global revision when the watch started.
    pub rev: u64,
    pub rx: broadcast::Receiver<Arc<Event>>,
}

// === impl Store ===

impl Store {
    /// A store holding the given resources, at revision 1 (etcd starts at 1).
    pub fn new(resources: Vec<ResourceDef>) -> Store {
        let spaces = resources
            .iter()
            .map(|_| Space {
                keys: Keyspace::default(),
                history: VecDeque::new(),
                history_floor: 1,
                cache_rev: 1,
                tx: broadcast::channel(WATCH_BUFFER).0,
            })
            .collect();
        Store {
            inner: Mutex::new(Inner { rev: 1, compacted: 0, spaces }),
            rev_tx: watch::channel(1).0,
            resources: resources.into_iter().map(Arc::new).collect(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock would be a bug in this module; keep serving regardless.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn resources(&self) -> &[Arc<ResourceDef>] {
        &self.resources
    }

    pub fn resource(&self, id: ResId) -> &Arc<ResourceDef> {
        &self.resources[id]
    }

    /// Looks a resource up by group and plural.
    pub fn find(&self, group: &str, plural: &str) -> Option<ResId> {
        self.resources.iter().position(|r| r.group == group && r.plural == plural)
    }

    pub fn current_rev(&self) -> u64 {
        self.lock().rev
    }

    pub fn compacted_rev(&self) -> u64 {
        self.lock().compacted
    }

    /// The revision `res`'s watch cache has reached (see `Space::cache_rev`).
    pub fn cache_rev(&self, res: ResId) -> u64 {
        self.lock().spaces[res].cache_rev
    }

    /// A read that waits for `res`'s watch cache to be fresh (a consistent list, a watch without a
    /// resourceVersion, a read at a revision the cache has not reached): the cache asks etcd for progress
    /// and so reaches the current global revision. Returns it.
    pub fn catch_up(&self, res: ResId) -> u64 {
        let mut g = self.lock();
        let rev = g.rev;
        g.spaces[res].cache_rev = rev;
        rev
    }

    /// Waits until the global revision reaches `rev`, at most `timeout`. Returns whether it did.
    pub async fn wait_for(&self, rev: u64, timeout: Duration) -> bool {
        let mut rx = self.rev_tx.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|r| *r >= rev)).await.is_ok_and(|r| r.is_ok())
    }

    /// Reads one key at `at` (None = latest).
    pub fn get(&self, res: ResId, key: &str, at: Option<u64>) -> Result<Option<Arc<Obj>>, ReadError> {
        let g = self.lock();
        let at = at.unwrap_or(g.rev);
        if at < g.compacted {
            return Err(ReadError::Compacted(g.compacted));
        }
        Ok(g.spaces[res].keys.get(key, at))
    }

    /// All objects whose key starts with `prefix` and is >= `from`, in key order, at revision `at`
    /// (None = latest). Returns the revision read.
    pub fn range(
        &self,
        res: ResId,
        prefix: &str,
        from: &str,
        at: Option<u64>,
    ) -> Result<(u64, Items), ReadError> {
        let g = self.lock();
        let at = at.unwrap_or(g.rev);
        if at < g.compacted {
            return Err(ReadError::Compacted(g.compacted));
        }
        Ok((at, g.spaces[res].keys.range(prefix, from, at)))
    }

    /// One page of `range(res, prefix, from, at)`: the objects that pass `select` (None = all), up to
    /// `limit` (0 = no limit), walking the keyspace under the lock only as far as the page needs (see
    /// `Keyspace::page`).
    /// Returns the revision read.
    pub fn page(
        &self,
        res: ResId,
        prefix: &str,
        from: &str,
        at: Option<u64>,
        limit: usize,
        select: Option<&dyn Fn(&Obj) -> bool>,
    ) -> Result<(u64, KeyPage), ReadError> {
        let g = self.lock();
        let at = at.unwrap_or(g.rev);
        if at < g.compacted {
            return Err(ReadError::Compacted(g.compacted));
        }
        Ok((at, g.spaces[res].keys.page(prefix, from, at, limit, select)))
    }

    /// Applies one write to `key` under the lock. `f` sees the current object and the revision the write
    /// will get. When `namespace` is given, it must exist (a live namespace object) or 404.
    pub fn write<F>(&self, res: ResId, key: &str, namespace: Option<&str>, f: F) -> Result<Written, ApiError>
    where
        F: FnOnce(Option<&Arc<Obj>>, u64) -> Result<WriteAction, ApiError>,
    {
        let mut g = self.lock();
        if let Some(ns) = namespace {
            let ns_res = self.find("", "namespaces").expect("namespaces is a built-in resource");
            let rev = g.rev;
            if g.spaces[ns_res].keys.get(ns, rev).is_none() {
                return Err(ApiError::namespace_not_found(ns));
            }
        }
        let rev = g.rev + 1;
        let cur = g.spaces[res].keys.get(key, g.rev);
        let (ty, value, deleted) = match f(cur.as_ref(), rev)? {
            WriteAction::Unchanged(obj) => return Ok(Written { obj, prev: cur, deleted: false }),
            WriteAction::Put(v) => {
                let ty = if cur.is_some() { EventType::Modified } else { EventType::Added };
                (ty, v, false)
            }
            WriteAction::Delete(v) => (EventType::Deleted, v, true),
        };
        let obj = Arc::new(Obj::new(&self.resources[res], &value));
        g.rev = rev;
        let space = &mut g.spaces[res];
        space.cache_rev = rev;
        space.keys.put(key, rev, if deleted { None } else { Some(obj.clone()) });
        let ev = Arc::new(Event { rev, ty, obj, prev: cur.clone() });
        if space.history.len() >= MAX_HISTORY
            && let Some(old) = space.history.pop_front()
        {
            space.history_floor = space.history_floor.max(old.rev);
        }
        space.history.push_back(ev.clone());
        // No receivers is fine: nobody watches this resource right now.
        let _ = space.tx.send(ev);
        self.rev_tx.send_replace(rev);
        Ok(Written { obj: value, prev: cur, deleted })
    }

    /// Subscribes to a resource's events; the snapshot `rev` is the revision the subscription starts after.
    pub fn subscribe(&self, res: ResId) -> WatchStart {
        let g = self.lock();
        WatchStart { rev: g.rev, rx: g.spaces[res].tx.subscribe() }
    }

    /// Subscribes and returns the current objects of the resource under `prefix` (initial events).
    pub fn snapshot_and_subscribe(&self, res: ResId, prefix: &str) -> (WatchStart, Items) {
        let g = self.lock();
        let items = g.spaces[res].keys.range(prefix, "", g.rev);
        (WatchStart { rev: g.rev, rx: g.spaces[res].tx.subscribe() }, items)
    }

    /// Subscribes and returns the history events with rev > `from`; Err(oldest resumable RV) when
    /// `from` is older than the retained history.
    pub fn history_and_subscribe(&self, res: ResId, from: u64) -> Result<(WatchStart, Vec<Arc<Event>>), u64> {
        let g = self.lock();
        let space = &g.spaces[res];
        let floor = space.history_floor.max(g.compacted);
        if from < floor {
            return Err(floor);
        }
        let events = space.history.iter().filter(|e| e.rev > from).cloned().collect();
        Ok((WatchStart { rev: g.rev, rx: space.tx.subscribe() }, events))
    }

    /// Compacts all revisions below `rev` (default: the current revision). Returns the compacted revision.
    pub fn compact(&self, rev: Option<u64>) -> u64 {
        let mut g = self.lock();
        let target = rev.unwrap_or(g.rev).min(g.rev);
        if target <= g.compacted {
            return g.compacted;
        }
        g.compacted = target;
        for space in &mut g.spaces {
            space.keys.compact(target);
            while space.history.front().is_some_and(|e| e.rev <= target) {
                space.history.pop_front();
            }
        }
        target
    }

    /// Forgets all watch history, as a restarted apiserver's fresh watch cache does: watches from
    /// older RVs get 410 afterwards. The storage (etcd) keeps its revisions.
    pub fn reset_history(&self) {
        let mut g = self.lock();
        let rev = g.rev;
        // A restarted cache lists from etcd: it starts at the current revision.
        for space in &mut g.spaces {
            space.history.clear();
            space.history_floor = rev;
            space.cache_rev = rev;
        }
    }
}
