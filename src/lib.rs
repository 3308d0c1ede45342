//! tenure: Kafka consumer groups whose members coordinate partition ownership
//! through ZooKeeper or etcd.
//!
//! This facade re-exports the crates of the workspace. Today it carries the
//! sans-IO core ([`core`]); the backends and the tokio runtime arrive behind
//! Cargo features.

pub use tenure_core as core;
