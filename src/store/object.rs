//! One stored object: the bytes the upstream sent plus the few fields extracted once at ingest.

use std::ops::Range;
use std::sync::Arc;

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
    pub fn heap_bytes(&self) -> usize {
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

/// Builds the store key of an object.
pub fn make_key(namespace: Option<&str>, name: &str) -> (Key, u32) {
    match namespace {
        Some(ns) if !ns.is_empty() => (Arc::from(format!("{ns}/{name}")), ns.len() as u32),
        _ => (Arc::from(name), 0),
    }
}
