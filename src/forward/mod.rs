//! forward (see lib.rs Layout): transparent pass-through to the upstream for everything not served from
//! memory, including HTTP upgrades, and the read-your-writes record of forwarded writes.

mod coalesce;
mod forwarder;
mod headers;
mod readahead;
mod upgrade;
mod writes;

pub use forwarder::{Forwarder, UpstreamIdentity};
pub use writes::WriteTracker;
