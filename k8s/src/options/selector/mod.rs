//! Label and field selectors: parsing with the apiserver's grammar and messages, and matching against
//! objects through [`Selectable`] (labels and extracted fields; the object's bytes only for a custom
//! resource's selectable fields).

/// What selectors read of an object: kache's stored objects and any test double implement it.
pub trait Selectable {
    /// `metadata.name`.
    fn name(&self) -> &str;
    /// `metadata.namespace`; `None` for cluster-scoped objects.
    fn namespace(&self) -> Option<&str>;
    /// The value of label `key`.
    fn label(&self, key: &str) -> Option<&str>;
    /// The value of the kind's `i`th extra field-selector field (in the order of
    /// [`crate::resource::FieldKind::extra_fields`]); `None` when absent in the object.
    fn extra_field(&self, i: usize) -> Option<&str>;
    /// The object's JSON (custom resources' selectable fields are read from it).
    fn raw_json(&self) -> &[u8];
}

/// Through references and shared pointers, as a plain `&Object` argument reached it by deref coercion.
macro_rules! selectable_through {
    ($($ptr:ty),*) => {$(
        impl<T: Selectable + ?Sized> Selectable for $ptr {
            fn name(&self) -> &str {
                (**self).name()
            }
            fn namespace(&self) -> Option<&str> {
                (**self).namespace()
            }
            fn label(&self, key: &str) -> Option<&str> {
                (**self).label(key)
            }
            fn extra_field(&self, i: usize) -> Option<&str> {
                (**self).extra_field(i)
            }
            fn raw_json(&self) -> &[u8] {
                (**self).raw_json()
            }
        }
    )*};
}
selectable_through!(&T, Box<T>, std::sync::Arc<T>);

pub mod custom;
pub mod field;
pub mod label;
pub mod validation;

pub use field::{
    FieldMatcher, FieldOp, FieldSelector, FieldSelectorError, FieldTerm, convert_field_label,
    custom_resource_field_label, custom_resource_metadata_fields,
};
pub use label::{LabelSelector, LabelSelectorError, Operator, Requirement};
pub use validation::is_dns1123_subdomain_syntax;

#[cfg(test)]
mod test_support;
