//! A replicated ZooKeeper ensemble as it bears on sessions
//! ([`Ensemble`](super::Ensemble)): followers that count a session's
//! activity and report it to the leader every half tick, and that can be
//! cut off from their leader.

use tenure_core::model::adapter;
use tenure_core::protocol::{Event, StoreOp};
use tenure_core::types::SessionId;

use super::parts::{Action, Fault, World};

/// Whether a request goes through the leader (a write, or the `sync` that
/// opens a heartbeat) rather than being answered by the follower.
pub(super) fn goes_to_leader(op: &StoreOp) -> bool {
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
fn answered_by_leader(event: &Event) -> bool {
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

impl World {
    /// Node `index`'s client is heard from under `session` (a request, a
    /// ping) by the server it is connected to: one node renews the session
    /// at once; an ensemble's follower counts it for its next report.
    /// Whether the session is alive there.
    pub(super) fn contact(&mut self, index: usize, session: SessionId) -> bool {
        if self.config.ensemble.is_none() {
            return self.server_touch(session);
        }
        let alive = self.store.session_alive(session);
        if alive && self.nodes[index].session == Some(session) {
            self.nodes[index].unreported = true;
        }
        alive
    }

    /// The renewal node `index`'s backend reports with a reply served now,
    /// if any: on one node, any answer of the store's, counted as it was
    /// served; on an ensemble, what went through the leader, from when the
    /// client sent it, with the backend's delay.
    pub(super) fn renewal(&self, index: usize, reply: &Event) -> Option<Event> {
        let renewal = adapter::renewal(self.now, reply)?;
        let Some(ensemble) = &self.config.ensemble else {
            return Some(renewal);
        };
        let sent = reply
            .request_id()
            .and_then(|id| self.nodes[index].in_flight.get(&id))
            .map_or(self.now, |pending| pending.sent);
        if answered_by_leader(reply) {
            return Some(Event::SessionRenewed {
                sent,
                counted_after: ensemble.counted_after,
            });
        }
        // A follower's answer taken for the leader's word, at once.
        ensemble.reads_renew.then_some(Event::SessionRenewed {
            sent,
            counted_after: std::time::Duration::ZERO,
        })
    }

    /// Whether node `index`'s request must wait at its cut-off follower:
    /// a write does, and every request after it.
    pub(super) fn held<'a>(
        &mut self,
        index: usize,
        mut ops: impl Iterator<Item = &'a StoreOp>,
    ) -> Option<std::time::Instant> {
        let node = &mut self.nodes[index];
        let until = node.cut_until.filter(|t| *t > self.now)?;
        if node.holding || ops.any(goes_to_leader) {
            node.holding = true;
            return Some(until);
        }
        None
    }

    /// Whether node `index`'s server hears of its session's expiry: a
    /// follower cut off from its leader does not.
    pub(super) fn hears_expiry(&self, index: usize) -> bool {
        self.nodes[index].cut_until.is_none_or(|t| t <= self.now)
    }

    /// The followers report what they counted since their last report;
    /// the leader renews those sessions now. Again in half a tick. The
    /// ping to a cut-off follower waits in its connection.
    pub(super) fn report(&mut self) {
        let Some(tick) = self.config.ensemble.as_ref().map(|e| e.tick) else {
            return;
        };
        let now = self.now;
        for index in 0..self.nodes.len() {
            if self.nodes[index].cut_until.is_some_and(|t| t > now) {
                self.nodes[index].ping_waiting = true;
            } else {
                self.report_from(index);
            }
        }
        self.at(now + tick / 2, Action::Report);
    }

    /// Node `index`'s follower reports what it counted since its last
    /// report, if anything; the leader renews the session now.
    pub(super) fn report_from(&mut self, index: usize) {
        if !self.nodes[index].unreported {
            return;
        }
        self.nodes[index].unreported = false;
        if let Some(session) = self.nodes[index].session {
            let renewed = self.server_touch(session);
            self.trace(Some(index), &("reported to the leader", session, renewed));
        }
    }

    /// Cuts node `index`'s follower off from its leader for `length`.
    pub(super) fn cut_follower(&mut self, index: usize, length: std::time::Duration) {
        let Some(ensemble) = self.config.ensemble.clone() else {
            return;
        };
        let Some(node) = self.nodes.get_mut(index) else {
            return;
        };
        let cut = node.cut_until.is_some_and(|t| t > self.now);
        if !node.connected || node.member.is_none() || node.gone || cut {
            return;
        }
        self.report.faults += 1;
        let now = self.now;
        node.cut_until = Some(now + length);
        let epoch = node.epoch;
        self.trace(Some(index), &("follower cut off", length));
        self.at(
            now + length,
            Action::Fault(Fault::HealFollower { node: index }),
        );
        let patience = ensemble.tick * ensemble.sync_limit;
        if length > patience {
            self.at(
                now + patience,
                Action::Fault(Fault::FollowerDrops { node: index, epoch }),
            );
        }
    }

    /// Node `index`'s follower has its leader back: what it held goes on,
    /// and the leader's ping that waited is answered just after, with the
    /// report. (A node that reconnected meanwhile is on another server
    /// already.)
    pub(super) fn heal_follower(&mut self, index: usize) {
        if self.nodes[index].ping_waiting && self.nodes[index].cut_until.is_some() {
            // After the held requests, which are due at this instant too.
            self.at(self.now, Action::ReportFrom { node: index });
        }
        self.leave_follower(index);
    }

    /// Node `index` is no longer on a cut-off follower.
    pub(super) fn leave_follower(&mut self, index: usize) {
        let node = &mut self.nodes[index];
        node.cut_until = None;
        node.holding = false;
        node.ping_waiting = false;
    }

    /// Node `index`'s follower gave up on its leader and dropped its
    /// clients; the client connects to another server at once, which
    /// revalidates the session with the leader.
    pub(super) fn follower_drops(&mut self, index: usize, epoch: u64) {
        if self.nodes[index].epoch != epoch || !self.nodes[index].connected {
            return;
        }
        self.trace(Some(index), &"follower drops its clients");
        self.disconnect(index);
        self.leave_follower(index);
        self.nodes[index].unreported = false;
        let epoch = self.nodes[index].epoch;
        let back = self.now + self.config.max_delay;
        self.at(back, Action::Fault(Fault::Reconnect { node: index, epoch }));
    }
}
