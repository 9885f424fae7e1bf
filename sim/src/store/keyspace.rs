//! A multi-version ordered keyspace, ordered by the raw bytes of the key like etcd.

use std::collections::BTreeMap;
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

// === impl Keyspace ===

impl Keyspace {
    /// The value of `key` as of revision `at`.
    pub fn get(&self, key: &str, at: u64) -> Option<Arc<Obj>> {
        self.keys.get(key).and_then(|vs| value_at(vs, at))
    }

    /// Live objects with keys starting with `prefix`, at or after `from`, as of revision `at`.
    pub fn range(&self, prefix: &str, from: &str, at: u64) -> Vec<(String, Arc<Obj>)> {
        let start = if from > prefix { from } else { prefix };
        self.keys
            .range::<str, _>((std::ops::Bound::Included(start), std::ops::Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .filter_map(|(k, vs)| value_at(vs, at).map(|v| (k.clone(), v)))
            .collect()
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
}

fn value_at(vs: &[Version], at: u64) -> Option<Arc<Obj>> {
    vs.iter().rev().find(|v| v.rev <= at).and_then(|v| v.obj.clone())
}
