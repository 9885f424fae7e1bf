#![no_main]
//! Query strings: list/watch/get option parsing, validation and storage validation never panic, and
//! every error becomes a Status body.

use kache_k8s::resource::FieldKind;
use kache_k8s::options::params;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(q) = std::str::from_utf8(data) else { return };
    for watch_path in [false, true] {
        match params::parse_list_request(Some(q), watch_path, FieldKind::Pod) {
            Ok(opts) => {
                if let Err(e) = params::validate_for_storage(&opts) {
                    let _ = e.to_json();
                }
                let _ = opts.watch_resource_version();
            }
            Err(e) => {
                assert!(matches!(e.status_code(), 400 | 422), "{e:?}");
                let _ = e.to_json_pretty();
            }
        }
    }
    let _ = params::parse_get_options(Some(q)).parsed_resource_version();
    let _ = params::request_timeout(Some(q), params::REQUEST_TIMEOUT_MAXIMUM);
});
