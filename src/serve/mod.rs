//! serve (see lib.rs Layout).

pub mod route;
pub mod server;
