//! One kache's Prometheus recorder: every histogram's buckets and every metric's help text from
//! [`names::ALL`](super::names::ALL), never installed as the process's global recorder.
//!
//! Each [`Metrics`](super::Metrics) instance builds its own, so two kaches in one process (the tests, the
//! load tool) export independent series.

use std::sync::Arc;

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Label, Metadata, Recorder as _, SharedString};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

use super::names::{ALL, MetricKind};

/// Metadata for every kache metric (the Prometheus exporter ignores it; the `Recorder` API requires one).
static METADATA: Metadata<'static> = Metadata::new("kache", metrics::Level::INFO, Some(module_path!()));

/// A recorder with kache's buckets and help text. Clones share the series.
#[derive(Clone)]
pub(crate) struct Recorder {
    inner: Arc<PrometheusRecorder>,
}

// === impl Recorder ===

impl Recorder {
    /// A recorder with every histogram's buckets and every metric's help text.
    pub(crate) fn new() -> Self {
        let mut builder = PrometheusBuilder::new();
        for def in ALL.iter().filter(|d| d.kind == MetricKind::Histogram) {
            builder = builder
                .set_buckets_for_metric(Matcher::Full(def.name.to_owned()), def.buckets)
                .expect("bucket lists in names::ALL are non-empty (unit-tested)");
        }
        let inner = builder.build_recorder();
        for def in ALL {
            let name = KeyName::from_const_str(def.name);
            let help = SharedString::const_str(def.help);
            match def.kind {
                MetricKind::Counter => inner.describe_counter(name, None, help),
                MetricKind::Gauge => inner.describe_gauge(name, None, help),
                MetricKind::Histogram => inner.describe_histogram(name, None, help),
            }
        }
        Self { inner: Arc::new(inner) }
    }

    /// The handle that renders (and upkeeps) this recorder's series.
    pub(crate) fn handle(&self) -> PrometheusHandle {
        self.inner.handle()
    }

    /// A counter series. Register once and keep the handle where the call is hot.
    pub(crate) fn counter(&self, name: &'static str, labels: Vec<Label>) -> Counter {
        self.inner.register_counter(&Key::from_parts(name, labels), &METADATA)
    }

    /// A gauge series.
    pub(crate) fn gauge(&self, name: &'static str, labels: Vec<Label>) -> Gauge {
        self.inner.register_gauge(&Key::from_parts(name, labels), &METADATA)
    }

    /// A histogram series.
    pub(crate) fn histogram(&self, name: &'static str, labels: Vec<Label>) -> Histogram {
        self.inner.register_histogram(&Key::from_parts(name, labels), &METADATA)
    }
}

/// A label with static key and value (no allocation).
pub(crate) fn label(key: &'static str, value: &'static str) -> Label {
    Label::from_static_parts(key, value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_recorders_keep_separate_series() {
        let (a, b) = (Recorder::new(), Recorder::new());
        a.counter("kache_test_instance_total", vec![label("case", "separate")]).increment(3);
        let (ra, rb) = (a.handle().render(), b.handle().render());
        assert!(ra.contains("kache_test_instance_total{case=\"separate\"} 3"), "{ra}");
        assert!(!rb.contains("kache_test_instance_total"), "{rb}");
    }

    #[test]
    fn histograms_render_with_configured_buckets_and_help() {
        let recorder = Recorder::new();
        recorder
            .histogram(super::super::names::WATCH_CACHE_READ_WAIT_SECONDS, vec![label("resource", "rw-test")])
            .record(0.03);
        let text = recorder.handle().render();
        assert!(
            text.contains(
                "apiserver_watch_cache_read_wait_seconds_bucket{resource=\"rw-test\",le=\"0.025\"} 0"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "apiserver_watch_cache_read_wait_seconds_bucket{resource=\"rw-test\",le=\"0.05\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("# HELP apiserver_watch_cache_read_wait_seconds Time consistent reads"),
            "{text}"
        );
        assert!(text.contains("# TYPE apiserver_watch_cache_read_wait_seconds histogram"), "{text}");
    }
}
