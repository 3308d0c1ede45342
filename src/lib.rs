//! tenure: Kafka consumer groups whose members coordinate partition
//! ownership through ZooKeeper or etcd — and never leave a partition
//! unowned, never let two members own one, and never let a member that lost
//! a partition commit its offset.
//!
//! Members claim partitions with watches, not polling; a join or a leave
//! moves only the partitions that change hands; every message carries the
//! fencing token of the claim it was fetched under, and every commit is
//! fenced by that claim. Each property is checked in a deterministic
//! simulation and against real ZooKeeper, etcd and Kafka servers.
//!
//! What an application names first is at the root — `use tenure::{Config,
//! GroupMember, KafkaConfig, ZooKeeperBackend};` — and the crates it is made
//! of are modules:
//!
//! | path | crate | what it is |
//! |---|---|---|
//! | [`core`] | `tenure-core` | the sans-IO state machine of one member, the assignment strategies, the records a group keeps in its store, the in-memory store model |
//! | [`runtime`] | `tenure-tokio` | the tokio runtime: `GroupMember`, its handle, builder and streams, the `Backend` trait, static membership, the embedded `MemoryStore`, telemetry, exactly-once output (also reachable as `tenure::tokio`) |
//! | [`kafka`] | `tenure-kafka` | the Kafka data plane: metadata, fetching, delivery, offset lookups, Kafka security (its types also in `tenure::runtime`) |
//! | [`admin`] | `tenure-admin` | a group seen from outside: describe it, plan and apply offset resets, delete offsets or groups |
//! | `tenure::zookeeper` | `tenure-zookeeper` | the ZooKeeper backend (feature `zookeeper`) |
//! | `tenure::etcd` | `tenure-etcd` | the etcd backend (feature `etcd`) |
//! | `tenure::postgres` | `tenure-postgres` | exactly-once output into PostgreSQL (feature `postgres`) |
//!
//! The `tenure` command is the `tenure-cli` crate, and the deterministic
//! simulator `tenure-sim`.
//!
//! | feature | default | brings |
//! |---|---|---|
//! | `zookeeper` | yes | the ZooKeeper backend |
//! | `compression-lz4`, `compression-zstd` | yes | record batches compressed with lz4 or zstd (each builds a C library; gzip and snappy are always in) |
//! | `zookeeper-tls` | | TLS to ZooKeeper's `secureClientPort` |
//! | `kafka-tls` | | TLS to Kafka brokers (SASL needs no feature) |
//! | `etcd` | | the etcd backend (building it needs `protoc`) |
//! | `postgres` | | the PostgreSQL sink of exactly-once output (pure Rust) |
//! | `postgres-tls` | | TLS to PostgreSQL for that sink (rustls with ring) |
//!
//! The [`guide`] tells the rest, one chapter per module, starting with
//! [`guide::consumers`]; its examples, and the README's, are compiled and run
//! as this crate's doc-tests.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

pub mod guide;
pub use tenure_admin as admin;
pub use tenure_core as core;
#[cfg(feature = "etcd")]
pub use tenure_etcd as etcd;
#[cfg(feature = "postgres")]
pub use tenure_postgres as postgres;
pub use tenure_tokio as runtime;
/// The former name of [`runtime`], kept so that existing paths resolve; it
/// reads like the `tokio` crate beside `tokio::select!`.
#[doc(hidden)]
pub use tenure_tokio as tokio;
/// The Kafka data plane (the `tenure-kafka` crate).
pub use tenure_tokio::kafka;
#[cfg(feature = "zookeeper")]
pub use tenure_zookeeper as zookeeper;

// What an application names first, at the root: `use tenure::{Config,
// GroupMember, KafkaConfig};`.
pub use tenure_core::{
    Config, FencingToken, InitialOffset, MemberId, Offset, Subscription, TopicPartition,
};
#[cfg(feature = "etcd")]
pub use tenure_etcd::{EtcdBackend, EtcdSecurity};
pub use tenure_tokio::{
    generate_member_id, AssignmentEvent, CloseError, CommitOutcome, CommitReport, DeadLetters,
    GroupMember, GroupMemberBuilder, JoinError, KafkaConfig, KafkaError, KafkaSecurity, LogOffsets,
    MemberEnd, MemberHandle, MemberStreams, MemoryStore, Message, PartitionError, Problem,
    ProcessingOrder, SaslMechanism, SeekTo, StaticMembership, View,
};
#[cfg(feature = "zookeeper")]
pub use tenure_zookeeper::{ZooKeeperBackend, ZooKeeperSecurity};
