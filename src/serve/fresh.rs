//! Proving the store fresh for consistent reads (resourceVersion unset).
//!
//! The apiserver serves a consistent read from its watch cache after asking etcd for its current revision
//! and waiting (≤ 3 s, with progress notifications every 100 ms) until the cache reaches it. The upstream
//! offers kache no progress-notify API, so kache does the equivalent with what the upstream does offer:
//!
//! 1. **Probe**: a consistent `limit=1` list of the resource against the upstream. Its
//!    `metadata.resourceVersion` is R ≥ the upstream's revision when the probe started. Probes are coalesced
//!    per resource: one in flight at a time, and a request only trusts a probe that *started after the
//!    request arrived* (otherwise a write acknowledged just before the request could be missed).
//! 2. **Wait** until the store's resourceVersion reaches R (its own events and upstream bookmarks move it),
//!    at most [`FreshnessConfig::wait`].
//! 3. Otherwise the read is **not** served from memory: the caller forwards it upstream (or answers 429, as
//!    configured). Fallbacks are bounded by a semaphore so a slow upstream cannot cause a storm.
//!
//! A resource whose store does not move (a quiet resource: its last event is older than writes to other
//! resources) cannot reach R through its own events; its consistent reads are forwarded. See the README
//! ("Consistency") for the guarantee and the measured cost.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use tokio::sync::{Semaphore, watch};

use crate::body;
use crate::resource::Gvr;
use crate::store::Store;
use crate::upstream::Upstream;

/// How long a consistent read waits for the store to reach the probed revision. The apiserver waits up to
/// 3 s (`blockTimeout`) but it can request progress from etcd every 100 ms; kache cannot, so a short wait
/// followed by a fallback gives better latency.
pub const DEFAULT_CONSISTENT_WAIT: Duration = Duration::from_millis(500);
/// Upper bound on concurrent consistent reads that fell back upstream.
pub const DEFAULT_FALLBACK_CONCURRENCY: usize = 32;
/// A probe response larger than this is refused (a `limit=1` list is one object).
const MAX_PROBE_BODY: usize = 8 << 20;
/// A probe that takes longer than this fails (and the read falls back).
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// What to do when a consistent read cannot be proven fresh in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Fallback {
    /// Forward the request upstream unchanged (default): the client always gets a consistent answer.
    #[default]
    Forward,
    /// Answer 429 with Retry-After: 1, like the apiserver's ConsistentListFromCacheSkipTimeoutFallback.
    TooManyRequests,
}

#[derive(Clone, Debug)]
pub struct FreshnessConfig {
    pub wait: Duration,
    pub fallback: Fallback,
    pub fallback_concurrency: usize,
}

impl Default for FreshnessConfig {
    fn default() -> Self {
        Self {
            wait: DEFAULT_CONSISTENT_WAIT,
            fallback: Fallback::Forward,
            fallback_concurrency: DEFAULT_FALLBACK_CONCURRENCY,
        }
    }
}

/// Why a consistent read could not be served from memory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotFresh {
    /// The probe of the upstream's revision failed.
    #[error("freshness probe failed: {0}")]
    ProbeFailed(String),
    /// The store did not reach the probed revision in time.
    #[error("store at {current} did not reach upstream revision {required} in time")]
    Lagging { required: u64, current: u64 },
}

/// Outcome counters (exported as metrics).
#[derive(Debug, Default)]
pub struct FreshnessStats {
    pub probes: std::sync::atomic::AtomicU64,
    pub probe_errors: std::sync::atomic::AtomicU64,
    pub fresh: std::sync::atomic::AtomicU64,
    pub lagging: std::sync::atomic::AtomicU64,
}

type ProbeResult = Option<(Instant, Result<u64, String>)>;

/// One resource's probe slot: at most one probe in flight; results published with their start time.
struct Slot {
    running: Mutex<bool>,
    result: watch::Sender<ProbeResult>,
}

/// Consistent-read freshness for every cached resource.
pub struct Freshness {
    upstream: Upstream,
    config: FreshnessConfig,
    slots: Mutex<HashMap<Gvr, Arc<Slot>>>,
    fallbacks: Arc<Semaphore>,
    pub stats: FreshnessStats,
}

// === impl Freshness ===

impl Freshness {
    pub fn new(upstream: Upstream, config: FreshnessConfig) -> Self {
        let fallbacks = Arc::new(Semaphore::new(config.fallback_concurrency.max(1)));
        Self {
            upstream,
            config,
            slots: Mutex::new(HashMap::new()),
            fallbacks,
            stats: FreshnessStats::default(),
        }
    }

    pub fn config(&self) -> &FreshnessConfig {
        &self.config
    }

    /// Proves the store at least as fresh as the upstream was at `arrived`, and returns the store's
    /// resourceVersion to serve at (≥ the probed revision and ≥ `min_rv`, e.g. the last write through kache).
    pub async fn ensure(&self, store: &Arc<Store>, arrived: Instant, min_rv: u64) -> Result<u64, NotFresh> {
        use std::sync::atomic::Ordering::Relaxed;
        let required = match self.probe_after(&store.info().gvr, arrived).await {
            Ok(rv) => rv.max(min_rv),
            Err(e) => {
                self.stats.probe_errors.fetch_add(1, Relaxed);
                return Err(NotFresh::ProbeFailed(e));
            }
        };
        match store.wait_for(required, self.config.wait).await {
            Ok(()) => {
                self.stats.fresh.fetch_add(1, Relaxed);
                Ok(store.resource_version())
            }
            Err(_) => {
                self.stats.lagging.fetch_add(1, Relaxed);
                Err(NotFresh::Lagging { required, current: store.resource_version() })
            }
        }
    }

    /// A permit for one fallback (forwarded consistent read); `None` when too many are in flight.
    pub fn try_fallback(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.fallbacks.clone().try_acquire_owned().ok()
    }

    fn slot(&self, gvr: &Gvr) -> Arc<Slot> {
        let mut slots = self.slots.lock().expect("freshness slots lock poisoned");
        slots
            .entry(gvr.clone())
            .or_insert_with(|| Arc::new(Slot { running: Mutex::new(false), result: watch::channel(None).0 }))
            .clone()
    }

    /// The upstream's revision from a probe that started at or after `arrived`.
    async fn probe_after(&self, gvr: &Gvr, arrived: Instant) -> Result<u64, String> {
        let slot = self.slot(gvr);
        let mut rx = slot.result.subscribe();
        loop {
            {
                let current = rx.borrow_and_update();
                if let Some((started, result)) = &*current
                    && *started >= arrived
                {
                    return result.clone();
                }
            }
            {
                let mut running = slot.running.lock().expect("probe lock poisoned");
                if !*running {
                    *running = true;
                    let started = Instant::now();
                    let upstream = self.upstream.clone();
                    let path = format!("{}/{}?limit=1", gvr.path_prefix(), gvr.resource);
                    let slot2 = slot.clone();
                    self.stats.probes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tokio::spawn(async move {
                        let result = match tokio::time::timeout(PROBE_TIMEOUT, probe(&upstream, &path)).await
                        {
                            Ok(r) => r,
                            Err(_) => Err("probe timed out".to_owned()),
                        };
                        *slot2.running.lock().expect("probe lock poisoned") = false;
                        slot2.result.send_replace(Some((started, result)));
                    });
                }
            }
            if rx.changed().await.is_err() {
                return Err("freshness prober dropped".into());
            }
        }
    }
}

/// One consistent `limit=1` list; returns its `metadata.resourceVersion`.
async fn probe(upstream: &Upstream, path: &str) -> Result<u64, String> {
    let req = Request::builder()
        .method(Method::GET)
        .uri(path)
        .header(http::header::ACCEPT, "application/json")
        .body(body::empty())
        .map_err(|e| e.to_string())?;
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
fn list_resource_version(bytes: &Bytes) -> Result<u64, String> {
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
