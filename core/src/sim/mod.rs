//! A deterministic simulator of whole groups on the store model
//! ([`crate::model`]), with faults, checking the guarantees after every
//! step (feature `sim`), and an exhaustive explorer of small groups that
//! checks the same guarantees in every state it can reach.

pub(crate) mod canon;
mod check;
pub mod explore;
pub mod world;

pub use explore::{explore, replay, Counterexample, ExploreConfig, ExploreReport, Replay};
pub use world::{run, SimConfig, SimReport, Violation};
