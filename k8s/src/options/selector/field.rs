//! Field selectors: apimachinery's `fields.ParseSelector` (terms, escapes, messages), the per-kind field
//! label conversion of the registry (which fields a kind supports), and matching against stored objects.

use std::borrow::Cow;
use std::fmt;

use super::Selectable;
use super::custom::{self, SelectableFields};
use crate::json::go_quote;
use crate::resource::FieldKind;

/// `=`/`==` (`hasTerm`) or `!=` (`notHasTerm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldOp {
    Equals,
    NotEquals,
}

/// One term `field op value`, the value unescaped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldTerm {
    pub field: String,
    pub op: FieldOp,
    pub value: String,
}

/// A parsed field selector: the AND of its terms in the parser's order (the raw terms sorted as strings).
/// Empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<FieldTerm>,
    /// A custom resource's selectable fields, set by [`FieldSelector::convert_custom`]: terms on them read
    /// the object's bytes.
    custom: Option<SelectableFields>,
}

/// Why a field selector failed to parse or names an unsupported field; the message reaches clients as a 400.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FieldSelectorError(pub String);

/// Where a term's field value comes from, resolved once per kind for fast matching.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FieldRef {
    Name,
    Namespace,
    /// Index into [`Selectable::extra_field`] (aligned with [`FieldKind::extra_fields`]).
    Extra(usize),
    /// Index into the selector's custom resource [`SelectableFields`]: read from the object's bytes.
    Custom(usize),
    /// A field the kind accepts but does not put in its field set: always reads as `""`.
    Absent,
}

// === impl FieldSelector ===

impl FieldSelector {
    pub fn everything() -> Self {
        Self::default()
    }

    /// `fields.ParseSelector`.
    pub fn parse(selector: &str) -> Result<Self, FieldSelectorError> {
        let mut parts = split_terms(selector);
        parts.sort_unstable();
        let mut terms = Vec::with_capacity(parts.len());
        for part in parts {
            if part.is_empty() {
                continue;
            }
            let Some((lhs, op, rhs)) = split_term(part) else {
                return Err(FieldSelectorError(format!(
                    "invalid selector: '{selector}'; can't understand '{part}'"
                )));
            };
            let value = unescape_value(rhs)?;
            // Transform with the identity function: a term with empty field and value selects everything.
            if lhs.is_empty() && value.is_empty() {
                continue;
            }
            terms.push(FieldTerm { field: lhs.to_owned(), op, value });
        }
        Ok(Self { terms, custom: None })
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    pub fn terms(&self) -> &[FieldTerm] {
        &self.terms
    }

    /// `RequiresExactMatch(field)`: the value the first `=` term on `field` pins (for `metadata.name`
    /// single-key reads, `metadata.namespace` narrowing, the pods `spec.nodeName` index).
    pub fn exact(&self, field: &str) -> Option<&str> {
        self.terms.iter().find(|t| t.field == field && t.op == FieldOp::Equals).map(|t| t.value.as_str())
    }

    /// The registry's field label conversion (`get.go` `FieldSelector.Transform(ConvertFieldLabel)`): rejects
    /// fields the kind does not support (400) and renames legacy ones (`spec.host` → `spec.nodeName` for
    /// pods). The first failing term in parser order wins.
    pub fn convert(self, kind: FieldKind) -> Result<Self, FieldSelectorError> {
        let mut terms = Vec::with_capacity(self.terms.len());
        for mut t in self.terms {
            t.field = convert_field_label(kind, &t.field).map_err(FieldSelectorError)?.to_owned();
            terms.push(t);
        }
        Ok(Self { terms, custom: self.custom })
    }

    /// Like [`FieldSelector::convert`] with any conversion function (e.g. [`custom_resource_field_label`]
    /// for CRDs), which returns the internal field name or the error message.
    pub fn convert_with(
        self,
        convert: impl Fn(&str) -> Result<String, String>,
    ) -> Result<Self, FieldSelectorError> {
        let mut terms = Vec::with_capacity(self.terms.len());
        for mut t in self.terms {
            t.field = convert(&t.field).map_err(FieldSelectorError)?;
            terms.push(t);
        }
        Ok(Self { terms, custom: self.custom })
    }

    /// The field label conversion of a custom resource whose CRD declares `fields` for the requested
    /// version ([`custom_resource_field_label`]); terms on them then match on the objects' bytes.
    pub fn convert_custom(
        self,
        namespaced: bool,
        fields: SelectableFields,
    ) -> Result<Self, FieldSelectorError> {
        let labels: Vec<&str> = fields.iter().map(|f| f.label.as_str()).collect();
        let mut converted = self.convert_with(|l| custom_resource_field_label(namespaced, &labels, l))?;
        converted.custom = Some(fields);
        Ok(converted)
    }

    /// Whether an object's fields satisfy every term. A field missing from the object reads as `""`, so
    /// `!=` matches it. Call [`FieldSelector::convert`] first; unknown fields read as `""`.
    pub fn matches<O: Selectable + ?Sized>(&self, obj: &O, kind: FieldKind) -> bool {
        let custom = self.custom.as_deref().unwrap_or_default();
        self.terms.iter().all(|t| term_matches(t, &field_value(obj, resolve(kind, custom, &t.field), custom)))
    }

    /// A matcher with the fields resolved once, for scanning many objects of one kind.
    pub fn matcher(&self, kind: FieldKind) -> FieldMatcher<'_> {
        let custom = self.custom.as_deref().unwrap_or_default();
        FieldMatcher {
            terms: self.terms.iter().map(|t| (resolve(kind, custom, &t.field), t)).collect(),
            custom,
        }
    }
}

impl fmt::Display for FieldSelector {
    /// `andTerm.String()`: `field=value` / `field!=value` with values escaped, joined by `,`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let op = if t.op == FieldOp::Equals { "=" } else { "!=" };
            write!(f, "{}{op}{}", t.field, escape_value(&t.value))?;
        }
        Ok(())
    }
}

/// A [`FieldSelector`] with its fields resolved for one kind.
pub struct FieldMatcher<'a> {
    terms: Vec<(FieldRef, &'a FieldTerm)>,
    custom: &'a [custom::SelectableField],
}

impl FieldMatcher<'_> {
    pub fn matches<O: Selectable + ?Sized>(&self, obj: &O) -> bool {
        self.terms.iter().all(|(r, t)| term_matches(t, &field_value(obj, *r, self.custom)))
    }
}

fn term_matches(t: &FieldTerm, actual: &str) -> bool {
    match t.op {
        FieldOp::Equals => actual == t.value,
        FieldOp::NotEquals => actual != t.value,
    }
}

fn resolve(kind: FieldKind, custom: &[custom::SelectableField], field: &str) -> FieldRef {
    match field {
        "metadata.name" => FieldRef::Name,
        "metadata.namespace" => FieldRef::Namespace,
        f => match custom.iter().position(|c| c.label == f) {
            Some(i) => FieldRef::Custom(i),
            None => {
                kind.extra_fields().iter().position(|x| *x == f).map_or(FieldRef::Absent, FieldRef::Extra)
            }
        },
    }
}

fn field_value<'a, O: Selectable + ?Sized>(
    obj: &'a O,
    r: FieldRef,
    custom: &[custom::SelectableField],
) -> Cow<'a, str> {
    match r {
        FieldRef::Name => Cow::Borrowed(obj.name()),
        // Cluster-scoped objects have no metadata.namespace in their field set: reads as "".
        FieldRef::Namespace => Cow::Borrowed(obj.namespace().unwrap_or("")),
        FieldRef::Extra(i) => Cow::Borrowed(obj.extra_field(i).unwrap_or("")),
        FieldRef::Custom(i) => {
            Cow::Owned(custom.get(i).map_or_else(String::new, |f| custom::value_at(obj.raw_json(), &f.path)))
        }
        FieldRef::Absent => Cow::Borrowed(""),
    }
}

/// The per-kind field label conversion functions (k/k `pkg/apis/core/v1/conversion.go` and friends;
/// `DefaultMetaV1FieldSelectorConversion` for every other kind). Returns the internal field name.
pub fn convert_field_label(kind: FieldKind, label: &str) -> Result<&'static str, String> {
    let supported: &[&'static str] = match kind {
        FieldKind::Generic => {
            return match label {
                "metadata.name" => Ok("metadata.name"),
                "metadata.namespace" => Ok("metadata.namespace"),
                _ => Err(format!(
                    "{} is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
                    go_quote(label)
                )),
            };
        }
        FieldKind::Pod => {
            if label == "spec.host" {
                // Backwards compatibility with old v1 clients.
                return Ok("spec.nodeName");
            }
            &["metadata.name", "metadata.namespace", "status.podIPs"]
        }
        FieldKind::Node | FieldKind::Namespace => &["metadata.name"],
        _ => &["metadata.name", "metadata.namespace"],
    };
    supported
        .iter()
        .chain(kind.extra_fields())
        .find(|f| **f == label)
        .copied()
        .ok_or_else(|| format!("field label not supported: {label}"))
}

/// Whether every term of a custom resource's field selector names a field of its object meta field set
/// (`objectMetaFieldsSet`: `metadata.name`, and `metadata.namespace` for namespaced kinds). Any other field
/// is one of the CRD's `selectableFields` or refused with `field label not supported: <f>`.
pub fn custom_resource_metadata_fields(selector: &FieldSelector, namespaced: bool) -> bool {
    selector
        .terms
        .iter()
        .all(|t| t.field == "metadata.name" || (namespaced && t.field == "metadata.namespace"))
}

/// The field label conversion of custom resources (apiextensions-apiserver, checked against the real
/// 1.36 server): the object meta fields and the CRD's `selectableFields` by their JSON path without its
/// leading dot (`.spec.color` selects as `spec.color`; the dotted form is refused); anything else is
/// `field label not supported: <label>`.
pub fn custom_resource_field_label(
    namespaced: bool,
    selectable_fields: &[&str],
    label: &str,
) -> Result<String, String> {
    let selectable = selectable_fields.iter().any(|f| f.strip_prefix('.').unwrap_or(f) == label);
    if label == "metadata.name" || (namespaced && label == "metadata.namespace") || selectable {
        return Ok(label.to_owned());
    }
    Err(format!("field label not supported: {label}"))
}

/// `splitTerms`: split on unescaped commas (a backslash escapes the next character).
fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in s.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

/// `splitTerm`: the first position where `!=`, `==` or `=` starts (tried in that order) splits the term.
fn split_term(term: &str) -> Option<(&str, FieldOp, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        if let Some(r) = rest.strip_prefix("!=") {
            return Some((&term[..i], FieldOp::NotEquals, r));
        }
        if let Some(r) = rest.strip_prefix("==") {
            return Some((&term[..i], FieldOp::Equals, r));
        }
        if let Some(r) = rest.strip_prefix('=') {
            return Some((&term[..i], FieldOp::Equals, r));
        }
    }
    None
}

/// `UnescapeValue`: `\\`, `\,` and `\=` are the only escapes; bare `,` or `=` are errors.
fn unescape_value(s: &str) -> Result<String, FieldSelectorError> {
    if !s.contains(['\\', ',', '=']) {
        return Ok(s.to_owned());
    }
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                _ => {
                    return Err(FieldSelectorError(format!(
                        "invalid field selector: invalid escape sequence: \\{c}"
                    )));
                }
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            // Go prints the rune with %v: its decimal code point.
            ',' | '=' => {
                return Err(FieldSelectorError(format!(
                    "invalid field selector: unescaped character in value: {}",
                    c as u32
                )));
            }
            _ => out.push(c),
        }
    }
    if in_slash {
        return Err(FieldSelectorError("invalid field selector: invalid escape sequence: \\".into()));
    }
    Ok(out)
}

/// `EscapeValue`: the inverse of [`unescape_value`].
pub fn escape_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
#[path = "field_tests.rs"]
mod tests;
