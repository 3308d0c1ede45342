//! The state one member keeps for one partition it claims, owns or
//! releases, and the partition's life: every transition of its phase, and
//! what each one asks of the member. The member owns the queues, the
//! request ids, the clock and the jitter; a transition here changes the
//! partition and returns what the member must do about it (send a request,
//! tell the application, start or stop the fetcher).

use std::time::{Duration, Instant};

use crate::error::StoreError;
use crate::progress::{Committed, Progress};
use crate::protocol::{AppEvent, ClaimOutcome, FetchCommand, FetchFrom};
use crate::types::{FencingToken, MemberId, Offset, RequestId, SessionId, TopicPartition};

/// Where a partition stands in its life with this member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Phase {
    /// Assigned to us, not yet owned.
    Claiming(ClaimStep),
    /// Our claim is the owner record.
    Owned(OwnedStep),
    /// No longer ours to keep: draining, committing, deleting the claim.
    Releasing(ReleaseStep),
}

/// The step of a claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ClaimStep {
    /// A claim request is in flight.
    Claiming,
    /// Another member owns it; a watch request on its record is in flight.
    WatchPending,
    /// The owner's record is watched; `retry_at` is a safety re-check in
    /// case a notification is lost.
    Watching,
    /// Waiting out a backoff before the next claim.
    Backoff,
}

/// The step of an owned partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum OwnedStep {
    /// Reading the committed offset.
    ReadingOffset,
    /// Waiting out a backoff before reading the offset again.
    ReadBackoff,
    /// The start offset is known: fetching, or ready to fetch.
    Ready,
}

/// The step of a release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ReleaseStep {
    /// A claim was abandoned with its request in flight: its result decides
    /// whether there is a record to delete.
    AwaitClaim,
    /// Waiting for the application to drain, until the drain deadline.
    Draining,
    /// Waiting for an interval commit already in flight.
    AwaitCommit,
    /// Waiting out a backoff before the final commit (the session may
    /// have lapsed: nothing is written until it is confirmed alive).
    CommitBackoff,
    /// The delete of the owner record is in flight, with the final commit
    /// if one is due (`commit` holds it then).
    Deleting,
    /// Waiting out a backoff before deleting again.
    DeleteBackoff,
}

/// What the application is doing with the partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Fetch {
    /// Never started under this claim.
    Idle,
    /// Messages are flowing to the application.
    Fetching,
    /// Held while the session may be lapsing: nothing is handed out, the
    /// position and what the application holds stay.
    Suspended,
    /// Told to stop; the application is finishing what it has.
    Stopping,
    /// Stopped and drained (or given up on).
    Stopped,
}

/// What one of a partition's deadlines is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum PartitionTimer {
    /// The claim has waited the stall threshold: report it, once.
    Stall,
    /// A backoff, re-check or retry ends (`retry_at`).
    Retry,
    /// A release stops waiting for the application's drain.
    DrainEnd,
}

/// A store request a partition's step needs. The member gives it an id,
/// records it with [`PartitionState::sent`] and queues the command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PartitionRequest {
    /// Create the owner record.
    Claim,
    /// Watch the record of the member that owns the partition.
    WatchOwner,
    /// Read the committed offset.
    ReadOffset,
    /// Commit `offset` under `token`: an interval commit, which runs
    /// beside the current step.
    Commit { offset: Offset, token: FencingToken },
    /// Delete our owner record, writing `commit` as the committed offset
    /// in the same step if given (the release's final commit).
    Release { commit: Option<Offset> },
}

/// What the member must do once a release stopped waiting for the drain.
#[derive(Debug)]
pub(crate) struct DrainEnd {
    /// The application did not drain in time: report it.
    pub timed_out: bool,
    /// The request the release goes on with, if it sends one now.
    pub send: Option<PartitionRequest>,
}

/// What a partition's due timer asks of the member.
#[derive(Debug)]
pub(crate) enum Fired {
    /// Nothing more.
    Nothing,
    /// Report the claim as stalled.
    Stalled {
        waited: Duration,
        holder: Option<MemberId>,
    },
    /// Send this request.
    Send(PartitionRequest),
    /// The release stopped waiting for the drain.
    Drain(DrainEnd),
}

/// What the member must do after the result of a claim request.
#[derive(Debug)]
pub(crate) enum AfterClaim {
    /// The result is for no step any more.
    Ignored,
    /// The claim took effect under this token: tell the application, then
    /// take the committed offset read with the claim, if it was, or read
    /// it.
    Owned(FencingToken, Option<Result<Option<Committed>, StoreError>>),
    /// Another member holds the partition: watch its record.
    Watch,
    /// The claim failed and waits out a backoff; report the error, if one
    /// is worth reporting.
    Failed(Option<StoreError>),
    /// A claim abandoned in flight took effect after all, under this
    /// token: tell the application it was claimed and is released, and
    /// delete the record.
    ReleaseClaimed(FencingToken),
    /// An abandoned claim's outcome is unknown: delete the record in case
    /// it is ours.
    Release,
    /// An abandoned claim never took effect: nothing is left to do.
    Abandoned,
}

/// What the member must do after the result of an owner watch, a retry
/// fired or another step that may send one request.
#[derive(Debug)]
pub(crate) enum Next {
    /// Nothing more.
    Nothing,
    /// Send this request.
    Send(PartitionRequest),
    /// The step failed and waits out a backoff: report the error.
    Report(StoreError),
}

/// What the member must do after the result of an offset read.
#[derive(Debug)]
pub(crate) enum AfterOffset {
    /// The result is for no step any more.
    Ignored,
    /// The committed offset is known (`None`: none is stored): tell the
    /// application.
    Read(Option<Offset>),
    /// The read failed and waits out a backoff; report the error, if one
    /// is worth reporting.
    Failed(Option<StoreError>),
}

/// What the member must do after the result of a commit.
#[derive(Debug)]
pub(crate) enum AfterCommit {
    /// Nothing more.
    Nothing,
    /// The release goes on with this request.
    Send(PartitionRequest),
    /// The claim is gone: report the fenced commit of this offset and
    /// forget the partition.
    Fenced(Offset),
    /// Report this error.
    Report(StoreError),
}

/// What the member must do after the result of a release.
#[derive(Debug)]
pub(crate) enum AfterRelease {
    /// Nothing more.
    Nothing,
    /// The release is over: drop the partition, `released` when its claim
    /// was deleted by us rather than found gone.
    Finished { released: bool },
    /// The claim was another's: the final commit of this offset it carried
    /// was refused. Report it, and drop the partition as lost.
    Fenced(Offset),
    /// The delete failed and waits out a backoff: report the error.
    Report(StoreError),
}

/// What the member must do once the assignment no longer gives us the
/// partition.
#[derive(Debug)]
pub(crate) enum AfterLetGo {
    /// Nothing more (the release is under way, or waits for a claim's
    /// result).
    Nothing,
    /// Delete the record a claim with an unknown outcome may have left.
    Release,
    /// The claim never took effect: drop the partition and forget its
    /// request.
    Abandon { forget: Option<RequestId> },
    /// An owned partition starts draining: forget the request it no longer
    /// waits for, tell the application, stop the fetcher, and see whether
    /// the drain is over already.
    Drain {
        forget: Option<RequestId>,
        stop: Option<FetchCommand>,
    },
}

/// One partition's state.
#[derive(Clone, Debug)]
pub(crate) struct PartitionState {
    pub phase: Phase,
    /// The store request the current step waits for.
    pub request: Option<RequestId>,
    /// When the current backoff, re-check or retry ends.
    pub retry_at: Option<Instant>,
    /// Failed attempts of the current step, for the backoff.
    pub attempt: u32,
    /// When the claim started (for the stall report).
    pub since: Instant,
    pub stall_reported: bool,
    /// The owner the store last named while we claimed.
    pub holder: Option<MemberId>,
    /// A claim request failed with an unknown outcome: the store may hold a
    /// record of ours that must be deleted if we walk away.
    pub maybe_ours: bool,
    /// Our claim's fencing token, once owned.
    pub token: Option<FencingToken>,
    pub fetch: Fetch,
    /// Where fetching starts, once the committed offset is read.
    pub start: Option<FetchFrom>,
    /// The next offset last known committed.
    pub committed: Option<Offset>,
    /// The highest offset the application processed under this claim.
    pub processed: Option<Offset>,
    /// The next offset the application last reported with its progress
    /// ([`PartitionState::progressed`]): what a commit writes when nothing
    /// below it was acknowledged under this claim.
    pub frontier: Option<Offset>,
    /// What the application acknowledged above where it has processed
    /// everything: the progress record the next commit writes. It starts
    /// as the one read with the committed offset.
    pub progress: Progress,
    /// The progress record last known stored beside `committed`.
    pub committed_progress: Progress,
    /// An interval commit in flight, with the offset it writes.
    pub commit: Option<(RequestId, Offset)>,
    /// The progress record the commit in flight writes.
    pub commit_progress: Progress,
    /// When a release must stop waiting for the drain.
    pub drain_deadline: Option<Instant>,
    /// The partition was assigned to us again during its release: claim it
    /// anew once the release is done.
    pub reclaim: bool,
    pub corrupt_reported: bool,
    /// Whether offsets are read from and committed to the store
    /// ([`crate::Config::store_offsets`]).
    pub store_offsets: bool,
}

impl PartitionState {
    /// Shows `visit` the partition's deadlines, each with what it is for,
    /// in the order they fire when due together: a claim to report as
    /// stalled after `stall_threshold`, a backoff, re-check or retry
    /// ending, a drain that must stop waiting. The member's timer table
    /// lists them.
    pub fn timers(
        &self,
        stall_threshold: Duration,
        mut visit: impl FnMut(Instant, PartitionTimer),
    ) {
        if matches!(self.phase, Phase::Claiming(_)) && !self.stall_reported {
            visit(self.since + stall_threshold, PartitionTimer::Stall);
        }
        if let Some(at) = self.retry_at {
            visit(at, PartitionTimer::Retry);
        }
        if let (Some(at), Phase::Releasing(ReleaseStep::Draining)) =
            (self.drain_deadline, self.phase)
        {
            visit(at, PartitionTimer::DrainEnd);
        }
    }

    /// A partition the assignment just gave us: its claim starts at `now`.
    pub fn claiming(now: Instant, store_offsets: bool) -> Self {
        PartitionState {
            store_offsets,
            phase: Phase::Claiming(ClaimStep::Backoff),
            request: None,
            retry_at: None,
            attempt: 0,
            since: now,
            stall_reported: false,
            holder: None,
            maybe_ours: false,
            token: None,
            fetch: Fetch::Idle,
            start: None,
            committed: None,
            processed: None,
            frontier: None,
            progress: Progress::new(),
            committed_progress: Progress::new(),
            commit: None,
            commit_progress: Progress::new(),
            drain_deadline: None,
            reclaim: false,
            corrupt_reported: false,
        }
    }

    /// The next offset a commit would write, if it is ahead of the last
    /// committed one (commits never go backwards) or the progress above
    /// it changed; never, when the application keeps the offsets.
    pub fn commit_due(&self) -> Option<Offset> {
        if !self.store_offsets {
            return None;
        }
        let next = self
            .processed
            .and_then(|p| p.checked_add(1))
            .max(self.frontier)?;
        match self.committed {
            Some(done) if done > next => None,
            Some(done) if done == next => {
                (self.progress_for(done) != self.committed_progress).then_some(done)
            }
            _ => Some(next),
        }
    }

    /// The progress record a commit of `offset` writes: what was
    /// acknowledged above it.
    pub fn progress_for(&self, offset: Offset) -> Progress {
        let mut progress = self.progress.clone();
        progress.forget_below(offset);
        progress
    }

    /// Where a (re)started fetch begins: after the last processed message,
    /// else where the committed offset says.
    pub fn resume_from(&self) -> Option<FetchFrom> {
        match self.processed {
            Some(done) => Some(FetchFrom::Offset(done.saturating_add(1))),
            None => self.start,
        }
    }

    /// Records that the request `id` went out for `request`, and moves to
    /// the step that waits for it.
    pub fn sent(&mut self, id: RequestId, request: PartitionRequest) {
        self.phase = match request {
            PartitionRequest::Claim => Phase::Claiming(ClaimStep::Claiming),
            PartitionRequest::WatchOwner => Phase::Claiming(ClaimStep::WatchPending),
            PartitionRequest::ReadOffset => Phase::Owned(OwnedStep::ReadingOffset),
            PartitionRequest::Commit { offset, .. } => {
                self.commit = Some((id, offset));
                self.commit_progress = self.progress_for(offset);
                return;
            }
            PartitionRequest::Release { commit } => {
                // The final commit rides on the release: its request is the
                // release's own.
                if let Some(offset) = commit {
                    self.commit = Some((id, offset));
                    self.commit_progress = self.progress_for(offset);
                }
                Phase::Releasing(ReleaseStep::Deleting)
            }
        };
        self.request = Some(id);
        self.retry_at = None;
    }

    /// Waits in `step` until the backoff `backoff` gives for the failures
    /// so far ends.
    fn back_off(&mut self, step: Phase, backoff: impl FnOnce(u32) -> Instant) {
        self.phase = step;
        self.request = None;
        self.retry_at = Some(backoff(self.attempt));
        self.attempt = self.attempt.saturating_add(1);
    }

    /// Fires `timer`, which is due at `now`. `may_consume` is whether the
    /// member may write offsets; `backoff` gives the end of a backoff after
    /// so many failures.
    pub fn fire(
        &mut self,
        timer: PartitionTimer,
        now: Instant,
        may_consume: bool,
        backoff: impl FnOnce(u32) -> Instant,
    ) -> Fired {
        match timer {
            PartitionTimer::Stall => {
                self.stall_reported = true;
                Fired::Stalled {
                    waited: now.saturating_duration_since(self.since),
                    holder: self.holder.clone(),
                }
            }
            PartitionTimer::Retry => {
                self.retry_at = None;
                let request = match self.phase {
                    Phase::Claiming(ClaimStep::Backoff | ClaimStep::Watching) => {
                        Some(PartitionRequest::Claim)
                    }
                    Phase::Owned(OwnedStep::ReadBackoff) => Some(PartitionRequest::ReadOffset),
                    // A failed release goes again with the final commit
                    // still due, if it is.
                    Phase::Releasing(ReleaseStep::CommitBackoff | ReleaseStep::DeleteBackoff) => {
                        self.final_commit(may_consume, backoff)
                    }
                    _ => None,
                };
                request.map_or(Fired::Nothing, Fired::Send)
            }
            PartitionTimer::DrainEnd => self
                .end_drain(now, may_consume, backoff)
                .map_or(Fired::Nothing, Fired::Drain),
        }
    }

    // ----- claiming -----

    /// The result of the claim request this partition waits for; `session`
    /// is the member's, to tell a lost reply of our own claim from another
    /// owner.
    pub fn claim_result(
        &mut self,
        result: Result<ClaimOutcome, StoreError>,
        session: Option<SessionId>,
        backoff: impl FnOnce(u32) -> Instant,
    ) -> AfterClaim {
        // A record carrying our session is ours, whichever reply made it.
        let ours = |outcome: &ClaimOutcome| match *outcome {
            ClaimOutcome::Created { token, .. } => Some(token),
            ClaimOutcome::Held {
                session: s, token, ..
            } if Some(s) == session => Some(token),
            ClaimOutcome::Held { .. } => None,
        };
        match self.phase {
            Phase::Claiming(ClaimStep::Claiming) => match result {
                Ok(mut outcome) => match ours(&outcome) {
                    Some(token) => {
                        self.token = Some(token);
                        self.attempt = 0;
                        self.maybe_ours = false;
                        self.holder = None;
                        let committed = match &mut outcome {
                            ClaimOutcome::Created { committed, .. } => committed.take(),
                            ClaimOutcome::Held { .. } => None,
                        };
                        AfterClaim::Owned(token, committed)
                    }
                    None => {
                        if let ClaimOutcome::Held { owner, .. } = outcome {
                            self.holder = owner;
                        }
                        self.maybe_ours = false;
                        AfterClaim::Watch
                    }
                },
                Err(error) => {
                    let report = match error {
                        // The owner vanished between our create and our
                        // read of it: the way is clear, try again shortly.
                        StoreError::NoNode | StoreError::SessionExpired => None,
                        StoreError::ConnectionLoss => {
                            self.maybe_ours = true;
                            None
                        }
                        other => Some(other),
                    };
                    self.back_off(Phase::Claiming(ClaimStep::Backoff), backoff);
                    AfterClaim::Failed(report)
                }
            },
            Phase::Releasing(ReleaseStep::AwaitClaim) => match result {
                Ok(outcome) => match ours(&outcome) {
                    Some(token) => {
                        self.token = Some(token);
                        AfterClaim::ReleaseClaimed(token)
                    }
                    None => AfterClaim::Abandoned,
                },
                Err(StoreError::NoNode) => AfterClaim::Abandoned,
                Err(_) => AfterClaim::Release,
            },
            _ => AfterClaim::Ignored,
        }
    }

    /// The result of the watch on the owner's record; `recheck` is when a
    /// watched claim looks again in case a notification is lost.
    pub fn watch_result(
        &mut self,
        result: Result<bool, StoreError>,
        recheck: Instant,
        backoff: impl FnOnce(u32) -> Instant,
    ) -> Next {
        // Only a claim waiting for its watch takes the result.
        let Phase::Claiming(ClaimStep::WatchPending) = self.phase else {
            return Next::Nothing;
        };
        match result {
            Ok(true) => {
                self.phase = Phase::Claiming(ClaimStep::Watching);
                self.request = None;
                self.retry_at = Some(recheck);
                self.attempt = 0;
                Next::Nothing
            }
            // The record is gone already.
            Ok(false) => Next::Send(PartitionRequest::Claim),
            Err(error) => {
                self.back_off(Phase::Claiming(ClaimStep::Backoff), backoff);
                match error {
                    StoreError::ConnectionLoss | StoreError::SessionExpired => Next::Nothing,
                    other => Next::Report(other),
                }
            }
        }
    }

    /// The owner's record is deleted: claim again at once if we were
    /// waiting for that, forgetting the request of the wait (returned).
    pub fn owner_deleted(&mut self) -> Option<Option<RequestId>> {
        let waiting = matches!(
            self.phase,
            Phase::Claiming(ClaimStep::WatchPending | ClaimStep::Watching)
        );
        waiting.then(|| {
            self.attempt = 0;
            self.request.take()
        })
    }

    // ----- owned -----

    /// The result of the offset read this partition waits for; `initial`
    /// is where fetching starts when no offset is stored.
    pub fn offset_result(
        &mut self,
        result: Result<Option<Committed>, StoreError>,
        initial: FetchFrom,
        backoff: impl FnOnce(u32) -> Instant,
    ) -> AfterOffset {
        if self.phase != Phase::Owned(OwnedStep::ReadingOffset) {
            return AfterOffset::Ignored;
        }
        match result {
            Ok(committed) => self.offset_known(committed, initial),
            Err(error) => {
                let corrupt = matches!(error, StoreError::Corrupt { .. });
                // Corrupt data is reported once and never overwritten: the
                // partition waits for an operator rather than guess where
                // to start.
                let report = !corrupt || !self.corrupt_reported;
                self.corrupt_reported |= corrupt;
                self.back_off(Phase::Owned(OwnedStep::ReadBackoff), backoff);
                let quiet = matches!(
                    error,
                    StoreError::ConnectionLoss | StoreError::SessionExpired
                );
                AfterOffset::Failed((report && !quiet).then_some(error))
            }
        }
    }

    /// The claim took effect, and the committed offset was read with it
    /// (`result`): as the result of an offset read, which a failure retries
    /// after a backoff.
    pub fn read_with_claim(
        &mut self,
        result: Result<Option<Committed>, StoreError>,
        initial: FetchFrom,
        backoff: impl FnOnce(u32) -> Instant,
    ) -> AfterOffset {
        self.phase = Phase::Owned(OwnedStep::ReadingOffset);
        self.request = None;
        self.retry_at = None;
        self.offset_result(result, initial, backoff)
    }

    /// The claim took effect and the application keeps the offsets:
    /// nothing to read, the fetch starts at `initial` (or where the
    /// application says).
    pub fn no_offset_to_read(&mut self, initial: FetchFrom) -> AfterOffset {
        self.offset_known(None, initial)
    }

    /// The committed offset is known (`None`: nothing committed): the
    /// partition is ready to fetch from it, else from `initial`.
    fn offset_known(&mut self, committed: Option<Committed>, initial: FetchFrom) -> AfterOffset {
        let (committed, progress) = match committed {
            Some(Committed { offset, progress }) => (Some(offset), progress),
            None => (None, Progress::new()),
        };
        self.committed = committed;
        self.committed_progress = progress.clone();
        self.progress = progress;
        self.start = Some(committed.map_or(initial, FetchFrom::Offset));
        self.phase = Phase::Owned(OwnedStep::Ready);
        self.request = None;
        self.attempt = 0;
        AfterOffset::Read(committed)
    }

    /// The application processed every message up to `offset`, fetched
    /// under `token`.
    pub fn processed(&mut self, token: FencingToken, offset: Offset) {
        // Acknowledgements count only under the claim they were fetched
        // under, and only until the release's final commit is decided:
        // late ones are ignored so nothing is written for a partition we
        // are letting go.
        let open = matches!(
            self.phase,
            Phase::Owned(_) | Phase::Releasing(ReleaseStep::Draining)
        );
        if open
            && self.token == Some(token)
            && matches!(
                self.fetch,
                Fetch::Fetching | Fetch::Suspended | Fetch::Stopping
            )
        {
            self.processed = Some(self.processed.map_or(offset, |p| p.max(offset)));
        }
    }

    /// The application processed every message below `next` and, above
    /// it, those `progress` names, fetched under `token`; ignored as
    /// [`PartitionState::processed`] ignores an acknowledgement, and when
    /// an earlier report said more (a higher `next`).
    pub fn progressed(&mut self, token: FencingToken, next: Offset, mut progress: Progress) {
        let open = matches!(
            self.phase,
            Phase::Owned(_) | Phase::Releasing(ReleaseStep::Draining)
        );
        let fetching = matches!(
            self.fetch,
            Fetch::Fetching | Fetch::Suspended | Fetch::Stopping
        );
        if !open || !fetching || self.token != Some(token) || self.frontier > Some(next) {
            return;
        }
        progress.forget_below(next);
        self.frontier = Some(next);
        self.progress = progress;
    }

    /// The application finished what it had after a stop under `token`;
    /// `true` when a release waits for that.
    pub fn drained(&mut self, token: FencingToken) -> bool {
        if self.token == Some(token) && self.fetch == Fetch::Stopping {
            self.fetch = Fetch::Stopped;
        }
        self.phase == Phase::Releasing(ReleaseStep::Draining)
    }

    /// Stops the fetcher if it is feeding the application, with the
    /// command that tells it.
    pub fn stop_fetching(&mut self, partition: &TopicPartition) -> Option<FetchCommand> {
        match (self.fetch, self.token) {
            (Fetch::Fetching | Fetch::Suspended, Some(token)) => {
                self.fetch = Fetch::Stopping;
                Some(FetchCommand::Stop {
                    partition: partition.clone(),
                    token,
                })
            }
            _ => None,
        }
    }

    /// Follows the lease: stops fetching when the member may not
    /// `consume`, and (re)starts an owned partition's fetch when it may
    /// `start` one; returns the command for the fetcher.
    pub fn follow_lease(
        &mut self,
        partition: &TopicPartition,
        consume: bool,
        start: bool,
    ) -> Option<FetchCommand> {
        let token = self.token?;
        if !consume {
            // Held, not stopped: if the session turns out alive the
            // application goes on where it stood, with nothing refetched
            // and nothing to drain.
            if self.fetch != Fetch::Fetching {
                return None;
            }
            self.fetch = Fetch::Suspended;
            return Some(FetchCommand::Suspend {
                partition: partition.clone(),
                token,
            });
        }
        if !start || self.phase != Phase::Owned(OwnedStep::Ready) {
            return None;
        }
        if self.fetch == Fetch::Suspended {
            self.fetch = Fetch::Fetching;
            return Some(FetchCommand::Resume {
                partition: partition.clone(),
                token,
            });
        }
        if !matches!(self.fetch, Fetch::Idle | Fetch::Stopped) {
            return None;
        }
        let from = self.resume_from()?;
        self.fetch = Fetch::Fetching;
        Some(FetchCommand::Start {
            partition: partition.clone(),
            from,
            token,
            progress: self.progress.clone(),
        })
    }

    /// The interval commit an owned partition needs, if it has processed
    /// past the committed offset and no commit is in flight.
    pub fn interval_commit(&self) -> Option<PartitionRequest> {
        if !matches!(self.phase, Phase::Owned(_)) || self.commit.is_some() {
            return None;
        }
        Some(PartitionRequest::Commit {
            offset: self.commit_due()?,
            token: self.token?,
        })
    }

    /// The result of the interval commit in flight: the event that tells
    /// the application, and what follows. `may_consume` and `backoff` are
    /// as for [`PartitionState::fire`].
    pub fn commit_result(
        &mut self,
        partition: &TopicPartition,
        result: Result<(), StoreError>,
        may_consume: bool,
        backoff: impl FnOnce(u32) -> Instant,
    ) -> (Option<AppEvent>, AfterCommit) {
        let Some((_, offset)) = self.commit.take() else {
            return (None, AfterCommit::Nothing);
        };
        let event = self.commit_outcome(partition, offset, &result);
        let next = match result {
            Ok(()) => {
                self.stored(offset);
                self.attempt = 0;
                let request = match self.phase {
                    Phase::Releasing(ReleaseStep::AwaitCommit) => {
                        self.final_commit(may_consume, backoff)
                    }
                    _ => None,
                };
                request.map_or(AfterCommit::Nothing, AfterCommit::Send)
            }
            // The claim is gone: whatever we thought, we do not own the
            // partition.
            Err(StoreError::NotOwner) => AfterCommit::Fenced(offset),
            Err(error) => {
                // Only a release past its drain retries here; a draining
                // one sends its final commit once the drain is over.
                let releasing = matches!(
                    self.phase,
                    Phase::Releasing(ReleaseStep::AwaitCommit | ReleaseStep::CommitBackoff)
                );
                if releasing {
                    // The final commit keeps the duplicates of the next
                    // owner down; retry it, the owner record still guards.
                    self.back_off(Phase::Releasing(ReleaseStep::CommitBackoff), backoff);
                }
                match error {
                    StoreError::ConnectionLoss | StoreError::SessionExpired => AfterCommit::Nothing,
                    other => AfterCommit::Report(other),
                }
            }
        };
        (event, next)
    }

    // ----- releasing -----

    /// The assignment no longer gives us the partition; an owned one
    /// drains until `drain_deadline`.
    pub fn let_go(&mut self, partition: &TopicPartition, drain_deadline: Instant) -> AfterLetGo {
        self.reclaim = false;
        match self.phase {
            // Its result decides whether there is a record to delete.
            Phase::Claiming(ClaimStep::Claiming) => {
                self.phase = Phase::Releasing(ReleaseStep::AwaitClaim);
                AfterLetGo::Nothing
            }
            Phase::Claiming(_) if self.maybe_ours => AfterLetGo::Release,
            Phase::Claiming(_) => AfterLetGo::Abandon {
                forget: self.request,
            },
            Phase::Owned(_) => {
                // An offset read in flight no longer matters; an interval
                // commit does.
                let forget = self
                    .request
                    .take()
                    .filter(|&id| self.commit.is_none_or(|(c, _)| c != id));
                self.retry_at = None;
                self.drain_deadline = Some(drain_deadline);
                self.phase = Phase::Releasing(ReleaseStep::Draining);
                AfterLetGo::Drain {
                    forget,
                    stop: self.stop_fetching(partition),
                }
            }
            Phase::Releasing(_) => AfterLetGo::Nothing,
        }
    }

    /// Ends a release's wait for the drain if the application drained or
    /// the drain deadline passed at `now`; `None` while it still waits.
    /// `may_consume` and `backoff` are as for [`PartitionState::fire`].
    pub fn end_drain(
        &mut self,
        now: Instant,
        may_consume: bool,
        backoff: impl FnOnce(u32) -> Instant,
    ) -> Option<DrainEnd> {
        if self.phase != Phase::Releasing(ReleaseStep::Draining) {
            return None;
        }
        let timed_out = self.fetch == Fetch::Stopping;
        if timed_out {
            if self.drain_deadline.is_some_and(|deadline| now < deadline) {
                return None;
            }
            self.fetch = Fetch::Stopped;
        }
        self.drain_deadline = None;
        let send = if self.commit.is_some() {
            self.phase = Phase::Releasing(ReleaseStep::AwaitCommit);
            None
        } else {
            self.final_commit(may_consume, backoff)
        };
        Some(DrainEnd { timed_out, send })
    }

    /// The commit of `offset` with [`PartitionState::commit_progress`] is
    /// stored.
    fn stored(&mut self, offset: Offset) {
        let progress = std::mem::take(&mut self.commit_progress);
        if self.committed.is_none_or(|c| c <= offset) {
            self.committed = Some(offset);
            self.committed_progress = progress;
        }
    }

    /// The release's next request once nothing is left to drain: the
    /// delete of the record, carrying the final commit if one is due. A
    /// member that may not consume (`may_consume` false) may have lost its
    /// session and writes nothing until it is confirmed alive: with a
    /// commit due, it looks again after a backoff.
    pub fn final_commit(
        &mut self,
        may_consume: bool,
        backoff: impl FnOnce(u32) -> Instant,
    ) -> Option<PartitionRequest> {
        match (self.commit_due(), self.token) {
            (Some(_), Some(_)) if !may_consume => {
                self.back_off(Phase::Releasing(ReleaseStep::CommitBackoff), backoff);
                None
            }
            (Some(offset), Some(_)) => Some(PartitionRequest::Release {
                commit: Some(offset),
            }),
            _ => Some(PartitionRequest::Release { commit: None }),
        }
    }

    /// What the application is told of the commit of `offset` under this
    /// partition's claim, once the store answered `result`. A commit goes
    /// out only under a claim, and the claim of a partition never changes
    /// while its state lives.
    fn commit_outcome(
        &self,
        partition: &TopicPartition,
        offset: Offset,
        result: &Result<(), StoreError>,
    ) -> Option<AppEvent> {
        self.token
            .map(|token| AppEvent::commit_outcome(partition.clone(), token, offset, result))
    }

    /// The result of release `id`, the delete of our owner record and the
    /// final commit it carried, if any: the event that tells the
    /// application of that commit, and what follows.
    pub fn release_result(
        &mut self,
        partition: &TopicPartition,
        id: RequestId,
        result: Result<(), StoreError>,
        backoff: impl FnOnce(u32) -> Instant,
    ) -> (Option<AppEvent>, AfterRelease) {
        let carried = match self.commit {
            Some((c, offset)) if c == id => {
                self.commit = None;
                Some(offset)
            }
            _ => None,
        };
        let event = carried.and_then(|offset| self.commit_outcome(partition, offset, &result));
        let next = match (result, carried) {
            (Ok(()), Some(offset)) => {
                self.stored(offset);
                AfterRelease::Finished { released: true }
            }
            // NoNode: an earlier attempt whose reply was lost deleted it
            // (and wrote the commit it carried, if it was this one).
            (Ok(()) | Err(StoreError::NoNode), _) => AfterRelease::Finished { released: true },
            // Another claim's record: nothing was written.
            (Err(StoreError::NotOwner), Some(offset)) => AfterRelease::Fenced(offset),
            // The claim was gone before the release: lost, not handed over.
            (Err(StoreError::NotOwner), None) => AfterRelease::Finished { released: false },
            // The backend announces the expiry, which drops everything.
            (Err(StoreError::SessionExpired), _) => AfterRelease::Nothing,
            (Err(error), _) => {
                self.back_off(Phase::Releasing(ReleaseStep::DeleteBackoff), backoff);
                if error == StoreError::ConnectionLoss {
                    AfterRelease::Nothing
                } else {
                    AfterRelease::Report(error)
                }
            }
        };
        (event, next)
    }

    /// The event that tells what became of the partition once its state
    /// is dropped: released (`released`) or lost if it was held, abandoned
    /// if it never was.
    pub fn gone(&self, partition: TopicPartition, released: bool) -> AppEvent {
        match self.token {
            Some(token) if released => AppEvent::Released { partition, token },
            Some(token) => AppEvent::Lost { partition, token },
            None => AppEvent::ClaimAbandoned { partition },
        }
    }
}

#[cfg(feature = "sim")]
impl PartitionState {
    /// Writes what decides this partition's future into `canon`, for the
    /// explorer's visited set; `member` is the index of the member whose
    /// request ids these are, and `attempts` clamps failure counts where
    /// the backoff stops growing.
    pub(crate) fn canonical(
        &self,
        canon: &mut crate::canon::Canon,
        member: usize,
        attempts: impl Fn(u32) -> u32,
    ) {
        canon.raw((self.phase, self.fetch, self.start));
        match self.request {
            Some(id) => canon.request(member, id),
            None => canon.number(u64::MAX),
        }
        canon.maybe_time(self.retry_at);
        canon.number(u64::from(attempts(self.attempt)));
        // `since` only dates the stall report and the claim's wait: past
        // the stall threshold it matters no more, and the clamp in the
        // past covers that.
        canon.time(self.since);
        canon.raw((
            self.stall_reported,
            &self.holder,
            self.maybe_ours,
            self.committed,
            self.processed,
            (
                self.frontier,
                &self.progress,
                &self.committed_progress,
                &self.commit_progress,
            ),
            self.reclaim,
            self.corrupt_reported,
            self.store_offsets,
        ));
        match self.token {
            Some(token) => canon.zxid(token.0),
            None => canon.number(u64::MAX),
        }
        match self.commit {
            Some((id, offset)) => {
                canon.request(member, id);
                canon.raw(offset);
            }
            None => canon.number(u64::MAX),
        }
        canon.maybe_time(self.drain_deadline);
    }
}
