//! The protobuf transcoder (`kache::codec::proto`): what it costs to turn a stored object's JSON
//! into the apiserver's protobuf, and how much smaller the result is.
//!
//! - `proto/transcode/pods-1k`: [`ProtoKind::encode_object`] over 1 000 of the sim's pods (2–4 KiB of
//!   JSON each); throughput in JSON bytes. Baselines in the same run: `proto/json_parse_baseline/pods-1k`
//!   (serde_json parsing the same bytes into a `Value`, the least any JSON-reading encoder does) and
//!   `proto/sim_encoder/pods-1k` (the sim's encoder: parse to a `Value`, then encode).
//! - `proto/transcode_size/{small,pod,large}`: one object of ~0.5, ~3 and ~40 KiB of JSON: the cost per
//!   object against its size.
//! - `proto/list_from_cache/pods-1k`: a 1 000-pod list assembled from cached item messages
//!   ([`list_parts`] + headers + copies), what a cached list costs once its items are transcoded.
//!
//! The sizes (protobuf ÷ JSON for the pods and for the list) are printed once at start-up.
//!
//! Run: `cargo bench --bench proto`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kache::codec::proto::{ListMeta, ProtoKind, list_item_header, list_parts, proto_kind};
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::{Value, json};

const PODS: usize = 1_000;

fn sim_pods(n: usize) -> Vec<Vec<u8>> {
    let mut rng = StdRng::seed_from_u64(7);
    (0..n)
        .map(|i| {
            let name = format!("{}-{i}", kache_sim::workload::pod_name(&mut rng));
            let mut v = kache_sim::workload::pod(
                &format!("ns-{}", i % 10),
                &name,
                &format!("node-{}", i % 50),
                &mut rng,
            );
            v["metadata"]["resourceVersion"] = json!((i + 1).to_string());
            v["metadata"]["uid"] = json!(format!("00000000-0000-4000-8000-{i:012}"));
            // The sim stores quantities as written (`1000m`, `1024Mi`); an apiserver prints them canonical
            // (`1`, `1Gi`), and kache refuses (forwards) the non-canonical form: the bench uses the
            // apiserver's.
            serde_json::to_string(&v)
                .expect("a Value serialises")
                .replace("\"1000m\"", "\"1\"")
                .replace("\"1024Mi\"", "\"1Gi\"")
                .into_bytes()
        })
        .collect()
}

fn pod_kind() -> ProtoKind {
    proto_kind("", "v1", "Pod").expect("pods are in the schema")
}

fn list(kind: &ProtoKind, items: &[Vec<u8>]) -> Vec<u8> {
    let lens: Vec<usize> = items.iter().map(Vec::len).collect();
    let meta = ListMeta { resource_version: "12345", continue_token: "", remaining_item_count: None };
    let (mut out, suffix) = list_parts(kind.api_version(), kind.list_kind(), &meta, &lens);
    out.reserve(lens.iter().sum::<usize>() + 4 * lens.len() + suffix.len());
    for i in items {
        list_item_header(i.len(), &mut out);
        out.extend_from_slice(i);
    }
    out.extend_from_slice(&suffix);
    out
}

fn bench_transcode(c: &mut Criterion) {
    let kind = pod_kind();
    let pods = sim_pods(PODS);
    let json_bytes: usize = pods.iter().map(Vec::len).sum();
    let msgs: Vec<Vec<u8>> =
        pods.iter().map(|p| kind.encode_object(p).expect("the sim's pods transcode")).collect();
    let pb_bytes: usize = msgs.iter().map(Vec::len).sum();
    let json_list_len = json_bytes + 100 + PODS; // items, commas and the list's own fields
    let pb_list = list(&kind, &msgs);
    eprintln!(
        "sizes: {PODS} sim pods: JSON {json_bytes} B, protobuf {pb_bytes} B (ratio {:.3}); list: JSON ~{json_list_len} B, protobuf {} B (ratio {:.3})",
        pb_bytes as f64 / json_bytes as f64,
        pb_list.len(),
        pb_list.len() as f64 / json_list_len as f64
    );

    let mut g = c.benchmark_group("proto");
    g.sample_size(20).measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    g.throughput(Throughput::Bytes(json_bytes as u64));
    g.bench_function("transcode/pods-1k", |b| {
        b.iter(|| {
            for p in &pods {
                black_box(kind.encode_object(black_box(p)).expect("transcodes"));
            }
        })
    });
    g.bench_function("json_parse_baseline/pods-1k", |b| {
        b.iter(|| {
            for p in &pods {
                black_box(serde_json::from_slice::<Value>(black_box(p)).expect("JSON"));
            }
        })
    });
    g.bench_function("sim_encoder/pods-1k", |b| {
        b.iter(|| {
            for p in &pods {
                let v: Value = serde_json::from_slice(black_box(p)).expect("JSON");
                black_box(kache_sim::proto::envelope::encode_item("v1", "Pod", &v).expect("sim encodes"));
            }
        })
    });
    g.throughput(Throughput::Bytes(pb_list.len() as u64));
    g.bench_function("list_from_cache/pods-1k", |b| b.iter(|| black_box(list(&kind, black_box(&msgs)))));
    g.finish();
}

fn bench_sizes(c: &mut Criterion) {
    let kind = pod_kind();
    let pod: Value = serde_json::from_slice(&sim_pods(1)[0]).expect("JSON");
    let mut small = json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "1",
        "creationTimestamp": "2024-05-06T07:08:09Z", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}], "nodeName": "node-1"}, "status": {"phase": "Running"}});
    small["kind"] = json!("Pod");
    let mut large = pod.clone();
    let annotations: serde_json::Map<String, Value> =
        (0..300).map(|i| (format!("example.com/annotation-{i}"), json!("v".repeat(100)))).collect();
    large["metadata"]["annotations"] = Value::Object(annotations);
    let mut g = c.benchmark_group("proto/transcode_size");
    g.sample_size(30).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    for (name, v) in [("small", small), ("pod", pod), ("large", large)] {
        let bytes = serde_json::to_vec(&v).expect("JSON");
        let pb = kind.encode_object(&bytes).expect("transcodes");
        eprintln!(
            "size {name}: JSON {} B, protobuf {} B (ratio {:.3})",
            bytes.len(),
            pb.len(),
            pb.len() as f64 / bytes.len() as f64
        );
        g.throughput(Throughput::Bytes(bytes.len() as u64));
        g.bench_function(name, |b| {
            b.iter(|| black_box(kind.encode_object(black_box(&bytes)).expect("transcodes")))
        });
    }
    g.finish();
}

criterion_group!(benches, bench_transcode, bench_sizes);
criterion_main!(benches);
