//! The `round-robin` strategy: Kafka's `RoundRobinAssignor`.
//!
//! All partitions of all topics, sorted by (topic, partition), are dealt in
//! turn to the members sorted by id. The turn passes around the circle of
//! members, skipping those not subscribed to the partition's topic, and
//! carries on from where the previous partition left it, so topics do not
//! all start at the first member.

use super::{Assignment, PartitionCounts};
use crate::subscription::MemberInfo;
use crate::types::TopicPartition;

/// The `round-robin` assignment strategy: partitions dealt in turn to the
/// members, in id order, that subscribe to their topic.
#[derive(Clone, Copy, Debug, Default)]
pub struct RoundRobin;

/// Deals every partition in turn to the next member (`members`, sorted by
/// id) subscribed to its topic.
pub(super) fn assign(members: &[&MemberInfo], partitions: &PartitionCounts) -> Assignment {
    let mut assignment = Assignment::new();
    if members.is_empty() {
        return assignment;
    }
    // Position in the circle of the member whose turn it is.
    let mut turn = 0usize;
    for (topic, &count) in partitions {
        let subscribed: Vec<bool> = members.iter().map(|m| m.subscribes_to(topic)).collect();
        // Without a subscriber the search below would never end, and the
        // topic is left out anyway.
        if count == 0 || !subscribed.contains(&true) {
            continue;
        }
        for partition in 0..count {
            while !subscribed[turn] {
                turn = (turn + 1) % members.len();
            }
            assignment.insert(
                TopicPartition::new(topic, partition),
                members[turn].id.clone(),
            );
            turn = (turn + 1) % members.len();
        }
    }
    assignment
}
