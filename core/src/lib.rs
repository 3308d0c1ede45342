//! tenure-core: the synchronous, sans-IO state machine of one member of a
//! tenure consumer group.
//!
//! Events go in ([`Member::handle_event`]); requests for the store
//! ([`Member::poll_command`]), starts and stops for the fetcher
//! ([`Member::poll_fetch`]) and what the application should know
//! ([`Member::poll_app_event`]) come out on queues of their own; time is
//! always passed in: the core has no
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
pub use protocol::{
    AppEvent, ClaimOutcome, Command, Event, FetchCommand, FetchFrom, Member, RegisterOutcome,
};
pub use types::{FencingToken, MemberId, MemberInfo, Offset, RequestId, SessionId, TopicPartition};
