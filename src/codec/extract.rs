//! Ingest: the few facts kache needs from the upstream's JSON, read once, without decoding objects.
//!
//! - [`object_from_json`]: one object's bytes → [`Object`] (key, uid, resourceVersion, labels, the kind's
//!   field-selector fields, where the type meta ends and where `metadata` lies).
//! - [`split_list`]: a list response → list metadata plus zero-copy item slices.
//! - [`parse_watch_line`]: one line of a JSON watch stream → event type plus the object slice.
//! - [`with_type_meta`]: a list item without `kind`/`apiVersion` → the full form kept in the store.
//!
//! One serde_json pass per object validates all of it (UTF-8, grammar, no trailing bytes) and keeps only
//! what kache reads as borrowed raw values: `metadata` (whose few members a second, small pass reads) and
//! the members the kind's field-selector fields start from; everything else is skipped. Nothing is
//! decoded but the handful of members read, nothing is copied, and there is no `unsafe`. serde_json,
//! decoding everything, is the oracle of the differential property tests (`tests.rs`).

use bytes::Bytes;

use crate::resource::ResourceInfo;
use crate::store::{Object, make_key};

mod fields;
mod json;
mod list;
mod meta;
#[cfg(test)]
mod tests;
mod watch;

pub use json::value_at;
pub use list::{ListParts, split_list, with_type_meta};
pub use watch::{
    Bookmark, MAX_BOOKMARK_TAIL, WatchEventType, WatchFrame, bookmark_from_json, bookmark_tail,
    parse_watch_line,
};

/// The annotation on the bookmark that ends a watch's initial events (`sendInitialEvents=true`).
pub(crate) const INITIAL_EVENTS_END_ANNOTATION: &str = "k8s.io/initial-events-end";

/// Why upstream bytes could not be ingested. The reflector counts and logs these; they never reach a
/// client.
#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    /// The bytes are not valid JSON: a syntax error, a truncation.
    #[error("invalid JSON: {0}")]
    Json(#[source] serde_json::Error),
    /// The bytes are not valid UTF-8.
    #[error("invalid UTF-8")]
    InvalidUtf8,
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
    // UTF-8 first: serde_json does not check the UTF-8 of strings it only skips.
    let text = std::str::from_utf8(buf).map_err(|_| ExtractError::InvalidUtf8)?;
    let scan = fields::scan(text, kind)?;
    let metadata = match scan.metadata {
        Some(Some(fields::MaybeMembers(Some(members)))) => members,
        // Go decodes null as absent.
        Some(None) | None => return Err(ExtractError::MissingMetadata),
        Some(Some(fields::MaybeMembers(None))) => return Err(ExtractError::WrongType("metadata")),
    };
    let metadata_range = match json::object_range(buf, &metadata) {
        Some(range) => range,
        // Rare (an escaped first key, or no members): find `metadata` again, as a raw value.
        None => metadata_raw_range(text, buf)?,
    };
    let meta = meta::MetaValues::from_members(&metadata).decode()?;
    let name = meta.name.ok_or(ExtractError::MissingName)?;
    meta::check_name("metadata.name", &name)?;
    let namespace = if info.namespaced {
        let ns = meta.namespace.filter(|ns| !ns.is_empty()).ok_or(ExtractError::MissingNamespace)?;
        meta::check_name("metadata.namespace", &ns)?;
        Some(ns)
    } else {
        None
    };
    let (key, ns_len) = make_key(namespace.as_deref(), &name);
    let fields = fields::render(kind, &scan.fields);
    let body_offset = json::type_meta_end(buf).unwrap_or(1);
    Ok(Object {
        key,
        ns_len,
        uid: Box::from(meta.uid.as_deref().unwrap_or_default()),
        resource_version: meta.resource_version,
        labels: meta.labels,
        fields,
        body_offset: to_u32(body_offset)?,
        metadata_range: to_u32(metadata_range.start)?..to_u32(metadata_range.end)?,
        proto: Default::default(),
        raw,
    })
}

/// The range of the object's last `metadata` member, by a second pass over its members.
fn metadata_raw_range(text: &str, buf: &[u8]) -> Result<std::ops::Range<usize>, ExtractError> {
    let members = json::members(text)?.ok_or(ExtractError::NotAnObject)?;
    let (_, metadata) =
        members.iter().rev().find(|(k, _)| k == "metadata").ok_or(ExtractError::MissingMetadata)?;
    json::range_in(buf, metadata).ok_or(ExtractError::Internal("metadata outside its input"))
}

fn to_u32(n: usize) -> Result<u32, ExtractError> {
    u32::try_from(n).map_err(|_| ExtractError::Internal("object larger than 4 GiB"))
}
