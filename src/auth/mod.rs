//! auth (see lib.rs Layout): who the client is and whether it may read what it asks for.
//!
//! Two modes ([`AuthMode`]):
//! - `none`: kache's own upstream credentials serve everyone; only allowed on loopback ([`check_listen`]).
//! - `delegated`: clients authenticate with a bearer token, checked by a TokenReview against the upstream
//!   (with `--auth-audiences`). Every read served from memory is authorized by a SubjectAccessReview for
//!   its exact verb, resource, namespace and name. Both answers are cached (bounded, TTL; tokens keyed by
//!   their SHA-256, never stored or logged; a review kept no longer than the token's own `exp`
//!   allows: `expiry`). Forwarded requests carry the client's identity, so the
//!   upstream applies its own policy ([`Auth::apply_to_forwarded`]).
//!
//! Invariant: kache never answers from memory what the upstream would refuse the same client, except for
//! at most one cache TTL after a permission is revoked.

mod cache;
mod expiry;
mod impersonate;
mod limits;
mod listen;
mod review;
mod tls_reload;
mod x509;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use http::{HeaderMap, HeaderName, HeaderValue, header};

use crate::codec::status::{ApiError, forbidden_reason};
use crate::forward::UpstreamIdentity;
use crate::front::route::{ResourceRequest, Verb};
use crate::front::server::ConnInfo;
use crate::metrics::{self, AuthDecision, AuthResult, Metrics};
use crate::upstream::Upstream;

pub use cache::TtlCache;
pub(crate) use impersonate::strip_impersonation;
pub use impersonate::{Requested as ImpersonationRequest, has_impersonation};
pub use limits::{ClientKey, ClientLimitSettings, ClientLimits, MAX_TRACKED_CLIENTS, WatchSlot};
pub use listen::{ListenCheck, ListenError, check_listen};
pub use review::ReviewError;
pub use tls_reload::{DEFAULT_RELOAD_INTERVAL, ReloadingCert};
pub use x509::{Subject, subject};

/// Default TTL of an authenticated token review.
pub(crate) const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(120);
/// Default TTL of a rejected token (short: a token just issued should start working soon).
pub(crate) const DEFAULT_TOKEN_FAILURE_TTL: Duration = Duration::from_secs(10);
/// Default TTL of an allowing SubjectAccessReview (the apiserver's webhook authorizer default, 5 min).
pub(crate) const DEFAULT_ALLOW_TTL: Duration = Duration::from_secs(300);
/// Default TTL of a denying SubjectAccessReview (the webhook authorizer default, 30 s).
pub(crate) const DEFAULT_DENY_TTL: Duration = Duration::from_secs(30);
/// Default TokenReview budget per source address: 10 reviews/s, bursts of 50 (a client presents one token,
/// reviewed once per `--auth-token-ttl`; only floods of distinct tokens reach this).
pub const DEFAULT_REVIEWS_PER_ADDRESS: ClientLimitSettings =
    ClientLimitSettings { qps: 10.0, burst: 50, max_watches: 0 };
/// Default SubjectAccessReview budget per user: 20 reviews/s, bursts of 100. A client reading what it read
/// before costs none (decisions are cached); one that reads ever new names, namespaces or impersonated users
/// would make kache send one review upstream per read. Past the budget its reads are forwarded (the upstream
/// authorizes them itself, as it would have without kache), so a review never costs the upstream more than
/// the read it decides.
pub const DEFAULT_ACCESS_REVIEWS_PER_USER: ClientLimitSettings =
    ClientLimitSettings { qps: 20.0, burst: 100, max_watches: 0 };
/// Default bound of each decision cache.
pub const DEFAULT_CACHE_ENTRIES: usize = 10_000;
/// The apiserver's answer to a request it cannot authenticate.
const UNAUTHORIZED: &str = "Unauthorized";

/// How clients are authenticated and authorized.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthMode {
    /// kache's own upstream credentials for everyone (loopback sidecar).
    #[default]
    None,
    /// TokenReview + SubjectAccessReview against the upstream.
    Delegated,
}

/// Tunables of [`Auth`].
#[derive(Clone, Debug)]
pub struct AuthSettings {
    pub mode: AuthMode,
    /// Audiences a token must be valid for (TokenReview `spec.audiences`); empty: the upstream's own.
    pub audiences: Vec<String>,
    pub token_ttl: Duration,
    pub token_failure_ttl: Duration,
    pub allow_ttl: Duration,
    pub deny_ttl: Duration,
    /// Bound of the token cache and of the decision cache (entries each).
    pub cache_entries: usize,
    /// Per-client request rate and watch limits (any mode).
    pub clients: ClientLimitSettings,
    /// TokenReviews per second (and burst) one source address may cause, before authentication: each
    /// token kache has not seen costs a review upstream, so a flood of distinct junk tokens from one
    /// address is refused with 429 instead of being passed on. Zero turns it off.
    pub reviews_per_address: ClientLimitSettings,
    /// SubjectAccessReviews per second (and burst) one user may cause ([`DEFAULT_ACCESS_REVIEWS_PER_USER`]).
    /// Zero turns it off.
    pub access_reviews_per_user: ClientLimitSettings,
    /// Test control only, never a flag: treat `Impersonate-*` headers as kache did before it implemented
    /// impersonation (authorize the requester and serve from memory). It reproduces that leak so the
    /// tests can prove they detect it.
    #[doc(hidden)]
    pub control_ignore_impersonation: bool,
}

impl Default for AuthSettings {
    fn default() -> Self {
        Self {
            mode: AuthMode::None,
            audiences: Vec::new(),
            token_ttl: DEFAULT_TOKEN_TTL,
            token_failure_ttl: DEFAULT_TOKEN_FAILURE_TTL,
            allow_ttl: DEFAULT_ALLOW_TTL,
            deny_ttl: DEFAULT_DENY_TTL,
            cache_entries: DEFAULT_CACHE_ENTRIES,
            clients: ClientLimitSettings::default(),
            reviews_per_address: DEFAULT_REVIEWS_PER_ADDRESS,
            access_reviews_per_user: DEFAULT_ACCESS_REVIEWS_PER_USER,
            control_ignore_impersonation: false,
        }
    }
}

impl AuthSettings {
    pub fn delegated() -> Self {
        Self { mode: AuthMode::Delegated, ..Self::default() }
    }
}

/// The outcome of [`Auth::impersonate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Impersonation {
    /// The request impersonates nobody.
    None,
    /// The request acts as this user.
    As(Identity),
    /// The apiserver's answer to the request (400 malformed, 403 denied).
    Refused(ApiError),
    /// kache cannot decide it exactly (only when asked `for_memory`): forward it.
    Undecided,
}

/// How a client proved who it is, which decides how its forwarded requests reach the upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Credential {
    /// `--auth=none`: nobody is authenticated; kache's own identity.
    Kache,
    /// A bearer token: it passes through to the upstream with the client's request.
    Bearer,
    /// A verified client certificate: forwarded with kache's credentials and `Impersonate-*` headers.
    Certificate,
}

/// An authenticated client.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    pub user: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
    pub credential: Credential,
}

// === impl Identity ===

impl Identity {
    /// The identity of every request under `--auth=none`.
    pub fn kache() -> Self {
        Self {
            user: String::new(),
            uid: String::new(),
            groups: Vec::new(),
            extra: BTreeMap::new(),
            credential: Credential::Kache,
        }
    }

    pub fn bearer(
        user: impl Into<String>,
        uid: impl Into<String>,
        groups: Vec<String>,
        extra: BTreeMap<String, Vec<String>>,
    ) -> Self {
        Self { user: user.into(), uid: uid.into(), groups, extra, credential: Credential::Bearer }
    }

    pub fn certificate(user: impl Into<String>, groups: Vec<String>) -> Self {
        Self {
            user: user.into(),
            uid: String::new(),
            groups,
            extra: BTreeMap::new(),
            credential: Credential::Certificate,
        }
    }
}

/// What a request does, as an authorizer sees it (the apiserver's `authorizer.Attributes`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Attributes {
    pub verb: String,
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

impl Attributes {
    /// The attributes the apiserver's RequestInfo gives a resource request. `/api/v1/namespaces/{name}`
    /// is in namespace `{name}`, as RequestInfo parses it.
    pub(crate) fn from_request(r: &ResourceRequest) -> Self {
        let name = r.name.clone().unwrap_or_default();
        let namespace = match &r.namespace {
            Some(ns) => ns.clone(),
            None if r.gvr.group.is_empty() && r.gvr.resource == "namespaces" => name.clone(),
            None => String::new(),
        };
        Self {
            verb: verb_name(r.verb).to_owned(),
            group: r.gvr.group.clone(),
            version: r.gvr.version.clone(),
            resource: r.gvr.resource.clone(),
            subresource: r.subresource.clone().unwrap_or_default(),
            namespace,
            name,
        }
    }
}

/// The RBAC verb of a request.
pub(crate) fn verb_name(verb: Verb) -> &'static str {
    match verb {
        Verb::Get => "get",
        Verb::List => "list",
        Verb::Watch => "watch",
        Verb::Create => "create",
        Verb::Update => "update",
        Verb::Patch => "patch",
        Verb::Delete => "delete",
        Verb::DeleteCollection => "deletecollection",
        Verb::Proxy => "proxy",
        Verb::Unknown => "",
    }
}

/// Who per-client limits count a request against: the authenticated user, else the peer's address.
pub fn client_key(id: &Identity, conn: Option<&ConnInfo>) -> Option<ClientKey> {
    match (id.credential, conn) {
        (Credential::Kache, Some(c)) => Some(ClientKey::Ip(c.peer.ip())),
        (Credential::Kache, None) => None,
        _ => Some(ClientKey::User(id.user.clone())),
    }
}

/// Which upstream client a forwarded request must use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ForwardVia {
    /// kache's own upstream client (its credentials, if it has any, replace the client's).
    Kache,
    /// A client without kache's credentials: the client's own `Authorization` reaches the upstream.
    ClientCredentials,
}

/// A SHA-256 digest of a bearer token: the token cache's key, so tokens themselves are never kept.
type TokenKey = [u8; 32];

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct DecisionKey {
    user: String,
    uid: String,
    groups: Vec<String>,
    extra: BTreeMap<String, Vec<String>>,
    attrs: Attributes,
}

/// Authentication and authorization of clients. Shared by every request (`Arc`).
pub struct Auth {
    settings: AuthSettings,
    /// Where reviews go; `None` only for [`Auth::none`].
    upstream: Option<Upstream>,
    /// `None`: the token was rejected (cached for the shorter failure TTL).
    tokens: TtlCache<TokenKey, Option<Arc<Identity>>>,
    /// TokenReviews per source address ([`AuthSettings::reviews_per_address`]).
    reviews: ClientLimits,
    /// SubjectAccessReviews per user ([`AuthSettings::access_reviews_per_user`]).
    access_reviews: ClientLimits,
    /// `Ok(())` allowed, `Err(reason)` denied.
    decisions: TtlCache<DecisionKey, Result<(), String>>,
    /// Where decisions are counted (`kache_auth_cache_total`, `kache_impersonation_total`).
    metrics: Metrics,
}

// === impl Auth ===

impl Auth {
    /// Reviews go to `upstream` with kache's own credentials (it needs `create` on `tokenreviews` and
    /// `subjectaccessreviews`, as `system:auth-delegator` grants).
    pub fn new(settings: AuthSettings, upstream: Upstream) -> Self {
        let entries = settings.cache_entries;
        let upstream = Some(upstream);
        let reviews = ClientLimits::new(settings.reviews_per_address);
        let access_reviews = ClientLimits::new(settings.access_reviews_per_user);
        Self {
            settings,
            upstream,
            tokens: TtlCache::new(entries),
            reviews,
            access_reviews,
            decisions: TtlCache::new(entries),
            metrics: Metrics::default(),
        }
    }

    /// `--auth=none`: everyone is kache; nothing is reviewed.
    pub fn none() -> Self {
        Self::none_with(AuthSettings::default())
    }

    /// [`Auth::none`] keeping `settings`' other parts (per-client limits).
    pub(crate) fn none_with(settings: AuthSettings) -> Self {
        let settings = AuthSettings { mode: AuthMode::None, ..settings };
        let entries = 1;
        let reviews = ClientLimits::new(ClientLimitSettings::default());
        Self {
            settings,
            upstream: None,
            tokens: TtlCache::new(entries),
            reviews,
            access_reviews: ClientLimits::new(ClientLimitSettings::default()),
            decisions: TtlCache::new(entries),
            metrics: Metrics::default(),
        }
    }

    /// Counts decisions in the kache's `metrics` instead of an instance of its own.
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    fn review_upstream(&self) -> Result<&Upstream, ReviewError> {
        self.upstream.as_ref().ok_or(ReviewError::Upstream {
            kind: "review",
            reason: "no upstream configured for reviews".into(),
        })
    }

    pub fn mode(&self) -> AuthMode {
        self.settings.mode
    }

    pub fn settings(&self) -> &AuthSettings {
        &self.settings
    }

    /// Who sent the request, in the apiserver's order (its union authenticator takes the first that
    /// succeeds, and the client-certificate authenticator comes before the token authenticators): a client
    /// certificate the handshake verified against --client-ca and that names a user, else a bearer token
    /// (TokenReview), else 401.
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        conn: Option<&ConnInfo>,
    ) -> Result<Identity, ApiError> {
        if self.settings.mode == AuthMode::None {
            return Ok(Identity::kache());
        }
        if let Some(id) = conn.and_then(|c| c.client_cert.as_deref()).and_then(certificate_identity) {
            return Ok(id);
        }
        let Some(auth) = headers.get(header::AUTHORIZATION) else {
            return Err(unauthorized());
        };
        let token = bearer_token(auth).ok_or_else(unauthorized)?;
        let key = token_key(token);
        let now = Instant::now();
        if let Some(cached) = self.tokens.get(&key, now) {
            let decision = if cached.is_some() { AuthDecision::Allow } else { AuthDecision::Deny };
            self.metrics.auth_cache(AuthResult::Hit, decision);
            return cached.map(|id| (*id).clone()).ok_or_else(unauthorized);
        }
        // A token not seen before costs a review upstream: budgeted per source address.
        if let Some(conn) = conn {
            let checked = self.reviews.check_rate(&ClientKey::Ip(conn.peer.ip()));
            self.metrics.limit_tracked(metrics::Limit::TokenReviews, self.reviews.tracked_clients());
            if let Err(e) = checked {
                self.metrics.limit_rejected(metrics::Limit::TokenReviews);
                return Err(e);
            }
        }
        let reviewed = match self.review_upstream() {
            Ok(up) => review::token_review(up, token, &self.settings.audiences).await,
            Err(e) => Err(e),
        };
        match reviewed {
            Ok(Some(r)) => {
                self.metrics.auth_cache(AuthResult::Miss, AuthDecision::Allow);
                let id = Identity::bearer(r.user, r.uid, r.groups, r.extra);
                let ttl = expiry::review_ttl(token, self.settings.token_ttl, std::time::SystemTime::now());
                self.tokens.insert(key, Some(Arc::new(id.clone())), ttl, now);
                Ok(id)
            }
            Ok(None) => {
                self.metrics.auth_cache(AuthResult::Miss, AuthDecision::Deny);
                self.tokens.insert(key, None, self.settings.token_failure_ttl, now);
                Err(unauthorized())
            }
            Err(e) => {
                // As the apiserver's webhook authenticator: a failed review is a failed authentication.
                self.metrics.auth_cache(AuthResult::Miss, AuthDecision::Error);
                tracing::warn!(error = %e, "token review failed");
                Err(unauthorized())
            }
        }
    }

    /// Whether `id` may do `attrs`: `Err` is the 403 the apiserver would answer (or 500 when the review
    /// failed, or 429 when `id` has used its review budget: [`AuthSettings::access_reviews_per_user`]; a
    /// read is then forwarded for the upstream to authorize).
    pub async fn authorize(&self, id: &Identity, attrs: &Attributes) -> Result<(), ApiError> {
        if self.settings.mode == AuthMode::None || id.credential == Credential::Kache {
            return Ok(());
        }
        let key = DecisionKey {
            user: id.user.clone(),
            uid: id.uid.clone(),
            groups: id.groups.clone(),
            extra: id.extra.clone(),
            attrs: attrs.clone(),
        };
        let now = Instant::now();
        let decision = match self.decisions.get(&key, now) {
            Some(d) => {
                let label = if d.is_ok() { AuthDecision::Allow } else { AuthDecision::Deny };
                self.metrics.auth_cache(AuthResult::Hit, label);
                d
            }
            None if {
                let checked = self.access_reviews.check_rate(&ClientKey::User(id.user.clone()));
                self.metrics
                    .limit_tracked(metrics::Limit::AccessReviews, self.access_reviews.tracked_clients());
                checked.is_err()
            } =>
            {
                self.metrics.limit_rejected(metrics::Limit::AccessReviews);
                return Err(ApiError::TooManyRequests {
                    message: "Too many requests, please try again later.".to_owned(),
                    retry_after: 1,
                });
            }
            None => match self.review(id, attrs).await {
                Ok(status) => {
                    let (d, ttl, label) = if status.allowed {
                        (Ok(()), self.settings.allow_ttl, AuthDecision::Allow)
                    } else {
                        (Err(status.reason), self.settings.deny_ttl, AuthDecision::Deny)
                    };
                    self.metrics.auth_cache(AuthResult::Miss, label);
                    self.decisions.insert(key, d.clone(), ttl, now);
                    d
                }
                Err(e) => {
                    self.metrics.auth_cache(AuthResult::Miss, AuthDecision::Error);
                    tracing::warn!(error = %e, "subject access review failed");
                    return Err(ApiError::InternalError(e.to_string()));
                }
            },
        };
        decision.map_err(|reason| forbidden(id, attrs, &reason))
    }

    /// The user a request with `Impersonate-*` headers acts as (kube-apiserver 1.36's impersonation,
    /// see the `impersonate` module): [`Impersonation::As`] once `id` passed every check of one mode.
    ///
    /// `request` is what the request does (`None` for a non-resource request). `for_memory`: the answer
    /// only decides whether kache may serve a read from memory, and anything else is forwarded for the
    /// upstream to decide with the client's own credentials; inputs kache does not model (node usernames,
    /// bytes that are not UTF-8) and failed reviews are then [`Impersonation::Undecided`]. Otherwise
    /// (certificate clients, whose forwarded requests carry kache's credentials) kache is the only judge:
    /// denials are the apiserver's 403 (of an apiserver that has not seen the requester impersonate
    /// before), malformed headers its 400.
    pub async fn impersonate(
        &self,
        id: &Identity,
        headers: &HeaderMap,
        request: Option<&Attributes>,
        for_memory: bool,
    ) -> Impersonation {
        let result = self.impersonate_inner(id, headers, request, for_memory).await;
        let decision = match &result {
            Impersonation::None => return result,
            Impersonation::As(_) => AuthDecision::Allow,
            Impersonation::Refused(e) if e.status_code() == 403 => AuthDecision::Deny,
            Impersonation::Refused(_) | Impersonation::Undecided => AuthDecision::Error,
        };
        self.metrics.impersonation(decision);
        result
    }

    async fn impersonate_inner(
        &self,
        id: &Identity,
        headers: &HeaderMap,
        request: Option<&Attributes>,
        for_memory: bool,
    ) -> Impersonation {
        let requested = match ImpersonationRequest::parse(headers) {
            Ok(Some(r)) => r,
            Ok(None) => return Impersonation::None,
            Err(impersonate::ParseError::Api(e)) => return Impersonation::Refused(e),
            Err(impersonate::ParseError::NotUtf8(_)) if for_memory => return Impersonation::Undecided,
            Err(impersonate::ParseError::NotUtf8(message)) => {
                return Impersonation::Refused(ApiError::BadRequest(message));
            }
        };
        if for_memory && !requested.decidable_for_memory() {
            return Impersonation::Undecided;
        }
        let mut first_denial = None;
        'modes: for mode in requested.modes(request, id.credential) {
            for attrs in &mode.checks {
                match self.authorize(id, attrs).await {
                    Ok(()) => {}
                    Err(ApiError::InternalError(_) | ApiError::TooManyRequests { .. }) if for_memory => {
                        return Impersonation::Undecided;
                    }
                    // As the filter: an authorizer error is a denial, with the error as its reason.
                    Err(ApiError::InternalError(reason)) => {
                        first_denial.get_or_insert_with(|| forbidden(id, attrs, &reason));
                        continue 'modes;
                    }
                    Err(e) => {
                        first_denial.get_or_insert(e);
                        continue 'modes;
                    }
                }
            }
            if let Some((attrs, reason)) = &mode.refused {
                first_denial.get_or_insert_with(|| forbidden(id, attrs, reason));
                continue;
            }
            tracing::debug!(user = %id.user, as_user = %mode.user.user, mode = mode.name, "impersonating");
            return Impersonation::As(mode.user);
        }
        match first_denial {
            Some(e) => Impersonation::Refused(e),
            None => Impersonation::Undecided,
        }
    }

    async fn review(
        &self,
        id: &Identity,
        attrs: &Attributes,
    ) -> Result<review::AccessReviewStatus, ReviewError> {
        review::subject_access_review(self.review_upstream()?, id, attrs).await
    }

    /// Prepares a request that will be forwarded for `id`, and says which upstream client must send it.
    ///
    /// - Bearer-token clients: their own `Authorization` (and any `Impersonate-*` headers, which the
    ///   upstream authorizes against that token) pass through unchanged, over a client without kache's
    ///   credentials.
    /// - Certificate clients: their own `Authorization`/`Impersonate-*` headers are stripped; kache's
    ///   credentials carry `Impersonate-User`/`-Group`/`-Uid`/`-Extra-*` naming `id` — the certificate's
    ///   user, or the user it impersonates once [`Auth::impersonate`] allowed it. An identity that headers
    ///   cannot carry exactly is refused (500), never narrowed or changed.
    /// - `--auth=none`: unchanged; kache's client decides (it strips client credentials when it has its own).
    pub(crate) fn apply_to_forwarded(
        &self,
        id: &Identity,
        headers: &mut HeaderMap,
        extensions: &mut http::Extensions,
    ) -> Result<ForwardVia, ApiError> {
        match id.credential {
            Credential::Kache => Ok(ForwardVia::Kache),
            Credential::Bearer => Ok(ForwardVia::ClientCredentials),
            Credential::Certificate => {
                strip_identity_headers(headers);
                extensions.insert(UpstreamIdentity(impersonation_headers(id)?));
                Ok(ForwardVia::Kache)
            }
        }
    }
}

/// The group every authenticated user has (the apiserver adds it to certificate users too).
const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// The user of a verified client certificate: CN = user, O = groups; no CN is not a user (as the
/// apiserver's `CommonNameUserConversion`).
fn certificate_identity(der: &[u8]) -> Option<Identity> {
    let s = x509::subject(der)?;
    if s.common_name.is_empty() {
        return None;
    }
    let mut groups = s.organizations;
    if !groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
        groups.push(AUTHENTICATED_GROUP.to_owned());
    }
    Some(Identity::certificate(s.common_name, groups))
}

fn unauthorized() -> ApiError {
    ApiError::Unauthorized(UNAUTHORIZED.to_owned())
}

/// The apiserver's 403 for a denied resource request.
fn forbidden(id: &Identity, a: &Attributes, reason: &str) -> ApiError {
    let reason =
        forbidden_reason(&id.user, &a.verb, &a.resource, &a.subresource, &a.group, &a.namespace, reason);
    ApiError::Forbidden { group: a.group.clone(), resource: a.resource.clone(), name: a.name.clone(), reason }
}

/// The token of `Authorization: Bearer <token>` (scheme case-insensitive, as `bearertoken` parses it).
fn bearer_token(value: &HeaderValue) -> Option<&str> {
    let value = value.to_str().ok()?;
    let mut parts = value.splitn(3, ' ');
    let (scheme, token) = (parts.next()?, parts.next()?);
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn token_key(token: &str) -> TokenKey {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, token.as_bytes());
    let mut key = [0u8; 32];
    key.copy_from_slice(digest.as_ref());
    key
}

/// Removes the client's credentials and identity claims.
fn strip_identity_headers(headers: &mut HeaderMap) {
    headers.remove(header::AUTHORIZATION);
    strip_impersonation(headers);
}

/// `Impersonate-*` headers naming exactly `id`. A part that a header cannot carry unchanged (control
/// characters, or leading/trailing blanks, which HTTP parsers trim) makes the whole identity inexpressible:
/// an error, never a narrower or different identity (dropping the user while keeping its groups would ask
/// the upstream for something else entirely).
fn impersonation_headers(id: &Identity) -> Result<HeaderMap, ApiError> {
    fn value(part: &str, v: &str) -> Result<HeaderValue, ApiError> {
        let trimmed = v.trim_matches(|c| c == ' ' || c == '\t');
        match HeaderValue::from_bytes(v.as_bytes()) {
            Ok(h) if trimmed.len() == v.len() => Ok(h),
            _ => Err(ApiError::InternalError(format!(
                "the {part} {v:?} cannot be passed upstream as an impersonation header"
            ))),
        }
    }
    if id.user.is_empty() {
        return Err(ApiError::InternalError("cannot impersonate a user without a name".to_owned()));
    }
    let mut h = HeaderMap::new();
    h.append(HeaderName::from_static("impersonate-user"), value("user", &id.user)?);
    if !id.uid.is_empty() {
        h.append(HeaderName::from_static("impersonate-uid"), value("uid", &id.uid)?);
    }
    for g in &id.groups {
        h.append(HeaderName::from_static("impersonate-group"), value("group", g)?);
    }
    for (k, values) in &id.extra {
        let name = HeaderName::from_bytes(format!("impersonate-extra-{}", escape_extra_key(k)).as_bytes())
            .map_err(|_| ApiError::InternalError(format!("the extra key {k:?} cannot be passed upstream")))?;
        for v in values {
            h.append(name.clone(), value("extra value", v)?);
        }
    }
    Ok(h)
}

/// An `Impersonate-Extra-` key that the apiserver decodes back to `key` exactly: it lower-cases header
/// names, then percent-decodes them, so every byte but lower-case letters, digits and `-._~` is
/// percent-encoded — upper-case letters included, or their case would be lost.
fn escape_extra_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests;
