//! One group member on tokio: the handle the application holds, and its
//! builder, which starts the member's task ([`crate::driver`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use tenure_core::assignment::PartitionCounts;
use tenure_core::{Config, FencingToken, Member, MemberId, Offset, TopicPartition};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::backend::{Backend, Joining};
use crate::driver::{now, Driver, Input};
use crate::membership::{StateFile, StaticMembership};
use crate::streams::{self, Errors, Events, HeldClaims, Messages, PartitionStreams};
use crate::telemetry::{self, Telemetry};
use crate::values::*;
use tenure_kafka::{
    self as kafka, DataPlane, Delivery, GroupQueues, KafkaConfig, Message, PartitionStream,
    StartOffsets,
};

/// Builds a [`GroupMember`].
pub struct GroupMemberBuilder {
    config: Config,
    seed: Option<u64>,
    counts: PartitionCounts,
    auto_drain: bool,
    kafka: Option<KafkaConfig>,
    per_partition: bool,
    view_log: Option<mpsc::UnboundedSender<(MemberId, View)>>,
    start_offsets: Option<StartOffsets>,
    static_membership: Option<StaticMembership>,
}

impl GroupMemberBuilder {
    /// Makes the member a static member: its id is an instance identity,
    /// and its store session, kept in `membership`'s state file, is resumed
    /// by a process that restarts within the session timeout — its
    /// registration and claims are found where it left them, with their
    /// fencing tokens, and no partition moves. See [`StaticMembership`]
    /// for what a close does. Only one process at a time can run a static
    /// member (the state file is locked); the store must keep sessions for
    /// other processes to resume (ZooKeeper and etcd do; the embedded
    /// store does not: its members start afresh).
    pub fn static_membership(mut self, membership: StaticMembership) -> Self {
        self.static_membership = Some(membership);
        self
    }

    /// Also sends every view the member publishes, in order and none
    /// skipped, to `log` (for monitors and tests; [`GroupMember::watch_view`]
    /// only ever shows the latest).
    pub fn view_log(mut self, log: mpsc::UnboundedSender<(MemberId, View)>) -> Self {
        self.view_log = Some(log);
        self
    }

    /// The seed of the member's retry jitter (default: from the clock and
    /// the member id). Fix it to replay a run.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The partition counts of the subscribed topics, until the Kafka data
    /// plane reads them from metadata. Every member must be given the same.
    pub fn partitions(mut self, counts: PartitionCounts) -> Self {
        self.counts = counts;
        self
    }

    /// Fetches the owned partitions from Kafka and hands their messages to
    /// the application ([`GroupMember::next_message`]). Partition counts
    /// then come from Kafka's metadata, refreshed so that added partitions
    /// get assigned, a pattern subscription's new topics too, and a deleted
    /// topic's partitions are released. A named topic that does not exist
    /// yet is reported on [`GroupMember::errors`] and waited for.
    pub fn kafka(mut self, kafka: KafkaConfig) -> Self {
        self.kafka = Some(kafka);
        self
    }

    /// Whether the member will fetch from Kafka.
    pub(crate) fn has_kafka(&self) -> bool {
        self.kafka.is_some()
    }

    /// The group and the member's id, for the metrics' labels.
    pub(crate) fn names(&self) -> (&str, &MemberId) {
        (self.config.group.as_str(), &self.config.member)
    }

    /// With Kafka: hand each owned partition's messages out as a stream of
    /// its own ([`GroupMember::next_partition_stream`]) rather than all in
    /// one stream.
    pub fn per_partition_streams(mut self, per_partition: bool) -> Self {
        self.per_partition = per_partition;
        self
    }

    /// With Kafka: where each newly claimed partition starts, asked of the
    /// application (an offset it keeps beside its output, say) before the
    /// first fetch of the claim; `None` from it starts where the member
    /// would (the committed offset, or the initial-offset policy). The
    /// claim's fencing token comes with it, to fence what the application
    /// writes with the offset.
    pub fn start_offsets<F, Fut>(mut self, start_offset: F) -> Self
    where
        F: Fn(TopicPartition, FencingToken) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Option<Offset>> + Send + 'static,
    {
        self.start_offsets = Some(Arc::new(move |partition, token| {
            Box::pin(start_offset(partition, token))
        }));
        self
    }

    /// Whether the runtime reports a stopped partition drained at once,
    /// for applications that finish each message before taking the next
    /// event (default: no, the application calls [`GroupMember::drained`]).
    pub fn auto_drain(mut self, auto_drain: bool) -> Self {
        self.auto_drain = auto_drain;
        self
    }

    /// Validates the config, starts the backend's session and the member's
    /// task. The member registers and starts claiming in the background;
    /// watch [`GroupMember::next_event`] for its assignment.
    pub async fn join(self, mut backend: impl Backend) -> Result<GroupMember, JoinError> {
        let seed = self
            .seed
            .unwrap_or_else(|| default_seed(self.config.member.as_str()));
        self.config.validate()?;
        // Kafka first: an unknown topic or a dead broker is reported before
        // the member takes any partition.
        let mut counts = self.counts;
        let mut messages = None;
        let mut streams = None;
        let mut data = None;
        let (lease_tx, lease_rx) = watch::channel(None);
        if let Some(kafka_config) = self.kafka {
            let client = kafka::connect(&kafka_config).await?;
            let subscribed =
                kafka::subscribed_topics(&client, &kafka_config, &self.config.subscription).await?;
            counts = subscribed.counts.clone();
            let delivery = if self.per_partition {
                let (tx, rx) = mpsc::unbounded_channel();
                streams = Some(rx);
                Delivery::PerPartition(tx)
            } else {
                let (queues, interleaved) = GroupQueues::new(
                    kafka_config.buffered_batches,
                    kafka_config.max_messages_in_a_row,
                    lease_rx.clone(),
                );
                messages = Some(interleaved);
                Delivery::Group(queues)
            };
            let mut plane = DataPlane::new(
                client,
                kafka_config,
                self.config.initial_offset,
                self.config.subscription.clone(),
                subscribed,
                delivery,
                lease_rx.clone(),
            );
            if let Some(start_offsets) = self.start_offsets {
                plane.set_start_offsets(start_offsets);
            }
            data = Some(plane);
        }
        let member = Member::new(self.config, seed, now())?;
        let id = member.id().clone();
        let group = member.config().group.clone();
        if let Some(plane) = &mut data {
            plane.set_metric_labels(group.as_str(), id.as_str());
        }
        let (store_tx, store_rx) = mpsc::unbounded_channel();
        let mut joining = Joining::new(
            group.as_str(),
            member.info().clone(),
            member.config().session_timeout,
            store_tx,
        );
        let mut state = None;
        let mut leave_on_close = true;
        if let Some(membership) = &self.static_membership {
            // A previous process of the member may still be on its way
            // out: its lock goes with it. One that runs on past the
            // session timeout is another live process.
            let mut file = StateFile::open(
                membership,
                group.as_str(),
                id.as_str(),
                member.config().session_timeout,
            )
            .await?;
            joining = joining.static_membership(file.ticket());
            leave_on_close = membership.leaves_on_close();
            state = Some(file);
        }
        backend.start(joining).await?;
        let (input_tx, input_rx) = mpsc::unbounded_channel();
        let claims = HeldClaims::default();
        let ((events_tx, events_rx), (errors_tx, errors_rx)) =
            streams::channels(lease_rx.clone(), claims.clone());
        let (view_tx, view_rx) = watch::channel(View::default());
        if !counts.is_empty() {
            let _ = input_tx.send(Input::Counts(counts));
        }
        let driver = Driver {
            member,
            backend: Box::new(backend),
            store: store_rx,
            inputs: input_rx,
            events: events_tx,
            errors: errors_tx,
            view: view_tx,
            lease: lease_tx,
            claims,
            closing: Vec::new(),
            commits_in_flight: BTreeMap::new(),
            commit_waiters: Vec::new(),
            commit_requests: Vec::new(),
            close_report: None,
            awaiting_drain: BTreeMap::new(),
            auto_drain: self.auto_drain,
            view_log: self.view_log,
            data,
            telemetry: Telemetry::new(&group, &id),
            state,
            leave_on_close,
            detaching: None,
        };
        let task = tokio::spawn(driver.run().instrument(telemetry::member_span(&group, &id)));
        Ok(GroupMember {
            id,
            inputs: input_tx,
            events: Some(events_rx),
            errors: Some(errors_rx),
            view: view_rx,
            task: Some(task),
            messages: Some(Messages::group(messages)),
            streams: Some(PartitionStreams::new(streams)),
        })
    }
}

fn default_seed(member: &str) -> u64 {
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    member.bytes().fold(clock, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// A member of a group, running on tokio. Dropping it without
/// [`GroupMember::close`] stops it like a crash: its claims stay until its
/// session expires.
///
/// What it hands the application comes as streams that can be taken apart
/// from it ([`GroupMember::messages`], [`GroupMember::events`],
/// [`GroupMember::errors`], [`GroupMember::partition_streams`]) and waited
/// on together in one `tokio::select!`, while the member itself stays at
/// hand for acknowledging, reporting and closing.
pub struct GroupMember {
    id: MemberId,
    inputs: mpsc::UnboundedSender<Input>,
    events: Option<Events>,
    errors: Option<Errors>,
    view: watch::Receiver<View>,
    task: Option<JoinHandle<()>>,
    messages: Option<Messages>,
    streams: Option<PartitionStreams>,
}

impl GroupMember {
    /// Starts building a member with `config`.
    pub fn builder(config: Config) -> GroupMemberBuilder {
        GroupMemberBuilder {
            config,
            seed: None,
            counts: PartitionCounts::new(),
            auto_drain: false,
            view_log: None,
            kafka: None,
            per_partition: false,
            start_offsets: None,
            static_membership: None,
        }
    }

    /// This member's id.
    pub fn id(&self) -> &MemberId {
        &self.id
    }

    /// The messages of every owned partition (with Kafka): a stream that
    /// lives apart from the member. Taken once; later calls (and
    /// [`GroupMember::next_message`] after it) get a stream that ends at
    /// once.
    pub fn messages(&mut self) -> Messages {
        self.messages
            .take()
            .unwrap_or_else(|| Messages::group(None))
    }

    /// The changes in what this member consumes: a stream that lives apart
    /// from the member. Taken once, like [`GroupMember::messages`].
    pub fn events(&mut self) -> Events {
        self.events.take().unwrap_or_else(Events::ended)
    }

    /// The problems this member reports: a stream that lives apart from
    /// the member. Taken once, like [`GroupMember::messages`].
    pub fn errors(&mut self) -> Errors {
        self.errors.take().unwrap_or_else(Errors::ended)
    }

    /// With Kafka and [`GroupMemberBuilder::per_partition_streams`]: the
    /// stream of each partition as this member starts consuming it. Taken
    /// once, like [`GroupMember::messages`].
    pub fn partition_streams(&mut self) -> PartitionStreams {
        self.streams
            .take()
            .unwrap_or_else(|| PartitionStreams::new(None))
    }

    /// The next change in what this member consumes (`None` once the
    /// member has closed, or once [`GroupMember::events`] took them).
    pub async fn next_event(&mut self) -> Option<AssignmentEvent> {
        self.events.as_mut()?.next().await
    }

    /// The next assignment change already waiting, without waiting.
    pub fn try_next_event(&mut self) -> Option<AssignmentEvent> {
        self.events.as_mut()?.try_next()
    }

    /// The next problem the member reported (it keeps working after each);
    /// `None` once [`GroupMember::errors`] took them.
    pub async fn next_error(&mut self) -> Option<Problem> {
        self.errors.as_mut()?.next().await
    }

    /// The next reported problem already waiting, without waiting.
    pub fn try_next_error(&mut self) -> Option<Problem> {
        self.errors.as_mut()?.try_next()
    }

    /// With Kafka ([`GroupMemberBuilder::kafka`]): the next message of any
    /// owned partition. Acknowledge each with [`Message::ack`]. `None` once
    /// the member has closed, without Kafka, or once
    /// [`GroupMember::messages`] took them.
    pub async fn next_message(&mut self) -> Option<Message> {
        self.messages.as_mut()?.next().await
    }

    /// With Kafka and [`GroupMemberBuilder::per_partition_streams`]: the
    /// stream of the next partition this member starts consuming.
    pub async fn next_partition_stream(&mut self) -> Option<PartitionStream> {
        self.streams.as_mut()?.next().await
    }

    /// The member's current view of itself.
    pub fn view(&self) -> View {
        self.view.borrow().clone()
    }

    /// A receiver that sees every change of the view.
    pub fn watch_view(&self) -> watch::Receiver<View> {
        self.view.clone()
    }

    /// Reports that every message of `partition` up to and including
    /// `offset`, fetched under `token`, is processed; it is committed on the
    /// next interval.
    pub fn processed(&self, partition: TopicPartition, token: FencingToken, offset: Offset) {
        let _ = self.inputs.send(Input::Processed(partition, token, offset));
    }

    /// Reports that the application finished the messages it had of a
    /// partition it was told to stop ([`AssignmentEvent::Revoking`]).
    pub fn drained(&self, partition: TopicPartition, token: FencingToken) {
        let _ = self.inputs.send(Input::Drained(partition, token));
    }

    /// With Kafka: stops handing out (and fetching) `partition` until
    /// [`GroupMember::resume`], keeping its claim; what was acknowledged is
    /// committed as usual. Once it returns, no message of `partition` is
    /// handed out. A partition this member does not own is left alone, and
    /// a claim that ends while paused takes the pause with it (a partition
    /// assigned again starts unpaused).
    pub async fn pause(&self, partition: TopicPartition) -> Result<(), TaskGone> {
        self.ask(|done| Input::SetPaused(partition, true, done))
            .await
    }

    /// With Kafka: hands out `partition`, owned under `token`, from
    /// `offset` on. What was fetched and not handed out is dropped, and
    /// what was handed out and not acknowledged is let go. Moving forward
    /// counts the skipped messages as processed (the next commit stores
    /// `offset`); moving back hands messages out again, and the committed
    /// offset never moves back.
    pub async fn seek(
        &self,
        partition: TopicPartition,
        token: FencingToken,
        offset: Offset,
    ) -> Result<(), SeekError> {
        let target = partition.clone();
        match self
            .ask(|done| Input::Seek(target, token, offset, done))
            .await?
        {
            true => Ok(()),
            false => Err(SeekError::NotOwned { partition, token }),
        }
    }

    /// With Kafka: hands out a paused `partition` again, from the message
    /// after the last one handed out (nothing skipped, nothing twice).
    pub async fn resume(&self, partition: TopicPartition) -> Result<(), TaskGone> {
        self.ask(|done| Input::SetPaused(partition, false, done))
            .await
    }

    /// New partition counts (counts only ever grow).
    pub fn set_partition_counts(&self, counts: PartitionCounts) {
        let _ = self.inputs.send(Input::Counts(counts));
    }

    /// Commits what was acknowledged so far on every owned partition now,
    /// rather than at the next commit interval, and waits for the store's
    /// answers. A partition whose commit is in flight already reports that
    /// one (its offset may be lower than what was acknowledged since: call
    /// again). Nothing is written while the member's session may have
    /// lapsed.
    pub async fn commit(&self) -> Result<CommitReport, TaskGone> {
        self.ask(Input::Commit).await
    }

    /// Sends the member's task the input `make` builds around a reply
    /// channel, and waits for the reply.
    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Input) -> Result<T, TaskGone> {
        let (reply, answer) = oneshot::channel();
        self.inputs.send(make(reply)).map_err(|_| TaskGone)?;
        answer.await.map_err(|_| TaskGone)
    }

    /// Leaves the group: stops every partition, waits for the drains (with
    /// Kafka, until the application acknowledged what it holds; without,
    /// a closing application holds nothing, so drains not reported yet are
    /// taken as done), commits, releases every claim, deregisters and ends
    /// the session. Returns the final commits and what became of them.
    ///
    /// A message handed out but never acknowledged holds its partition's
    /// drain up to the processing timeout, and its offset is not committed.
    pub async fn close(mut self) -> Result<CommitReport, CloseError> {
        let (done_tx, done_rx) = oneshot::channel();
        self.inputs
            .send(Input::Close(done_tx))
            .map_err(|_| CloseError::TaskGone)?;
        match done_rx.await {
            Ok(report) => Ok(report),
            Err(_) => match self.task.take() {
                Some(task) => {
                    task.await.map_err(|_| CloseError::TaskGone)?;
                    Err(CloseError::TaskGone)
                }
                None => Err(CloseError::TaskGone),
            },
        }
    }

    /// [`GroupMember::close`], given at most `limit`: past it the member is
    /// stopped like a crash and the close fails with
    /// [`CloseError::TimedOut`].
    pub async fn close_within(
        self,
        limit: std::time::Duration,
    ) -> Result<CommitReport, CloseError> {
        // A close cut short drops the member with it, which stops its task.
        tokio::time::timeout(limit, self.close())
            .await
            .unwrap_or(Err(CloseError::TimedOut { limit }))
    }

    /// Test hook (feature `testing`): the member's task stops for
    /// `length`, handling nothing — no event, no timer, no commit — like a
    /// process stopped with SIGSTOP (its fetchers and the store client's own
    /// tasks are not stopped; a test that wants the store to lose it too
    /// cuts its connection).
    #[cfg(feature = "testing")]
    pub fn freeze_for_test(&self, length: std::time::Duration) {
        let _ = self.inputs.send(Input::Freeze(length));
    }

    /// Stops the member at once without releasing anything, like a process
    /// that died: its claims stay until its session expires.
    pub fn kill(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Drop for GroupMember {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
