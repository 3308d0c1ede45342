//! What the member tells its application, and how its calls can fail:
//! plain values, with no behaviour of the runtime behind them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use tenure_core::{
    ConfigError, Error, FencingToken, FetchFrom, Offset, SessionId, StoreError, TopicPartition,
};

use crate::backend::BackendError;
use crate::membership::StateFileError;
use tenure_kafka::KafkaError;

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
    /// messages in hand, then call [`crate::MemberHandle::drained`]. Its final
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
    /// This member released `partition` (a rebalance moved it, or the
    /// member is closing): its claim ended after the application drained
    /// it and its final offset was committed under the claim. Like the
    /// Java consumer's `onPartitionsRevoked`: side effects fenced by
    /// `token` that the application finished before draining stand.
    Revoked {
        /// The partition.
        partition: TopicPartition,
        /// The claim that ended.
        token: FencingToken,
    },
    /// This member lost `partition` without releasing it: its session
    /// expired (or its claim was found gone or fenced), so another member
    /// may own it already. Like the Java consumer's `onPartitionsLost`:
    /// the application must not commit, flush or otherwise finish side
    /// effects for it — anything still in hand is to be dropped, and a
    /// write fenced by `token` is refused wherever the fence is checked.
    /// Messages handed out under `token` are not committed.
    Lost {
        /// The partition.
        partition: TopicPartition,
        /// The claim that ended.
        token: FencingToken,
    },
}

impl AssignmentEvent {
    /// The partition the change is about.
    pub fn partition(&self) -> &TopicPartition {
        match self {
            AssignmentEvent::Assigned { partition, .. }
            | AssignmentEvent::Revoking { partition, .. }
            | AssignmentEvent::Suspended { partition, .. }
            | AssignmentEvent::Resumed { partition, .. }
            | AssignmentEvent::Revoked { partition, .. }
            | AssignmentEvent::Lost { partition, .. } => partition,
        }
    }

    /// The claim the change is about.
    pub fn token(&self) -> FencingToken {
        match self {
            AssignmentEvent::Assigned { token, .. }
            | AssignmentEvent::Revoking { token, .. }
            | AssignmentEvent::Suspended { token, .. }
            | AssignmentEvent::Resumed { token, .. }
            | AssignmentEvent::Revoked { token, .. }
            | AssignmentEvent::Lost { token, .. } => *token,
        }
    }

    /// Whether the claim ended with it (released or lost).
    pub fn ends_claim(&self) -> bool {
        matches!(
            self,
            AssignmentEvent::Revoked { .. } | AssignmentEvent::Lost { .. }
        )
    }
}

/// A snapshot of the member's own view, for tools and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
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
    /// several members; not serialized: an `Instant` means nothing outside
    /// the process).
    #[cfg_attr(feature = "serde", serde(skip))]
    pub at: Option<Instant>,
}

impl View {
    /// Whether `self` and `other` say the same, whenever published.
    pub(crate) fn same_as(&self, other: &View) -> bool {
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
    /// reason: it is reported on [`crate::MemberStreams::errors`] and waited for).
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    /// Static membership: the state file cannot be used, or another
    /// process of the member holds it.
    #[error(transparent)]
    StateFile(#[from] StateFileError),
    /// Exactly-once output ([`crate::exactly_once`]) needs messages to
    /// write: the member builder has no Kafka ([`crate::GroupMemberBuilder::kafka`]).
    #[error("exactly-once output needs Kafka: the member builder has no KafkaConfig")]
    NoKafka,
    /// Another live process uses this member id: its registration stayed
    /// under another session for longer than a previous session of this
    /// id could have lasted (see
    /// [`crate::GroupMemberBuilder::registration_wait`]). Give each process
    /// its own id ([`crate::generate_member_id`]), or make the member a
    /// static member.
    #[error("member id {member} is registered by another live session {session:?} (waited {waited:?}); give each process its own member id")]
    MemberIdInUse {
        /// The id.
        member: tenure_core::MemberId,
        /// The session holding it.
        session: SessionId,
        /// How long the join waited for it to go.
        waited: std::time::Duration,
    },
    /// The member's task ended before it registered.
    #[error("the member ended before it registered: {0}")]
    Ended(MemberEnd),
}

/// Why a member's task ended, as its streams and
/// [`crate::MemberHandle::ended`] tell.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MemberEnd {
    /// [`crate::MemberHandle::close`] finished: the member left the group
    /// (or, as a static member, left its session to the next process).
    #[error("the member closed")]
    Closed,
    /// The member was stopped like a crash: [`crate::MemberHandle::kill`],
    /// a handle dropped without closing, or a close that ran out of time.
    /// Its claims stay until its session expires.
    #[error("the member was stopped without closing; its claims stay until its session expires")]
    Killed,
    /// The store's event stream ended: the backend can no longer tell the
    /// member anything, so it stopped (its claims stay until its session
    /// expires).
    #[error("the store backend's event stream ended; the member stopped")]
    StoreGone,
    /// The member's task panicked (a bug: please report it with the log).
    #[error("the member's task panicked")]
    Panicked,
    /// The application left a partition's messages waiting without taking
    /// or acknowledging one for the processing-stall bound
    /// ([`crate::KafkaConfig::max_processing_stall`]): the member reported
    /// [`Problem::ProcessingStalled`], committed what was acknowledged and
    /// left the group, so that its partitions move to members that process
    /// them. Anything the stuck application writes later is fenced by its
    /// claims' tokens, which no longer own anything.
    #[error("the application stopped processing; the member left the group")]
    ProcessingStalled,
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
    /// The application's start offset of a claim could not be read
    /// ([`crate::GroupMemberBuilder::start_offsets`] returned an error). It
    /// is asked again after a pause, for as long as the claim holds;
    /// nothing of the partition is fetched until it answers.
    #[error("the start offset of {partition} (claim {token:?}) could not be read: {source}")]
    StartOffset {
        /// The partition.
        partition: TopicPartition,
        /// The claim.
        token: FencingToken,
        /// What the application's function returned.
        source: tenure_kafka::StartOffsetError,
    },
    /// The application has neither taken nor acknowledged a message of
    /// `partition` for `stalled_for` while messages waited for it (see
    /// [`crate::KafkaConfig::max_processing_stall`]): the member leaves the
    /// group, and ends with [`MemberEnd::ProcessingStalled`].
    #[error(
        "the application took or acknowledged no message of {partition} (claim {token:?}) for \
         {stalled_for:?} while messages waited; leaving the group so that its partitions move on"
    )]
    ProcessingStalled {
        /// The partition whose messages waited.
        partition: TopicPartition,
        /// Its claim.
        token: FencingToken,
        /// How long they waited without progress.
        stalled_for: std::time::Duration,
    },
    /// The member's task ended on its own (not by
    /// [`crate::MemberHandle::close`]): the last item of the error stream
    /// before it ends. Nothing more is handed out.
    #[error("{0}")]
    Ended(MemberEnd),
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
            // The application's store may come back; the member asks again.
            Problem::StartOffset { .. } => true,
            // The member leaves the group: someone must look at the
            // application.
            Problem::ProcessingStalled { .. } => false,
            Problem::Ended(_) | Problem::Dropped { .. } => false,
        }
    }
}

/// What became of one commit of a partition's offset.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(tag = "outcome", rename_all = "snake_case")
)]
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
        #[cfg_attr(feature = "serde", serde(serialize_with = "as_text"))]
        error: StoreError,
    },
    /// The claim ended (the session expired) before the store answered:
    /// whether it was written is not known.
    Abandoned {
        /// The offset not known to be written.
        offset: Offset,
    },
}

/// The commits a [`crate::MemberHandle::commit`] or [`crate::MemberHandle::close`] waited
/// for, by partition (the last one of each).
///
/// A fenced or failed final commit is only seen here: do not drop it.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[must_use = "a commit that was fenced or failed is only reported here"]
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

/// Why a call about one partition's consumption (a seek, its position,
/// its committed offset, its log's bounds, the offset of a time) could not
/// be answered.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum PartitionError {
    /// The partition is not consumed by this member under that claim (any
    /// more), or is on its way out.
    #[error("{partition} is not consumed under the claim {token:?}")]
    NotOwned {
        /// The partition.
        partition: TopicPartition,
        /// The claim named, if one was.
        token: Option<FencingToken>,
    },
    /// The member was built without Kafka
    /// ([`crate::GroupMemberBuilder::kafka`]): it fetches nothing, so it
    /// has no position to move or to look up.
    #[error("the member was built without Kafka (GroupMemberBuilder::kafka): it has no messages to seek or look up")]
    NoKafka,
    /// Kafka did not answer the lookup.
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    /// The member's task has ended.
    #[error(transparent)]
    TaskGone(#[from] TaskGone),
}

/// The former name of [`PartitionError`].
pub type SeekError = PartitionError;

/// Where [`crate::MemberHandle::seek_to`] moves a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SeekTo {
    /// The first offset still in the log.
    Beginning,
    /// The end of the log: only messages produced from now on.
    End,
    /// The first message whose timestamp is at or after the time (Kafka's
    /// `offsetsForTimes`); the end of the log if every message is older.
    Time(std::time::SystemTime),
    /// This offset (as [`crate::MemberHandle::seek`]).
    Offset(Offset),
}

/// The member's task has ended (it was closed, or it stopped on its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the member's task has ended")]
pub struct TaskGone;

#[cfg(feature = "serde")]
fn as_text<S: serde::Serializer>(
    value: &impl std::fmt::Display,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
}

/// Why leaving the group did not finish cleanly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CloseError {
    /// The member's task ended before the release finished (it panicked or
    /// the store's event stream ended).
    #[error("the member's task ended before it could close")]
    TaskGone,
    /// [`crate::MemberHandle::close_within`]: the close did not finish in time;
    /// the member was stopped like a crash (its claims stay until its
    /// session expires).
    #[error("the close did not finish within {limit:?}; the member was stopped")]
    TimedOut {
        /// The time it was given.
        limit: std::time::Duration,
    },
}
