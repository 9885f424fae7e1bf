//! The kind-specific field-selector fields, extracted once at ingest and rendered like the apiserver's
//! `ToSelectableFields` functions (k/k `pkg/registry/*/strategy.go`).

use std::fmt;

use serde::Deserialize as _;
use serde::de::{self, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::ExtractError;
use super::json::{self, Key, MembersVisitor, render_scalar};
use crate::resource::FieldKind;

/// Go's `strconv.FormatBool(false)`: the pod field set's `spec.hostNetwork` and the node field set's
/// `spec.unschedulable` when the object leaves them unset.
const GO_FALSE: &str = "false";
/// `strconv.Itoa(int(Status.Replicas))` for a ReplicaSet / ReplicationController without status.
const GO_ZERO: &str = "0";

/// The raw values of a kind's extra fields.
pub(super) struct FieldValues<'a> {
    /// One per `kind.extra_fields()`, in order. For events, the `source` slot holds `source.component`.
    pub slots: Vec<Option<&'a RawValue>>,
    /// Pods: `status.podIPs`.
    pub pod_ips: Option<&'a RawValue>,
}

/// Where an extra field lives: a top-level member, or a member of one (`spec.nodeName`). The event field
/// set's `source` is `source.component`.
fn segments(kind: FieldKind, field: &'static str) -> (&'static str, Option<&'static str>) {
    match (kind, field) {
        (FieldKind::Event, "source") => ("source", Some("component")),
        _ => match field.split_once('.') {
            Some((root, child)) => (root, Some(child)),
            None => (field, None),
        },
    }
}

/// What one pass over an object finds: its `metadata` and the kind's extra fields.
pub(super) struct Scan<'a> {
    /// `metadata`'s members when it is an object (`Some(None)`: present but not an object), read in the same
    /// pass: the members kache needs are picked from them, and their positions give `metadata`'s range.
    pub metadata: Option<Option<MaybeMembers<'a>>>,
    pub fields: FieldValues<'a>,
}

/// Reads the object `text` in one serde_json pass that validates all of it (grammar, nothing after the
/// value): `metadata`'s members and the members the kind's fields start from are kept as raw values,
/// everything else is skipped. Duplicate members: the last one wins, like Go's decoder.
pub(super) fn scan(text: &str, kind: FieldKind) -> Result<Scan<'_>, ExtractError> {
    let mut de = serde_json::Deserializer::from_str(text);
    if text.as_bytes().get(json::skip_ws(text.as_bytes(), 0)) != Some(&b'{') {
        // Not an object: still the JSON error first when it is not JSON at all.
        serde::de::IgnoredAny::deserialize(&mut de).map_err(ExtractError::Json)?;
        de.end().map_err(|_| ExtractError::TrailingBytes)?;
        return Err(ExtractError::NotAnObject);
    }
    let found =
        de::Deserializer::deserialize_map(&mut de, ObjectVisitor { kind }).map_err(ExtractError::Json)?;
    de.end().map_err(|_| ExtractError::TrailingBytes)?;
    Ok(found)
}

struct ObjectVisitor {
    kind: FieldKind,
}

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = Scan<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let kind = self.kind;
        let paths: Vec<(&'static str, Option<&'static str>)> =
            kind.extra_fields().iter().map(|f| segments(kind, f)).collect();
        let mut slots: Vec<Option<&'de RawValue>> = vec![None; paths.len()];
        let (mut metadata, mut pod_ips) = (None, None);
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            let key = &*key;
            if key == "metadata" {
                // `null` reads as `None` (Go decodes null as absent), any other non-object as `Some(MaybeMembers(None))`.
                metadata = Some(map.next_value::<Option<MaybeMembers<'de>>>()?);
                continue;
            }
            let pod_status = kind == FieldKind::Pod && key == "status";
            let nested = pod_status || paths.iter().any(|(r, c)| *r == key && c.is_some());
            if paths.iter().any(|(r, c)| *r == key && c.is_none()) {
                let value = map.next_value::<&'de RawValue>()?;
                for (slot, _) in slots.iter_mut().zip(&paths).filter(|(_, (r, c))| *r == key && c.is_none()) {
                    *slot = Some(value);
                }
            } else if nested {
                // A later duplicate of a root replaces what an earlier one set.
                for (slot, _) in slots.iter_mut().zip(&paths).filter(|(_, (r, _))| *r == key) {
                    *slot = None;
                }
                if pod_status {
                    pod_ips = None;
                }
                let Some(children) = map.next_value::<MaybeMembers<'de>>()?.0 else { continue };
                for (child, value) in children {
                    for (slot, _) in
                        slots.iter_mut().zip(&paths).filter(|(_, (r, c))| *r == key && *c == Some(&*child))
                    {
                        *slot = Some(value);
                    }
                    if pod_status && child == "podIPs" {
                        pod_ips = Some(value);
                    }
                }
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(Scan { metadata, fields: FieldValues { slots, pod_ips } })
    }
}

/// A member value's own members when it is an object (`None` for any other JSON value).
pub(super) struct MaybeMembers<'a>(pub Option<json::Members<'a>>);

impl<'de> serde::Deserialize<'de> for MaybeMembers<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(MembersVisitor).map(MaybeMembers)
    }
}

/// Values of `kind.extra_fields()`, in that order; `None` where the object does not set the field (the
/// apiserver reads a missing field as `""`, so `None` and `Some("")` select alike) — except where Go's
/// field set prints a typed zero value (`"false"`, `"0"`).
pub(super) fn render(kind: FieldKind, values: &FieldValues<'_>) -> Box<[Option<Box<str>>]> {
    let paths = kind.extra_fields();
    let mut out: Vec<Option<Box<str>>> = values.slots.iter().map(|s| s.and_then(render_scalar)).collect();
    let reporting = paths.iter().position(|p| *p == "reportingComponent").and_then(|i| out[i].clone());
    for (i, path) in paths.iter().enumerate() {
        let value = &mut out[i];
        match (kind, *path) {
            (FieldKind::Pod, "spec.hostNetwork") | (FieldKind::Node, "spec.unschedulable") => {
                value.get_or_insert_with(|| Box::from(GO_FALSE));
            }
            (FieldKind::ReplicaSet | FieldKind::ReplicationController, "status.replicas") => {
                value.get_or_insert_with(|| Box::from(GO_ZERO));
            }
            (FieldKind::Pod, "status.podIP") => {
                if let Some(first) = values.pod_ips.and_then(first_pod_ip) {
                    *value = Some(first);
                }
            }
            // `source.component`, or `reportingComponent` when that is empty.
            (FieldKind::Event, "source") if value.as_deref().is_none_or(str::is_empty) => {
                *value = reporting.clone();
            }
            _ => {}
        }
    }
    out.into_boxed_slice()
}

/// `status.podIPs[0].ip` when `podIPs` is a non-empty array (the internal pod's `PodIPs[0].IP`, to which
/// the v1 conversion folds `status.podIP`). A first entry without `ip` reads as "".
fn first_pod_ip(pod_ips: &RawValue) -> Option<Box<str>> {
    let entries: Vec<&RawValue> = serde_json::from_str(pod_ips.get()).ok()?;
    let first = entries.first()?;
    let ip = json::members(first.get()).ok().flatten().and_then(|members| {
        members.iter().rev().find(|(k, _)| k == "ip").and_then(|(_, v)| render_scalar(v))
    });
    Some(ip.unwrap_or_default())
}
