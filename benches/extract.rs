//! Ingest codec benchmarks: kache's extraction (one serde_json pass keeping raw values) against a
//! serde_json baseline doing the same work (the obvious implementation: borrowed structs with `Cow`
//! strings and `RawValue`).
//!
//! What: one ~3.5 KiB pod → `Object` (pod field set: metadata, labels, spec/status fields); the same with
//! only metadata (a kind without extra fields); a watch line → frame → object; a 1000-pod list → item
//! slices; adding type meta to a list item.
//!
//! Run: `CARGO_TARGET_DIR=/work/target cargo bench -p kache --bench extract`

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kache::codec::extract::{object_from_json, parse_watch_line, split_list, with_type_meta};
use kache::resource::{Gvr, ResourceInfo};
use kache::store::{Object, make_key};
use serde::Deserialize;
use serde_json::value::RawValue;

#[path = "common/pods.rs"]
mod pods;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn info(kind: &str) -> ResourceInfo {
    ResourceInfo {
        gvr: Gvr::new("", "v1", "pods"),
        kind: kind.into(),
        list_kind: format!("{kind}List"),
        namespaced: true,
        list_items_have_type_meta: false,
    }
}

/// The serde_json baseline: what an implementation without lazy scanning does.
mod baseline {
    use super::*;

    #[derive(Deserialize)]
    struct Envelope<'a> {
        #[serde(borrow)]
        metadata: &'a RawValue,
        #[serde(borrow, default)]
        spec: Option<Spec<'a>>,
        #[serde(borrow, default)]
        status: Option<Status<'a>>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta<'a> {
        #[serde(borrow)]
        name: Option<Cow<'a, str>>,
        #[serde(borrow)]
        namespace: Option<Cow<'a, str>>,
        #[serde(borrow)]
        uid: Option<Cow<'a, str>>,
        #[serde(borrow)]
        resource_version: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        labels: BTreeMap<Cow<'a, str>, Cow<'a, str>>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Spec<'a> {
        #[serde(borrow)]
        node_name: Option<Cow<'a, str>>,
        #[serde(borrow)]
        restart_policy: Option<Cow<'a, str>>,
        #[serde(borrow)]
        scheduler_name: Option<Cow<'a, str>>,
        #[serde(borrow)]
        service_account_name: Option<Cow<'a, str>>,
        host_network: Option<bool>,
    }

    #[derive(Deserialize)]
    struct PodIp<'a> {
        #[serde(borrow)]
        ip: Option<Cow<'a, str>>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Status<'a> {
        #[serde(borrow)]
        phase: Option<Cow<'a, str>>,
        #[serde(borrow)]
        pod_ip: Option<Cow<'a, str>>,
        #[serde(borrow, default, rename = "podIPs")]
        pod_ips: Vec<PodIp<'a>>,
        #[serde(borrow)]
        nominated_node_name: Option<Cow<'a, str>>,
    }

    #[derive(Deserialize)]
    struct OnlyMeta<'a> {
        #[serde(borrow)]
        metadata: &'a RawValue,
    }

    fn boxed(s: Option<Cow<'_, str>>) -> Option<Box<str>> {
        s.map(|s| Box::from(&*s))
    }

    pub fn object(raw: Bytes, pod_fields: bool) -> Object {
        let (meta_raw, fields) = if pod_fields {
            let env: Envelope<'_> = serde_json::from_slice(&raw).expect("valid");
            let spec = env.spec.expect("spec");
            let status = env.status.expect("status");
            let pod_ip = status.pod_ips.into_iter().next().and_then(|p| p.ip).or(status.pod_ip);
            let fields: Box<[Option<Box<str>>]> = Box::new([
                boxed(spec.node_name),
                boxed(spec.restart_policy),
                boxed(spec.scheduler_name),
                boxed(spec.service_account_name),
                Some(Box::from(if spec.host_network.unwrap_or(false) { "true" } else { "false" })),
                boxed(status.phase),
                boxed(pod_ip),
                boxed(status.nominated_node_name),
            ]);
            (env.metadata, fields)
        } else {
            let env: OnlyMeta<'_> = serde_json::from_slice(&raw).expect("valid");
            (env.metadata, Box::default())
        };
        let meta: Meta<'_> = serde_json::from_str(meta_raw.get()).expect("valid metadata");
        let start = meta_raw.get().as_ptr() as usize - raw.as_ptr() as usize;
        let range = start as u32..(start + meta_raw.get().len()) as u32;
        let (key, ns_len) = make_key(meta.namespace.as_deref(), meta.name.as_deref().expect("name"));
        let rv = meta.resource_version.as_deref().and_then(|r| r.parse().ok()).expect("rv");
        let labels = meta.labels.into_iter().map(|(k, v)| (Box::from(&*k), Box::from(&*v))).collect();
        Object {
            key,
            ns_len,
            uid: boxed(meta.uid).unwrap_or_default(),
            resource_version: rv,
            labels,
            fields,
            body_offset: 32,
            metadata_range: range,
            proto: Default::default(),
            raw,
        }
    }

    #[derive(Deserialize)]
    struct List<'a> {
        #[serde(borrow)]
        items: Vec<&'a RawValue>,
    }

    pub fn split(body: &Bytes) -> Vec<Bytes> {
        let list: List<'_> = serde_json::from_slice(body).expect("valid list");
        list.items
            .iter()
            .map(|item| {
                let start = item.get().as_ptr() as usize - body.as_ptr() as usize;
                body.slice(start..start + item.get().len())
            })
            .collect()
    }

    #[derive(Deserialize)]
    struct Frame<'a> {
        #[serde(borrow, rename = "type")]
        _kind: Cow<'a, str>,
        #[serde(borrow)]
        object: &'a RawValue,
    }

    pub fn watch_line(line: &Bytes) -> Object {
        let frame: Frame<'_> = serde_json::from_slice(line).expect("valid frame");
        object(Bytes::copy_from_slice(frame.object.get().as_bytes()), true)
    }
}

fn bench_object(c: &mut Criterion) {
    let pod = Bytes::from(pods::pod_json(4242, 123_456));
    let pods_info = info("Pod");
    let generic = info("Widget");
    // The two implementations agree on what matters.
    let a = object_from_json(pod.clone(), &pods_info).expect("valid");
    let b = baseline::object(pod.clone(), true);
    assert_eq!(
        (&a.key, &a.labels, &a.fields, &a.metadata_range),
        (&b.key, &b.labels, &b.fields, &b.metadata_range)
    );

    let mut g = c.benchmark_group("extract/pod");
    g.throughput(Throughput::Bytes(pod.len() as u64));
    g.bench_function("kache", |b| b.iter(|| object_from_json(black_box(pod.clone()), &pods_info)));
    g.bench_function("serde_json", |b| b.iter(|| baseline::object(black_box(pod.clone()), true)));
    g.finish();

    let mut g = c.benchmark_group("extract/metadata_only");
    g.throughput(Throughput::Bytes(pod.len() as u64));
    g.bench_function("kache", |b| b.iter(|| object_from_json(black_box(pod.clone()), &generic)));
    g.bench_function("serde_json", |b| b.iter(|| baseline::object(black_box(pod.clone()), false)));
    g.finish();

    let line = Bytes::from(pods::watch_line("MODIFIED", 4242, 123_456));
    let mut g = c.benchmark_group("extract/watch_line");
    g.throughput(Throughput::Bytes(line.len() as u64));
    g.bench_function("kache", |b| {
        b.iter(|| {
            let frame = parse_watch_line(black_box(line.clone())).expect("valid");
            object_from_json(Bytes::copy_from_slice(&frame.object), &pods_info).expect("valid")
        })
    });
    g.bench_function("serde_json", |b| b.iter(|| baseline::watch_line(black_box(&line))));
    g.finish();
}

fn bench_list(c: &mut Criterion) {
    let body = Bytes::from(pods::pod_list_json(1000, 5_000_000));
    assert_eq!(split_list(&body).expect("valid").items, baseline::split(&body));
    let mut g = c.benchmark_group("extract/list_1000_pods");
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.sample_size(20);
    g.bench_function("kache", |b| b.iter(|| split_list(black_box(&body)).expect("valid").items.len()));
    g.bench_function("serde_json", |b| b.iter(|| baseline::split(black_box(&body)).len()));
    g.finish();

    let item = Bytes::from(pods::pod_item_json(7, 99));
    let mut g = c.benchmark_group("extract/with_type_meta");
    g.throughput(Throughput::Bytes(item.len() as u64));
    g.bench_function("copy", |b| b.iter(|| with_type_meta(black_box(&item), "Pod", "v1")));
    g.finish();

    // Whole list ingest as the reflector does it: split, add type meta, extract.
    let pods_info = Arc::new(info("Pod"));
    let mut g = c.benchmark_group("extract/list_ingest_1000_pods");
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.sample_size(20);
    g.bench_function("kache", |b| {
        b.iter(|| {
            let parts = split_list(black_box(&body)).expect("valid");
            parts
                .items
                .iter()
                .map(|item| object_from_json(with_type_meta(item, "Pod", "v1"), &pods_info).expect("valid"))
                .collect::<Vec<_>>()
        })
    });
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50)
}

criterion_group! { name = benches; config = config(); targets = bench_object, bench_list }
criterion_main!(benches);
