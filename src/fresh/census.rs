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
//! most of their bytes outside `metadata` (spec, status), see [`super::plan`].

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;

use crate::codec::proto::{Malformed, Value, last_len_field, len_fields};
use crate::front::body;
use crate::store::Snapshot;
use crate::upstream::Upstream;

/// The census's `Accept`: the metadata view in protobuf (about half the bytes of JSON), JSON otherwise.
pub(super) const ACCEPT: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, \
     application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

/// The envelope every Kubernetes protobuf object starts with, followed by a `runtime.Unknown`.
const PROTOBUF_MAGIC: &[u8] = b"k8s\0";

/// What a census covers: the whole resource (the default), one namespace, and/or `limit` objects (a page:
/// the read it decides is that page), the first ones or those a continue token starts at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Scope {
    pub(crate) namespace: Option<Box<str>>,
    /// 0: every object in scope.
    pub(crate) limit: usize,
    /// A page continued at a revision: the client's token (sent upstream as is), and the store key it
    /// starts at (inclusive).
    pub(crate) continued: Option<Continued>,
}

/// The continue token of a page a census covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Continued {
    pub(crate) token: Box<str>,
    pub(crate) start_key: Box<str>,
}

impl Continued {
    /// A continued page's census, when its token can be sent upstream as is: the apiserver's tokens are
    /// unpadded base64url (a client's that decoded under a laxer reading is not sent).
    pub(crate) fn new(token: &str, start_key: &str) -> Option<Self> {
        let plain = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'=';
        (!token.is_empty() && token.bytes().all(plain))
            .then(|| Self { token: token.into(), start_key: start_key.into() })
    }
}

impl Scope {
    /// The whole resource (coalesced per resource, see [`super::Freshness::by_census`]).
    pub(crate) fn is_whole(&self) -> bool {
        self.namespace.is_none() && self.limit == 0 && self.continued.is_none()
    }

    /// The census's path: the resource's collection (`prefix/resource`), or a namespace's, with the scope's
    /// `limit` and `selection` (a filtered mirror's selector query) as the query.
    fn path(&self, prefix: &str, resource: &str, selection: Option<&str>) -> String {
        let mut path = match &self.namespace {
            Some(ns) => format!("{prefix}/namespaces/{ns}/{resource}"),
            None => format!("{prefix}/{resource}"),
        };
        let mut query: Vec<String> = Vec::new();
        if self.limit > 0 {
            query.push(format!("limit={}", self.limit));
        }
        if let Some(c) = &self.continued {
            query.push(format!("continue={}", c.token));
        }
        if let Some(selection) = selection.filter(|s| !s.is_empty()) {
            query.push(selection.to_owned());
        }
        if !query.is_empty() {
            path.push('?');
            path.push_str(&query.join("&"));
        }
        path
    }
}

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

/// Takes a census of `scope` of the resource whose collection is `prefix/resource`, narrowed by `selection`
/// (a filtered mirror's selector query), refusing an answer over `max_bytes`, and one page where `scope` asked
/// for all.
pub(super) async fn take(
    upstream: &Upstream,
    (prefix, resource): (&str, &str),
    scope: &Scope,
    selection: Option<&str>,
    max_bytes: usize,
) -> Result<Census, String> {
    let path = scope.path(prefix, resource, selection);
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
    checked(if protobuf { parse_protobuf(&bytes) } else { parse_json(&bytes) }?, scope)
}

/// `census` as an answer for `scope`: one page where the scope asked for every object is not one.
fn checked(census: Census, scope: &Scope) -> Result<Census, String> {
    if census.more && scope.limit == 0 {
        return Err("census: the upstream answered one page of the list".into());
    }
    Ok(census)
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
        #[serde(rename = "remainingItemCount")]
        remaining: Option<u64>,
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
    let more = list.metadata.continue_.as_deref().is_some_and(|c| !c.is_empty());
    let remaining = list.metadata.remaining;
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
    Ok(Census { rv, items, bytes: bytes.len(), more, remaining })
}

// Field numbers of the messages a protobuf census reads (k8s.io/apimachinery generated.proto).
/// `runtime.Unknown.raw`.
const UNKNOWN_RAW: u64 = 2;
/// `PartialObjectMetadataList.metadata` (ListMeta), `.items`.
const LIST_METADATA: u64 = 1;
const LIST_ITEMS: u64 = 2;
/// `ListMeta.resourceVersion`, `.continue`, `.remainingItemCount`.
const LIST_META_RV: u64 = 2;
const LIST_META_CONTINUE: u64 = 3;
const LIST_META_REMAINING: u64 = 4;
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
    let (mut rv, mut more, mut remaining) = (None, false, None);
    let mut items = Vec::new();
    for field in fields(raw) {
        let (tag, payload) = field?;
        match tag {
            LIST_METADATA => {
                for f in crate::codec::proto::fields(payload) {
                    match f.map_err(malformed)? {
                        (LIST_META_RV, Value::Len(v)) => rv = Some(utf8(v)?),
                        (LIST_META_CONTINUE, Value::Len(c)) => more = !c.is_empty(),
                        (LIST_META_REMAINING, Value::Varint(n)) => remaining = Some(n),
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
    Ok(Census { rv: number(rv.unwrap_or(""))?, items, bytes: bytes.len(), more, remaining })
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

/// Objects sampled to estimate the share of a store's bytes a census lists, before one is measured.
const SAMPLED: usize = 64;

/// The share of `state`'s bytes that a census lists: the `metadata` of its first objects against their
/// whole JSON (a protobuf census is smaller still: the estimate errs towards forwarding).
pub(crate) fn metadata_share(state: &crate::store::State) -> f64 {
    let (meta, whole) = state
        .snapshot
        .objects
        .values()
        .take(SAMPLED)
        .fold((0usize, 0usize), |(m, w), o| (m + o.metadata_range.len(), w + o.raw.len()));
    if whole == 0 { 1.0 } else { meta as f64 / whole as f64 }
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
