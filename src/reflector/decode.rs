//! Watch events and list pages into stored [`Object`]s, and error Status objects into [`ApiStatus`].
//!
//! Objects are stored as the bytes the upstream sent (copied out of the frame so a long-lived object never
//! pins a whole network buffer), with `kind`/`apiVersion` added to list items that lack them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::resource::ResourceInfo;
use crate::store::{EventType, Object, make_key};

/// The annotation on the bookmark that ends a streaming list's initial events.
pub(crate) const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Why upstream bytes could not be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DecodeError {
    /// The frame is not a JSON watch event: the stream is out of step and must be re-opened.
    #[error("invalid watch frame: {0}")]
    Frame(String),
    /// The event is well formed but its object cannot be stored (no metadata, no name, bad resourceVersion).
    /// The event is skipped; the stream stays usable.
    #[error("unusable object: {0}")]
    Object(String),
    /// A list response that is not a list.
    #[error("invalid list response: {0}")]
    List(String),
}

/// An error the upstream reported as a `metav1.Status` (HTTP error body or watch ERROR event).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ApiStatus {
    pub code: u16,
    pub reason: String,
    pub message: String,
    /// `details.retryAfterSeconds` or the `Retry-After` header.
    pub retry_after: Option<Duration>,
}

/// One decoded watch event.
#[derive(Debug)]
pub(crate) enum WatchEvent {
    Change(EventType, Arc<Object>),
    Bookmark { rv: u64, initial_events_end: bool },
    Error(ApiStatus),
}

/// One decoded list page.
#[derive(Debug)]
pub(crate) struct ListPage {
    pub rv: u64,
    pub continue_token: Option<String>,
    pub items: Vec<Arc<Object>>,
    /// Items that could not be stored (counted as bad frames).
    pub skipped: usize,
    /// Whether the first item carried `kind`/`apiVersion` (`None` for an empty page).
    pub items_have_type_meta: Option<bool>,
}

#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(borrow)]
    object: &'a RawValue,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
struct WithMeta<'a> {
    #[serde(borrow)]
    metadata: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawStatus {
    code: Option<u16>,
    reason: Option<String>,
    message: Option<String>,
    details: Option<StatusDetails>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct StatusDetails {
    retry_after_seconds: Option<u64>,
}

#[derive(Deserialize)]
struct RawList<'a> {
    metadata: Option<ListMeta>,
    #[serde(borrow)]
    items: Option<Vec<&'a RawValue>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListMeta {
    resource_version: Option<String>,
    #[serde(rename = "continue")]
    continue_token: Option<String>,
}

/// Decodes one watch line (without its newline).
pub(crate) fn decode_event(line: &[u8], info: &ResourceInfo) -> Result<WatchEvent, DecodeError> {
    let ev: RawEvent<'_> = serde_json::from_slice(line).map_err(|e| DecodeError::Frame(e.to_string()))?;
    let raw = ev.object.get().as_bytes();
    let kind = match ev.kind {
        "ADDED" => EventType::Added,
        "MODIFIED" => EventType::Modified,
        "DELETED" => EventType::Deleted,
        "BOOKMARK" => return decode_bookmark(raw),
        "ERROR" => return Ok(WatchEvent::Error(decode_status(raw, 500))),
        other => return Err(DecodeError::Frame(format!("unknown event type {other:?}"))),
    };
    let object = object_from_json(Bytes::copy_from_slice(raw), info)?;
    Ok(WatchEvent::Change(kind, Arc::new(object)))
}

fn decode_bookmark(raw: &[u8]) -> Result<WatchEvent, DecodeError> {
    let meta = metadata_of(raw)?.0;
    let rv = parse_rv(meta.resource_version.as_deref())?;
    let initial_events_end =
        meta.annotations.as_ref().and_then(|a| a.get(INITIAL_EVENTS_END)).map(String::as_str) == Some("true");
    Ok(WatchEvent::Bookmark { rv, initial_events_end })
}

/// Reads a Status object; `default_code` when it carries none (the apiserver's InternalError is 500).
pub(crate) fn decode_status(raw: &[u8], default_code: u16) -> ApiStatus {
    let status: RawStatus = serde_json::from_slice(raw).unwrap_or_default();
    ApiStatus {
        code: status.code.unwrap_or(default_code),
        reason: status.reason.unwrap_or_default(),
        message: status.message.unwrap_or_else(|| String::from_utf8_lossy(raw).chars().take(256).collect()),
        retry_after: status.details.and_then(|d| d.retry_after_seconds).map(Duration::from_secs),
    }
}

/// Decodes one list page, adding `kind`/`apiVersion` to items that lack them.
pub(crate) fn decode_list(body: &[u8], info: &ResourceInfo) -> Result<ListPage, DecodeError> {
    let list: RawList<'_> = serde_json::from_slice(body).map_err(|e| DecodeError::List(e.to_string()))?;
    let meta = list.metadata.ok_or_else(|| DecodeError::List("no metadata".into()))?;
    let rv = parse_rv(meta.resource_version.as_deref()).map_err(|e| DecodeError::List(e.to_string()))?;
    let raw_items = list.items.unwrap_or_default();
    let items_have_type_meta = raw_items.first().map(|i| type_meta_end(i.get().as_bytes()) > 1);
    let (kind, api_version) = (info.kind.as_str(), info.api_version());
    let mut items = Vec::with_capacity(raw_items.len());
    let mut skipped = 0;
    for item in raw_items {
        let raw = item.get().as_bytes();
        let bytes = if type_meta_end(raw) > 1 {
            Bytes::copy_from_slice(raw)
        } else {
            with_type_meta(raw, kind, &api_version)
        };
        match object_from_json(bytes, info) {
            Ok(object) => items.push(Arc::new(object)),
            Err(_) => skipped += 1,
        }
    }
    let continue_token = meta.continue_token.filter(|t| !t.is_empty());
    Ok(ListPage { rv, continue_token, items, skipped, items_have_type_meta })
}

/// `{"kind":K,"apiVersion":V,` followed by the item without its opening brace.
pub(crate) fn with_type_meta(item: &[u8], kind: &str, api_version: &str) -> Bytes {
    let head = format!(
        "{{\"kind\":{},\"apiVersion\":{}",
        serde_json::Value::from(kind),
        serde_json::Value::from(api_version)
    );
    let rest = item.strip_prefix(b"{").unwrap_or(item);
    let empty = rest.iter().all(|b| b.is_ascii_whitespace() || *b == b'}');
    let mut out = Vec::with_capacity(head.len() + rest.len() + 1);
    out.extend_from_slice(head.as_bytes());
    if empty {
        out.push(b'}');
    } else {
        out.push(b',');
        out.extend_from_slice(rest);
    }
    Bytes::from(out)
}

/// Builds a stored object from its full JSON (with type meta).
pub(crate) fn object_from_json(raw: Bytes, info: &ResourceInfo) -> Result<Object, DecodeError> {
    let (meta, range) = metadata_of(&raw)?;
    let name =
        meta.name.filter(|n| !n.is_empty()).ok_or_else(|| DecodeError::Object("no metadata.name".into()))?;
    let resource_version = parse_rv(meta.resource_version.as_deref())?;
    let namespace = if info.namespaced { meta.namespace.as_deref() } else { None };
    let (key, ns_len) = make_key(namespace, &name);
    let labels = meta.labels.unwrap_or_default().into_iter().map(|(k, v)| (k.into(), v.into())).collect();
    let fields = extract_fields(&raw, info)?;
    let body_offset = type_meta_end(&raw) as u32;
    Ok(Object {
        key,
        ns_len,
        uid: meta.uid.unwrap_or_default().into(),
        resource_version,
        labels,
        fields,
        raw,
        body_offset,
        metadata_range: range,
    })
}

/// The metadata of an object and its byte range inside `raw`.
fn metadata_of(raw: &[u8]) -> Result<(Meta, std::ops::Range<u32>), DecodeError> {
    let outer: WithMeta<'_> = serde_json::from_slice(raw).map_err(|e| DecodeError::Object(e.to_string()))?;
    let value = outer.metadata.ok_or_else(|| DecodeError::Object("no metadata".into()))?;
    let meta: Meta = serde_json::from_str(value.get()).map_err(|e| DecodeError::Object(e.to_string()))?;
    // The RawValue borrows from `raw`, so its position is a pointer difference.
    let start = value.get().as_ptr() as usize - raw.as_ptr() as usize;
    let range = start as u32..(start + value.get().len()) as u32;
    Ok((meta, range))
}

fn parse_rv(rv: Option<&str>) -> Result<u64, DecodeError> {
    let rv = rv.ok_or_else(|| DecodeError::Object("no metadata.resourceVersion".into()))?;
    rv.parse().map_err(|_| DecodeError::Object(format!("invalid resourceVersion {rv:?}")))
}

/// Values of the kind's field-selector fields (see [`crate::resource::FieldKind::extra_fields`]).
fn extract_fields(raw: &[u8], info: &ResourceInfo) -> Result<Box<[Option<Box<str>>]>, DecodeError> {
    let paths = info.field_kind().extra_fields();
    if paths.is_empty() {
        return Ok(Box::new([]));
    }
    let value: serde_json::Value =
        serde_json::from_slice(raw).map_err(|e| DecodeError::Object(e.to_string()))?;
    Ok(paths
        .iter()
        .map(|path| {
            let found = path.split('.').try_fold(&value, |v, seg| v.get(seg));
            match found {
                Some(serde_json::Value::String(s)) => Some(s.as_str().into()),
                Some(serde_json::Value::Bool(b)) => Some(b.to_string().into()),
                Some(serde_json::Value::Number(n)) => Some(n.to_string().into()),
                _ => None,
            }
        })
        .collect())
}

/// Offset just past leading `"kind":…,"apiVersion":…,` members (either order); 1 when absent.
pub(crate) fn type_meta_end(raw: &[u8]) -> usize {
    fn member(raw: &[u8], at: usize, key: &[u8]) -> Option<usize> {
        let rest = raw.get(at..)?;
        let after_key = rest.strip_prefix(b"\"")?.strip_prefix(key)?.strip_prefix(b"\":\"")?;
        let value_start = raw.len() - after_key.len();
        let mut i = value_start;
        while i < raw.len() {
            match raw[i] {
                b'"' => return Some(i + 1),
                b'\\' => i += 2,
                _ => i += 1,
            }
        }
        None
    }
    let pair = |a: &[u8], b: &[u8]| {
        let first = member(raw, 1, a)?;
        if raw.get(first) != Some(&b',') {
            return None;
        }
        let second = member(raw, first + 1, b)?;
        match raw.get(second) {
            Some(b',') => Some(second + 1),
            Some(b'}') => Some(second),
            _ => None,
        }
    };
    if raw.first() != Some(&b'{') {
        return 1;
    }
    pair(b"kind", b"apiVersion").or_else(|| pair(b"apiVersion", b"kind")).unwrap_or(1)
}
