//! Bytes in and out: field extraction at ingest, list and watch assembly, Status errors, continue tokens, gzip.
//! Pure functions over bytes; no I/O.

pub mod extract;
pub mod gzip;
pub mod list;
pub mod meta_view;
pub mod pretty;
pub mod proto;
pub mod status;
pub mod table;
pub mod token;
