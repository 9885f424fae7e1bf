//! The census as a whole: a list parsed into memory, and its comparison with a snapshot, the oracle of the
//! streamed ones in tests.

use std::sync::Arc;

use bytes::Bytes;

use super::Scope;
use super::decode::ItemRef;
use super::decode::malformed;
use crate::store::Snapshot;

/// The upstream's objects at one revision: each object's key (`namespace/name` or `name`) and
/// `resourceVersion`, in the order the upstream listed them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Census {
    /// The list's `metadata.resourceVersion`.
    pub(crate) rv: u64,
    pub(crate) items: Vec<Item>,
    /// Bytes of the upstream's answer (what the census cost to transfer).
    pub(crate) bytes: usize,
    /// Whether the upstream answered one page (a `continue` token): more objects follow in scope.
    pub(crate) more: bool,
    /// The page's `remainingItemCount`: how many objects follow it.
    pub(crate) remaining: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Item {
    pub(crate) namespace: Option<Box<str>>,
    pub(crate) name: Box<str>,
    pub(crate) rv: u64,
}

/// How a snapshot compares with a census.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compared {
    /// Same keys, same resourceVersions: the snapshot holds the upstream's objects at the census's revision.
    Same,
    /// The snapshot lacks writes the census shows; the newest of them is at `upto` (the census's revision
    /// when a deletion is missing: its revision is unknown). They may be on their way to the store.
    Behind { upto: u64 },
}

/// `census` as an answer for `scope`: one page where the scope asked for every object is not one.
pub(crate) fn checked(census: Census, scope: &Scope) -> Result<Census, String> {
    if census.more && scope.limit == 0 {
        return Err("census: the upstream answered one page of the list".into());
    }
    Ok(census)
}

/// Parses a protobuf `PartialObjectMetadataList` in its `k8s\0` envelope, whole (the streamed decoder's
/// oracle in tests).
pub(crate) fn parse_protobuf(bytes: &Bytes) -> Result<Census, String> {
    use super::decode::{LIST_ITEMS, LIST_METADATA, PROTOBUF_MAGIC, UNKNOWN_RAW, bad, protobuf_item};
    use crate::codec::proto::{last_len_field, len_fields};
    let unknown = bytes.strip_prefix(PROTOBUF_MAGIC).ok_or_else(|| bad("no envelope"))?;
    let raw = last_len_field(unknown, UNKNOWN_RAW).map_err(malformed)?.ok_or_else(|| bad("no object"))?;
    let mut meta = super::decode::ListMeta::default();
    let mut items = Vec::new();
    for field in len_fields(raw) {
        match field.map_err(malformed)? {
            (LIST_METADATA, payload) => meta.merge_protobuf(payload)?,
            (LIST_ITEMS, payload) => items.push(Item::from(protobuf_item(payload)?)),
            _ => {}
        }
    }
    Ok(Census { rv: meta.rv()?, items, bytes: bytes.len(), more: meta.more, remaining: meta.remaining })
}

/// Compares the objects of `scope` in `snapshot` with `census` (of the same scope): in one walk when the
/// upstream listed in the store's order (storage key order, the usual case), otherwise by looking each listed
/// object up, counting each stored object once (an object listed twice cannot stand in for one missing). A
/// census of one page (more objects follow) matches the snapshot's first objects of the scope, and its
/// `remainingItemCount` the number of the others: the page the snapshot answers is then the upstream's.
pub(crate) fn compare(snapshot: &Snapshot, census: &Census, scope: &Scope) -> Compared {
    let start = scope.continued.as_ref().map(|c| &*c.start_key);
    let in_scope = || -> Box<dyn Iterator<Item = &Arc<crate::store::Object>> + '_> {
        match (&scope.namespace, start) {
            (Some(ns), Some(start)) => Box::new(snapshot.namespace_range_from(ns, start)),
            (Some(ns), None) => Box::new(snapshot.namespace_range(ns)),
            (None, Some(start)) => Box::new(
                snapshot
                    .objects
                    .range::<_, str>((std::ops::Bound::Included(start), std::ops::Bound::Unbounded))
                    .map(|(_, o)| o),
            ),
            (None, None) => Box::new(snapshot.objects.values()),
        }
    };
    let total = match (&scope.namespace, start) {
        (None, None) => snapshot.len(),
        _ => in_scope().count(),
    };
    // The objects the census's items stand for: the first of the scope for a page, all of them otherwise.
    let listed = if census.more { census.items.len().min(total) } else { total };
    let same_keys = listed == census.items.len()
        && in_scope()
            .take(listed)
            .zip(&census.items)
            .all(|(o, item)| o.namespace() == item.namespace.as_deref() && o.name() == &*item.name);
    let upto = if same_keys {
        let changed = in_scope()
            .take(listed)
            .zip(&census.items)
            .filter(|(o, item)| o.resource_version != item.rv)
            .map(|(_, item)| item.rv)
            .max();
        match changed {
            // Same page, but objects created or deleted after it that the store has not seen.
            None if census.more && census.remaining != Some((total - listed) as u64) => Some(census.rv),
            changed => changed,
        }
    } else {
        let mut seen = std::collections::HashSet::with_capacity(census.items.len());
        let mut upto: Option<u64> = None;
        for item in &census.items {
            match lookup(snapshot, item) {
                Some(o) if o.resource_version == item.rv && seen.insert(Arc::as_ptr(o) as usize) => {}
                // Missing, an older version, or listed twice: the write that made the census's version is
                // not in the store.
                _ => upto = upto.max(Some(item.rv)),
            }
        }
        if upto.is_none() && (census.more || seen.len() != total) {
            // Every listed object is in the snapshot, which holds more (deletions it has not seen, at
            // revisions the census does not show), or other objects first (a page).
            upto = Some(census.rv);
        }
        upto
    };
    match upto {
        None => Compared::Same,
        Some(upto) => Compared::Behind { upto },
    }
}

fn lookup<'a>(snapshot: &'a Snapshot, item: &Item) -> Option<&'a Arc<crate::store::Object>> {
    match &item.namespace {
        Some(ns) => snapshot.get(&format!("{ns}/{}", item.name)),
        None => snapshot.get(&item.name),
    }
}

impl From<ItemRef<'_>> for Item {
    fn from(i: ItemRef<'_>) -> Self {
        Self { namespace: i.namespace.map(|ns| ns.as_ref().into()), name: i.name.as_ref().into(), rv: i.rv }
    }
}
