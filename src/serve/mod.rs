//! serve (see lib.rs Layout).
