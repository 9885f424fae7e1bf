//! Field selectors of custom resources beyond their object meta: the CRD's `selectableFields` (per
//! version), read from the CustomResourceDefinition objects kache caches, and the value each one selects,
//! read from an object's stored bytes at match time.
//!
//! The apiextensions-apiserver (1.36, `pkg/registry/customresource/strategy.go`): each selectable field is
//! named by its `jsonPath` without the leading dot (`.spec.color` selects as `spec.color`), evaluated with
//! client-go's jsonpath allowing missing keys, and printed with `fmt.Sprint` (strings as they are, integers
//! in decimal, booleans `true`/`false`); an absent or null field selects as `""`. The CRD's validation
//! restricts the path to field accesses (`.a.b`, `['a.b']`) that reach a string, integer or boolean.
//!
//! The values are not extracted at ingest: a CRD update that changes `selectableFields` then takes effect
//! on the next request, with no relist, and resources nobody selects on pay nothing.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::value::RawValue;

/// One selectable field: the label clients select on and the member path it reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectableField {
    /// The field label: the CRD's `jsonPath` without its leading `.`.
    pub label: String,
    /// The member names the path walks, from the object's root.
    pub path: Vec<String>,
}

/// A version's selectable fields, shared by every request that selects on them.
pub type SelectableFields = Arc<[SelectableField]>;

/// The CRD's object name for a resource: `<plural>.<group>`.
pub fn crd_name(group: &str, resource: &str) -> String {
    format!("{resource}.{group}")
}

/// The selectable fields the CRD (`apiextensions.k8s.io/v1` JSON) declares for `version`. `None` when the
/// CRD does not serve that version or declares a path kache cannot read exactly (then the upstream
/// answers the request).
pub fn from_crd(crd: &[u8], version: &str) -> Option<SelectableFields> {
    #[derive(serde::Deserialize)]
    struct Crd {
        spec: Spec,
    }
    #[derive(serde::Deserialize)]
    struct Spec {
        #[serde(default)]
        versions: Vec<Version>,
    }
    #[derive(serde::Deserialize)]
    struct Version {
        name: String,
        #[serde(default, rename = "selectableFields")]
        selectable_fields: Option<Vec<Field>>,
    }
    #[derive(serde::Deserialize)]
    struct Field {
        #[serde(rename = "jsonPath")]
        json_path: String,
    }
    // Only the members named above are decoded; schemas and the rest are skipped.
    let crd: Crd = serde_json::from_slice(crd).ok()?;
    let version = crd.spec.versions.into_iter().find(|v| v.name == version)?;
    version
        .selectable_fields
        .unwrap_or_default()
        .into_iter()
        .map(|f| {
            let path = parse_json_path(&f.json_path)?;
            let label = f.json_path.strip_prefix('.').unwrap_or(&f.json_path).to_owned();
            Some(SelectableField { label, path })
        })
        .collect()
}

/// A simple JSON path (`.spec.color`, `.spec['a.b']`, `.spec["x"]`) as member names; `None` for anything
/// else (array indexing, wildcards, filters — which the CRD's validation refuses anyway).
pub fn parse_json_path(s: &str) -> Option<Vec<String>> {
    let mut path = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let name = &r[..end];
            if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-') {
                return None;
            }
            path.push(name.to_owned());
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let quote = r.chars().next().filter(|q| *q == '\'' || *q == '"')?;
            let body = &r[1..];
            let close = body.find(quote)?;
            let name = &body[..close];
            // Escapes inside brackets are left to the upstream.
            if name.is_empty() || name.contains('\\') {
                return None;
            }
            path.push(name.to_owned());
            rest = body[close + 1..].strip_prefix(']')?;
        } else {
            return None;
        }
    }
    (!path.is_empty()).then_some(path)
}

/// The value `path` selects in `raw` (one JSON object), as `fmt.Sprint` prints it; `""` when absent or
/// null.
pub fn value_at(raw: &[u8], path: &[String]) -> String {
    let Ok(text) = std::str::from_utf8(raw) else { return String::new() };
    let Some(value) = raw_value_at(text, path) else { return String::new() };
    match value.get().as_bytes().first() {
        Some(b'"') => serde_json::from_str::<String>(value.get()).unwrap_or_default(),
        Some(b't' | b'f') => value.get().to_owned(),
        Some(b'-' | b'0'..=b'9') => go_sprint_number(value.get()),
        // Null, and (unreachable under the CRD's schema) objects and arrays.
        _ => String::new(),
    }
}

/// The raw value at `path` (member names from the root) in the JSON object `text`: the last member of each
/// name wins, like Go's decoder (a map insert overwrites); `None` when a segment is missing, crosses a
/// non-object, or `text` is not valid JSON.
fn raw_value_at<'a>(text: &'a str, path: &[String]) -> Option<&'a RawValue> {
    let mut found: Option<&'a RawValue> = None;
    let mut current = text;
    for segment in path {
        let mut members: HashMap<String, &'a RawValue> = serde_json::from_str(current).ok()?;
        let value = members.remove(segment.as_str())?;
        current = value.get();
        found = Some(value);
    }
    found
}

/// A JSON number as Go prints the value the apiserver decoded it into: an `int64` when the text is an
/// integer that fits, else a `float64` (`%v`: shortest digits, exponent form below 1e-4 and from 1e21).
fn go_sprint_number(text: &str) -> String {
    if !text.contains(['.', 'e', 'E'])
        && let Ok(i) = text.parse::<i64>()
    {
        return i.to_string();
    }
    let Ok(f) = text.parse::<f64>() else { return text.to_owned() };
    go_format_float(f)
}

/// `strconv.FormatFloat(f, 'g', -1, 64)` as `fmt` uses it for `%v` (exponent when < -4 or ≥ 21).
fn go_format_float(f: f64) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    // Rust's `{:e}` gives the shortest round-trip digits: `d.ddde±x`.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("{:e} exponent is an integer");
    if !(-4..21).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    format!("{f}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(s: &str) -> Vec<String> {
        parse_json_path(s).unwrap_or_else(|| panic!("{s} parses"))
    }

    #[test]
    fn json_paths() {
        assert_eq!(path(".spec.color"), ["spec", "color"]);
        assert_eq!(path(".spec['a.b']"), ["spec", "a.b"]);
        assert_eq!(path(".spec[\"x\"].y"), ["spec", "x", "y"]);
        for bad in ["", ".", "spec", ".spec[0]", ".spec.*", ".spec[?(@.x)]", ".a..b", ".a['x'", ".a b"] {
            assert_eq!(parse_json_path(bad), None, "{bad}");
        }
    }

    #[test]
    fn values_print_like_go() {
        let raw = br#"{"spec":{"color":"r\u00e9d","size":42,"neg":-0,"on":true,"off":false,"none":null,
            "f":1.5,"big":1e21,"small":0.00001,"obj":{},"a.b":"dotted"}}"#;
        let v = |p: &str| value_at(raw, &path(p));
        assert_eq!(v(".spec.color"), "réd");
        assert_eq!(v(".spec.size"), "42");
        assert_eq!(v(".spec.neg"), "0");
        assert_eq!((v(".spec.on"), v(".spec.off")), ("true".into(), "false".into()));
        assert_eq!(v(".spec.none"), "");
        assert_eq!(v(".spec.missing"), "");
        assert_eq!(v(".spec.color.deeper"), "");
        assert_eq!(v(".status.x"), "");
        assert_eq!(
            (v(".spec.f"), v(".spec.big"), v(".spec.small")),
            ("1.5".into(), "1e+21".into(), "1e-05".into())
        );
        assert_eq!(v(".spec['a.b']"), "dotted");
    }

    #[test]
    fn fields_per_version_from_the_crd() {
        let crd = br#"{"kind":"CustomResourceDefinition","spec":{"group":"example.com","versions":[
            {"name":"v1","schema":{"openAPIV3Schema":{"type":"object"}},"selectableFields":[{"jsonPath":".spec.color"},{"jsonPath":".spec.size"}]},
            {"name":"v2"}]}}"#;
        let v1 = from_crd(crd, "v1").expect("v1");
        assert_eq!(v1.iter().map(|f| f.label.as_str()).collect::<Vec<_>>(), ["spec.color", "spec.size"]);
        assert_eq!(v1[1].path, ["spec", "size"]);
        assert!(from_crd(crd, "v2").expect("v2").is_empty());
        assert_eq!(from_crd(crd, "v3"), None);
        let odd =
            br#"{"spec":{"versions":[{"name":"v1","selectableFields":[{"jsonPath":".spec.items[0]"}]}]}}"#;
        assert_eq!(from_crd(odd, "v1"), None, "a path kache cannot read leaves the request to the upstream");
    }
}
