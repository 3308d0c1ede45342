//! The member's task: the loop that feeds the core's state machine its
//! events, carries out what it decides in the order it decided it (the
//! fetcher's starts and stops, the store's requests, the application's
//! news), and keeps its timer.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use tenure_core::assignment::PartitionCounts;
use tenure_core::{
    AppEvent, Error, Event, FencingToken, FetchCommand, Member, MemberId, Offset, Output,
    SessionId, TopicPartition,
};
use tokio::sync::{mpsc, oneshot, watch};

use crate::backend::Backend;
use crate::membership::StateFile;
use crate::streams::{AssignmentSender, HeldClaims, ProblemSender};
use crate::telemetry::Telemetry;
use crate::values::*;
use tenure_kafka::{DataEvent, DataPlane};

pub(crate) enum Input {
    Processed(TopicPartition, FencingToken, Offset),
    Drained(TopicPartition, FencingToken),
    Counts(PartitionCounts),
    Commit(oneshot::Sender<CommitReport>),
    SetPaused(TopicPartition, bool, oneshot::Sender<()>),
    Seek(TopicPartition, FencingToken, Offset, oneshot::Sender<bool>),
    Paused(oneshot::Sender<BTreeMap<TopicPartition, FencingToken>>),
    Position(
        TopicPartition,
        oneshot::Sender<Option<(FencingToken, Option<Offset>)>>,
    ),
    Committed(
        TopicPartition,
        oneshot::Sender<Option<(FencingToken, Option<Offset>)>>,
    ),
    Close(oneshot::Sender<CommitReport>),
    #[cfg(feature = "testing")]
    Freeze(std::time::Duration),
}

pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// A [`crate::MemberHandle::commit`] call waiting for the store's answers.
pub(crate) struct CommitWaiter {
    reply: oneshot::Sender<CommitReport>,
    waiting: BTreeSet<TopicPartition>,
    report: CommitReport,
}

pub(crate) struct Driver {
    pub(crate) member: Member,
    pub(crate) backend: Box<dyn Backend>,
    pub(crate) store: mpsc::UnboundedReceiver<Event>,
    pub(crate) inputs: mpsc::UnboundedReceiver<Input>,
    pub(crate) events: AssignmentSender,
    pub(crate) errors: ProblemSender,
    pub(crate) view: watch::Sender<View>,
    /// The member's deadline for handing out messages, for the data
    /// plane's batches (see [`crate::kafka`]'s `Lease`).
    pub(crate) lease: watch::Sender<Option<Instant>>,
    /// The claims the application may hear of, for [`Events`].
    pub(crate) claims: HeldClaims,
    pub(crate) closing: Vec<oneshot::Sender<CommitReport>>,
    /// Commits sent and not answered yet: the offset of each partition's.
    pub(crate) commits_in_flight: BTreeMap<TopicPartition, Offset>,
    /// [`crate::MemberHandle::commit`] calls not answered yet, each with the
    /// commits it waits for and what became of those answered.
    pub(crate) commit_waiters: Vec<CommitWaiter>,
    /// [`crate::MemberHandle::commit`] calls whose commits go out in this step.
    pub(crate) commit_requests: Vec<oneshot::Sender<CommitReport>>,
    /// Every commit outcome since the close began, for its report.
    pub(crate) close_report: Option<CommitReport>,
    /// Partitions told to stop whose drain the application has not
    /// reported yet (without Kafka, where the application reports drains).
    pub(crate) awaiting_drain: BTreeMap<TopicPartition, FencingToken>,
    pub(crate) auto_drain: bool,
    pub(crate) view_log: Option<mpsc::UnboundedSender<(MemberId, View)>>,
    pub(crate) data: Option<DataPlane>,
    pub(crate) telemetry: Telemetry,
    /// Static membership: the locked state file, where every session the
    /// backend opens is kept.
    pub(crate) state: Option<StateFile>,
    /// Whether a close leaves the group (always, for a dynamic member)
    /// rather than leave the session to run out.
    pub(crate) leave_on_close: bool,
    /// A static member's close that leaves its session: the final commits'
    /// report, once the store answered them.
    pub(crate) detaching: Option<oneshot::Receiver<CommitReport>>,
    /// The session another registration of this member id is held by, as
    /// the core last reported it (for the join's bounded wait).
    pub(crate) registration_taken: watch::Sender<Option<SessionId>>,
    /// What the view last published was built from: the member's change
    /// count, session, registration and whether it closed.
    pub(crate) published: Option<(u64, Option<SessionId>, bool, bool)>,
    /// Why the member is leaving the group on its own (a stuck
    /// application), for the end it reports once it has left.
    pub(crate) leaving: Option<MemberEnd>,
}

/// How many events from the store one step of the loop handles at most
/// before it carries out what they decided.
const STORE_EVENTS_PER_STEP: usize = 256;

impl Driver {
    /// Feeds what the store said to the core.
    fn handle(&mut self, event: Event) {
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
        self.member.set_partition_counts(now(), counts);
    }

    /// Runs the member until it ends, and says why.
    pub(crate) async fn run(mut self) -> MemberEnd {
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
                return self.leaving.take().unwrap_or(MemberEnd::Closed);
            }
            tokio::select! {
                event = self.store.recv() => match event {
                    Some(event) => self.on_store(event),
                    None => {
                        tracing::error!(member = %self.member.id(), "the backend's event stream ended");
                        return MemberEnd::StoreGone;
                    }
                },
                input = self.inputs.recv() => match input {
                    #[cfg(feature = "testing")]
                    Some(Input::Freeze(length)) => tokio::time::sleep(length).await,
                    Some(input) => self.on_input(input),
                    // The handle is gone without closing: stop like a crash.
                    None => return MemberEnd::Killed,
                },
                _ = sleep_until(deadline), if deadline.is_some() => {
                    self.member.handle_timeout(now());
                }
                report = detached(&mut self.detaching), if self.detaching.is_some() => {
                    return self.on_detached(report).await;
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

    /// What the store said: `event`, and what else it said already, up to
    /// [`STORE_EVENTS_PER_STEP`] in all. They are handled before the
    /// outputs are carried out and the view published: a burst of results
    /// (a cold start's claims) then costs one publication per batch, not
    /// one per result. Bounded, so that the other inputs and timers keep
    /// their turn.
    fn on_store(&mut self, event: Event) {
        self.handle(event);
        for _ in 1..STORE_EVENTS_PER_STEP {
            match self.store.try_recv() {
                Ok(event) => self.handle(event),
                Err(_) => break,
            }
        }
    }

    /// What the application (through its handle) or the data plane asks.
    fn on_input(&mut self, input: Input) {
        match input {
            Input::Processed(partition, token, offset) => {
                self.processed(partition, token, offset);
            }
            Input::Drained(partition, token) => self.drained(partition, token),
            Input::Counts(counts) => self.set_partition_counts(counts),
            #[cfg(feature = "testing")]
            Input::Freeze(_) => {}
            Input::Paused(reply) => {
                let paused = self.data.as_ref().map(|data| data.paused().clone());
                let _ = reply.send(paused.unwrap_or_default());
            }
            Input::Position(partition, reply) => {
                let position = self
                    .data
                    .as_ref()
                    .and_then(|data| data.position(&partition));
                let _ = reply.send(position);
            }
            Input::Committed(partition, reply) => {
                let token = self.member.owned_token(&partition);
                let _ = reply.send(token.map(|token| (token, self.member.committed(&partition))));
            }
            Input::SetPaused(partition, paused, done) => {
                // Owned and not fetched yet: the pause waits for the
                // claim's fetch under its token.
                let owned = self.member.owned_token(&partition);
                if let Some(data) = self.data.as_mut() {
                    match paused {
                        true => data.pause_claim(&partition, owned),
                        false => data.set_paused(&partition, false),
                    }
                }
                let _ = done.send(());
            }
            Input::Seek(partition, token, offset, done) => {
                let moved = self
                    .data
                    .as_mut()
                    .is_some_and(|data| data.seek(&partition, token, offset));
                // A forward move counts as processed: tell the core.
                if moved {
                    self.flush_data();
                }
                let _ = done.send(moved);
            }
            Input::Commit(reply) => {
                // What the application acknowledged, not only what the
                // data plane reported so far.
                self.flush_data();
                self.member.commit_now(now());
                self.commit_requests.push(reply);
            }
            Input::Close(done) if !self.leave_on_close => self.close_detaching(done),
            Input::Close(done) => self.close_leaving(done),
        }
    }

    /// Static membership: commits what was acknowledged, stops fetching,
    /// and leaves the session (and every claim under it) to the next
    /// process.
    fn close_detaching(&mut self, done: oneshot::Sender<CommitReport>) {
        self.closing.push(done);
        if self.detaching.is_some() {
            return;
        }
        self.flush_data();
        if let Some(data) = self.data.as_mut() {
            data.shutdown();
        }
        let (reply, report) = oneshot::channel();
        self.member.commit_now(now());
        self.commit_requests.push(reply);
        self.detaching = Some(report);
    }

    /// Leaves the group: the member drains, commits and releases every
    /// partition, then ends.
    fn close_leaving(&mut self, done: oneshot::Sender<CommitReport>) {
        self.closing.push(done);
        self.close_report.get_or_insert_with(CommitReport::default);
        self.member.shutdown(now());
        if self.data.is_none() {
            // A closing application without Kafka holds nothing: drains it
            // has not reported are done.
            self.auto_drain = true;
            for (partition, token) in std::mem::take(&mut self.awaiting_drain) {
                self.drained(partition, token);
            }
        }
    }

    /// The application left `partition`'s messages waiting for
    /// `stalled_for` without progress: the member reports it and leaves
    /// the group (whether or not it is static: its partitions must move
    /// to members that process them), as Kafka's consumer leaves its group
    /// after `max.poll.interval.ms`.
    fn processing_stalled(
        &mut self,
        partition: TopicPartition,
        token: FencingToken,
        stalled_for: std::time::Duration,
    ) {
        tracing::error!(member = %self.member.id(), %partition, ?stalled_for, "the application stopped processing; leaving the group");
        self.report(Problem::ProcessingStalled {
            partition,
            token,
            stalled_for,
        });
        // Already on its way out (a close, a detach, an earlier stall).
        if self.leaving.is_some() || self.close_report.is_some() || self.detaching.is_some() {
            return;
        }
        self.leaving = Some(MemberEnd::ProcessingStalled);
        self.close_report.get_or_insert_with(CommitReport::default);
        self.member.shutdown(now());
    }

    /// A static member's final commits are answered: it leaves its
    /// session to the next process, and ends.
    async fn on_detached(&mut self, report: Option<CommitReport>) -> MemberEnd {
        self.backend.detach().await;
        let report = report.unwrap_or_default();
        for done in self.closing.drain(..) {
            let _ = done.send(report.clone());
        }
        MemberEnd::Closed
    }

    /// Hands the core what the data plane has heard so far.
    fn flush_data(&mut self) {
        let flushed = self.data.as_mut().map(DataPlane::flush);
        for event in flushed.into_iter().flatten() {
            self.on_data(event);
        }
    }

    fn on_data(&mut self, event: DataEvent) {
        match event {
            DataEvent::Processed(partition, token, offset) => {
                self.processed(partition, token, offset);
            }
            DataEvent::Progressed(partition, token, next, progress) => {
                self.member
                    .progressed(now(), &partition, token, next, progress);
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
            DataEvent::ProcessingStalled {
                partition,
                token,
                stalled_for,
            } => self.processing_stalled(partition, token, stalled_for),
            DataEvent::StartOffsetFailed {
                partition,
                token,
                error,
            } => {
                tracing::warn!(member = %self.member.id(), %partition, %error, "start offset");
                self.report(Problem::StartOffset {
                    partition,
                    token,
                    source: error,
                });
            }
            other => {
                tracing::debug!(member = %self.member.id(), ?other, "a data event this runtime does not know");
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
            AppEvent::Released { partition, token } => {
                self.claims.ended(&partition, token);
                self.tell(AssignmentEvent::Revoked { partition, token });
            }
            AppEvent::Lost { partition, token } => {
                self.claims.ended(&partition, token);
                self.tell(AssignmentEvent::Lost { partition, token });
            }
            AppEvent::Problem(error) => {
                if let Error::RegistrationTaken { session } = &error {
                    self.registration_taken.send_replace(Some(*session));
                }
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
                progress,
            } => {
                if let Some(data) = self.data.as_mut() {
                    data.start(partition.clone(), from, token, progress);
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
        // Built again only when the member says something in it may have
        // changed: building it goes through every partition.
        let key = (
            self.member.changes(),
            self.member.session(),
            self.member.is_registered(),
            self.member.is_closed(),
        );
        if self.published == Some(key) {
            return;
        }
        self.published = Some(key);
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

/// The final commits of a static member's close that leaves its session
/// (`None` if the task answering them is gone).
async fn detached(report: &mut Option<oneshot::Receiver<CommitReport>>) -> Option<CommitReport> {
    match report.as_mut() {
        Some(report) => report.await.ok(),
        None => std::future::pending().await,
    }
}
