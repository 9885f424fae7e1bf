//! Small helpers over serde_json: borrowed raw values, object members in document order, byte offsets,
//! scalar rendering. Every value these helpers return was validated by the serde_json pass that found it.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::ExtractError;

/// JSON insignificant whitespace (RFC 8259 §2).
pub(super) fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// The first index ≥ `i` that is not whitespace (or `buf.len()`).
pub(super) fn skip_ws(buf: &[u8], mut i: usize) -> usize {
    while i < buf.len() && is_ws(buf[i]) {
        i += 1;
    }
    i
}

/// Byte range of a raw value inside `base`. The value must borrow from `base` (serde_json's borrowed
/// `RawValue` is a sub-slice of its `&str` input); `None` if it does not, which would be a bug.
pub(super) fn range_in(base: &[u8], value: &RawValue) -> Option<Range<usize>> {
    let raw = value.get().as_bytes();
    let start = (raw.as_ptr() as usize).checked_sub(base.as_ptr() as usize)?;
    let end = start.checked_add(raw.len())?;
    (end <= base.len()).then_some(start..end)
}

/// The byte range in `base` of the JSON object whose members are `members` (borrowed from `base`): from
/// the `{` before the first key to the `}` after the last value. `None` when it cannot be told from the
/// members (no members, or a first key with escapes, which is not borrowed).
pub(super) fn object_range(base: &[u8], members: &Members<'_>) -> Option<Range<usize>> {
    let (Cow::Borrowed(first_key), _) = members.first()? else { return None };
    let (_, last) = members.last()?;
    // A borrowed key starts right after its opening quote.
    let quote = (first_key.as_ptr() as usize).checked_sub(base.as_ptr() as usize)?.checked_sub(1)?;
    if base.get(quote) != Some(&b'"') {
        return None;
    }
    let mut open = quote;
    while open > 0 && is_ws(base[open - 1]) {
        open -= 1;
    }
    let open = open.checked_sub(1).filter(|&o| base[o] == b'{')?;
    let close = skip_ws(base, range_in(base, last)?.end);
    (base.get(close) == Some(&b'}')).then_some(open..close + 1)
}

/// An object's members in document order (duplicates kept), with unescaped keys and raw values.
pub(super) type Members<'a> = Vec<(Cow<'a, str>, &'a RawValue)>;

/// The members of the JSON value `text` (a raw value found by an earlier pass, or a whole document):
/// `Ok(None)` when it is valid JSON but not an object; an error for invalid JSON or trailing bytes.
pub(super) fn members(text: &str) -> Result<Option<Members<'_>>, ExtractError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let found = de.deserialize_any(MembersVisitor).map_err(ExtractError::Json)?;
    de.end().map_err(|_| ExtractError::TrailingBytes)?;
    Ok(found)
}

/// Collects an object's members; any other value is consumed (validated) and reported as `None`.
pub(super) struct MembersVisitor;

impl<'de> Visitor<'de> for MembersVisitor {
    type Value = Option<Members<'de>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            out.push((key.0, map.next_value::<&'de RawValue>()?));
        }
        Ok(Some(out))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// A string, borrowed from the input when it has no escapes.
pub(super) struct Key<'a>(pub Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// The value at `path` (member names from the root) in the JSON object `text`: the last member of each
/// name wins, like Go's decoder; `None` when a segment is missing, crosses a non-object, or `text` is not
/// valid JSON.
pub fn value_at<'a, S: AsRef<str>>(text: &'a str, path: &[S]) -> Option<&'a RawValue> {
    let mut current: &'a str = text;
    let mut found = None;
    for segment in path {
        let members = members(current).ok()??;
        let value = members.into_iter().rev().find(|(k, _)| k == segment.as_ref()).map(|(_, v)| v)?;
        current = value.get();
        found = Some(value);
    }
    found
}

/// Whether a raw value is JSON null.
pub(super) fn is_null(value: &RawValue) -> bool {
    value.get() == "null"
}

/// A string member: `Ok(None)` for JSON null (Go decodes null into a string as ""), an error for any other
/// non-string type.
pub(super) fn opt_str<'a>(
    value: &'a RawValue,
    what: &'static str,
) -> Result<Option<Cow<'a, str>>, ExtractError> {
    if is_null(value) {
        return Ok(None);
    }
    if !value.get().starts_with('"') {
        return Err(ExtractError::WrongType(what));
    }
    serde_json::from_str::<Key<'a>>(value.get()).map(|k| Some(k.0)).map_err(ExtractError::Json)
}

/// Renders a scalar the way Go's field-set functions print it: strings unescaped, booleans as
/// `true`/`false`, numbers as their JSON text. `None` for null, objects and arrays (never a field value).
pub(super) fn render_scalar(value: &RawValue) -> Option<Box<str>> {
    let text = value.get();
    match text.as_bytes().first()? {
        b'"' => opt_str(value, "").ok().flatten().map(|s| Box::from(&*s)),
        b't' | b'f' | b'-' | b'0'..=b'9' => Some(Box::from(text)),
        _ => None,
    }
}

/// Parses a resourceVersion: ASCII digits only (Rust's `u64::from_str` would also take a leading `+`).
pub(super) fn parse_rv(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Whether the object in `buf` starts with a `kind` or `apiVersion` member (type meta first, as the
/// apiserver writes it: `kind` first for typed objects, `apiVersion` first for unstructured ones whose keys
/// Go sorts). Looks only at raw bytes: an escaped key spelling is not recognised (the apiserver never
/// escapes these keys).
pub(super) fn starts_with_type_meta(buf: &[u8]) -> bool {
    let open = skip_ws(buf, 0);
    if buf.get(open) != Some(&b'{') {
        return false;
    }
    let rest = &buf[skip_ws(buf, open + 1)..];
    for key in [&b"\"kind\""[..], &b"\"apiVersion\""[..]] {
        if let Some(after) = rest.strip_prefix(key)
            && after.get(skip_ws(after, 0)) == Some(&b':')
        {
            return true;
        }
    }
    false
}

/// End of a validated object's leading `kind`/`apiVersion` members (either order): the offset past the
/// comma after the second one (or of the closing brace when they are the only members), such that `{` +
/// `buf[end..]` is the object without its type meta. `None` when the object does not start with both.
/// Keys spelled with escapes are not recognised (the apiserver never escapes them).
pub(super) fn type_meta_end(buf: &[u8]) -> Option<usize> {
    let mut i = skip_ws(buf, 0);
    if buf.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    let (mut kind, mut api_version) = (false, false);
    for _ in 0..2 {
        i = skip_ws(buf, i);
        let rest = buf.get(i..)?;
        let key_len = if rest.starts_with(b"\"kind\"") && !kind {
            kind = true;
            6
        } else if rest.starts_with(b"\"apiVersion\"") && !api_version {
            api_version = true;
            12
        } else {
            return None;
        };
        i = skip_ws(buf, i + key_len);
        if buf.get(i) != Some(&b':') {
            return None;
        }
        i = string_end(buf, skip_ws(buf, i + 1))?;
        i = skip_ws(buf, i);
        match buf.get(i) {
            Some(b',') => i += 1,
            // Only the two members: keep the brace, giving `{}`.
            Some(b'}') if kind && api_version => return Some(i),
            _ => return None,
        }
    }
    Some(i)
}

/// The offset past the JSON string starting at `buf[start]` (`None` if none starts there).
fn string_end(buf: &[u8], start: usize) -> Option<usize> {
    if buf.get(start) != Some(&b'"') {
        return None;
    }
    let mut i = start + 1;
    while i < buf.len() {
        match buf[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}
