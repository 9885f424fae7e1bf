//! The newest snapshot each resource was listed at, for the list caches (bodies, gzip): they keep lists only
//! at their resource's current snapshot (rv=0, consistent and NotOlderThan lists are all answered there), so
//! once a resource is listed at a newer snapshot, its entries at older ones can never be served again.

use std::collections::HashMap;

/// The resource of a list cache key (`{gvr}|{namespace}|{view}|{encoding}`).
pub(crate) fn resource_of(key: &str) -> &str {
    key.split('|').next().unwrap_or(key)
}

/// Per resource, the newest snapshot a list was asked at; at most `bound` resources, forgotten all at once
/// beyond (a forgotten resource only keeps its dead entries a little longer).
#[derive(Debug, Default)]
pub(crate) struct Newest {
    rv: HashMap<String, u64>,
}

impl Newest {
    /// A list of `key` at `rv`: whether that is newer than any seen for its resource (then the cache's entries
    /// of that resource at older snapshots are dead, for it to remove).
    pub(crate) fn raise(&mut self, key: &str, rv: u64, bound: usize) -> bool {
        let resource = resource_of(key);
        match self.rv.get_mut(resource) {
            Some(newest) if *newest >= rv => false,
            Some(newest) => {
                *newest = rv;
                true
            }
            None => {
                if self.rv.len() >= bound {
                    self.rv.clear();
                }
                self.rv.insert(resource.to_owned(), rv);
                true
            }
        }
    }

    /// Whether a list of `key` at `rv` is older than its resource's newest (dead on arrival: not cached).
    pub(crate) fn is_older(&self, key: &str, rv: u64) -> bool {
        self.rv.get(resource_of(key)).is_some_and(|&newest| newest > rv)
    }

    /// Resources remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.rv.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newer_snapshots_of_a_resource_only_and_bounded() {
        let mut n = Newest::default();
        assert!(n.raise("pods|x", 8, 10), "first seen");
        assert!(!n.raise("pods|y", 8, 10), "not newer");
        assert!(!n.raise("pods|y", 7, 10), "older");
        assert!(n.raise("pods|y", 9, 10), "newer");
        assert!(n.is_older("pods|z", 8) && !n.is_older("pods|z", 9) && !n.is_older("nodes|", 0));
        for i in 0..25 {
            n.raise(&format!("r{i}|"), 1, 10);
            assert!(n.len() <= 10);
        }
    }
}
