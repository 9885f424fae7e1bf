//! Label and field selectors: parsing with the apiserver's grammar and messages, and matching against
//! stored objects (labels and extracted fields, never the object bytes).

pub mod custom;
pub mod field;
pub mod label;
mod validation;

pub use field::{
    FieldMatcher, FieldOp, FieldSelector, FieldSelectorError, FieldTerm, convert_field_label,
    custom_resource_field_label, custom_resource_metadata_fields,
};
pub use label::{LabelSelector, LabelSelectorError, Operator, Requirement};
pub use validation::is_dns1123_subdomain_syntax;

#[cfg(test)]
mod test_support;
