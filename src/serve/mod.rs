//! The HTTP front: routing, parameter validation, selectors, and get/list/watch from memory.

pub mod admit;
pub mod coverage;
pub mod crd_fields;
pub mod fresh;
pub mod gzcache;
pub mod handler;
pub mod list;
pub mod negotiate;
pub mod params;
pub mod protobuf;
pub mod query;
pub mod read;
pub mod resolve;
pub mod route;
pub mod scan;
pub mod selector;
pub mod server;
pub mod table_learn;
pub mod watch;
