//! The store's side: requests served by the model store, one at a time
//! or as a batch, watch notifications, sessions touched, and every commit
//! checked against the newest claim.

use std::time::Duration;

use crate::check;
use tenure_core::model::adapter::{self, Batched, Execution};
use tenure_core::model::store::WatchEvent;
use tenure_core::protocol::{Event, StoreRequest};
use tenure_core::types::SessionId;

use super::parts::{Action, Fault, World};

impl World {
    pub(super) fn deliver_watches(&mut self, fired: Vec<WatchEvent>) {
        for watch in fired {
            let Some(&node) = self.session_owner.get(&watch.session) else {
                continue;
            };
            let Some(event) = adapter::watch_event(&self.layout, &watch) else {
                continue;
            };
            let mut delay = self.delay();
            if self.config.faults && self.now < self.quiet_at && self.rng.chance(1, 10) {
                // A late notification: it may arrive after later replies.
                delay += Duration::from_millis(
                    self.rng
                        .below(self.config.session_timeout.as_millis() as u64),
                );
            }
            let when = self.now + delay;
            self.at(
                when,
                Action::Watch {
                    node,
                    session: watch.session,
                    event,
                },
            );
        }
    }

    /// Carries out a store command at the server.
    /// Contact from a session's client: renews it, or, once its deadline
    /// has passed, finds it dead and expires it on the spot (the server
    /// never lets a session that timed out come back).
    pub(super) fn server_touch(&mut self, session: SessionId) -> bool {
        if self.store.touch(session, self.now).is_ok() {
            return true;
        }
        if self.store.session_alive(session) {
            let fired = self.store.expire_session(session);
            self.deliver_watches(fired);
        }
        false
    }

    pub(super) fn serve(&mut self, index: usize, session: SessionId, command: StoreRequest) {
        let now = self.now;
        self.forward(index, &command.op);
        self.contact(index, session);
        let commit = check::arriving_commit(&self.store, &self.layout, session, &command.op);
        let info = match &self.nodes[index].member {
            Some(member) => member.info().clone(),
            None => return,
        };
        let mut fired = Vec::new();
        let timestamp = self.elapsed().as_secs();
        let execution = adapter::execute(
            &mut self.store,
            &self.layout,
            session,
            &info,
            command,
            timestamp,
            &mut fired,
        );
        self.deliver_watches(fired);
        match execution {
            Execution::Done(event) => {
                if let Some(commit) = commit {
                    if check::stored_commit(&event) {
                        self.check_commit(index, &commit);
                    }
                }
                if matches!(
                    event,
                    Event::ClaimResult {
                        result: Ok(tenure_core::protocol::ClaimOutcome::Created { .. }),
                        ..
                    }
                ) {
                    self.report.claims += 1;
                }
                self.answer(index, vec![event]);
            }
            Execution::ReadOwner { id, partition } => {
                let delay = self.delay() * 2;
                let node = &self.nodes[index];
                let link = node.link();
                self.at(
                    now + delay,
                    Action::ReadOwner {
                        node: index,
                        link,
                        id,
                        partition,
                    },
                );
            }
        }
    }

    /// Sends the replies of one request, or loses them all: applied, but
    /// the connection drops before the reply, and the member sees
    /// ConnectionLoss, an unknown outcome.
    pub(super) fn answer(&mut self, index: usize, events: Vec<Event>) {
        let now = self.now;
        let unknown = self.config.faults && now < self.quiet_at && self.rng.chance(1, 50);
        if unknown {
            self.report.faults += 1;
            self.disconnect(index);
            let epoch = self.nodes[index].epoch;
            let back = now
                + Duration::from_millis(
                    self.rng
                        .below(self.config.session_timeout.as_millis() as u64 / 2),
                );
            self.at(back, Action::Fault(Fault::Reconnect { node: index, epoch }));
        } else {
            // What the member's backend reports of the answers, first.
            if let Some(renewal) = events.iter().find_map(|e| self.renewal(index, e)) {
                self.reply(index, renewal);
            }
            self.answered(index, &events);
            for event in events {
                self.reply(index, event);
            }
        }
    }

    /// Carries out requests of one kind a step sent together: in one step
    /// whole, or, refused as a whole, sent again one by one once the
    /// refusal is back.
    pub(super) fn serve_batch(
        &mut self,
        index: usize,
        session: SessionId,
        commands: Vec<StoreRequest>,
    ) {
        if let Some(command) = commands.first() {
            self.forward(index, &command.op);
        }
        self.contact(index, session);
        let info = match &self.nodes[index].member {
            Some(member) => member.info().clone(),
            None => return,
        };
        // Each request's commit, if it is one or carries one.
        let commits: Vec<_> = commands
            .iter()
            .map(|c| check::arriving_commit(&self.store, &self.layout, session, &c.op))
            .collect();
        let mut fired = Vec::new();
        let batched = adapter::execute_batch(
            &mut self.store,
            &self.layout,
            session,
            &info,
            commands,
            &mut fired,
        );
        self.deliver_watches(fired);
        match batched {
            Batched::Done(events) => {
                // The events answer the requests in their order.
                for (event, commit) in events.iter().zip(commits) {
                    if let Event::ClaimResult {
                        result: Ok(tenure_core::protocol::ClaimOutcome::Created { .. }),
                        ..
                    } = event
                    {
                        self.report.claims += 1;
                        self.report.batched_claims += 1;
                    }
                    if let Some(commit) = commit {
                        if check::stored_commit(event) {
                            self.check_commit(index, &commit);
                        }
                    }
                }
                self.answer(index, events);
            }
            Batched::Failed(events) => self.answer(index, events),
            Batched::Refused(commands) => {
                self.report.refused_batches += 1;
                let back = self.now + self.delay() * 2;
                let node = &mut self.nodes[index];
                let arrival = back.max(node.last_request_arrival);
                node.last_request_arrival = arrival;
                let link = node.link();
                for command in commands {
                    self.at(
                        arrival,
                        Action::Request {
                            node: index,
                            link,
                            session,
                            command,
                        },
                    );
                }
            }
        }
    }

    pub(super) fn check_commit(&mut self, index: usize, commit: &check::ArrivingCommit) {
        let (partition, offset) = (&commit.partition, commit.offset);
        if commit.legit && !commit.progress.is_empty() {
            self.report.progress_commits += 1;
        }
        self.operator
            .applied_commit(&self.config, self.now, partition, offset);
        let who = self.nodes[index].id.clone();
        let processed = self
            .processed
            .get(partition)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let problems = check::commit(&who, commit, &mut self.committed, processed);
        for (property, detail) in problems {
            self.violation(property, detail);
        }
    }
}
