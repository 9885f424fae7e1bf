//! JSON output exactly as the apiserver's Go encoder writes it.
//!
//! The apiserver encodes with `encoding/json`: compact output from `json.Encoder.Encode` (which appends
//! a `\n`), pretty output from `json.MarshalIndent(obj, "", "  ")` (no trailing newline). Go escapes
//! `<`, `>`, `&`, U+2028 and U+2029 as `\u003c`-style sequences; serde_json does not, so a formatter
//! wrapper does it here. Field order is kept as stored (serde_json's `preserve_order`).

use std::io::{self, Write};

use serde::Serialize;
use serde_json::ser::{CompactFormatter, Formatter, PrettyFormatter};
use serde_json::{Map, Value};

/// A formatter that escapes like Go's `encoding/json` with HTML escaping on (its default).
struct GoFormatter<F> {
    inner: F,
}

impl<F: Formatter> Formatter for GoFormatter<F> {
    fn write_null<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.inner.write_null(w)
    }
    fn write_bool<W: ?Sized + Write>(&mut self, w: &mut W, v: bool) -> io::Result<()> {
        self.inner.write_bool(w, v)
    }
    fn write_i64<W: ?Sized + Write>(&mut self, w: &mut W, v: i64) -> io::Result<()> {
        self.inner.write_i64(w, v)
    }
    fn write_u64<W: ?Sized + Write>(&mut self, w: &mut W, v: u64) -> io::Result<()> {
        self.inner.write_u64(w, v)
    }
    fn write_f64<W: ?Sized + Write>(&mut self, w: &mut W, v: f64) -> io::Result<()> {
        self.inner.write_f64(w, v)
    }
    fn write_number_str<W: ?Sized + Write>(&mut self, w: &mut W, v: &str) -> io::Result<()> {
        self.inner.write_number_str(w, v)
    }
    fn write_string_fragment<W: ?Sized + Write>(&mut self, w: &mut W, fragment: &str) -> io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            let esc = match c {
                '<' => "\\u003c",
                '>' => "\\u003e",
                '&' => "\\u0026",
                '\u{2028}' => "\\u2028",
                '\u{2029}' => "\\u2029",
                _ => continue,
            };
            w.write_all(&fragment.as_bytes()[start..i])?;
            w.write_all(esc.as_bytes())?;
            start = i + c.len_utf8();
        }
        w.write_all(&fragment.as_bytes()[start..])
    }
    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.inner.begin_array(w)
    }
    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.inner.end_array(w)
    }
    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.inner.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.inner.end_array_value(w)
    }
    fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.inner.begin_object(w)
    }
    fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.inner.end_object(w)
    }
    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.inner.begin_object_key(w, first)
    }
    fn end_object_key<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.inner.end_object_key(w)
    }
    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.inner.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.inner.end_object_value(w)
    }
}

/// Compact encoding without the trailing newline (used for watch event framing and embedding).
pub fn compact<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, GoFormatter { inner: CompactFormatter });
    v.serialize(&mut ser).expect("serialising a serde_json value into a Vec cannot fail");
    out
}

/// Pretty encoding, two-space indent, like `json.MarshalIndent(obj, "", "  ")`.
pub fn pretty<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    let fmt = GoFormatter { inner: PrettyFormatter::with_indent(b"  ") };
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    v.serialize(&mut ser).expect("serialising a serde_json value into a Vec cannot fail");
    out
}

/// A response body as the apiserver's serializer writes it: pretty without newline, or compact with
/// the `\n` that `json.Encoder.Encode` appends.
pub fn body<T: Serialize + ?Sized>(v: &T, pretty_print: bool) -> Vec<u8> {
    if pretty_print {
        pretty(v)
    } else {
        let mut out = compact(v);
        out.push(b'\n');
        out
    }
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
