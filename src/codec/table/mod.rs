//! Table output (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1|v1beta1`, what `kubectl get` asks
//! for) from stored objects: the apiserver's convertors ([`kache_k8s::table`]: the printers of built-in
//! kinds, CRD columns, the generic one), which one prints each resource ([`printers`]),
//! each object's row computed once per version ([`cache`]), and the handlers' transformation (`asTable`):
//! every row carries its object as `includeObject` asks — the stored bytes (`Object`), the
//! `PartialObjectMetadata` built from the stored metadata bytes (`Metadata`, the default) or `null` (`None`).
//! A kind without a printer of its own gets the generic convertor's Name and Created At ([`generic`])
//! once the upstream's own answer has shown that it uses it; until then, and for anything kache cannot
//! print exactly, Table requests are forwarded, never approximated.

pub mod cache;
pub mod crd;
pub mod generic;
pub mod printers;

pub use kache_k8s::table::{age, row};

use std::io::Write as _;
use std::sync::Arc;

use bytes::{BufMut, BytesMut};

use kache_k8s::json;

use crate::codec::list::ListMeta;
use crate::codec::status::ApiError;
use crate::store::Object;
pub use printers::Printer;

/// `TableOptions.IncludeObject`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Include {
    None,
    Metadata,
    Object,
}

impl Include {
    /// The `includeObject` value (the first one, decoded; empty when absent) validated as
    /// `optionsForTransform` does. The pipeline decodes the query string.
    pub fn from_value(value: &str) -> Result<Include, ApiError> {
        match value {
            "" | "Metadata" => Ok(Include::Metadata),
            "Object" => Ok(Include::Object),
            "None" => Ok(Include::None),
            other => Err(ApiError::BadRequest(format!(
                "Unable to convert to Table as requested: includeObject: Invalid value: {}: must be 'Metadata', 'Object', 'None', or empty",
                kache_k8s::json::go_quote(other)
            ))),
        }
    }
}

/// The Table state of one kache: its row cache, the custom resources' interned column sets and the
/// generic columns it has learned. Created with the kache (`serve::reads::Reads` owns it), dropped with it;
/// two kaches in one process share none of it.
#[derive(Default)]
pub struct Tables {
    pub(crate) rows: cache::RowCache,
    pub(crate) crd: crd::CrdPrinters,
    pub(crate) generic: generic::GenericPrinters,
}

impl std::fmt::Debug for Tables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tables").finish_non_exhaustive()
    }
}

impl Tables {
    /// The row of a stored object version, from the row cache.
    pub(crate) fn row(&self, printer: Printer, object: &Object) -> Arc<row::Row> {
        self.rows.row(printer, object, || self.compute(printer, &object.raw))
    }

    /// The row of an object that is not a stored version (bookmarks and departures): computed here.
    pub(crate) fn compute(&self, printer: Printer, raw: &[u8]) -> row::Row {
        let value: serde_json::Value = serde_json::from_slice(raw).unwrap_or_default();
        printer.row(self, &value)
    }
}

/// How a response's objects are printed as a Table, and the kache's Table state that prints them.
#[derive(Clone, Debug)]
pub struct TableView {
    pub printer: Printer,
    pub include: Include,
    /// `meta.k8s.io/v1` (else `v1beta1`).
    pub v1: bool,
    pub tables: Arc<Tables>,
}

/// Views are equal when they print alike (with the same kache's state).
impl PartialEq for TableView {
    fn eq(&self, other: &Self) -> bool {
        (self.printer, self.include, self.v1) == (other.printer, other.include, other.v1)
            && Arc::ptr_eq(&self.tables, &other.tables)
    }
}

impl Eq for TableView {}

impl TableView {
    fn api_version(&self) -> &'static str {
        if self.v1 { "meta.k8s.io/v1" } else { "meta.k8s.io/v1beta1" }
    }

    /// `{"kind":"Table","apiVersion":…,"metadata":{…},"columnDefinitions":…,"rows":[`.
    pub fn header(&self, meta: &ListMeta, headers: bool) -> BytesMut {
        let mut out = BytesMut::with_capacity(4096);
        out.put_slice(b"{\"kind\":\"Table\",\"apiVersion\":\"");
        out.put_slice(self.api_version().as_bytes());
        out.put_slice(b"\",\"metadata\":{");
        if meta.resource_version != 0 {
            let _ = write!((&mut out).writer(), "\"resourceVersion\":\"{}\"", meta.resource_version);
        }
        if let Some(token) = &meta.continue_token {
            out.put_slice(b",\"continue\":");
            json::write_str(&mut out, token);
        }
        if let Some(remaining) = meta.remaining_item_count {
            let _ = write!((&mut out).writer(), ",\"remainingItemCount\":{remaining}");
        }
        out.put_slice(b"},\"columnDefinitions\":");
        if let (true, Printer::Custom(id)) = (headers, self.printer) {
            match self.tables.crd.get(id) {
                Some(c) => out.put_slice(c.columns_json()),
                None => out.put_slice(b"[]"),
            }
        } else if let (true, Printer::Generic(id)) = (headers, self.printer) {
            match self.tables.generic.columns_json(id) {
                Some(c) => out.put_slice(&c),
                None => out.put_slice(b"[]"),
            }
        } else if let (true, Printer::BuiltIn(p)) = (headers, self.printer) {
            out.put_slice(p.columns_json());
        } else {
            out.put_slice(b"null");
        }
        out.put_slice(b",\"rows\":[");
        out
    }

    /// Appends the row of a stored object version (its cells from the row cache).
    pub(crate) fn put_row(&self, out: &mut BytesMut, object: &Object, now: i64) {
        self.tables.row(self.printer, object).put_head(out, now);
        self.put_object(out, &object.raw, object_metadata(object), crate::codec::list::is_typed(object));
        out.put_u8(b'}');
    }

    /// Appends the row of an object that is not a stored version (a bookmark, a departure): computed here.
    pub(crate) fn put_row_uncached(
        &self,
        out: &mut BytesMut,
        raw: &[u8],
        metadata: Option<&[u8]>,
        typed: bool,
        now: i64,
    ) {
        self.tables.compute(self.printer, raw).put_head(out, now);
        self.put_object(out, raw, metadata.unwrap_or(b"{}"), typed);
        out.put_u8(b'}');
    }

    fn put_object(&self, out: &mut BytesMut, raw: &[u8], metadata: &[u8], typed: bool) {
        out.put_slice(b",\"object\":");
        match self.include {
            Include::None => out.put_slice(b"null"),
            Include::Object => out.put_slice(raw),
            Include::Metadata => {
                out.put_slice(b"{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"");
                out.put_slice(self.api_version().as_bytes());
                out.put_slice(b"\",\"metadata\":");
                out.put_slice(&crate::codec::meta_view::view_metadata(metadata, typed));
                out.put_u8(b'}');
            }
        }
    }
}

/// The end of a Table after its rows, with the newline of `json.Encoder.Encode`.
pub(crate) const TABLE_TRAILER: &[u8] = b"]}\n";
/// The end of a Table without rows whose convertor leaves them nil (the generic one): `"rows":null`,
/// replacing the `[` the header ends with.
pub(crate) const NIL_ROWS_TRAILER: &[u8] = b"null}\n";

impl TableView {
    /// Whether an empty Table of this view has `"rows":null` rather than `[]` (the generic convertor
    /// appends to a nil slice; the printers and the CRD convertor allocate theirs).
    pub(crate) fn nil_when_empty(&self) -> bool {
        matches!(self.printer, Printer::Generic(_))
    }
}

fn object_metadata(object: &Object) -> &[u8] {
    object.raw.get(object.metadata_range.start as usize..object.metadata_range.end as usize).unwrap_or(b"{}")
}

#[cfg(test)]
mod tests;
