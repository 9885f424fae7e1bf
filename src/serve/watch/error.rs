//! Why a watch ends with an ERROR event.

use bytes::Bytes;

use crate::codec::status::ApiError;
use crate::store::{TooOld, WaitError};

/// A watch that cannot start: sent as one ERROR event, after which the stream ends (`newErrWatcher`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    /// The resourceVersion is older than the event history: 410 Expired.
    #[error(transparent)]
    Expired(#[from] TooOld),
    /// The store did not reach the resourceVersion in time: 504 "Too large resource version".
    #[error(transparent)]
    TooLarge(#[from] WaitError),
}

/// The watch cache's Retry-After for a resourceVersion it did not reach in time
/// (`resourceVersionTooHighRetrySeconds` in staging/src/k8s.io/apiserver/pkg/storage/cacher/watch_cache.go).
const TOO_LARGE_RETRY_AFTER: u32 = 1;

impl StartError {
    /// The `{"type":"ERROR","object":<Status>}\n` line.
    pub fn frame(&self) -> Bytes {
        self.to_api_error().watch_error_event()
    }

    pub fn to_api_error(&self) -> ApiError {
        match self {
            Self::Expired(e) => ApiError::too_old_resource_version(e.requested, e.oldest),
            Self::TooLarge(WaitError::TooLarge { requested, current }) => ApiError::TooLargeResourceVersion {
                requested: *requested,
                current: *current,
                retry_after: Some(TOO_LARGE_RETRY_AFTER),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_matches_transcript_14() {
        let e = StartError::from(TooOld { requested: 3, oldest: 11 });
        assert_eq!(
            &e.frame()[..],
            concat!(
                r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","#,
                r#""message":"too old resource version: 3 (11)","reason":"Expired","code":410}}"#,
                "\n"
            )
            .as_bytes()
        );
    }

    #[test]
    fn too_large_matches_transcript_07_body() {
        let e = StartError::from(WaitError::TooLarge { requested: 999, current: 6 });
        let v: serde_json::Value = serde_json::from_slice(&e.frame()).expect("json");
        assert_eq!(v["type"], "ERROR");
        assert_eq!(v["object"]["message"], "Timeout: Too large resource version: 999, current: 6");
        assert_eq!(v["object"]["code"], 504);
        assert_eq!(v["object"]["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");
        assert_eq!(v["object"]["details"]["retryAfterSeconds"], 1);
    }
}
