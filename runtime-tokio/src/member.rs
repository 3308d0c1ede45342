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
use tenure_core::SessionId;
use tenure_kafka::{
    self as kafka, DataPlane, Delivery, GroupQueues, KafkaConfig, LogOffsets, Message,
    PartitionStream, StartOffsets,
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
    registration_wait: Option<std::time::Duration>,
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
    /// skipped, to `log` (for monitors and tests; [`MemberHandle::watch_view`]
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
    /// yet is reported on [`MemberStreams::errors`] and waited for.
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
        (self.config.group(), self.config.member())
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
    /// first fetch of the claim; `Ok(None)` from it starts where the member
    /// would (the committed offset, or the initial-offset policy). The
    /// claim's fencing token comes with it, to fence what the application
    /// writes with the offset.
    ///
    /// An error (its database is down, say) is reported as
    /// [`Problem::StartOffset`] and the question asked again after a pause
    /// (100 ms, doubling up to 5 s) for as long as the claim holds; nothing
    /// of the partition is fetched until it answers. It is never replaced
    /// by the store's offset: for an application that keeps its offsets
    /// with its output, that would be the wrong place to start.
    pub fn start_offsets<F, Fut, E>(mut self, start_offset: F) -> Self
    where
        F: Fn(TopicPartition, FencingToken) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<Option<Offset>, E>> + Send + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.start_offsets = Some(Arc::new(move |partition, token| {
            let answer = start_offset(partition, token);
            Box::pin(async move {
                answer
                    .await
                    .map_err(|error| -> tenure_kafka::StartOffsetError { Arc::from(error.into()) })
            })
        }));
        self
    }

    /// How long [`GroupMemberBuilder::join`] waits for a registration of
    /// this member id held by another session to go before it fails with
    /// [`JoinError::MemberIdInUse`]. A previous process of this id that
    /// died leaves its registration until its session expires, so the
    /// wait must outlast a session. Default: twice the session timeout.
    /// Static members resume their own session and do not wait.
    pub fn registration_wait(mut self, wait: std::time::Duration) -> Self {
        self.registration_wait = Some(wait);
        self
    }

    /// Whether the runtime reports a stopped partition drained at once,
    /// for applications that finish each message before taking the next
    /// event (default: no, the application calls [`MemberHandle::drained`]).
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
            .unwrap_or_else(|| default_seed(self.config.member().as_str()));
        self.config.validate()?;
        // Kafka first: an unknown topic or a dead broker is reported before
        // the member takes any partition.
        let mut counts = self.counts;
        let mut messages = None;
        let mut streams = None;
        let mut data = None;
        let mut kafka_client = None;
        let (lease_tx, lease_rx) = watch::channel(None);
        if let Some(kafka_config) = self.kafka {
            let client = kafka::connect(&kafka_config).await?;
            kafka_client = Some(client.clone());
            let subscribed =
                kafka::subscribed_topics(&client, &kafka_config, self.config.subscription())
                    .await?;
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
                self.config.initial_offset(),
                self.config.subscription().clone(),
                subscribed,
                delivery,
                lease_rx.clone(),
            );
            if let Some(start_offsets) = self.start_offsets {
                plane.set_start_offsets(start_offsets);
            }
            data = Some(plane);
        }
        let registration_wait = self
            .registration_wait
            .unwrap_or(self.config.session_timeout() * 2);
        let member = Member::new(self.config, seed, now())?;
        let id = member.id().clone();
        let group = member.config().group().to_owned();
        if let Some(plane) = &mut data {
            plane.set_metric_labels(group.as_str(), id.as_str());
        }
        let (store_tx, store_rx) = mpsc::unbounded_channel();
        let mut joining = Joining::new(
            group.as_str(),
            member.info().clone(),
            member.config().session_timeout(),
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
                member.config().session_timeout(),
            )
            .await?;
            joining = joining.static_membership(file.ticket());
            leave_on_close = membership.leaves_on_close();
            state = Some(file);
        }
        let is_static = state.is_some();
        backend.start(joining).await?;
        let (input_tx, input_rx) = mpsc::unbounded_channel();
        let claims = HeldClaims::default();
        let (end_tx, end_rx) = watch::channel(None);
        let ((events_tx, events_rx), (errors_tx, errors_rx)) =
            streams::channels(lease_rx.clone(), claims.clone(), end_rx.clone());
        let (view_tx, view_rx) = watch::channel(View::default());
        let (taken_tx, taken_rx) = watch::channel(None);
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
            registration_taken: taken_tx,
            published: None,
            leaving: None,
        };
        let task = tokio::spawn(
            async move {
                let mut end = EndGuard {
                    sender: end_tx,
                    end: None,
                };
                end.end = Some(driver.run().await);
            }
            .instrument(telemetry::member_span(&group, &id)),
        );
        let mut handle = MemberHandle {
            id,
            inputs: input_tx,
            view: view_rx,
            task: Some(task),
            kafka: kafka_client,
            end: end_rx,
        };
        if !is_static {
            if let Err(error) = handle.registered(taken_rx, registration_wait).await {
                handle.stop();
                return Err(error);
            }
        }
        Ok(GroupMember {
            handle,
            streams: MemberStreams {
                messages: messages.map(|interleaved| Messages::group(Some(interleaved))),
                partition_streams: streams.map(|rx| PartitionStreams::new(Some(rx))),
                events: events_rx,
                errors: errors_rx,
            },
        })
    }
}

/// Sets why the member's task ended when it ends, however it ends: as the
/// task returned, or — dropped unfinished — killed, or panicking.
struct EndGuard {
    sender: watch::Sender<Option<MemberEnd>>,
    end: Option<MemberEnd>,
}

impl Drop for EndGuard {
    fn drop(&mut self) {
        let end = self.end.take().unwrap_or(if std::thread::panicking() {
            MemberEnd::Panicked
        } else {
            MemberEnd::Killed
        });
        self.sender.send_replace(Some(end));
    }
}

/// A member id for this process: the host's name, the process id and a
/// random part ([`MemberId::from_parts`]), so that two processes — on one
/// host or on several, or one restarted — never share one by accident.
/// A member whose identity must survive restarts (a static member) names
/// itself instead.
pub fn generate_member_id() -> MemberId {
    let host = crate::backend::hostname().unwrap_or_default();
    let nonce = default_seed(&host) ^ u64::from(std::process::id()).rotate_left(32);
    // Mixed so that seeds a nanosecond apart share no digit.
    let mut rng = tenure_core::rng::SplitMix64::new(nonce);
    MemberId::from_parts(&host, std::process::id(), rng.next_u64() as u32)
}

fn default_seed(member: &str) -> u64 {
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    member.bytes().fold(clock, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// A member of a group, running on tokio: the handle that controls it
/// ([`MemberHandle`], whose methods it has) together with the streams of
/// what it hands the application ([`MemberStreams`]).
///
/// For one loop that waits on several streams at once (`tokio::select!`),
/// take it apart with [`GroupMember::split`]; for a test or a script, its
/// `next_*` methods read the streams in place.
///
/// Dropping it without [`MemberHandle::close`] stops it like a crash (its
/// claims stay until its session expires), and says so in a warning.
#[must_use = "a member does its work in the background; close it to leave the group cleanly"]
#[derive(Debug)]
pub struct GroupMember {
    handle: MemberHandle,
    streams: MemberStreams,
}

/// What a member hands its application, as streams that each live apart
/// from the member and from each other, for one `tokio::select!`.
#[derive(Debug)]
#[non_exhaustive]
pub struct MemberStreams {
    /// The messages of every owned partition: `Some` for a member built
    /// with Kafka ([`GroupMemberBuilder::kafka`]) and without
    /// per-partition streams.
    pub messages: Option<Messages>,
    /// The stream of each partition as the member starts consuming it:
    /// `Some` for a member built with
    /// [`GroupMemberBuilder::per_partition_streams`].
    pub partition_streams: Option<PartitionStreams>,
    /// The changes in what the member consumes.
    pub events: Events,
    /// The problems it reports; if the member ends on its own, the last
    /// one says why ([`Problem::Ended`]).
    pub errors: Errors,
}

/// Controls a running member: acknowledges, seeks, pauses, looks up
/// positions and offsets, commits, closes. Every method takes `&self`
/// (except those that end the member), so it can sit beside the
/// [`MemberStreams`] in one loop.
///
/// Dropping it without [`MemberHandle::close`] stops the member like a
/// crash (its claims stay until its session expires), and logs a warning
/// that says so; [`MemberHandle::kill`] does the same on purpose, without
/// the warning.
#[must_use = "a member does its work in the background; close it to leave the group cleanly"]
#[derive(Debug)]
pub struct MemberHandle {
    id: MemberId,
    inputs: mpsc::UnboundedSender<Input>,
    view: watch::Receiver<View>,
    task: Option<JoinHandle<()>>,
    /// The member's own Kafka connection, for lookups.
    kafka: Option<Arc<kafka::KafkaClient>>,
    end: watch::Receiver<Option<MemberEnd>>,
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
            registration_wait: None,
        }
    }

    /// Takes the member apart: the handle that controls it, and its
    /// streams, each of which can be moved and polled on its own.
    ///
    /// ```no_run
    /// # async fn run(member: tenure_tokio::GroupMember) -> Result<(), Box<dyn std::error::Error>> {
    /// let (member, streams) = member.split();
    /// let mut messages = streams.messages.expect("built with .kafka(...)");
    /// let mut errors = streams.errors;
    /// loop {
    ///     tokio::select! {
    ///         Some(message) = messages.next() => message.ack(),
    ///         Some(problem) = errors.next() => eprintln!("{problem}"),
    ///         else => break, // the member ended; the last problem said why
    ///     }
    /// }
    /// let report = member.close().await?;
    /// # let _ = report;
    /// # Ok(()) }
    /// ```
    pub fn split(self) -> (MemberHandle, MemberStreams) {
        (self.handle, self.streams)
    }

    /// The next change in what this member consumes (`None` once the
    /// member has ended).
    pub async fn next_event(&mut self) -> Option<AssignmentEvent> {
        self.streams.events.next().await
    }

    /// The next assignment change already waiting, without waiting.
    pub fn try_next_event(&mut self) -> Option<AssignmentEvent> {
        self.streams.events.try_next()
    }

    /// The next problem the member reported (it keeps working after each);
    /// `None` once the member has ended.
    pub async fn next_error(&mut self) -> Option<Problem> {
        self.streams.errors.next().await
    }

    /// The next reported problem already waiting, without waiting.
    pub fn try_next_error(&mut self) -> Option<Problem> {
        self.streams.errors.try_next()
    }

    /// With Kafka ([`GroupMemberBuilder::kafka`]): the next message of any
    /// owned partition. Acknowledge each with [`Message::ack`]. `None` once
    /// the member has ended; without Kafka, or with per-partition streams,
    /// at once (and a warning says why).
    pub async fn next_message(&mut self) -> Option<Message> {
        match self.streams.messages.as_mut() {
            Some(messages) => messages.next().await,
            None => {
                warn_no_stream(
                    &self.handle.id,
                    "messages",
                    "kafka(...), without per_partition_streams",
                );
                None
            }
        }
    }

    /// With Kafka and [`GroupMemberBuilder::per_partition_streams`]: the
    /// stream of the next partition this member starts consuming (`None`
    /// once the member has ended; otherwise at once, and a warning says
    /// why).
    pub async fn next_partition_stream(&mut self) -> Option<PartitionStream> {
        match self.streams.partition_streams.as_mut() {
            Some(streams) => streams.next().await,
            None => {
                warn_no_stream(
                    &self.handle.id,
                    "partition streams",
                    "kafka(...) and per_partition_streams(true)",
                );
                None
            }
        }
    }

    /// [`MemberHandle::close`].
    pub async fn close(self) -> Result<CommitReport, CloseError> {
        self.handle.close().await
    }

    /// [`MemberHandle::close_within`].
    pub async fn close_within(
        self,
        limit: std::time::Duration,
    ) -> Result<CommitReport, CloseError> {
        self.handle.close_within(limit).await
    }

    /// [`MemberHandle::kill`].
    pub fn kill(self) {
        self.handle.kill();
    }
}

impl std::ops::Deref for GroupMember {
    type Target = MemberHandle;

    fn deref(&self) -> &MemberHandle {
        &self.handle
    }
}

fn warn_no_stream(member: &MemberId, what: &str, needs: &str) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!(
            %member,
            "this member hands out no {what}: build it with GroupMemberBuilder::{needs}"
        );
    });
}

impl MemberHandle {
    /// This member's id.
    pub fn id(&self) -> &MemberId {
        &self.id
    }

    /// The member's current view of itself.
    pub fn view(&self) -> View {
        self.view.borrow().clone()
    }

    /// A receiver that sees every change of the view.
    pub fn watch_view(&self) -> watch::Receiver<View> {
        self.view.clone()
    }

    /// Waits until the member's task has ended, and says why. Fits in a
    /// `tokio::select!` beside the streams.
    pub async fn ended(&self) -> MemberEnd {
        let mut end = self.end.clone();
        let seen = match end.wait_for(Option::is_some).await {
            Ok(end) => end.clone(),
            // The sender goes with the task, after it set the reason.
            Err(_) => self.end.borrow().clone(),
        };
        seen.unwrap_or(MemberEnd::Killed)
    }

    /// Why the member's task ended, if it has.
    pub fn end_reason(&self) -> Option<MemberEnd> {
        self.end.borrow().clone()
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
    /// [`MemberHandle::resume`], keeping its claim; what was acknowledged is
    /// committed as usual. Once it returns, no message of `partition` is
    /// handed out. A partition owned and not fetched yet (claimed, its
    /// `Assigned` not told) starts paused; one this member does not own is
    /// left alone; a claim that ends while paused takes the pause with it
    /// (a partition assigned again starts unpaused).
    pub async fn pause(&self, partition: TopicPartition) -> Result<(), TaskGone> {
        self.ask(|done| Input::SetPaused(partition, true, done))
            .await
    }

    /// With Kafka: hands out a paused `partition` again, from the message
    /// after the last one handed out (nothing skipped, nothing twice).
    pub async fn resume(&self, partition: TopicPartition) -> Result<(), TaskGone> {
        self.ask(|done| Input::SetPaused(partition, false, done))
            .await
    }

    /// The partitions the application paused and has not resumed, each
    /// with the claim it was paused under.
    pub async fn paused(&self) -> Result<BTreeMap<TopicPartition, FencingToken>, TaskGone> {
        self.ask(Input::Paused).await
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
    ) -> Result<(), PartitionError> {
        if self.kafka.is_none() {
            return Err(PartitionError::NoKafka);
        }
        let target = partition.clone();
        match self
            .ask(|done| Input::Seek(target, token, offset, done))
            .await?
        {
            true => Ok(()),
            false => Err(PartitionError::NotOwned {
                partition,
                token: Some(token),
            }),
        }
    }

    /// With Kafka: [`MemberHandle::seek`] to the beginning of `partition`'s
    /// log, its end, the first message at or after a time (the end if
    /// every message is older), or an offset; the offset looked up on the
    /// member's own Kafka connection. Returns the offset it moved to.
    pub async fn seek_to(
        &self,
        partition: TopicPartition,
        token: FencingToken,
        to: SeekTo,
    ) -> Result<Offset, PartitionError> {
        let client = self.kafka.as_ref().ok_or(PartitionError::NoKafka)?;
        let offset = match to {
            SeekTo::Offset(offset) => offset,
            SeekTo::Beginning => kafka::lookup::log_offsets(client, &partition).await?.start,
            SeekTo::End => kafka::lookup::log_offsets(client, &partition).await?.end,
            SeekTo::Time(time) => {
                match kafka::lookup::offset_for_time(client, &partition, time).await? {
                    Some(offset) => offset,
                    None => kafka::lookup::log_offsets(client, &partition).await?.end,
                }
            }
        };
        self.seek(partition, token, offset).await?;
        Ok(offset)
    }

    /// With Kafka: the offset of the next message of `partition` this
    /// member will hand out (Kafka's `position`), and the claim it is
    /// consumed under; `None` in it while the partition's fetch has not
    /// found where it starts (its committed offset or the initial-offset
    /// policy is being read). [`PartitionError::NotOwned`] if this member
    /// does not consume it.
    pub async fn position(
        &self,
        partition: &TopicPartition,
    ) -> Result<(FencingToken, Option<Offset>), PartitionError> {
        if self.kafka.is_none() {
            return Err(PartitionError::NoKafka);
        }
        let target = partition.clone();
        self.ask(|done| Input::Position(target, done))
            .await?
            .ok_or_else(|| PartitionError::NotOwned {
                partition: partition.clone(),
                token: None,
            })
    }

    /// The offset the store holds as committed for `partition` (the next
    /// offset to consume), as this member knows it under its claim: read
    /// when the claim took effect and moved by every commit since, all
    /// fenced by the claim, so no other member's write is in it. `None` in
    /// it if nothing is committed (or the member keeps no offsets in the
    /// store). [`PartitionError::NotOwned`] if this member does not own
    /// the partition: the offsets of partitions owned elsewhere are the
    /// operator's tooling's to read (`tenure describe`).
    pub async fn committed(
        &self,
        partition: &TopicPartition,
    ) -> Result<(FencingToken, Option<Offset>), PartitionError> {
        let target = partition.clone();
        self.ask(|done| Input::Committed(target, done))
            .await?
            .ok_or_else(|| PartitionError::NotOwned {
                partition: partition.clone(),
                token: None,
            })
    }

    /// With Kafka: the bounds of `partition`'s log (its low and high
    /// watermarks), looked up on the member's own connection; any
    /// partition, owned or not.
    pub async fn watermarks(
        &self,
        partition: &TopicPartition,
    ) -> Result<LogOffsets, PartitionError> {
        let client = self.kafka.as_ref().ok_or(PartitionError::NoKafka)?;
        Ok(kafka::lookup::log_offsets(client, partition).await?)
    }

    /// With Kafka: how many messages of an owned `partition` are still to
    /// be handed out — its high watermark less this member's
    /// [`position`](MemberHandle::position) (`None` while the position is
    /// not known yet).
    pub async fn lag(&self, partition: &TopicPartition) -> Result<Option<i64>, PartitionError> {
        let (_, position) = self.position(partition).await?;
        let Some(position) = position else {
            return Ok(None);
        };
        let end = self.watermarks(partition).await?.end;
        Ok(Some((end - position).max(0)))
    }

    /// With Kafka: for each partition, the offset of its first message
    /// whose timestamp is at or after the time given (Kafka's
    /// `offsetsForTimes`), or `None` if every message is older; looked up
    /// on the member's own connection, for any partition, owned or not.
    pub async fn offsets_for_times(
        &self,
        times: impl IntoIterator<Item = (TopicPartition, std::time::SystemTime)>,
    ) -> Result<BTreeMap<TopicPartition, Option<Offset>>, PartitionError> {
        let client = self.kafka.as_ref().ok_or(PartitionError::NoKafka)?;
        let mut offsets = BTreeMap::new();
        for (partition, time) in times {
            let offset = kafka::lookup::offset_for_time(client, &partition, time).await?;
            offsets.insert(partition, offset);
        }
        Ok(offsets)
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

    /// Waits until the member is registered, or fails if its id stays
    /// registered under another session for `wait`. Registration that is
    /// slow for any other reason (a store that does not answer) does not
    /// fail the join: the member goes on trying in the background.
    async fn registered(
        &mut self,
        mut taken: watch::Receiver<Option<SessionId>>,
        wait: std::time::Duration,
    ) -> Result<(), JoinError> {
        let started = tokio::time::Instant::now();
        let mut view = self.view.clone();
        let mut end = self.end.clone();
        tokio::select! {
            seen = view.wait_for(|view| view.registered || view.closed) => {
                if seen.is_ok() {
                    return Ok(());
                }
                // The view's sender went with the task.
                let reason = self.end.borrow().clone().unwrap_or(MemberEnd::Killed);
                Err(JoinError::Ended(reason))
            }
            ended = end.wait_for(Option::is_some) => {
                let reason = ended.ok().and_then(|end| end.clone()).unwrap_or(MemberEnd::Killed);
                Err(JoinError::Ended(reason))
            }
            () = tokio::time::sleep(wait) => match *taken.borrow_and_update() {
                Some(session) => Err(JoinError::MemberIdInUse {
                    member: self.id.clone(),
                    session,
                    waited: started.elapsed(),
                }),
                None => Ok(()),
            },
        }
    }

    /// Leaves the group: stops every partition, waits for the drains (with
    /// Kafka, until the application acknowledged what it holds; without,
    /// a closing application holds nothing, so drains not reported yet are
    /// taken as done), commits, releases every claim, deregisters and ends
    /// the session. Returns the final commits and what became of them:
    /// check it ([`CommitReport::all_written`]), a fenced final commit is
    /// only seen there.
    ///
    /// A message handed out but never acknowledged holds its partition's
    /// drain up to the processing timeout, and its offset is not committed.
    pub async fn close(mut self) -> Result<CommitReport, CloseError> {
        let (done_tx, done_rx) = oneshot::channel();
        if self.inputs.send(Input::Close(done_tx)).is_err() {
            self.task = None;
            return Err(CloseError::TaskGone);
        }
        let answer = done_rx.await;
        // The task ends by itself once it answered (or it is gone).
        let task = self.task.take();
        match answer {
            Ok(report) => Ok(report),
            Err(_) => {
                if let Some(task) = task {
                    let _ = task.await;
                }
                Err(CloseError::TaskGone)
            }
        }
    }

    /// [`MemberHandle::close`], given at most `limit`: past it the member is
    /// stopped like a crash and the close fails with
    /// [`CloseError::TimedOut`].
    pub async fn close_within(
        self,
        limit: std::time::Duration,
    ) -> Result<CommitReport, CloseError> {
        let abort = self.task.as_ref().map(JoinHandle::abort_handle);
        match tokio::time::timeout(limit, self.close()).await {
            Ok(closed) => closed,
            Err(_) => {
                // The close was cut short on purpose: no drop warning.
                if let Some(abort) = abort {
                    abort.abort();
                }
                Err(CloseError::TimedOut { limit })
            }
        }
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
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Drop for MemberHandle {
    fn drop(&mut self) {
        let Some(task) = self.task.take() else {
            return;
        };
        if !task.is_finished() {
            let held = self.view.borrow().owned.len();
            tracing::warn!(
                member = %self.id,
                claims = held,
                "a member was dropped without close(): it stops like a crash, and its {held} \
                 claimed partition(s) stay claimed — unconsumed — until its session expires; \
                 call close() (or kill() to mean it)"
            );
        }
        task.abort();
    }
}
