//! Deleting a group's committed offsets, or the group's records.

use std::collections::{BTreeMap, BTreeSet};

use tenure_core::{Offset, TopicPartition};

use crate::error::AdminError;
use crate::selection::{merge_topics, TopicPartitions};
use crate::store::{group_records, guard, GroupAdmin, GroupDeletion};

/// What [`apply_delete_offsets`] will delete, computed by
/// [`plan_delete_offsets`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteOffsetsPlan {
    /// The group.
    pub group: String,
    /// The committed offsets to delete, with their values now.
    pub offsets: BTreeMap<TopicPartition, Offset>,
    /// What was selected but has no committed offset: a topic (all its
    /// partitions) or some of its partitions.
    pub absent: Vec<TopicPartitions>,
    /// The group's live members when the plan was made.
    pub live_members: Vec<String>,
}

/// Finds the committed offsets of `group` that `topics` select: every
/// partition of a topic that has one, or the partitions named. Reads the
/// store only (the topic may be gone from Kafka). Changes nothing.
pub async fn plan_delete_offsets(
    admin: &dyn GroupAdmin,
    group: &str,
    topics: &[TopicPartitions],
) -> Result<DeleteOffsetsPlan, AdminError> {
    let records = group_records(admin, group, false).await?;
    let mut offsets = BTreeMap::new();
    let mut absent = Vec::new();
    for (topic, partitions) in merge_topics(topics) {
        match partitions {
            None => {
                let found: Vec<_> = records
                    .offsets
                    .iter()
                    .filter(|(p, _)| &*p.topic == topic)
                    .collect();
                if found.is_empty() {
                    absent.push(TopicPartitions {
                        topic: topic.to_owned(),
                        partitions: None,
                    });
                }
                offsets.extend(found.into_iter().map(|(p, o)| (p.clone(), *o)));
            }
            Some(partitions) => {
                let mut missing = BTreeSet::new();
                for number in partitions {
                    let partition = TopicPartition::new(topic, number);
                    match records.offsets.get(&partition) {
                        Some(offset) => {
                            offsets.insert(partition, *offset);
                        }
                        None => {
                            missing.insert(number);
                        }
                    }
                }
                if !missing.is_empty() {
                    absent.push(TopicPartitions {
                        topic: topic.to_owned(),
                        partitions: Some(missing),
                    });
                }
            }
        }
    }
    Ok(DeleteOffsetsPlan {
        group: group.to_owned(),
        offsets,
        absent,
        live_members: records.members.into_iter().map(|m| m.id).collect(),
    })
}

/// Deletes a plan's offsets. Refuses while the group has live members
/// (looked up again now) unless `force`.
pub async fn apply_delete_offsets(
    admin: &dyn GroupAdmin,
    plan: &DeleteOffsetsPlan,
    force: bool,
) -> Result<(), AdminError> {
    let partitions = plan.offsets.keys().cloned().collect();
    admin
        .delete_offsets(&plan.group, &partitions, guard(force))
        .await
}

/// Deletes the records of `group` ([`GroupAdmin::delete_group`]). Refuses
/// while the group has live members unless `force`; even forced, the
/// records live sessions hold stay.
pub async fn delete_group(
    admin: &dyn GroupAdmin,
    group: &str,
    force: bool,
) -> Result<GroupDeletion, AdminError> {
    tenure_core::types::validate_path_element("group", group)?;
    admin.delete_group(group, guard(force)).await
}
