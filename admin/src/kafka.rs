//! What Kafka answers for a group's partitions: the bounds of their logs
//! and the offset of a time. Each request is bounded in time, so an
//! unreachable leader fails the operation instead of hanging it.

use std::collections::BTreeMap;
use std::time::Duration;

use rskafka::client::partition::{OffsetAt, PartitionClient, UnknownTopicHandling};
/// The Kafka client [`describe`](crate::describe) and
/// [`plan_reset`](crate::plan_reset) take ([`tenure_kafka::connect`] makes
/// one).
pub use rskafka::client::Client as KafkaClient;
use tenure_core::{Offset, TopicPartition};

use crate::error::AdminError;

/// How long one Kafka request of an admin operation may take: the client
/// retries by itself, so an unreachable leader would otherwise hang the tool.
const KAFKA_REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// The bounds of one partition's log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogOffsets {
    /// The first offset still in the log.
    pub start: Offset,
    /// The offset the next produced message will get (the high watermark).
    pub end: Offset,
}

/// The log bounds of every partition of `topic`.
pub async fn log_offsets(
    client: &KafkaClient,
    topic: &str,
) -> Result<BTreeMap<u32, LogOffsets>, AdminError> {
    let listed = bounded(topic, None, client.list_topics()).await?;
    let Some(found) = listed.into_iter().find(|t| t.name == topic) else {
        return Err(AdminError::UnknownTopic {
            topic: topic.to_owned(),
        });
    };
    let mut lookups = tokio::task::JoinSet::new();
    for &number in &found.partitions {
        let Ok(number) = u32::try_from(number) else {
            continue;
        };
        let partition = TopicPartition::new(topic, number);
        let client = partition_client(client, &partition).await?;
        lookups.spawn(async move {
            let start = bounded(
                &partition.topic,
                Some(&partition),
                client.get_offset(OffsetAt::Earliest),
            )
            .await?;
            let end = bounded(
                &partition.topic,
                Some(&partition),
                client.get_offset(OffsetAt::Latest),
            )
            .await?;
            Ok::<_, AdminError>((number, LogOffsets { start, end }))
        });
    }
    let mut offsets = BTreeMap::new();
    while let Some(joined) = lookups.join_next().await {
        let (number, log) = joined.map_err(|e| AdminError::KafkaRequest {
            what: format!("topic {topic}"),
            detail: format!("offset lookup task failed: {e}"),
        })??;
        offsets.insert(number, log);
    }
    Ok(offsets)
}

/// The offset of the first message of `partition` whose timestamp is at or
/// after `millis` since the epoch; `None` if every message is older.
pub async fn offset_at_time(
    client: &KafkaClient,
    partition: &TopicPartition,
    millis: i64,
) -> Result<Option<Offset>, AdminError> {
    let Some(time) = chrono::DateTime::from_timestamp_millis(millis) else {
        return Ok(None);
    };
    let client = partition_client(client, partition).await?;
    let offset = bounded(
        &partition.topic,
        Some(partition),
        client.get_offset(OffsetAt::Timestamp(time)),
    )
    .await?;
    // Kafka answers -1 when no message is that recent.
    Ok((offset >= 0).then_some(offset))
}

async fn partition_client(
    client: &KafkaClient,
    partition: &TopicPartition,
) -> Result<PartitionClient, AdminError> {
    bounded(
        &partition.topic,
        Some(partition),
        client.partition_client(
            partition.topic.to_string(),
            partition.partition as i32,
            UnknownTopicHandling::Error,
        ),
    )
    .await
}

/// Runs one Kafka request within [`KAFKA_REQUEST_TIMEOUT`], naming the topic
/// or partition in its error.
async fn bounded<T>(
    topic: &str,
    partition: Option<&TopicPartition>,
    request: impl std::future::Future<Output = Result<T, rskafka::client::error::Error>>,
) -> Result<T, AdminError> {
    let what = partition.map_or_else(|| format!("topic {topic}"), |p| format!("partition {p}"));
    match tokio::time::timeout(KAFKA_REQUEST_TIMEOUT, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(AdminError::KafkaRequest {
            what,
            detail: error.to_string(),
        }),
        Err(_) => Err(AdminError::KafkaRequest {
            what,
            detail: format!("no answer within {KAFKA_REQUEST_TIMEOUT:?}"),
        }),
    }
}
