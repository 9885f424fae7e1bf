//! The read slices: get, list and watch of a cached resource, each from its options to its response. The
//! pipeline hands a read here once it is routed, authenticated, admitted and authorized, with the store
//! that can answer it; each slice decodes and validates the apiserver's options (400/422 as a Status),
//! checks a filtered mirror's coverage, plans the read and writes the response, or says why memory cannot
//! answer ([`NotServed`]) so the pipeline forwards it.

use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use http::{Request, Response, header};
use tokio_util::sync::CancellationToken;

use crate::codec::list::View;
use crate::codec::status::ApiError;
use crate::codec::table::Printer;
use crate::fresh::{Fresh, Freshness};
use crate::front::body::Body;
use crate::front::negotiate;
use crate::front::respond;
use crate::front::route::{ResourceRequest, Verb};
use crate::metrics::Metrics;
use crate::options::coverage::Requested;
use crate::options::params::{self, ListOptions, RvMatch};
use crate::reflector::Registry;
use crate::serve::admit::{DEFAULT_MAX_READ_BYTES_IN_FLIGHT, ReadBudget};
use crate::serve::bodycache::BodyCache;
use crate::serve::crd_fields::CrdFields;
use crate::serve::gzcache::GzipCache;
use crate::serve::list::{GetQuery, ListQuery, NotServed, ResponseOptions, list_size, serve_get, serve_list};
use crate::serve::protobuf::ProtoTarget;
use crate::serve::read::{ContinueAt, Match, Rv};
use crate::serve::resolve::BLOCK_TIMEOUT;
use crate::serve::watch::{self, WatchConfig, WatchView};
use crate::store::{Object, Store};

/// Tunables of the from-memory paths.
#[derive(Clone, Debug)]
pub struct ReadConfig {
    pub watch: WatchConfig,
    /// How long reads wait for the store to reach a requested resourceVersion (the apiserver's 3 s).
    pub block_timeout: Duration,
}

impl Default for ReadConfig {
    fn default() -> Self {
        Self { watch: WatchConfig::default(), block_timeout: BLOCK_TIMEOUT }
    }
}

/// What the read slices share: the registry of stores, the freshness proof, the caches and budgets.
pub(crate) struct Reads {
    registry: Arc<Registry>,
    freshness: Arc<Freshness>,
    gzip_cache: GzipCache,
    body_cache: Arc<BodyCache>,
    /// Bytes of memory-served lists in flight (`--max-read-bytes-inflight`).
    read_budget: Arc<ReadBudget>,
    /// Custom resources' selectable fields, from the cached CRDs.
    crd_fields: CrdFields,
    config: ReadConfig,
    /// Whether a CRD's store may be started on demand to learn its selectable fields.
    lazy: bool,
    shutdown: CancellationToken,
    /// The kache's metrics.
    metrics: Metrics,
    /// The kache's Table state (row cache, CRD column sets, learned generic columns).
    tables: Arc<crate::codec::table::Tables>,
    /// The kache's watch frames shared between watchers.
    frames: Arc<watch::shared::SharedFrames>,
    /// The kache's heavy-body producers (every read budget it makes produces on them).
    producers: Arc<crate::serve::admit::Producers>,
}

// === impl Reads ===

impl Reads {
    pub(crate) fn new(
        registry: Arc<Registry>,
        freshness: Arc<Freshness>,
        config: ReadConfig,
        lazy: bool,
        shutdown: CancellationToken,
        metrics: Metrics,
        producers: Arc<crate::serve::admit::Producers>,
    ) -> Self {
        Self {
            registry,
            freshness,
            gzip_cache: GzipCache::new(crate::serve::gzcache::MAX_BYTES, metrics.clone()),
            body_cache: Arc::new(BodyCache::new(crate::serve::bodycache::MAX_BYTES, metrics.clone())),
            read_budget: Arc::new(
                ReadBudget::new(DEFAULT_MAX_READ_BYTES_IN_FLIGHT)
                    .with_metrics(metrics.clone())
                    .with_producers(producers.clone()),
            ),
            crd_fields: CrdFields::default(),
            config,
            lazy,
            shutdown,
            metrics,
            tables: Arc::default(),
            frames: Arc::default(),
            producers,
        }
    }

    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Limits the bytes of memory-served lists in flight and the heavy bodies among them (0: unlimited); see
    /// [`crate::serve::admit`].
    pub(crate) fn with_read_budget(mut self, max_bytes: usize, max_heavy_bodies: usize) -> Self {
        let producers = self.producers.clone();
        self.read_budget = Arc::new(
            ReadBudget::with_heavy_limit(max_bytes, max_heavy_bodies)
                .with_metrics(self.metrics.clone())
                .with_producers(producers),
        );
        self
    }

    /// Keeps at most `max_bytes` of whole-list bodies for resending (`--list-body-cache-bytes`; 0: none).
    pub(crate) fn with_list_body_cache(mut self, max_bytes: usize) -> Self {
        self.body_cache = Arc::new(BodyCache::new(max_bytes, self.metrics.clone()));
        self
    }

    /// Prints Tables with this kache's Table state (the app shares it with its metrics source).
    pub(crate) fn with_tables(mut self, tables: Arc<crate::codec::table::Tables>) -> Self {
        self.tables = tables;
        self
    }

    /// The kache's Table state.
    pub(crate) fn tables(&self) -> &Arc<crate::codec::table::Tables> {
        &self.tables
    }

    pub(crate) fn freshness(&self) -> &Arc<Freshness> {
        &self.freshness
    }

    /// The printer of a Table of `r` from memory: the apiserver's own printer of a v1 kind, a custom
    /// resource's CRD columns, or the generic convertor once learned; `None` when kache cannot print it.
    pub(crate) fn table_printer(&self, store: &Store, r: &ResourceRequest) -> Option<Printer> {
        Printer::for_resource(&r.gvr.group, &r.gvr.resource)
            .filter(|_| r.gvr.version == "v1")
            .or_else(|| self.custom_printer(store, r))
            .or_else(|| self.generic_printer(store, r))
    }

    /// The list options of a list or watch (steps 2–5). A custom resource's field selector naming more
    /// than its object meta is converted with the CRD's `selectableFields` for the requested version
    /// (learned from the cached CRDs): filtered from memory, or the apiserver's `field label not
    /// supported: f`. `NotServed` while kache cannot tell which fields the CRD declares.
    fn list_options(
        &self,
        req: &Request<Body>,
        r: &ResourceRequest,
        info: &crate::resource::ResourceInfo,
    ) -> Result<Result<ListOptions, ApiError>, NotServed> {
        let opts = match params::parse_list_options(req.uri().query(), r.legacy_watch_path) {
            Ok(opts) => opts,
            Err(e) => return Ok(Err(e)),
        };
        if info.list_items_have_type_meta
            && !crate::options::selector::custom_resource_metadata_fields(
                &opts.field_selector,
                info.namespaced,
            )
        {
            let Some(fields) = self.crd_fields.lookup(&self.registry, &info.gvr, self.lazy) else {
                return Err(NotServed::Forward("custom resource field selector: CRD not known"));
            };
            return Ok(opts.convert_custom_fields(info.namespaced, fields));
        }
        Ok(opts.convert_fields(info.field_kind()))
    }

    /// Whether memory can answer a read of this resource: always for a whole mirror; for a filtered mirror
    /// only when its selection covers the read ([`crate::options::coverage`]). Uncovered reads are counted
    /// (`kache_mirror_uncovered_total`) and forwarded.
    fn covered(&self, r: &ResourceRequest, req: Requested<'_>) -> bool {
        let Some(selector) = self.registry.mirror_selector(&r.gvr) else { return true };
        if selector.covers(&req) {
            return true;
        }
        let verb = match r.verb {
            Verb::Get => "get",
            Verb::Watch => "watch",
            _ => "list",
        };
        self.metrics.mirror_uncovered(&r.gvr, verb);
        false
    }

    /// The printer of a custom resource: its CRD's columns for the requested version, from kache's own
    /// synced store of CustomResourceDefinitions (what the apiserver's CRD handler reads from its informer).
    /// None when that store is not cached or synced, or the CRD's columns are outside what kache prints.
    fn custom_printer(&self, store: &Store, r: &ResourceRequest) -> Option<Printer> {
        if !store.info().list_items_have_type_meta {
            return None;
        }
        let crds = self.registry.get(&crate::resource::Gvr::new(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
        ))?;
        if !crds.is_synced() {
            return None;
        }
        let object = crds.current().get(&format!("{}.{}", r.gvr.resource, r.gvr.group))?.clone();
        self.tables.crd.for_crd_object(&object, &r.gvr.version).map(Printer::Custom)
    }

    /// The generic convertor's printer for a typed resource, once learned from the upstream's own Table.
    fn generic_printer(&self, store: &Store, r: &ResourceRequest) -> Option<Printer> {
        if store.info().list_items_have_type_meta {
            return None;
        }
        self.tables.generic.lookup(&r.gvr.group, &r.gvr.version, &r.gvr.resource).map(Printer::Generic)
    }

    /// A get of one object: found, a 404 Status, or not served.
    pub(crate) async fn get(
        &self,
        req: &Request<Body>,
        r: &ResourceRequest,
        store: &Arc<Store>,
        arrived: Instant,
        shape: Shape,
        min_rv: u64,
    ) -> Result<Response<Body>, NotServed> {
        let Shape { view, proto } = shape;
        let proto = proto.as_ref();
        let Some(name) = r.name.as_deref() else { return Err(NotServed::Forward("get without name")) };
        let opts = params::parse_get_options(req.uri().query());
        let response = response_options(req, opts.pretty);
        let rv = match opts.parsed_resource_version() {
            Ok(rv) => to_rv(rv),
            Err(e) => return Ok(respond::error(&e, req.headers(), response.pretty)),
        };
        let namespace = r.namespace.as_deref().filter(|_| store.info().namespaced);
        let (labels, fields) = (Default::default(), Default::default());
        if !self.covered(r, Requested { namespace, name: Some(name), labels: &labels, fields: &fields }) {
            return Err(NotServed::Forward("outside the mirror's selection"));
        }
        let q = GetQuery {
            namespace,
            name,
            rv,
            arrived,
            min_rv,
            block_timeout: self.config.block_timeout,
            response,
            view,
            proto,
            metrics: &self.metrics,
        };
        let found = serve_get(store, &q, &self.freshness).await?;
        Ok(found.unwrap_or_else(|| {
            let err = ApiError::not_found(&r.gvr.group, &r.gvr.resource, name);
            respond::error(&err, req.headers(), response.pretty)
        }))
    }

    /// A list (paginated, filtered, in the negotiated view), or not served.
    pub(crate) async fn list(
        &self,
        req: &Request<Body>,
        r: &ResourceRequest,
        store: &Arc<Store>,
        arrived: Instant,
        shape: Shape,
        min_rv: u64,
    ) -> Result<Response<Body>, NotServed> {
        let Shape { view, proto } = shape;
        let proto = proto.as_ref();
        let info = store.info();
        let kind = info.field_kind();
        let opts = match self.list_options(req, r, info)? {
            Ok(opts) => opts,
            Err(e) => return Ok(respond::error(&e, req.headers(), false)),
        };
        let wanted = Requested {
            namespace: r.namespace.as_deref().filter(|_| info.namespaced),
            name: None,
            labels: &opts.label_selector,
            fields: &opts.field_selector,
        };
        if !self.covered(r, wanted) {
            return Err(NotServed::Forward("outside the mirror's selection"));
        }
        let response = response_options(req, opts.pretty);
        let decoded = match params::validate_for_storage(&opts) {
            Ok(d) => d,
            Err(e) => return Ok(respond::error(&e, req.headers(), response.pretty)),
        };
        let namespace = scan_namespace(r, info.namespaced, &opts);
        let cont = decoded.continue_from.as_ref().map(|c| ContinueAt {
            rv: c.rv,
            start_key: c.scan_start(namespace),
            token: opts.continue_token.clone().unwrap_or_default(),
        });
        // A `metadata.name=` selector without continue is a single-key read when a key can be built
        // (staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go: Store.ListPredicate).
        let single_name = match (opts.field_selector.exact("metadata.name"), &cont) {
            (Some(name), None) if namespace.is_some() || !info.namespaced => Some(name),
            _ => None,
        };
        let label = &opts.label_selector;
        let field = &opts.field_selector;
        let url_ns = r.namespace.as_deref();
        let matches = |o: &Object| {
            url_ns.is_none_or(|ns| o.namespace() == Some(ns)) && label.matches(o) && field.matches(o, kind)
        };
        let q = ListQuery {
            rv: to_rv(decoded.resource_version),
            rvm: to_match(opts.resource_version_match),
            limit: opts.limit,
            cont,
            namespace,
            single_name,
            has_selector: !label.is_empty() || !field.is_empty(),
            matches: &matches,
            response,
            arrived,
            min_rv,
            block_timeout: self.config.block_timeout,
            gzip_cache: Some(&self.gzip_cache),
            body_cache: Some(&self.body_cache),
            budget: Some(&self.read_budget),
            view,
            proto,
            metrics: &self.metrics,
        };
        let consistent = q.rv == Rv::Unset && q.cont.is_none();
        let (resp, stats) = serve_list(store, &q, &self.freshness).await?;
        self.metrics.list_served(&r.gvr, stats.fetched, stats.returned);
        if consistent {
            // A consistent list served from memory (the apiserver's cacher counts its lists the same way;
            // the fallbacks are counted where they are forwarded).
            self.metrics.consistent_read(&r.gvr, true, false);
        }
        Ok(resp)
    }

    /// A watch stream from memory, or not served.
    pub(crate) async fn watch(
        &self,
        req: &Request<Body>,
        r: &ResourceRequest,
        store: &Arc<Store>,
        arrived: Instant,
        shape: Shape,
        min_rv: u64,
    ) -> Result<Response<Body>, NotServed> {
        let Shape { view, proto } = shape;
        let info = store.info();
        let mut opts = match self.list_options(req, r, info)? {
            Ok(opts) => opts,
            Err(e) => return Ok(respond::error(&e, req.headers(), false)),
        };
        if let Some(name) = r.name.as_deref()
            && let Err(e) = opts.check_path_name(name)
        {
            return Ok(respond::error(&e, req.headers(), false));
        }
        let wanted = Requested {
            namespace: r.namespace.as_deref().filter(|_| info.namespaced),
            name: r.name.as_deref(),
            labels: &opts.label_selector,
            fields: &opts.field_selector,
        };
        if !self.covered(r, wanted) {
            return Err(NotServed::Forward("outside the mirror's selection"));
        }
        let rv = match opts.watch_resource_version() {
            Ok(rv) => rv,
            Err(e) => return Ok(respond::error(&e, req.headers(), false)),
        };
        // RV unset with sendInitialEvents set (after the legacy defaulting) starts at the upstream's current
        // revision (storage/cacher/cacher.go: Cacher.Watch via getWatchCacheResourceVersion): the same proof
        // as a consistent list; forwarded when it fails.
        let namespace = scan_namespace(r, info.namespaced, &opts);
        let (consistent_rv, matched) = match (rv, opts.send_initial_events) {
            (None, Some(initial)) => {
                // What a census covers: the watch's namespace (its initial events are that namespace's objects),
                // or the whole resource (one census serves every informer of a relist storm).
                let namespace = namespace.filter(|ns| is_dns_label(ns));
                let bytes = crate::serve::resolve::read_bytes(store, list_size(store, namespace, 0));
                let census = initial.then(|| crate::fresh::census::Scope {
                    namespace: namespace.map(Into::into),
                    ..Default::default()
                });
                match self.freshness.ensure(store, arrived, min_rv, bytes, true, census.as_ref()).await {
                    Ok(Fresh::At(rv)) => (Some(rv), None),
                    // Proven by a census: the initial events are the matched snapshot's, exactly.
                    Ok(Fresh::Matched(matched)) => (Some(matched.rv), Some(matched)),
                    Err(_) => return Err(NotServed::NotFresh),
                }
            }
            _ => (None, None),
        };
        let request = watch::request::WatchRequest {
            store: store.clone(),
            namespace: namespace.map(str::to_owned),
            name: opts.field_selector.exact("metadata.name").map(str::to_owned),
            consistent_rv,
            matched,
            view: match view {
                View::Full => WatchView::Full,
                View::Metadata => WatchView::PartialObjectMetadata,
                View::Table(table) => WatchView::Table(table),
            },
            opts,
            proto,
            proto_errors: negotiate::error_in_protobuf(
                req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok()),
            ),
            metrics: self.metrics.clone(),
            frames: self.frames.clone(),
        };
        watch::request::try_serve_watch(request, &self.config.watch, self.shutdown.clone())
            .map_err(|_| NotServed::Forward("not transcodable to protobuf"))
    }
}

/// What a read from memory answers with: the view of its objects, and the protobuf target when the client
/// negotiated protobuf (JSON otherwise).
pub(crate) struct Shape {
    pub(crate) view: View,
    pub(crate) proto: Option<ProtoTarget>,
}

/// The namespace a list or watch scans: the URL's, or a `metadata.namespace=` selector's on a cluster-wide
/// request of a namespaced resource (the registry narrows the key prefix the same way: staging/src/k8s.io/
/// apiserver/pkg/registry/generic/registry/store.go: Store.ListPredicate, with MatchesSingleNamespace).
fn scan_namespace<'a>(r: &'a ResourceRequest, namespaced: bool, opts: &'a ListOptions) -> Option<&'a str> {
    if !namespaced {
        return None;
    }
    r.namespace
        .as_deref()
        .or_else(|| opts.field_selector.exact("metadata.namespace").filter(|ns| is_dns_label(ns)))
}

/// A valid namespace name (DNS-1123 label).
pub(crate) fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn to_rv(rv: Option<u64>) -> Rv {
    match rv {
        None => Rv::Unset,
        Some(0) => Rv::Any,
        Some(n) => Rv::At(n),
    }
}

fn to_match(m: Option<RvMatch>) -> Match {
    match m {
        None => Match::Unset,
        Some(RvMatch::Exact) => Match::Exact,
        Some(RvMatch::NotOlderThan) => Match::NotOlderThan,
    }
}

fn response_options(req: &Request<Body>, pretty_param: Option<bool>) -> ResponseOptions {
    let headers = req.headers();
    let ua = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok());
    let ae = headers.get(header::ACCEPT_ENCODING).and_then(|v| v.to_str().ok()).unwrap_or("");
    ResponseOptions { gzip: negotiate::accepts_gzip(ae), pretty: negotiate::wants_pretty(pretty_param, ua) }
}
