//! Small helpers over sonic-rs lazy values: validated object walks, byte offsets, scalar rendering.

use std::borrow::Cow;
use std::ops::Range;

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
    let raw = value.as_raw_str().as_bytes();
    let start = (raw.as_ptr() as usize).checked_sub(base.as_ptr() as usize)?;
    let end = start.checked_add(raw.len())?;
    (end <= base.len()).then_some(start..end)
}

/// Walks the members of the JSON object in `buf`, validating all of it (every skipped value is checked,
/// UTF-8 included) and rejecting anything but whitespace after the closing brace.
///
/// `visit` gets each member's index, unescaped key, lazy value and the value's byte range in `buf`.
/// Returns the offset just past the opening brace's members: the end of the last value, or of `{`.
pub(super) fn walk_object<'a>(
    buf: &'a [u8],
    mut visit: impl FnMut(usize, Cow<'a, str>, LazyValue<'a>, Range<usize>) -> Result<(), ExtractError>,
) -> Result<(), ExtractError> {
    let open = skip_ws(buf, 0);
    if buf.get(open) != Some(&b'{') {
        // Let sonic-rs name the syntax error when there is one; otherwise it is valid JSON of another type.
        return Err(match sonic_rs::from_slice::<serde::de::IgnoredAny>(buf) {
            Err(e) => ExtractError::Json(e),
            Ok(_) => ExtractError::NotAnObject,
        });
    }
    let mut last_end = open + 1;
    for (index, member) in sonic_rs::to_object_iter(buf).enumerate() {
        let (key, value) = member.map_err(ExtractError::Json)?;
        let range = range_in(buf, &value).ok_or(ExtractError::Internal("value outside its input"))?;
        last_end = range.end;
        visit(index, key, value, range)?;
    }
    // The iterator stopped on the closing brace (it reports anything else as an error).
    let close = skip_ws(buf, last_end);
    if buf.get(close) != Some(&b'}') {
        return Err(ExtractError::Internal("object iterator ended before the closing brace"));
    }
    if skip_ws(buf, close + 1) != buf.len() {
        return Err(ExtractError::TrailingBytes);
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
        return Some(Box::from(value.as_raw_str()));
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
