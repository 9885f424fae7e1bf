//! The freshness probe: one consistent `limit=1` list of a resource against the upstream; its
//! `metadata.resourceVersion` is ≥ the upstream's revision when the probe started (a consistent read makes
//! the apiserver's watch cache catch up with etcd first).

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;

use crate::front::body;
use crate::upstream::Upstream;

/// A probe response larger than this is refused (a `limit=1` list is one object).
const MAX_PROBE_BODY: usize = 8 << 20;

/// A GET of `path` asking for JSON, as probes and proof watches send it.
pub(super) fn json_get(path: &str) -> Result<Request<crate::front::body::Body>, String> {
    Request::builder()
        .method(Method::GET)
        .uri(path)
        .header(http::header::ACCEPT, "application/json")
        .body(body::empty())
        .map_err(|e| e.to_string())
}

/// One consistent `limit=1` list at `path`; returns its `metadata.resourceVersion`.
pub(super) async fn probe(upstream: &Upstream, path: &str) -> Result<u64, String> {
    let req = json_get(path)?;
    let resp = upstream.send(req).await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let bytes = http_body_util::Limited::new(resp.into_body(), MAX_PROBE_BODY)
        .collect()
        .await
        .map_err(|e| format!("reading probe response: {e}"))?
        .to_bytes();
    if status != StatusCode::OK {
        return Err(format!("probe answered {status}"));
    }
    list_resource_version(&bytes)
}

/// Extracts `metadata.resourceVersion` from a list response.
pub(super) fn list_resource_version(bytes: &Bytes) -> Result<u64, String> {
    #[derive(serde::Deserialize)]
    struct Meta {
        #[serde(rename = "resourceVersion")]
        resource_version: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct List {
        metadata: Meta,
    }
    let list: List = serde_json::from_slice(bytes).map_err(|e| format!("probe response: {e}"))?;
    list.metadata
        .resource_version
        .as_deref()
        .unwrap_or("")
        .parse()
        .map_err(|_| "probe response has no numeric resourceVersion".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_list_rv() {
        let body = Bytes::from_static(br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"42","continue":"x"},"items":[{"metadata":{"name":"a"}}]}"#);
        assert_eq!(list_resource_version(&body), Ok(42));
        assert!(list_resource_version(&Bytes::from_static(b"{}")).is_err());
        assert!(
            list_resource_version(&Bytes::from_static(br#"{"metadata":{"resourceVersion":"x"}}"#)).is_err()
        );
    }
}
