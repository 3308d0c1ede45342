//! tenure-admin: a group seen from outside — who is in it, who owns which
//! partition, how far behind each partition is, moving its committed
//! offsets, and deleting them or the whole group. What an operator's tool
//! or an exporter builds on; the `tenure` command (`tenure-cli`) is one.
//!
//! A store answers through [`GroupAdmin`] (the ZooKeeper and etcd backends
//! implement it: `ZooKeeperAdmin`, `EtcdAdmin`); Kafka answers for log
//! offsets through [`log_offsets`] and [`offset_at_time`]. [`describe`]
//! joins the two. [`plan_reset`] (or [`plan_listed`], for offsets given per
//! partition) computes a [`ResetPlan`] without writing; [`apply_reset`]
//! writes it. [`plan_delete_offsets`] and [`apply_delete_offsets`] delete
//! committed offsets, [`delete_group`] a group's records. Every write is
//! refused while the group has live members unless forced
//! ([`WriteGuard`]).
//!
//! Reading and writing these as text — times, durations, partition lists,
//! offsets files — is the command's business, not this crate's.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

mod delete;
mod describe;
mod error;
pub mod health;
mod kafka;
mod monitor;
pub mod overview;
mod records;
mod reset;
mod selection;
#[cfg(feature = "serde")]
pub mod serialize;
mod store;

pub use delete::{apply_delete_offsets, delete_group, plan_delete_offsets, DeleteOffsetsPlan};
pub use describe::{describe, GroupDescription, PartitionDescription};
pub use error::AdminError;
pub use kafka::{log_offsets, offset_at_time, KafkaClient, LogOffsets};
pub use monitor::{Connector, GroupFilter, Monitor, MonitorConfig};
pub use records::{CorruptRecord, GroupRecords, MemberRecord, OwnerRecord};
pub use reset::{apply_reset, plan_listed, plan_reset, OffsetChange, ResetPlan, ResetTarget};
pub use selection::{PartitionSelection, TopicPartitions};
pub use store::{GroupAdmin, GroupDeletion, StoreChange, StoreChanges, WriteGuard};
