//! Assembling list responses from stored object bytes.
//!
//! A list is written as a header, the stored item bytes joined by commas, and a trailer; items are never
//! decoded or re-encoded. Output is compact JSON exactly as the apiserver writes it:
//! `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"6","continue":"…","remainingItemCount":3},"items":[…]}`.

use std::io::Write as _;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

use crate::resource::ResourceInfo;
use crate::store::Object;

/// Size of the buffers a list body is cut into: large enough to amortise frame overhead, small enough to
/// keep per-response memory bounded while streaming.
pub const LIST_CHUNK_BYTES: usize = 64 * 1024;

/// The `metadata` of a list response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListMeta {
    pub resource_version: u64,
    pub continue_token: Option<String>,
    pub remaining_item_count: Option<i64>,
}

/// Writes the list header up to and including `"items":[`.
pub fn list_header(kind: &str, api_version: &str, meta: &ListMeta) -> BytesMut {
    let mut out = BytesMut::with_capacity(256);
    out.put_slice(b"{\"kind\":");
    write_json_string(&mut out, kind);
    out.put_slice(b",\"apiVersion\":");
    write_json_string(&mut out, api_version);
    out.put_slice(b",\"metadata\":{\"resourceVersion\":\"");
    let _ = write!((&mut out).writer(), "{}", meta.resource_version);
    out.put_slice(b"\"");
    if let Some(token) = &meta.continue_token {
        out.put_slice(b",\"continue\":");
        write_json_string(&mut out, token);
    }
    if let Some(remaining) = meta.remaining_item_count {
        let _ = write!((&mut out).writer(), ",\"remainingItemCount\":{remaining}");
    }
    out.put_slice(b"},\"items\":[");
    out
}

/// The list trailer, with the newline Go's `json.Encoder.Encode` appends to compact output.
pub const LIST_TRAILER: &[u8] = b"]}\n";

/// Appends one item in list form: without `kind`/`apiVersion` for built-in types (as the apiserver's typed
/// lists), with them for custom resources.
pub fn put_item(out: &mut BytesMut, object: &Object, with_type_meta: bool) {
    if with_type_meta || object.body_offset <= 1 {
        out.put_slice(&object.raw);
    } else {
        out.put_u8(b'{');
        out.put_slice(&object.raw[object.body_offset as usize..]);
    }
}

/// Assembles a whole list into chunks of about [`LIST_CHUNK_BYTES`].
pub fn assemble_list<'a>(
    info: &ResourceInfo,
    meta: &ListMeta,
    items: impl IntoIterator<Item = &'a Arc<Object>>,
) -> Vec<Bytes> {
    let with_type_meta = info.list_items_have_type_meta;
    let mut chunks = Vec::new();
    let mut buf = list_header(&info.list_kind, &info.api_version(), meta);
    buf.reserve(LIST_CHUNK_BYTES);
    let mut first = true;
    for object in items {
        if !first {
            buf.put_u8(b',');
        }
        first = false;
        put_item(&mut buf, object, with_type_meta);
        if buf.len() >= LIST_CHUNK_BYTES {
            chunks.push(buf.split().freeze());
            buf.reserve(LIST_CHUNK_BYTES);
        }
    }
    buf.put_slice(LIST_TRAILER);
    chunks.push(buf.freeze());
    chunks
}

/// Writes `s` as a JSON string with Go's escaping (`<`, `>`, `&` as `\u003c`… like encoding/json).
pub fn write_json_string(out: &mut BytesMut, s: &str) {
    out.put_u8(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            b'\n' => Some(b"\\n"),
            b'\r' => Some(b"\\r"),
            b'\t' => Some(b"\\t"),
            b'<' | b'>' | b'&' | 0..=0x1f => None,
            _ => continue,
        };
        out.put_slice(&bytes[start..i]);
        match escape {
            Some(e) => out.put_slice(e),
            None => {
                let _ = write!((&mut *out).writer(), "\\u{b:04x}");
            }
        }
        start = i + 1;
    }
    out.put_slice(&bytes[start..]);
    out.put_u8(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_matches_apiserver_shape() {
        let meta = ListMeta {
            resource_version: 6,
            continue_token: Some("eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6Niwic3RhcnQiOiIvZjJcdTAwMDAifQ".into()),
            remaining_item_count: Some(3),
        };
        let h = list_header("FlunderList", "wardle.example.com/v1alpha1", &meta);
        assert_eq!(
            &h[..],
            &br#"{"kind":"FlunderList","apiVersion":"wardle.example.com/v1alpha1","metadata":{"resourceVersion":"6","continue":"eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6Niwic3RhcnQiOiIvZjJcdTAwMDAifQ","remainingItemCount":3},"items":["#[..]
        );
    }

    #[test]
    fn go_string_escaping() {
        let mut out = BytesMut::new();
        write_json_string(&mut out, "a<b>&\"\\\n\u{1}");
        assert_eq!(&out[..], br#""a\u003cb\u003e\u0026\"\\\n\u0001""#);
    }
}
