//! Why an operation on a group fails.

use tenure_core::{NameError, TopicPartition};
use tenure_kafka::KafkaError;

use crate::records::CorruptRecord;

/// Why an operation on a group failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// The store does not answer.
    #[error("cannot reach {store}: {detail}")]
    Unreachable {
        /// Which store.
        store: String,
        /// What went wrong.
        detail: String,
    },
    /// The store refused a request for want of rights: wrong credentials,
    /// or records made by another identity (ZooKeeper: a digest ACL).
    #[error("{store} refused access: {detail}")]
    Denied {
        /// Which store, and as whom.
        store: String,
        /// What was refused, and what to check.
        detail: String,
    },
    /// The store's address is unusable.
    #[error("invalid address for {store}: {detail}")]
    BadAddress {
        /// Which store.
        store: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The store has no record of the group.
    #[error("group {group:?} has no records in {store} (`tenure groups` lists the groups there)")]
    UnknownGroup {
        /// The group.
        group: String,
        /// Which store.
        store: String,
    },
    /// A group or topic name is not usable.
    #[error(transparent)]
    Name(#[from] NameError),
    /// A record in the way of the operation cannot be read.
    #[error("{0}")]
    Corrupt(CorruptRecord),
    /// Offsets cannot be moved under live members: their next commits would
    /// overwrite the new offsets, or they would consume from the old ones.
    #[error(
        "group {group:?} has {} live member(s) ({}): stop them first, or pass --force",
        members.len(),
        members.join(", ")
    )]
    GroupActive {
        /// The group.
        group: String,
        /// Its live members.
        members: Vec<String>,
    },
    /// Kafka cannot be reached.
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    /// Kafka does not know the topic.
    #[error("topic {topic:?} does not exist in Kafka")]
    UnknownTopic {
        /// The topic.
        topic: String,
    },
    /// Kafka knows the topic but not this partition of it.
    #[error(
        "partition {partition} of topic {topic:?} does not exist in Kafka (the topic has {count} \
         partition(s))"
    )]
    UnknownPartition {
        /// The topic.
        topic: String,
        /// The partition asked for.
        partition: u32,
        /// How many partitions the topic has.
        count: usize,
    },
    /// A shift is relative to the committed offset, and these partitions
    /// have none.
    #[error(
        "cannot shift the offsets of group {group:?}: {} partition(s) have no committed offset \
         ({}); pick partitions with --topic TOPIC:P,... or reset them with --to",
        partitions.len(),
        partitions.iter().map(|p| format!("{}:{}", p.topic, p.partition)).collect::<Vec<_>>().join(", ")
    )]
    NoCommittedOffset {
        /// The group.
        group: String,
        /// The partitions without a committed offset.
        partitions: Vec<TopicPartition>,
    },
    /// All topics were asked for, and the group names none.
    #[error(
        "group {group:?} has no offsets, owners or subscribed topics to select: name the topics \
         with --topic"
    )]
    NothingSelected {
        /// The group.
        group: String,
    },
    /// A request to Kafka failed.
    #[error("Kafka request for {what} failed: {detail}")]
    KafkaRequest {
        /// What was asked about (a topic or partition).
        what: String,
        /// What the client said.
        detail: String,
    },
    /// The store refused a request.
    #[error("{store} refused {operation}: {detail}")]
    Store {
        /// Which store.
        store: String,
        /// What was asked.
        operation: String,
        /// What it said.
        detail: String,
    },
}
