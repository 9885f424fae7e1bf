//! Protobuf (`application/vnd.kubernetes.protobuf`) from kache's JSON store: each object version's JSON
//! (the upstream's bytes) transcoded to the message bytes the apiserver's Go marshallers write for the
//! same object, plus the apiserver's envelopes around them (object, list, watch frame, Status).
//!
//! The flow: [`json`] parses the stored bytes once into a borrowed tree; [`encode`] walks it by the
//! schema of `kache-k8s-schema` (the data shared with the sim: tags, JSON names, Go's empty-field rules;
//! the encoder here is kache's own), writing nested messages in place ([`wire`]); [`special`] holds the
//! apimachinery types with their own JSON form; [`frame`] the envelopes. Anything the schema cannot
//! express exactly (an unknown key, a non-canonical Quantity, a duplicate key, invalid JSON) is a
//! [`TranscodeError`] and the caller forwards the request: never a panic, never a guess.

mod encode;
mod frame;
mod json;
mod special;
mod wire;

#[cfg(test)]
mod tests;

use kache_k8s_schema::{Message, Ty, schema};

pub use frame::{ListMeta, MAGIC, envelope, list, list_item_header, list_parts, watch_frame};
pub use wire::put_bytes;
pub use wire::{Malformed, Value, fields, last_len_field, len_fields};

/// `runtime.ContentTypeProtobuf`.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// The watch stream's content type.
pub const STREAM_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// The metadata views' group (`PartialObjectMetadata`, `PartialObjectMetadataList`).
pub const META_GROUP: &str = "meta.k8s.io";
pub const PARTIAL_OBJECT_METADATA: &str = "PartialObjectMetadata";
pub const PARTIAL_OBJECT_METADATA_LIST: &str = "PartialObjectMetadataList";

/// Why an object's JSON could not be transcoded (the caller forwards the request).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranscodeError {
    /// The bytes are not one JSON value (or nest deeper than 128).
    #[error("invalid JSON: {0}")]
    Json(String),
    /// A key that is no field of the message: a newer apiserver's field, or not a Kubernetes object.
    #[error("{message}: unknown field {field:?}")]
    UnknownField { message: &'static str, field: String },
    /// A key given twice (Go would merge or keep the last: not guessed).
    #[error("{field}: duplicate key")]
    Duplicate { field: &'static str },
    /// A value of a JSON type its Go type cannot take.
    #[error("{field}: expected {expected}")]
    Type { field: &'static str, expected: &'static str },
    /// A value whose protobuf form is not certain (a time, a quantity, a duration, raw JSON).
    #[error("{field}: {why}")]
    Value { field: &'static str, why: String },
    /// The object's `kind` or `apiVersion` is not the one being encoded.
    #[error("object is {found:?}, expected {expected:?}")]
    WrongKind { found: String, expected: String },
}

/// The protobuf identity of a resource's objects.
#[derive(Debug, Clone)]
pub struct ProtoKind {
    api_version: String,
    kind: &'static str,
    list_kind: &'static str,
    message: &'static Message,
}

/// The protobuf identity of a resource's objects; None when kache has no schema for it (forward).
/// `meta.k8s.io` `v1` and `v1beta1` name the metadata views (one schema for both).
pub fn proto_kind(group: &str, version: &str, kind: &str) -> Option<ProtoKind> {
    let api_version = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    let schema_av = if group == META_GROUP && version == "v1beta1" { "meta.k8s.io/v1" } else { &api_version };
    let (_, kind, message) = *schema::KINDS.iter().find(|(a, k, _)| *a == schema_av && *k == kind)?;
    let (_, list_kind, _) =
        *schema::KINDS.iter().find(|(a, k, _)| *a == schema_av && k.strip_suffix("List") == Some(kind))?;
    Some(ProtoKind { api_version, kind, list_kind, message })
}

// === impl ProtoKind ===

impl ProtoKind {
    pub fn api_version(&self) -> &str {
        &self.api_version
    }

    pub fn kind(&self) -> &str {
        self.kind
    }

    pub fn list_kind(&self) -> &str {
        self.list_kind
    }

    /// The object's message bytes (no envelope) from its stored JSON (the upstream's bytes, with or
    /// without kind/apiVersion, which must then be this kind's). Err when the JSON has a key or value
    /// the schema cannot express exactly (the caller then forwards).
    pub fn encode_object(&self, json: &[u8]) -> Result<Vec<u8>, TranscodeError> {
        let tree = json::parse(json).map_err(|e| TranscodeError::Json(e.to_string()))?;
        let json::J::Obj(obj) = &tree else {
            return Err(TranscodeError::Json("not a JSON object".into()));
        };
        for (k, want) in [("kind", self.kind), ("apiVersion", self.api_version.as_str())] {
            match obj.iter().find(|(key, _)| key == k).map(|(_, v)| v) {
                None => {}
                Some(json::J::Str(s)) if s == want => {}
                Some(other) => {
                    return Err(TranscodeError::WrongKind {
                        found: format!("{k}={other:?}"),
                        expected: format!("{k}={want}"),
                    });
                }
            }
        }
        let mut out = Vec::with_capacity(json.len() / 2 + 64);
        encode::message(self.message, obj, &["kind", "apiVersion"], &mut out)?;
        Ok(out)
    }
}

/// The `PartialObjectMetadata` identity in `meta.k8s.io/v1`.
pub fn partial_object_metadata() -> ProtoKind {
    proto_kind(META_GROUP, "v1", PARTIAL_OBJECT_METADATA).expect("the schema has the metadata views")
}

/// ObjectMeta message bytes from the JSON of a `metadata` object (for PartialObjectMetadata views).
pub fn encode_object_meta(json: &[u8]) -> Result<Vec<u8>, TranscodeError> {
    let tree = json::parse(json).map_err(|e| TranscodeError::Json(e.to_string()))?;
    let json::J::Obj(obj) = &tree else {
        return Err(TranscodeError::Json("metadata is not a JSON object".into()));
    };
    let mut out = Vec::with_capacity(json.len() / 2 + 16);
    encode::message(object_meta(), obj, &[], &mut out)?;
    Ok(out)
}

/// The PartialObjectMetadata message from its ObjectMeta message: `metadata` = 1.
pub fn partial_object_metadata_message(object_meta: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(object_meta.len() + 4);
    wire::put_bytes(&mut out, 1, object_meta);
    out
}

/// ObjectMeta, as PartialObjectMetadata's `metadata` field.
fn object_meta() -> &'static Message {
    let (_, _, pom) = schema::KINDS
        .iter()
        .find(|(a, k, _)| *a == "meta.k8s.io/v1" && *k == PARTIAL_OBJECT_METADATA)
        .expect("the schema has PartialObjectMetadata");
    match pom.fields.iter().find(|f| f.json == "metadata").map(|f| &f.ty) {
        Some(Ty::Msg(m)) => m,
        _ => unreachable!("PartialObjectMetadata.metadata is an ObjectMeta message"),
    }
}

/// A Status error as the apiserver writes it in protobuf (enveloped, `v1` `Status`).
pub fn status_body(err: &crate::status::ApiError) -> Vec<u8> {
    envelope("v1", "Status", &status_message(err))
}

/// The watch stream's ERROR frame for `err`.
pub fn status_watch_frame(err: &crate::status::ApiError) -> Vec<u8> {
    watch_frame("ERROR", "v1", "Status", &status_message(err))
}

/// The Status message of `err`, transcoded from the JSON kache writes for it (one source of truth for
/// its fields).
fn status_message(err: &crate::status::ApiError) -> Vec<u8> {
    let (_, _, status) =
        schema::KINDS.iter().find(|(a, k, _)| *a == "v1" && *k == "Status").expect("the schema has Status");
    let json = err.to_json();
    let tree = json::parse(&json).expect("kache's own Status JSON parses");
    let json::J::Obj(obj) = &tree else { unreachable!("a Status is a JSON object") };
    let mut out = Vec::with_capacity(json.len());
    encode::message(status, obj, &["kind", "apiVersion"], &mut out)
        .expect("kache's Status fits the Status schema");
    out
}
