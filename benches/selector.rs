//! Selector matching: parsing label and field selectors, and scanning 10k stored pods with them, against
//! the floor of a scan that looks one label up directly.
//!
//! - `selector/parse_label`, `selector/parse_field`: parsing typical selectors (the apiserver's grammar).
//! - `selector/label_none/10k`: `loadtest=none` over 10k pods (matches nothing: every object is visited —
//!   the shape of the 300k-object goal, ≤ 50 ms there, so ≤ ~1.7 ms per 10k here).
//! - `selector/label_set/10k`: a set-based selector (`app in (…),tier!=db`).
//! - `selector/field_node/10k`: `spec.nodeName=node-7` through a resolved [`kache::options::selector::FieldMatcher`].
//! - `selector/baseline_lookup/10k`: baseline — the same scan calling `Object::label("loadtest")` directly.
//!
//! Throughput is in objects scanned. Run: `cargo bench --bench selector`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kache::options::selector::{FieldSelector, LabelSelector};
use kache::resource::FieldKind;

#[path = "common/objects.rs"]
mod common;

const PODS: usize = 10_000;

fn bench_selector(c: &mut Criterion) {
    let objects = common::pods(PODS);
    let mut g = c.benchmark_group("selector");
    g.sample_size(30).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    g.bench_function("parse_label", |b| {
        b.iter(|| black_box(LabelSelector::parse(black_box("app in (web,api),tier!=db,!legacy,env=prod"))))
    });
    g.bench_function("parse_field", |b| {
        b.iter(|| black_box(FieldSelector::parse(black_box("spec.nodeName=node-7,status.phase!=Failed"))))
    });
    g.throughput(Throughput::Elements(PODS as u64));
    let none = LabelSelector::parse("loadtest=none").expect("valid selector");
    g.bench_function("label_none/10k", |b| {
        b.iter(|| objects.iter().filter(|o| none.matches(o)).count());
    });
    let set = LabelSelector::parse("app in (billing,checkout,frontend),tier!=db").expect("valid selector");
    g.bench_function("label_set/10k", |b| {
        b.iter(|| objects.iter().filter(|o| set.matches(o)).count());
    });
    let field = FieldSelector::parse("spec.nodeName=node-7")
        .and_then(|f| f.convert(FieldKind::Pod))
        .expect("valid field selector");
    let matcher = field.matcher(FieldKind::Pod);
    g.bench_function("field_node/10k", |b| {
        b.iter(|| objects.iter().filter(|o| matcher.matches(o)).count());
    });
    g.bench_function("baseline_lookup/10k", |b| {
        b.iter(|| objects.iter().filter(|o| o.label("loadtest") == Some("none")).count());
    });
    g.finish();
}

criterion_group!(benches, bench_selector);
criterion_main!(benches);
