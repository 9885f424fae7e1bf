//! kache: a read replica for the Kubernetes API.
//!
//! # Layout
//!
//! Modules in data-flow order:
//!
//! ```text
//!   upstream ─▶ reflector ─▶ store ◀── fresh
//!                              │
//!   clients ─▶ front ─▶ pipeline (route ─▶ authenticate ─▶ client limits ─▶ authorize) ─┬─▶ serve
//!                                                                                       └─▶ forward
//! ```
//!
//! - [`upstream`]: the connection to the kube-apiserver (kubeconfig, in-cluster, plain URL), discovery.
//! - [`reflector`]: one supervised task per cached resource (restarted with backoff if it panics); list+watch
//!   state machine that feeds the store.
//! - [`store`]: per-resource immutable snapshots (arc-swap), retained snapshots, bounded event history.
//! - [`fresh`]: proves consistent reads fresh against the upstream (probes, proof watches, waits), or by
//!   etcd beside the control plane (`fresh::etcd`), beside the store it vouches for.
//! - [`codec`]: bytes in and out: field extraction, list/watch assembly, Tables (`kubectl get`: which of
//!   the apiserver's convertors prints a resource, rows cached per object version), Status errors, tokens,
//!   gzip.
//! - [`options`]: the apiserver's request options: query decoding, list/get/watch options, selectors, and
//!   which reads a filtered mirror covers (`options::coverage`).
//! - [`front`]: the HTTP front: server, routing, negotiation, body helpers, and `front::respond`, the one
//!   place an error becomes a response. Every module behind it depends on it, never the reverse.
//! - [`pipeline`]: the request pipeline, a short router: route → authenticate → client limits → authorize →
//!   memory or forward; lazy caching starts only after authorization.
//! - [`serve`]: get, list and watch from memory (`serve::reads`, one slice per verb from options to
//!   response); every response streamed with bounded buffers (pretty printing and gzip included) and admitted
//!   against a byte budget (`serve::admit`). Never talks to the upstream.
//! - [`forward`]: transparent pass-through to the upstream for everything not served from memory.
//! - [`auth`]: who the client is and whether it may read what it asks for.
//! - [`metrics`]: Prometheus exposition, health and readiness. One [`metrics::Metrics`] per kache, built in
//!   `app` and handed to each stage that records; `metrics` depends on no stage (scrape-time values come
//!   through [`metrics::StatsSource`], which `app` implements; `front::metrics_server` serves them).
//! - [`app`]: wires the parts together; `main` and the tests call [`app::run`]. Every cache, pool and thread
//!   is the kache's own, dropped with it (docs/architecture.md, "State belongs to one kache").
//!
//! # Public surface
//!
//! kache is a binary. The library's modules are public for the code outside it that drives or measures
//! kache: the integration tests (`tests/it`), the benches, the load tool and `main.rs`. The pure Kubernetes
//! semantics (options, selectors, tokens, Status, negotiation, protobuf, Go's JSON, Table printers) live in the `kache_k8s`
//! crate, which kache re-exports at the paths its modules use (`codec::status`, `options::selector`,
//! `front::negotiate`, ...); the fuzz targets depend on that crate alone. Inside a module an item is `pub` only when that outside code names
//! it (or a `pub` signature needs it); everything else is `pub(crate)`. `scripts/pub-trim.py` applies the
//! rule (`scripts/pub-trim.keep` lists the names the compiler required to stay `pub`).

pub mod app;
pub mod auth;
pub mod codec;
pub mod forward;
pub mod fresh;
pub mod front;
pub mod metrics;
pub mod options;
pub mod pipeline;
pub mod reflector;
pub use kache_k8s::resource;
pub mod serve;
pub mod store;
pub mod upstream;
