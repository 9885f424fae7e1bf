//! The members of `metadata` kache keeps.

use std::borrow::Cow;

use serde_json::value::RawValue;

use super::{ExtractError, json};
use crate::store::Labels;

/// The raw `metadata` members.
#[derive(Default)]
pub(super) struct MetaValues<'a> {
    pub name: Option<&'a RawValue>,
    pub namespace: Option<&'a RawValue>,
    pub uid: Option<&'a RawValue>,
    pub resource_version: Option<&'a RawValue>,
    pub labels: Option<&'a RawValue>,
}

/// The decoded members (strings borrowed from the input unless escaped: no copies until the object is
/// built).
pub(super) struct Meta<'a> {
    pub name: Option<Cow<'a, str>>,
    pub namespace: Option<Cow<'a, str>>,
    pub uid: Option<Cow<'a, str>>,
    pub resource_version: u64,
    pub labels: Labels,
}

// === impl MetaValues ===

impl<'a> MetaValues<'a> {
    /// Picks the members kache keeps from `metadata`'s members.
    pub(crate) fn from_members(members: &json::Members<'a>) -> Self {
        let mut values = MetaValues::default();
        for (key, value) in members {
            let slot = match &**key {
                "name" => &mut values.name,
                "namespace" => &mut values.namespace,
                "uid" => &mut values.uid,
                "resourceVersion" => &mut values.resource_version,
                "labels" => &mut values.labels,
                _ => continue,
            };
            // The last duplicate wins, like Go's decoder.
            *slot = Some(*value);
        }
        values
    }

    pub fn decode(&self) -> Result<Meta<'a>, ExtractError> {
        fn text<'a>(
            v: Option<&'a RawValue>,
            what: &'static str,
        ) -> Result<Option<Cow<'a, str>>, ExtractError> {
            match v {
                Some(v) => json::opt_str(v, what),
                None => Ok(None),
            }
        }
        let rv_text = text(self.resource_version, "metadata.resourceVersion")?.unwrap_or_default();
        let resource_version =
            json::parse_rv(&rv_text).ok_or_else(|| ExtractError::BadResourceVersion(rv_text.into_owned()))?;
        Ok(Meta {
            name: text(self.name, "metadata.name")?.filter(|n| !n.is_empty()),
            namespace: text(self.namespace, "metadata.namespace")?,
            uid: text(self.uid, "metadata.uid")?,
            resource_version,
            labels: match self.labels {
                Some(labels) => read_labels(labels)?,
                None => Labels::default(),
            },
        })
    }
}

/// `metadata.labels` sorted by key (the last duplicate wins, like Go's decoder); null reads as empty.
fn read_labels(value: &RawValue) -> Result<Labels, ExtractError> {
    if json::is_null(value) {
        return Ok(Box::default());
    }
    let members = json::members(value.get())?.ok_or(ExtractError::WrongType("metadata.labels"))?;
    let mut labels = Vec::with_capacity(members.len());
    for (key, value) in members {
        let value = json::opt_str(value, "metadata.labels")?.unwrap_or_default();
        labels.push((Box::from(&*key), Box::from(&*value)));
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
