//! Impersonation as the apiserver's filter does it (k8s.io/apiserver `WithImpersonation`): the
//! `Impersonate-*` headers of a request name another identity; the requester must be allowed the verb
//! `impersonate` on each part of it (user or service account, every group, every extra value, the uid), and
//! the request then acts as that identity.
//!
//! This module is pure: [`Requested::parse`] reads the headers, [`Requested::checks`] lists the attributes to
//! authorize for the requester, [`Requested::identity`] builds the user the request acts as. `Auth` runs the
//! reviews (cached like every other decision).

use std::collections::BTreeMap;

use http::HeaderMap;

use super::{Attributes, Credential, Identity};
use crate::codec::status::ApiError;

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA_PREFIX: &str = "impersonate-extra-";

const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";
const SERVICE_ACCOUNTS_GROUP: &str = "system:serviceaccounts";
const AUTHENTICATION_GROUP: &str = "authentication.k8s.io";
pub(super) const ANONYMOUS_USER: &str = "system:anonymous";
pub(super) const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";

/// Whether the request carries any `Impersonate-*` header (http lower-cases header names).
pub fn has_impersonation(headers: &HeaderMap) -> bool {
    headers.keys().any(|k| k.as_str().starts_with("impersonate-"))
}

/// Who the request asks to act as, in the order the apiserver authorizes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requested {
    /// A service account (`system:serviceaccount:<ns>:<name>` with valid names) or a plain user.
    user: Target,
    /// `Impersonate-Group` values, in header order.
    groups: Vec<String>,
    /// Whether any `Impersonate-Group` header was sent (then the groups are exactly the requested ones).
    groups_specified: bool,
    /// `Impersonate-Extra-<key>` values by unescaped, lower-cased key.
    extra: BTreeMap<String, Vec<String>>,
    uid: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    User(String),
    ServiceAccount { namespace: String, name: String },
}

/// One part of an impersonation request, formatted as the apiserver prints its `ObjectReference`s.
struct Reference<'a> {
    kind: &'static str,
    namespace: &'a str,
    name: &'a str,
    api_version: &'static str,
    field_path: &'a str,
}

impl std::fmt::Display for Reference<'_> {
    /// Go's `%v` of an `ObjectReference`: every field in declaration order, space-separated.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Reference { kind, namespace, name, api_version, field_path } = self;
        write!(f, "{{{kind} {namespace} {name}  {api_version}  {field_path}}}")
    }
}

// === impl Requested ===

impl Requested {
    /// The impersonation the headers ask for: `Ok(None)` without any, `Err` with the apiserver's 500 when
    /// groups, extras or a uid are asked for without a user. Header values that are not UTF-8 are read
    /// lossily (Go reads header bytes as a string; no valid identity contains such bytes, so a lossy read can
    /// only name an identity the requester must still be allowed to impersonate).
    pub fn parse(headers: &HeaderMap) -> Result<Option<Self>, ApiError> {
        if !has_impersonation(headers) {
            return Ok(None);
        }
        let text = |v: &http::HeaderValue| String::from_utf8_lossy(v.as_bytes()).into_owned();
        // `Header.Get`: the first value; empty counts as absent.
        let user = headers.get(USER).map(text).filter(|u| !u.is_empty());
        let groups: Vec<String> = headers.get_all(GROUP).iter().map(text).collect();
        let uid = headers.get(UID).map(text).filter(|u| !u.is_empty());
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, value) in headers {
            if let Some(key) = name.as_str().strip_prefix(EXTRA_PREFIX) {
                extra.entry(unescape_extra_key(key)).or_default().push(text(value));
            }
        }
        let groups_specified = !groups.is_empty();
        let Some(user) = user else {
            if groups_specified || !extra.is_empty() || uid.is_some() {
                let refs = Self::references_without_user(&groups, &extra, uid.as_deref());
                return Err(ApiError::InternalError(format!(
                    "requested [{refs}] without impersonating a user"
                )));
            }
            // Only unknown `Impersonate-*` headers (or an empty user): nothing is impersonated, as the apiserver.
            return Ok(None);
        };
        let user = match split_service_account(&user) {
            Some((namespace, name)) => Target::ServiceAccount { namespace, name },
            None => Target::User(user),
        };
        Ok(Some(Self { user, groups, groups_specified, extra, uid }))
    }

    fn references_without_user(
        groups: &[String],
        extra: &BTreeMap<String, Vec<String>>,
        uid: Option<&str>,
    ) -> String {
        let mut refs: Vec<String> = groups
            .iter()
            .map(|g| {
                Reference { kind: "Group", namespace: "", name: g, api_version: "", field_path: "" }
                    .to_string()
            })
            .collect();
        for (key, values) in extra {
            for v in values {
                refs.push(
                    Reference {
                        kind: "UserExtra",
                        namespace: "",
                        name: v,
                        api_version: "authentication.k8s.io/v1",
                        field_path: key,
                    }
                    .to_string(),
                );
            }
        }
        if let Some(uid) = uid {
            refs.push(
                Reference {
                    kind: "UID",
                    namespace: "",
                    name: uid,
                    api_version: "authentication.k8s.io/v1",
                    field_path: "",
                }
                .to_string(),
            );
        }
        refs.join(" ")
    }

    /// What the requester must be allowed (verb `impersonate`), in the apiserver's order: the user or
    /// service account, each group, each extra value, the uid.
    pub fn checks(&self) -> Vec<Attributes> {
        let attrs =
            |group: &str, version: &str, resource: &str, sub: &str, ns: &str, name: &str| Attributes {
                verb: "impersonate".to_owned(),
                group: group.to_owned(),
                version: version.to_owned(),
                resource: resource.to_owned(),
                subresource: sub.to_owned(),
                namespace: ns.to_owned(),
                name: name.to_owned(),
            };
        let mut out = Vec::with_capacity(1 + self.groups.len() + self.extra.len() + 1);
        out.push(match &self.user {
            Target::User(name) => attrs("", "v1", "users", "", "", name),
            Target::ServiceAccount { namespace, name } => {
                attrs("", "v1", "serviceaccounts", "", namespace, name)
            }
        });
        for g in &self.groups {
            out.push(attrs("", "v1", "groups", "", "", g));
        }
        for (key, values) in &self.extra {
            for v in values {
                out.push(attrs(AUTHENTICATION_GROUP, "v1", "userextras", key, "", v));
            }
        }
        if let Some(uid) = &self.uid {
            out.push(attrs(AUTHENTICATION_GROUP, "v1", "uids", "", "", uid));
        }
        out
    }

    /// The user the request acts as once every check passed. `credential` is the requester's: it decides how
    /// a forwarded request carries the new identity.
    pub fn identity(&self, credential: Credential) -> Identity {
        let (user, mut groups) = match &self.user {
            Target::User(name) => (name.clone(), self.groups.clone()),
            Target::ServiceAccount { namespace, name } => {
                let groups = if self.groups_specified {
                    self.groups.clone()
                } else {
                    vec![SERVICE_ACCOUNTS_GROUP.to_owned(), format!("{SERVICE_ACCOUNTS_GROUP}:{namespace}")]
                };
                (format!("{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"), groups)
            }
        };
        if user != ANONYMOUS_USER {
            // Non-anonymous users are authenticated unless the request says they are not.
            if !groups.iter().any(|g| g == super::AUTHENTICATED_GROUP || g == UNAUTHENTICATED_GROUP) {
                groups.push(super::AUTHENTICATED_GROUP.to_owned());
            }
        } else if !groups.iter().any(|g| g == UNAUTHENTICATED_GROUP) {
            groups.push(UNAUTHENTICATED_GROUP.to_owned());
        }
        Identity {
            user,
            uid: self.uid.clone().unwrap_or_default(),
            groups,
            extra: self.extra.clone(),
            credential,
        }
    }
}

/// `serviceaccount.SplitUsername`: `system:serviceaccount:<namespace>:<name>` where the namespace is a
/// DNS-1123 label and the name a DNS-1123 subdomain.
fn split_service_account(user: &str) -> Option<(String, String)> {
    let rest = user.strip_prefix(SERVICE_ACCOUNT_PREFIX)?;
    let mut parts = rest.split(':');
    let (namespace, name) = (parts.next()?, parts.next()?);
    if parts.next().is_some() || !is_dns1123_label(namespace) || !is_dns1123_subdomain(name) {
        return None;
    }
    Some((namespace.to_owned(), name.to_owned()))
}

fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

/// `url.PathUnescape` of an extra key; a malformed escape keeps the key as sent (as the apiserver).
pub(super) fn unescape_extra_key(key: &str) -> String {
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
                _ => return key.to_owned(),
            }
        }
        out.push(b[i]);
        i += 1;
    }
    // Go strings hold any bytes; invalid UTF-8 keeps the escaped form rather than losing bytes.
    String::from_utf8(out).unwrap_or_else(|_| key.to_owned())
}

#[cfg(test)]
mod tests;
