//! Table output (`application/json;as=Table;g=meta.k8s.io;v=v1|v1beta1`, what `kubectl get` asks for):
//! the apiserver's table convertors and the handlers' transformation (`endpoints/handlers/response.go`
//! `asTable`, `watch.go`'s `watchEmbeddedEncoder`).
//!
//! Which convertor a resource has: the printers for built-in kinds, the custom resource convertor for
//! CRDs ([`crd`]: their declared columns), and the generic default (`rest.NewDefaultTableConvertor`: Name
//! and Created At) for a kind without either. The convertors themselves (columns, cells, ages) are the
//! Go printers' port in [`kache_k8s::table`], shared with kache; the sim owns which resource uses which
//! and the Table it builds around the rows. Cells are computed from the object when the response is
//! written (ages move with the clock). Each row then carries the object as `includeObject` asks: the
//! object itself (`Object`), its `PartialObjectMetadata` (`Metadata`, the default) or `null` (`None`).

pub mod crd;

#[cfg(test)]
mod tests;

use kache_k8s::table::crd::CrdColumns;
use kache_k8s::table::{Row, age, docs, generic};
use serde_json::{Map, Value, json};

use crate::http::view::{self, MetaVersion};
use crate::kinds::ResourceDef;
use crate::options::Query;
use crate::status::ApiError;
use crate::store::Obj;

pub use crd::PrinterColumn;

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
enum Printer {
    Builtin(kache_k8s::table::Printer),
    Crd(CrdColumns),
    Default,
}

/// A built-in resource has its kind's printer (by plural, whatever its group: `events.k8s.io` events are
/// printed by the core printer too) or the default convertor; a CRD its columns.
fn printer(res: &ResourceDef) -> Printer {
    if !res.builtin {
        // A column outside the JSONPath subset: the sim's CRDs are declared in code and never have one.
        return crd::columns(&res.printer_columns).map_or(Printer::Default, Printer::Crd);
    }
    kache_k8s::table::Printer::BUILT_IN
        .into_iter()
        .find(|p| p.resource().1 == res.plural)
        .map_or(Printer::Default, Printer::Builtin)
}

#[cfg(test)]
fn column_values(res: &ResourceDef) -> Value {
    columns_of(&printer(res))
}

fn columns_of(p: &Printer) -> Value {
    let bytes = match p {
        Printer::Builtin(p) => p.columns_json().to_vec(),
        Printer::Crd(c) => c.columns_json().to_vec(),
        Printer::Default => generic::columns_json(docs::NAME, docs::CREATED),
    };
    serde_json::from_slice(&bytes).unwrap_or_default()
}

/// The printed row of one object: cells (ages at `now`) and conditions.
fn printed(p: &Printer, obj: &Value, now: i64) -> (Vec<Value>, Option<Value>) {
    let row: Row = match p {
        Printer::Builtin(p) => p.row(obj),
        Printer::Crd(c) => c.row(obj),
        Printer::Default => generic::row(obj),
    };
    let cells = row.cells.iter().map(|c| c.to_value(now)).collect();
    (cells, row.conditions.and_then(|c| serde_json::from_str(c).ok()))
}

/// One row: cells, conditions (pods that ended), and the object as asked.
fn row(p: &Printer, obj: &Value, include: Include, version: MetaVersion, now: i64) -> Value {
    let (cells, conditions) = printed(p, obj, now);
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
    let now = age::now_ms();
    let printer = printer(res);
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
    let rows: Vec<Value> = objects.iter().map(|o| row(&printer, o, include, version, now)).collect();
    // The printers and the CRD convertor make their row slices up front; the default convertor appends
    // to a nil slice, so its empty list has `"rows":null`.
    let rows = match printer {
        Printer::Default if rows.is_empty() => Value::Null,
        _ => Value::Array(rows),
    };
    let mut m = Map::new();
    m.insert("kind".into(), json!("Table"));
    m.insert("apiVersion".into(), json!(api_version(version)));
    m.insert("metadata".into(), Value::Object(lm));
    m.insert("columnDefinitions".into(), if meta.headers { columns_of(&printer) } else { Value::Null });
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
