//! The request handler: serves get, list and watch of cached, synced resources from memory and forwards
//! everything else upstream unchanged.
//!
//! Order for a read, as the apiserver's handlers: route → Accept negotiation (406, or forward encodings not
//! served from memory) → option decoding, defaulting and validation (400/422) → storage validation (400) →
//! the resourceVersion decision → store. Whenever memory cannot answer exactly as the apiserver would (a
//! snapshot no longer retained, a consistent read not proven fresh, an unsynced store), the original request
//! is forwarded, so clients never see a kache-only answer.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use tokio_util::sync::CancellationToken;

use crate::auth::{
    Attributes, Auth, ClientLimits, Credential, ForwardVia, Identity, Impersonation, client_key,
    has_impersonation, strip_impersonation,
};
use crate::body::{self, Body};
use crate::codec::list::View;
use crate::codec::status::{self as status, ApiError};
use crate::forward::{Forwarder, WriteTracker};
use crate::metrics;
use crate::reflector::Registry;
use crate::serve::admit::{self, DEFAULT_MAX_READ_BYTES_IN_FLIGHT, ReadBudget};
use crate::serve::coverage::Requested;
use crate::serve::crd_fields::CrdFields;
use crate::serve::fresh::{Fallback, Freshness};
use crate::serve::gzcache::GzipCache;
use crate::serve::list::{GetQuery, ListQuery, NotServed, ResponseOptions, serve_get, serve_list};
use crate::serve::negotiate;
use crate::serve::params::{self, ListOptions, RvMatch};
use crate::serve::protobuf::ProtoTarget;
use crate::serve::read::{ContinueAt, Match, Rv};
use crate::serve::resolve::BLOCK_TIMEOUT;
use crate::serve::route::{ResourceRequest, Route, Verb};
use crate::serve::server::{BoxFuture, ConnInfo, Handler};
use crate::serve::watch::{self, WatchConfig, WatchView};
use crate::store::{Object, Store};

/// Tunables of the from-memory paths.
#[derive(Clone, Debug)]
pub struct HandlerConfig {
    pub watch: WatchConfig,
    /// How long reads wait for the store to reach a requested resourceVersion (the apiserver's 3 s).
    pub block_timeout: Duration,
}

impl Default for HandlerConfig {
    fn default() -> Self {
        Self { watch: WatchConfig::default(), block_timeout: BLOCK_TIMEOUT }
    }
}

/// Where answers came from (exported as metrics; tests use them to prove a read was served from memory).
#[derive(Debug, Default)]
pub struct HandlerStats {
    /// Reads answered from memory (including Status errors kache produced itself).
    pub memory: AtomicU64,
    /// Requests forwarded upstream.
    pub forwarded: AtomicU64,
    /// Consistent reads that could not be proven fresh in time (then forwarded or 429).
    pub not_fresh: AtomicU64,
    /// Reads of cached resources answered from memory, by negotiated encoding ([`ResponseEncoding`] index).
    pub encoding_memory: [AtomicU64; ResponseEncoding::COUNT],
    /// Reads of cached resources forwarded upstream, by negotiated encoding.
    pub encoding_forwarded: [AtomicU64; ResponseEncoding::COUNT],
}

/// The encoding negotiated for a read of a cached resource (406s are not counted: no encoding was chosen).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseEncoding {
    Json,
    /// `as=PartialObjectMetadata[List]` (v1 and v1beta1) as JSON.
    PartialMetadata,
    /// `as=Table` (JSON or YAML).
    Table,
    Protobuf,
    Yaml,
    Cbor,
}

// === impl ResponseEncoding ===

impl ResponseEncoding {
    pub const COUNT: usize = 6;
    pub const ALL: [ResponseEncoding; Self::COUNT] =
        [Self::Json, Self::PartialMetadata, Self::Table, Self::Protobuf, Self::Yaml, Self::Cbor];

    /// The encoding of a negotiation outcome; `None` for a 406.
    pub fn of(n: &negotiate::Negotiated) -> Option<Self> {
        use negotiate::Negotiated as N;
        Some(match n {
            N::Json { .. } => Self::Json,
            N::JsonPartialMetadata { .. } | N::PartialMetadataV1beta1 => Self::PartialMetadata,
            N::Table | N::JsonTable { .. } => Self::Table,
            N::Protobuf(_) => Self::Protobuf,
            N::Yaml => Self::Yaml,
            N::Cbor => Self::Cbor,
            N::NotAcceptable { .. } => return None,
        })
    }

    fn index(self) -> usize {
        self as usize
    }

    /// The `encoding` label of `kache_encoding_total`.
    fn metric(self) -> metrics::Encoding {
        match self {
            Self::Json | Self::PartialMetadata | Self::Table => metrics::Encoding::Json,
            Self::Protobuf => metrics::Encoding::Protobuf,
            Self::Cbor => metrics::Encoding::Cbor,
            Self::Yaml => metrics::Encoding::Other,
        }
    }
}

impl HandlerStats {
    pub fn memory(&self) -> u64 {
        self.memory.load(Relaxed)
    }

    pub fn forwarded(&self) -> u64 {
        self.forwarded.load(Relaxed)
    }

    pub fn not_fresh(&self) -> u64 {
        self.not_fresh.load(Relaxed)
    }

    /// Reads in `encoding` answered from memory.
    pub fn encoding_memory(&self, encoding: ResponseEncoding) -> u64 {
        self.encoding_memory[encoding.index()].load(Relaxed)
    }

    /// Reads in `encoding` forwarded upstream.
    pub fn encoding_forwarded(&self, encoding: ResponseEncoding) -> u64 {
        self.encoding_forwarded[encoding.index()].load(Relaxed)
    }

    /// Counts one read of a cached resource by encoding and source (and exports it).
    fn count_encoding(&self, encoding: Option<ResponseEncoding>, from_memory: bool) {
        let Some(e) = encoding else { return };
        let (counters, served) = if from_memory {
            (&self.encoding_memory, metrics::Served::Memory)
        } else {
            (&self.encoding_forwarded, metrics::Served::Forwarded)
        };
        counters[e.index()].fetch_add(1, Relaxed);
        metrics::encoding(e.metric(), served);
    }
}

/// Serves from memory, forwards the rest.
pub struct KacheHandler {
    stats: Arc<HandlerStats>,
    gzip_cache: GzipCache,
    /// Bytes of memory-served lists in flight (`--max-read-bytes-inflight`).
    read_budget: Arc<ReadBudget>,
    registry: Arc<Registry>,
    /// Custom resources' selectable fields, from the cached CRDs.
    crd_fields: CrdFields,
    forwarder: Forwarder,
    freshness: Arc<Freshness>,
    writes: Arc<WriteTracker>,
    config: HandlerConfig,
    lazy: bool,
    shutdown: CancellationToken,
    // --- auth (k-sec): who the client is, and the client used to forward with its own credentials ---
    auth: Arc<Auth>,
    pass_through: Option<Forwarder>,
    client_limits: Arc<ClientLimits>,
}

impl Handler for KacheHandler {
    fn handle(&self, req: Request<Body>) -> BoxFuture<'_, Response<Body>> {
        Box::pin(self.dispatch(req))
    }
}

// === impl KacheHandler ===

impl KacheHandler {
    pub fn new(
        registry: Arc<Registry>,
        forwarder: Forwarder,
        freshness: Arc<Freshness>,
        writes: Arc<WriteTracker>,
        config: HandlerConfig,
        lazy: bool,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            stats: Arc::default(),
            gzip_cache: GzipCache::default(),
            read_budget: Arc::new(ReadBudget::new(DEFAULT_MAX_READ_BYTES_IN_FLIGHT)),
            registry,
            crd_fields: CrdFields::default(),
            forwarder,
            freshness,
            writes,
            config,
            lazy,
            shutdown,
            auth: Arc::new(Auth::none()),
            pass_through: None,
            client_limits: Arc::new(ClientLimits::new(Default::default())),
        }
    }

    /// Sets authentication and authorization (k-sec). `pass_through` forwards requests of bearer-token
    /// clients with their own credentials when kache's upstream client carries kache's credentials.
    pub fn with_auth(mut self, auth: Arc<Auth>, pass_through: Option<Forwarder>) -> Self {
        self.client_limits = Arc::new(ClientLimits::new(auth.settings().clients));
        self.auth = auth;
        self.pass_through = pass_through;
        self
    }

    /// Limits the bytes of memory-served lists in flight (0: unlimited); see [`admit`].
    pub fn with_read_budget(mut self, max_bytes: usize) -> Self {
        self.read_budget = Arc::new(ReadBudget::new(max_bytes));
        self
    }

    pub fn stats(&self) -> &Arc<HandlerStats> {
        &self.stats
    }

    /// Forwards as `id`: the client's own credentials, or kache's with impersonation (see
    /// [`Auth::apply_to_forwarded`]).
    async fn forward(&self, req: Request<Body>, id: &Identity) -> Response<Body> {
        self.stats.forwarded.fetch_add(1, Relaxed);
        let (mut parts, body) = req.into_parts();
        let via = match self.auth.apply_to_forwarded(id, &mut parts.headers, &mut parts.extensions) {
            Ok(via) => via,
            Err(e) => return error_response(&e, &Request::from_parts(parts, body), false),
        };
        let req = Request::from_parts(parts, body);
        match (via, &self.pass_through) {
            (ForwardVia::ClientCredentials, Some(pass_through)) => pass_through.forward(req).await,
            _ => self.forwarder.forward(req).await,
        }
    }

    pub fn freshness(&self) -> &Freshness {
        &self.freshness
    }

    /// Answers one request. (`apiserver_request_total` is recorded by the server for every resource request;
    /// the forwarder marks the responses it relays, which gives the `source` label.)
    async fn dispatch(&self, req: Request<Body>) -> Response<Body> {
        let arrived = Instant::now();
        let route = match req.extensions().get::<Route>() {
            Some(route) => route.clone(),
            None => Route::parse(req.method(), req.uri()),
        };
        // Authentication first, for every request (k-sec): a 401 is answered without contacting the upstream
        // with the client's request.
        let id = match self.auth.authenticate(req.headers(), req.extensions().get::<ConnInfo>()).await {
            Ok(id) => id,
            Err(e) => return error_response(&e, &req, false),
        };
        // Impersonation by certificate clients (as the apiserver's filter, after authentication): kache is
        // the only judge, since what it forwards for them carries its own credentials. From here on the
        // request acts as the impersonated user; the headers are consumed. (Bearer-token clients are decided
        // in `dispatch_route`, only for reads served from memory.)
        let mut req = req;
        let ignore = self.auth.settings().control_ignore_impersonation;
        let id = if id.credential == Credential::Certificate && has_impersonation(req.headers()) && !ignore {
            let attrs = route.resource().map(Attributes::from_request);
            match self.auth.impersonate(&id, req.headers(), attrs.as_ref(), false).await {
                Impersonation::None => id,
                Impersonation::As(user) => {
                    strip_impersonation(req.headers_mut());
                    user
                }
                Impersonation::Refused(e) => return error_response(&e, &req, false),
                Impersonation::Undecided => {
                    let e = ApiError::InternalError("the impersonation could not be decided".to_owned());
                    return error_response(&e, &req, false);
                }
            }
        } else {
            id
        };
        // Per-client limits (k-sec): request rate, then concurrent watches (the slot lives as long as the
        // response body).
        let key = client_key(&id, req.extensions().get::<ConnInfo>());
        let mut slot = None;
        if let Some(key) = &key {
            if let Err(e) = self.client_limits.check_rate(key, arrived) {
                return error_response(&e, &req, false);
            }
            if route.resource().is_some_and(|r| r.verb == Verb::Watch) {
                match self.client_limits.begin_watch(key) {
                    Ok(s) => slot = s,
                    Err(e) => {
                        metrics::limit_rejected(metrics::Limit::Watchers);
                        return error_response(&e, &req, false);
                    }
                }
            }
        }
        let resp = self.dispatch_route(req, &route, arrived, &id).await;
        match slot {
            Some(slot) => resp.map(|b| crate::body::guarded(b, slot)),
            None => resp,
        }
    }

    async fn dispatch_route(
        &self,
        req: Request<Body>,
        route: &Route,
        arrived: Instant,
        id: &Identity,
    ) -> Response<Body> {
        let Some(r) = route.resource() else { return self.forward(req, id).await };
        // A request that still asks to act as someone else (certificate clients' impersonation is applied in
        // `dispatch`): without authentication (`--auth=none`) nobody's impersonation can be reviewed, so the
        // upstream decides; a bearer-token client is served from memory only as a user kache allowed it to
        // impersonate, and everything else goes upstream unchanged, where the upstream decides exactly.
        let impersonating =
            has_impersonation(req.headers()) && !self.auth.settings().control_ignore_impersonation;
        if impersonating && id.credential == Credential::Kache {
            return self.forward(req, id).await;
        }
        let Some(store) = self.servable_store(&req, r) else { return self.forward(req, id).await };
        let attrs = Attributes::from_request(r);
        let impersonated;
        let id = if impersonating {
            match self.auth.impersonate(id, req.headers(), Some(&attrs), true).await {
                Impersonation::As(user) => {
                    impersonated = user;
                    &impersonated
                }
                Impersonation::None => id,
                Impersonation::Refused(_) | Impersonation::Undecided => return self.forward(req, id).await,
            }
        } else {
            id
        };
        // Authorization of a read served from memory (k-sec), before anything about the resource is looked
        // at, as the apiserver's filter chain orders it. Forwarded requests are authorized upstream.
        if let Err(e) = self.auth.authorize(id, &attrs).await {
            return error_response(&e, &req, false);
        }
        // Encodings other than JSON (Table, protobuf, YAML, CBOR) are forwarded: the upstream answers them.
        let accept = req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok());
        // A typed resource's request reaches its handler through go-restful, whose route selection refuses
        // an Accept header naming nothing the route produces (its own 406 wording) before the apiserver
        // negotiates. Custom resources are served by the apiextensions handler, without that step. The
        // legacy `/watch/` routes produce other types: their 406s are left to the upstream.
        if !store.info().list_items_have_type_meta && matches!(r.verb, Verb::Get | Verb::List | Verb::Watch) {
            let list = r.verb != Verb::Get;
            let produces = if list { status::ROUTE_LIST_PRODUCES } else { status::ROUTE_GET_PRODUCES };
            if !negotiate::route_accepts(accept, produces) {
                if r.legacy_watch_path {
                    return self.forward(req, id).await;
                }
                let err = ApiError::route_not_acceptable(list);
                // The error itself is negotiated on the same header: `application/*` gets JSON as usual.
                return match negotiate::negotiate(accept) {
                    negotiate::Negotiated::Json { pretty } => error_response(&err, &req, pretty),
                    negotiate::Negotiated::Protobuf(_) => error_response(&err, &req, false),
                    _ => not_acceptable_response(&err, &req),
                };
            }
        }
        let negotiated = if r.verb == Verb::Watch {
            negotiate::negotiate_watch(accept)
        } else {
            negotiate::negotiate(accept)
        };
        let encoding = ResponseEncoding::of(&negotiated);
        // Protobuf from memory for the kinds with a schema and the v1 metadata views that fit the request;
        // the rest is forwarded and the upstream answers it (custom resources' objects: its 406 or JSON).
        let proto = match negotiated {
            negotiate::Negotiated::Protobuf(pv) => {
                let target = match (pv, r.verb) {
                    (negotiate::ProtoView::Object, _) => ProtoTarget::for_object(store.info()),
                    (negotiate::ProtoView::PartialMetadata { list: true }, Verb::List)
                    | (negotiate::ProtoView::PartialMetadata { list: false }, Verb::Get | Verb::Watch) => {
                        Some(ProtoTarget::Metadata)
                    }
                    _ => None,
                };
                match target {
                    Some(target) => Some(target),
                    None => {
                        self.stats.count_encoding(encoding, false);
                        return self.forward(req, id).await;
                    }
                }
            }
            _ => None,
        };
        // The PartialObjectMetadata views are served from memory when the view fits the request (a list view
        // for lists, an object view for gets and watch events); any mismatch is forwarded and the upstream
        // answers it (406 with its own wording).
        let view = match (&negotiated, r.verb) {
            (negotiate::Negotiated::Json { .. }, _) => View::Full,
            (negotiate::Negotiated::Protobuf(negotiate::ProtoView::Object), _) => View::Full,
            (negotiate::Negotiated::Protobuf(_), _) => View::Metadata,
            (negotiate::Negotiated::JsonPartialMetadata { list: true, .. }, Verb::List)
            | (negotiate::Negotiated::JsonPartialMetadata { list: false, .. }, Verb::Get | Verb::Watch) => {
                View::Metadata
            }
            (negotiate::Negotiated::JsonPartialMetadata { .. }, _) => {
                self.stats.count_encoding(encoding, false);
                return self.forward(req, id).await;
            }
            // A Table from memory for the kinds kache prints exactly (an invalid `includeObject` is the
            // upstream's 400 to write, after its own checks). A typed kind without a printer is forwarded
            // until the upstream's answer has shown it uses the generic convertor (learned from that
            // answer, `table_learn`); custom resources always have their CRD's convertor.
            (negotiate::Negotiated::JsonTable { v1, .. }, _) => {
                let printer = crate::codec::table::Printer::for_resource(&r.gvr.group, &r.gvr.resource)
                    .filter(|_| r.gvr.version == "v1")
                    .or_else(|| self.custom_printer(&store, r))
                    .or_else(|| self.generic_printer(&store, r));
                match (printer, crate::codec::table::Include::parse(req.uri().query())) {
                    (Some(printer), Ok(include)) => {
                        View::Table(crate::codec::table::TableView { printer, include, v1: *v1 })
                    }
                    (None, Ok(_)) if r.verb != Verb::Watch && !store.info().list_items_have_type_meta => {
                        self.stats.count_encoding(encoding, false);
                        let gvr = r.gvr.clone();
                        return crate::serve::table_learn::learn_from(self.forward(req, id).await, &gvr);
                    }
                    _ => {
                        self.stats.count_encoding(encoding, false);
                        return self.forward(req, id).await;
                    }
                }
            }
            // A watch that negotiated a type that cannot stream (YAML): the apiserver writes that 406 in the
            // negotiated type (a YAML Status), which is the upstream's to produce.
            (negotiate::Negotiated::NotAcceptable { stream: true }, _) => {
                return self.forward(req, id).await;
            }
            (other, _) => {
                if let Some(err) = other.error() {
                    return not_acceptable_response(&err, &req);
                }
                self.stats.count_encoding(encoding, false);
                return self.forward(req, id).await;
            }
        };
        let outcome = match r.verb {
            Verb::Get => self.get(&req, r, &store, arrived, view, proto.as_ref()).await,
            Verb::List => self.list(&req, r, &store, arrived, view, proto.as_ref()).await,
            Verb::Watch => self.watch(&req, r, &store, arrived, view, proto).await,
            _ => Err(NotServed::Forward("verb")),
        };
        let from_memory = !matches!(outcome, Err(NotServed::Forward(_) | NotServed::NotFresh));
        if from_memory {
            self.stats.memory.fetch_add(1, Relaxed);
        }
        self.stats.count_encoding(encoding, from_memory);
        match outcome {
            Ok(resp) => with_warnings(with_common_headers(resp, &req), &store),
            Err(NotServed::Forward(why)) => {
                tracing::debug!(uri = %req.uri(), why, "forwarding read");
                self.forward(req, id).await
            }
            Err(NotServed::NotFresh) => {
                self.stats.not_fresh.fetch_add(1, Relaxed);
                metrics::consistent_read(&r.gvr, false, true);
                self.fallback(req, id).await
            }
            Err(NotServed::Overloaded) => admit::too_many_requests(),
            Err(NotServed::TooLarge { requested, current }) => {
                let err = ApiError::TooLargeResourceVersion { requested, current, retry_after: Some(1) };
                error_response(&err, &req, false)
            }
        }
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
            && !crate::serve::selector::custom_resource_metadata_fields(&opts.field_selector, info.namespaced)
        {
            let Some(fields) = self.crd_fields.lookup(&self.registry, &info.gvr, self.lazy) else {
                return Err(NotServed::Forward("custom resource field selector: CRD not known"));
            };
            return Ok(opts.convert_custom_fields(info.namespaced, fields));
        }
        Ok(opts.convert_fields(info.field_kind()))
    }

    /// The synced store that can answer this request from memory, if any.
    fn servable_store(&self, req: &Request<Body>, r: &ResourceRequest) -> Option<Arc<Store>> {
        if req.method() != Method::GET || r.subresource.is_some() {
            return None;
        }
        if !matches!(r.verb, Verb::Get | Verb::List | Verb::Watch) {
            return None;
        }
        let store = match self.registry.get(&r.gvr) {
            Some(store) => store,
            None => {
                if self.lazy {
                    self.registry.ensure(&r.gvr);
                }
                return None;
            }
        };
        store.is_synced().then_some(store)
    }

    /// Whether memory can answer a read of this resource: always for a whole mirror; for a filtered mirror
    /// only when its selection covers the read ([`crate::serve::coverage`]). Uncovered reads are counted
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
        metrics::mirror_uncovered(&r.gvr, verb);
        false
    }

    /// The printer of a custom resource: its CRD's columns for the requested version, from kache's own
    /// synced store of CustomResourceDefinitions (what the apiserver's CRD handler reads from its informer).
    /// None when that store is not cached or synced, or the CRD's columns are outside what kache prints.
    fn custom_printer(&self, store: &Store, r: &ResourceRequest) -> Option<crate::codec::table::Printer> {
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
        crate::codec::table::crd::for_crd_object(&object, &r.gvr.version)
            .map(crate::codec::table::Printer::Custom)
    }

    /// The generic convertor's printer for a typed resource, once learned from the upstream's own Table.
    fn generic_printer(&self, store: &Store, r: &ResourceRequest) -> Option<crate::codec::table::Printer> {
        if store.info().list_items_have_type_meta {
            return None;
        }
        crate::codec::table::generic::lookup(&r.gvr.group, &r.gvr.version, &r.gvr.resource)
            .map(crate::codec::table::Printer::Generic)
    }

    /// A consistent read that could not be proven fresh: forward (bounded) or 429.
    async fn fallback(&self, req: Request<Body>, id: &Identity) -> Response<Body> {
        if self.freshness.config().fallback == Fallback::Forward
            && let Some(_permit) = self.freshness.try_fallback()
        {
            return self.forward(req, id).await;
        }
        let err = ApiError::TooManyRequests {
            message: "Too large resource version: consistent read not served from cache".to_owned(),
            retry_after: 1,
        };
        error_response(&err, &req, false)
    }

    async fn get(
        &self,
        req: &Request<Body>,
        r: &ResourceRequest,
        store: &Arc<Store>,
        arrived: Instant,
        view: View,
        proto: Option<&ProtoTarget>,
    ) -> Result<Response<Body>, NotServed> {
        let Some(name) = r.name.as_deref() else { return Err(NotServed::Forward("get without name")) };
        let opts = params::parse_get_options(req.uri().query());
        let response = response_options(req, opts.pretty);
        let rv = match opts.parsed_resource_version() {
            Ok(rv) => to_rv(rv),
            Err(e) => return Ok(error_response(&e, req, response.pretty)),
        };
        let min_rv = self.writes.last_write(&r.gvr);
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
        };
        let found = serve_get(store, &q, &self.freshness).await?;
        Ok(found.unwrap_or_else(|| {
            let err = ApiError::not_found(&r.gvr.group, &r.gvr.resource, name);
            error_response(&err, req, response.pretty)
        }))
    }

    async fn list(
        &self,
        req: &Request<Body>,
        r: &ResourceRequest,
        store: &Arc<Store>,
        arrived: Instant,
        view: View,
        proto: Option<&ProtoTarget>,
    ) -> Result<Response<Body>, NotServed> {
        let info = store.info();
        let kind = info.field_kind();
        let opts = match self.list_options(req, r, info)? {
            Ok(opts) => opts,
            Err(e) => return Ok(error_response(&e, req, false)),
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
            Err(e) => return Ok(error_response(&e, req, response.pretty)),
        };
        let namespace = scan_namespace(r, info.namespaced, &opts);
        let cont = decoded
            .continue_from
            .as_ref()
            .map(|c| ContinueAt { rv: c.rv, start_key: c.scan_start(namespace) });
        // A `metadata.name=` selector without continue is a single-key read when a key can be built (§1.4).
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
            min_rv: self.writes.last_write(&r.gvr),
            block_timeout: self.config.block_timeout,
            gzip_cache: Some(&self.gzip_cache),
            budget: Some(&self.read_budget),
            view,
            proto,
        };
        let consistent = q.rv == Rv::Unset && q.cont.is_none();
        let (resp, stats) = serve_list(store, &q, &self.freshness).await?;
        metrics::list_served(&r.gvr, stats.fetched, stats.returned);
        if consistent {
            // A consistent list served from memory (the apiserver's cacher counts its lists the same way;
            // the fallbacks are counted where they are forwarded).
            metrics::consistent_read(&r.gvr, true, false);
        }
        Ok(resp)
    }

    async fn watch(
        &self,
        req: &Request<Body>,
        r: &ResourceRequest,
        store: &Arc<Store>,
        arrived: Instant,
        view: View,
        proto: Option<ProtoTarget>,
    ) -> Result<Response<Body>, NotServed> {
        let info = store.info();
        let mut opts = match self.list_options(req, r, info)? {
            Ok(opts) => opts,
            Err(e) => return Ok(error_response(&e, req, false)),
        };
        if let Some(name) = r.name.as_deref()
            && let Err(e) = opts.check_path_name(name)
        {
            return Ok(error_response(&e, req, false));
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
            Err(e) => return Ok(error_response(&e, req, false)),
        };
        // RV unset with sendInitialEvents set (after the legacy defaulting) starts at the upstream's current
        // revision (§3.2): the same proof as a consistent list; forwarded when it fails.
        let consistent_rv = match (rv, opts.send_initial_events) {
            (None, Some(_)) => {
                let min_rv = self.writes.last_write(&r.gvr);
                let bytes = crate::serve::resolve::read_bytes(store, store.current().len());
                Some(
                    self.freshness
                        .ensure(store, arrived, min_rv, bytes, true)
                        .await
                        .map_err(|_| NotServed::NotFresh)?,
                )
            }
            _ => None,
        };
        let request = watch::request::WatchRequest {
            store: store.clone(),
            namespace: scan_namespace(r, info.namespaced, &opts).map(str::to_owned),
            name: opts.field_selector.exact("metadata.name").map(str::to_owned),
            consistent_rv,
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
        };
        watch::request::try_serve_watch(request, &self.config.watch, self.shutdown.clone())
            .map_err(|_| NotServed::Forward("not transcodable to protobuf"))
    }
}

/// The namespace a list or watch scans: the URL's, or a `metadata.namespace=` selector's on a cluster-wide
/// request of a namespaced resource (the registry narrows the key prefix the same way, §4.1).
fn scan_namespace<'a>(r: &'a ResourceRequest, namespaced: bool, opts: &'a ListOptions) -> Option<&'a str> {
    if !namespaced {
        return None;
    }
    r.namespace
        .as_deref()
        .or_else(|| opts.field_selector.exact("metadata.namespace").filter(|ns| is_dns_label(ns)))
}

/// A valid namespace name (DNS-1123 label).
fn is_dns_label(s: &str) -> bool {
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

/// A Status error response, with `Retry-After` when the Status carries `retryAfterSeconds`.
pub fn error_response(err: &ApiError, req: &Request<Body>, pretty: bool) -> Response<Body> {
    let pretty = pretty || {
        let ua = req.headers().get(header::USER_AGENT).and_then(|v| v.to_str().ok());
        negotiate::wants_pretty(None, ua)
    };
    // An Accept header naming only transformations (a Table, a metadata view) cannot carry a Status: the
    // apiserver then writes it raw (`WriteRawJSON`), indented without a trailing newline.
    let accept = req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok());
    // A resource request's error is negotiated like its object: a protobuf client gets a protobuf Status.
    if negotiate::error_in_protobuf(accept) && is_resource_request(req) {
        return with_common_headers(crate::serve::protobuf::error_response(err), req);
    }
    let bytes = if !negotiate::error_negotiable(accept) {
        err.to_raw_json()
    } else if pretty {
        err.to_json_pretty()
    } else {
        err.to_json()
    };
    let mut resp = Response::builder()
        .status(StatusCode::from_u16(err.status_code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .header(header::CONTENT_LENGTH, bytes.len())
        .body(body::full(bytes))
        .expect("static headers are valid");
    if let Some(secs) = err.retry_after() {
        resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    with_common_headers(resp, req)
}

/// Whether the request names a resource (its errors are negotiated with the resource's serializers, which
/// include protobuf; other paths answer JSON).
fn is_resource_request(req: &Request<Body>) -> bool {
    match req.extensions().get::<Route>() {
        Some(route) => route.resource().is_some(),
        None => Route::parse(req.method(), req.uri()).resource().is_some(),
    }
}

/// A 406: the error's own negotiation fails on the same Accept header, so the apiserver writes it with
/// `WriteRawJSON` (indented, no trailing newline) whatever `pretty` says.
fn not_acceptable_response(err: &ApiError, req: &Request<Body>) -> Response<Body> {
    let bytes = err.to_raw_json();
    let resp = Response::builder()
        .status(StatusCode::NOT_ACCEPTABLE)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .header(header::CONTENT_LENGTH, bytes.len())
        .body(body::full(bytes))
        .expect("static headers are valid");
    with_common_headers(resp, req)
}

/// Headers every apiserver response carries: `Audit-Id` (the client's, echoed, or a fresh one).
fn with_common_headers(mut resp: Response<Body>, req: &Request<Body>) -> Response<Body> {
    let audit = audit_id(req.headers());
    resp.headers_mut().insert("audit-id", audit);
    resp
}

/// The upstream's `Warning` headers for this resource (a deprecated version's notice, learned by the
/// reflector), on an answer from memory, as the apiserver attaches them to every read of that version.
fn with_warnings(mut resp: Response<Body>, store: &Store) -> Response<Body> {
    for warning in store.warnings().iter() {
        resp.headers_mut().append(header::WARNING, warning.clone());
    }
    resp
}

fn audit_id(headers: &HeaderMap) -> HeaderValue {
    if let Some(v) = headers.get("audit-id") {
        return v.clone();
    }
    let r: u128 = rand::random();
    let s = format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        (r >> 96) as u32,
        (r >> 80) as u16,
        (r >> 68) as u16 & 0xfff,
        ((r >> 52) as u16 & 0x3fff) | 0x8000,
        (r as u64) & 0xffff_ffff_ffff
    );
    HeaderValue::from_str(&s).expect("hex is a valid header value")
}
