//! JSON output exactly as the apiserver's Go encoder writes it.
//!
//! The apiserver encodes with `encoding/json`: compact output from `json.Encoder.Encode` (which appends
//! a `\n`), pretty output from `json.MarshalIndent(obj, "", "  ")` (no trailing newline). Go escapes
//! `<`, `>`, `&`, U+2028 and U+2029 as `\u003c`-style sequences; serde_json does not, so the bytes come
//! from `kache_k8s::json` (Go's formatting is shared; the sim's model of objects is its own). Field order
//! is kept as stored (serde_json's `preserve_order`).

use serde::Serialize;
use serde_json::{Map, Value};

/// Compact encoding without the trailing newline (used for watch event framing and embedding).
pub fn compact<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
    kache_k8s::json::to_vec(v)
}

/// Pretty encoding, two-space indent, like `json.MarshalIndent(obj, "", "  ")`.
pub fn pretty<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
    kache_k8s::json::to_vec_pretty(v)
}

/// A response body as the apiserver's serializer writes it: pretty without newline, or compact with
/// the `\n` that `json.Encoder.Encode` appends.
pub fn body<T: Serialize + ?Sized>(v: &T, pretty_print: bool) -> Vec<u8> {
    kache_k8s::json::body(v, pretty_print)
}

/// Serialises a map without its `kind` and `apiVersion` keys: list items of built-in types carry no
/// TypeMeta (the typed list's items are structs whose TypeMeta is cleared by the encoder).
pub struct WithoutTypeMeta<'a>(pub &'a Map<String, Value>);

impl Serialize for WithoutTypeMeta<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let n = self.0.iter().filter(|(k, _)| !is_type_meta(k)).count();
        let mut m = s.serialize_map(Some(n))?;
        for (k, v) in self.0.iter().filter(|(k, _)| !is_type_meta(k)) {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

fn is_type_meta(k: &str) -> bool {
    k == "kind" || k == "apiVersion"
}

/// Sorts every object's keys recursively, as Go's encoding of `map[string]interface{}` does; custom
/// resources are unstructured maps in the apiserver, so their JSON comes out with sorted keys.
pub fn sort_keys(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.sort_keys();
            for (_, child) in m.iter_mut() {
                sort_keys(child);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(sort_keys),
        _ => {}
    }
}

/// Reorders the keys of `m` so that those named in `order` come first, in that order; the others
/// keep their relative order after them. Models the field order of Go's typed structs.
pub fn reorder(m: &mut Map<String, Value>, order: &[&str]) {
    let mut out = Map::with_capacity(m.len());
    for k in order {
        if let Some(v) = m.shift_remove(*k) {
            out.insert((*k).to_string(), v);
        }
    }
    out.extend(std::mem::take(m));
    *m = out;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn escapes_like_go() {
        let v = json!({"a": "<b>&\u{2028}", "z\u{0}": 1});
        assert_eq!(compact(&v), br#"{"a":"\u003cb\u003e\u0026\u2028","z\u0000":1}"#.to_vec());
    }

    #[test]
    fn pretty_matches_marshal_indent() {
        let v = json!({"kind": "X", "metadata": {}, "items": []});
        let s = String::from_utf8(pretty(&v)).expect("utf8");
        assert_eq!(s, "{\n  \"kind\": \"X\",\n  \"metadata\": {},\n  \"items\": []\n}");
        assert_eq!(body(&v, false).last(), Some(&b'\n'));
    }

    #[test]
    fn strips_type_meta_and_reorders() {
        let mut m = json!({"spec": 1, "metadata": 2, "kind": "K", "apiVersion": "v1"})
            .as_object()
            .cloned()
            .expect("object");
        reorder(&mut m, &["kind", "apiVersion", "metadata"]);
        assert_eq!(compact(&m), br#"{"kind":"K","apiVersion":"v1","metadata":2,"spec":1}"#.to_vec());
        assert_eq!(compact(&WithoutTypeMeta(&m)), br#"{"metadata":2,"spec":1}"#.to_vec());
    }
}
