//! A group described: its members and, per partition, owner, token,
//! committed offset, log offsets and lag.

use std::collections::{BTreeMap, BTreeSet};

use tenure_core::{Offset, TopicPartition};

use crate::error::AdminError;
use crate::kafka::{log_offsets, KafkaClient, LogOffsets};
use crate::records::{CorruptRecord, MemberRecord, OwnerRecord};
use crate::selection::group_topics;
use crate::store::GroupAdmin;

/// One partition of a described group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionDescription {
    /// The partition.
    pub partition: TopicPartition,
    /// Its owner, if any.
    pub owner: Option<OwnerRecord>,
    /// Its committed offset (the next offset to consume), if any.
    pub committed: Option<Offset>,
    /// The first offset still in the log (without Kafka: unknown).
    pub log_start: Option<Offset>,
    /// The offset the next produced message will get (without Kafka:
    /// unknown).
    pub log_end: Option<Offset>,
    /// How many messages are not committed yet: log end − committed offset
    /// (log end − log start when nothing is committed).
    pub lag: Option<u64>,
}

/// A group as [`describe`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupDescription {
    /// The group.
    pub group: String,
    /// The store described.
    pub store: String,
    /// Its live members.
    pub members: Vec<MemberRecord>,
    /// Every partition of every topic the group consumes or has offsets
    /// for, sorted.
    pub partitions: Vec<PartitionDescription>,
    /// Records that could not be read.
    pub corrupt: Vec<CorruptRecord>,
}

/// Describes `group`: its members, and per partition the owner, fencing
/// token, committed offset and — with a Kafka client — log offsets and lag.
///
/// The partitions are those of every topic a member subscribes to or the
/// group has records for; with Kafka, every partition of those topics,
/// owned or not.
pub async fn describe(
    admin: &dyn GroupAdmin,
    group: &str,
    kafka_client: Option<&KafkaClient>,
) -> Result<GroupDescription, AdminError> {
    tenure_core::types::validate_path_element("group", group)?;
    let records = admin.records(group).await?;
    let topics = group_topics(&records);
    let mut partitions: BTreeSet<TopicPartition> = records.partitions();
    let mut logs: BTreeMap<TopicPartition, LogOffsets> = BTreeMap::new();
    if let Some(client) = kafka_client {
        for topic in &topics {
            match log_offsets(client, topic).await {
                Ok(found) => {
                    for (number, offsets) in found {
                        let partition = TopicPartition::new(topic, number);
                        partitions.insert(partition.clone());
                        logs.insert(partition, offsets);
                    }
                }
                // Offsets of a deleted topic are still worth showing.
                Err(AdminError::UnknownTopic { .. }) => {}
                Err(error) => return Err(error),
            }
        }
    }
    let partitions = partitions
        .into_iter()
        .map(|partition| {
            let log = logs.get(&partition);
            let committed = records.offsets.get(&partition).copied();
            let lag = log.map(|log| log.lag(committed));
            PartitionDescription {
                owner: records.owners.get(&partition).cloned(),
                committed,
                log_start: log.map(|l| l.start),
                log_end: log.map(|l| l.end),
                lag,
                partition,
            }
        })
        .collect();
    Ok(GroupDescription {
        group: group.to_owned(),
        store: admin.store(),
        members: records.members,
        partitions,
        corrupt: records.corrupt,
    })
}
