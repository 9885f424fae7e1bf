//! The request pipeline, in the order the apiserver's filter chain applies it:
//!
//! ```text
//!   route ─▶ authenticate ─▶ client limits ─▶ authorize ─▶ serve (memory) ─┐
//!                                                 └──────▶ forward ─────────┴─▶ response
//! ```
//!
//! 1. **route** ([`crate::front::route`]): the resource, verb and namespace of the path.
//! 2. **authenticate** ([`crate::auth`]): every request; a 401 is answered without contacting the upstream
//!    with the client's request. Certificate clients' impersonation is applied here.
//! 3. **client limits**: request rate, then concurrent watches (the slot lives as long as the body).
//! 4. **plan**: whether memory could answer (a GET of a cached, synced resource, no subresource); if not,
//!    the request is forwarded and the upstream authorizes it. Nothing is started here.
//! 5. **authorize** a read memory will answer, before anything about the resource is looked at. Lazy
//!    caching of a resource not yet cached starts only once the upstream has authorized a forwarded read of
//!    it (its answer is neither 401 nor 403), so an unauthorized client cannot make kache cache anything.
//! 6. **negotiate** the view ([`view`]), then **serve** the get, list or watch slice
//!    ([`crate::serve::reads`]); whatever memory cannot answer exactly as the apiserver would (a snapshot no
//!    longer retained, a consistent read not proven fresh, an unsynced store) is **forwarded**, so clients
//!    never see a kache-only answer.
//!
//! Errors become responses in one place, [`crate::front::respond`].

mod stats;
mod view;

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use tokio::time::Instant;

use http::{Method, Request, Response, StatusCode, header};

use crate::auth::{
    Attributes, Auth, ClientLimits, Credential, ForwardVia, Identity, Impersonation, WatchSlot, client_key,
    has_impersonation, strip_impersonation,
};
use crate::codec::status::ApiError;
use crate::forward::{Forwarder, WriteTracker};
use crate::fresh::Fallback;
use crate::front::body::{self, Body};
use crate::front::respond;
use crate::front::route::{ResourceRequest, Route, Verb};
use crate::front::server::{BoxFuture, ConnInfo, Handler};
use crate::metrics::{self, Metrics, Refusal};
use crate::reflector::Registry;
use crate::serve::admit;
use crate::serve::list::NotServed;
use crate::serve::reads::{Reads, Shape};
use crate::store::Store;
pub use stats::{HandlerStats, ResponseEncoding};
use view::Choice;

/// Serves from memory, forwards the rest.
pub(crate) struct KacheHandler {
    stats: Arc<HandlerStats>,
    registry: Arc<Registry>,
    reads: Reads,
    forwarder: Forwarder,
    writes: Arc<WriteTracker>,
    /// Start caching a resource on its first authorized read (`--lazy`).
    lazy: bool,
    /// Who the client is and what it may read.
    auth: Arc<Auth>,
    /// Forwards bearer-token clients' requests with their own credentials (when kache's upstream client
    /// carries kache's own).
    pass_through: Option<Forwarder>,
    client_limits: Arc<ClientLimits>,
    /// The kache's metrics (the same instance the reads record into).
    metrics: Metrics,
}

impl Handler for KacheHandler {
    fn handle(&self, req: Request<Body>) -> BoxFuture<'_, Response<Body>> {
        Box::pin(self.dispatch(req))
    }
}

/// Where a routed, authenticated request goes.
enum Plan {
    /// Memory can answer: a read of this synced store.
    Memory(Arc<Store>),
    /// The upstream answers (and authorizes).
    Forward,
    /// The upstream answers; the resource is not cached yet and may be once the upstream authorized it.
    ForwardThenCache,
}

// === impl KacheHandler ===

impl KacheHandler {
    pub(crate) fn new(
        registry: Arc<Registry>,
        reads: Reads,
        forwarder: Forwarder,
        writes: Arc<WriteTracker>,
        lazy: bool,
    ) -> Self {
        Self {
            stats: Arc::default(),
            metrics: reads.metrics().clone(),
            registry,
            reads,
            forwarder,
            writes,
            lazy,
            auth: Arc::new(Auth::none()),
            pass_through: None,
            client_limits: Arc::new(ClientLimits::new(Default::default())),
        }
    }

    /// Sets authentication and authorization. `pass_through` forwards requests of bearer-token clients with
    /// their own credentials when kache's upstream client carries kache's credentials.
    pub(crate) fn with_auth(mut self, auth: Arc<Auth>, pass_through: Option<Forwarder>) -> Self {
        self.client_limits = Arc::new(ClientLimits::new(auth.settings().clients));
        self.auth = auth;
        self.pass_through = pass_through;
        self
    }

    pub fn stats(&self) -> &Arc<HandlerStats> {
        &self.stats
    }

    /// Answers one request. (`apiserver_request_total` is recorded by the server for every resource request;
    /// the forwarder marks the responses it relays, which gives the `source` label.)
    async fn dispatch(&self, req: Request<Body>) -> Response<Body> {
        let arrived = Instant::now();
        let route = match req.extensions().get::<Route>() {
            Some(route) => route.clone(),
            None => Route::parse(req.method(), req.uri()),
        };
        let (req, id) = match self.authenticate(req, &route).await {
            Ok(authenticated) => authenticated,
            Err(resp) => return resp,
        };
        let slot = match self.client_limits(&req, &route, &id) {
            Ok(slot) => slot,
            Err(e) => return respond::error(&e, req.headers(), false),
        };
        let resp = match route.resource() {
            Some(r) => self.resource(req, r, arrived, &id).await,
            None => self.forward(req, &id).await,
        };
        match slot {
            Some(slot) => resp.map(|b| body::guarded(b, slot)),
            None => resp,
        }
    }

    /// Who the client is. Impersonation by certificate clients is decided here (as the apiserver's filter,
    /// after authentication): kache is the only judge, since what it forwards for them carries its own
    /// credentials. From here on the request acts as the impersonated user; the headers are consumed.
    /// (Bearer-token clients are decided in [`Self::read`], only for reads served from memory.)
    async fn authenticate(
        &self,
        mut req: Request<Body>,
        route: &Route,
    ) -> Result<(Request<Body>, Identity), Response<Body>> {
        let id = match self.auth.authenticate(req.headers(), req.extensions().get::<ConnInfo>()).await {
            Ok(id) => id,
            Err(e) => return Err(respond::error(&e, req.headers(), false)),
        };
        let ignore = self.auth.settings().control_ignore_impersonation;
        if id.credential != Credential::Certificate || !has_impersonation(req.headers()) || ignore {
            return Ok((req, id));
        }
        let attrs = route.resource().map(Attributes::from_request);
        match self.auth.impersonate(&id, req.headers(), attrs.as_ref(), false).await {
            Impersonation::None => Ok((req, id)),
            Impersonation::As(user) => {
                strip_impersonation(req.headers_mut());
                Ok((req, user))
            }
            Impersonation::Refused(e) => Err(respond::error(&e, req.headers(), false)),
            Impersonation::Undecided => {
                let e = ApiError::InternalError("the impersonation could not be decided".to_owned());
                Err(respond::error(&e, req.headers(), false))
            }
        }
    }

    /// Per-client limits: request rate, then concurrent watches. The watch slot, if any, must live as long
    /// as the response body. A refusal is the Status to answer (429).
    fn client_limits(
        &self,
        req: &Request<Body>,
        route: &Route,
        id: &Identity,
    ) -> Result<Option<WatchSlot>, ApiError> {
        let Some(key) = client_key(id, req.extensions().get::<ConnInfo>()) else { return Ok(None) };
        let checked = self.client_limits.check_rate(&key);
        self.metrics.limit_tracked(metrics::Limit::Requests, self.client_limits.tracked_clients());
        checked?;
        if !route.resource().is_some_and(|r| r.verb == Verb::Watch) {
            return Ok(None);
        }
        self.client_limits
            .begin_watch(&key)
            .inspect_err(|_| self.metrics.limit_rejected(metrics::Limit::Watchers))
    }

    /// A resource request: planned, then read from memory (after authorization) or forwarded.
    async fn resource(
        &self,
        req: Request<Body>,
        r: &ResourceRequest,
        arrived: Instant,
        id: &Identity,
    ) -> Response<Body> {
        // A request that still asks to act as someone else (certificate clients' impersonation is applied in
        // `authenticate`): without authentication (`--auth=none`) nobody's impersonation can be reviewed, so
        // the upstream decides.
        let impersonating =
            has_impersonation(req.headers()) && !self.auth.settings().control_ignore_impersonation;
        if impersonating && id.credential == Credential::Kache {
            return self.forward(req, id).await;
        }
        match self.plan(&req, r) {
            Plan::Memory(store) => self.read(req, r, store, arrived, id, impersonating).await,
            Plan::Forward => self.forward(req, id).await,
            Plan::ForwardThenCache => {
                let resp = self.forward(req, id).await;
                if !matches!(resp.status(), StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
                    self.registry.ensure(&r.gvr);
                }
                resp
            }
        }
    }

    /// Whether memory could answer this request (no side effects: nothing is started here).
    fn plan(&self, req: &Request<Body>, r: &ResourceRequest) -> Plan {
        if req.method() != Method::GET
            || r.subresource.is_some()
            || !matches!(r.verb, Verb::Get | Verb::List | Verb::Watch)
        {
            return Plan::Forward;
        }
        match self.registry.get(&r.gvr) {
            Some(store) if store.is_synced() => Plan::Memory(store),
            Some(_) => Plan::Forward,
            None if self.lazy => Plan::ForwardThenCache,
            None => Plan::Forward,
        }
    }

    /// A read memory can answer: impersonation of bearer-token clients, authorization, negotiation, then
    /// the get, list or watch slice; what the slice cannot answer is forwarded.
    async fn read(
        &self,
        req: Request<Body>,
        r: &ResourceRequest,
        store: Arc<Store>,
        arrived: Instant,
        id: &Identity,
        impersonating: bool,
    ) -> Response<Body> {
        let attrs = Attributes::from_request(r);
        let requester = id;
        // A bearer-token client is served from memory only as a user kache allowed it to impersonate;
        // everything else goes upstream unchanged, where the upstream decides exactly.
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
        // Authorization of a read served from memory, before anything about the resource is looked at, as
        // the apiserver's filter chain orders it. Forwarded requests are authorized upstream.
        match self.auth.authorize(id, &attrs).await {
            Ok(()) => {}
            // Past the requester's review budget: the upstream authorizes the read itself.
            Err(ApiError::TooManyRequests { .. }) => return self.forward(req, requester).await,
            Err(e) => return respond::error(&e, req.headers(), false),
        }
        let (encoding, shape) = match view::choose(&self.reads, req.headers(), req.uri(), r, &store) {
            (encoding, Choice::Memory(view, proto)) => (encoding, Shape { view, proto }),
            (encoding, Choice::Forward { counted }) => {
                if counted {
                    self.stats.count_encoding(&self.metrics, encoding, false);
                }
                return self.forward(req, id).await;
            }
            (encoding, Choice::LearnTable) => {
                self.stats.count_encoding(&self.metrics, encoding, false);
                let gvr = r.gvr.clone();
                let tables = self.reads.tables().clone();
                return crate::serve::table_learn::learn_from(self.forward(req, id).await, &gvr, tables);
            }
            (_, Choice::Respond(resp)) => return resp,
        };
        // Read-your-writes: a consistent read reflects at least the last write kache forwarded.
        let min_rv = self.writes.last_write(&r.gvr);
        let outcome = match r.verb {
            Verb::Get => self.reads.get(&req, r, &store, arrived, shape, min_rv).await,
            Verb::List => self.reads.list(&req, r, &store, arrived, shape, min_rv).await,
            Verb::Watch => self.reads.watch(&req, r, &store, arrived, shape, min_rv).await,
            _ => Err(NotServed::Forward("verb")),
        };
        let from_memory = !matches!(outcome, Err(NotServed::Forward(_) | NotServed::NotFresh));
        if from_memory {
            self.stats.memory.fetch_add(1, Relaxed);
        }
        self.stats.count_encoding(&self.metrics, encoding, from_memory);
        match outcome {
            Ok(resp) => with_warnings(respond::with_audit_id(resp, req.headers()), &store),
            Err(NotServed::Forward(why)) => {
                tracing::debug!(uri = %req.uri(), why, "forwarding read");
                self.forward(req, id).await
            }
            Err(NotServed::NotFresh) => {
                self.stats.not_fresh.fetch_add(1, Relaxed);
                self.metrics.consistent_read(&r.gvr, false, true);
                self.fallback(req, id).await
            }
            Err(NotServed::Overloaded) => {
                self.metrics.refused(Refusal::ReadBytes);
                admit::too_many_requests()
            }
            Err(NotServed::TooLarge { requested, current }) => {
                self.metrics.refused(Refusal::TooLargeResourceVersion);
                let err = ApiError::TooLargeResourceVersion { requested, current, retry_after: Some(1) };
                respond::error(&err, req.headers(), false)
            }
        }
    }

    /// Forwards as `id`: the client's own credentials, or kache's with impersonation (see
    /// [`Auth::apply_to_forwarded`]).
    async fn forward(&self, req: Request<Body>, id: &Identity) -> Response<Body> {
        self.stats.forwarded.fetch_add(1, Relaxed);
        let (mut parts, body) = req.into_parts();
        let via = match self.auth.apply_to_forwarded(id, &mut parts.headers, &mut parts.extensions) {
            Ok(via) => via,
            Err(e) => return respond::error(&e, &parts.headers, false),
        };
        let req = Request::from_parts(parts, body);
        match (via, &self.pass_through) {
            (ForwardVia::ClientCredentials, Some(pass_through)) => pass_through.forward(req).await,
            _ => self.forwarder.forward(req).await,
        }
    }

    /// A consistent read that could not be proven fresh: forwarded (it costs the upstream what it would
    /// direct), or 429 where the operator chose so ([`Fallback::TooManyRequests`]).
    async fn fallback(&self, req: Request<Body>, id: &Identity) -> Response<Body> {
        if self.reads.freshness().config().fallback == Fallback::Forward {
            return self.forward(req, id).await;
        }
        self.metrics.refused(Refusal::ConsistentReadFallback);
        let err = ApiError::TooManyRequests {
            message: "Too large resource version: consistent read not served from cache".to_owned(),
            retry_after: 1,
        };
        respond::error(&err, req.headers(), false)
    }
}

/// The upstream's `Warning` headers for this resource (a deprecated version's notice, learned by the
/// reflector), on an answer from memory, as the apiserver attaches them to every read of that version.
fn with_warnings(mut resp: Response<Body>, store: &Store) -> Response<Body> {
    for warning in store.warnings().iter() {
        resp.headers_mut().append(header::WARNING, warning.clone());
    }
    resp
}
