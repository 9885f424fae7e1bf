//! Wires the parts together.
