//! What the data plane tells the member's task.

use tenure_core::assignment::PartitionCounts;
use tenure_core::{FencingToken, Offset, TopicPartition};

use crate::error::KafkaError;

/// What the data plane tells the member's task.
#[derive(Debug)]
#[non_exhaustive]
pub enum DataEvent {
    /// Everything up to `offset` is processed.
    Processed(TopicPartition, FencingToken, Offset),
    /// A stopping partition has nothing outstanding any more.
    Drained(TopicPartition, FencingToken),
    /// A problem worth reporting; the fetcher goes on.
    Problem(KafkaError),
    /// New partition counts from metadata.
    Counts(PartitionCounts),
    /// A fetch under the claim `token` saw this log-end offset (high
    /// watermark); sent only when it moved.
    HighWatermark(TopicPartition, FencingToken, Offset),
    /// The application's start offset for the claim `token` could not be
    /// read (`StartOffsets` failed); it is asked again after a pause, and
    /// nothing is fetched until it answers.
    StartOffsetFailed {
        /// The partition.
        partition: TopicPartition,
        /// The claim.
        token: FencingToken,
        /// What the application's function said.
        error: crate::StartOffsetError,
    },
}
