//! Reads served from memory: get, list and watch of a synced store, streamed with bounded buffers (pretty
//! printing and gzip included) and admitted against a byte budget (`admit`). `serve` never talks to the
//! upstream: a read memory cannot answer exactly is handed back to the pipeline as [`list::NotServed`], which
//! forwards it; consistent reads are proven fresh by [`crate::fresh`], which owns the upstream probes.

pub mod admit;
pub mod bodycache;
pub mod crd_fields;
pub mod gzcache;
pub mod list;
mod newest;
pub mod protobuf;
pub mod read;
pub mod reads;
pub mod resolve;
pub mod scan;
pub(crate) mod snapcache;
pub mod table_learn;
pub mod watch;
