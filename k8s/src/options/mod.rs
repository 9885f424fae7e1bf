//! The apiserver's request options: query-string decoding (Go's parsers), list/get/watch options with their
//! defaulting and validation, and label and field selectors. Pure functions over the request's text.

pub mod params;
pub mod query;
pub mod selector;
