//! Proving a quiet store fresh by its content: a consistent metadata-only list of the resource (a *census*).
//!
//! Under foreign writes (leases, events) the upstream's revision moves all the time while a resource stays
//! quiet, so its store lags the upstream's revision though it holds exactly what the upstream holds. The
//! pre-deadline bookmark of a proof watch ([`super::proof`]) shows that only after 1–2 s. A census shows it
//! in one round trip: the upstream's consistent `PartialObjectMetadataList` (in protobuf)
//! names every object with its `resourceVersion` at a revision R at or past the upstream's
//! revision when the census started. An object's `resourceVersion` is the revision of its last write, so a
//! snapshot holding exactly the same (key, resourceVersion) pairs holds exactly the objects the upstream held
//! at R: serving *that snapshot* reflects every write acknowledged before the census started. The answer
//! carries the snapshot's own revision (its content is the upstream's at both revisions); the store itself
//! is not moved to R, because a census cannot show the absence of events in between that cancel out (an
//! object created and deleted again), which a watch from the snapshot's revision must still deliver.
//!
//! A census costs the upstream what its metadata view of the resource costs: it pays where objects carry
//! most of their bytes outside `metadata` (spec, status), see [`super::plan`].
//!
//! A census is compared as it arrives, holding one list entry at a time whatever the size of the list
//! (docs/decisions/0022-streaming-census.md): [`decode`] reads the protobuf answer chunk by chunk, [`walk`]
//! compares each item with the snapshot's next object and ends at the first difference, unless the store
//! catches up with it (its events are on their way) within [`CENSUS_CATCH_UP`]. The whole-body protobuf
//! parse and comparison ([`whole`]) are the streamed ones' oracle in tests.

mod decode;
mod walk;
#[cfg(test)]
mod whole;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use tokio::time::Instant;

use crate::front::body;
use crate::store::{State, Store};
use crate::upstream::Upstream;
use decode::Proto;
use walk::Walk;
#[cfg(test)]
pub(crate) use whole::{Census, Compared, Item, checked, compare, parse_protobuf};

/// The census's `Accept`: the metadata view in protobuf (about half the bytes of JSON), which every apiserver
/// built on k8s.io/apiserver offers for every resource, custom ones included (the sim too). An upstream
/// without it answers 406 at once, and its reads go the other ways, rather than encode a JSON census.
pub(super) const ACCEPT: &str =
    "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

/// How long a census showing writes the store lacks waits, in all, for their events (they are on their way:
/// the upstream's cache had them when it answered) before the difference stands.
const CENSUS_CATCH_UP: Duration = Duration::from_millis(100);

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

/// What a census showed: the upstream's revision, and the snapshot that holds exactly the upstream's objects
/// of the scope at it, if one did.
#[derive(Debug, Clone)]
pub(crate) struct Taken {
    /// The list's `metadata.resourceVersion`.
    pub(crate) rv: u64,
    /// Bytes of the upstream's answer (what the census cost to transfer).
    pub(crate) bytes: usize,
    /// Whether the whole answer was read (a census that differs ends early).
    pub(crate) complete: bool,
    /// Objects compared before the census ended.
    pub(crate) compared: usize,
    /// The store state whose snapshot matched.
    pub(crate) matched: Option<Arc<State>>,
}

/// Takes a census of `scope` of the resource whose collection is `prefix/resource`, narrowed by `selection`
/// (a filtered mirror's selector query), and compares it with `store` as it arrives: each item with the
/// snapshot's next object of the scope, ending at the first difference unless the store catches up with it
/// within [`CENSUS_CATCH_UP`]. Refuses an answer over `max_bytes`, and one page where `scope` asked for all.
/// `held` counts the bytes held to parse the answer meanwhile.
pub(super) async fn take(
    upstream: &Upstream,
    (prefix, resource): (&str, &str),
    scope: &Scope,
    selection: Option<&str>,
    (store, max_bytes): (&Store, usize),
    held: &AtomicU64,
) -> Result<Taken, String> {
    let path = scope.path(prefix, resource, selection);
    let req = Request::builder()
        .method(Method::GET)
        .uri(&path)
        .header(http::header::ACCEPT, ACCEPT)
        .body(body::empty())
        .map_err(|e| e.to_string())?;
    let resp = upstream.send(req).await.map_err(|e| e.to_string())?;
    let status = resp.status();
    if status != StatusCode::OK {
        return Err(format!("census answered {status}"));
    }
    let content_type = resp.headers().get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    if !content_type.is_some_and(|v| v.starts_with("application/vnd.kubernetes.protobuf")) {
        return Err(format!("census answered {content_type:?}, not protobuf"));
    }
    read(resp.into_body(), scope, (store, max_bytes), held).await
}

/// Reads a census's protobuf answer `body` and compares it with `store` as it arrives ([`take`]).
pub(super) async fn read<B>(
    mut body: B,
    scope: &Scope,
    (store, max_bytes): (&Store, usize),
    held: &AtomicU64,
) -> Result<Taken, String>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut walk = Walk::new(store.load(), scope);
    let mut catch_up = CatchUp::default();
    let mut held = Held { counter: held, now: 0 };
    let (meta, bytes, complete) = {
        let mut decoder = Proto::default();
        let (mut read, mut complete) = (0usize, true);
        'body: while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| format!("reading census: {}", e.into()))?;
            let Ok(data) = frame.into_data() else { continue };
            read += data.len();
            if read.max(decoder.length()) > max_bytes {
                return Err(format!("reading census: an answer over {max_bytes} bytes"));
            }
            let mut rest = &data[..];
            while !rest.is_empty() {
                let used = decoder.feed(rest, &mut |item| walk.item(&item))?;
                rest = &rest[used..];
                held.set(decoder.held());
                let rv = decoder.meta.rv().ok().filter(|_| decoder.meta.seen);
                catch_up.run(store, &mut walk, rv).await;
                // The list's metadata comes first: once the walk is decided, the rest is not needed.
                if walk.decided() && decoder.meta.seen {
                    complete = false;
                    break 'body;
                }
            }
        }
        if complete {
            decoder.finish()?;
        }
        let length = decoder.length();
        (decoder.meta, length, complete)
    };
    held.set(0);
    let rv = meta.rv()?;
    if meta.more && scope.limit == 0 {
        return Err("census: the upstream answered one page of the list".into());
    }
    if complete {
        walk.end(meta.more, meta.remaining);
        catch_up.run(store, &mut walk, Some(rv)).await;
    }
    let matched = walk.matched_state().cloned();
    Ok(Taken { rv, bytes, complete, compared: walk.matched, matched })
}

/// The catch-ups of one census: after a difference, the newer snapshots it waits for, within one
/// [`CENSUS_CATCH_UP`] from the first difference.
#[derive(Default)]
struct CatchUp {
    deadline: Option<Instant>,
}

impl CatchUp {
    /// While the walk has a difference a newer snapshot may resolve, waits for one and goes on with it; not
    /// once the store has reached the census's revision `rv` (its current snapshot serves the read then).
    async fn run(&mut self, store: &Store, walk: &mut Walk, rv: Option<u64>) {
        while let Some(target) = walk.catch_up_target() {
            if rv.is_some_and(|rv| store.resource_version() >= rv) {
                walk.settle();
                return;
            }
            let deadline = *self.deadline.get_or_insert_with(|| Instant::now() + CENSUS_CATCH_UP);
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || store.wait_for(target, left).await.is_err() {
                walk.settle();
                return;
            }
            walk.switch(store.load());
        }
    }
}

/// Bytes one census holds to parse its answer, counted in a gauge shared by all censuses.
struct Held<'a> {
    counter: &'a AtomicU64,
    now: usize,
}

impl Held<'_> {
    fn set(&mut self, now: usize) {
        if now >= self.now {
            self.counter.fetch_add((now - self.now) as u64, Relaxed);
        } else {
            self.counter.fetch_sub((self.now - now) as u64, Relaxed);
        }
        self.now = now;
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.set(0);
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

#[cfg(test)]
mod stream_tests;
#[cfg(test)]
mod tests;
