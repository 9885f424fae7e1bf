//! The one place where an error becomes a response: a `Status` body and the headers the apiserver writes
//! with it (`responsewriters.ErrorNegotiated` → `WriteObjectNegotiated` → `SerializeObject` in
//! k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/writers.go):
//!
//! - `Content-Type: application/json`, or the protobuf media type with a protobuf `Status` when the client
//!   negotiated protobuf ([`protobuf_status`]);
//! - `Cache-Control: no-cache, private` (an error must not be cached by a shared proxy);
//! - `Content-Length` (the body is complete, so clients need not wait for a chunked end);
//! - `Retry-After` when the Status carries `details.retryAfterSeconds` (429, 504 "Too large resource
//!   version");
//! - `Audit-Id`, echoed from the request or freshly minted, as the apiserver's audit filter
//!   (`filters.WithAuditInit`) sets on every response; [`with_audit_id`] adds it to answers that are not
//!   errors too;
//! - pretty printing (`?pretty=true` or a browser's User-Agent, `negotiate::wants_pretty`), and the raw
//!   indented form (`WriteRawJSON`) when the Accept header names only transformations a Status cannot take.
//!
//! Errors raised before a request is known (connection limits, read timeouts) use [`status`]; everything
//! that has the request's headers uses [`error`].

use http::{HeaderMap, HeaderValue, Response, StatusCode, header};

use crate::codec::status::ApiError;
use crate::front::body::{self, Body};
use crate::front::negotiate;

/// How an error's Status body is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// One line of JSON with a trailing newline (`json.Encoder`).
    Compact,
    /// Indented, with a trailing newline (`?pretty=true`).
    Pretty,
    /// Indented without a trailing newline (`WriteRawJSON`, when the error itself cannot be negotiated).
    Raw,
}

/// The Status response for `err`, when nothing about the request is known (or it does not matter): compact
/// JSON, no `Audit-Id`.
pub(crate) fn status(err: &ApiError) -> Response<Body> {
    build(err, Form::Compact)
}

/// The Status response for `err` to a request with `headers`: pretty when asked for (`pretty` is the
/// decoded `?pretty=` parameter, or false when the caller did not parse it), raw when the Accept header
/// cannot carry a Status, and with the request's `Audit-Id`.
pub(crate) fn error(err: &ApiError, headers: &HeaderMap, pretty: bool) -> Response<Body> {
    // A client that negotiated protobuf gets its Status in protobuf, as the apiserver negotiates an error
    // with the same serializers as the object it replaces.
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    if negotiate::error_in_protobuf(accept) {
        return with_audit_id(protobuf_status(err), headers);
    }
    let pretty = pretty || {
        let ua = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok());
        negotiate::wants_pretty(None, ua)
    };
    // An Accept header naming only transformations (a Table, a metadata view) cannot carry a Status: the
    // apiserver then writes it raw (`WriteRawJSON`), indented without a trailing newline.
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let form = if !negotiate::error_negotiable(accept) {
        Form::Raw
    } else if pretty {
        Form::Pretty
    } else {
        Form::Compact
    };
    with_audit_id(build(err, form), headers)
}

/// The Status response for `err` in protobuf (`k8s\0` + `runtime.Unknown` around a `Status`), with the same
/// headers as the JSON one.
pub(crate) fn protobuf_status(err: &ApiError) -> Response<Body> {
    let bytes = bytes::Bytes::from(crate::codec::proto::status_body(err));
    let mut resp = Response::builder()
        .status(StatusCode::from_u16(err.status_code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, crate::codec::proto::MEDIA_TYPE)
        .header(header::CACHE_CONTROL, "no-cache, private")
        .header(header::CONTENT_LENGTH, bytes.len())
        .body(body::full(bytes))
        .expect("static headers are valid");
    if let Some(secs) = err.retry_after() {
        resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}

/// A 406 whose own negotiation fails on the same Accept header: the apiserver writes it with
/// `WriteRawJSON` (indented, no trailing newline) whatever `pretty` says.
pub(crate) fn not_acceptable(err: &ApiError, headers: &HeaderMap) -> Response<Body> {
    with_audit_id(build(err, Form::Raw), headers)
}

fn build(err: &ApiError, form: Form) -> Response<Body> {
    let bytes = match form {
        Form::Compact => err.to_json(),
        Form::Pretty => err.to_json_pretty(),
        Form::Raw => err.to_raw_json(),
    };
    let mut resp = Response::builder()
        .status(StatusCode::from_u16(err.status_code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .header(header::CONTENT_LENGTH, bytes.len())
        .body(body::full(bytes))
        .expect("static headers are valid");
    if let Some(secs) = err.retry_after() {
        resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}

/// Sets `Audit-Id` (the client's, echoed, or a fresh one), as every apiserver response carries it.
pub(crate) fn with_audit_id(mut resp: Response<Body>, headers: &HeaderMap) -> Response<Body> {
    resp.headers_mut().insert("audit-id", audit_id(headers));
    resp
}

/// The request's `Audit-Id`, or a random version-4 UUID as the apiserver mints one.
fn audit_id(headers: &HeaderMap) -> HeaderValue {
    if let Some(v) = headers.get("audit-id") {
        return v.clone();
    }
    let r: u128 = rand::random();
    let s = format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        (r >> 96) as u32,
        (r >> 80) as u16,
        (r >> 68) as u16 & 0xfff,
        ((r >> 52) as u16 & 0x3fff) | 0x8000,
        (r as u64) & 0xffff_ffff_ffff
    );
    HeaderValue::from_str(&s).expect("hex is a valid header value")
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    async fn body_of(resp: Response<Body>) -> Vec<u8> {
        resp.into_body().collect().await.expect("full body").to_bytes().to_vec()
    }

    #[tokio::test]
    async fn carries_retry_after_and_json() {
        let err = ApiError::TooManyRequests {
            message: "Too many requests, please try again later.".into(),
            retry_after: 1,
        };
        let resp = status(&err);
        assert_eq!(resp.status(), 429);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
        assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/json");
        assert_eq!(resp.headers()[header::CACHE_CONTROL], "no-cache, private");
        assert!(resp.headers().get("audit-id").is_none(), "no request, no audit id");
        let length: usize = resp.headers()[header::CONTENT_LENGTH].to_str().unwrap().parse().unwrap();
        let body = body_of(resp).await;
        assert_eq!(length, body.len());
        assert_eq!(
            &body[..],
            b"{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"Too many requests, please try again later.\",\"reason\":\"TooManyRequests\",\"details\":{\"retryAfterSeconds\":1},\"code\":429}\n"
        );
        assert!(
            status(&ApiError::Unknown { code: 414, message: "x".into() })
                .headers()
                .get(header::RETRY_AFTER)
                .is_none()
        );
    }

    #[tokio::test]
    async fn echoes_the_audit_id_and_honours_pretty_and_raw() {
        let err = ApiError::not_found("", "pods", "p");
        let mut headers = HeaderMap::new();
        headers.insert("audit-id", HeaderValue::from_static("abc"));
        let compact = error(&err, &headers, false);
        assert_eq!(compact.status(), 404);
        assert_eq!(compact.headers()["audit-id"], "abc");
        assert_eq!(body_of(compact).await, err.to_json().to_vec());

        assert_eq!(body_of(error(&err, &headers, true)).await, err.to_json_pretty().to_vec());

        headers
            .insert(header::ACCEPT, HeaderValue::from_static("application/json;as=Table;v=v1;g=meta.k8s.io"));
        assert_eq!(body_of(error(&err, &headers, false)).await, err.to_raw_json().to_vec(), "raw");

        let minted = error(&err, &HeaderMap::new(), false);
        let id = minted.headers()["audit-id"].to_str().unwrap().to_owned();
        assert_eq!(id.len(), 36, "a UUID: {id}");
        assert_eq!(&id[14..15], "4", "version 4: {id}");
    }
}
