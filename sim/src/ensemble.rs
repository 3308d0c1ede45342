//! A replicated ZooKeeper ensemble as it bears on sessions, shared by the
//! simulator and the explorer: what it is ([`Ensemble`]) and which
//! requests and answers go through its leader.

use std::time::Duration;

use tenure_core::protocol::{Event, StoreOp};

/// A ZooKeeper ensemble as it bears on sessions: each member is connected
/// to a follower, which counts its requests and pings and reports them to
/// the leader, which alone expires sessions, with its answer to the
/// leader's ping, every half tick. A follower can be cut off from its
/// leader (a fault): it goes on answering reads while no write of the
/// session waits, holds writes and syncs until the cut heals, reports
/// nothing until then (a ping the leader sent meanwhile waits in the
/// connection, and is answered, with the report, just after the held
/// requests reach the leader), and after `sync_limit` ticks drops its
/// clients, which reconnect to another server (the leader revalidates the
/// session). The leader can be lost (a fault): every server closes its
/// clients' connections, no session expires until another leader is
/// elected, and the new leader restarts every session's timeout. In the
/// simulator, the operator's tooling reads the group through a follower
/// of its own, which lags behind the leader and is cut off too.
#[derive(Clone, Debug)]
pub struct Ensemble {
    /// The ensemble's `tickTime`: at most half the session timeout, as a
    /// server grants no shorter session.
    pub tick: Duration,
    /// Ticks a follower cut off from its leader keeps its clients.
    pub sync_limit: u32,
    /// What the member's backend says of a write or sync answered: how
    /// late the leader may count it (ZooKeeper's backend: a third of the
    /// session). Zero models counting every answer at once.
    pub counted_after: Duration,
    /// The backend also counts answers to reads as renewals, at once (a
    /// follower's answers taken for the leader's word), to show the model
    /// finds that.
    pub reads_renew: bool,
    /// The operator's tooling syncs with the leader before it reads a
    /// group (the simulator's operator); `false` models the tooling that
    /// read a follower's state as it was.
    pub tools_sync: bool,
}

impl Ensemble {
    /// The ensemble the ZooKeeper backend meets at its worst: a tick half
    /// the session, `syncLimit` 5 (ZooKeeper's sample configuration), and
    /// the backend's own counting.
    pub fn zookeeper(session_timeout: Duration) -> Ensemble {
        Ensemble {
            tick: session_timeout / 2,
            sync_limit: 5,
            counted_after: session_timeout / 3,
            reads_renew: false,
            tools_sync: true,
        }
    }
}

/// Whether a request goes through the leader (a write, or the `sync` that
/// opens a heartbeat) rather than being answered by the follower.
pub(crate) fn goes_to_leader(op: &StoreOp) -> bool {
    match op {
        StoreOp::Register { .. }
        | StoreOp::Deregister
        | StoreOp::Heartbeat
        | StoreOp::Claim { .. }
        | StoreOp::Release { .. }
        | StoreOp::CommitOffset { .. } => true,
        StoreOp::WatchMembers | StoreOp::WatchOwner { .. } | StoreOp::ReadOffset { .. } => false,
    }
}

/// Whether a result answers a request that went through the leader.
pub(crate) fn answered_by_leader(event: &Event) -> bool {
    matches!(
        event,
        Event::RegisterResult { .. }
            | Event::DeregisterResult { .. }
            | Event::HeartbeatResult { .. }
            | Event::ClaimResult { .. }
            | Event::ReleaseResult { .. }
            | Event::CommitResult { .. }
    )
}
