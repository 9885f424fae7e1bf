//! The stored JSON as a borrowed tree: one pass of serde_json over the bytes, strings borrowed from them
//! unless they hold escapes, objects kept as key/value lists in document order (the encoder sorts them
//! into tag order per message, and rejects duplicate keys rather than guess which one Go would keep).
//! Nesting is bounded by serde_json's recursion limit (128), so encoding it cannot exhaust the stack.

use std::borrow::Cow;
use std::fmt;

use kache_k8s_schema::schema;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// One JSON value.
#[derive(Debug)]
pub(super) enum J<'a> {
    Null,
    Bool(bool),
    /// A negative integer.
    Int(i64),
    /// A non-negative integer.
    UInt(u64),
    /// A number with a fraction or an exponent.
    Float(f64),
    /// A string; `Cow::Owned` exactly when its JSON held escapes.
    Str(Cow<'a, str>),
    Arr(Vec<J<'a>>),
    Obj(Vec<(Cow<'a, str>, J<'a>)>),
    /// The exact source text of a value under one of [`schema::RAW_JSON_KEYS`]: Go's `FieldsV1` and
    /// `RawExtension` keep their input bytes as they are (escapes and number forms included), so the
    /// transcoder needs them rather than a parsed tree.
    Raw(&'a str),
}

/// Whether the values of `key` are kept as source text ([`J::Raw`]): the JSON names of the schema's
/// raw-JSON fields (`fieldsV1`, RawExtension's `data`, `parameters`). Where a key so named is another
/// type (a ConfigMap's `data`, a label), the encoder reads the value from the text.
fn raw_key(key: &str) -> bool {
    schema::RAW_JSON_KEYS.contains(&key)
}

impl J<'_> {
    pub(super) fn is_null(&self) -> bool {
        matches!(self, J::Null)
    }

    /// An integer in i64's range (a JSON float is not one: Go refuses `1.0` for an int field).
    pub(super) fn as_i64(&self) -> Option<i64> {
        match *self {
            J::Int(i) => Some(i),
            J::UInt(u) => i64::try_from(u).ok(),
            _ => None,
        }
    }
}

/// Parses the whole input (trailing whitespace only) into a tree.
pub(super) fn parse(b: &[u8]) -> Result<J<'_>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(b);
    let v = J::deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

// === impl Deserialize ===

impl<'de> Deserialize<'de> for J<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TreeVisitor)
    }
}

struct TreeVisitor;

impl<'de> Visitor<'de> for TreeVisitor {
    type Value = J<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<J<'de>, E> {
        Ok(J::Null)
    }
    fn visit_bool<E>(self, b: bool) -> Result<J<'de>, E> {
        Ok(J::Bool(b))
    }
    fn visit_i64<E>(self, i: i64) -> Result<J<'de>, E> {
        Ok(if i >= 0 { J::UInt(i as u64) } else { J::Int(i) })
    }
    fn visit_u64<E>(self, u: u64) -> Result<J<'de>, E> {
        Ok(J::UInt(u))
    }
    fn visit_f64<E>(self, f: f64) -> Result<J<'de>, E> {
        Ok(J::Float(f))
    }
    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<J<'de>, E> {
        Ok(J::Str(Cow::Borrowed(s)))
    }
    fn visit_str<E>(self, s: &str) -> Result<J<'de>, E> {
        Ok(J::Str(Cow::Owned(s.to_owned())))
    }
    fn visit_string<E>(self, s: String) -> Result<J<'de>, E> {
        Ok(J::Str(Cow::Owned(s)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<J<'de>, A::Error> {
        let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(x) = seq.next_element()? {
            v.push(x);
        }
        Ok(J::Arr(v))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<J<'de>, A::Error> {
        let mut v = Vec::new();
        while let Some(Key(k)) = map.next_key()? {
            let value = if raw_key(&k) {
                let raw: &'de serde_json::value::RawValue = map.next_value()?;
                match raw.get() {
                    "null" => J::Null,
                    text => J::Raw(text),
                }
            } else {
                map.next_value()?
            };
            v.push((k, value));
        }
        Ok(J::Obj(v))
    }
}

/// An object key, borrowed when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}
