//! A multi-version ordered keyspace, ordered by the raw bytes of the key like etcd.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use super::Obj;

/// One version of a key: the revision of the write and the value (None = deleted).
#[derive(Debug, Clone)]
struct Version {
    rev: u64,
    obj: Option<Arc<Obj>>,
}

/// All versions of all keys of one resource. Keys are `namespace/name` or `name`.
#[derive(Debug, Default)]
pub struct Keyspace {
    keys: BTreeMap<String, Vec<Version>>,
}

/// One page of a range read: what etcd's `Range` with a limit answers (storage/etcd3/store.go:
/// store.GetList reads `limit` keys at a time and stops once the page is full).
#[derive(Debug, Clone, PartialEq)]
pub struct KeyPage {
    /// The selected objects in key order, at most the limit.
    pub items: Vec<Arc<Obj>>,
    /// Set when the page is full and a live key follows its last item.
    pub more: Option<More>,
}

/// What follows a full page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct More {
    /// The key of the page's last item (a continue token starts after it).
    pub last_key: String,
    /// The number of live keys after it, when the read counted them (etcd's `count - len(kvs)`).
    pub remaining: Option<u64>,
}

// === impl Keyspace ===

impl Keyspace {
    /// The value of `key` as of revision `at`.
    pub fn get(&self, key: &str, at: u64) -> Option<Arc<Obj>> {
        self.keys.get(key).and_then(|vs| value_at(vs, at)).cloned()
    }

    /// Live objects with keys starting with `prefix`, at or after `from`, as of revision `at`.
    pub fn range(&self, prefix: &str, from: &str, at: u64) -> Vec<(String, Arc<Obj>)> {
        self.live(prefix, from, at).map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// The objects of `range(prefix, from, at)` that pass `select` (None = all), up to `limit` (0 = no
    /// limit). The walk stops at the limit: after a full page it looks for one more live key, or, without
    /// a selector, counts them all without copying keys or objects (etcd counts the rest of the range for
    /// remainingItemCount; the apiserver reports it only for lists without a selector).
    pub fn page(
        &self,
        prefix: &str,
        from: &str,
        at: u64,
        limit: usize,
        select: Option<&dyn Fn(&Obj) -> bool>,
    ) -> KeyPage {
        let count = select.is_none();
        let mut live = self.live(prefix, from, at);
        let mut items = Vec::new();
        let mut last_key = None;
        for (k, obj) in live.by_ref() {
            if select.is_none_or(|f| f(obj)) {
                items.push(obj.clone());
                if items.len() == limit {
                    last_key = Some(k);
                    break;
                }
            }
        }
        let more = last_key.and_then(|k| {
            let remaining = if count { live.count() } else { usize::from(live.next().is_some()) };
            (remaining > 0)
                .then(|| More { last_key: k.clone(), remaining: count.then_some(remaining as u64) })
        });
        KeyPage { items, more }
    }

    /// Records a new version; `rev` is greater than every existing one.
    pub fn put(&mut self, key: &str, rev: u64, obj: Option<Arc<Obj>>) {
        self.keys.entry(key.to_string()).or_default().push(Version { rev, obj });
    }

    /// Drops versions that no read at a revision >= `rev` can see.
    pub fn compact(&mut self, rev: u64) {
        self.keys.retain(|_, vs| {
            // Index of the newest version at or below rev: it stays visible to reads at rev.
            if let Some(i) = vs.iter().rposition(|v| v.rev <= rev) {
                let keep_from = if vs[i].obj.is_none() { i + 1 } else { i };
                vs.drain(..keep_from);
            }
            !vs.is_empty()
        });
    }

    /// The live keys starting with `prefix`, at or after `from`, with their values as of revision `at`,
    /// in key order; lazy, borrowing the map.
    fn live<'a>(
        &'a self,
        prefix: &'a str,
        from: &str,
        at: u64,
    ) -> impl Iterator<Item = (&'a String, &'a Arc<Obj>)> {
        let start = if from > prefix { from } else { prefix };
        self.keys
            .range::<str, _>((Bound::Included(start), Bound::Unbounded))
            .take_while(move |(k, _)| k.starts_with(prefix))
            .filter_map(move |(k, vs)| value_at(vs, at).map(|v| (k, v)))
    }
}

fn value_at(vs: &[Version], at: u64) -> Option<&Arc<Obj>> {
    vs.iter().rev().find(|v| v.rev <= at).and_then(|v| v.obj.as_ref())
}
