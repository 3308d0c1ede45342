//! Taking one step: delivering, losing and serving messages, the faults,
//! time moving on, and driving the members through what follows.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::app::{Applied, Holdings, Told};
use crate::check::{self, Seen, Story};
use tenure_core::error::StoreError;
use tenure_core::model::adapter::{self, Batched, Execution};
use tenure_core::model::store::WatchEvent;
use tenure_core::protocol::{Event, FetchCommand, Member, Output, StoreOp, StoreRequest};
use tenure_core::records::{Layout, OPS_PER_BATCH};
use tenure_core::subscription::MemberInfo;
use tenure_core::types::{Offset, RequestId, SessionId, TopicPartition};

use super::model::{Flight, Input, Model, Move, Msg, Problem};
use super::state::State;

impl State {
    /// Takes `mv`, returning the properties it broke.
    pub(super) fn apply(&mut self, model: &Model, mv: Move) -> Vec<Problem> {
        let mut problems = Vec::new();
        let cost = self.reorder_cost(mv);
        self.budget.reorders = self.budget.reorders.saturating_sub(cost);
        if matches!(
            mv,
            Move::Lose(_) | Move::Disconnect(_) | Move::Restart(_) | Move::Cut(_) | Move::Election
        ) {
            self.budget.total = self.budget.total.saturating_sub(1);
        }
        match mv {
            Move::Deliver(i) => {
                let flight = self.net.remove(i);
                self.forward(model, &flight.msg, i);
                self.deliver(model, flight.msg, &mut problems);
            }
            Move::Lose(i) => {
                self.budget.losses = self.budget.losses.saturating_sub(1);
                let flight = self.net.remove(i);
                self.lose(model, flight.msg, &mut problems);
            }
            Move::Process { node, partition } => {
                let partition = model.partition(partition);
                let app = &mut self.nodes[node].app;
                if let Some((token, next)) = app.fetching.get_mut(&partition) {
                    let (token, offset) = (*token, *next);
                    *next += 1;
                    self.mark_processed(&partition, offset);
                    let input = Input::App(Told::Processed {
                        partition,
                        token,
                        offset,
                    });
                    self.drive(model, node, input, &mut problems);
                }
            }
            Move::Drain { node, index } => {
                let app = &mut self.nodes[node].app;
                if let Some(entry) = app.stopping.iter().nth(index).cloned() {
                    app.stopping.remove(&entry);
                    let (partition, token) = entry;
                    let input = Input::App(Told::Drained { partition, token });
                    self.drive(model, node, input, &mut problems);
                }
            }
            Move::Expire(session) => {
                let fired = self.store.expire_session(session);
                self.fire(&model.layout, fired);
            }
            Move::GiveUp(node) => {
                self.nodes[node].session = None;
                let input = Input::Event(Event::SessionExpired);
                self.drive(model, node, input, &mut problems);
            }
            Move::Reconnect(node) => self.reconnect(model, node, &mut problems),
            Move::Disconnect(node) => {
                self.budget.disconnects = self.budget.disconnects.saturating_sub(1);
                self.disconnect(model, node, &mut problems);
            }
            Move::Restart(node) => {
                self.budget.restarts = self.budget.restarts.saturating_sub(1);
                self.restart(model, node, &mut problems);
            }
            Move::Cut(node) => {
                self.budget.cuts = self.budget.cuts.saturating_sub(1);
                self.cut(node);
            }
            Move::Heal(node) => self.heal(model, node),
            Move::Election => {
                self.budget.elections = self.budget.elections.saturating_sub(1);
                self.election(model, &mut problems);
            }
            Move::FollowerDrops(node) => self.disconnect(model, node, &mut problems),
            Move::Advance => self.advance(model, &mut problems),
        }
        self.close_expired(model, &mut problems);
        self.forget_undeliverable();
        let running = self.nodes.iter().map(|n| Seen {
            member: &n.member,
            session: n.session,
        });
        problems.extend(check::every_step(
            &self.store,
            &model.layout,
            self.now,
            running,
        ));
        problems
    }

    /// A server that expires a session closes its client's connection: the
    /// client finds out at once, reconnects and is told the session
    /// expired. A follower cut off from its leader has not heard of it.
    fn close_expired(&mut self, model: &Model, problems: &mut Vec<Problem>) {
        for node in 0..self.nodes.len() {
            let n = &self.nodes[node];
            let dead = n.session.is_some_and(|s| !self.store.session_alive(s));
            if dead && n.connected && !self.is_cut(node) {
                self.disconnect(model, node, problems);
                self.reconnect(model, node, problems);
            }
        }
    }

    /// Drops what can never be delivered: replies and second round trips
    /// for a process that restarted, notifications for a session its
    /// client no longer holds.
    pub(super) fn forget_undeliverable(&mut self) {
        let nodes = &self.nodes;
        self.net.retain(|flight| match &flight.msg {
            Msg::Request { .. }
            | Msg::Batch { .. }
            | Msg::ReadOwner { .. }
            | Msg::Reply { .. }
            | Msg::Replies { .. }
            | Msg::Report { .. } => true,
            Msg::Watch { node, session, .. } => nodes[*node].session == Some(*session),
        });
    }

    pub(super) fn deliver(&mut self, model: &Model, msg: Msg, problems: &mut Vec<Problem>) {
        match msg {
            Msg::Request {
                node,
                incarnation,
                session,
                sent,
                command,
            } => {
                let from = (node, incarnation, session, sent);
                self.serve(model, from, command, problems);
            }
            Msg::Batch {
                node,
                incarnation,
                session,
                sent,
                commands,
            } => {
                let from = (node, incarnation, session, sent);
                self.serve_batch(model, from, commands, problems);
            }
            Msg::Report { session, .. } => {
                self.server_touch(model, session);
            }
            Msg::ReadOwner {
                node,
                id,
                partition,
                ..
            } => {
                let event = adapter::claim_read_owner(&self.store, &model.layout, id, &partition);
                self.send(Msg::Reply { node, event });
            }
            Msg::Reply { node, event } | Msg::Watch { node, event, .. } => {
                self.drive(model, node, Input::Event(event), problems);
            }
            Msg::Replies { node, events } => {
                for event in events {
                    self.drive(model, node, Input::Event(event), problems);
                }
            }
        }
    }

    pub(super) fn lose(&mut self, model: &Model, msg: Msg, problems: &mut Vec<Problem>) {
        let (node, failures) = match msg {
            Msg::Batch {
                node,
                incarnation,
                commands,
                ..
            } => {
                if self.nodes[node].incarnation != incarnation {
                    return;
                }
                let failures = commands
                    .into_iter()
                    .map(|command| command.failed(StoreError::ConnectionLoss));
                (node, failures.collect())
            }
            Msg::Replies { node, events } => {
                (node, events.iter().filter_map(connection_lost).collect())
            }
            msg => self
                .lose_one(msg)
                .map_or((0, Vec::new()), |(node, failure)| (node, vec![failure])),
        };
        for failure in failures {
            self.drive(model, node, Input::Event(failure), problems);
        }
    }

    /// What the member of a lost message other than a batch or its replies
    /// is told, if anything.
    pub(super) fn lose_one(&self, msg: Msg) -> Option<(usize, Event)> {
        let (node, failure) = match msg {
            Msg::Request {
                node,
                incarnation,
                command,
                ..
            } => {
                if self.nodes[node].incarnation != incarnation {
                    return None;
                }
                (node, command.failed(StoreError::ConnectionLoss))
            }
            Msg::ReadOwner { node, id, .. } => (
                node,
                Event::ClaimResult {
                    id,
                    result: Err(StoreError::ConnectionLoss),
                },
            ),
            Msg::Reply { node, event } => (node, connection_lost(&event)?),
            Msg::Batch { .. } | Msg::Replies { .. } | Msg::Watch { .. } | Msg::Report { .. } => {
                return None
            }
        };
        Some((node, failure))
    }

    /// Carries out a request at the server, checking any commit it stores.
    pub(super) fn serve(
        &mut self,
        model: &Model,
        (node, incarnation, session, sent): Sender,
        command: StoreRequest,
        problems: &mut Vec<Problem>,
    ) {
        let current = self.nodes[node].incarnation == incarnation;
        if self.heard(model, node, session) && current && self.nodes[node].session == Some(session)
        {
            self.nodes[node].last_contact = self.now;
        }
        let commit = check::arriving_commit(&self.store, &model.layout, session, &command.op);
        let info = self.nodes[node].member.info().clone();
        let mut fired = Vec::new();
        let execution = adapter::execute(
            &mut self.store,
            &model.layout,
            session,
            &info,
            command,
            0,
            &mut fired,
        );
        self.fire(&model.layout, fired);
        match execution {
            Execution::Done(event) => {
                if let Some(commit) = commit {
                    if check::stored_commit(&event) {
                        self.check_commit(&info, &commit, problems);
                    }
                }
                if current {
                    self.reply(model, node, sent, vec![event]);
                }
            }
            Execution::ReadOwner { id, partition } => {
                if current {
                    self.send(Msg::ReadOwner {
                        node,
                        incarnation,
                        id,
                        partition,
                    });
                }
            }
        }
    }

    /// Carries out requests of one kind a step sent together, checking
    /// any commit it stores: in one step whole, or, refused as a whole,
    /// sent again one by one.
    pub(super) fn serve_batch(
        &mut self,
        model: &Model,
        (node, incarnation, session, sent): Sender,
        commands: Vec<StoreRequest>,
        problems: &mut Vec<Problem>,
    ) {
        let current = self.nodes[node].incarnation == incarnation;
        if self.heard(model, node, session) && current && self.nodes[node].session == Some(session)
        {
            self.nodes[node].last_contact = self.now;
        }
        // Each request's commit, if it is one or carries one.
        let commits: Vec<_> = commands
            .iter()
            .map(|c| check::arriving_commit(&self.store, &model.layout, session, &c.op))
            .collect();
        let info = self.nodes[node].member.info().clone();
        let mut fired = Vec::new();
        let batched = adapter::execute_batch(
            &mut self.store,
            &model.layout,
            session,
            &info,
            commands,
            &mut fired,
        );
        self.fire(&model.layout, fired);
        match batched {
            Batched::Done(events) => {
                // The events answer the requests in their order.
                for (event, commit) in events.iter().zip(commits) {
                    let Some(commit) = commit else {
                        continue;
                    };
                    if check::stored_commit(event) {
                        self.check_commit(&info, &commit, problems);
                    }
                }
                if current {
                    self.reply(model, node, sent, events);
                }
            }
            Batched::Failed(events) => {
                if current {
                    self.send(Msg::Replies { node, events });
                }
            }
            Batched::Refused(commands) => {
                if current {
                    for command in commands {
                        self.send(Msg::Request {
                            node,
                            incarnation,
                            session,
                            sent: self.now,
                            command,
                        });
                    }
                }
            }
        }
    }

    /// Sends node `node` the replies of what the store served now, of a
    /// request sent at `sent`, after the renewal they vouch for
    /// ([`State::renewal`]).
    fn reply(&mut self, model: &Model, node: usize, sent: Instant, events: Vec<Event>) {
        let renewal = self.renewal(model, node, sent, &events);
        match (renewal, events.len()) {
            (None, 1) => {
                let event = events.into_iter().next().expect("one event");
                self.send(Msg::Reply { node, event });
            }
            (renewal, _) => {
                let events = renewal.into_iter().chain(events).collect();
                self.send(Msg::Replies { node, events });
            }
        }
    }

    /// Checks a commit the store took: by its owner, of what was processed.
    pub(super) fn check_commit(
        &mut self,
        info: &MemberInfo,
        commit: &check::ArrivingCommit,
        problems: &mut Vec<Problem>,
    ) {
        let processed = self
            .processed
            .get(&commit.partition)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        problems.extend(check::commit(
            &info.id,
            commit,
            &mut self.committed,
            processed,
        ));
    }

    /// Puts `msg` in flight.
    pub(super) fn send(&mut self, msg: Msg) {
        self.net.push(Flight { msg, age: 0 });
    }

    /// Contact from a session's client: renews it, or finds it past its
    /// deadline and expires it on the spot, as the simulator's server does.
    pub(super) fn server_touch(&mut self, model: &Model, session: SessionId) -> bool {
        if self.store.touch(session, self.now).is_ok() {
            return true;
        }
        if self.store.session_alive(session) {
            let fired = self.store.expire_session(session);
            self.fire(&model.layout, fired);
        }
        false
    }

    /// Whether `session` is alive as its leader finds it now, renewing
    /// nothing: one past its deadline is expired there and then (a
    /// follower's count, an etcd request).
    pub(super) fn alive_at_leader(&mut self, model: &Model, session: SessionId) -> bool {
        let due = self
            .store
            .session_deadline(session)
            .is_some_and(|deadline| deadline <= self.now);
        if due {
            // Refused, and so expired there and then.
            self.server_touch(model, session);
        }
        self.store.session_alive(session)
    }

    /// Puts the notifications of fired watches in flight, to the client
    /// holding the session now (none: they are lost with it).
    pub(super) fn fire(&mut self, layout: &Layout, fired: Vec<WatchEvent>) {
        for watch in fired {
            let Some(node) = self
                .nodes
                .iter()
                .position(|n| n.session == Some(watch.session))
            else {
                continue;
            };
            if let Some(event) = adapter::watch_event(layout, &watch) {
                self.send(Msg::Watch {
                    node,
                    session: watch.session,
                    event,
                });
            }
        }
    }

    pub(super) fn open_session(&mut self, model: &Model, node: usize, problems: &mut Vec<Problem>) {
        let session = self.store.open_session(self.now, model.store_timeout());
        let n = &mut self.nodes[node];
        n.session = Some(session);
        n.connected = true;
        n.last_contact = self.now;
        n.link += 1;
        n.unreported = false;
        let input = Input::Event(Event::SessionEstablished { session });
        self.drive(model, node, input, problems);
        self.renewed_now(model, node, problems);
    }

    /// Tells node `node` the store counted its session now (opened, or
    /// found alive on a reconnection).
    fn renewed_now(&mut self, model: &Model, node: usize, problems: &mut Vec<Problem>) {
        let renewal = Event::SessionRenewed {
            sent: self.now,
            counted_after: Duration::ZERO,
        };
        self.drive(model, node, Input::Event(renewal), problems);
    }

    pub(super) fn reconnect(&mut self, model: &Model, node: usize, problems: &mut Vec<Problem>) {
        let session = self.nodes[node].session;
        match session {
            Some(session) if self.server_touch(model, session) => {
                let n = &mut self.nodes[node];
                n.connected = true;
                n.last_contact = self.now;
                n.link += 1;
                let input = Input::Event(Event::SessionResumed);
                self.drive(model, node, input, problems);
                self.renewed_now(model, node, problems);
            }
            Some(_) => {
                self.nodes[node].session = None;
                let input = Input::Event(Event::SessionExpired);
                self.drive(model, node, input, problems);
                self.open_session(model, node, problems);
            }
            None => self.open_session(model, node, problems),
        }
    }

    /// The connection breaks: everything in flight on it fails with
    /// ConnectionLoss (a request not applied, a reply lost), in the order
    /// the requests were made, and the member is told its session is
    /// suspended.
    pub(super) fn disconnect(&mut self, model: &Model, node: usize, problems: &mut Vec<Problem>) {
        self.leave_follower(node);
        let incarnation = self.nodes[node].incarnation;
        let mut failures: Vec<(RequestId, Event)> = Vec::new();
        let mut kept = Vec::new();
        let lost =
            |event: &Event| connection_lost(event).and_then(|f| Some((event.request_id()?, f)));
        for flight in std::mem::take(&mut self.net) {
            let failed: Vec<(RequestId, Event)> = match &flight.msg {
                Msg::Request {
                    node: n,
                    incarnation: i,
                    command,
                    ..
                } if *n == node && *i == incarnation => vec![(
                    command.id,
                    command.clone().failed(StoreError::ConnectionLoss),
                )],
                Msg::Batch {
                    node: n,
                    incarnation: i,
                    commands,
                    ..
                } if *n == node && *i == incarnation => commands
                    .iter()
                    .map(|c| (c.id, c.clone().failed(StoreError::ConnectionLoss)))
                    .collect(),
                Msg::ReadOwner { node: n, id, .. } if *n == node => vec![(
                    *id,
                    Event::ClaimResult {
                        id: *id,
                        result: Err(StoreError::ConnectionLoss),
                    },
                )],
                Msg::Reply { node: n, event } if *n == node => lost(event).into_iter().collect(),
                Msg::Replies { node: n, events } if *n == node => {
                    events.iter().filter_map(lost).collect()
                }
                _ => Vec::new(),
            };
            if failed.is_empty() {
                kept.push(flight);
            } else {
                failures.extend(failed);
            }
        }
        self.net = kept;
        failures.sort_by_key(|(id, _)| *id);
        let n = &mut self.nodes[node];
        n.connected = false;
        let last_heard = n.last_contact;
        for (_, failure) in failures {
            self.drive(model, node, Input::Event(failure), problems);
        }
        let input = Input::Event(Event::SessionSuspended { last_heard });
        self.drive(model, node, input, problems);
    }

    /// The process dies and a new one starts at once, with a new session;
    /// the old session lives on in the store until it expires.
    pub(super) fn restart(&mut self, model: &Model, node: usize, problems: &mut Vec<Problem>) {
        let incarnation = self.nodes[node].incarnation + 1;
        let member = match Member::new(
            model.members[node].clone(),
            model.seed(node, incarnation),
            self.now,
        ) {
            Ok(member) => member,
            Err(error) => {
                problems.push(("valid configuration", error.to_string()));
                return;
            }
        };
        self.leave_follower(node);
        self.net.retain(|flight| match &flight.msg {
            Msg::Reply { node: n, .. }
            | Msg::Replies { node: n, .. }
            | Msg::ReadOwner { node: n, .. } => *n != node,
            Msg::Watch { .. } | Msg::Request { .. } | Msg::Batch { .. } | Msg::Report { .. } => {
                true
            }
        });
        let n = &mut self.nodes[node];
        n.member = member;
        n.incarnation = incarnation;
        n.session = None;
        n.connected = false;
        n.app.clear();
        n.story = Story::default();
        self.forget_undeliverable();
        self.open_session(model, node, problems);
        self.drive(model, node, Input::Counts, problems);
    }

    /// Time moves to the next deadline (on the grid); connected clients
    /// ping, then every member whose timer is due is woken.
    pub(super) fn advance(&mut self, model: &Model, problems: &mut Vec<Problem>) {
        let timeout = model.config.session_timeout;
        let mut next: Option<Instant> = None;
        let mut consider = |at: Instant| next = Some(next.map_or(at, |n: Instant| n.min(at)));
        for n in &self.nodes {
            if let Some(at) = n.member.poll_timeout() {
                consider(at);
            }
            if n.connected {
                consider(self.now + timeout / 3);
            } else if n.session.is_some() {
                consider(n.last_contact + timeout);
            }
        }
        for session in self.store.sessions() {
            if let Some(deadline) = self.store.session_deadline(session) {
                consider(deadline);
            }
        }
        if let Some(at) = self.next_report(model) {
            consider(at);
        }
        if let Some(followers) = &model.followers {
            for since in self.nodes.iter().filter_map(|n| n.cut_since) {
                consider(since + followers.patience);
            }
        }
        let Some(next) = next else { return };
        let next = model.on_grid(next).max(self.now + model.config.quantum);
        self.now = next;
        for flight in &mut self.net {
            flight.age = flight.age.saturating_add(1);
        }
        // The activity a follower reports now is what it counted before
        // this moment's pings.
        if self.reports_now(model) {
            self.report();
        }
        for index in 0..self.nodes.len() {
            let n = &self.nodes[index];
            if let (true, Some(session)) = (n.connected, n.session) {
                let alive = if model.lease_ttl.is_some() {
                    self.keep_alive(model, index, session)
                } else {
                    self.heard(model, index, session)
                };
                if alive {
                    self.nodes[index].last_contact = next;
                }
            }
        }
        for index in 0..self.nodes.len() {
            if self.nodes[index]
                .member
                .poll_timeout()
                .is_some_and(|t| t <= next)
            {
                self.drive(model, index, Input::Timeout, problems);
                if let Err(detail) = check::timers_progress(&self.nodes[index].member, next) {
                    problems.push(("timers make progress", detail));
                }
            }
        }
    }

    /// Hands `input` to member `node`, then carries out everything it
    /// queued: fetches reach the application, requests go in flight (or
    /// fail at once without a connection), and what the application is
    /// told is checked against its story.
    pub(super) fn drive(
        &mut self,
        model: &Model,
        node: usize,
        input: Input,
        problems: &mut Vec<Problem>,
    ) {
        let now = self.now;
        Self::feed(&mut self.nodes[node].member, model, now, input);
        // Inputs that follow from the member's own output: failures of
        // requests that could not be sent, and an eager application's
        // acknowledgements and drains.
        let mut later: VecDeque<Input> = VecDeque::new();
        // The claims, offset reads, commits and releases of the steps the
        // input leads to, sent together when they are over, as the runtime
        // sends what its task submitted before it yields.
        let mut gathered: Vec<StoreRequest> = Vec::new();
        // A member answers a failure with a backoff, never with another
        // request at once; the guard only keeps a regression from hanging
        // the search.
        for _ in 0..100_000 {
            let n = &mut self.nodes[node];
            match n.member.poll_output() {
                Output::Fetch(fetch) => {
                    let messages = model.config.messages;
                    let follow = app_fetch(&mut n.app, fetch, messages, model.config.eager_app);
                    for input in follow {
                        if let Input::App(Told::Processed {
                            partition, offset, ..
                        }) = &input
                        {
                            self.mark_processed(partition, *offset);
                        }
                        later.push_back(input);
                    }
                }
                Output::Store(command) => match (n.connected, n.session) {
                    (true, Some(_)) if command.op.batch_kind().is_some() => {
                        gathered.push(command);
                    }
                    (true, Some(session)) => self.net.push(Flight {
                        msg: Msg::Request {
                            node,
                            incarnation: n.incarnation,
                            session,
                            sent: now,
                            command,
                        },
                        age: 0,
                    }),
                    (connected, session) => {
                        let error = if connected && session.is_none() {
                            StoreError::SessionExpired
                        } else {
                            StoreError::ConnectionLoss
                        };
                        later.push_back(Input::Event(command.failed(error)));
                    }
                },
                Output::App(event) => {
                    let id = n.member.id().clone();
                    if let Err(detail) = check::story(&mut n.story, &mut self.newest, &id, &event) {
                        problems.push(("application events", detail));
                    }
                }
                Output::Timeout(_) => {
                    if let Err(detail) = n.member.check_derived() {
                        problems.push(("derived state matches the partitions", detail));
                    }
                    match later.pop_front() {
                        Some(input) => Self::feed(&mut n.member, model, now, input),
                        None => {
                            if let Some(session) = n.session {
                                let gathered = std::mem::take(&mut gathered);
                                let from = (node, n.incarnation, session, now);
                                send_gathered(&mut self.net, from, gathered);
                            }
                            return;
                        }
                    }
                }
                other => {
                    let detail =
                        format!("m{node} gave an output the explorer does not know: {other:?}");
                    problems.push(("known outputs", detail));
                    return;
                }
            }
        }
        problems.push((
            "termination",
            format!("m{node} kept answering its own failures"),
        ));
    }

    /// Hands `input` to `member` at `now`.
    pub(super) fn feed(member: &mut Member, model: &Model, now: Instant, input: Input) {
        match input {
            Input::Event(event) => member.handle_event(now, event),
            Input::Timeout => member.handle_timeout(now),
            Input::Counts => member.set_partition_counts(now, model.counts.clone()),
            Input::App(told) => told.tell(member, now),
        }
    }

    /// Notes that `offset` of `partition` was processed: whether, not how
    /// often, since a count would make every duplicate a new state.
    pub(super) fn mark_processed(&mut self, partition: &TopicPartition, offset: Offset) {
        let done = self.processed.entry(partition.clone()).or_default();
        let slot = usize::try_from(offset).unwrap_or(0);
        if done.len() <= slot {
            done.resize(slot + 1, 0);
        }
        done[slot] = 1;
    }
}

/// Who sent a request, and when: `(node, incarnation, session, sent)`.
pub(super) type Sender = (usize, u32, SessionId, Instant);

/// Puts the requests a step of `incarnation` of `node` gathered in flight
/// under `session`: a batch of each kind (at most
/// [`OPS_PER_BATCH`]), or a request for one alone.
pub(super) fn send_gathered(
    net: &mut Vec<Flight>,
    (node, incarnation, session, sent): Sender,
    gathered: Vec<StoreRequest>,
) {
    let mut kinds: [Vec<StoreRequest>; StoreOp::BATCH_KINDS] = Default::default();
    for command in gathered {
        if let Some(kind) = command.op.batch_kind() {
            kinds[kind].push(command);
        }
    }
    for kind in kinds {
        for batch in kind.chunks(OPS_PER_BATCH) {
            let msg = match batch {
                [command] => Msg::Request {
                    node,
                    incarnation,
                    session,
                    sent,
                    command: command.clone(),
                },
                _ => Msg::Batch {
                    node,
                    incarnation,
                    session,
                    sent,
                    commands: batch.to_vec(),
                },
            };
            net.push(Flight { msg, age: 0 });
        }
    }
}

/// Carries out a fetch command for the application `app`; `messages` is
/// the size of each log. An `eager` application processes what it fetches
/// and drains what it stops at once: the inputs that tells the member are
/// returned.
pub(super) fn app_fetch(
    app: &mut Holdings,
    command: FetchCommand,
    messages: Offset,
    eager: bool,
) -> Vec<Input> {
    let mut follow = Vec::new();
    match app.apply(command, |_| messages) {
        Applied::Stopping(partition, token) if eager => {
            app.stopping.remove(&(partition.clone(), token));
            follow.push(Input::App(Told::Drained { partition, token }));
        }
        Applied::Fetching(partition) if eager => {
            if let Some((token, next)) = app.fetching.get_mut(&partition) {
                for offset in *next..messages {
                    follow.push(Input::App(Told::Processed {
                        partition: partition.clone(),
                        token: *token,
                        offset,
                    }));
                }
                *next = (*next).max(messages);
            }
        }
        Applied::Stopping(..) | Applied::Fetching(_) | Applied::Held => {}
    }
    follow
}

/// The result event a reply becomes when the connection drops before it
/// arrives: the same request, failed with ConnectionLoss (its outcome
/// unknown to the member). `None` for what answers no request.
pub(super) fn connection_lost(event: &Event) -> Option<Event> {
    let id = event.request_id()?;
    let e = StoreError::ConnectionLoss;
    Some(match event {
        Event::RegisterResult { .. } => Event::RegisterResult { id, result: Err(e) },
        Event::DeregisterResult { .. } => Event::DeregisterResult { id, result: Err(e) },
        Event::MembersResult { .. } => Event::MembersResult { id, result: Err(e) },
        Event::ClaimResult { .. } => Event::ClaimResult { id, result: Err(e) },
        Event::OwnerWatchResult { .. } => Event::OwnerWatchResult { id, result: Err(e) },
        Event::OffsetResult { .. } => Event::OffsetResult { id, result: Err(e) },
        Event::CommitResult { .. } => Event::CommitResult { id, result: Err(e) },
        Event::ReleaseResult { .. } => Event::ReleaseResult { id, result: Err(e) },
        Event::HeartbeatResult { .. } => Event::HeartbeatResult { id, result: Err(e) },
        _ => return None,
    })
}
