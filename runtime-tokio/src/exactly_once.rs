//! Exactly-once output into a transactional store, fenced by the claim's
//! token.
//!
//! Kafka's committed offsets give at-least-once: a message processed but
//! not yet committed when its partition moves is processed again. An
//! application that writes its output to a database can do better, by
//! keeping each partition's next offset in that database and writing it in
//! the same transaction as the output (Kafka's "external offsets"). What
//! that pattern lacks on its own is a fence: a member paused past its
//! session, or cut off from the coordination store, still holds a batch it
//! will write when it wakes, after the partition's next owner has started
//! from the same offset. tenure's fencing token closes that gap:
//!
//! 1. When a claim starts, [`TransactionalSink::fence`] records its token
//!    as the partition's newest claim in the database, unless a newer one
//!    is recorded there already, and returns the partition's stored next
//!    offset: consumption starts there.
//! 2. Each batch is written by [`TransactionalSink::write`] in one
//!    transaction with the partition's new next offset, and only if the
//!    stored token is not newer than the batch's. A refused write is
//!    reported as fenced ([`Report::Fenced`]) and the batch is dropped, not
//!    retried: its claim is stale, and the newer one consumes those
//!    messages itself.
//!
//! Because the fence at 1 runs in the database, before the new owner reads
//! the offset, an old owner's write either commits before it (and the new
//! owner starts after that write) or is refused. A batch is acknowledged
//! to the member only once its transaction committed, so the coordination
//! store's committed offset never runs ahead of the database's.
//!
//! [`ExactlyOnce`] drives a [`crate::GroupMember`] this way: one writer per
//! owned partition, batches of what has arrived (up to
//! [`ExactlyOnceBuilder::max_batch`] messages), a failed write retried with
//! backoff while the claim holds. `tenure-postgres` implements the sink
//! for PostgreSQL; any store with transactions and a row lock can.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;
use tenure_core::{FencingToken, Offset, TopicPartition};
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};

use crate::backend::Backend;
use crate::member::{GroupMemberBuilder, MemberHandle};
use crate::streams::CountingSender;
use crate::streams::PartitionStreams;
use crate::telemetry::SinkMetrics;
use crate::values::{CloseError, CommitReport, JoinError, View};
use tenure_kafka::{Message, PartitionStream};

/// How many reports wait for the application before further ones are
/// dropped and counted (see [`Reports`]).
pub const REPORTS_CAPACITY: usize = 256;

/// A store that keeps a partition's output and its next offset together,
/// and writes both in one transaction.
///
/// An implementation keeps, per partition, the next offset to consume and
/// the newest fencing token that fenced or wrote it, and serialises
/// [`fence`](TransactionalSink::fence) and
/// [`write`](TransactionalSink::write) of one partition (a row lock does).
#[async_trait::async_trait]
pub trait TransactionalSink: Send + Sync + 'static {
    /// What goes wrong in the store.
    type Error: std::error::Error + Send + Sync + 'static;

    /// In one transaction: if the stored token of `partition` is not newer
    /// than `token`, stores `token` and returns [`Fence::Held`] with the
    /// stored next offset; otherwise changes nothing and returns
    /// [`Fence::Newer`]. A partition never seen has no next offset and is
    /// recorded with `token`.
    async fn fence(
        &self,
        partition: &TopicPartition,
        token: FencingToken,
    ) -> Result<Fence, Self::Error>;

    /// In one transaction: if the stored token of `partition` is not newer
    /// than `token`, writes the output of the messages of `batch` whose
    /// offset is at or past the stored next offset (those below it are
    /// written already: a retry after a commit of unknown outcome writes
    /// nothing twice), and stores the offset after the batch's last message
    /// as the next offset and `token` as the token; otherwise writes
    /// nothing and returns [`Written::Fenced`]. `batch` is in offset order,
    /// never empty, all of `partition` under `token`.
    async fn write(
        &self,
        partition: &TopicPartition,
        token: FencingToken,
        batch: &[Message],
    ) -> Result<Written, Self::Error>;
}

/// What fencing a partition found in the sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fence {
    /// The sink now records this claim as the partition's newest: output
    /// resumes at `next_offset` (`None`: nothing written yet, start where
    /// the member would).
    Held {
        /// The stored next offset.
        next_offset: Option<Offset>,
    },
    /// A newer claim has fenced or written the partition: this one must
    /// not write.
    Newer {
        /// The newer token stored.
        stored: FencingToken,
        /// The stored next offset.
        next_offset: Option<Offset>,
    },
}

/// What became of one batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Written {
    /// Committed, with the partition's next offset.
    Applied {
        /// The next offset stored.
        next_offset: Offset,
        /// How many of the batch's messages were written (those below the
        /// stored next offset were written already).
        written: usize,
    },
    /// Refused: a newer claim has fenced or written the partition. Nothing
    /// was written.
    Fenced {
        /// The newer token stored.
        stored: FencingToken,
    },
}

/// Where a sink's operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stage {
    /// Fencing a newly claimed partition: its fetch waits until it works.
    Fence,
    /// Writing a batch: it is retried while the claim holds.
    Write,
}

/// What the exactly-once writers report to the application.
#[derive(Debug)]
#[non_exhaustive]
pub enum Report<E> {
    /// The sink refused this claim: a newer one has fenced or written the
    /// partition. `dropped` messages were handed out and not written (0
    /// when the claim was refused as it started); no message of the claim
    /// is written from now on, and none is acknowledged, so the member's
    /// committed offset stays where the sink's is.
    Fenced {
        /// The partition.
        partition: TopicPartition,
        /// The refused claim.
        token: FencingToken,
        /// The newer token the sink holds.
        stored: FencingToken,
        /// Messages of the refused batch.
        dropped: usize,
    },
    /// The sink failed (unreachable, an error of the store, bad data in
    /// it). Fencing is retried until it works or the claim ends; a write is
    /// retried while the claim holds (after that the next owner consumes
    /// the batch from the sink's offset). Nothing is acknowledged that was
    /// not written.
    Failed {
        /// The partition.
        partition: TopicPartition,
        /// The claim.
        token: FencingToken,
        /// What was being done.
        stage: Stage,
        /// Attempts that failed in a row.
        attempt: u32,
        /// What the sink said.
        error: E,
    },
    /// Reports the application did not read in time were dropped.
    Dropped {
        /// How many.
        count: u64,
    },
}

/// The reports of the exactly-once writers, a [`futures_core::Stream`].
///
/// Overflow rule: when [`REPORTS_CAPACITY`] reports wait unread, further
/// ones are dropped and counted, and the next one the application can
/// receive is [`Report::Dropped`] with the count. The counts in
/// [`ExactlyOnce::stats`] are never dropped.
#[derive(Debug)]
pub struct Reports<E> {
    receiver: mpsc::Receiver<Report<E>>,
}

impl<E> Reports<E> {
    /// The next report (`None` once the writers are gone).
    pub async fn next(&mut self) -> Option<Report<E>> {
        self.receiver.recv().await
    }

    /// The next report already waiting, without waiting.
    pub fn try_next(&mut self) -> Option<Report<E>> {
        self.receiver.try_recv().ok()
    }
}

impl<E> futures_core::Stream for Reports<E> {
    type Item = Report<E>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Report<E>>> {
        self.receiver.poll_recv(cx)
    }
}

/// What the exactly-once writers did, counted since they started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExactlyOnceStats {
    /// Batches committed.
    pub batches_written: u64,
    /// Messages whose output was committed.
    pub messages_written: u64,
    /// Messages of committed batches that the sink held already (a retry
    /// after a commit of unknown outcome).
    pub messages_already_written: u64,
    /// Writes the sink refused because a newer claim had fenced the
    /// partition.
    pub fenced_writes: u64,
    /// Messages of those refused writes, dropped.
    pub fenced_messages: u64,
    /// Claims the sink refused as they started.
    pub fenced_claims: u64,
    /// Failed attempts to fence or write.
    pub failures: u64,
}

/// The counts of [`ExactlyOnceStats`], and the member's metrics of them:
/// one method per thing that happens, which moves both.
struct Counters {
    stats: Mutex<ExactlyOnceStats>,
    metrics: SinkMetrics,
}

impl Counters {
    fn new(metrics: SinkMetrics) -> Counters {
        Counters {
            stats: Mutex::new(ExactlyOnceStats::default()),
            metrics,
        }
    }

    fn stats(&self) -> std::sync::MutexGuard<'_, ExactlyOnceStats> {
        match self.stats.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// A batch of `messages` committed, `written` of them new.
    fn committed(&self, messages: usize, written: usize) {
        let mut stats = self.stats();
        stats.batches_written += 1;
        stats.messages_written += written as u64;
        stats.messages_already_written += messages.saturating_sub(written) as u64;
        self.metrics.messages.increment(written as u64);
    }

    /// A write of `messages` refused.
    fn write_fenced(&self, messages: usize) {
        let mut stats = self.stats();
        stats.fenced_writes += 1;
        stats.fenced_messages += messages as u64;
        self.metrics.writes_fenced.increment(1);
    }

    /// A claim refused as it started.
    fn claim_fenced(&self) {
        self.stats().fenced_claims += 1;
        self.metrics.claims_fenced.increment(1);
    }

    /// An attempt failed.
    fn failed(&self) {
        self.stats().failures += 1;
        self.metrics.failures.increment(1);
    }
}

/// How the writers work, and what they share.
struct Shared<S: TransactionalSink> {
    sink: S,
    max_batch: usize,
    first_backoff: Duration,
    max_backoff: Duration,
    counters: Counters,
    reports: Mutex<CountingSender<Report<S::Error>>>,
    /// Claims the sink refused as they started: their writers write
    /// nothing.
    refused: Mutex<BTreeSet<(TopicPartition, FencingToken)>>,
}

/// What a writer's attempts at one batch came to.
enum BatchEnd {
    Committed,
    Fenced,
    /// The claim ended while the write kept failing: the next owner
    /// consumes the batch from the sink's offset.
    ClaimEnded,
}

impl<S: TransactionalSink> Shared<S> {
    fn refused(&self) -> std::sync::MutexGuard<'_, BTreeSet<(TopicPartition, FencingToken)>> {
        match self.refused.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Sends `report` by the overflow rule of [`Reports`].
    fn report(&self, report: Report<S::Error>) {
        let mut reports = match self.reports.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        reports.send(report);
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.saturating_sub(1).min(16);
        self.first_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }

    /// Logs, counts and reports a failed attempt.
    fn failed(
        &self,
        partition: &TopicPartition,
        token: FencingToken,
        stage: Stage,
        attempt: u32,
        error: S::Error,
    ) {
        tracing::warn!(%partition, ?token, ?stage, attempt, %error, "the sink failed");
        self.counters.failed();
        self.report(Report::Failed {
            partition: partition.clone(),
            token,
            stage,
            attempt,
            error,
        });
    }

    /// Where a newly claimed partition starts: fences it in the sink,
    /// retrying until that works (the fetch waits; it is dropped with the
    /// claim if the claim ends first).
    async fn start(&self, partition: TopicPartition, token: FencingToken) -> Option<Offset> {
        let mut attempt = 0;
        loop {
            match self.sink.fence(&partition, token).await {
                Ok(Fence::Held { next_offset }) => return next_offset,
                Ok(Fence::Newer {
                    stored,
                    next_offset,
                }) => {
                    tracing::warn!(%partition, ?token, ?stored, "the sink holds a newer claim: nothing of this one is written");
                    self.counters.claim_fenced();
                    self.refused().insert((partition.clone(), token));
                    self.report(Report::Fenced {
                        partition,
                        token,
                        stored,
                        dropped: 0,
                    });
                    return next_offset;
                }
                Err(error) => {
                    attempt += 1;
                    self.failed(&partition, token, Stage::Fence, attempt, error);
                    tokio::time::sleep(self.backoff(attempt)).await;
                }
            }
        }
    }

    /// Writes one batch, retrying a failure while the claim holds.
    async fn write(
        &self,
        partition: &TopicPartition,
        token: FencingToken,
        batch: &[Message],
        view: &watch::Receiver<View>,
    ) -> BatchEnd {
        let mut attempt = 0;
        loop {
            match self.sink.write(partition, token, batch).await {
                Ok(Written::Applied { written, .. }) => {
                    self.counters.committed(batch.len(), written);
                    return BatchEnd::Committed;
                }
                Ok(Written::Fenced { stored }) => {
                    tracing::warn!(%partition, ?token, ?stored, dropped = batch.len(), "the sink refused a write of a stale claim");
                    self.counters.write_fenced(batch.len());
                    self.report(Report::Fenced {
                        partition: partition.clone(),
                        token,
                        stored,
                        dropped: batch.len(),
                    });
                    return BatchEnd::Fenced;
                }
                Err(error) => {
                    attempt += 1;
                    self.failed(partition, token, Stage::Write, attempt, error);
                    tokio::time::sleep(self.backoff(attempt)).await;
                    if !holds(view, partition, token) {
                        return BatchEnd::ClaimEnded;
                    }
                }
            }
        }
    }
}

/// Whether the member still owns `partition` under `token`.
fn holds(view: &watch::Receiver<View>, partition: &TopicPartition, token: FencingToken) -> bool {
    view.borrow().owned.get(partition) == Some(&token)
}

/// Waits until the member no longer owns `partition` under `token`.
async fn claim_ended(
    mut view: watch::Receiver<View>,
    partition: &TopicPartition,
    token: FencingToken,
) {
    // An error: the member is gone, and its claims with it.
    let _ = view
        .wait_for(|view| view.owned.get(partition) != Some(&token))
        .await;
}

/// One partition's writer, for the life of its claim.
async fn write_partition<S: TransactionalSink>(
    shared: Arc<Shared<S>>,
    mut stream: PartitionStream,
    view: watch::Receiver<View>,
) {
    let (partition, token) = (stream.partition.clone(), stream.token);
    let claim = (partition.clone(), token);
    let mut first_batch = true;
    while let Some(first) = stream.next().await {
        // The claim's fence has answered by now: its fetch, and so its
        // first message, waits for it.
        if std::mem::take(&mut first_batch) && shared.refused().remove(&claim) {
            break;
        }
        let mut batch = vec![first];
        while batch.len() < shared.max_batch {
            match stream.next().now_or_never() {
                Some(Some(message)) => batch.push(message),
                _ => break,
            }
        }
        match shared.write(&partition, token, &batch, &view).await {
            BatchEnd::Committed => batch.iter().for_each(Message::ack),
            BatchEnd::Fenced | BatchEnd::ClaimEnded => break,
        }
    }
    // Refused, or the stream ended: take nothing more. What the member
    // fetched stays in its buffer (it stops fetching once that is full)
    // until the claim ends.
    claim_ended(view, &partition, token).await;
    shared.refused().remove(&claim);
}

/// Takes each partition's stream as the member starts consuming it, and
/// runs its writer; ends when the member has closed and every writer has.
async fn dispatch<S: TransactionalSink>(
    shared: Arc<Shared<S>>,
    mut streams: crate::PartitionStreams,
    view: watch::Receiver<View>,
) {
    let mut writers = JoinSet::new();
    loop {
        tokio::select! {
            stream = streams.next() => match stream {
                Some(stream) => {
                    writers.spawn(write_partition(shared.clone(), stream, view.clone()));
                }
                None => break,
            },
            Some(_) = writers.join_next(), if !writers.is_empty() => {}
        }
    }
    while writers.join_next().await.is_some() {}
}

/// Builds an [`ExactlyOnce`] consumer.
pub struct ExactlyOnceBuilder<S> {
    member: GroupMemberBuilder,
    sink: S,
    max_batch: usize,
    first_backoff: Duration,
    max_backoff: Duration,
}

impl<S: TransactionalSink> ExactlyOnceBuilder<S> {
    /// The most messages written in one transaction (default 500; at least
    /// 1). A writer takes what has arrived up to this, so batches are small
    /// under a light load and large under a backlog.
    pub fn max_batch(mut self, messages: usize) -> Self {
        self.max_batch = messages.max(1);
        self
    }

    /// The wait after a failed fence or write: `first`, doubling up to
    /// `max` (default 100 ms up to 5 s).
    pub fn retry_backoff(mut self, first: Duration, max: Duration) -> Self {
        self.first_backoff = first;
        self.max_backoff = max.max(first);
        self
    }

    /// Joins the group and starts writing. The member builder must have
    /// Kafka ([`GroupMemberBuilder::kafka`]); its start offsets and
    /// per-partition streams are the writers' own (settings of those on it
    /// are replaced).
    ///
    /// Returns the consumer's handle and its streams (assignment changes,
    /// the member's problems, the writers' reports), each to be polled on
    /// its own.
    pub async fn join(
        self,
        backend: impl Backend,
    ) -> Result<(ExactlyOnce<S>, ExactlyOnceStreams<S::Error>), JoinError> {
        if !self.member.has_kafka() {
            return Err(JoinError::NoKafka);
        }
        let (sender, receiver) = mpsc::channel(REPORTS_CAPACITY);
        let shared = Arc::new(Shared {
            sink: self.sink,
            max_batch: self.max_batch,
            first_backoff: self.first_backoff,
            max_backoff: self.max_backoff,
            counters: {
                let (group, member) = self.member.names();
                Counters::new(SinkMetrics::new(group, member))
            },
            reports: Mutex::new(CountingSender::new(sender, |count| Report::Dropped {
                count,
            })),
            refused: Mutex::new(BTreeSet::new()),
        });
        let starting = shared.clone();
        let (member, streams) =
            self.member
                .per_partition_streams(true)
                .start_offsets(move |partition, token| {
                    let shared = starting.clone();
                    // The writers retry the sink themselves, reporting each
                    // failure: their answer is final.
                    async move {
                        Ok::<_, std::convert::Infallible>(shared.start(partition, token).await)
                    }
                })
                .join(backend)
                .await?
                .split();
        let partitions = streams
            .partition_streams
            .unwrap_or_else(|| PartitionStreams::new(None));
        let dispatcher = tokio::spawn(dispatch(shared.clone(), partitions, member.watch_view()));
        Ok((
            ExactlyOnce {
                member,
                shared,
                writers: Writers(dispatcher),
            },
            ExactlyOnceStreams {
                events: streams.events,
                errors: streams.errors,
                reports: Reports { receiver },
            },
        ))
    }
}

/// A group member whose messages are written to a [`TransactionalSink`]
/// exactly once (see the [module docs](self)).
///
/// Dropping it without [`ExactlyOnce::close`] stops it like a crash: its
/// claims stay until its session expires, and a write in flight commits or
/// not; either way the next owner starts from the sink's offset.
#[must_use = "the consumer works in the background; close it to leave the group cleanly"]
pub struct ExactlyOnce<S: TransactionalSink> {
    member: MemberHandle,
    shared: Arc<Shared<S>>,
    writers: Writers,
}

/// What an [`ExactlyOnce`] consumer tells its application, as streams that
/// each live apart from it, for one `tokio::select!`. Its messages are the
/// writers' alone: nothing seeks or pauses a partition under them.
#[derive(Debug)]
#[non_exhaustive]
pub struct ExactlyOnceStreams<E> {
    /// The member's assignment changes.
    pub events: crate::Events,
    /// The member's problems (the last one says why, if it ended on its
    /// own).
    pub errors: crate::Errors,
    /// The writers' reports: fenced claims and failures.
    pub reports: Reports<E>,
}

/// The writers' task, stopped when dropped (with every writer: they are
/// its own).
struct Writers(JoinHandle<()>);

impl Drop for Writers {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<S: TransactionalSink> ExactlyOnce<S> {
    /// Starts building a consumer of `member`'s partitions into `sink`.
    pub fn builder(member: GroupMemberBuilder, sink: S) -> ExactlyOnceBuilder<S> {
        ExactlyOnceBuilder {
            member,
            sink,
            max_batch: 500,
            first_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
        }
    }

    /// The member's id.
    pub fn id(&self) -> &tenure_core::MemberId {
        self.member.id()
    }

    /// The member's current view of itself ([`MemberHandle::view`]).
    pub fn view(&self) -> View {
        self.member.view()
    }

    /// A receiver that sees every change of the member's view.
    pub fn watch_view(&self) -> watch::Receiver<View> {
        self.member.watch_view()
    }

    /// The sink.
    pub fn sink(&self) -> &S {
        &self.shared.sink
    }

    /// Waits until the member's task has ended, and says why
    /// ([`MemberHandle::ended`]).
    pub async fn ended(&self) -> crate::MemberEnd {
        self.member.ended().await
    }

    /// What the writers did so far.
    pub fn stats(&self) -> ExactlyOnceStats {
        *self.shared.counters.stats()
    }

    /// Leaves the group ([`MemberHandle::close`]): every writer finishes the
    /// batch it holds, then the member commits and releases its claims.
    /// The writers are stopped once the member has closed.
    pub async fn close(self) -> Result<CommitReport, CloseError> {
        let ExactlyOnce {
            member, writers, ..
        } = self;
        let closed = member.close().await;
        // Once the member has closed, its claims are gone, and so are the
        // writers' reasons to go on.
        drop(writers);
        closed
    }

    /// Stops at once, like a process that died (see the type's docs).
    pub fn kill(self) {
        self.member.kill();
    }
}
