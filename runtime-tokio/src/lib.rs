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

mod backend;
mod driver;
pub mod exactly_once;
mod member;
mod membership;
mod memory;
pub mod store;
mod streams;
mod telemetry;
mod values;

pub use backend::{
    hostname, registration_record, Backend, BackendError, EventSender, Joining, SessionTicket,
};
pub use member::{
    generate_member_id, GroupMember, GroupMemberBuilder, MemberHandle, MemberStreams,
};
pub use membership::{StateFileError, StaticMembership};
pub use memory::{MemoryBackend, MemoryStore};
pub use streams::{Errors, Events, Messages, PartitionStreams, ERRORS_CAPACITY, EVENTS_CAPACITY};
/// The Kafka data plane the member drives (the `tenure-kafka` crate).
pub use tenure_kafka as kafka;
pub use tenure_kafka::{
    DeadLetters, Header, Headers, IsolationLevel, KafkaConfig, KafkaError, KafkaSecurity,
    LogOffsets, Message, PartitionStream, ProcessingOrder, SaslMechanism, StartOffsetError,
    StartOffsets, Timestamp,
};
pub use values::{
    AssignmentEvent, CloseError, CommitOutcome, CommitReport, JoinError, MemberEnd, PartitionError,
    Problem, SeekError, SeekTo, TaskGone, View,
};
