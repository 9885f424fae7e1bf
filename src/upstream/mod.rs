//! The connection to the upstream kube-apiserver.
//!
//! [`Upstream`] is the one HTTP client kache uses for everything it sends upstream: the reflectors'
//! list and watch requests, freshness probes, and forwarded client requests.

mod buffered;
mod client;
mod config;
pub mod discovery;
pub mod fwdrt;
pub mod reach;
mod transport;

pub use client::{Credentials, Upstream, UpstreamError};
pub use config::{H2_POOL_SIZE, UpstreamFlags, install_crypto_provider};
pub use transport::{BoxFuture, ReadBodyError, Transport, read_body};
