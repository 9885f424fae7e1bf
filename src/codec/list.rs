//! Assembling list responses from stored object bytes.
//!
//! A list is written as a header, the stored item bytes joined by commas, and a trailer; items are never
//! decoded or re-encoded. Output is compact JSON exactly as the apiserver writes it:
//! `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"6","continue":"…","remainingItemCount":3},"items":[…]}`.

use std::io::Write as _;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

use kache_k8s::json;

use crate::resource::ResourceInfo;
use crate::store::Object;

/// Size of the buffers a list body is cut into: large enough to amortise frame overhead, small enough to
/// keep per-response memory bounded while streaming.
pub const LIST_CHUNK_BYTES: usize = 64 * 1024;
/// Room reserved past [`LIST_CHUNK_BYTES`] in a chunk's buffer, so the item that crosses it (most objects are a
/// few KiB) fits without growing the buffer; an item that would not fit starts the next chunk. Grown, the
/// buffer doubles to 128 KiB, and a chunk the list body cache keeps would hold twice its length.
pub(crate) const CHUNK_SLACK: usize = 8 * 1024;

/// The `metadata` of a list response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListMeta {
    pub resource_version: u64,
    pub continue_token: Option<String>,
    pub remaining_item_count: Option<i64>,
}

/// Writes the list header up to and including `"items":[`.
pub(crate) fn list_header(kind: &str, api_version: &str, meta: &ListMeta) -> BytesMut {
    let mut out = BytesMut::with_capacity(256);
    out.put_slice(b"{\"kind\":");
    json::write_str(&mut out, kind);
    out.put_slice(b",\"apiVersion\":");
    json::write_str(&mut out, api_version);
    out.put_slice(b",\"metadata\":{\"resourceVersion\":\"");
    let _ = write!((&mut out).writer(), "{}", meta.resource_version);
    out.put_slice(b"\"");
    if let Some(token) = &meta.continue_token {
        out.put_slice(b",\"continue\":");
        json::write_str(&mut out, token);
    }
    if let Some(remaining) = meta.remaining_item_count {
        let _ = write!((&mut out).writer(), ",\"remainingItemCount\":{remaining}");
    }
    out.put_slice(b"},\"items\":[");
    out
}

/// The list trailer, with the newline Go's `json.Encoder.Encode` appends to compact output.
pub(crate) const LIST_TRAILER: &[u8] = b"]}\n";

/// Appends one item in list form: without `kind`/`apiVersion` for built-in types (as the apiserver's typed
/// lists), with them for custom resources.
pub(crate) fn put_item(out: &mut BytesMut, object: &Object, with_type_meta: bool) {
    if with_type_meta || object.body_offset <= 1 {
        out.put_slice(&object.raw);
    } else {
        out.put_u8(b'{');
        out.put_slice(&object.raw[object.body_offset as usize..]);
    }
}

/// Which form the items of a response take.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum View {
    /// The objects as stored.
    #[default]
    Full,
    /// `PartialObjectMetadata` (meta.k8s.io/v1): type meta and the object's `metadata`, as metadata informers
    /// ask for with `Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1`.
    Metadata,
    /// A `meta.k8s.io` Table (`kubectl get`), see [`super::table`].
    Table(super::table::TableView),
}

/// The type meta of one `PartialObjectMetadata` item, up to its `metadata` value.
pub(crate) const PARTIAL_OBJECT_HEAD: &[u8] =
    b"{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":";

/// The stored bytes of an object's `metadata` value.
fn metadata_bytes(object: &Object) -> &[u8] {
    object.raw.get(object.metadata_range.start as usize..object.metadata_range.end as usize).unwrap_or(b"{}")
}

/// Appends one object as a `PartialObjectMetadata`, from the stored bytes of its `metadata` (never decoded;
/// custom resources' members are permuted into `ObjectMeta` order, see [`super::meta_view`]).
pub(crate) fn put_partial(out: &mut BytesMut, object: &Object) {
    out.put_slice(PARTIAL_OBJECT_HEAD);
    out.put_slice(&super::meta_view::view_metadata(metadata_bytes(object), is_typed(object)));
    out.put_u8(b'}');
}

/// Whether the object's bytes are a typed object's (`kind` and `apiVersion` first, as the apiserver encodes
/// built-in types); unstructured objects (custom resources) start with the sorted `apiVersion`.
pub(crate) fn is_typed(object: &Object) -> bool {
    object.raw.starts_with(b"{\"kind\":")
}

fn partial_len(object: &Object) -> usize {
    let meta = metadata_bytes(object);
    let len = if is_typed(object) { meta.len() } else { super::meta_view::canonical_len(meta) };
    PARTIAL_OBJECT_HEAD.len() + len + 1
}

/// The end of an empty `PartialObjectMetadataList`: its `Items` slice stays nil when nothing is appended
/// (`asPartialObjectMetadataList`), which Go encodes as `null`; replaces the header's `[` and the trailer.
const EMPTY_PARTIAL_TRAILER: &[u8] = b"null}\n";

/// Assembles a whole list into chunks of about [`LIST_CHUNK_BYTES`].
pub fn assemble_list<'a>(
    info: &ResourceInfo,
    meta: &ListMeta,
    items: impl IntoIterator<Item = &'a Arc<Object>>,
) -> Vec<Bytes> {
    ListChunks::new(info, meta, items.into_iter().cloned().collect()).collect()
}

/// The head of an `UnstructuredList` (custom resources): a map, so Go sorts its keys — `apiVersion`, then
/// `items`; `kind` and `metadata` come in the trailer.
fn unstructured_header(api_version: &str) -> BytesMut {
    let mut out = BytesMut::with_capacity(64);
    out.put_slice(b"{\"apiVersion\":");
    json::write_str(&mut out, api_version);
    out.put_slice(b",\"items\":[");
    out
}

/// The tail of an `UnstructuredList`: sorted metadata keys, and `continue` always present (`SetContinue`
/// sets it even when empty), `remainingItemCount` only when set.
fn unstructured_trailer(kind: &str, meta: &ListMeta) -> Bytes {
    let mut out = BytesMut::with_capacity(128);
    out.put_slice(b"],\"kind\":");
    json::write_str(&mut out, kind);
    out.put_slice(b",\"metadata\":{\"continue\":");
    json::write_str(&mut out, meta.continue_token.as_deref().unwrap_or(""));
    if let Some(remaining) = meta.remaining_item_count {
        let _ = write!((&mut out).writer(), ",\"remainingItemCount\":{remaining}");
    }
    let _ = write!((&mut out).writer(), ",\"resourceVersion\":\"{}\"}}}}", meta.resource_version);
    out.put_u8(b'\n');
    out.freeze()
}

/// A list body produced lazily in chunks of about [`LIST_CHUNK_BYTES`], so the first bytes leave before
/// the last item is written and a large list never sits whole in memory twice.
pub struct ListChunks {
    header: Option<BytesMut>,
    trailer: Bytes,
    items: Vec<Arc<Object>>,
    next: usize,
    with_type_meta: bool,
    view: View,
    /// The time Table ages are computed against (one instant for the whole response).
    now: i64,
    done: bool,
}

impl ListChunks {
    pub fn new(info: &ResourceInfo, meta: &ListMeta, items: Vec<Arc<Object>>) -> Self {
        Self::with_view(info, meta, items, View::Full)
    }

    /// A list in the given view: the resource's `<Kind>List`, or a `PartialObjectMetadataList`.
    pub fn with_view(info: &ResourceInfo, meta: &ListMeta, items: Vec<Arc<Object>>, view: View) -> Self {
        let with_type_meta = info.list_items_have_type_meta;
        let (header, trailer) = match view {
            // Custom resources are served as UnstructuredList (their items keep their type meta).
            View::Full if with_type_meta => {
                (unstructured_header(&info.api_version()), unstructured_trailer(&info.list_kind, meta))
            }
            View::Full => {
                (list_header(&info.list_kind, &info.api_version(), meta), Bytes::from_static(LIST_TRAILER))
            }
            View::Metadata => (
                list_header("PartialObjectMetadataList", "meta.k8s.io/v1", meta),
                Bytes::from_static(LIST_TRAILER),
            ),
            View::Table(ref table) => {
                (table.header(meta, true), Bytes::from_static(super::table::TABLE_TRAILER))
            }
        };
        let now = super::table::age::now_ms();
        Self { header: Some(header), trailer, items, next: 0, with_type_meta, view, now, done: false }
    }

    /// The exact number of bytes the chunks will add up to.
    pub(crate) fn total_len(&self) -> usize {
        let header = self.header.as_ref().map_or(0, BytesMut::len);
        let items: usize = match &self.view {
            View::Full => self.items.iter().map(|o| item_len(o, self.with_type_meta)).sum(),
            View::Metadata => self.items.iter().map(|o| partial_len(o)).sum(),
            // Rows are not sized ahead (ages are rendered as they are written): encode them to count.
            View::Table(table) => {
                let now = self.now;
                let mut scratch = BytesMut::new();
                self.items
                    .iter()
                    .map(|o| {
                        scratch.clear();
                        table.put_row(&mut scratch, o, now);
                        scratch.len()
                    })
                    .sum()
            }
        };
        if self.view == View::Metadata && self.items.is_empty() {
            return header.saturating_sub(1) + EMPTY_PARTIAL_TRAILER.len();
        }
        header + items + self.items.len().saturating_sub(1) + self.trailer.len()
    }
}

impl Iterator for ListChunks {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        let mut buf = self.header.take().unwrap_or_default();
        if self.view == View::Metadata && self.items.is_empty() {
            buf.truncate(buf.len().saturating_sub(1));
            buf.put_slice(EMPTY_PARTIAL_TRAILER);
            self.done = true;
            return Some(buf.freeze());
        }
        if let (View::Table(table), true) = (&self.view, self.items.is_empty())
            && table.nil_when_empty()
        {
            buf.truncate(buf.len().saturating_sub(1));
            buf.put_slice(super::table::NIL_ROWS_TRAILER);
            self.done = true;
            return Some(buf.freeze());
        }
        buf.reserve(LIST_CHUNK_BYTES + CHUNK_SLACK);
        let first = self.next;
        while self.next < self.items.len() {
            // Rows are not sized ahead; they are far smaller than the slack.
            let len = match &self.view {
                View::Full => Some(item_len(&self.items[self.next], self.with_type_meta)),
                View::Metadata => Some(partial_len(&self.items[self.next])),
                View::Table(_) => None,
            };
            if self.next > first && len.is_some_and(|len| buf.len() + 1 + len > buf.capacity()) {
                return Some(buf.freeze());
            }
            if self.next > 0 {
                buf.put_u8(b',');
            }
            match &self.view {
                View::Full => put_item(&mut buf, &self.items[self.next], self.with_type_meta),
                View::Metadata => put_partial(&mut buf, &self.items[self.next]),
                View::Table(table) => table.put_row(&mut buf, &self.items[self.next], self.now),
            }
            self.next += 1;
            if buf.len() >= LIST_CHUNK_BYTES {
                return Some(buf.freeze());
            }
        }
        buf.put_slice(&self.trailer);
        self.done = true;
        Some(buf.freeze())
    }
}

/// Length of one item in list form.
fn item_len(object: &Object, with_type_meta: bool) -> usize {
    if with_type_meta || object.body_offset <= 1 {
        object.raw.len()
    } else {
        1 + object.raw.len() - object.body_offset as usize
    }
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

    /// `n` pods `ns/0`… whose stored bytes are `raw` (its body from byte 32, as in `{"kind":"Pod","apiVersion":"v1",…`).
    fn numbered_items(n: usize, raw: &Bytes) -> Vec<Arc<Object>> {
        (0..n)
            .map(|i| {
                Arc::new(Object {
                    key: Arc::from(format!("ns/{i}")),
                    ns_len: 2,
                    uid: "u".into(),
                    resource_version: 1,
                    labels: Box::new([]),
                    fields: Box::new([]),
                    raw: raw.clone(),
                    body_offset: 32,
                    metadata_range: 0..0,
                    proto: Default::default(),
                })
            })
            .collect()
    }

    #[test]
    fn chunks_equal_assembled_list_and_length_is_exact() {
        let info = ResourceInfo::pods();
        let raw = br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a"}}"#;
        let items = numbered_items(5000, &Bytes::from_static(raw));
        let meta = ListMeta { resource_version: 3, ..Default::default() };
        let whole: Vec<u8> = assemble_list(&info, &meta, items.iter()).concat();
        let chunks = ListChunks::new(&info, &meta, items);
        let len = chunks.total_len();
        let parts: Vec<Bytes> = chunks.collect();
        assert!(parts.len() > 1, "a large list is cut into chunks");
        assert_eq!(parts.concat(), whole);
        assert_eq!(len, whole.len());
        assert!(whole.starts_with(br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"3"},"items":[{"metadata":{"name":"a"}},"#));
    }

    /// The list body cache keeps chunks whole: a chunk's buffer must not have doubled for the item that
    /// crossed [`LIST_CHUNK_BYTES`], and an item too big for the room left starts the next chunk.
    #[test]
    fn chunk_buffers_keep_to_their_reserved_size() {
        let info = ResourceInfo::pods();
        let filler = "x".repeat(5000);
        let raw = Bytes::from(format!(
            r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"a"}},"f":"{filler}"}}"#
        ));
        let items = numbered_items(200, &raw);
        let meta = ListMeta { resource_version: 3, ..Default::default() };
        let whole: Vec<u8> = assemble_list(&info, &meta, items.iter()).concat();
        let parts: Vec<Bytes> = ListChunks::new(&info, &meta, items).collect();
        assert_eq!(parts.concat(), whole);
        assert!(parts.len() > 10, "{} chunks", parts.len());
        let last = parts.len() - 1;
        for (i, part) in parts.into_iter().enumerate() {
            let len = part.len();
            // The header's few bytes are in the first chunk's buffer besides the reserved room.
            let capacity = part.try_into_mut().expect("the only handle on its buffer").capacity();
            assert!(capacity <= LIST_CHUNK_BYTES + CHUNK_SLACK + 256, "chunk {i}: {len} bytes in {capacity}");
            // Cut before an item that would not fit, so never far below the chunk size.
            assert!(i == last || len + raw.len() > LIST_CHUNK_BYTES, "chunk {i}: {len} bytes");
        }
    }

    #[test]
    fn metadata_view_slices_the_stored_metadata() {
        let info = ResourceInfo::pods();
        let raw = br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","labels":{"x":"y"}},"spec":{}}"#;
        let start = raw.windows(11).position(|w| w == b"\"metadata\":").unwrap() + 11;
        let end = start + br#"{"name":"a","labels":{"x":"y"}}"#.len();
        let o = Arc::new(Object {
            key: Arc::from("ns/a"),
            ns_len: 2,
            uid: "u".into(),
            resource_version: 1,
            labels: Box::new([]),
            fields: Box::new([]),
            raw: Bytes::from_static(raw),
            body_offset: 32,
            metadata_range: start as u32..end as u32,
            proto: Default::default(),
        });
        let meta = ListMeta { resource_version: 9, ..Default::default() };
        let chunks = ListChunks::with_view(&info, &meta, vec![o.clone(), o], View::Metadata);
        let len = chunks.total_len();
        let body: Vec<u8> = chunks.collect::<Vec<_>>().concat();
        let expected = br#"{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"9"},"items":[{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"a","labels":{"x":"y"}}},{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"a","labels":{"x":"y"}}}]}
"#;
        assert_eq!(String::from_utf8_lossy(&body), String::from_utf8_lossy(expected));
        assert_eq!(len, body.len());

        // No items: the nil `Items` slice of asPartialObjectMetadataList encodes as null.
        let chunks = ListChunks::with_view(&info, &meta, Vec::new(), View::Metadata);
        let len = chunks.total_len();
        let body: Vec<u8> = chunks.collect::<Vec<_>>().concat();
        assert_eq!(
            String::from_utf8_lossy(&body),
            "{\"kind\":\"PartialObjectMetadataList\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{\"resourceVersion\":\"9\"},\"items\":null}\n"
        );
        assert_eq!(len, body.len());
    }

    #[test]
    fn metadata_view_of_unstructured_objects_is_in_object_meta_order() {
        use crate::resource::Gvr;
        let info = ResourceInfo {
            gvr: Gvr::new("example.com", "v1", "widgets"),
            kind: "Widget".into(),
            list_kind: "WidgetList".into(),
            namespaced: false,
            list_items_have_type_meta: true,
        };
        let raw = br#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"labels":{"a":"b"},"name":"w","resourceVersion":"4","uid":"u"},"spec":{}}"#;
        let start = raw.windows(11).position(|w| w == b"\"metadata\":").expect("metadata") + 11;
        let end = start + br#"{"labels":{"a":"b"},"name":"w","resourceVersion":"4","uid":"u"}"#.len();
        let o = Arc::new(Object {
            key: Arc::from("w"),
            ns_len: 0,
            uid: "u".into(),
            resource_version: 4,
            labels: Box::new([]),
            fields: Box::new([]),
            raw: Bytes::from_static(raw),
            body_offset: 1,
            metadata_range: start as u32..end as u32,
            proto: Default::default(),
        });
        assert!(!is_typed(&o));
        let meta = ListMeta { resource_version: 4, ..Default::default() };
        let chunks = ListChunks::with_view(&info, &meta, vec![o], View::Metadata);
        let len = chunks.total_len();
        let body: Vec<u8> = chunks.collect::<Vec<_>>().concat();
        assert_eq!(
            String::from_utf8_lossy(&body),
            "{\"kind\":\"PartialObjectMetadataList\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{\"resourceVersion\":\"4\"},\"items\":[{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{\"name\":\"w\",\"uid\":\"u\",\"resourceVersion\":\"4\",\"labels\":{\"a\":\"b\"}}}]}\n"
        );
        assert_eq!(len, body.len());
    }
}
