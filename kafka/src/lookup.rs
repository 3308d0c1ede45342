//! Offsets looked up in Kafka: the bounds of a partition's log and the
//! offset of a time. One home for these requests, shared by the member's
//! calls (`tenure_tokio`'s `watermarks`, `offsets_for_times`, `seek_to`)
//! and the operator's tooling. Each request is bounded in time: the client
//! retries by itself, so an unreachable leader would otherwise hang the
//! caller.

use std::time::{Duration, SystemTime};

use rskafka::client::partition::{OffsetAt, PartitionClient, UnknownTopicHandling};
use rskafka::client::Client;
use tenure_core::{Offset, TopicPartition};

use crate::error::KafkaError;

/// How long one lookup may take.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(15);

/// The bounds of one partition's log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct LogOffsets {
    /// The first offset still in the log (the low watermark).
    pub start: Offset,
    /// The offset the next produced message will get (the high
    /// watermark).
    pub end: Offset,
}

impl LogOffsets {
    /// How many messages are not committed: the log's end − `committed`
    /// (− the log's start when nothing is committed), never below 0.
    pub fn lag(&self, committed: Option<Offset>) -> u64 {
        u64::try_from(self.end - committed.unwrap_or(self.start)).unwrap_or(0)
    }
}

/// The bounds of `partition`'s log.
pub async fn log_offsets(
    client: &Client,
    partition: &TopicPartition,
) -> Result<LogOffsets, KafkaError> {
    log_bounds(&partition_client(client, partition).await?, partition).await
}

/// The bounds of `partition`'s log, asked of its partition client
/// ([`partition_client`]): for a caller that asks again and again, and
/// keeps the client.
pub async fn log_bounds(
    client: &PartitionClient,
    partition: &TopicPartition,
) -> Result<LogOffsets, KafkaError> {
    let start = bounded(partition, client.get_offset(OffsetAt::Earliest)).await?;
    let end = bounded(partition, client.get_offset(OffsetAt::Latest)).await?;
    Ok(LogOffsets { start, end })
}

/// The offset of the first message of `partition` whose timestamp is at or
/// after `time` (Kafka's `offsetsForTimes`); `None` if every message is
/// older.
pub async fn offset_for_time(
    client: &Client,
    partition: &TopicPartition,
    time: SystemTime,
) -> Result<Option<Offset>, KafkaError> {
    let millis = match time.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(since) => i64::try_from(since.as_millis()).unwrap_or(i64::MAX),
        // Before the epoch: every message is at or after it.
        Err(_) => 0,
    };
    offset_for_millis(client, partition, millis).await
}

/// [`offset_for_time`], with the time in milliseconds since the Unix epoch.
pub async fn offset_for_millis(
    client: &Client,
    partition: &TopicPartition,
    millis: i64,
) -> Result<Option<Offset>, KafkaError> {
    let Some(time) = chrono::DateTime::from_timestamp_millis(millis.max(0)) else {
        return Ok(None);
    };
    let client = partition_client(client, partition).await?;
    let offset = bounded(partition, client.get_offset(OffsetAt::Timestamp(time))).await?;
    // Kafka answers -1 when no message is that recent.
    Ok((offset >= 0).then_some(offset))
}

/// A client of `partition`'s leader, found within [`LOOKUP_TIMEOUT`].
pub async fn partition_client(
    client: &Client,
    partition: &TopicPartition,
) -> Result<PartitionClient, KafkaError> {
    bounded(
        partition,
        client.partition_client(
            partition.topic.to_string(),
            partition.partition as i32,
            UnknownTopicHandling::Error,
        ),
    )
    .await
}

/// Runs one request within [`LOOKUP_TIMEOUT`], naming the partition in its
/// error.
async fn bounded<T>(
    partition: &TopicPartition,
    request: impl std::future::Future<Output = Result<T, rskafka::client::error::Error>>,
) -> Result<T, KafkaError> {
    match tokio::time::timeout(LOOKUP_TIMEOUT, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(KafkaError::Lookup {
            partition: partition.clone(),
            detail: error.to_string(),
            source: Some(std::sync::Arc::new(error)),
        }),
        Err(_) => Err(KafkaError::Lookup {
            partition: partition.clone(),
            detail: format!("no answer within {LOOKUP_TIMEOUT:?}"),
            source: None,
        }),
    }
}
