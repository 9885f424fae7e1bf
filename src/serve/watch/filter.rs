//! Which objects a watcher sees, and what it is sent when an object enters or leaves its selection.

use std::fmt;
use std::ops::Bound;
use std::sync::Arc;

use crate::store::{Event, EventType, IndexKey, IndexKind, Key, Object};

/// A label/field selector predicate. Built by the request layer from the parsed selectors; `None` in
/// [`Filter`] means "everything" (then an object's membership never changes, so no transitions happen).
pub type Predicate = Arc<dyn Fn(&Object) -> bool + Send + Sync>;

/// A watcher's selection: a namespace (a contiguous key range), optionally one name, and selectors.
#[derive(Clone, Default)]
pub struct Filter {
    /// Restricts to keys `ns/…`.
    pub namespace: Option<String>,
    /// Restricts to one object name (the legacy `/watch/…/NAME` path or `metadata.name=` selector).
    pub name: Option<String>,
    /// Label and field selectors; `None` when both are empty.
    pub predicate: Option<Predicate>,
    /// The value the field selector pins (`=`) for the store's indexed field (pods' `spec.nodeName`), if
    /// any. `predicate` still checks it; this only chooses the watcher's index ring.
    pub field: Option<Box<str>>,
}

impl fmt::Debug for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Filter")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("predicate", &self.predicate.is_some())
            .field("field", &self.field)
            .finish()
    }
}

/// What a watcher sends for one store event (`cache_watcher.go` `convertToWatchEvent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Neither version is selected: nothing.
    Skip,
    /// Send the event as the store framed it (the shared frame).
    AsIs,
    /// The object entered the selection through an update: ADDED with the current object.
    Entered,
    /// The object left the selection through an update: DELETED with the previous object, its
    /// resourceVersion rewritten to the event's.
    Left,
}

// === impl Filter ===

impl Filter {
    /// Whether `key` lies in the namespace and name scope.
    pub(crate) fn key_in_scope(&self, key: &str) -> bool {
        let (ns, name) = match key.split_once('/') {
            Some((ns, name)) => (Some(ns), name),
            None => (None, key),
        };
        if let Some(want) = &self.namespace
            && ns != Some(want.as_str())
        {
            return false;
        }
        match &self.name {
            Some(want) => name == want,
            None => true,
        }
    }

    /// Whether `object` is selected.
    pub fn matches(&self, object: &Object) -> bool {
        self.key_in_scope(&object.key) && self.predicate.as_ref().is_none_or(|p| p(object))
    }

    /// What to send for `event`.
    pub fn transition(&self, event: &Event) -> Transition {
        if !self.key_in_scope(&event.object.key) {
            return Transition::Skip;
        }
        let Some(predicate) = &self.predicate else {
            return Transition::AsIs;
        };
        let current = event.kind != EventType::Deleted && predicate(&event.object);
        let previous = event.prev.as_deref().is_some_and(|p| predicate(p));
        match (previous, current) {
            (false, false) => Transition::Skip,
            (true, true) => Transition::AsIs,
            // A store ADDED (no previous version) is already an ADDED.
            (false, true) if event.kind == EventType::Added => Transition::AsIs,
            (false, true) => Transition::Entered,
            // A store DELETED carries the deleted object with the deletion RV already.
            (true, false) if event.kind == EventType::Deleted => Transition::AsIs,
            (true, false) => Transition::Left,
        }
    }

    /// The index value every selected object has, most selective first: the name, the indexed field's
    /// value, the namespace (the cacher's trigger, `cacher.go` `indexedTriggerFunc`); `None` when the
    /// selection pins none (the watcher sees every event).
    pub(crate) fn index_key(&self) -> Option<IndexKey> {
        let (kind, value) = match (&self.name, &self.field, &self.namespace) {
            (Some(name), _, _) => (IndexKind::Name, name.as_str()),
            (None, Some(value), _) => (IndexKind::Field, &**value),
            (None, None, Some(ns)) => (IndexKind::Namespace, ns.as_str()),
            (None, None, None) => return None,
        };
        Some(IndexKey { kind, value: value.into() })
    }

    /// The key range of the selection in a snapshot: `(lower, upper)` bounds for `OrdMap::range`.
    pub(crate) fn key_range(&self) -> (Bound<Key>, Bound<Key>) {
        match (&self.namespace, &self.name) {
            (Some(ns), Some(name)) => {
                let key: Key = Arc::from(format!("{ns}/{name}"));
                (Bound::Included(key.clone()), Bound::Included(key))
            }
            (None, Some(name)) => {
                let key: Key = Arc::from(name.as_str());
                (Bound::Included(key.clone()), Bound::Included(key))
            }
            (Some(ns), None) => {
                let (lo, hi) = crate::serve::scan::namespace_bounds(ns);
                (Bound::Included(Arc::from(lo)), Bound::Excluded(Arc::from(hi)))
            }
            (None, None) => (Bound::Unbounded, Bound::Unbounded),
        }
    }

    /// The snapshot key range still to walk for initial events, after the key `after` (exclusive); `None`
    /// when nothing is left. Use with `OrdMap::range`, then [`Filter::matches`] on each object.
    pub(crate) fn range_after(&self, after: Option<&Key>) -> Option<(Bound<Key>, Bound<Key>)> {
        let (lower, upper) = self.key_range();
        let lower = match after {
            Some(key) => Bound::Excluded(key.clone()),
            None => lower,
        };
        valid_range(&lower, &upper).then_some((lower, upper))
    }
}

/// `OrdMap::range` panics on an inverted range (like `BTreeMap::range`); a cursor past the end is one.
fn valid_range(lower: &Bound<Key>, upper: &Bound<Key>) -> bool {
    match (lower, upper) {
        (Bound::Included(l), Bound::Included(u)) => l <= u,
        (Bound::Included(l) | Bound::Excluded(l), Bound::Excluded(u))
        | (Bound::Excluded(l), Bound::Included(u)) => l < u,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Snapshot;
    use bytes::Bytes;
    use std::sync::OnceLock;
    use tokio::time::Instant;

    fn obj(key: &str, rv: u64, label: &str) -> Arc<Object> {
        let ns_len = key.find('/').unwrap_or(0) as u32;
        Arc::new(Object {
            key: Arc::from(key),
            ns_len,
            uid: "u".into(),
            resource_version: rv,
            labels: Box::new([("app".into(), label.into())]),
            fields: Box::new([]),
            raw: Bytes::from_static(b"{}"),
            body_offset: 1,
            metadata_range: 0..0,
            proto: Default::default(),
        })
    }

    fn event(kind: EventType, object: Arc<Object>, prev: Option<Arc<Object>>) -> Event {
        Event {
            rv: object.resource_version,
            kind,
            object,
            prev,
            json_frame: OnceLock::new(),
            proto_frame: OnceLock::new(),
            applied_at: Instant::now(),
        }
    }

    fn app_web() -> Filter {
        Filter { predicate: Some(Arc::new(|o: &Object| o.label("app") == Some("web"))), ..Filter::default() }
    }

    #[test]
    fn transitions_follow_the_cache_watcher_table() {
        let f = app_web();
        let web = |rv| obj("ns/a", rv, "web");
        let db = |rv| obj("ns/a", rv, "db");
        assert_eq!(f.transition(&event(EventType::Added, web(1), None)), Transition::AsIs);
        assert_eq!(f.transition(&event(EventType::Added, db(1), None)), Transition::Skip);
        assert_eq!(f.transition(&event(EventType::Modified, web(2), Some(db(1)))), Transition::Entered);
        assert_eq!(f.transition(&event(EventType::Modified, web(2), Some(web(1)))), Transition::AsIs);
        assert_eq!(f.transition(&event(EventType::Modified, db(2), Some(web(1)))), Transition::Left);
        assert_eq!(f.transition(&event(EventType::Modified, db(2), Some(db(1)))), Transition::Skip);
        assert_eq!(f.transition(&event(EventType::Deleted, web(3), Some(web(2)))), Transition::AsIs);
        assert_eq!(f.transition(&event(EventType::Deleted, db(3), Some(db(2)))), Transition::Skip);
    }

    #[test]
    fn namespace_and_name_scope() {
        let f = Filter { namespace: Some("kube".into()), ..Filter::default() };
        assert!(f.key_in_scope("kube/a"));
        assert!(!f.key_in_scope("kube-system/a"));
        assert!(!f.key_in_scope("kube2/a"));
        let f = Filter { namespace: Some("ns".into()), name: Some("a".into()), predicate: None, field: None };
        assert!(f.key_in_scope("ns/a"));
        assert!(!f.key_in_scope("ns/ab"));
        let f = Filter { name: Some("n1".into()), ..Filter::default() };
        assert!(f.key_in_scope("n1"));
        assert!(!f.key_in_scope("n2"));
    }

    fn walk(f: &Filter, snap: &Snapshot, after: Option<&Key>, max: usize) -> Vec<Arc<Object>> {
        let Some(range) = f.range_after(after) else { return Vec::new() };
        snap.objects.range(range).map(|(_, o)| o).filter(|o| f.matches(o)).take(max).cloned().collect()
    }

    #[test]
    fn range_after_walks_the_namespace_range() {
        let mut objects = imbl::OrdMap::new();
        for key in ["kube-system/a", "kube/a", "kube/b", "kube/c", "kube2/a"] {
            objects.insert(Arc::from(key), obj(key, 1, "web"));
        }
        let snap = Snapshot { rv: 1, objects, taken_at: Instant::now() };
        let f = Filter { namespace: Some("kube".into()), ..Filter::default() };
        let first = walk(&f, &snap, None, 2);
        assert_eq!(first.iter().map(|o| &*o.key).collect::<Vec<_>>(), ["kube/a", "kube/b"]);
        let rest = walk(&f, &snap, Some(&first[1].key), 2);
        assert_eq!(rest.iter().map(|o| &*o.key).collect::<Vec<_>>(), ["kube/c"]);
        assert!(walk(&f, &snap, Some(&rest[0].key), 2).is_empty());
        let single =
            Filter { namespace: Some("kube".into()), name: Some("b".into()), predicate: None, field: None };
        let one = walk(&single, &snap, None, 10);
        assert_eq!(one.len(), 1);
        assert!(single.range_after(Some(&one[0].key)).is_none());
    }
}
