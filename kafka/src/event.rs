//! What the data plane tells the member's task.

use tenure_core::assignment::PartitionCounts;
use tenure_core::{FencingToken, Offset, TopicPartition};

use crate::error::KafkaError;

/// What the data plane tells the member's task.
#[derive(Debug)]
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
}
