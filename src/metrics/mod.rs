//! metrics (see lib.rs Layout).
