use proptest::prelude::*;
use serde_json::{Value, json};

use super::envelope::{decode_object, encode_object, watch_frame};
use super::special::{format_duration, format_rfc3339, parse_duration, parse_rfc3339};
use super::*;

/// The bytes of kube-proto (the real Go encoder) for a Namespace `{"metadata":{"name":"a"}}`, recorded
/// once: the sim must write exactly them (every empty non-pointer field included).
const NAMESPACE_A: &[u8] = b"k8s\0\x0a\x0f\x0a\x02v1\x12\x09Namespace\x12\x19\x0a\x11\x0a\x01a\x12\x00\x1a\x00\x22\x00\x2a\x00\x32\x00\x38\x00\x42\x00\x12\x00\x1a\x02\x0a\x00\x1a\x00\x22\x00";

#[test]
fn namespace_matches_the_go_encoder() {
    let v = json!({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "a"}});
    assert_eq!(encode_object(&v).expect("encodes"), NAMESPACE_A);
}

/// A CRD schema's own JSON types (apiextensions' `JSON` and the unions of JSONSchemaProps) come back as Go
/// prints them, and re-encode to the same bytes.
#[test]
fn crd_schema_unions_round_trip() {
    let schema = json!({"type": "object", "default": {"a": [1, "x"]}, "enum": [{"k": true}, 2, "s"],
        "properties": {"free": {"type": "object", "additionalProperties": true},
            "closed": {"type": "object", "additionalProperties": false},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "list": {"type": "array", "items": {"type": "string"}},
            "tuple": {"items": [{"type": "string"}, {"type": "integer"}], "additionalItems": false}},
        "dependencies": {"a": ["b", "c"], "b": {"required": ["a"]}}});
    let crd = json!({"kind": "CustomResourceDefinition", "apiVersion": "apiextensions.k8s.io/v1",
        "metadata": {"name": "ws.k.dev"}, "spec": {"group": "k.dev", "names": {"plural": "ws", "kind": "W"},
            "scope": "Namespaced", "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": schema}}]}});
    let pb = encode_object(&crd).expect("encodes");
    let back = decode_object(&pb).expect("decodes");
    let got = &back["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    for key in ["default", "enum", "dependencies"] {
        assert_eq!(got[key], schema[key], "{key}");
    }
    for (name, want) in schema["properties"].as_object().expect("properties") {
        assert_eq!(&got["properties"][name], want, "{name}");
    }
    assert_eq!(encode_object(&back).expect("re-encodes"), pb);
}

#[test]
fn decode_gives_the_json_go_prints() {
    let v = decode_object(NAMESPACE_A).expect("decodes");
    assert_eq!(
        v,
        json!({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "a"}, "spec": {}, "status": {}})
    );
}

#[test]
fn objects_round_trip() {
    let pod = json!({"kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": "p", "namespace": "n", "uid": "u-1", "resourceVersion": "7", "generation": 2,
            "creationTimestamp": "2024-05-06T07:08:09Z", "labels": {"b": "2", "a": "1"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "x", "controller": true}],
            "managedFields": [{"manager": "m", "operation": "Update", "apiVersion": "v1", "time": "2024-05-06T07:08:09Z",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
        "spec": {"volumes": [{"name": "v", "configMap": {"name": "cm", "defaultMode": 420}}],
            "containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "resources": {"limits": {"cpu": "100m"}},
                "livenessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 10},
                "readinessProbe": {"httpGet": {"path": "/", "port": "http"}}}],
            "nodeName": "node-1", "terminationGracePeriodSeconds": 30},
        "status": {"phase": "Running", "podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}],
            "startTime": "2024-05-06T07:08:10Z"}});
    let pb = encode_object(&pod).expect("encodes");
    let back = decode_object(&pb).expect("decodes");
    // Fields Go prints when empty come back; everything given is kept.
    assert_eq!(back["metadata"]["labels"], json!({"a": "1", "b": "2"}));
    assert_eq!(back["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"], json!("http"));
    assert_eq!(back["spec"]["containers"][0]["livenessProbe"]["httpGet"]["port"], json!(8080));
    assert_eq!(back["spec"]["volumes"][0]["configMap"], json!({"name": "cm", "defaultMode": 420}));
    assert_eq!(back["metadata"]["managedFields"][0]["fieldsV1"], json!({"f:spec": {}}));
    assert_eq!(back["status"]["startTime"], json!("2024-05-06T07:08:10Z"));
    assert_eq!(back["spec"]["containers"][0]["resources"]["limits"]["cpu"], json!("100m"));
    assert_eq!(
        encode_object(&back).expect("re-encodes"),
        pb,
        "decode then encode is the identity on Go's bytes"
    );
}

#[test]
fn secrets_carry_bytes() {
    let s = json!({"kind": "Secret", "apiVersion": "v1", "metadata": {"name": "s"}, "data": {"k": "aGk="}, "type": "Opaque"});
    let back = decode_object(&encode_object(&s).expect("encodes")).expect("decodes");
    assert_eq!(back["data"], json!({"k": "aGk="}));
    let bad = json!({"kind": "Secret", "apiVersion": "v1", "metadata": {"name": "s"}, "data": {"k": "%%"}});
    assert!(matches!(encode_object(&bad), Err(EncodeError::Value { .. })));
}

#[test]
fn custom_kinds_have_no_protobuf() {
    let v = json!({"kind": "Widget", "apiVersion": "example.com/v1", "metadata": {"name": "w"}});
    assert!(matches!(encode_object(&v), Err(EncodeError::NoSchema(_))));
    let u = envelope::wrap("example.com/v1", "Widget", vec![]);
    assert!(matches!(decode_object(&u), Err(DecodeError::UnknownKind { .. })));
}

#[test]
fn watch_frames_are_length_prefixed() {
    let f = watch_frame("ADDED", NAMESPACE_A.to_vec());
    let n = u32::from_be_bytes(f[..4].try_into().expect("4 bytes")) as usize;
    assert_eq!(n, f.len() - 4);
    use prost::Message as _;
    let e = k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent::decode(&f[4..]).expect("a WatchEvent");
    assert_eq!(e.r#type.as_deref(), Some("ADDED"));
    assert_eq!(e.object.and_then(|o| o.raw).as_deref(), Some(NAMESPACE_A));
}

#[test]
fn k8s_pb_decodes_what_the_sim_encodes() {
    use prost::Message as _;
    let v = json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "c", "namespace": "n", "labels": {"x": "y"}},
        "data": {"b": "2", "a": "1"}, "immutable": true});
    let (_, _, raw) = envelope::unwrap(&encode_object(&v).expect("encodes")).expect("envelope");
    let cm = k8s_pb::api::core::v1::ConfigMap::decode(raw.as_slice()).expect("k8s-pb decodes it");
    let meta = cm.metadata.expect("metadata");
    assert_eq!(meta.name.as_deref(), Some("c"));
    assert_eq!(meta.labels.get("x").map(String::as_str), Some("y"));
    assert_eq!(cm.data.get("a").map(String::as_str), Some("1"));
    assert_eq!(cm.immutable, Some(true));
    // And the sim decodes what prost encodes.
    let mut b = Vec::new();
    k8s_pb::api::core::v1::ConfigMap { data: cm.data.clone(), ..Default::default() }
        .encode(&mut b)
        .expect("encodes");
    let back = decode::message(&schema::API_CORE_V1_CONFIGMAP, &b).expect("decodes");
    assert_eq!(back.get("data"), Some(&json!({"a": "1", "b": "2"})));
}

#[test]
fn times_and_durations() {
    assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some((0, 0)));
    assert_eq!(parse_rfc3339("2024-01-01T00:00:00.123456Z"), Some((1_704_067_200, 123_456_000)));
    assert_eq!(parse_rfc3339("2024-01-01T02:00:00+02:00"), Some((1_704_067_200, 0)));
    assert_eq!(parse_rfc3339("1960-01-01T00:00:00Z"), Some((-315_619_200, 0)));
    assert_eq!(parse_rfc3339("2024-13-01T00:00:00Z"), None);
    assert_eq!(parse_rfc3339("yesterday"), None);
    assert_eq!(format_rfc3339(1_704_067_200, None), "2024-01-01T00:00:00Z");
    assert_eq!(format_rfc3339(1_704_067_200, Some(5)), "2024-01-01T00:00:00.000005Z");
    assert_eq!(format_rfc3339(-315_619_200, None), "1960-01-01T00:00:00Z");
    for (s, n) in [
        ("0s", 0),
        ("1h2m3s", 3_723_000_000_000),
        ("1.5s", 1_500_000_000),
        ("300ms", 300_000_000),
        ("-2m0s", -120_000_000_000),
        ("1µs", 1_000),
        ("7ns", 7),
    ] {
        assert_eq!(parse_duration(s), Some(n), "{s}");
        assert_eq!(format_duration(n), s, "{n}");
    }
    assert_eq!(parse_duration("5x"), None);
}

#[test]
fn malformed_bodies_are_errors() {
    assert_eq!(decode_object(b"{\"kind\":\"Pod\"}"), Err(DecodeError::NoMagic));
    let mut truncated = NAMESPACE_A.to_vec();
    truncated.truncate(30);
    assert!(decode_object(&truncated).is_err());
    // A string field sent as a varint.
    let wrong = envelope::wrap("v1", "Namespace", vec![0x0a, 0x02, 0x08, 0x01]);
    assert!(matches!(decode_object(&wrong), Err(DecodeError::WireType { .. })));
    // Messages nested past any object: refused, not recursed into.
    let mut deep = Vec::new();
    for _ in 0..200 {
        let mut outer = vec![0x0a];
        prost::encoding::encode_varint(deep.len() as u64, &mut outer);
        outer.extend_from_slice(&deep);
        deep = outer;
    }
    let _ = decode::message(&schema::API_CORE_V1_POD, &deep);
}

proptest! {
    /// Any bytes after the magic: an error or an object, never a panic.
    #[test]
    fn any_body_decodes_or_errs(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut b = b"k8s\0".to_vec();
        b.extend_from_slice(&body);
        let _ = decode_object(&b);
        let _ = decode::message(&schema::API_CORE_V1_POD, &body);
    }

    /// Mutations of a valid Pod: an error or an object, never a panic; what decodes re-encodes.
    #[test]
    fn mutated_pods_decode_or_err(i in 0usize..400, byte in any::<u8>(), cut in 0usize..400) {
        let pod = json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p", "labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}]}]}});
        let mut b = encode_object(&pod).expect("encodes");
        let at = 4 + i % (b.len() - 4);
        b[at] = byte;
        b.truncate(4 + cut.max(at - 4) % (b.len() - 3));
        if let Ok(v) = decode_object(&b) {
            let _ = encode_object(&v);
        }
    }
}

#[test]
fn every_kind_encodes_its_empty_object() {
    for (av, kind, _) in schema::KINDS {
        let v = json!({"kind": kind, "apiVersion": av});
        let pb = encode_object(&v).unwrap_or_else(|e| panic!("{kind}: {e}"));
        let back = decode_object(&pb).unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(encode_object(&back).expect("re-encodes"), pb, "{kind}");
        assert!(matches!(back, Value::Object(_)));
    }
}
