//! A replicated ZooKeeper ensemble as it bears on sessions
//! ([`Ensemble`](super::Ensemble)): followers that count a session's
//! activity and report it to the leader every half tick, and that can be
//! cut off from their leader.

use tenure_core::model::adapter;
use tenure_core::protocol::{Event, StoreOp};
use tenure_core::types::SessionId;

use super::parts::{Action, Fault, World};
use crate::ensemble::{answered_by_leader, goes_to_leader};

impl World {
    /// Node `index`'s client is heard from under `session` (a request, a
    /// ping) by the server it is connected to: one node renews the session
    /// at once; an ensemble's follower counts it for its next report.
    /// Whether the session is alive there.
    pub(super) fn contact(&mut self, index: usize, session: SessionId) -> bool {
        if self.config.etcd.is_some() {
            return self.lease_alive(session);
        }
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
        if self.config.etcd.as_ref().is_some_and(|c| !c.answers_renew) {
            return self.lease_renewal(index, reply);
        }
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

    /// Node `index` was answered `events`: a cut that waited for an answer
    /// through the leader comes now, before the follower's next report.
    pub(super) fn answered(&mut self, index: usize, events: &[Event]) {
        if !events.iter().any(answered_by_leader) {
            return;
        }
        if let Some((length, again)) = self.nodes[index].cut_on_answer.take() {
            self.cut_follower(index, length, again);
        }
    }

    /// Node `index`'s follower forwards a request to its leader: behind the
    /// report it sent before, which therefore arrives first.
    pub(super) fn forward(&mut self, index: usize, op: &StoreOp) {
        if self.config.ensemble.is_some() && goes_to_leader(op) {
            self.deliver_report(index);
        }
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
    /// follower cut off from its leader does not, nor does an etcd server
    /// without one.
    pub(super) fn hears_expiry(&self, index: usize) -> bool {
        self.nodes[index].cut_until.is_none_or(|t| t <= self.now) && self.serves(index)
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
    /// report, if anything: the report is on its way to the leader, which
    /// renews the session when it arrives. A flapping link is cut again
    /// now, with the report on its way.
    pub(super) fn report_from(&mut self, index: usize) {
        let node = &mut self.nodes[index];
        let again = node.cut_again.take();
        if node.unreported {
            node.unreported = false;
            if let Some(session) = node.session {
                let number = self.seq;
                node.report_in_flight = Some((number, session));
                let when = self.now + self.delay();
                self.at(
                    when,
                    Action::ReportArrives {
                        node: index,
                        number,
                    },
                );
            }
        }
        if let Some(length) = again {
            self.cut_follower(index, length, None);
        }
    }

    /// Node `index`'s report number `number` reaches the leader, unless a
    /// cut holds it (then it arrives at the heal) or it arrived already,
    /// ahead of a request the follower forwarded after it.
    pub(super) fn report_arrives(&mut self, index: usize, number: u64) {
        let node = &self.nodes[index];
        let cut = node.cut_until.is_some_and(|t| t > self.now);
        if !cut && node.report_in_flight.is_some_and(|(n, _)| n == number) {
            self.deliver_report(index);
        }
    }

    /// Node `index`'s follower's report on its way, if any, reaches the
    /// leader now, which renews the session it names (if still alive).
    pub(super) fn deliver_report(&mut self, index: usize) {
        if let Some((_, session)) = self.nodes[index].report_in_flight.take() {
            let renewed = self.server_touch(session);
            self.trace(Some(index), &("reported to the leader", session, renewed));
        }
    }

    /// Cuts node `index`'s follower off from its leader for `length`, and
    /// again for `again` just after it heals.
    pub(super) fn cut_follower(
        &mut self,
        index: usize,
        length: std::time::Duration,
        again: Option<std::time::Duration>,
    ) {
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
        node.cut_again = again;
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
        // A heal due at another moment belongs to an earlier cut, which
        // ended when the client left that follower.
        if self.nodes[index].cut_until != Some(self.now) {
            return;
        }
        // A report the cut caught on its way arrives first: the follower
        // sent it before anything it held.
        self.deliver_report(index);
        if self.nodes[index].ping_waiting {
            // After the held requests, which are due at this instant too.
            self.at(self.now, Action::ReportFrom { node: index });
        } else if let Some(length) = self.nodes[index].cut_again.take() {
            let again = self.now;
            let cut = Fault::CutFollower {
                node: index,
                length,
                again: None,
                on_answer: false,
            };
            self.at(again, Action::Fault(cut));
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
        // The follower's connection to its leader is gone, and so is the
        // report it had on the way.
        self.nodes[index].unreported = false;
        self.nodes[index].report_in_flight = None;
        self.nodes[index].cut_again = None;
        let epoch = self.nodes[index].epoch;
        let back = self.now + self.config.max_delay;
        self.at(back, Action::Fault(Fault::Reconnect { node: index, epoch }));
    }

    /// The leader is lost for `length`: every server closes its clients'
    /// connections (followers' reports on their way are lost with it),
    /// and the clients come back once another leader is elected.
    pub(super) fn election(&mut self, length: std::time::Duration) {
        if self.config.ensemble.is_none() || self.leaderless_until.is_some() {
            return;
        }
        self.report.faults += 1;
        self.report.elections += 1;
        let until = self.now + length;
        self.leaderless_until = Some(until);
        self.operator.elections.push((self.now, until));
        self.trace(None, &("leader lost for", length));
        // Before the clients come back: they revalidate with the new leader.
        self.at(until, Action::Fault(Fault::Elected));
        for index in 0..self.nodes.len() {
            let node = &mut self.nodes[index];
            node.unreported = false;
            node.report_in_flight = None;
            node.cut_again = None;
            if node.member.is_none() || node.gone || !node.connected {
                continue;
            }
            self.disconnect(index);
            self.leave_follower(index);
            let epoch = self.nodes[index].epoch;
            self.at(
                until,
                Action::Fault(Fault::Reconnect { node: index, epoch }),
            );
            let expiry = self.nodes[index].last_contact + self.config.session_timeout;
            self.at(
                expiry,
                Action::Fault(Fault::ClientExpiry { node: index, epoch }),
            );
        }
    }

    /// Another leader is elected: it restarts every session's timeout,
    /// as ZooKeeper's new leader does (etcd's extends every lease).
    pub(super) fn elected(&mut self) {
        self.leaderless_until = None;
        self.elected_at = Some(self.now);
        self.store.restart_timeouts(self.now);
        self.trace(None, &"leader elected");
    }
}
