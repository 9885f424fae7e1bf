#![no_main]
//! Label selectors: parsing never panics; whatever parses renders to a string that parses to the same
//! selector, and matching never panics.

use kache_fuzz::options::selector::LabelSelector;
use kache_fuzz::store::Object;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(sel) = LabelSelector::parse(s) {
        let again = LabelSelector::parse(&sel.to_string()).expect("rendered selector parses");
        assert_eq!(again, sel, "round trip of {s:?}");
        let (key, ns_len) = kache_fuzz::store::make_key(Some("ns"), "o");
        let obj = Object {
            key,
            ns_len,
            uid: "u".into(),
            resource_version: 1,
            labels: vec![("app".into(), "web".into()), ("n".into(), "7".into())].into_boxed_slice(),
            fields: Box::new([]),
            raw: bytes::Bytes::new(),
            body_offset: 1,
            metadata_range: 0..0,
            proto: Default::default(),
        };
        let _ = sel.matches(&obj);
    }
});
