//! Small helpers over sonic-rs lazy values: validated object walks, byte offsets, scalar rendering.

use std::borrow::Cow;
use std::ops::Range;

use serde::Deserialize;
use sonic_rs::{JsonValueTrait, LazyValue};

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

/// Byte range of a lazy value inside `base`. The value must borrow from `base` (sonic-rs returns
/// sub-slices of its input for `&[u8]` inputs); `None` if it does not, which would be a bug.
pub(super) fn range_in(base: &[u8], value: &LazyValue<'_>) -> Option<Range<usize>> {
    // The unchecked parser may include whitespace after a number in its raw slice.
    let raw = value.as_raw_str().trim_end_matches([' ', '\t', '\n', '\r']).as_bytes();
    let start = (raw.as_ptr() as usize).checked_sub(base.as_ptr() as usize)?;
    let end = start.checked_add(raw.len())?;
    (end <= base.len()).then_some(start..end)
}

/// Validates `buf` as one JSON value (UTF-8, grammar, nothing but whitespace after it) and returns it as
/// text.
///
/// serde_json validates: on this project's baseline x86-64 target (no AVX2) its validating scan is about
/// 1.4× faster than sonic-rs's checked skip (benches/extract.rs); once the bytes are known to be valid,
/// sonic-rs's unchecked lazy access picks the few members kache needs at several GB/s.
pub(super) fn validate(buf: &[u8]) -> Result<&str, ExtractError> {
    // UTF-8 first: serde_json does not check the UTF-8 of strings it only skips.
    let text = std::str::from_utf8(buf).map_err(|_| ExtractError::InvalidUtf8)?;
    let mut de = serde_json::Deserializer::from_str(text);
    serde::de::IgnoredAny::deserialize(&mut de).map_err(ExtractError::Json)?;
    de.end().map_err(|_| ExtractError::TrailingBytes)?;
    Ok(text)
}

/// Walks the members of the JSON object in `buf` after validating all of it (see [`validate`]).
///
/// `visit` gets each member's index, unescaped key, lazy value and the value's byte range in `buf`.
pub(super) fn walk_object<'a>(
    buf: &'a [u8],
    mut visit: impl FnMut(usize, Cow<'a, str>, LazyValue<'a>, Range<usize>) -> Result<(), ExtractError>,
) -> Result<(), ExtractError> {
    let text = validate(buf)?;
    if buf.get(skip_ws(buf, 0)) != Some(&b'{') {
        return Err(ExtractError::NotAnObject);
    }
    // SAFETY: `text` is one valid JSON object (validated just above), which is all sonic-rs's unchecked
    // iterator requires; every lazy value it yields is a sub-slice of `text`.
    let members = unsafe { sonic_rs::to_object_iter_unchecked(text) };
    for (index, member) in members.enumerate() {
        let (key, value) = member.map_err(|_| ExtractError::Internal("validated JSON failed to iterate"))?;
        let range = range_in(buf, &value).ok_or(ExtractError::Internal("value outside its input"))?;
        visit(index, key, value, range)?;
    }
    Ok(())
}

/// A string member: `Ok(None)` for JSON null (Go decodes null into a string as ""), an error for any other
/// non-string type.
pub(super) fn opt_str<'v>(
    value: &'v LazyValue<'_>,
    what: &'static str,
) -> Result<Option<&'v str>, ExtractError> {
    if value.is_null() {
        return Ok(None);
    }
    value.as_str().map(Some).ok_or(ExtractError::WrongType(what))
}

/// Renders a scalar the way Go's field-set functions print it: strings unescaped, booleans as
/// `true`/`false`, numbers as their JSON text. `None` for null, objects and arrays (never a field value).
pub(super) fn render_scalar(value: &LazyValue<'_>) -> Option<Box<str>> {
    if value.is_str() {
        return value.as_str().map(Box::from);
    }
    if value.is_boolean() || value.is_number() {
        // The unchecked parser may include whitespace after a number in its raw slice.
        return Some(Box::from(value.as_raw_str().trim_end_matches([' ', '\t', '\n', '\r'])));
    }
    None
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
