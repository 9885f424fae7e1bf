//! Proving a quiet store fresh by its content: a consistent metadata-only list of the resource (a *census*).
//!
//! Under foreign writes (leases, events) the upstream's revision moves all the time while a resource stays
//! quiet, so its store lags the upstream's revision though it holds exactly what the upstream holds. The
//! pre-deadline bookmark of a proof watch ([`super::proof`]) shows that only after 1–2 s. A census shows it
//! in one round trip: the upstream's consistent `PartialObjectMetadataList` (protobuf where the upstream
//! offers it) names every object with its `resourceVersion` at a revision R at or past the upstream's
//! revision when the census started. An object's `resourceVersion` is the revision of its last write, so a
//! snapshot holding exactly the same (key, resourceVersion) pairs holds exactly the objects the upstream held
//! at R: serving *that snapshot* reflects every write acknowledged before the census started. The answer
//! carries the snapshot's own revision (its content is the upstream's at both revisions); the store itself
//! is not moved to R, because a census cannot show the absence of events in between that cancel out (an
//! object created and deleted again), which a watch from the snapshot's revision must still deliver.
//!
//! A census costs the upstream what its metadata view of the resource costs: it pays where objects carry
//! most of their bytes outside `metadata` (spec, status), see [`super::Freshness::census_pays`].

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;

use crate::codec::proto::{Malformed, last_len_field, len_fields};
use crate::front::body;
use crate::store::Snapshot;
use crate::upstream::Upstream;

/// The census's `Accept`: the metadata view in protobuf (about half the bytes of JSON), JSON otherwise.
pub(super) const ACCEPT: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, \
     application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

/// The envelope every Kubernetes protobuf object starts with, followed by a `runtime.Unknown`.
const PROTOBUF_MAGIC: &[u8] = b"k8s\0";

/// The upstream's objects at one revision: each object's key (`namespace/name` or `name`) and
/// `resourceVersion`, in the order the upstream listed them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Census {
    /// The list's `metadata.resourceVersion`.
    pub(crate) rv: u64,
    pub(crate) items: Vec<Item>,
    /// Bytes of the upstream's answer (what the census cost to transfer).
    pub(crate) bytes: usize,
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

/// Takes a census of `collection` (the resource's list path) narrowed by `selection` (a filtered mirror's
/// selector query), refusing an answer over `max_bytes`.
pub(super) async fn take(
    upstream: &Upstream,
    collection: &str,
    selection: Option<&str>,
    max_bytes: usize,
) -> Result<Census, String> {
    let mut path = collection.to_owned();
    if let Some(selection) = selection.filter(|s| !s.is_empty()) {
        path.push('?');
        path.push_str(selection);
    }
    let req = Request::builder()
        .method(Method::GET)
        .uri(&path)
        .header(http::header::ACCEPT, ACCEPT)
        .body(body::empty())
        .map_err(|e| e.to_string())?;
    let resp = upstream.send(req).await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let protobuf = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/vnd.kubernetes.protobuf"));
    let bytes = http_body_util::Limited::new(resp.into_body(), max_bytes)
        .collect()
        .await
        .map_err(|e| format!("reading census: {e}"))?
        .to_bytes();
    if status != StatusCode::OK {
        return Err(format!("census answered {status}"));
    }
    if protobuf { parse_protobuf(&bytes) } else { parse_json(&bytes) }
}

/// Parses a JSON `PartialObjectMetadataList` (any list works: only metadata is read).
pub(crate) fn parse_json(bytes: &Bytes) -> Result<Census, String> {
    use std::borrow::Cow;
    #[derive(serde::Deserialize)]
    struct List<'a> {
        #[serde(borrow)]
        metadata: ListMeta<'a>,
        #[serde(borrow, default)]
        items: Vec<Entry<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct ListMeta<'a> {
        #[serde(rename = "resourceVersion", borrow)]
        resource_version: Option<Cow<'a, str>>,
        #[serde(rename = "continue", borrow)]
        continue_: Option<Cow<'a, str>>,
    }
    #[derive(serde::Deserialize)]
    struct Entry<'a> {
        #[serde(borrow)]
        metadata: Meta<'a>,
    }
    #[derive(serde::Deserialize)]
    struct Meta<'a> {
        #[serde(borrow)]
        name: Cow<'a, str>,
        #[serde(borrow)]
        namespace: Option<Cow<'a, str>>,
        #[serde(rename = "resourceVersion", borrow)]
        resource_version: Cow<'a, str>,
    }
    let list: List<'_> = serde_json::from_slice(bytes).map_err(|e| format!("census: {e}"))?;
    if list.metadata.continue_.as_deref().is_some_and(|c| !c.is_empty()) {
        return Err("census: the upstream answered one page of the list".into());
    }
    let rv = number(list.metadata.resource_version.as_deref().unwrap_or(""))?;
    let items = list
        .items
        .into_iter()
        .map(|e| {
            Ok(Item {
                namespace: e.metadata.namespace.filter(|ns| !ns.is_empty()).map(|ns| ns.as_ref().into()),
                name: e.metadata.name.as_ref().into(),
                rv: number(&e.metadata.resource_version)?,
            })
        })
        .collect::<Result<_, String>>()?;
    Ok(Census { rv, items, bytes: bytes.len() })
}

// Field numbers of the messages a protobuf census reads (k8s.io/apimachinery generated.proto).
/// `runtime.Unknown.raw`.
const UNKNOWN_RAW: u64 = 2;
/// `PartialObjectMetadataList.metadata` (ListMeta), `.items`.
const LIST_METADATA: u64 = 1;
const LIST_ITEMS: u64 = 2;
/// `ListMeta.resourceVersion`, `.continue`.
const LIST_META_RV: u64 = 2;
const LIST_META_CONTINUE: u64 = 3;
/// `PartialObjectMetadata.metadata` (ObjectMeta).
const ITEM_METADATA: u64 = 1;
/// `ObjectMeta.name`, `.namespace`, `.resourceVersion`.
const META_NAME: u64 = 1;
const META_NAMESPACE: u64 = 3;
const META_RV: u64 = 6;

/// Parses a protobuf `PartialObjectMetadataList` in its `k8s\0` envelope.
pub(crate) fn parse_protobuf(bytes: &Bytes) -> Result<Census, String> {
    let bad = |what: &str| format!("census: malformed protobuf ({what})");
    let unknown = bytes.strip_prefix(PROTOBUF_MAGIC).ok_or_else(|| bad("no envelope"))?;
    let raw = last_field(unknown, UNKNOWN_RAW)?.ok_or_else(|| bad("no object"))?;
    let mut rv = None;
    let mut items = Vec::new();
    for field in fields(raw) {
        let (tag, payload) = field?;
        match tag {
            LIST_METADATA => {
                for f in fields(payload) {
                    match f? {
                        (LIST_META_RV, v) => rv = Some(utf8(v)?),
                        (LIST_META_CONTINUE, c) if !c.is_empty() => {
                            return Err("census: the upstream answered one page of the list".into());
                        }
                        _ => {}
                    }
                }
            }
            LIST_ITEMS => {
                let meta =
                    last_field(payload, ITEM_METADATA)?.ok_or_else(|| bad("an item without metadata"))?;
                let (mut name, mut namespace, mut item_rv) = (None, None, None);
                for f in fields(meta) {
                    match f? {
                        (META_NAME, v) => name = Some(utf8(v)?),
                        (META_NAMESPACE, v) => namespace = Some(utf8(v)?),
                        (META_RV, v) => item_rv = Some(utf8(v)?),
                        _ => {}
                    }
                }
                items.push(Item {
                    namespace: namespace.filter(|ns| !ns.is_empty()).map(Into::into),
                    name: name.ok_or_else(|| bad("an item without a name"))?.into(),
                    rv: number(item_rv.unwrap_or(""))?,
                });
            }
            _ => {}
        }
    }
    Ok(Census { rv: number(rv.unwrap_or(""))?, items, bytes: bytes.len() })
}

fn number(s: &str) -> Result<u64, String> {
    s.parse().map_err(|_| format!("census: resourceVersion {s:?} is not a number"))
}

fn utf8(b: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(b).map_err(|_| "census: a string field is not UTF-8".to_owned())
}

/// The payload of the last length-delimited field `field` of `msg`.
fn last_field(msg: &[u8], field: u64) -> Result<Option<&[u8]>, String> {
    last_len_field(msg, field).map_err(malformed)
}

/// The length-delimited fields of `msg` ([`len_fields`]), a malformed message as the census's error.
fn fields(msg: &[u8]) -> impl Iterator<Item = Result<(u64, &[u8]), String>> {
    len_fields(msg).map(|f| f.map_err(malformed))
}

fn malformed(_: Malformed) -> String {
    "census: malformed protobuf".to_owned()
}

/// Compares `snapshot` with `census`: in one walk when the upstream listed in the store's order (storage key
/// order, the usual case), otherwise by looking each listed object up, counting each stored object once (an
/// object listed twice cannot stand in for one missing).
pub(crate) fn compare(snapshot: &Snapshot, census: &Census) -> Compared {
    let same_keys = snapshot.len() == census.items.len()
        && snapshot
            .objects
            .values()
            .zip(&census.items)
            .all(|(o, item)| o.namespace() == item.namespace.as_deref() && o.name() == &*item.name);
    let upto = if same_keys {
        snapshot
            .objects
            .values()
            .zip(&census.items)
            .filter(|(o, item)| o.resource_version != item.rv)
            .map(|(_, item)| item.rv)
            .max()
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
        if upto.is_none() && seen.len() != snapshot.len() {
            // Every listed object is in the snapshot, which holds more: deletions it has not seen, at
            // revisions the census does not show.
            upto = Some(census.rv);
        }
        upto
    };
    match upto {
        None => Compared::Same,
        Some(upto) => Compared::Behind { upto },
    }
}

/// What deciding a read by a census costs against forwarding it, measured where kache can: the census by the
/// recent ones, forwarding by the reflector's last full list of the resource (what the upstream takes to list
/// it all: a simulator serving cached bytes lists at ~1 GB/s but builds a metadata view object by object, a Go
/// apiserver encodes both). Before any measurement, the bytes at the apiserver's ~40 MB/s
/// ([`super::budget::forward_cost`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Costs {
    /// The read's estimated size.
    pub(crate) bytes: usize,
    /// The store's size (what a full list of the resource is, in the same estimate).
    pub(crate) store_bytes: usize,
    /// The census's estimated size (needed only while `census_took` is `None`).
    pub(crate) census_bytes: usize,
    /// What censuses took.
    pub(crate) census_took: Option<Duration>,
    /// What the last full list of the resource took.
    pub(crate) full_list: Option<Duration>,
}

impl Costs {
    /// Forwarding a read of `bytes`: its share of a measured full list, else the bytes' estimate (the smaller:
    /// a full list measured during a busy start-up is not taken to be slower than the estimate).
    fn forward(&self, bytes: usize) -> Duration {
        let estimate = super::budget::forward_cost(bytes);
        match self.full_list {
            Some(full) if self.store_bytes > 0 => {
                let share = (bytes as f64 / self.store_bytes as f64).min(1.0);
                estimate.min(full.mul_f64(share))
            }
            _ => estimate,
        }
    }

    /// The census: as measured, else estimated like a forwarded read of its size.
    pub(crate) fn census(&self) -> Duration {
        self.census_took.unwrap_or_else(|| self.forward(self.census_bytes))
    }

    /// Whether the census and serving the read from memory cost at most `fraction` of forwarding it.
    pub(crate) fn pays(&self, fraction: f64) -> bool {
        let cost = self.census() + super::budget::memory_cost(self.bytes);
        cost.as_secs_f64() <= self.forward(self.bytes).as_secs_f64() * fraction
    }
}

/// Objects sampled (spread over the resource) to estimate a census's size before the first one is taken.
const SAMPLED: usize = 64;

/// The estimated bytes of a census of `state`'s store: its bytes times the share of `metadata` in a sample of
/// its objects' JSON (a protobuf census is smaller still: the estimate errs towards forwarding).
pub(crate) fn estimate_bytes(state: &crate::store::State) -> usize {
    let step = (state.snapshot.len() / SAMPLED).max(1);
    let (meta, whole) = state
        .snapshot
        .objects
        .values()
        .step_by(step)
        .take(SAMPLED)
        .fold((0usize, 0usize), |(m, w), o| (m + o.metadata_range.len(), w + o.raw.len()));
    if whole == 0 {
        return 0;
    }
    (state.live_bytes as f64 * meta as f64 / whole as f64) as usize
}

fn lookup<'a>(snapshot: &'a Snapshot, item: &Item) -> Option<&'a Arc<crate::store::Object>> {
    match &item.namespace {
        Some(ns) => snapshot.get(&format!("{ns}/{}", item.name)),
        None => snapshot.get(&item.name),
    }
}

#[cfg(test)]
#[path = "census_tests.rs"]
mod tests;
