//! [`Metrics`]: one kache's metrics, built once in `app` and handed to each stage.

use std::sync::Arc;

use metrics::{Counter, Gauge, Histogram, Label};
use metrics_exporter_prometheus::PrometheusHandle;

use super::labels::AsResource;
use super::mirror::WatchCells;
use super::recorder::Recorder;
use super::resource::{Interner, MAX_RESOURCES, ResourceMetrics};

/// One kache's metrics: its own Prometheus recorder, its per-resource handles and its fixed series.
///
/// Cheap to clone (one `Arc`): `app` builds one per kache and hands clones to the stages that record. Two
/// instances never share a series, so two kaches in one process export independent values.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    recorder: Recorder,
    handle: PrometheusHandle,
    resources: Interner,
    /// The watch fan-out's counters, kept by the watchers.
    watch: WatchCells,
    /// Protobuf message bytes held by the kache's object versions (`kache_protobuf_bytes`).
    proto_bytes: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

// === impl Metrics ===

impl Metrics {
    /// A fresh set of metrics with every fixed-label series registered at zero, so every metric name its
    /// dashboards use is exported from the start.
    pub fn new() -> Self {
        let recorder = Recorder::new();
        let handle = recorder.handle();
        let resources = Interner::new(&recorder, MAX_RESOURCES);
        let metrics = Self {
            inner: Arc::new(Inner {
                recorder,
                handle,
                resources,
                watch: WatchCells::default(),
                proto_bytes: Arc::default(),
            }),
        };
        metrics.register_fixed_series();
        metrics
    }

    /// The Prometheus text exposition of every series.
    pub fn render(&self) -> String {
        self.inner.handle.render()
    }

    /// Folds histogram samples into their buckets. Rendering does it too; `app` also runs it periodically
    /// so unscraped histograms keep bounded memory (the exporter holds raw samples until then).
    pub(crate) fn run_upkeep(&self) {
        self.inner.handle.run_upkeep();
    }

    /// The metric handles of one resource (created at most once per instance; bounded by [`MAX_RESOURCES`]).
    pub fn resource<R: AsResource + ?Sized>(&self, r: &R) -> Arc<ResourceMetrics> {
        self.inner.resources.get(r.group(), r.resource())
    }

    /// Runs `f` on one resource's handles (no reference count on the hot path).
    pub(crate) fn with_resource<R: AsResource + ?Sized, T>(
        &self,
        r: &R,
        f: impl FnOnce(&ResourceMetrics) -> T,
    ) -> T {
        self.inner.resources.with(r.group(), r.resource(), f)
    }

    /// The count of protobuf bytes held by the kache's object versions, which they keep up to date.
    pub(crate) fn proto_bytes(&self) -> &Arc<std::sync::atomic::AtomicU64> {
        &self.inner.proto_bytes
    }

    /// Protobuf message bytes the kache's object versions hold now (`kache_protobuf_bytes`).
    pub fn protobuf_bytes_held(&self) -> u64 {
        self.inner.proto_bytes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The watch fan-out's counters of this kache (its watchers count into them).
    pub(crate) fn watch_cells(&self) -> &WatchCells {
        &self.inner.watch
    }

    /// Every resource that has handles, for refreshing gauges of resources that went away.
    pub(crate) fn all_resources(&self) -> Vec<Arc<ResourceMetrics>> {
        self.inner.resources.all()
    }

    pub(crate) fn counter(&self, name: &'static str, labels: Vec<Label>) -> Counter {
        self.inner.recorder.counter(name, labels)
    }

    pub(crate) fn gauge(&self, name: &'static str, labels: Vec<Label>) -> Gauge {
        self.inner.recorder.gauge(name, labels)
    }

    pub(crate) fn histogram(&self, name: &'static str, labels: Vec<Label>) -> Histogram {
        self.inner.recorder.histogram(name, labels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_one_instance_and_instances_share_nothing() {
        let a = Metrics::new();
        let also_a = a.clone();
        let b = Metrics::new();
        also_a.resource("instance-test").list_served(4, 2);
        assert!(Arc::ptr_eq(&a.resource("instance-test"), &also_a.resource("instance-test")));
        let series = "apiserver_cache_list_returned_objects_total{group=\"\",resource=\"instance-test\"}";
        assert!(a.render().contains(&format!("{series} 2")), "{}", a.render());
        assert!(!b.render().contains(series), "{}", b.render());
    }
}
