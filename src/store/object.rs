//! One stored object: the bytes the upstream sent plus the few fields extracted once at ingest.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

/// The store key: `namespace/name` for namespaced objects, `name` for cluster-scoped ones.
///
/// Ordered by raw bytes, which is the apiserver's storage key order (`/<resource>/<ns>/<name>`): `-` and `.`
/// sort before `/`, so `kube-system/x` < `kube/x`.
pub type Key = Arc<str>;

/// An object's labels, sorted by key (binary-searchable).
pub type Labels = Box<[(Box<str>, Box<str>)]>;

/// A cached object. Immutable once built; shared by snapshots, history events and watchers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// `namespace/name` or `name`.
    pub key: Key,
    /// Length of the namespace prefix in `key` (0 for cluster-scoped objects).
    pub ns_len: u32,
    pub uid: Box<str>,
    /// `metadata.resourceVersion`, parsed.
    pub resource_version: u64,
    /// Labels sorted by key.
    pub labels: Labels,
    /// Values of the kind's extra field-selector fields, in the order of
    /// [`crate::resource::FieldKind::extra_fields`]; `None` when absent in the object.
    pub fields: Box<[Option<Box<str>>]>,
    /// The object's JSON exactly as the upstream sent it, with `kind` and `apiVersion`, compact, no newline.
    pub raw: Bytes,
    /// `raw[body_offset..]` is the object after its leading `"kind":…,"apiVersion":…,` members, so the
    /// list-item form without type meta is `{` followed by that slice. Equals 1 when the object does not
    /// start with those two members.
    pub body_offset: u32,
    /// Byte range of the `metadata` object's value inside `raw` (for PartialObjectMetadata views).
    pub metadata_range: Range<u32>,
    /// This version's protobuf messages, transcoded from `raw` on first use (see [`ProtoCells`]).
    pub proto: ProtoCells,
}

impl Object {
    pub fn namespace(&self) -> Option<&str> {
        if self.ns_len == 0 { None } else { Some(&self.key[..self.ns_len as usize]) }
    }

    pub fn name(&self) -> &str {
        if self.ns_len == 0 { &self.key } else { &self.key[self.ns_len as usize + 1..] }
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.binary_search_by(|(k, _)| (**k).cmp(key)).ok().map(|i| &*self.labels[i].1)
    }

    /// Estimated heap bytes held by this object alone: its `Arc` allocation, the key, uid, labels and
    /// field values (each a separate allocation), and the raw bytes. Allocator rounding is not counted.
    pub(crate) fn heap_bytes(&self) -> usize {
        /// Reference counts in front of an `Arc` allocation.
        const ARC_HEADER: usize = 16;
        let labels: usize = self.labels.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
            + self.labels.len() * std::mem::size_of::<(Box<str>, Box<str>)>();
        let fields: usize = self.fields.iter().map(|f| f.as_ref().map_or(0, |v| v.len())).sum::<usize>()
            + self.fields.len() * std::mem::size_of::<Option<Box<str>>>();
        ARC_HEADER
            + std::mem::size_of::<Self>()
            + ARC_HEADER
            + self.key.len()
            + self.uid.len()
            + labels
            + fields
            + self.raw.len()
    }
}

// === impl Selectable ===

impl kache_k8s::options::selector::Selectable for Object {
    fn name(&self) -> &str {
        Object::name(self)
    }
    fn namespace(&self) -> Option<&str> {
        Object::namespace(self)
    }
    fn label(&self, key: &str) -> Option<&str> {
        Object::label(self, key)
    }
    fn extra_field(&self, i: usize) -> Option<&str> {
        self.fields.get(i).and_then(|v| v.as_deref())
    }
    fn raw_json(&self) -> &[u8] {
        &self.raw
    }
}

/// The protobuf messages of one object version, each computed at most once, when a protobuf client first
/// needs it, and dropped with the version.
///
/// Why cells in the object rather than a cache keyed by version: an object version is immutable and shared
/// by the current snapshot, retained snapshots, the history and every watcher, so a cell is written once and
/// read without a lock or a lookup; its memory is bounded by what the store already retains (at most one
/// message per view per retained version, each smaller than the JSON it came from) and released exactly when
/// the version is, with no eviction policy to tune. Versions no protobuf client reads cost two empty cells.
/// A failed transcode is remembered too (`None`), so it is counted and attempted once per version.
#[derive(Default)]
pub struct ProtoCells {
    /// The object's own message (`Pod`, not enveloped; list items are these bytes).
    full: OnceLock<Option<Held>>,
    /// The `PartialObjectMetadata` message of its metadata (`meta.k8s.io/v1`).
    meta: OnceLock<Option<Held>>,
}

/// Bytes counted in the kache's held-bytes count (`kache_protobuf_bytes`) while alive.
struct Held(Bytes, Arc<AtomicU64>);

impl Held {
    fn new(bytes: Vec<u8>, held: &Arc<AtomicU64>) -> Self {
        held.fetch_add(bytes.len() as u64, Relaxed);
        // The transcoder sizes its buffer for half the JSON and doubles it when the message is longer (it
        // usually is, ~0.6×), so a kept buffer would pin ~1.7× the message (`Bytes` keeps the whole
        // capacity, and `shrink_to_fit` leaves a block shrunk by less than half where it is). A copy of the
        // exact length, once per version, costs less than the spare capacity held as long as the version.
        let kept =
            if bytes.capacity() > bytes.len() { Bytes::copy_from_slice(&bytes) } else { Bytes::from(bytes) };
        Self(kept, held.clone())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.1.fetch_sub(self.0.len() as u64, Relaxed);
    }
}

// === impl ProtoCells ===

impl ProtoCells {
    /// The object's message, computed by `encode` on first use and counted in `held` while kept; `None`
    /// when it could not be transcoded.
    pub fn full(&self, held: &Arc<AtomicU64>, encode: impl FnOnce() -> Option<Vec<u8>>) -> Option<Bytes> {
        self.full.get_or_init(|| encode().map(|m| Held::new(m, held))).as_ref().map(|h| h.0.clone())
    }

    /// The `PartialObjectMetadata` message, computed by `encode` on first use and counted in `held`.
    pub fn meta(&self, held: &Arc<AtomicU64>, encode: impl FnOnce() -> Option<Vec<u8>>) -> Option<Bytes> {
        self.meta.get_or_init(|| encode().map(|m| Held::new(m, held))).as_ref().map(|h| h.0.clone())
    }

    /// Bytes held by these cells.
    pub fn bytes(&self) -> usize {
        let len = |c: &OnceLock<Option<Held>>| c.get().and_then(Option::as_ref).map_or(0, |h| h.0.len());
        len(&self.full) + len(&self.meta)
    }
}

/// A clone starts empty: the cells are a cache of `raw`, and a clone's bytes may be edited.
impl Clone for ProtoCells {
    fn clone(&self) -> Self {
        Self::default()
    }
}

/// The cells never make two objects differ: they only cache what `raw` says.
impl PartialEq for ProtoCells {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for ProtoCells {}

impl std::fmt::Debug for ProtoCells {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProtoCells").field("bytes", &self.bytes()).finish()
    }
}

/// Builds the store key of an object.
pub fn make_key(namespace: Option<&str>, name: &str) -> (Key, u32) {
    match namespace {
        Some(ns) if !ns.is_empty() => (Arc::from(format!("{ns}/{name}")), ns.len() as u32),
        _ => (Arc::from(name), 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kept message pins its length, not the transcoder's spare capacity.
    #[test]
    fn a_held_message_keeps_its_length_only() {
        let held = Arc::new(AtomicU64::new(0));
        let mut grown = Vec::with_capacity(4096);
        grown.extend_from_slice(&[7; 2500]);
        let kept = Held::new(grown, &held);
        let bytes = kept.0.clone();
        drop(kept);
        assert_eq!(held.load(Relaxed), 0);
        let capacity = bytes.try_into_mut().expect("the only handle").capacity();
        assert_eq!(capacity, 2500);
    }

    #[test]
    fn proto_cells_compute_once_and_count_their_bytes() {
        let cells = ProtoCells::default();
        let held = Arc::new(AtomicU64::new(0));
        let mut calls = 0;
        let a = cells.full(&held, || {
            calls += 1;
            Some(vec![1, 2, 3])
        });
        let b = cells.full(&held, || {
            calls += 1;
            Some(vec![9])
        });
        assert_eq!((a.as_deref(), b.as_deref(), calls), (Some(&[1u8, 2, 3][..]), Some(&[1u8, 2, 3][..]), 1));
        // A failure is remembered: attempted (and counted by the caller) once.
        let mut failures = 0;
        for _ in 0..3 {
            assert!(
                cells
                    .meta(&held, || {
                        failures += 1;
                        None
                    })
                    .is_none()
            );
        }
        assert_eq!((failures, cells.bytes()), (1, 3));
        // A clone starts empty; the kache's count covers what is alive.
        assert_eq!(cells.clone().bytes(), 0);
        assert_eq!(held.load(Relaxed), 3);
        drop(cells);
        assert_eq!(held.load(Relaxed), 0);
    }
}
