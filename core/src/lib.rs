//! tenure-core: the synchronous, sans-IO state machine of one member of a
//! tenure consumer group.
//!
//! Events go in ([`Member::handle_event`]), commands come out
//! ([`Member::poll_command`]), what the application should know comes out
//! apart ([`Member::poll_app_event`]), and time is always passed in: the core has no
//! I/O, no clocks, no threads and no async runtime. Randomness (retry
//! jitter) comes only from the seed given to [`Member::new`]. A runtime
//! carries the commands to a store (ZooKeeper, etcd, or the in-memory
//! [`model`]) and to Kafka, and brings results back as events.
//!
//! Modules, one job each:
//! - [`types`], [`config`], [`error`]: the nouns, the settings, the errors;
//! - [`assignment`]: which member should own which partition;
//! - [`protocol`]: the member state machine (claims, releases, offsets,
//!   sessions);
//! - [`records`]: the records a group keeps in its store (paths, the
//!   registration JSON, the offset codec), shared by every backend;
//! - [`model`]: an in-memory store with ZooKeeper's semantics and the
//!   adapter that carries commands to it (the runtime's embedded store);
//! - `sim` (feature `sim`): a deterministic simulator of whole groups on
//!   that model, with faults.

#![deny(missing_docs)]

pub mod assignment;
mod backoff;
pub mod config;
pub mod error;
pub mod model;
pub mod protocol;
pub mod records;
mod rng;
#[cfg(feature = "sim")]
pub mod sim;
pub mod types;

pub use config::{Config, InitialOffset};
pub use error::{ClientError, ConfigError, Error, NameError, Operation, StoreError};
pub use protocol::{AppEvent, ClaimOutcome, Command, Event, FetchFrom, Member, RegisterOutcome};
pub use types::{FencingToken, MemberId, MemberInfo, Offset, RequestId, SessionId, TopicPartition};
