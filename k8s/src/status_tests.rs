//! Byte-for-byte tests of Status bodies against bodies recorded from a real 1.36 apiserver.

use super::*;

/// The 504 of a list at a resourceVersion the cache never reaches (pretty, as sent to curl): built by
/// staging/src/k8s.io/apiserver/pkg/storage/errors.go: NewTooLargeResourceVersionError.
const T07: &str = r##"{
  "kind": "Status",
  "apiVersion": "v1",
  "metadata": {},
  "status": "Failure",
  "message": "Timeout: Too large resource version: 999, current: 6",
  "reason": "Timeout",
  "details": {
    "causes": [
      {
        "reason": "ResourceVersionTooLarge",
        "message": "Too large resource version"
      }
    ],
    "retryAfterSeconds": 1
  },
  "code": 504
}"##;
/// The 410 of a continue token older than the compaction (pretty, as sent to curl): built by
/// staging/src/k8s.io/apiserver/pkg/storage/etcd3/errors.go: handleCompactedErrorForPaging.
const T12: &str = r##"{
  "kind": "Status",
  "apiVersion": "v1",
  "metadata": {
    "continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6LTEsInN0YXJ0IjoiZjJcdTAwMDAifQ"
  },
  "status": "Failure",
  "message": "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
  "reason": "Expired",
  "code": 410
}"##;
/// The 422 of a watch with sendInitialEvents but no resourceVersionMatch (pretty, as sent to curl): from
/// staging/src/k8s.io/apimachinery/pkg/apis/meta/internalversion/validation/validation.go:
/// validateWatchOptions.
const T17: &str = r##"{
  "kind": "Status",
  "apiVersion": "v1",
  "metadata": {},
  "status": "Failure",
  "message": "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
  "reason": "Invalid",
  "details": {
    "group": "meta.k8s.io",
    "kind": "ListOptions",
    "causes": [
      {
        "reason": "FieldValueForbidden",
        "message": "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        "field": "resourceVersionMatch"
      }
    ]
  },
  "code": 422
}"##;

fn s(b: Bytes) -> String {
    String::from_utf8(b.to_vec()).expect("utf8")
}

#[test]
fn too_large_rv_matches_transcript_07() {
    let e = ApiError::TooLargeResourceVersion { requested: 999, current: 6, retry_after: Some(1) };
    assert_eq!(s(e.to_json_pretty()), T07);
    assert_eq!(e.status_code(), 504);
    assert_eq!(e.retry_after(), Some(1));
    assert_eq!(
        s(e.to_json()),
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"Timeout: Too large resource version: 999, current: 6\",\"reason\":\"Timeout\",\"details\":{\"causes\":[{\"reason\":\"ResourceVersionTooLarge\",\"message\":\"Too large resource version\"}],\"retryAfterSeconds\":1},\"code\":504}\n"
    );
}

#[test]
fn too_large_rv_from_etcd_has_no_retry_after() {
    let e = ApiError::TooLargeResourceVersion { requested: 200, current: 150, retry_after: None };
    assert_eq!(e.retry_after(), None);
    assert_eq!(
        s(e.to_json()),
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"Timeout: Too large resource version: 200, current: 150\",\"reason\":\"Timeout\",\"details\":{\"causes\":[{\"reason\":\"ResourceVersionTooLarge\",\"message\":\"Too large resource version\"}]},\"code\":504}\n"
    );
}

#[test]
fn expired_continue_matches_transcript_12() {
    let e = ApiError::ExpiredContinue {
        continue_token: Some("eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6LTEsInN0YXJ0IjoiZjJcdTAwMDAifQ".into()),
    };
    assert_eq!(s(e.to_json_pretty()), T12);
    assert!(e.is_expired());
}

#[test]
fn expired_continue_without_token() {
    let e = ApiError::ExpiredContinue { continue_token: None };
    assert_eq!(
        s(e.to_json()),
        format!(
            "{{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{{}},\"status\":\"Failure\",\"message\":\"{EXPIRED_CONTINUE_NO_TOKEN_MESSAGE}\",\"reason\":\"Expired\",\"code\":410}}\n"
        )
    );
}

#[test]
fn invalid_matches_transcript_17() {
    let e = ApiError::invalid_list_options(vec![FieldError::forbidden(
        "resourceVersionMatch",
        "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
    )]);
    assert_eq!(s(e.to_json_pretty()), T17);
    assert_eq!(e.status_code(), 422);
}

#[test]
fn invalid_with_several_errors_is_bracketed() {
    let e = ApiError::invalid_list_options(vec![
        FieldError::forbidden(
            "resourceVersionMatch",
            "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        ),
        FieldError::not_supported("resourceVersionMatch", "Exact", &["NotOlderThan"]),
    ]);
    assert_eq!(
        e.to_string(),
        "ListOptions.meta.k8s.io \"\" is invalid: [resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan, resourceVersionMatch: Unsupported value: \"Exact\": supported values: \"NotOlderThan\"]"
    );
    let json = s(e.to_json());
    assert!(json.contains("{\"reason\":\"FieldValueNotSupported\",\"message\":\"Unsupported value: \\\"Exact\\\": supported values: \\\"NotOlderThan\\\"\",\"field\":\"resourceVersionMatch\"}"), "{json}");
}

#[test]
fn watch_too_old_event_matches_transcript_14() {
    let e = ApiError::too_old_resource_version(3, 11);
    assert_eq!(
        s(e.watch_error_event()),
        "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"too old resource version: 3 (11)\",\"reason\":\"Expired\",\"code\":410}}\n"
    );
}

#[test]
fn expired_list_body() {
    assert_eq!(
        s(ApiError::ExpiredList.to_json()),
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"The resourceVersion for the provided list is too old.\",\"reason\":\"Expired\",\"code\":410}\n"
    );
}

#[test]
fn not_found_body() {
    let e = ApiError::not_found("", "pods", "x");
    assert_eq!(
        s(e.to_json()),
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"pods \\\"x\\\" not found\",\"reason\":\"NotFound\",\"details\":{\"name\":\"x\",\"kind\":\"pods\"},\"code\":404}\n"
    );
    let e = ApiError::not_found("apps", "deployments", "web");
    assert_eq!(e.to_string(), "deployments.apps \"web\" not found");
    assert!(
        s(e.to_json()).contains("\"details\":{\"name\":\"web\",\"group\":\"apps\",\"kind\":\"deployments\"}")
    );
}

#[test]
fn not_ready_429() {
    let e = ApiError::not_ready(3);
    assert_eq!(e.retry_after(), Some(3));
    assert_eq!(
        s(e.to_json()),
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"storage is (re)initializing\",\"reason\":\"TooManyRequests\",\"details\":{\"retryAfterSeconds\":3},\"code\":429}\n"
    );
}

#[test]
fn not_ready_retry_after_grows_and_is_clamped() {
    use std::time::Duration;
    assert_eq!(ApiError::not_ready_retry_after(Duration::ZERO), 1);
    assert_eq!(ApiError::not_ready_retry_after(Duration::from_secs(20)), 3);
    assert_eq!(ApiError::not_ready_retry_after(Duration::from_secs(3600)), 30);
}

#[test]
fn not_acceptable_406() {
    let e = ApiError::not_acceptable(false);
    assert_eq!(
        s(e.to_json()),
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf\",\"reason\":\"NotAcceptable\",\"code\":406}\n"
    );
    assert_eq!(
        ApiError::not_acceptable(true).to_string(),
        "only the following media types are accepted: application/json;stream=watch, application/vnd.kubernetes.protobuf;stream=watch"
    );
}

#[test]
fn forbidden_wording() {
    let reason = forbidden_reason("x", "list", "pods", "", "", "ns", "");
    assert_eq!(reason, "User \"x\" cannot list resource \"pods\" in API group \"\" in the namespace \"ns\"");
    let e = ApiError::Forbidden { group: "".into(), resource: "pods".into(), name: "".into(), reason };
    assert_eq!(
        s(e.to_json()),
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"pods is forbidden: User \\\"x\\\" cannot list resource \\\"pods\\\" in API group \\\"\\\" in the namespace \\\"ns\\\"\",\"reason\":\"Forbidden\",\"details\":{\"kind\":\"pods\"},\"code\":403}\n"
    );
    let reason = forbidden_reason("u", "get", "deployments", "scale", "apps", "", "no RBAC");
    let e = ApiError::Forbidden {
        group: "apps".into(),
        resource: "deployments".into(),
        name: "web".into(),
        reason,
    };
    assert_eq!(
        e.to_string(),
        "deployments.apps \"web\" is forbidden: User \"u\" cannot get resource \"deployments/scale\" in API group \"apps\" at the cluster scope: no RBAC"
    );
}

#[test]
fn forbidden_non_resource_path() {
    let reason = forbidden_path_reason("x", "get", "/metrics", "");
    let e =
        ApiError::Forbidden { group: String::new(), resource: String::new(), name: String::new(), reason };
    assert_eq!(e.to_string(), "forbidden: User \"x\" cannot get path \"/metrics\"");
    assert!(
        String::from_utf8(e.to_json().to_vec())
            .expect("utf8")
            .contains("\"reason\":\"Forbidden\",\"details\":{},\"code\":403")
    );
}

#[test]
fn unauthorized_and_others() {
    assert_eq!(
        s(ApiError::Unauthorized("Unauthorized".into()).to_json()),
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"Unauthorized\",\"reason\":\"Unauthorized\",\"code\":401}\n"
    );
    let e = ApiError::method_not_supported("", "pods", "watch");
    assert_eq!(e.to_string(), "watch is not supported on resources of kind \"pods\"");
    assert_eq!(e.status_code(), 405);
    let e = ApiError::InternalError("boom".into());
    assert!(s(e.to_json()).contains("\"message\":\"Internal error occurred: boom\",\"reason\":\"InternalError\",\"details\":{\"causes\":[{\"message\":\"boom\"}]},\"code\":500"));
    let e = ApiError::Unknown { code: 500, message: "resourceVersion: Invalid value: \"abc\": x".into() };
    assert_eq!(
        s(e.to_json()),
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"resourceVersion: Invalid value: \\\"abc\\\": x\",\"code\":500}\n"
    );
    assert_eq!(ApiError::RequestEntityTooLarge("limit is 3145728".into()).status_code(), 413);
    assert_eq!(ApiError::ServiceUnavailable("x".into()).status_code(), 503);
}

#[test]
fn html_characters_are_escaped_like_go() {
    let e = ApiError::bad_request("unable to parse requirement: <nil>: Invalid value: \"a&b\"");
    assert!(s(e.to_json()).contains("\\u003cnil\\u003e: Invalid value: \\\"a\\u0026b\\\""));
}

/// A message quoting client input holds the characters Go's `encoding/json` escapes: the body has them
/// as the apiserver writes them (`<`, `>`, `&`, U+2028, U+2029 as `\u` escapes, `\b` and `\f` short).
#[test]
fn messages_are_escaped_like_go() {
    let err = ApiError::bad_request("a<b>&\u{2028}\u{2029}\u{8}\u{c}\u{1}\u{7f}");
    assert_eq!(
        &err.to_json()[..],
        b"{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"a\\u003cb\\u003e\\u0026\\u2028\\u2029\\b\\f\\u0001\x7f\",\"reason\":\"BadRequest\",\"code\":400}\n"
    );
    let pretty = String::from_utf8(err.to_json_pretty().to_vec()).expect("utf8");
    assert!(
        pretty.contains("  \"message\": \"a\\u003cb\\u003e\\u0026\\u2028\\u2029\\b\\f\\u0001\u{7f}\",\n"),
        "{pretty}"
    );
    let event = String::from_utf8(err.watch_error_event().to_vec()).expect("utf8");
    assert!(event.starts_with("{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\""), "{event}");
    assert!(event.contains("\\u2028\\u2029\\b\\f"), "{event}");
}
