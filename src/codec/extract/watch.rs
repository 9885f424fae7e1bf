//! Watch streams: one JSON line → event type and object; bookmarks.

use std::borrow::Cow;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{ExtractError, INITIAL_EVENTS_END_ANNOTATION, json};
use crate::store::EventType;

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
    let text = std::str::from_utf8(&line).map_err(|_| ExtractError::InvalidUtf8)?;
    // One serde_json pass validates the line and captures the object as a borrowed raw slice.
    let frame: Frame<'_> = serde_json::from_str(text).map_err(ExtractError::Json)?;
    let kind = frame.kind.ok_or(ExtractError::MissingType)?;
    let event_type =
        WatchEventType::parse(&kind).ok_or_else(|| ExtractError::UnknownEventType(kind.into_owned()))?;
    let object =
        frame.object.map(RawValue::get).filter(|o| o.starts_with('{')).ok_or(ExtractError::MissingObject)?;
    let start = (object.as_ptr() as usize)
        .checked_sub(line.as_ptr() as usize)
        .filter(|s| s + object.len() <= line.len())
        .ok_or(ExtractError::Internal("object outside line"))?;
    Ok(WatchFrame { event_type, object: line.slice(start..start + object.len()) })
}

#[derive(Deserialize)]
struct Frame<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    object: Option<&'a RawValue>,
}

/// What a BOOKMARK event tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bookmark {
    pub resource_version: u64,
    /// The bookmark carries `k8s.io/initial-events-end: "true"`: the initial events of a streaming list
    /// are complete.
    pub initial_events_end: bool,
}

/// Longest BOOKMARK tail kache learns from an upstream (a kind's zero value is a few hundred bytes; more
/// is not a zero value, and is not kept).
pub const MAX_BOOKMARK_TAIL: usize = 4096;

/// What follows `metadata` in a typed BOOKMARK object (`{"kind":…,"apiVersion":…,"metadata":{…},"spec":{},
/// "status":{}}` → `,"spec":{},"status":{}`), for kache's own bookmarks of the same kind. `None` for
/// objects whose first members are not `kind`, `apiVersion`, `metadata` (unstructured objects sort their
/// keys; kache builds those itself), for tails over [`MAX_BOOKMARK_TAIL`], and for anything malformed.
/// The object must be valid JSON (the watch line was validated whole), so the tail is a run of members.
pub fn bookmark_tail(object: &[u8]) -> Option<Bytes> {
    let text = std::str::from_utf8(object).ok()?;
    let members = json::members(text).ok()??;
    let keys: Vec<&str> = members.iter().take(3).map(|(k, _)| &**k).collect();
    if keys != ["kind", "apiVersion", "metadata"] {
        return None;
    }
    // The last `metadata` member is the one a decoder keeps.
    let metadata = members.iter().rev().find(|(k, _)| k == "metadata").map(|(_, v)| *v)?;
    let metadata_end = json::range_in(object, metadata)?.end;
    let end = object.iter().rposition(|b| *b == b'}')?;
    let tail = object.get(metadata_end..end)?;
    let tail = trim_json_ws(tail);
    if tail.len() > MAX_BOOKMARK_TAIL || !(tail.is_empty() || tail.starts_with(b",")) {
        return None;
    }
    Some(Bytes::copy_from_slice(tail))
}

fn trim_json_ws(mut b: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = b {
        if !json::is_ws(*first) {
            break;
        }
        b = rest;
    }
    while let [rest @ .., last] = b {
        if !json::is_ws(*last) {
            break;
        }
        b = rest;
    }
    b
}

/// Reads a BOOKMARK event's object (`{"kind":…,"metadata":{"resourceVersion":…,"annotations":…}}`).
pub fn bookmark_from_json(object: &[u8]) -> Result<Bookmark, ExtractError> {
    let text = std::str::from_utf8(object).map_err(|_| ExtractError::InvalidUtf8)?;
    let members = json::members(text)?.ok_or(ExtractError::NotAnObject)?;
    let metadata = members.iter().rev().find(|(k, _)| k == "metadata").map(|(_, v)| *v);
    let metadata = metadata.ok_or(ExtractError::MissingMetadata)?;
    let members = json::members(metadata.get())?.ok_or(ExtractError::MissingMetadata)?;
    let (mut rv, mut initial_events_end) = (String::new(), false);
    for (key, value) in members {
        match &*key {
            "resourceVersion" => {
                rv = json::opt_str(value, "metadata.resourceVersion")?.unwrap_or_default().into_owned();
            }
            "annotations" => {
                if let Some(annotations) = json::members(value.get())? {
                    initial_events_end = annotations
                        .iter()
                        .rev()
                        .find(|(k, _)| k == INITIAL_EVENTS_END_ANNOTATION)
                        .and_then(|(_, v)| json::opt_str(v, "").ok().flatten())
                        .is_some_and(|v| v == "true");
                }
            }
            _ => {}
        }
    }
    let resource_version = json::parse_rv(&rv).ok_or(ExtractError::BadResourceVersion(rv))?;
    Ok(Bookmark { resource_version, initial_events_end })
}
