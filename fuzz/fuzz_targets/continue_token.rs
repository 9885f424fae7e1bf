#![no_main]
//! Continue tokens: decoding arbitrary input never panics; a valid token re-encodes to one that decodes
//! to the same position.

use kache_k8s::token;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(c) = token::decode(s) {
        assert_ne!(c.rv, 0);
        let _ = c.scan_start(Some("ns"));
        let re = token::encode_start(c.rv, &format!("/{}", c.start_key));
        assert_eq!(token::decode(&re).expect("re-encoded token decodes"), c);
    }
});
