//! Field selectors: an independent port of apimachinery `fields/selector.go`.
//!
//! Terms are split on unescaped `,` (a `\,` stays inside the term), sorted as raw strings, empty terms are
//! skipped, each term is split at the first `!=`, `==` or `=` (the field part has no escaping), and the value
//! is unescaped: `\\`, `\,`, `\=` are the only escapes, and a bare `,` or `=` in a value is an error.

use std::collections::BTreeMap;

/// Operators in the order `splitTerm` tries them at each position (`==` before `=` so that `a==b` does not
/// leave `=b` as the value).
const TERM_OPERATORS: [&str; 3] = ["!=", "==", "="];

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
        let mut parts = split_terms(s);
        parts.sort_unstable();
        let mut terms = Vec::with_capacity(parts.len());
        for part in parts.into_iter().filter(|p| !p.is_empty()) {
            let Some((field, op, raw_value)) = split_term(part) else {
                return Err(format!("invalid selector: '{s}'; can't understand '{part}'"));
            };
            let value = unescape_value(raw_value)?;
            terms.push((field.to_string(), op != "!=", value));
        }
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
            write!(f, "{field}{}{}", if *eq { "=" } else { "!=" }, escape_value(value))?;
        }
        Ok(())
    }
}

// === parsing helpers ===

/// `splitTerms`: splits on `,` not preceded by an escaping `\`; escapes stay in the terms.
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

/// `splitTerm`: the first position where an operator starts splits the term.
fn split_term(term: &str) -> Option<(&str, &'static str, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for op in TERM_OPERATORS {
            if let Some(value) = rest.strip_prefix(op) {
                return Some((&term[..i], op, value));
            }
        }
    }
    None
}

/// `UnescapeValue`.
fn unescape_value(s: &str) -> Result<String, String> {
    if !s.contains(['\\', ',', '=']) {
        return Ok(s.to_string());
    }
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                _ => return Err(format!("invalid field selector: invalid escape sequence: \\{c}")),
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            // The rune is printed with %v: its decimal code point.
            ',' | '=' => {
                return Err(format!("invalid field selector: unescaped character in value: {}", c as u32));
            }
            _ => out.push(c),
        }
    }
    if in_slash {
        return Err("invalid field selector: invalid escape sequence: \\".to_string());
    }
    Ok(out)
}

/// `EscapeValue`.
pub(crate) fn escape_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
