//! Optional authentication and authorization for the sim, modelled on kube-apiserver's static token file
//! authenticator and its RBAC authorizer, plus the TokenReview and SubjectAccessReview APIs that kache's
//! security work delegates to.
//!
//! - Authentication: `Authorization: Bearer <token>` (scheme case-insensitive, as `bearertoken` parses it)
//!   against static tokens. Authenticated users get the `system:authenticated` group, as the apiserver adds
//!   it. With anonymous access on, a request *without* credentials is `system:anonymous`
//!   (`system:unauthenticated`); a request with a bad token is never anonymous.
//! - Authorization: RBAC-like allow rules (no deny rules, like RBAC). Members of `system:masters` are always
//!   allowed, like the apiserver's privileged group. The apiserver's bootstrap policy for discovery and
//!   self-reviews applies too unless turned off ([`bootstrap_rules`]).
//! - Impersonation (`Impersonate-User`/`-Group`/`-Uid`/`-Extra-*`): after authentication, before
//!   authorization, as 1.36's default (constrained) impersonation filter does it; see [`impersonation`].
//! - Both tables live behind locks so that tests can add and revoke tokens and rules while the sim serves.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use serde_json::{Value, json};

/// The group every authenticated user gets.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";
/// The group that bypasses authorization.
pub const MASTERS_GROUP: &str = "system:masters";
/// The anonymous user and its group.
pub const ANONYMOUS_USER: &str = "system:anonymous";
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";
/// The prefix of ServiceAccount usernames (`system:serviceaccount:<namespace>:<name>`).
pub const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";
/// The group of all ServiceAccounts; each also gets `system:serviceaccounts:<namespace>`.
pub const SERVICE_ACCOUNTS_GROUP: &str = "system:serviceaccounts";
/// The prefix of node usernames and the group of all nodes.
pub const NODE_PREFIX: &str = "system:node:";
pub const NODES_GROUP: &str = "system:nodes";
/// `--api-audiences` default of a kubeadm cluster.
pub const DEFAULT_API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

pub mod impersonation;
mod review;
mod rules;
mod status;

pub use impersonation::{Action, ImpersonationError};
pub use review::ReviewError;
pub use rules::{Rule, Subject};
pub use status::{
    forbidden_message, forbidden_non_resource_status, forbidden_status, forbidden_status_because,
    unauthorized_status,
};

// === impl UserInfo ===

/// Who a request is from (`user.Info`): name, uid, groups and extra, as authentication or impersonation
/// produced them. Only the name and groups take part in authorization (as in RBAC); uid and extra are
/// carried through TokenReview, SubjectAccessReview and impersonation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub groups: Vec<String>,
    /// Empty when the user has none.
    pub uid: String,
    /// Keys are sorted (Go's maps are unordered; JSON encodes them sorted).
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    pub fn new(name: impl Into<String>, groups: &[&str]) -> Self {
        UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..UserInfo::default()
        }
    }

    /// A ServiceAccount's user as the apiserver authenticates its tokens: `system:serviceaccount:<ns>:<name>`
    /// in `system:serviceaccounts` and `system:serviceaccounts:<ns>`.
    pub fn service_account(namespace: &str, name: &str) -> Self {
        UserInfo {
            name: service_account_username(namespace, name),
            groups: service_account_groups(namespace),
            ..UserInfo::default()
        }
    }

    /// Sets the uid.
    pub fn with_uid(mut self, uid: impl Into<String>) -> Self {
        self.uid = uid.into();
        self
    }

    /// Adds values under an extra key (appending to values already there).
    pub fn with_extra(mut self, key: impl Into<String>, values: &[&str]) -> Self {
        self.extra.entry(key.into()).or_default().extend(values.iter().map(|v| v.to_string()));
        self
    }

    /// Appends groups.
    pub fn with_groups(mut self, groups: &[&str]) -> Self {
        self.groups.extend(groups.iter().map(|g| g.to_string()));
        self
    }

    /// The `status.user` / `userInfo` JSON of TokenReview: username, uid, groups, extra (empty ones left out).
    pub fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("username".into(), json!(self.name));
        if !self.uid.is_empty() {
            m.insert("uid".into(), json!(self.uid));
        }
        if !self.groups.is_empty() {
            m.insert("groups".into(), json!(self.groups));
        }
        if !self.extra.is_empty() {
            m.insert("extra".into(), json!(self.extra));
        }
        Value::Object(m)
    }
}

/// `serviceaccount.MakeUsername`.
pub fn service_account_username(namespace: &str, name: &str) -> String {
    format!("{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}")
}

/// `serviceaccount.MakeGroupNames`.
pub fn service_account_groups(namespace: &str) -> Vec<String> {
    vec![SERVICE_ACCOUNTS_GROUP.to_string(), format!("{SERVICE_ACCOUNTS_GROUP}:{namespace}")]
}

/// What a request wants to do, as the apiserver's `RequestInfo` describes a resource request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    /// Empty for cluster-scoped resources and all-namespace requests.
    pub namespace: String,
    /// Empty for list, watch (without a name) and create.
    pub name: String,
}

// === impl AuthConfig ===

/// Static bearer tokens and allow rules; cheap to share behind an `Arc`, mutable through `&self`.
#[derive(Debug)]
pub struct AuthConfig {
    /// Token → its user (uid and extra included), without `system:authenticated`.
    tokens: RwLock<HashMap<String, UserInfo>>,
    rules: RwLock<Vec<Rule>>,
    /// Per requester name, the impersonation mode that last succeeded (tried first next time).
    impersonation_modes: Mutex<HashMap<String, usize>>,
    /// The bootstrap ClusterRoles and bindings; not touched by [`AuthConfig::set_rules`].
    bootstrap: Vec<Rule>,
    anonymous: bool,
    api_audiences: Vec<String>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            tokens: RwLock::new(HashMap::new()),
            rules: RwLock::new(Vec::new()),
            impersonation_modes: Mutex::new(HashMap::new()),
            bootstrap: bootstrap_rules(),
            anonymous: false,
            api_audiences: vec![DEFAULT_API_AUDIENCE.to_string()],
        }
    }
}

/// A poisoned lock only means a panic elsewhere while holding it; the tables stay usable.
fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

impl AuthConfig {
    /// No tokens, no rules, anonymous access off, the default API audience.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a static token (builder form of [`AuthConfig::add_token`]).
    pub fn with_token(self, token: impl Into<String>, user: UserInfo) -> Self {
        self.add_token(token, user);
        self
    }

    /// Adds an allow rule.
    pub fn with_rule(self, rule: Rule) -> Self {
        write(&self.rules).push(rule);
        self
    }

    /// Lets requests without credentials through as `system:anonymous` (the apiserver's `--anonymous-auth`).
    pub fn with_anonymous(mut self, enabled: bool) -> Self {
        self.anonymous = enabled;
        self
    }

    /// Keeps (the default) or drops the apiserver's bootstrap policy ([`bootstrap_rules`]).
    pub fn with_bootstrap_policy(mut self, enabled: bool) -> Self {
        self.bootstrap = if enabled { bootstrap_rules() } else { Vec::new() };
        self
    }

    /// Replaces the API audiences that TokenReview checks requested audiences against.
    pub fn with_api_audiences(mut self, audiences: &[&str]) -> Self {
        self.api_audiences = audiences.iter().map(|a| a.to_string()).collect();
        self
    }

    /// Parses a static token file (`token,user,uid,"group1,group2"` per line, as `--token-auth-file`).
    pub fn with_token_csv(self, csv: &str) -> Result<Self, String> {
        for (i, line) in csv.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields = split_csv_line(line);
            let [token, user, uid, rest @ ..] = fields.as_slice() else {
                return Err(format!(
                    "token file line {}: expected at least 3 columns, got {}",
                    i + 1,
                    fields.len()
                ));
            };
            if token.is_empty() || user.is_empty() {
                return Err(format!("token file line {}: token and user must not be empty", i + 1));
            }
            let groups =
                rest.first().map(|g| g.split(',').map(str::trim).filter(|g| !g.is_empty()).collect());
            let user = UserInfo::new(user.clone(), &groups.unwrap_or_else(Vec::new)).with_uid(uid.clone());
            write(&self.tokens).insert(token.clone(), user);
        }
        Ok(self)
    }

    /// Adds or replaces a static token. The user's uid and extra are what authentication (and TokenReview)
    /// report for it; `system:authenticated` is added at authentication.
    pub fn add_token(&self, token: impl Into<String>, user: UserInfo) {
        write(&self.tokens).insert(token.into(), user);
    }

    /// Removes a token; returns whether it existed.
    pub fn revoke_token(&self, token: &str) -> bool {
        write(&self.tokens).remove(token).is_some()
    }

    /// Replaces every rule at once (tests grant and revoke permissions with this); the bootstrap policy stays.
    pub fn set_rules(&self, rules: Vec<Rule>) {
        *write(&self.rules) = rules;
    }

    /// The current rules.
    pub fn rules(&self) -> Vec<Rule> {
        read(&self.rules).clone()
    }

    /// Authenticates a request by its `Authorization` header value. `None` means 401 Unauthorized.
    pub fn authenticate(&self, authorization_header: Option<&str>) -> Option<UserInfo> {
        let Some(header) = authorization_header else {
            return self.anonymous.then(|| UserInfo::new(ANONYMOUS_USER, &[UNAUTHENTICATED_GROUP]));
        };
        // `bearertoken.Authenticator`: split in at most 3 parts on spaces, scheme compared case-insensitively.
        let mut parts = header.splitn(3, ' ');
        let (Some(scheme), Some(token)) = (parts.next(), parts.next()) else { return None };
        if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
            return None;
        }
        self.lookup_token(token)
    }

    /// A token's user, with `system:authenticated` added.
    fn lookup_token(&self, token: &str) -> Option<UserInfo> {
        let mut user = read(&self.tokens).get(token)?.clone();
        if !user.groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
            user.groups.push(AUTHENTICATED_GROUP.to_string());
        }
        Some(user)
    }

    /// Whether `user` may do `attrs` (a resource request).
    pub fn authorize(&self, user: &UserInfo, attrs: &Attributes) -> bool {
        self.allowing_rule(user, |rule| rule.allows_resource(attrs)).is_some()
    }

    /// Whether `user` may `verb` a non-resource path such as `/api`, `/version` or `/healthz`.
    pub fn authorize_non_resource(&self, user: &UserInfo, verb: &str, path: &str) -> bool {
        self.allowing_rule(user, |rule| rule.allows_non_resource(verb, path)).is_some()
    }

    /// The reason text of the first rule that allows, `Some("")` for `system:masters`, `None` when denied.
    fn allowing_rule(&self, user: &UserInfo, allows: impl Fn(&Rule) -> bool) -> Option<String> {
        if user.groups.iter().any(|g| g == MASTERS_GROUP) {
            return Some(String::new());
        }
        let rules = read(&self.rules);
        rules.iter().chain(&self.bootstrap).find(|r| r.applies_to(user) && allows(r)).map(Rule::reason)
    }

    /// A TokenReview request body → the response body (`status.authenticated`, `status.user`,
    /// `status.audiences`). `Err` is a 400 BadRequest message.
    pub fn token_review(&self, body: &[u8]) -> Result<Vec<u8>, String> {
        review::token_review(self, body).map_err(|e| e.to_string())
    }

    /// A SubjectAccessReview request body → the response body (`status.allowed`, `status.reason`).
    /// `Err` is the message of the 400/422 the apiserver would answer ([`AuthConfig::subject_access_review_checked`]
    /// tells which).
    pub fn subject_access_review(&self, body: &[u8]) -> Result<Vec<u8>, String> {
        review::subject_access_review(self, body).map_err(|e| e.to_string())
    }

    /// [`AuthConfig::token_review`] with a typed error (code and Status body).
    pub fn token_review_checked(&self, body: &[u8]) -> Result<Vec<u8>, ReviewError> {
        review::token_review(self, body)
    }

    /// [`AuthConfig::subject_access_review`] with a typed error: 400 for undecodable bodies, 422 Invalid
    /// (with causes) for specs that fail validation.
    pub fn subject_access_review_checked(&self, body: &[u8]) -> Result<Vec<u8>, ReviewError> {
        review::subject_access_review(self, body)
    }
}

/// The parts of kube-apiserver's bootstrap RBAC policy that every cluster has and that clients rely on
/// (`plugin/pkg/auth/authorizer/rbac/bootstrappolicy`): `system:discovery` and `system:basic-user` bound to
/// `system:authenticated`, `system:public-info-viewer` bound to authenticated and unauthenticated users.
pub fn bootstrap_rules() -> Vec<Rule> {
    vec![
        Rule::new("system:discovery").group(AUTHENTICATED_GROUP).verbs(&["get"]).non_resource_urls(&[
            "/livez",
            "/readyz",
            "/healthz",
            "/version",
            "/version/",
            "/openapi",
            "/openapi/*",
            "/api",
            "/api/*",
            "/apis",
            "/apis/*",
        ]),
        Rule::new("system:public-info-viewer")
            .group(AUTHENTICATED_GROUP)
            .group(UNAUTHENTICATED_GROUP)
            .verbs(&["get"])
            .non_resource_urls(&["/livez", "/readyz", "/healthz", "/version", "/version/"]),
        Rule::new("system:basic-user")
            .group(AUTHENTICATED_GROUP)
            .verbs(&["create"])
            .api_groups(&["authorization.k8s.io"])
            .resources(&["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
        Rule::new("system:basic-user")
            .group(AUTHENTICATED_GROUP)
            .verbs(&["create"])
            .api_groups(&["authentication.k8s.io"])
            .resources(&["selfsubjectreviews"]),
    ]
}

/// Splits one CSV line with `"`-quoted fields (`""` inside quotes is a quote), as `encoding/csv` reads it.
fn split_csv_line(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                fields.last_mut().expect("fields starts non-empty").push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(String::new()),
            (c, _) => fields.last_mut().expect("fields starts non-empty").push(c),
        }
    }
    fields
}

/// Echoes a review object as the apiserver returns it: kind, apiVersion, metadata, spec, status.
fn review_response(kind: &str, api_version: &str, spec: &Value, status: Value) -> Result<Vec<u8>, String> {
    let out = json!({
        "kind": kind,
        "apiVersion": api_version,
        "metadata": {"creationTimestamp": null},
        "spec": spec,
        "status": status
    });
    serde_json::to_vec(&out).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests;
