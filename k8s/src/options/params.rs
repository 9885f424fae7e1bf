//! Get/list/watch options: decoding, defaulting and validation in the apiserver's exact order, with its
//! status codes and messages.
//!
//! Order of checks for a list or watch (`k8s.io/apiserver/pkg/endpoints/handlers/get.go`, `ListResource`):
//! 1. (caller) Accept negotiation → 406 (`get.go` negotiates the output media type first).
//! 2. Query decoding (`get.go:211-214`, `ParameterCodec.DecodeParameters`) → 400 with the converter's
//!    message. Fields convert in `metav1.ListOptions` order: `timeoutSeconds`, then `limit` (Go
//!    `strconv.ParseInt` errors), then the label selector, then the field selector (parser errors).
//! 3. Defaulting (`get.go:216`, `SetListOptionsDefaults`, WatchList on): a watch (the `watch` parameter)
//!    with `sendInitialEvents` and `resourceVersionMatch` unset and RV in {"", "0"} gets
//!    `sendInitialEvents=true`, `resourceVersionMatch=NotOlderThan`.
//! 4. Validation (`get.go:217-220`, `validation.ValidateListOptions`) → 422 listing every error.
//! 5. Field label conversion (`get.go:224-232`) → 400 (see [`ListOptions::convert_fields`]).
//! 6. A name in the path vs a `metadata.name` selector (`get.go:249`) → 400 ([`ListOptions::check_path_name`]).
//! 7. Storage validation (`storage/interfaces.go:371-409`, first thing in `CacheDelegator.GetList`) → 400,
//!    continue token before resourceVersion ([`validate_for_storage`]).

use crate::resource::FieldKind;
use crate::status::{ApiError, FieldError, aggregate_message};
use crate::token::{self, Continue};

use super::query::{Query, go_parse_bool, go_parse_duration_nanos, go_parse_int, go_parse_uint, query_bool};
use super::selector::{FieldSelector, LabelSelector};

/// `resourceVersionMatch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RvMatch {
    Exact,
    NotOlderThan,
}

/// Decoded, defaulted and validated list/watch options.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// `resourceVersion`; `None` when absent or empty (the apiserver treats both as unset).
    pub resource_version: Option<String>,
    /// `resourceVersionMatch` (after watch defaulting); `None` when absent or empty.
    pub resource_version_match: Option<RvMatch>,
    /// `limit`; `<= 0` means no limit (nothing validates it).
    pub limit: i64,
    /// `continue`; `None` when absent or empty.
    pub continue_token: Option<String>,
    pub label_selector: LabelSelector,
    pub field_selector: FieldSelector,
    /// `timeoutSeconds` (watch duration; 0 or absent means the server default).
    pub timeout_seconds: Option<i64>,
    /// Whether this is a watch: the `watch` parameter or a `/watch/` path.
    pub watch: bool,
    pub allow_watch_bookmarks: bool,
    /// `sendInitialEvents` (after watch defaulting).
    pub send_initial_events: Option<bool>,
    /// `pretty`: `Some(b)` when the parameter is present and non-empty (`strconv.ParseBool`, invalid is
    /// false); `None` lets the User-Agent decide (see `negotiate::wants_pretty`).
    pub pretty: Option<bool>,
}

/// The storage layer's view of a list request after [`validate_for_storage`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// The decoded continue token, when the request carries one.
    pub continue_from: Option<Continue>,
    /// The parsed `resourceVersion`: `None` when unset, `Some(0)` for "0".
    pub resource_version: Option<u64>,
}

/// `GET` options: only `resourceVersion` (and `pretty`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GetOptions {
    pub resource_version: Option<String>,
    pub pretty: Option<bool>,
}

fn non_empty(v: Option<&str>) -> Option<String> {
    v.filter(|s| !s.is_empty()).map(str::to_owned)
}

fn pretty_param(q: &Query) -> Option<bool> {
    q.get("pretty").filter(|p| !p.is_empty()).map(|p| go_parse_bool(p).unwrap_or(false))
}

/// Parses, defaults and validates list/watch options (steps 2–4 of the module doc). `is_watch_path` is
/// true for the deprecated `/watch/...` paths; like the apiserver, validation still keys off the `watch`
/// parameter, so a `/watch/` path without `watch=1` is validated as a list.
pub fn parse_list_options(query: Option<&str>, is_watch_path: bool) -> Result<ListOptions, ApiError> {
    let q = Query::parse(query);
    // Step 2: conversion, in metav1.ListOptions field order (strings and bools cannot fail).
    let watch_param = q.get("watch").is_some_and(query_bool);
    let timeout_seconds =
        q.get("timeoutSeconds").map(go_parse_int).transpose().map_err(ApiError::BadRequest)?;
    let limit = q.get("limit").map(go_parse_int).transpose().map_err(ApiError::BadRequest)?.unwrap_or(0);
    let label_selector =
        LabelSelector::parse(q.get("labelSelector").unwrap_or("")).map_err(|e| ApiError::BadRequest(e.0))?;
    let field_selector =
        FieldSelector::parse(q.get("fieldSelector").unwrap_or("")).map_err(|e| ApiError::BadRequest(e.0))?;
    let resource_version = non_empty(q.get("resourceVersion"));
    let mut rvm_raw = non_empty(q.get("resourceVersionMatch"));
    let continue_token = non_empty(q.get("continue"));
    let mut send_initial_events = q.get("sendInitialEvents").map(query_bool);

    // Step 3: SetListOptionsDefaults (WatchList enabled, as on 1.34+).
    if watch_param
        && send_initial_events.is_none()
        && rvm_raw.is_none()
        && matches!(resource_version.as_deref(), None | Some("0"))
    {
        send_initial_events = Some(true);
        rvm_raw = Some("NotOlderThan".to_owned());
    }

    // Step 4: ValidateListOptions.
    let errs = if watch_param {
        validate_watch(rvm_raw.as_deref(), send_initial_events, continue_token.is_some())
    } else {
        validate_list(
            rvm_raw.as_deref(),
            resource_version.as_deref(),
            send_initial_events,
            continue_token.is_some(),
        )
    };
    if !errs.is_empty() {
        return Err(ApiError::invalid_list_options(errs));
    }
    let resource_version_match = match rvm_raw.as_deref() {
        Some("Exact") => Some(RvMatch::Exact),
        Some("NotOlderThan") => Some(RvMatch::NotOlderThan),
        // Validation rejected every other non-empty value.
        _ => None,
    };
    Ok(ListOptions {
        resource_version,
        resource_version_match,
        limit,
        continue_token,
        label_selector,
        field_selector,
        timeout_seconds,
        watch: watch_param || is_watch_path,
        allow_watch_bookmarks: q.get("allowWatchBookmarks").is_some_and(query_bool),
        send_initial_events,
        pretty: pretty_param(&q),
    })
}

/// Steps 2–5 for a resource of the given field kind.
pub fn parse_list_request(
    query: Option<&str>,
    is_watch_path: bool,
    kind: FieldKind,
) -> Result<ListOptions, ApiError> {
    parse_list_options(query, is_watch_path)?.convert_fields(kind)
}

/// `validateWatchOptions` (validation.go), errors in its order.
fn validate_watch(
    rvm: Option<&str>,
    send_initial_events: Option<bool>,
    has_continue: bool,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if send_initial_events.is_some() && rvm != Some("NotOlderThan") {
        errs.push(FieldError::forbidden(
            "resourceVersionMatch",
            "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        ));
    }
    if let Some(m) = rvm {
        if send_initial_events.is_none() {
            errs.push(FieldError::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ));
        }
        if m != "NotOlderThan" {
            errs.push(FieldError::not_supported("resourceVersionMatch", m, &["NotOlderThan"]));
        }
        if has_continue {
            errs.push(FieldError::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
    }
    errs
}

/// `ValidateListOptions` for a list (validation.go), errors in its order.
fn validate_list(
    rvm: Option<&str>,
    rv: Option<&str>,
    send_initial_events: Option<bool>,
    has_continue: bool,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(m) = rvm {
        if rv.is_none() {
            errs.push(FieldError::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if has_continue {
            errs.push(FieldError::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
        if m != "Exact" && m != "NotOlderThan" {
            errs.push(FieldError::not_supported("resourceVersionMatch", m, &["Exact", "NotOlderThan", ""]));
        }
        if m == "Exact" && rv == Some("0") {
            errs.push(FieldError::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ));
        }
    }
    if send_initial_events.is_some() {
        errs.push(FieldError::forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list"));
    }
    errs
}

// === impl ListOptions ===

impl ListOptions {
    /// Step 5: the kind's field label conversion; an unsupported field is a 400 (`field label not
    /// supported: f` or `"f" is not a known field selector: ...`), `spec.host` becomes `spec.nodeName`.
    pub fn convert_fields(mut self, kind: FieldKind) -> Result<Self, ApiError> {
        self.field_selector =
            std::mem::take(&mut self.field_selector).convert(kind).map_err(|e| ApiError::BadRequest(e.0))?;
        Ok(self)
    }

    /// Step 5 for a custom resource whose CRD declares `fields` as selectable in the requested version:
    /// the apiextensions-apiserver's conversion (`field label not supported: f` for anything else).
    pub fn convert_custom_fields(
        mut self,
        namespaced: bool,
        fields: crate::options::selector::custom::SelectableFields,
    ) -> Result<Self, ApiError> {
        self.field_selector = std::mem::take(&mut self.field_selector)
            .convert_custom(namespaced, fields)
            .map_err(|e| ApiError::BadRequest(e.0))?;
        Ok(self)
    }

    /// Step 6: a watch of a single object by path name (`/watch/namespaces/ns/pods/NAME`, or a path name
    /// on a list route): a conflicting `metadata.name` selector is a 400; otherwise the selector becomes
    /// `metadata.name=NAME` when it was empty.
    pub fn check_path_name(&mut self, name: &str) -> Result<(), ApiError> {
        if self.field_selector.is_empty() {
            self.field_selector = FieldSelector::parse(&format!(
                "metadata.name={}",
                super::selector::field::escape_value(name)
            ))
            .map_err(|e| ApiError::BadRequest(e.0))?;
            return Ok(());
        }
        match self.field_selector.exact("metadata.name") {
            Some(selected) if selected == name => Ok(()),
            _ => Err(ApiError::bad_request("fieldSelector metadata.name doesn't match requested name")),
        }
    }

    /// The resourceVersion a watch starts from: `None` when unset, `Some(0)` for "0". An unparsable value
    /// is not a StatusError in the cacher (storage/cacher/cacher.go: Cacher.Watch parses it with the
    /// versioner), so the apiserver answers 500 with no reason.
    pub fn watch_resource_version(&self) -> Result<Option<u64>, ApiError> {
        parse_storage_rv(self.resource_version.as_deref())
            .map_err(|msg| ApiError::Unknown { code: 500, message: msg })
    }
}

/// `APIObjectVersioner.ParseResourceVersion`: "" and "0" are 0; the error is the storage InvalidError text
/// `resourceVersion: Invalid value: "abc": strconv.ParseUint: parsing "abc": invalid syntax`.
fn parse_storage_rv(rv: Option<&str>) -> Result<Option<u64>, String> {
    match rv {
        None => Ok(None),
        Some("0") => Ok(Some(0)),
        Some(v) => go_parse_uint(v)
            .map(Some)
            .map_err(|e| aggregate_message(&[FieldError::invalid("resourceVersion", v, &e)])),
    }
}

/// Step 7: `storage.ValidateListOptions`. For a request with `continue` (always a recursive list, since a
/// single-name read requires no continue): the token is decoded first (`invalid continue token: ...`),
/// then any RV other than "" or "0" is refused. Otherwise the RV must be a uint64.
pub fn validate_for_storage(opts: &ListOptions) -> Result<Decoded, ApiError> {
    if let Some(tok) = &opts.continue_token {
        let decoded =
            token::decode(tok).map_err(|e| ApiError::BadRequest(format!("invalid continue token: {e}")))?;
        let rv = match opts.resource_version.as_deref() {
            None => None,
            Some("0") => Some(0),
            Some(_) => {
                return Err(ApiError::bad_request(
                    "specifying resource version is not allowed when using continue",
                ));
            }
        };
        return Ok(Decoded { continue_from: Some(decoded), resource_version: rv });
    }
    let resource_version = parse_storage_rv(opts.resource_version.as_deref())
        .map_err(|e| ApiError::BadRequest(format!("invalid resource version: {e}")))?;
    Ok(Decoded { continue_from: None, resource_version })
}

/// The apiserver's `--request-timeout` default: the longest a get or list may run (`server/config.go`).
pub const REQUEST_TIMEOUT_MAXIMUM: std::time::Duration = std::time::Duration::from_secs(60);

/// The deadline of a get or list (`filters/request_deadline.go`, which skips watches): `?timeout=` when
/// it is a positive Go duration below `maximum`, else `maximum`. A malformed value is a 400
/// `invalid timeout specified in the request URL - time: invalid duration "x"`, checked before anything
/// else in the handler chain.
pub fn request_timeout(
    query: Option<&str>,
    maximum: std::time::Duration,
) -> Result<std::time::Duration, ApiError> {
    let q = Query::parse(query);
    let Some(value) = q.get("timeout").filter(|v| !v.is_empty()) else { return Ok(maximum) };
    let nanos = go_parse_duration_nanos(value)
        .map_err(|e| ApiError::BadRequest(format!("invalid timeout specified in the request URL - {e}")))?;
    let requested =
        u64::try_from(nanos).map(std::time::Duration::from_nanos).unwrap_or(std::time::Duration::ZERO);
    Ok(if !requested.is_zero() && requested < maximum { requested } else { maximum })
}

/// `GET` options. Decoding cannot fail (only strings).
pub fn parse_get_options(query: Option<&str>) -> GetOptions {
    let q = Query::parse(query);
    GetOptions { resource_version: non_empty(q.get("resourceVersion")), pretty: pretty_param(&q) }
}

// === impl GetOptions ===

impl GetOptions {
    /// The parsed resourceVersion (`None` when unset: a quorum read). An unparsable value becomes a 500
    /// with no reason, as the apiserver's cacher returns a plain storage error for it.
    pub fn parsed_resource_version(&self) -> Result<Option<u64>, ApiError> {
        parse_storage_rv(self.resource_version.as_deref())
            .map_err(|msg| ApiError::Unknown { code: 500, message: msg })
    }
}

#[cfg(test)]
#[path = "params_tests.rs"]
mod tests;
