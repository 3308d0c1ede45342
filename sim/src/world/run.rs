//! Running the world: the timeline, one step at a time, and feeding each
//! member what reached it.

use std::cmp::Reverse;
use std::fmt;
use std::time::Instant;

use crate::check;
use tenure_core::model::adapter;
use tenure_core::protocol::Event;

use super::parts::{Action, Input, World, APP_TICK, PRODUCE_EVERY};

impl World {
    pub(super) fn run(&mut self) {
        loop {
            let next = self.next_time();
            let Some(next) = next else { break };
            if next > self.end_at {
                break;
            }
            self.now = next;
            self.report.steps += 1;
            self.step();
            self.check_step();
            if self.now >= self.quiet_at {
                self.check_convergence();
            }
            if self.report.steps > 5_000_000 {
                self.violation("termination", "more than 5,000,000 steps".to_owned());
                break;
            }
        }
        self.now = self.end_at.max(self.now);
        self.final_checks();
        self.report.simulated = self.elapsed();
    }

    pub(super) fn next_time(&self) -> Option<Instant> {
        let mut next = self.next_app_tick.min(self.next_produce);
        if let Some(Reverse((t, _))) = self.queue.peek() {
            next = next.min(*t);
        }
        if let (Some(deadline), None) = (self.store.next_deadline(), self.leaderless_until) {
            next = next.min(deadline + self.server_lag);
        }
        for node in &self.nodes {
            if let (Some(member), true) = (&node.member, node.running(self.now)) {
                if let Some(t) = member.poll_timeout() {
                    next = next.min(t.max(self.now));
                }
            }
        }
        Some(next.max(self.now))
    }

    pub(super) fn step(&mut self) {
        let now = self.now;
        // The server's expiry runs a little behind the deadlines; without
        // a leader, no session expires.
        let cutoff = now.checked_sub(self.server_lag);
        if let (Some(cutoff), None) = (cutoff, self.leaderless_until) {
            let fired = self.store.expire_due(cutoff);
            self.deliver_watches(fired);
        }
        // Connected, running clients ping continuously.
        for index in 0..self.nodes.len() {
            let node = &self.nodes[index];
            if node.connected && node.running(now) {
                if let Some(session) = node.session {
                    if self.config.etcd.is_some() {
                        self.keep_alive_due(index, session);
                    } else if self.contact(index, session) {
                        self.nodes[index].last_contact = now;
                    }
                }
            }
            if self.nodes[index].running(now) {
                self.keep_alive_unanswered(index);
            }
        }
        // A server that expires a session closes its connection: the client
        // finds out at once (it reconnects and is told the session expired).
        // A follower cut off from its leader has not heard of it.
        for index in 0..self.nodes.len() {
            let node = &self.nodes[index];
            let dead = node.session.is_some_and(|s| !self.store.session_alive(s));
            if dead && node.connected && node.running(now) && self.hears_expiry(index) {
                self.disconnect(index);
                self.reconnect(index);
            }
        }
        if now >= self.next_produce {
            self.next_produce = now + PRODUCE_EVERY;
            if now < self.quiet_at {
                for hw in self.hw.values_mut() {
                    *hw += 1;
                }
            }
        }
        while let Some(Reverse((t, seq))) = self.queue.peek().copied() {
            if t > now {
                break;
            }
            self.queue.pop();
            if let Some(action) = self.actions.remove(&seq) {
                self.perform(action);
            }
        }
        for index in 0..self.nodes.len() {
            if !self.nodes[index].running(now) {
                continue;
            }
            if let Some(member) = self.nodes[index].member.as_mut() {
                if member.poll_timeout().is_some_and(|t| t <= now) {
                    member.handle_timeout(now);
                    if let Err(detail) = check::timers_progress(member, now) {
                        self.violation("timers make progress", detail);
                    }
                }
            }
            self.drain_commands(index);
        }
        if now >= self.next_app_tick {
            self.next_app_tick = now + APP_TICK;
            for index in 0..self.nodes.len() {
                if self.nodes[index].running(now) {
                    self.app_tick(index);
                    self.drain_commands(index);
                }
            }
        }
        for index in 0..self.nodes.len() {
            self.send_gathered(index);
            self.finish_leaving(index);
        }
    }

    pub(super) fn perform(&mut self, action: Action) {
        let now = self.now;
        match action {
            Action::Fault(fault) => self.apply_fault(fault),
            Action::Report => self.report(),
            Action::ReportFrom { node } => self.report_from(node),
            Action::ReportArrives { node, number } => self.report_arrives(node, number),
            // Sent over a connection the node no longer has: lost with it, a
            // request never applied, a reply never delivered.
            Action::Request { node, link, .. }
            | Action::Batch { node, link, .. }
            | Action::ReadOwner { node, link, .. }
            | Action::Reply { node, link, .. }
            | Action::KeepAlive { node, link, .. }
                if self.nodes[node].link() != link => {}
            Action::KeepAlive {
                node,
                session,
                sent,
                ..
            } => self.keep_alive(node, session, sent),
            Action::Request {
                node,
                link,
                ref command,
                ..
            } if !self.serves(node) => self.unserved(node, link, vec![command.id]),
            Action::Batch {
                node,
                link,
                ref commands,
                ..
            } if !self.serves(node) => {
                let ids = commands.iter().map(|c| c.id).collect();
                self.unserved(node, link, ids);
            }
            Action::RequestTimeout { node, link, id } => self.request_timeout(node, link, id),

            Action::Request {
                node,
                link,
                session,
                command,
            } => match self.held(node, std::iter::once(&command.op)) {
                Some(until) => self.at(
                    until,
                    Action::Request {
                        node,
                        link,
                        session,
                        command,
                    },
                ),
                None => self.serve(node, session, command),
            },
            Action::Batch {
                node,
                link,
                session,
                commands,
            } => match self.held(node, commands.iter().map(|c| &c.op)) {
                Some(until) => self.at(
                    until,
                    Action::Batch {
                        node,
                        link,
                        session,
                        commands,
                    },
                ),
                None => self.serve_batch(node, session, commands),
            },
            Action::ReadOwner {
                node,
                id,
                partition,
                ..
            } => {
                let event = adapter::claim_read_owner(&self.store, &self.layout, id, &partition);
                self.reply(node, event);
            }
            Action::Reply { node, link, event } => {
                if let Some(until) = self.nodes[node].paused_until.filter(|t| *t > now) {
                    self.at(until, Action::Reply { node, link, event });
                    return;
                }
                if let Some(id) = event.request_id() {
                    self.nodes[node].in_flight.remove(&id);
                }
                self.feed(node, Input::Store(event));
            }
            Action::Watch {
                node,
                session,
                event,
            } => {
                let n = &self.nodes[node];
                if n.session != Some(session) || n.member.is_none() {
                    return;
                }
                let wait = n.paused_until.filter(|t| *t > now);
                if let Some(until) = wait {
                    self.at(
                        until,
                        Action::Watch {
                            node,
                            session,
                            event,
                        },
                    );
                    return;
                }
                if !n.connected || !self.serves(node) {
                    // Delivered after the reconnection (on an etcd cluster,
                    // to a server with a leader), if the session lives.
                    let later = now + self.config.session_timeout / 4;
                    self.at(
                        later,
                        Action::Watch {
                            node,
                            session,
                            event,
                        },
                    );
                    return;
                }
                self.feed(node, Input::Store(event));
            }
            Action::Local {
                node,
                incarnation,
                event,
            } => {
                let n = &self.nodes[node];
                if n.incarnation != incarnation || n.member.is_none() {
                    return;
                }
                if let Some(until) = n.paused_until.filter(|t| *t > now) {
                    self.at(
                        until,
                        Action::Local {
                            node,
                            incarnation,
                            event,
                        },
                    );
                    return;
                }
                self.feed(node, event);
            }
        }
    }

    pub(super) fn trace(&self, index: Option<usize>, what: &dyn fmt::Debug) {
        if let Some(filter) = &self.config.trace {
            let text = format!("{what:?}");
            if text.contains(filter.as_str()) {
                let who = index.map_or("world".to_owned(), |i| self.nodes[i].id.to_string());
                eprintln!("{:>10.3?} {who}: {text}", self.elapsed());
            }
        }
    }

    pub(super) fn feed(&mut self, index: usize, input: Input) {
        let now = self.now;
        self.trace(Some(index), &("<-", &input));
        if let Some(member) = self.nodes[index].member.as_mut() {
            match input {
                Input::Store(event) => member.handle_event(now, event),
                Input::App(told) => told.tell(member, now),
                Input::Counts(counts) => member.set_partition_counts(now, counts),
                Input::Shutdown => member.shutdown(now),
            }
        }
        self.drain_commands(index);
    }

    pub(super) fn reply(&mut self, index: usize, event: Event) {
        let delay = self.delay();
        let node = &mut self.nodes[index];
        // Replies on one connection arrive in order, as over TCP.
        let when = (self.now + delay).max(node.last_reply_delivery);
        node.last_reply_delivery = when;
        let link = node.link();
        self.at(
            when,
            Action::Reply {
                node: index,
                link,
                event,
            },
        );
    }
}
