//! Codec hot paths: gzip of a 10k-pod list and continue-token round trips.
//!
//! - `gzip/compress/10k`: [`kache::codec::gzip::compress`] (level 1, as the apiserver) over the chunks of a
//!   10k-pod list; throughput in uncompressed bytes. Baseline: `gzip/copy_baseline/10k`, copying the same
//!   bytes (the cost gzip adds over sending them as they are; the goal is a gzip list ≤ 2× an uncompressed
//!   one end to end, which the cached compressed form of hot lists makes cheap after the first request).
//! - `token/encode`, `token/decode`, `token/round_trip`: [`kache::codec::token`] in the apiserver's format
//!   (base64url JSON with v, rv, start) for a typical all-namespaces key. Baseline: `token/base64_baseline`,
//!   base64url-encoding the same JSON bytes alone.
//!
//! Run: `cargo bench --bench codec`.

use std::hint::black_box;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kache::codec::gzip::compress;
use kache::codec::list::{ListMeta, assemble_list};
use kache::codec::token;

#[path = "common/objects.rs"]
mod common;

const PODS: usize = 10_000;

fn bench_gzip(c: &mut Criterion) {
    let info = common::pod_info();
    let objects = common::pods(PODS);
    let meta = ListMeta { resource_version: 99, continue_token: None, remaining_item_count: None };
    let chunks = assemble_list(&info, &meta, objects.iter());
    let total: usize = chunks.iter().map(Bytes::len).sum();
    let mut g = c.benchmark_group("gzip");
    g.throughput(Throughput::Bytes(total as u64));
    g.sample_size(10).measurement_time(Duration::from_secs(5)).warm_up_time(Duration::from_secs(1));
    g.bench_function("compress/10k", |b| b.iter(|| black_box(compress(&chunks))));
    g.bench_function("copy_baseline/10k", |b| {
        b.iter(|| {
            let copied: Vec<Bytes> = chunks.iter().map(|c| Bytes::copy_from_slice(c)).collect();
            black_box(copied)
        })
    });
    g.finish();
}

fn bench_token(c: &mut Criterion) {
    let key = "kube-system/coredns-7db6d8ff4d-x2x9k";
    let encoded = token::encode(1_234_567, key);
    let json = format!(r#"{{"v":"meta.k8s.io/v1","rv":1234567,"start":"{key}\u0000"}}"#);
    let mut g = c.benchmark_group("token");
    g.sample_size(50).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    g.bench_function("encode", |b| b.iter(|| black_box(token::encode(black_box(1_234_567), black_box(key)))));
    g.bench_function("decode", |b| b.iter(|| black_box(token::decode(black_box(&encoded)))));
    g.bench_function("round_trip", |b| {
        b.iter(|| {
            let t = token::encode(black_box(1_234_567), black_box(key));
            black_box(token::decode(&t))
        })
    });
    g.bench_function("base64_baseline", |b| {
        b.iter(|| {
            black_box(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(black_box(json.as_bytes())))
        })
    });
    g.finish();
}

criterion_group!(benches, bench_gzip, bench_token);
criterion_main!(benches);
