//! Watch event framing: `{"type":…,"object":…}\n` lines built from stored object bytes.
//!
//! The shared frame of a store event is built once ([`shared_frame`], cached in `Event::json_frame`) and the
//! same `Bytes` goes to every watcher. Frames that differ per watcher (a selector transition, the
//! PartialObjectMetadata view, initial events) are built here too, always by copying stored bytes: objects
//! are never decoded.

use crate::codec::meta_view::{skip_string, skip_value, skip_ws};
use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};

use crate::store::{Event, EventType, Object};

/// The watch event types kache emits (ERROR frames are built by `codec::status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameType {
    Added,
    Modified,
    Deleted,
    Bookmark,
}

impl FrameType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
            Self::Bookmark => "BOOKMARK",
        }
    }
}

impl From<EventType> for FrameType {
    fn from(kind: EventType) -> Self {
        match kind {
            EventType::Added => Self::Added,
            EventType::Modified => Self::Modified,
            EventType::Deleted => Self::Deleted,
        }
    }
}

/// `{"type":"`
const FRAME_HEAD: &[u8] = b"{\"type\":\"";
/// `","object":`
const FRAME_MID: &[u8] = b"\",\"object\":";
/// `}` and the newline that separates JSON watch events.
const FRAME_TAIL: &[u8] = b"}\n";
/// Bytes a frame adds around its object (the longest type name is `BOOKMARK`/`MODIFIED`).
const FRAME_OVERHEAD: usize = FRAME_HEAD.len() + 8 + FRAME_MID.len() + FRAME_TAIL.len();
/// The type meta of the PartialObjectMetadata view (`meta.k8s.io/v1`).
const PARTIAL_HEAD: &[u8] =
    b"{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":";

/// How a watcher wants objects rendered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum WatchView {
    /// The full object as the upstream sent it.
    #[default]
    Full,
    /// `Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`: only type meta and metadata.
    PartialObjectMetadata,
    /// `as=Table` (`kubectl get -w`): each event's object is a one-row Table, with the column definitions
    /// in the watcher's first event only (`watchEmbeddedEncoder`'s `NoHeaders`). Built per watcher.
    Table(crate::codec::table::TableView),
}

/// Appends one event line to `out`.
pub fn put_frame(out: &mut BytesMut, kind: FrameType, object: &[u8]) {
    out.reserve(object.len() + FRAME_OVERHEAD);
    out.put_slice(FRAME_HEAD);
    out.put_slice(kind.as_str().as_bytes());
    out.put_slice(FRAME_MID);
    out.put_slice(object);
    out.put_slice(FRAME_TAIL);
}

/// One event line around `object`.
pub fn frame(kind: FrameType, object: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(object.len() + FRAME_OVERHEAD);
    put_frame(&mut out, kind, object);
    out.freeze()
}

/// The event's full-view frame, built once and shared by every watcher that sends the event unchanged.
pub(crate) fn shared_frame(event: &Event) -> Bytes {
    event.json_frame.get_or_init(|| frame(event.kind.into(), &event.object.raw)).clone()
}

/// Appends the event line for `object` in `view` (initial events and per-watcher frames).
pub(crate) fn put_object_frame(out: &mut BytesMut, kind: FrameType, object: &Object, view: WatchView) {
    match view {
        WatchView::Full => put_frame(out, kind, &object.raw),
        WatchView::PartialObjectMetadata => {
            let typed = crate::codec::list::is_typed(object);
            put_frame(out, kind, &partial_metadata(&object.raw, metadata_of(object), typed))
        }
        WatchView::Table(table) => put_table_frame(out, kind, &table, object, false),
    }
}

/// Appends the event line of `object` as a one-row Table (`headers`: with the column definitions).
pub(crate) fn put_table_frame(
    out: &mut BytesMut,
    kind: FrameType,
    table: &crate::codec::table::TableView,
    object: &Object,
    headers: bool,
) {
    let meta =
        crate::codec::list::ListMeta { resource_version: object.resource_version, ..Default::default() };
    let mut t = table.header(&meta, headers);
    table.put_row(&mut t, object, crate::codec::table::age::now_ms());
    t.put_slice(b"]}");
    put_frame(out, kind, &t);
}

/// The DELETED line of an object leaving a selector, as a one-row Table (see [`departure_frame`]).
pub(crate) fn table_departure_frame(
    prev: &Object,
    rv: u64,
    table: &crate::codec::table::TableView,
    headers: bool,
) -> Bytes {
    let raw = match metadata_of(prev) {
        Some(range) => rewrite_resource_version(&prev.raw, range, rv),
        None => prev.raw.to_vec(),
    };
    let metadata = top_level_member(&raw, b"metadata").map(|r| &raw[r]);
    let meta = crate::codec::list::ListMeta { resource_version: rv, ..Default::default() };
    let mut t = table.header(&meta, headers);
    let typed = crate::codec::list::is_typed(prev);
    table.put_row_uncached(&mut t, &raw, metadata, typed, crate::codec::table::age::now_ms());
    t.put_slice(b"]}");
    frame(FrameType::Deleted, &t)
}

/// The event line for `object` in `view`.
pub(crate) fn object_frame(kind: FrameType, object: &Object, view: WatchView) -> Bytes {
    let mut out = BytesMut::new();
    put_object_frame(&mut out, kind, object, view);
    out.freeze()
}

/// The DELETED line a selector watcher gets when an object leaves its selection through an update: the
/// *previous* object with `metadata.resourceVersion` rewritten to the event's RV (`cache_watcher.go`
/// `convertToWatchEvent`, `RunTestWatchDeleteEventObjectHaveLatestRV`).
pub(crate) fn departure_frame(prev: &Object, rv: u64, view: WatchView) -> Bytes {
    let metadata = metadata_of(prev);
    let raw = match &metadata {
        Some(range) => rewrite_resource_version(&prev.raw, range.clone(), rv),
        None => prev.raw.to_vec(),
    };
    match view {
        WatchView::Full => frame(FrameType::Deleted, &raw),
        WatchView::PartialObjectMetadata => {
            let metadata = top_level_member(&raw, b"metadata");
            frame(FrameType::Deleted, &partial_metadata(&raw, metadata, crate::codec::list::is_typed(prev)))
        }
        WatchView::Table(table) => table_departure_frame(prev, rv, &table, false),
    }
}

/// `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":…}` from an object's bytes.
/// `typed`: the object is a built-in's (its metadata is already in `ObjectMeta` order).
fn partial_metadata(raw: &[u8], metadata: Option<Range<usize>>, typed: bool) -> Vec<u8> {
    let meta: &[u8] = match metadata {
        Some(range) => &raw[range],
        None => b"{}",
    };
    let mut out = Vec::with_capacity(PARTIAL_HEAD.len() + meta.len() + 1);
    out.extend_from_slice(PARTIAL_HEAD);
    // Custom resources' metadata members are permuted into `ObjectMeta` order (as the apiserver re-encodes it).
    out.extend_from_slice(&crate::codec::meta_view::view_metadata(meta, typed));
    out.push(b'}');
    out
}

/// The byte range of the object's `metadata` value: the one recorded at ingest when it is a valid object
/// span of `raw`, otherwise found by scanning.
fn metadata_of(object: &Object) -> Option<Range<usize>> {
    let range = object.metadata_range.start as usize..object.metadata_range.end as usize;
    let recorded =
        object.raw.get(range.clone()).filter(|m| m.first() == Some(&b'{') && m.last() == Some(&b'}'));
    match recorded {
        Some(_) => Some(range),
        None => top_level_member(&object.raw, b"metadata"),
    }
}

/// Returns `raw` with the `resourceVersion` member of the metadata object at `metadata` set to `rv`
/// (inserted first when absent). `metadata` must be the range of a JSON object inside `raw`.
pub(crate) fn rewrite_resource_version(raw: &[u8], metadata: Range<usize>, rv: u64) -> Vec<u8> {
    let value = format!("\"{rv}\"");
    let meta = &raw[metadata.clone()];
    let mut out = Vec::with_capacity(raw.len() + value.len() + 20);
    match top_level_member(meta, b"resourceVersion") {
        Some(found) => {
            let at = metadata.start + found.start;
            let end = metadata.start + found.end;
            out.extend_from_slice(&raw[..at]);
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(&raw[end..]);
        }
        None => {
            // Insert right after the opening brace (the metadata range starts with `{`).
            let open = metadata.start + 1;
            let empty = meta[1..].iter().all(|b| b.is_ascii_whitespace() || *b == b'}');
            out.extend_from_slice(&raw[..open]);
            out.extend_from_slice(b"\"resourceVersion\":");
            out.extend_from_slice(value.as_bytes());
            if !empty {
                out.push(b',');
            }
            out.extend_from_slice(&raw[open..]);
        }
    }
    out
}

/// Finds the value of member `key` of the JSON object `obj` (top level only), as a byte range of `obj`.
///
/// A small scanner, not a parser: it trusts that `obj` is valid JSON (stored objects were checked at
/// ingest) and never panics on anything else; keys are compared as raw bytes, without unescaping.
pub(crate) fn top_level_member(obj: &[u8], key: &[u8]) -> Option<Range<usize>> {
    let mut i = skip_ws(obj, 0);
    if obj.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = skip_ws(obj, i);
        match obj.get(i)? {
            b'}' => return None,
            b',' => {
                i += 1;
                continue;
            }
            b'"' => {}
            _ => return None,
        }
        let key_end = skip_string(obj, i)?;
        let name = &obj[i + 1..key_end - 1];
        i = skip_ws(obj, key_end);
        if obj.get(i) != Some(&b':') {
            return None;
        }
        let start = skip_ws(obj, i + 1);
        let end = skip_value(obj, start)?;
        if name == key {
            return Some(start..end);
        }
        i = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    #[test]
    fn frame_wraps_object() {
        let f = frame(FrameType::Added, br#"{"kind":"Pod"}"#);
        assert_eq!(&f[..], b"{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\"}}\n");
    }

    #[test]
    fn member_lookup_skips_nested_and_strings() {
        let obj =
            br#"{"a":{"resourceVersion":"1"},"s":"x\"}","metadata":{"name":"n","resourceVersion":"7"}}"#;
        let m = top_level_member(obj, b"metadata").expect("metadata");
        assert_eq!(&obj[m.clone()], br#"{"name":"n","resourceVersion":"7"}"#);
        let rv = top_level_member(&obj[m.clone()], b"resourceVersion").expect("rv");
        assert_eq!(&obj[m.start + rv.start..m.start + rv.end], b"\"7\"");
        assert_eq!(top_level_member(obj, b"missing"), None);
    }

    #[test]
    fn rewrite_replaces_only_the_metadata_member() {
        let raw = br#"{"kind":"Pod","metadata":{"annotations":{"resourceVersion":"x"},"resourceVersion":"5"},"spec":{}}"#;
        let m = top_level_member(raw, b"metadata").expect("metadata");
        let out = rewrite_resource_version(raw, m, 9);
        assert_eq!(
            out,
            br#"{"kind":"Pod","metadata":{"annotations":{"resourceVersion":"x"},"resourceVersion":"9"},"spec":{}}"#
        );
    }

    #[test]
    fn rewrite_inserts_when_absent() {
        let raw = br#"{"metadata":{},"x":1}"#;
        let out = rewrite_resource_version(raw, top_level_member(raw, b"metadata").expect("m"), 3);
        assert_eq!(out, br#"{"metadata":{"resourceVersion":"3"},"x":1}"#);
        let raw = br#"{"metadata":{"name":"a"}}"#;
        let out = rewrite_resource_version(raw, top_level_member(raw, b"metadata").expect("m"), 3);
        assert_eq!(out, br#"{"metadata":{"resourceVersion":"3","name":"a"}}"#);
    }

    #[test]
    fn scanner_never_panics_on_garbage() {
        for input in
            [&b""[..], b"{", b"{\"", b"{\"a\"", b"{\"a\":", b"{\"a\":[", b"{\"a\":\"\\", b"}", b"{,,}"]
        {
            let _ = top_level_member(input, b"a");
        }
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(|n| json!(n)),
            "[a-zA-Z0-9 \"\\\\{}\\[\\],:/]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-zA-Z\"{}:]{0,6}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Rewriting the RV of any object changes exactly `metadata.resourceVersion`.
        #[test]
        fn rewrite_sets_exactly_the_rv(
            meta in prop::collection::btree_map("[a-zA-Z\"{}]{0,6}", json_value(), 0..4),
            rest in prop::collection::btree_map("[a-z]{1,6}", json_value(), 0..4),
            rv in any::<u64>(),
        ) {
            let mut object = serde_json::Map::new();
            for (k, v) in rest {
                if k != "metadata" {
                    object.insert(k, v);
                }
            }
            object.insert("metadata".into(), Value::Object(meta.into_iter().collect()));
            let raw = serde_json::to_vec(&Value::Object(object.clone())).expect("serialise");
            let range = top_level_member(&raw, b"metadata").expect("metadata present");
            let out = rewrite_resource_version(&raw, range, rv);
            let parsed: Value = serde_json::from_slice(&out).expect("still valid JSON");
            let mut expected = object;
            expected["metadata"]["resourceVersion"] = Value::String(rv.to_string());
            prop_assert_eq!(parsed, Value::Object(expected));
        }

        #[test]
        fn scanner_total_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            let _ = top_level_member(&bytes, b"metadata");
        }
    }
}
