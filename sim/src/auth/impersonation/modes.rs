//! The impersonation modes and their checks (`mode.go`, `constrained_impersonation.go`): which mode
//! applies to whom, the authorization checks each makes, and the user a success produces.

use std::collections::BTreeMap;

use super::{Action, ImpersonationError, Wanted, go_quote, node_name, split_service_account};
use crate::auth::{
    ANONYMOUS_USER, AUTHENTICATED_GROUP, Attributes, AuthConfig, MASTERS_GROUP, NODES_GROUP,
    UNAUTHENTICATED_GROUP, UserInfo, forbidden_non_resource_status, forbidden_status_because,
    service_account_groups,
};
use crate::selector::{aggregate, domain_prefixed_path_errors};

/// The group of uids, userextras and (in constrained modes) users, groups, serviceaccounts and nodes.
const AUTHENTICATION_GROUP: &str = "authentication.k8s.io";
/// The ServiceAccount extra naming the node its pod runs on (`serviceaccount.NodeNameKey`).
const NODE_NAME_EXTRA: &str = "authentication.kubernetes.io/node-name";
/// From this many groups or extra values on, constrained modes first try one wildcard check
/// (`manyAuthorizationChecksInLoop`).
const MANY_CHECKS: usize = 4;
/// Requesters whose last successful mode is remembered (the apiserver's LRU holds 10 000).
const MODE_INDEX_CAPACITY: usize = 10_000;

/// The impersonation modes in the order the apiserver tries them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    AssociatedNode,
    ArbitraryNode,
    ServiceAccount,
    UserInfo,
    Legacy,
}

const MODES: [Mode; 5] =
    [Mode::AssociatedNode, Mode::ArbitraryNode, Mode::ServiceAccount, Mode::UserInfo, Mode::Legacy];

impl Mode {
    /// The constraint name of a constrained mode.
    fn constraint(self) -> Option<&'static str> {
        match self {
            Mode::AssociatedNode => Some("associated-node"),
            Mode::ArbitraryNode => Some("arbitrary-node"),
            Mode::ServiceAccount => Some("serviceaccount"),
            Mode::UserInfo => Some("user-info"),
            Mode::Legacy => None,
        }
    }

    fn verb(self) -> String {
        self.constraint().map_or_else(|| "impersonate".to_string(), |c| format!("impersonate:{c}"))
    }

    /// The API group of the users/groups/serviceaccounts/nodes checks.
    fn identity_group(self) -> &'static str {
        if self == Mode::Legacy { "" } else { AUTHENTICATION_GROUP }
    }

    /// Whether the mode can impersonate `wanted` for `requester` at all (the constrained modes' filters).
    fn applies(self, wanted: &Wanted, requester: &UserInfo) -> bool {
        let only_name = wanted.uid.is_empty()
            && wanted.groups.as_ref().is_none_or(Vec::is_empty)
            && wanted.extra.as_ref().is_none_or(BTreeMap::is_empty);
        let node = node_name(&wanted.name);
        let service_account = split_service_account(&wanted.name).is_some();
        match self {
            Mode::AssociatedNode => {
                only_name
                    && node.is_some()
                    && split_service_account(&requester.name).is_some()
                    && requester
                        .extra
                        .get(NODE_NAME_EXTRA)
                        .is_some_and(|v| v.len() == 1 && Some(v[0].as_str()) == node)
            }
            Mode::ArbitraryNode => only_name && node.is_some(),
            Mode::ServiceAccount => only_name && service_account,
            Mode::UserInfo => node.is_none() && !service_account,
            Mode::Legacy => true,
        }
    }
}

// === impl AuthConfig (impersonation) ===

impl AuthConfig {
    /// Decides an impersonation by `requester` for `action`; `Ok` is the user the request then runs as.
    pub fn impersonate(
        &self,
        requester: &UserInfo,
        wanted: &Wanted,
        action: &Action,
    ) -> Result<UserInfo, ImpersonationError> {
        let modes = || self.impersonation_modes.lock().unwrap_or_else(|e| e.into_inner());
        let last = modes().get(&requester.name).copied();
        let order = last.into_iter().chain((0..MODES.len()).filter(|i| Some(*i) != last));
        let mut first_err = None;
        for i in order {
            match self.check_mode(MODES[i], requester, wanted, action) {
                Ok(Some(user)) => {
                    let mut modes = modes();
                    if modes.len() >= MODE_INDEX_CAPACITY && !modes.contains_key(&requester.name) {
                        modes.clear();
                    }
                    modes.insert(requester.name.clone(), i);
                    return Ok(user);
                }
                Ok(None) => {}
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        Err(first_err
            .unwrap_or_else(|| ImpersonationError::Internal("all impersonation modes failed".into())))
    }

    /// Whether `user` may do `action`.
    pub fn authorize_action(&self, user: &UserInfo, action: &Action) -> bool {
        match action {
            Action::Resource(a) => self.authorize(user, a),
            Action::NonResource { verb, path } => self.authorize_non_resource(user, verb, path),
        }
    }

    /// One mode: `Ok(None)` when it does not apply, `Err` on its first denial.
    fn check_mode(
        &self,
        mode: Mode,
        requester: &UserInfo,
        wanted: &Wanted,
        action: &Action,
    ) -> Result<Option<UserInfo>, ImpersonationError> {
        if !mode.applies(wanted, requester) {
            return Ok(None);
        }
        let constrained = mode.constraint().is_some();
        if let Some(c) = mode.constraint() {
            let on = action.with_verb(format!("impersonate-on:{c}:{}", action.verb()));
            if !self.authorize_action(requester, &on) {
                return Err(ImpersonationError::Forbidden(match &on {
                    Action::Resource(a) => forbidden_status_because(requester, a, ""),
                    Action::NonResource { verb, path } => {
                        forbidden_non_resource_status(requester, verb, path)
                    }
                }));
            }
        }
        let base = Attributes { verb: mode.verb(), ..Attributes::default() };
        let wanted_groups = wanted.groups.clone().unwrap_or_default();
        let mut groups = wanted_groups.clone();

        // The username.
        let mut a = Attributes {
            group: mode.identity_group().into(),
            resource: "users".into(),
            name: wanted.name.clone(),
            ..base.clone()
        };
        if let Some(node) = node_name(&wanted.name).filter(|_| constrained) {
            a.resource = "nodes".into();
            a.name = node.into();
            groups = vec![NODES_GROUP.to_string()];
        }
        if let Some((ns, name)) = split_service_account(&wanted.name) {
            a.resource = "serviceaccounts".into();
            a.namespace = ns.into();
            a.name = name.into();
            if wanted_groups.is_empty() {
                groups = service_account_groups(ns);
            }
        }
        if mode == Mode::AssociatedNode {
            // Its cache ignores which node, so the check must hold for every node.
            a.name = "*".into();
        }
        self.check(requester, &a, "")?;

        if !wanted.uid.is_empty() {
            let a = Attributes {
                group: AUTHENTICATION_GROUP.into(),
                resource: "uids".into(),
                name: wanted.uid.clone(),
                ..base.clone()
            };
            self.check(requester, &a, "")?;
        }

        if !wanted_groups.is_empty() {
            let mut a =
                Attributes { group: mode.identity_group().into(), resource: "groups".into(), ..base.clone() };
            if constrained && wanted_groups.iter().any(String::is_empty) {
                return Err(self.forbid(
                    requester,
                    &a,
                    "impersonating the empty string group is not allowed",
                ));
            }
            if constrained && wanted_groups.iter().any(|g| g == MASTERS_GROUP) {
                a.name = MASTERS_GROUP.into();
                return Err(self.forbid(
                    requester,
                    &a,
                    "impersonating the system:masters group is not allowed",
                ));
            }
            if !(constrained
                && wanted_groups.len() >= MANY_CHECKS
                && self.wildcard_allows(requester, &a, false))
            {
                for g in &wanted_groups {
                    a.name = g.clone();
                    self.check(requester, &a, "")?;
                }
            }
        }

        let extra = wanted.extra.clone().unwrap_or_default();
        if !extra.is_empty() {
            let mut a = Attributes {
                group: AUTHENTICATION_GROUP.into(),
                resource: "userextras".into(),
                ..base.clone()
            };
            if constrained && let Err(reason) = validate_extra(&extra) {
                return Err(self.forbid(requester, &a, &reason));
            }
            let large =
                extra.len() >= MANY_CHECKS || extra.values().map(Vec::len).sum::<usize>() >= MANY_CHECKS;
            if !(constrained && large && self.wildcard_allows(requester, &a, true)) {
                for (key, values) in &extra {
                    a.subresource = key.clone();
                    for v in values {
                        a.name = v.clone();
                        self.check(requester, &a, "")?;
                    }
                }
            }
        }

        let mut user = UserInfo { name: wanted.name.clone(), groups, uid: wanted.uid.clone(), extra };
        if user.name == ANONYMOUS_USER {
            ensure_group(&mut user, UNAUTHENTICATED_GROUP);
        } else if !user.groups.iter().any(|g| g == UNAUTHENTICATED_GROUP) {
            ensure_group(&mut user, AUTHENTICATED_GROUP);
        }
        Ok(Some(user))
    }

    fn check(&self, requester: &UserInfo, a: &Attributes, reason: &str) -> Result<(), ImpersonationError> {
        if self.authorize(requester, a) { Ok(()) } else { Err(self.forbid(requester, a, reason)) }
    }

    fn forbid(&self, requester: &UserInfo, a: &Attributes, reason: &str) -> ImpersonationError {
        ImpersonationError::Forbidden(forbidden_status_because(requester, a, reason))
    }

    /// The one wildcard check constrained modes try before many individual ones (name `*`, and
    /// subresource `*` for extras).
    fn wildcard_allows(&self, requester: &UserInfo, a: &Attributes, subresource: bool) -> bool {
        let mut w = a.clone();
        w.name = "*".into();
        if subresource {
            w.subresource = "*".into();
        }
        self.authorize(requester, &w)
    }
}

/// Constrained modes refuse extras that legacy impersonation would pass on (`validateExtra`).
fn validate_extra(extra: &BTreeMap<String, Vec<String>>) -> Result<(), String> {
    for (key, values) in extra {
        if key.is_empty() {
            return Err("impersonating the empty string key in extra is not allowed".into());
        }
        if let Some(errs) = aggregate(&domain_prefixed_path_errors("extra.key", key)) {
            return Err(format!("impersonating an invalid key in extra is not allowed: {errs}"));
        }
        if *key != key.to_lowercase() {
            return Err(format!(
                "impersonating a non-lowercase key in extra is not allowed: {}",
                go_quote(key)
            ));
        }
        if values.is_empty() {
            return Err("impersonating empty values in extra is not allowed".into());
        }
        if values.iter().any(String::is_empty) {
            return Err("impersonating the empty string value in extra is not allowed".into());
        }
    }
    Ok(())
}

fn ensure_group(user: &mut UserInfo, group: &str) {
    if !user.groups.iter().any(|g| g == group) {
        user.groups.push(group.to_string());
    }
}
