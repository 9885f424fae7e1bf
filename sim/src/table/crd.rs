//! Custom resources' `additionalPrinterColumns` (apiextensions-apiserver
//! `pkg/registry/customresource/tableconvertor`): a Name column, then each declared column evaluated with
//! the JSONPath subset CRDs use (`.a.b`, `[N]`, `['key']`); an `Age` column of
//! `.metadata.creationTimestamp` when the version declares none.

use serde_json::{Value, json};

use super::Column;
use super::descriptions as d;
use super::time::{human_duration, parse_rfc3339};

/// One `additionalPrinterColumns` entry of a CRD version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrinterColumn {
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub ty: String,
    pub format: String,
    pub description: String,
    pub priority: i32,
    pub json_path: String,
}

impl PrinterColumn {
    pub fn new(name: &str, ty: &str, json_path: &str) -> PrinterColumn {
        PrinterColumn {
            name: name.into(),
            ty: ty.into(),
            format: String::new(),
            description: String::new(),
            priority: 0,
            json_path: json_path.into(),
        }
    }

    pub fn priority(mut self, p: i32) -> PrinterColumn {
        self.priority = p;
        self
    }

    pub fn description(mut self, d: &str) -> PrinterColumn {
        self.description = d.into();
        self
    }
}

/// `serveDefaultColumnsIfEmpty`.
fn effective(cols: &[PrinterColumn]) -> Vec<PrinterColumn> {
    if !cols.is_empty() {
        return cols.to_vec();
    }
    vec![PrinterColumn::new("Age", "date", ".metadata.creationTimestamp").description(d::CREATED)]
}

/// The column definitions a CRD version's Table carries.
pub fn columns(cols: &[PrinterColumn]) -> Vec<Column<String>> {
    let mut out = vec![Column {
        name: "Name".to_string(),
        ty: "string".into(),
        format: "name".into(),
        description: d::NAME.into(),
        priority: 0,
    }];
    for c in effective(cols) {
        let description = if c.description.is_empty() {
            format!("Custom resource definition column (in JSONPath format): {}", c.json_path)
        } else {
            c.description.clone()
        };
        out.push(Column { name: c.name, ty: c.ty, format: c.format, description, priority: c.priority });
    }
    out
}

/// The cells of one custom resource.
pub fn cells(cols: &[PrinterColumn], obj: &Value, now: i64) -> Vec<Value> {
    let mut out = vec![json!(obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or(""))];
    for c in effective(cols) {
        let cell = match eval(&c.json_path, obj) {
            None => Value::Null,
            Some(v) if c.ty == "string" => json!(print_text(v)),
            Some(v) => typed_cell(&c.ty, v, now),
        };
        out.push(cell);
    }
    out
}

/// Evaluates the JSONPath subset; None when a step finds nothing (missing keys are allowed).
fn eval<'a>(path: &str, obj: &'a Value) -> Option<&'a Value> {
    let mut cur = obj;
    let mut rest = path.trim();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let key = &r[..end];
            if !key.is_empty() {
                cur = cur.as_object()?.get(key)?;
            }
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inner = r[..end].trim();
            cur = if let Some(k) = inner.strip_prefix('\'').and_then(|k| k.strip_suffix('\'')) {
                cur.as_object()?.get(k)?
            } else if let Some(k) = inner.strip_prefix('"').and_then(|k| k.strip_suffix('"')) {
                cur.as_object()?.get(k)?
            } else {
                let a = cur.as_array()?;
                let idx: i64 = inner.parse().ok()?;
                let idx = if idx < 0 { a.len() as i64 + idx } else { idx };
                a.get(usize::try_from(idx).ok()?)?
            };
            rest = &r[end + 1..];
        } else {
            return None;
        }
    }
    Some(cur)
}

/// A JSON number as Go prints a float64 (`%v`/encoding/json: integral values without a fraction).
pub(super) fn go_float(f: f64) -> Value {
    if f.fract() == 0.0 && f.abs() < 1e15 { json!(f as i64) } else { json!(f) }
}

/// `jsonpath.PrintResults` of one value: maps and slices as compact JSON, scalars as `fmt.Fprint`.
fn print_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(f)) => go_float(f).to_string(),
            _ => n.to_string(),
        },
        _ => String::from_utf8_lossy(&crate::json::compact(&sorted(v))).into_owned(),
    }
}

/// Go marshals maps with sorted keys.
fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(keys.into_iter().map(|k| (k.clone(), sorted(&m[k]))).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// `cellForJSONValue`: the value when it has the column's type, else null.
fn typed_cell(ty: &str, v: &Value, now: i64) -> Value {
    match (ty, v) {
        ("integer", Value::Number(n)) => {
            n.as_i64().map(Value::from).or_else(|| n.as_f64().map(|f| json!(f as i64))).unwrap_or(Value::Null)
        }
        ("number", Value::Number(n)) => n.as_f64().map(go_float).unwrap_or(Value::Null),
        ("boolean", Value::Bool(b)) => json!(b),
        ("date", Value::String(s)) => json!(date(s, now)),
        _ => Value::Null,
    }
}

/// `metav1.Time.UnmarshalQueryParameter` then `ConvertToHumanReadableDateType`.
fn date(s: &str, now: i64) -> String {
    if s.is_empty() || s == "null" {
        return "<unknown>".into();
    }
    match parse_rfc3339(s) {
        Some(t) if t == super::time::ZERO_TIME_MS => "<unknown>".into(),
        Some(t) => human_duration(now - t),
        None => "<invalid>".into(),
    }
}
