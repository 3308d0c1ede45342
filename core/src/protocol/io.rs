//! What goes between the member state machine and each party around it:
//! the store's requests ([`StoreRequest`]) and what it said ([`Event`]), the
//! fetcher's starts and stops ([`FetchCommand`]), and what the application
//! is told ([`AppEvent`]), all three leaving the member as one ordered
//! [`Output`]. All speak of members, claims, owners
//! and offsets, never of znodes, keys or leases: a backend translates.

use std::time::{Duration, Instant};

use crate::error::{Error, Operation, StoreError};
use crate::progress::{Committed, Progress};
use crate::subscription::MemberInfo;
use crate::types::{FencingToken, MemberId, Offset, RequestId, SessionId, TopicPartition};

/// What the member decided, taken from [`crate::Member::poll_output`] in the
/// order it was decided: one queue for the fetcher, the store and the
/// application, so that no driver can carry a partition's release to the
/// store before its stop has reached the fetcher.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Output {
    /// For the fetcher: start, stop, suspend or resume a partition.
    Fetch(FetchCommand),
    /// For the store: carry the request out and answer with its result
    /// event, even a failure ([`StoreRequest::failed`]).
    Store(StoreRequest),
    /// For the application (and telemetry): claims, commits, releases,
    /// losses and problems. Nothing needs doing about them.
    App(AppEvent),
    /// Nothing is queued: call [`crate::Member::handle_timeout`] at this
    /// moment, or earlier with an event. `None`: no timer runs (the member
    /// is closed, or waits only for the store).
    Timeout(Option<Instant>),
}

/// What the store said, handed to [`crate::Member::handle_event`]: a
/// request's result, a watch notification, a change of the session. The
/// application's own inputs are methods of [`crate::Member`].
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A new store session is open (the first one, or a fresh one after an
    /// expiry). The member registers under it.
    SessionEstablished {
        /// The store's id of the session (ZooKeeper session id, etcd lease).
        session: SessionId,
    },
    /// The session just established is one a previous process of this
    /// member opened and left alive (static membership: a restart within
    /// the session timeout resumed it), and it holds the claims of these
    /// partitions already. Sent after [`Event::SessionEstablished`], before
    /// any result. The member claims them again once it knows its
    /// assignment: it keeps those the assignment gives it (with their
    /// fencing tokens, nothing moves) and releases the others.
    ClaimsHeld {
        /// The partitions whose owner records the session holds.
        partitions: Vec<TopicPartition>,
    },
    /// The store's leader renewed the session, or answered a request sent
    /// under it, sent at `sent`: the session opened (at or after `sent`),
    /// a write or a `sync` answered (ZooKeeper), a keep-alive answered
    /// (etcd). Never a read: a follower answers reads from what it has,
    /// even when cut off from its leader, which expires sessions.
    ///
    /// The member's lease counts only from these: it may hand out messages
    /// until the latest renewal the leader is sure to have counted, plus
    /// the session timeout, less the suspension margin. Ignored while the
    /// session is suspended.
    SessionRenewed {
        /// When the renewing request was sent (at or before the moment the
        /// store received it).
        sent: Instant,
        /// How long the leader may take to count it: zero where the leader
        /// renews the session as it answers (etcd's keep-alives, a session
        /// opened). A ZooKeeper follower reports its sessions' activity to
        /// the leader with its answer to the leader's next ping (every half
        /// tick), so an answer through a follower proves nothing counted
        /// yet: the member counts this renewal once a later one, sent at
        /// least `counted_after` after this one's answer, was answered (the
        /// follower had sent its report), and then one sent after that
        /// answer was answered too (the leader read the report first, and
        /// kept the session). See the stores chapter of the guide.
        counted_after: Duration,
    },
    /// The connection to the store is lost (or the session cannot be kept
    /// alive); the session may still be alive on the server.
    SessionSuspended {
        /// A moment at or before the last time the store's leader renewed
        /// the session (ZooKeeper: a write or a sync answered; etcd: an
        /// answered keep-alive). Consumption stops before that moment plus
        /// the session timeout, less the suspension margin, if it did not
        /// already; [`Event::SessionRenewed`] counts for nothing until
        /// [`Event::SessionResumed`].
        last_heard: Instant,
    },
    /// The connection is back and the session survived.
    SessionResumed,
    /// The session is gone: every record it held is gone or about to be.
    SessionExpired,
    /// The member list changed since the last [`StoreOp::WatchMembers`]
    /// (a one-shot notification; the member reads the list again).
    MembersChanged,
    /// The result of [`StoreOp::Register`].
    RegisterResult {
        /// The request's id.
        id: RequestId,
        /// What the store said.
        result: Result<RegisterOutcome, StoreError>,
    },
    /// The result of [`StoreOp::Deregister`].
    DeregisterResult {
        /// The request's id.
        id: RequestId,
        /// What the store said.
        result: Result<(), StoreError>,
    },
    /// The result of [`StoreOp::WatchMembers`]: the current members.
    MembersResult {
        /// The request's id.
        id: RequestId,
        /// The registered members, in any order.
        result: Result<Vec<MemberInfo>, StoreError>,
    },
    /// The result of [`StoreOp::Claim`].
    ClaimResult {
        /// The request's id.
        id: RequestId,
        /// What the store said.
        result: Result<ClaimOutcome, StoreError>,
    },
    /// The result of [`StoreOp::WatchOwner`].
    OwnerWatchResult {
        /// The request's id.
        id: RequestId,
        /// `true`: the owner record exists and is watched; `false`: it is
        /// already gone.
        result: Result<bool, StoreError>,
    },
    /// A watched owner record was deleted (or changed hands).
    OwnerDeleted {
        /// The partition whose owner record went away.
        partition: TopicPartition,
    },
    /// The result of [`StoreOp::ReadOffset`].
    OffsetResult {
        /// The request's id.
        id: RequestId,
        /// The committed next offset and the progress written with it, or
        /// `None` if nothing was committed.
        result: Result<Option<Committed>, StoreError>,
    },
    /// The result of [`StoreOp::CommitOffset`].
    CommitResult {
        /// The request's id.
        id: RequestId,
        /// [`StoreError::NotOwner`] when the commit was fenced.
        result: Result<(), StoreError>,
    },
    /// The result of [`StoreOp::Release`].
    ReleaseResult {
        /// The request's id.
        id: RequestId,
        /// Without a commit: `Ok` when the record is gone or was not ours.
        /// With one: `Ok` when the offset was written and the record
        /// deleted; [`StoreError::NotOwner`] when the record is another
        /// claim's, and [`StoreError::NoNode`] when it is gone (an earlier
        /// attempt whose answer was lost may have done both): nothing was
        /// written then.
        result: Result<(), StoreError>,
    },
    /// The result of [`StoreOp::Heartbeat`].
    HeartbeatResult {
        /// The request's id.
        id: RequestId,
        /// `Ok` when the session is alive on the server.
        result: Result<(), StoreError>,
    },
    /// Something wrong the backend found in the store outside a request's
    /// result (a member registration it could not read, say): reported on
    /// the error output, nothing else changes.
    StoreProblem {
        /// What the backend was doing.
        operation: Operation,
        /// What it found.
        error: StoreError,
    },
}

impl Event {
    /// The id of the request this event answers (`None` for events that
    /// answer no request: session changes, notifications, progress).
    pub fn request_id(&self) -> Option<RequestId> {
        match self {
            Event::RegisterResult { id, .. }
            | Event::DeregisterResult { id, .. }
            | Event::MembersResult { id, .. }
            | Event::ClaimResult { id, .. }
            | Event::OwnerWatchResult { id, .. }
            | Event::OffsetResult { id, .. }
            | Event::CommitResult { id, .. }
            | Event::ReleaseResult { id, .. }
            | Event::HeartbeatResult { id, .. } => Some(*id),
            _ => None,
        }
    }
}

/// The outcome of a registration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegisterOutcome {
    /// The registration record now exists under our session.
    Registered,
    /// A registration record for this member id exists already, under
    /// `session` (ours after a lost reply, or a previous session).
    Exists {
        /// The session holding the record.
        session: SessionId,
    },
}

/// The outcome of a claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The owner record was created by this request.
    Created {
        /// The new claim's fencing token.
        token: FencingToken,
        /// The committed next offset, read with the claim when the request
        /// asked for it ([`StoreOp::Claim`]'s `read_offset`): `None` when
        /// it did not, or when the store did not read it (the member then
        /// reads it on its own); otherwise what a
        /// [`StoreOp::ReadOffset`] would have answered.
        committed: Option<Result<Option<Committed>, StoreError>>,
    },
    /// An owner record exists already; the core compares its session with
    /// its own to tell a lost reply of its own claim from another owner.
    Held {
        /// The member named in the record (`None` if unreadable).
        owner: Option<MemberId>,
        /// The session the record belongs to.
        session: SessionId,
        /// The record's fencing token.
        token: FencingToken,
    },
}

/// Where a fetch starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum FetchFrom {
    /// At this offset (a committed offset, or where consumption paused).
    Offset(Offset),
    /// At the oldest offset the broker has (nothing committed yet).
    Oldest,
    /// At the newest offset (nothing committed yet).
    Newest,
    /// Nowhere yet: nothing is committed and the initial-offset policy is
    /// [`crate::InitialOffset::None`]. The application says where (a seek,
    /// or its own start offset); until then nothing is fetched.
    Unset,
}

/// A request for the store, taken from
/// [`Output::Store`]: the backend carries out `op`
/// under `session` and answers with the result event that names `id`.
#[derive(Clone, Debug, PartialEq)]
pub struct StoreRequest {
    /// The request's id, which its result event names.
    pub id: RequestId,
    /// The session the request belongs to; a backend whose session is
    /// another fails it with [`StoreError::SessionExpired`].
    pub session: SessionId,
    /// What to do.
    pub op: StoreOp,
}

impl StoreRequest {
    /// The result event of this request failing with `error`, for a
    /// backend that could not carry it out.
    pub fn failed(self, error: StoreError) -> Event {
        let (id, e) = (self.id, error);
        match self.op {
            StoreOp::Register { .. } => Event::RegisterResult { id, result: Err(e) },
            StoreOp::Deregister => Event::DeregisterResult { id, result: Err(e) },
            StoreOp::WatchMembers => Event::MembersResult { id, result: Err(e) },
            StoreOp::Claim { .. } => Event::ClaimResult { id, result: Err(e) },
            StoreOp::WatchOwner { .. } => Event::OwnerWatchResult { id, result: Err(e) },
            StoreOp::Release { .. } => Event::ReleaseResult { id, result: Err(e) },
            StoreOp::ReadOffset { .. } => Event::OffsetResult { id, result: Err(e) },
            StoreOp::CommitOffset { .. } => Event::CommitResult { id, result: Err(e) },
            StoreOp::Heartbeat => Event::HeartbeatResult { id, result: Err(e) },
        }
    }
}

/// What a [`StoreRequest`] asks of the store.
#[derive(Clone, Debug, PartialEq)]
pub enum StoreOp {
    /// Create this member's registration record under the request's
    /// session (answer with [`Event::RegisterResult`]).
    Register {
        /// What to advertise.
        member: MemberInfo,
    },
    /// Delete this member's registration record (answer with
    /// [`Event::DeregisterResult`]).
    Deregister,
    /// Read the member list and watch it (one-shot: answer with
    /// [`Event::MembersResult`], later [`Event::MembersChanged`] once).
    WatchMembers,
    /// Create the owner record of `partition` under the request's session;
    /// if one exists, read it (answer with [`Event::ClaimResult`]).
    ///
    /// With `read_offset`, a claim that creates the record also reads the
    /// committed offset of `partition` from a state that has the record
    /// ([`ClaimOutcome::Created`]'s `committed`): in the claim's own round
    /// trip where the store can (one etcd transaction), sent with it where
    /// it cannot (a ZooKeeper read right behind the create, on the same
    /// session, which the server answers in order). Every commit of a
    /// previous claim precedes its record's deletion, which precedes this
    /// claim: the read sees the last of them, as a read sent after the
    /// claim's answer would.
    Claim {
        /// The partition.
        partition: TopicPartition,
        /// Read the committed offset with the claim.
        read_offset: bool,
    },
    /// Watch the owner record of `partition` (one-shot: answer with
    /// [`Event::OwnerWatchResult`], later [`Event::OwnerDeleted`]).
    WatchOwner {
        /// The partition.
        partition: TopicPartition,
    },
    /// Delete the owner record of `partition` if it is still this member's
    /// claim: created under the request's session and, if `token` is
    /// given, with that fencing token (answer with
    /// [`Event::ReleaseResult`]).
    ///
    /// With `commit`, the release carries the claim's final commit: in the
    /// same atomic write, `commit` (the next offset to consume) becomes
    /// the committed offset of `partition`, under the same condition. One
    /// round trip hands the partition over with its offset, where a commit
    /// and then a release took two, and the next owner, whose claim can
    /// only follow the deletion, reads the offset written with it.
    Release {
        /// The partition.
        partition: TopicPartition,
        /// The claim's token, when known.
        token: Option<FencingToken>,
        /// The final commit the release carries, if any.
        commit: Option<Offset>,
        /// What was done above the final commit: its progress record,
        /// written with it (deleted when empty). Nothing without `commit`.
        progress: Progress,
    },
    /// Read the committed offset of `partition` (answer with
    /// [`Event::OffsetResult`]).
    ReadOffset {
        /// The partition.
        partition: TopicPartition,
    },
    /// Write `offset` (the next offset to consume) as the committed offset
    /// of `partition`, only while the owner record is the claim `token`
    /// (answer with [`Event::CommitResult`]).
    CommitOffset {
        /// The partition.
        partition: TopicPartition,
        /// The next offset to consume.
        offset: Offset,
        /// The claim that guards the write.
        token: FencingToken,
        /// What was done above `offset`: the partition's progress record,
        /// written in the same fenced write (deleted when empty).
        progress: Progress,
    },
    /// Confirm the session is alive on the server, a cheap round trip
    /// (answer with [`Event::HeartbeatResult`]).
    Heartbeat,
}

impl StoreOp {
    /// How many kinds of batch there are ([`StoreOp::batch_kind`]).
    pub const BATCH_KINDS: usize = 4;

    /// The kind of batch the request may go to the store in, if any: the
    /// claims (0), offset reads (1), commits (2) and releases (3) a member
    /// submits at once go together, each kind in batches of its own of at
    /// most [`OPS_PER_BATCH`](crate::records::OPS_PER_BATCH); the others go
    /// alone.
    pub fn batch_kind(&self) -> Option<usize> {
        match self {
            StoreOp::Claim { .. } => Some(0),
            StoreOp::ReadOffset { .. } => Some(1),
            StoreOp::CommitOffset { .. } => Some(2),
            StoreOp::Release { .. } => Some(3),
            _ => None,
        }
    }
}

/// Work for the fetcher, taken as [`Output::Fetch`].
#[derive(Clone, Debug, PartialEq)]
pub enum FetchCommand {
    /// Start fetching `partition` and handing its messages to the
    /// application.
    Start {
        /// The partition.
        partition: TopicPartition,
        /// Where to start.
        from: FetchFrom,
        /// The claim's fencing token, carried by every message.
        token: FencingToken,
        /// What an earlier claim did above `from`, as its progress record
        /// says: offsets done, not to hand out again, and the failures
        /// counted of those not done. Empty when none was kept.
        progress: Progress,
    },
    /// Stop fetching `partition`; call [`crate::Member::drained`] when the
    /// application has finished the messages it has.
    Stop {
        /// The partition.
        partition: TopicPartition,
        /// The claim the fetching ran under.
        token: FencingToken,
    },
    /// Hand out nothing more of `partition` for now: the session may be
    /// lapsing (the store has not been heard from). The claim stays, and
    /// so does what was fetched and handed out; nothing needs draining.
    /// [`FetchCommand::Resume`] follows if the session turns out alive,
    /// [`FetchCommand::Stop`] if the partition leaves.
    Suspend {
        /// The partition.
        partition: TopicPartition,
        /// The claim the fetching runs under.
        token: FencingToken,
    },
    /// Go on handing out `partition` from where it stood when suspended:
    /// the session is alive and the claim never lapsed.
    Resume {
        /// The partition.
        partition: TopicPartition,
        /// The claim the fetching runs under.
        token: FencingToken,
    },
}

/// What happened to the member that its application (and its telemetry)
/// may want to know, taken as [`Output::App`]. Nothing
/// needs to be done about any of them: the member goes on by itself.
///
/// A partition's story reads: [`AppEvent::Claiming`], then either
/// [`AppEvent::Claimed`] or [`AppEvent::ClaimAbandoned`]; once claimed,
/// [`AppEvent::OffsetRead`] and commits, then [`AppEvent::Releasing`] and
/// [`AppEvent::Released`], or [`AppEvent::Lost`] at any point.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum AppEvent {
    /// The assignment gives `partition` to this member, which starts
    /// claiming it.
    Claiming {
        /// The partition.
        partition: TopicPartition,
    },
    /// A claim took effect: the store records this member as the owner of
    /// `partition` under `token`.
    Claimed {
        /// The partition.
        partition: TopicPartition,
        /// The claim's fencing token.
        token: FencingToken,
        /// From [`AppEvent::Claiming`] to now.
        waited: Duration,
    },
    /// A claim ended before it took effect: the partition is no longer
    /// assigned to this member, or the session ended.
    ClaimAbandoned {
        /// The partition.
        partition: TopicPartition,
    },
    /// The committed offset of an owned partition was read: fetching can
    /// start (from it, or from the initial offset when there is none).
    OffsetRead {
        /// The partition.
        partition: TopicPartition,
        /// The claim it was read under.
        token: FencingToken,
        /// The committed next offset, if any.
        committed: Option<Offset>,
    },
    /// A commit of `offset` (the next offset to consume) went out.
    Committing {
        /// The partition.
        partition: TopicPartition,
        /// The claim that guards the write.
        token: FencingToken,
        /// The offset being written.
        offset: Offset,
    },
    /// The commit of `offset` is stored.
    Committed {
        /// The partition.
        partition: TopicPartition,
        /// The claim that guarded the write.
        token: FencingToken,
        /// The offset written.
        offset: Offset,
    },
    /// The commit of `offset` was refused: this member's claim is gone.
    /// [`AppEvent::Lost`] follows.
    CommitFenced {
        /// The partition.
        partition: TopicPartition,
        /// The claim that no longer guards anything.
        token: FencingToken,
        /// The offset not written.
        offset: Offset,
    },
    /// The commit of `offset` failed for another reason (a lost connection,
    /// an error of the store); a later commit carries the offset on.
    CommitFailed {
        /// The partition.
        partition: TopicPartition,
        /// The claim that guarded the write.
        token: FencingToken,
        /// The offset not known to be written.
        offset: Offset,
        /// What the store said.
        error: StoreError,
    },
    /// The assignment took `partition` away: the member drains it, commits
    /// what was processed, and deletes its claim.
    Releasing {
        /// The partition.
        partition: TopicPartition,
        /// The claim being released.
        token: FencingToken,
    },
    /// The claim was released to the group: the partition can be claimed by
    /// its next owner.
    Released {
        /// The partition.
        partition: TopicPartition,
        /// The claim that ended.
        token: FencingToken,
    },
    /// The claim turned out to be gone (an expired session, a fenced commit,
    /// an owner record already deleted): the partition was not handed
    /// over by this member. If it is still assigned, a new claim starts.
    Lost {
        /// The partition.
        partition: TopicPartition,
        /// The claim that ended.
        token: FencingToken,
    },
    /// A problem worth telling the application about.
    Problem(Error),
}

impl AppEvent {
    /// What the application is told of the commit of `offset` to
    /// `partition` under `token`, once the store has answered `result`:
    /// [`AppEvent::Committed`], [`AppEvent::CommitFenced`] (the store said
    /// [`StoreError::NotOwner`]) or [`AppEvent::CommitFailed`].
    pub fn commit_outcome(
        partition: TopicPartition,
        token: FencingToken,
        offset: Offset,
        result: &Result<(), StoreError>,
    ) -> AppEvent {
        match result {
            Ok(()) => AppEvent::Committed {
                partition,
                token,
                offset,
            },
            Err(StoreError::NotOwner) => AppEvent::CommitFenced {
                partition,
                token,
                offset,
            },
            Err(error) => AppEvent::CommitFailed {
                partition,
                token,
                offset,
                error: error.clone(),
            },
        }
    }
}
