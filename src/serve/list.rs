//! Lists and gets served from memory.

use std::sync::Arc;
use tokio::time::Instant;

use bytes::{BufMut, Bytes};
use http::{HeaderValue, Response, StatusCode, header};

use crate::codec::list::View;
use crate::codec::{gzip, list as listcodec, pretty, token};
use crate::fresh::Freshness;
use crate::fresh::census::{Continued, Scope};
use crate::front::body::{self, Body};
use crate::metrics::Metrics;
use crate::resource::ResourceInfo;
use crate::serve::admit::{self, Admission, ReadBudget};
use crate::serve::bodycache::{Assembly, BodyCache, CachedBody, Lookup};
use crate::serve::gzcache::GzipCache;
use crate::serve::protobuf::{self, ProtoTarget};
use crate::serve::read::{ContinueAt, ListPlan, Match, ReadAt, Rv, plan_list, plan_single};
use crate::serve::resolve::{ResolveError, Resolved, read_bytes, resolve};
use crate::serve::scan::{ScanRequest, scan};
use crate::store::{Object, Store, make_key};

/// A validated list request, in the terms the store understands.
pub(crate) struct ListQuery<'a> {
    pub rv: Rv,
    pub rvm: Match,
    pub limit: i64,
    pub cont: Option<ContinueAt>,
    /// Namespace to scan (from the URL, or a `metadata.namespace=` selector on a cluster-wide request).
    pub namespace: Option<&'a str>,
    /// The single name a `metadata.name=` field selector pins (a non-recursive list), when no continue is set.
    pub single_name: Option<&'a str>,
    pub has_selector: bool,
    /// Label and field selector matching.
    pub matches: &'a (dyn Fn(&Object) -> bool + Sync),
    pub response: ResponseOptions,
    pub arrived: Instant,
    /// The last write through kache to this resource: a consistent read reflects at least it.
    pub min_rv: u64,
    pub block_timeout: std::time::Duration,
    /// Compressed bodies of hot full lists.
    pub gzip_cache: Option<&'a GzipCache>,
    /// Uncompressed bodies of hot full lists.
    pub body_cache: Option<&'a Arc<BodyCache>>,
    /// The byte budget of lists in flight (`None`: unlimited).
    pub budget: Option<&'a Arc<ReadBudget>>,
    /// Full objects, or the PartialObjectMetadata view.
    pub view: View,
    /// Protobuf instead of JSON (`view` is then `Full` or `Metadata`, matching the target).
    pub proto: Option<&'a ProtoTarget>,
    /// The kache's metrics (protobuf transcode failures).
    pub metrics: &'a Metrics,
}

/// How the response body is encoded.
#[derive(Clone, Copy, Debug, Default)]
pub struct ResponseOptions {
    /// The client accepts gzip (exact `gzip` token in Accept-Encoding).
    pub gzip: bool,
    /// Go-style indentation (`?pretty=true`, curl/Wget user agents).
    pub pretty: bool,
}

/// A read that could not be answered from memory.
#[derive(Debug)]
pub enum NotServed {
    /// Forward the request upstream unchanged (the apiserver would have read etcd here).
    Forward(&'static str),
    /// A consistent read could not be proven fresh in time (forward or 429, as configured).
    NotFresh,
    /// 504 "Too large resource version".
    TooLarge { requested: u64, current: u64 },
    /// The read byte budget is spent: 429 with `Retry-After` ([`admit::too_many_requests`]).
    Overloaded,
}

impl From<ResolveError> for NotServed {
    fn from(e: ResolveError) -> Self {
        match e {
            ResolveError::NotRetained(_) => NotServed::Forward("snapshot not retained"),
            ResolveError::Ahead(_) => NotServed::Forward("revision ahead of the store, reached upstream"),
            ResolveError::NotFresh(_) => NotServed::NotFresh,
            ResolveError::TooLarge { requested, current } => NotServed::TooLarge { requested, current },
        }
    }
}

/// Serves a list from `store`.
pub(crate) async fn serve_list(
    store: &Arc<Store>,
    q: &ListQuery<'_>,
    freshness: &Freshness,
) -> Result<(Response<Body>, ListStats), NotServed> {
    let info = store.info();
    if let Some(name) = q.single_name {
        let Some(at) = plan_single(q.rv, q.rvm, q.limit) else {
            return Err(NotServed::Forward("exact single-key list"));
        };
        let bytes = read_bytes(store, 1);
        let resolved =
            resolve(store, at, freshness, q.arrived, q.min_rv, q.block_timeout, bytes, None).await?;
        let (key, _) = make_key(q.namespace, name);
        let items: Vec<Arc<Object>> =
            resolved.snapshot.objects.get(&key).filter(|o| (q.matches)(o)).cloned().into_iter().collect();
        // The cache reports its own RV for single-key reads (`watch_cache.go` WaitUntilFreshAndGet).
        let meta = listcodec::ListMeta { resource_version: resolved.snapshot.rv, ..Default::default() };
        let stats = ListStats { fetched: items.len(), returned: items.len() };
        let admission = Admission::new(q.budget);
        let resp = match q.proto {
            Some(target) => {
                respond_proto(info, target, &meta, &items, q, Reuse::default(), admission).await?
            }
            None => {
                respond(info, &meta, items, q.response, Reuse::default(), q.view.clone(), admission).await?
            }
        };
        return Ok((resp, stats));
    }
    let ListPlan::Memory { at, limit, start_key } = plan_list(q.rv, q.rvm, q.limit, q.cont.as_ref()) else {
        return Err(NotServed::Forward("plan"));
    };
    // The size only matters when the read may have to wait or be forwarded.
    let bytes = match at {
        ReadAt::Current => 0,
        _ => read_bytes(store, list_size(store, q.namespace, limit)),
    };
    // What a census deciding this read covers: its namespace (a name the upstream's path takes as is) and, for
    // a page, its objects: the first ones, or those its continue token (at a revision) starts at.
    let continued = match &q.cont {
        None => None,
        Some(c) if c.rv > 0 && limit > 0 => Continued::new(&c.token, &c.start_key),
        Some(_) => None,
    };
    let scope = match q.namespace {
        _ if q.has_selector || (q.cont.is_some() && continued.is_none()) => None,
        Some(ns) if !crate::serve::reads::is_dns_label(ns) => None,
        namespace => Some(Scope { namespace: namespace.map(Into::into), limit, continued }),
    };
    let Resolved { snapshot, rv } =
        resolve(store, at, freshness, q.arrived, q.min_rv, q.block_timeout, bytes, scope.as_ref()).await?;
    // A whole resource or namespace at a current snapshot: its body (compressed, or as sent) can be reused.
    // (Tables are never cached: their ages move with the clock.)
    let cacheable = limit == 0
        && !q.has_selector
        && q.cont.is_none()
        && !matches!(at, ReadAt::Exact(_))
        && !matches!(q.view, View::Table(_));
    let encoding = if q.proto.is_some() { "protobuf" } else { "json" };
    let key = format!("{}|{}|{:?}|{encoding}", info.gvr, q.namespace.unwrap_or(""), q.view);
    // Sent as is (neither gzipped nor indented): from the body cache when this snapshot's body is there.
    let plain = !q.response.gzip && !q.response.pretty;
    let body_cache = q.body_cache.filter(|_| cacheable && plain);
    let mut assembly = None;
    if let Some(cache) = body_cache {
        let hit = match cache.lookup(&key, rv) {
            Lookup::Hit(hit) => Some(hit),
            // Another list of this snapshot is assembling the body (a relist storm): send it from there. `None`:
            // that list went away first; this one assembles its own.
            Lookup::Pending(pending) => pending.wait().await,
            Lookup::Miss { assembly: a } => {
                assembly = a;
                None
            }
        };
        if let Some(hit) = hit {
            let stats = ListStats { fetched: snapshot.objects.len(), returned: hit.items };
            let content_type =
                if q.proto.is_some() { crate::codec::proto::MEDIA_TYPE } else { "application/json" };
            return Ok((respond_cached(hit, content_type, q.budget)?, stats));
        }
    }
    // A list is admitted by its estimated size before its objects are walked, so that a refusal (429) costs no
    // pass over them (a list of 100k pods: ~5 ms of a runtime worker; 30 refused lists at once held both workers
    // of a 2-core machine for 150 ms). The apiserver's priority and fairness likewise admits a list by its
    // estimated cost, the objects it may return, before doing it; a selector's list is judged by the objects it
    // scans. The estimate (objects × their average stored size) is above the JSON it becomes, so near the
    // budget's limit a list is refused a little early; the exact size is charged after the walk.
    let gzip_cache = q.gzip_cache.filter(|_| cacheable);
    let produced = (q.response.pretty && q.proto.is_none()) || (q.response.gzip && gzip_cache.is_none());
    let mut admission = Admission::new(q.budget);
    // (Counting a namespace's objects is skipped when nothing could be refused: the whole resource fits.)
    if let Some(budget) = q.budget.filter(|b| produced || !b.would_fit(read_bytes(store, snapshot.len()))) {
        let estimate = read_bytes(store, list_size(store, q.namespace, limit));
        if !budget.has_room(estimate) {
            return Err(NotServed::Overloaded);
        }
        // A body produced on the fly takes its heavy-body slot now for the same reason.
        if produced && gzip::should_compress(estimate) {
            admission.slot = admission.heavy().map_err(|_| NotServed::Overloaded)?;
        }
    }
    let req = ScanRequest {
        namespace: q.namespace,
        start: start_key.as_deref(),
        limit,
        has_selector: q.has_selector,
    };
    let page = scan(&snapshot, &req, |o| (q.matches)(o));
    let continue_token = page
        .continue_after
        .as_ref()
        .map(|key| token::encode(rv as i64, token::relative_key(key, q.namespace)));
    let meta =
        listcodec::ListMeta { resource_version: rv, continue_token, remaining_item_count: page.remaining };
    let stats = ListStats { fetched: snapshot.objects.len(), returned: page.items.len() };
    let record = assembly.map(|assembly| Record { assembly, items: page.items.len() });
    let reuse = Reuse { gzip: gzip_cache.map(|c| (c, key.as_str())), record };
    let resp = match q.proto {
        Some(target) => respond_proto(info, target, &meta, &page.items, q, reuse, admission).await?,
        None => respond(info, &meta, page.items, q.response, reuse, q.view.clone(), admission).await?,
    };
    Ok((resp, stats))
}

/// How a list's body may be shared: its compressed form through the gzip cache, its plain form recorded in
/// the body cache.
#[derive(Default)]
pub struct Reuse<'a> {
    pub gzip: Option<(&'a GzipCache, &'a str)>,
    pub record: Option<Record>,
}

/// A list body sent as is that is assembled once for the body cache, for the next lists of the same snapshot
/// (and those waiting for it now).
pub struct Record {
    pub assembly: Assembly,
    pub items: usize,
}

// === impl Record ===

impl Record {
    /// The body of `chunks` (`len` bytes): assembled, published and sent from the cached chunks when it fits
    /// the cache; otherwise streamed as produced (the lists waiting for it then assemble their own).
    pub async fn body<I>(self, len: usize, chunks: I) -> Body
    where
        I: Iterator<Item = Bytes> + Send + Sync + 'static,
    {
        if !self.assembly.fits(len) {
            return body::stream_iter(chunks);
        }
        body::stream_iter(self.assembly.finish(len, self.items, chunks).await.iter())
    }
}

/// A list sent from the body cache, charged to `budget` until its body ends.
fn respond_cached(
    hit: CachedBody,
    content_type: &'static str,
    budget: Option<&Arc<ReadBudget>>,
) -> Result<Response<Body>, NotServed> {
    let charge = budget.map(|b| b.try_charge(hit.len)).transpose().map_err(|_| NotServed::Overloaded)?;
    let resp = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, HeaderValue::from_static(content_type))
        .header(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"))
        .header(header::CONTENT_LENGTH, hit.len)
        .body(body::stream_iter(hit.iter()))
        .expect("static headers are valid");
    Ok(match charge {
        Some(charge) => admit::hold(resp, charge),
        None => resp,
    })
}

/// Counting a namespace's objects stops here: past it, the read is big either way.
const SIZE_COUNT_CAP: usize = 10_000;

/// How many objects a list returns, roughly (the page size, the namespace's objects, or all), to estimate
/// what forwarding it would cost.
pub(crate) fn list_size(store: &Store, namespace: Option<&str>, limit: usize) -> usize {
    let snapshot = store.current();
    let all = match namespace {
        Some(ns) => snapshot.namespace_range(ns).take(SIZE_COUNT_CAP).count(),
        None => snapshot.len(),
    };
    if limit > 0 { all.min(limit) } else { all }
}

/// Objects examined and returned, for metrics.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ListStats {
    pub fetched: usize,
    pub returned: usize,
}

/// A get of one object.
pub(crate) struct GetQuery<'a> {
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    pub rv: Rv,
    pub arrived: Instant,
    pub min_rv: u64,
    pub block_timeout: std::time::Duration,
    pub response: ResponseOptions,
    pub view: View,
    /// Protobuf instead of JSON.
    pub proto: Option<&'a ProtoTarget>,
    /// The kache's metrics (protobuf transcode failures).
    pub metrics: &'a Metrics,
}

/// Serves a get of one object; `Ok(None)` when it does not exist.
pub(crate) async fn serve_get(
    store: &Arc<Store>,
    q: &GetQuery<'_>,
    freshness: &Freshness,
) -> Result<Option<Response<Body>>, NotServed> {
    let GetQuery { namespace, name, rv, arrived, min_rv, block_timeout, response, ref view, proto, metrics } =
        *q;
    let view = view.clone();
    let Some(at) = plan_single(rv, Match::Unset, 0) else {
        return Err(NotServed::Forward("exact get"));
    };
    let bytes = read_bytes(store, 1);
    let resolved = resolve(store, at, freshness, arrived, min_rv, block_timeout, bytes, None).await?;
    let (key, _) = make_key(namespace, name);
    if let Some(target) = proto {
        let Some(o) = resolved.snapshot.objects.get(&key) else { return Ok(None) };
        return match protobuf::get_response(target, o, &store.info().gvr, metrics, response) {
            Some(resp) => Ok(Some(resp)),
            None => Err(NotServed::Forward("not transcodable to protobuf")),
        };
    }
    // Compact JSON ends with the newline `json.Encoder.Encode` appends.
    Ok(resolved.snapshot.objects.get(&key).map(|o| {
        let object = match view {
            View::Full => o.raw.clone(),
            View::Metadata => {
                let mut out = bytes::BytesMut::new();
                listcodec::put_partial(&mut out, o);
                out.freeze()
            }
            // A get's Table: one row, at the object's resourceVersion (`meta.CommonAccessor`).
            View::Table(table) => {
                let meta = listcodec::ListMeta { resource_version: o.resource_version, ..Default::default() };
                let mut out = table.header(&meta, true);
                table.put_row(&mut out, o, crate::codec::table::age::now_ms());
                out.put_slice(b"]}");
                out.freeze()
            }
        };
        respond_bytes(vec![object, Bytes::from_static(b"\n")], response)
    }))
}

/// Builds the list response, streamed with bounded buffers: compact JSON chunks produced as the body is sent,
/// re-indented chunk by chunk when pretty output is asked, gzipped on the fly (or, for a whole resource or
/// namespace, compressed once per snapshot on the blocking pool and shared through `cache`) when the
/// apiserver would compress. The list is charged to `budget` until its body ends.
pub(crate) async fn respond(
    info: &ResourceInfo,
    meta: &listcodec::ListMeta,
    items: Vec<Arc<Object>>,
    opts: ResponseOptions,
    reuse: Reuse<'_>,
    view: View,
    admission: Admission<'_>,
) -> Result<Response<Body>, NotServed> {
    let Reuse { gzip: cache, record } = reuse;
    let is_table = matches!(view, View::Table(_));
    let chunks = listcodec::ListChunks::with_view(info, meta, items, view);
    // Tables are built whole (as the apiserver does: their age cells are rendered per response) rather than
    // sized twice, and charged to the budget like any list.
    if is_table {
        let parts: Vec<Bytes> = chunks.collect();
        let len = parts.iter().map(Bytes::len).sum();
        let charge = admission.charge(len).map_err(|_| NotServed::Overloaded)?;
        let resp = respond_bytes(parts, opts);
        return Ok(match charge {
            Some(charge) => admit::hold(resp, charge),
            None => resp,
        });
    }
    let len = chunks.total_len();
    let charge = admission.charge(len).map_err(|_| NotServed::Overloaded)?;
    let resp = if opts.pretty && !gzip::should_compress(len) {
        // Small: whether the indented form crosses the gzip threshold decides compression, so build it whole.
        respond_bytes(chunks.collect(), opts)
    } else {
        respond_streamed(chunks, len, opts, cache, record, meta.resource_version, admission).await?
    };
    Ok(match charge {
        Some(charge) => admit::hold(resp, charge),
        None => resp,
    })
}

/// Builds a list response in protobuf (see [`protobuf::list_response`]) with `q`'s response options, budget
/// and metrics; a list with an object that cannot be transcoded is forwarded.
async fn respond_proto(
    info: &ResourceInfo,
    target: &ProtoTarget,
    meta: &listcodec::ListMeta,
    items: &[Arc<Object>],
    q: &ListQuery<'_>,
    reuse: Reuse<'_>,
    admission: Admission<'_>,
) -> Result<Response<Body>, NotServed> {
    let Reuse { gzip: cache, record } = reuse;
    let Some(chunks) = protobuf::ProtoListChunks::new(target, &info.gvr, q.metrics, meta, items) else {
        return Err(NotServed::Forward("not transcodable to protobuf"));
    };
    let cache = cache.map(|(cache, key)| protobuf::ListCache { cache, key: key.to_owned() });
    protobuf::list_response(chunks, q.response, cache, record, meta.resource_version, admission).await
}

/// A list body larger than the gzip threshold (or not pretty), never whole in memory unless compressed.
async fn respond_streamed(
    chunks: listcodec::ListChunks,
    len: usize,
    opts: ResponseOptions,
    cache: Option<(&GzipCache, &str)>,
    record: Option<Record>,
    rv: u64,
    mut admission: Admission<'_>,
) -> Result<Response<Body>, NotServed> {
    // A body produced on the fly (pretty-printed or gzipped) needs a heavy-body slot, taken before anything
    // is sent so that a refusal is still a 429 (`admit::HEAVY_BODIES_PER_PRODUCER`).
    let compress = opts.gzip && gzip::should_compress(len);
    let heavy = opts.pretty || (compress && cache.is_none());
    let slot = if heavy { admission.heavy().map_err(|_| NotServed::Overloaded)? } else { None };
    let builder = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))
        .header(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    let (builder, body) = if compress {
        let builder = builder
            .header(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"))
            .header(header::VARY, HeaderValue::from_static("Accept-Encoding"));
        // Compression and indentation are produced off the runtime workers (`admit::offloaded`).
        match (cache, opts.pretty) {
            (_, true) => (
                builder,
                admit::offloaded(
                    admission.producers(),
                    gzip::GzipChunks::new(pretty::PrettyChunks::new(chunks)),
                ),
            ),
            (Some((cache, key)), false) => {
                let compressed = cache.get_or_compress(&admission.producers(), key, rv, chunks).await;
                (builder.header(header::CONTENT_LENGTH, compressed.len()), body::full(compressed))
            }
            (None, false) => {
                (builder, admit::offloaded(admission.producers(), gzip::GzipChunks::new(chunks)))
            }
        }
    } else if opts.pretty {
        (builder, admit::offloaded(admission.producers(), pretty::PrettyChunks::new(chunks)))
    } else {
        let body = match record {
            Some(record) => record.body(len, chunks).await,
            None => body::stream_iter(chunks),
        };
        (builder.header(header::CONTENT_LENGTH, len), body)
    };
    let body = match slot {
        Some(slot) => body::guarded(body, slot),
        None => body,
    };
    Ok(builder.body(body).expect("static headers are valid"))
}

/// A 200 JSON response from chunks, applying pretty printing and gzip (level 1, > 128 KiB).
pub(crate) fn respond_bytes(mut chunks: Vec<Bytes>, opts: ResponseOptions) -> Response<Body> {
    if opts.pretty {
        // `json.MarshalIndent` output, which has no trailing newline.
        let whole: Vec<u8> = chunks.concat();
        chunks = vec![Bytes::from(pretty::indent(whole.trim_ascii_end()))];
    }
    let len: usize = chunks.iter().map(Bytes::len).sum();
    let mut builder = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))
        .header(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    let body = if opts.gzip && gzip::should_compress(len) {
        builder = builder
            .header(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"))
            .header(header::VARY, HeaderValue::from_static("Accept-Encoding"));
        body::full(gzip::compress(&chunks))
    } else if chunks.len() == 1 {
        builder = builder.header(header::CONTENT_LENGTH, len);
        body::full(chunks.pop().expect("one chunk"))
    } else {
        builder = builder.header(header::CONTENT_LENGTH, len);
        body::stream_iter(chunks.into_iter())
    };
    builder.body(body).expect("static headers are valid")
}

#[cfg(test)]
mod tests;
