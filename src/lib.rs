//! tenure: Kafka consumer groups whose members coordinate partition ownership
//! through ZooKeeper or etcd.
//!
//! This facade re-exports the crates of the workspace. Today it carries the
//! sans-IO core ([`core`]); the backends and the tokio runtime arrive behind
//! Cargo features. The README follows; its examples are compiled and run as
//! tests of this crate.
#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub use tenure_core as core;
