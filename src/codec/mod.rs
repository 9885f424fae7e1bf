//! codec (see lib.rs Layout).
