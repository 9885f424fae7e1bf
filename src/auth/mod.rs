//! auth (see lib.rs Layout).
