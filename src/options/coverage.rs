//! Filtered mirrors: a resource cached with a selector (`--resource-selector pods:fieldSelector=spec.nodeName=N`)
//! holds only the objects that match it, so a read may be answered from memory only when it provably asks
//! for a subset of that selection. Everything else is forwarded.
//!
//! **The rule.** A mirror's selector is a conjunction of field terms and label requirements; a request is a
//! conjunction too (its own `fieldSelector` and `labelSelector`, plus what its URL pins: the namespace of a
//! namespaced resource as `metadata.namespace=NS`, the name of a get as `metadata.name=NAME`). The request is
//! *covered* when **each** of the mirror's terms is implied by **one** of the request's terms on the same
//! field or label key (never by a combination of several, never by knowledge about the data):
//!
//! | mirror term | implied by a request term |
//! |---|---|
//! | field `f=v` | `f=v` |
//! | field `f!=v` | `f!=v`, or `f=w` with `w≠v` |
//! | label `k in (V)` (`=`, `==`) | `k in (W)` / `k=w` with W ⊆ V |
//! | label `k notin (V)` (`!=`) | `k notin (W)` with V ⊆ W; `k in (W)` with W ∩ V = ∅; `!k` |
//! | label `k` (exists) | `k in (W)`, `k`, `k>n`, `k<n` |
//! | label `!k` | `!k` |
//! | label `k>n` | `k>m` with m ≥ n; `k in (W)` with every w an integer > n |
//! | label `k<n` | `k<m` with m ≤ n; `k in (W)` with every w an integer < n |
//!
//! Field names are compared after the kind's field-label conversion on both sides (`spec.host` is
//! `spec.nodeName` for pods). When the request is covered, every object it selects upstream matches the
//! mirror, so filtering the mirror with the request's own selector gives the upstream's answer; its
//! resourceVersion is the upstream's revision, because the mirror's watch advances with every upstream
//! bookmark as well as its own events. A request that is not covered — every unfiltered list, get and watch,
//! and a get by name unless the mirror only pins namespace or name — is forwarded: an object outside the
//! selection is absent from memory but may exist upstream, so memory could only answer a wrong 404.

use std::fmt;

use crate::options::selector::label::parse_go_int64;
use crate::options::selector::{
    FieldOp, FieldSelector, FieldTerm, LabelSelector, Operator, Requirement, convert_field_label,
};
use crate::resource::FieldKind;

/// What a filtered mirror holds: the objects matching both selectors (as the upstream applies them to the
/// mirror's list and watch).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MirrorSelector {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

/// A `--resource-selector` value that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid resource selector {spec:?}: {reason}")]
pub struct SelectorSpecError {
    pub spec: String,
    pub reason: String,
}

/// What a read asks for, as far as coverage is concerned.
#[derive(Clone, Copy, Debug)]
pub struct Requested<'a> {
    /// The URL's namespace (only for namespaced resources): an implicit `metadata.namespace=` term.
    pub namespace: Option<&'a str>,
    /// A get's name: an implicit `metadata.name=` term.
    pub name: Option<&'a str>,
    pub labels: &'a LabelSelector,
    /// Converted with the kind's field-label conversion.
    pub fields: &'a FieldSelector,
}

// === impl MirrorSelector ===

impl MirrorSelector {
    /// Parses the two selectors with the apiserver's grammar (a `fieldSelector` / `labelSelector` value).
    pub fn parse(label_selector: &str, field_selector: &str) -> Result<Self, String> {
        let labels = LabelSelector::parse(label_selector).map_err(|e| e.0)?;
        let fields = FieldSelector::parse(field_selector).map_err(|e| e.0)?;
        Ok(Self { labels, fields })
    }

    /// Whether the mirror holds every object (no selector at all).
    pub(crate) fn is_everything(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    /// The mirror's field terms under the kind's field-label conversion (`spec.host` → `spec.nodeName`), so
    /// they compare with converted requests. A field the conversion refuses is kept as written: the
    /// upstream refuses the mirror's list then, and every read of the resource is forwarded.
    pub fn converted(mut self, kind: FieldKind) -> Self {
        let fields = std::mem::take(&mut self.fields);
        self.fields = fields
            .convert_with(|f| {
                Ok(convert_field_label(kind, f).map(str::to_owned).unwrap_or_else(|_| f.to_owned()))
            })
            .expect("the conversion never fails");
        self
    }

    /// The `labelSelector` / `fieldSelector` query parameters of the mirror's list and watch (in the
    /// selectors' canonical string forms), the empty ones left out.
    pub(crate) fn query_params(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if !self.labels.is_empty() {
            out.push(("labelSelector", self.labels.to_string()));
        }
        if !self.fields.is_empty() {
            out.push(("fieldSelector", self.fields.to_string()));
        }
        out
    }

    /// Whether every object the request selects upstream is in the mirror (see the module doc for the rule).
    pub fn covers(&self, req: &Requested<'_>) -> bool {
        let fields_ok = self.fields.terms().iter().all(|t| {
            let implicit = match t.field.as_str() {
                "metadata.namespace" => req.namespace,
                "metadata.name" => req.name,
                _ => None,
            };
            implicit.is_some_and(|v| field_implies(FieldOp::Equals, v, t))
                || req.fields.terms().iter().any(|r| r.field == t.field && field_implies(r.op, &r.value, t))
        });
        fields_ok
            && self
                .labels
                .requirements()
                .iter()
                .all(|m| req.labels.requirements().iter().any(|r| r.key() == m.key() && label_implies(r, m)))
    }
}

impl fmt::Display for MirrorSelector {
    /// `labelSelector=… fieldSelector=…` (the parts that are set), or `everything`: the `selector` label of
    /// `kache_mirror_selector` and the suffix of the readiness check.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let params = self.query_params();
        if params.is_empty() {
            return f.write_str("everything");
        }
        for (i, (k, v)) in params.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

/// Whether a request's term `field op value` implies the mirror's term `m` on the same field.
fn field_implies(op: FieldOp, value: &str, m: &FieldTerm) -> bool {
    match (m.op, op) {
        (FieldOp::Equals, FieldOp::Equals) => value == m.value,
        (FieldOp::NotEquals, FieldOp::NotEquals) => value == m.value,
        (FieldOp::NotEquals, FieldOp::Equals) => value != m.value,
        (FieldOp::Equals, FieldOp::NotEquals) => false,
    }
}

/// Whether the request's requirement `r` implies the mirror's `m` (same key): every label value (or
/// absence) `r` accepts, `m` accepts.
fn label_implies(r: &Requirement, m: &Requirement) -> bool {
    use Operator::*;
    let ints = |vals: &[String]| vals.iter().map(|v| parse_go_int64(v)).collect::<Option<Vec<i64>>>();
    let bound = |req: &Requirement| req.values().first().and_then(|v| parse_go_int64(v));
    let is_in = |op| matches!(op, In | Equals | DoubleEquals);
    let is_not_in = |op| matches!(op, NotIn | NotEquals);
    match m.operator() {
        op if is_in(op) => is_in(r.operator()) && r.values().iter().all(|v| m.values().contains(v)),
        op if is_not_in(op) => match r.operator() {
            rop if is_not_in(rop) => m.values().iter().all(|v| r.values().contains(v)),
            rop if is_in(rop) => r.values().iter().all(|v| !m.values().contains(v)),
            DoesNotExist => true,
            _ => false,
        },
        Exists => matches!(r.operator(), In | Equals | DoubleEquals | Exists | GreaterThan | LessThan),
        DoesNotExist => r.operator() == DoesNotExist,
        GreaterThan => {
            let Some(n) = bound(m) else { return false };
            match r.operator() {
                GreaterThan => bound(r).is_some_and(|k| k >= n),
                rop if is_in(rop) => ints(r.values()).is_some_and(|ws| ws.iter().all(|w| *w > n)),
                _ => false,
            }
        }
        LessThan => {
            let Some(n) = bound(m) else { return false };
            match r.operator() {
                LessThan => bound(r).is_some_and(|k| k <= n),
                rop if is_in(rop) => ints(r.values()).is_some_and(|ws| ws.iter().all(|w| *w < n)),
                _ => false,
            }
        }
        _ => false,
    }
}

/// Parses one `--resource-selector` value, `RESOURCE:fieldSelector=SELECTOR` or
/// `RESOURCE:labelSelector=SELECTOR`, into the resource spec and the selector. Repeating the flag for one
/// resource ANDs the selectors ([`merge`]).
pub(crate) fn parse_selector_spec(spec: &str) -> Result<(String, MirrorSelector), SelectorSpecError> {
    let err = |reason: &str| SelectorSpecError { spec: spec.to_owned(), reason: reason.to_owned() };
    let Some((resource, selector)) = spec.split_once(':') else {
        return Err(err("expected RESOURCE:fieldSelector=… or RESOURCE:labelSelector=…"));
    };
    let resource = resource.trim();
    if resource.is_empty() {
        return Err(err("no resource before ':'"));
    }
    let parsed = if let Some(s) = selector.strip_prefix("fieldSelector=") {
        MirrorSelector::parse("", s)
    } else if let Some(s) = selector.strip_prefix("labelSelector=") {
        MirrorSelector::parse(s, "")
    } else {
        return Err(err("the selector starts with fieldSelector= or labelSelector="));
    };
    let parsed = parsed.map_err(|e| err(&e))?;
    if parsed.is_everything() {
        return Err(err("an empty selector selects everything; leave the flag out instead"));
    }
    Ok((resource.to_owned(), parsed))
}

/// The AND of two selectors of one resource.
pub fn merge(a: &MirrorSelector, b: &MirrorSelector) -> MirrorSelector {
    let join = |x: String, y: String| match (x.is_empty(), y.is_empty()) {
        (true, _) => y,
        (_, true) => x,
        _ => format!("{x},{y}"),
    };
    MirrorSelector::parse(
        &join(a.labels.to_string(), b.labels.to_string()),
        &join(a.fields.to_string(), b.fields.to_string()),
    )
    .expect("selectors printed in canonical form parse again")
}

#[cfg(test)]
mod tests;
