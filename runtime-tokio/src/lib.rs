//! tokio runtime for tenure: drives the core, owns timers, fetches from Kafka.
//!
//! This crate is a placeholder in the workspace until its issue lands; it
//! builds so that the layout shows the architecture.
