//! Kubernetes API semantics as pure functions and value types: no I/O, no runtime.
//!
//! # Layout
//!
//! In the order a request meets them:
//!
//! - [`resource`]: resource identities (group/version/resource, kinds, scopes, field-selector kinds).
//! - [`negotiate`]: content negotiation (`Accept`, media types, the 406 lists).
//! - [`options`]: query decoding with Go's parsers, list/get/watch options, label and field selectors.
//! - [`token`]: continue tokens in the apiserver's format.
//! - [`status`]: errors as `metav1.Status` bodies, byte for byte.
//! - [`gofmt`]: values as Go's `fmt` prints them in the apiserver's messages.
//! - [`json`]: the bytes of Go's `encoding/json` (string escaping, compact and indented encoding, floats)
//!   and Go's `strconv.Quote`.
//! - [`table`]: Table output's convertors (the printers of built-in kinds, CRD columns, the default),
//!   column definitions, rows and ages.
//! - [`proto`]: JSON ↔ protobuf transcoding of built-in kinds (schema data from `kache-k8s-schema`).
//!
//! kache, its simulated upstream (`kache-sim`), the fuzz targets and the load tool depend on this crate, so
//! a rule of the apiserver is written once. The sim keeps its own model of storage, the watch cache,
//! revisions and timing: where independence is the point, it does not come from here.

pub mod gofmt;
pub mod json;
pub mod negotiate;
pub mod options;
pub mod proto;
pub mod resource;
pub mod status;
pub mod table;
pub mod token;
