//! An exhaustive search of every state a small group can reach: a few real
//! [`Member`]s on the store model ([`tenure_core::model`]), with every order in
//! which store requests, replies and watch notifications can arrive, and
//! every placement of a bounded number of faults (lost messages,
//! disconnections long enough for the session to expire, restarts). In
//! every state it checks the simulator's properties (the same checks):
//! exclusive ownership, fenced and monotone commits, no commit past an
//! unprocessed message, a consistent story told to each application; and,
//! from every state, that once the faults stop the group converges (every
//! partition owned and fetched by the member the assignment names) within
//! a bound.
//!
//! # The model
//!
//! A state is the whole group: the store model, each member (its state
//! machine, the session its client holds, whether it is connected, what its
//! application fetches, holds and is draining), the messages in flight (store
//! requests not yet applied, second round trips of claims, replies, watch
//! notifications), the faults left to inject, the current time, and the
//! checks' ledgers (offsets committed, messages processed, newest claim per
//! partition, the story each application was told).
//!
//! A step is one of:
//! - deliver a message in flight (a request is applied by the store
//!   through the [`adapter`], a reply or notification is handed to its
//!   member): the oldest one, or, spending one of
//!   [`ExploreConfig::reorders`], any other deliverable one. A connection's
//!   requests are applied in the order they were sent, as ZooKeeper applies
//!   a session's; replies and notifications may arrive in any order. A
//!   notification waits while its member is disconnected, as ZooKeeper and
//!   etcd deliver them after a reconnect;
//! - advance the time to the next deadline: the earliest of the members'
//!   timers ([`Member::poll_timeout`]), the next ping of a connected client
//!   (a third of the session timeout on), the moment a disconnected client
//!   gives its session up, and the session deadlines in the store, rounded
//!   up to a grid ([`ExploreConfig::quantum`]); connected clients ping as
//!   the time moves, then the members whose timers are due are woken;
//! - the application processes the next message of a partition it fetches
//!   (each partition holds [`ExploreConfig::messages`]), or finishes
//!   draining a partition it was told to stop;
//! - the server expires a session whose deadline has passed; a
//!   disconnected client gives up its session once the session timeout has
//!   passed since it last reached the server (possibly before the server
//!   has expired it), or reconnects (resuming its session, or told it
//!   expired and opening a new one);
//! - a fault, while the budget lasts: a message is lost (a request before
//!   it is applied or a reply after: the member is answered ConnectionLoss;
//!   a notification that an owner record was deleted, which the core
//!   re-checks on its own), a member is disconnected (everything in flight
//!   on its connection fails with ConnectionLoss, and it is told its session
//!   is suspended), or a member restarts (a new incarnation with a new
//!   session; the old session lives on in the store until it expires, and
//!   requests the old process had sent may still be applied).
//!
//! Time cannot pass a moment by which something must happen: a session past
//! its deadline is expired, and a disconnected client past its session
//! timeout gives up or reconnects (and one that gave up reconnects), before
//! the next advance. Letting time advance while a message could be
//! delivered also spends a reorder, and a message crosses at most
//! [`ExploreConfig::max_delay`] advances.
//!
//! # Bounds
//!
//! Unbounded reordering does not close: a fault-free group of two members
//! and two partitions passes two million states before depth 25. The
//! search therefore bounds deviations from oldest-first delivery, as
//! delay-bounded scheduling does, and faults, in all and per kind
//! ([`ExploreConfig::bound`] says which); within them it is exhaustive,
//! and without a depth bound it runs until no new state is found.
//!
//! States are told apart by a canonical fingerprint:
//! ids are renamed by rank and moments taken relative to now, so the search
//! closes on its own once the faults are spent, unless a depth bound cuts
//! it first. A state seen again with no more of any budget left is not
//! expanded again. The search runs depth first: memory holds the visited
//! fingerprints and one path, not a frontier of whole states.
//!
//! # Convergence
//!
//! From every state reached, the fault-free continuation is followed: the
//! store expires what is due, disconnected members reconnect, messages are
//! delivered (the one with the smallest fingerprint first, so that the
//! continuation is a function of the state), drains finish, and time
//! advances when nothing else is left. It must reach a converged state
//! within [`ExploreConfig::convergence_bound`]. The time to converge is
//! remembered per state, so each continuation is followed only until it
//! meets a state already known.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::time::{Duration, Instant};

use crate::app::{Applied, Holdings, Told};
use crate::check::{self, Seen, Story};
use tenure_core::assignment::{self, PartitionCounts};
use tenure_core::canon::{Canon, Clock};
use tenure_core::config::Config;
use tenure_core::error::StoreError;
use tenure_core::model::adapter::{self, Batched, Execution};
use tenure_core::model::store::{Store, WatchEvent};
use tenure_core::protocol::{
    ClaimOutcome, Event, FetchCommand, Member, Output, RegisterOutcome, StoreOp, StoreRequest,
};
use tenure_core::records::{Layout, OPS_PER_BATCH};
use tenure_core::subscription::MemberInfo;
use tenure_core::types::{FencingToken, Offset, RequestId, SessionId, TopicPartition};

/// What to explore.
#[derive(Clone, Debug)]
pub struct ExploreConfig {
    /// Members of the group (named `m0`, `m1`, ...).
    pub members: usize,
    /// Partitions of the one topic `t`.
    pub partitions: u32,
    /// Messages in each partition.
    pub messages: Offset,
    /// The application processes what it is handed, and drains what it is
    /// told to stop, at once (`false`: at any later moment, which the
    /// search explores).
    pub eager_app: bool,
    /// Messages that may be lost.
    pub losses: u32,
    /// Time advances a message may stay in flight across. One advance is
    /// at most a third of the session timeout, within the two thirds after
    /// which ZooKeeper's client gives up on a silent connection; a message
    /// held for ever would stand for a connection that no client keeps.
    pub max_delay: u32,
    /// Deviations from delivering the oldest message first: delivering
    /// another one deliverable, or letting time advance while one is
    /// deliverable (`None`: any number).
    pub reorders: Option<u32>,
    /// Disconnections that may happen (each may last past the session
    /// timeout, and so end in an expiry).
    pub disconnects: u32,
    /// Member restarts that may happen.
    pub restarts: u32,
    /// Faults of all kinds together that may happen (`None`: as many as
    /// the budgets of each kind allow).
    pub faults: Option<u32>,
    /// Steps from the start beyond which the search stops (`None`: until it
    /// closes).
    pub max_depth: Option<u32>,
    /// States beyond which the search stops, a guard for memory.
    pub max_states: Option<u64>,
    /// Follow the fault-free continuation of every state and check that it
    /// converges.
    pub convergence: bool,
    /// The time within which it must converge, if not
    /// [`ExploreConfig::convergence_bound`]'s.
    pub convergence_limit: Option<Duration>,
    /// The assignment strategy's name.
    pub strategy: String,
    /// The members' session timeout.
    pub session_timeout: Duration,
    /// The members' processing timeout.
    pub processing_timeout: Duration,
    /// The members' commit interval.
    pub commit_interval: Duration,
    /// The members' first retry backoff.
    pub backoff_min: Duration,
    /// The members' longest retry backoff.
    pub backoff_max: Duration,
    /// The time grid: time advances to the next deadline rounded up to a
    /// multiple of this, so timers fire up to this late (less than the
    /// suspension margin, which covers that). Every duration above is a
    /// multiple of it.
    pub quantum: Duration,
    /// Print progress to stderr every so many states (0: never).
    pub progress_every: u64,
}

impl ExploreConfig {
    /// `members` members and `partitions` partitions, one message each,
    /// one fault (of any kind), one reorder, no depth bound, convergence
    /// checked; a 1.5 s session, 1 s processing timeout, 0.5 s commit
    /// interval, backoff from 0.1 s to 0.4 s, on a 0.1 s grid.
    pub fn new(members: usize, partitions: u32) -> ExploreConfig {
        ExploreConfig {
            members,
            partitions,
            messages: 1,
            eager_app: true,
            losses: 1,
            max_delay: 1,
            reorders: Some(1),
            disconnects: 1,
            restarts: 1,
            faults: Some(1),
            max_depth: None,
            max_states: Some(20_000_000),
            convergence: true,
            convergence_limit: None,
            strategy: "sticky".to_owned(),
            session_timeout: Duration::from_millis(1500),
            processing_timeout: Duration::from_millis(1000),
            commit_interval: Duration::from_millis(500),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_millis(400),
            quantum: Duration::from_millis(100),
            progress_every: 0,
        }
    }

    /// The time after the faults stop within which every partition must be
    /// owned and fetched by its assigned member, as the simulator's bound
    /// ([`super::SimConfig::convergence_bound`]): a stale record lasts up to
    /// a session timeout, a client may take another to find its session
    /// gone, a release waits up to the processing timeout for the drain, a
    /// claim may sit out one backoff, and a second of slack.
    pub fn convergence_bound(&self) -> Duration {
        if let Some(limit) = self.convergence_limit {
            return limit;
        }
        self.session_timeout * 2
            + self.processing_timeout
            + self.backoff_max
            + Duration::from_secs(1)
    }

    /// What the search covers, in words.
    pub fn bound(&self, report: &ExploreReport) -> String {
        let limit = |n: Option<u32>| n.map_or("any".to_owned(), |n| n.to_string());
        let depth = match self.max_depth {
            Some(d) => format!("depth<={d}"),
            None => "no depth bound".to_owned(),
        };
        let extent = if report.violation.is_some() {
            "stopped at the first violation".to_owned()
        } else if report.cut == 0 {
            "closed: every reachable state visited".to_owned()
        } else {
            format!("cut: {} states not expanded", report.cut)
        };
        format!(
            "faults<={} in all (<={} lost message, <={} disconnect/expiry, <={} restart); \
             reorders<={} (deliveries out of oldest-first order, or time advancing past a \
             deliverable message; a message crosses <={} time advance; requests in order per \
             connection); {depth}; {extent}; {} message per partition; time advances to the \
             next deadline on a {:?} grid; convergence {}",
            limit(self.faults),
            self.losses,
            self.disconnects,
            self.restarts,
            limit(self.reorders),
            self.max_delay,
            self.messages,
            self.quantum,
            if self.convergence {
                format!(
                    "checked from every state within {:?}",
                    self.convergence_bound()
                )
            } else {
                "not checked".to_owned()
            }
        )
    }

    fn member_config(&self, index: usize) -> Result<Config, String> {
        let strategy = assignment::by_name(&self.strategy)
            .ok_or_else(|| format!("unknown strategy {:?}", self.strategy))?;
        let config = Config::new("explore", format!("m{index}"), ["t"])
            .map_err(|e| e.to_string())?
            .with_session_timeout(self.session_timeout)
            .with_processing_timeout(self.processing_timeout)
            .with_commit_interval(self.commit_interval)
            .with_backoff(self.backoff_min, self.backoff_max)
            .with_strategy(strategy);
        config.validate().map_err(|e| e.to_string())?;
        Ok(config)
    }
}

/// What a search did.
#[derive(Clone, Debug, Default)]
pub struct ExploreReport {
    /// Distinct states visited.
    pub states: u64,
    /// Steps taken from the states expanded.
    pub transitions: u64,
    /// Of those, the steps that delivered a batch of a step's claims or
    /// offset reads to the store.
    pub batch_deliveries: u64,
    /// The deepest state visited, in steps from the start.
    pub max_depth: u32,
    /// States left unexpanded by the depth or state bound.
    pub cut: u64,
    /// Steps of fault-free continuations followed beyond the search.
    pub lookahead_steps: u64,
    /// The longest any continuation took to converge.
    pub slowest_convergence: Duration,
    /// The first broken property found, if any.
    pub violation: Option<Counterexample>,
}

/// A broken property and the steps that lead to it.
#[derive(Clone, Debug)]
pub struct Counterexample {
    /// Which property.
    pub property: &'static str,
    /// What exactly.
    pub detail: String,
    /// The step chosen in each state, as its index among that state's
    /// steps: [`replay`] takes them back to the same state.
    pub moves: Vec<usize>,
    /// What each of those steps did.
    pub steps: Vec<String>,
    /// For convergence: the fault-free continuation followed from there.
    pub continuation: Vec<String>,
}

impl fmt::Display for Counterexample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} violated: {}", self.property, self.detail)?;
        writeln!(f, "path ({} steps):", self.steps.len())?;
        for (i, step) in self.steps.iter().enumerate() {
            writeln!(f, "  {i:>3}. {step}")?;
        }
        if !self.continuation.is_empty() {
            writeln!(
                f,
                "fault-free continuation ({} steps):",
                self.continuation.len()
            )?;
            for step in &self.continuation {
                writeln!(f, "       {step}")?;
            }
        }
        let moves: Vec<String> = self.moves.iter().map(usize::to_string).collect();
        write!(f, "replay: --replay {}", moves.join(","))
    }
}

/// Searches every state the configured group can reach, depth first, and
/// stops at the first broken property.
pub fn explore(config: &ExploreConfig) -> Result<ExploreReport, String> {
    let model = Model::new(config)?;
    let mut search = Search::new(&model);
    search.run();
    Ok(search.report)
}

/// What a replay found.
#[derive(Clone, Debug)]
pub struct Replay {
    /// What each step did.
    pub steps: Vec<String>,
    /// The properties broken along the way, with the step that broke them.
    pub problems: Vec<(usize, &'static str, String)>,
    /// The fault-free continuation from the last state, and whether (how
    /// fast) it converged.
    pub continuation: Vec<String>,
    /// How long the continuation took to converge, or why it did not.
    pub converged: Result<Duration, String>,
}

/// Takes the steps `moves` (indices among each state's steps, as a
/// [`Counterexample`] gives them) from the start, describing each and
/// checking the properties after each, then follows the fault-free
/// continuation.
pub fn replay(config: &ExploreConfig, moves: &[usize]) -> Result<Replay, String> {
    let model = Model::new(config)?;
    let (mut state, mut problems) = State::initial(&model)?;
    let mut found: Vec<(usize, &'static str, String)> =
        problems.drain(..).map(|(p, d)| (0, p, d)).collect();
    let mut steps = Vec::new();
    for (i, &choice) in moves.iter().enumerate() {
        let moves = state.moves(&model);
        let Some(&mv) = moves.get(choice) else {
            return Err(format!(
                "step {i}: only {} steps are possible, not step {choice}",
                moves.len()
            ));
        };
        steps.push(state.describe(&model, mv));
        for (property, detail) in state.apply(&model, mv) {
            found.push((i, property, detail));
        }
    }
    let mut continuation = Vec::new();
    let converged = state.continue_calmly(&model, &mut |s, mv| {
        continuation.push(s.describe(&model, mv));
    });
    Ok(Replay {
        steps,
        problems: found,
        continuation,
        converged,
    })
}

// ----- the model -----

/// What does not change during a search.
struct Model {
    config: ExploreConfig,
    epoch: Instant,
    layout: Layout,
    counts: PartitionCounts,
    members: Vec<Config>,
    horizon: Duration,
}

impl Model {
    fn new(config: &ExploreConfig) -> Result<Model, String> {
        if config.members == 0 || config.partitions == 0 {
            return Err("at least one member and one partition".to_owned());
        }
        if config.quantum.is_zero() {
            return Err("the time grid's step must be more than zero".to_owned());
        }
        let members = (0..config.members)
            .map(|i| config.member_config(i))
            .collect::<Result<Vec<_>, _>>()?;
        let first = &members[0];
        let q = config.quantum.as_nanos();
        for (name, d) in [
            ("session timeout", first.session_timeout()),
            ("suspension margin", first.suspension_margin()),
            (
                "a third of the session timeout",
                first.session_timeout() / 3,
            ),
            ("processing timeout", first.processing_timeout()),
            ("commit interval", first.commit_interval()),
            ("claim-stall threshold", first.claim_stall_threshold()),
        ] {
            if !d.as_nanos().is_multiple_of(q) {
                return Err(format!(
                    "the {name} ({d:?}) is not a multiple of the grid step {:?}",
                    config.quantum
                ));
            }
        }
        if first.suspension_margin() <= config.quantum {
            return Err("the suspension margin must exceed the grid step".to_owned());
        }
        // No deadline lies further from the moment it was set than the
        // longest of these; moments older than that are all alike.
        let horizon = first.claim_stall_threshold()
            + first.session_timeout()
            + first.processing_timeout()
            + first.commit_interval()
            + first.backoff_max();
        Ok(Model {
            config: config.clone(),
            epoch: Instant::now(),
            layout: Layout::new("", "explore"),
            counts: PartitionCounts::from([("t".to_owned(), config.partitions)]),
            members,
            horizon,
        })
    }

    fn partition(&self, index: u32) -> TopicPartition {
        TopicPartition::new("t", index)
    }

    fn seed(&self, node: usize, incarnation: u32) -> u64 {
        ((node as u64) << 32) | u64::from(incarnation)
    }

    /// `at` rounded up to the time grid.
    fn on_grid(&self, at: Instant) -> Instant {
        let q = self.config.quantum.as_nanos();
        let since = at.saturating_duration_since(self.epoch).as_nanos();
        let steps = since.div_ceil(q);
        let nanos = u64::try_from(steps * q).unwrap_or(u64::MAX);
        self.epoch + Duration::from_nanos(nanos)
    }
}

/// A broken property: which, and what.
type Problem = (&'static str, String);

/// The faults left to inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Budget {
    /// `u32::MAX`: unbounded.
    reorders: u32,
    losses: u32,
    disconnects: u32,
    restarts: u32,
    /// Faults of any kind left.
    total: u32,
}

impl Budget {
    /// Whether this budget allows at least as much of every fault as
    /// `other`.
    fn covers(&self, other: &Budget) -> bool {
        self.reorders >= other.reorders
            && self.losses >= other.losses
            && self.disconnects >= other.disconnects
            && self.restarts >= other.restarts
            && self.total >= other.total
    }
}

/// One member process and its client and application.
#[derive(Clone, Debug)]
struct Node {
    member: Member,
    /// Counts restarts: what was sent to an earlier process never reaches
    /// this one.
    incarnation: u32,
    /// The session the client holds (`None`: given up, none new yet).
    session: Option<SessionId>,
    connected: bool,
    /// When the server last heard from this client.
    last_contact: Instant,
    app: Holdings,
    story: Story,
}

/// A message in flight.
#[derive(Clone, Debug)]
enum Msg {
    /// A store request on its way to the server, sent by `incarnation` of
    /// `node` under `session`.
    Request {
        node: usize,
        incarnation: u32,
        session: SessionId,
        command: StoreRequest,
    },
    /// Requests of one kind of one step on their way to the server in one
    /// request (a `multi`), sent by `incarnation` of `node` under
    /// `session`: their writes land together or not at all.
    Batch {
        node: usize,
        incarnation: u32,
        session: SessionId,
        commands: Vec<StoreRequest>,
    },
    /// The second round trip of a claim that met an existing record,
    /// sent by `incarnation` of `node`.
    ReadOwner {
        node: usize,
        incarnation: u32,
        id: RequestId,
        partition: TopicPartition,
    },
    /// A reply on its way to the member.
    Reply { node: usize, event: Event },
    /// The replies to a batch, on their way to the member together.
    Replies { node: usize, events: Vec<Event> },
    /// A watch notification for `session`.
    Watch {
        node: usize,
        session: SessionId,
        event: Event,
    },
}

/// A message in flight, and how many time advances it has stayed so.
#[derive(Clone, Debug)]
struct Flight {
    msg: Msg,
    age: u32,
}

impl Msg {
    /// The connection a request travels on, `(node, incarnation)`: the
    /// store applies a connection's requests in the order they were sent,
    /// as ZooKeeper does a session's.
    fn connection(&self) -> Option<(usize, u32)> {
        match self {
            Msg::Request {
                node, incarnation, ..
            }
            | Msg::Batch {
                node, incarnation, ..
            }
            | Msg::ReadOwner {
                node, incarnation, ..
            } => Some((*node, *incarnation)),
            Msg::Reply { .. } | Msg::Replies { .. } | Msg::Watch { .. } => None,
        }
    }
}

/// One step of the search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Move {
    Deliver(usize),
    Lose(usize),
    Process { node: usize, partition: u32 },
    Drain { node: usize, index: usize },
    Expire(SessionId),
    GiveUp(usize),
    Reconnect(usize),
    Disconnect(usize),
    Restart(usize),
    Advance,
}

/// An input for a member.
enum Input {
    Event(Event),
    Timeout,
    Counts,
    App(Told),
}

/// The whole group.
#[derive(Clone, Debug)]
struct State {
    now: Instant,
    store: Store,
    nodes: Vec<Node>,
    /// In the order they were sent.
    net: Vec<Flight>,
    budget: Budget,
    committed: BTreeMap<TopicPartition, Offset>,
    processed: BTreeMap<TopicPartition, Vec<u32>>,
    newest: BTreeMap<TopicPartition, FencingToken>,
}

impl State {
    /// Every member started at once, each with its session and the
    /// partition counts.
    fn initial(model: &Model) -> Result<(State, Vec<Problem>), String> {
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

    // ----- fingerprints -----

    /// The state's canonical fingerprint without the fault budget (what
    /// the fault-free continuation depends on), and each message's.
    fn fingerprint(&self, model: &Model) -> (u128, Vec<u128>) {
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
            canon.raw(&node.story.claiming);
            canon.number(node.story.held.len() as u64);
            for (partition, token) in &node.story.held {
                canon.raw(partition);
                canon.zxid(token.0);
            }
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
                self.write_msg(canon, &flight.msg);
            });
        }
        canon.finish()
    }

    fn write_msg(&self, canon: &mut Canon, msg: &Msg) {
        match msg {
            Msg::Request {
                node,
                incarnation,
                session,
                command,
            } => {
                canon.number(0);
                canon.number(*node as u64);
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
                commands,
            } => {
                canon.number(4);
                canon.number(*node as u64);
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
        }
    }

    // ----- what can happen -----

    /// Whether something must happen before time may move on: a session
    /// past its deadline, a disconnected client past its timeout, or one
    /// that gave up and has not reconnected.
    fn time_is_held(&self, model: &Model) -> bool {
        let timeout = model.config.session_timeout;
        self.due_expiry().is_some()
            || self.nodes.iter().any(|n| {
                !n.connected && (n.session.is_none() || self.now >= n.last_contact + timeout)
            })
    }

    /// The first session past its deadline, if any.
    fn due_expiry(&self) -> Option<SessionId> {
        self.store.sessions().into_iter().find(|&s| {
            self.store
                .session_deadline(s)
                .is_some_and(|d| d <= self.now)
        })
    }

    /// Whether the message at `index` in flight can be delivered now: a
    /// request when it heads its connection's queue, a notification while
    /// its client is connected, a reply always.
    fn deliverable(&self, index: usize) -> bool {
        let Some(flight) = self.net.get(index) else {
            return false;
        };
        match &flight.msg {
            Msg::Request { .. } | Msg::Batch { .. } | Msg::ReadOwner { .. } => {
                let connection = flight.msg.connection();
                self.net
                    .iter()
                    .position(|f| f.msg.connection() == connection)
                    == Some(index)
            }
            Msg::Reply { .. } | Msg::Replies { .. } => true,
            Msg::Watch { node, session, .. } => {
                let n = &self.nodes[*node];
                n.connected && n.session == Some(*session)
            }
        }
    }

    /// Whether a message has stayed in flight across as many time advances
    /// as it may: time cannot move on before it is delivered or lost. A
    /// notification held for a disconnected client does not count.
    fn delay_is_spent(&self, model: &Model) -> bool {
        let max = model.config.max_delay;
        self.net.iter().any(|flight| {
            let held = match &flight.msg {
                Msg::Watch { node, .. } => !self.nodes[*node].connected,
                _ => false,
            };
            flight.age >= max && !held
        })
    }

    /// The oldest message that can be delivered now, if any.
    fn oldest_deliverable(&self) -> Option<usize> {
        (0..self.net.len()).find(|&i| self.deliverable(i))
    }

    /// What `mv` costs of the reorder budget: one to deliver another
    /// message than the oldest deliverable, or to let time advance while
    /// one is deliverable (holding it back).
    fn reorder_cost(&self, mv: Move) -> u32 {
        let oldest = self.oldest_deliverable();
        match mv {
            Move::Deliver(i) if oldest != Some(i) => 1,
            Move::Advance if oldest.is_some() => 1,
            _ => 0,
        }
    }

    /// Every step possible from here, in a fixed order.
    fn moves(&self, model: &Model) -> Vec<Move> {
        let mut moves = Vec::new();
        for (i, flight) in self.net.iter().enumerate() {
            if self.deliverable(i) && self.reorder_cost(Move::Deliver(i)) <= self.budget.reorders {
                moves.push(Move::Deliver(i));
            }
            let losable = match &flight.msg {
                Msg::Watch { event, .. } => matches!(event, Event::OwnerDeleted { .. }),
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
                if n.session.is_some() && self.now >= n.last_contact + timeout {
                    moves.push(Move::GiveUp(node));
                }
                moves.push(Move::Reconnect(node));
            } else if self.budget.disconnects > 0 && self.budget.total > 0 {
                moves.push(Move::Disconnect(node));
            }
            if self.budget.restarts > 0 && self.budget.total > 0 {
                moves.push(Move::Restart(node));
            }
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
    fn calm_move(&self, keys: &[u128]) -> Move {
        if let Some(session) = self.due_expiry() {
            return Move::Expire(session);
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

    // ----- taking a step -----

    /// Takes `mv`, returning the properties it broke.
    fn apply(&mut self, model: &Model, mv: Move) -> Vec<Problem> {
        let mut problems = Vec::new();
        let cost = self.reorder_cost(mv);
        self.budget.reorders = self.budget.reorders.saturating_sub(cost);
        if matches!(mv, Move::Lose(_) | Move::Disconnect(_) | Move::Restart(_)) {
            self.budget.total = self.budget.total.saturating_sub(1);
        }
        match mv {
            Move::Deliver(i) => {
                let flight = self.net.remove(i);
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
            Move::Advance => self.advance(model, &mut problems),
        }
        self.forget_undeliverable();
        let running = self.nodes.iter().map(|n| Seen {
            member: &n.member,
            session: n.session,
        });
        for problem in check::exclusive_ownership(&self.store, &model.layout, running) {
            problems.push(("exclusive ownership", problem));
        }
        problems
    }

    /// Drops what can never be delivered: replies and second round trips
    /// for a process that restarted, notifications for a session its
    /// client no longer holds.
    fn forget_undeliverable(&mut self) {
        let nodes = &self.nodes;
        self.net.retain(|flight| match &flight.msg {
            Msg::Request { .. }
            | Msg::Batch { .. }
            | Msg::ReadOwner { .. }
            | Msg::Reply { .. }
            | Msg::Replies { .. } => true,
            Msg::Watch { node, session, .. } => nodes[*node].session == Some(*session),
        });
    }

    fn deliver(&mut self, model: &Model, msg: Msg, problems: &mut Vec<Problem>) {
        match msg {
            Msg::Request {
                node,
                incarnation,
                session,
                command,
            } => self.serve(model, node, incarnation, session, command, problems),
            Msg::Batch {
                node,
                incarnation,
                session,
                commands,
            } => self.serve_batch(model, node, incarnation, session, commands, problems),
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

    fn lose(&mut self, model: &Model, msg: Msg, problems: &mut Vec<Problem>) {
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
    fn lose_one(&self, msg: Msg) -> Option<(usize, Event)> {
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
            Msg::Batch { .. } | Msg::Replies { .. } | Msg::Watch { .. } => return None,
        };
        Some((node, failure))
    }

    /// Carries out a request at the server, checking any commit it stores.
    fn serve(
        &mut self,
        model: &Model,
        node: usize,
        incarnation: u32,
        session: SessionId,
        command: StoreRequest,
        problems: &mut Vec<Problem>,
    ) {
        let current = self.nodes[node].incarnation == incarnation;
        if self.server_touch(model, session) && current && self.nodes[node].session == Some(session)
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
                if let Some((partition, offset, token, legit)) = commit {
                    if matches!(event, Event::CommitResult { result: Ok(()), .. }) {
                        self.check_commit(&info, &partition, offset, token, legit, problems);
                    }
                }
                if current {
                    self.send(Msg::Reply { node, event });
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
    fn serve_batch(
        &mut self,
        model: &Model,
        node: usize,
        incarnation: u32,
        session: SessionId,
        commands: Vec<StoreRequest>,
        problems: &mut Vec<Problem>,
    ) {
        let current = self.nodes[node].incarnation == incarnation;
        if self.server_touch(model, session) && current && self.nodes[node].session == Some(session)
        {
            self.nodes[node].last_contact = self.now;
        }
        let commits: Vec<_> = commands
            .iter()
            .filter_map(|c| check::arriving_commit(&self.store, &model.layout, session, &c.op))
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
                let mut commits = commits.into_iter();
                for event in &events {
                    let Event::CommitResult { result, .. } = event else {
                        continue;
                    };
                    let Some((partition, offset, token, legit)) = commits.next() else {
                        continue;
                    };
                    if result.is_ok() {
                        self.check_commit(&info, &partition, offset, token, legit, problems);
                    }
                }
                if current {
                    self.send(Msg::Replies { node, events });
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
                            command,
                        });
                    }
                }
            }
        }
    }

    /// Checks a commit the store took: by its owner, of what was processed.
    fn check_commit(
        &mut self,
        info: &MemberInfo,
        partition: &TopicPartition,
        offset: Offset,
        token: FencingToken,
        legit: bool,
        problems: &mut Vec<Problem>,
    ) {
        let processed = self
            .processed
            .get(partition)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        problems.extend(check::commit(
            &info.id,
            partition,
            offset,
            token,
            legit,
            &mut self.committed,
            processed,
        ));
    }

    /// Puts `msg` in flight.
    fn send(&mut self, msg: Msg) {
        self.net.push(Flight { msg, age: 0 });
    }

    /// Contact from a session's client: renews it, or finds it past its
    /// deadline and expires it on the spot, as the simulator's server does.
    fn server_touch(&mut self, model: &Model, session: SessionId) -> bool {
        if self.store.touch(session, self.now).is_ok() {
            return true;
        }
        if self.store.session_alive(session) {
            let fired = self.store.expire_session(session);
            self.fire(&model.layout, fired);
        }
        false
    }

    /// Puts the notifications of fired watches in flight, to the client
    /// holding the session now (none: they are lost with it).
    fn fire(&mut self, layout: &Layout, fired: Vec<WatchEvent>) {
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

    fn open_session(&mut self, model: &Model, node: usize, problems: &mut Vec<Problem>) {
        let session = self
            .store
            .open_session(self.now, model.config.session_timeout);
        let n = &mut self.nodes[node];
        n.session = Some(session);
        n.connected = true;
        n.last_contact = self.now;
        let input = Input::Event(Event::SessionEstablished { session });
        self.drive(model, node, input, problems);
    }

    fn reconnect(&mut self, model: &Model, node: usize, problems: &mut Vec<Problem>) {
        let session = self.nodes[node].session;
        match session {
            Some(session) if self.server_touch(model, session) => {
                let n = &mut self.nodes[node];
                n.connected = true;
                n.last_contact = self.now;
                let input = Input::Event(Event::SessionResumed);
                self.drive(model, node, input, problems);
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
    fn disconnect(&mut self, model: &Model, node: usize, problems: &mut Vec<Problem>) {
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
    fn restart(&mut self, model: &Model, node: usize, problems: &mut Vec<Problem>) {
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
        self.net.retain(|flight| match &flight.msg {
            Msg::Reply { node: n, .. }
            | Msg::Replies { node: n, .. }
            | Msg::ReadOwner { node: n, .. } => *n != node,
            Msg::Watch { .. } | Msg::Request { .. } | Msg::Batch { .. } => true,
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
    fn advance(&mut self, model: &Model, problems: &mut Vec<Problem>) {
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
        let Some(next) = next else { return };
        let next = model.on_grid(next).max(self.now + model.config.quantum);
        self.now = next;
        for flight in &mut self.net {
            flight.age = flight.age.saturating_add(1);
        }
        for index in 0..self.nodes.len() {
            let n = &self.nodes[index];
            if let (true, Some(session)) = (n.connected, n.session) {
                if self.server_touch(model, session) {
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
    fn drive(&mut self, model: &Model, node: usize, input: Input, problems: &mut Vec<Problem>) {
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
                                send_gathered(
                                    &mut self.net,
                                    node,
                                    n.incarnation,
                                    session,
                                    gathered,
                                );
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
    fn feed(member: &mut Member, model: &Model, now: Instant, input: Input) {
        match input {
            Input::Event(event) => member.handle_event(now, event),
            Input::Timeout => member.handle_timeout(now),
            Input::Counts => member.set_partition_counts(now, model.counts.clone()),
            Input::App(told) => told.tell(member, now),
        }
    }

    /// Notes that `offset` of `partition` was processed: whether, not how
    /// often, since a count would make every duplicate a new state.
    fn mark_processed(&mut self, partition: &TopicPartition, offset: Offset) {
        let done = self.processed.entry(partition.clone()).or_default();
        let slot = usize::try_from(offset).unwrap_or(0);
        if done.len() <= slot {
            done.resize(slot + 1, 0);
        }
        done[slot] = 1;
    }

    // ----- convergence -----

    /// Whether every partition is owned and fetched by its assigned member.
    fn converged(&self, model: &Model) -> Result<(), String> {
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
    fn continue_calmly(
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
    fn describe(&self, model: &Model, mv: Move) -> String {
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
                        format!("{verb} store -> m{node}: together {events:?}")
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
                        format!("{verb} store -> m{node}: {event:?}")
                    }
                    Some(Msg::Watch {
                        node,
                        session,
                        event,
                    }) => format!(
                        "{verb} store -> m{node}: notification {event:?} for session {}",
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

/// Puts the requests a step of `incarnation` of `node` gathered in flight
/// under `session`: a batch of each kind (at most
/// [`OPS_PER_BATCH`]), or a request for one alone.
fn send_gathered(
    net: &mut Vec<Flight>,
    node: usize,
    incarnation: u32,
    session: SessionId,
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
                    command: command.clone(),
                },
                _ => Msg::Batch {
                    node,
                    incarnation,
                    session,
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
fn app_fetch(
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
fn connection_lost(event: &Event) -> Option<Event> {
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

fn write_op(canon: &mut Canon, op: &StoreOp) {
    match op {
        StoreOp::Register { member } => {
            canon.number(10);
            write_info(canon, member);
        }
        StoreOp::Deregister => canon.number(11),
        StoreOp::WatchMembers => canon.number(12),
        StoreOp::Claim { partition } => canon.raw((13, partition)),
        StoreOp::WatchOwner { partition } => canon.raw((14, partition)),
        StoreOp::Release { partition, token } => {
            canon.raw((15, partition));
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
        } => {
            canon.raw((17, partition, offset));
            canon.zxid(token.0);
        }
        StoreOp::Heartbeat => canon.number(18),
    }
}

fn write_info(canon: &mut Canon, info: &MemberInfo) {
    canon.raw((
        info.id.as_str(),
        &info.strategy,
        info.subscription.to_string(),
    ));
}

fn write_error(canon: &mut Canon, error: &StoreError) {
    match error {
        StoreError::ConnectionLoss => canon.number(20),
        StoreError::NoNode => canon.number(21),
        StoreError::NotOwner => canon.number(22),
        StoreError::SessionExpired => canon.number(23),
        other => canon.raw((24, other.to_string())),
    }
}

fn write_result<T>(
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

fn write_event(canon: &mut Canon, node: usize, event: &Event) {
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
                ClaimOutcome::Created { token } => {
                    canon.number(0);
                    canon.zxid(token.0);
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

// ----- the search -----

/// A hasher for keys that are hashes already.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u128(&mut self, value: u128) {
        self.0 = value as u64;
    }
}

type Keyed<V> = HashMap<u128, V, BuildHasherDefault<Prehashed>>;

/// A state being expanded: its steps, and the next one to take.
struct Frame {
    index: u32,
    depth: u32,
    state: State,
    moves: Vec<Move>,
    next: usize,
}

/// The budgets and depths a state was visited with. Most states are
/// visited once: the first is kept inline.
struct Visits {
    first: (Budget, u32),
    more: Vec<(Budget, u32)>,
}

struct Search<'m> {
    model: &'m Model,
    /// Every state visited, by fingerprint (without the fault budget), with
    /// the budgets (and depths) it was visited with.
    visited: Keyed<Visits>,
    /// For each state visited: the state it was reached from and the step.
    parents: Vec<(u32, u32)>,
    /// Time to converge from each state whose continuation was followed,
    /// by fingerprint (without the fault budget).
    convergence: Keyed<Duration>,
    stack: Vec<Frame>,
    report: ExploreReport,
    started: Instant,
}

impl<'m> Search<'m> {
    fn new(model: &'m Model) -> Search<'m> {
        Search {
            model,
            visited: Keyed::default(),
            parents: Vec::new(),
            convergence: Keyed::default(),
            stack: Vec::new(),
            report: ExploreReport::default(),
            started: Instant::now(),
        }
    }

    fn run(&mut self) {
        let (state, problems) = match State::initial(self.model) {
            Ok(initial) => initial,
            Err(detail) => {
                self.fail("valid configuration", detail, u32::MAX, None, Vec::new());
                return;
            }
        };
        if let Some((property, detail)) = problems.into_iter().next() {
            self.fail(property, detail, u32::MAX, None, Vec::new());
            return;
        }
        if !self.admit(state, u32::MAX, 0, 0) {
            return;
        }
        // Depth first: memory holds the visited set and one path of
        // states, where breadth first would hold a whole frontier of them.
        while let Some(frame) = self.stack.last_mut() {
            let Some(&mv) = frame.moves.get(frame.next) else {
                self.stack.pop();
                continue;
            };
            let choice = frame.next as u32;
            frame.next += 1;
            let (parent, depth) = (frame.index, frame.depth);
            if let Move::Deliver(i) = mv {
                if let Some(Msg::Batch { .. }) = frame.state.net.get(i).map(|f| &f.msg) {
                    self.report.batch_deliveries += 1;
                }
            }
            let mut next = frame.state.clone();
            let problems = next.apply(self.model, mv);
            self.report.transitions += 1;
            if let Some((property, detail)) = problems.into_iter().next() {
                self.fail(property, detail, parent, Some(choice), Vec::new());
                return;
            }
            if !self.admit(next, parent, choice, depth + 1) {
                return;
            }
        }
    }

    /// Records a state reached from state `parent` by its step `choice`,
    /// unless it was visited already; checks its convergence and queues it
    /// for expansion within the bounds. `false` once a violation is found.
    fn admit(&mut self, state: State, parent: u32, choice: u32, depth: u32) -> bool {
        let (core, keys) = state.fingerprint(self.model);
        // A state visited with at least as much of every fault left (and,
        // under a depth bound, no deeper) has every future this one has.
        let bounded = self.model.config.max_depth.is_some();
        let seen = (state.budget, if bounded { depth } else { 0 });
        let covers = |(b, d): &(Budget, u32)| b.covers(&seen.0) && (!bounded || *d <= seen.1);
        match self.visited.get_mut(&core) {
            Some(visits) => {
                if covers(&visits.first) || visits.more.iter().any(covers) {
                    return true;
                }
                visits.more.push(seen);
            }
            None => {
                self.visited.insert(
                    core,
                    Visits {
                        first: seen,
                        more: Vec::new(),
                    },
                );
            }
        }
        let index = self.parents.len() as u32;
        self.parents.push((parent, choice));
        self.report.states += 1;
        self.report.max_depth = self.report.max_depth.max(depth);
        let every = self.model.config.progress_every;
        if every > 0 && self.report.states.is_multiple_of(every) {
            eprintln!(
                "explore: {} states, {} transitions, depth {}, {:.0?}",
                self.report.states,
                self.report.transitions,
                depth,
                self.started.elapsed()
            );
        }
        if self.model.config.convergence {
            if let Err((detail, continuation)) = self.converges(&state, core, keys) {
                self.fail("convergence", detail, index, None, continuation);
                return false;
            }
        }
        let deep = self.model.config.max_depth.is_some_and(|d| depth >= d);
        let full = self
            .model
            .config
            .max_states
            .is_some_and(|m| self.report.states >= m);
        if deep || full {
            self.report.cut += 1;
        } else {
            let moves = state.moves(self.model);
            self.stack.push(Frame {
                index,
                depth,
                state,
                moves,
                next: 0,
            });
        }
        true
    }

    /// Follows the fault-free continuation from `state` until it converges
    /// or meets a state whose time to converge is known, and remembers the
    /// time for every state on the way. `Err` with why and the
    /// continuation's steps when it does not converge within the bound.
    fn converges(
        &mut self,
        state: &State,
        core: u128,
        keys: Vec<u128>,
    ) -> Result<(), (String, Vec<String>)> {
        if self.convergence.contains_key(&core) {
            return Ok(());
        }
        let model = self.model;
        let bound = model.config.convergence_bound();
        let mut s = state.clone();
        let start = s.now;
        let mut trail: Vec<(u128, Instant)> = Vec::new();
        let (mut key, mut keys) = (core, keys);
        let total = loop {
            if let Some(&rest) = self.convergence.get(&key) {
                break s.now.saturating_duration_since(start) + rest;
            }
            trail.push((key, s.now));
            let waited = s.now.saturating_duration_since(start);
            if s.converged(model).is_ok() {
                break waited;
            }
            if waited > bound || trail.len() > 100_000 {
                break Duration::MAX;
            }
            let mv = s.calm_move(&keys);
            let problems = s.apply(model, mv);
            self.report.lookahead_steps += 1;
            if let Some((property, detail)) = problems.into_iter().next() {
                return Err(
                    self.explain(state, format!("{property} violated on the way: {detail}"))
                );
            }
            (key, keys) = s.fingerprint(model);
        };
        if total > bound {
            let why = match state.clone().continue_calmly(model, &mut |_, _| {}) {
                Err(why) => why,
                Ok(took) => format!("converged only after {took:?}, beyond {bound:?}"),
            };
            return Err(self.explain(state, why));
        }
        self.report.slowest_convergence = self.report.slowest_convergence.max(total);
        for (key, at) in trail {
            let rest = total.saturating_sub(at.saturating_duration_since(start));
            self.convergence.insert(key, rest);
        }
        Ok(())
    }

    /// `detail` with the fault-free continuation from `state`, described.
    fn explain(&self, state: &State, detail: String) -> (String, Vec<String>) {
        let mut steps = Vec::new();
        let mut s = state.clone();
        let model = self.model;
        let _ = s.continue_calmly(model, &mut |s, mv| steps.push(s.describe(model, mv)));
        (detail, steps)
    }

    /// Records the violation found in the state `index` (or after its step
    /// `choice`), with the path that leads there.
    fn fail(
        &mut self,
        property: &'static str,
        detail: String,
        index: u32,
        choice: Option<u32>,
        continuation: Vec<String>,
    ) {
        let mut moves = Vec::new();
        let mut at = index;
        while at != u32::MAX {
            let (parent, mv) = self.parents[at as usize];
            if parent != u32::MAX {
                moves.push(mv as usize);
            }
            at = parent;
        }
        moves.reverse();
        if let Some(choice) = choice {
            moves.push(choice as usize);
        }
        let steps = match replay(&self.model.config, &moves) {
            Ok(replayed) => replayed.steps,
            Err(error) => vec![format!("(the path does not replay: {error})")],
        };
        self.report.violation = Some(Counterexample {
            property,
            detail,
            moves,
            steps,
            continuation,
        });
    }
}
