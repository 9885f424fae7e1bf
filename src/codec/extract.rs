//! Ingest: the few facts kache needs from the upstream's JSON, read once, without decoding objects.
//!
//! - [`object_from_json`]: one object's bytes → [`Object`] (key, uid, resourceVersion, labels, the kind's
//!   field-selector fields, where the type meta ends and where `metadata` lies).
//! - [`split_list`]: a list response → list metadata plus zero-copy item slices.
//! - [`parse_watch_line`]: one line of a JSON watch stream → event type plus the object slice.
//! - [`with_type_meta`]: a list item without `kind`/`apiVersion` → the full form kept in the store.
//!
//! Everything goes through sonic-rs lazy values: the bytes are validated (syntax and UTF-8) but nothing
//! is decoded except the handful of members read. Every function validates the whole input, so bytes
//! that reach the store are always one well-formed JSON object, whatever the upstream sent (truncated
//! frames and invalid JSON are errors, never panics). serde_json is the oracle of the differential
//! property tests (`tests.rs`).

use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};
use sonic_rs::{JsonValueTrait, LazyValue};

use crate::resource::ResourceInfo;
use crate::store::{EventType, Labels, Object, make_key};

mod fields;
mod json;
#[cfg(test)]
mod tests;

/// The annotation on the bookmark that ends a watch's initial events (`sendInitialEvents=true`).
pub const INITIAL_EVENTS_END_ANNOTATION: &str = "k8s.io/initial-events-end";

/// Why upstream bytes could not be ingested. The reflector counts and logs these; they never reach a
/// client.
#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    /// The bytes are not valid JSON: a syntax error, a truncation, invalid UTF-8.
    #[error("invalid JSON: {0}")]
    Json(#[source] sonic_rs::Error),
    /// Valid JSON, but not an object where one is required.
    #[error("expected a JSON object")]
    NotAnObject,
    /// Something other than whitespace follows the JSON value.
    #[error("unexpected bytes after the JSON value")]
    TrailingBytes,
    /// The object has no `metadata` object.
    #[error("object has no metadata")]
    MissingMetadata,
    /// The object has no (or an empty) `metadata.name`.
    #[error("object has no metadata.name")]
    MissingName,
    /// An object of a namespaced resource has no `metadata.namespace`.
    #[error("object of a namespaced resource has no metadata.namespace")]
    MissingNamespace,
    /// A name or namespace contains `/`, which would break the store's key order (the apiserver's
    /// validation never lets one through).
    #[error("invalid {field} {value:?}")]
    InvalidName { field: &'static str, value: String },
    /// `resourceVersion` is missing or not a decimal number.
    #[error("invalid resourceVersion {0:?}")]
    BadResourceVersion(String),
    /// A member has the wrong JSON type (e.g. a label value that is not a string).
    #[error("{0} has the wrong JSON type")]
    WrongType(&'static str),
    /// A list response without an `items` member.
    #[error("list has no items")]
    MissingItems,
    /// A watch event without `type`.
    #[error("watch event has no type")]
    MissingType,
    /// A watch event whose `type` is not one of ADDED, MODIFIED, DELETED, BOOKMARK, ERROR.
    #[error("unknown watch event type {0:?}")]
    UnknownEventType(String),
    /// A watch event without an `object` object.
    #[error("watch event has no object")]
    MissingObject,
    /// A broken internal invariant of this module (reported, not panicked on, since input drives it).
    #[error("internal extraction error: {0}")]
    Internal(&'static str),
}

/// Extracts an object's stored facts. `raw` must be the full form (with `kind`/`apiVersion`, see
/// [`with_type_meta`]); it is kept as is (no copy) as [`Object::raw`].
pub fn object_from_json(raw: Bytes, info: &ResourceInfo) -> Result<Object, ExtractError> {
    let kind = info.field_kind();
    let buf: &[u8] = &raw;
    let mut metadata: Option<(LazyValue<'_>, Range<usize>)> = None;
    let mut roots = fields::Roots::new(kind);
    let mut type_meta = TypeMetaPrefix::default();
    json::walk_object(buf, |index, key, value, range| {
        type_meta.observe(index, &key, range.end);
        if key == "metadata" {
            metadata = Some((value, range));
        } else {
            roots.offer(&key, value);
        }
        Ok(())
    })?;
    let (metadata, metadata_range) = metadata.ok_or(ExtractError::MissingMetadata)?;
    let meta = Meta::read(&metadata)?;
    let name = meta.name.ok_or(ExtractError::MissingName)?;
    check_name("metadata.name", &name)?;
    let namespace = if info.namespaced {
        let ns = meta.namespace.filter(|ns| !ns.is_empty()).ok_or(ExtractError::MissingNamespace)?;
        check_name("metadata.namespace", &ns)?;
        Some(ns)
    } else {
        None
    };
    let (key, ns_len) = make_key(namespace.as_deref(), &name);
    let fields = fields::extract(kind, &roots);
    let body_offset = type_meta.body_offset(buf);
    Ok(Object {
        key,
        ns_len,
        uid: meta.uid.unwrap_or_default().into_boxed_str(),
        resource_version: meta.resource_version,
        labels: meta.labels,
        fields,
        body_offset: to_u32(body_offset)?,
        metadata_range: to_u32(metadata_range.start)?..to_u32(metadata_range.end)?,
        raw,
    })
}

fn to_u32(n: usize) -> Result<u32, ExtractError> {
    u32::try_from(n).map_err(|_| ExtractError::Internal("object larger than 4 GiB"))
}

fn check_name(field: &'static str, value: &str) -> Result<(), ExtractError> {
    if value.contains('/') {
        return Err(ExtractError::InvalidName { field, value: value.to_owned() });
    }
    Ok(())
}

/// Tracks whether an object's first two members are `kind` and `apiVersion` (either order).
#[derive(Default)]
struct TypeMetaPrefix {
    kind: bool,
    api_version: bool,
    /// End of the second member's value, when the first two members are the type meta.
    end: Option<usize>,
}

// === impl TypeMetaPrefix ===

impl TypeMetaPrefix {
    fn observe(&mut self, index: usize, key: &str, value_end: usize) {
        if index > 1 {
            return;
        }
        match key {
            "kind" => self.kind = true,
            "apiVersion" => self.api_version = true,
            _ => return,
        }
        if index == 1 && self.kind && self.api_version {
            self.end = Some(value_end);
        }
    }

    /// Offset such that `{` + `buf[offset..]` is the object without its leading type meta; 1 when it
    /// does not start with both members.
    fn body_offset(&self, buf: &[u8]) -> usize {
        let Some(end) = self.end else { return 1 };
        let next = json::skip_ws(buf, end);
        // Valid JSON: after a member comes `,` or the closing `}` (kept, giving `{}`).
        if buf.get(next) == Some(&b',') { next + 1 } else { next }
    }
}

/// The members of `metadata` kache keeps.
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: u64,
    labels: Labels,
}

// === impl Meta ===

impl Meta {
    fn read(metadata: &LazyValue<'_>) -> Result<Self, ExtractError> {
        if metadata.is_null() {
            return Err(ExtractError::MissingMetadata);
        }
        let members = metadata.clone().into_object_iter().ok_or(ExtractError::WrongType("metadata"))?;
        let (mut name, mut namespace, mut uid, mut rv, mut labels) = (None, None, None, None, None);
        for member in members {
            let (key, value) = member.map_err(ExtractError::Json)?;
            match &*key {
                "name" => name = json::opt_str(&value, "metadata.name")?.map(str::to_owned),
                "namespace" => namespace = json::opt_str(&value, "metadata.namespace")?.map(str::to_owned),
                "uid" => uid = json::opt_str(&value, "metadata.uid")?.map(str::to_owned),
                "resourceVersion" => {
                    rv = Some(json::opt_str(&value, "metadata.resourceVersion")?.unwrap_or("").to_owned())
                }
                "labels" => labels = Some(read_labels(&value)?),
                _ => {}
            }
        }
        let rv_text = rv.unwrap_or_default();
        let resource_version =
            json::parse_rv(&rv_text).ok_or_else(|| ExtractError::BadResourceVersion(rv_text.clone()))?;
        Ok(Meta {
            name: name.filter(|n| !n.is_empty()),
            namespace,
            uid,
            resource_version,
            labels: labels.unwrap_or_default(),
        })
    }
}

/// `metadata.labels` sorted by key (the last duplicate wins, like Go's decoder); null reads as empty.
fn read_labels(value: &LazyValue<'_>) -> Result<Labels, ExtractError> {
    if value.is_null() {
        return Ok(Box::default());
    }
    let members = value.clone().into_object_iter().ok_or(ExtractError::WrongType("metadata.labels"))?;
    let mut labels = Vec::new();
    for member in members {
        let (key, value) = member.map_err(ExtractError::Json)?;
        let value = json::opt_str(&value, "metadata.labels")?.unwrap_or("");
        labels.push((Box::from(&*key), Box::from(value)));
    }
    // Reverse then stable-sort: among equal keys the last one comes first, and dedup keeps the first.
    labels.reverse();
    labels.sort_by(|a: &(Box<str>, Box<str>), b| a.0.cmp(&b.0));
    labels.dedup_by(|later, kept| later.0 == kept.0);
    Ok(labels.into_boxed_slice())
}

/// A list response taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListParts {
    /// `metadata.resourceVersion`.
    pub resource_version: u64,
    /// `metadata.continue`; `None` when absent or empty (the last page).
    pub continue_token: Option<String>,
    /// `metadata.remainingItemCount`.
    pub remaining_item_count: Option<i64>,
    /// Each item's bytes: slices of the body (no copy).
    pub items: Vec<Bytes>,
    /// Whether items carry `kind`/`apiVersion` (judged on the first item; `None` for an empty list).
    pub items_have_type_meta: Option<bool>,
}

/// Splits a list response body into its metadata and item slices, validating the whole body.
pub fn split_list(body: &Bytes) -> Result<ListParts, ExtractError> {
    let buf: &[u8] = body;
    let mut metadata = None;
    let mut items = None;
    json::walk_object(buf, |_, key, value, _| {
        match &*key {
            "metadata" => metadata = Some(value),
            "items" => items = Some(value),
            _ => {}
        }
        Ok(())
    })?;
    let metadata = metadata.ok_or(ExtractError::MissingMetadata)?;
    let members = metadata.into_object_iter().ok_or(ExtractError::WrongType("metadata"))?;
    let (mut rv, mut continue_token, mut remaining_item_count) = (String::new(), None, None);
    for member in members {
        let (key, value) = member.map_err(ExtractError::Json)?;
        match &*key {
            "resourceVersion" => {
                rv = json::opt_str(&value, "metadata.resourceVersion")?.unwrap_or("").to_owned();
            }
            "continue" => {
                continue_token =
                    json::opt_str(&value, "metadata.continue")?.filter(|c| !c.is_empty()).map(str::to_owned);
            }
            "remainingItemCount" if !value.is_null() => {
                remaining_item_count =
                    Some(value.as_i64().ok_or(ExtractError::WrongType("metadata.remainingItemCount"))?);
            }
            _ => {}
        }
    }
    let resource_version = json::parse_rv(&rv).ok_or(ExtractError::BadResourceVersion(rv))?;
    let items = items.ok_or(ExtractError::MissingItems)?;
    let mut slices = Vec::new();
    if !items.is_null() {
        let elements = items.into_array_iter().ok_or(ExtractError::WrongType("items"))?;
        for element in elements {
            let element = element.map_err(ExtractError::Json)?;
            if !element.is_object() {
                return Err(ExtractError::WrongType("items[]"));
            }
            let range = json::range_in(buf, &element).ok_or(ExtractError::Internal("item outside body"))?;
            slices.push(body.slice(range));
        }
    }
    let items_have_type_meta = slices.first().map(|item| json::starts_with_type_meta(item));
    Ok(ListParts {
        resource_version,
        continue_token,
        remaining_item_count,
        items: slices,
        items_have_type_meta,
    })
}

/// The `type` of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatchEventType {
    Added,
    Modified,
    Deleted,
    /// Progress only: the object carries just `metadata.resourceVersion` (and maybe annotations).
    Bookmark,
    /// The object is a `Status`; the stream ends after it.
    Error,
}

// === impl WatchEventType ===

impl WatchEventType {
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "ADDED" => Self::Added,
            "MODIFIED" => Self::Modified,
            "DELETED" => Self::Deleted,
            "BOOKMARK" => Self::Bookmark,
            "ERROR" => Self::Error,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
            Self::Bookmark => "BOOKMARK",
            Self::Error => "ERROR",
        }
    }

    /// The store change this event is, if it is one.
    pub fn store_event_type(self) -> Option<EventType> {
        match self {
            Self::Added => Some(EventType::Added),
            Self::Modified => Some(EventType::Modified),
            Self::Deleted => Some(EventType::Deleted),
            Self::Bookmark | Self::Error => None,
        }
    }
}

/// One decoded line of a JSON watch stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchFrame {
    pub event_type: WatchEventType,
    /// The event's object: a slice of the line (no copy), validated JSON object.
    pub object: Bytes,
}

/// Decodes one line of a JSON watch stream (`{"type":…,"object":{…}}`, trailing newline allowed).
pub fn parse_watch_line(line: Bytes) -> Result<WatchFrame, ExtractError> {
    let buf: &[u8] = &line;
    let mut event_type = None;
    let mut object = None;
    json::walk_object(buf, |_, key, value, range| {
        match &*key {
            "type" => {
                let text = json::opt_str(&value, "type")?.ok_or(ExtractError::MissingType)?;
                let parsed = WatchEventType::parse(text);
                event_type = Some(parsed.ok_or_else(|| ExtractError::UnknownEventType(text.to_owned()))?);
            }
            "object" => object = Some((value.is_object(), range)),
            _ => {}
        }
        Ok(())
    })?;
    let event_type = event_type.ok_or(ExtractError::MissingType)?;
    let (is_object, range) = object.ok_or(ExtractError::MissingObject)?;
    if !is_object {
        return Err(ExtractError::MissingObject);
    }
    Ok(WatchFrame { event_type, object: line.slice(range) })
}

/// What a BOOKMARK event tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bookmark {
    pub resource_version: u64,
    /// The bookmark carries `k8s.io/initial-events-end: "true"`: the initial events of a streaming list
    /// are complete.
    pub initial_events_end: bool,
}

/// Reads a BOOKMARK event's object (`{"kind":…,"metadata":{"resourceVersion":…,"annotations":…}}`).
pub fn bookmark_from_json(object: &[u8]) -> Result<Bookmark, ExtractError> {
    let mut metadata = None;
    json::walk_object(object, |_, key, value, _| {
        if key == "metadata" {
            metadata = Some(value);
        }
        Ok(())
    })?;
    let metadata = metadata.ok_or(ExtractError::MissingMetadata)?;
    let members = metadata.into_object_iter().ok_or(ExtractError::MissingMetadata)?;
    let (mut rv, mut initial_events_end) = (String::new(), false);
    for member in members {
        let (key, value) = member.map_err(ExtractError::Json)?;
        match &*key {
            "resourceVersion" => {
                rv = json::opt_str(&value, "metadata.resourceVersion")?.unwrap_or("").to_owned();
            }
            "annotations" if value.is_object() => {
                initial_events_end = value
                    .get(INITIAL_EVENTS_END_ANNOTATION)
                    .and_then(|v| v.as_str().map(|s| s == "true"))
                    .unwrap_or(false);
            }
            _ => {}
        }
    }
    let resource_version = json::parse_rv(&rv).ok_or(ExtractError::BadResourceVersion(rv))?;
    Ok(Bookmark { resource_version, initial_events_end })
}

/// The full form of a list item: `item` itself when it starts with `kind`/`apiVersion`, otherwise a copy
/// with `"kind":…,"apiVersion":…,` inserted after the opening brace (as in watch events, where the
/// apiserver writes TypeMeta first). `item` must be a JSON object (as [`split_list`] yields).
pub fn with_type_meta(item: &Bytes, kind: &str, api_version: &str) -> Bytes {
    if json::starts_with_type_meta(item) {
        return item.clone();
    }
    let open = json::skip_ws(item, 0);
    let rest = item.get(open + 1..).unwrap_or_default();
    let empty = rest.get(json::skip_ws(rest, 0)) == Some(&b'}');
    let mut out = BytesMut::with_capacity(item.len() + kind.len() + api_version.len() + 32);
    out.put_slice(b"{\"kind\":");
    put_json_str(&mut out, kind);
    out.put_slice(b",\"apiVersion\":");
    put_json_str(&mut out, api_version);
    if !empty {
        out.put_u8(b',');
    }
    out.put_slice(rest);
    out.freeze()
}

fn put_json_str(out: &mut BytesMut, text: &str) {
    // `&mut BytesMut` is itself a `BufMut`, so its writer appends in place.
    serde_json::to_writer(out.writer(), text).expect("writing a JSON string into memory cannot fail");
}
