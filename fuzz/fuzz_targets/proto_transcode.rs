//! The protobuf transcoder (codec/proto) on arbitrary bytes as an object's stored JSON: an error or
//! bytes, never a panic. The first byte picks the kind, so every schema kind and the metadata view are
//! reached.
#![no_main]

use kache_k8s::proto::{encode_object_meta, proto_kind};
use libfuzzer_sys::fuzz_target;

const KINDS: &[(&str, &str, &str)] = &[
    ("", "v1", "Pod"),
    ("", "v1", "Node"),
    ("", "v1", "Service"),
    ("", "v1", "Secret"),
    ("", "v1", "ConfigMap"),
    ("", "v1", "Event"),
    ("apps", "v1", "Deployment"),
    ("coordination.k8s.io", "v1", "Lease"),
    ("meta.k8s.io", "v1", "PartialObjectMetadata"),
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, json)) = data.split_first() else { return };
    match KINDS.get(usize::from(pick)) {
        Some(&(g, v, k)) => {
            let kind = proto_kind(g, v, k).expect("a schema kind");
            let _ = kind.encode_object(json);
        }
        None => {
            let _ = encode_object_meta(json);
        }
    }
});
