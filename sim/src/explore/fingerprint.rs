//! The canonical fingerprint of a state: ids renamed by rank, moments
//! taken relative to now, so that the search closes on its own.

use tenure_core::canon::{Canon, Clock};
use tenure_core::error::StoreError;
use tenure_core::protocol::{ClaimOutcome, Event, RegisterOutcome, StoreOp};
use tenure_core::subscription::MemberInfo;

use super::model::{Model, Msg};
use super::state::State;

impl State {
    /// The state's canonical fingerprint without the fault budget (what
    /// the fault-free continuation depends on), and each message's.
    pub(super) fn fingerprint(&self, model: &Model) -> (u128, Vec<u128>) {
        let mut canon = Canon::new(Clock {
            epoch: model.epoch,
            now: self.now,
            quantum: model.config.quantum,
            horizon: model.horizon,
        });
        self.store.canonical(&mut canon);
        for (index, node) in self.nodes.iter().enumerate() {
            node.member.canonical(&mut canon, index);
            canon.maybe_session(node.session);
            canon.raw(node.connected);
            canon.time(node.last_contact);
            for held in [&node.app.fetching, &node.app.suspended] {
                canon.number(held.len() as u64);
                for (partition, (token, next)) in held {
                    canon.raw((partition, next));
                    canon.zxid(token.0);
                }
            }
            canon.number(node.app.stopping.len() as u64);
            for (partition, token) in &node.app.stopping {
                canon.raw(partition);
                canon.zxid(token.0);
            }
            if model.followers.is_some() {
                canon.raw((node.unreported, node.ping_waiting));
                canon.maybe_time(node.cut_since);
            }
            canon.raw(&node.story.claiming);
            canon.number(node.story.held.len() as u64);
            for (partition, token) in &node.story.held {
                canon.raw(partition);
                canon.zxid(token.0);
            }
        }
        if let Some(followers) = &model.followers {
            // Where the leader's ping schedule stands.
            let since = self.now.saturating_duration_since(model.epoch);
            canon.raw(since.as_nanos() % followers.report_every.as_nanos());
        }
        canon.raw((&self.committed, &self.processed));
        for (partition, token) in &self.newest {
            canon.raw(partition);
            canon.zxid(token.0);
        }
        // In the order they were sent: the oldest goes first unless the
        // search spends a reorder. Each message is also an element of its
        // own, for the continuation's choice.
        canon.number(self.net.len() as u64);
        for flight in &self.net {
            canon.element(|canon| {
                canon.number(u64::from(flight.age.min(model.config.max_delay)));
                self.write_msg(model, canon, &flight.msg);
            });
        }
        canon.finish()
    }

    pub(super) fn write_msg(&self, model: &Model, canon: &mut Canon, msg: &Msg) {
        match msg {
            Msg::Request {
                node,
                incarnation,
                session,
                sent,
                command,
            } => {
                canon.number(0);
                canon.number(*node as u64);
                self.write_sent(model, canon, *sent);
                if self.nodes[*node].incarnation == *incarnation {
                    canon.request(*node, command.id);
                } else {
                    // Its reply goes nowhere: its id tells nothing.
                    canon.number(u64::MAX);
                }
                canon.session(*session);
                canon.session(command.session);
                write_op(canon, &command.op);
            }
            Msg::Batch {
                node,
                incarnation,
                session,
                sent,
                commands,
            } => {
                canon.number(4);
                canon.number(*node as u64);
                self.write_sent(model, canon, *sent);
                canon.session(*session);
                canon.number(commands.len() as u64);
                let current = self.nodes[*node].incarnation == *incarnation;
                for command in commands {
                    if current {
                        canon.request(*node, command.id);
                    } else {
                        canon.number(u64::MAX);
                    }
                    canon.session(command.session);
                    write_op(canon, &command.op);
                }
            }
            Msg::ReadOwner {
                node,
                id,
                partition,
                ..
            } => {
                canon.number(1);
                canon.number(*node as u64);
                canon.request(*node, *id);
                canon.raw(partition);
            }
            Msg::Reply { node, event } => {
                canon.number(2);
                canon.number(*node as u64);
                write_event(canon, *node, event);
            }
            Msg::Replies { node, events } => {
                canon.number(5);
                canon.number(*node as u64);
                canon.number(events.len() as u64);
                for event in events {
                    write_event(canon, *node, event);
                }
            }
            Msg::Watch {
                node,
                session,
                event,
            } => {
                canon.number(3);
                canon.number(*node as u64);
                canon.session(*session);
                write_event(canon, *node, event);
            }
            Msg::Report {
                node,
                link,
                session,
            } => {
                canon.number(6);
                canon.number(*node as u64);
                canon.raw(*link == self.nodes[*node].link);
                canon.session(*session);
            }
        }
    }

    /// When a request was sent: on an ensemble, the renewal its answer
    /// gives counts from then; on one node, from when it is served, and
    /// the moment tells nothing.
    fn write_sent(&self, model: &Model, canon: &mut Canon, sent: std::time::Instant) {
        if model.followers.is_some() {
            canon.time(sent);
        }
    }
}

pub(super) fn write_op(canon: &mut Canon, op: &StoreOp) {
    match op {
        StoreOp::Register { member } => {
            canon.number(10);
            write_info(canon, member);
        }
        StoreOp::Deregister => canon.number(11),
        StoreOp::WatchMembers => canon.number(12),
        StoreOp::Claim {
            partition,
            read_offset,
        } => canon.raw((13, partition, read_offset)),
        StoreOp::WatchOwner { partition } => canon.raw((14, partition)),
        StoreOp::Release {
            partition,
            token,
            commit,
            progress,
        } => {
            canon.raw((15, partition, commit, progress));
            match token {
                Some(token) => canon.zxid(token.0),
                None => canon.number(u64::MAX),
            }
        }
        StoreOp::ReadOffset { partition } => canon.raw((16, partition)),
        StoreOp::CommitOffset {
            partition,
            offset,
            token,
            progress,
        } => {
            canon.raw((17, partition, offset, progress));
            canon.zxid(token.0);
        }
        StoreOp::Heartbeat => canon.number(18),
    }
}

pub(super) fn write_info(canon: &mut Canon, info: &MemberInfo) {
    canon.raw((
        info.id.as_str(),
        &info.strategy,
        info.subscription.to_string(),
    ));
}

pub(super) fn write_error(canon: &mut Canon, error: &StoreError) {
    match error {
        StoreError::ConnectionLoss => canon.number(20),
        StoreError::NoNode => canon.number(21),
        StoreError::NotOwner => canon.number(22),
        StoreError::SessionExpired => canon.number(23),
        other => canon.raw((24, other.to_string())),
    }
}

pub(super) fn write_result<T>(
    canon: &mut Canon,
    result: &Result<T, StoreError>,
    ok: impl FnOnce(&mut Canon, &T),
) {
    match result {
        Ok(value) => {
            canon.number(1);
            ok(canon, value);
        }
        Err(error) => {
            canon.number(0);
            write_error(canon, error);
        }
    }
}

pub(super) fn write_event(canon: &mut Canon, node: usize, event: &Event) {
    if let Some(id) = event.request_id() {
        canon.request(node, id);
    }
    match event {
        Event::SessionEstablished { session } => {
            canon.number(30);
            canon.session(*session);
        }
        Event::SessionSuspended { last_heard } => {
            canon.number(31);
            canon.time(*last_heard);
        }
        Event::SessionRenewed {
            sent,
            counted_after,
        } => {
            canon.number(61);
            canon.time(*sent);
            canon.raw(counted_after);
        }
        Event::ClaimsHeld { partitions } => {
            canon.number(60);
            canon.raw(partitions);
        }
        Event::SessionResumed => canon.number(32),
        Event::SessionExpired => canon.number(33),
        Event::MembersChanged => canon.number(34),
        Event::RegisterResult { result, .. } => {
            canon.number(35);
            write_result(canon, result, |canon, outcome| match outcome {
                RegisterOutcome::Registered => canon.number(0),
                RegisterOutcome::Exists { session } => canon.session(*session),
            });
        }
        Event::DeregisterResult { result, .. } => {
            canon.number(36);
            write_result(canon, result, |_, ()| {});
        }
        Event::MembersResult { result, .. } => {
            canon.number(37);
            write_result(canon, result, |canon, members| {
                canon.number(members.len() as u64);
                for member in members {
                    write_info(canon, member);
                }
            });
        }
        Event::ClaimResult { result, .. } => {
            canon.number(38);
            write_result(canon, result, |canon, outcome| match outcome {
                ClaimOutcome::Created { token, committed } => {
                    canon.number(0);
                    canon.zxid(token.0);
                    match committed {
                        Some(read) => {
                            canon.number(1);
                            write_result(canon, read, |canon, offset| canon.raw(offset));
                        }
                        None => canon.number(0),
                    }
                }
                ClaimOutcome::Held {
                    owner,
                    session,
                    token,
                } => {
                    canon.raw((1, owner));
                    canon.session(*session);
                    canon.zxid(token.0);
                }
            });
        }
        Event::OwnerWatchResult { result, .. } => {
            canon.number(39);
            write_result(canon, result, |canon, exists| canon.raw(exists));
        }
        Event::OwnerDeleted { partition } => canon.raw((40, partition)),
        Event::OffsetResult { result, .. } => {
            canon.number(41);
            write_result(canon, result, |canon, offset| canon.raw(offset));
        }
        Event::CommitResult { result, .. } => {
            canon.number(42);
            write_result(canon, result, |_, ()| {});
        }
        Event::ReleaseResult { result, .. } => {
            canon.number(43);
            write_result(canon, result, |_, ()| {});
        }
        Event::HeartbeatResult { result, .. } => {
            canon.number(44);
            write_result(canon, result, |_, ()| {});
        }
        Event::StoreProblem { operation, error } => {
            canon.raw((45, operation));
            write_error(canon, error);
        }
    }
}
