//! The HTTP front: the server (connections, framing, limits, TLS), routing a request to its resource and
//! verb, content negotiation, body helpers, and the one place where an error becomes a response
//! ([`respond`]). Everything behind it (`pipeline`, `serve`, `forward`, `auth`) depends on this module, never
//! the other way round.

pub mod body;
pub mod metrics_server;
pub use kache_k8s::negotiate;
pub mod respond;
pub mod route;
pub mod server;
