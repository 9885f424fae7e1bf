//! forward (see lib.rs Layout).
