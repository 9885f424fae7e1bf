//! The freshness probe: one consistent list of a resource against the upstream; its
//! `metadata.resourceVersion` is ≥ the upstream's revision when the probe started (a consistent read makes
//! the apiserver's watch cache catch up with etcd first, or is served by etcd itself).
//!
//! The list asks for one object by name (`fieldSelector=metadata.name=kache-freshness-probe`, in namespace
//! `default` for a namespaced resource): the apiserver's registry reads such a list as a single storage key
//! (`Store.ListPredicate`, `MatchesSingle`), so it costs what a get costs whatever the resource's size.
//! A `limit=1` list of the whole resource costs more the more objects there are: the watch cache walks the
//! resource's items to fill its one-item page (measured on the real 1.36 apiserver with 10k objects of
//! 2.2 KiB: 7.3 ms at p50 against 2.7 ms by name and 2.7 ms for a get,
//! docs/decisions/0016-consistent-reads-probe-census-proof.md). Either list's
//! `resourceVersion` is the upstream's current revision; an upstream that refuses the name selector (400)
//! is probed with `limit=1` from then on.

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;

use crate::front::body;
use crate::resource::ResourceInfo;
use crate::upstream::Upstream;

/// The name the probe asks for. No such object needs to exist; if one does, the probe returns it.
const PROBE_NAME: &str = "kache-freshness-probe";
/// The namespace a namespaced resource is probed in (lists in a namespace that does not exist are empty).
const PROBE_NAMESPACE: &str = "default";

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

/// The probe's path: a list of one name, or (`by_name` false) a `limit=1` list of the whole resource.
pub(super) fn probe_path(info: &ResourceInfo, by_name: bool) -> String {
    let gvr = &info.gvr;
    let prefix = gvr.path_prefix();
    match (by_name, info.namespaced) {
        (false, _) => format!("{prefix}/{}?limit=1", gvr.resource),
        (true, true) => format!(
            "{prefix}/namespaces/{PROBE_NAMESPACE}/{}?fieldSelector=metadata.name%3D{PROBE_NAME}",
            gvr.resource
        ),
        (true, false) => format!("{prefix}/{}?fieldSelector=metadata.name%3D{PROBE_NAME}", gvr.resource),
    }
}

/// Probes the upstream's revision for `info`'s resource: by name while `by_name` holds, and with `limit=1`
/// once the upstream refuses the name selector with a 400; returns whether to probe by name from then on.
pub(super) async fn probe(
    upstream: &Upstream,
    info: &ResourceInfo,
    by_name: bool,
) -> (Result<u64, String>, bool) {
    if by_name {
        match probe_at(upstream, &probe_path(info, true)).await {
            Err(ProbeError::Status(StatusCode::BAD_REQUEST)) => {
                tracing::info!(resource = %info.gvr, "upstream refused the probe by name; probing with limit=1");
            }
            other => return (other.map_err(|e| e.to_string()), true),
        }
    }
    (probe_at(upstream, &probe_path(info, false)).await.map_err(|e| e.to_string()), false)
}

/// Why a probe failed.
#[derive(Debug, thiserror::Error)]
enum ProbeError {
    #[error("probe answered {0}")]
    Status(StatusCode),
    #[error("{0}")]
    Other(String),
}

/// One consistent list at `path`; returns its `metadata.resourceVersion`.
async fn probe_at(upstream: &Upstream, path: &str) -> Result<u64, ProbeError> {
    let req = json_get(path).map_err(ProbeError::Other)?;
    let resp = upstream.send(req).await.map_err(|e| ProbeError::Other(e.to_string()))?;
    let status = resp.status();
    let bytes = http_body_util::Limited::new(resp.into_body(), MAX_PROBE_BODY)
        .collect()
        .await
        .map_err(|e| ProbeError::Other(format!("reading probe response: {e}")))?
        .to_bytes();
    if status != StatusCode::OK {
        return Err(ProbeError::Status(status));
    }
    list_resource_version(&bytes).map_err(ProbeError::Other)
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
pub(super) mod tests {
    use super::*;

    #[test]
    fn probe_paths() {
        let info = |namespaced| ResourceInfo { namespaced, ..flunders() };
        assert_eq!(
            probe_path(&info(true), true),
            "/apis/wardle.example.com/v1beta1/namespaces/default/flunders?fieldSelector=metadata.name%3Dkache-freshness-probe"
        );
        assert_eq!(
            probe_path(&info(false), true),
            "/apis/wardle.example.com/v1beta1/flunders?fieldSelector=metadata.name%3Dkache-freshness-probe"
        );
        assert_eq!(probe_path(&info(true), false), "/apis/wardle.example.com/v1beta1/flunders?limit=1");
    }

    /// An upstream answering probes: 400 to the name selector when `refuse_name`, else a list at rv 42;
    /// returns its URL and the paths it was asked for.
    pub(crate) async fn upstream(
        refuse_name: bool,
    ) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        use hyper::service::service_fn;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen2 = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let seen = seen2.clone();
                let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let path = req.uri().to_string();
                    seen.lock().expect("lock").push(path.clone());
                    let (status, body) = if refuse_name && path.contains("fieldSelector") {
                        (400, r#"{"kind":"Status","code":400}"#)
                    } else {
                        (200, r#"{"kind":"List","metadata":{"resourceVersion":"42"},"items":[]}"#)
                    };
                    let resp = http::Response::builder()
                        .status(status)
                        .body(http_body_util::Full::new(Bytes::from_static(body.as_bytes())));
                    async move { resp }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc),
                );
            }
        });
        (format!("http://{addr}"), seen)
    }

    fn flunders() -> ResourceInfo {
        ResourceInfo::flunders()
    }

    #[tokio::test]
    async fn probes_by_name() {
        let (url, seen) = upstream(false).await;
        let up = Upstream::plain(&url).expect("valid");
        assert_eq!(probe(&up, &flunders(), true).await, (Ok(42), true));
        assert_eq!(*seen.lock().expect("lock"), [probe_path(&flunders(), true)]);
    }

    #[tokio::test]
    async fn an_upstream_refusing_the_name_selector_is_probed_with_limit_1_from_then_on() {
        let (url, seen) = upstream(true).await;
        let up = Upstream::plain(&url).expect("valid");
        assert_eq!(probe(&up, &flunders(), true).await, (Ok(42), false));
        assert_eq!(probe(&up, &flunders(), false).await, (Ok(42), false));
        let limit = probe_path(&flunders(), false);
        assert_eq!(*seen.lock().expect("lock"), [probe_path(&flunders(), true), limit.clone(), limit]);
    }

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
