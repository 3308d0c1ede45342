//! A deterministic simulator of whole groups on the store model
//! ([`crate::model`]), with faults, checking the guarantees after every
//! step (feature `sim`).

pub mod world;

pub use world::{run, SimConfig, SimReport, Violation};
