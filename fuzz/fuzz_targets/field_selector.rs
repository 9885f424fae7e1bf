#![no_main]
//! Field selectors: parsing and field-label conversion never panic; accepted selectors round-trip (as a
//! set of terms: rendering writes `==` as `=`, which can change the parser's sort order of raw terms).

use kache_k8s::resource::FieldKind;
use kache_k8s::options::selector::FieldSelector;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(sel) = FieldSelector::parse(s) {
        let again = FieldSelector::parse(&sel.to_string()).expect("rendered selector parses");
        let key = |t: &kache_k8s::options::selector::FieldTerm| {
            (t.field.clone(), t.op == kache_k8s::options::selector::FieldOp::Equals, t.value.clone())
        };
        let mut a: Vec<_> = again.terms().iter().map(key).collect();
        let mut b: Vec<_> = sel.terms().iter().map(key).collect();
        a.sort();
        b.sort();
        assert_eq!(a, b, "round trip of {s:?}");
        for kind in [FieldKind::Pod, FieldKind::Node, FieldKind::Event, FieldKind::Generic] {
            let _ = sel.clone().convert(kind);
        }
    }
});
