//! The metadata-only list (`as=PartialObjectMetadataList`) against the full list, over 10k realistic pods
//! (the sim's workload generator: 2–4 KiB pods with managedFields and status).
//!
//! - `meta/full_list/10k`: the PodList body as [`ListChunks`] streams it.
//! - `meta/metadata_list/10k`: the PartialObjectMetadataList of the same pods (typed metadata, copied).
//! - `meta/metadata_list_unstructured/10k`: the same pods with sorted keys, as custom resources are stored:
//!   the metadata members are permuted into `ObjectMeta` order on the way out.
//!
//! Body sizes (plain and gzip level 1) are printed at start. Run: `cargo bench --bench meta`.

use std::hint::black_box;
use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kache::codec::list::{ListChunks, ListMeta, View};
use kache::store::Object;

#[path = "common/objects.rs"]
mod common;

const PODS: usize = 10_000;

fn body(
    info: &kache::resource::ResourceInfo,
    meta: &ListMeta,
    objects: &[Arc<Object>],
    view: View,
) -> Vec<u8> {
    ListChunks::with_view(info, meta, objects.to_vec(), view).collect::<Vec<Bytes>>().concat()
}

fn gzip_len(b: &[u8]) -> usize {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(1));
    e.write_all(b).expect("in memory");
    e.finish().expect("in memory").len()
}

/// The pods with every key sorted (`apiVersion` first), as Go marshals an unstructured object.
fn unstructured(objects: &[Arc<Object>]) -> Vec<Arc<Object>> {
    let info = common::pod_info();
    objects
        .iter()
        .map(|o| {
            let mut v: serde_json::Value = serde_json::from_slice(&o.raw).expect("stored JSON");
            sort(&mut v);
            let raw = Bytes::from(serde_json::to_vec(&v).expect("serialises"));
            Arc::new(kache::codec::extract::object_from_json(raw, &info).expect("valid"))
        })
        .collect()
}

fn sort(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            let mut entries: Vec<(String, serde_json::Value)> = std::mem::take(m).into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            for (k, mut child) in entries {
                sort(&mut child);
                m.insert(k, child);
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(sort),
        _ => {}
    }
}

fn bench_meta(c: &mut Criterion) {
    let info = common::pod_info();
    let objects = common::pods(PODS);
    let sorted = unstructured(&objects);
    let meta = ListMeta { resource_version: 123_456, continue_token: None, remaining_item_count: None };
    let full = body(&info, &meta, &objects, View::Full);
    let partial = body(&info, &meta, &objects, View::Metadata);
    let partial_sorted = body(&info, &meta, &sorted, View::Metadata);
    // The bench pods get uid/resourceVersion appended after generation, so the typed copy is not in struct
    // order here; the unstructured path reorders: same members, same length.
    assert_eq!(partial.len(), partial_sorted.len());
    let (gf, gp) = (gzip_len(&full), gzip_len(&partial));
    eprintln!(
        "meta: {PODS} pods: full list {} B (gzip {gf} B), metadata list {} B (gzip {gp} B), ratio {:.3} (gzip {:.3})",
        full.len(),
        partial.len(),
        partial.len() as f64 / full.len() as f64,
        gp as f64 / gf as f64
    );

    let mut g = c.benchmark_group("meta");
    g.sample_size(30).measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    g.throughput(Throughput::Bytes(full.len() as u64));
    g.bench_function("full_list/10k", |b| {
        b.iter(|| {
            black_box(ListChunks::with_view(&info, &meta, objects.clone(), View::Full).collect::<Vec<_>>())
        });
    });
    g.throughput(Throughput::Bytes(partial.len() as u64));
    g.bench_function("metadata_list/10k", |b| {
        b.iter(|| {
            black_box(
                ListChunks::with_view(&info, &meta, objects.clone(), View::Metadata).collect::<Vec<_>>(),
            )
        });
    });
    g.bench_function("metadata_list_unstructured/10k", |b| {
        b.iter(|| {
            black_box(ListChunks::with_view(&info, &meta, sorted.clone(), View::Metadata).collect::<Vec<_>>())
        });
    });
    g.finish();
}

criterion_group!(benches, bench_meta);
criterion_main!(benches);
