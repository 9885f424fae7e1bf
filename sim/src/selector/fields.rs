//! Field selectors: parsing (apimachinery `fields/selector.go`: terms split on unescaped `,`, sorted as raw
//! strings, split at the first `!=`, `==` or `=`, values unescaped) comes from `kache_k8s`, written once for
//! kache and the sim; matching against the field sets the sim's registries compute is here.

use std::collections::BTreeMap;

use kache_k8s::options::selector as k8s;

/// The legacy pod field that the Pod conversion function rewrites to `spec.nodeName`.
pub(crate) const LEGACY_POD_HOST_FIELD: &str = "spec.host";
/// What [`LEGACY_POD_HOST_FIELD`] means.
pub(crate) const POD_NODE_NAME_FIELD: &str = "spec.nodeName";

// === impl FieldSelector ===

/// A parsed field selector: the AND of `field=value` / `field!=value` terms, sorted like the apiserver sorts
/// them (by the raw term text), which also decides which unsupported field an error names first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<(String, bool, String)>,
}

impl FieldSelector {
    /// Parses a selector string. `Err` carries the message the apiserver puts in its 400 Status.
    pub fn parse(s: &str) -> Result<Self, String> {
        let parsed = k8s::FieldSelector::parse(s).map_err(|e| e.0)?;
        let terms = parsed
            .terms()
            .iter()
            .map(|t| (t.field.clone(), t.op == k8s::FieldOp::Equals, t.value.clone()))
            .collect();
        Ok(FieldSelector { terms })
    }

    /// Builds a selector from already-converted terms (used by the per-kind conversion).
    pub(crate) fn from_terms(terms: Vec<(String, bool, String)>) -> Self {
        FieldSelector { terms }
    }

    /// True when the selector does not restrict anything.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The terms, sorted: `(field, true for = or ==, false for !=, unescaped value)`.
    pub fn terms(&self) -> &[(String, bool, String)] {
        &self.terms
    }

    /// The value an `=`/`==` term requires for `field`, if any (`RequiresExactMatch`): how the apiserver
    /// spots `metadata.name=X` (single-object read) and `metadata.namespace=X` (narrowed key range).
    pub fn requires_exact_match(&self, field: &str) -> Option<&str> {
        self.terms.iter().find(|(f, eq, _)| *eq && f == field).map(|(_, _, v)| v.as_str())
    }

    /// True when every term matches. A field missing from `fields` reads as `""`, so `f!=x` matches objects
    /// without `f` (apimachinery `fields.Set.Get`).
    pub fn matches(&self, fields: &BTreeMap<String, String>) -> bool {
        self.terms.iter().all(|(field, eq, value)| {
            let mut actual = fields.get(field);
            // Only the Pod conversion accepts `spec.host`, and it means `spec.nodeName`; honour that here too
            // so that a caller which validated but did not convert still matches correctly.
            if actual.is_none() && field == LEGACY_POD_HOST_FIELD {
                actual = fields.get(POD_NODE_NAME_FIELD);
            }
            let actual = actual.map(String::as_str).unwrap_or("");
            (actual == value) == *eq
        })
    }
}

impl std::fmt::Display for FieldSelector {
    /// The canonical form (`andTerm.String()`), values re-escaped so that the output parses back.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (field, eq, value)) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{field}{}{}", if *eq { "=" } else { "!=" }, k8s::field::escape_value(value))?;
        }
        Ok(())
    }
}
