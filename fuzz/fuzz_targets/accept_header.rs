#![no_main]
//! Accept / Accept-Encoding headers: negotiation never panics.

use kache_k8s::negotiate;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let n = negotiate::negotiate(Some(s));
    if let Some(e) = n.error() {
        let _ = e.to_json();
    }
    let _ = negotiate::negotiate_watch(Some(s));
    let _ = negotiate::accepts_gzip(s);
});
