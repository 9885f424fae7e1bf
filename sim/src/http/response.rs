//! Response building: JSON bodies (compact or pretty), Status errors, gzip as the apiserver applies it.

use std::convert::Infallible;
use std::io::Write;

use bytes::Bytes;
use http::header::{CONTENT_ENCODING, CONTENT_TYPE, HeaderValue, RETRY_AFTER, VARY};
use http::{HeaderMap, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use serde::Serialize;

use crate::status::ApiError;

/// The response body type of every handler.
pub type Body = BoxBody<Bytes, Infallible>;

/// Responses strictly larger than this are gzipped when the client accepts it
/// (`defaultGzipThresholdBytes`, `responsewriters/writers.go`).
pub const GZIP_THRESHOLD_BYTES: usize = 128 * 1024;

/// The apiserver compresses with `gzip.BestSpeed` (`compression.go`).
const GZIP_LEVEL: u32 = 1;

/// Per-request output negotiation: pretty printing, gzip and the encoding.
#[derive(Debug, Clone, Copy, Default)]
pub struct Out {
    pub pretty: bool,
    pub gzip: bool,
    /// Objects and lists are written in protobuf (negotiated for a built-in kind or a metadata view).
    pub proto: bool,
    /// Status errors are written in protobuf (negotiated apart: see `view::error_in_protobuf`).
    pub proto_errors: bool,
}

// === impl Out ===

impl Out {
    /// Pretty when `?pretty=` is true, or (when `pretty` is absent or empty) the User-Agent starts with
    /// `curl`, `Wget` or `Mozilla/5.0` (`isPrettyPrint`); gzip when Accept-Encoding has a comma-separated token that is exactly `gzip`.
    pub fn negotiate(headers: &HeaderMap, pretty_param: Option<&str>) -> Out {
        let pretty = match pretty_param.filter(|p| !p.is_empty()) {
            Some(p) => matches!(p, "1" | "t" | "T" | "true" | "TRUE" | "True"),
            None => headers
                .get(http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|ua| ["curl", "Wget", "Mozilla/5.0"].iter().any(|p| ua.starts_with(p))),
        };
        let gzip = headers
            .get_all(http::header::ACCEPT_ENCODING)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.split(',').any(|t| t.trim() == "gzip"));
        Out { pretty, gzip, proto: false, proto_errors: false }
    }

    /// An object response (an object, a list, a Status) with the apiserver's headers: in protobuf when
    /// negotiated and the object's kind has a protobuf form, JSON otherwise.
    pub fn json<T: Serialize + ?Sized>(&self, status: u16, v: &T) -> Response<Body> {
        if self.proto {
            let value = serde_json::to_value(v).unwrap_or(serde_json::Value::Null);
            match crate::proto::envelope::encode_object(&value) {
                Ok(b) => return self.bytes(status, b, crate::proto::MEDIA_TYPE),
                // Only objects that do not fit their Go type get here (the write path accepts any
                // JSON): the apiserver could not have stored them, so this is the sim's own error.
                Err(crate::proto::EncodeError::NoSchema(_)) => {}
                Err(e) => {
                    let err = ApiError::internal(format!("protobuf encoding: {e}"));
                    return Out { proto: false, proto_errors: false, ..*self }.error(&err);
                }
            }
        }
        let body = crate::json::body(v, self.pretty);
        self.bytes(status, body, "application/json")
    }

    /// A response from already-encoded bytes, gzipped when large enough and accepted.
    pub fn bytes(&self, status: u16, body: Vec<u8>, content_type: &str) -> Response<Body> {
        let mut builder = Response::builder()
            .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
            .header(CONTENT_TYPE, content_type)
            .header("cache-control", "no-cache, private");
        let body = if self.gzip && body.len() > GZIP_THRESHOLD_BYTES {
            builder = builder.header(CONTENT_ENCODING, "gzip").header(VARY, "Accept-Encoding");
            gzip(&body)
        } else {
            body
        };
        builder.body(full(body)).expect("static headers are valid")
    }

    /// The Status response of an error, with `Retry-After` when it asks for one.
    pub fn error(&self, e: &ApiError) -> Response<Body> {
        let mut r = Out { proto: self.proto_errors, ..*self }.json(e.code, &e.to_status());
        if let Some(s) = e.retry_after() {
            r.headers_mut().insert(RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(data.len() / 4),
        flate2::Compression::new(GZIP_LEVEL),
    );
    enc.write_all(data).expect("writing into a Vec cannot fail");
    enc.finish().expect("writing into a Vec cannot fail")
}

/// `responsewriters.WriteRawJSON`: indented JSON without a trailing newline, never compressed (what the
/// apiserver writes when even an error's media type cannot be negotiated).
pub fn raw_json(status: u16, v: &serde_json::Value) -> Response<Body> {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(CONTENT_TYPE, "application/json")
        .header("cache-control", "no-cache, private")
        .body(full(crate::json::pretty(v)))
        .expect("static headers are valid")
}

/// A complete body.
pub fn full(data: impl Into<Bytes>) -> Body {
    Full::new(data.into()).boxed()
}

/// A plain-text response (logs, health checks).
pub fn text(status: u16, s: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::OK))
        .header(CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(full(s.into()))
        .expect("static headers are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn gzip_token_must_be_exact() {
        assert!(Out::negotiate(&headers(&[("accept-encoding", "deflate, , gzip,")]), None).gzip);
        assert!(!Out::negotiate(&headers(&[("accept-encoding", "gzip;q=1.0")]), None).gzip);
        assert!(!Out::negotiate(&headers(&[]), None).gzip);
    }

    #[test]
    fn pretty_for_curl_unless_overridden() {
        assert!(Out::negotiate(&headers(&[("user-agent", "curl/8.5.0")]), None).pretty);
        assert!(!Out::negotiate(&headers(&[("user-agent", "curl/8.5.0")]), Some("false")).pretty);
        assert!(Out::negotiate(&headers(&[]), Some("true")).pretty);
        assert!(!Out::negotiate(&headers(&[("user-agent", "kubectl/v1.35")]), None).pretty);
    }

    #[test]
    fn large_bodies_are_gzipped_small_are_not() {
        let out = Out { pretty: false, gzip: true, proto: false, proto_errors: false };
        let small = out.bytes(200, vec![b'a'; GZIP_THRESHOLD_BYTES], "application/json");
        assert!(small.headers().get(CONTENT_ENCODING).is_none());
        let big = out.bytes(200, vec![b'a'; GZIP_THRESHOLD_BYTES + 1], "application/json");
        assert_eq!(big.headers().get(CONTENT_ENCODING).map(|v| v.as_bytes()), Some(&b"gzip"[..]));
        assert_eq!(big.headers().get(VARY).map(|v| v.as_bytes()), Some(&b"Accept-Encoding"[..]));
    }
}
