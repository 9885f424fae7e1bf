//! RBAC-like allow rules: one rule is a (Cluster)Role rule bound to subjects, with an optional namespace
//! restriction standing in for a RoleBinding's namespace. Verbs are free strings, so impersonation rules are
//! ordinary rules: `impersonate` on `users`/`groups`/`serviceaccounts` (group "") or `uids`/`userextras/<key>`
//! (group `authentication.k8s.io`), with `names` naming who may be impersonated. Matching follows `rbac/v1` helpers
//! (`VerbMatches`, `APIGroupMatches`, `ResourceMatches`, `ResourceNameMatches`, `NonResourceURLMatches`).

use super::{Attributes, UserInfo};

/// Matches every value in a verbs/groups/resources/namespaces/names list.
const ALL: &str = "*";

/// Who a rule is bound to. A ServiceAccount is a `User` named `system:serviceaccount:<ns>:<name>`
/// ([`Rule::service_account`]), which is how RBAC matches ServiceAccount subjects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject {
    User(String),
    Group(String),
}

/// One allow rule.
///
/// Empty `verbs`, `groups`, `resources` or `non_resource_urls` match nothing (as in RBAC); empty `namespaces`
/// means every namespace and cluster-scoped requests (a ClusterRoleBinding), a non-empty list only requests
/// in those namespaces (RoleBindings); empty `names` means every name. `"*"` matches everything in any list.
/// `resources` entries may name subresources: `pods/status`, `pods/*`, `*/scale`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rule {
    /// Shown in SubjectAccessReview reasons.
    pub name: String,
    pub subjects: Vec<Subject>,
    pub verbs: Vec<String>,
    /// API groups (`""` is the core group).
    pub groups: Vec<String>,
    pub resources: Vec<String>,
    pub namespaces: Vec<String>,
    pub names: Vec<String>,
    /// Paths such as `/api`, `/apis/*`, `/healthz`.
    pub non_resource_urls: Vec<String>,
}

fn strings(values: &[&str]) -> Vec<String> {
    values.iter().map(|v| v.to_string()).collect()
}

fn has(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == ALL || v == value)
}

impl Rule {
    pub fn new(name: impl Into<String>) -> Self {
        Rule { name: name.into(), ..Rule::default() }
    }

    pub fn user(mut self, user: &str) -> Self {
        self.subjects.push(Subject::User(user.to_string()));
        self
    }

    /// Binds a ServiceAccount, as an RBAC `ServiceAccount` subject does: by its username
    /// `system:serviceaccount:<namespace>:<name>`.
    pub fn service_account(self, namespace: &str, name: &str) -> Self {
        let user = super::service_account_username(namespace, name);
        self.user(&user)
    }

    pub fn group(mut self, group: &str) -> Self {
        self.subjects.push(Subject::Group(group.to_string()));
        self
    }

    pub fn verbs(mut self, verbs: &[&str]) -> Self {
        self.verbs = strings(verbs);
        self
    }

    pub fn api_groups(mut self, groups: &[&str]) -> Self {
        self.groups = strings(groups);
        self
    }

    pub fn resources(mut self, resources: &[&str]) -> Self {
        self.resources = strings(resources);
        self
    }

    pub fn namespaces(mut self, namespaces: &[&str]) -> Self {
        self.namespaces = strings(namespaces);
        self
    }

    pub fn names(mut self, names: &[&str]) -> Self {
        self.names = strings(names);
        self
    }

    pub fn non_resource_urls(mut self, urls: &[&str]) -> Self {
        self.non_resource_urls = strings(urls);
        self
    }

    /// True when the rule is bound to the user or one of its groups.
    pub(super) fn applies_to(&self, user: &UserInfo) -> bool {
        self.subjects.iter().any(|s| match s {
            Subject::User(name) => *name == user.name,
            Subject::Group(group) => user.groups.iter().any(|g| g == group),
        })
    }

    pub(super) fn allows_resource(&self, attrs: &Attributes) -> bool {
        has(&self.verbs, &attrs.verb)
            && has(&self.groups, &attrs.group)
            && self.resource_matches(&attrs.resource, &attrs.subresource)
            && (self.namespaces.is_empty() || has(&self.namespaces, &attrs.namespace))
            && (self.names.is_empty() || has(&self.names, &attrs.name))
    }

    /// `rbacv1helpers.ResourceMatches`.
    fn resource_matches(&self, resource: &str, subresource: &str) -> bool {
        let combined =
            if subresource.is_empty() { resource.to_string() } else { format!("{resource}/{subresource}") };
        self.resources.iter().any(|r| {
            r == ALL
                || *r == combined
                || (!subresource.is_empty()
                    && (*r == format!("{resource}/*") || *r == format!("*/{subresource}")))
        })
    }

    pub(super) fn allows_non_resource(&self, verb: &str, path: &str) -> bool {
        has(&self.verbs, verb)
            && self.non_resource_urls.iter().any(|u| {
                u == ALL || u == path || u.strip_suffix('*').is_some_and(|prefix| path.starts_with(prefix))
            })
    }

    /// The reason a SubjectAccessReview reports when this rule allows.
    pub(super) fn reason(&self) -> String {
        format!("RBAC: allowed by rule {:?}", self.name)
    }
}
