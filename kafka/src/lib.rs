//! tenure-kafka: the Kafka data plane of a tenure member.
//!
//! The member's task (`tenure-tokio`) decides which partitions are fetched
//! and under which claim; this crate does the fetching and keeps the books:
//!
//! - [`metadata`](connect): connecting ([`connect`]), and the topics and
//!   partition counts a subscription covers ([`subscribed_topics`]),
//!   followed as they change;
//! - [`DataPlane`]: one fetcher per owned partition, started, paused,
//!   sought and stopped as the member says;
//! - delivery: the messages handed to the application, in turns across
//!   partitions ([`GroupQueues`], [`Interleaved`]) or as one
//!   [`PartitionStream`] per partition, each message only while the
//!   member's [`Lease`] holds at that instant;
//! - ledgers: which messages the application holds, turned into the
//!   offset below which everything is processed (what the member commits)
//!   and into drains ([`DataEvent`]);
//! - [`lookup`]: the bounds of a partition's log and the offset of a time;
//! - [`security`]: SASL and TLS for secured brokers.
//!
//! Fetching uses `rskafka`: Kafka 4.x accepts only the protocol versions it
//! speaks. Reads are read-committed unless [`KafkaConfig::isolation_level`]
//! says otherwise. A message's key, value and header values are slices of
//! the buffer its batch was fetched into ([`bytes::Bytes`]), handed over
//! without a copy. What is fetched, buffered and handed out is counted
//! through the `metrics` facade ([`DataPlane::set_metric_labels`]).
//! Offsets are committed by the member
//! to its coordination store, not to Kafka. Nothing here imports the
//! member: it is told what to do through [`DataPlane`]'s methods and
//! answers with [`DataEvent`]s.

#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod batch;
mod budget;
mod clock;
mod config;
pub mod dead_letter;
mod delivery;
mod error;
mod event;
mod fetcher;
mod ledger;
pub mod lookup;
mod message;
mod metadata;
mod plane;
pub mod security;
mod stall;
mod telemetry;

pub use bytes::Bytes;
pub use config::{DeadLetters, IsolationLevel, KafkaConfig, ProcessingOrder};
pub use delivery::{GroupQueues, Interleaved, Lease, PartitionStream};
pub use error::{ClientError, KafkaError};
pub use event::DataEvent;
pub use lookup::LogOffsets;
pub use message::{Header, Headers, Message, Timestamp};
pub use metadata::{connect, subscribed_topics, Subscribed};
pub use plane::{DataPlane, Delivery, StartOffsetError, StartOffsets};
/// The Kafka client the data plane fetches with ([`connect`] makes one).
pub use rskafka::client::Client as KafkaClient;
pub use security::{KafkaSecurity, SaslMechanism, TokenError};
