//! Label and field selectors. Parsing, validation and the apiserver's error texts
//! (staging/src/k8s.io/apimachinery/pkg/labels/selector.go: Parse, pkg/fields/selector.go: ParseSelector)
//! come from `kache_k8s`, written once; matching against the sim's objects, the per-kind field-selector
//! support and the field sets each registry computes are the sim's own model.
//!
//! - [`LabelSelector`]: the full label grammar (`=`, `==`, `!=`, `in`, `notin`, exists, `!`, `>`, `<`).
//! - [`FieldSelector`]: `field=value`, `field==value`, `field!=value` with `\` escapes.
//! - [`validate_fields`] / [`convert_fields`]: which fields a kind accepts (400 otherwise).
//! - [`field_set`]: the fields of an object, as its registry computes them.

mod fields;
mod kinds;
mod labels;
mod validation;

pub use fields::FieldSelector;
pub use kinds::{convert_custom_fields, convert_fields, field_set, validate_fields};
pub use labels::LabelSelector;
pub(crate) use validation::{
    aggregate, dns1123_subdomain_errors, domain_prefixed_path_errors, go_quote, is_dns1123_label,
};

#[cfg(test)]
mod tests;
