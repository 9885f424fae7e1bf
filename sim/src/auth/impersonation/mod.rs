//! Impersonation: `Impersonate-User`, `-Group`, `-Uid` and `-Extra-<key>` headers, applied after
//! authentication and before authorization, as kube-apiserver 1.36 does by default.
//!
//! 1.36 runs the *constrained* impersonation filter (`endpoints/filters/impersonation`, KEP-5284, on by
//! default; checked against a real 1.36 apiserver): the requester may impersonate through one of five
//! modes, tried in this order (the mode that last worked for the requester first):
//!
//! | mode | applies when | checks (verb on resource, all in `authentication.k8s.io` unless noted) |
//! |---|---|---|
//! | associated-node | only a node username, requester is a ServiceAccount whose extra `authentication.kubernetes.io/node-name` names that node | `impersonate-on:associated-node:<verb>` on the request, `impersonate:associated-node` on `nodes` `*` |
//! | arbitrary-node | only a node username (`system:node:<name>`) | `impersonate-on:arbitrary-node:<verb>`, `impersonate:arbitrary-node` on `nodes` `<name>` |
//! | serviceaccount | only a ServiceAccount username | `impersonate-on:serviceaccount:<verb>`, `impersonate:serviceaccount` on `serviceaccounts` `<name>` in `<ns>` |
//! | user-info | any other username (groups, uid, extra allowed) | `impersonate-on:user-info:<verb>`, `impersonate:user-info` on `users`, `uids`, `groups`, `userextras/<key>` |
//! | legacy | always | `impersonate` on `users` / `serviceaccounts` / `groups` (core group ""), `uids` / `userextras/<key>` |
//!
//! Within a mode the checks run username, uid, groups, extra (keys sorted, values in order); the first
//! denial fails the mode. When every mode fails the answer is the *first* error met, so a requester
//! without constrained rights sees the `impersonate-on:...` denial until a legacy impersonation has
//! succeeded once, and the legacy denial afterwards (the apiserver's mode index cache; ours is unbounded
//! in time like its LRU, and forgotten wholesale when it reaches the same size).
//!
//! Deliberate differences: the apiserver caches successful constrained checks for 10 s, the sim decides
//! every request afresh (revocations show at once, within the apiserver's bound). Header values and
//! unescaped extra keys must be UTF-8: the apiserver keeps arbitrary bytes (Go strings), which the sim's
//! `String`s cannot hold losslessly, so it answers 400 BadRequest rather than guess.

use std::collections::BTreeMap;

use http::{HeaderMap, HeaderName};
use serde_json::Value;

use super::{Attributes, NODE_PREFIX, SERVICE_ACCOUNT_PREFIX};
use crate::selector::{dns1123_subdomain_errors, go_quote, is_dns1123_label};

mod modes;

/// Header names (lower case, as HTTP/2 and hyper spell them).
pub const IMPERSONATE_USER: &str = "impersonate-user";
pub const IMPERSONATE_GROUP: &str = "impersonate-group";
pub const IMPERSONATE_UID: &str = "impersonate-uid";
pub const IMPERSONATE_EXTRA_PREFIX: &str = "impersonate-extra-";

/// The request being impersonated for, as the authorizer sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Resource(Attributes),
    /// `verb` is the lower-cased HTTP method.
    NonResource {
        verb: String,
        path: String,
    },
}

impl Action {
    pub fn verb(&self) -> &str {
        match self {
            Action::Resource(a) => &a.verb,
            Action::NonResource { verb, .. } => verb,
        }
    }

    fn with_verb(&self, verb: String) -> Action {
        match self {
            Action::Resource(a) => Action::Resource(Attributes { verb, ..a.clone() }),
            Action::NonResource { path, .. } => Action::NonResource { verb, path: path.clone() },
        }
    }
}

/// What the headers ask for, before any defaulting (`processImpersonationHeaders`). `None` stands for Go's
/// nil (no such header at all), which the 400 message distinguishes from empty.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Wanted {
    pub name: String,
    pub uid: String,
    pub groups: Option<Vec<String>>,
    pub extra: Option<BTreeMap<String, Vec<String>>>,
}

/// Why an impersonation was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImpersonationError {
    /// 400 BadRequest: groups, uid or extra without a user name; or a value that is not UTF-8 (a sim
    /// limit, see the module doc).
    #[error("{0}")]
    BadRequest(String),
    /// 403 Forbidden, with its Status body (`responsewriters.ForbiddenStatusError`).
    #[error("{}", .0["message"].as_str().unwrap_or_default())]
    Forbidden(Value),
    /// 500: no mode decided. Cannot happen (legacy impersonation always decides); answered, not panicked.
    #[error("{0}")]
    Internal(String),
}

impl ImpersonationError {
    pub fn code(&self) -> u16 {
        match self {
            ImpersonationError::BadRequest(_) => 400,
            ImpersonationError::Forbidden(_) => 403,
            ImpersonationError::Internal(_) => 500,
        }
    }
}

// === parsing ===

/// Reads the `Impersonate-*` headers. `Ok(None)`: no impersonation (no user, nothing else either).
pub fn parse_headers(headers: &HeaderMap) -> Result<Option<Wanted>, ImpersonationError> {
    let first = |name: &str| headers.get(name).map(|v| utf8(name, v.as_bytes())).transpose();
    let mut wanted = Wanted {
        name: first(IMPERSONATE_USER)?.unwrap_or_default(),
        uid: first(IMPERSONATE_UID)?.unwrap_or_default(),
        ..Wanted::default()
    };
    for v in headers.get_all(IMPERSONATE_GROUP) {
        wanted.groups.get_or_insert_with(Vec::new).push(utf8(IMPERSONATE_GROUP, v.as_bytes())?);
    }
    // Go ranges over a map here (random order); sorted header names make the sim deterministic.
    let mut extra_names: Vec<&HeaderName> =
        headers.keys().filter(|k| k.as_str().starts_with(IMPERSONATE_EXTRA_PREFIX)).collect();
    extra_names.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    for name in extra_names {
        // Header names arrive lower-cased, which is the `strings.ToLower` the apiserver applies.
        let key = unescape_extra_key(&name.as_str()[IMPERSONATE_EXTRA_PREFIX.len()..])?;
        let extra = wanted.extra.get_or_insert_with(BTreeMap::new);
        for v in headers.get_all(name) {
            extra.entry(key.clone()).or_default().push(utf8(name.as_str(), v.as_bytes())?);
        }
    }
    if wanted.name.is_empty() {
        if !wanted.uid.is_empty() || wanted.groups.is_some() || wanted.extra.is_some() {
            return Err(ImpersonationError::BadRequest(format!(
                "requested {} without impersonating a user name",
                go_sharp_v(&wanted)
            )));
        }
        return Ok(None);
    }
    Ok(Some(wanted))
}

/// Removes every impersonation header (the filter does, so nothing downstream can tell).
pub fn strip_headers(headers: &mut HeaderMap) {
    let names: Vec<HeaderName> = headers
        .keys()
        .filter(|k| {
            let k = k.as_str();
            k == IMPERSONATE_USER
                || k == IMPERSONATE_GROUP
                || k == IMPERSONATE_UID
                || k.starts_with(IMPERSONATE_EXTRA_PREFIX)
        })
        .cloned()
        .collect();
    for name in names {
        headers.remove(name);
    }
}

fn utf8(header: &str, bytes: &[u8]) -> Result<String, ImpersonationError> {
    String::from_utf8(bytes.to_vec())
        .map_err(|_| ImpersonationError::BadRequest(format!("{header} header value is not valid UTF-8")))
}

/// `unescapeExtraKey`: `url.PathUnescape`, keeping the raw key when an escape is malformed.
pub fn unescape_extra_key(raw: &str) -> Result<String, ImpersonationError> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        let hex = |j: usize| bytes.get(j).and_then(|b| (*b as char).to_digit(16));
        match (hex(i + 1), hex(i + 2)) {
            (Some(hi), Some(lo)) => out.push((hi * 16 + lo) as u8),
            _ => return Ok(raw.to_string()),
        }
        i += 3;
    }
    String::from_utf8(out).map_err(|_| {
        ImpersonationError::BadRequest(format!(
            "{IMPERSONATE_EXTRA_PREFIX}{raw} header name does not unescape to valid UTF-8"
        ))
    })
}

/// Go's `%#v` of a `*user.DefaultInfo`, which the 400 message prints.
fn go_sharp_v(w: &Wanted) -> String {
    kache_k8s::gofmt::user_info_sharp_v(&w.name, &w.uid, w.groups.as_deref(), w.extra.as_ref())
}

// === usernames ===

/// `serviceaccount.SplitUsername`: namespace a DNS-1123 label, name a DNS-1123 subdomain.
pub fn split_service_account(username: &str) -> Option<(&str, &str)> {
    let (ns, name) = username.strip_prefix(SERVICE_ACCOUNT_PREFIX)?.split_once(':')?;
    let valid = is_dns1123_label(ns) && !name.contains(':') && dns1123_subdomain_errors(name).is_empty();
    valid.then_some((ns, name))
}

/// A node username's node name (a DNS-1123 subdomain).
fn node_name(username: &str) -> Option<&str> {
    username.strip_prefix(NODE_PREFIX).filter(|n| dns1123_subdomain_errors(n).is_empty())
}

#[cfg(test)]
mod tests;
