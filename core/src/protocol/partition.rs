//! The state one member keeps for one partition it claims, owns or
//! releases, and the partition's life: every transition of its phase, and
//! what each one asks of the member. The member owns the queues, the
//! request ids, the clock and the jitter; a transition here changes the
//! partition and returns what the member must do about it (send a request,
//! tell the application, start or stop the fetcher).

use std::time::{Duration, Instant};

use crate::protocol::FetchFrom;
use crate::types::{FencingToken, MemberId, Offset, RequestId};

/// Where a partition stands in its life with this member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Assigned to us, not yet owned.
    Claiming(ClaimStep),
    /// Our claim is the owner record.
    Owned(OwnedStep),
    /// No longer ours to keep: draining, committing, deleting the claim.
    Releasing(ReleaseStep),
}

/// The step of a claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OwnedStep {
    /// Reading the committed offset.
    ReadingOffset,
    /// Waiting out a backoff before reading the offset again.
    ReadBackoff,
    /// The start offset is known: fetching, or ready to fetch.
    Ready,
}

/// The step of a release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReleaseStep {
    /// A claim was abandoned with its request in flight: its result decides
    /// whether there is a record to delete.
    AwaitClaim,
    /// Waiting for the application to drain, until the drain deadline.
    Draining,
    /// Waiting for an interval commit already in flight.
    AwaitCommit,
    /// The final commit is in flight.
    Committing,
    /// Waiting out a backoff before committing again.
    CommitBackoff,
    /// The delete of the owner record is in flight.
    Deleting,
    /// Waiting out a backoff before deleting again.
    DeleteBackoff,
}

/// What the application is doing with the partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fetch {
    /// Never started under this claim.
    Idle,
    /// Messages are flowing to the application.
    Fetching,
    /// Told to stop; the application is finishing what it has.
    Stopping,
    /// Stopped and drained (or given up on).
    Stopped,
}

/// What one of a partition's deadlines is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PartitionTimer {
    /// The claim has waited the stall threshold: report it, once.
    Stall,
    /// A backoff, re-check or retry ends (`retry_at`).
    Retry,
    /// A release stops waiting for the application's drain.
    DrainEnd,
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
    /// An interval commit in flight, with the offset it writes.
    pub commit: Option<(RequestId, Offset)>,
    /// When a release must stop waiting for the drain.
    pub drain_deadline: Option<Instant>,
    /// The partition was assigned to us again during its release: claim it
    /// anew once the release is done.
    pub reclaim: bool,
    pub corrupt_reported: bool,
}

impl PartitionState {
    /// The partition's deadlines, each with what it is for, in the order
    /// they fire when due together: a backoff, re-check or retry ending, a
    /// drain that must stop waiting, a claim to report as stalled after
    /// `stall_threshold`. The member's timer table lists them.
    pub fn timers(
        &self,
        stall_threshold: Duration,
    ) -> impl Iterator<Item = (Instant, PartitionTimer)> {
        let stall = (matches!(self.phase, Phase::Claiming(_)) && !self.stall_reported)
            .then(|| (self.since + stall_threshold, PartitionTimer::Stall));
        let draining = self.phase == Phase::Releasing(ReleaseStep::Draining);
        let drain_end = self
            .drain_deadline
            .filter(|_| draining)
            .map(|at| (at, PartitionTimer::DrainEnd));
        let retry = self.retry_at.map(|at| (at, PartitionTimer::Retry));
        [stall, retry, drain_end].into_iter().flatten()
    }

    /// A partition the assignment just gave us: its claim starts at `now`.
    pub fn claiming(now: Instant) -> Self {
        PartitionState {
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
            commit: None,
            drain_deadline: None,
            reclaim: false,
            corrupt_reported: false,
        }
    }

    /// The next offset a commit would write, if it is ahead of the last
    /// committed one (commits never go backwards).
    pub fn commit_due(&self) -> Option<Offset> {
        let next = self.processed?.checked_add(1)?;
        match self.committed {
            Some(done) if done >= next => None,
            _ => Some(next),
        }
    }

    /// Where a (re)started fetch begins: after the last processed message,
    /// else where the committed offset says.
    pub fn resume_from(&self) -> Option<FetchFrom> {
        match self.processed {
            Some(done) => Some(FetchFrom::Offset(done.saturating_add(1))),
            None => self.start,
        }
    }
}
