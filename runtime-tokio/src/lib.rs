//! tenure-tokio: drives one tenure member per group on tokio.
//!
//! The runtime owns the member's state machine (from `tenure-core`), its
//! timer and a [`Backend`] that talks to the coordination store; it feeds
//! events in, carries commands out, and gives the application a stream of
//! assignment changes ([`AssignmentEvent`]) and errors.
//!
//! [`exactly_once`] writes a member's messages to a transactional store
//! exactly once, each batch with its partition's next offset in one
//! transaction fenced by the claim's token.
//!
//! With no server at all, [`MemoryStore`] is an embedded in-memory store
//! with ZooKeeper's semantics, shared by the members of one process.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

pub mod admin;
mod backend;
pub mod exactly_once;
pub mod kafka;
mod member;
mod membership;
mod memory;
pub mod security;
pub mod session;
mod streams;
mod telemetry;

pub use backend::{
    hostname, registration_record, Backend, BackendError, EventSender, Joining, SessionTicket,
};
pub use kafka::{
    KafkaConfig, KafkaError, KafkaSecurity, Message, PartitionStream, SaslMechanism, StartOffsets,
};
pub use member::{
    AssignmentEvent, CloseError, CommitOutcome, CommitReport, GroupMember, GroupMemberBuilder,
    JoinError, Problem, SeekError, TaskGone, View,
};
pub use membership::{StateFileError, StaticMembership};
pub use memory::{MemoryBackend, MemoryStore};
pub use streams::{Errors, Events, Messages, PartitionStreams, ERRORS_CAPACITY, EVENTS_CAPACITY};
pub use tenure_core as core;
