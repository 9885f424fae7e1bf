//! The connection to the upstream kube-apiserver.
//!
//! [`Upstream`] is the one HTTP client kache uses for everything it sends upstream: the reflectors'
//! list and watch requests, freshness probes, and forwarded client requests.

mod client;
mod config;

pub use client::{Credentials, Upstream, UpstreamError};
pub use config::{H2_POOL_SIZE, install_crypto_provider};
