//! Assignment strategies: which member should own which partition.
//!
//! Every member computes the assignment on its own from the same snapshot
//! (members with their subscriptions, partition counts per topic), so a
//! strategy must be a pure function of that snapshot: no randomness, no
//! clocks, no iteration order of hash maps.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use crate::subscription::MemberInfo;
use crate::types::{MemberId, TopicPartition};

mod range;
mod round_robin;
mod sticky;

pub use range::Range;
pub use round_robin::RoundRobin;
pub use sticky::Sticky;

/// Partition counts per topic, as Kafka's metadata gives them.
pub type PartitionCounts = BTreeMap<String, u32>;

/// Computes an assignment from a membership snapshot.
///
/// Implementations must be deterministic: the same members (in any order)
/// and the same partition counts give the same assignment on every member.
/// A partition goes only to a member subscribed to its topic; a partition of
/// a topic nobody subscribes to is left out.
pub trait AssignmentStrategy: fmt::Debug + Send + Sync {
    /// The name members advertise; members of one group must agree on it.
    fn name(&self) -> &str;

    /// Assigns the partitions of `partitions` to `members`.
    fn assign(&self, members: &[MemberInfo], partitions: &PartitionCounts) -> Assignment;

    /// The partitions [`AssignmentStrategy::assign`] gives `member`, for a
    /// member that assigns again at every membership change: all it needs
    /// of the assignment. `memo` is what the strategy kept of this member's
    /// previous call, to reuse what did not change. The default keeps
    /// nothing and picks them out of the whole assignment.
    fn assign_to(
        &self,
        members: &[MemberInfo],
        partitions: &PartitionCounts,
        memo: &mut AssignmentMemo,
        member: &MemberId,
    ) -> BTreeSet<TopicPartition> {
        let _ = memo;
        self.assign(members, partitions).partitions_of(member)
    }
}

/// What a strategy keeps between the assignments of one member
/// ([`AssignmentStrategy::assign_to`]): never part of the result, only a
/// way to reach it sooner. A clone starts empty.
#[derive(Default)]
pub struct AssignmentMemo {
    kept: Option<Box<dyn Any + Send + Sync>>,
}

impl AssignmentMemo {
    /// An empty memo.
    pub fn new() -> Self {
        Self::default()
    }

    /// What the strategy kept as a `T`; a fresh one if it kept nothing
    /// yet, or something else (another strategy's).
    pub fn get_mut<T: Any + Send + Sync + Default>(&mut self) -> &mut T {
        if !self.kept.as_ref().is_some_and(|kept| kept.is::<T>()) {
            self.kept = Some(Box::new(T::default()));
        }
        match self.kept.as_mut().and_then(|kept| kept.downcast_mut::<T>()) {
            Some(kept) => kept,
            // Set just above to a `T`.
            None => unreachable!("the memo holds a T"),
        }
    }
}

impl Clone for AssignmentMemo {
    fn clone(&self) -> Self {
        // Only a shortcut: a clone that starts without it assigns alike.
        Self::default()
    }
}

impl fmt::Debug for AssignmentMemo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AssignmentMemo").finish_non_exhaustive()
    }
}

/// Makes each built-in strategy of its unit struct and its module's
/// `assign`: the name it advertises, and an assignment over the members
/// sorted by id, so that none depends on the order a snapshot listed them in.
macro_rules! built_in_strategies {
    ($($strategy:ident in $module:ident => $name:literal),* $(,)?) => {$(
        impl $strategy {
            /// The name members advertise for this strategy.
            pub const NAME: &'static str = $name;
        }

        impl AssignmentStrategy for $strategy {
            fn name(&self) -> &str {
                Self::NAME
            }

            fn assign(&self, members: &[MemberInfo], partitions: &PartitionCounts) -> Assignment {
                $module::assign(&sorted_members(members), partitions)
            }
        }
    )*};
}

impl Sticky {
    /// The name members advertise for this strategy.
    pub const NAME: &'static str = "sticky";
}

impl AssignmentStrategy for Sticky {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn assign(&self, members: &[MemberInfo], partitions: &PartitionCounts) -> Assignment {
        sticky::assign(&sorted_members(members), partitions)
    }

    fn assign_to(
        &self,
        members: &[MemberInfo],
        partitions: &PartitionCounts,
        memo: &mut AssignmentMemo,
        member: &MemberId,
    ) -> BTreeSet<TopicPartition> {
        sticky::assign_to(&sorted_members(members), partitions, memo.get_mut(), member)
    }
}

built_in_strategies! {
    Range in range => "range",
    RoundRobin in round_robin => "round-robin",
}

/// Looks up a built-in strategy by its advertised name: `sticky`, `range` or
/// `round-robin`.
pub fn by_name(name: &str) -> Option<Arc<dyn AssignmentStrategy>> {
    match name {
        Sticky::NAME => Some(Arc::new(Sticky)),
        Range::NAME => Some(Arc::new(Range)),
        RoundRobin::NAME => Some(Arc::new(RoundRobin)),
        _ => None,
    }
}

/// The owner each partition should have.
#[derive(Clone, Default, PartialEq, Eq, Debug)]
pub struct Assignment {
    owners: BTreeMap<TopicPartition, MemberId>,
}

impl FromIterator<(TopicPartition, MemberId)> for Assignment {
    /// An assignment naming each partition's owner; a later pair for the
    /// same partition replaces an earlier one, as with
    /// [`Assignment::insert`]. Pairs in partition order are taken in one
    /// pass.
    fn from_iter<I: IntoIterator<Item = (TopicPartition, MemberId)>>(pairs: I) -> Self {
        Assignment {
            owners: pairs.into_iter().collect(),
        }
    }
}

impl Assignment {
    /// An assignment with no partitions.
    pub fn new() -> Self {
        Self::default()
    }

    /// Names `member` as the owner of `partition`, replacing any other.
    pub fn insert(&mut self, partition: TopicPartition, member: MemberId) {
        self.owners.insert(partition, member);
    }

    /// The member that should own `partition`.
    pub fn owner(&self, partition: &TopicPartition) -> Option<&MemberId> {
        self.owners.get(partition)
    }

    /// The partitions `member` should own.
    pub fn partitions_of(&self, member: &MemberId) -> BTreeSet<TopicPartition> {
        self.owners
            .iter()
            .filter(|(_, owner)| *owner == member)
            .map(|(partition, _)| partition.clone())
            .collect()
    }

    /// How many partitions each member should own (members with none are
    /// absent).
    pub fn counts(&self) -> BTreeMap<MemberId, usize> {
        let mut counts = BTreeMap::new();
        for owner in self.owners.values() {
            *counts.entry(owner.clone()).or_insert(0) += 1;
        }
        counts
    }

    /// Every partition with its owner, in partition order.
    pub fn iter(&self) -> impl Iterator<Item = (&TopicPartition, &MemberId)> {
        self.owners.iter()
    }

    /// How many partitions are assigned.
    pub fn len(&self) -> usize {
        self.owners.len()
    }

    /// Whether no partition is assigned.
    pub fn is_empty(&self) -> bool {
        self.owners.is_empty()
    }

    /// How many partitions have a different owner in `other` (including
    /// partitions present in only one of the two).
    pub fn moves_to(&self, other: &Assignment) -> usize {
        let mut moved = 0;
        for (partition, owner) in &other.owners {
            if self.owners.get(partition) != Some(owner) {
                moved += 1;
            }
        }
        moved
            + self
                .owners
                .keys()
                .filter(|p| !other.owners.contains_key(*p))
                .count()
    }
}

/// The members sorted by id with duplicates removed, so strategies never
/// depend on the order a snapshot listed them in.
fn sorted_members(members: &[MemberInfo]) -> Vec<&MemberInfo> {
    let mut sorted: Vec<&MemberInfo> = members.iter().collect();
    sorted.sort_by(|a, b| a.id.cmp(&b.id));
    sorted.dedup_by(|a, b| a.id == b.id);
    sorted
}
