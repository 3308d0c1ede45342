//! A deterministic simulator of whole groups on the store model
//! ([`crate::model`]), with faults, checking the guarantees after every
//! step (feature `sim`), and an exhaustive explorer of small groups that
//! checks the same guarantees in every state it can reach.

mod check;
pub mod world;

pub use world::{run, SimConfig, SimReport, Violation};
