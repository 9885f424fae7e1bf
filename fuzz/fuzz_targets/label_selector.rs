#![no_main]
//! Label selectors: parsing never panics; whatever parses renders to a string that parses to the same
//! selector, and matching never panics.

use kache_k8s::options::selector::LabelSelector;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(sel) = LabelSelector::parse(s) {
        let again = LabelSelector::parse(&sel.to_string()).expect("rendered selector parses");
        assert_eq!(again, sel, "round trip of {s:?}");
        let labels = |key: &str| match key {
            "app" => Some("web"),
            "n" => Some("7"),
            _ => None,
        };
        let _ = sel.matches_with(labels);
    }
});
