//! The fast path of [`super::object_from_json`]: one pass of sonic-rs's `get_many` over validated JSON,
//! with a pointer tree built once per kind.
//!
//! `get_many` fails when a path crosses an empty object or a non-object (`"status":{}`,
//! `"spec":null`); the caller then takes the general path, which iterates members.

use std::sync::OnceLock;

use sonic_rs::{LazyValue, PointerTree};

use super::fields::{FieldValues, json_path};
use super::meta::MetaValues;
use crate::resource::FieldKind;

/// Positions in the pointer tree's output.
const METADATA: usize = 0;
const NAME: usize = 1;
const NAMESPACE: usize = 2;
const UID: usize = 3;
const RESOURCE_VERSION: usize = 4;
const LABELS: usize = 5;
/// The kind's extra fields start here, in `extra_fields()` order; pods then add `status.podIPs`.
const FIELDS: usize = 6;

/// Every kind, for the per-kind plans.
const KINDS: [FieldKind; 9] = [
    FieldKind::Pod,
    FieldKind::Node,
    FieldKind::Namespace,
    FieldKind::Secret,
    FieldKind::Service,
    FieldKind::ReplicationController,
    FieldKind::Event,
    FieldKind::ReplicaSet,
    FieldKind::Generic,
];

struct Plan {
    tree: PointerTree,
    fields: usize,
    pod_ips: Option<usize>,
}

fn plan(kind: FieldKind) -> &'static Plan {
    static PLANS: [OnceLock<Plan>; KINDS.len()] = [const { OnceLock::new() }; KINDS.len()];
    let i = KINDS.iter().position(|k| *k == kind).expect("KINDS lists every FieldKind");
    PLANS[i].get_or_init(|| {
        let mut tree = PointerTree::new();
        tree.add_path(["metadata"]);
        for member in ["name", "namespace", "uid", "resourceVersion", "labels"] {
            tree.add_path(["metadata", member]);
        }
        let fields = kind.extra_fields();
        for field in fields {
            tree.add_path(json_path(kind, field));
        }
        let pod_ips = (kind == FieldKind::Pod).then(|| {
            tree.add_path(["status", "podIPs"]);
            FIELDS + fields.len()
        });
        Plan { tree, fields: fields.len(), pod_ips }
    })
}

/// What the fast path found: `metadata` itself, its members, and the extra fields' values.
pub(super) struct Found<'a> {
    pub metadata: Option<LazyValue<'a>>,
    pub meta: MetaValues<'a>,
    pub fields: FieldValues<'a>,
}

/// Finds everything in one pass, or `None` when the general path must be taken.
pub(super) fn find(text: &str, kind: FieldKind) -> Option<Found<'_>> {
    let plan = plan(kind);
    // SAFETY: the caller validated `text` as one JSON object (`json::validate`), which is all the
    // unchecked lookup requires.
    let mut out = unsafe { sonic_rs::get_many_unchecked(text, &plan.tree) }.ok()?;
    let mut take = |i: usize| out.get_mut(i).and_then(Option::take);
    let metadata = take(METADATA);
    let meta = MetaValues {
        name: take(NAME),
        namespace: take(NAMESPACE),
        uid: take(UID),
        resource_version: take(RESOURCE_VERSION),
        labels: take(LABELS),
    };
    let slots = (FIELDS..FIELDS + plan.fields).map(&mut take).collect();
    let pod_ips = plan.pod_ips.and_then(&mut take);
    Some(Found { metadata, meta, fields: FieldValues { slots, pod_ips } })
}
