//! The faults drawn from the seed, and what each does to a member's link
//! and process.

use std::time::Duration;

use tenure_core::error::StoreError;
use tenure_core::protocol::{Event, StoreRequest};

use super::parts::{Action, App, Fault, Input, World};

impl World {
    pub(super) fn schedule_chaos(&mut self) {
        let chaos = self.config.chaos;
        let st = self.config.session_timeout;
        // Faults must heal before the quiet time: every one ends within
        // the chaos phase.
        let mut t = Duration::from_millis(500);
        while t < chaos {
            let remaining = chaos - t;
            let kind = self.rng.below(100);
            let n = self.nodes.len().max(1) as u64;
            let node = self.rng.below(n + 2) as usize;
            let fault = match kind {
                0..=19 if self.config.faults => Some(Fault::Disconnect {
                    node,
                    length: self.random_length(st * 2, remaining),
                }),
                20..=29 if self.config.faults => Some(Fault::Pause {
                    node,
                    length: self.random_length(st * 2, remaining),
                }),
                30..=37 if self.config.faults => Some(Fault::Crash {
                    node,
                    restart_after: self.random_length(st * 2, remaining),
                    resume: self.rng.below(2) == 0,
                }),
                38..=45 if self.config.faults => Some(Fault::SlowDrain {
                    node,
                    length: self.random_length(self.config.processing_timeout * 3, remaining),
                }),
                46..=60 if self.config.churn => Some(Fault::Join),
                61..=72 if self.config.churn => Some(Fault::Leave { node }),
                73..=78 if self.config.churn => Some(Fault::GrowPartitions {
                    topic: self.rng.below(self.config.topics.len().max(1) as u64) as usize,
                }),
                94..=96 if self.config.faults && self.config.ensemble.is_some() => {
                    Some(Fault::Election {
                        length: self.random_length(st, remaining),
                    })
                }
                79..=96 if self.config.faults && self.config.etcd.is_some() => {
                    let servers = self.config.etcd.as_ref().map_or(1, |c| c.servers);
                    // Now and then for good: the group must converge with
                    // a server down.
                    let length =
                        (!self.rng.chance(1, 5)).then(|| self.random_length(st * 4, remaining));
                    Some(Fault::Isolate {
                        server: self.rng.below(servers as u64) as usize,
                        length,
                    })
                }
                79..=93 if self.config.faults && self.config.ensemble.is_some() => {
                    let length = self.random_length(st * 4, remaining);
                    let again = self
                        .rng
                        .chance(1, 3)
                        .then(|| self.random_length(st * 4, remaining));
                    let on_answer = self.rng.chance(1, 2);
                    Some(Fault::CutFollower {
                        node,
                        length,
                        again,
                        on_answer,
                    })
                }
                _ => None,
            };
            if let Some(fault) = fault {
                let when = self.start + t;
                self.at(when, Action::Fault(fault));
            }
            t += Duration::from_millis(200 + self.rng.below(1800));
        }
    }

    pub(super) fn random_length(&mut self, max: Duration, remaining: Duration) -> Duration {
        let cap = max.min(remaining.saturating_sub(Duration::from_millis(1)));
        Duration::from_millis(self.rng.below(cap.as_millis() as u64 + 1))
    }

    pub(super) fn apply_fault(&mut self, fault: Fault) {
        let now = self.now;
        self.trace(None, &("fault", &fault));
        match fault {
            Fault::Disconnect { node, length } => {
                let Some(n) = self.nodes.get(node) else {
                    return;
                };
                if !n.connected || n.member.is_none() || n.gone {
                    return;
                }
                self.report.faults += 1;
                self.disconnect(node);
                let epoch = self.nodes[node].epoch;
                self.at(
                    now + length,
                    Action::Fault(Fault::Reconnect { node, epoch }),
                );
                // ZooKeeper's client gives its session up by its own clock;
                // etcd's backend waits for a server to say the lease is gone.
                if self.config.etcd.is_none() {
                    let expiry = self.nodes[node].last_contact + self.config.session_timeout;
                    self.at(expiry, Action::Fault(Fault::ClientExpiry { node, epoch }));
                }
            }
            Fault::Reconnect { node, epoch } => {
                if self.nodes[node].epoch != epoch || self.nodes[node].member.is_none() {
                    return;
                }
                if let Some(until) = self.leaderless_until {
                    // No server takes a client before a leader is elected.
                    self.at(until, Action::Fault(Fault::Reconnect { node, epoch }));
                    return;
                }
                self.reconnect(node);
            }
            Fault::ClientExpiry { node, epoch } => {
                let n = &self.nodes[node];
                if n.epoch != epoch || n.connected || n.session.is_none() || n.member.is_none() {
                    return;
                }
                // The client gives up on its session by its own clock, which
                // can be before the server has deleted its records.
                self.nodes[node].session = None;
                self.local(now, node, Input::Store(Event::SessionExpired));
            }
            Fault::Pause { node, length } => {
                let Some(n) = self.nodes.get_mut(node) else {
                    return;
                };
                if n.member.is_none() || n.gone || n.paused_until.is_some() {
                    return;
                }
                n.paused_until = Some(now + length);
                self.report.faults += 1;
                self.at(now + length, Action::Fault(Fault::Wake { node }));
            }
            Fault::Wake { node } => self.wake(node),
            Fault::Crash {
                node,
                restart_after,
                resume,
            } => {
                let Some(n) = self.nodes.get_mut(node) else {
                    return;
                };
                if n.member.is_none() || n.gone || n.leaving {
                    return;
                }
                self.report.faults += 1;
                n.member = None;
                n.resumable = if resume { n.session } else { None };
                n.session = None;
                n.connected = false;
                n.epoch += 1;
                n.paused_until = None;
                n.in_flight.clear();
                n.app = App {
                    batch_time: n.app.batch_time,
                    lanes: n.app.lanes,
                    ..App::default()
                };
                self.at(now + restart_after, Action::Fault(Fault::Restart { node }));
            }
            Fault::Restart { node } => {
                if self.nodes[node].member.is_none() && !self.nodes[node].gone {
                    if let Err(detail) = self.start_member(node) {
                        self.violation("valid simulation config", detail);
                    }
                }
            }
            Fault::SlowDrain { node, length } => {
                let Some(n) = self.nodes.get_mut(node) else {
                    return;
                };
                self.report.faults += 1;
                n.app.batch_time = self.config.processing_timeout + Duration::from_millis(200);
                self.at(now + length, Action::Fault(Fault::FastDrain { node }));
            }
            Fault::FastDrain { node } => {
                self.nodes[node].app.batch_time = Duration::from_millis(30)
            }
            Fault::Join => {
                if self.active_nodes().len() < 8 {
                    if let Err(detail) = self.add_node() {
                        self.violation("valid simulation config", detail);
                    }
                }
            }
            Fault::Leave { node } => {
                let active = self.active_nodes();
                if active.len() < 2 || !active.contains(&node) || self.nodes[node].member.is_none()
                {
                    return;
                }
                self.nodes[node].leaving = true;
                self.local(now, node, Input::Shutdown);
            }
            Fault::CutFollower {
                node,
                length,
                again,
                on_answer,
            } => match self.nodes.get_mut(node) {
                Some(waiting) if on_answer => waiting.cut_on_answer = Some((length, again)),
                _ => self.cut_follower(node, length, again),
            },
            Fault::HealFollower { node } => self.heal_follower(node),
            Fault::FollowerDrops { node, epoch } => self.follower_drops(node, epoch),
            Fault::Election { length } => self.election(length),
            Fault::Elected => self.elected(),
            Fault::Isolate { server, length } => self.isolate(server, length),
            Fault::Rejoin { server, since } => self.rejoin(server, since),
            Fault::GrantTry {
                node,
                incarnation,
                tries,
            } => self.grant_try(node, incarnation, tries),
            Fault::GrantGivenUp {
                node,
                incarnation,
                number,
            } => self.grant_given_up(node, incarnation, number),
            Fault::GrowPartitions { topic } => {
                let Some((name, _)) = self.config.topics.get(topic) else {
                    return;
                };
                let name = name.clone();
                if let Some(count) = self.counts.get_mut(&name) {
                    *count += 1 + self.rng.below(2) as u32;
                }
                self.sync_logs();
                // Each member learns of the new partitions at its own
                // metadata refresh.
                for index in 0..self.nodes.len() {
                    if self.nodes[index].member.is_some() && !self.nodes[index].gone {
                        let when = now + Duration::from_millis(self.rng.below(500));
                        let counts = self.counts.clone();
                        self.local(when, index, Input::Counts(counts));
                    }
                }
            }
        }
    }

    pub(super) fn disconnect(&mut self, index: usize) {
        let now = self.now;
        self.trace(Some(index), &("disconnected", self.nodes[index].session));
        let node = &mut self.nodes[index];
        node.connected = false;
        node.epoch += 1;
        let last_heard = node.last_contact;
        let failed: Vec<StoreRequest> = std::mem::take(&mut node.in_flight)
            .into_values()
            .map(|p| p.command)
            .collect();
        for command in failed {
            self.fail(index, command, StoreError::ConnectionLoss);
        }
        self.local(
            now,
            index,
            Input::Store(Event::SessionSuspended { last_heard }),
        );
    }

    pub(super) fn reconnect(&mut self, index: usize) {
        let now = self.now;
        if self.reconnect_elsewhere(index) {
            return;
        }
        // To another server, maybe: not on a cut-off follower.
        self.leave_follower(index);
        self.trace(Some(index), &("reconnecting", self.nodes[index].session));
        // The server revalidates the session with the leader, which finds
        // one past its deadline dead there and then.
        let session = self.nodes[index].session;
        match session {
            Some(session) if self.server_touch(session) => {
                let node = &mut self.nodes[index];
                node.connected = true;
                node.epoch += 1;
                node.last_contact = now;
                node.next_keep_alive = now;
                self.local(now, index, Input::Store(Event::SessionResumed));
                self.renewed_now(index);
            }
            Some(_) => {
                self.nodes[index].session = None;
                self.local(now, index, Input::Store(Event::SessionExpired));
                self.open_session(index);
            }
            None => self.open_session(index),
        }
    }

    pub(super) fn wake(&mut self, index: usize) {
        let now = self.now;
        let node = &mut self.nodes[index];
        node.paused_until = None;
        // The first thing a process does on waking is look at the clock:
        // the member must stop consuming before anything else happens.
        if let Some(member) = node.member.as_mut() {
            member.handle_timeout(now);
        }
        self.drain_commands(index);
        if let Some(session) = self.nodes[index].session {
            if !self.store.session_alive(session) && self.nodes[index].connected {
                // The server expired the session while we slept and closed
                // the connection; the client finds out now.
                self.disconnect(index);
                self.reconnect(index);
            }
        }
    }

    // ----- the loop -----
}
