//! The whole group at one point of the search: how it starts, what can
//! happen next, whether it has converged, and the words for a move.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::app::Holdings;
use crate::check::{self, Seen, Story};
use tenure_core::model::store::Store;
use tenure_core::protocol::{Event, Member};
use tenure_core::types::{FencingToken, Offset, SessionId, TopicPartition};

use super::model::{Budget, Flight, Input, Model, Move, Msg, Node, Problem};

/// The whole group.
#[derive(Clone, Debug)]
pub(super) struct State {
    pub(super) now: Instant,
    pub(super) store: Store,
    pub(super) nodes: Vec<Node>,
    /// In the order they were sent.
    pub(super) net: Vec<Flight>,
    pub(super) budget: Budget,
    pub(super) committed: BTreeMap<TopicPartition, Offset>,
    pub(super) processed: BTreeMap<TopicPartition, Vec<u32>>,
    pub(super) newest: BTreeMap<TopicPartition, FencingToken>,
}

impl State {
    /// Every member started at once, each with its session and the
    /// partition counts.
    pub(super) fn initial(model: &Model) -> Result<(State, Vec<Problem>), String> {
        let now = model.epoch;
        let mut nodes = Vec::new();
        for (index, config) in model.members.iter().enumerate() {
            let member = Member::new(config.clone(), model.seed(index, 0), now)
                .map_err(|e| e.to_string())?;
            nodes.push(Node {
                member,
                incarnation: 0,
                session: None,
                connected: false,
                last_contact: now,
                app: Holdings::default(),
                story: Story::default(),
                link: 0,
                cut_since: None,
                unreported: false,
                ping_waiting: false,
            });
        }
        let c = &model.config;
        let mut state = State {
            now,
            store: Store::new(),
            nodes,
            net: Vec::new(),
            budget: Budget {
                reorders: c.reorders.unwrap_or(u32::MAX),
                losses: c.losses,
                disconnects: c.disconnects,
                restarts: c.restarts,
                cuts: if c.ensemble.is_some() { c.cuts } else { 0 },
                elections: if c.ensemble.is_some() { c.elections } else { 0 },
                total: c.faults.unwrap_or(u32::MAX),
            },
            committed: BTreeMap::new(),
            processed: BTreeMap::new(),
            newest: BTreeMap::new(),
        };
        let mut problems = Vec::new();
        for index in 0..state.nodes.len() {
            state.open_session(model, index, &mut problems);
            state.drive(model, index, Input::Counts, &mut problems);
        }
        Ok((state, problems))
    }

    // ----- what can happen -----

    /// Whether something must happen before time may move on: a session
    /// past its deadline, a disconnected client past its timeout, one
    /// that gave up and has not reconnected, or a follower cut off for
    /// `syncLimit` ticks that has not dropped its clients.
    pub(super) fn time_is_held(&self, model: &Model) -> bool {
        let timeout = model.config.session_timeout;
        self.due_expiry().is_some()
            || self.nodes.iter().any(|n| {
                !n.connected && (n.session.is_none() || self.now >= n.last_contact + timeout)
            })
            || (0..self.nodes.len()).any(|node| self.follower_gives_up(model, node))
    }

    /// The first session past its deadline, if any.
    pub(super) fn due_expiry(&self) -> Option<SessionId> {
        self.store.sessions().into_iter().find(|&s| {
            self.store
                .session_deadline(s)
                .is_some_and(|d| d <= self.now)
        })
    }

    /// Whether the message at `index` in flight can be delivered now: a
    /// request when it heads its connection's queue, a notification while
    /// its client is connected, a reply always; on an ensemble, nothing a
    /// cut holds.
    pub(super) fn deliverable(&self, index: usize) -> bool {
        let Some(flight) = self.net.get(index) else {
            return false;
        };
        if self.held_by_cut(&flight.msg) {
            return false;
        }
        match &flight.msg {
            Msg::Request { .. } | Msg::Batch { .. } | Msg::ReadOwner { .. } => {
                let connection = flight.msg.connection();
                self.net
                    .iter()
                    .position(|f| f.msg.connection() == connection)
                    == Some(index)
            }
            Msg::Reply { .. } | Msg::Replies { .. } | Msg::Report { .. } => true,
            Msg::Watch { node, session, .. } => {
                let n = &self.nodes[*node];
                n.connected && n.session == Some(*session)
            }
        }
    }

    /// Whether a message has stayed in flight across as many time advances
    /// as it may: time cannot move on before it is delivered or lost. A
    /// notification held for a disconnected client does not count, nor
    /// does what waits for a cut to heal.
    pub(super) fn delay_is_spent(&self, model: &Model) -> bool {
        let max = model.config.max_delay;
        self.net.iter().any(|flight| {
            let held = match &flight.msg {
                Msg::Watch { node, .. } => !self.nodes[*node].connected,
                _ => false,
            };
            flight.age >= max && !held && !self.waits_for_heal(&flight.msg)
        })
    }

    /// The oldest message that can be delivered now, if any.
    pub(super) fn oldest_deliverable(&self) -> Option<usize> {
        (0..self.net.len()).find(|&i| self.deliverable(i))
    }

    /// What `mv` costs of the reorder budget: one to deliver another
    /// message than the oldest deliverable, or to let time advance while
    /// one is deliverable (holding it back).
    pub(super) fn reorder_cost(&self, mv: Move) -> u32 {
        let oldest = self.oldest_deliverable();
        match mv {
            Move::Deliver(i) if oldest != Some(i) => 1,
            Move::Advance if oldest.is_some() => 1,
            _ => 0,
        }
    }

    /// Every step possible from here, in a fixed order.
    pub(super) fn moves(&self, model: &Model) -> Vec<Move> {
        let mut moves = Vec::new();
        for (i, flight) in self.net.iter().enumerate() {
            if self.deliverable(i) && self.reorder_cost(Move::Deliver(i)) <= self.budget.reorders {
                moves.push(Move::Deliver(i));
            }
            // A report travels between servers, whose link a cut breaks
            // (a fault of its own), not a lost message.
            let losable = match &flight.msg {
                Msg::Watch { event, .. } => matches!(event, Event::OwnerDeleted { .. }),
                Msg::Report { .. } => false,
                _ => true,
            };
            if self.budget.losses > 0 && self.budget.total > 0 && losable {
                moves.push(Move::Lose(i));
            }
        }
        for (node, n) in self.nodes.iter().enumerate() {
            for (partition, (_, next)) in &n.app.fetching {
                if *next < model.config.messages {
                    moves.push(Move::Process {
                        node,
                        partition: partition.partition,
                    });
                }
            }
            for index in 0..n.app.stopping.len() {
                moves.push(Move::Drain { node, index });
            }
        }
        for session in self.store.sessions() {
            if self
                .store
                .session_deadline(session)
                .is_some_and(|d| d <= self.now)
            {
                moves.push(Move::Expire(session));
            }
        }
        let timeout = model.config.session_timeout;
        for (node, n) in self.nodes.iter().enumerate() {
            if !n.connected {
                // ZooKeeper's client gives its session up by its own clock;
                // etcd's backend waits for a server to say the lease is gone.
                if n.session.is_some()
                    && self.now >= n.last_contact + timeout
                    && model.lease_ttl.is_none()
                {
                    moves.push(Move::GiveUp(node));
                }
                moves.push(Move::Reconnect(node));
            } else if self.budget.disconnects > 0 && self.budget.total > 0 {
                moves.push(Move::Disconnect(node));
            }
            if self.budget.restarts > 0 && self.budget.total > 0 {
                moves.push(Move::Restart(node));
            }
            if self.is_cut(node) {
                moves.push(Move::Heal(node));
                if self.follower_gives_up(model, node) {
                    moves.push(Move::FollowerDrops(node));
                }
            } else if n.connected && self.budget.cuts > 0 && self.budget.total > 0 {
                moves.push(Move::Cut(node));
            }
        }
        if self.budget.elections > 0 && self.budget.total > 0 {
            moves.push(Move::Election);
        }
        if !self.time_is_held(model)
            && !self.delay_is_spent(model)
            && self.reorder_cost(Move::Advance) <= self.budget.reorders
        {
            moves.push(Move::Advance);
        }
        moves
    }

    /// The step the fault-free continuation takes: the store expires what
    /// is due, disconnected members reconnect, the message with the
    /// smallest fingerprint is delivered, drains finish, and only then does
    /// time move on. Each choice depends only on the state's fingerprint.
    pub(super) fn calm_move(&self, keys: &[u128]) -> Move {
        if let Some(session) = self.due_expiry() {
            return Move::Expire(session);
        }
        if let Some(node) = (0..self.nodes.len()).find(|&node| self.is_cut(node)) {
            return Move::Heal(node);
        }
        if let Some(node) = self.nodes.iter().position(|n| !n.connected) {
            return Move::Reconnect(node);
        }
        let next = (0..self.net.len())
            .filter(|&i| self.deliverable(i))
            .min_by_key(|&i| keys[i]);
        if let Some(i) = next {
            return Move::Deliver(i);
        }
        if let Some(node) = self.nodes.iter().position(|n| !n.app.stopping.is_empty()) {
            return Move::Drain { node, index: 0 };
        }
        Move::Advance
    }

    // ----- convergence -----

    /// Whether every partition is owned and fetched by its assigned member.
    pub(super) fn converged(&self, model: &Model) -> Result<(), String> {
        let live: Vec<Seen<'_>> = self
            .nodes
            .iter()
            .map(|n| Seen {
                member: &n.member,
                session: n.session,
            })
            .collect();
        check::converged(
            &self.store,
            &model.layout,
            &model.config.strategy,
            &model.counts,
            &live,
        )
    }

    /// Follows the fault-free continuation until the group converges,
    /// telling `step` of each step; `Ok` with the time it took, `Err` with
    /// why it did not (a broken property, or no convergence within the
    /// bound).
    pub(super) fn continue_calmly(
        &mut self,
        model: &Model,
        step: &mut dyn FnMut(&State, Move),
    ) -> Result<Duration, String> {
        let start = self.now;
        let bound = model.config.convergence_bound();
        for _ in 0..1_000_000 {
            let waited = self.now.saturating_duration_since(start);
            let why = match self.converged(model) {
                Ok(()) => return Ok(waited),
                Err(why) => why,
            };
            if waited > bound {
                return Err(format!("not converged {waited:?} after the faults: {why}"));
            }
            let (_, keys) = self.fingerprint(model);
            let mv = self.calm_move(&keys);
            step(self, mv);
            let problems = self.apply(model, mv);
            if let Some((property, detail)) = problems.into_iter().next() {
                return Err(format!("{property} violated: {detail}"));
            }
        }
        Err("the continuation took a million steps".to_owned())
    }

    // ----- descriptions -----

    /// What `mv` does, in words, from this state.
    pub(super) fn describe(&self, model: &Model, mv: Move) -> String {
        let at = self.now.saturating_duration_since(model.epoch);
        let what = match mv {
            Move::Deliver(i) | Move::Lose(i) => {
                let verb = if matches!(mv, Move::Lose(_)) {
                    "LOSE"
                } else {
                    "deliver"
                };
                match self.net.get(i).map(|flight| &flight.msg) {
                    Some(Msg::Request {
                        node,
                        incarnation,
                        session,
                        command,
                        ..
                    }) => {
                        let old = if *incarnation == self.nodes[*node].incarnation {
                            ""
                        } else {
                            " (from a dead process)"
                        };
                        format!(
                            "{verb} m{node} -> store{old}: #{} {:?} under session {}",
                            command.id.0, command.op, session.0
                        )
                    }
                    Some(Msg::Batch {
                        node,
                        incarnation,
                        session,
                        commands,
                        ..
                    }) => {
                        let old = if *incarnation == self.nodes[*node].incarnation {
                            ""
                        } else {
                            " (from a dead process)"
                        };
                        let ops: Vec<String> = commands
                            .iter()
                            .map(|c| format!("#{} {:?}", c.id.0, c.op))
                            .collect();
                        format!(
                            "{verb} m{node} -> store{old}: together {} under session {}",
                            ops.join(", "),
                            session.0
                        )
                    }
                    Some(Msg::Replies { node, events }) => {
                        let events: Vec<String> =
                            events.iter().map(|e| event_text(model, e)).collect();
                        format!("{verb} store -> m{node}: together [{}]", events.join(", "))
                    }
                    Some(Msg::ReadOwner {
                        node,
                        id,
                        partition,
                        ..
                    }) => format!(
                        "{verb} m{node} -> store: #{} read the owner of {partition}",
                        id.0
                    ),
                    Some(Msg::Reply { node, event }) => {
                        format!("{verb} store -> m{node}: {}", event_text(model, event))
                    }
                    Some(Msg::Watch {
                        node,
                        session,
                        event,
                    }) => format!(
                        "{verb} store -> m{node}: notification {event:?} for session {}",
                        session.0
                    ),
                    Some(Msg::Report { node, session, .. }) => format!(
                        "{verb} m{node}'s follower -> leader: report of session {}",
                        session.0
                    ),
                    None => format!("{verb} nothing"),
                }
            }
            Move::Process { node, partition } => {
                let partition = model.partition(partition);
                let next = self.nodes[node]
                    .app
                    .fetching
                    .get(&partition)
                    .map_or(-1, |(_, next)| *next);
                format!("m{node}'s application processes {partition} offset {next}")
            }
            Move::Drain { node, index } => {
                let entry = self.nodes[node].app.stopping.iter().nth(index);
                format!("m{node}'s application drains {entry:?}")
            }
            Move::Expire(session) => format!("the store expires session {}", session.0),
            Move::GiveUp(node) => format!(
                "m{node}'s client gives up session {:?} (expired by its clock)",
                self.nodes[node].session.map(|s| s.0)
            ),
            Move::Reconnect(node) => format!("m{node} reconnects"),
            Move::Disconnect(node) => format!("DISCONNECT m{node}"),
            Move::Restart(node) => format!(
                "RESTART m{node} (incarnation {})",
                self.nodes[node].incarnation + 1
            ),
            Move::Cut(node) => format!("CUT m{node}'s follower off from its leader"),
            Move::Election => "ELECTION: the leader is lost and another elected".to_owned(),
            Move::Heal(node) => format!("m{node}'s follower has its leader back"),
            Move::FollowerDrops(node) => {
                format!("m{node}'s follower, cut off for syncLimit ticks, drops its clients")
            }
            Move::Advance => {
                let mut probe = self.clone();
                let mut ignored = Vec::new();
                probe.advance(model, &mut ignored);
                format!(
                    "time advances to {:?}",
                    probe.now.saturating_duration_since(model.epoch)
                )
            }
        };
        format!("[t={at:?}] {what}")
    }
}

/// An event in words, its moments counted from the model's start (so that
/// a path reads, and compares, the same in every run).
fn event_text(model: &Model, event: &Event) -> String {
    let since = |at: &Instant| at.saturating_duration_since(model.epoch);
    match event {
        Event::SessionRenewed {
            sent,
            counted_after,
        } => format!(
            "SessionRenewed {{ sent: t={:?}, counted_after: {counted_after:?} }}",
            since(sent)
        ),
        Event::SessionSuspended { last_heard } => {
            format!(
                "SessionSuspended {{ last_heard: t={:?} }}",
                since(last_heard)
            )
        }
        other => format!("{other:?}"),
    }
}
