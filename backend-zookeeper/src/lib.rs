//! ZooKeeper backend for tenure: carries the core's store commands to ZooKeeper.
//!
//! This crate is a placeholder in the workspace until its issue lands; it
//! builds so that the layout shows the architecture.
