//! The `range` strategy: the legacy assignment of Kafka 0.8's ZooKeeper
//! consumer (and of clients that copied it), kept so a group can run next to
//! members that use it.
//!
//! Each topic is split on its own: its subscribers sorted by id, its
//! partitions in order, and each subscriber gets one contiguous range. With
//! `n` partitions and `m` subscribers every subscriber gets `n / m` and the
//! first `n % m` get one more. Because topics are split independently, the
//! first members by id get the extra partition of every topic, so with many
//! topics the load can be lopsided; that is the legacy behaviour, kept as is.

use super::{Assignment, PartitionCounts};
use crate::subscription::MemberInfo;
use crate::types::TopicPartition;

/// The `range` assignment strategy: contiguous ranges of each topic's
/// partitions to its subscribers in id order.
#[derive(Clone, Copy, Debug, Default)]
pub struct Range;

/// Splits each topic on its own into contiguous ranges, one to each of its
/// subscribers (`members`, sorted by id).
pub(super) fn assign(members: &[&MemberInfo], partitions: &PartitionCounts) -> Assignment {
    let mut assignment = Assignment::new();
    for (topic, &count) in partitions {
        let subscribers: Vec<&MemberInfo> = members
            .iter()
            .copied()
            .filter(|m| m.subscribes_to(topic))
            .collect();
        if subscribers.is_empty() {
            continue;
        }
        // u32 arithmetic cannot overflow here: every start and length is
        // at most `count`.
        let m = u32::try_from(subscribers.len()).unwrap_or(u32::MAX);
        let per_member = count / m;
        let extra = count % m;
        let mut next = 0u32;
        for (i, member) in (0u32..).zip(&subscribers) {
            let len = per_member + u32::from(i < extra);
            for partition in next..next + len {
                assignment.insert(TopicPartition::new(topic, partition), member.id.clone());
            }
            next += len;
        }
    }
    assignment
}
