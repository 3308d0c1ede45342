//! The dead-letter topic: where a message goes that keeps failing
//! ([`crate::KafkaConfig::dead_letters`]), produced with headers that name
//! its origin, then counted as processed.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rskafka::client::partition::{Compression, PartitionClient, UnknownTopicHandling};
use rskafka::client::Client;
use tenure_core::TopicPartition;

use crate::config::DeadLetters;
use crate::error::KafkaError;
use crate::ledger::LedgerCell;
use crate::message::Message;

/// The header naming the topic a dead letter came from.
pub const ORIGIN_TOPIC: &str = "tenure-dead-letter-topic";
/// The header naming its partition (ASCII decimal).
pub const ORIGIN_PARTITION: &str = "tenure-dead-letter-partition";
/// The header naming its offset (ASCII decimal).
pub const ORIGIN_OFFSET: &str = "tenure-dead-letter-offset";
/// The header counting the times it was handed out (ASCII decimal).
pub const ATTEMPTS: &str = "tenure-dead-letter-attempts";
/// The header with the application's reason.
pub const REASON: &str = "tenure-dead-letter-reason";

/// The first wait after a failed produce; it doubles up to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait between produces of one letter.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Produces a member's dead letters, on its own Kafka client (with its
/// security settings).
#[derive(Debug)]
pub(crate) struct DeadLetterProducer {
    client: Arc<Client>,
    settings: DeadLetters,
    /// The topic's partitions' clients, once looked up.
    partitions: tokio::sync::OnceCell<Vec<PartitionClient>>,
    /// Failed produces, for the member's error stream.
    problems: Mutex<VecDeque<KafkaError>>,
    /// Wakes the member's task to report them.
    wake: Arc<tokio::sync::Notify>,
}

impl DeadLetterProducer {
    pub(crate) fn new(
        client: Arc<Client>,
        settings: DeadLetters,
        wake: Arc<tokio::sync::Notify>,
    ) -> DeadLetterProducer {
        DeadLetterProducer {
            client,
            settings,
            partitions: tokio::sync::OnceCell::new(),
            problems: Mutex::new(VecDeque::new()),
            wake,
        }
    }

    /// After how many failed attempts a nacked message is dead-lettered.
    pub(crate) fn max_attempts(&self) -> u32 {
        self.settings.max_attempts.get()
    }

    /// The failed produces since the last call.
    pub(crate) fn problems(&self, out: &mut VecDeque<KafkaError>) {
        let mut problems = match self.problems.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        out.append(&mut problems);
    }

    fn report(&self, problem: KafkaError) {
        match self.problems.lock() {
            Ok(mut guard) => guard.push_back(problem),
            Err(poisoned) => poisoned.into_inner().push_back(problem),
        }
        self.wake.notify_one();
    }

    /// Produces `message` to the dead-letter topic, trying again with
    /// backoff while its claim holds, then acknowledges it. A letter of a
    /// claim that ended meanwhile is not produced: the partition's next
    /// owner hands the message out again.
    pub(crate) async fn send(
        self: Arc<Self>,
        ledger: Arc<LedgerCell>,
        message: Message,
        attempts: u32,
        reason: String,
    ) {
        let origin = message.topic_partition();
        let mut backoff = FIRST_BACKOFF;
        loop {
            if !ledger.holds(message.generation()) {
                ledger.abandon(message.offset(), message.generation());
                return;
            }
            match self.produce(&message, attempts, &reason).await {
                Ok(()) => {
                    message.ack();
                    return;
                }
                Err(source) => self.report(KafkaError::DeadLetter {
                    partition: origin.clone(),
                    offset: message.offset(),
                    topic: self.settings.topic.clone(),
                    source,
                }),
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    async fn produce(
        &self,
        message: &Message,
        attempts: u32,
        reason: &str,
    ) -> Result<(), crate::ClientError> {
        let partitions = self
            .partitions
            .get_or_try_init(|| self.look_up())
            .await
            .map_err(Arc::new)?;
        // The letters of one partition go to one partition (each is sent
        // on its own, so letters of different keys in any order).
        let Some(target) = partitions.get(message.partition() as usize % partitions.len().max(1))
        else {
            return Err(Arc::new(rskafka::client::error::Error::InvalidResponse(
                format!(
                    "dead-letter topic {:?} has no partitions",
                    self.settings.topic
                ),
            )));
        };
        target
            .produce(
                vec![letter(message, attempts, reason)],
                Compression::NoCompression,
            )
            .await
            .map(|_| ())
            .map_err(Arc::new)
    }

    /// A client for each partition of the dead-letter topic.
    async fn look_up(&self) -> Result<Vec<PartitionClient>, rskafka::client::error::Error> {
        let topics = self.client.list_topics().await?;
        let count = topics
            .iter()
            .find(|t| t.name == self.settings.topic)
            .map_or(0, |t| t.partitions.len());
        if count == 0 {
            return Err(rskafka::client::error::Error::InvalidResponse(format!(
                "dead-letter topic {:?} does not exist (tenure creates none)",
                self.settings.topic
            )));
        }
        let mut clients = Vec::with_capacity(count);
        for partition in 0..count {
            let client = self
                .client
                .partition_client(
                    self.settings.topic.clone(),
                    partition as i32,
                    UnknownTopicHandling::Error,
                )
                .await?;
            clients.push(client);
        }
        Ok(clients)
    }
}

/// The record a dead letter is: the message's key, value, headers and
/// timestamp, and headers naming where it came from, how often it was
/// handed out and why it was given up.
fn letter(message: &Message, attempts: u32, reason: &str) -> rskafka::record::Record {
    let origin: TopicPartition = message.topic_partition();
    let mut headers: Vec<(String, bytes::Bytes)> = message
        .headers()
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    let text = |value: String| bytes::Bytes::from(value.into_bytes());
    headers.push((ORIGIN_TOPIC.to_owned(), text(origin.topic.to_string())));
    headers.push((
        ORIGIN_PARTITION.to_owned(),
        text(origin.partition.to_string()),
    ));
    headers.push((ORIGIN_OFFSET.to_owned(), text(message.offset().to_string())));
    headers.push((ATTEMPTS.to_owned(), text(attempts.to_string())));
    headers.push((REASON.to_owned(), text(reason.to_owned())));
    let millis = message.timestamp().millis();
    rskafka::record::Record {
        key: message.key_bytes().cloned(),
        value: message.payload_bytes().cloned(),
        headers,
        timestamp: chrono::DateTime::from_timestamp_millis(millis).unwrap_or_default(),
    }
}
