//! The in-memory store model and the deterministic simulator.
pub mod adapter;
pub mod store;
