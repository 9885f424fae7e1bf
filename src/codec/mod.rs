//! codec (see lib.rs Layout).
pub mod extract;
