//! Watch events and list pages into stored [`Object`]s (through [`crate::codec::extract`]), and error Status
//! objects into [`ApiStatus`].
//!
//! Objects are stored as the bytes the upstream sent (copied out of the frame so a long-lived object never
//! pins a whole network buffer), with `kind`/`apiVersion` added to list items that lack them.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;

use crate::codec::extract::{self, ExtractError, WatchEventType};
use crate::resource::ResourceInfo;
use crate::store::{EventType, Object};

/// Why upstream bytes could not be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DecodeError {
    /// The frame is not a JSON watch event: the stream is out of step and must be re-opened.
    #[error("invalid watch frame: {0}")]
    Frame(#[source] ExtractError),
    /// The event is well formed but its object cannot be stored (no metadata, no name, bad resourceVersion).
    /// The event is skipped; the stream stays usable.
    #[error("unusable object: {0}")]
    Object(#[source] ExtractError),
    /// A list response that is not a list.
    #[error("invalid list response: {0}")]
    List(#[source] ExtractError),
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
    /// `tail`: what follows `metadata` in the upstream's bookmark object (see `extract::bookmark_tail`).
    Bookmark {
        rv: u64,
        initial_events_end: bool,
        tail: Option<Bytes>,
    },
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

/// Decodes one watch line (without its newline).
pub(crate) fn decode_event(line: Bytes, info: &ResourceInfo) -> Result<WatchEvent, DecodeError> {
    let frame = extract::parse_watch_line(line).map_err(DecodeError::Frame)?;
    let kind = match frame.event_type {
        WatchEventType::Added => EventType::Added,
        WatchEventType::Modified => EventType::Modified,
        WatchEventType::Deleted => EventType::Deleted,
        WatchEventType::Bookmark => {
            let bookmark = extract::bookmark_from_json(&frame.object).map_err(DecodeError::Object)?;
            return Ok(WatchEvent::Bookmark {
                rv: bookmark.resource_version,
                initial_events_end: bookmark.initial_events_end,
                tail: extract::bookmark_tail(&frame.object),
            });
        }
        WatchEventType::Error => return Ok(WatchEvent::Error(decode_status(&frame.object, 500))),
    };
    // A copy: the object outlives the network buffer it arrived in.
    let raw = Bytes::copy_from_slice(&frame.object);
    let object = extract::object_from_json(raw, info).map_err(DecodeError::Object)?;
    Ok(WatchEvent::Change(kind, Arc::new(object)))
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
pub(crate) fn decode_list(body: &Bytes, info: &ResourceInfo) -> Result<ListPage, DecodeError> {
    let parts = extract::split_list(body).map_err(DecodeError::List)?;
    let api_version = info.api_version();
    let mut items = Vec::with_capacity(parts.items.len());
    let mut skipped = 0;
    for item in &parts.items {
        let full = extract::with_type_meta(item, &info.kind, &api_version);
        // A copy when the item was already complete (a slice of the page): objects must not pin the page.
        let raw = if full.as_ptr() == item.as_ptr() { Bytes::copy_from_slice(&full) } else { full };
        match extract::object_from_json(raw, info) {
            Ok(object) => items.push(Arc::new(object)),
            Err(_) => skipped += 1,
        }
    }
    Ok(ListPage {
        rv: parts.resource_version,
        continue_token: parts.continue_token,
        items,
        skipped,
        items_have_type_meta: parts.items_have_type_meta,
    })
}

#[cfg(test)]
mod tests;
