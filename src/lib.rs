//! kache: a read replica for the Kubernetes API.
//!
//! # Layout
//!
//! Modules in data-flow order:
//!
//! ```text
//!   upstream ─▶ reflector ─▶ store ─▶ serve (get / list / watch) ─▶ clients
//!                                       └──────▶ forward ───────────┘
//! ```
//!
//! - [`upstream`]: the connection to the kube-apiserver (kubeconfig, in-cluster, plain URL), discovery.
//! - [`reflector`]: one supervised task per cached resource (restarted with backoff if it panics); list+watch
//!   state machine that feeds the store.
//! - [`store`]: per-resource immutable snapshots (arc-swap), retained snapshots, bounded event history.
//! - [`codec`]: bytes in and out: field extraction, list/watch assembly, Tables (`kubectl get`: the
//!   apiserver's printers, rows cached per object version), Status errors, tokens, gzip.
//! - [`serve`]: the HTTP front: routing, parameter validation, selectors, list/get/watch from memory; every
//!   response from memory streamed with bounded buffers (pretty printing and gzip included) and admitted
//!   against a byte budget (`serve::admit`); a filtered mirror answers only the reads its selection covers
//!   (`serve::coverage`).
//! - [`forward`]: transparent pass-through to the upstream for everything not served from memory.
//! - [`auth`]: who the client is and whether it may read what it asks for.
//! - [`metrics`]: Prometheus exposition, health and readiness.
//! - [`app`]: wires the parts together; `main` and the tests call [`app::run`].

pub mod app;
pub mod auth;
pub mod body;
pub mod codec;
pub mod forward;
pub mod metrics;
pub mod reflector;
pub mod resource;
pub mod serve;
pub mod store;
pub mod upstream;
