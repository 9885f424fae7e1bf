#![no_main]
//! Field selectors: parsing and field-label conversion never panic; accepted selectors round-trip.

use kache_fuzz::resource::FieldKind;
use kache_fuzz::serve::selector::FieldSelector;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(sel) = FieldSelector::parse(s) {
        let again = FieldSelector::parse(&sel.to_string()).expect("rendered selector parses");
        assert_eq!(again, sel, "round trip of {s:?}");
        for kind in [FieldKind::Pod, FieldKind::Node, FieldKind::Event, FieldKind::Generic] {
            let _ = sel.clone().convert(kind);
        }
    }
});
