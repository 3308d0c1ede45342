//! The member state machine: one member of one group.
//!
//! Drive it as the crate documentation shows: what the store said goes in
//! through [`Member::handle_event`], what the application did through
//! [`Member::processed`], [`Member::drained`],
//! [`Member::set_partition_counts`] and [`Member::shutdown`], time through
//! [`Member::handle_timeout`]; after each call, every [`FetchCommand`],
//! [`StoreRequest`] and [`AppEvent`] it queued is taken, in that order.
//!
//! The member claims the partitions its assignment names, watches the owner
//! of any partition another member still holds, releases what it no longer
//! has (stop fetching, drain, commit, delete the claim), commits processed
//! offsets on an interval, and stops consuming before its session could
//! expire on the server.

mod io;
mod partition;
mod partitions;
mod renewals;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

pub use io::{
    AppEvent, ClaimOutcome, Event, FetchCommand, FetchFrom, Output, RegisterOutcome, StoreOp,
    StoreRequest,
};
use partition::{
    AfterClaim, AfterCommit, AfterLetGo, AfterOffset, AfterRelease, DrainEnd, Fetch, Fired, Next,
    PartitionRequest, PartitionState, PartitionTimer, Phase,
};
use partitions::Partitions;
use renewals::Renewals;

use crate::assignment::{AssignmentMemo, PartitionCounts};
use crate::backoff;
use crate::config::{Config, InitialOffset};
use crate::error::{ConfigError, Error, Operation, StoreError};
use crate::progress::{Committed, Progress};
use crate::rng::SplitMix64;
use crate::subscription::MemberInfo;
use crate::types::{FencingToken, MemberId, Offset, RequestId, SessionId, TopicPartition};

/// What a store request was for, so its result finds its way back.
#[derive(Clone, Debug, Hash)]
enum Purpose {
    Register,
    Deregister,
    Members,
    Heartbeat,
    Partition(TopicPartition),
}

#[derive(Clone, Debug)]
struct InFlight {
    purpose: Purpose,
}

/// A step of the member's own (not per-partition) requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Idle,
    Pending(RequestId),
    /// Waiting to retry at this moment (the failures so far are counted
    /// beside the step: they outlive the retry's `Pending`).
    Backoff(Instant),
    Done,
}

/// Counts of what a member did since it was made ([`Member::stats`]), for
/// dashboards, logs and tests. Every count only grows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemberStats {
    /// Requests sent to the store (every [`StoreRequest`]).
    pub store_requests: u64,
    /// Claims that took effect.
    pub claims: u64,
    /// Claims given up before they took effect (the partition moved away,
    /// or the session ended).
    pub claims_abandoned: u64,
    /// Claims released to the group after their drain and final commit.
    pub released: u64,
    /// Claims lost: found gone by a fenced commit or a refused release, or
    /// dropped with an expired session.
    pub lost: u64,
    /// Offset commits stored.
    pub commits: u64,
    /// Offset commits refused because the claim was gone.
    pub commits_fenced: u64,
    /// Offset commits that failed otherwise (a later one carries the offset
    /// on).
    pub commits_failed: u64,
    /// Problems reported ([`AppEvent::Problem`]).
    pub problems: u64,
}

/// Everything the member has decided for the parties around it, in the
/// order it decided it, and the counts of what went in.
#[derive(Clone, Debug, Default)]
struct Outbox {
    queue: VecDeque<Output>,
    stats: MemberStats,
}

impl Outbox {
    fn app(&mut self, event: AppEvent) {
        let stats = &mut self.stats;
        match &event {
            AppEvent::Claimed { .. } => stats.claims += 1,
            AppEvent::ClaimAbandoned { .. } => stats.claims_abandoned += 1,
            AppEvent::Released { .. } => stats.released += 1,
            AppEvent::Lost { .. } => stats.lost += 1,
            AppEvent::Committed { .. } => stats.commits += 1,
            AppEvent::CommitFenced { .. } => stats.commits_fenced += 1,
            AppEvent::CommitFailed { .. } => stats.commits_failed += 1,
            AppEvent::Problem(_) => stats.problems += 1,
            AppEvent::Claiming { .. }
            | AppEvent::OffsetRead { .. }
            | AppEvent::Committing { .. }
            | AppEvent::Releasing { .. } => {}
        }
        self.queue.push_back(Output::App(event));
    }

    fn fetch(&mut self, command: FetchCommand) {
        self.queue.push_back(Output::Fetch(command));
    }

    fn store(&mut self, request: StoreRequest) {
        self.queue.push_back(Output::Store(request));
    }

    /// Gives back what an emptied queue grew to beyond a few outputs: a
    /// cold start over 10,000 partitions queues 20,000 at once, and a
    /// queue keeps its largest size (over 400 bytes per partition) for
    /// as long as the member lives.
    fn shrink(&mut self) {
        const KEPT: usize = 64;
        if self.queue.capacity() > KEPT {
            self.queue.shrink_to(KEPT);
        }
    }
}

/// One member of one group: a synchronous state machine with no I/O.
///
/// With the feature `sim` it can be cloned, so that the explorer can
/// branch a group's state; a clone issues the same request ids as its
/// original, so two clones must never share a store.
#[derive(Debug)]
#[cfg_attr(feature = "sim", derive(Clone))]
pub struct Member {
    config: Config,
    info: MemberInfo,
    rng: SplitMix64,
    now: Instant,
    next_id: u64,
    outbox: Outbox,
    requests: BTreeMap<RequestId, InFlight>,

    session: Option<SessionId>,
    /// What the store's leader is sure to have counted of the current
    /// session's activity, as the backend reported it.
    renewals: Renewals,
    suspended: bool,
    registration: Step,
    members_watch: Step,
    /// The member list changed while a read of it was in flight.
    members_stale: bool,
    heartbeat: Step,
    /// When the heartbeat in flight was sent, and when the latest one the
    /// store answered was: the next one is due a third of the session
    /// after it even if the backend reports no renewal.
    heartbeat_sent: Instant,
    heartbeat_answered: Option<Instant>,
    /// Requests of each kind failed in a row, for their backoff.
    heartbeat_failures: u32,
    registration_failures: u32,
    members_failures: u32,
    deregistration: Step,
    members: Option<Vec<MemberInfo>>,
    counts: PartitionCounts,
    /// The strategy or subscription mismatch reported last, as reported.
    reported_mismatch: Option<String>,
    /// Claims a resumed session held when it was resumed
    /// ([`Event::ClaimsHeld`]), until the first assignment sorts them out.
    claims_held: BTreeSet<TopicPartition>,
    reported_taken: Option<SessionId>,

    assigned: BTreeSet<TopicPartition>,
    /// What the strategy kept of the last assignment, so that the next
    /// one redoes only what the change touched.
    assignment_memo: AssignmentMemo,
    /// Grows whenever `assigned` changes (see [`Member::changes`]).
    assignment_changes: u64,
    partitions: Partitions,
    next_commit: Instant,
    /// The earliest entry of the timer table, worked out at the end of
    /// every input ([`Member::poll_timeout`]).
    next_timeout: Option<Instant>,
    shutting_down: bool,
    closed: bool,
}

impl Member {
    /// A member that has not joined yet: it registers once a session is
    /// established ([`Event::SessionEstablished`]). `seed` drives the retry
    /// jitter, so a run replays exactly from it.
    pub fn new(config: Config, seed: u64, now: Instant) -> Result<Member, ConfigError> {
        config.validate()?;
        let info = MemberInfo {
            id: config.member().clone(),
            subscription: config.subscription().clone(),
            strategy: config.strategy().name().to_owned(),
        };
        let next_commit = now + config.commit_interval();
        let mut member = Member {
            config,
            info,
            rng: SplitMix64::new(seed),
            now,
            next_id: 1,
            outbox: Outbox::default(),
            requests: BTreeMap::new(),
            session: None,
            renewals: Renewals::default(),
            suspended: false,
            registration: Step::Idle,
            members_watch: Step::Idle,
            members_stale: false,
            heartbeat: Step::Idle,
            heartbeat_sent: now,
            heartbeat_answered: None,
            heartbeat_failures: 0,
            registration_failures: 0,
            members_failures: 0,
            deregistration: Step::Idle,
            members: None,
            counts: PartitionCounts::new(),
            reported_mismatch: None,
            claims_held: BTreeSet::new(),
            reported_taken: None,
            assigned: BTreeSet::new(),
            assignment_memo: AssignmentMemo::new(),
            assignment_changes: 0,
            partitions: Partitions::default(),
            next_commit,
            next_timeout: None,
            shutting_down: false,
            closed: false,
        };
        member.schedule();
        Ok(member)
    }

    /// This member's id.
    pub fn id(&self) -> &MemberId {
        &self.info.id
    }

    /// What this member advertises in its registration.
    pub fn info(&self) -> &MemberInfo {
        &self.info
    }

    /// The configuration the member runs with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The current store session, if one is established.
    pub fn session(&self) -> Option<SessionId> {
        self.session
    }

    /// Whether the member's registration record is known to exist.
    pub fn is_registered(&self) -> bool {
        self.registration == Step::Done
    }

    /// Whether a shutdown has finished: every claim released and the
    /// registration deleted (or the session gone).
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// The partitions the current assignment gives this member.
    pub fn assigned(&self) -> &BTreeSet<TopicPartition> {
        &self.assigned
    }

    /// The partitions whose owner record is this member's claim, as far as
    /// the member knows, with their fencing tokens.
    pub fn owned(&self) -> impl Iterator<Item = (&TopicPartition, FencingToken)> {
        self.partitions.iter().filter_map(|(p, s)| match s.phase {
            Phase::Owned(_) | Phase::Releasing(_) => s.token.map(|t| (p, t)),
            Phase::Claiming(_) => None,
        })
    }

    /// The partitions the application is being fed, with their tokens.
    pub fn fetching(&self) -> impl Iterator<Item = (&TopicPartition, FencingToken)> {
        self.partitions
            .iter()
            .filter_map(|(p, s)| match (s.fetch, s.token) {
                (Fetch::Fetching, Some(t)) => Some((p, t)),
                _ => None,
            })
    }

    /// The fencing token of this member's claim of `partition`, if it
    /// owns it (as [`Member::owned`] says, without going through them all).
    pub fn owned_token(&self, partition: &TopicPartition) -> Option<FencingToken> {
        let state = self.partitions.get(partition)?;
        match state.phase {
            Phase::Owned(_) | Phase::Releasing(_) => state.token,
            Phase::Claiming(_) => None,
        }
    }

    /// The next offset this member last knew committed for `partition`.
    pub fn committed(&self, partition: &TopicPartition) -> Option<Offset> {
        self.partitions.get(partition).and_then(|s| s.committed)
    }

    /// Whether nothing is being claimed or released and every assigned
    /// partition is owned and fetching.
    pub fn is_settled(&self) -> bool {
        // A partition the assignment left is releasing from the moment it
        // left, so as many owned and fetching partitions as assigned ones,
        // and nothing else held, are the assigned ones.
        self.partitions.len() == self.assigned.len()
            && self.partitions.settled_count() == self.assigned.len()
    }

    /// A count that grows whenever what [`Member::assigned`],
    /// [`Member::owned`], [`Member::fetching`] or [`Member::is_settled`]
    /// say may have changed, so that a driver publishing them builds them
    /// again only then: those go through every partition, this does not.
    pub fn changes(&self) -> u64 {
        self.assignment_changes + self.partitions.changes()
    }

    /// The next thing the member has decided, in the order it decided it:
    /// a start or stop for the fetcher, a request for the store, or news for
    /// the application; [`Output::Timeout`] once nothing is queued, with
    /// the moment [`Member::handle_timeout`] is due.
    ///
    /// Take outputs until [`Output::Timeout`] after every call into the
    /// member, and carry each out in the order it came: a partition's
    /// [`FetchCommand::Stop`] always comes before the release (or the next
    /// claim) that follows it, so a driver that keeps the order never lets
    /// the store see a release while the fetcher still hands messages out.
    pub fn poll_output(&mut self) -> Output {
        match self.outbox.queue.pop_front() {
            Some(output) => output,
            None => {
                self.outbox.shrink();
                Output::Timeout(self.poll_timeout())
            }
        }
    }

    /// What the member has done since it was made.
    pub fn stats(&self) -> MemberStats {
        MemberStats {
            // Every request takes the next id, from 1.
            store_requests: self.next_id - 1,
            ..self.outbox.stats
        }
    }

    /// The application has processed every message of `partition` up to and
    /// including `offset`, fetched under the claim `token` (the commit that
    /// follows stores `offset + 1`, the next to consume). Acknowledgements
    /// under another claim, or after a release's final commit was decided,
    /// are ignored.
    pub fn processed(
        &mut self,
        now: Instant,
        partition: &TopicPartition,
        token: FencingToken,
        offset: Offset,
    ) {
        self.reported(now, partition, |state| state.processed(token, offset));
    }

    /// The application has processed every message of `partition` below
    /// `next` and, above it, those `progress` names done (acknowledged out
    /// of order, or dead-lettered), fetched under the claim `token`: the
    /// commit that follows stores `next` and, in the same fenced write,
    /// `progress` as the partition's progress record, from which a later
    /// owner skips what was done. A change of `progress` alone makes a
    /// commit due. Ignored as [`Member::processed`] is, and when an earlier
    /// report under the claim said a higher `next`.
    pub fn progressed(
        &mut self,
        now: Instant,
        partition: &TopicPartition,
        token: FencingToken,
        next: Offset,
        progress: Progress,
    ) {
        self.reported(now, partition, |state| {
            state.progressed(token, next, progress)
        });
    }

    /// The application has finished every message it had of `partition`
    /// after [`FetchCommand::Stop`] under `token`.
    pub fn drained(&mut self, now: Instant, partition: &TopicPartition, token: FencingToken) {
        if self.input(now) {
            self.on_drained(partition, token);
            self.tick();
        }
    }

    /// Partition counts from Kafka metadata: every topic the member
    /// consumes, each time. They should cover every topic any member of the
    /// group subscribes to, so that all members compute the same
    /// assignment. A topic left out is gone and its partitions are let go
    /// of; a smaller count than one seen before is taken as stale metadata
    /// and ignored.
    pub fn set_partition_counts(&mut self, now: Instant, counts: PartitionCounts) {
        if self.input(now) {
            // A topic left out is gone (deleted, or no longer matched by the
            // subscription's pattern): its partitions are let go of. Kafka
            // never removes partitions from a topic that stays, and metadata
            // from a lagging broker can be older than what we know: a count
            // only ever grows, so a stale answer cannot make every member
            // drop partitions the others still count.
            let known = std::mem::take(&mut self.counts);
            self.counts = counts
                .into_iter()
                .map(|(topic, count)| {
                    let count = known.get(&topic).map_or(count, |&k| k.max(count));
                    (topic, count)
                })
                .collect();
            self.rebalance();
            self.tick();
        }
    }

    /// Commits what was processed of every owned partition now, rather than
    /// at the next commit interval. Each commit sent is announced
    /// ([`AppEvent::Committing`]) and its outcome told
    /// ([`AppEvent::Committed`], [`AppEvent::CommitFenced`],
    /// [`AppEvent::CommitFailed`]). A partition with nothing new processed,
    /// or whose commit is in flight already, sends none; nor does a member
    /// whose session may have lapsed.
    pub fn commit_now(&mut self, now: Instant) {
        if self.input(now) {
            self.interval_commits();
            self.tick();
        }
    }

    /// Leaves the group: drain, commit, release every claim, deregister;
    /// [`Member::is_closed`] once done.
    pub fn shutdown(&mut self, now: Instant) {
        if self.input(now) {
            self.shutting_down = true;
            self.rebalance();
            self.tick();
        }
    }

    /// Moves the clock to `now` for an input; `false` once the member is
    /// closed and takes no input any more.
    fn input(&mut self, now: Instant) -> bool {
        self.advance_clock(now);
        !self.closed
    }

    /// Feeds in, at time `now`, what the store said: a request's result, a
    /// watch notification or a change of the session.
    pub fn handle_event(&mut self, now: Instant, event: Event) {
        if !self.input(now) {
            return;
        }
        match event {
            Event::SessionEstablished { session } => self.on_session_established(session),
            Event::ClaimsHeld { partitions } => {
                if self.session.is_some() {
                    self.claims_held.extend(partitions);
                }
            }
            Event::SessionRenewed {
                sent,
                counted_after,
            } => {
                // Only the backend knows what renews its session (a write
                // or a sync on ZooKeeper, a keep-alive on etcd; never a read
                // a follower answers): the lease counts from its word alone.
                if self.session.is_some() && !self.suspended {
                    self.renewals.renewed(self.now, sent, counted_after);
                }
            }
            Event::SessionSuspended { last_heard } => {
                // Take the earlier of the backend's word now and what was
                // counted, and count no renewal until the session is back.
                self.suspended = true;
                if self.session.is_some() {
                    self.renewals.suspended(last_heard);
                }
            }
            Event::SessionResumed => {
                self.suspended = false;
                // The connection is back: confirm the session at once
                // rather than after a backoff set while it was down.
                if matches!(self.heartbeat, Step::Backoff(..)) {
                    self.heartbeat = Step::Idle;
                    self.heartbeat_failures = 0;
                }
            }
            Event::SessionExpired => self.on_session_expired(),
            Event::MembersChanged => match self.members_watch {
                Step::Done => self.members_watch = Step::Idle,
                // The notification overtook the read that set the watch:
                // that read may predate the change, so read again after it.
                Step::Pending(_) => self.members_stale = true,
                Step::Idle | Step::Backoff(..) => {}
            },
            Event::RegisterResult { id, result } => self.on_register_result(id, result),
            Event::DeregisterResult { id, result } => self.on_deregister_result(id, result),
            Event::MembersResult { id, result } => self.on_members_result(id, result),
            Event::HeartbeatResult { id, result } => self.on_heartbeat_result(id, result),
            Event::ClaimResult { id, result } => self.on_claim_result(id, result),
            Event::OwnerWatchResult { id, result } => self.on_owner_watch_result(id, result),
            Event::OwnerDeleted { partition } => self.on_owner_deleted(&partition),
            Event::OffsetResult { id, result } => self.on_offset_result(id, result),
            Event::CommitResult { id, result } => self.on_commit_result(id, result),
            Event::ReleaseResult { id, result } => self.on_release_result(id, result),
            Event::StoreProblem { operation, error } => {
                self.report_store(operation, None, error);
            }
        }
        self.tick();
    }

    /// Lets timers that are due at `now` fire.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.advance_clock(now);
        if !self.closed {
            self.tick();
        }
    }

    /// When [`Member::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.closed {
            return None;
        }
        self.next_timeout
    }

    /// Works out the earliest entry of the timer table, once the input
    /// that may have changed it is handled: [`Member::poll_timeout`] is
    /// asked after every input, often twice.
    fn schedule(&mut self) {
        debug_assert!(
            self.partitions.is_fresh(),
            "an input left partitions unrefreshed"
        );
        self.next_timeout = self.earliest_timer();
    }

    /// The earliest entry of the timer table.
    fn earliest_timer(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        if !self.closed {
            self.timers(PartitionTimers::Earliest, |at, _| {
                next = Some(next.map_or(at, |n| n.min(at)));
            });
        }
        next
    }

    fn advance_clock(&mut self, now: Instant) {
        // Time never runs backwards inside the member, whatever the caller
        // passes: deadlines computed earlier stay valid.
        if now > self.now {
            self.now = now;
        }
    }

    /// Queues the store request `op` under the current session; its answer
    /// is awaited for `purpose`.
    fn request(&mut self, purpose: Purpose, op: StoreOp) -> RequestId {
        let id = RequestId(self.next_id);
        self.next_id += 1;
        self.requests.insert(id, InFlight { purpose });
        let session = self.session_tag();
        self.outbox.store(StoreRequest { id, session, op });
        id
    }

    /// Takes the record of request `id`, if it is still awaited. An answer
    /// does not renew the lease by itself: a follower answers reads its
    /// leader never hears of, and a write renews an etcd lease no more than
    /// a read. The backend says what did ([`Event::SessionRenewed`]).
    fn answered<T>(&mut self, id: RequestId, _result: &Result<T, StoreError>) -> Option<Purpose> {
        Some(self.requests.remove(&id)?.purpose)
    }

    /// Until when this member may hand out messages: the latest moment the
    /// store's leader is sure to have counted its session's activity
    /// ([`Event::SessionRenewed`]), plus the session timeout, less the
    /// suspension margin (for clock drift and delays) — while it is
    /// registered under that session.
    /// `None`: not now. A runtime checks it at the moment it hands a
    /// message out, so that a process that wakes from a pause longer than
    /// its session hands out nothing before it has caught up.
    pub fn consume_deadline(&self) -> Option<Instant> {
        if self.session.is_some() && self.registration == Step::Done {
            self.lease_end()
        } else {
            None
        }
    }

    fn lease_end(&self) -> Option<Instant> {
        let counted = self.renewals.counted()?;
        Some(counted + self.config.session_timeout() - self.config.suspension_margin())
    }

    fn may_consume(&self) -> bool {
        self.consume_deadline().is_some_and(|end| self.now < end)
    }

    fn backoff(&mut self, attempt: u32) -> Instant {
        backoff_end(&mut self.rng, &self.config, self.now, attempt)
    }

    /// The session store commands are issued under. Commands are only
    /// issued while a session is established; the placeholder never
    /// matches a real session, so a backend would refuse the command.
    fn session_tag(&self) -> SessionId {
        self.session.unwrap_or(SessionId(0))
    }

    fn report(&mut self, error: Error) {
        self.outbox.app(AppEvent::Problem(error));
    }

    fn report_store(
        &mut self,
        operation: Operation,
        partition: Option<&TopicPartition>,
        source: StoreError,
    ) {
        self.report(Error::Store {
            operation,
            partition: partition.cloned(),
            source,
        });
    }

    // ----- session, registration, membership -----

    fn on_session_established(&mut self, session: SessionId) {
        if self.session.is_some_and(|old| old != session) {
            // A new session without word of the old one's end: the old one
            // is over all the same, and so is every claim made under it.
            self.on_session_expired();
            if self.closed {
                return;
            }
        }
        self.reset_session(Some(session));
        if self.shutting_down {
            // An expiry already dropped every claim; nothing is left to
            // release, and registering only to deregister helps no one.
            self.closed = true;
        }
    }

    fn on_session_expired(&mut self) {
        let dropped = self.partitions.len();
        let partitions = self.partitions.take_all();
        for (partition, mut state) in partitions {
            if let Some(stop) = state.stop_fetching(&partition) {
                self.outbox.fetch(stop);
            }
            self.outbox.app(state.gone(partition, false));
        }
        self.report(Error::SessionExpired {
            partitions: dropped,
        });
        self.requests.clear();
        self.reset_session(None);
        self.members = None;
        self.assigned.clear();
        if self.shutting_down {
            self.closed = true;
        }
    }

    /// Starts over with `session`: nothing is known to the server about it
    /// yet, and no request of the member's own is under way.
    fn reset_session(&mut self, session: Option<SessionId>) {
        self.session = session;
        self.claims_held.clear();
        self.renewals = Renewals::default();
        self.suspended = false;
        self.registration = Step::Idle;
        self.registration_failures = 0;
        self.members_watch = Step::Idle;
        self.members_stale = false;
        self.members_failures = 0;
        self.heartbeat = Step::Idle;
        self.heartbeat_answered = None;
        self.heartbeat_failures = 0;
        self.deregistration = Step::Idle;
    }

    fn on_register_result(&mut self, id: RequestId, result: Result<RegisterOutcome, StoreError>) {
        if self.registration != Step::Pending(id) || self.answered(id, &result).is_none() {
            return;
        }
        let attempt = self.registration_failures;
        self.registration_failures = self.registration_failures.saturating_add(1);
        match result {
            Ok(RegisterOutcome::Registered) => {
                self.registration = Step::Done;
                self.registration_failures = 0;
            }
            Ok(RegisterOutcome::Exists { session }) if Some(session) == self.session => {
                self.registration = Step::Done;
                self.registration_failures = 0;
            }
            Ok(RegisterOutcome::Exists { session }) => {
                if self.reported_taken != Some(session) {
                    self.reported_taken = Some(session);
                    self.report(Error::RegistrationTaken { session });
                }
                // A previous session's record vanishes when the server
                // expires it; retrying waits for that without deleting a
                // record that might belong to another live process.
                let at = self.backoff(u32::MAX);
                self.registration = Step::Backoff(at);
            }
            Err(StoreError::SessionExpired) => self.registration = Step::Idle,
            Err(error) => {
                if error != StoreError::ConnectionLoss {
                    self.report_store(Operation::Register, None, error);
                }
                let at = self.backoff(attempt);
                self.registration = Step::Backoff(at);
            }
        }
        self.rebalance();
    }

    fn on_deregister_result(&mut self, id: RequestId, result: Result<(), StoreError>) {
        if self.deregistration != Step::Pending(id) || self.answered(id, &result).is_none() {
            return;
        }
        match result {
            Ok(()) | Err(StoreError::NoNode | StoreError::SessionExpired) => {
                self.deregistration = Step::Done;
                self.registration = Step::Idle;
                self.closed = true;
            }
            Err(error) => {
                if error != StoreError::ConnectionLoss {
                    self.report_store(Operation::Deregister, None, error);
                }
                let at = self.backoff(0);
                self.deregistration = Step::Backoff(at);
            }
        }
    }

    fn on_members_result(&mut self, id: RequestId, result: Result<Vec<MemberInfo>, StoreError>) {
        if self.members_watch != Step::Pending(id) || self.answered(id, &result).is_none() {
            return;
        }
        match result {
            Ok(members) => {
                self.members_failures = 0;
                self.members_watch = if std::mem::take(&mut self.members_stale) {
                    Step::Idle
                } else {
                    Step::Done
                };
                if self.registration == Step::Done && !members.iter().any(|m| m.id == self.info.id)
                {
                    // Our record is gone while the session lives (deleted by
                    // hand, say): the others no longer count us, so register
                    // again rather than hold partitions they will reassign.
                    self.registration = Step::Idle;
                }
                self.members = Some(members);
                self.rebalance();
            }
            Err(StoreError::SessionExpired) => self.members_watch = Step::Idle,
            Err(error) => {
                if error != StoreError::ConnectionLoss {
                    self.report_store(Operation::ReadMembers, None, error);
                }
                let at = self.backoff(self.members_failures);
                self.members_failures = self.members_failures.saturating_add(1);
                self.members_watch = Step::Backoff(at);
            }
        }
    }

    fn on_heartbeat_result(&mut self, id: RequestId, result: Result<(), StoreError>) {
        if self.heartbeat != Step::Pending(id) || self.answered(id, &result).is_none() {
            return;
        }
        match result {
            Ok(()) => {
                self.heartbeat = Step::Idle;
                self.heartbeat_failures = 0;
                // Kept only where it says more than the renewals do (a
                // backend that reports none), so that states which differ
                // in nothing else stay one.
                let sent = self.heartbeat_sent;
                self.heartbeat_answered = (self.renewals.latest() < Some(sent)).then_some(sent);
            }
            // A dead session is announced by the backend; until then keep
            // asking, without hammering a store that keeps saying no.
            Err(_) => {
                let at = self.backoff(self.heartbeat_failures);
                self.heartbeat_failures = self.heartbeat_failures.saturating_add(1);
                self.heartbeat = Step::Backoff(at);
            }
        }
    }

    /// The timer table: shows `visit` the member's deadlines, with what
    /// each is for; of the partitions' deadlines, the earliest or the due
    /// ones, as `partitions` asks. [`Member::poll_timeout`] is its earliest
    /// entry and `tick` fires its due entries (sorted, they fire in the
    /// order of [`Timer`]), so no deadline is worked out in two places. A
    /// step with nothing to wait for is due at once (`now`); the firing
    /// leaves none of those behind. (A visit rather than an iterator: it
    /// runs twice per input, and a chained iterator costs more than the
    /// rest of a plain acknowledgement.)
    fn timers<'a>(
        &'a self,
        partitions: PartitionTimers,
        mut visit: impl FnMut(Instant, Timer<&'a TopicPartition>),
    ) {
        let mut entry = |at: Option<Instant>, timer: Timer<&'a TopicPartition>| {
            if let Some(at) = at {
                visit(at, timer);
            }
        };
        let due = |step: Step| match step {
            Step::Idle => Some(self.now),
            Step::Backoff(at) => Some(at),
            Step::Pending(_) | Step::Done => None,
        };
        let joining = self.session.is_some() && !self.shutting_down;
        let registered = self.session.is_some() && self.registration == Step::Done;
        if joining {
            entry(due(self.registration), Timer::Register);
            entry(due(self.members_watch), Timer::Members);
        }
        if registered {
            let heartbeat = match self.heartbeat {
                Step::Backoff(at) => Some(at),
                Step::Idle => self.heartbeat_due(),
                Step::Pending(_) | Step::Done => None,
            };
            entry(heartbeat, Timer::Heartbeat);
        }
        if self.partitions.any_fetching() {
            entry(self.lease_end(), Timer::LeaseEnd);
        }
        // The partitions' own deadlines: each partition's state lists them
        // (`PartitionState::timers`), and `Partitions` keeps those lists in
        // time order, so the table shows the earliest and the due ones
        // without going through every partition.
        let listed = match partitions {
            PartitionTimers::Earliest => 1,
            PartitionTimers::Due => usize::MAX,
        };
        for (at, partition, timer) in self.partitions.deadlines().take(listed) {
            if listed == usize::MAX && at > self.now {
                break;
            }
            entry(Some(at), Timer::Partition(partition, timer));
        }
        // The interval's end wakes the member only while a partition is
        // ready to commit from; once passed it is due all the same, and
        // its firing starts the next interval from that moment.
        if self.next_commit <= self.now || self.partitions.any_ready() {
            entry(Some(self.next_commit), Timer::CommitInterval);
        }
        if registered && self.shutting_down && self.partitions.is_empty() {
            entry(due(self.deregistration), Timer::Deregister);
        }
    }

    /// When the session should next be confirmed, while the heartbeat is
    /// idle and we hold claims: a third of the session timeout after the
    /// latest renewal, or the latest heartbeat answered, whichever came
    /// later (at once if neither did); sooner where the leader counts
    /// renewals late, so that each heartbeat helps prove the ones before
    /// it ([`Renewals::next_due`]).
    fn heartbeat_due(&self) -> Option<Instant> {
        if !self.partitions.any_holding() {
            return None;
        }
        let interval = self.config.session_timeout() / 3;
        let answered = self.heartbeat_answered.map(|sent| sent + interval);
        Some(
            self.renewals
                .next_due(interval)
                .max(answered)
                .unwrap_or(self.now),
        )
    }

    /// Recomputes which partitions are ours and starts the claims and
    /// releases that follow. Partitions kept are not touched.
    fn rebalance(&mut self) {
        let desired = match self.desired_partitions() {
            Some(desired) => desired,
            None => return,
        };
        if self.registration == Step::Done && self.members.is_some() && !self.shutting_down {
            // A resumed session's claims, once the assignment covers their
            // topic: those it gives us are claimed below (our own records:
            // nothing moves); the others are claimed back only to be let go,
            // so that their records do not outlive the assignment. A topic
            // whose partition count is not known yet waits for it, unless
            // the member no longer subscribes to it.
            let held = std::mem::take(&mut self.claims_held);
            for partition in held {
                let known = self
                    .counts
                    .get(&*partition.topic)
                    .is_some_and(|count| partition.partition < *count);
                if !known && self.info.subscription.includes(&partition.topic) {
                    self.claims_held.insert(partition);
                } else if !desired.contains(&partition) && !self.partitions.contains_key(&partition)
                {
                    self.start_claiming(&partition);
                }
            }
        }
        if self.assigned != desired {
            self.assignment_changes += 1;
        }
        self.assigned = desired;
        let assigned: Vec<TopicPartition> = self.assigned.iter().cloned().collect();
        for partition in assigned {
            match self.partitions.get_mut(&partition) {
                None => self.start_claiming(&partition),
                Some(state) => {
                    if let Phase::Releasing(_) = state.phase {
                        state.reclaim = true;
                    }
                }
            }
        }
        let dropped: Vec<TopicPartition> = self
            .partitions
            .keys()
            .filter(|p| !self.assigned.contains(*p))
            .cloned()
            .collect();
        for partition in dropped {
            self.let_go(&partition);
        }
    }

    /// The partitions the current snapshot assigns to us, or `None` when
    /// the assignment must not change (strategies disagree).
    fn desired_partitions(&mut self) -> Option<BTreeSet<TopicPartition>> {
        if self.shutting_down || self.session.is_none() || self.registration != Step::Done {
            return Some(BTreeSet::new());
        }
        let members = match &self.members {
            Some(members) => members,
            None => return Some(BTreeSet::new()),
        };
        if !members.iter().any(|m| m.id == self.info.id) {
            return Some(BTreeSet::new());
        }
        if let Some(mismatch) = mismatch(&self.info, members) {
            // Reported once until it changes: it names the member and both
            // sides.
            let key = mismatch.to_string();
            if self.reported_mismatch.as_ref() != Some(&key) {
                self.reported_mismatch = Some(key);
                self.report(mismatch);
            }
            return None;
        }
        self.reported_mismatch = None;
        Some(self.config.strategy().assign_to(
            members,
            &self.counts,
            &mut self.assignment_memo,
            &self.info.id,
        ))
    }

    // ----- partitions -----
    //
    // A partition's transitions are `PartitionState`'s; the member routes
    // the inputs to them and does what they return: send requests, tell
    // the application, drive the fetcher, add and drop partitions.

    /// Starts claiming a partition the assignment gives us and we do not
    /// hold.
    fn start_claiming(&mut self, partition: &TopicPartition) {
        self.partitions.insert(
            partition.clone(),
            PartitionState::claiming(self.now, self.config.store_offsets()),
        );
        self.outbox.app(AppEvent::Claiming {
            partition: partition.clone(),
        });
        self.send(partition, PartitionRequest::Claim);
    }

    /// Sends the store request a step of `partition` needs.
    fn send(&mut self, partition: &TopicPartition, request: PartitionRequest) {
        let held = self.partitions.get(partition).and_then(|state| state.token);
        let p = partition.clone();
        let op = match request {
            PartitionRequest::Claim => StoreOp::Claim {
                partition: p,
                read_offset: self.config.store_offsets(),
            },
            PartitionRequest::WatchOwner => StoreOp::WatchOwner { partition: p },
            PartitionRequest::ReadOffset => StoreOp::ReadOffset { partition: p },
            PartitionRequest::Commit { offset, token, .. } => {
                self.outbox.app(AppEvent::Committing {
                    partition: p.clone(),
                    token,
                    offset,
                });
                let progress = self
                    .partitions
                    .get(partition)
                    .map(|state| state.progress_for(offset))
                    .unwrap_or_default();
                StoreOp::CommitOffset {
                    partition: p,
                    offset,
                    token,
                    progress,
                }
            }
            PartitionRequest::Release { commit } => {
                if let (Some(offset), Some(token)) = (commit, held) {
                    self.outbox.app(AppEvent::Committing {
                        partition: p.clone(),
                        token,
                        offset,
                    });
                }
                let progress = match (commit, self.partitions.get(partition)) {
                    (Some(offset), Some(state)) => state.progress_for(offset),
                    _ => Progress::new(),
                };
                StoreOp::Release {
                    partition: p,
                    token: held,
                    commit,
                    progress,
                }
            }
        };
        let id = self.request(Purpose::Partition(partition.clone()), op);
        if let Some(state) = self.partitions.get_mut(partition) {
            state.sent(id, request);
        }
    }

    /// Runs `transition` on the state of `partition` with what transitions
    /// may need of the member: the clock, whether it may write offsets,
    /// and the backoff for so many failures; `None` if the partition has
    /// no state.
    fn transition<R>(
        &mut self,
        partition: &TopicPartition,
        transition: impl FnOnce(&mut PartitionState, Context<'_>) -> R,
    ) -> Option<R> {
        let context = Context {
            now: self.now,
            may_consume: self.may_consume(),
            rng: &mut self.rng,
            config: &self.config,
        };
        let state = self.partitions.get_mut(partition)?;
        Some(transition(state, context))
    }

    /// The partition request `id` was for, if it is still awaited by that
    /// partition's current step (or its interval commit).
    fn partition_request<T>(
        &mut self,
        id: RequestId,
        result: &Result<T, StoreError>,
    ) -> Option<TopicPartition> {
        match self.answered(id, result)? {
            Purpose::Partition(partition) => {
                let state = self.partitions.get(&partition)?;
                let current =
                    state.request == Some(id) || state.commit.is_some_and(|(c, _)| c == id);
                current.then_some(partition)
            }
            _ => None,
        }
    }

    fn on_claim_result(&mut self, id: RequestId, result: Result<ClaimOutcome, StoreError>) {
        let Some(partition) = self.partition_request(id, &result) else {
            return;
        };
        let session = self.session;
        let Some(next) = self.transition(&partition, |state, cx| {
            state.claim_result(result, session, cx.backoff())
        }) else {
            return;
        };
        match next {
            AfterClaim::Ignored => {}
            AfterClaim::Owned(token, committed) => {
                self.announce_claim(&partition, token);
                if self.config.store_offsets() {
                    match committed {
                        Some(read) => {
                            let initial = self.initial_fetch();
                            let next = self.transition(&partition, |state, cx| {
                                state.read_with_claim(read, initial, cx.backoff())
                            });
                            self.offset_known(partition, next, Some(token));
                        }
                        // Not read with the claim: read it now.
                        None => self.send(&partition, PartitionRequest::ReadOffset),
                    }
                } else {
                    let initial = self.initial_fetch();
                    let read = self
                        .partitions
                        .get_mut(&partition)
                        .map(|state| state.no_offset_to_read(initial));
                    if let Some(AfterOffset::Read(committed)) = read {
                        self.outbox.app(AppEvent::OffsetRead {
                            partition,
                            token,
                            committed,
                        });
                    }
                }
            }
            AfterClaim::Watch => self.send(&partition, PartitionRequest::WatchOwner),
            AfterClaim::Failed(error) => {
                if let Some(error) = error {
                    self.report_store(Operation::Claim, Some(&partition), error);
                }
            }
            AfterClaim::ReleaseClaimed(token) => {
                // A claim that took effect after all, only to be released
                // at once.
                self.announce_claim(&partition, token);
                self.outbox.app(AppEvent::Releasing {
                    partition: partition.clone(),
                    token,
                });
                self.send(&partition, PartitionRequest::Release { commit: None });
            }
            AfterClaim::Release => {
                self.send(&partition, PartitionRequest::Release { commit: None })
            }
            AfterClaim::Abandoned => self.finish_release(&partition, false),
        }
    }

    fn on_owner_watch_result(&mut self, id: RequestId, result: Result<bool, StoreError>) {
        let Some(partition) = self.partition_request(id, &result) else {
            return;
        };
        // A lost notification must not strand the claim: look again once
        // a session timeout has passed.
        let recheck = self.now + self.config.session_timeout();
        let next = self.transition(&partition, |state, cx| {
            state.watch_result(result, recheck, cx.backoff())
        });
        self.follow(&partition, Operation::WatchOwner, next);
    }

    /// Does what a partition's step asks after `operation`.
    fn follow(&mut self, partition: &TopicPartition, operation: Operation, next: Option<Next>) {
        match next {
            Some(Next::Send(request)) => self.send(partition, request),
            Some(Next::Report(error)) => self.report_store(operation, Some(partition), error),
            Some(Next::Nothing) | None => {}
        }
    }

    fn on_owner_deleted(&mut self, partition: &TopicPartition) {
        let Some(stale) = self
            .partitions
            .get_mut(partition)
            .and_then(PartitionState::owner_deleted)
        else {
            return;
        };
        if let Some(old) = stale {
            self.requests.remove(&old);
        }
        self.send(partition, PartitionRequest::Claim);
    }

    /// Tells the application that the claim of `partition` took effect
    /// under `token`, with the time since it began.
    fn announce_claim(&mut self, partition: &TopicPartition, token: FencingToken) {
        if let Some(state) = self.partitions.get(partition) {
            self.outbox.app(AppEvent::Claimed {
                partition: partition.clone(),
                token,
                waited: self.now.saturating_duration_since(state.since),
            });
        }
    }

    fn on_offset_result(&mut self, id: RequestId, result: Result<Option<Committed>, StoreError>) {
        let Some(partition) = self.partition_request(id, &result) else {
            return;
        };
        let initial = self.initial_fetch();
        let next = self.transition(&partition, |state, cx| {
            let next = state.offset_result(result, initial, cx.backoff());
            (next, state.token)
        });
        if let Some((next, token)) = next {
            self.offset_known(partition, Some(next), token);
        }
    }

    /// Does what an offset read's result asks of `partition`, owned under
    /// `token`: tell the application, or report the failure.
    fn offset_known(
        &mut self,
        partition: TopicPartition,
        next: Option<AfterOffset>,
        token: Option<FencingToken>,
    ) {
        match (next, token) {
            (Some(AfterOffset::Read(committed)), Some(token)) => {
                self.outbox.app(AppEvent::OffsetRead {
                    partition,
                    token,
                    committed,
                });
            }
            (Some(AfterOffset::Failed(Some(error))), _) => {
                self.report_store(Operation::ReadOffset, Some(&partition), error);
            }
            _ => {}
        }
    }

    /// Where a partition with no committed offset starts.
    fn initial_fetch(&self) -> FetchFrom {
        match self.config.initial_offset() {
            InitialOffset::Oldest => FetchFrom::Oldest,
            InitialOffset::Newest => FetchFrom::Newest,
            InitialOffset::None => FetchFrom::Unset,
        }
    }

    /// What the application reported of `partition`, at `now`: `report`
    /// applied to its state. A report moves no deadline and changes
    /// nothing the lease looks at: unless it changed whether the partition
    /// has a commit due (then noted: an acknowledgement can only make one
    /// due, a report of progress also not due, when the progress came back
    /// to what was committed with the same offset), or a deadline has
    /// come, the step is over; the others cost one lookup. (The commit
    /// interval's end joins the table once passed, whether or not a
    /// partition is ready: it counts as come then.)
    fn reported(
        &mut self,
        now: Instant,
        partition: &TopicPartition,
        report: impl FnOnce(&mut PartitionState),
    ) {
        if !self.input(now) {
            return;
        }
        let noted = match self.partitions.get_mut_unnoted(partition) {
            Some(state) => {
                let had = state.commit_due().is_some();
                report(state);
                had != state.commit_due().is_some()
            }
            None => false,
        };
        if noted {
            self.partitions.note(partition);
        }
        let due = self.next_timeout.is_some_and(|at| at <= now) || self.next_commit <= now;
        if noted || due {
            self.tick();
        }
    }

    fn on_drained(&mut self, partition: &TopicPartition, token: FencingToken) {
        let releasing = self
            .partitions
            .get_mut(partition)
            .is_some_and(|state| state.drained(token));
        if releasing {
            self.end_drain(partition);
        }
    }

    fn on_commit_result(&mut self, id: RequestId, result: Result<(), StoreError>) {
        let Some(partition) = self.partition_request(id, &result) else {
            return;
        };
        let Some((event, next)) = self.transition(&partition, |state, cx| {
            state.commit_result(&partition, result, cx.may_consume, cx.backoff())
        }) else {
            return;
        };
        if let Some(event) = event {
            self.outbox.app(event);
        }
        match next {
            AfterCommit::Nothing => {}
            AfterCommit::Send(request) => self.send(&partition, request),
            AfterCommit::Fenced(offset) => {
                // Stop at once; claim again if the partition is still ours
                // by the assignment.
                self.report(Error::CommitFenced {
                    partition: partition.clone(),
                    offset,
                });
                self.lose(&partition);
            }
            AfterCommit::Report(error) => {
                self.report_store(Operation::Commit, Some(&partition), error);
            }
        }
    }

    /// Forgets a partition whose claim turned out not to be ours any more.
    fn lose(&mut self, partition: &TopicPartition) {
        if let Some(mut state) = self.partitions.remove(partition) {
            if let Some(stop) = state.stop_fetching(partition) {
                self.outbox.fetch(stop);
            }
            if let Some(id) = state.request {
                self.requests.remove(&id);
            }
            self.outbox.app(state.gone(partition.clone(), false));
        }
        if self.assigned.contains(partition) {
            self.start_claiming(partition);
        }
    }

    /// Stops claiming or owning a partition the assignment no longer gives
    /// us.
    fn let_go(&mut self, partition: &TopicPartition) {
        let drain_deadline = self.now + self.config.processing_timeout();
        let Some(state) = self.partitions.get_mut(partition) else {
            return;
        };
        match state.let_go(partition, drain_deadline) {
            AfterLetGo::Nothing => {}
            AfterLetGo::Release => self.send(partition, PartitionRequest::Release { commit: None }),
            AfterLetGo::Abandon { forget } => {
                if let Some(id) = forget {
                    self.requests.remove(&id);
                }
                if let Some(state) = self.partitions.remove(partition) {
                    self.outbox.app(state.gone(partition.clone(), false));
                }
            }
            AfterLetGo::Drain { forget, stop } => {
                if let Some(id) = forget {
                    self.requests.remove(&id);
                }
                if let Some(token) = state.token {
                    self.outbox.app(AppEvent::Releasing {
                        partition: partition.clone(),
                        token,
                    });
                }
                if let Some(stop) = stop {
                    self.outbox.fetch(stop);
                }
                self.end_drain(partition);
            }
        }
    }

    /// Moves a draining release on if the drain is done or timed out.
    fn end_drain(&mut self, partition: &TopicPartition) {
        if let Some(Some(end)) = self.transition(partition, |state, cx| {
            state.end_drain(cx.now, cx.may_consume, cx.backoff())
        }) {
            self.drain_ended(partition, end);
        }
    }

    fn drain_ended(&mut self, partition: &TopicPartition, end: DrainEnd) {
        if end.timed_out {
            self.report(Error::DrainTimeout {
                partition: partition.clone(),
                timeout: self.config.processing_timeout(),
            });
        }
        if let Some(request) = end.send {
            self.send(partition, request);
        }
    }

    fn on_release_result(&mut self, id: RequestId, result: Result<(), StoreError>) {
        let Some(partition) = self.partition_request(id, &result) else {
            return;
        };
        let Some((event, next)) = self.transition(&partition, |state, cx| {
            state.release_result(&partition, id, result, cx.backoff())
        }) else {
            return;
        };
        if let Some(event) = event {
            self.outbox.app(event);
        }
        match next {
            AfterRelease::Finished { released } => {
                self.finish_release(&partition, released);
            }
            AfterRelease::Fenced(offset) => {
                // As a fenced interval commit is: the claim was not ours
                // any more, and the partition was not handed over by us.
                self.report(Error::CommitFenced {
                    partition: partition.clone(),
                    offset,
                });
                self.finish_release(&partition, false);
            }
            AfterRelease::Report(error) => {
                self.report_store(Operation::Release, Some(&partition), error);
            }
            AfterRelease::Nothing => {}
        }
    }

    /// Drops a partition whose release is over; `released` when its claim
    /// was deleted by us (or found deleted by our own earlier attempt).
    fn finish_release(&mut self, partition: &TopicPartition, released: bool) {
        let Some(state) = self.partitions.remove(partition) else {
            return;
        };
        self.outbox.app(state.gone(partition.clone(), released));
        if state.reclaim && self.assigned.contains(partition) {
            self.start_claiming(partition);
        }
    }

    // ----- timers -----

    /// Everything that depends on time or on the state as a whole, run
    /// after every input: the due timers fire, then the fetches follow the
    /// lease and a shutdown with nothing left to deregister ends.
    fn tick(&mut self) {
        let now = self.now;
        let threshold = self.config.claim_stall_threshold();
        self.partitions.refresh(threshold);
        // Taken out of the table first: firing changes what it lists. Most
        // inputs find nothing due, and an empty list allocates nothing.
        let mut due: Vec<Timer<TopicPartition>> = Vec::new();
        self.timers(PartitionTimers::Due, |at, timer| {
            if at <= now {
                due.push(timer.map_partition(TopicPartition::clone));
            }
        });
        // The partitions' deadlines came in time order; they fire in the
        // table's (by kind, then partition), whatever their times.
        due.sort();
        for timer in due {
            self.fire(timer);
        }
        self.enforce_lease();
        self.partitions.refresh(threshold);
        if self.shutting_down
            && self.partitions.is_empty()
            && !self.closed
            && !matches!(self.registration, Step::Done | Step::Pending(_))
        {
            // Never registered (or the record is gone): nothing to undo.
            self.closed = true;
        }
        self.schedule();
    }

    /// Does what a due entry of the timer table is for.
    fn fire(&mut self, timer: Timer<TopicPartition>) {
        match timer {
            Timer::Register => {
                let member = self.info.clone();
                let id = self.request(Purpose::Register, StoreOp::Register { member });
                self.registration = Step::Pending(id);
            }
            Timer::Members => {
                let id = self.request(Purpose::Members, StoreOp::WatchMembers);
                self.members_watch = Step::Pending(id);
            }
            Timer::Heartbeat => {
                let id = self.request(Purpose::Heartbeat, StoreOp::Heartbeat);
                self.heartbeat = Step::Pending(id);
                self.heartbeat_sent = self.now;
            }
            // Consumption also ends with no deadline passing (the
            // registration found gone), so the lease is enforced after
            // every input; this entry only makes the member wake for it.
            Timer::LeaseEnd => {}
            Timer::Partition(partition, timer) => self.fire_partition(partition, timer),
            Timer::CommitInterval => {
                self.next_commit = self.now + self.config.commit_interval();
                self.interval_commits();
            }
            Timer::Deregister => {
                let id = self.request(Purpose::Deregister, StoreOp::Deregister);
                self.deregistration = Step::Pending(id);
            }
        }
    }

    /// Stops every fetch once the session could be close to expiring on
    /// the server, and restarts fetches once it is confirmed alive.
    fn enforce_lease(&mut self) {
        let consume = self.may_consume();
        // A suspended session keeps what it fetches until the lease runs
        // out, but starts nothing new until the store answers again.
        let start = consume && !self.suspended;
        // Only a partition that fetches can be held, and only one that is
        // owned, ready and not fetching can start: the others are left
        // alone, so a member holding many partitions does not go through
        // them all at every input.
        if !consume && self.partitions.any_fetching() {
            for (partition, state) in self.partitions.iter_mut_noted() {
                if let Some(fetch) = state.follow_lease(partition, consume, start) {
                    self.outbox.fetch(fetch);
                }
            }
        } else if start {
            self.partitions.refresh(self.config.claim_stall_threshold());
            for partition in self.partitions.startable() {
                let fetch = self
                    .partitions
                    .get_mut(&partition)
                    .and_then(|state| state.follow_lease(&partition, consume, start));
                if let Some(fetch) = fetch {
                    self.outbox.fetch(fetch);
                }
            }
        }
    }

    fn fire_partition(&mut self, partition: TopicPartition, timer: PartitionTimer) {
        let fired = self.transition(&partition, |state, cx| {
            state.fire(timer, cx.now, cx.may_consume, cx.backoff())
        });
        match fired {
            Some(Fired::Stalled { waited, holder }) => self.report(Error::ClaimStalled {
                partition,
                waited,
                holder,
            }),
            Some(Fired::Send(request)) => self.send(&partition, request),
            Some(Fired::Drain(end)) => self.drain_ended(&partition, end),
            Some(Fired::Nothing) | None => {}
        }
    }

    fn interval_commits(&mut self) {
        if !self.may_consume() {
            // A session that may be gone commits nothing: the commit would
            // be fenced at best, and a paused member must not write before
            // it is confirmed alive.
            return;
        }
        // Only partitions with something to commit are looked at (the
        // others have nothing due), in order.
        self.partitions.refresh(self.config.claim_stall_threshold());
        for partition in self.partitions.uncommitted() {
            let commit = self
                .partitions
                .get(&partition)
                .and_then(PartitionState::interval_commit);
            if let Some(commit) = commit {
                self.send(&partition, commit);
            }
        }
    }
}

/// What a partition's transition may need of the member.
struct Context<'a> {
    now: Instant,
    /// Whether the member may consume, and so write offsets.
    may_consume: bool,
    rng: &'a mut SplitMix64,
    config: &'a Config,
}

impl<'a> Context<'a> {
    /// When a backoff after so many failures ends. The jitter is drawn
    /// only if the transition does back off: every draw moves the
    /// generator a run replays from.
    fn backoff(self) -> impl FnOnce(u32) -> Instant + 'a {
        move |attempt| backoff_end(self.rng, self.config, self.now, attempt)
    }
}

/// When a backoff that starts at `now` after `attempt` failures ends.
/// The first member of `members` whose strategy differs from `ours`, or
/// whose subscription differs where either side subscribes by pattern:
/// members that disagree would compute different assignments.
fn mismatch(ours: &MemberInfo, members: &[MemberInfo]) -> Option<Error> {
    if let Some(other) = members.iter().find(|m| m.strategy != ours.strategy) {
        return Some(Error::StrategyMismatch {
            ours: ours.strategy.clone(),
            member: other.id.clone(),
            theirs: other.strategy.clone(),
        });
    }
    let other = members.iter().find(|m| {
        (m.subscription.is_pattern() || ours.subscription.is_pattern())
            && m.subscription != ours.subscription
    })?;
    Some(Error::SubscriptionMismatch {
        ours: ours.subscription.to_string(),
        member: other.id.clone(),
        theirs: other.subscription.to_string(),
    })
}

fn backoff_end(rng: &mut SplitMix64, config: &Config, now: Instant, attempt: u32) -> Instant {
    now + backoff::delay(rng, config.backoff_min(), config.backoff_max(), attempt)
}

/// What a deadline of the member's timer table is for. `P` names a
/// partition: borrowed in the table, owned once a due timer is taken out
/// to fire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer<P> {
    /// The registration is due, or its backoff ends.
    Register,
    /// The read (and watch) of the member list is due, or its backoff ends.
    Members,
    /// The session is due to be confirmed, or the heartbeat's backoff ends.
    Heartbeat,
    /// The lease runs out: fetching must stop.
    LeaseEnd,
    /// One of a partition's own deadlines.
    Partition(P, PartitionTimer),
    /// The commit interval ends: commit what was processed.
    CommitInterval,
    /// A shutdown with every claim released deregisters, or its backoff
    /// ends.
    Deregister,
}

/// Which of the partitions' deadlines the timer table lists.
#[derive(Clone, Copy, Debug)]
enum PartitionTimers {
    /// The earliest (for the next wake-up).
    Earliest,
    /// Those at or before now (to fire).
    Due,
}

impl<P> Timer<P> {
    fn map_partition<Q>(self, f: impl FnOnce(P) -> Q) -> Timer<Q> {
        match self {
            Timer::Register => Timer::Register,
            Timer::Members => Timer::Members,
            Timer::Heartbeat => Timer::Heartbeat,
            Timer::LeaseEnd => Timer::LeaseEnd,
            Timer::Partition(partition, timer) => Timer::Partition(f(partition), timer),
            Timer::CommitInterval => Timer::CommitInterval,
            Timer::Deregister => Timer::Deregister,
        }
    }
}

#[cfg(feature = "sim")]
impl Member {
    /// Whether what the member keeps derived from its partitions (the
    /// deadlines in time order, the counts, whether it is settled) matches
    /// what their states say, worked out from scratch; the first
    /// difference otherwise. The simulator checks it after every step.
    #[doc(hidden)]
    pub fn check_derived(&self) -> Result<(), String> {
        self.partitions.check(self.config.claim_stall_threshold())?;
        let settled = self.partitions.len() == self.assigned.len()
            && self.assigned.iter().all(|p| {
                self.partitions.get(p).is_some_and(|s| {
                    s.fetch == Fetch::Fetching && matches!(s.phase, Phase::Owned(_))
                })
            });
        if settled != self.is_settled() {
            return Err(format!(
                "settled is {} but the partitions say {settled}",
                self.is_settled()
            ));
        }
        let earliest = self.earliest_timer();
        if earliest != self.next_timeout {
            return Err(format!(
                "the next timeout is kept as {:?} but the timers say {earliest:?}",
                self.next_timeout
            ));
        }
        Ok(())
    }

    /// Writes what decides this member's future into `canon`, for the
    /// explorer's visited set; `index` names the member in the group, so
    /// that its request ids are ranked apart from the others'. Left out:
    /// the configuration and what the member advertises (fixed for a
    /// member's life), the statistics (counted, never read), and the next
    /// request id (ids are renamed by rank, and a fresh one is above all).
    #[doc(hidden)]
    pub fn canonical(&self, canon: &mut crate::canon::Canon, index: usize) {
        // Beyond this many failures the backoff no longer grows: further
        // failures are alike (see `backoff::delay`).
        let saturation = (0..20u32)
            .find(|&k| {
                self.config.backoff_min().saturating_mul(1 << k) >= self.config.backoff_max()
            })
            .unwrap_or(20);
        let attempts = |n: u32| n.min(saturation);
        let step = |canon: &mut crate::canon::Canon, step: Step| match step {
            Step::Idle => canon.number(0),
            Step::Pending(id) => {
                canon.number(1);
                canon.request(index, id);
            }
            Step::Backoff(at) => {
                canon.number(2);
                canon.time(at);
            }
            Step::Done => canon.number(3),
        };
        canon.raw(&self.rng);
        canon.time(self.now);
        // Drained after every call; counted in case a driver did not.
        canon.raw(self.outbox.queue.len());
        canon.number(self.requests.len() as u64);
        for (&id, in_flight) in &self.requests {
            canon.request(index, id);
            canon.raw(&in_flight.purpose);
        }
        canon.maybe_session(self.session);
        if matches!(self.heartbeat, Step::Pending(_)) {
            canon.time(self.heartbeat_sent);
        }
        canon.maybe_time(self.heartbeat_answered);
        canon.number(self.renewals.moments().count() as u64);
        for moment in self.renewals.moments() {
            canon.maybe_time(moment);
        }
        canon.raw((self.suspended, self.members_stale));
        for s in [
            self.registration,
            self.members_watch,
            self.heartbeat,
            self.deregistration,
        ] {
            step(canon, s);
        }
        canon.raw((
            attempts(self.heartbeat_failures),
            attempts(self.registration_failures),
            attempts(self.members_failures),
        ));
        match &self.members {
            Some(members) => {
                canon.number(members.len() as u64);
                for m in members {
                    canon.raw((m.id.as_str(), &m.strategy, m.subscription.to_string()));
                }
            }
            None => canon.number(u64::MAX),
        }
        canon.raw((
            &self.counts,
            &self.reported_mismatch,
            &self.assigned,
            &self.claims_held,
        ));
        canon.maybe_session(self.reported_taken);
        canon.number(self.partitions.len() as u64);
        for (partition, state) in self.partitions.iter() {
            canon.raw(partition);
            state.canonical(canon, index, attempts);
        }
        canon.time(self.next_commit);
        canon.raw((self.shutting_down, self.closed));
    }
}
