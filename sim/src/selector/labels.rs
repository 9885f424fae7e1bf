//! Label selectors: the grammar, validation and error texts of apimachinery `labels/selector.go` come from
//! `kache_k8s` (written once for kache and the sim); matching against the sim's own objects is here.

use std::fmt;

use kache_k8s::options::selector as k8s;

// === impl LabelSelector ===

/// A parsed label selector: the AND of its requirements, sorted by key like `labels.Parse`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(k8s::LabelSelector);

impl LabelSelector {
    /// Parses a selector string. `Err` carries the message the apiserver puts in its 400 Status.
    pub fn parse(s: &str) -> Result<Self, String> {
        k8s::LabelSelector::parse(s).map(LabelSelector).map_err(|e| e.0)
    }

    /// True when the selector does not restrict anything (empty or blank input).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// True when every requirement matches the object's `metadata.labels`.
    pub fn matches(&self, labels: &serde_json::Map<String, serde_json::Value>) -> bool {
        self.0.matches_with(|key| labels.get(key).and_then(serde_json::Value::as_str))
    }
}

impl fmt::Display for LabelSelector {
    /// `internalSelector.String()`: the canonical form, requirements joined by `,`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
