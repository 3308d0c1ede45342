//! The members' side: what each member's step decided (store requests,
//! fetches, application events) carried out, and its application
//! processing, draining and leaving.

use std::collections::BTreeMap;

use crate::app::{Applied, Told};
use crate::check;
use tenure_core::error::{Error, StoreError};
use tenure_core::protocol::{AppEvent, FetchCommand, Member, Output, StoreOp, StoreRequest};
use tenure_core::records::OPS_PER_BATCH;
use tenure_core::types::{FencingToken, Offset, SessionId, TopicPartition};

use super::parts::{published, Action, Batch, Input, Ledger, Pending, World, BATCH};

impl World {
    /// Carries out every command a member has for us, and checks what it
    /// tells its application. Stops reach the application before the
    /// releases that follow them reach the store.
    pub(super) fn drain_commands(&mut self, index: usize) {
        loop {
            let Some(member) = self.nodes[index].member.as_mut() else {
                return;
            };
            match member.poll_output() {
                Output::Fetch(fetch) => self.fetch(index, fetch),
                Output::Store(command) => self.dispatch(index, command),
                Output::App(event) => self.app_event(index, event),
                Output::Timeout(_) => {
                    let check = member.check_derived();
                    let now = (member.changes(), published(member));
                    let before = self.nodes[index].published.replace(now.clone());
                    if let Err(detail) = check {
                        self.violation("derived state matches the partitions", detail);
                    }
                    if let Some(before) = before.filter(|b| b.0 == now.0 && b.1 != now.1) {
                        let detail = format!(
                            "m{index}'s change count stayed {} while what it publishes went from {:?} to {:?}",
                            now.0, before.1, now.1
                        );
                        self.violation("the change count follows what is published", detail);
                    }
                    return;
                }
                other => {
                    let detail =
                        format!("m{index} gave an output the simulator does not know: {other:?}");
                    self.violation("known outputs", detail);
                    return;
                }
            }
        }
    }

    /// Checks that a member's application events tell a consistent story
    /// (every claim begins, then takes effect or is abandoned; only a held
    /// claim is committed under, released or lost), and that a claim never
    /// takes effect with a token below an earlier claim's.
    pub(super) fn app_event(&mut self, index: usize, event: AppEvent) {
        self.trace(Some(index), &("app", &event));
        if let AppEvent::Problem(error) = &event {
            *self.report.reported.entry(error_kind(error)).or_insert(0) += 1;
        }
        let node = &mut self.nodes[index];
        let told = check::story(
            &mut node.app.story,
            &mut self.claimed_tokens,
            &node.id,
            &event,
        );
        if let Err(detail) = told {
            self.violation("application events", detail);
        }
    }

    /// Answers `command` with `error` at once, as a client does for a
    /// request it could not send or whose connection broke.
    pub(super) fn fail(&mut self, index: usize, command: StoreRequest, error: StoreError) {
        self.local(self.now, index, Input::Store(command.failed(error)));
    }

    /// Starts or stops the fetching of the member's application.
    pub(super) fn fetch(&mut self, index: usize, command: FetchCommand) {
        self.trace(Some(index), &("->", &command));
        let started = match &command {
            FetchCommand::Start {
                partition,
                token,
                progress,
                ..
            } => Some((partition.clone(), *token, progress.clone())),
            _ => None,
        };
        let hw = &self.hw;
        let newest = |partition: &TopicPartition| hw.get(partition).copied().unwrap_or(0);
        let app = &mut self.nodes[index].app;
        match app.holdings.apply(command, newest) {
            Applied::Stopping(..) => self.finish_drains(index),
            Applied::Fetching(partition) if app.lanes > 1 => {
                // A claim's start: its ledger begins where the fetch does,
                // with what the progress record names done above it.
                if let (Some((started, token, done)), Some((_, from))) =
                    (started, app.holdings.fetching.get(&partition))
                {
                    if started == partition {
                        let ledger = Ledger {
                            token,
                            frontier: *from,
                            done,
                        };
                        app.ledgers.insert(partition, ledger);
                    }
                }
            }
            _ => {}
        }
    }

    /// Sends a request to the store over the member's connection.
    pub(super) fn dispatch(&mut self, index: usize, store_command: StoreRequest) {
        self.trace(Some(index), &("->", &store_command));
        // The order of the member's output: a partition leaves the fetcher
        // before its release (or a new claim of it) leaves for the store.
        if let StoreOp::Release { partition, .. } | StoreOp::Claim { partition, .. } =
            &store_command.op
        {
            if self.nodes[index].app.holdings.holds(partition) {
                let detail = format!(
                    "m{index} sent {:?} while its fetcher still held {partition}",
                    store_command.op
                );
                self.violation("stop before release", detail);
            }
        }
        let node = &self.nodes[index];
        match (node.connected, node.session) {
            (true, Some(_)) if store_command.op.batch_kind().is_some() => {
                self.nodes[index].gathered.push(store_command);
            }
            (true, Some(session)) => self.send(index, session, vec![store_command]),
            (connected, session) => {
                let error = if session.is_none() && connected {
                    StoreError::SessionExpired
                } else {
                    StoreError::ConnectionLoss
                };
                self.fail(index, store_command, error);
            }
        }
    }

    /// Sends the requests the member gathered at this instant, as the
    /// runtime sends what its task submitted before it yields: a batch of
    /// each kind (at most [`OPS_PER_BATCH`]), or a single request for one
    /// alone.
    pub(super) fn send_gathered(&mut self, index: usize) {
        let gathered = std::mem::take(&mut self.nodes[index].gathered);
        let node = &self.nodes[index];
        let (connected, held) = (node.connected, node.session);
        let mut kinds: [Vec<StoreRequest>; StoreOp::BATCH_KINDS] = Default::default();
        for command in gathered {
            match (connected, command.op.batch_kind()) {
                (true, Some(kind)) if held == Some(command.session) => kinds[kind].push(command),
                // Issued under a session that ended since, or over a
                // connection lost since: failed as the runtime fails it.
                (true, _) => self.fail(index, command, StoreError::SessionExpired),
                (false, _) => self.fail(index, command, StoreError::ConnectionLoss),
            }
        }
        let Some(session) = held else {
            return;
        };
        for kind in kinds {
            for batch in kind.chunks(OPS_PER_BATCH) {
                self.send(index, session, batch.to_vec());
            }
        }
    }

    /// Sends `commands` to the store over the member's connection, in one
    /// request: requests on one connection arrive in order.
    pub(super) fn send(
        &mut self,
        index: usize,
        session: SessionId,
        mut commands: Vec<StoreRequest>,
    ) {
        let delay = self.delay();
        let node = &mut self.nodes[index];
        let arrival = (self.now + delay).max(node.last_request_arrival);
        node.last_request_arrival = arrival;
        let link = node.link();
        for command in &commands {
            let pending = Pending {
                command: command.clone(),
                sent: self.now,
            };
            node.in_flight.insert(command.id, pending);
        }
        let action = match commands.len() {
            1 => Action::Request {
                node: index,
                link,
                session,
                command: commands.remove(0),
            },
            _ => Action::Batch {
                node: index,
                link,
                session,
                commands,
            },
        };
        self.at(arrival, action);
    }

    pub(super) fn app_tick(&mut self, index: usize) {
        let now = self.now;
        let node = &mut self.nodes[index];
        let mut done = Vec::new();
        node.app.batches.retain(|b| {
            if b.done_at <= now {
                done.push(b.clone());
                false
            } else {
                true
            }
        });
        let out_of_order = node.app.lanes > 1;
        for batch in done {
            let counts = self.processed.entry(batch.partition.clone()).or_default();
            for offset in batch.first..batch.end {
                let slot = offset as usize;
                if counts.len() <= slot {
                    counts.resize(slot + 1, 0);
                }
                counts[slot] += 1;
            }
            let told = if out_of_order {
                let ledgers = &mut self.nodes[index].app.ledgers;
                let Some(ledger) = ledgers
                    .get_mut(&batch.partition)
                    .filter(|l| l.token == batch.token)
                else {
                    continue;
                };
                for offset in batch.first..batch.end {
                    ledger.done.mark_done(offset);
                }
                while ledger.done.is_done(ledger.frontier) {
                    ledger.frontier += 1;
                }
                ledger.done.forget_below(ledger.frontier);
                Told::Progressed {
                    partition: batch.partition,
                    token: batch.token,
                    next: ledger.frontier,
                    progress: ledger.done.clone(),
                }
            } else {
                Told::Processed {
                    partition: batch.partition,
                    token: batch.token,
                    offset: batch.end - 1,
                }
            };
            self.local(now, index, Input::App(told));
        }
        let node = &mut self.nodes[index];
        let mut busy: BTreeMap<TopicPartition, usize> = BTreeMap::new();
        for batch in &node.app.batches {
            *busy.entry(batch.partition.clone()).or_default() += 1;
        }
        let (batch_time, lanes) = (node.app.batch_time, node.app.lanes);
        let mut handed = Vec::new();
        for (partition, (token, next)) in node.app.holdings.fetching.iter_mut() {
            if busy.get(partition).copied().unwrap_or(0) >= lanes {
                continue;
            }
            let hw = self.hw.get(partition).copied().unwrap_or(0);
            // Out of order: what the claim's ledger has done is passed,
            // below its frontier (which a batch finishing may move past
            // what the record named done, forgetting it) and above.
            let ledger = node
                .app
                .ledgers
                .get(partition)
                .filter(|l| lanes > 1 && l.token == *token);
            if let Some(ledger) = ledger {
                *next = (*next).max(ledger.frontier);
            }
            let done = ledger.map(|l| &l.done);
            while done.is_some_and(|d| d.is_done(*next)) {
                *next += 1;
            }
            if *next < hw {
                let first_done = done
                    .and_then(|d| d.done().iter().find(|r| r.start > *next))
                    .map_or(Offset::MAX, |r| r.start);
                let end = (*next + BATCH).min(hw).min(first_done);
                // Out of order, batches finish in any order.
                let done_at = if lanes > 1 {
                    now + batch_time.mul_f64(0.5 + self.rng.below(101) as f64 / 100.0)
                } else {
                    now + batch_time
                };
                node.app.batches.push(Batch {
                    partition: partition.clone(),
                    token: *token,
                    first: *next,
                    end,
                    done_at,
                });
                handed.push((partition.clone(), *next, end));
                *next = end;
            }
        }
        // No message that the store's progress record names done is
        // handed out again: the claim's start carried the record.
        if lanes > 1 {
            for (partition, first, end) in handed {
                let recorded = check::stored_progress(&self.store, &self.layout, &partition);
                if let Some(again) = (first..end).find(|&o| recorded.is_done(o)) {
                    let who = self.nodes[index].id.clone();
                    self.violation(
                        "recorded work not redone",
                        format!(
                            "{who} handed out {partition} offset {again}, which the store's progress record names done"
                        ),
                    );
                }
            }
        }
        self.finish_drains(index);
    }

    pub(super) fn finish_drains(&mut self, index: usize) {
        let now = self.now;
        let node = &mut self.nodes[index];
        let drained: Vec<(TopicPartition, FencingToken)> = node
            .app
            .holdings
            .stopping
            .iter()
            .filter(|(p, t)| {
                !node
                    .app
                    .batches
                    .iter()
                    .any(|b| &b.partition == p && b.token == *t)
            })
            .cloned()
            .collect();
        for key in &drained {
            node.app.holdings.stopping.remove(key);
        }
        for (partition, token) in drained {
            self.local(now, index, Input::App(Told::Drained { partition, token }));
        }
    }

    pub(super) fn finish_leaving(&mut self, index: usize) {
        let node = &mut self.nodes[index];
        let closed =
            node.leaving && !node.gone && node.member.as_ref().is_some_and(Member::is_closed);
        if !closed {
            return;
        }
        node.gone = true;
        node.member = None;
        node.connected = false;
        node.epoch += 1;
        if let Some(session) = node.session.take() {
            let fired = self.store.close_session(session);
            self.deliver_watches(fired);
        }
    }

    // ----- invariants -----
}

fn error_kind(error: &Error) -> &'static str {
    match error {
        Error::ClaimStalled { .. } => "claim stalled",
        Error::StrategyMismatch { .. } => "strategy mismatch",
        Error::SubscriptionMismatch { .. } => "subscription mismatch",
        Error::RegistrationTaken { .. } => "registration taken",
        Error::Store { .. } => "store error",
        Error::CommitFenced { .. } => "commit fenced",
        Error::DrainTimeout { .. } => "drain timeout",
        Error::SessionExpired { .. } => "session expired",
        _ => "other",
    }
}
