//! reflector (see lib.rs Layout).
