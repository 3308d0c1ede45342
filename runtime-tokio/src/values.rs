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
    /// messages in hand, then call [`crate::GroupMember::drained`]. Its final
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
    /// reason: it is reported on [`crate::GroupMember::errors`] and waited for).
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

/// The commits a [`crate::GroupMember::commit`] or [`crate::GroupMember::close`] waited
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

/// Why [`crate::GroupMember::seek`] did not move a partition.
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
    /// [`crate::GroupMember::close_within`]: the close did not finish in time;
    /// the member was stopped like a crash (its claims stay until its
    /// session expires).
    #[error("the close did not finish within {limit:?}; the member was stopped")]
    TimedOut {
        /// The time it was given.
        limit: std::time::Duration,
    },
}
