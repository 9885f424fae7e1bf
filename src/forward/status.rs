//! Kubernetes `Status` error responses for the front and the forwarder.
//!
//! A deliberately small helper: the codec's status module is the one place for Status encoding; until it is
//! on main, the HTTP front builds its few errors here, in the apiserver's exact shape and field order
//! (kind, apiVersion, metadata, status, message, reason, details, code).

use http::{HeaderValue, Response, StatusCode, header};

use crate::body::{self, Body};

/// A failure Status the front or the forwarder answers with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FailureStatus {
    pub code: StatusCode,
    /// `metav1.StatusReason`; empty for codes that have none (omitted from the JSON).
    pub reason: &'static str,
    pub message: String,
    /// `details.retryAfterSeconds`, also sent as a `Retry-After` header like the apiserver does.
    pub retry_after_seconds: Option<u32>,
    /// Whether to send `"details":{}` when there is no retry hint (the apiserver's timeout errors do).
    pub empty_details: bool,
}

// === impl FailureStatus ===

impl FailureStatus {
    pub fn new(code: StatusCode, reason: &'static str, message: impl Into<String>) -> Self {
        Self { code, reason, message: message.into(), retry_after_seconds: None, empty_details: false }
    }

    pub fn retry_after(mut self, seconds: u32) -> Self {
        self.retry_after_seconds = Some(seconds);
        self
    }

    pub fn with_empty_details(mut self) -> Self {
        self.empty_details = true;
        self
    }

    /// The Status JSON body.
    pub fn to_json(&self) -> String {
        let message = serde_json::to_string(&self.message).expect("a string always serialises");
        let mut out = String::with_capacity(160 + message.len());
        out.push_str(r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"#);
        out.push_str(&message);
        if !self.reason.is_empty() {
            out.push_str(r#","reason":""#);
            out.push_str(self.reason);
            out.push('"');
        }
        match self.retry_after_seconds {
            Some(s) => out.push_str(&format!(r#","details":{{"retryAfterSeconds":{s}}}"#)),
            None if self.empty_details => out.push_str(r#","details":{}"#),
            None => {}
        }
        out.push_str(&format!(r#","code":{}}}"#, self.code.as_u16()));
        out
    }

    /// The HTTP response: JSON body, `Content-Type: application/json`, `Retry-After` when set.
    pub fn into_response(self) -> Response<Body> {
        let json = self.to_json();
        let mut resp = Response::new(body::full(json));
        *resp.status_mut() = self.code;
        let headers = resp.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
        if let Some(s) = self.retry_after_seconds {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_match_the_apiserver() {
        let s = FailureStatus::new(
            StatusCode::TOO_MANY_REQUESTS,
            "TooManyRequests",
            "Too many requests, please try again later.",
        )
        .retry_after(1);
        assert_eq!(
            s.to_json(),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Too many requests, please try again later.","reason":"TooManyRequests","details":{"retryAfterSeconds":1},"code":429}"#
        );
        let t = FailureStatus::new(StatusCode::GATEWAY_TIMEOUT, "Timeout", "a \"quoted\" message")
            .with_empty_details();
        assert_eq!(
            t.to_json(),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"a \"quoted\" message","reason":"Timeout","details":{},"code":504}"#
        );
        let u = FailureStatus::new(StatusCode::URI_TOO_LONG, "", "x");
        assert_eq!(
            u.to_json(),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"x","code":414}"#
        );
        let resp = s.into_response();
        assert_eq!(resp.status(), 429);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
        assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/json");
    }
}
