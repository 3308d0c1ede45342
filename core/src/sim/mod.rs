//! The in-memory store model with ZooKeeper's semantics, the adapter that
//! carries core commands to it, and a deterministic simulator of whole
//! groups built on both (feature `sim`).
//!
//! The same store and adapter serve as the embedded backend of the tokio
//! runtime, so what the simulator proves is what the embedded default runs.

pub mod adapter;
pub mod store;
pub mod world;

pub use world::{run, SimConfig, SimReport, Violation};
