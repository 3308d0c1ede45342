//! The `range` strategy (stub until implemented).

use super::{Assignment, AssignmentStrategy, PartitionCounts};
use crate::types::MemberInfo;

/// The `range` assignment strategy.
#[derive(Clone, Copy, Debug, Default)]
pub struct Range;

impl Range {
    /// The name members advertise for this strategy.
    pub const NAME: &'static str = "range";
}

impl AssignmentStrategy for Range {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn assign(&self, _members: &[MemberInfo], _partitions: &PartitionCounts) -> Assignment {
        Assignment::new()
    }
}
