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
    /// A list of `key` at `rv`. When that is newer than any seen for its resource, removes the entries of
    /// that resource at older snapshots (`rv_of` an entry's snapshot) from `entries` and returns them: dead, for
    /// the cache to account for.
    pub(crate) fn advance<E>(
        &mut self,
        key: &str,
        rv: u64,
        bound: usize,
        entries: &mut HashMap<String, E>,
        rv_of: impl Fn(&E) -> u64,
    ) -> Vec<E> {
        let resource = resource_of(key);
        match self.rv.get_mut(resource) {
            Some(newest) if *newest >= rv => return Vec::new(),
            Some(newest) => *newest = rv,
            None => {
                if self.rv.len() >= bound {
                    self.rv.clear();
                }
                self.rv.insert(resource.to_owned(), rv);
            }
        }
        entries.extract_if(|k, e| rv_of(e) < rv && resource_of(k) == resource).map(|(_, e)| e).collect()
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
    fn older_entries_of_the_resource_only_and_only_when_newer() {
        let mut entries: HashMap<String, u64> = [("pods|a", 5), ("pods|b", 7), ("pods|c", 9), ("nodes|", 1)]
            .map(|(k, v)| (k.to_owned(), v))
            .into();
        let mut n = Newest::default();
        let mut dead = n.advance("pods|x", 8, 10, &mut entries, |rv| *rv);
        dead.sort();
        assert_eq!(dead, [5, 7]);
        let mut left: Vec<_> = entries.keys().cloned().collect();
        left.sort();
        assert_eq!(left, ["nodes|", "pods|c"]);
        assert!(n.advance("pods|y", 8, 10, &mut entries, |rv| *rv).is_empty(), "not newer: nothing more");
        assert!(n.is_older("pods|z", 7) && !n.is_older("pods|z", 8) && !n.is_older("nodes|", 0));
        for i in 0..25 {
            n.advance(&format!("r{i}|"), 1, 10, &mut entries, |rv| *rv);
            assert!(n.len() <= 10);
        }
    }
}
