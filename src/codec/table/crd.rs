//! Custom resources' Tables (apiextensions-apiserver `registry/customresource/tableconvertor`): a Name
//! column, then the version's `additionalPrinterColumns` (or an `Age` of `.metadata.creationTimestamp`
//! when it declares none), each cell a JSONPath (`.a.b`, `[N]`, `['k']`, the subset CRDs use) typed as
//! the column says — a value of another type is `null`, a `string` column prints any value as text.
//!
//! The columns come from the CRD object in kache's own store of `customresourcedefinitions`; each
//! distinct column set is interned once and named by a small id, so a [`super::Printer`] stays `Copy` and
//! rows cached under an old column set are never reused for a new one.

use std::sync::{Arc, Mutex, OnceLock};

use bytes::{BufMut, BytesMut};
use serde_json::Value;

use super::age;
use super::docs as d;
use super::row::{Cell, Row};
use kache_k8s::json;

/// Distinct column sets kept at most: a bound on what CRD edits can make this registry hold.
const MAX_COLUMN_SETS: usize = 4096;

/// One step of a column's JSONPath.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(i64),
}

/// One printer column.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Column {
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
    columns: Vec<Column>,
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

impl CrdColumns {
    /// The columns of `version` in a CRD object; None when the version is not in it or a column's path
    /// is outside the supported subset.
    pub(crate) fn from_crd(crd: &Value, version: &str) -> Option<CrdColumns> {
        let v = crd.pointer("/spec/versions")?.as_array()?.iter().find(|v| v["name"] == version)?;
        let declared = v.get("additionalPrinterColumns").and_then(Value::as_array).filter(|c| !c.is_empty());
        let mut columns = Vec::new();
        match declared {
            Some(cols) => {
                for c in cols {
                    let path = c.get("jsonPath")?.as_str()?;
                    let description = match c.get("description").and_then(Value::as_str).unwrap_or_default() {
                        "" => format!("Custom resource definition column (in JSONPath format): {path}"),
                        s => s.to_owned(),
                    };
                    columns.push(Column {
                        name: c.get("name")?.as_str()?.to_owned(),
                        ty: c.get("type")?.as_str()?.to_owned(),
                        format: c.get("format").and_then(Value::as_str).unwrap_or_default().to_owned(),
                        description,
                        priority: c.get("priority").and_then(Value::as_i64).unwrap_or_default(),
                        path: parse_path(path)?,
                    });
                }
            }
            None => columns.push(Column {
                name: "Age".into(),
                ty: "date".into(),
                format: String::new(),
                description: d::CREATED.into(),
                priority: 0,
                path: vec![Step::Key("metadata".into()), Step::Key("creationTimestamp".into())],
            }),
        }
        let mut out = BytesMut::new();
        out.put_slice(br#"[{"name":"Name","type":"string","format":"name","description":"#);
        json::write_str(&mut out, d::NAME);
        out.put_slice(br#","priority":0}"#);
        for c in &columns {
            out.put_slice(b",{\"name\":");
            json::write_str(&mut out, &c.name);
            out.put_slice(b",\"type\":");
            json::write_str(&mut out, &c.ty);
            out.put_slice(b",\"format\":");
            json::write_str(&mut out, &c.format);
            out.put_slice(b",\"description\":");
            json::write_str(&mut out, &c.description);
            out.put_slice(format!(",\"priority\":{}}}", c.priority).as_bytes());
        }
        out.put_u8(b']');
        Some(CrdColumns { columns, json: out.to_vec() })
    }

    pub(crate) fn columns_json(&self) -> &[u8] {
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

// === The interned column sets ===

fn sets() -> &'static Mutex<Vec<Arc<CrdColumns>>> {
    static SETS: OnceLock<Mutex<Vec<Arc<CrdColumns>>>> = OnceLock::new();
    SETS.get_or_init(|| Mutex::new(Vec::new()))
}

/// The id of `cols` (an equal set already interned keeps its id); None past [`MAX_COLUMN_SETS`].
pub(crate) fn intern(cols: CrdColumns) -> Option<u32> {
    let mut sets = sets().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(i) = sets.iter().position(|s| **s == cols) {
        return u32::try_from(i).ok();
    }
    if sets.len() >= MAX_COLUMN_SETS {
        return None;
    }
    sets.push(Arc::new(cols));
    u32::try_from(sets.len() - 1).ok()
}

/// The column set of an id from [`intern`].
pub fn get(id: u32) -> Option<Arc<CrdColumns>> {
    sets().lock().unwrap_or_else(|p| p.into_inner()).get(id as usize).cloned()
}

/// The column-set id of a stored CRD object's `version`, parsed once per CRD object version.
pub(crate) fn for_crd_object(crd: &crate::store::Object, version: &str) -> Option<u32> {
    type Memo = std::collections::HashMap<(Box<str>, u64, String), Option<u32>>;
    static MEMO: OnceLock<Mutex<Memo>> = OnceLock::new();
    let memo = MEMO.get_or_init(|| Mutex::new(Memo::new()));
    let key = (crd.uid.clone(), crd.resource_version, version.to_owned());
    if let Some(id) = memo.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return *id;
    }
    let value: Value = serde_json::from_slice(&crd.raw).ok()?;
    let id = CrdColumns::from_crd(&value, version).and_then(intern);
    let mut memo = memo.lock().unwrap_or_else(|p| p.into_inner());
    if memo.len() >= MAX_COLUMN_SETS {
        memo.clear();
    }
    memo.insert(key, id);
    id
}
