//! Which convertor prints a resource's Tables: one of the apiserver's printers for built-in kinds
//! ([`kache_k8s::table::printers`]), a custom resource's printer columns ([`super::crd`]) or the generic
//! convertor with column definitions learned from the upstream ([`super::generic`]). The last two are
//! named by a small id interned in the kache's [`super::Tables`], so a `Printer` stays `Copy` and keys the row cache.

use serde_json::Value;

use kache_k8s::table::{Row, printers::Printer as BuiltIn};

/// How a resource's objects are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Printer {
    /// A built-in kind with a printer kache reproduces.
    BuiltIn(BuiltIn),
    /// A custom resource's printer columns ([`super::crd`], by interned id).
    Custom(u32),
    /// The generic convertor (Name, Created At) with column definitions learned from the upstream
    /// ([`super::generic`], by interned id).
    Generic(u32),
}

impl Printer {
    /// The printer of a built-in resource (core `""`, `apps`, `coordination.k8s.io`), if kache has it.
    pub(crate) fn for_resource(group: &str, resource: &str) -> Option<Printer> {
        BuiltIn::for_resource(group, resource).map(Printer::BuiltIn)
    }

    /// The row of one object.
    pub(crate) fn row(self, tables: &super::Tables, o: &Value) -> Row {
        match self {
            Printer::BuiltIn(p) => p.row(o),
            Printer::Generic(_) => kache_k8s::table::generic::row(o),
            Printer::Custom(id) => {
                tables.crd.get(id).map_or(Row { cells: Box::new([]), conditions: None }, |c| c.row(o))
            }
        }
    }
}
