//! Ingest: the few facts kache needs from the upstream's JSON, read once, without decoding objects.
//!
//! - [`object_from_json`]: one object's bytes → [`Object`] (key, uid, resourceVersion, labels, the kind's
//!   field-selector fields, where the type meta ends and where `metadata` lies).
//! - [`split_list`]: a list response → list metadata plus zero-copy item slices.
//! - [`parse_watch_line`]: one line of a JSON watch stream → event type plus the object slice.
//! - [`with_type_meta`]: a list item without `kind`/`apiVersion` → the full form kept in the store.
//!
//! Two steps, nothing decoded but the handful of members read:
//! 1. Validate the whole input (UTF-8, JSON grammar, no trailing bytes) with a serde_json scan that
//!    builds nothing, so bytes that reach the store are always one well-formed JSON value, whatever the
//!    upstream sent (truncated frames and invalid JSON are errors, never panics).
//! 2. Pick the members with sonic-rs's lazy, unchecked access (sound because of step 1): for objects one
//!    `get_many` pass with a pointer tree per kind (`plan.rs`), falling back to iterating members.
//!
//! On the baseline x86-64 target this is faster than either library alone (benches/extract.rs):
//! serde_json validates faster than sonic-rs's checked skip, and sonic-rs finds members faster than a
//! serde_json decode. serde_json, decoding everything, is the oracle of the differential property tests
//! (`tests.rs`).

use bytes::Bytes;
use sonic_rs::{JsonValueTrait, LazyValue};

use crate::resource::{FieldKind, ResourceInfo};
use crate::store::{Object, make_key};

mod fields;
mod json;
mod list;
mod meta;
mod plan;
#[cfg(test)]
mod tests;
mod watch;

pub use list::{IngestedList, ListParts, ingest_list, split_list, with_type_meta};
pub use watch::{
    Bookmark, MAX_BOOKMARK_TAIL, WatchEventType, WatchFrame, WatchIngest, bookmark_from_json, bookmark_tail,
    ingest_watch_line, parse_watch_line,
};

/// Iterating validated JSON cannot fail; reported (not panicked on) if it ever did.
const ITERATION: &str = "validated JSON failed to iterate";

/// The annotation on the bookmark that ends a watch's initial events (`sendInitialEvents=true`).
pub const INITIAL_EVENTS_END_ANNOTATION: &str = "k8s.io/initial-events-end";

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
    object_from(raw, info, Validity::Unknown)
}

/// Whether bytes handed to [`object_from`] are already known to be valid JSON.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Validity {
    Unknown,
    /// Validated as part of a larger document (a list body, a watch line) and at most transformed by
    /// [`with_type_meta`], which keeps JSON valid. Only this module constructs it.
    Valid,
}

fn object_from(raw: Bytes, info: &ResourceInfo, validity: Validity) -> Result<Object, ExtractError> {
    let kind = info.field_kind();
    let buf: &[u8] = &raw;
    let text = match validity {
        Validity::Unknown => json::validate(buf)?,
        // Still checked: cheap, and the unchecked lookups below need `str`.
        Validity::Valid => std::str::from_utf8(buf).map_err(|_| ExtractError::InvalidUtf8)?,
    };
    if buf.get(json::skip_ws(buf, 0)) != Some(&b'{') {
        return Err(ExtractError::NotAnObject);
    }
    let (metadata, meta, fields) = match plan::find(text, kind) {
        Some(found) => (found.metadata, found.meta, found.fields),
        None => general_path(buf, kind)?,
    };
    let metadata = metadata.ok_or(ExtractError::MissingMetadata)?;
    let metadata_range =
        json::range_in(buf, &metadata).ok_or(ExtractError::Internal("metadata outside its input"))?;
    let meta = meta.decode()?;
    let name = meta.name.ok_or(ExtractError::MissingName)?;
    meta::check_name("metadata.name", name)?;
    let namespace = if info.namespaced {
        let ns = meta.namespace.filter(|ns| !ns.is_empty()).ok_or(ExtractError::MissingNamespace)?;
        meta::check_name("metadata.namespace", ns)?;
        Some(ns)
    } else {
        None
    };
    let (key, ns_len) = make_key(namespace, name);
    let fields = fields::render(kind, &fields);
    let body_offset = json::type_meta_end(buf).unwrap_or(1);
    Ok(Object {
        key,
        ns_len,
        uid: Box::from(meta.uid.unwrap_or_default()),
        resource_version: meta.resource_version,
        labels: meta.labels,
        fields,
        body_offset: to_u32(body_offset)?,
        metadata_range: to_u32(metadata_range.start)?..to_u32(metadata_range.end)?,
        raw,
    })
}

type Parts<'a> = (Option<LazyValue<'a>>, meta::MetaValues<'a>, fields::FieldValues<'a>);

/// The general path: iterate the object's members (when a lookup path crosses an empty object or a
/// non-object, which the one-pass lookup reports as an error).
fn general_path(buf: &[u8], kind: FieldKind) -> Result<Parts<'_>, ExtractError> {
    let mut metadata = None;
    let mut roots = fields::Roots::new(kind);
    json::walk_object(buf, |_, key, value, _| {
        if key == "metadata" {
            metadata = Some(value);
        } else {
            roots.offer(&key, value);
        }
        Ok(())
    })?;
    let meta = match &metadata {
        Some(m) if !m.is_null() => meta::MetaValues::read(m)?,
        _ => return Err(ExtractError::MissingMetadata),
    };
    Ok((metadata, meta, roots.values()))
}

fn to_u32(n: usize) -> Result<u32, ExtractError> {
    u32::try_from(n).map_err(|_| ExtractError::Internal("object larger than 4 GiB"))
}
