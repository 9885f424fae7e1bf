//! Operating kache: Prometheus metrics, health and readiness endpoints, structured logs.
//!
//! # Layout
//!
//! - [`names`]: every metric's name, type, labels and help text ([`names::ALL`]); apiserver names reused.
//! - `labels`: bounded label values (enums for fixed sets, verb/code normalisation, resource names).
//! - `recorder`: the process-wide Prometheus recorder; [`install`] → [`MetricsHandle::render`].
//! - `resource`: per-resource handles ([`ResourceMetrics`]), registered once, looked up lock-free.
//! - `record`: one-line functions the other modules call ([`request`], [`list_served`], [`forwarded`], ...).
//! - `mirror`: counters other modules keep (watch fan-out, freshness), mirrored at scrape time.
//! - `stats`: gauges refreshed from the stores/reflectors at scrape time ([`StatsSource`]) and readiness.
//! - `health` + `server`: [`serve_metrics`] on `--metrics-listen` (`/metrics`, `/healthz`, `/livez`, `/readyz`).
//! - `logging`: [`init_tracing`] (`--log-format text|json`).
//!
//! # Use
//!
//! ```ignore
//! let handle = kache::metrics::install();                       // once per process (idempotent)
//! metrics::request("list", &gvr, 200, Source::Memory, started.elapsed());
//! metrics::list_served(&gvr, scanned, returned);
//! tokio::spawn(metrics::serve_metrics(listener, handle, registry.clone(), shutdown.clone()));
//! ```

mod health;
mod labels;
mod logging;
mod mirror;
pub mod names;
mod record;
mod recorder;
mod resource;
mod server;
pub(crate) mod serving;
mod stats;

pub use health::{CheckResult, HealthResponse};
pub use labels::{
    AsResource, AuthDecision, AuthResult, BodyCacheResult, Encoding, ForwardKind, FreshnessOutcome,
    GzipCacheResult, GzipEviction, Limit, Served, Source, UpstreamErrorReason,
};
pub use logging::{DEFAULT_LOG_LEVEL, LogError, LogFormat, init_tracing};
pub use record::{
    auth_cache, consistent_read, encoding, forwarded, impersonation, limit_rejected, list_served,
    mirror_selector, mirror_uncovered, protobuf_transcode_failed, read_wait, request, slow_watcher_closed,
    table_rows, upstream_error, watch_list_done, watchers,
};
pub use recorder::MetricsHandle;
pub use resource::{MAX_RESOURCES, OTHER_RESOURCE, ResourceMetrics, WatcherGuard, resource};
pub use server::{DEFAULT_METRICS_LISTEN, readiness, serve_metrics};
pub use stats::{KacheStats, ResourceSnapshot, StatsSource, check_name, export_store_stats, refresh};

/// Sets up metrics for the process (idempotent: every call returns the same handle) and registers the
/// fixed-label series at zero so every metric name is exported from the start.
pub fn install() -> MetricsHandle {
    let handle = recorder::install();
    record::register_fixed_series();
    mirror::watch_stats();
    mirror::freshness(None);
    handle
}
