//! codec (see lib.rs Layout).

pub mod gojson;
pub mod status;
pub mod token;
