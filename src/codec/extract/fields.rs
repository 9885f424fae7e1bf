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

/// Top-level members that the kind's extra fields start from, collected during the object walk.
pub(super) struct Roots<'a> {
    paths: &'static [&'static str],
    /// `(root name, value)`; the last duplicate wins, like Go's decoder.
    found: Vec<(&'a str, LazyValue<'a>)>,
}

// === impl Roots ===

impl<'a> Roots<'a> {
    pub(super) fn new(kind: FieldKind) -> Self {
        Self { paths: kind.extra_fields(), found: Vec::new() }
    }

    /// Keeps `value` if `key` is the first segment of one of the kind's fields.
    pub(super) fn offer(&mut self, key: &str, value: LazyValue<'a>) {
        let Some(root) = self.paths.iter().map(|p| first_segment(p)).find(|r| *r == key) else {
            return;
        };
        match self.found.iter_mut().find(|(r, _)| *r == root) {
            Some(slot) => slot.1 = value,
            None => self.found.push((root, value)),
        }
    }

    fn get(&self, root: &str) -> Option<&LazyValue<'a>> {
        self.found.iter().rev().find(|(r, _)| *r == root).map(|(_, v)| v)
    }
}

fn first_segment(path: &'static str) -> &'static str {
    path.split_once('.').map_or(path, |(first, _)| first)
}

/// Values of `kind.extra_fields()`, in that order; `None` where the object does not set the field (the
/// apiserver reads a missing field as `""`, so `None` and `Some("")` select alike) — except where Go's
/// field set prints a typed zero value (`"false"`, `"0"`).
pub(super) fn extract(kind: FieldKind, roots: &Roots<'_>) -> Box<[Option<Box<str>>]> {
    let paths = roots.paths;
    let mut slots: Vec<Option<LazyValue<'_>>> = vec![None; paths.len()];
    // `status.podIPs` (pods only): `status.podIP` is its first entry when present.
    let mut pod_ips: Option<LazyValue<'_>> = None;
    for (root, value) in &roots.found {
        // Single-segment fields are the root value itself.
        for (i, path) in paths.iter().enumerate() {
            if path == root {
                slots[i] = Some(value.clone());
            }
        }
        let wants_children = paths.iter().any(|p| p.split_once('.').is_some_and(|(r, _)| r == *root));
        if !wants_children {
            continue;
        }
        // One pass over the root's members picks every wanted child (no re-scan per field).
        let Some(members) = value.clone().into_object_iter() else { continue };
        for member in members {
            // The root was validated by the top-level walk; an error here cannot happen, but stay total.
            let Ok((key, child)) = member else { break };
            for (i, path) in paths.iter().enumerate() {
                if path.split_once('.') == Some((*root, &*key)) {
                    slots[i] = Some(child.clone());
                }
            }
            if kind == FieldKind::Pod && *root == "status" && key == "podIPs" {
                pod_ips = Some(child);
            }
        }
    }
    let mut out: Vec<Option<Box<str>>> = slots.iter().map(|s| s.as_ref().and_then(render_scalar)).collect();
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
                if let Some(first) = pod_ips.as_ref().and_then(first_pod_ip) {
                    *value = Some(first);
                }
            }
            (FieldKind::Event, "source") => *value = event_source(roots),
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

/// The event field set's `source`: `source.component`, or `reportingComponent` when that is empty.
fn event_source(roots: &Roots<'_>) -> Option<Box<str>> {
    let component = roots.get("source").and_then(|s| s.get("component")).as_ref().and_then(render_scalar);
    match component {
        Some(c) if !c.is_empty() => Some(c),
        _ => roots.get("reportingComponent").and_then(render_scalar),
    }
}
