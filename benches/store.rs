//! Store benchmarks at 100k realistic pods (~3.5 KiB JSON each).
//!
//! What: events applied per second (one event per publish, each with its retained snapshot, and batches
//! of 100), the cost of publishing a snapshot (a bookmark), a relist of 100k objects, reader costs (load,
//! get, namespace scan, full scan), and the spec.nodeName index against a scan. Before the criterion
//! groups, with `--bench`, it measures resident memory per cached object against its JSON size (RSS
//! from /proc/self/status; set KACHE_BENCH_MEMORY=0 to skip).
//!
//! Run: `CARGO_TARGET_DIR=/work/target cargo bench -p kache --bench store`

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{BatchSize, Criterion, Throughput, criterion_group};
use kache::codec::extract::object_from_json;
use kache::resource::{Gvr, ResourceInfo};
use kache::store::{EventType, Object, Store, StoreConfig, Writer};

#[path = "common/pods.rs"]
mod pods;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const OBJECTS: usize = 100_000;
/// Objects when run as a test (`cargo test --all-targets` runs each bench once, unoptimised).
const TEST_OBJECTS: usize = 2_000;

/// `cargo bench` passes `--bench`; without it criterion runs each bench once as a smoke test.
fn benching() -> bool {
    std::env::args().any(|a| a == "--bench")
}

fn object_count() -> usize {
    if benching() { OBJECTS } else { TEST_OBJECTS }
}
/// The RV of the initial list; events follow it.
const LIST_RV: u64 = 10_000_000;

fn pods_info() -> ResourceInfo {
    ResourceInfo {
        gvr: Gvr::new("", "v1", "pods"),
        kind: "Pod".into(),
        list_kind: "PodList".into(),
        namespaced: true,
        list_items_have_type_meta: false,
    }
}

/// Pod `i` as a stored object, its raw bytes in an allocation of their own (as the reflector stores them).
fn pod(i: usize, rv: u64, info: &ResourceInfo, buf: &mut String) -> Arc<Object> {
    buf.clear();
    buf.push_str(&pods::pod_json(i, rv));
    Arc::new(object_from_json(Bytes::copy_from_slice(buf.as_bytes()), info).expect("valid pod"))
}

/// The initial list, in key order as the apiserver returns it.
fn objects(info: &ResourceInfo) -> Vec<Arc<Object>> {
    let mut buf = String::new();
    let n = object_count();
    let mut list: Vec<_> = (0..n).map(|i| pod(i, LIST_RV - n as u64 + i as u64, info, &mut buf)).collect();
    list.sort_by(|a, b| a.key.cmp(&b.key));
    list
}

/// The same object at a new RV (a MODIFIED event): shares the template's bytes, so building it is cheap
/// and outside the measurement.
fn modified(template: &Object, rv: u64) -> Arc<Object> {
    Arc::new(Object { resource_version: rv, ..template.clone() })
}

struct Fixture {
    store: Arc<Store>,
    writer: Writer,
    source: Source,
}

/// Where the benches' events come from.
struct Source {
    templates: Vec<Arc<Object>>,
    rv: u64,
    next: usize,
}

impl Fixture {
    fn new() -> Self {
        let info = pods_info();
        let templates = objects(&info);
        let (store, mut writer) = Store::new(info, StoreConfig::default());
        writer.replace(templates.iter().cloned(), LIST_RV);
        Self { store, writer, source: Source { templates, rv: LIST_RV, next: 0 } }
    }

    /// Fills the retained log to its bound so measurements see steady-state eviction.
    fn warm(&mut self, events: usize) {
        for _ in 0..events {
            let event = self.source.next_event();
            self.writer.apply([event]);
        }
    }
}

impl Source {
    fn next_event(&mut self) -> (EventType, Arc<Object>) {
        self.rv += 1;
        // A stride through the key space, like unrelated pods changing.
        self.next = (self.next + 7919) % self.templates.len();
        (EventType::Modified, modified(&self.templates[self.next], self.rv))
    }
}

fn bench_apply(c: &mut Criterion) {
    let Fixture { store: _store, mut writer, mut source } = {
        let mut f = Fixture::new();
        let retain = StoreConfig::default().retain_max;
        f.warm(if benching() { retain + 1000 } else { 100 });
        f
    };
    let mut g = c.benchmark_group("store/apply_100k");
    g.throughput(Throughput::Elements(1));
    g.bench_function("one_event_per_publish", |b| {
        b.iter_batched(|| source.next_event(), |event| writer.apply([event]), BatchSize::SmallInput)
    });
    g.throughput(Throughput::Elements(100));
    g.bench_function("batch_of_100", |b| {
        b.iter_batched(
            || (0..100).map(|_| source.next_event()).collect::<Vec<_>>(),
            |batch| writer.apply(batch),
            BatchSize::SmallInput,
        )
    });
    g.finish();

    let mut g = c.benchmark_group("store/publish_100k");
    g.bench_function("bookmark", |b| {
        b.iter(|| {
            source.rv += 1;
            writer.progress(source.rv)
        })
    });
    g.finish();

    let mut g = c.benchmark_group("store/relist_100k");
    g.sample_size(10);
    g.bench_function("replace", |b| {
        b.iter(|| {
            source.rv += 1;
            writer.replace(source.templates.iter().cloned(), source.rv)
        })
    });
    g.finish();
}

fn bench_read(c: &mut Criterion) {
    let mut f = Fixture::new();
    f.warm(1000);
    let store = f.store.clone();
    let key = f.source.templates[object_count() / 2].key.clone();
    let ns = pods::namespace_of(17);
    let node = pods::node_of(17);

    let mut g = c.benchmark_group("store/read_100k");
    g.bench_function("load_and_get", |b| {
        b.iter(|| store.load().snapshot.get(black_box(&key)).map(|o| o.resource_version))
    });
    g.bench_function("snapshot_at_exact", |b| {
        let rv = store.resource_version() - 500;
        b.iter(|| store.snapshot_at(black_box(rv)).map(|s| s.rv))
    });
    let snap = store.current();
    g.throughput(Throughput::Elements((object_count() / pods::NAMESPACES) as u64));
    g.bench_function("namespace_scan_1000", |b| b.iter(|| snap.namespace_range(black_box(&ns)).count()));
    g.throughput(Throughput::Elements(object_count() as u64));
    g.bench_function("full_scan", |b| b.iter(|| snap.objects.values().filter(|o| o.ns_len > 0).count()));
    g.finish();

    // A kubelet's list: fieldSelector=spec.nodeName=<node> (100 of 100k pods).
    let state = store.load();
    let scanned = state.snapshot.objects.values().filter(|o| o.fields[0].as_deref() == Some(&node)).count();
    assert_eq!(state.by_field(0, &node, "").expect("indexed").count(), scanned);
    let mut g = c.benchmark_group("store/by_node_100k");
    g.throughput(Throughput::Elements(scanned as u64));
    g.bench_function("index", |b| {
        b.iter(|| state.by_field(0, black_box(&node), "").expect("indexed").count())
    });
    g.bench_function("scan", |b| {
        b.iter(|| {
            state
                .snapshot
                .objects
                .values()
                .filter(|o| o.fields[0].as_deref() == Some(black_box(&node)))
                .count()
        })
    });
    g.finish();
}

/// Resident set size in bytes (VmRSS).
fn rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Resident bytes per cached object against its JSON size, after the initial list and after 100k events.
fn memory_report() {
    let info = pods_info();
    let mut buf = String::with_capacity(8192);
    let before = rss();
    let started = Instant::now();
    let (store, mut writer) = Store::new(info.clone(), StoreConfig::default());
    let mut json_bytes = 0usize;
    let list: Vec<Arc<Object>> = (0..OBJECTS)
        .map(|i| {
            let o = pod(i, LIST_RV - OBJECTS as u64 + i as u64, &info, &mut buf);
            json_bytes += o.raw.len();
            o
        })
        .collect();
    writer.replace(list, LIST_RV);
    let after_list = rss();
    let stats = store.stats();
    let grown = after_list.saturating_sub(before);
    println!("memory: {OBJECTS} pods, JSON {:.1} MiB ({} B/pod avg)", mib(json_bytes), json_bytes / OBJECTS);
    println!(
        "memory: after list: RSS +{:.1} MiB = {:.3}x JSON; store estimate {:.1} MiB (live {:.1}, index {:.1}) [{:.1?}]",
        mib(grown),
        grown as f64 / json_bytes as f64,
        mib(stats.memory_bytes()),
        mib(stats.live_bytes),
        mib(stats.index_bytes),
        started.elapsed(),
    );
    // 100k MODIFIED events, each a new object (new bytes), applied one per publish with default bounds
    // (history up to 102,400 events, 10,000 retained snapshots).
    let mut rv = LIST_RV;
    for n in 0..OBJECTS {
        rv += 1;
        let i = (n * 7919) % OBJECTS;
        writer.apply([(EventType::Modified, pod(i, rv, &info, &mut buf))]);
    }
    let after_events = rss();
    let stats = store.stats();
    let grown = after_events.saturating_sub(before);
    println!(
        "memory: after {OBJECTS} events: RSS +{:.1} MiB = {:.3}x live JSON; estimate {:.1} MiB (live {:.1}, history {:.1} in {} events, retained {:.1} in {} snapshots)",
        mib(grown),
        grown as f64 / json_bytes as f64,
        mib(stats.memory_bytes()),
        mib(stats.live_bytes),
        mib(stats.history_bytes),
        stats.history_events,
        mib(stats.retained_bytes),
        stats.retained_snapshots,
    );
    drop((store, writer));
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30)
}

criterion_group! { name = benches; config = config(); targets = bench_apply, bench_read }

fn main() {
    if benching() && std::env::var("KACHE_BENCH_MEMORY").as_deref() != Ok("0") {
        memory_report();
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
