//! The kind-specific field-selector fields, extracted once at ingest and rendered like the apiserver's
//! `ToSelectableFields` functions (k/k `pkg/registry/*/strategy.go`).

use sonic_rs::{JsonValueTrait, LazyValue};

use super::json::render_scalar;
use crate::resource::FieldKind;

/// Go's `strconv.FormatBool(false)`: the pod field set's `spec.hostNetwork` and the node field set's
/// `spec.unschedulable` when the object leaves them unset.
const GO_FALSE: &str = "false";
/// `strconv.Itoa(int(Status.Replicas))` for a ReplicaSet / ReplicationController without status.
const GO_ZERO: &str = "0";

/// The raw values of a kind's extra fields, found by either extraction path.
pub(super) struct FieldValues<'a> {
    /// One per `kind.extra_fields()`, in order. For events, the `source` slot holds `source.component`.
    pub slots: Vec<Option<LazyValue<'a>>>,
    /// Pods: `status.podIPs`.
    pub pod_ips: Option<LazyValue<'a>>,
}

/// The JSON path to read for an extra field: its dotted path, except the event field set's `source`,
/// which is `source.component`.
pub(super) fn json_path(kind: FieldKind, field: &'static str) -> Vec<&'static str> {
    match (kind, field) {
        (FieldKind::Event, "source") => vec!["source", "component"],
        _ => field.split('.').collect(),
    }
}

/// Top-level members that the kind's extra fields start from, collected during the general path's walk.
pub(super) struct Roots<'a> {
    kind: FieldKind,
    /// `(root name, value)`; the last duplicate wins, like Go's decoder.
    found: Vec<(&'static str, LazyValue<'a>)>,
}

// === impl Roots ===

impl<'a> Roots<'a> {
    pub(super) fn new(kind: FieldKind) -> Self {
        Self { kind, found: Vec::new() }
    }

    /// Keeps `value` if `key` is the first segment of one of the kind's fields.
    pub(super) fn offer(&mut self, key: &str, value: LazyValue<'a>) {
        let paths = self.kind.extra_fields();
        let Some(root) = paths.iter().map(|p| first_segment(p)).find(|r| *r == key) else {
            return;
        };
        match self.found.iter_mut().find(|(r, _)| *r == root) {
            Some(slot) => slot.1 = value,
            None => self.found.push((root, value)),
        }
    }

    /// Resolves every field path below the roots, one pass over each root's members.
    pub(super) fn values(self) -> FieldValues<'a> {
        let kind = self.kind;
        let paths: Vec<Vec<&'static str>> = kind.extra_fields().iter().map(|f| json_path(kind, f)).collect();
        let mut slots: Vec<Option<LazyValue<'a>>> = vec![None; paths.len()];
        let mut pod_ips = None;
        for (root, value) in self.found {
            for (i, path) in paths.iter().enumerate() {
                if path.len() == 1 && path[0] == root {
                    slots[i] = Some(value.clone());
                }
            }
            if !paths.iter().any(|p| p.len() == 2 && p[0] == root) {
                continue;
            }
            let Some(members) = value.into_object_iter() else { continue };
            for member in members {
                // The root was validated; an error here cannot happen, but stay total.
                let Ok((key, child)) = member else { break };
                for (i, path) in paths.iter().enumerate() {
                    if path.len() == 2 && path[0] == root && path[1] == key {
                        slots[i] = Some(child.clone());
                    }
                }
                if kind == FieldKind::Pod && root == "status" && key == "podIPs" {
                    pod_ips = Some(child);
                }
            }
        }
        FieldValues { slots, pod_ips }
    }
}

fn first_segment(path: &'static str) -> &'static str {
    path.split_once('.').map_or(path, |(first, _)| first)
}

/// Values of `kind.extra_fields()`, in that order; `None` where the object does not set the field (the
/// apiserver reads a missing field as `""`, so `None` and `Some("")` select alike) — except where Go's
/// field set prints a typed zero value (`"false"`, `"0"`).
pub(super) fn render(kind: FieldKind, values: &FieldValues<'_>) -> Box<[Option<Box<str>>]> {
    let paths = kind.extra_fields();
    let mut out: Vec<Option<Box<str>>> =
        values.slots.iter().map(|s| s.as_ref().and_then(render_scalar)).collect();
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
                if let Some(first) = values.pod_ips.as_ref().and_then(first_pod_ip) {
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
fn first_pod_ip(pod_ips: &LazyValue<'_>) -> Option<Box<str>> {
    let mut entries = pod_ips.clone().into_array_iter()?;
    let first = entries.next()?.ok()?;
    Some(first.get("ip").as_ref().and_then(render_scalar).unwrap_or_default())
}
