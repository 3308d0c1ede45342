//! How many requests a member sent to its store, in all and by what they
//! were for: the total is what benchmarks divide by the partitions moved,
//! and the kinds say where it goes.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tenure_core::StoreOp;

/// What a store request was sent for: the core command it carries out, or
/// the session around them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum RequestKind {
    /// A member's registration ([`StoreOp::Register`]).
    Register,
    /// A member's deregistration ([`StoreOp::Deregister`]).
    Deregister,
    /// The member list read and watched ([`StoreOp::WatchMembers`]).
    Members,
    /// A check that the session is alive ([`StoreOp::Heartbeat`]).
    Heartbeat,
    /// Claims, alone or in batches ([`StoreOp::Claim`]).
    Claim,
    /// A watch on another member's claim ([`StoreOp::WatchOwner`]).
    WatchOwner,
    /// Committed offsets read, alone or in batches
    /// ([`StoreOp::ReadOffset`]).
    ReadOffset,
    /// Offsets committed, alone or in batches
    /// ([`StoreOp::CommitOffset`]).
    Commit,
    /// Claims deleted, alone or in batches ([`StoreOp::Release`]).
    Release,
    /// Anything else sent for the member: a session opened, resumed or
    /// ended, a request outside any command.
    Other,
}

impl RequestKind {
    /// Every kind, in the order [`RequestCounts`] shows them.
    pub const ALL: [RequestKind; 10] = [
        RequestKind::Claim,
        RequestKind::ReadOffset,
        RequestKind::Commit,
        RequestKind::Release,
        RequestKind::WatchOwner,
        RequestKind::Members,
        RequestKind::Register,
        RequestKind::Deregister,
        RequestKind::Heartbeat,
        RequestKind::Other,
    ];

    /// The kind of the requests that carry out `op`.
    pub fn of(op: &StoreOp) -> RequestKind {
        match op {
            StoreOp::Register { .. } => RequestKind::Register,
            StoreOp::Deregister => RequestKind::Deregister,
            StoreOp::WatchMembers => RequestKind::Members,
            StoreOp::Heartbeat => RequestKind::Heartbeat,
            StoreOp::Claim { .. } => RequestKind::Claim,
            StoreOp::WatchOwner { .. } => RequestKind::WatchOwner,
            StoreOp::ReadOffset { .. } => RequestKind::ReadOffset,
            StoreOp::CommitOffset { .. } => RequestKind::Commit,
            StoreOp::Release { .. } => RequestKind::Release,
        }
    }

    /// The kind's name, as [`RequestCounts`] shows it.
    pub fn name(self) -> &'static str {
        match self {
            RequestKind::Register => "register",
            RequestKind::Deregister => "deregister",
            RequestKind::Members => "members",
            RequestKind::Heartbeat => "heartbeat",
            RequestKind::Claim => "claim",
            RequestKind::WatchOwner => "watch_owner",
            RequestKind::ReadOffset => "read_offset",
            RequestKind::Commit => "commit",
            RequestKind::Release => "release",
            RequestKind::Other => "other",
        }
    }

    fn index(self) -> usize {
        match self {
            RequestKind::Claim => 0,
            RequestKind::ReadOffset => 1,
            RequestKind::Commit => 2,
            RequestKind::Release => 3,
            RequestKind::WatchOwner => 4,
            RequestKind::Members => 5,
            RequestKind::Register => 6,
            RequestKind::Deregister => 7,
            RequestKind::Heartbeat => 8,
            RequestKind::Other => 9,
        }
    }
}

/// The requests a backend sent to its store, across its sessions: in all,
/// and by [`RequestKind`]; and the member's commands it carried out, by
/// kind, so that a kind's requests per command can be read off. Shared
/// (an [`Arc`]) by the backend and whoever reads it; it keeps counting
/// after the backend moves into a runtime.
#[derive(Debug, Default)]
pub struct RequestCounts {
    /// Also handed out alone ([`RequestCounts::total_counter`]), for
    /// readers that want the total only.
    total: Arc<AtomicU64>,
    requests: [AtomicU64; RequestKind::ALL.len()],
    commands: [AtomicU64; RequestKind::ALL.len()],
}

impl RequestCounts {
    /// Counts that start at zero.
    pub fn new() -> RequestCounts {
        RequestCounts::default()
    }

    /// Counts `requests` sent for `kind`.
    pub fn count(&self, kind: RequestKind, requests: u64) {
        self.total.fetch_add(requests, Ordering::Relaxed);
        self.requests[kind.index()].fetch_add(requests, Ordering::Relaxed);
    }

    /// Counts one of the member's commands of `kind`, handed to the store.
    pub fn command(&self, kind: RequestKind) {
        self.commands[kind.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Every request sent so far.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// The counter of every request sent, alone: it moves with these
    /// counts.
    pub fn total_counter(&self) -> Arc<AtomicU64> {
        self.total.clone()
    }

    /// The requests sent so far for `kind`.
    pub fn requests(&self, kind: RequestKind) -> u64 {
        self.requests[kind.index()].load(Ordering::Relaxed)
    }

    /// The commands of `kind` handed to the store so far.
    pub fn commands(&self, kind: RequestKind) -> u64 {
        self.commands[kind.index()].load(Ordering::Relaxed)
    }

    /// The counts as they stand, to compare with a later reading or to
    /// add to another backend's.
    pub fn snapshot(&self) -> RequestTally {
        let mut tally = RequestTally::default();
        for kind in RequestKind::ALL {
            tally.requests[kind.index()] = self.requests(kind);
            tally.commands[kind.index()] = self.commands(kind);
        }
        tally
    }
}

/// A reading of [`RequestCounts`], or the sum or difference of readings:
/// requests and commands by kind. Its `Display` is one line of
/// `kind=requests/commands` pairs, the kinds with nothing left out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestTally {
    requests: [u64; RequestKind::ALL.len()],
    commands: [u64; RequestKind::ALL.len()],
}

impl RequestTally {
    /// The requests sent for `kind`.
    pub fn requests(&self, kind: RequestKind) -> u64 {
        self.requests[kind.index()]
    }

    /// The commands of `kind` handed to the store.
    pub fn commands(&self, kind: RequestKind) -> u64 {
        self.commands[kind.index()]
    }

    /// Every request, of every kind.
    pub fn total(&self) -> u64 {
        self.requests.iter().sum()
    }

    /// This tally and `other` together.
    pub fn plus(&self, other: &RequestTally) -> RequestTally {
        let mut sum = *self;
        for i in 0..sum.requests.len() {
            sum.requests[i] += other.requests[i];
            sum.commands[i] += other.commands[i];
        }
        sum
    }

    /// What was counted since `earlier`, a reading of the same counts.
    pub fn since(&self, earlier: &RequestTally) -> RequestTally {
        let mut since = *self;
        for i in 0..since.requests.len() {
            since.requests[i] = since.requests[i].saturating_sub(earlier.requests[i]);
            since.commands[i] = since.commands[i].saturating_sub(earlier.commands[i]);
        }
        since
    }
}

impl fmt::Display for RequestTally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for kind in RequestKind::ALL {
            let (requests, commands) = (self.requests(kind), self.commands(kind));
            if requests == 0 && commands == 0 {
                continue;
            }
            if !first {
                f.write_str(" ")?;
            }
            first = false;
            write!(f, "{}={requests}/{commands}", kind.name())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use tenure_core::{StoreOp, TopicPartition};

    use super::{RequestCounts, RequestKind};

    #[test]
    fn requests_count_in_all_and_by_kind_and_tallies_add_and_subtract() {
        let counts = RequestCounts::new();
        let total = counts.total_counter();
        let claim = StoreOp::Claim {
            partition: TopicPartition::new("t", 0),
            read_offset: true,
        };
        assert_eq!(RequestKind::of(&claim), RequestKind::Claim);
        counts.command(RequestKind::Claim);
        counts.command(RequestKind::Claim);
        counts.count(RequestKind::Claim, 3);
        counts.count(RequestKind::Members, 1);
        assert_eq!(counts.total(), 4);
        assert_eq!(total.load(std::sync::atomic::Ordering::Relaxed), 4);
        let before = counts.snapshot();
        assert_eq!(before.to_string(), "claim=3/2 members=1/0");
        counts.count(RequestKind::Release, 2);
        counts.command(RequestKind::Release);
        let since = counts.snapshot().since(&before);
        assert_eq!(since.to_string(), "release=2/1");
        assert_eq!(since.total(), 2);
        let both = since.plus(&before);
        assert_eq!(both, counts.snapshot());
        assert_eq!(both.requests(RequestKind::Claim), 3);
        assert_eq!(both.commands(RequestKind::Release), 1);
    }
}
