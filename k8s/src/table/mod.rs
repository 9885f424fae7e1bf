//! Table output (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`, what `kubectl get` asks for):
//! the apiserver's table convertors, written once for kache and the sim.
//!
//! - [`printers`]: kube-apiserver's printers for built-in kinds (`pkg/printers/internalversion`), their
//!   column definitions ([`docs`]: the descriptions) and the row of one object.
//! - [`crd`]: custom resources' `additionalPrinterColumns` (the JSONPath subset CRDs use).
//! - [`generic`]: the default convertor (Name, Created At) of kinds without a printer.
//! - [`row`]: a row as cells; an age keeps its timestamp ([`age`]) and is rendered when a response is
//!   written, so a row can be computed once per object version.
//!
//! Which resource uses which convertor, the Table's envelope and each row's object (`includeObject`)
//! belong to the server writing the response: kache writes bytes from stored objects, the sim builds
//! values from its own store.

pub mod age;
pub mod crd;
pub mod docs;
pub mod generic;
pub mod printers;
pub mod row;

use bytes::{BufMut, BytesMut};

pub use printers::Printer;
pub use row::{Cell, Row};

/// One `TableColumnDefinition`.
#[derive(Debug, Clone, Copy)]
pub struct Column<'a> {
    pub name: &'a str,
    pub ty: &'a str,
    pub format: &'a str,
    pub description: &'a str,
    pub priority: i64,
}

/// The encoded `columnDefinitions` of these columns, as the apiserver's `encoding/json` writes them.
pub fn encode_columns<'a>(columns: impl IntoIterator<Item = Column<'a>>) -> Vec<u8> {
    let mut out = BytesMut::new();
    out.put_u8(b'[');
    for (i, c) in columns.into_iter().enumerate() {
        if i > 0 {
            out.put_u8(b',');
        }
        out.put_slice(b"{\"name\":");
        crate::json::write_str(&mut out, c.name);
        out.put_slice(b",\"type\":");
        crate::json::write_str(&mut out, c.ty);
        out.put_slice(b",\"format\":");
        crate::json::write_str(&mut out, c.format);
        out.put_slice(b",\"description\":");
        crate::json::write_str(&mut out, c.description);
        out.put_slice(format!(",\"priority\":{}}}", c.priority).as_bytes());
    }
    out.put_u8(b']');
    out.to_vec()
}

#[cfg(test)]
mod tests;
