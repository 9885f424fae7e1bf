//! serve (see lib.rs Layout).

pub mod negotiate;
pub mod params;
pub mod query;
pub mod selector;
