//! The members of `metadata` kache keeps.

use sonic_rs::{JsonValueTrait, LazyValue};

use super::{ExtractError, ITERATION, json};
use crate::store::Labels;

/// The raw `metadata` members, found by either extraction path.
#[derive(Default)]
pub(super) struct MetaValues<'a> {
    pub name: Option<LazyValue<'a>>,
    pub namespace: Option<LazyValue<'a>>,
    pub uid: Option<LazyValue<'a>>,
    pub resource_version: Option<LazyValue<'a>>,
    pub labels: Option<LazyValue<'a>>,
}

/// The decoded members (strings borrowed from the lazy values: no copies until the object is built).
pub(super) struct Meta<'v> {
    pub name: Option<&'v str>,
    pub namespace: Option<&'v str>,
    pub uid: Option<&'v str>,
    pub resource_version: u64,
    pub labels: Labels,
}

// === impl MetaValues ===

impl<'a> MetaValues<'a> {
    /// Collects the members by iterating `metadata` (the general path).
    pub fn read(metadata: &LazyValue<'a>) -> Result<Self, ExtractError> {
        if metadata.is_null() {
            return Err(ExtractError::MissingMetadata);
        }
        let members = metadata.clone().into_object_iter().ok_or(ExtractError::WrongType("metadata"))?;
        let mut values = MetaValues::default();
        for member in members {
            let (key, value) = member.map_err(|_| ExtractError::Internal(ITERATION))?;
            let slot = match &*key {
                "name" => &mut values.name,
                "namespace" => &mut values.namespace,
                "uid" => &mut values.uid,
                "resourceVersion" => &mut values.resource_version,
                "labels" => &mut values.labels,
                _ => continue,
            };
            // The last duplicate wins, like Go's decoder.
            *slot = Some(value);
        }
        Ok(values)
    }

    pub fn decode(&self) -> Result<Meta<'_>, ExtractError> {
        fn text<'v>(
            v: &'v Option<LazyValue<'_>>,
            what: &'static str,
        ) -> Result<Option<&'v str>, ExtractError> {
            match v {
                Some(v) => json::opt_str(v, what),
                None => Ok(None),
            }
        }
        let rv_text = text(&self.resource_version, "metadata.resourceVersion")?.unwrap_or_default();
        let resource_version =
            json::parse_rv(rv_text).ok_or_else(|| ExtractError::BadResourceVersion(rv_text.to_owned()))?;
        Ok(Meta {
            name: text(&self.name, "metadata.name")?.filter(|n| !n.is_empty()),
            namespace: text(&self.namespace, "metadata.namespace")?,
            uid: text(&self.uid, "metadata.uid")?,
            resource_version,
            labels: match &self.labels {
                Some(labels) => read_labels(labels)?,
                None => Labels::default(),
            },
        })
    }
}

/// `metadata.labels` sorted by key (the last duplicate wins, like Go's decoder); null reads as empty.
fn read_labels(value: &LazyValue<'_>) -> Result<Labels, ExtractError> {
    if value.is_null() {
        return Ok(Box::default());
    }
    let members = value.clone().into_object_iter().ok_or(ExtractError::WrongType("metadata.labels"))?;
    let mut labels = Vec::new();
    for member in members {
        let (key, value) = member.map_err(|_| ExtractError::Internal(ITERATION))?;
        let value = json::opt_str(&value, "metadata.labels")?.unwrap_or("");
        labels.push((Box::from(&*key), Box::from(value)));
    }
    // Reverse then stable-sort: among equal keys the last one comes first, and dedup keeps the first.
    labels.reverse();
    labels.sort_by(|a: &(Box<str>, Box<str>), b| a.0.cmp(&b.0));
    labels.dedup_by(|later, kept| later.0 == kept.0);
    Ok(labels.into_boxed_slice())
}

/// Rejects a name or namespace containing `/`, which would break the store's key order.
pub(super) fn check_name(field: &'static str, value: &str) -> Result<(), ExtractError> {
    if value.contains('/') {
        return Err(ExtractError::InvalidName { field, value: value.to_owned() });
    }
    Ok(())
}
