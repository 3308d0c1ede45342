//! tenure: Kafka consumer groups whose members coordinate partition ownership
//! through ZooKeeper or etcd.
//!
//! This facade re-exports the crates of the workspace: the sans-IO core
//! ([`core`]), the tokio runtime ([`tokio`], with the embedded in-memory
//! store), and the backends picked by Cargo features (`zookeeper`, on by
//! default, and `etcd`). The README follows; its examples are compiled and run as tests
//! of this crate.
#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

#[cfg(feature = "cli")]
pub mod cli;
pub use tenure_core as core;
#[cfg(feature = "etcd")]
pub use tenure_etcd as etcd;
#[cfg(feature = "postgres")]
pub use tenure_postgres as postgres;
pub use tenure_tokio as tokio;
#[cfg(feature = "zookeeper")]
pub use tenure_zookeeper as zookeeper;
