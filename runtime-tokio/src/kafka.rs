//! The Kafka data plane: one fetcher per owned partition, messages handed
//! to the application with explicit acknowledgement, and the bookkeeping
//! that turns acknowledgements into committed offsets and drains.
//!
//! Fetching uses `rskafka`: Kafka 4.x accepts only the protocol versions it
//! speaks. Offsets are committed by the core to the coordination store, not
//! to Kafka.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rskafka::client::partition::{OffsetAt, PartitionClient, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder};
use tenure_core::assignment::PartitionCounts;
use tenure_core::{FencingToken, FetchFrom, InitialOffset, Offset, TopicPartition};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How to reach Kafka and how to fetch.
#[derive(Clone, Debug)]
pub struct KafkaConfig {
    /// Bootstrap brokers, `host:port`.
    pub bootstrap: Vec<String>,
    /// Most bytes one fetch asks for. Default: 1 MiB.
    pub fetch_max_bytes: i32,
    /// How long a fetch may wait on the broker for new messages. Default:
    /// 250 ms.
    pub fetch_max_wait: Duration,
    /// Messages buffered per partition before its fetcher waits for the
    /// application: a slow application holds memory at this bound. Default:
    /// 1,000.
    pub partition_buffer: usize,
    /// How often partition counts are read from metadata, so that added
    /// partitions get assigned. Default: 10 s.
    pub metadata_refresh: Duration,
    /// How long connecting to the brokers may take. Default: 10 s.
    pub connect_timeout: Duration,
}

impl KafkaConfig {
    /// Defaults for brokers at `bootstrap` (`host:port`, comma separated).
    pub fn new(bootstrap: &str) -> KafkaConfig {
        KafkaConfig {
            bootstrap: bootstrap
                .split(',')
                .map(|b| b.trim().to_owned())
                .filter(|b| !b.is_empty())
                .collect(),
            fetch_max_bytes: 1 << 20,
            fetch_max_wait: Duration::from_millis(250),
            partition_buffer: 1000,
            metadata_refresh: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// What went wrong talking to Kafka.
#[derive(Debug, Clone, thiserror::Error)]
pub enum KafkaError {
    /// No bootstrap broker was given.
    #[error("no Kafka bootstrap broker given")]
    NoBootstrap,
    /// The brokers did not answer.
    #[error("Kafka at {bootstrap} does not answer: {detail}")]
    Unreachable {
        /// The bootstrap brokers.
        bootstrap: String,
        /// What the client said.
        detail: String,
    },
    /// A subscribed topic does not exist.
    #[error("topic {topic:?} does not exist in Kafka at {bootstrap}")]
    UnknownTopic {
        /// The topic.
        topic: String,
        /// The bootstrap brokers.
        bootstrap: String,
    },
    /// A fetch or offset lookup failed; the fetcher retries.
    #[error("fetching {partition} failed: {detail}")]
    Fetch {
        /// The partition.
        partition: TopicPartition,
        /// What the client said.
        detail: String,
    },
    /// The position asked for is no longer (or not yet) in the log; the
    /// fetch went on from the position the initial-offset policy names.
    #[error("offset {offset} of {partition} is out of range; reset to {reset}")]
    OffsetReset {
        /// The partition.
        partition: TopicPartition,
        /// The offset that was out of range.
        offset: Offset,
        /// Where fetching went on.
        reset: Offset,
    },
}

/// Connects to the brokers, bounded by the connect timeout.
pub async fn connect(config: &KafkaConfig) -> Result<Arc<Client>, KafkaError> {
    if config.bootstrap.is_empty() {
        return Err(KafkaError::NoBootstrap);
    }
    let bootstrap = config.bootstrap.join(",");
    let unreachable = |detail: String| KafkaError::Unreachable {
        bootstrap: bootstrap.clone(),
        detail,
    };
    let building = ClientBuilder::new(config.bootstrap.clone())
        .client_id("tenure")
        .build();
    let client = tokio::time::timeout(config.connect_timeout, building)
        .await
        .map_err(|_| unreachable(format!("no answer within {:?}", config.connect_timeout)))?
        .map_err(|e| unreachable(e.to_string()))?;
    // The client connects lazily: ask for metadata to know the brokers are
    // really there.
    tokio::time::timeout(config.connect_timeout, client.list_topics())
        .await
        .map_err(|_| unreachable(format!("no metadata within {:?}", config.connect_timeout)))?
        .map_err(|e| unreachable(e.to_string()))?;
    Ok(Arc::new(client))
}

/// The partition counts of `topics`; a topic that does not exist is an
/// error.
pub async fn partition_counts(
    client: &Client,
    config: &KafkaConfig,
    topics: &BTreeSet<String>,
) -> Result<PartitionCounts, KafkaError> {
    let bootstrap = config.bootstrap.join(",");
    let listed = tokio::time::timeout(config.connect_timeout, client.list_topics())
        .await
        .map_err(|_| KafkaError::Unreachable {
            bootstrap: bootstrap.clone(),
            detail: "metadata request timed out".to_owned(),
        })?
        .map_err(|e| KafkaError::Unreachable {
            bootstrap: bootstrap.clone(),
            detail: e.to_string(),
        })?;
    let mut counts = PartitionCounts::new();
    for topic in topics {
        match listed.iter().find(|t| &t.name == topic) {
            Some(found) => {
                counts.insert(topic.clone(), found.partitions.len() as u32);
            }
            None => {
                return Err(KafkaError::UnknownTopic {
                    topic: topic.clone(),
                    bootstrap,
                })
            }
        }
    }
    Ok(counts)
}

/// One message, handed to the application. Acknowledge it with
/// [`Message::ack`] once processed; its offset is committed when every
/// message before it in its partition is acknowledged too.
#[derive(Debug)]
pub struct Message {
    /// The topic.
    pub topic: Arc<str>,
    /// The partition.
    pub partition: u32,
    /// The message's offset.
    pub offset: Offset,
    /// The key, if any.
    pub key: Option<Vec<u8>>,
    /// The value, if any.
    pub value: Option<Vec<u8>>,
    /// The headers.
    pub headers: BTreeMap<String, Vec<u8>>,
    /// The record's timestamp, in milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
    /// The fencing token of the claim this message was fetched under: every
    /// side effect of processing it may be fenced with it.
    pub token: FencingToken,
    acks: mpsc::UnboundedSender<Ack>,
}

impl Message {
    /// The message's partition, as the core names it.
    pub fn topic_partition(&self) -> TopicPartition {
        TopicPartition {
            topic: self.topic.clone(),
            partition: self.partition,
        }
    }

    /// Reports the message processed. Acknowledging after the partition
    /// moved to another member does nothing: nothing is committed for a
    /// partition this member no longer owns.
    pub fn ack(&self) {
        let _ = self.acks.send(Ack {
            partition: self.topic_partition(),
            token: self.token,
            offset: self.offset,
        });
    }
}

/// The messages of one owned partition; it ends when the partition is
/// revoked.
#[derive(Debug)]
pub struct PartitionStream {
    /// The partition.
    pub partition: TopicPartition,
    /// The claim's fencing token.
    pub token: FencingToken,
    messages: mpsc::Receiver<Message>,
    ledgers: Ledgers,
}

impl PartitionStream {
    /// The next message, or `None` once the partition is revoked.
    pub async fn next(&mut self) -> Option<Message> {
        loop {
            let message = self.messages.recv().await?;
            if self.ledgers.deliver(&message) {
                return Some(message);
            }
        }
    }
}

/// An acknowledgement on its way to the member's task.
#[derive(Debug)]
pub(crate) struct Ack {
    pub partition: TopicPartition,
    pub token: FencingToken,
    pub offset: Offset,
}

/// Which messages of a partition the application holds.
#[derive(Debug)]
struct Ledger {
    token: FencingToken,
    /// Handed out and not yet acknowledged.
    outstanding: BTreeSet<Offset>,
    /// The last offset handed out.
    last_delivered: Option<Offset>,
    /// The highest offset below which everything handed out is acknowledged
    /// (what was last reported processed).
    watermark: Option<Offset>,
    /// Told to stop: nothing more is handed out.
    stopping: bool,
}

/// The ledgers of every partition, shared by the member's task and the
/// application's receiving side.
#[derive(Clone, Debug, Default)]
pub(crate) struct Ledgers {
    inner: Arc<Mutex<BTreeMap<TopicPartition, Ledger>>>,
}

impl Ledgers {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<TopicPartition, Ledger>> {
        match self.inner.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Records a message handed to the application; `false` if its claim
    /// is over or stopping, in which case it must not be handed out.
    pub(crate) fn deliver(&self, message: &Message) -> bool {
        let mut ledgers = self.lock();
        match ledgers.get_mut(&message.topic_partition()) {
            Some(ledger) if ledger.token == message.token && !ledger.stopping => {
                ledger.outstanding.insert(message.offset);
                ledger.last_delivered = Some(message.offset);
                true
            }
            _ => false,
        }
    }

    /// Applies an acknowledgement. Returns the new processed watermark if
    /// it moved, and whether a stopping partition is now drained.
    fn ack(&self, ack: &Ack) -> (Option<Offset>, bool) {
        let mut ledgers = self.lock();
        let Some(ledger) = ledgers.get_mut(&ack.partition) else {
            return (None, false);
        };
        if ledger.token != ack.token || !ledger.outstanding.remove(&ack.offset) {
            return (None, false);
        }
        let watermark = match ledger.outstanding.first() {
            Some(first) => first.checked_sub(1),
            None => ledger.last_delivered,
        };
        let moved = match (watermark, ledger.watermark) {
            (Some(new), Some(old)) => new > old,
            (Some(_), None) => true,
            _ => false,
        };
        if moved {
            ledger.watermark = watermark;
        }
        let drained = ledger.stopping && ledger.outstanding.is_empty();
        (watermark.filter(|_| moved), drained)
    }

    fn open(&self, partition: &TopicPartition, token: FencingToken) {
        self.lock().insert(
            partition.clone(),
            Ledger {
                token,
                outstanding: BTreeSet::new(),
                last_delivered: None,
                watermark: None,
                stopping: false,
            },
        );
    }

    /// Marks a partition stopping; `true` if nothing is outstanding (it is
    /// drained at once).
    fn stop(&self, partition: &TopicPartition, token: FencingToken) -> bool {
        let mut ledgers = self.lock();
        match ledgers.get_mut(partition) {
            Some(ledger) if ledger.token == token => {
                ledger.stopping = true;
                ledger.outstanding.is_empty()
            }
            _ => true,
        }
    }
}

/// What the data plane tells the member's task.
#[derive(Debug)]
pub(crate) enum DataEvent {
    /// Everything up to `offset` is processed.
    Processed(TopicPartition, FencingToken, Offset),
    /// A stopping partition has nothing outstanding any more.
    Drained(TopicPartition, FencingToken),
    /// A problem worth reporting; the fetcher goes on.
    Problem(KafkaError),
    /// New partition counts from metadata.
    Counts(PartitionCounts),
}

/// How the application receives messages.
#[derive(Debug)]
pub(crate) enum Delivery {
    /// One bounded stream for every partition.
    Group(mpsc::Sender<Message>),
    /// A stream per partition, handed out as partitions are assigned.
    PerPartition(mpsc::UnboundedSender<PartitionStream>),
}

/// The fetchers and ledgers of one member.
pub(crate) struct DataPlane {
    client: Arc<Client>,
    config: KafkaConfig,
    initial: InitialOffset,
    pub(crate) ledgers: Ledgers,
    fetchers: BTreeMap<TopicPartition, JoinHandle<()>>,
    delivery: Delivery,
    acks_tx: mpsc::UnboundedSender<Ack>,
    acks: mpsc::UnboundedReceiver<Ack>,
    events_tx: mpsc::UnboundedSender<DataEvent>,
    events: mpsc::UnboundedReceiver<DataEvent>,
    metadata: Option<JoinHandle<()>>,
}

impl DataPlane {
    pub(crate) fn new(
        client: Arc<Client>,
        config: KafkaConfig,
        initial: InitialOffset,
        topics: BTreeSet<String>,
        delivery: Delivery,
    ) -> DataPlane {
        let (acks_tx, acks) = mpsc::unbounded_channel();
        let (events_tx, events) = mpsc::unbounded_channel();
        let metadata = {
            let client = client.clone();
            let config = config.clone();
            let events = events_tx.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(config.metadata_refresh);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    match partition_counts(&client, &config, &topics).await {
                        Ok(counts) => {
                            if events.send(DataEvent::Counts(counts)).is_err() {
                                return;
                            }
                        }
                        Err(problem) => {
                            if events.send(DataEvent::Problem(problem)).is_err() {
                                return;
                            }
                        }
                    }
                }
            })
        };
        DataPlane {
            client,
            config,
            initial,
            ledgers: Ledgers::default(),
            fetchers: BTreeMap::new(),
            delivery,
            acks_tx,
            acks,
            events_tx,
            events,
            metadata: Some(metadata),
        }
    }

    /// Starts fetching `partition` from `from` under `token`.
    pub(crate) fn start(
        &mut self,
        partition: TopicPartition,
        from: FetchFrom,
        token: FencingToken,
    ) {
        if let Some(old) = self.fetchers.remove(&partition) {
            old.abort();
        }
        self.ledgers.open(&partition, token);
        let (sender, receiver) = mpsc::channel(self.config.partition_buffer.max(1));
        match &self.delivery {
            Delivery::PerPartition(streams) => {
                let _ = streams.send(PartitionStream {
                    partition: partition.clone(),
                    token,
                    messages: receiver,
                    ledgers: self.ledgers.clone(),
                });
            }
            Delivery::Group(group) => {
                // Merge into the group stream; the bounded channels on both
                // sides hold a slow application's memory down.
                let group = group.clone();
                let mut receiver = receiver;
                let forwarder = tokio::spawn(async move {
                    while let Some(message) = receiver.recv().await {
                        if group.send(message).await.is_err() {
                            return;
                        }
                    }
                });
                // The forwarder ends with the fetcher's sender.
                drop(forwarder);
            }
        }
        let fetcher = Fetcher {
            client: self.client.clone(),
            config: self.config.clone(),
            initial: self.initial,
            partition: partition.clone(),
            token,
            acks: self.acks_tx.clone(),
            events: self.events_tx.clone(),
        };
        self.fetchers
            .insert(partition, tokio::spawn(fetcher.run(from, sender)));
    }

    /// Stops fetching `partition`; `true` if it is drained already.
    pub(crate) fn stop(&mut self, partition: &TopicPartition, token: FencingToken) -> bool {
        if let Some(fetcher) = self.fetchers.remove(partition) {
            fetcher.abort();
        }
        self.ledgers.stop(partition, token)
    }

    /// The next thing the data plane has to say.
    pub(crate) async fn next(&mut self) -> Option<DataEvent> {
        loop {
            tokio::select! {
                ack = self.acks.recv() => {
                    let ack = ack?;
                    let (watermark, drained) = self.ledgers.ack(&ack);
                    if let Some(offset) = watermark {
                        if drained {
                            let _ = self.events_tx.send(DataEvent::Drained(ack.partition.clone(), ack.token));
                        }
                        return Some(DataEvent::Processed(ack.partition, ack.token, offset));
                    }
                    if drained {
                        return Some(DataEvent::Drained(ack.partition, ack.token));
                    }
                }
                event = self.events.recv() => return event,
            }
        }
    }

    /// Stops every fetcher (the member is gone).
    pub(crate) fn shutdown(&mut self) {
        for (_, fetcher) in std::mem::take(&mut self.fetchers) {
            fetcher.abort();
        }
        if let Some(metadata) = self.metadata.take() {
            metadata.abort();
        }
    }
}

impl Drop for DataPlane {
    fn drop(&mut self) {
        self.shutdown();
    }
}

struct Fetcher {
    client: Arc<Client>,
    config: KafkaConfig,
    initial: InitialOffset,
    partition: TopicPartition,
    token: FencingToken,
    acks: mpsc::UnboundedSender<Ack>,
    events: mpsc::UnboundedSender<DataEvent>,
}

impl Fetcher {
    fn problem(&self, detail: impl ToString) {
        let _ = self.events.send(DataEvent::Problem(KafkaError::Fetch {
            partition: self.partition.clone(),
            detail: detail.to_string(),
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
                Ok(client) => return client,
                Err(e) => {
                    self.problem(e);
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    /// Where the initial-offset policy says to start.
    async fn policy_offset(&self, client: &PartitionClient) -> Offset {
        let at = match self.initial {
            InitialOffset::Oldest => OffsetAt::Earliest,
            InitialOffset::Newest => OffsetAt::Latest,
        };
        self.offset_at(client, at).await
    }

    async fn run(self, from: FetchFrom, sender: mpsc::Sender<Message>) {
        let client = self.partition_client().await;
        let mut next = match from {
            FetchFrom::Offset(offset) => offset,
            FetchFrom::Oldest => self.offset_at(&client, OffsetAt::Earliest).await,
            FetchFrom::Newest => self.offset_at(&client, OffsetAt::Latest).await,
        };
        let max_wait = self.config.fetch_max_wait.as_millis().min(i32::MAX as u128) as i32;
        let mut pause = Duration::from_millis(50);
        loop {
            match client
                .fetch_records(next, 1..self.config.fetch_max_bytes.max(2), max_wait)
                .await
            {
                Ok((records, _high_watermark)) => {
                    pause = Duration::from_millis(50);
                    for record in records {
                        if record.offset < next {
                            // A compressed batch can start before the offset
                            // asked for.
                            continue;
                        }
                        next = record.offset + 1;
                        let message = Message {
                            topic: self.partition.topic.clone(),
                            partition: self.partition.partition,
                            offset: record.offset,
                            key: record.record.key,
                            value: record.record.value,
                            headers: record.record.headers,
                            timestamp_ms: record.record.timestamp.timestamp_millis(),
                            token: self.token,
                            acks: self.acks.clone(),
                        };
                        if sender.send(message).await.is_err() {
                            return;
                        }
                    }
                }
                Err(rskafka::client::error::Error::ServerError {
                    protocol_error: rskafka::client::error::ProtocolError::OffsetOutOfRange,
                    ..
                }) => {
                    let reset = self.policy_offset(&client).await;
                    let _ = self
                        .events
                        .send(DataEvent::Problem(KafkaError::OffsetReset {
                            partition: self.partition.clone(),
                            offset: next,
                            reset,
                        }));
                    next = reset;
                }
                Err(e) => {
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
