//! Errors as the apiserver reports them: every failure becomes a `metav1.Status`, built in one place.
//!
//! Field order of a Status: kind, apiVersion, metadata, status, message, reason, details, code; `reason`,
//! `details` and `code` are omitted when empty. Details: name, group, kind, uid, causes,
//! retryAfterSeconds.

use serde_json::{Map, Value, json};

use crate::kinds::ResourceDef;

/// One entry of `details.causes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    pub reason: String,
    pub message: String,
    pub field: String,
}

/// An error answered to a client, carrying everything its Status needs.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    pub code: u16,
    /// Empty for errors without a reason (e.g. the 500 for an unparsable watch RV).
    pub reason: String,
    pub message: String,
    pub details: Option<Box<Details>>,
    /// `metadata.continue` of the Status (only the inconsistent-continue 410 has one).
    pub continue_token: Option<String>,
}

/// `details` of a Status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Details {
    pub name: String,
    pub group: String,
    pub kind: String,
    pub uid: String,
    pub causes: Vec<Cause>,
    pub retry_after_seconds: u32,
}

/// Default wait before a cache-originated "Too large resource version" (`Retry-After: 1`).
pub const TOO_LARGE_RETRY_AFTER_SECONDS: u32 = 1;

/// The message of an inconsistent-continue 410 (`storage/etcd3/errors.go`).
const INCONSISTENT_CONTINUE: &str = "The provided continue parameter is too old to display a consistent list \
result. You can start a new list without the continue parameter, or use the continue token in this response \
to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - \
objects that were created, modified, or deleted between the time the first chunk was returned and now may show \
up in the list.";

// === impl ApiError ===

impl ApiError {
    fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason.to_string(),
            message: message.into(),
            details: None,
            continue_token: None,
        }
    }

    fn with_details(mut self, d: Details) -> Self {
        self.details = Some(Box::new(d));
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 404 for a path that names no resource: `details` is present but empty, as the apiserver sends.
    pub fn path_not_found() -> Self {
        Self::new(404, "NotFound", "the server could not find the requested resource")
            .with_details(Details::default())
    }

    /// 404 `pods "x" not found`.
    pub fn not_found(res: &ResourceDef, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{} \"{}\" not found", res.qualified(), name))
            .with_details(res.details(name))
    }

    /// 404 for the namespace a namespaced object lives in.
    pub fn namespace_not_found(ns: &str) -> Self {
        Self::new(404, "NotFound", format!("namespaces \"{ns}\" not found")).with_details(Details {
            name: ns.to_string(),
            kind: "namespaces".to_string(),
            ..Details::default()
        })
    }

    pub fn already_exists(res: &ResourceDef, name: &str) -> Self {
        Self::new(409, "AlreadyExists", format!("{} \"{}\" already exists", res.qualified(), name))
            .with_details(res.details(name))
    }

    /// 409 Conflict `Operation cannot be fulfilled on pods "x": <why>`.
    pub fn conflict(res: &ResourceDef, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {} \"{}\": {}", res.qualified(), name, why),
        )
        .with_details(res.details(name))
    }

    /// 422 Invalid for an object: `Pod "x" is invalid: <field>: <detail>`.
    pub fn invalid_object(res: &ResourceDef, name: &str, causes: Vec<Cause>) -> Self {
        let msg = format!("{} \"{}\" is invalid: {}", res.kind, name, join_causes(&causes));
        Self::new(422, "Invalid", msg).with_details(Details {
            name: name.to_string(),
            group: res.group.clone(),
            kind: res.kind.clone(),
            causes,
            ..Details::default()
        })
    }

    /// 422 for ListOptions validation: `ListOptions.meta.k8s.io "" is invalid: ...`.
    pub fn invalid_list_options(causes: Vec<Cause>) -> Self {
        let msg = format!("ListOptions.meta.k8s.io \"\" is invalid: {}", join_causes(&causes));
        Self::new(422, "Invalid", msg).with_details(Details {
            group: "meta.k8s.io".to_string(),
            kind: "ListOptions".to_string(),
            causes,
            ..Details::default()
        })
    }

    /// 410 for a list (or first page) at a compacted revision.
    pub fn list_too_old() -> Self {
        Self::new(410, "Expired", "The resourceVersion for the provided list is too old.")
    }

    /// 410 for a continue token whose revision was compacted; carries a token to continue at latest.
    pub fn inconsistent_continue(token: String) -> Self {
        let mut e = Self::new(410, "Expired", INCONSISTENT_CONTINUE);
        e.continue_token = Some(token);
        e
    }

    /// 410 as a watch ERROR event: `too old resource version: N (M)`.
    pub fn watch_too_old(requested: u64, oldest: u64) -> Self {
        Self::new(410, "Expired", format!("too old resource version: {requested} ({oldest})"))
    }

    /// 504 "Too large resource version"; `retry_after` is 1 from the cache, 0 from etcd.
    pub fn too_large(requested: u64, current: u64, retry_after: u32) -> Self {
        Self::new(
            504,
            "Timeout",
            format!("Timeout: Too large resource version: {requested}, current: {current}"),
        )
        .with_details(Details {
            causes: vec![Cause {
                reason: "ResourceVersionTooLarge".to_string(),
                message: "Too large resource version".to_string(),
                field: String::new(),
            }],
            retry_after_seconds: retry_after,
            ..Details::default()
        })
    }

    pub fn method_not_allowed() -> Self {
        Self::new(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
            .with_details(Details::default())
    }

    /// 501 for what a kubelet would answer (logs, exec, attach, port-forward) when the sim runs without
    /// kubelets ([`SimBuilder::kubelets`](crate::SimBuilder::kubelets)): a real apiserver proxies these to
    /// the pod's node; the sim says plainly that it has none instead of failing the stream.
    pub fn no_kubelet(what: &str) -> Self {
        Self::new(
            501,
            "NotImplemented",
            format!(
                "{what} is not available: this simulated cluster (kache-sim) has no kubelets, its pods do not \
                 run; run kache against a real cluster to try it"
            ),
        )
    }

    /// 415 for a server-side apply patch: the sim does not implement field management's apply.
    pub fn no_server_side_apply() -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            "server-side apply (application/apply-patch+yaml) is not implemented by this simulated cluster \
             (kache-sim); use client-side apply (kubectl apply without --server-side), or run kache against a \
             real cluster to try it",
        )
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: \
                 application/json-patch+json, application/merge-patch+json, \
                 application/strategic-merge-patch+json (got {content_type})"
            ),
        )
    }

    /// 415 for a patch the sim will not apply (instead of applying it wrongly).
    pub fn unsupported_patch(why: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format - {why}"),
        )
    }

    /// 413 for a request body over the limit.
    pub fn too_large_body(limit: usize) -> Self {
        Self::new(413, "RequestEntityTooLarge", format!("Request entity too large: limit is {limit}"))
    }

    /// 406 from negotiation (`negotiation.NewNotAcceptableError`): the apiserver's serializers, or for a
    /// watch whose only acceptable encoding cannot stream, its stream serializers.
    pub fn not_acceptable(stream: bool) -> Self {
        let accepted = if stream {
            "application/json;stream=watch, application/vnd.kubernetes.protobuf;stream=watch"
        } else {
            "application/json, application/yaml, application/vnd.kubernetes.protobuf"
        };
        Self::new(406, "NotAcceptable", format!("only the following media types are accepted: {accepted}"))
    }

    /// 406 from go-restful's route selection (`ServiceErrorHandler` writes a generic server response:
    /// `details` is `{}`), for a get route or a list route (which also serves `?watch=1`).
    pub fn route_not_acceptable(list: bool) -> Self {
        let stream = if list {
            ", application/json;stream=watch, application/vnd.kubernetes.protobuf;stream=watch"
        } else {
            ""
        };
        let mut e = Self::new(
            406,
            "NotAcceptable",
            format!(
                "406: Not Acceptable\n\nAvailable representations: application/json, application/yaml, application/vnd.kubernetes.protobuf{stream}"
            ),
        );
        e.details = Some(Box::default());
        e
    }

    /// 406 from a response transformation (`handlers/response.go` `newNotAcceptableError`).
    pub fn not_acceptable_because(message: impl Into<String>) -> Self {
        Self::new(406, "NotAcceptable", message)
    }

    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403 `pods is forbidden: User "u" cannot list resource "pods" in API group "" in the namespace "ns"`.
    pub fn forbidden(message: String, res_name: &str, group: &str, kind: &str) -> Self {
        Self::new(403, "Forbidden", message).with_details(Details {
            name: res_name.to_string(),
            group: group.to_string(),
            kind: kind.to_string(),
            ..Details::default()
        })
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// A 500 without a reason, as `cacher.Watch` reports an unparsable RV.
    pub fn internal_bare(message: impl Into<String>) -> Self {
        Self::new(500, "", message)
    }

    /// An arbitrary failure injected by the admin API (`/sim/fail`).
    pub fn injected(code: u16) -> Self {
        let reason = match code {
            429 => "TooManyRequests",
            500 => "InternalError",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            409 => "Conflict",
            410 => "Expired",
            404 => "NotFound",
            403 => "Forbidden",
            401 => "Unauthorized",
            _ => "",
        };
        // A 429 reads like the watch cache's while it (re)initialises, the apiserver's common one.
        let message = if code == 429 {
            "storage is (re)initializing".to_string()
        } else {
            format!("injected failure (status {code})")
        };
        let mut e = Self::new(code, reason, message);
        if code == 429 {
            e.details = Some(Box::new(Details { retry_after_seconds: 1, ..Details::default() }));
        }
        e
    }

    /// Seconds for the `Retry-After` header (the apiserver sets it whenever retryAfterSeconds > 0).
    pub fn retry_after(&self) -> Option<u32> {
        self.details.as_ref().map(|d| d.retry_after_seconds).filter(|s| *s > 0)
    }

    /// The Status object, fields in the apiserver's order.
    pub fn to_status(&self) -> Value {
        let mut m = Map::new();
        m.insert("kind".into(), json!("Status"));
        m.insert("apiVersion".into(), json!("v1"));
        let mut meta = Map::new();
        if let Some(t) = &self.continue_token {
            meta.insert("continue".into(), json!(t));
        }
        m.insert("metadata".into(), Value::Object(meta));
        m.insert("status".into(), json!("Failure"));
        m.insert("message".into(), json!(self.message));
        if !self.reason.is_empty() {
            m.insert("reason".into(), json!(self.reason));
        }
        if let Some(d) = &self.details {
            m.insert("details".into(), d.to_value());
        }
        m.insert("code".into(), json!(self.code));
        Value::Object(m)
    }
}

/// Joins causes as `errors.NewInvalid` prints an aggregate: one bare, several as `[a, b]`.
fn join_causes(causes: &[Cause]) -> String {
    let parts: Vec<String> = causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
    if parts.len() == 1 { parts[0].clone() } else { format!("[{}]", parts.join(", ")) }
}

// === impl Details ===

impl Details {
    fn to_value(&self) -> Value {
        let mut m = Map::new();
        for (k, v) in [("name", &self.name), ("group", &self.group), ("kind", &self.kind), ("uid", &self.uid)]
        {
            if !v.is_empty() {
                m.insert(k.into(), json!(v));
            }
        }
        if !self.causes.is_empty() {
            let causes: Vec<Value> = self
                .causes
                .iter()
                .map(|c| {
                    let mut cm = Map::new();
                    cm.insert("reason".into(), json!(c.reason));
                    cm.insert("message".into(), json!(c.message));
                    if !c.field.is_empty() {
                        cm.insert("field".into(), json!(c.field));
                    }
                    Value::Object(cm)
                })
                .collect();
            m.insert("causes".into(), Value::Array(causes));
        }
        if self.retry_after_seconds > 0 {
            m.insert("retryAfterSeconds".into(), json!(self.retry_after_seconds));
        }
        Value::Object(m)
    }
}

/// A Status "Success" answered by DELETE for resources whose store does not return the object.
pub fn success_status(res: &ResourceDef, name: &str, uid: &str) -> Value {
    let mut d = res.details(name);
    d.uid = uid.to_string();
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": d.to_value()})
}

/// A ListOptions validation cause (`field: Forbidden: ...`): the message carries the type prefix.
pub fn forbidden_cause(field: &str, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueForbidden".into(),
        message: format!("Forbidden: {detail}"),
        field: field.into(),
    }
}

/// `field: Unsupported value: "v": supported values: "a", "b"`.
pub fn unsupported_cause(field: &str, value: &str, supported: &[&str]) -> Cause {
    let list: Vec<String> = supported.iter().map(|s| format!("\"{s}\"")).collect();
    Cause {
        reason: "FieldValueNotSupported".into(),
        message: format!("Unsupported value: \"{value}\": supported values: {}", list.join(", ")),
        field: field.into(),
    }
}

/// `field: Required value: detail`.
pub fn required_cause(field: &str, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueRequired".into(),
        message: format!("Required value: {detail}"),
        field: field.into(),
    }
}

/// `field: Invalid value: "v": detail`.
pub fn invalid_cause(field: &str, value: &str, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: \"{value}\": {detail}"),
        field: field.into(),
    }
}
