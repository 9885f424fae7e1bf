//! Which fields a custom resource's field selectors may name: the CRD's `selectableFields`, read from the
//! CustomResourceDefinition objects kache caches like any other resource (`apiextensions.k8s.io/v1`
//! customresourcedefinitions: discovered, or cached on the first selector that needs them).
//!
//! Reads only the CRD store's current snapshot, so a CRD update reaches field selectors as soon as kache's
//! CRD watch delivers it (the apiserver itself rebuilds a CRD's storage from its own CRD informer).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::options::selector::custom::{self, SelectableFields};
use crate::reflector::Registry;
use crate::resource::Gvr;

/// Bound on remembered CRDs: one entry per custom resource version selected on. Past it the memo is
/// cleared (each entry is rebuilt from the store on its next use).
const MAX_ENTRIES: usize = 4096;

/// The CustomResourceDefinition resource.
pub(crate) fn crd_gvr() -> Gvr {
    Gvr::new("apiextensions.k8s.io", "v1", "customresourcedefinitions")
}

/// A CRD object version: its uid and resourceVersion.
type CrdVersion = (Box<str>, u64);

/// Memo of parsed CRDs: parsing a CRD (its schema can be large) once per CRD object version, not per read.
#[derive(Default)]
pub(crate) struct CrdFields {
    /// Per custom resource version: the CRD object's (uid, resourceVersion) and what it declares.
    memo: Mutex<HashMap<Gvr, (CrdVersion, Option<SelectableFields>)>>,
}

// === impl CrdFields ===

impl CrdFields {
    /// The selectable fields of `gvr`'s CRD for its version; `None` when kache cannot tell (CRDs not
    /// cached or not synced yet, no CRD for the resource, a version or path it cannot read): the caller
    /// forwards. With `lazy`, a first lookup starts caching CRDs.
    pub fn lookup(&self, registry: &Registry, gvr: &Gvr, lazy: bool) -> Option<SelectableFields> {
        let crds = crd_gvr();
        let Some(store) = registry.get(&crds) else {
            if lazy {
                registry.ensure(&crds);
            }
            return None;
        };
        if !store.is_synced() {
            return None;
        }
        let snapshot = store.current();
        let crd = snapshot.get(&custom::crd_name(&gvr.group, &gvr.resource))?;
        let version = (crd.uid.clone(), crd.resource_version);
        let mut memo = self.memo.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((seen, fields)) = memo.get(gvr)
            && *seen == version
        {
            return fields.clone();
        }
        let fields = custom::from_crd(&crd.raw, &gvr.version);
        if memo.len() >= MAX_ENTRIES {
            memo.clear();
        }
        memo.insert(gvr.clone(), (version, fields.clone()));
        fields
    }
}
