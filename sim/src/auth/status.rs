//! The Status bodies the apiserver answers when authentication or authorization fails
//! (`endpoints/handlers/responsewriters.forbiddenMessage`, `apierrors.NewForbidden`, `NewUnauthorized`).

use serde_json::{Value, json};

use super::{Attributes, UserInfo};
use crate::selector::go_quote as q;

/// `forbiddenMessage` for a resource request.
pub fn forbidden_message(user: &UserInfo, attrs: &Attributes) -> String {
    let resource = if attrs.subresource.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}/{}", attrs.resource, attrs.subresource)
    };
    let scope = if attrs.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace {}", q(&attrs.namespace))
    };
    format!(
        "User {} cannot {} resource {} in API group {} {scope}",
        q(&user.name),
        attrs.verb,
        q(&resource),
        q(&attrs.group)
    )
}

/// The 403 Status for a denied resource request, e.g. message
/// `pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "default"`,
/// details `{"kind":"pods"}` (plus `name` and `group` when set).
pub fn forbidden_status(user: &UserInfo, attrs: &Attributes) -> Value {
    forbidden_status_because(user, attrs, "")
}

/// [`forbidden_status`] with the authorizer's reason appended to the message as `: <reason>` when not empty
/// (`responsewriters.ForbiddenStatusError`), e.g. for a denied impersonation
/// `users "bob" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope`.
pub fn forbidden_status_because(user: &UserInfo, attrs: &Attributes, reason: &str) -> Value {
    let qualified = if attrs.group.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}.{}", attrs.resource, attrs.group)
    };
    let mut why = forbidden_message(user, attrs);
    if !reason.is_empty() {
        why = format!("{why}: {reason}");
    }
    let message = if attrs.name.is_empty() {
        format!("{qualified} is forbidden: {why}")
    } else {
        format!("{qualified} {} is forbidden: {why}", q(&attrs.name))
    };
    let mut details = serde_json::Map::new();
    if !attrs.name.is_empty() {
        details.insert("name".into(), json!(attrs.name));
    }
    if !attrs.group.is_empty() {
        details.insert("group".into(), json!(attrs.group));
    }
    if !attrs.resource.is_empty() {
        details.insert("kind".into(), json!(attrs.resource));
    }
    failure(&message, "Forbidden", Some(Value::Object(details)), 403)
}

/// The 403 Status for a denied non-resource request: `forbidden: User "u" cannot get path "/x"`, details `{}`.
pub fn forbidden_non_resource_status(user: &UserInfo, verb: &str, path: &str) -> Value {
    let message = format!("forbidden: User {} cannot {verb} path {}", q(&user.name), q(path));
    failure(&message, "Forbidden", Some(json!({})), 403)
}

/// The 401 Status for missing or bad credentials.
pub fn unauthorized_status() -> Value {
    failure("Unauthorized", "Unauthorized", None, 401)
}

fn failure(message: &str, reason: &str, details: Option<Value>, code: u16) -> Value {
    let mut status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    });
    if let Some(details) = details {
        status["details"] = details;
    }
    status["code"] = json!(code);
    status
}
