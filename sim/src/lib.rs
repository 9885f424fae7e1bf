//! kache-sim: a simulated kube-apiserver, an independent in-memory model of its list, watch and write
//! behaviour (with the watch cache of 1.35: consistent lists from cache, snapshots, watch-list).
//!
//! # Layout (in data-flow order)
//!
//! - [`http`]: the server — routing ([`http::route`]), list/get/watch handlers, discovery, the `/sim/`
//!   admin API, responses (pretty printing, gzip, Status errors).
//! - [`options`]: query decoding and ListOptions validation in the apiserver's check order.
//! - [`selector`]: label and field selectors (parsing, per-kind field sets).
//! - [`token`]: continue tokens.
//! - [`write`]: create/update/patch/delete semantics shared by HTTP and the Rust API.
//! - [`store`]: the etcd-like multi-version keyspace, global revision, history and watch broadcast;
//!   objects are kept encoded ([`store::Obj`]) with the fields selectors need.
//! - [`auth`]: static tokens, impersonation and allow rules (TokenReview, SubjectAccessReview,
//!   SelfSubjectReview); applied by [`http::authz`] before routing.
//! - [`workload`]: realistic objects and churn for the CLI and load tests.
//! - [`openapi`]: the apiserver's OpenAPI v3 documents of the built-in kinds (served, and the schemas strict
//!   field validation checks writes against).
//! - [`kinds`]: the resource table (built-ins and declared custom resources).
//! - [`table`]: Table output (`kubectl get`): the apiserver's printers, the CRD and default convertors.
//! - [`status`], [`json`]: Status errors and Go-compatible JSON encoding.
//! - [`sim`]: the public `Sim::builder()` / `SimHandle` API.

pub mod auth;
pub mod http;
pub mod json;
pub mod kinds;
pub mod openapi;
pub mod options;
pub mod proto;
pub mod selector;
pub mod sim;
pub mod status;
pub mod store;
pub mod table;
pub mod time;
pub mod token;
pub mod workload;
pub mod write;

#[cfg(test)]
mod fuzz_tests;

pub use kinds::Crd;
pub use sim::{Sim, SimBuilder, SimHandle, StartError};
pub use status::ApiError;
