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

/// An object's labels, sorted by key (binary-searchable), with a 64-bit Bloom filter of their keys and
/// `key=value` pairs.
///
/// A label-selector scan visits every object of a list; looking a label up costs a binary search through
/// separately allocated strings (three or four cache misses per object). The filter sits inline, so most
/// objects are decided from it alone: an `app=x` requirement rejects an object whose filter lacks the
/// pair's bits, `!app` accepts one whose filter lacks the key's. A filter answers only "absent" for sure;
/// "maybe" falls back to the lookup, so results are exactly those of the lookup.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Labels {
    pairs: Box<[(Box<str>, Box<str>)]>,
    bloom: u64,
}

impl Labels {
    /// Labels from `(key, value)` pairs in any order; among equal keys the last one wins (as Go's JSON
    /// decoder keeps the last duplicate member).
    pub fn new(mut pairs: Vec<(Box<str>, Box<str>)>) -> Self {
        // Reverse then stable-sort: among equal keys the last one comes first, and dedup keeps the first.
        pairs.reverse();
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        pairs.dedup_by(|later, kept| later.0 == kept.0);
        let bloom = pairs.iter().fold(0, |acc, (k, v)| acc | label_key_bits(k) | label_pair_bits(k, v));
        Self { pairs: pairs.into_boxed_slice(), bloom }
    }

    /// The value of label `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs.binary_search_by(|(k, _)| (**k).cmp(key)).ok().map(|i| &*self.pairs[i].1)
    }

    /// Whether every bit of `bits` (from [`label_key_bits`] or [`label_pair_bits`]) is set: false means the
    /// key or pair is certainly absent.
    pub fn may_contain(&self, bits: u64) -> bool {
        self.bloom & bits == bits
    }
}

impl std::ops::Deref for Labels {
    type Target = [(Box<str>, Box<str>)];

    fn deref(&self) -> &Self::Target {
        &self.pairs
    }
}

impl<K: Into<Box<str>>, V: Into<Box<str>>> FromIterator<(K, V)> for Labels {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Self::new(iter.into_iter().map(|(k, v)| (k.into(), v.into())).collect())
    }
}

/// The filter bits of a label key (two of 64).
pub fn label_key_bits(key: &str) -> u64 {
    bloom_bits(hash_bytes(0x6b65_7973, key.as_bytes()))
}

/// The filter bits of a `key=value` pair (two of 64).
pub fn label_pair_bits(key: &str, value: &str) -> u64 {
    // The key's length separates key from value: ("ab", "c") and ("a", "bc") hash apart.
    let seed = hash_bytes(0x7061_6972 ^ key.len() as u64, key.as_bytes());
    bloom_bits(hash_bytes(seed, value.as_bytes()))
}

/// Two bit positions from one 64-bit hash.
fn bloom_bits(h: u64) -> u64 {
    (1 << (h & 63)) | (1 << ((h >> 6) & 63))
}

/// A small multiplicative hash (FxHash's step, then a final avalanche); not exposed to untrusted
/// collisions in a way that matters: a collision only sends an object to the exact lookup.
fn hash_bytes(seed: u64, bytes: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = seed;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let word = u64::from_le_bytes(c.try_into().expect("8-byte chunk"));
        h = (h.rotate_left(5) ^ word).wrapping_mul(K);
    }
    for &b in chunks.remainder() {
        h = (h.rotate_left(5) ^ u64::from(b)).wrapping_mul(K);
    }
    // Murmur3's finalizer: every input bit reaches the low 12 bits the filter uses.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

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
        self.labels.get(key)
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

/// Protobuf message bytes held by all [`ProtoCells`] of the process (`kache_protobuf_bytes`).
static PROTO_BYTES_HELD: AtomicU64 = AtomicU64::new(0);

/// Protobuf message bytes held now by every object version's [`ProtoCells`].
pub fn proto_bytes_held() -> u64 {
    PROTO_BYTES_HELD.load(Relaxed)
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

/// Bytes counted in [`PROTO_BYTES_HELD`] while alive.
struct Held(Bytes);

impl Held {
    fn new(bytes: Vec<u8>) -> Self {
        PROTO_BYTES_HELD.fetch_add(bytes.len() as u64, Relaxed);
        Self(Bytes::from(bytes))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        PROTO_BYTES_HELD.fetch_sub(self.0.len() as u64, Relaxed);
    }
}

// === impl ProtoCells ===

impl ProtoCells {
    /// The object's message, computed by `encode` on first use; `None` when it could not be transcoded.
    pub fn full(&self, encode: impl FnOnce() -> Option<Vec<u8>>) -> Option<Bytes> {
        self.full.get_or_init(|| encode().map(Held::new)).as_ref().map(|h| h.0.clone())
    }

    /// The `PartialObjectMetadata` message, computed by `encode` on first use.
    pub fn meta(&self, encode: impl FnOnce() -> Option<Vec<u8>>) -> Option<Bytes> {
        self.meta.get_or_init(|| encode().map(Held::new)).as_ref().map(|h| h.0.clone())
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

    #[test]
    fn proto_cells_compute_once_and_count_their_bytes() {
        let cells = ProtoCells::default();
        let mut calls = 0;
        let a = cells.full(|| {
            calls += 1;
            Some(vec![1, 2, 3])
        });
        let b = cells.full(|| {
            calls += 1;
            Some(vec![9])
        });
        assert_eq!((a.as_deref(), b.as_deref(), calls), (Some(&[1u8, 2, 3][..]), Some(&[1u8, 2, 3][..]), 1));
        // A failure is remembered: attempted (and counted by the caller) once.
        let mut failures = 0;
        for _ in 0..3 {
            assert!(
                cells
                    .meta(|| {
                        failures += 1;
                        None
                    })
                    .is_none()
            );
        }
        assert_eq!((failures, cells.bytes()), (1, 3));
        // A clone starts empty; the process-wide count covers what is alive (other tests may run alongside,
        // so only this cell's own share is checked through `bytes`).
        assert_eq!(cells.clone().bytes(), 0);
        let held = proto_bytes_held();
        assert!(held >= 3, "{held}");
        drop(cells);
    }
}

#[cfg(test)]
mod label_tests {
    use super::*;

    #[test]
    fn last_duplicate_wins_and_keys_sort() {
        let l: Labels = [("b", "1"), ("a", "x"), ("b", "2")].into_iter().collect();
        assert_eq!(l.iter().map(|(k, v)| (&**k, &**v)).collect::<Vec<_>>(), [("a", "x"), ("b", "2")]);
        assert_eq!(l.get("b"), Some("2"));
        assert_eq!(l.get("c"), None);
    }

    #[test]
    fn the_filter_never_denies_what_is_present() {
        let pairs: Vec<(String, String)> =
            (0..200).map(|i| (format!("k{i}"), format!("v{}", i * 7))).collect();
        let l: Labels = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        for (k, v) in &pairs {
            assert!(l.may_contain(label_key_bits(k)), "{k}");
            assert!(l.may_contain(label_pair_bits(k, v)), "{k}={v}");
        }
    }

    #[test]
    fn the_filter_tells_absent_keys_and_pairs_apart() {
        // Four labels set at most 16 of 64 bits: most absent keys and pairs are seen absent at once.
        let l: Labels = [("app", "web"), ("tier", "front"), ("pod-template-hash", "7d9f"), ("env", "prod")]
            .into_iter()
            .collect();
        let absent_keys = (0..1000).filter(|i| !l.may_contain(label_key_bits(&format!("other{i}")))).count();
        let absent_pairs =
            (0..1000).filter(|i| !l.may_contain(label_pair_bits("app", &format!("web{i}")))).count();
        assert!(absent_keys > 800, "{absent_keys}");
        assert!(absent_pairs > 800, "{absent_pairs}");
    }
}
