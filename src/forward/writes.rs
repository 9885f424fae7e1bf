//! Read-your-writes: the resourceVersions of successful writes forwarded through kache.
//!
//! After a client writes through kache, a consistent read through kache must see that write. The forwarder
//! records the resourceVersion each successful write returned; the consistent-read path waits until the
//! store has reached [`WriteTracker::last_write`] before serving from memory.

use std::collections::HashMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::codec::proto::last_len_field;
use crate::resource::Gvr;

/// Distinct resources tracked. The upstream only accepts writes to resources it serves, so the real count
/// is the cluster's resource count; the bound keeps a misbehaving upstream from growing the map.
const MAX_TRACKED_RESOURCES: usize = 4096;

/// Highest write resourceVersion per resource. Keyed by group and resource, not version: a write through
/// `apps/v1` is visible to a cache of the same resource at another version (resourceVersions are etcd
/// revisions, shared by all versions).
#[derive(Debug, Default)]
pub struct WriteTracker {
    by_resource: RwLock<HashMap<(String, String), AtomicU64>>,
}

// === impl WriteTracker ===

impl WriteTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that a write to `gvr` returned resourceVersion `rv` (keeps the maximum).
    pub fn record(&self, gvr: &Gvr, rv: u64) {
        let key = (gvr.group.clone(), gvr.resource.clone());
        {
            let map = self.by_resource.read().unwrap_or_else(|e| e.into_inner());
            if let Some(last) = map.get(&key) {
                last.fetch_max(rv, Ordering::AcqRel);
                return;
            }
        }
        let mut map = self.by_resource.write().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_TRACKED_RESOURCES && !map.contains_key(&key) {
            tracing::warn!(%gvr, "write tracker full; not tracking this resource");
            return;
        }
        map.entry(key).or_default().fetch_max(rv, Ordering::AcqRel);
    }

    /// The highest resourceVersion a write to `gvr` returned through kache; 0 when none.
    pub fn last_write(&self, gvr: &Gvr) -> u64 {
        let map = self.by_resource.read().unwrap_or_else(|e| e.into_inner());
        map.get(&(gvr.group.clone(), gvr.resource.clone())).map_or(0, |rv| rv.load(Ordering::Acquire))
    }
}

/// `metadata.resourceVersion` of a JSON object, as a number. `None` when absent, empty, not a number, or
/// the bytes are not a JSON object (a protobuf response, a Status without metadata).
pub(crate) fn resource_version(json: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Obj<'a> {
        #[serde(borrow)]
        metadata: Option<Meta<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Meta<'a> {
        #[serde(rename = "resourceVersion", borrow)]
        resource_version: Option<std::borrow::Cow<'a, str>>,
    }
    let obj: Obj<'_> = serde_json::from_slice(json).ok()?;
    obj.metadata?.resource_version?.parse().ok()
}

/// The envelope every Kubernetes protobuf object starts with (`k8s` and a zero byte), followed by a
/// `runtime.Unknown` message.
const PROTOBUF_MAGIC: &[u8] = b"k8s\0";
/// `runtime.Unknown.raw`: the encoded object.
const UNKNOWN_RAW_FIELD: u64 = 2;
/// Every built-in object message has `metadata` (ObjectMeta, or ListMeta for lists) as field 1.
const OBJECT_METADATA_FIELD: u64 = 1;
/// `ObjectMeta.resourceVersion` is field 6; `ListMeta.resourceVersion` is field 2.
const OBJECT_META_RV_FIELD: u64 = 6;

/// `metadata.resourceVersion` of a protobuf-encoded object (`application/vnd.kubernetes.protobuf`), as a
/// number. `None` when the bytes are not an enveloped object with one.
pub(crate) fn resource_version_protobuf(bytes: &[u8]) -> Option<u64> {
    let unknown = bytes.strip_prefix(PROTOBUF_MAGIC)?;
    let raw = proto_field(unknown, UNKNOWN_RAW_FIELD)?;
    let metadata = proto_field(raw, OBJECT_METADATA_FIELD)?;
    let rv = proto_field(metadata, OBJECT_META_RV_FIELD)?;
    std::str::from_utf8(rv).ok()?.parse().ok()
}

/// The payload of the last length-delimited field `field` of a protobuf message; `None` when it has none or
/// is malformed.
fn proto_field(msg: &[u8], field: u64) -> Option<&[u8]> {
    last_len_field(msg, field).ok().flatten()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn keeps_the_maximum_per_group_and_resource() {
        let t = WriteTracker::new();
        let pods = Gvr::new("", "v1", "pods");
        assert_eq!(t.last_write(&pods), 0);
        t.record(&pods, 10);
        t.record(&pods, 7);
        assert_eq!(t.last_write(&pods), 10);
        t.record(&Gvr::new("apps", "v1", "deployments"), 12);
        assert_eq!(t.last_write(&Gvr::new("apps", "v1beta1", "deployments")), 12);
        assert_eq!(t.last_write(&pods), 10);
        assert_eq!(t.last_write(&Gvr::new("", "v1", "nodes")), 0);
    }

    #[test]
    fn extracts_resource_versions() {
        assert_eq!(
            resource_version(br#"{"kind":"Pod","metadata":{"name":"a","resourceVersion":"42"}}"#),
            Some(42)
        );
        assert_eq!(resource_version(br#"{"metadata":{"resourceVersion":"4\u0032"}}"#), Some(42));
        assert_eq!(resource_version(br#"{"kind":"Status","status":"Success"}"#), None);
        assert_eq!(resource_version(br#"{"metadata":{}}"#), None);
        assert_eq!(resource_version(br#"{"metadata":{"resourceVersion":""}}"#), None);
        assert_eq!(resource_version(b"k8s\0\x0a\x02"), None);
        assert_eq!(resource_version(b"{\"metadata\":{\"resourceVersion\":\"1\""), None);
    }

    /// A length-delimited protobuf field.
    fn field(number: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        crate::codec::proto::put_bytes(&mut out, number, payload);
        out
    }

    fn enveloped_pod(rv: &str) -> Vec<u8> {
        // ObjectMeta: name (1), namespace (3), resourceVersion (6), generation (7, varint).
        let meta = [field(1, b"p"), field(3, b"default"), field(6, rv.as_bytes()), vec![7 << 3, 3]].concat();
        let pod = [field(1, &meta), field(2, b"spec bytes")].concat();
        let type_meta = [field(1, b"v1"), field(2, b"Pod")].concat();
        let unknown = [field(1, &type_meta), field(2, &pod), field(3, b""), field(4, b"")].concat();
        [PROTOBUF_MAGIC, &unknown].concat()
    }

    #[test]
    fn extracts_protobuf_resource_versions() {
        assert_eq!(resource_version_protobuf(&enveloped_pod("987")), Some(987));
        assert_eq!(resource_version_protobuf(&enveloped_pod("")), None);
        assert_eq!(resource_version_protobuf(&enveloped_pod("12")[4..]), None, "no envelope");
        let truncated = enveloped_pod("987");
        assert_eq!(resource_version_protobuf(&truncated[..truncated.len() - 5]), None);
        assert_eq!(resource_version_protobuf(b"{\"metadata\":{}}"), None);
    }

    proptest! {
        #[test]
        fn never_panics_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = resource_version(&bytes);
            let mut enveloped = PROTOBUF_MAGIC.to_vec();
            enveloped.extend_from_slice(&bytes);
            let _ = resource_version_protobuf(&enveloped);
        }

        #[test]
        fn protobuf_roundtrip(rv in 1u64..u64::MAX) {
            prop_assert_eq!(resource_version_protobuf(&enveloped_pod(&rv.to_string())), Some(rv));
        }
    }
}
