//! What Kafka answers for a group's partitions: the bounds of their logs
//! and the offset of a time. Each request is bounded in time, so an
//! unreachable leader fails the operation instead of hanging it.

use std::collections::BTreeMap;
use std::time::Duration;

use rskafka::client::partition::PartitionClient;
/// The Kafka client [`describe`](crate::describe) and
/// [`plan_reset`](crate::plan_reset) take ([`tenure_kafka::connect`] makes
/// one).
pub use rskafka::client::Client as KafkaClient;
use tenure_core::{Offset, TopicPartition};
use tenure_kafka::lookup::{log_bounds, offset_for_millis, partition_client, LOOKUP_TIMEOUT};

use crate::error::AdminError;

/// The bounds of one partition's log: the data plane's type, one for the
/// member's `watermarks` and the operator's tooling alike.
pub use tenure_kafka::LogOffsets;

/// The log bounds of every partition of `topic`.
pub async fn log_offsets(
    client: &KafkaClient,
    topic: &str,
) -> Result<BTreeMap<u32, LogOffsets>, AdminError> {
    let listed = listed_topics(client, LOOKUP_TIMEOUT, topic).await?;
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
            Ok::<_, AdminError>((number, log_bounds(&client, &partition).await?))
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
    Ok(offset_for_millis(client, partition, millis).await?)
}

/// The topics Kafka knows, asked within `limit` (`about` names what the
/// caller looks for, in the error).
async fn listed_topics(
    client: &KafkaClient,
    limit: Duration,
    about: &str,
) -> Result<Vec<rskafka::topic::Topic>, AdminError> {
    match tokio::time::timeout(limit, client.list_topics()).await {
        Ok(Ok(listed)) => Ok(listed),
        Ok(Err(error)) => Err(AdminError::KafkaRequest {
            what: format!("topic {about}"),
            detail: error.to_string(),
        }),
        Err(_) => Err(AdminError::KafkaRequest {
            what: format!("topic {about}"),
            detail: format!("no answer within {limit:?}"),
        }),
    }
}

/// Reads the log bounds of many partitions again and again (a monitor's
/// refresh), keeping one partition client per partition so that a refresh
/// costs one metadata request and two offset requests per partition, not
/// a connection set-up each.
pub(crate) struct LogReader {
    /// `None`: no Kafka, nothing is read.
    client: Option<std::sync::Arc<KafkaClient>>,
    /// How long one request may take: a refresh must not outlast its
    /// interval by much, or an outage shows late.
    limit: Duration,
    partitions: std::collections::HashMap<TopicPartition, std::sync::Arc<PartitionClient>>,
}

/// What one [`LogReader::read`] found.
#[derive(Default)]
pub(crate) struct LogRead {
    /// The bounds of every partition that answered.
    pub(crate) logs: BTreeMap<TopicPartition, LogOffsets>,
    /// Why a whole topic could not be read (unknown to Kafka, or Kafka
    /// unreachable).
    pub(crate) topic_errors: BTreeMap<String, String>,
    /// Why one partition could not be read.
    pub(crate) partition_errors: BTreeMap<TopicPartition, String>,
}

/// A partition's client and the bounds of its log, as one lookup found them.
type Looked = (std::sync::Arc<PartitionClient>, LogOffsets);

/// How many partitions' offsets are asked for at once.
const CONCURRENT_LOOKUPS: usize = 32;

impl LogReader {
    /// A reader through `client` whose requests each wait at most `limit`.
    pub(crate) fn new(client: Option<std::sync::Arc<KafkaClient>>, limit: Duration) -> LogReader {
        LogReader {
            client,
            limit,
            partitions: std::collections::HashMap::new(),
        }
    }

    /// The bounds of every partition of `topics`.
    pub(crate) async fn read(&mut self, topics: &std::collections::BTreeSet<String>) -> LogRead {
        use futures_util::stream::{self, StreamExt};

        let mut read = LogRead::default();
        let Some(client) = &self.client else {
            return read;
        };
        if topics.is_empty() {
            return read;
        }
        let limit = self.limit;
        let listed = match listed_topics(client, limit, "every topic").await {
            Ok(listed) => listed,
            Err(error) => {
                for topic in topics {
                    read.topic_errors.insert(topic.clone(), error.to_string());
                }
                return read;
            }
        };
        let mut wanted = Vec::new();
        for topic in topics {
            let Some(found) = listed.iter().find(|t| &t.name == topic) else {
                read.topic_errors.insert(
                    topic.clone(),
                    AdminError::UnknownTopic {
                        topic: topic.clone(),
                    }
                    .to_string(),
                );
                continue;
            };
            for &number in &found.partitions {
                if let Ok(number) = u32::try_from(number) {
                    wanted.push(TopicPartition::new(topic.as_str(), number));
                }
            }
        }
        let cached = &self.partitions;
        let results: Vec<(TopicPartition, Result<Looked, AdminError>)> = stream::iter(wanted)
            .map(|partition| async move {
                let result = async {
                    let partition_client = match cached.get(&partition) {
                        Some(existing) => existing.clone(),
                        None => std::sync::Arc::new(partition_client(client, &partition).await?),
                    };
                    let log = log_bounds(&partition_client, &partition).await?;
                    Ok((partition_client, log))
                }
                .await;
                (partition, result)
            })
            .buffer_unordered(CONCURRENT_LOOKUPS)
            .collect()
            .await;
        for (partition, result) in results {
            match result {
                Ok((partition_client, log)) => {
                    self.partitions.insert(partition.clone(), partition_client);
                    read.logs.insert(partition, log);
                }
                Err(error) => {
                    // Its leader may have moved: look it up afresh next time.
                    self.partitions.remove(&partition);
                    read.partition_errors.insert(partition, error.to_string());
                }
            }
        }
        read
    }
}
