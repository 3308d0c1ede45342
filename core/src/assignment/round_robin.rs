//! The `round-robin` strategy (stub until implemented).

use super::{Assignment, AssignmentStrategy, PartitionCounts};
use crate::types::MemberInfo;

/// The `round-robin` assignment strategy.
#[derive(Clone, Copy, Debug, Default)]
pub struct RoundRobin;

impl RoundRobin {
    /// The name members advertise for this strategy.
    pub const NAME: &'static str = "round-robin";
}

impl AssignmentStrategy for RoundRobin {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn assign(&self, _members: &[MemberInfo], _partitions: &PartitionCounts) -> Assignment {
        Assignment::new()
    }
}
