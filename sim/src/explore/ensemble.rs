//! The explorer's ZooKeeper ensemble: each member's follower counts its
//! session's activity and reports it to the leader on the leader's ping,
//! every half tick; a report travels to the leader ahead of whatever the
//! same follower forwards later; a follower can be cut off from its
//! leader, holding the writes and syncs of its clients (and every request
//! behind them), its reports and its notifications until the cut heals,
//! or until it drops its clients after `syncLimit` ticks.
//!
//! The leader alone expires sessions, from the reports it has received:
//! an answer to a member says its request was served, not that the leader
//! counted the session's activity.

use std::time::{Duration, Instant};

use tenure_core::model::adapter;
use tenure_core::protocol::Event;
use tenure_core::types::SessionId;

use super::model::{Model, Msg, Problem};
use super::state::State;
use crate::ensemble::{answered_by_leader, goes_to_leader};

impl State {
    /// Whether `node`'s follower is cut off from its leader.
    pub(super) fn is_cut(&self, node: usize) -> bool {
        self.nodes[node].cut_since.is_some()
    }

    /// Whether a request in flight goes through the leader: a write, a
    /// sync, or a `multi` holding one.
    pub(super) fn leader_bound(msg: &Msg) -> bool {
        match msg {
            Msg::Request { command, .. } => goes_to_leader(&command.op),
            Msg::Batch { commands, .. } => commands.iter().any(|c| goes_to_leader(&c.op)),
            _ => false,
        }
    }

    /// Whether `msg` waits for the cut off its member's follower to heal:
    /// a write or sync of the process on it (the requests behind it wait
    /// their turn on the connection), a report of that follower's, a
    /// notification it would relay.
    pub(super) fn held_by_cut(&self, msg: &Msg) -> bool {
        match msg {
            Msg::Request {
                node, incarnation, ..
            }
            | Msg::Batch {
                node, incarnation, ..
            } => {
                self.is_cut(*node)
                    && self.nodes[*node].incarnation == *incarnation
                    && Self::leader_bound(msg)
            }
            Msg::Report { node, link, .. } => self.is_cut(*node) && self.nodes[*node].link == *link,
            Msg::Watch { node, .. } => self.is_cut(*node),
            Msg::ReadOwner { .. } | Msg::Reply { .. } | Msg::Replies { .. } => false,
        }
    }

    /// Whether a message stays in flight while a cut lasts without
    /// counting against [`super::ExploreConfig::max_delay`]: everything on
    /// the cut-off follower's connection.
    pub(super) fn waits_for_heal(&self, msg: &Msg) -> bool {
        let node = match msg {
            Msg::Report { node, link, .. } if self.nodes[*node].link == *link => *node,
            Msg::Watch { node, .. } => *node,
            _ => match msg.connection() {
                Some((node, incarnation)) if self.nodes[node].incarnation == incarnation => node,
                _ => return false,
            },
        };
        self.is_cut(node)
    }

    /// Whether `node`'s follower has been cut off for `syncLimit` ticks:
    /// it drops its clients before time moves on.
    pub(super) fn follower_gives_up(&self, model: &Model, node: usize) -> bool {
        let patience = model
            .followers
            .as_ref()
            .map_or(Duration::MAX, |f| f.patience);
        self.nodes[node]
            .cut_since
            .is_some_and(|since| self.now >= since + patience)
    }

    /// `node`'s client is heard from under `session` (a request, a ping):
    /// on one node the store renews the session at once; on an ensemble
    /// the follower counts it for its next report. Whether the session is
    /// alive.
    pub(super) fn heard(&mut self, model: &Model, node: usize, session: SessionId) -> bool {
        if model.lease_ttl.is_some() {
            // A request renews no etcd lease: the client is heard from
            // only by its keep-alives.
            self.alive_at_leader(model, session);
            return false;
        }
        if model.followers.is_none() {
            return self.server_touch(model, session);
        }
        let alive = self.alive_at_leader(model, session);
        if alive && self.nodes[node].session == Some(session) {
            self.nodes[node].unreported = true;
        }
        alive
    }

    /// Before `msg`, taken from `before` in flight, reaches the leader,
    /// the reports its member's follower sent ahead of it arrive: the
    /// follower forwards it behind them.
    pub(super) fn forward(&mut self, model: &Model, msg: &Msg, before: usize) {
        let (Msg::Request {
            node, incarnation, ..
        }
        | Msg::Batch {
            node, incarnation, ..
        }) = msg
        else {
            return;
        };
        // A dead process's request came through a follower of its own.
        let current = self.nodes[*node].incarnation == *incarnation;
        if model.followers.is_none() || !current || !Self::leader_bound(msg) {
            return;
        }
        let ahead = self.take_reports(*node, before);
        for session in ahead {
            self.server_touch(model, session);
        }
    }

    /// The renewal a member's backend reports with the answers `events`
    /// to a request sent at `sent`, served now: on one node, any answer,
    /// counted as it was served; on an ensemble, an answer through the
    /// leader, counted as late as the backend says (a follower's answer
    /// to a read renews nothing, unless the backend is made to take it
    /// for the leader's word).
    pub(super) fn renewal(
        &self,
        model: &Model,
        node: usize,
        sent: Instant,
        events: &[Event],
    ) -> Option<Event> {
        if model
            .config
            .etcd
            .as_ref()
            .is_some_and(|etcd| !etcd.answers_renew)
        {
            return self.lease_renewal(model, node, sent, events);
        }
        let Some(followers) = &model.followers else {
            return events
                .iter()
                .find_map(|event| adapter::renewal(self.now, event));
        };
        let served = |event: &&Event| adapter::renewal(sent, event).is_some();
        if events.iter().filter(served).any(answered_by_leader) {
            return Some(Event::SessionRenewed {
                sent,
                counted_after: followers.counted_after,
            });
        }
        (followers.reads_renew && events.iter().any(|e| served(&e))).then_some(
            Event::SessionRenewed {
                sent,
                counted_after: Duration::ZERO,
            },
        )
    }

    /// Whether a follower reports now: the leader pings every half tick.
    pub(super) fn reports_now(&self, model: &Model) -> bool {
        model.followers.as_ref().is_some_and(|f| {
            let since = self.now.saturating_duration_since(model.epoch);
            since.as_nanos().is_multiple_of(f.report_every.as_nanos())
        })
    }

    /// The next moment the leader pings its followers, after now.
    pub(super) fn next_report(&self, model: &Model) -> Option<Instant> {
        let every = model.followers.as_ref()?.report_every;
        let since = self.now.saturating_duration_since(model.epoch);
        let reports = since.as_nanos() / every.as_nanos() + 1;
        let reports = u32::try_from(reports).unwrap_or(u32::MAX);
        Some(model.epoch + every * reports)
    }

    /// The leader pings its followers: each reports what it counted since
    /// its last report; the ping to a cut-off follower waits.
    pub(super) fn report(&mut self) {
        for node in 0..self.nodes.len() {
            if !self.nodes[node].connected {
                continue;
            }
            if self.is_cut(node) {
                self.nodes[node].ping_waiting = true;
            } else {
                self.report_from(node);
            }
        }
    }

    /// `node`'s follower reports its session's activity, if it counted
    /// any: the report is on its way to the leader.
    fn report_from(&mut self, node: usize) {
        let n = &mut self.nodes[node];
        if !std::mem::take(&mut n.unreported) {
            return;
        }
        if let Some(session) = n.session {
            let link = n.link;
            self.send(Msg::Report {
                node,
                link,
                session,
            });
        }
    }

    /// `node`'s follower is cut off from its leader.
    pub(super) fn cut(&mut self, node: usize) {
        self.nodes[node].cut_since = Some(self.now);
    }

    /// `node`'s follower has its leader back: the report the cut caught
    /// arrives first, the writes it held go on (in flight, ahead of what
    /// follows), and the ping that waited is answered with a new report.
    pub(super) fn heal(&mut self, model: &Model, node: usize) {
        self.nodes[node].cut_since = None;
        let caught = self.take_reports(node, usize::MAX);
        for session in caught {
            self.server_touch(model, session);
        }
        if std::mem::take(&mut self.nodes[node].ping_waiting) {
            self.report_from(node);
        }
    }

    /// The leader is lost: every server closes its clients' connections,
    /// the reports on their way to the old leader are lost, and the new
    /// one restarts every session's timeout from now. The clients
    /// reconnect as the new leader serves: a longer outage is a
    /// disconnection's, searched on its own (both members reconnecting at
    /// any moments would multiply the states by the moments squared).
    pub(super) fn election(&mut self, model: &Model, problems: &mut Vec<Problem>) {
        let connected: Vec<usize> = (0..self.nodes.len())
            .filter(|&node| self.nodes[node].connected)
            .collect();
        for &node in &connected {
            self.disconnect(model, node, problems);
        }
        self.net
            .retain(|flight| !matches!(flight.msg, Msg::Report { .. }));
        self.store.restart_timeouts(self.now);
        for node in connected {
            self.reconnect(model, node, problems);
        }
    }

    /// `node`'s client leaves its follower (a disconnection, the follower
    /// dropping its clients, a restart). A follower cut off from its
    /// leader loses what it had not reported; another one reports it
    /// (the client's next server revalidates the session with the leader
    /// anyway).
    pub(super) fn leave_follower(&mut self, node: usize) {
        let n = &mut self.nodes[node];
        n.unreported = false;
        n.ping_waiting = false;
        if n.cut_since.take().is_some() {
            self.take_reports(node, usize::MAX);
        }
    }

    /// Takes out of flight the reports `node`'s present follower sent,
    /// among the messages before index `before`; gives their sessions.
    fn take_reports(&mut self, node: usize, before: usize) -> Vec<SessionId> {
        let link = self.nodes[node].link;
        let mut taken = Vec::new();
        let mut index = 0;
        self.net.retain(|flight| {
            let keep = match flight.msg {
                Msg::Report {
                    node: n,
                    link: l,
                    session,
                } if n == node && l == link && index < before => {
                    taken.push(session);
                    false
                }
                _ => true,
            };
            index += 1;
            keep
        });
        taken
    }
}
