//! The apiserver's protobuf framing (`runtime/serializer/protobuf`): every object is `k8s\0` followed by
//! a `runtime.Unknown` whose TypeMeta names it and whose `raw` holds the object's message (content
//! encoding and type empty); a list is one such object whose items are bare messages; a watch stream is
//! a sequence of 4-byte big-endian lengths each followed by a `WatchEvent` (not enveloped) whose object is
//! a `RawExtension` holding the enveloped object.

use k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent;
use k8s_pb::apimachinery::pkg::runtime::{RawExtension, TypeMeta, Unknown};
use prost::Message as _;
use serde_json::{Map, Value};

use super::{DecodeError, EncodeError};

/// `runtime.ContentTypeProtobuf`.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// The watch stream's content type.
pub const STREAM_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// The envelope's magic prefix.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// The message of (apiVersion, kind), meta.k8s.io/v1beta1 sharing v1's messages.
fn schema(api_version: &str, kind: &str) -> Option<&'static super::Message> {
    let av = if api_version == "meta.k8s.io/v1beta1" { "meta.k8s.io/v1" } else { api_version };
    super::kind(av, kind)
}

/// Whether the sim speaks protobuf for objects of this kind.
pub fn supports(api_version: &str, kind: &str) -> bool {
    schema(api_version, kind).is_some()
}

/// Wraps an encoded message in `k8s\0` + `runtime.Unknown`.
pub fn wrap(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let u = Unknown {
        type_meta: Some(TypeMeta { api_version: Some(api_version.into()), kind: Some(kind.into()) }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = Vec::with_capacity(MAGIC.len() + u.encoded_len());
    out.extend_from_slice(MAGIC);
    u.encode(&mut out).expect("a Vec grows as needed");
    out
}

/// The protobuf of an object (or list) given as JSON with its `kind` and `apiVersion`.
pub fn encode_object(v: &Value) -> Result<Vec<u8>, EncodeError> {
    let obj = v.as_object().ok_or_else(|| EncodeError::NoSchema("a non-object".into()))?;
    let av = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let m = schema(av, kind).ok_or_else(|| EncodeError::NoSchema(format!("{av}, Kind={kind}")))?;
    let mut raw = Vec::new();
    super::encode::message(m, obj, &mut raw)?;
    Ok(wrap(av, kind, raw))
}

/// The bare message of a list item (no TypeMeta: typed list items carry none), from its JSON.
pub fn encode_item(api_version: &str, kind: &str, item: &Value) -> Result<Vec<u8>, EncodeError> {
    let m = schema(api_version, kind)
        .ok_or_else(|| EncodeError::NoSchema(format!("{api_version}, Kind={kind}")))?;
    let obj = item.as_object().ok_or_else(|| EncodeError::NoSchema("a non-object".into()))?;
    let mut raw = Vec::new();
    super::encode::message(m, obj, &mut raw)?;
    Ok(raw)
}

/// A list from its ListMeta (JSON) and its items' bare messages: `metadata` = 1, `items` = 2 in every
/// list kind the sim serves.
pub fn encode_list(
    api_version: &str,
    list_kind: &str,
    meta: &Value,
    items: &[impl AsRef<[u8]>],
) -> Result<Vec<u8>, EncodeError> {
    let m = schema(api_version, list_kind)
        .ok_or_else(|| EncodeError::NoSchema(format!("{api_version}, Kind={list_kind}")))?;
    let super::Ty::Msg(list_meta) = m.fields[m.by_tag[0]].ty else {
        return Err(EncodeError::NoSchema(list_kind.into()));
    };
    let mut meta_raw = Vec::new();
    super::encode::message(list_meta, meta.as_object().unwrap_or(&Map::new()), &mut meta_raw)?;
    let len: usize = items.iter().map(|i| i.as_ref().len() + 6).sum();
    let mut raw = Vec::with_capacity(meta_raw.len() + len + 8);
    super::encode::put_bytes(&mut raw, 1, &meta_raw);
    for i in items {
        super::encode::put_bytes(&mut raw, 2, i.as_ref());
    }
    Ok(wrap(api_version, list_kind, raw))
}

/// One watch frame: the length prefix and a `WatchEvent` holding the enveloped object.
pub fn watch_frame(event_type: &str, object: Vec<u8>) -> Vec<u8> {
    let e = WatchEvent { r#type: Some(event_type.into()), object: Some(RawExtension { raw: Some(object) }) };
    let n = e.encoded_len();
    let mut out = Vec::with_capacity(4 + n);
    out.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_be_bytes());
    e.encode(&mut out).expect("a Vec grows as needed");
    out
}

/// Opens the envelope: (apiVersion, kind, raw).
pub fn unwrap(b: &[u8]) -> Result<(String, String, Vec<u8>), DecodeError> {
    let body = b.strip_prefix(MAGIC).ok_or(DecodeError::NoMagic)?;
    let u = Unknown::decode(body).map_err(|e| DecodeError::Envelope(e.to_string()))?;
    let tm = u.type_meta.unwrap_or_default();
    Ok((tm.api_version.unwrap_or_default(), tm.kind.unwrap_or_default(), u.raw.unwrap_or_default()))
}

/// Decodes an enveloped object into its JSON (kind and apiVersion first, then Go struct order).
pub fn decode_object(b: &[u8]) -> Result<Value, DecodeError> {
    let (av, kind, raw) = unwrap(b)?;
    let m = schema(&av, &kind).ok_or_else(|| DecodeError::UnknownKind {
        version: av.rsplit('/').next().unwrap_or("").to_string(),
        kind: kind.clone(),
    })?;
    let fields = super::decode::message(m, &raw)?;
    let mut out = Map::new();
    out.insert("kind".into(), Value::String(kind));
    out.insert("apiVersion".into(), Value::String(av));
    out.extend(fields);
    Ok(Value::Object(out))
}
