//! Status error responses of the front and the forwarder, from the codec's [`ApiError`] (the one place
//! Status bodies are encoded).

use http::{HeaderValue, Response, StatusCode, header};

use crate::body::{self, Body};
use crate::codec::status::ApiError;

/// The HTTP response for `err`: the Status JSON, `Content-Type: application/json`, and `Retry-After` when
/// the Status carries `retryAfterSeconds` (as the apiserver's `ErrorNegotiated` does).
pub(crate) fn status_response(err: &ApiError) -> Response<Body> {
    let json = err.to_json();
    let mut resp = Response::new(body::full(json.clone()));
    *resp.status_mut() = StatusCode::from_u16(err.status_code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(json.len()));
    if let Some(secs) = err.retry_after() {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    #[tokio::test]
    async fn carries_retry_after_and_json() {
        let err = ApiError::TooManyRequests {
            message: "Too many requests, please try again later.".into(),
            retry_after: 1,
        };
        let resp = status_response(&err);
        assert_eq!(resp.status(), 429);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
        assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/json");
        let body = resp.into_body().collect().await.expect("full body").to_bytes();
        assert_eq!(
            &body[..],
            b"{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"Too many requests, please try again later.\",\"reason\":\"TooManyRequests\",\"details\":{\"retryAfterSeconds\":1},\"code\":429}\n"
        );
        assert!(
            status_response(&ApiError::Unknown { code: 414, message: "x".into() })
                .headers()
                .get(header::RETRY_AFTER)
                .is_none()
        );
    }
}
