//! The one place errors become Kubernetes `Status` objects (`metav1.Status`), byte for byte as the
//! apiserver writes them.
//!
//! Every `Status` serialises with the field order kind, apiVersion, metadata, status, message, reason,
//! details, code; empty fields are omitted (`omitempty`) except `metadata`, which is always `{}` or a
//! `ListMeta` carrying `continue` (410 on a continue page). The constructors mirror
//! `k8s.io/apimachinery/pkg/api/errors` (`NewBadRequest`, `NewInvalid`, `NewNotFound`, ...) and the storage
//! errors of `k8s.io/apiserver/pkg/storage` (`NewTooLargeResourceVersionError`, `etcd3/errors.go`).
//!
//! Bodies: [`ApiError::to_json`] is what `json.NewEncoder(w).Encode(status)` writes (compact, trailing
//! newline); [`ApiError::to_json_pretty`] is `json.MarshalIndent(status, "", "  ")` (no trailing newline),
//! used when the request asked for pretty output (see `front::negotiate::wants_pretty`).

use std::fmt;

use bytes::Bytes;

use crate::json::{self, go_quote};

/// The 410 message for an Exact/legacy-exact list at a compacted revision (`etcd3/errors.go`).
pub const EXPIRED_LIST_MESSAGE: &str = "The resourceVersion for the provided list is too old.";

/// The 410 message for a continue page whose revision was compacted, when a fresh (rv=-1) token is offered.
pub const EXPIRED_CONTINUE_MESSAGE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// The 410 message for a continue page when no fresh token could be built.
pub const EXPIRED_CONTINUE_NO_TOKEN_MESSAGE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.";

/// Cause message of the 504 "Too large resource version" (`storage/errors.go` `tooLargeResourceVersionCauseMsg`).
pub const TOO_LARGE_RV_CAUSE_MESSAGE: &str = "Too large resource version";

/// Growth factor of the not-ready Retry-After (`cacher/util.go`).
const NOT_READY_RETRY_FACTOR: f64 = 0.06;
/// Cap of the not-ready Retry-After, seconds (`cacher/util.go`).
const NOT_READY_RETRY_MAX_SECS: f64 = 30.0;

/// The media types a 406 lists for ordinary requests (the apiserver's serializers, CBOR gate off).
pub const ACCEPTED_MEDIA_TYPES: &[&str] =
    &["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"];

/// The media types a 406 lists for watch streams (`MediaTypesForSerializer` stream types).
pub const ACCEPTED_STREAM_MEDIA_TYPES: &[&str] =
    &["application/json;stream=watch", "application/vnd.kubernetes.protobuf;stream=watch"];

/// What the go-restful route of a typed resource's get produces (`Route.Produces`, CBOR gate off).
pub const ROUTE_GET_PRODUCES: &[&str] =
    &["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"];

/// What the go-restful route of a typed resource's list (which also serves `?watch=1`) produces.
pub const ROUTE_LIST_PRODUCES: &[&str] = &[
    "application/json",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
    "application/json;stream=watch",
    "application/vnd.kubernetes.protobuf;stream=watch",
];

/// What kind of field error (`field.ErrorType`); only the kinds request validation produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldErrorKind {
    /// `FieldValueInvalid`: "Invalid value: <v>".
    Invalid,
    /// `FieldValueNotSupported`: "Unsupported value: <v>".
    NotSupported,
    /// `FieldValueForbidden`: "Forbidden".
    Forbidden,
}

/// One `field.Error`: the unit of validation failures, printed as `<field>: <ErrorBody>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub kind: FieldErrorKind,
    /// The field path as printed (`resourceVersionMatch`, `values[0]`, or `<nil>` for a nil path).
    pub field: String,
    /// The bad value (a string; printed with `%q`). Unused for `Forbidden`.
    pub bad_value: String,
    pub detail: String,
}

// === impl FieldError ===

impl FieldError {
    pub fn forbidden(field: &str, detail: &str) -> Self {
        Self {
            kind: FieldErrorKind::Forbidden,
            field: field.to_owned(),
            bad_value: String::new(),
            detail: detail.to_owned(),
        }
    }

    pub fn invalid(field: &str, value: &str, detail: &str) -> Self {
        Self {
            kind: FieldErrorKind::Invalid,
            field: field.to_owned(),
            bad_value: value.to_owned(),
            detail: detail.to_owned(),
        }
    }

    /// `field.NotSupported`: the detail lists the supported values, each `strconv.Quote`d.
    pub fn not_supported(field: &str, value: &str, supported: &[&str]) -> Self {
        let detail = if supported.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = supported.iter().map(|v| go_quote(v)).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        Self {
            kind: FieldErrorKind::NotSupported,
            field: field.to_owned(),
            bad_value: value.to_owned(),
            detail,
        }
    }

    /// The `metav1.CauseType` of this error.
    pub fn cause_type(&self) -> &'static str {
        match self.kind {
            FieldErrorKind::Invalid => "FieldValueInvalid",
            FieldErrorKind::NotSupported => "FieldValueNotSupported",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
        }
    }

    /// `ErrorBody()`: the message without the field name.
    pub fn body(&self) -> String {
        let mut s = match self.kind {
            FieldErrorKind::Forbidden => "Forbidden".to_owned(),
            FieldErrorKind::Invalid => format!("Invalid value: {}", go_quote(&self.bad_value)),
            FieldErrorKind::NotSupported => format!("Unsupported value: {}", go_quote(&self.bad_value)),
        };
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// `utilerrors.NewAggregate(errs).Error()`: one message bare, several as `[e1, e2]` with duplicates removed.
pub fn aggregate_message<T: fmt::Display>(errs: &[T]) -> String {
    match errs {
        [] => String::new(),
        [one] => one.to_string(),
        many => {
            let mut seen: Vec<String> = Vec::with_capacity(many.len());
            for e in many {
                let msg = e.to_string();
                if !seen.contains(&msg) {
                    seen.push(msg);
                }
            }
            if seen.len() == 1 { seen.remove(0) } else { format!("[{}]", seen.join(", ")) }
        }
    }
}

/// A Kubernetes API error, as kache answers it to a client. Exactly one place turns these into bytes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 400 BadRequest (`errors.NewBadRequest`): unconvertible query parameters, selector syntax, bad
    /// continue tokens, unsupported field labels.
    #[error("{0}")]
    BadRequest(String),
    /// 422 Invalid (`errors.NewInvalid`), e.g. ListOptions validation. `group`/`kind` name the object kind
    /// (`meta.k8s.io`/`ListOptions`), `name` the object (`""` for options).
    #[error("{}", invalid_message(.group, .kind, .name, .errors))]
    Invalid { group: String, kind: String, name: String, errors: Vec<FieldError> },
    /// 404 NotFound (`errors.NewNotFound`): `pods "x" not found`.
    #[error("{} {} not found", group_resource(.group, .resource), go_quote(.name))]
    NotFound { group: String, resource: String, name: String },
    /// 410 Expired with a free message, e.g. the watch ERROR `too old resource version: 3 (11)`.
    #[error("{0}")]
    Expired(String),
    /// 410 Expired for an Exact (or legacy exact) list at a compacted revision.
    #[error("{}", EXPIRED_LIST_MESSAGE)]
    ExpiredList,
    /// 410 Expired for a continue page at a compacted revision; `continue_token` is the fresh rv=-1 token
    /// carried in `metadata.continue` (none if it could not be built).
    #[error("{}", if .continue_token.is_some() { EXPIRED_CONTINUE_MESSAGE } else { EXPIRED_CONTINUE_NO_TOKEN_MESSAGE })]
    ExpiredContinue { continue_token: Option<String> },
    /// 504 Timeout "Too large resource version" with cause `ResourceVersionTooLarge`; `retry_after` is
    /// `Some(1)` from the watch cache and `None` from etcd (then no Retry-After header).
    #[error("Timeout: Too large resource version: {requested}, current: {current}")]
    TooLargeResourceVersion { requested: u64, current: u64, retry_after: Option<u32> },
    /// 504 Timeout (`errors.NewTimeoutError`); the message is prefixed with `Timeout: `.
    #[error("Timeout: {message}")]
    Timeout { message: String, retry_after: u32 },
    /// 429 TooManyRequests (`errors.NewTooManyRequests`), e.g. `storage is (re)initializing`.
    #[error("{message}")]
    TooManyRequests { message: String, retry_after: u32 },
    /// 406 NotAcceptable: nothing in Accept can be produced; lists the accepted media types.
    #[error("only the following media types are accepted: {}", .accepted.join(", "))]
    NotAcceptable { accepted: &'static [&'static str] },
    /// 406 from go-restful's route selection (typed resources), before the handler negotiates: no Accept
    /// clause names a media type the route produces. Written by `ServiceErrorHandler` as a generic server
    /// response, so its details are `{}`.
    #[error("406: Not Acceptable\n\nAvailable representations: {}", .produces.join(", "))]
    RouteNotAcceptable { produces: &'static [&'static str] },
    /// 405 MethodNotAllowed (`errors.NewMethodNotSupported`): `watch is not supported on resources of kind "x"`.
    #[error("{} is not supported on resources of kind {}", .action, go_quote(&group_resource(.group, .resource)))]
    MethodNotSupported { group: String, resource: String, action: String },
    /// 503 ServiceUnavailable (`errors.NewServiceUnavailable`), e.g. the upstream is unreachable.
    #[error("{0}")]
    ServiceUnavailable(String),
    /// 401 Unauthorized (`errors.NewUnauthorized`); the apiserver's authentication failure says `Unauthorized`.
    #[error("{}", if .0.is_empty() { "not authorized" } else { .0.as_str() })]
    Unauthorized(String),
    /// 403 Forbidden (`errors.NewForbidden`); `reason` is the authorizer text, see [`forbidden_reason`].
    #[error("{}", forbidden_message(.group, .resource, .name, .reason))]
    Forbidden { group: String, resource: String, name: String, reason: String },
    /// 413 RequestEntityTooLarge (`errors.NewRequestEntityTooLargeError`).
    #[error("Request entity too large: {0}")]
    RequestEntityTooLarge(String),
    /// 500 InternalError (`errors.NewInternalError`), with the error as the single cause.
    #[error("Internal error occurred: {0}")]
    InternalError(String),
    /// 500 ServerTimeout (`errors.NewServerTimeout`), e.g. storage unreachable during a list.
    #[error("The {} operation against {} could not be completed at this time, please try again.", .operation, group_resource(.group, .resource))]
    ServerTimeout { group: String, resource: String, operation: String, retry_after: u32 },
    /// An error that is not a `StatusError` on the apiserver side: `ErrorToAPIStatus` gives it the code
    /// (500 normally), no reason and the raw message (e.g. a GET or watch with `resourceVersion=abc`).
    #[error("{message}")]
    Unknown { code: u16, message: String },
}

/// `schema.GroupResource.String()`: `pods` or `deployments.apps`.
pub fn group_resource(group: &str, resource: &str) -> String {
    if group.is_empty() { resource.to_owned() } else { format!("{resource}.{group}") }
}

fn invalid_message(group: &str, kind: &str, name: &str, errors: &[FieldError]) -> String {
    let gk = if group.is_empty() { kind.to_owned() } else { format!("{kind}.{group}") };
    if errors.is_empty() {
        format!("{gk} {} is invalid", go_quote(name))
    } else {
        format!("{gk} {} is invalid: {}", go_quote(name), aggregate_message(errors))
    }
}

fn forbidden_message(group: &str, resource: &str, name: &str, reason: &str) -> String {
    if group.is_empty() && resource.is_empty() {
        format!("forbidden: {reason}")
    } else if name.is_empty() {
        format!("{} is forbidden: {reason}", group_resource(group, resource))
    } else {
        format!("{} {} is forbidden: {reason}", group_resource(group, resource), go_quote(name))
    }
}

/// The authorizer's denial text, as `responsewriters.Forbidden` builds it (`forbiddenMessage`), e.g.
/// `User "x" cannot list resource "pods" in API group "" in the namespace "ns"`. `reason` (the
/// authorizer's own reason) is appended after `: ` when not empty.
pub fn forbidden_reason(
    user: &str,
    verb: &str,
    resource: &str,
    subresource: &str,
    group: &str,
    namespace: &str,
    reason: &str,
) -> String {
    let resource =
        if subresource.is_empty() { resource.to_owned() } else { format!("{resource}/{subresource}") };
    let msg = if namespace.is_empty() {
        format!(
            "User {} cannot {verb} resource {} in API group {} at the cluster scope",
            go_quote(user),
            go_quote(&resource),
            go_quote(group)
        )
    } else {
        format!(
            "User {} cannot {verb} resource {} in API group {} in the namespace {}",
            go_quote(user),
            go_quote(&resource),
            go_quote(group),
            go_quote(namespace)
        )
    };
    if reason.is_empty() { msg } else { format!("{msg}: {reason}") }
}

/// The denial text for a non-resource request (`forbiddenMessage`): `User "x" cannot get path "/foo"`.
pub fn forbidden_path_reason(user: &str, verb: &str, path: &str, reason: &str) -> String {
    let msg = format!("User {} cannot {verb} path {}", go_quote(user), go_quote(path));
    if reason.is_empty() { msg } else { format!("{msg}: {reason}") }
}

// === impl ApiError ===

impl ApiError {
    pub fn bad_request(msg: impl Into<String>) -> Self {
        Self::BadRequest(msg.into())
    }

    /// 422 for `ListOptions` validation failures (`NewInvalid(GroupKind{"meta.k8s.io","ListOptions"}, "", errs)`).
    pub fn invalid_list_options(errors: Vec<FieldError>) -> Self {
        Self::Invalid { group: "meta.k8s.io".into(), kind: "ListOptions".into(), name: String::new(), errors }
    }

    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        Self::NotFound { group: group.into(), resource: resource.into(), name: name.into() }
    }

    /// The watch ERROR for a resourceVersion older than the history: `too old resource version: N (M)`.
    pub fn too_old_resource_version(requested: u64, oldest: u64) -> Self {
        Self::Expired(format!("too old resource version: {requested} ({oldest})"))
    }

    /// `storage is (re)initializing` while a resource is not yet synced.
    pub fn not_ready(retry_after: u32) -> Self {
        Self::TooManyRequests { message: "storage is (re)initializing".into(), retry_after }
    }

    /// The Retry-After the watch cache gives while not ready: `clamp(e^(0.06·downtime), 1, 30)` seconds
    /// (`cacher/util.go` `calculateRetryAfterForUnreadyCache`), `downtime` being how long it has been unready.
    pub fn not_ready_retry_after(downtime: std::time::Duration) -> u32 {
        let secs = (NOT_READY_RETRY_FACTOR * downtime.as_secs_f64()).exp();
        secs.clamp(1.0, NOT_READY_RETRY_MAX_SECS) as u32
    }

    /// 406 for an ordinary request (`stream == false`) or a watch (`stream == true`).
    pub fn not_acceptable(stream: bool) -> Self {
        Self::NotAcceptable {
            accepted: if stream { ACCEPTED_STREAM_MEDIA_TYPES } else { ACCEPTED_MEDIA_TYPES },
        }
    }

    /// 406 of go-restful's route selection for a typed resource's get (`list == false`) or list/watch.
    pub fn route_not_acceptable(list: bool) -> Self {
        Self::RouteNotAcceptable { produces: if list { ROUTE_LIST_PRODUCES } else { ROUTE_GET_PRODUCES } }
    }

    /// The body of a 406 as the apiserver writes it: negotiating the error's own media type fails on the
    /// same Accept header, so `WriteObjectNegotiated` falls back to `WriteRawJSON` — two-space indentation,
    /// no trailing newline, whatever `pretty` or the User-Agent say.
    pub fn to_raw_json(&self) -> Bytes {
        self.to_json_pretty()
    }

    pub fn method_not_supported(group: &str, resource: &str, action: &str) -> Self {
        Self::MethodNotSupported { group: group.into(), resource: resource.into(), action: action.into() }
    }

    /// The HTTP status code.
    pub fn status_code(&self) -> u16 {
        match self {
            Self::BadRequest(_) => 400,
            Self::Invalid { .. } => 422,
            Self::NotFound { .. } => 404,
            Self::Expired(_) | Self::ExpiredList | Self::ExpiredContinue { .. } => 410,
            Self::TooLargeResourceVersion { .. } | Self::Timeout { .. } => 504,
            Self::TooManyRequests { .. } => 429,
            Self::NotAcceptable { .. } | Self::RouteNotAcceptable { .. } => 406,
            Self::MethodNotSupported { .. } => 405,
            Self::ServiceUnavailable(_) => 503,
            Self::Unauthorized(_) => 401,
            Self::Forbidden { .. } => 403,
            Self::RequestEntityTooLarge(_) => 413,
            Self::InternalError(_) | Self::ServerTimeout { .. } => 500,
            Self::Unknown { code, .. } => *code,
        }
    }

    /// The `metav1.StatusReason` (empty for [`ApiError::Unknown`]).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::BadRequest(_) => "BadRequest",
            Self::Invalid { .. } => "Invalid",
            Self::NotFound { .. } => "NotFound",
            Self::Expired(_) | Self::ExpiredList | Self::ExpiredContinue { .. } => "Expired",
            Self::TooLargeResourceVersion { .. } | Self::Timeout { .. } => "Timeout",
            Self::TooManyRequests { .. } => "TooManyRequests",
            Self::NotAcceptable { .. } | Self::RouteNotAcceptable { .. } => "NotAcceptable",
            Self::MethodNotSupported { .. } => "MethodNotAllowed",
            Self::ServiceUnavailable(_) => "ServiceUnavailable",
            Self::Unauthorized(_) => "Unauthorized",
            Self::Forbidden { .. } => "Forbidden",
            Self::RequestEntityTooLarge(_) => "RequestEntityTooLarge",
            Self::InternalError(_) => "InternalError",
            Self::ServerTimeout { .. } => "ServerTimeout",
            Self::Unknown { .. } => "",
        }
    }

    /// Seconds for the `Retry-After` header (`details.retryAfterSeconds > 0`); the response must carry it.
    pub fn retry_after(&self) -> Option<u32> {
        let secs = match self {
            Self::TooLargeResourceVersion { retry_after, .. } => retry_after.unwrap_or(0),
            Self::Timeout { retry_after, .. }
            | Self::TooManyRequests { retry_after, .. }
            | Self::ServerTimeout { retry_after, .. } => *retry_after,
            _ => 0,
        };
        (secs > 0).then_some(secs)
    }

    /// `true` for 410 Expired answers (clients relist).
    pub fn is_expired(&self) -> bool {
        self.status_code() == 410
    }

    /// The Status body exactly as the apiserver writes it by default: compact JSON plus a newline.
    pub fn to_json(&self) -> Bytes {
        Bytes::from(json::body(&self.status_value(), false))
    }

    /// The Status body pretty-printed as the apiserver does for `?pretty=true` or curl/browser agents.
    pub fn to_json_pretty(&self) -> Bytes {
        Bytes::from(json::body(&self.status_value(), true))
    }

    /// The watch-stream form: `{"type":"ERROR","object":<status>}` and a newline. The stream ends after it.
    pub fn watch_error_event(&self) -> Bytes {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(b"{\"type\":\"ERROR\",\"object\":");
        out.extend_from_slice(&json::to_vec(&self.status_value()));
        out.extend_from_slice(b"}\n");
        Bytes::from(out)
    }

    fn details(&self) -> Option<Details> {
        let mut d = Details::default();
        match self {
            Self::Invalid { group, kind, name, errors } => {
                d.name = name.clone();
                d.group = group.clone();
                d.kind = kind.clone();
                d.causes = errors
                    .iter()
                    .map(|e| Cause {
                        reason: e.cause_type().into(),
                        message: e.body(),
                        field: e.field.clone(),
                    })
                    .collect();
            }
            Self::NotFound { group, resource, name } => {
                d.name = name.clone();
                d.group = group.clone();
                d.kind = resource.clone();
            }
            Self::TooLargeResourceVersion { retry_after, .. } => {
                d.causes = vec![Cause {
                    reason: "ResourceVersionTooLarge".into(),
                    message: TOO_LARGE_RV_CAUSE_MESSAGE.into(),
                    field: String::new(),
                }];
                d.retry_after_seconds = retry_after.unwrap_or(0);
            }
            Self::Timeout { retry_after, .. } | Self::TooManyRequests { retry_after, .. } => {
                d.retry_after_seconds = *retry_after;
            }
            Self::MethodNotSupported { group, resource, .. } => {
                d.group = group.clone();
                d.kind = resource.clone();
            }
            Self::Forbidden { group, resource, name, .. } => {
                d.name = name.clone();
                d.group = group.clone();
                d.kind = resource.clone();
            }
            Self::RouteNotAcceptable { .. } => {}
            Self::InternalError(msg) => {
                d.causes = vec![Cause { reason: String::new(), message: msg.clone(), field: String::new() }];
            }
            Self::ServerTimeout { group, resource, operation, retry_after } => {
                d.name = operation.clone();
                d.group = group.clone();
                d.kind = resource.clone();
                d.retry_after_seconds = *retry_after;
            }
            _ => return None,
        }
        Some(d)
    }

    fn status_value(&self) -> J {
        let mut metadata = Vec::new();
        if let Self::ExpiredContinue { continue_token: Some(token) } = self {
            metadata.push(("continue", J::Str(token.clone())));
        }
        let mut fields = vec![
            ("kind", J::Str("Status".into())),
            ("apiVersion", J::Str("v1".into())),
            ("metadata", J::Obj(metadata)),
            ("status", J::Str("Failure".into())),
        ];
        let message = self.to_string();
        if !message.is_empty() {
            fields.push(("message", J::Str(message)));
        }
        if !self.reason().is_empty() {
            fields.push(("reason", J::Str(self.reason().into())));
        }
        if let Some(d) = self.details() {
            fields.push(("details", d.to_value()));
        }
        fields.push(("code", J::Num(u64::from(self.status_code()))));
        J::Obj(fields)
    }
}

/// `metav1.StatusDetails` (field order name, group, kind, uid, causes, retryAfterSeconds; all omitempty).
#[derive(Default)]
struct Details {
    name: String,
    group: String,
    kind: String,
    causes: Vec<Cause>,
    retry_after_seconds: u32,
}

/// `metav1.StatusCause` (field order reason, message, field; all omitempty).
struct Cause {
    reason: String,
    message: String,
    field: String,
}

impl Details {
    fn to_value(&self) -> J {
        let mut f = Vec::new();
        for (k, v) in [("name", &self.name), ("group", &self.group), ("kind", &self.kind)] {
            if !v.is_empty() {
                f.push((k, J::Str(v.clone())));
            }
        }
        if !self.causes.is_empty() {
            let causes = self
                .causes
                .iter()
                .map(|c| {
                    let mut cf = Vec::new();
                    for (k, v) in [("reason", &c.reason), ("message", &c.message), ("field", &c.field)] {
                        if !v.is_empty() {
                            cf.push((k, J::Str(v.clone())));
                        }
                    }
                    J::Obj(cf)
                })
                .collect();
            f.push(("causes", J::Arr(causes)));
        }
        if self.retry_after_seconds > 0 {
            f.push(("retryAfterSeconds", J::Num(u64::from(self.retry_after_seconds))));
        }
        J::Obj(f)
    }
}

/// A minimal ordered JSON value (the field order of Go's `metav1.Status` struct), serialised through the Go
/// formatter, compact or indented.
enum J {
    Str(String),
    Num(u64),
    Obj(Vec<(&'static str, J)>),
    Arr(Vec<J>),
}

impl serde::Serialize for J {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self {
            J::Str(v) => s.serialize_str(v),
            J::Num(n) => s.serialize_u64(*n),
            J::Obj(fields) => {
                let mut m = s.serialize_map(Some(fields.len()))?;
                for (k, v) in fields {
                    m.serialize_entry(k, v)?;
                }
                m.end()
            }
            J::Arr(items) => {
                let mut a = s.serialize_seq(Some(items.len()))?;
                for v in items {
                    a.serialize_element(v)?;
                }
                a.end()
            }
        }
    }
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
