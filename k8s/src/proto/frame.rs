//! The apiserver's protobuf framing (`runtime/serializer/protobuf`), written directly rather than through
//! prost so a list can be sent as prefix + cached item bytes + suffix:
//!
//! - an object is `k8s\0` + `runtime.Unknown{typeMeta = 1 {apiVersion = 1, kind = 2}, raw = 2,
//!   contentEncoding = 3, contentType = 4}`, raw holding the object's message and both strings empty
//!   (Go writes them anyway: they are non-pointer proto2 strings);
//! - a list is one such object whose message is `{metadata = 1 (ListMeta), items = 2 (repeated)}`, the
//!   items being bare messages (no TypeMeta);
//! - a watch stream is a sequence of 4-byte big-endian lengths each followed by a `WatchEvent{type = 1,
//!   object = 2 (RawExtension{raw = 1}: the enveloped object)}`, itself not enveloped.

use super::wire::{LEN, put_bytes, put_key, put_varint, varint_len};

/// The envelope's magic prefix.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// The Unknown's trailing `contentEncoding` and `contentType`, both empty.
const UNKNOWN_SUFFIX: [u8; 4] = [3 << 3 | 2, 0, 4 << 3 | 2, 0];

/// The size of a length-delimited field of `len` bytes with a one-byte key.
fn field_len(len: usize) -> usize {
    1 + varint_len(len as u64) + len
}

/// `k8s\0` + the Unknown's TypeMeta field + the key and length of its raw field (`raw_len` bytes).
fn envelope_head(api_version: &str, kind: &str, raw_len: usize, extra: usize) -> Vec<u8> {
    let tm = field_len(api_version.len()) + field_len(kind.len());
    let mut out = Vec::with_capacity(MAGIC.len() + field_len(tm) + field_len(raw_len) - raw_len + extra);
    out.extend_from_slice(MAGIC);
    put_key(&mut out, 1, LEN);
    put_varint(&mut out, tm as u64);
    put_bytes(&mut out, 1, api_version.as_bytes());
    put_bytes(&mut out, 2, kind.as_bytes());
    put_key(&mut out, 2, LEN);
    put_varint(&mut out, raw_len as u64);
    out
}

/// `k8s\0` + runtime.Unknown{TypeMeta{apiVersion, kind}, raw = message, contentEncoding, contentType}.
pub fn envelope(api_version: &str, kind: &str, message: &[u8]) -> Vec<u8> {
    let mut out = envelope_head(api_version, kind, message.len(), message.len() + UNKNOWN_SUFFIX.len());
    out.extend_from_slice(message);
    out.extend_from_slice(&UNKNOWN_SUFFIX);
    out
}

/// A list's ListMeta (its JSON fields; `selfLink` is always empty).
#[derive(Debug, Clone, Copy, Default)]
pub struct ListMeta<'a> {
    pub resource_version: &'a str,
    pub continue_token: &'a str,
    pub remaining_item_count: Option<i64>,
}

/// The ListMeta message: selfLink = 1, resourceVersion = 2, continue = 3 (non-pointer strings, always
/// written), remainingItemCount = 4 (a pointer, only when set).
fn list_meta_message(meta: &ListMeta) -> Vec<u8> {
    let mut m = Vec::with_capacity(8 + meta.resource_version.len() + meta.continue_token.len());
    put_bytes(&mut m, 1, b"");
    put_bytes(&mut m, 2, meta.resource_version.as_bytes());
    put_bytes(&mut m, 3, meta.continue_token.as_bytes());
    if let Some(n) = meta.remaining_item_count {
        put_key(&mut m, 4, 0);
        put_varint(&mut m, n as u64);
    }
    m
}

/// A list as (prefix, suffix): the full body is the prefix, then for each item `list_item_header(len)`
/// and its message bytes (in the order and with the lengths given in `item_lens`), then the suffix.
pub fn list_parts(
    api_version: &str,
    list_kind: &str,
    meta: &ListMeta,
    item_lens: &[usize],
) -> (Vec<u8>, Vec<u8>) {
    let lm = list_meta_message(meta);
    let items: usize = item_lens.iter().map(|&l| field_len(l)).sum();
    let raw_len = field_len(lm.len()) + items;
    let mut prefix = envelope_head(api_version, list_kind, raw_len, field_len(lm.len()));
    put_bytes(&mut prefix, 1, &lm);
    (prefix, UNKNOWN_SUFFIX.to_vec())
}

/// The key and length that precede one list item's message bytes (the list's `items` = 2).
pub fn list_item_header(len: usize, out: &mut Vec<u8>) {
    put_key(out, 2, LEN);
    put_varint(out, len as u64);
}

/// A whole list in one buffer from its items' message bytes (see [`list_parts`] to stream it).
pub fn list(api_version: &str, list_kind: &str, meta: &ListMeta, items: &[impl AsRef<[u8]>]) -> Vec<u8> {
    let lens: Vec<usize> = items.iter().map(|i| i.as_ref().len()).collect();
    let (mut out, suffix) = list_parts(api_version, list_kind, meta, &lens);
    out.reserve(lens.iter().map(|&l| field_len(l)).sum::<usize>() + suffix.len());
    for i in items {
        list_item_header(i.as_ref().len(), &mut out);
        out.extend_from_slice(i.as_ref());
    }
    out.extend_from_slice(&suffix);
    out
}

/// One watch frame: the 4-byte big-endian length, then `WatchEvent{type, object = RawExtension{raw =
/// the enveloped object}}`.
pub fn watch_frame(event_type: &str, api_version: &str, kind: &str, message: &[u8]) -> Vec<u8> {
    let tm = field_len(api_version.len()) + field_len(kind.len());
    let object = MAGIC.len() + field_len(tm) + field_len(message.len()) + UNKNOWN_SUFFIX.len();
    let raw_ext = field_len(object);
    let event = field_len(event_type.len()) + field_len(raw_ext);
    let mut out = Vec::with_capacity(4 + event);
    out.extend_from_slice(&u32::try_from(event).unwrap_or(u32::MAX).to_be_bytes());
    put_bytes(&mut out, 1, event_type.as_bytes());
    put_key(&mut out, 2, LEN);
    put_varint(&mut out, raw_ext as u64);
    put_key(&mut out, 1, LEN);
    put_varint(&mut out, object as u64);
    out.extend_from_slice(MAGIC);
    put_key(&mut out, 1, LEN);
    put_varint(&mut out, tm as u64);
    put_bytes(&mut out, 1, api_version.as_bytes());
    put_bytes(&mut out, 2, kind.as_bytes());
    put_bytes(&mut out, 2, message);
    out.extend_from_slice(&UNKNOWN_SUFFIX);
    debug_assert_eq!(out.len(), 4 + event);
    out
}
