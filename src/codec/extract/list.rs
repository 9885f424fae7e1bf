//! List responses: splitting a list into item slices, and giving list items their type meta.

use bytes::{BufMut, Bytes, BytesMut};
use sonic_rs::JsonValueTrait;

use super::{ExtractError, ITERATION, json};

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
        let (key, value) = member.map_err(|_| ExtractError::Internal(ITERATION))?;
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
            let element = element.map_err(|_| ExtractError::Internal(ITERATION))?;
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
