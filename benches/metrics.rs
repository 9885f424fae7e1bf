//! Cost of recording metrics on kache's hot paths, and of a scrape.
//!
//! - `request/free_fn`: `metrics.request(verb, &gvr, code, source, elapsed)` on a kache's [`Metrics`] as the
//!   serving path calls it (resource lookup + cached series lookup + counter add + histogram sample).
//! - `request/held_handle`: the same through an `Arc<ResourceMetrics>` the caller keeps.
//! - `request/macro_baseline`: the `metrics` crate's `counter!`/`histogram!` macros with the same labels
//!   built per call, on a Prometheus recorder installed globally for the baseline (what instrumenting
//!   without per-resource handles costs).
//! - `list_served`, `forwarded`: the other per-request helpers.
//! - `scrape/200_resources`: refreshing every per-resource gauge from a stats source and rendering the
//!   exposition, with 200 cached resources.
//!
//! Run: `CARGO_TARGET_DIR=/work/target cargo bench -p kache --bench metrics`

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use kache::metrics::{self, ForwardKind, Metrics, ResourceSnapshot, Source, StatsSource};
use kache::resource::Gvr;
use kache::store::StoreStats;

struct Many(Vec<ResourceSnapshot>);

impl StatsSource for Many {
    fn resources(&self) -> Vec<ResourceSnapshot> {
        self.0.clone()
    }
}

fn snapshot(i: usize) -> ResourceSnapshot {
    ResourceSnapshot {
        gvr: Gvr::new("bench.example.com", "v1", &format!("things{i}")),
        configured: true,
        synced: true,
        state: "watching",
        store: Some(StoreStats { objects: 1000, live_bytes: 1 << 20, ..StoreStats::default() }),
        relists: 0,
        watch_restarts: 2,
        events_received: 5000,
        bad_frames: 0,
        restarts: 0,
        since_last_event: Some(Duration::from_secs(1)),
        last_error: None,
        selector: None,
    }
}

fn bench(c: &mut Criterion) {
    let handle = Metrics::new();
    // The macros' baseline needs a global recorder; kache itself never installs one.
    let _global = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder();
    let gvr = Gvr::new("", "v1", "pods");
    let elapsed = Duration::from_micros(700);
    let mut g = c.benchmark_group("request");
    g.bench_function("free_fn", |b| b.iter(|| handle.request("list", &gvr, 200, Source::Memory, elapsed)));
    let held = handle.resource(&gvr);
    g.bench_function("held_handle", |b| b.iter(|| held.request("LIST", 200, Source::Memory, elapsed)));
    g.bench_function("macro_baseline", |b| {
        b.iter(|| {
            let (group, resource) = (gvr.group.clone(), gvr.resource.clone());
            ::metrics::counter!("bench_request_total", "verb" => "LIST", "group" => group.clone(),
                "resource" => resource.clone(), "code" => "200", "source" => "memory")
            .increment(1);
            ::metrics::histogram!("bench_request_duration_seconds", "verb" => "LIST", "group" => group,
                "resource" => resource, "source" => "memory")
            .record(elapsed.as_secs_f64());
        })
    });
    g.finish();
    c.bench_function("list_served", |b| b.iter(|| handle.list_served(&gvr, 500, 20)));
    c.bench_function("forwarded", |b| b.iter(|| handle.forwarded(ForwardKind::Write, 201)));

    let source = Many((0..200).map(snapshot).collect());
    c.bench_function("scrape/200_resources", |b| {
        b.iter(|| {
            metrics::refresh(&handle, &source);
            handle.render().len()
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
