//! What the explorer's states are made of: the model (what does not
//! change during a search), the fault budget, the member processes, the
//! messages in flight and the moves.

use std::time::{Duration, Instant};

use crate::app::{Holdings, Told};
use crate::check::Story;
use tenure_core::assignment::PartitionCounts;
use tenure_core::config::Config;
use tenure_core::protocol::{Event, Member, StoreRequest};
use tenure_core::records::Layout;
use tenure_core::types::{RequestId, SessionId, TopicPartition};

use super::ExploreConfig;
use crate::ensemble::Ensemble;

/// What does not change during a search.
pub(super) struct Model {
    pub(super) config: ExploreConfig,
    pub(super) epoch: Instant,
    pub(super) layout: Layout,
    pub(super) counts: PartitionCounts,
    pub(super) members: Vec<Config>,
    pub(super) horizon: Duration,
    /// The replicated store, if the members are on one.
    pub(super) followers: Option<Followers>,
    /// On etcd: the lease's TTL, which keep-alives alone renew.
    pub(super) lease_ttl: Option<Duration>,
}

/// A ZooKeeper ensemble as the explorer runs it: each member's follower
/// reports its sessions' activity to the leader on a fixed schedule, and
/// can be cut off from it.
pub(super) struct Followers {
    /// How often a follower reports (answers the leader's ping): half a
    /// tick, rounded up to the time grid, so never sooner than ZooKeeper.
    pub(super) report_every: Duration,
    /// How long a follower cut off from its leader keeps its clients
    /// (`syncLimit` ticks, rounded up to the grid).
    pub(super) patience: Duration,
    /// What the backend says of an answer through the leader.
    pub(super) counted_after: Duration,
    /// The backend counts a follower's answers to reads as renewals.
    pub(super) reads_renew: bool,
}

impl Followers {
    fn new(ensemble: &Ensemble, grid: impl Fn(Duration) -> Duration) -> Result<Followers, String> {
        if ensemble.tick.is_zero() || ensemble.sync_limit == 0 {
            return Err("the ensemble's tick and syncLimit must be more than zero".to_owned());
        }
        Ok(Followers {
            report_every: grid(ensemble.tick / 2),
            patience: grid(ensemble.tick * ensemble.sync_limit),
            counted_after: ensemble.counted_after,
            reads_renew: ensemble.reads_renew,
        })
    }
}

impl Model {
    pub(super) fn new(config: &ExploreConfig) -> Result<Model, String> {
        if config.members == 0 || config.partitions == 0 {
            return Err("at least one member and one partition".to_owned());
        }
        if config.ensemble.is_some() && config.etcd.is_some() {
            return Err("the group runs on a ZooKeeper ensemble or on etcd, not both".to_owned());
        }
        if config.quantum.is_zero() {
            return Err("the time grid's step must be more than zero".to_owned());
        }
        let members = (0..config.members)
            .map(|i| config.member_config(i))
            .collect::<Result<Vec<_>, _>>()?;
        let first = &members[0];
        let q = config.quantum.as_nanos();
        for (name, d) in [
            ("session timeout", first.session_timeout()),
            ("suspension margin", first.suspension_margin()),
            (
                "a third of the session timeout",
                first.session_timeout() / 3,
            ),
            ("processing timeout", first.processing_timeout()),
            ("commit interval", first.commit_interval()),
            ("claim-stall threshold", first.claim_stall_threshold()),
        ] {
            if !d.as_nanos().is_multiple_of(q) {
                return Err(format!(
                    "the {name} ({d:?}) is not a multiple of the grid step {:?}",
                    config.quantum
                ));
            }
        }
        if first.suspension_margin() <= config.quantum {
            return Err("the suspension margin must exceed the grid step".to_owned());
        }
        // No deadline lies further from the moment it was set than the
        // longest of these; moments older than that are all alike.
        let q = config.quantum;
        let grid = |d: Duration| {
            q * u32::try_from(d.as_nanos().div_ceil(q.as_nanos())).unwrap_or(u32::MAX)
        };
        let followers = config
            .ensemble
            .as_ref()
            .map(|ensemble| Followers::new(ensemble, grid))
            .transpose()?;
        // A cut's start matters only until the follower drops its clients.
        let cut = followers.as_ref().map_or(Duration::ZERO, |f| f.patience);
        let horizon = (first.claim_stall_threshold()
            + first.session_timeout()
            + first.processing_timeout()
            + first.commit_interval()
            + first.backoff_max())
        .max(cut);
        Ok(Model {
            config: config.clone(),
            epoch: Instant::now(),
            layout: Layout::new("", "explore"),
            counts: PartitionCounts::from([("t".to_owned(), config.partitions)]),
            members,
            horizon,
            followers,
            lease_ttl: config
                .etcd
                .as_ref()
                .map(|etcd| etcd.ttl(config.session_timeout)),
        })
    }

    /// How long the store keeps a session unrenewed: the session timeout,
    /// or on etcd the lease's TTL, in whole seconds rounded up.
    pub(super) fn store_timeout(&self) -> Duration {
        self.lease_ttl.unwrap_or(self.config.session_timeout)
    }

    pub(super) fn partition(&self, index: u32) -> TopicPartition {
        TopicPartition::new("t", index)
    }

    pub(super) fn seed(&self, node: usize, incarnation: u32) -> u64 {
        ((node as u64) << 32) | u64::from(incarnation)
    }

    /// `at` rounded up to the time grid.
    pub(super) fn on_grid(&self, at: Instant) -> Instant {
        let q = self.config.quantum.as_nanos();
        let since = at.saturating_duration_since(self.epoch).as_nanos();
        let steps = since.div_ceil(q);
        let nanos = u64::try_from(steps * q).unwrap_or(u64::MAX);
        self.epoch + Duration::from_nanos(nanos)
    }
}

/// A broken property: which, and what.
pub(super) type Problem = (&'static str, String);

/// The faults left to inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Budget {
    /// `u32::MAX`: unbounded.
    pub(super) reorders: u32,
    pub(super) losses: u32,
    pub(super) disconnects: u32,
    pub(super) restarts: u32,
    pub(super) cuts: u32,
    pub(super) elections: u32,
    /// Faults of any kind left.
    pub(super) total: u32,
}

impl Budget {
    /// Whether this budget allows at least as much of every fault as
    /// `other`.
    pub(super) fn covers(&self, other: &Budget) -> bool {
        self.reorders >= other.reorders
            && self.losses >= other.losses
            && self.disconnects >= other.disconnects
            && self.restarts >= other.restarts
            && self.cuts >= other.cuts
            && self.elections >= other.elections
            && self.total >= other.total
    }
}

/// One member process and its client and application.
#[derive(Clone, Debug)]
pub(super) struct Node {
    pub(super) member: Member,
    /// Counts restarts: what was sent to an earlier process never reaches
    /// this one.
    pub(super) incarnation: u32,
    /// The session the client holds (`None`: given up, none new yet).
    pub(super) session: Option<SessionId>,
    pub(super) connected: bool,
    /// When the server last heard from this client.
    pub(super) last_contact: Instant,
    pub(super) app: Holdings,
    pub(super) story: Story,
    /// Counts the client's connections: a follower's report travels ahead
    /// of what the same follower forwards later, not of what another
    /// server does.
    pub(super) link: u32,
    /// On an ensemble: since when the client's follower is cut off from
    /// its leader.
    pub(super) cut_since: Option<Instant>,
    /// On an ensemble: the follower counted activity of the client's
    /// session since its last report.
    pub(super) unreported: bool,
    /// On an ensemble: a ping of the leader's waits in the connection to
    /// the cut-off follower.
    pub(super) ping_waiting: bool,
}

/// A message in flight.
#[derive(Clone, Debug)]
pub(super) enum Msg {
    /// A store request on its way to the server, sent by `incarnation` of
    /// `node` under `session`.
    Request {
        node: usize,
        incarnation: u32,
        session: SessionId,
        sent: Instant,
        command: StoreRequest,
    },
    /// Requests of one kind of one step on their way to the server in one
    /// request (a `multi`), sent by `incarnation` of `node` under
    /// `session`: their writes land together or not at all.
    Batch {
        node: usize,
        incarnation: u32,
        session: SessionId,
        sent: Instant,
        commands: Vec<StoreRequest>,
    },
    /// The second round trip of a claim that met an existing record,
    /// sent by `incarnation` of `node`.
    ReadOwner {
        node: usize,
        incarnation: u32,
        id: RequestId,
        partition: TopicPartition,
    },
    /// A reply on its way to the member.
    Reply { node: usize, event: Event },
    /// The replies to a batch, on their way to the member together.
    Replies { node: usize, events: Vec<Event> },
    /// A watch notification for `session`.
    Watch {
        node: usize,
        session: SessionId,
        event: Event,
    },
    /// On an ensemble: a follower's report of `session`'s activity on its
    /// way to the leader, from the follower `node` was on in connection
    /// `link`.
    Report {
        node: usize,
        link: u32,
        session: SessionId,
    },
}

/// A message in flight, and how many time advances it has stayed so.
#[derive(Clone, Debug)]
pub(super) struct Flight {
    pub(super) msg: Msg,
    pub(super) age: u32,
}

impl Msg {
    /// The connection a request travels on, `(node, incarnation)`: the
    /// store applies a connection's requests in the order they were sent,
    /// as ZooKeeper does a session's.
    pub(super) fn connection(&self) -> Option<(usize, u32)> {
        match self {
            Msg::Request {
                node, incarnation, ..
            }
            | Msg::Batch {
                node, incarnation, ..
            }
            | Msg::ReadOwner {
                node, incarnation, ..
            } => Some((*node, *incarnation)),
            Msg::Reply { .. } | Msg::Replies { .. } | Msg::Watch { .. } | Msg::Report { .. } => {
                None
            }
        }
    }
}

/// One step of the search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Move {
    Deliver(usize),
    Lose(usize),
    Process {
        node: usize,
        partition: u32,
    },
    Drain {
        node: usize,
        index: usize,
    },
    Expire(SessionId),
    GiveUp(usize),
    Reconnect(usize),
    Disconnect(usize),
    Restart(usize),
    /// A member's follower is cut off from its leader.
    Cut(usize),
    /// A member's follower has its leader back.
    Heal(usize),
    /// A member's follower, cut off for `syncLimit` ticks, drops its
    /// clients.
    FollowerDrops(usize),
    /// The ensemble's leader is lost and another elected.
    Election,
    Advance,
}

/// An input for a member.
pub(super) enum Input {
    Event(Event),
    Timeout,
    Counts,
    App(Told),
}
