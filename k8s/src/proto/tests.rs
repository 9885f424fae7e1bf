//! apiextensions' JSONSchemaProps types with a JSON form of their own (`JSON` and the three unions): what
//! the encoder writes for each accepted form, and the forms it refuses. Byte identity with Go's encoder
//! for whole CustomResourceDefinitions is tested against kube-proto (`tests/it/protobuf_codec.rs`).

use kache_k8s_schema::{Message, Ty};

use super::wire::{Value, fields};
use super::{TranscodeError, encode, json, proto_kind};

/// JSONSchemaProps, as a CRD version's `schema.openAPIV3Schema`.
fn props() -> &'static Message {
    let crd =
        proto_kind("apiextensions.k8s.io", "v1", "CustomResourceDefinition").expect("CRDs have a schema");
    let mut m = crd.message;
    for name in ["spec", "versions", "schema", "openAPIV3Schema"] {
        m = match m.fields.iter().find(|f| f.json == name).map(|f| &f.ty) {
            Some(Ty::Msg(next)) => next,
            _ => panic!("{} has no message field {name}", m.name),
        };
    }
    m
}

/// The JSONSchemaProps message of `schema` (JSON text).
fn encode_props(schema: &str) -> Result<Vec<u8>, TranscodeError> {
    let tree = json::parse(schema.as_bytes()).expect("JSON");
    let json::J::Obj(obj) = &tree else { panic!("an object") };
    let mut out = Vec::new();
    encode::message(props(), obj, &[], &mut out)?;
    Ok(out)
}

/// Every occurrence of field `tag` in `msg`.
fn occurrences(msg: &[u8], tag: u64) -> Vec<Value<'_>> {
    fields(msg).map(|f| f.expect("well-formed")).filter(|(t, _)| *t == tag).map(|(_, v)| v).collect()
}

/// The payloads of length-delimited field `tag`.
fn payloads(msg: &[u8], tag: u64) -> Vec<&[u8]> {
    occurrences(msg, tag)
        .into_iter()
        .map(|v| match v {
            Value::Len(b) => b,
            other => panic!("field {tag} is {other:?}"),
        })
        .collect()
}

const DEFAULT: u64 = 8;
const ENUM: u64 = 20;
const ITEMS: u64 = 24;
const ADDITIONAL_PROPERTIES: u64 = 30;
const DEPENDENCIES: u64 = 32;
const EXAMPLE: u64 = 36;
const TYPE: u64 = 5;

/// A `JSON` message holding `text` (`raw`=1).
fn raw(text: &str) -> Vec<u8> {
    let mut out = vec![0x0a, u8::try_from(text.len()).expect("short")];
    out.extend_from_slice(text.as_bytes());
    out
}

#[test]
fn json_values_are_their_source_text() {
    let default = r#"{"b":[1.5e3,-0,"x"],"a":null}"#;
    let msg = encode_props(&format!(
        r#"{{"type":"object","default":{default},"example":"a\"b","enum":[{{"x":1}}, 2.50,"s",true]}}"#
    ))
    .expect("encodes");
    assert_eq!(payloads(&msg, DEFAULT), [raw(default)]);
    assert_eq!(payloads(&msg, EXAMPLE), [raw(r#""a\"b""#)]);
    // Each element's own text (whitespace between elements is no part of any).
    assert_eq!(payloads(&msg, ENUM), [raw(r#"{"x":1}"#), raw("2.50"), raw(r#""s""#), raw("true")]);
    // null is no value: the pointer stays nil.
    assert!(payloads(&encode_props(r#"{"default":null}"#).expect("encodes"), DEFAULT).is_empty());
    // A property named like a raw-JSON field is still a schema.
    let msg = encode_props(r#"{"properties":{"default":{"type":"string","enum":["a"]}}}"#).expect("encodes");
    let entry = payloads(&msg, 29)[0];
    let value = payloads(entry, 2)[0];
    assert_eq!(payloads(value, TYPE), [&b"string"[..]]);
    assert_eq!(payloads(value, ENUM), [raw(r#""a""#)]);
}

#[test]
fn json_values_go_may_hold_otherwise_are_refused() {
    for schema in [
        r#"{"default":"\u003c"}"#,
        r#"{"example":{"a": 1}}"#,
        r#"{"enum":[{"a": 1}]}"#,
        r#"{"enum":[null]}"#,
        r#"{"enum":{"a":1}}"#,
    ] {
        let err = encode_props(schema).expect_err(schema);
        assert!(matches!(err, TranscodeError::Value { .. } | TranscodeError::Type { .. }), "{schema}: {err}");
    }
}

#[test]
fn schema_or_bool_always_writes_allows() {
    let union = |v: &str| encode_props(&format!(r#"{{"additionalProperties":{v}}}"#)).map(|m| m.to_vec());
    let msg = union("false").expect("false");
    assert_eq!(payloads(&msg, ADDITIONAL_PROPERTIES), [&[0x08, 0x00][..]]);
    let msg = union("true").expect("true");
    assert_eq!(payloads(&msg, ADDITIONAL_PROPERTIES), [&[0x08, 0x01][..]]);
    let msg = union(r#"{"type":"string"}"#).expect("a schema");
    let body = payloads(&msg, ADDITIONAL_PROPERTIES)[0];
    assert_eq!(occurrences(body, 1), [Value::Varint(1)]);
    assert_eq!(payloads(payloads(body, 2)[0], TYPE), [&b"string"[..]]);
    assert_eq!(body[..2], [0x08, 0x01], "allows first, in tag order");
    for bad in [r#""yes""#, "1", "[]", "[true]"] {
        assert!(matches!(union(bad), Err(TranscodeError::Type { .. })), "{bad}");
    }
}

#[test]
fn schema_or_array_takes_a_schema_or_schemas() {
    let msg = encode_props(r#"{"items":{"type":"integer"}}"#).expect("a schema");
    let body = payloads(&msg, ITEMS)[0];
    assert_eq!(payloads(payloads(body, 1)[0], TYPE), [&b"integer"[..]]);
    assert!(payloads(body, 2).is_empty());
    let msg = encode_props(r#"{"items":[{"type":"integer"},{"type":"string"}]}"#).expect("schemas");
    let body = payloads(&msg, ITEMS)[0];
    assert!(payloads(body, 1).is_empty());
    let types: Vec<&[u8]> = payloads(body, 2).iter().map(|s| payloads(s, TYPE)[0]).collect();
    assert_eq!(types, [&b"integer"[..], b"string"]);
    // Go's decoder leaves the union empty for these, and prints it as `null`: not the apiserver's output.
    for bad in ["[]", "true", r#""x""#, "[1]", "[null]"] {
        let schema = format!(r#"{{"items":{bad}}}"#);
        assert!(matches!(encode_props(&schema), Err(TranscodeError::Type { .. })), "{schema}");
    }
}

#[test]
fn schema_or_string_array_takes_a_schema_or_strings() {
    let msg = encode_props(r#"{"dependencies":{"b":{"required":["c"]},"a":["x","y"]}}"#).expect("encodes");
    let entries = payloads(&msg, DEPENDENCIES);
    assert_eq!(payloads(entries[0], 1), [&b"a"[..]], "map entries sorted by key");
    let a = payloads(entries[0], 2)[0];
    assert_eq!(payloads(a, 2), [&b"x"[..], b"y"]);
    assert!(payloads(a, 1).is_empty());
    let b = payloads(entries[1], 2)[0];
    assert_eq!(payloads(payloads(b, 1)[0], 23), [&b"c"[..]]);
    for bad in ["[]", "null", "[1]", "false", r#""x""#] {
        let schema = format!(r#"{{"dependencies":{{"a":{bad}}}}}"#);
        assert!(matches!(encode_props(&schema), Err(TranscodeError::Type { .. })), "{schema}");
    }
}
