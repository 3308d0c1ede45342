//! One partition's fetch loop.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rskafka::client::partition::{OffsetAt, PartitionClient, UnknownTopicHandling};
use rskafka::client::Client;
use tenure_core::{FencingToken, FetchFrom, InitialOffset, Offset, TopicPartition};
use tokio::sync::mpsc;

use crate::batch::{Fetched, Passed};
use crate::budget::BufferBudget;
use crate::config::{IsolationLevel, KafkaConfig};
use crate::delivery::Outlet;
use crate::error::KafkaError;
use crate::event::DataEvent;
use crate::ledger::LedgerCell;
use crate::message::{Batch, Header, Record, Timestamp};
use crate::telemetry::PartitionMetrics;
use tenure_core::credentials::error_chain;

/// The codec named by a fetch error that says the client cannot decompress
/// a batch (rskafka: "Unimplemented compression: Lz4", somewhere in the
/// error's chain), if it is one.
pub(crate) fn unreadable_codec(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    const MARK: &str = "Unimplemented compression: ";
    let chain = error_chain(error);
    let at = chain.find(MARK)? + MARK.len();
    let codec: String = chain[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    Some(codec.to_ascii_lowercase())
}

pub(crate) struct Fetcher {
    pub(crate) client: Arc<Client>,
    pub(crate) config: KafkaConfig,
    /// The member's budget for buffered messages, shared by every fetcher.
    pub(crate) budget: BufferBudget,
    pub(crate) initial: InitialOffset,
    pub(crate) partition: TopicPartition,
    pub(crate) token: FencingToken,
    pub(crate) ledger: Arc<LedgerCell>,
    pub(crate) generation: u64,
    pub(crate) events: mpsc::UnboundedSender<DataEvent>,
    pub(crate) metrics: Arc<PartitionMetrics>,
}

impl Fetcher {
    fn problem(&self, error: rskafka::client::error::Error) {
        let _ = self.events.send(DataEvent::Problem(KafkaError::Fetch {
            partition: self.partition.clone(),
            source: Arc::new(error),
        }));
    }

    async fn partition_client(&self) -> PartitionClient {
        let mut pause = Duration::from_millis(50);
        loop {
            match self
                .client
                .partition_client(
                    self.partition.topic.to_string(),
                    self.partition.partition as i32,
                    UnknownTopicHandling::Retry,
                )
                .await
            {
                Ok(client) => {
                    return client.with_isolation_level(match self.config.isolation_level {
                        IsolationLevel::ReadUncommitted => {
                            rskafka::client::partition::IsolationLevel::ReadUncommitted
                        }
                        _ => rskafka::client::partition::IsolationLevel::ReadCommitted,
                    })
                }
                Err(e) => {
                    self.problem(e);
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    /// Where the initial-offset policy says to start (`None`: it says
    /// nowhere).
    async fn policy_offset(&self, client: &PartitionClient) -> Option<Offset> {
        let at = match self.initial {
            InitialOffset::Oldest => OffsetAt::Earliest,
            InitialOffset::Newest => OffsetAt::Latest,
            _ => return None,
        };
        Some(self.offset_at(client, at).await)
    }

    fn report(&self, problem: KafkaError) {
        let _ = self.events.send(DataEvent::Problem(problem));
    }

    pub(crate) async fn run(self, from: FetchFrom, sender: Outlet) {
        let client = self.partition_client().await;
        let mut next = match from {
            FetchFrom::Offset(offset) => offset,
            FetchFrom::Oldest => self.offset_at(&client, OffsetAt::Earliest).await,
            FetchFrom::Newest => self.offset_at(&client, OffsetAt::Latest).await,
            // Nowhere to start: a seek starts a new fetch.
            _ => {
                self.report(KafkaError::NoOffset {
                    partition: self.partition.clone(),
                });
                return;
            }
        };
        self.ledger.started_at(next, self.generation);
        let max_wait = self.config.fetch_max_wait.as_millis().min(i32::MAX as u128) as i32;
        let mut pause = Duration::from_millis(50);
        let mut reported_end = None;
        // Where the application's position is, until it has been handed a
        // message of this claim.
        let mut start = next;
        let fetch_max_bytes = usize::try_from(self.config.fetch_max_bytes.max(2)).unwrap_or(2);
        let _sharing = self.budget.join();
        loop {
            // The fetch's size is reserved before it is sent, so that what
            // every partition's fetches bring stays within the budget.
            let ask = self.budget.ask(fetch_max_bytes);
            let mut held = self.budget.reserve(ask).await;
            let sent = Instant::now();
            let max_bytes = i32::try_from(ask).unwrap_or(i32::MAX).max(2);
            let result = client.fetch(next, 1..max_bytes, max_wait).await;
            self.metrics.fetched(sent.elapsed());
            match result {
                Ok(fetched) => {
                    pause = Duration::from_millis(50);
                    // Lag needs the log end; an idle partition answers every
                    // fetch wait, so only a moved watermark is worth a message.
                    let high_watermark = fetched.high_watermark;
                    if reported_end != Some(high_watermark) {
                        reported_end = Some(high_watermark);
                        let _ = self.events.send(DataEvent::HighWatermark(
                            self.partition.clone(),
                            self.token,
                            high_watermark,
                        ));
                    }
                    self.metrics
                        .lag(high_watermark, self.ledger.position().unwrap_or(start));
                    let mut records = Vec::with_capacity(fetched.records.len());
                    let mut bytes = 0usize;
                    for record in fetched.records {
                        if record.offset < next {
                            // A compressed batch can start before the offset
                            // asked for.
                            continue;
                        }
                        next = record.offset + 1;
                        bytes += record.record.approximate_size();
                        let millis = record.record.timestamp.timestamp_millis();
                        let timestamp = match record.timestamp_type {
                            rskafka::record::TimestampType::LogAppendTime => {
                                Timestamp::LogAppendTime(millis)
                            }
                            _ => Timestamp::CreateTime(millis),
                        };
                        records.push(Record {
                            offset: record.offset,
                            key: record.record.key,
                            value: record.record.value,
                            // The same layout: collected in place, no
                            // allocation.
                            headers: record
                                .record
                                .headers
                                .into_iter()
                                .map(|(key, value)| Header { key, value })
                                .collect(),
                            timestamp,
                        });
                    }
                    // A transaction's marker, or an aborted transaction,
                    // after the last record: the fetch moves past it, and so
                    // does the committed offset once the records are done.
                    let passed = (fetched.next_offset > next).then(|| {
                        next = fetched.next_offset;
                        Passed {
                            ledger: self.ledger.clone(),
                            token: self.token,
                            generation: self.generation,
                            last: next - 1,
                        }
                    });
                    if let Some(last) = records.last() {
                        // Waiting for the application from now on (the
                        // stall check reads it).
                        self.ledger.fetched(last.offset, self.generation);
                    }
                    // What the batch keeps of the budget while it is
                    // buffered: what its messages take, for which an
                    // answer larger than asked for waits.
                    self.budget.fit(&mut held, bytes).await;
                    if !records.is_empty() || passed.is_some() {
                        let tally = Some(self.metrics.buffer(bytes as u64, high_watermark));
                        // One reference per batch for its messages to count:
                        // counted by this task while it builds the batch and
                        // by the application's while it takes it, never by
                        // both at once.
                        let batch = Arc::new(Batch {
                            topic: self.partition.topic.clone(),
                            partition: self.partition.partition,
                            token: self.token,
                            generation: self.generation,
                            ledger: self.ledger.clone(),
                            records,
                        });
                        let fetched = Fetched {
                            batch,
                            passed,
                            tally,
                            held: Some(held),
                        };
                        if !sender.send(fetched).await {
                            return;
                        }
                    }
                }
                Err(rskafka::client::error::Error::ServerError {
                    protocol_error: rskafka::client::error::ProtocolError::OffsetOutOfRange,
                    ..
                }) => {
                    drop(held);
                    let Some(reset) = self.policy_offset(&client).await else {
                        // No policy to guess with: a seek starts a new fetch.
                        self.report(KafkaError::OutOfRange {
                            partition: self.partition.clone(),
                            offset: next,
                        });
                        return;
                    };
                    self.report(KafkaError::OffsetReset {
                        partition: self.partition.clone(),
                        offset: next,
                        reset,
                    });
                    next = reset;
                    start = reset;
                }
                Err(e) => {
                    drop(held);
                    if let Some(codec) = unreadable_codec(&e) {
                        // Retrying cannot help: say so once and fetch no more.
                        let _ = self.events.send(DataEvent::Problem(KafkaError::Codec {
                            partition: self.partition.clone(),
                            codec,
                        }));
                        return;
                    }
                    self.problem(e);
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    async fn offset_at(&self, client: &PartitionClient, at: OffsetAt) -> Offset {
        let mut pause = Duration::from_millis(50);
        loop {
            match client.get_offset(at).await {
                Ok(offset) => return offset,
                Err(e) => {
                    self.problem(e);
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Chain(&'static str, Option<Box<Chain>>);

    impl std::fmt::Display for Chain {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Chain {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn a_codec_the_build_lacks_is_named_wherever_the_chain_says_it() {
        let deep = Chain(
            "cannot read the response",
            Some(Box::new(Chain(
                "Malformed data: Unimplemented compression: Zstd",
                None,
            ))),
        );
        assert_eq!(unreadable_codec(&deep).as_deref(), Some("zstd"));
        let other = Chain("connection refused", None);
        assert_eq!(unreadable_codec(&other), None);
    }
}
