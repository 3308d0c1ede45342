//! What the simulated world is made of: the members' processes and
//! applications, their links to the store, the faults and the actions on
//! the timeline, and the world itself.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::time::{Duration, Instant};

use crate::app::{Holdings, Told};
use crate::check::Story;
use tenure_core::assignment::PartitionCounts;
use tenure_core::model::store::Store;
use tenure_core::protocol::{Event, Member, StoreRequest};
use tenure_core::records::Layout;
use tenure_core::rng::SplitMix64;
use tenure_core::types::{FencingToken, MemberId, Offset, RequestId, SessionId, TopicPartition};

use super::operator::Operator;
use super::{SimConfig, SimReport};

/// One in-flight store command of a member, remembered so that a dropped
/// connection can fail it.
#[derive(Clone, Debug)]
pub(super) struct Pending {
    pub(super) command: StoreRequest,
    /// When the member's client sent it: what its backend reports as a
    /// renewal's moment.
    pub(super) sent: Instant,
}

#[derive(Clone, Debug)]
pub(super) struct Batch {
    pub(super) partition: TopicPartition,
    pub(super) token: FencingToken,
    pub(super) first: Offset,
    pub(super) end: Offset,
    pub(super) done_at: Instant,
}

/// The application of one member: fetches, processes in batches, acks.
#[derive(Clone, Debug, Default)]
pub(super) struct App {
    pub(super) holdings: Holdings,
    pub(super) batches: Vec<Batch>,
    /// Processing time per batch; longer than the processing timeout while
    /// the slow-drain fault is on.
    pub(super) batch_time: Duration,
    /// What the member's application events have told so far.
    pub(super) story: Story,
    /// Batches of one partition processed at once: 1, in order; more,
    /// finishing in any order ([`SimConfig::out_of_order`]).
    pub(super) lanes: usize,
    /// Out of order: per partition, what its claim finished.
    pub(super) ledgers: BTreeMap<TopicPartition, Ledger>,
}

/// What an out-of-order application finished of one claim: everything
/// below the frontier, and above it what the progress names (as read with
/// the committed offset at the claim's start, and finished since).
#[derive(Clone, Debug)]
pub(super) struct Ledger {
    pub(super) token: FencingToken,
    pub(super) frontier: Offset,
    pub(super) done: tenure_core::Progress,
}

/// One member process.
pub(super) struct Node {
    pub(super) id: MemberId,
    pub(super) member: Option<Member>,
    pub(super) incarnation: u32,
    pub(super) session: Option<SessionId>,
    /// The session a crashed static member left, for its next process to
    /// resume.
    pub(super) resumable: Option<SessionId>,
    pub(super) connected: bool,
    pub(super) epoch: u64,
    pub(super) last_contact: Instant,
    pub(super) paused_until: Option<Instant>,
    pub(super) leaving: bool,
    pub(super) gone: bool,
    pub(super) in_flight: BTreeMap<RequestId, Pending>,
    /// The claims, offset reads, commits and releases the member's steps
    /// at this instant gave, sent together when the instant is over.
    pub(super) gathered: Vec<StoreRequest>,
    pub(super) last_request_arrival: Instant,
    pub(super) last_reply_delivery: Instant,
    /// On an ensemble: the follower counted activity of the node's
    /// session since its last report to the leader.
    pub(super) unreported: bool,
    /// On an ensemble: the node's follower is cut off from its leader
    /// until then.
    pub(super) cut_until: Option<Instant>,
    /// On an ensemble: a write of the node's session waits at its cut-off
    /// follower, and every later request of the session with it.
    pub(super) holding: bool,
    /// On an ensemble: a ping of the leader's waits in the connection to
    /// the node's cut-off follower, ahead of anything the leader sends
    /// later; the follower answers it, with its report, once the cut heals.
    pub(super) ping_waiting: bool,
    /// On an ensemble: the follower's report on its way to the leader,
    /// with its number and the session it renews; a cut holds it until
    /// the heal, and a request the follower forwards later arrives after
    /// it.
    pub(super) report_in_flight: Option<(u64, SessionId)>,
    /// On an ensemble: the follower is cut off again just after the
    /// current cut heals, for this long.
    pub(super) cut_again: Option<Duration>,
    /// On an ensemble: a cut (its length, and its length again) that
    /// comes just after the node's next answer through the leader.
    pub(super) cut_on_answer: Option<(Duration, Option<Duration>)>,
    /// On an etcd cluster: the server the node's client talks to.
    pub(super) server: usize,
    /// On an etcd cluster: a lease grant waits at a server that cannot
    /// answer it, with its number (a timeout of an earlier try is
    /// ignored) and the tries left after it.
    pub(super) granting: Option<(u64, u32)>,
    /// On an etcd cluster: when the node's client began to ask for its
    /// current lease.
    pub(super) grant_began: Instant,
    /// On an etcd cluster: when the client's next keep-alive is due.
    pub(super) next_keep_alive: Instant,
    /// The node's process has had a session: a lease grant that fails now
    /// is a new lease after an expiry, tried again, not a join that fails.
    pub(super) joined: bool,
    pub(super) app: App,
    /// What a driver would have published after the member's last step,
    /// with the member's change count then ([`Member::changes`]).
    pub(super) published: Option<(u64, Published)>,
}

/// What a driver publishes of a member: assigned, owned (with tokens),
/// fetching, settled.
pub(super) type Published = (
    BTreeSet<TopicPartition>,
    Vec<(TopicPartition, FencingToken)>,
    Vec<TopicPartition>,
    bool,
);

pub(super) fn published(member: &Member) -> Published {
    (
        member.assigned().clone(),
        member.owned().map(|(p, t)| (p.clone(), t)).collect(),
        member.fetching().map(|(p, _)| p.clone()).collect(),
        member.is_settled(),
    )
}

impl Node {
    /// The connection this node has now.
    pub(super) fn link(&self) -> Link {
        Link {
            incarnation: self.incarnation,
            epoch: self.epoch,
        }
    }

    pub(super) fn running(&self, now: Instant) -> bool {
        self.member.is_some() && !self.gone && self.paused_until.is_none_or(|t| now >= t)
    }
}

/// One connection of one process of a node: what travels over it is lost
/// when the process restarts (a new incarnation) or the connection breaks
/// (a new epoch).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Link {
    pub(super) incarnation: u32,
    pub(super) epoch: u64,
}

#[derive(Clone, Debug)]
pub(super) enum Fault {
    Disconnect {
        node: usize,
        length: Duration,
    },
    Reconnect {
        node: usize,
        epoch: u64,
    },
    ClientExpiry {
        node: usize,
        epoch: u64,
    },
    Pause {
        node: usize,
        length: Duration,
    },
    Wake {
        node: usize,
    },
    Crash {
        node: usize,
        restart_after: Duration,
        /// A static member: the restarted process resumes the session if
        /// it is still alive.
        resume: bool,
    },
    Restart {
        node: usize,
    },
    SlowDrain {
        node: usize,
        length: Duration,
    },
    FastDrain {
        node: usize,
    },
    Join,
    Leave {
        node: usize,
    },
    GrowPartitions {
        topic: usize,
    },
    /// The node's follower loses its leader for `length`; with `again`,
    /// the link flaps: just after the heal, as the follower sends the
    /// report it owed, it is cut again for that long, with the report on
    /// its way. With `on_answer`, the cut waits for the next answer of the
    /// node's that went through the leader, and comes just after it,
    /// before the follower reports that activity.
    CutFollower {
        node: usize,
        length: Duration,
        again: Option<Duration>,
        on_answer: bool,
    },
    /// The node's follower has its leader back.
    HealFollower {
        node: usize,
    },
    /// The node's follower, cut off for `syncLimit` ticks, drops its
    /// clients.
    FollowerDrops {
        node: usize,
        epoch: u64,
    },
    /// The ensemble's leader is lost: every server closes its clients'
    /// connections, and no session expires until another leader is
    /// elected, `length` later.
    Election {
        length: Duration,
    },
    /// A new leader is elected: it restarts every session's timeout.
    Elected,
    /// An etcd server loses the quorum, for `length` or, with `None`, for
    /// good.
    Isolate {
        server: usize,
        length: Option<Duration>,
    },
    /// The etcd server isolated at `since` has the quorum back.
    Rejoin {
        server: usize,
        since: Instant,
    },
    /// The node's client asks for a lease, with this try and `tries` more
    /// left after it.
    GrantTry {
        node: usize,
        incarnation: u32,
        tries: u32,
    },
    /// The node's client gives up on its lease grant number `number`,
    /// which a server held.
    GrantGivenUp {
        node: usize,
        incarnation: u32,
        number: u64,
    },
}

/// An etcd server without the quorum.
#[derive(Clone, Copy, Debug)]
pub(super) struct Isolation {
    pub(super) server: usize,
    pub(super) since: Instant,
    /// When it has the quorum back; `None`: never.
    pub(super) until: Option<Instant>,
}

#[derive(Clone, Debug)]
pub(super) enum Action {
    /// A store command reaches the server.
    Request {
        node: usize,
        link: Link,
        session: SessionId,
        command: StoreRequest,
    },
    /// Requests of one kind of one step reach the server in one request
    /// (a `multi`): their writes land together or not at all.
    Batch {
        node: usize,
        link: Link,
        session: SessionId,
        commands: Vec<StoreRequest>,
    },
    /// The second round trip of a claim that met an existing record.
    ReadOwner {
        node: usize,
        link: Link,
        id: RequestId,
        partition: TopicPartition,
    },
    /// A reply reaches the member (dropped if the connection changed).
    Reply {
        node: usize,
        link: Link,
        event: Event,
    },
    /// A watch notification reaches the member's session.
    Watch {
        node: usize,
        session: SessionId,
        event: Event,
    },
    /// A local event (session change, application progress).
    Local {
        node: usize,
        incarnation: u32,
        event: Input,
    },
    Fault(Fault),
    /// The followers report their sessions' activity to the leader (an
    /// ensemble only, every half tick).
    Report,
    /// Node `node`'s follower answers the leader's ping that waited out a
    /// cut, with its report.
    ReportFrom {
        node: usize,
    },
    /// Node `node`'s follower's report number `number` reaches the leader,
    /// unless a cut holds it.
    ReportArrives {
        node: usize,
        number: u64,
    },
    /// On an etcd cluster: node `node`'s keep-alive of `session`, sent at
    /// `sent`, reaches its server.
    KeepAlive {
        node: usize,
        link: Link,
        session: SessionId,
        sent: Instant,
    },
    /// Node `node`'s client gives up on its request `id`, unanswered:
    /// it fails with a connection loss, its outcome unknown.
    RequestTimeout {
        node: usize,
        link: Link,
        id: RequestId,
    },
}

/// What a member is handed: what its store said, or what its application
/// did.
#[derive(Clone, Debug)]
pub(super) enum Input {
    Store(Event),
    App(Told),
    Counts(PartitionCounts),
    Shutdown,
}

pub(super) struct World {
    pub(super) config: SimConfig,
    pub(super) rng: SplitMix64,
    pub(super) start: Instant,
    pub(super) now: Instant,
    pub(super) quiet_at: Instant,
    pub(super) end_at: Instant,
    pub(super) seq: u64,
    pub(super) queue: BinaryHeap<Reverse<(Instant, u64)>>,
    pub(super) actions: BTreeMap<u64, Action>,
    pub(super) store: Store,
    pub(super) layout: Layout,
    pub(super) nodes: Vec<Node>,
    pub(super) counts: PartitionCounts,
    pub(super) hw: BTreeMap<TopicPartition, Offset>,
    pub(super) processed: BTreeMap<TopicPartition, Vec<u32>>,
    pub(super) committed: BTreeMap<TopicPartition, Offset>,
    /// The newest token any member's claim took effect with, per partition.
    pub(super) claimed_tokens: BTreeMap<TopicPartition, FencingToken>,
    pub(super) session_owner: BTreeMap<SessionId, usize>,
    pub(super) server_lag: Duration,
    /// On an ensemble: no leader until then (an election).
    pub(super) leaderless_until: Option<Instant>,
    /// On an etcd cluster: the server that leads.
    pub(super) etcd_leader: usize,
    /// When the last leader was elected, if ever.
    pub(super) elected_at: Option<Instant>,
    /// On an etcd cluster: the server cut off from the quorum, if any.
    pub(super) isolated: Option<Isolation>,
    /// On an ensemble: the operator's tooling and its follower.
    pub(super) operator: Operator,
    pub(super) next_produce: Instant,
    pub(super) next_app_tick: Instant,
    pub(super) report: SimReport,
}

pub(super) const APP_TICK: Duration = Duration::from_millis(25);
pub(super) const PRODUCE_EVERY: Duration = Duration::from_millis(100);
pub(super) const BATCH: Offset = 4;
