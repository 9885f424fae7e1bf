//! List responses: splitting a list into item slices, and giving list items their type meta.

use std::borrow::Cow;

use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::{ExtractError, json};

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

/// The envelope of a list response. One serde_json pass validates the body and captures each item as a
/// borrowed raw slice: faster than a validating scan followed by a lazy walk (benches/extract.rs).
#[derive(Deserialize)]
struct ListBody<'a> {
    #[serde(borrow, default)]
    metadata: Option<ListMeta<'a>>,
    /// `None`: no `items` member; `Some(None)`: `"items": null`.
    #[serde(borrow, default, deserialize_with = "present")]
    items: Option<Option<Vec<&'a RawValue>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListMeta<'a> {
    #[serde(borrow, default)]
    resource_version: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "continue")]
    continue_token: Option<Cow<'a, str>>,
    #[serde(default)]
    remaining_item_count: Option<i64>,
}

/// Marks a member as present (with `default`, an absent one stays `None`).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(de: D) -> Result<Option<T>, D::Error> {
    T::deserialize(de).map(Some)
}

/// Splits a list response body into its metadata and item slices, validating the whole body.
pub fn split_list(body: &Bytes) -> Result<ListParts, ExtractError> {
    let text = std::str::from_utf8(body).map_err(|_| ExtractError::InvalidUtf8)?;
    let list: ListBody<'_> = serde_json::from_str(text).map_err(ExtractError::Json)?;
    let metadata = list.metadata.ok_or(ExtractError::MissingMetadata)?;
    let rv = metadata.resource_version.unwrap_or_default();
    let resource_version =
        json::parse_rv(&rv).ok_or_else(|| ExtractError::BadResourceVersion(rv.into_owned()))?;
    let items = list.items.ok_or(ExtractError::MissingItems)?.unwrap_or_default();
    let mut slices = Vec::with_capacity(items.len());
    for item in items {
        let raw = item.get();
        if !raw.starts_with('{') {
            return Err(ExtractError::WrongType("items[]"));
        }
        // The raw value borrows from `body`: its position is a pointer difference.
        let start = (raw.as_ptr() as usize)
            .checked_sub(body.as_ptr() as usize)
            .filter(|s| s + raw.len() <= body.len())
            .ok_or(ExtractError::Internal("item outside body"))?;
        slices.push(body.slice(start..start + raw.len()));
    }
    let items_have_type_meta = slices.first().map(|item| json::starts_with_type_meta(item));
    Ok(ListParts {
        resource_version,
        continue_token: metadata.continue_token.filter(|c| !c.is_empty()).map(Cow::into_owned),
        remaining_item_count: metadata.remaining_item_count,
        items: slices,
        items_have_type_meta,
    })
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
    kache_k8s::json::write_str(&mut out, kind);
    out.put_slice(b",\"apiVersion\":");
    kache_k8s::json::write_str(&mut out, api_version);
    if !empty {
        out.put_u8(b',');
    }
    out.put_slice(rest);
    out.freeze()
}
