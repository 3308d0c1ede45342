//! What the data plane tells the member's task.

use tenure_core::assignment::PartitionCounts;
use tenure_core::{FencingToken, Offset, Progress, TopicPartition};

use crate::error::KafkaError;

/// What the data plane tells the member's task.
#[derive(Debug)]
#[non_exhaustive]
pub enum DataEvent {
    /// Everything up to `offset` is processed.
    Processed(TopicPartition, FencingToken, Offset),
    /// Everything below the offset is processed and, above it, what the
    /// progress names (for the partition's progress record, see
    /// `tenure_core::Member::progressed`); sent when the progress changed,
    /// in place of [`DataEvent::Processed`].
    Progressed(TopicPartition, FencingToken, Offset, Progress),
    /// A stopping partition has nothing outstanding any more.
    Drained(TopicPartition, FencingToken),
    /// A problem worth reporting; the fetcher goes on.
    Problem(KafkaError),
    /// New partition counts from metadata.
    Counts(PartitionCounts),
    /// A fetch under the claim `token` saw this log-end offset (high
    /// watermark); sent only when it moved.
    HighWatermark(TopicPartition, FencingToken, Offset),
    /// The application has neither taken nor acknowledged a message of
    /// the claim `token` for `stalled_for` (at least
    /// [`KafkaConfig::max_processing_stall`](crate::KafkaConfig::max_processing_stall))
    /// while messages waited for it. Told once per claim.
    ProcessingStalled {
        /// The partition.
        partition: TopicPartition,
        /// The claim.
        token: FencingToken,
        /// How long its messages waited without progress.
        stalled_for: std::time::Duration,
    },
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
