//! The `metadata` of a `PartialObjectMetadata`, from an object's stored metadata bytes.
//!
//! The apiserver builds the view with `meta.AsPartialObjectMetadata`: a typed `ObjectMeta` re-encoded, so
//! its members come in struct order, and so do those of each `ownerReferences` and `managedFields` entry.
//! Built-in objects are stored in that order already and their bytes are copied as they are. Custom
//! resources are unstructured (Go marshals their maps with sorted keys), so their members are permuted here
//! — by moving the stored byte spans of each member, never by decoding values.

use std::borrow::Cow;
use std::ops::Range;

/// `ObjectMeta` field order (`k8s.io/apimachinery/pkg/apis/meta/v1/types.go`).
const OBJECT_META_ORDER: &[&[u8]] = &[
    b"name",
    b"generateName",
    b"namespace",
    b"selfLink",
    b"uid",
    b"resourceVersion",
    b"generation",
    b"creationTimestamp",
    b"deletionTimestamp",
    b"deletionGracePeriodSeconds",
    b"labels",
    b"annotations",
    b"ownerReferences",
    b"finalizers",
    b"managedFields",
];
/// `OwnerReference` field order.
const OWNER_REFERENCE_ORDER: &[&[u8]] =
    &[b"apiVersion", b"kind", b"name", b"uid", b"controller", b"blockOwnerDeletion"];
/// `ManagedFieldsEntry` field order.
const MANAGED_FIELDS_ORDER: &[&[u8]] =
    &[b"manager", b"operation", b"apiVersion", b"time", b"fieldsType", b"fieldsV1", b"subresource"];

/// The metadata of the view in struct order: `None` when `meta` already is (copy it as is), else the
/// permuted bytes. Input that is not a JSON object is left alone (`None`).
pub fn canonical(meta: &[u8]) -> Option<Vec<u8>> {
    canonical_object(meta, OBJECT_META_ORDER, |key| match key {
        b"ownerReferences" => Some(OWNER_REFERENCE_ORDER),
        b"managedFields" => Some(MANAGED_FIELDS_ORDER),
        _ => None,
    })
}

/// Length of the view's metadata.
pub(crate) fn canonical_len(meta: &[u8]) -> usize {
    canonical(meta).map_or(meta.len(), |v| v.len())
}

/// The view's metadata for an object stored as `typed` (built-in: `kind` and `apiVersion` lead its bytes, its
/// metadata is a typed `ObjectMeta` already in struct order, copied without a scan) or unstructured.
pub(crate) fn view_metadata(meta: &[u8], typed: bool) -> Cow<'_, [u8]> {
    if typed {
        return Cow::Borrowed(meta);
    }
    match canonical(meta) {
        Some(ordered) => Cow::Owned(ordered),
        None => Cow::Borrowed(meta),
    }
}

/// One `"key":value` member: the key's bytes (without quotes) and the value's range.
struct Member {
    key: Range<usize>,
    value: Range<usize>,
}

fn canonical_object(
    obj: &[u8],
    order: &[&[u8]],
    nested: impl Fn(&[u8]) -> Option<&'static [&'static [u8]]>,
) -> Option<Vec<u8>> {
    let members = members(obj)?;
    let rank = |m: &Member| order.iter().position(|k| *k == &obj[m.key.clone()]).unwrap_or(order.len());
    let inner: Vec<Option<Vec<u8>>> = members
        .iter()
        .map(|m| nested(&obj[m.key.clone()]).and_then(|o| canonical_array(&obj[m.value.clone()], o)))
        .collect();
    let sorted = members.windows(2).all(|w| rank(&w[0]) <= rank(&w[1]));
    if sorted && inner.iter().all(Option::is_none) {
        return None;
    }
    let mut idx: Vec<usize> = (0..members.len()).collect();
    idx.sort_by_key(|&i| rank(&members[i]));
    let mut out = Vec::with_capacity(obj.len());
    out.push(b'{');
    for (n, &i) in idx.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        let m = &members[i];
        out.push(b'"');
        out.extend_from_slice(&obj[m.key.clone()]);
        out.extend_from_slice(b"\":");
        match &inner[i] {
            Some(v) => out.extend_from_slice(v),
            None => out.extend_from_slice(&obj[m.value.clone()]),
        }
    }
    out.push(b'}');
    Some(out)
}

/// An array whose object elements are put in `order`; `None` when nothing changes.
fn canonical_array(arr: &[u8], order: &'static [&'static [u8]]) -> Option<Vec<u8>> {
    let elements = elements(arr)?;
    let changed: Vec<Option<Vec<u8>>> =
        elements.iter().map(|e| canonical_object(&arr[e.clone()], order, |_| None)).collect();
    if changed.iter().all(Option::is_none) {
        return None;
    }
    let mut out = Vec::with_capacity(arr.len());
    out.push(b'[');
    for (n, (e, c)) in elements.iter().zip(&changed).enumerate() {
        if n > 0 {
            out.push(b',');
        }
        match c {
            Some(v) => out.extend_from_slice(v),
            None => out.extend_from_slice(&arr[e.clone()]),
        }
    }
    out.push(b']');
    Some(out)
}

/// The members of the JSON object `obj` (which must span the whole slice, modulo whitespace).
fn members(obj: &[u8]) -> Option<Vec<Member>> {
    let mut i = skip_ws(obj, 0);
    if obj.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(obj, i + 1);
    let mut out = Vec::new();
    if obj.get(i) == Some(&b'}') {
        return (skip_ws(obj, i + 1) == obj.len()).then_some(out);
    }
    loop {
        if obj.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = skip_string(obj, i)?;
        let key = i + 1..key_end - 1;
        i = skip_ws(obj, key_end);
        if obj.get(i) != Some(&b':') {
            return None;
        }
        let start = skip_ws(obj, i + 1);
        let end = skip_value(obj, start)?;
        out.push(Member { key, value: start..end });
        i = skip_ws(obj, end);
        match obj.get(i)? {
            b',' => i = skip_ws(obj, i + 1),
            b'}' => return (skip_ws(obj, i + 1) == obj.len()).then_some(out),
            _ => return None,
        }
    }
}

/// The element ranges of the JSON array `arr`.
fn elements(arr: &[u8]) -> Option<Vec<Range<usize>>> {
    let mut i = skip_ws(arr, 0);
    if arr.get(i) != Some(&b'[') {
        return None;
    }
    i = skip_ws(arr, i + 1);
    let mut out = Vec::new();
    if arr.get(i) == Some(&b']') {
        return (skip_ws(arr, i + 1) == arr.len()).then_some(out);
    }
    loop {
        let end = skip_value(arr, i)?;
        out.push(i..end);
        i = skip_ws(arr, end);
        match arr.get(i)? {
            b',' => i = skip_ws(arr, i + 1),
            b']' => return (skip_ws(arr, i + 1) == arr.len()).then_some(out),
            _ => return None,
        }
    }
}

/// Byte-level JSON scanning over validated stored bytes, shared with the watch frame builder.
pub(crate) fn skip_ws(s: &[u8], mut i: usize) -> usize {
    while matches!(s.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// `s[i]` is `"`; the index after the closing quote.
pub(crate) fn skip_string(s: &[u8], mut i: usize) -> Option<usize> {
    i += 1;
    loop {
        match s.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
}

/// The index after the JSON value starting at `s[i]`.
pub(crate) fn skip_value(s: &[u8], i: usize) -> Option<usize> {
    match s.get(i)? {
        b'"' => skip_string(s, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match s.get(j)? {
                    b'"' => {
                        j = skip_string(s, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let mut j = i;
            while let Some(b) = s.get(j) {
                if matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                    break;
                }
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn typed_metadata_is_copied() {
        let m = br#"{"name":"a","namespace":"n","uid":"u","resourceVersion":"3","labels":{"z":"1","a":"2"},"ownerReferences":[{"apiVersion":"v1","kind":"X","name":"o","uid":"u","controller":true}]}"#;
        assert_eq!(canonical(m), None);
        assert_eq!(canonical_len(m), m.len());
    }

    #[test]
    fn unstructured_metadata_is_put_in_struct_order() {
        let m = br#"{"annotations":{"b":"}"},"creationTimestamp":"2024-01-01T00:00:00Z","generation":1,"managedFields":[{"apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{}},"manager":"m","operation":"Update","time":"t"}],"name":"a","namespace":"n","ownerReferences":[{"apiVersion":"v1","blockOwnerDeletion":true,"controller":true,"kind":"X","name":"o","uid":"u"}],"resourceVersion":"7","uid":"x"}"#;
        let out = canonical(m).expect("reordered");
        assert_eq!(
            String::from_utf8_lossy(&out),
            r#"{"name":"a","namespace":"n","uid":"x","resourceVersion":"7","generation":1,"creationTimestamp":"2024-01-01T00:00:00Z","annotations":{"b":"}"},"ownerReferences":[{"apiVersion":"v1","kind":"X","name":"o","uid":"u","controller":true,"blockOwnerDeletion":true}],"managedFields":[{"manager":"m","operation":"Update","apiVersion":"v1","time":"t","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{}}}]}"#
        );
        assert_eq!(out.len(), m.len(), "a permutation of compact members keeps the length");
        assert_eq!(canonical(&out), None, "idempotent");
        assert_eq!(canonical_len(m), m.len());
    }

    #[test]
    fn unknown_members_follow_and_bad_input_is_left_alone() {
        assert_eq!(
            canonical(br#"{"zz":1,"name":"a"}"#).map(|v| String::from_utf8_lossy(&v).into_owned()),
            Some(r#"{"name":"a","zz":1}"#.to_string())
        );
        for bad in [&b"{"[..], b"[]", b"{\"a\"}", b"{\"a\":1,}", b"", b"{\"a\":}}"] {
            assert_eq!(canonical(bad), None);
        }
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,64}") {
            let _ = canonical(s.as_bytes());
        }

        /// Any permutation of a metadata object's members comes out in the one struct order.
        #[test]
        fn permutations_converge(perm in Just((0..6usize).collect::<Vec<_>>()).prop_shuffle()) {
            let members = [r#""name":"a""#, r#""uid":"u""#, r#""labels":{"k":"v"}"#, r#""generation":2"#,
                r#""finalizers":["f"]"#, r#""resourceVersion":"9""#];
            let canonical_form = br#"{"name":"a","uid":"u","resourceVersion":"9","generation":2,"labels":{"k":"v"},"finalizers":["f"]}"#;
            let shuffled = format!("{{{}}}", perm.iter().map(|&i| members[i]).collect::<Vec<_>>().join(","));
            let out = canonical(shuffled.as_bytes()).unwrap_or_else(|| shuffled.clone().into_bytes());
            prop_assert_eq!(&out[..], &canonical_form[..]);
        }
    }
}
