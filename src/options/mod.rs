//! The apiserver's request options: query-string decoding (Go's parsers), list/get/watch options with their
//! defaulting and validation, label and field selectors, and which reads a filtered mirror's selection
//! covers (`coverage`). Pure functions over the request's text: no I/O, no store access.

pub mod coverage;
pub mod params;
pub mod query;
pub mod selector;
