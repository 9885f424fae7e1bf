//! Reflector ingest: how fast a reflector turns upstream bytes into a published store.
//!
//! - `initial_sync/N`: a streaming list of N ConfigMaps (~1 KiB each) from the first byte to the published,
//!   synced store (framing, ingest extraction, the side map, one `Writer::replace`). Baseline: client-go's
//!   reflector decodes every object into a typed struct; kache only extracts the metadata it indexes.
//! - `live_events/100k`: a batch of 10 000 MODIFIED events applied to a synced 100k-object store through the
//!   watch path (framing, extraction, batched `Writer::apply`), until the store reaches the last RV.
//!
//! The upstream is in-process (a scripted [`Transport`] serving pre-built bytes in 64 KiB chunks), so the
//! numbers are kache's own cost, not the network's.
//!
//! Run: `CARGO_TARGET_DIR=/work/target cargo bench -p kache --bench reflector`

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use http::{Request, Response};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use kache::front::body::{self, Body, BoxError};
use kache::reflector::{ReflectorConfig, Registry};
use kache::resource::{Gvr, ResourceInfo};
use kache::upstream::{BoxFuture, Transport, UpstreamError};
use tokio::sync::mpsc;

const CHUNK: usize = 64 << 10;
const LIVE_EVENTS: u64 = 10_000;

fn configmap(i: u64, rv: u64) -> String {
    let data = "x".repeat(700);
    format!(
        r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"cm-{i:06}","namespace":"ns-{}","uid":"3f1c2a9e-0000-4000-8000-{i:012}","resourceVersion":"{rv}","creationTimestamp":"2026-11-22T04:34:55Z","labels":{{"app":"bench","tier":"t{}"}},"managedFields":[{{"manager":"kubectl","operation":"Update","apiVersion":"v1","time":"2026-11-22T04:34:55Z","fieldsType":"FieldsV1","fieldsV1":{{"f:data":{{".":{{}},"f:v":{{}}}}}}}}]}},"data":{{"v":"{data}"}}}}"#,
        i % 50,
        i % 3
    )
}

fn watch_list_bytes(n: u64) -> Vec<Bytes> {
    let mut all = Vec::with_capacity(n as usize * 1200);
    for i in 0..n {
        all.extend_from_slice(br#"{"type":"ADDED","object":"#);
        all.extend_from_slice(configmap(i, i + 2).as_bytes());
        all.extend_from_slice(b"}\n");
    }
    all.extend_from_slice(
        format!(
            r#"{{"type":"BOOKMARK","object":{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"resourceVersion":"{}","annotations":{{"k8s.io/initial-events-end":"true"}}}}}}}}"#,
            n + 2
        )
        .as_bytes(),
    );
    all.push(b'\n');
    all.chunks(CHUNK).map(Bytes::copy_from_slice).collect()
}

/// Serves the `limit=1` probe (empty) and one watch-list stream, fed through a channel.
struct Upstream {
    stream: Mutex<Option<mpsc::UnboundedReceiver<Bytes>>>,
}

impl Transport for Upstream {
    fn send(&self, req: Request<Body>) -> BoxFuture<'_, Result<Response<Body>, UpstreamError>> {
        let uri = req.uri().to_string();
        let rx = if uri.contains("watch=1") { self.stream.lock().unwrap().take() } else { None };
        Box::pin(async move {
            if !uri.contains("watch=1") {
                let empty = r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}"#;
                return Ok(Response::new(body::full(empty)));
            }
            let Some(rx) = rx else { return std::future::pending().await };
            let frames = futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|b| (Ok::<_, BoxError>(Frame::data(b)), rx))
            });
            Ok(Response::new(StreamBody::new(frames).boxed()))
        })
    }
}

fn info() -> ResourceInfo {
    ResourceInfo {
        gvr: Gvr::new("", "v1", "configmaps"),
        kind: "ConfigMap".into(),
        list_kind: "ConfigMapList".into(),
        namespaced: true,
        list_items_have_type_meta: false,
    }
}

/// Starts a registry on a fresh upstream; returns it with the sender of the watch stream.
fn start() -> (Arc<Registry>, mpsc::UnboundedSender<Bytes>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let upstream = Arc::new(Upstream { stream: Mutex::new(Some(rx)) });
    let registry = Registry::with_transport(upstream, ReflectorConfig::default());
    registry.start(vec![info()]);
    (registry, tx)
}

async fn synced(registry: &Registry, rv: u64) {
    let gvr = info().gvr;
    let store = loop {
        if let Some(s) = registry.get(&gvr) {
            break s;
        }
        tokio::task::yield_now().await;
    };
    store.wait_for(rv, Duration::from_secs(600)).await.expect("store reaches the RV");
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut group = c.benchmark_group("initial_sync");
    group.sample_size(10).measurement_time(Duration::from_secs(20));
    for n in [10_000u64, 100_000] {
        let chunks = watch_list_bytes(n);
        group.throughput(Throughput::Elements(n));
        group.bench_with_input(BenchmarkId::from_parameter(n), &chunks, |b, chunks| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let (registry, tx) = start();
                        let t = Instant::now();
                        for chunk in chunks.iter() {
                            tx.send(chunk.clone()).unwrap();
                        }
                        synced(&registry, n + 2).await;
                        total += t.elapsed();
                    }
                    total
                })
            });
        });
    }
    group.finish();

    let mut group = c.benchmark_group("live_events");
    group.sample_size(10).measurement_time(Duration::from_secs(20));
    group.throughput(Throughput::Elements(LIVE_EVENTS));
    let n = 100_000u64;
    let initial = watch_list_bytes(n);
    group.bench_function("100k", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let (registry, tx) = start();
                for chunk in initial.iter() {
                    tx.send(chunk.clone()).unwrap();
                }
                synced(&registry, n + 2).await;
                let mut rv = n + 2;
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let mut bytes = Vec::with_capacity(LIVE_EVENTS as usize * 1200);
                    for i in 0..LIVE_EVENTS {
                        rv += 1;
                        bytes.extend_from_slice(br#"{"type":"MODIFIED","object":"#);
                        bytes.extend_from_slice(configmap((i * 7919) % n, rv).as_bytes());
                        bytes.extend_from_slice(b"}\n");
                    }
                    let chunks: Vec<Bytes> = bytes.chunks(CHUNK).map(Bytes::copy_from_slice).collect();
                    let t = Instant::now();
                    for chunk in chunks {
                        tx.send(chunk).unwrap();
                    }
                    synced(&registry, rv).await;
                    total += t.elapsed();
                }
                total
            })
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
