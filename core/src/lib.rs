//! tenure-core: the synchronous, sans-IO state machine of one member of a
//! tenure consumer group.
//!
//! Events go in ([`Member::handle_event`]), commands come out
//! ([`Member::poll_command`]), and time is always passed in: the core has no
//! I/O, no clocks, no threads and no async runtime. Randomness (retry
//! jitter) comes only from the seed given to [`Member::new`]. A runtime
//! carries the commands to a store (ZooKeeper, etcd, or the in-memory model
//! of the `sim` feature) and to Kafka, and brings results back as events.
//!
//! Modules, one job each:
//! - [`types`], [`config`], [`error`]: the nouns, the settings, the errors;
//! - [`assignment`]: which member should own which partition;
//! - [`protocol`]: the member state machine (claims, releases, offsets,
//!   sessions);
//! - `sim` (feature `sim`): an in-memory store with ZooKeeper's semantics
//!   and a deterministic simulator of whole groups.

#![deny(missing_docs)]

pub mod assignment;
mod backoff;
pub mod config;
pub mod error;
pub mod protocol;
mod rng;
#[cfg(feature = "sim")]
pub mod sim;
pub mod types;

pub use config::{Config, InitialOffset};
pub use error::{ConfigError, Error, NameError, StoreError};
pub use protocol::{ClaimOutcome, Command, Event, FetchFrom, Member, RegisterOutcome};
pub use types::{FencingToken, MemberId, MemberInfo, Offset, RequestId, SessionId, TopicPartition};
