//! LIST: the resourceVersion × resourceVersionMatch × limit/continue table (staging/src/k8s.io/apiserver/
//! pkg/storage/cacher/delegator.go: CacheDelegator.GetList, cacher/delegator/interface.go:
//! ShouldDelegateList),
//! non-recursive single-name lists (registry/generic/registry/store.go: Store.ListPredicate), pagination and
//! remainingItemCount (storage/etcd3/store.go: store.GetList).
//!
//! A limited list stops at the limit, as etcd's range and the watch cache's btree do: the store walks the
//! keyspace lazily under its lock (`Store::page`), so a kache freshness probe (`limit=1`) costs one key and
//! the remaining-item count, not a copy of the whole range.
//!
//! The sim models the apiserver with its watch cache always fresh: the cache RV is the global revision,
//! consistent reads need no wait, and snapshots exist for every revision not compacted.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::http::Ctx;
use crate::kinds::ResourceDef;
use crate::options::{ListOptions, Rv, Rvm};
use crate::status::{ApiError, TOO_LARGE_RETRY_AFTER_SECONDS};
use crate::store::{Obj, ReadError, ResId, Store};
use crate::token;

/// Encodes a list response in protobuf: the typed list of the objects, or (`as=PartialObjectMetadataList`)
/// the list of their metadata; items are bare messages (typed list items carry no TypeMeta).
pub fn encode_list_proto(
    res: &ResourceDef,
    view: crate::http::view::View,
    page: &Page,
) -> Result<Vec<u8>, ApiError> {
    use crate::http::view::{MetaVersion, View};
    let err = |e: crate::proto::EncodeError| ApiError::internal(format!("protobuf encoding: {e}"));
    match view {
        View::MetaList(v) => {
            let av = match v {
                MetaVersion::V1 => "meta.k8s.io/v1",
                MetaVersion::V1beta1 => "meta.k8s.io/v1beta1",
            };
            let items = page
                .items
                .iter()
                .map(|o| {
                    crate::proto::envelope::encode_item(
                        av,
                        "PartialObjectMetadata",
                        &crate::http::view::partial(o, v),
                    )
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(err)?;
            let meta = Value::Object(list_meta(res, page));
            crate::proto::envelope::encode_list(av, "PartialObjectMetadataList", &meta, &items).map_err(err)
        }
        _ => {
            let av = res.api_version();
            let items = page
                .items
                .iter()
                .map(|o| {
                    let v: Value =
                        serde_json::from_slice(o.item_json()).expect("stored objects are valid JSON");
                    crate::proto::envelope::encode_item(&av, &res.kind, &v)
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(err)?;
            let meta = Value::Object(list_meta(res, page));
            crate::proto::envelope::encode_list(&av, &res.list_kind(), &meta, &items).map_err(err)
        }
    }
}

/// Encodes a list response from stored item bytes: compact output is a concatenation; pretty output
/// re-parses the items (only humans ask for it).
pub fn encode_list(
    res: &ResourceDef,
    metadata: Map<String, Value>,
    items: &[Arc<Obj>],
    pretty: bool,
) -> Vec<u8> {
    if pretty {
        let values: Vec<Value> = items
            .iter()
            .map(|o| serde_json::from_slice(o.item_json()).expect("stored objects are valid JSON"))
            .collect();
        let mut m = Map::new();
        if res.builtin {
            m.insert("kind".into(), json!(res.list_kind()));
            m.insert("apiVersion".into(), json!(res.api_version()));
            m.insert("metadata".into(), Value::Object(metadata));
            m.insert("items".into(), Value::Array(values));
        } else {
            m.insert("apiVersion".into(), json!(res.api_version()));
            m.insert("items".into(), Value::Array(values));
            m.insert("kind".into(), json!(res.list_kind()));
            m.insert("metadata".into(), Value::Object(metadata));
        }
        return crate::json::body(&Value::Object(m), true);
    }
    let size: usize = items.iter().map(|o| o.item_json().len() + 1).sum();
    let mut out = Vec::with_capacity(size + 256);
    let meta = crate::json::compact(&Value::Object(metadata));
    let kind = crate::json::compact(&json!(res.list_kind()));
    let api_version = crate::json::compact(&json!(res.api_version()));
    let push_items = |out: &mut Vec<u8>| {
        out.extend_from_slice(b"\"items\":[");
        for (i, o) in items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(o.item_json());
        }
        out.push(b']');
    };
    if res.builtin {
        // Typed list: kind, apiVersion, metadata, items.
        out.extend_from_slice(b"{\"kind\":");
        out.extend_from_slice(&kind);
        out.extend_from_slice(b",\"apiVersion\":");
        out.extend_from_slice(&api_version);
        out.extend_from_slice(b",\"metadata\":");
        out.extend_from_slice(&meta);
        out.push(b',');
        push_items(&mut out);
    } else {
        // UnstructuredList: a map, so Go sorts its keys.
        out.extend_from_slice(b"{\"apiVersion\":");
        out.extend_from_slice(&api_version);
        out.push(b',');
        push_items(&mut out);
        out.extend_from_slice(b",\"kind\":");
        out.extend_from_slice(&kind);
        out.extend_from_slice(b",\"metadata\":");
        out.extend_from_slice(&meta);
    }
    out.extend_from_slice(b"}\n");
    out
}

/// The result of a list read, before encoding.
pub struct Page {
    pub rev: u64,
    pub items: Vec<Arc<Obj>>,
    pub cont: Option<String>,
    pub remaining: Option<u64>,
}

/// List metadata in ListMeta order (custom resources: sorted, with `continue` always present).
pub fn list_meta(res: &ResourceDef, page: &Page) -> Map<String, Value> {
    let mut meta = Map::new();
    if res.builtin {
        meta.insert("resourceVersion".into(), json!(page.rev.to_string()));
        if let Some(c) = &page.cont {
            meta.insert("continue".into(), json!(c));
        }
        if let Some(r) = page.remaining {
            meta.insert("remainingItemCount".into(), json!(r));
        }
    } else {
        meta.insert("continue".into(), json!(page.cont.clone().unwrap_or_default()));
        if let Some(r) = page.remaining {
            meta.insert("remainingItemCount".into(), json!(r));
        }
        meta.insert("resourceVersion".into(), json!(page.rev.to_string()));
    }
    meta
}

/// Waits (up to the cache's blockTimeout) until the revision reaches `rv`, else 504 with Retry-After.
pub async fn wait_fresh(ctx: &Ctx, rv: u64) -> Result<(), ApiError> {
    if ctx.state.store.wait_for(rv, ctx.state.cfg.wait_timeout).await {
        Ok(())
    } else {
        Err(ApiError::too_large(rv, ctx.state.store.current_rev(), TOO_LARGE_RETRY_AFTER_SECONDS))
    }
}

/// A read the watch cache serves only once it is fresh — a consistent one, or one at a revision the cache
/// has not reached — makes the cache catch up with etcd (`Store::catch_up`); its bookmarks show it.
pub fn cache_catches_up(store: &Store, id: ResId, rv: Rv) {
    match rv {
        Rv::Unset => {
            store.catch_up(id);
        }
        Rv::At(n) if n > store.cache_rev(id) => {
            store.catch_up(id);
        }
        Rv::At(_) | Rv::Zero => {}
    }
}

/// Where a recursive read starts and at which revision.
enum ReadAt {
    /// The latest state; the token carries the read's revision.
    Latest,
    /// A snapshot at this revision; 410 `list_too_old` when compacted.
    Exact(u64),
    /// A continue token's revision; 410 inconsistent-continue when compacted.
    Continue(u64),
}

/// Serves a list for `res` within `ns` (None = all namespaces or cluster-scoped).
pub async fn list(ctx: &Ctx, id: ResId, ns: Option<&str>, opts: &ListOptions) -> Result<Page, ApiError> {
    let store = &ctx.state.store;
    let res = store.resource(id).clone();
    // A metadata.namespace selector narrows a cluster-wide request (when it is a valid name).
    let scope_ns = ns.or(if res.namespaced { opts.pinned_namespace().filter(|n| valid_ns(n)) } else { None });
    let prefix = match (res.namespaced, scope_ns) {
        (true, Some(n)) => format!("{n}/"),
        _ => String::new(),
    };

    // Non-recursive: an exact metadata.name with a buildable key and no continue (registry/generic/registry/
    // store.go: Store.ListPredicate).
    if let Some(name) = opts.pinned_name()
        && opts.cont.is_none()
        && (!res.namespaced || scope_ns.is_some())
    {
        let key = format!("{prefix}{name}");
        let exact = match opts.rv {
            Rv::At(n) if opts.rvm == Rvm::Exact || (opts.rvm == Rvm::Unset && opts.limit > 0) => Some(n),
            _ => None,
        };
        let (rev, obj) = match exact {
            Some(n) => {
                // Served by etcd: a future revision fails at once, without Retry-After.
                let cur = store.current_rev();
                if n > cur {
                    return Err(ApiError::too_large(n, cur, 0));
                }
                let obj = store.get(id, &key, Some(n)).map_err(|_| ApiError::list_too_old())?;
                (n, obj)
            }
            None => {
                if let Rv::At(n) = opts.rv {
                    wait_fresh(ctx, n).await?;
                }
                cache_catches_up(store, id, opts.rv);
                let (rev, mut items) =
                    store.range(id, &key, &key, None).map_err(|_| ApiError::list_too_old())?;
                let obj = items.drain(..).find(|(k, _)| *k == key).map(|(_, v)| v);
                (rev, obj)
            }
        };
        let items = obj.into_iter().filter(|o| opts.matches(o)).collect();
        return Ok(Page { rev, items, cont: None, remaining: None });
    }

    let mut limit = opts.limit;
    let mut start = String::new();
    let read = match (&opts.cont, opts.rv) {
        (Some(c), rv) => {
            // RV=0 with a continue token is served from the cache, which ignores the limit.
            if rv == Rv::Zero {
                limit = 0;
            }
            start = format!("{prefix}{}", c.start);
            if c.rv > 0 { ReadAt::Continue(c.rv as u64) } else { ReadAt::Latest }
        }
        (None, Rv::Unset) => {
            cache_catches_up(store, id, opts.rv);
            ReadAt::Latest
        }
        (None, Rv::Zero) => {
            limit = 0;
            ReadAt::Latest
        }
        (None, Rv::At(n)) => {
            if opts.rvm == Rvm::Exact || (opts.rvm == Rvm::Unset && opts.limit > 0) {
                ReadAt::Exact(n)
            } else {
                wait_fresh(ctx, n).await?;
                cache_catches_up(store, id, opts.rv);
                ReadAt::Latest
            }
        }
    };
    let at = match read {
        ReadAt::Latest => None,
        ReadAt::Exact(n) | ReadAt::Continue(n) => {
            if n > store.current_rev() {
                wait_fresh(ctx, n).await?;
            }
            Some(n)
        }
    };
    match read_page(store, id, opts, &prefix, &start, at, limit) {
        Ok(page) => Ok(page),
        Err(ReadError::Compacted(_)) => Err(match (&read, &opts.cont) {
            (ReadAt::Continue(_), Some(c)) => {
                ApiError::inconsistent_continue(token::encode_start(-1, &c.start))
            }
            _ => ApiError::list_too_old(),
        }),
    }
}

/// Reads one page of the live keys under `prefix` from `start` at revision `at` (None = latest): the
/// items passing the request's selectors, cut at `limit` (0 or less = no limit). The walk stops at the
/// limit, as etcd's and the watch cache's do, so a `limit=1` probe costs one key, not the whole range. A
/// token follows a full page when any live key remains after its last item; remainingItemCount only
/// without selectors (storage/etcd3/store.go: store.GetList).
fn read_page(
    store: &Store,
    id: ResId,
    opts: &ListOptions,
    prefix: &str,
    start: &str,
    at: Option<u64>,
    limit: i64,
) -> Result<Page, ReadError> {
    let matches = |o: &Obj| opts.matches(o);
    let select: Option<&dyn Fn(&Obj) -> bool> = if opts.predicate_empty() { None } else { Some(&matches) };
    let (rev, page) = store.page(id, prefix, start, at, usize::try_from(limit).unwrap_or(0), select)?;
    let (cont, remaining) = match page.more {
        Some(m) => {
            let rel = m.last_key.strip_prefix(prefix).unwrap_or(&m.last_key);
            (Some(token::encode(rev as i64, rel)), m.remaining)
        }
        None => (None, None),
    };
    Ok(Page { rev, items: page.items, cont, remaining })
}

/// Whether `s` is a valid namespace name (DNS-1123 label), required before it narrows a key range.
fn valid_ns(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

#[cfg(test)]
mod tests;
