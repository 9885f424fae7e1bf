//! Impersonation as kube-apiserver 1.36 does it (k8s.io/apiserver's constrained impersonation filter,
//! KEP-5284, on by default since 1.36; checked against a real 1.36 apiserver): the `Impersonate-*`
//! headers of a request name another identity, and the requester must be allowed to become it through
//! one of the impersonation modes, tried in order; the first that passes decides the new user:
//!
//! | mode | applies to | checks, as the requester |
//! |---|---|---|
//! | arbitrary-node | a node username (`system:node:<name>`) alone | `impersonate-on:arbitrary-node:<verb>` on the request; `impersonate:arbitrary-node` on `nodes/<name>` |
//! | serviceaccount | a service-account username alone | `impersonate-on:serviceaccount:<verb>`; `impersonate:serviceaccount` on `serviceaccounts/<name>` in `<ns>` |
//! | user-info | any other username, with groups, uid, extras | `impersonate-on:user-info:<verb>`; `impersonate:user-info` on `users`, `uids`, `groups`, `userextras/<key>` |
//! | legacy | always | `impersonate` on `users`/`serviceaccounts`/`groups` (core group), `uids`/`userextras/<key>` |
//!
//! Constrained modes (all but legacy) check in group `authentication.k8s.io` and refuse the empty group,
//! `system:masters`, and extras that are not lower-case domain-prefixed keys with non-empty values. The
//! apiserver's associated-node mode (a pod's service account impersonating its own node) is not modelled:
//! kache never answers such a request from memory (see [`Requested::decidable_for_memory`]).
//!
//! The apiserver remembers per requester which mode last worked and tries it first, so which denial it
//! reports, and for node usernames which groups the new user gets, depend on its history. kache tries the
//! modes in the fixed order above (an apiserver that has not seen the requester before) and, for clients
//! whose requests reach the upstream with their own credentials, serves from memory only what it allowed
//! and forwards everything else for the upstream to decide (see `Auth::impersonate`).
//!
//! This module is pure: [`Requested::parse`] reads the headers, [`Requested::modes`] lists each mode's
//! checks and the user it produces; `Auth` runs the reviews (cached like every other decision).

use std::collections::BTreeMap;

use http::HeaderMap;

use super::{AUTHENTICATED_GROUP, Attributes, Credential, Identity};
use crate::codec::status::ApiError;
use crate::options::selector::is_dns1123_subdomain_syntax;
use kache_k8s::json::go_quote;

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA_PREFIX: &str = "impersonate-extra-";

const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";
const SERVICE_ACCOUNTS_GROUP: &str = "system:serviceaccounts";
const NODE_PREFIX: &str = "system:node:";
const NODES_GROUP: &str = "system:nodes";
const MASTERS_GROUP: &str = "system:masters";
const AUTHENTICATION_GROUP: &str = "authentication.k8s.io";
const ANONYMOUS_USER: &str = "system:anonymous";
const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";

/// Whether the request carries any `Impersonate-*` header (http lower-cases header names).
pub fn has_impersonation(headers: &HeaderMap) -> bool {
    headers.keys().any(|k| k.as_str().starts_with("impersonate-"))
}

/// Removes every `Impersonate-*` header (after kache applied them, as the apiserver's filter does).
pub(crate) fn strip_impersonation(headers: &mut HeaderMap) {
    let names: Vec<http::HeaderName> =
        headers.keys().filter(|k| k.as_str().starts_with("impersonate-")).cloned().collect();
    for name in names {
        headers.remove(name);
    }
}

/// What the headers ask for (`processImpersonationHeaders`). `None` is Go's nil (no such header at
/// all), which the 400 message tells apart from empty.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Requested {
    name: String,
    uid: String,
    groups: Option<Vec<String>>,
    extra: Option<BTreeMap<String, Vec<String>>>,
}

/// Why headers could not be read as an impersonation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// The apiserver's own answer (400: groups, uid or extras without a user name).
    Api(ApiError),
    /// Bytes that are not UTF-8 in a value or an unescaped extra key. The apiserver keeps such bytes
    /// (Go strings); kache does not model them: forwarded when the upstream decides, else a 400.
    NotUtf8(String),
}

/// One impersonation mode: the reviews it needs and the user it produces, or the denial it answers
/// without a review (a constrained mode's own validation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModeChecks {
    pub name: &'static str,
    /// In order; the first one denied fails the mode.
    pub checks: Vec<Attributes>,
    /// After `checks` passed, a check this mode fails anyway, with the apiserver's reason.
    pub refused: Option<(Attributes, String)>,
    pub user: Identity,
}

// === impl Requested ===

impl Requested {
    /// The impersonation the headers ask for: `Ok(None)` without any (an empty `Impersonate-User` alone,
    /// or only unknown `Impersonate-*` headers, is none, as in the apiserver).
    pub fn parse(headers: &HeaderMap) -> Result<Option<Self>, ParseError> {
        if !has_impersonation(headers) {
            return Ok(None);
        }
        let text = |name: &str, v: &http::HeaderValue| {
            String::from_utf8(v.as_bytes().to_vec())
                .map_err(|_| ParseError::NotUtf8(format!("the {name} header value is not UTF-8")))
        };
        // `Header.Get`: the first value.
        let first = |name: &str| headers.get(name).map(|v| text(name, v)).transpose();
        let mut r = Requested {
            name: first(USER)?.unwrap_or_default(),
            uid: first(UID)?.unwrap_or_default(),
            ..Requested::default()
        };
        for v in headers.get_all(GROUP) {
            r.groups.get_or_insert_with(Vec::new).push(text(GROUP, v)?);
        }
        for (name, value) in headers {
            if let Some(key) = name.as_str().strip_prefix(EXTRA_PREFIX) {
                let key = unescape_extra_key(key)
                    .ok_or_else(|| ParseError::NotUtf8(format!("the extra key {key:?} is not UTF-8")))?;
                r.extra
                    .get_or_insert_with(BTreeMap::new)
                    .entry(key)
                    .or_default()
                    .push(text(name.as_str(), value)?);
            }
        }
        if r.name.is_empty() {
            if !r.uid.is_empty() || r.groups.is_some() || r.extra.is_some() {
                let message = format!("requested {} without impersonating a user name", r.go_sharp_v());
                return Err(ParseError::Api(ApiError::BadRequest(message)));
            }
            return Ok(None);
        }
        Ok(Some(r))
    }

    /// Go's `%#v` of the `*user.DefaultInfo` the apiserver prints in its 400.
    fn go_sharp_v(&self) -> String {
        kache_k8s::gofmt::user_info_sharp_v(
            &self.name,
            &self.uid,
            self.groups.as_deref(),
            self.extra.as_ref(),
        )
    }

    /// Whether kache may answer this impersonation from memory for a client whose requests otherwise
    /// reach the upstream with its own credentials. Node usernames are not: the apiserver's choice
    /// between its node modes and legacy impersonation (which give the node different groups) depends on
    /// its per-requester history, so only the upstream knows which user the request runs as.
    pub(crate) fn decidable_for_memory(&self) -> bool {
        node_name(&self.name).is_none()
    }

    fn only_name(&self) -> bool {
        self.uid.is_empty()
            && self.groups.as_ref().is_none_or(Vec::is_empty)
            && self.extra.as_ref().is_none_or(BTreeMap::is_empty)
    }

    /// The modes that apply, in the order the apiserver tries them, each with its checks. `request` is
    /// the request being impersonated for (constrained modes authorize `impersonate-on:<mode>:<verb>` on
    /// it); without one (a non-resource request) only legacy impersonation is considered, which is
    /// stricter, never looser.
    pub fn modes(&self, request: Option<&Attributes>, credential: Credential) -> Vec<ModeChecks> {
        let mut out = Vec::with_capacity(2);
        let node = node_name(&self.name);
        let service_account = split_service_account(&self.name);
        if let Some(request) = request {
            if node.is_some() && self.only_name() {
                out.push(self.constrained("arbitrary-node", request, credential));
            }
            if service_account.is_some() && self.only_name() {
                out.push(self.constrained("serviceaccount", request, credential));
            }
            if node.is_none() && service_account.is_none() {
                out.push(self.constrained("user-info", request, credential));
            }
        }
        out.push(self.legacy(credential));
        out
    }

    fn constrained(&self, mode: &'static str, request: &Attributes, credential: Credential) -> ModeChecks {
        let verb = format!("impersonate:{mode}");
        let check = |resource: &str, sub: &str, ns: &str, name: &str| Attributes {
            verb: verb.clone(),
            group: AUTHENTICATION_GROUP.to_owned(),
            version: "v1".to_owned(),
            resource: resource.to_owned(),
            subresource: sub.to_owned(),
            namespace: ns.to_owned(),
            name: name.to_owned(),
        };
        let mut checks =
            vec![Attributes { verb: format!("impersonate-on:{mode}:{}", request.verb), ..request.clone() }];
        let wanted_groups = self.groups.clone().unwrap_or_default();
        let mut groups = wanted_groups.clone();
        if let Some(node) = node_name(&self.name) {
            checks.push(check("nodes", "", "", node));
            groups = vec![NODES_GROUP.to_owned()];
        } else if let Some((ns, name)) = split_service_account(&self.name) {
            checks.push(check("serviceaccounts", "", ns, name));
            if wanted_groups.is_empty() {
                groups = service_account_groups(ns);
            }
        } else {
            checks.push(check("users", "", "", &self.name));
        }
        if !self.uid.is_empty() {
            checks.push(check("uids", "", "", &self.uid));
        }
        let mut refused = None;
        if wanted_groups.iter().any(String::is_empty) {
            refused =
                Some((check("groups", "", "", ""), "impersonating the empty string group is not allowed"));
        } else if wanted_groups.iter().any(|g| g == MASTERS_GROUP) {
            let reason = "impersonating the system:masters group is not allowed";
            refused = Some((check("groups", "", "", MASTERS_GROUP), reason));
        }
        let mut refused = refused.map(|(a, r)| (a, r.to_owned()));
        if refused.is_none() {
            checks.extend(wanted_groups.iter().map(|g| check("groups", "", "", g)));
            let extra = self.extra.clone().unwrap_or_default();
            match validate_extra(&extra) {
                Err(reason) => refused = Some((check("userextras", "", "", ""), reason)),
                Ok(()) => {
                    for (key, values) in &extra {
                        checks.extend(values.iter().map(|v| check("userextras", key, "", v)));
                    }
                }
            }
        }
        ModeChecks { name: mode, checks, refused, user: self.user(groups, credential) }
    }

    fn legacy(&self, credential: Credential) -> ModeChecks {
        let check =
            |group: &str, version: &str, resource: &str, sub: &str, ns: &str, name: &str| Attributes {
                verb: "impersonate".to_owned(),
                group: group.to_owned(),
                version: version.to_owned(),
                resource: resource.to_owned(),
                subresource: sub.to_owned(),
                namespace: ns.to_owned(),
                name: name.to_owned(),
            };
        let wanted_groups = self.groups.clone().unwrap_or_default();
        let mut groups = wanted_groups.clone();
        let mut checks = Vec::new();
        match split_service_account(&self.name) {
            Some((ns, name)) => {
                checks.push(check("", "", "serviceaccounts", "", ns, name));
                if wanted_groups.is_empty() {
                    groups = service_account_groups(ns);
                }
            }
            None => checks.push(check("", "", "users", "", "", &self.name)),
        }
        if !self.uid.is_empty() {
            checks.push(check(AUTHENTICATION_GROUP, "v1", "uids", "", "", &self.uid));
        }
        checks.extend(wanted_groups.iter().map(|g| check("", "", "groups", "", "", g)));
        for (key, values) in self.extra.iter().flatten() {
            checks.extend(values.iter().map(|v| check(AUTHENTICATION_GROUP, "v1", "userextras", key, "", v)));
        }
        ModeChecks { name: "legacy", checks, refused: None, user: self.user(groups, credential) }
    }

    /// The new user: `system:anonymous` gets `system:unauthenticated`; anyone else `system:authenticated`
    /// unless either group was asked for.
    fn user(&self, mut groups: Vec<String>, credential: Credential) -> Identity {
        if self.name == ANONYMOUS_USER {
            if !groups.iter().any(|g| g == UNAUTHENTICATED_GROUP) {
                groups.push(UNAUTHENTICATED_GROUP.to_owned());
            }
        } else if !groups.iter().any(|g| g == AUTHENTICATED_GROUP || g == UNAUTHENTICATED_GROUP) {
            groups.push(AUTHENTICATED_GROUP.to_owned());
        }
        Identity {
            user: self.name.clone(),
            uid: self.uid.clone(),
            groups,
            extra: self.extra.clone().unwrap_or_default(),
            credential,
        }
    }
}

fn service_account_groups(namespace: &str) -> Vec<String> {
    vec![SERVICE_ACCOUNTS_GROUP.to_owned(), format!("{SERVICE_ACCOUNTS_GROUP}:{namespace}")]
}

/// Constrained modes refuse extras that legacy impersonation passes on (`validateExtra`).
fn validate_extra(extra: &BTreeMap<String, Vec<String>>) -> Result<(), String> {
    for (key, values) in extra {
        if key.is_empty() {
            return Err("impersonating the empty string key in extra is not allowed".to_owned());
        }
        if let Some(error) = domain_prefixed_path_error(key) {
            return Err(format!("impersonating an invalid key in extra is not allowed: {error}"));
        }
        if *key != key.to_lowercase() {
            return Err(format!(
                "impersonating a non-lowercase key in extra is not allowed: {}",
                go_quote(key)
            ));
        }
        if values.is_empty() {
            return Err("impersonating empty values in extra is not allowed".to_owned());
        }
        if values.iter().any(String::is_empty) {
            return Err("impersonating the empty string value in extra is not allowed".to_owned());
        }
    }
    Ok(())
}

/// `IsDomainPrefixedPath` for `extra.key`: a DNS-1123 subdomain, `/`, then an HTTP path. The first
/// problem, worded as the apiserver's field error.
fn domain_prefixed_path_error(key: &str) -> Option<String> {
    let invalid =
        |value: &str, detail: &str| format!("extra.key: Invalid value: {}: {detail}", go_quote(value));
    let Some((host, path)) = key.split_once('/').filter(|(h, p)| !h.is_empty() && !p.is_empty()) else {
        return Some(invalid(key, r#"must be a domain-prefixed path (such as "acme.io/foo")"#));
    };
    if !is_dns1123_subdomain(host) {
        return Some(invalid(
            host,
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', \
             and must start and end with an alphanumeric character (e.g. 'example.com', regex used for \
             validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        ));
    }
    let path_char = |c: char| c.is_ascii_alphanumeric() || "/-._~%!$&'()*+,;=:".contains(c);
    if !path.chars().all(path_char) {
        return Some(invalid(
            path,
            "Invalid path (regex used for validation is '[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+')",
        ));
    }
    None
}

/// `serviceaccount.SplitUsername`: `system:serviceaccount:<namespace>:<name>` where the namespace is a
/// DNS-1123 label and the name a DNS-1123 subdomain.
fn split_service_account(user: &str) -> Option<(&str, &str)> {
    let (namespace, name) = user.strip_prefix(SERVICE_ACCOUNT_PREFIX)?.split_once(':')?;
    (is_dns1123_label(namespace) && !name.contains(':') && is_dns1123_subdomain(name))
        .then_some((namespace, name))
}

/// A node username's node name (a DNS-1123 subdomain).
fn node_name(user: &str) -> Option<&str> {
    user.strip_prefix(NODE_PREFIX).filter(|n| is_dns1123_subdomain(n))
}

/// `IsDNS1123Label`: at most 63 characters of `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
fn is_dns1123_label(s: &str) -> bool {
    s.len() <= 63 && !s.contains('.') && is_dns1123_subdomain_syntax(s)
}

/// `IsDNS1123Subdomain`: at most 253 characters of dot-separated labels.
fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && is_dns1123_subdomain_syntax(s)
}

/// `url.PathUnescape` of an extra key; a malformed escape keeps the key as sent (as the apiserver);
/// `None` when the decoded bytes are not UTF-8.
pub(super) fn unescape_extra_key(key: &str) -> Option<String> {
    let b = key.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = |c: u8| (c as char).to_digit(16);
            match (b.get(i + 1).copied().and_then(hex), b.get(i + 2).copied().and_then(hex)) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => return Some(key.to_owned()),
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests;
