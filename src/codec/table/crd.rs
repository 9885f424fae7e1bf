//! Custom resources' Tables: the columns ([`kache_k8s::table::crd`]) come from the CRD object in kache's own
//! store of `customresourcedefinitions`; each distinct column set is interned once and named by a small id,
//! so a [`super::Printer`] stays `Copy` and rows cached under an old column set are never reused for a new
//! one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

pub use kache_k8s::table::crd::CrdColumns;

/// Distinct column sets kept at most: a bound on what CRD edits can make this registry hold.
const MAX_COLUMN_SETS: usize = 4096;

type MemoKey = (Box<str>, u64, String);

/// The interned column sets of one kache, and which set each CRD object version's version has.
#[derive(Default)]
pub(crate) struct CrdPrinters {
    sets: Mutex<Vec<Arc<CrdColumns>>>,
    memo: Mutex<HashMap<MemoKey, Option<u32>>>,
}

impl CrdPrinters {
    /// The id of `cols` (an equal set already interned keeps its id); None past [`MAX_COLUMN_SETS`].
    pub(crate) fn intern(&self, cols: CrdColumns) -> Option<u32> {
        let mut sets = self.sets.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = sets.iter().position(|s| **s == cols) {
            return u32::try_from(i).ok();
        }
        if sets.len() >= MAX_COLUMN_SETS {
            return None;
        }
        sets.push(Arc::new(cols));
        u32::try_from(sets.len() - 1).ok()
    }

    /// The column set of an id from [`CrdPrinters::intern`].
    pub(crate) fn get(&self, id: u32) -> Option<Arc<CrdColumns>> {
        self.sets.lock().unwrap_or_else(|p| p.into_inner()).get(id as usize).cloned()
    }

    /// The column-set id of a stored CRD object's `version`, parsed once per CRD object version.
    pub(crate) fn for_crd_object(&self, crd: &crate::store::Object, version: &str) -> Option<u32> {
        let key = (crd.uid.clone(), crd.resource_version, version.to_owned());
        if let Some(id) = self.memo.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return *id;
        }
        let value: Value = serde_json::from_slice(&crd.raw).ok()?;
        let id = CrdColumns::from_crd(&value, version).and_then(|c| self.intern(c));
        let mut memo = self.memo.lock().unwrap_or_else(|p| p.into_inner());
        if memo.len() >= MAX_COLUMN_SETS {
            memo.clear();
        }
        memo.insert(key, id);
        id
    }
}
