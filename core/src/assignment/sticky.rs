//! The `sticky` strategy (stub until implemented).

use super::{Assignment, AssignmentStrategy, PartitionCounts};
use crate::types::MemberInfo;

/// The `sticky` assignment strategy.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sticky;

impl Sticky {
    /// The name members advertise for this strategy.
    pub const NAME: &'static str = "sticky";
}

impl AssignmentStrategy for Sticky {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn assign(&self, _members: &[MemberInfo], _partitions: &PartitionCounts) -> Assignment {
        Assignment::new()
    }
}
