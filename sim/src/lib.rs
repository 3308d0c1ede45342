//! tenure-sim: a deterministic simulator of whole tenure groups on the
//! core's store model ([`tenure_core::model`]), with faults, checking the
//! guarantees after every step, and an exhaustive explorer of small groups
//! that checks the same guarantees in every state it can reach.
//!
//! Nothing here does I/O or reads a clock: a run is a function of its
//! seed, and every violation names the seed (or the path) that replays it.
//!
//! ```
//! let report = tenure_sim::run(&tenure_sim::SimConfig::new(7));
//! assert!(report.violations.is_empty(), "{:?}", report.violations);
//! ```

#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod app;
mod check;
mod ensemble;
mod etcd;
pub mod explore;
pub mod world;

pub use ensemble::Ensemble;
pub use etcd::EtcdCluster;
pub use explore::{explore, replay, Counterexample, ExploreConfig, ExploreReport, Replay};
pub use world::{run, SimConfig, SimReport, Violation};
