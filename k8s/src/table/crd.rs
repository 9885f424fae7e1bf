//! Custom resources' Tables (apiextensions-apiserver `registry/customresource/tableconvertor`): a Name
//! column, then the version's `additionalPrinterColumns` (or an `Age` of `.metadata.creationTimestamp`
//! when it declares none), each cell a JSONPath (`.a.b`, `[N]`, `['k']`, the subset CRDs use) typed as
//! the column says — a value of another type is `null`, a `string` column prints any value as text.
//!
//! The columns come from a CRD object's version ([`CrdColumns::from_crd`]) or from a list of declared
//! columns ([`CrdColumns::new`]); a path outside the supported subset makes no column set (kache forwards
//! such Tables rather than approximate them).

use super::Column;
use serde_json::Value;

use super::age;
use super::docs as d;
use super::row::{Cell, Row};
use crate::json;

/// One step of a column's JSONPath.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(i64),
}

/// One printer column, with its parsed path.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CrdColumn {
    name: String,
    ty: String,
    format: String,
    description: String,
    priority: i64,
    path: Vec<Step>,
}

/// A CRD version's printer columns, with their encoded `columnDefinitions`.
#[derive(Debug, PartialEq, Eq)]
pub struct CrdColumns {
    columns: Vec<CrdColumn>,
    json: Vec<u8>,
}

/// Parses `.a.b[0]['c']`; None for anything outside the subset (such columns are not printed from memory).
fn parse_path(p: &str) -> Option<Vec<Step>> {
    let mut steps = Vec::new();
    let mut rest = p.trim();
    rest = rest.strip_prefix('{').and_then(|r| r.strip_suffix('}')).unwrap_or(rest);
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let key = &r[..end];
            if !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                return None;
            }
            if !key.is_empty() {
                steps.push(Step::Key(key.to_owned()));
            }
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inner = r[..end].trim();
            let quoted = inner
                .strip_prefix('\'')
                .and_then(|k| k.strip_suffix('\''))
                .or_else(|| inner.strip_prefix('"').and_then(|k| k.strip_suffix('"')));
            steps.push(match quoted {
                Some(k) => Step::Key(k.to_owned()),
                None => Step::Index(inner.parse().ok()?),
            });
            rest = &r[end + 1..];
        } else {
            return None;
        }
    }
    Some(steps)
}

/// One entry of a CRD version's `additionalPrinterColumns`, as declared.
#[derive(Debug, Clone, Copy, Default)]
pub struct Declared<'a> {
    pub name: &'a str,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub ty: &'a str,
    pub format: &'a str,
    /// Empty: the JSONPath is described.
    pub description: &'a str,
    pub priority: i64,
    pub json_path: &'a str,
}

impl CrdColumns {
    /// The columns of `version` in a CRD object; None when the version is not in it or a column's path
    /// is outside the supported subset.
    pub fn from_crd(crd: &Value, version: &str) -> Option<CrdColumns> {
        let v = crd.pointer("/spec/versions")?.as_array()?.iter().find(|v| v["name"] == version)?;
        let mut declared = Vec::new();
        for c in v.get("additionalPrinterColumns").and_then(Value::as_array).into_iter().flatten() {
            declared.push(Declared {
                name: c.get("name")?.as_str()?,
                ty: c.get("type")?.as_str()?,
                format: c.get("format").and_then(Value::as_str).unwrap_or_default(),
                description: c.get("description").and_then(Value::as_str).unwrap_or_default(),
                priority: c.get("priority").and_then(Value::as_i64).unwrap_or_default(),
                json_path: c.get("jsonPath")?.as_str()?,
            });
        }
        CrdColumns::new(&declared)
    }

    /// The columns a version with these `additionalPrinterColumns` prints (`serveDefaultColumnsIfEmpty`:
    /// an `Age` column when it declares none); None when a column's path is outside the supported subset.
    pub fn new(declared: &[Declared<'_>]) -> Option<CrdColumns> {
        let mut columns = Vec::new();
        for c in declared {
            let description = match c.description {
                "" => format!("Custom resource definition column (in JSONPath format): {}", c.json_path),
                s => s.to_owned(),
            };
            columns.push(CrdColumn {
                name: c.name.to_owned(),
                ty: c.ty.to_owned(),
                format: c.format.to_owned(),
                description,
                priority: c.priority,
                path: parse_path(c.json_path)?,
            });
        }
        if columns.is_empty() {
            columns.push(CrdColumn {
                name: "Age".into(),
                ty: "date".into(),
                format: String::new(),
                description: d::CREATED.into(),
                priority: 0,
                path: vec![Step::Key("metadata".into()), Step::Key("creationTimestamp".into())],
            });
        }
        let name = Column { name: "Name", ty: "string", format: "name", description: d::NAME, priority: 0 };
        let json = super::encode_columns(std::iter::once(name).chain(columns.iter().map(|c| Column {
            name: &c.name,
            ty: &c.ty,
            format: &c.format,
            description: &c.description,
            priority: c.priority,
        })));
        Some(CrdColumns { columns, json })
    }

    /// The encoded `columnDefinitions`.
    pub fn columns_json(&self) -> &[u8] {
        &self.json
    }

    /// The row of one custom resource.
    pub fn row(&self, o: &Value) -> Row {
        let mut cells =
            vec![Cell::str(o.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default())];
        for c in &self.columns {
            cells.push(match eval(&c.path, o) {
                None => Cell::Json("null".into()),
                Some(v) if c.ty == "string" => Cell::str(&text(v)),
                Some(v) => typed(&c.ty, v),
            });
        }
        Row { cells: cells.into_boxed_slice(), conditions: None }
    }
}

fn eval<'a>(path: &[Step], o: &'a Value) -> Option<&'a Value> {
    path.iter().try_fold(o, |cur, step| match step {
        Step::Key(k) => cur.as_object()?.get(k),
        Step::Index(i) => {
            let a = cur.as_array()?;
            let i = if *i < 0 { a.len() as i64 + i } else { *i };
            a.get(usize::try_from(i).ok()?)
        }
    })
}

/// `jsonpath.PrintResults` of one value: scalars as text, maps and lists as compact JSON (Go's: keys sorted).
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => {
            n.as_i64().map_or_else(|| json::go_float(n.as_f64().unwrap_or_default()), |i| i.to_string())
        }
        _ => {
            let mut out = String::new();
            json::write_unstructured(&mut out, v);
            out
        }
    }
}

/// `cellForJSONValue`: the value if it has the column's type, else null; dates as ages.
fn typed(ty: &str, v: &Value) -> Cell {
    match (ty, v) {
        ("integer", Value::Number(n)) => {
            Cell::Json(n.as_i64().unwrap_or_else(|| n.as_f64().unwrap_or_default() as i64).to_string().into())
        }
        ("number", Value::Number(n)) => Cell::Json(json::go_float(n.as_f64().unwrap_or_default()).into()),
        ("boolean", Value::Bool(b)) => Cell::Json(b.to_string().into()),
        ("date", Value::String(s)) if s.is_empty() || s == "null" => Cell::Age(None),
        ("date", Value::String(s)) => match age::parse(s) {
            Some(t) => Cell::Age(Some(t)),
            None => Cell::str("<invalid>"),
        },
        _ => Cell::Json("null".into()),
    }
}
