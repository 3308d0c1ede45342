//! The in-memory store model with ZooKeeper's semantics, and the adapter
//! that carries core commands to it. The tokio runtime's embedded store is
//! this model, and the simulator (feature `sim`) runs whole groups on it,
//! so what the simulator proves is what the embedded store runs.

pub mod adapter;
pub mod store;
