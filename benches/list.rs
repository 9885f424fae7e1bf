//! List assembly: what serving a full list of 10k pods from memory costs in CPU, against the floor of
//! copying the same number of bytes out of one contiguous buffer in the same chunk size.
//!
//! - `list/assemble_list/10k`: [`kache::codec::list::assemble_list`] over 10k stored pods (header, items
//!   without type meta, commas, trailer) into 64 KiB chunks, the whole-body path.
//! - `list/list_chunks/10k`: the streaming path ([`kache::codec::list::ListChunks`]) a response body uses.
//! - `list/copy_baseline/10k`: baseline — the same total bytes copied from one prepared buffer into 64 KiB
//!   chunks (what a server answering a prebuilt body would at least do).
//!
//! Throughput is in bytes of list body. Run: `cargo bench --bench list` (criterion's report in
//! `$CARGO_TARGET_DIR/criterion/list/`).

use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kache::codec::list::{LIST_CHUNK_BYTES, ListChunks, ListMeta, assemble_list};

#[path = "common/objects.rs"]
mod common;

/// Pods in the list (the project's 10k-pod figure).
const PODS: usize = 10_000;

fn bench_list(c: &mut Criterion) {
    let info = common::pod_info();
    let objects = common::pods(PODS);
    let meta = ListMeta { resource_version: 123_456, continue_token: None, remaining_item_count: None };
    let body: Vec<u8> = assemble_list(&info, &meta, objects.iter()).concat();
    let mut g = c.benchmark_group("list");
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.sample_size(30).measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    g.bench_function("assemble_list/10k", |b| {
        b.iter(|| black_box(assemble_list(&info, &meta, objects.iter())));
    });
    g.bench_function("list_chunks/10k", |b| {
        b.iter(|| {
            let chunks: Vec<Bytes> = ListChunks::new(&info, &meta, objects.clone()).collect();
            black_box(chunks)
        });
    });
    g.bench_function("copy_baseline/10k", |b| {
        b.iter(|| {
            let chunks: Vec<Bytes> = body.chunks(LIST_CHUNK_BYTES).map(Bytes::copy_from_slice).collect();
            black_box(chunks)
        });
    });
    g.finish();
}

criterion_group!(benches, bench_list);
criterion_main!(benches);
