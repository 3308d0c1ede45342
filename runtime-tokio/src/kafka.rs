//! The Kafka data plane: one fetcher per owned partition, messages handed
//! to the application with explicit acknowledgement, and the bookkeeping
//! that turns acknowledgements into committed offsets and drains.
//!
//! Fetching uses `rskafka`: Kafka 4.x accepts only the protocol versions it
//! speaks. Offsets are committed by the core to the coordination store, not
//! to Kafka.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rskafka::client::partition::{OffsetAt, PartitionClient, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder};
use tenure_core::assignment::PartitionCounts;
use tenure_core::{FencingToken, FetchFrom, InitialOffset, Offset, Subscription, TopicPartition};

use crate::security::error_chain;
pub use crate::security::{KafkaSecurity, SaslMechanism};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

mod delivery;
use delivery::Outlet;
pub(crate) use delivery::{Batches, GroupQueues, Interleaved};

/// How to reach Kafka and how to fetch.
///
/// Fetches read committed (as the Java consumer's
/// `isolation.level=read_committed`): records of aborted transactions are
/// not handed out, nothing past a partition's last stable offset is, and
/// the committed offset moves past transaction markers.
#[derive(Clone, Debug)]
pub struct KafkaConfig {
    /// Bootstrap brokers, `host:port`.
    pub bootstrap: Vec<String>,
    /// Most bytes one fetch asks for. Default: 1 MiB.
    pub fetch_max_bytes: i32,
    /// How long a fetch may wait on the broker for new messages. Default:
    /// 250 ms.
    pub fetch_max_wait: Duration,
    /// Fetched batches (each at most `fetch_max_bytes`) buffered per owned
    /// partition before its fetcher waits for the application: a slow
    /// application holds memory at this bound, about
    /// `(buffered_batches + 1) × fetch_max_bytes` per partition (one more
    /// batch is in the fetcher's hands). Each partition has its own buffer,
    /// so that one partition's backlog never sits in front of another's
    /// messages. 0 counts as 1. Default: 2.
    pub buffered_batches: usize,
    /// On the member's one message stream ([`crate::GroupMember::messages`]):
    /// at most this many messages of one partition are handed out in a row
    /// while another partition has messages waiting. The partitions with
    /// messages take turns, so a backlogged partition delays each of the
    /// others by at most one turn. Per-partition streams are not affected.
    /// 0 counts as 1. Default: 64.
    pub max_messages_in_a_row: usize,
    /// How often partition counts are read from metadata, so that added
    /// partitions get assigned. Default: 10 s.
    pub metadata_refresh: Duration,
    /// How long connecting to the brokers may take. Default: 10 s.
    pub connect_timeout: Duration,
    /// The client id the brokers see (in their logs and quotas). Default:
    /// `tenure`.
    pub client_id: String,
    /// SASL and TLS, for brokers that require them. Default: none.
    pub security: KafkaSecurity,
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
            buffered_batches: 2,
            max_messages_in_a_row: 64,
            metadata_refresh: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            client_id: "tenure".to_owned(),
            security: KafkaSecurity::new(),
        }
    }
}

/// What went wrong talking to Kafka.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum KafkaError {
    /// No bootstrap broker was given.
    #[error("no Kafka bootstrap broker given")]
    NoBootstrap,
    /// The security settings cannot be used (a CA or key file that cannot
    /// be read, say).
    #[error("Kafka security settings: {0}")]
    Config(String),
    /// The brokers refused this member's SASL credentials, or their TLS
    /// certificate is not trusted.
    #[error("Kafka at {bootstrap}: {detail}")]
    Refused {
        /// The bootstrap brokers.
        bootstrap: String,
        /// What was refused, and what to check.
        detail: String,
    },
    /// The brokers did not answer.
    #[error("Kafka at {bootstrap} does not answer: {detail}")]
    Unreachable {
        /// The bootstrap brokers.
        bootstrap: String,
        /// What the client said.
        detail: String,
    },
    /// A subscribed topic does not exist (yet): it is waited for, and
    /// assigned once it appears. Reported when the member first finds it
    /// missing, and again each time it goes missing after it existed.
    #[error("topic {topic:?} does not exist in Kafka at {bootstrap}; waiting for it")]
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
    /// The partition holds record batches compressed with a codec this
    /// build cannot read. Fetching it stops (the claim stays, its offset
    /// does not move) until the member runs with the codec built in (the
    /// Cargo features `compression-lz4` and `compression-zstd`, on by
    /// default).
    #[error("{partition} holds records compressed with {codec}, which this build cannot read; build tenure with the Cargo feature `compression-{codec}`")]
    Codec {
        /// The partition.
        partition: TopicPartition,
        /// The codec, as the client names it.
        codec: String,
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

impl KafkaError {
    /// Whether the problem may clear by itself while the member goes on (a
    /// broker that does not answer, a failed fetch, which is retried, a
    /// topic not created yet, which is waited for); `false` for what needs
    /// someone to act (no broker given) or is done with (an offset reset).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            KafkaError::Unreachable { .. }
                | KafkaError::Fetch { .. }
                | KafkaError::UnknownTopic { .. }
        )
    }
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
    // Failures of the connection (a refused password, an untrusted
    // certificate) are retried by the client until its deadline, and then
    // reported with their cause, rather than retried for ever. The client
    // counts only its pauses against that deadline, not the attempts (a
    // failed TLS and SCRAM exchange takes a while on a loaded machine): half
    // the connect timeout leaves the other half for them.
    let backoff = rskafka::BackoffConfig {
        deadline: Some(config.connect_timeout / 2),
        ..rskafka::BackoffConfig::default()
    };
    let building = config
        .security
        .apply(ClientBuilder::new(config.bootstrap.clone()))
        .client_id(config.client_id.as_str())
        .backoff_config(backoff)
        .build();
    let failed = |error: String| {
        config
            .security
            .explain(&bootstrap, &error)
            .unwrap_or_else(|| unreachable(error))
    };
    // The retries end at the deadline with their cause; this bound, a
    // little later, only catches an attempt that hangs.
    let bound = config.connect_timeout + Duration::from_secs(3);
    let client = tokio::time::timeout(bound, building)
        .await
        .map_err(|_| unreachable(format!("no answer within {bound:?}")))?
        .map_err(|e| failed(error_chain(&e)))?;
    // The client connects lazily: ask for metadata to know the brokers are
    // really there.
    tokio::time::timeout(config.connect_timeout, client.list_topics())
        .await
        .map_err(|_| unreachable(format!("no metadata within {:?}", config.connect_timeout)))?
        .map_err(|e| failed(error_chain(&e)))?;
    Ok(Arc::new(client))
}

/// What the cluster's topics give a subscription.
#[derive(Clone, Debug, Default)]
pub(crate) struct Subscribed {
    /// The partition counts of the topics it takes.
    pub(crate) counts: PartitionCounts,
    /// The topics it names that do not exist (yet).
    pub(crate) missing: BTreeSet<String>,
}

/// Lists the cluster's topics and keeps those `subscription` takes, with
/// their partition counts: all of them at once, so that one topic deleted
/// or not created yet does not stop the others.
pub(crate) async fn subscribed_topics(
    client: &Client,
    config: &KafkaConfig,
    subscription: &Subscription,
) -> Result<Subscribed, KafkaError> {
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
    let mut subscribed = Subscribed::default();
    for topic in &listed {
        // A topic being created can be listed before its partitions are.
        if subscription.includes(&topic.name) && !topic.partitions.is_empty() {
            let count = u32::try_from(topic.partitions.len()).unwrap_or(u32::MAX);
            subscribed.counts.insert(topic.name.clone(), count);
        }
    }
    if let Some(named) = subscription.named_topics() {
        subscribed.missing = named
            .iter()
            .filter(|topic| !subscribed.counts.contains_key(*topic))
            .cloned()
            .collect();
    }
    Ok(subscribed)
}

/// Follows the cluster's topics every `config.metadata_refresh`, from what
/// the join found (`known`): sends the subscription's partition counts after
/// each listing, and reports each named topic as it goes missing.
///
/// A topic is taken as gone only once two listings in a row leave it out,
/// so that one answer from a broker whose metadata lags does not make the
/// member let go of a topic that is still there.
async fn follow_topics(
    client: Arc<Client>,
    config: KafkaConfig,
    subscription: Subscription,
    known: Subscribed,
    events: mpsc::UnboundedSender<DataEvent>,
) {
    let unknown = |topic: &String| {
        DataEvent::Problem(KafkaError::UnknownTopic {
            topic: topic.clone(),
            bootstrap: config.bootstrap.join(","),
        })
    };
    for topic in &known.missing {
        if events.send(unknown(topic)).is_err() {
            return;
        }
    }
    let Subscribed {
        counts: mut last,
        mut missing,
    } = known;
    let mut left_out_once = BTreeSet::new();
    let mut tick = tokio::time::interval(config.metadata_refresh);
    tick.tick().await;
    loop {
        tick.tick().await;
        let sent = match subscribed_topics(&client, &config, &subscription).await {
            Ok(mut subscribed) => {
                // Left out once: kept for now. Left out twice: gone.
                let mut kept = BTreeSet::new();
                for (topic, &count) in &last {
                    if !subscribed.counts.contains_key(topic) && !left_out_once.contains(topic) {
                        kept.insert(topic.clone());
                    }
                    if kept.contains(topic) {
                        subscribed.counts.insert(topic.clone(), count);
                    }
                }
                left_out_once = kept;
                let newly_missing: Vec<&String> = subscribed.missing.difference(&missing).collect();
                let mut sent = newly_missing
                    .into_iter()
                    .all(|topic| events.send(unknown(topic)).is_ok());
                missing = subscribed.missing;
                last = subscribed.counts.clone();
                sent &= events.send(DataEvent::Counts(subscribed.counts)).is_ok();
                sent
            }
            Err(problem) => events.send(DataEvent::Problem(problem)).is_ok(),
        };
        if !sent {
            return;
        }
    }
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
    ledger: Arc<BatchLedger>,
    /// The fetch of its claim it came from: a pause ends a fetch, and what
    /// that fetch left buffered is fetched again on resume.
    generation: u64,
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
        self.ledger.ack(self.offset);
    }
}

/// The messages of one owned partition, a [`futures_core::Stream`] (as
/// [`crate::Messages`] are, for one partition); it ends when the partition
/// is revoked.
#[derive(Debug)]
pub struct PartitionStream {
    /// The partition.
    pub partition: TopicPartition,
    /// The claim's fencing token.
    pub token: FencingToken,
    messages: crate::streams::Messages,
}

impl PartitionStream {
    /// The next message, or `None` once the partition is revoked.
    pub async fn next(&mut self) -> Option<Message> {
        self.messages.next().await
    }
}

impl futures_core::Stream for PartitionStream {
    type Item = Message;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Message>> {
        std::pin::Pin::new(&mut self.messages).poll_next(cx)
    }
}

/// Until when the member may hand out messages
/// ([`tenure_core::Member::consume_deadline`]), as its task last worked it
/// out; `None`: not now. The task sends it after every step (a change or
/// not), so a receiver waiting on it also wakes when a partition stops.
pub(crate) type Lease = watch::Receiver<Option<Instant>>;

/// What one fetch of a partition brought: its messages, and how far the
/// fetch went past the last of them.
#[derive(Debug)]
pub(crate) struct Fetched {
    messages: Vec<Message>,
    /// Offsets past the last message that hold nothing to hand out
    /// (transaction markers, records of aborted transactions): once the
    /// messages before them are handed out, they count as handed out, so
    /// that the committed offset can reach the log's end.
    passed: Option<Passed>,
}

/// Offsets a fetch went past without a message, up to `last`.
#[derive(Debug)]
struct Passed {
    ledger: Arc<LedgerCell>,
    token: FencingToken,
    generation: u64,
    last: Offset,
}

/// Which messages of a partition the application holds.
#[derive(Debug)]
struct Ledger {
    /// Handed out, in the order handed out (offsets grow), each with
    /// whether it is acknowledged; acknowledged ones leave from the front.
    outstanding: VecDeque<(Offset, bool)>,
    /// The last offset handed out.
    last_delivered: Option<Offset>,
    /// The highest offset below which everything handed out is acknowledged.
    watermark: Option<Offset>,
    /// The watermark last reported to the member.
    reported: Option<Offset>,
    /// Told to stop: nothing more is handed out.
    stopping: bool,
    /// Drained and not yet reported.
    drained: bool,
    /// The current fetch of the claim; messages of an earlier one are not
    /// handed out.
    generation: u64,
    /// Paused by the application: nothing is handed out until resumed.
    paused: bool,
}

/// One fetched batch's handle on its claim's ledger (see `Fetcher::run`).
#[derive(Debug)]
pub(crate) struct BatchLedger(Arc<LedgerCell>);

impl std::ops::Deref for BatchLedger {
    type Target = LedgerCell;

    fn deref(&self) -> &LedgerCell {
        &self.0
    }
}

/// One claim's ledger, shared by its messages (no lookup on the hot path).
#[derive(Debug)]
pub(crate) struct LedgerCell {
    token: FencingToken,
    ledger: Mutex<Ledger>,
    /// Wake the member's task: `moved` when the watermark moved first since
    /// the task last read it, `drained` when a drain ended.
    wake: Wake,
}

/// How the ledgers wake the member's task. Watermarks are read at most
/// every [`WATERMARK_READ_INTERVAL`]: under a fast application, waking the
/// task for every acknowledgement made it run as often as the application
/// did. A drain ends a handoff, so it wakes the task at once.
#[derive(Clone, Debug, Default)]
struct Wake {
    moved: Arc<tokio::sync::Notify>,
    drained: Arc<tokio::sync::Notify>,
}

/// How often, at most, the member's task reads the watermarks the
/// application's acknowledgements moved (a commit, a seek and a stop read
/// them at once).
const WATERMARK_READ_INTERVAL: Duration = Duration::from_millis(5);

impl LedgerCell {
    fn lock(&self) -> MutexGuard<'_, Ledger> {
        match self.ledger.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Records a message handed to the application; `false` if it may not
    /// be handed out: it is not of this cell's claim or current fetch, or
    /// the claim is stopping or paused.
    fn deliver(&self, offset: Offset, token: FencingToken, generation: u64) -> bool {
        let mut ledger = self.lock();
        if token != self.token
            || ledger.stopping
            || ledger.paused
            || ledger.generation != generation
        {
            return false;
        }
        ledger.outstanding.push_back((offset, false));
        ledger.last_delivered = Some(offset);
        true
    }

    fn ack(&self, offset: Offset) {
        let mut ledger = self.lock();
        // Acknowledgements mostly come in order: the front is found first.
        let Ok(at) = ledger
            .outstanding
            .binary_search_by_key(&offset, |(o, _)| *o)
        else {
            return;
        };
        ledger.outstanding[at].1 = true;
        while ledger.outstanding.front().is_some_and(|(_, acked)| *acked) {
            ledger.outstanding.pop_front();
        }
        self.advance(ledger);
    }

    /// Counts the offsets up to `last` that a fetch of the claim `token`
    /// went past without a message as handed out (and, once everything
    /// handed out before them is acknowledged, as processed).
    fn pass(&self, last: Offset, token: FencingToken, generation: u64) {
        let mut ledger = self.lock();
        if token != self.token
            || ledger.stopping
            || ledger.generation != generation
            || ledger.last_delivered >= Some(last)
        {
            return;
        }
        ledger.last_delivered = Some(last);
        self.advance(ledger);
    }

    /// Moves the watermark up to what is acknowledged, and wakes the
    /// member's task if it moved or a drain ended.
    fn advance(&self, mut ledger: MutexGuard<'_, Ledger>) {
        let watermark = match ledger.outstanding.front() {
            Some((first, _)) => first.checked_sub(1),
            None => ledger.last_delivered,
        };
        // Only the first move since the task read it: the task reads the
        // latest watermark, not every one.
        let mut moved = false;
        if watermark > ledger.watermark {
            moved = ledger.watermark == ledger.reported;
            ledger.watermark = watermark;
        }
        let mut drained = false;
        if ledger.stopping && ledger.outstanding.is_empty() && !ledger.drained {
            ledger.drained = true;
            drained = true;
        }
        drop(ledger);
        if drained {
            self.wake.drained.notify_one();
        } else if moved {
            self.wake.moved.notify_one();
        }
    }
}

/// The ledgers of the current claims, for the member's task.
#[derive(Clone, Debug, Default)]
pub(crate) struct Ledgers {
    cells: Arc<Mutex<BTreeMap<TopicPartition, Arc<LedgerCell>>>>,
    wake: Wake,
}

impl Ledgers {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<TopicPartition, Arc<LedgerCell>>> {
        match self.cells.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn open(&self, partition: &TopicPartition, token: FencingToken) -> Arc<LedgerCell> {
        let cell = Arc::new(LedgerCell {
            token,
            ledger: Mutex::new(Ledger {
                outstanding: VecDeque::new(),
                last_delivered: None,
                watermark: None,
                reported: None,
                stopping: false,
                drained: false,
                generation: 0,
                paused: false,
            }),
            wake: self.wake.clone(),
        });
        self.lock().insert(partition.clone(), cell.clone());
        cell
    }

    /// Marks a partition stopping: nothing more of it is handed out.
    fn stop(&self, partition: &TopicPartition, token: FencingToken) {
        let cells = self.lock();
        if let Some(cell) = cells.get(partition).filter(|c| c.token == token) {
            let mut ledger = cell.lock();
            ledger.stopping = true;
            ledger.drained = ledger.outstanding.is_empty();
        }
    }

    /// What changed since the last call: watermarks to report, then drains
    /// that ended (a drained partition's ledger goes).
    fn changes(&self, out: &mut VecDeque<DataEvent>) {
        let mut cells = self.lock();
        let mut drained = Vec::new();
        for (partition, cell) in cells.iter() {
            let mut ledger = cell.lock();
            if ledger.watermark > ledger.reported {
                ledger.reported = ledger.watermark;
                if let Some(offset) = ledger.watermark {
                    out.push_back(DataEvent::Processed(partition.clone(), cell.token, offset));
                }
            }
            if ledger.drained {
                drained.push((partition.clone(), cell.token));
            }
        }
        for (partition, token) in drained {
            cells.remove(&partition);
            out.push_back(DataEvent::Drained(partition, token));
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
    /// A fetch under the claim `token` saw this log-end offset (high
    /// watermark); sent only when it moved.
    HighWatermark(TopicPartition, FencingToken, Offset),
}

/// How the application receives messages.
#[derive(Debug)]
pub(crate) enum Delivery {
    /// One stream for every partition, which they feed in turns.
    Group(GroupQueues),
    /// A stream per partition, handed out as partitions are assigned.
    PerPartition(mpsc::UnboundedSender<PartitionStream>),
}

/// Where the application wants a newly claimed partition to start, from a
/// store of its own (see [`crate::GroupMemberBuilder::start_offsets`]):
/// given the partition and its claim's token, the offset to start at, or
/// `None` to start where the member would (the committed offset, or the
/// initial-offset policy).
pub type StartOffsets = Arc<
    dyn Fn(
            TopicPartition,
            FencingToken,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<Offset>> + Send>>
        + Send
        + Sync,
>;

/// A claim the data plane fetches for.
struct Claim {
    token: FencingToken,
    ledger: Arc<LedgerCell>,
    /// Where its first fetch started.
    from: FetchFrom,
    /// Where its messages go; kept while paused, so that its stream or
    /// queue stays open.
    sender: Outlet,
    /// The fetch running, unless paused.
    fetcher: Option<JoinHandle<()>>,
}

impl Claim {
    fn abort(self) {
        self.sender.end();
        if let Some(fetcher) = self.fetcher {
            fetcher.abort();
        }
    }
}

/// The fetchers and ledgers of one member.
pub(crate) struct DataPlane {
    client: Arc<Client>,
    config: KafkaConfig,
    initial: InitialOffset,
    pub(crate) ledgers: Ledgers,
    claims: BTreeMap<TopicPartition, Claim>,
    /// The application's start offsets, asked at each claim's first fetch.
    start_offsets: Option<StartOffsets>,
    /// Partitions the application paused, under the claim it paused: a
    /// fetch that stops and starts again under that claim (a suspension)
    /// stays paused; a new claim starts unpaused.
    paused: BTreeMap<TopicPartition, FencingToken>,
    delivery: Delivery,
    /// The member's deadline, for the batches of per-partition streams.
    lease: Lease,
    events_tx: mpsc::UnboundedSender<DataEvent>,
    events: mpsc::UnboundedReceiver<DataEvent>,
    /// Events worked out of a batch of acknowledgements, not yet returned.
    pending: std::collections::VecDeque<DataEvent>,
    /// When the watermarks were last read on the application's account.
    watermarks_read: Instant,
    metadata: Option<JoinHandle<()>>,
}

impl DataPlane {
    pub(crate) fn new(
        client: Arc<Client>,
        config: KafkaConfig,
        initial: InitialOffset,
        subscription: Subscription,
        subscribed: Subscribed,
        delivery: Delivery,
        lease: Lease,
    ) -> DataPlane {
        let (events_tx, events) = mpsc::unbounded_channel();
        let metadata = tokio::spawn(follow_topics(
            client.clone(),
            config.clone(),
            subscription,
            subscribed,
            events_tx.clone(),
        ));
        DataPlane {
            client,
            config,
            initial,
            ledgers: Ledgers::default(),
            claims: BTreeMap::new(),
            start_offsets: None,
            paused: BTreeMap::new(),
            delivery,
            lease,
            events_tx,
            events,
            pending: std::collections::VecDeque::new(),
            watermarks_read: Instant::now(),
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
        if let Some(old) = self.claims.remove(&partition) {
            old.abort();
        }
        let ledger = self.ledgers.open(&partition, token);
        let sender = match &mut self.delivery {
            Delivery::PerPartition(streams) => {
                let (sender, receiver) = mpsc::channel(self.config.buffered_batches.max(1));
                let _ = streams.send(PartitionStream {
                    partition: partition.clone(),
                    token,
                    messages: crate::streams::Messages::partition(Batches::new(
                        receiver,
                        self.lease.clone(),
                    )),
                });
                Outlet::Partition(sender)
            }
            Delivery::Group(queues) => Outlet::Group(queues.open()),
        };
        let mut claim = Claim {
            token,
            ledger,
            from,
            sender,
            fetcher: None,
        };
        if self.paused.get(&partition) == Some(&token) {
            claim.ledger.lock().paused = true;
        } else {
            self.paused.remove(&partition);
            self.fetch(&partition, &mut claim, from, self.start_offsets.clone());
        }
        self.claims.insert(partition, claim);
    }

    /// The application's start offsets, asked at each claim's first fetch.
    pub(crate) fn set_start_offsets(&mut self, start_offsets: StartOffsets) {
        self.start_offsets = Some(start_offsets);
    }

    /// Starts the claim's fetch from `from` (or where `ask` says),
    /// stamped with its ledger's current generation.
    fn fetch(
        &self,
        partition: &TopicPartition,
        claim: &mut Claim,
        from: FetchFrom,
        ask: Option<StartOffsets>,
    ) {
        let fetcher = Fetcher {
            client: self.client.clone(),
            config: self.config.clone(),
            initial: self.initial,
            partition: partition.clone(),
            token: claim.token,
            ledger: claim.ledger.clone(),
            generation: claim.ledger.lock().generation,
            events: self.events_tx.clone(),
        };
        let sender = claim.sender.clone();
        let (partition, token) = (partition.clone(), claim.token);
        claim.fetcher = Some(tokio::spawn(async move {
            let from = match ask {
                Some(ask) => ask(partition, token).await.map_or(from, FetchFrom::Offset),
                None => from,
            };
            fetcher.run(from, sender).await
        }));
    }

    /// Stops fetching `partition`. What the application acknowledged so far
    /// (and the drain, if it holds nothing) comes out of [`DataPlane::flush`].
    pub(crate) fn stop(&mut self, partition: &TopicPartition, token: FencingToken) {
        if let Some(claim) = self.claims.remove(partition) {
            claim.abort();
        }
        self.ledgers.stop(partition, token);
    }

    /// Pauses or resumes `partition` (see [`DataPlane::pause`] and
    /// [`DataPlane::resume`]).
    pub(crate) fn set_paused(&mut self, partition: &TopicPartition, paused: bool) {
        if paused {
            self.pause(partition);
        } else {
            self.resume(partition);
        }
    }

    /// Stops handing out and fetching `partition` for now, keeping its
    /// claim; what was fetched and not handed out is fetched again on
    /// [`DataPlane::resume`]. A partition not owned is left alone.
    fn pause(&mut self, partition: &TopicPartition) {
        if let Some(claim) = self.claims.get_mut(partition) {
            let mut ledger = claim.ledger.lock();
            if ledger.stopping || ledger.paused {
                return;
            }
            self.paused.insert(partition.clone(), claim.token);
            ledger.paused = true;
            ledger.generation += 1;
            drop(ledger);
            if let Some(fetcher) = claim.fetcher.take() {
                fetcher.abort();
            }
        }
    }

    /// Hands out and fetches a paused `partition` again, from the message
    /// after the last one handed out.
    fn resume(&mut self, partition: &TopicPartition) {
        self.paused.remove(partition);
        let Some(mut claim) = self.claims.remove(partition) else {
            return;
        };
        let from = {
            let mut ledger = claim.ledger.lock();
            let resumed = ledger.paused && !ledger.stopping;
            ledger.paused = false;
            resumed.then(|| {
                ledger
                    .last_delivered
                    .map_or(claim.from, |offset| FetchFrom::Offset(offset + 1))
            })
        };
        if let Some(from) = from {
            self.fetch(partition, &mut claim, from, None);
        }
        self.claims.insert(partition.clone(), claim);
    }

    /// Hands out `partition` from `offset` on, under the claim `token`:
    /// what was fetched and not handed out is dropped, what was handed out
    /// and not acknowledged is let go. Moving forward counts the skipped
    /// messages as processed (the next commit stores `offset`); moving back
    /// hands messages out again, and the committed offset never moves
    /// back. `false` if the partition is not owned under `token`, or is
    /// stopping.
    pub(crate) fn seek(
        &mut self,
        partition: &TopicPartition,
        token: FencingToken,
        offset: Offset,
    ) -> bool {
        let Some(mut claim) = self.claims.remove(partition) else {
            return false;
        };
        let paused = {
            let mut ledger = claim.ledger.lock();
            if claim.token != token || ledger.stopping {
                drop(ledger);
                self.claims.insert(partition.clone(), claim);
                return false;
            }
            ledger.generation += 1;
            ledger.outstanding.clear();
            ledger.last_delivered = offset.checked_sub(1).filter(|o| *o >= 0);
            if ledger.last_delivered > ledger.watermark {
                ledger.watermark = ledger.last_delivered;
                claim.ledger.wake.moved.notify_one();
            }
            ledger.paused
        };
        if let Some(fetcher) = claim.fetcher.take() {
            fetcher.abort();
        }
        claim.from = FetchFrom::Offset(offset);
        if !paused {
            self.fetch(partition, &mut claim, FetchFrom::Offset(offset), None);
        }
        self.claims.insert(partition.clone(), claim);
        true
    }

    /// Every change the ledgers hold now, in order: processed watermarks
    /// before the drains they complete.
    pub(crate) fn flush(&mut self) -> Vec<DataEvent> {
        self.ledgers.changes(&mut self.pending);
        self.pending.drain(..).collect()
    }

    /// The next thing the data plane has to say.
    pub(crate) async fn next(&mut self) -> Option<DataEvent> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            let wake = self.ledgers.wake.clone();
            let read_at = self.watermarks_read + WATERMARK_READ_INTERVAL;
            let moved = async {
                tokio::time::sleep_until(read_at.into()).await;
                wake.moved.notified().await;
            };
            tokio::select! {
                () = moved => {
                    self.watermarks_read = Instant::now();
                    self.ledgers.changes(&mut self.pending);
                }
                () = wake.drained.notified() => self.ledgers.changes(&mut self.pending),
                event = self.events.recv() => return event,
            }
        }
    }

    /// Stops every fetcher (the member is gone).
    pub(crate) fn shutdown(&mut self) {
        for (_, claim) in std::mem::take(&mut self.claims) {
            claim.abort();
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

/// The codec named by a fetch error that says the client cannot decompress
/// a batch (rskafka: "Unimplemented compression: Lz4", somewhere in the
/// error's chain), if it is one.
fn unreadable_codec(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    const MARK: &str = "Unimplemented compression: ";
    let chain = error_chain(error);
    let at = chain.find(MARK)? + MARK.len();
    let codec: String = chain[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    Some(codec.to_ascii_lowercase())
}

struct Fetcher {
    client: Arc<Client>,
    config: KafkaConfig,
    initial: InitialOffset,
    partition: TopicPartition,
    token: FencingToken,
    ledger: Arc<LedgerCell>,
    generation: u64,
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

    async fn run(self, from: FetchFrom, sender: Outlet) {
        let client = self.partition_client().await;
        let mut next = match from {
            FetchFrom::Offset(offset) => offset,
            FetchFrom::Oldest => self.offset_at(&client, OffsetAt::Earliest).await,
            FetchFrom::Newest => self.offset_at(&client, OffsetAt::Latest).await,
        };
        let max_wait = self.config.fetch_max_wait.as_millis().min(i32::MAX as u128) as i32;
        let mut pause = Duration::from_millis(50);
        let mut reported_end = None;
        loop {
            match client
                .fetch(next, 1..self.config.fetch_max_bytes.max(2), max_wait)
                .await
            {
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
                    let mut messages = Vec::with_capacity(fetched.records.len());
                    // The batch's own references for its messages to count:
                    // counted by this task while it builds the batch and by
                    // the application's while it takes it, never by both at
                    // once. One shared by every batch bounced between the
                    // two threads' caches at every message.
                    let topic: Arc<str> = Arc::from(&*self.partition.topic);
                    let ledger = Arc::new(BatchLedger(self.ledger.clone()));
                    for record in fetched.records {
                        if record.offset < next {
                            // A compressed batch can start before the offset
                            // asked for.
                            continue;
                        }
                        next = record.offset + 1;
                        messages.push(Message {
                            topic: topic.clone(),
                            partition: self.partition.partition,
                            offset: record.offset,
                            key: record.record.key,
                            value: record.record.value,
                            headers: record.record.headers,
                            timestamp_ms: record.record.timestamp.timestamp_millis(),
                            token: self.token,
                            ledger: ledger.clone(),
                            generation: self.generation,
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
                    if (!messages.is_empty() || passed.is_some())
                        && !sender.send(Fetched { messages, passed }).await
                    {
                        return;
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

    /// The ledger's watermark, as the member's task would read it.
    fn processed(ledgers: &Ledgers) -> Vec<Offset> {
        let mut out = VecDeque::new();
        ledgers.changes(&mut out);
        out.into_iter()
            .filter_map(|event| match event {
                DataEvent::Processed(_, _, offset) => Some(offset),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn offsets_a_fetch_passed_count_once_the_messages_before_them_are_processed() {
        let ledgers = Ledgers::default();
        let partition = TopicPartition {
            topic: "t".into(),
            partition: 0,
        };
        let token = FencingToken(7);
        let cell = ledgers.open(&partition, token);

        // Records 10 and 11, then a commit marker at 12.
        assert!(cell.deliver(10, token, 0));
        assert!(cell.deliver(11, token, 0));
        cell.pass(12, token, 0);
        cell.ack(10);
        assert_eq!(processed(&ledgers), [10], "11 is not processed yet");
        cell.ack(11);
        assert_eq!(processed(&ledgers), [12], "past the marker");

        // Only a marker, nothing outstanding: it counts at once.
        cell.pass(15, token, 0);
        assert_eq!(processed(&ledgers), [15]);

        // Not under another claim, nor from an earlier fetch, nor backwards.
        cell.pass(20, FencingToken(6), 0);
        cell.pass(20, token, 1);
        cell.pass(14, token, 0);
        assert_eq!(processed(&ledgers), Vec::<Offset>::new());

        // Not once the partition is stopping.
        ledgers.stop(&partition, token);
        cell.pass(20, token, 0);
        assert_eq!(processed(&ledgers), Vec::<Offset>::new());
    }
}
