//! The generic table convertor ([`kache_k8s::table::generic`]) for kinds that have no printer of their own —
//! aggregated servers' kinds such as the sample apiserver's flunders.
//!
//! Which resources use it cannot be read from discovery, and the column descriptions are the upstream
//! build's swagger text of ObjectMeta, so kache learns both from the upstream itself: the first forwarded
//! Table answer for a resource ([`learn`]) is checked to be exactly the generic convertor's (the two
//! columns with their names, types, formats and priorities, and every row it carries whose object has
//! metadata printed as the convertor prints it); only then is the resource's Table served from memory,
//! with the column definitions copied from that answer. Anything else — a printer with other columns, a
//! body kache cannot read — leaves the resource forwarded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kache_k8s::table::generic::answer_columns;

/// Resources (group/version/resource) whose learned columns are kept at most: a bound on what an upstream
/// with very many aggregated kinds can make this registry hold. Past it, further resources stay forwarded.
pub const MAX_RESOURCES: usize = 4096;
/// Bytes of a forwarded Table answer read to learn from. The column definitions come first, so any
/// answer longer than this still teaches them; its rows past this point are simply not checked.
pub(crate) const LEARN_PREFIX_BYTES: usize = 64 * 1024;

fn key(group: &str, version: &str, resource: &str) -> String {
    format!("{group}/{version}/{resource}")
}

/// The generic printers one kache has learned.
#[derive(Default)]
pub(crate) struct GenericPrinters {
    /// The learned `columnDefinitions` of one upstream build (interned; a [`super::Printer::Generic`] names
    /// one by index, so rows cached under different descriptions never mix).
    sets: Mutex<Vec<Arc<[u8]>>>,
    /// group/version/resource → its set.
    resources: Mutex<HashMap<String, u32>>,
}

impl GenericPrinters {
    /// The generic printer learned for a resource, if its upstream answered a Table with the generic columns.
    pub(crate) fn lookup(&self, group: &str, version: &str, resource: &str) -> Option<u32> {
        self.resources.lock().unwrap_or_else(|p| p.into_inner()).get(&key(group, version, resource)).copied()
    }

    /// How many resources have learned generic columns (`kache_table_generic_resources`).
    pub(crate) fn learned_resources(&self) -> usize {
        self.resources.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The encoded `columnDefinitions` of a learned set.
    pub(crate) fn columns_json(&self, id: u32) -> Option<Arc<[u8]>> {
        self.sets.lock().unwrap_or_else(|p| p.into_inner()).get(id as usize).cloned()
    }

    /// Learns from a forwarded Table answer (or the first [`LEARN_PREFIX_BYTES`] of it): when it is the
    /// generic convertor's, the resource's Tables are served from memory from now on. Returns whether it
    /// learned.
    pub(crate) fn learn(&self, group: &str, version: &str, resource: &str, body: &[u8]) -> bool {
        let Some(columns) = answer_columns(body) else { return false };
        let mut sets = self.sets.lock().unwrap_or_else(|p| p.into_inner());
        let id = match sets.iter().position(|s| **s == columns[..]) {
            Some(i) => i,
            None if sets.len() < MAX_RESOURCES => {
                sets.push(columns.into());
                sets.len() - 1
            }
            None => return false,
        };
        let Ok(id) = u32::try_from(id) else { return false };
        drop(sets);
        let mut resources = self.resources.lock().unwrap_or_else(|p| p.into_inner());
        if resources.len() >= MAX_RESOURCES && !resources.contains_key(&key(group, version, resource)) {
            return false;
        }
        resources.insert(key(group, version, resource), id);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REAL: &str = r#"{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"3"},"columnDefinitions":[{"name":"Name","type":"string","format":"name","description":"N","priority":0},{"name":"Created At","type":"date","format":"","description":"C","priority":0}],"rows":[{"cells":["a","2026-11-26T16:20:08Z"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"a","creationTimestamp":"2026-11-26T16:20:08Z"}}}]}"#;

    #[test]
    fn learned_resources_are_served() {
        let g = GenericPrinters::default();
        assert_eq!(g.lookup("g.example", "v1", "widgets-learn"), None);
        assert!(!g.learn("g.example", "v1", "widgets-learn", br#"{"columnDefinitions":[]}"#));
        assert_eq!(g.lookup("g.example", "v1", "widgets-learn"), None);
        assert!(g.learn("g.example", "v1", "widgets-learn", REAL.as_bytes()));
        let id = g.lookup("g.example", "v1", "widgets-learn").expect("learned");
        assert!(g.columns_json(id).expect("set").starts_with(br#"[{"name":"Name""#));
        assert_eq!(g.lookup("g.example", "v2", "widgets-learn"), None);
    }
}
