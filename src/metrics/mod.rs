//! Operating kache: Prometheus metrics, health and readiness checks, structured logs.
//!
//! Metrics are instance-scoped: `app` builds one [`Metrics`] per kache (its own Prometheus recorder, never
//! the process's global one) and hands clones to the stages that record. Two kaches in one process export
//! independent series. This module depends on no stage: counters that other modules keep are read at
//! scrape time through the [`StatsSource`] trait `app` implements.
//!
//! # Layout
//!
//! - [`names`]: every metric's name, type, labels and help text ([`names::ALL`]); apiserver names reused.
//! - `labels`: bounded label values (enums for fixed sets, verb/code normalisation, resource names).
//! - `recorder`: one instance's Prometheus recorder (buckets and help text from [`names::ALL`]).
//! - `instance`: [`Metrics`], the handle stages hold; [`Metrics::render`] for the exposition.
//! - `resource`: per-resource handles ([`ResourceMetrics`]), registered once per instance, looked up
//!   lock-free.
//! - `record` + `serving`: one-line recording methods ([`Metrics::request`], [`Metrics::forwarded`], ...).
//! - `mirror`: counters other modules keep ([`WatchCounters`], [`FreshnessCounters`], [`SharedCounters`]),
//!   mirrored at scrape time.
//! - `stats`: gauges refreshed from the stores/reflectors at scrape time ([`refresh`] from a
//!   [`StatsSource`]) and readiness ([`readiness`]).
//! - `health`: the apiserver's `/healthz` `/livez` `/readyz` answers; the listener that serves them and
//!   `/metrics` is `front::metrics_server`.
//! - `logging`: [`init_tracing`] (`--log-format text|json`).
//!
//! # Use
//!
//! ```ignore
//! let metrics = kache::metrics::Metrics::new();                 // once per kache, in `app`
//! metrics.request("list", &gvr, 200, Source::Memory, started.elapsed());
//! metrics.list_served(&gvr, scanned, returned);
//! let text = { metrics::refresh(&metrics, &*source); metrics.render() };
//! ```

pub mod health;
mod instance;
mod labels;
mod logging;
mod mirror;
pub mod names;
mod record;
mod recorder;
mod resource;
mod serving;
mod stats;

pub use health::{CheckResult, HealthResponse};
pub use instance::Metrics;
pub use labels::{
    AsResource, AuthDecision, AuthResult, BodyCacheResult, Encoding, ForwardKind, FreshnessOutcome,
    GzipCacheResult, GzipEviction, Limit, Refusal, Served, Source, UpstreamErrorReason,
};
pub use logging::{DEFAULT_LOG_LEVEL, LogError, LogFormat, init_tracing};
pub use mirror::{FreshnessCounters, SharedCounters, WatchCells, WatchCounters};
pub use resource::{MAX_RESOURCES, OTHER_RESOURCE, ResourceMetrics, WatcherGuard};
pub use stats::{
    REFLECTOR_STATES, ResourceSnapshot, StatsSource, check_name, export_store_stats, liveness, readiness,
    refresh,
};

/// A scripted [`StatsSource`] for unit tests elsewhere in the crate.
#[cfg(test)]
pub(crate) use stats::tests as test_source;

/// Where the metrics listener binds by default: loopback only, so nothing is exposed unless asked for.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9090";
