//! Expected bytes are what Go's `encoding/json` (go1.26) wrote for the same input, `json.Marshal` for
//! strings and numbers and `json.MarshalIndent(v, "", "  ")` for the indented layout.

use serde_json::json;

use super::*;

/// (input bytes, Go's `json.Marshal(string(input))`).
const GO_STRINGS: &[(&[u8], &str)] = &[
    (b"a\"b\\c", r#""a\"b\\c""#),
    (b"<b>&x", r#""\u003cb\u003e\u0026x""#),
    (b"\x08\x0c\n\r\t\x00\x01\x1f\x7f", "\"\\b\\f\\n\\r\\t\\u0000\\u0001\\u001f\x7f\""),
    ("é\u{2028}\u{2029}x".as_bytes(), "\"é\\u2028\\u2029x\""),
    // Invalid UTF-8: one \ufffd per byte Go's DecodeRune rejects (a truncated sequence gives two).
    (b"ok\xffz\xe2\x82", r#""ok\ufffdz\ufffd\ufffd""#),
    ("\u{20ac}€".as_bytes(), "\"€€\""),
    // A UTF-16 surrogate encoded in UTF-8 is invalid: three bytes, three replacements.
    (b"\xed\xa0\x80", r#""\ufffd\ufffd\ufffd""#),
];

#[test]
fn strings_are_escaped_like_go() {
    for (input, go) in GO_STRINGS {
        let mut out = Vec::new();
        write_bytes(&mut out, input);
        assert_eq!(String::from_utf8_lossy(&out), *go, "input {input:?}");
        if let Ok(s) = std::str::from_utf8(input) {
            assert_eq!(quote(s), *go, "write_str {s:?}");
            let mut bm = BytesMut::new();
            write_str(&mut bm, s);
            assert_eq!(&bm[..], go.as_bytes());
            assert_eq!(String::from_utf8(to_vec(s)).expect("utf8"), *go, "GoFormatter {s:?}");
        }
    }
}

#[test]
fn formatter_escapes_keys_and_nested_strings() {
    let v = json!({"a": "<b>&\u{2028}", "z\u{0}": [1, "\u{8}\u{c}"]});
    assert_eq!(to_vec(&v), br#"{"a":"\u003cb\u003e\u0026\u2028","z\u0000":[1,"\b\f"]}"#.to_vec());
}

#[test]
fn indented_like_marshal_indent() {
    let v = json!({"a": [], "b": {}, "c": [1, "x"], "d<": {"e": true}});
    let go = "{\n  \"a\": [],\n  \"b\": {},\n  \"c\": [\n    1,\n    \"x\"\n  ],\n  \"d\\u003c\": {\n    \"e\": true\n  }\n}";
    assert_eq!(String::from_utf8(to_vec_pretty(&v)).expect("utf8"), go);
    assert_eq!(body(&v, false).last(), Some(&b'\n'));
    assert_eq!(body(&v, true).last(), Some(&b'}'));
}

/// (value, Go's `json.Marshal(float64)`).
const GO_FLOATS: &[(f64, &str)] = &[
    (0.0, "0"),
    (1.0, "1"),
    (100.0, "100"),
    (1.5, "1.5"),
    (-2.25, "-2.25"),
    (1e20, "100000000000000000000"),
    (1e21, "1e+21"),
    (1.5e21, "1.5e+21"),
    (1e-6, "0.000001"),
    (1e-7, "1e-7"),
    (1.5e-7, "1.5e-7"),
    (1e-10, "1e-10"),
    (123456789012345678.0, "123456789012345680"),
    (0.1, "0.1"),
    (f64::MAX, "1.7976931348623157e+308"),
    (5e-324, "5e-324"),
];

#[test]
fn floats_like_go() {
    for (f, go) in GO_FLOATS {
        assert_eq!(go_float(*f), *go, "{f:e}");
        assert_eq!(String::from_utf8(to_vec(f)).expect("utf8"), *go, "GoFormatter {f:e}");
    }
}

#[test]
fn unstructured_values_have_sorted_keys() {
    // Built with "b" before "a": with serde_json's `preserve_order` a Map iterates in insertion order,
    // without it sorted; Go marshals a map[string]interface{} sorted either way.
    let v: serde_json::Value = serde_json::from_str(r#"{"b":1,"a":{"z":[1.0,"<"],"y":null}}"#).expect("json");
    let mut out = String::new();
    write_unstructured(&mut out, &v);
    assert_eq!(out, r#"{"a":{"y":null,"z":[1,"\u003c"]},"b":1}"#);
}

/// This crate's tests are run on their own (`cargo test -p kache-k8s`, see test.sh) so that serde_json has
/// the features kache ships with; with `KACHE_SHIPPED_FEATURES=1` this test proves it (a dev-dependency
/// turning on `preserve_order` fails it).
#[test]
fn runs_with_the_shipped_serde_json_features() {
    if std::env::var_os("KACHE_SHIPPED_FEATURES").is_none() {
        return;
    }
    let m: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(r#"{"b":1,"a":2}"#).expect("json");
    let keys: Vec<&str> = m.keys().map(String::as_str).collect();
    assert_eq!(keys, ["a", "b"], "serde_json's preserve_order is on in this build");
}

#[test]
fn quote_like_go() {
    assert_eq!(go_quote("abc"), r#""abc""#);
    assert_eq!(go_quote("a\"b"), r#""a\"b""#);
    assert_eq!(go_quote("\u{0}\n\u{7f}"), r#""\x00\n\x7f""#);
    assert_eq!(go_quote("héllo"), "\"héllo\"");
    assert_eq!(go_quote("\u{200b}"), r#""\u200b""#);
}
