//! The fetchers and ledgers of one member: claims started, paused,
//! sought and stopped as the member decides.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use rskafka::client::Client;

use crate::dead_letter::DeadLetterProducer;
use tenure_core::{
    FencingToken, FetchFrom, InitialOffset, Offset, Progress, Subscription, TopicPartition,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::budget::BufferBudget;
use crate::config::KafkaConfig;
use crate::delivery::{Batches, GroupQueues, Lease, Outlet, PartitionStream};
use crate::event::DataEvent;
use crate::fetcher::Fetcher;
use crate::ledger::{LedgerCell, Ledgers, WATERMARK_READ_INTERVAL};
use crate::metadata::{follow_topics, Subscribed};
use crate::stall::StallWatch;
use crate::telemetry::{PartitionMetrics, PlaneMetrics};

/// How the application receives messages.
#[derive(Debug)]
pub enum Delivery {
    /// One stream for every partition, which they feed in turns.
    Group(GroupQueues),
    /// A stream per partition, handed out as partitions are assigned.
    PerPartition(mpsc::UnboundedSender<PartitionStream>),
}

/// Why the application's start offset could not be read: what its
/// function returned, shared (the member reports it and asks again).
pub type StartOffsetError = Arc<dyn std::error::Error + Send + Sync>;

/// Where the application wants a newly claimed partition to start, from a
/// store of its own (see `tenure_tokio::GroupMemberBuilder::start_offsets`):
/// given the partition and its claim's token, the offset to start at, or
/// `Ok(None)` to start where the member would (the committed offset, or the
/// initial-offset policy). An error is reported and the question asked
/// again after a pause, for as long as the claim holds: nothing is fetched
/// until it answers, so a database that is down never turns into a start
/// at the wrong offset.
pub type StartOffsets = Arc<
    dyn Fn(
            TopicPartition,
            FencingToken,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<Option<Offset>, StartOffsetError>> + Send>,
        > + Send
        + Sync,
>;

/// The first pause before asking the application's start offset again.
const START_OFFSET_RETRY_MIN: std::time::Duration = std::time::Duration::from_millis(100);
/// The longest pause between two asks.
const START_OFFSET_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// Asks `ask` where the claim starts until it answers, reporting each
/// failure; `from` where it says nothing. Where it names an offset, the
/// progress read with the member's committed offset says nothing of it:
/// `ledger` forgets it.
async fn ask_start(
    ask: &StartOffsets,
    partition: &TopicPartition,
    token: FencingToken,
    from: FetchFrom,
    events: &mpsc::UnboundedSender<DataEvent>,
    ledger: &LedgerCell,
) -> FetchFrom {
    let mut pause = START_OFFSET_RETRY_MIN;
    loop {
        match ask(partition.clone(), token).await {
            Ok(None) => return from,
            Ok(Some(offset)) => {
                ledger.forget_progress();
                return FetchFrom::Offset(offset);
            }
            Err(error) => {
                let _ = events.send(DataEvent::StartOffsetFailed {
                    partition: partition.clone(),
                    token,
                    error,
                });
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(START_OFFSET_RETRY_MAX);
            }
        }
    }
}

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
pub struct DataPlane {
    client: Arc<Client>,
    config: KafkaConfig,
    initial: InitialOffset,
    /// What the fetchers of every partition may buffer, together.
    budget: BufferBudget,
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
    /// The metric handles, with the member's labels.
    metrics: PlaneMetrics,
    /// The handles of each partition held, registered when its fetching
    /// starts and dropped when it stops: a member that holds many
    /// partitions in turn keeps those of the ones it holds.
    partition_metrics: BTreeMap<TopicPartition, Arc<PartitionMetrics>>,
    /// The application's progress on each claim, read at intervals
    /// (`None`: [`KafkaConfig::max_processing_stall`] is off), and when it
    /// is read next.
    stall: Option<(StallWatch, Instant)>,
}

impl DataPlane {
    /// The data plane of one member: it follows the subscription's topics
    /// on `client` (their partition counts come back as
    /// [`DataEvent::Counts`]), and fetches nothing until told to
    /// [`DataPlane::start`]. Messages go out by `delivery`, each only while
    /// `lease` says the member may hand them out.
    pub fn new(
        client: Arc<Client>,
        config: KafkaConfig,
        initial: InitialOffset,
        subscription: Subscription,
        subscribed: Subscribed,
        delivery: Delivery,
        lease: Lease,
    ) -> DataPlane {
        let (events_tx, events) = mpsc::unbounded_channel();
        let stall = config.max_processing_stall.map(|limit| {
            let watch = StallWatch::new(limit);
            let first = Instant::now() + watch.interval();
            (watch, first)
        });
        let metadata = tokio::spawn(follow_topics(
            client.clone(),
            config.clone(),
            subscription,
            subscribed,
            events_tx.clone(),
        ));
        let mut ledgers = Ledgers::default();
        if let Some(settings) = &config.dead_letters {
            ledgers.set_dead_letters(Arc::new(DeadLetterProducer::new(
                client.clone(),
                settings.clone(),
                ledgers.wake.moved.clone(),
            )));
        }
        DataPlane {
            budget: BufferBudget::new(config.max_buffered_bytes),
            client,
            config,
            initial,
            ledgers,
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
            metrics: PlaneMetrics::default(),
            partition_metrics: BTreeMap::new(),
            stall,
        }
    }

    /// Labels the data plane's metrics (`tenure_messages_consumed_total`,
    /// `tenure_fetch_latency_seconds`...) with the member's `group` and
    /// `member`, as the member's other metrics are; partitions' metrics
    /// add `topic` and `partition`. Call it before the first
    /// [`DataPlane::start`]: handles registered before keep their labels.
    pub fn set_metric_labels(&mut self, group: &str, member: &str) {
        self.metrics = PlaneMetrics::new(vec![
            metrics::Label::new("group", group.to_owned()),
            metrics::Label::new("member", member.to_owned()),
        ]);
        self.partition_metrics.clear();
    }

    /// Starts fetching `partition` from `from` under `token`, skipping
    /// what `progress` (the progress record read with the committed
    /// offset) names done: those messages are not handed out again.
    pub fn start(
        &mut self,
        partition: TopicPartition,
        from: FetchFrom,
        token: FencingToken,
        progress: Progress,
    ) {
        if let Some(old) = self.claims.remove(&partition) {
            old.abort();
        }
        let ledger = self.ledgers.open(&partition, token, progress);
        let order = self.config.order_of(&partition.topic);
        let sender = match &mut self.delivery {
            Delivery::PerPartition(streams) => {
                let (sender, receiver) = mpsc::channel(self.config.buffered_batches.max(1));
                let batches = Batches::new(receiver, self.lease.clone(), order);
                if let Some(wake) = batches.lane_wake() {
                    ledger.set_lane_wake(wake);
                }
                let _ = streams.send(PartitionStream {
                    partition: partition.clone(),
                    token,
                    batches,
                });
                Outlet::Partition(sender)
            }
            Delivery::Group(queues) => {
                let sender = queues.open(order);
                if order.max_in_flight().is_some() {
                    ledger.set_lane_wake(sender.lane_wake());
                }
                Outlet::Group(sender)
            }
        };
        let mut claim = Claim {
            token,
            ledger,
            from,
            sender,
            fetcher: None,
        };
        if self.paused.get(&partition) == Some(&token) {
            claim.ledger.hold_paused();
        } else {
            self.paused.remove(&partition);
            self.fetch(&partition, &mut claim, from, self.start_offsets.clone());
        }
        self.claims.insert(partition, claim);
    }

    /// The application's start offsets, asked at each claim's first fetch.
    pub fn set_start_offsets(&mut self, start_offsets: StartOffsets) {
        self.start_offsets = Some(start_offsets);
    }

    /// Starts the claim's fetch from `from` (or where `ask` says),
    /// stamped with its ledger's current generation.
    fn fetch(
        &mut self,
        partition: &TopicPartition,
        claim: &mut Claim,
        from: FetchFrom,
        ask: Option<StartOffsets>,
    ) {
        let metrics = match self.partition_metrics.get(partition) {
            Some(metrics) => metrics.clone(),
            None => {
                let metrics = self.metrics.partition(partition);
                self.partition_metrics
                    .insert(partition.clone(), metrics.clone());
                metrics
            }
        };
        let fetcher = Fetcher {
            metrics,
            client: self.client.clone(),
            config: self.config.clone(),
            budget: self.budget.clone(),
            initial: self.initial,
            partition: partition.clone(),
            token: claim.token,
            ledger: claim.ledger.clone(),
            generation: claim.ledger.generation(),
            events: self.events_tx.clone(),
        };
        let sender = claim.sender.clone();
        let (partition, token) = (partition.clone(), claim.token);
        let events = self.events_tx.clone();
        let ledger = claim.ledger.clone();
        claim.fetcher = Some(tokio::spawn(async move {
            let from = match ask {
                Some(ask) => ask_start(&ask, &partition, token, from, &events, &ledger).await,
                None => from,
            };
            fetcher.run(from, sender).await
        }));
    }

    /// Stops fetching `partition`. What the application acknowledged so far
    /// (and the drain, if it holds nothing) comes out of [`DataPlane::flush`].
    pub fn stop(&mut self, partition: &TopicPartition, token: FencingToken) {
        if let Some(claim) = self.claims.remove(partition) {
            claim.abort();
        }
        self.ledgers.stop(partition, token);
        self.partition_metrics.remove(partition);
    }

    /// Pauses or resumes `partition`: a paused claim hands nothing out and
    /// fetches nothing, and keeps its stream or queue open until resumed.
    pub fn set_paused(&mut self, partition: &TopicPartition, paused: bool) {
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
        self.pause_claim(partition, None);
    }

    /// Pauses `partition`; `owned` is the member's claim on it, which a
    /// pause asked for before the claim's fetch started is kept under (its
    /// start then holds it paused).
    pub fn pause_claim(&mut self, partition: &TopicPartition, owned: Option<FencingToken>) {
        if !self.claims.contains_key(partition) {
            if let Some(token) = owned {
                self.paused.insert(partition.clone(), token);
            }
            return;
        }
        if let Some(claim) = self.claims.get_mut(partition) {
            if !claim.ledger.pause() {
                return;
            }
            self.paused.insert(partition.clone(), claim.token);
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
        let from = claim.ledger.resume().map(|last_delivered| {
            last_delivered.map_or(claim.from, |offset| FetchFrom::Offset(offset + 1))
        });
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
    pub fn seek(
        &mut self,
        partition: &TopicPartition,
        token: FencingToken,
        offset: Offset,
    ) -> bool {
        let Some(mut claim) = self.claims.remove(partition) else {
            return false;
        };
        let moved = if claim.token == token {
            claim.ledger.seek(offset)
        } else {
            None
        };
        let Some(paused) = moved else {
            self.claims.insert(partition.clone(), claim);
            return false;
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

    /// The claim `partition` is consumed under, with the offset of its
    /// next message to be handed out (`None` in it while its fetch has not
    /// found where it starts); `None` if it is not consumed here.
    pub fn position(&self, partition: &TopicPartition) -> Option<(FencingToken, Option<Offset>)> {
        let claim = self.claims.get(partition)?;
        Some((claim.token, claim.ledger.position()))
    }

    /// The partitions the application paused, each with its claim.
    pub fn paused(&self) -> &BTreeMap<TopicPartition, FencingToken> {
        &self.paused
    }

    /// Every change the ledgers hold now, in order: processed watermarks
    /// before the drains they complete.
    pub fn flush(&mut self) -> Vec<DataEvent> {
        self.ledgers.changes(&mut self.pending);
        self.pending.drain(..).collect()
    }

    /// The next thing the data plane has to say.
    pub async fn next(&mut self) -> Option<DataEvent> {
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
            let stall_check = self.stall.as_ref().map(|(_, at)| *at);
            tokio::select! {
                () = moved => {
                    self.watermarks_read = Instant::now();
                    self.ledgers.changes(&mut self.pending);
                }
                () = wake.drained.notified() => self.ledgers.changes(&mut self.pending),
                () = sleep_until(stall_check), if stall_check.is_some() => self.check_stalls(),
                event = self.events.recv() => return event,
            }
        }
    }

    /// Reads the application's progress on each claim, and tells of the
    /// claims whose messages waited the processing-stall bound without it.
    fn check_stalls(&mut self) {
        let Some((watch, next)) = self.stall.as_mut() else {
            return;
        };
        let now = Instant::now();
        *next = now + watch.interval();
        for (partition, token, stalled_for) in watch.check(now, self.ledgers.activities()) {
            self.pending.push_back(DataEvent::ProcessingStalled {
                partition,
                token,
                stalled_for,
            });
        }
    }

    /// Stops every fetcher (the member is gone).
    pub fn shutdown(&mut self) {
        for (_, claim) in std::mem::take(&mut self.claims) {
            claim.abort();
        }
        if let Some(metadata) = self.metadata.take() {
            metadata.abort();
        }
        // Nacked messages waiting out their delay refer to their ledgers:
        // let them go now, and those still sleeping when they wake.
        self.ledgers.stop_all();
    }
}

impl Drop for DataPlane {
    fn drop(&mut self) {
        self.shutdown();
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}
