//! Typed errors: bad names and config, store failures, and the problems the
//! core reports on its error output.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub use crate::types::NameError;
use crate::types::{MemberId, Offset, SessionId, TopicPartition};

/// A configuration that cannot work, found before anything starts.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A duration that must be positive is zero.
    #[error("{name} must be greater than zero")]
    Zero {
        /// The setting's name.
        name: &'static str,
    },
    /// Two settings contradict each other.
    #[error("{name} ({value:?}) must be less than {bound_name} ({bound:?})")]
    NotBelow {
        /// The setting that is too large.
        name: &'static str,
        /// Its value.
        value: Duration,
        /// The setting it must stay below.
        bound_name: &'static str,
        /// That setting's value.
        bound: Duration,
    },
    /// A member that subscribes to nothing has nothing to do.
    #[error("the member subscribes to no topic")]
    NoTopics,
    /// A topic pattern that is empty or is not a regular expression.
    #[error("topic pattern {pattern:?} cannot be used: {detail}")]
    BadPattern {
        /// The pattern, as given.
        pattern: String,
        /// What is wrong with it.
        detail: String,
        /// The regular expression parser's error, if it refused it.
        #[source]
        source: Option<ClientError>,
    },
    /// A name is not usable.
    #[error(transparent)]
    Name(#[from] NameError),
}

/// The failure of one store request, as a backend reports it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The connection was lost with the request in flight: it may or may not
    /// have been applied.
    #[error("connection lost; the request's outcome is unknown")]
    ConnectionLoss,
    /// The record the request needed does not exist.
    #[error("no such record")]
    NoNode,
    /// A commit or release was refused because this member's claim is no
    /// longer the partition's owner record.
    #[error("not the owner: the claim that guards this write is gone")]
    NotOwner,
    /// The session is gone; nothing more can be done under it.
    #[error("session expired")]
    SessionExpired,
    /// A record holds data tenure cannot read; it is left as it is.
    #[error("corrupt data at {path}: {detail}")]
    Corrupt {
        /// Where the record is (znode path or etcd key).
        path: String,
        /// What is wrong with it.
        detail: String,
        /// The parser's own error, where one said so (not JSON, not a
        /// number, not UTF-8).
        #[source]
        source: Option<ClientError>,
    },
    /// The store refused the request for want of rights: the credentials
    /// in use (or none) do not match the access control of the group's
    /// records. Retrying cannot help; the configuration must change.
    #[error("access denied: {detail}")]
    Denied {
        /// What was refused, and what to check.
        detail: String,
    },
    /// Any other failure the store or its client reported, kept whole: its
    /// message is this error's, and [`ClientError::get_ref`] reaches the
    /// client's own error (a `zookeeper_client::Error`, an
    /// `etcd_client::Error`) to downcast.
    #[error(transparent)]
    Other(ClientError),
}

impl StoreError {
    /// Whether the failure may clear by itself (the connection comes back,
    /// a new session opens), so that the member's own retries can help;
    /// `false` for what needs someone to act (corrupt data) or is final (a
    /// fenced write, a record that is not there).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::ConnectionLoss | StoreError::SessionExpired
        )
    }
}

/// A store client's own error inside a [`StoreError`], shared so that store
/// results stay cheap to clone. Two compare equal when their messages do: the
/// simulator and the tests compare results, and a client error has no other
/// notion of equality.
#[derive(Clone)]
pub struct ClientError(Arc<dyn std::error::Error + Send + Sync>);

impl ClientError {
    /// Keeps `error` as it is.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> ClientError {
        ClientError(Arc::new(error))
    }

    /// An error the store implies without a client error to carry (an answer
    /// that does not fit the protocol, say).
    pub fn message(message: impl Into<String>) -> ClientError {
        ClientError(Arc::from(Box::<dyn std::error::Error + Send + Sync>::from(
            message.into(),
        )))
    }

    /// The client's error, to downcast to its own type.
    pub fn get_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }
}

impl fmt::Debug for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for ClientError {
    fn eq(&self, other: &ClientError) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.to_string() == other.0.to_string()
    }
}

impl Eq for ClientError {}

/// What a store request was for, as errors name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// Registering the member.
    Register,
    /// Removing the member's registration.
    Deregister,
    /// Reading (and watching) the member list.
    ReadMembers,
    /// Reading one member's registration record.
    ReadRegistration,
    /// Claiming a partition.
    Claim,
    /// Watching a partition's owner record.
    WatchOwner,
    /// Reading a partition's committed offset.
    ReadOffset,
    /// Committing a partition's offset.
    Commit,
    /// Releasing a partition's claim.
    Release,
    /// Opening a new session after the last one ended.
    OpenSession,
    /// Keeping the session alive: what the member's requests were doing
    /// when it expired.
    KeepSession,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Register => "register",
            Operation::Deregister => "deregister",
            Operation::ReadMembers => "read members",
            Operation::ReadRegistration => "read member registration",
            Operation::Claim => "claim",
            Operation::WatchOwner => "watch owner",
            Operation::ReadOffset => "read offset",
            Operation::Commit => "commit",
            Operation::Release => "release",
            Operation::OpenSession => "open a new session",
            Operation::KeepSession => "keep the session alive",
        })
    }
}

/// A problem the core reports on its error output. Reporting never stops the
/// member: the core keeps working towards its assignment.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A claim has waited longer than the claim-stall threshold. Reported
    /// once per claim; the claim goes on.
    #[error("claim of {partition} has waited {waited:?} (held by {holder:?}); still trying")]
    ClaimStalled {
        /// The partition being claimed.
        partition: TopicPartition,
        /// How long the claim has been going on.
        waited: Duration,
        /// The member the store last named as owner, if any.
        holder: Option<MemberId>,
    },
    /// Another member of the group runs a different assignment strategy; this
    /// member keeps its current partitions and takes no new ones rather than
    /// fight over partitions.
    #[error("member {member} uses assignment strategy {theirs:?}, this member uses {ours:?}")]
    StrategyMismatch {
        /// This member's strategy.
        ours: String,
        /// The member with another strategy.
        member: MemberId,
        /// Its strategy.
        theirs: String,
    },
    /// Another member of the group subscribes differently, and one of the
    /// two subscribes by pattern; this member keeps its current partitions
    /// and takes no new ones, as with [`Error::StrategyMismatch`].
    #[error("member {member} subscribes to {theirs}, this member to {ours}")]
    SubscriptionMismatch {
        /// This member's subscription.
        ours: String,
        /// The member that subscribes differently.
        member: MemberId,
        /// Its subscription.
        theirs: String,
    },
    /// The member id is registered under another session (a previous
    /// session not yet expired on the server, or another process using the
    /// same id). Registration is retried until the record is ours.
    #[error("member id is registered under another session {session:?}; retrying")]
    RegistrationTaken {
        /// The session holding the registration.
        session: SessionId,
    },
    /// A store request failed; the core retries where that makes sense.
    #[error("{operation} failed{}: {source}", partition.as_ref().map(|p| format!(" for {p}")).unwrap_or_default())]
    Store {
        /// What the core asked for.
        operation: Operation,
        /// The partition concerned, if any.
        partition: Option<TopicPartition>,
        /// The store's error.
        source: StoreError,
    },
    /// A commit was refused because this member no longer owns the
    /// partition; nothing was written.
    #[error("commit of offset {offset} for {partition} fenced: this member no longer owns it")]
    CommitFenced {
        /// The partition.
        partition: TopicPartition,
        /// The offset that was not written.
        offset: Offset,
    },
    /// The application did not drain a released partition within the
    /// processing timeout; its later acknowledgements are ignored.
    #[error("{partition} did not drain within {timeout:?}; releasing it anyway")]
    DrainTimeout {
        /// The partition.
        partition: TopicPartition,
        /// The processing timeout.
        timeout: Duration,
    },
    /// The session expired: every partition was dropped at once and the
    /// member registers again under a new session.
    #[error("session expired; dropped {partitions} partitions and rejoining")]
    SessionExpired {
        /// How many partitions were being consumed or claimed.
        partitions: usize,
    },
}

impl Error {
    /// Whether the problem may clear by itself while the member goes on
    /// (a claim still waiting, an old registration about to expire, a lost
    /// connection, a session the member is rejoining after); `false` for
    /// what needs someone to act (a strategy mismatch, corrupt data, an
    /// application too slow to drain) or is final (a fenced commit).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::ClaimStalled { .. }
            | Error::RegistrationTaken { .. }
            | Error::SessionExpired { .. } => true,
            Error::Store { source, .. } => source.is_transient(),
            Error::StrategyMismatch { .. }
            | Error::SubscriptionMismatch { .. }
            | Error::CommitFenced { .. }
            | Error::DrainTimeout { .. } => false,
        }
    }
}

#[cfg(test)]
mod transient_tests {
    use super::*;

    #[test]
    fn what_clears_by_itself_is_transient_and_what_needs_someone_is_not() {
        let store = |source| Error::Store {
            operation: Operation::Claim,
            partition: None,
            source,
        };
        assert!(store(StoreError::ConnectionLoss).is_transient());
        assert!(store(StoreError::SessionExpired).is_transient());
        assert!(Error::SessionExpired { partitions: 3 }.is_transient());
        assert!(!store(StoreError::Corrupt {
            source: None,
            path: "/x".to_owned(),
            detail: "garbage".to_owned()
        })
        .is_transient());
        assert!(!Error::CommitFenced {
            partition: TopicPartition::new("t", 0),
            offset: 5
        }
        .is_transient());
        assert!(!Error::StrategyMismatch {
            ours: "sticky".to_owned(),
            member: MemberId::new("m").expect("a valid id"),
            theirs: "range".to_owned()
        }
        .is_transient());
    }
}
