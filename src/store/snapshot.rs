//! Snapshots (every object at one resourceVersion) and the secondary field index.

use std::ops::Bound;
use std::sync::Arc;
use tokio::time::Instant;

use imbl::{OrdMap, OrdSet};

use super::object::{Key, Object};

/// An immutable view of every object of the resource at one resourceVersion.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub rv: u64,
    /// Keyed in the apiserver's storage-key byte order (see [`Key`]).
    pub objects: OrdMap<Key, Arc<Object>>,
    /// When this snapshot was taken (retention by time).
    pub taken_at: Instant,
}

// === impl Snapshot ===

impl Snapshot {
    pub fn new(rv: u64, objects: OrdMap<Key, Arc<Object>>) -> Self {
        Self { rv, objects, taken_at: Instant::now() }
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    pub fn get(&self, key: &str) -> Option<&Arc<Object>> {
        self.objects.get(key)
    }

    /// Objects with key ≥ `start`, in key order (a page that continues at `start`).
    pub fn range_from<'a>(&'a self, start: &'a str) -> impl Iterator<Item = &'a Arc<Object>> + 'a {
        self.objects.range::<_, str>((Bound::Included(start), Bound::Unbounded)).map(|(_, o)| o)
    }

    /// Objects of namespace `ns`, in key order: keys in `["ns/", "ns0")` (`'0'` is `'/' + 1`, so this is
    /// exactly the keys that start with `ns/`).
    pub fn namespace_range<'a>(&'a self, ns: &str) -> impl Iterator<Item = &'a Arc<Object>> + 'a {
        let (lo, hi) = namespace_bounds(ns);
        self.objects.range::<_, str>((Bound::Included(&*lo), Bound::Excluded(&*hi))).map(|(_, o)| o)
    }

    /// Objects of namespace `ns` with key ≥ `start` (a namespaced page that continues at `start`).
    pub fn namespace_range_from<'a>(
        &'a self,
        ns: &str,
        start: &str,
    ) -> impl Iterator<Item = &'a Arc<Object>> + 'a {
        let (lo, hi) = namespace_bounds(ns);
        let lo = if start > lo.as_str() { start.to_owned() } else { lo };
        self.objects.range::<_, str>((Bound::Included(&*lo), Bound::Excluded(&*hi))).map(|(_, o)| o)
    }
}

/// `("ns/", "ns0")`: the key range of one namespace.
pub fn namespace_bounds(ns: &str) -> (String, String) {
    (format!("{ns}/"), format!("{ns}0"))
}

/// The value of extra field `field`, `""` when unset (what a field selector compares against).
fn field_value(object: &Object, field: usize) -> &str {
    object.fields.get(field).and_then(|f| f.as_deref()).unwrap_or("")
}

/// A secondary index of the current snapshot: the keys of the objects whose field-selector field
/// `field` (an index into [`crate::resource::FieldKind::extra_fields`]) has each value.
///
/// Maintained only where it pays: pods by `spec.nodeName`, which every kubelet lists and watches with
/// `fieldSelector=spec.nodeName=<node>` (the apiserver's watch cache indexes the same field). An object
/// without the field is indexed under `""`, which is what `spec.nodeName=` selects. The index holds keys,
/// not objects, so it changes only when an object's value of the field does (pod binding, creation,
/// deletion), not on every status update.
#[derive(Clone, Debug)]
pub struct FieldIndex {
    field: usize,
    entries: OrdSet<(Arc<str>, Key)>,
}

/// Estimated bytes per index entry: the tuple in a B-tree leaf (2 × 16 bytes, nodes about two thirds
/// full) plus the value string's allocation header; the value's own length is added separately.
pub(crate) const INDEX_ENTRY_OVERHEAD: usize = 64;

// === impl FieldIndex ===

impl FieldIndex {
    pub fn new(field: usize) -> Self {
        Self { field, entries: OrdSet::new() }
    }

    /// Which extra field this index covers.
    pub fn field(&self) -> usize {
        self.field
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn value_of(&self, object: &Object) -> Arc<str> {
        Arc::from(field_value(object, self.field))
    }

    /// Records `object`. Returns the estimated bytes added.
    pub(super) fn insert(&mut self, object: &Object) -> usize {
        let value = self.value_of(object);
        let bytes = INDEX_ENTRY_OVERHEAD + value.len();
        match self.entries.insert((value, object.key.clone())) {
            Some(_) => 0,
            None => bytes,
        }
    }

    /// Forgets `object`. Returns the estimated bytes released.
    pub(super) fn remove(&mut self, object: &Object) -> usize {
        let value = self.value_of(object);
        let bytes = INDEX_ENTRY_OVERHEAD + value.len();
        match self.entries.remove(&(value, object.key.clone())) {
            Some(_) => bytes,
            None => 0,
        }
    }

    /// Moves `key` from `prev`'s value to `next`'s when the field changed; a no-op otherwise.
    /// Returns the change in estimated bytes.
    pub(super) fn update(&mut self, prev: &Object, next: &Object) -> isize {
        if field_value(prev, self.field) == field_value(next, self.field) {
            return 0;
        }
        let released = self.remove(prev) as isize;
        self.insert(next) as isize - released
    }

    /// Keys of the objects whose field equals `value`, from `start` on, in key order.
    pub fn keys<'a>(&'a self, value: &'a str, start: &str) -> impl Iterator<Item = &'a Key> + 'a {
        let lo = (Arc::<str>::from(value), Key::from(start));
        self.entries
            .range((Bound::Included(lo), Bound::Unbounded))
            .take_while(move |(v, _)| &**v == value)
            .map(|(_, k)| k)
    }
}
