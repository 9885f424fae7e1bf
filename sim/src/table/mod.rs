//! Table output (`application/json;as=Table;g=meta.k8s.io;v=v1|v1beta1`, what `kubectl get` asks for):
//! the apiserver's table convertors and the handlers' transformation (`endpoints/handlers/response.go`
//! `asTable`, `watch.go`'s `watchEmbeddedEncoder`).
//!
//! Which convertor a resource has: the printers for built-in kinds ([`printers`]), the custom resource
//! convertor for CRDs ([`crd`]), and the generic default (`rest.NewDefaultTableConvertor`: Name and
//! Created At) for a kind without either. Cells are computed from the object when the response is
//! written (ages move with the clock). Each row then carries the object as `includeObject` asks: the
//! object itself (`Object`), its `PartialObjectMetadata` (`Metadata`, the default) or `null` (`None`).

pub mod crd;
pub mod descriptions;
pub mod printers;
pub mod time;

#[cfg(test)]
mod tests;

use serde_json::{Map, Value, json};

use crate::http::view::{self, MetaVersion};
use crate::kinds::ResourceDef;
use crate::options::Query;
use crate::status::ApiError;
use crate::store::Obj;

pub use crd::PrinterColumn;

/// One `TableColumnDefinition`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column<S = &'static str> {
    pub name: S,
    pub ty: S,
    pub format: S,
    pub description: S,
    pub priority: i32,
}

/// `TableOptions.IncludeObject`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Include {
    None,
    Metadata,
    Object,
}

impl Include {
    /// Decodes and validates `includeObject` (`optionsForTransform` + `ValidateTableOptions`).
    pub fn from_query(q: &Query) -> Result<Include, ApiError> {
        match q.get("includeObject").unwrap_or("") {
            "" | "Metadata" => Ok(Include::Metadata),
            "Object" => Ok(Include::Object),
            "None" => Ok(Include::None),
            other => Err(ApiError::bad_request(format!(
                "Unable to convert to Table as requested: includeObject: Invalid value: {}: must be 'Metadata', 'Object', 'None', or empty",
                go_quote(other)
            ))),
        }
    }
}

/// Go's `%q` for the printable strings a query can carry.
fn go_quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// How a resource's rows are printed.
enum Printer<'a> {
    Builtin(&'a str),
    Crd(&'a [PrinterColumn]),
    Default,
}

fn printer(res: &ResourceDef) -> Printer<'_> {
    if !res.builtin {
        return Printer::Crd(&res.printer_columns);
    }
    match printers::columns(&res.plural) {
        Some(_) => Printer::Builtin(&res.plural),
        None => Printer::Default,
    }
}

fn column_value<S: AsRef<str>>(c: &Column<S>) -> Value {
    json!({"name": c.name.as_ref(), "type": c.ty.as_ref(), "format": c.format.as_ref(),
        "description": c.description.as_ref(), "priority": c.priority})
}

fn column_values(res: &ResourceDef) -> Value {
    let cols: Vec<Value> = match printer(res) {
        Printer::Builtin(p) => printers::columns(p).unwrap_or_default().iter().map(column_value).collect(),
        Printer::Crd(cols) => crd::columns(cols).iter().map(column_value).collect(),
        Printer::Default => vec![
            column_value(&Column {
                name: "Name",
                ty: "string",
                format: "name",
                description: descriptions::NAME,
                priority: 0,
            }),
            column_value(&Column {
                name: "Created At",
                ty: "date",
                format: "",
                description: descriptions::CREATED,
                priority: 0,
            }),
        ],
    };
    Value::Array(cols)
}

/// One row: cells, conditions (pods that ended), and the object as asked.
fn row(res: &ResourceDef, obj: &Value, include: Include, version: MetaVersion, now: i64) -> Value {
    let (cells, conditions) = match printer(res) {
        Printer::Builtin(p) => printers::cells(p, obj, now),
        Printer::Crd(cols) => (crd::cells(cols, obj, now), None),
        Printer::Default => {
            let created = obj
                .pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str)
                .and_then(time::parse_rfc3339)
                .unwrap_or(time::ZERO_TIME_MS);
            let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
            (vec![json!(name), json!(time::format_rfc3339(created))], None)
        }
    };
    let mut m = Map::new();
    m.insert("cells".into(), Value::Array(cells));
    if let Some(c) = conditions {
        m.insert("conditions".into(), c);
    }
    let object = match include {
        Include::None => Value::Null,
        Include::Metadata => view::partial_value(obj, version),
        Include::Object => obj.clone(),
    };
    m.insert("object".into(), object);
    Value::Object(m)
}

fn api_version(v: MetaVersion) -> &'static str {
    match v {
        MetaVersion::V1 => "meta.k8s.io/v1",
        MetaVersion::V1beta1 => "meta.k8s.io/v1beta1",
    }
}

/// What one Table holds besides its rows.
pub struct TableMeta<'a> {
    pub resource_version: String,
    pub cont: Option<&'a str>,
    pub remaining: Option<u64>,
    /// False for every watch event after the first (`NoHeaders`): `columnDefinitions` is null.
    pub headers: bool,
}

/// The Table of `objects` of `res`.
pub fn table(
    res: &ResourceDef,
    objects: &[Value],
    meta: TableMeta,
    include: Include,
    version: MetaVersion,
) -> Value {
    let now = time::now_ms();
    let mut lm = Map::new();
    if !meta.resource_version.is_empty() {
        lm.insert("resourceVersion".into(), json!(meta.resource_version));
    }
    if let Some(c) = meta.cont {
        lm.insert("continue".into(), json!(c));
    }
    if let Some(r) = meta.remaining {
        lm.insert("remainingItemCount".into(), json!(r));
    }
    let rows: Vec<Value> = objects.iter().map(|o| row(res, o, include, version, now)).collect();
    // The printers and the CRD convertor make their row slices up front; the default convertor appends
    // to a nil slice, so its empty list has `"rows":null`.
    let rows = match printer(res) {
        Printer::Default if rows.is_empty() => Value::Null,
        _ => Value::Array(rows),
    };
    let mut m = Map::new();
    m.insert("kind".into(), json!("Table"));
    m.insert("apiVersion".into(), json!(api_version(version)));
    m.insert("metadata".into(), Value::Object(lm));
    m.insert("columnDefinitions".into(), if meta.headers { column_values(res) } else { Value::Null });
    m.insert("rows".into(), rows);
    Value::Object(m)
}

/// A list response's Table.
pub fn list_table(
    res: &ResourceDef,
    page: &crate::http::list::Page,
    include: Include,
    version: MetaVersion,
) -> Value {
    let objects: Vec<Value> = page.items.iter().map(|o| o.value()).collect();
    let meta = TableMeta {
        resource_version: page.rev.to_string(),
        cont: page.cont.as_deref(),
        remaining: page.remaining,
        headers: true,
    };
    table(res, &objects, meta, include, version)
}

/// A get response's Table (one row; the Table's resourceVersion is the object's).
pub fn object_table(res: &ResourceDef, obj: &Obj, include: Include, version: MetaVersion) -> Value {
    let meta = TableMeta {
        resource_version: obj.resource_version.clone(),
        cont: None,
        remaining: None,
        headers: true,
    };
    table(res, &[obj.value()], meta, include, version)
}

/// A watch event's object as a Table of one row.
pub fn event_table(
    res: &ResourceDef,
    obj: &Value,
    headers: bool,
    include: Include,
    version: MetaVersion,
) -> Value {
    let rv = obj.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or("").to_string();
    let meta = TableMeta { resource_version: rv, cont: None, remaining: None, headers };
    table(res, std::slice::from_ref(obj), meta, include, version)
}
