//! One group member on tokio: the task that drives the core's state
//! machine, and the handle the application holds.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use tenure_core::assignment::PartitionCounts;
use tenure_core::{
    AppEvent, Config, ConfigError, Error, Event, FencingToken, FetchCommand, FetchFrom, Member,
    MemberId, Offset, Output, SessionId, StoreError, TopicPartition,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::backend::{Backend, BackendError, Joining};
use crate::kafka::{
    self, DataEvent, DataPlane, Delivery, GroupQueues, KafkaConfig, KafkaError, Message,
    PartitionStream, StartOffsets,
};
use crate::membership::{StateFile, StateFileError, StaticMembership};
use crate::streams::{
    self, Errors, EventSender, Events, HeldClaims, Messages, PartitionStreams, ProblemSender,
};
use crate::telemetry::{self, Telemetry};

/// A change in what this member consumes.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AssignmentEvent {
    /// Start consuming `partition` at `from`; every side effect may be
    /// fenced with `token`.
    Assigned {
        /// The partition.
        partition: TopicPartition,
        /// Where consumption starts.
        from: FetchFrom,
        /// The claim's fencing token.
        token: FencingToken,
    },
    /// Stop consuming `partition`, which is leaving this member: finish the
    /// messages in hand, then call [`GroupMember::drained`]. Its final
    /// offset is committed after that (or after the processing timeout),
    /// and [`AssignmentEvent::Revoked`] follows.
    Revoking {
        /// The partition.
        partition: TopicPartition,
        /// The claim the consumption ran under.
        token: FencingToken,
    },
    /// Nothing more of `partition` is handed out for now: the store has not
    /// been heard from, and the session may be lapsing. The claim stays,
    /// nothing needs draining; [`AssignmentEvent::Resumed`] follows if the
    /// session turns out alive (consumption goes on where it stood, with
    /// nothing fetched again), [`AssignmentEvent::Revoking`] if the
    /// partition leaves.
    Suspended {
        /// The partition.
        partition: TopicPartition,
        /// The claim.
        token: FencingToken,
        /// Until when the claim is sure to hold: the member's own deadline
        /// (the store last heard from it, plus the session timeout, less
        /// the suspension margin), if it is registered.
        until: Option<Instant>,
    },
    /// The session is alive after a suspension: `partition` is handed out
    /// again from where it stood, under the same claim.
    Resumed {
        /// The partition.
        partition: TopicPartition,
        /// The claim.
        token: FencingToken,
    },
    /// This member's claim on `partition` is gone: released to another
    /// member, or lost with the session.
    Revoked {
        /// The partition.
        partition: TopicPartition,
        /// The claim that ended.
        token: FencingToken,
    },
}

/// A snapshot of the member's own view, for tools and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    /// The current store session.
    pub session: Option<SessionId>,
    /// Whether the registration record is known to exist.
    pub registered: bool,
    /// What the current assignment gives this member.
    pub assigned: BTreeSet<TopicPartition>,
    /// The partitions whose owner record is this member's claim.
    pub owned: BTreeMap<TopicPartition, FencingToken>,
    /// The partitions the application is being fed.
    pub fetching: BTreeSet<TopicPartition>,
    /// Every assigned partition owned and fetched, nothing in motion.
    pub settled: bool,
    /// The member has left the group.
    pub closed: bool,
    /// When the member published this view (for ordering the views of
    /// several members).
    pub at: Option<Instant>,
}

impl View {
    /// Whether `self` and `other` say the same, whenever published.
    fn same_as(&self, other: &View) -> bool {
        let View {
            session,
            registered,
            assigned,
            owned,
            fetching,
            settled,
            closed,
            at: _,
        } = self;
        *session == other.session
            && *registered == other.registered
            && *settled == other.settled
            && *closed == other.closed
            && *owned == other.owned
            && *assigned == other.assigned
            && *fetching == other.fetching
    }
}

/// Why a member could not join.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JoinError {
    /// The configuration is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The store could not be reached.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// Kafka could not be reached (a topic that does not exist yet is no
    /// reason: it is reported on [`GroupMember::errors`] and waited for).
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    /// Static membership: the state file cannot be used, or another
    /// process of the member holds it.
    #[error(transparent)]
    StateFile(#[from] StateFileError),
    /// Exactly-once output ([`crate::exactly_once`]) needs messages to
    /// write: the member builder has no Kafka ([`GroupMemberBuilder::kafka`]).
    #[error("exactly-once output needs Kafka: the member builder has no KafkaConfig")]
    NoKafka,
}

/// A problem a member reports while it runs; it keeps working after each.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Problem {
    /// From the coordination: a stalled claim, a fenced commit, an expired
    /// session, corrupt data in the store...
    #[error(transparent)]
    Coordination(#[from] Error),
    /// From fetching: an unreachable broker, an offset out of range...
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    /// Static membership: the session could not be written to the state
    /// file, so a restart within the session timeout opens a new session
    /// (its partitions move) instead of resuming this one.
    #[error(transparent)]
    StateFile(Arc<StateFileError>),
    /// Problems the application did not read in time were dropped (see
    /// [`crate::Errors`]).
    #[error("{count} problem(s) dropped: the application did not read them in time")]
    Dropped {
        /// How many.
        count: u64,
    },
}

impl Problem {
    /// Whether the problem may clear by itself while the member goes on,
    /// so that waiting (the member retries on its own) can help; `false`
    /// for what needs someone to act, what is final, and a count of
    /// dropped problems.
    pub fn is_transient(&self) -> bool {
        match self {
            Problem::Coordination(error) => error.is_transient(),
            Problem::Kafka(error) => error.is_transient(),
            // A disk that refuses a write needs someone to look at it.
            Problem::StateFile(_) => false,
            Problem::Dropped { .. } => false,
        }
    }
}

/// What became of one commit of a partition's offset.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum CommitOutcome {
    /// The store holds `offset` (the next offset to consume) as committed.
    Written {
        /// The offset written.
        offset: Offset,
    },
    /// The store refused the write: this member's claim is gone, another
    /// member may own the partition. Nothing was written.
    Fenced {
        /// The offset not written.
        offset: Offset,
    },
    /// The write failed (a lost connection, an error of the store);
    /// whether it was written is not known. A later commit carries the
    /// offset on while the claim holds.
    Failed {
        /// The offset not known to be written.
        offset: Offset,
        /// What the store said.
        error: StoreError,
    },
    /// The claim ended (the session expired) before the store answered:
    /// whether it was written is not known.
    Abandoned {
        /// The offset not known to be written.
        offset: Offset,
    },
}

/// The commits a [`GroupMember::commit`] or [`GroupMember::close`] waited
/// for, by partition (the last one of each).
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct CommitReport {
    /// Each partition's commit and what became of it. A partition with
    /// nothing new to commit is not in it.
    pub commits: BTreeMap<TopicPartition, CommitOutcome>,
}

impl CommitReport {
    /// Whether every commit was written.
    pub fn all_written(&self) -> bool {
        self.commits
            .values()
            .all(|outcome| matches!(outcome, CommitOutcome::Written { .. }))
    }
}

/// Why [`GroupMember::seek`] did not move a partition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SeekError {
    /// The partition is not owned under that claim (any more), or is on
    /// its way out, or there is no Kafka to fetch from.
    #[error("{partition} is not consumed under the claim {token:?}")]
    NotOwned {
        /// The partition.
        partition: TopicPartition,
        /// The claim named.
        token: FencingToken,
    },
    /// The member's task has ended.
    #[error(transparent)]
    TaskGone(#[from] TaskGone),
}

/// The member's task has ended (it was closed, or it stopped on its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the member's task has ended")]
pub struct TaskGone;

/// Why leaving the group did not finish cleanly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CloseError {
    /// The member's task ended before the release finished (it panicked or
    /// the store's event stream ended).
    #[error("the member's task ended before it could close")]
    TaskGone,
    /// [`GroupMember::close_within`]: the close did not finish in time;
    /// the member was stopped like a crash (its claims stay until its
    /// session expires).
    #[error("the close did not finish within {limit:?}; the member was stopped")]
    TimedOut {
        /// The time it was given.
        limit: std::time::Duration,
    },
}

enum Input {
    Processed(TopicPartition, FencingToken, Offset),
    Drained(TopicPartition, FencingToken),
    Counts(PartitionCounts),
    Commit(oneshot::Sender<CommitReport>),
    SetPaused(TopicPartition, bool, oneshot::Sender<()>),
    Seek(TopicPartition, FencingToken, Offset, oneshot::Sender<bool>),
    Close(oneshot::Sender<CommitReport>),
    #[cfg(feature = "testing")]
    Freeze(std::time::Duration),
}

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

/// The final commits of a static member's close that leaves its session
/// (`None` if the task answering them is gone).
async fn detached(report: &mut Option<oneshot::Receiver<CommitReport>>) -> Option<CommitReport> {
    match report.as_mut() {
        Some(report) => report.await.ok(),
        None => std::future::pending().await,
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

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
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

/// A [`GroupMember::commit`] call waiting for the store's answers.
struct CommitWaiter {
    reply: oneshot::Sender<CommitReport>,
    waiting: BTreeSet<TopicPartition>,
    report: CommitReport,
}

struct Driver {
    member: Member,
    backend: Box<dyn Backend>,
    store: mpsc::UnboundedReceiver<Event>,
    inputs: mpsc::UnboundedReceiver<Input>,
    events: EventSender,
    errors: ProblemSender,
    view: watch::Sender<View>,
    /// The member's deadline for handing out messages, for the data
    /// plane's batches (see [`crate::kafka`]'s `Lease`).
    lease: watch::Sender<Option<Instant>>,
    /// The claims the application may hear of, for [`Events`].
    claims: HeldClaims,
    closing: Vec<oneshot::Sender<CommitReport>>,
    /// Commits sent and not answered yet: the offset of each partition's.
    commits_in_flight: BTreeMap<TopicPartition, Offset>,
    /// [`GroupMember::commit`] calls not answered yet, each with the
    /// commits it waits for and what became of those answered.
    commit_waiters: Vec<CommitWaiter>,
    /// [`GroupMember::commit`] calls whose commits go out in this step.
    commit_requests: Vec<oneshot::Sender<CommitReport>>,
    /// Every commit outcome since the close began, for its report.
    close_report: Option<CommitReport>,
    /// Partitions told to stop whose drain the application has not
    /// reported yet (without Kafka, where the application reports drains).
    awaiting_drain: BTreeMap<TopicPartition, FencingToken>,
    auto_drain: bool,
    view_log: Option<mpsc::UnboundedSender<(MemberId, View)>>,
    data: Option<DataPlane>,
    telemetry: Telemetry,
    /// Static membership: the locked state file, where every session the
    /// backend opens is kept.
    state: Option<StateFile>,
    /// Whether a close leaves the group (always, for a dynamic member)
    /// rather than leave the session to run out.
    leave_on_close: bool,
    /// A static member's close that leaves its session: the final commits'
    /// report, once the store answered them.
    detaching: Option<oneshot::Receiver<CommitReport>>,
}

impl Driver {
    /// Feeds what the store said to the core.
    fn handle(&mut self, event: Event) {
        self.telemetry.on_event();
        let established = matches!(event, Event::SessionEstablished { .. });
        self.member.handle_event(now(), event);
        if established {
            self.keep_session();
        }
    }

    /// Static membership: writes the backend's new session to the state
    /// file, for a restarted process to resume.
    fn keep_session(&mut self) {
        let Some(state) = self.state.as_mut() else {
            return;
        };
        let Some(ticket) = self.backend.ticket() else {
            return;
        };
        if let Err(error) = state.save(&ticket) {
            tracing::warn!(member = %self.member.id(), %error, "static membership");
            self.report(Problem::StateFile(Arc::new(error)));
        }
    }

    /// The application (or the data plane) has processed `partition` up
    /// to `offset`: the hot path, which the telemetry does not watch.
    fn processed(&mut self, partition: TopicPartition, token: FencingToken, offset: Offset) {
        self.member.processed(now(), &partition, token, offset);
    }

    /// The application has let go of every message of `partition`.
    fn drained(&mut self, partition: TopicPartition, token: FencingToken) {
        if self.awaiting_drain.get(&partition) == Some(&token) {
            self.awaiting_drain.remove(&partition);
        }
        let now = now();
        self.telemetry.on_drained(&partition, token, now);
        self.member.drained(now, &partition, token);
    }

    fn set_partition_counts(&mut self, counts: PartitionCounts) {
        self.telemetry.on_event();
        self.member.set_partition_counts(now(), counts);
    }

    async fn run(mut self) {
        loop {
            let deadline = self.carry_out();
            if self.member.is_closed() {
                if let Some(data) = self.data.as_mut() {
                    data.shutdown();
                }
                self.backend.shutdown().await;
                let report = self.close_report.take().unwrap_or_default();
                for done in self.closing.drain(..) {
                    let _ = done.send(report.clone());
                }
                return;
            }
            tokio::select! {
                event = self.store.recv() => match event {
                    Some(event) => self.handle(event),
                    None => {
                        tracing::error!(member = %self.member.id(), "the backend's event stream ended");
                        return;
                    }
                },
                input = self.inputs.recv() => match input {
                    Some(Input::Processed(partition, token, offset)) => {
                        self.processed(partition, token, offset);
                    }
                    Some(Input::Drained(partition, token)) => self.drained(partition, token),
                    Some(Input::Counts(counts)) => self.set_partition_counts(counts),
                    #[cfg(feature = "testing")]
                    Some(Input::Freeze(length)) => tokio::time::sleep(length).await,
                    Some(Input::SetPaused(partition, paused, done)) => {
                        if let Some(data) = self.data.as_mut() {
                            data.set_paused(&partition, paused);
                        }
                        let _ = done.send(());
                    }
                    Some(Input::Seek(partition, token, offset, done)) => {
                        let moved = self
                            .data
                            .as_mut()
                            .is_some_and(|data| data.seek(&partition, token, offset));
                        // A forward move counts as processed: tell the core.
                        if moved {
                            if let Some(data) = self.data.as_mut() {
                                for event in data.flush() {
                                    self.on_data(event);
                                }
                            }
                        }
                        let _ = done.send(moved);
                    }
                    Some(Input::Commit(reply)) => {
                        // What the application acknowledged, not only what
                        // the data plane reported so far.
                        if let Some(data) = self.data.as_mut() {
                            for event in data.flush() {
                                self.on_data(event);
                            }
                        }
                        self.member.commit_now(now());
                        self.commit_requests.push(reply);
                    }
                    Some(Input::Close(done)) if !self.leave_on_close => {
                        // Static membership: commit what was acknowledged,
                        // stop fetching, and leave the session (and every
                        // claim under it) to the next process.
                        self.closing.push(done);
                        if self.detaching.is_none() {
                            let flushed = self.data.as_mut().map(DataPlane::flush);
                            for event in flushed.into_iter().flatten() {
                                self.on_data(event);
                            }
                            if let Some(data) = self.data.as_mut() {
                                data.shutdown();
                            }
                            let (reply, report) = oneshot::channel();
                            self.member.commit_now(now());
                            self.commit_requests.push(reply);
                            self.detaching = Some(report);
                        }
                    }
                    Some(Input::Close(done)) => {
                        self.closing.push(done);
                        self.close_report.get_or_insert_with(CommitReport::default);
                        self.telemetry.on_event();
                        self.member.shutdown(now());
                        if self.data.is_none() {
                            // A closing application without Kafka holds
                            // nothing: drains it has not reported are done.
                            self.auto_drain = true;
                            for (partition, token) in std::mem::take(&mut self.awaiting_drain) {
                                self.drained(partition, token);
                            }
                        }
                    }
                    // The handle is gone without closing: stop like a crash.
                    None => return,
                },
                _ = sleep_until(deadline), if deadline.is_some() => {
                    self.member.handle_timeout(now());
                }
                report = detached(&mut self.detaching), if self.detaching.is_some() => {
                    self.backend.detach().await;
                    let report = report.unwrap_or_default();
                    for done in self.closing.drain(..) {
                        let _ = done.send(report.clone());
                    }
                    return;
                }
                event = next_data(&mut self.data), if self.data.is_some() => match event {
                    Some(event) => self.on_data(event),
                    None => self.data = None,
                },
                // The application made room: what waited goes out.
                () = self.events.room(), if self.events.has_overflow() => self.events.flush(),
                () = self.errors.room(), if self.errors.has_dropped() => {
                    self.errors.report_dropped();
                }
            }
        }
    }

    fn on_data(&mut self, event: DataEvent) {
        match event {
            DataEvent::Processed(partition, token, offset) => {
                self.processed(partition, token, offset);
            }
            DataEvent::Drained(partition, token) => self.drained(partition, token),
            DataEvent::Counts(counts) => self.set_partition_counts(counts),
            DataEvent::HighWatermark(partition, token, end) => {
                self.telemetry.on_high_watermark(&partition, token, end);
            }
            DataEvent::Problem(problem) => {
                tracing::warn!(member = %self.member.id(), %problem, "kafka");
                self.report(Problem::Kafka(problem));
            }
        }
    }

    /// Carries out everything the member decided, in the order it decided
    /// it (a stop reaches the fetcher and the application before the
    /// release or claim that follows it reaches the store), and returns
    /// when its next timer is due.
    fn carry_out(&mut self) -> Option<Instant> {
        let deadline = loop {
            match self.member.poll_output() {
                Output::Fetch(command) => self.fetch(command),
                Output::Store(command) => {
                    self.telemetry.on_command(&command, now());
                    self.backend.submit(command);
                }
                Output::App(event) => self.app_event(event),
                Output::Timeout(deadline) => break deadline,
                other => {
                    tracing::error!(member = %self.member.id(), ?other, "an output this runtime does not know");
                }
            }
        };
        self.wait_for_commits();
        self.publish();
        deadline
    }

    fn app_event(&mut self, event: AppEvent) {
        self.telemetry.on_app_event(&event, now());
        self.track_commit(&event);
        match event {
            AppEvent::Released { partition, token } | AppEvent::Lost { partition, token } => {
                self.claims.ended(&partition, token);
                self.tell(AssignmentEvent::Revoked { partition, token });
            }
            AppEvent::Problem(error) => {
                tracing::warn!(member = %self.member.id(), %error, "reported");
                self.report(Problem::Coordination(error));
            }
            _ => {}
        }
    }

    fn fetch(&mut self, command: FetchCommand) {
        self.telemetry.on_fetch(&command, now());
        match command {
            FetchCommand::Start {
                partition,
                from,
                token,
            } => {
                if let Some(data) = self.data.as_mut() {
                    data.start(partition.clone(), from, token);
                }
                self.claims.started(&partition, token);
                self.tell(AssignmentEvent::Assigned {
                    partition,
                    from,
                    token,
                });
            }
            // The data plane hands out nothing past the member's deadline
            // already: nothing to stop, nothing to drain, nothing to fetch
            // again.
            FetchCommand::Suspend { partition, token } => {
                let until = self.member.consume_deadline();
                self.tell(AssignmentEvent::Suspended {
                    partition,
                    token,
                    until,
                });
            }
            FetchCommand::Resume { partition, token } => {
                self.tell(AssignmentEvent::Resumed { partition, token });
            }
            FetchCommand::Stop { partition, token } => {
                self.tell(AssignmentEvent::Revoking {
                    partition: partition.clone(),
                    token,
                });
                // The view says it stopped before anything that follows
                // (the release) can reach the store.
                self.publish();
                match self.data.as_mut() {
                    // What the application still holds decides.
                    Some(data) => {
                        data.stop(&partition, token);
                        for event in data.flush() {
                            self.on_data(event);
                        }
                    }
                    None if self.auto_drain => self.drained(partition, token),
                    None => {
                        self.awaiting_drain.insert(partition, token);
                    }
                }
            }
        }
    }

    /// Tells the application of a problem, and counts it.
    fn report(&mut self, problem: Problem) {
        let delivered = self.errors.send(problem);
        self.telemetry.on_problem(delivered);
    }

    /// Logs an assignment change and tells the application.
    fn tell(&mut self, change: AssignmentEvent) {
        tracing::info!(member = %self.member.id(), ?change, "assignment");
        self.events.send(change);
    }

    /// Follows the commits in flight and what became of them, for the
    /// commit and close reports.
    fn track_commit(&mut self, event: &AppEvent) {
        let (partition, outcome) = match event {
            AppEvent::Committing {
                partition, offset, ..
            } => {
                self.commits_in_flight.insert(partition.clone(), *offset);
                return;
            }
            AppEvent::Committed {
                partition, offset, ..
            } => (partition, CommitOutcome::Written { offset: *offset }),
            AppEvent::CommitFenced {
                partition, offset, ..
            } => (partition, CommitOutcome::Fenced { offset: *offset }),
            AppEvent::CommitFailed {
                partition,
                offset,
                error,
                ..
            } => (
                partition,
                CommitOutcome::Failed {
                    offset: *offset,
                    error: error.clone(),
                },
            ),
            // A commit still in flight when the claim ends is never
            // answered to the member.
            AppEvent::Lost { partition, .. } | AppEvent::Released { partition, .. } => {
                match self.commits_in_flight.get(partition) {
                    Some(&offset) => (partition, CommitOutcome::Abandoned { offset }),
                    None => return,
                }
            }
            _ => return,
        };
        self.commits_in_flight.remove(partition);
        if let Some(report) = self.close_report.as_mut() {
            report.commits.insert(partition.clone(), outcome.clone());
        }
        for waiter in &mut self.commit_waiters {
            if waiter.waiting.remove(partition) {
                waiter
                    .report
                    .commits
                    .insert(partition.clone(), outcome.clone());
            }
        }
        self.answer_commit_waiters();
    }

    /// Starts waiting for the commits in flight now, for the commit calls
    /// of this step; answers those with nothing to wait for.
    fn wait_for_commits(&mut self) {
        for reply in std::mem::take(&mut self.commit_requests) {
            self.commit_waiters.push(CommitWaiter {
                reply,
                waiting: self.commits_in_flight.keys().cloned().collect(),
                report: CommitReport::default(),
            });
        }
        self.answer_commit_waiters();
    }

    fn answer_commit_waiters(&mut self) {
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.commit_waiters)
            .into_iter()
            .partition(|waiter| waiter.waiting.is_empty());
        self.commit_waiters = waiting;
        for waiter in done {
            let _ = waiter.reply.send(waiter.report);
        }
    }

    /// Refreshes the view, and the deadline the data plane checks at every
    /// hand-out (sent even unchanged: a batch waiting on it then looks
    /// again whether its partition stopped).
    fn publish(&mut self) {
        self.lease.send_replace(self.member.consume_deadline());
        self.telemetry.on_published(&self.member, now());
        let view = View {
            session: self.member.session(),
            registered: self.member.is_registered(),
            assigned: self.member.assigned().clone(),
            owned: self.member.owned().map(|(p, t)| (p.clone(), t)).collect(),
            fetching: self.member.fetching().map(|(p, _)| p.clone()).collect(),
            settled: self.member.is_settled(),
            closed: self.member.is_closed(),
            at: Some(now()),
        };
        let log = self.view_log.as_ref();
        let id = self.member.id();
        self.view.send_if_modified(|current| {
            // Compared in place: a copy of the view to compare cost as
            // much as building it, at every step of every member.
            let same = view.same_as(current);
            if !same {
                if let Some(log) = log {
                    let _ = log.send((id.clone(), view.clone()));
                }
                *current = view;
            }
            !same
        });
    }
}

async fn next_data(data: &mut Option<DataPlane>) -> Option<DataEvent> {
    match data {
        Some(data) => data.next().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}
