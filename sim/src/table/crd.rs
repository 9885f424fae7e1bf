//! Custom resources' `additionalPrinterColumns` as the sim's CRDs declare them; they are printed by the
//! apiextensions-apiserver's convertor in [`kache_k8s::table::crd`].

use kache_k8s::table::crd::{CrdColumns, Declared};

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

/// The convertor of a CRD version with these columns (an `Age` column when it declares none); None when a
/// column's JSONPath is outside the subset the convertor evaluates.
pub fn columns(cols: &[PrinterColumn]) -> Option<CrdColumns> {
    let declared: Vec<Declared<'_>> = cols
        .iter()
        .map(|c| Declared {
            name: &c.name,
            ty: &c.ty,
            format: &c.format,
            description: &c.description,
            priority: i64::from(c.priority),
            json_path: &c.json_path,
        })
        .collect();
    CrdColumns::new(&declared)
}
