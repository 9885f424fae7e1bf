//! The process-wide Prometheus recorder.
//!
//! kache registers its metrics directly with its own recorder (not through the `metrics` crate's global
//! recorder), so handles created before [`install`] — or in tests that never install — still count, and
//! many kaches started in one test process share one set of series. [`install`] additionally makes the
//! recorder the global one so `metrics::counter!` calls anywhere land in the same exposition.

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Label, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

use super::names::{ALL, MetricKind};

/// How often histogram samples are folded into their buckets when nobody scrapes. Bounds the memory of
/// unscraped samples (the exporter keeps raw samples until upkeep or render drains them).
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

static RECORDER: OnceLock<PrometheusRecorder> = OnceLock::new();
static INSTALLED: OnceLock<MetricsHandle> = OnceLock::new();

/// Metadata for every kache metric (the Prometheus exporter ignores it; the `Recorder` API requires one).
static METADATA: Metadata<'static> = Metadata::new("kache", metrics::Level::INFO, Some(module_path!()));

/// Renders the current metrics in the Prometheus text format.
#[derive(Clone, Debug)]
pub struct MetricsHandle {
    handle: PrometheusHandle,
}

// === impl MetricsHandle ===

impl MetricsHandle {
    /// The Prometheus text exposition of every series.
    pub fn render(&self) -> String {
        self.handle.render()
    }
}

/// The recorder, built on first use with every histogram's buckets and every metric's help text.
pub(crate) fn recorder() -> &'static PrometheusRecorder {
    RECORDER.get_or_init(|| {
        let mut builder = PrometheusBuilder::new();
        for def in ALL.iter().filter(|d| d.kind == MetricKind::Histogram) {
            builder = builder
                .set_buckets_for_metric(Matcher::Full(def.name.to_owned()), def.buckets)
                .expect("bucket lists in names::ALL are non-empty (unit-tested)");
        }
        let recorder = builder.build_recorder();
        for def in ALL {
            let name = KeyName::from_const_str(def.name);
            let help = SharedString::const_str(def.help);
            match def.kind {
                MetricKind::Counter => recorder.describe_counter(name, None, help),
                MetricKind::Gauge => recorder.describe_gauge(name, None, help),
                MetricKind::Histogram => recorder.describe_histogram(name, None, help),
            }
        }
        recorder
    })
}

/// Sets up metrics for the process and returns the handle that renders them. Idempotent: every call returns
/// the same handle (tests start many kaches in one process).
pub fn install() -> MetricsHandle {
    INSTALLED
        .get_or_init(|| {
            let handle = recorder().handle();
            if metrics::set_global_recorder(Global).is_err() {
                tracing::debug!("a global metrics recorder was already set; kache's metrics stay on its own");
            }
            let upkeep = handle.clone();
            let spawned = std::thread::Builder::new().name("kache-metrics-upkeep".into()).spawn(move || {
                loop {
                    std::thread::sleep(UPKEEP_INTERVAL);
                    upkeep.run_upkeep();
                }
            });
            if let Err(error) = spawned {
                // Rendering drains samples too; without the thread only unscraped histograms grow.
                tracing::warn!(%error, "cannot start the metrics upkeep thread");
            }
            MetricsHandle { handle }
        })
        .clone()
}

/// A counter series. Register once and keep the handle where the call is hot.
pub(crate) fn counter(name: &'static str, labels: Vec<Label>) -> Counter {
    recorder().register_counter(&Key::from_parts(name, labels), &METADATA)
}

/// A gauge series.
pub(crate) fn gauge(name: &'static str, labels: Vec<Label>) -> Gauge {
    recorder().register_gauge(&Key::from_parts(name, labels), &METADATA)
}

/// A histogram series.
pub(crate) fn histogram(name: &'static str, labels: Vec<Label>) -> Histogram {
    recorder().register_histogram(&Key::from_parts(name, labels), &METADATA)
}

/// A label with static key and value (no allocation).
pub(crate) fn label(key: &'static str, value: &'static str) -> Label {
    Label::from_static_parts(key, value)
}

/// The global-recorder face of kache's recorder.
struct Global;

impl Recorder for Global {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        recorder().describe_counter(key, unit, description)
    }
    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        recorder().describe_gauge(key, unit, description)
    }
    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        recorder().describe_histogram(key, unit, description)
    }
    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        recorder().register_counter(key, metadata)
    }
    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        recorder().register_gauge(key, metadata)
    }
    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        recorder().register_histogram(key, metadata)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_is_idempotent_and_shares_one_recorder() {
        let a = install();
        let b = install();
        counter("kache_test_install_total", vec![label("case", "idempotent")]).increment(3);
        let (ra, rb) = (a.render(), b.render());
        assert!(ra.contains("kache_test_install_total{case=\"idempotent\"} 3"), "{ra}");
        assert!(rb.contains("kache_test_install_total{case=\"idempotent\"} 3"), "{rb}");
    }

    #[test]
    fn global_macros_land_in_the_same_exposition() {
        let handle = install();
        metrics::counter!("kache_test_global_total", "via" => "macro").increment(2);
        let text = handle.render();
        // Another test binary may have set a different global recorder first; in this one nobody does.
        assert!(text.contains("kache_test_global_total{via=\"macro\"} 2"), "{text}");
    }

    #[test]
    fn histograms_render_with_configured_buckets_and_help() {
        let handle = install();
        histogram(super::super::names::WATCH_CACHE_READ_WAIT_SECONDS, vec![label("resource", "rw-test")])
            .record(0.03);
        let text = handle.render();
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
