//! A deterministic simulation of a whole group: N members, each driven by
//! its own [`Member`], one in-memory store, one log per partition and an
//! application that processes and acknowledges, all on a virtual clock and
//! all from one seed.
//!
//! During the chaos phase it injects faults (delayed and reordered
//! deliveries, dropped connections, requests with unknown outcome, session
//! expiry seen by the client before the server, member crash and restart,
//! pauses longer than the session timeout, late watch notifications,
//! applications that drain slower than the processing timeout) and churn
//! (joins, leaves, partitions added). Then everything heals, and the group
//! must converge within [`SimConfig::convergence_bound`].
//!
//! After every step it checks: exclusive ownership (a member feeds its
//! application a partition only while the store records its live session as
//! the owner with the same fencing token), fenced and monotone commits, no
//! commit past an unprocessed message; at the end, convergence and no lost
//! messages. Every violation names the seed and the step, and
//! [`run`] with the same config replays it exactly.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::fmt;
use std::time::{Duration, Instant};

use crate::app::{Applied, Holdings, Told};
use crate::check::{self, Seen, Story};
use tenure_core::assignment::{self, PartitionCounts};
use tenure_core::config::Config;
use tenure_core::error::{Error, StoreError};
use tenure_core::model::adapter::{self, Batched, Execution};
use tenure_core::model::store::{Store, WatchEvent};
use tenure_core::protocol::{AppEvent, Event, FetchCommand, Member, Output, StoreOp, StoreRequest};
use tenure_core::records::{Layout, OPS_PER_BATCH};
use tenure_core::rng::SplitMix64;
use tenure_core::types::{FencingToken, MemberId, Offset, RequestId, SessionId, TopicPartition};

/// What to simulate.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The seed every random choice comes from.
    pub seed: u64,
    /// Members at the start.
    pub members: usize,
    /// Topics with their partition counts at the start.
    pub topics: Vec<(String, u32)>,
    /// How long faults and churn go on.
    pub chaos: Duration,
    /// Inject faults during the chaos phase.
    pub faults: bool,
    /// Members join and leave, and partitions are added, during the chaos
    /// phase.
    pub churn: bool,
    /// The assignment strategy's name.
    pub strategy: String,
    /// The members' session timeout.
    pub session_timeout: Duration,
    /// The members' processing timeout.
    pub processing_timeout: Duration,
    /// The members' commit interval.
    pub commit_interval: Duration,
    /// The members' longest retry backoff.
    pub backoff_max: Duration,
    /// The longest one-way network delay.
    pub max_delay: Duration,
    /// Print every event, command and fault whose text contains this
    /// (for example `"a/1"`; `""` prints everything) to stderr.
    pub trace: Option<String>,
}

impl SimConfig {
    /// A small group under faults and churn: 4 members, topics `a` (6
    /// partitions) and `b` (4), 20 s of chaos, sticky assignment.
    pub fn new(seed: u64) -> SimConfig {
        SimConfig {
            seed,
            members: 4,
            topics: vec![("a".to_owned(), 6), ("b".to_owned(), 4)],
            chaos: Duration::from_secs(20),
            faults: true,
            churn: true,
            strategy: "sticky".to_owned(),
            session_timeout: Duration::from_secs(2),
            processing_timeout: Duration::from_millis(1500),
            commit_interval: Duration::from_millis(500),
            backoff_max: Duration::from_millis(400),
            max_delay: Duration::from_millis(20),
            trace: None,
        }
    }

    /// The time after the chaos phase within which every partition must be
    /// owned and fetched by its assigned member: a stale record of a dead
    /// session lasts up to a session timeout (plus the server's lag in
    /// expiring it, and a client may take another session timeout to find
    /// out its own session is gone), a release waits up to the processing
    /// timeout for the drain, and a claim may sit out one backoff.
    pub fn convergence_bound(&self) -> Duration {
        self.session_timeout * 2
            + self.processing_timeout
            + self.backoff_max
            + Duration::from_secs(1)
    }

    fn member_config(&self, id: &str) -> Result<Config, String> {
        let topics: Vec<&str> = self.topics.iter().map(|(t, _)| t.as_str()).collect();
        let strategy = assignment::by_name(&self.strategy)
            .ok_or_else(|| format!("unknown strategy {:?}", self.strategy))?;
        Config::new("sim", id, topics)
            .map(|config| {
                config
                    .with_session_timeout(self.session_timeout)
                    .with_processing_timeout(self.processing_timeout)
                    .with_commit_interval(self.commit_interval)
                    .with_backoff(
                        Duration::from_millis(10).min(self.backoff_max),
                        self.backoff_max,
                    )
                    .with_strategy(strategy)
            })
            .map_err(|e| e.to_string())
    }
}

/// A broken property, with what is needed to replay it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The seed of the run.
    pub seed: u64,
    /// The step at which it was seen.
    pub step: u64,
    /// Simulated time since the start.
    pub at: Duration,
    /// Which property.
    pub property: &'static str,
    /// What exactly.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed={} step={} t={:?}: {} violated: {} (replay: simulate --seed {})",
            self.seed, self.step, self.at, self.property, self.detail, self.seed
        )
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct SimReport {
    /// The seed.
    pub seed: u64,
    /// Steps taken.
    pub steps: u64,
    /// Simulated time covered.
    pub simulated: Duration,
    /// Properties broken (empty for a good run).
    pub violations: Vec<Violation>,
    /// How long after the chaos phase the group converged.
    pub converged_after: Option<Duration>,
    /// Messages in the logs at the end.
    pub messages: u64,
    /// Messages processed more than once (each extra time counts).
    pub duplicates: u64,
    /// Ownership changes (claims that succeeded).
    pub claims: u64,
    /// Of those, the claims that succeeded in a batch of a step's claims
    /// (one `multi`).
    pub batched_claims: u64,
    /// Batches of claims the store refused as a whole (a record was
    /// there), whose claims were sent again one by one.
    pub refused_batches: u64,
    /// Faults injected.
    pub faults: u64,
    /// Restarted processes that resumed the session their previous one
    /// left (static membership).
    pub resumed_sessions: u64,
    /// Errors the members reported, by kind.
    pub reported: BTreeMap<&'static str, u64>,
}

/// Runs one simulation to its end.
pub fn run(config: &SimConfig) -> SimReport {
    match World::new(config.clone()) {
        Ok(mut world) => {
            world.run();
            world.report
        }
        Err(detail) => SimReport {
            seed: config.seed,
            violations: vec![Violation {
                seed: config.seed,
                step: 0,
                at: Duration::ZERO,
                property: "valid simulation config",
                detail,
            }],
            ..SimReport::default()
        },
    }
}

/// One in-flight store command of a member, remembered so that a dropped
/// connection can fail it.
#[derive(Clone, Debug)]
struct Pending {
    command: StoreRequest,
}

#[derive(Clone, Debug)]
struct Batch {
    partition: TopicPartition,
    token: FencingToken,
    first: Offset,
    end: Offset,
    done_at: Instant,
}

/// The application of one member: fetches, processes in batches, acks.
#[derive(Clone, Debug, Default)]
struct App {
    holdings: Holdings,
    batches: Vec<Batch>,
    /// Processing time per batch; longer than the processing timeout while
    /// the slow-drain fault is on.
    batch_time: Duration,
    /// What the member's application events have told so far.
    story: Story,
}

/// One member process.
struct Node {
    id: MemberId,
    member: Option<Member>,
    incarnation: u32,
    session: Option<SessionId>,
    /// The session a crashed static member left, for its next process to
    /// resume.
    resumable: Option<SessionId>,
    connected: bool,
    epoch: u64,
    last_contact: Instant,
    paused_until: Option<Instant>,
    leaving: bool,
    gone: bool,
    in_flight: BTreeMap<RequestId, Pending>,
    /// The claims, offset reads, commits and releases the member's steps
    /// at this instant gave, sent together when the instant is over.
    gathered: Vec<StoreRequest>,
    last_request_arrival: Instant,
    last_reply_delivery: Instant,
    app: App,
    /// What a driver would have published after the member's last step,
    /// with the member's change count then ([`Member::changes`]).
    published: Option<(u64, Published)>,
}

/// What a driver publishes of a member: assigned, owned (with tokens),
/// fetching, settled.
type Published = (
    BTreeSet<TopicPartition>,
    Vec<(TopicPartition, FencingToken)>,
    Vec<TopicPartition>,
    bool,
);

fn published(member: &Member) -> Published {
    (
        member.assigned().clone(),
        member.owned().map(|(p, t)| (p.clone(), t)).collect(),
        member.fetching().map(|(p, _)| p.clone()).collect(),
        member.is_settled(),
    )
}

impl Node {
    /// The connection this node has now.
    fn link(&self) -> Link {
        Link {
            incarnation: self.incarnation,
            epoch: self.epoch,
        }
    }

    fn running(&self, now: Instant) -> bool {
        self.member.is_some() && !self.gone && self.paused_until.is_none_or(|t| now >= t)
    }
}

/// One connection of one process of a node: what travels over it is lost
/// when the process restarts (a new incarnation) or the connection breaks
/// (a new epoch).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Link {
    incarnation: u32,
    epoch: u64,
}

#[derive(Clone, Debug)]
enum Fault {
    Disconnect {
        node: usize,
        length: Duration,
    },
    Reconnect {
        node: usize,
        epoch: u64,
    },
    ClientExpiry {
        node: usize,
        epoch: u64,
    },
    Pause {
        node: usize,
        length: Duration,
    },
    Wake {
        node: usize,
    },
    Crash {
        node: usize,
        restart_after: Duration,
        /// A static member: the restarted process resumes the session if
        /// it is still alive.
        resume: bool,
    },
    Restart {
        node: usize,
    },
    SlowDrain {
        node: usize,
        length: Duration,
    },
    FastDrain {
        node: usize,
    },
    Join,
    Leave {
        node: usize,
    },
    GrowPartitions {
        topic: usize,
    },
}

#[derive(Clone, Debug)]
enum Action {
    /// A store command reaches the server.
    Request {
        node: usize,
        link: Link,
        session: SessionId,
        command: StoreRequest,
    },
    /// Requests of one kind of one step reach the server in one request
    /// (a `multi`): their writes land together or not at all.
    Batch {
        node: usize,
        link: Link,
        session: SessionId,
        commands: Vec<StoreRequest>,
    },
    /// The second round trip of a claim that met an existing record.
    ReadOwner {
        node: usize,
        link: Link,
        id: RequestId,
        partition: TopicPartition,
    },
    /// A reply reaches the member (dropped if the connection changed).
    Reply {
        node: usize,
        link: Link,
        event: Event,
    },
    /// A watch notification reaches the member's session.
    Watch {
        node: usize,
        session: SessionId,
        event: Event,
    },
    /// A local event (session change, application progress).
    Local {
        node: usize,
        incarnation: u32,
        event: Input,
    },
    Fault(Fault),
}

/// What a member is handed: what its store said, or what its application
/// did.
#[derive(Clone, Debug)]
enum Input {
    Store(Event),
    App(Told),
    Counts(PartitionCounts),
    Shutdown,
}

struct World {
    config: SimConfig,
    rng: SplitMix64,
    start: Instant,
    now: Instant,
    quiet_at: Instant,
    end_at: Instant,
    seq: u64,
    queue: BinaryHeap<Reverse<(Instant, u64)>>,
    actions: BTreeMap<u64, Action>,
    store: Store,
    layout: Layout,
    nodes: Vec<Node>,
    counts: PartitionCounts,
    hw: BTreeMap<TopicPartition, Offset>,
    processed: BTreeMap<TopicPartition, Vec<u32>>,
    committed: BTreeMap<TopicPartition, Offset>,
    /// The newest token any member's claim took effect with, per partition.
    claimed_tokens: BTreeMap<TopicPartition, FencingToken>,
    session_owner: BTreeMap<SessionId, usize>,
    server_lag: Duration,
    next_produce: Instant,
    next_app_tick: Instant,
    report: SimReport,
}

const APP_TICK: Duration = Duration::from_millis(25);
const PRODUCE_EVERY: Duration = Duration::from_millis(100);
const BATCH: Offset = 4;

impl World {
    fn new(config: SimConfig) -> Result<World, String> {
        // Virtual time starts at an arbitrary instant; only differences
        // matter, so runs are identical whatever the real clock says.
        let start = Instant::now();
        let mut rng = SplitMix64::new(config.seed);
        let server_lag = Duration::from_millis(rng.below(300));
        let quiet_at = start + config.chaos;
        let end_at = quiet_at
            + config.convergence_bound()
            + config.commit_interval * 4
            + Duration::from_secs(2);
        let mut counts = PartitionCounts::new();
        for (topic, n) in &config.topics {
            assignment_topic_check(topic)?;
            counts.insert(topic.clone(), *n);
        }
        let mut world = World {
            rng,
            start,
            now: start,
            quiet_at,
            end_at,
            seq: 0,
            queue: BinaryHeap::new(),
            actions: BTreeMap::new(),
            store: Store::new(),
            layout: Layout::new("", "sim"),
            nodes: Vec::new(),
            counts,
            hw: BTreeMap::new(),
            processed: BTreeMap::new(),
            committed: BTreeMap::new(),
            claimed_tokens: BTreeMap::new(),
            session_owner: BTreeMap::new(),
            server_lag,
            next_produce: start,
            next_app_tick: start,
            report: SimReport {
                seed: config.seed,
                ..SimReport::default()
            },
            config,
        };
        world.sync_logs();
        for _ in 0..world.config.members.max(1) {
            world.add_node()?;
        }
        if world.config.faults || world.config.churn {
            world.schedule_chaos();
        }
        Ok(world)
    }

    fn at(&mut self, time: Instant, action: Action) {
        self.seq += 1;
        self.queue.push(Reverse((time, self.seq)));
        self.actions.insert(self.seq, action);
    }

    /// Hands `event` to the member running on node `index` at `time`. It
    /// goes to the process running now: if the node restarts before `time`,
    /// the new process never sees it, as a real one never sees what its
    /// predecessor was told.
    fn local(&mut self, time: Instant, index: usize, event: Input) {
        let incarnation = self.nodes[index].incarnation;
        self.at(
            time,
            Action::Local {
                node: index,
                incarnation,
                event,
            },
        );
    }

    fn delay(&mut self) -> Duration {
        let max = self.config.max_delay.as_micros() as u64;
        Duration::from_micros(1 + self.rng.below(max.max(1)))
    }

    fn elapsed(&self) -> Duration {
        self.now.saturating_duration_since(self.start)
    }

    fn violation(&mut self, property: &'static str, detail: String) {
        // One violation of a kind is enough to replay; more would drown it.
        if self
            .report
            .violations
            .iter()
            .any(|v| v.property == property)
        {
            return;
        }
        self.report.violations.push(Violation {
            seed: self.config.seed,
            step: self.report.steps,
            at: self.elapsed(),
            property,
            detail,
        });
    }

    fn sync_logs(&mut self) {
        for (topic, n) in &self.counts {
            for p in 0..*n {
                let tp = TopicPartition::new(topic, p);
                self.hw.entry(tp.clone()).or_insert(0);
                self.processed.entry(tp).or_default();
            }
        }
    }

    // ----- membership of the simulation -----

    fn add_node(&mut self) -> Result<usize, String> {
        let index = self.nodes.len();
        let id = format!("m{index:02}");
        let node = Node {
            id: MemberId::new(&id).map_err(|e| e.to_string())?,
            member: None,
            incarnation: 0,
            session: None,
            resumable: None,
            connected: false,
            epoch: 0,
            last_contact: self.now,
            paused_until: None,
            leaving: false,
            gone: false,
            in_flight: BTreeMap::new(),
            gathered: Vec::new(),
            last_request_arrival: self.now,
            last_reply_delivery: self.now,
            published: None,
            app: App {
                batch_time: Duration::from_millis(30),
                ..App::default()
            },
        };
        self.nodes.push(node);
        self.start_member(index)?;
        Ok(index)
    }

    fn start_member(&mut self, index: usize) -> Result<(), String> {
        let config = self.config.member_config(self.nodes[index].id.as_str())?;
        let seed = self.rng.next_u64();
        let member = Member::new(config, seed, self.now).map_err(|e| e.to_string())?;
        let node = &mut self.nodes[index];
        node.member = Some(member);
        node.published = None;
        node.incarnation += 1;
        node.in_flight.clear();
        node.gathered.clear();
        node.app.holdings.clear();
        node.app.batches.clear();
        node.app.story = Story::default();
        match node.resumable.take() {
            Some(session) if self.store.session_alive(session) => {
                self.resume_session(index, session)
            }
            _ => self.open_session(index),
        }
        let counts = self.counts.clone();
        self.local(self.now, index, Input::Counts(counts));
        Ok(())
    }

    fn open_session(&mut self, index: usize) {
        let session = self
            .store
            .open_session(self.now, self.config.session_timeout);
        self.session_owner.insert(session, index);
        self.establish(index, session);
    }

    /// A static member's new process resumes the session its previous one
    /// left: the session, then the claims it holds.
    fn resume_session(&mut self, index: usize, session: SessionId) {
        self.report.resumed_sessions += 1;
        let _ = self.store.touch(session, self.now);
        let partitions: Vec<TopicPartition> = self
            .store
            .ephemerals(session)
            .iter()
            .filter_map(|path| match self.layout.classify(path) {
                Some(tenure_core::records::Watched::Owner(partition)) => Some(partition),
                _ => None,
            })
            .collect();
        self.establish(index, session);
        let now = self.now;
        self.local(now, index, Input::Store(Event::ClaimsHeld { partitions }));
    }

    /// The node's client is connected under `session`, and says so.
    fn establish(&mut self, index: usize, session: SessionId) {
        let now = self.now;
        let node = &mut self.nodes[index];
        node.session = Some(session);
        node.connected = true;
        node.epoch += 1;
        node.last_contact = now;
        self.local(
            now,
            index,
            Input::Store(Event::SessionEstablished { session }),
        );
    }

    fn active_nodes(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| !self.nodes[i].gone && !self.nodes[i].leaving)
            .collect()
    }

    // ----- chaos -----

    fn schedule_chaos(&mut self) {
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
                _ => None,
            };
            if let Some(fault) = fault {
                let when = self.start + t;
                self.at(when, Action::Fault(fault));
            }
            t += Duration::from_millis(200 + self.rng.below(1800));
        }
    }

    fn random_length(&mut self, max: Duration, remaining: Duration) -> Duration {
        let cap = max.min(remaining.saturating_sub(Duration::from_millis(1)));
        Duration::from_millis(self.rng.below(cap.as_millis() as u64 + 1))
    }

    fn apply_fault(&mut self, fault: Fault) {
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
                let expiry = self.nodes[node].last_contact + self.config.session_timeout;
                self.at(expiry, Action::Fault(Fault::ClientExpiry { node, epoch }));
            }
            Fault::Reconnect { node, epoch } => {
                if self.nodes[node].epoch != epoch || self.nodes[node].member.is_none() {
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

    fn disconnect(&mut self, index: usize) {
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

    fn reconnect(&mut self, index: usize) {
        let now = self.now;
        self.trace(Some(index), &("reconnecting", self.nodes[index].session));
        match self.nodes[index].session {
            Some(session) if self.store.session_alive(session) => {
                let node = &mut self.nodes[index];
                node.connected = true;
                node.epoch += 1;
                node.last_contact = now;
                let _ = self.store.touch(session, now);
                self.local(now, index, Input::Store(Event::SessionResumed));
            }
            Some(_) => {
                self.nodes[index].session = None;
                self.local(now, index, Input::Store(Event::SessionExpired));
                self.open_session(index);
            }
            None => self.open_session(index),
        }
    }

    fn wake(&mut self, index: usize) {
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

    fn run(&mut self) {
        loop {
            let next = self.next_time();
            let Some(next) = next else { break };
            if next > self.end_at {
                break;
            }
            self.now = next;
            self.report.steps += 1;
            self.step();
            self.check_ownership();
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

    fn next_time(&self) -> Option<Instant> {
        let mut next = self.next_app_tick.min(self.next_produce);
        if let Some(Reverse((t, _))) = self.queue.peek() {
            next = next.min(*t);
        }
        if let Some(deadline) = self.store.next_deadline() {
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

    fn step(&mut self) {
        let now = self.now;
        // The server's expiry runs a little behind the deadlines.
        if let Some(cutoff) = now.checked_sub(self.server_lag) {
            let fired = self.store.expire_due(cutoff);
            self.deliver_watches(fired);
        }
        // Connected, running clients ping continuously.
        for index in 0..self.nodes.len() {
            let node = &self.nodes[index];
            if node.connected && node.running(now) {
                if let Some(session) = node.session {
                    if self.server_touch(session) {
                        self.nodes[index].last_contact = now;
                    }
                }
            }
        }
        // A server that expires a session closes its connection: the client
        // finds out at once (it reconnects and is told the session expired).
        for index in 0..self.nodes.len() {
            let node = &self.nodes[index];
            let dead = node.session.is_some_and(|s| !self.store.session_alive(s));
            if dead && node.connected && node.running(now) {
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

    fn perform(&mut self, action: Action) {
        let now = self.now;
        match action {
            Action::Fault(fault) => self.apply_fault(fault),
            // Sent over a connection the node no longer has: lost with it, a
            // request never applied, a reply never delivered.
            Action::Request { node, link, .. }
            | Action::Batch { node, link, .. }
            | Action::ReadOwner { node, link, .. }
            | Action::Reply { node, link, .. }
                if self.nodes[node].link() != link => {}
            Action::Request {
                node,
                session,
                command,
                ..
            } => self.serve(node, session, command),
            Action::Batch {
                node,
                session,
                commands,
                ..
            } => self.serve_batch(node, session, commands),
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
                if !n.connected {
                    // Delivered after the reconnection, if the session lives.
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

    fn trace(&self, index: Option<usize>, what: &dyn fmt::Debug) {
        if let Some(filter) = &self.config.trace {
            let text = format!("{what:?}");
            if text.contains(filter.as_str()) {
                let who = index.map_or("world".to_owned(), |i| self.nodes[i].id.to_string());
                eprintln!("{:>10.3?} {who}: {text}", self.elapsed());
            }
        }
    }

    fn feed(&mut self, index: usize, input: Input) {
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

    fn reply(&mut self, index: usize, event: Event) {
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

    fn deliver_watches(&mut self, fired: Vec<WatchEvent>) {
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
    fn server_touch(&mut self, session: SessionId) -> bool {
        if self.store.touch(session, self.now).is_ok() {
            return true;
        }
        if self.store.session_alive(session) {
            let fired = self.store.expire_session(session);
            self.deliver_watches(fired);
        }
        false
    }

    fn serve(&mut self, index: usize, session: SessionId, command: StoreRequest) {
        let now = self.now;
        self.server_touch(session);
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
                if let Some((partition, offset, token, legit)) = commit {
                    if matches!(event, Event::CommitResult { result: Ok(()), .. }) {
                        self.check_commit(index, &partition, offset, token, legit);
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
    fn answer(&mut self, index: usize, events: Vec<Event>) {
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
            for event in events {
                self.reply(index, event);
            }
        }
    }

    /// Carries out requests of one kind a step sent together: in one step
    /// whole, or, refused as a whole, sent again one by one once the
    /// refusal is back.
    fn serve_batch(&mut self, index: usize, session: SessionId, commands: Vec<StoreRequest>) {
        self.server_touch(session);
        let info = match &self.nodes[index].member {
            Some(member) => member.info().clone(),
            None => return,
        };
        let commits: Vec<_> = commands
            .iter()
            .filter_map(|c| check::arriving_commit(&self.store, &self.layout, session, &c.op))
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
                let mut commits = commits.into_iter();
                for event in &events {
                    match event {
                        Event::ClaimResult {
                            result: Ok(tenure_core::protocol::ClaimOutcome::Created { .. }),
                            ..
                        } => {
                            self.report.claims += 1;
                            self.report.batched_claims += 1;
                        }
                        Event::CommitResult { result, .. } => {
                            if let (Some((partition, offset, token, legit)), Ok(())) =
                                (commits.next(), result)
                            {
                                self.check_commit(index, &partition, offset, token, legit);
                            }
                        }
                        _ => {}
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

    fn check_commit(
        &mut self,
        index: usize,
        partition: &TopicPartition,
        offset: Offset,
        token: FencingToken,
        legit: bool,
    ) {
        let who = self.nodes[index].id.clone();
        let processed = self
            .processed
            .get(partition)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let problems = check::commit(
            &who,
            partition,
            offset,
            token,
            legit,
            &mut self.committed,
            processed,
        );
        for (property, detail) in problems {
            self.violation(property, detail);
        }
    }

    /// Carries out every command a member has for us, and checks what it
    /// tells its application. Stops reach the application before the
    /// releases that follow them reach the store.
    fn drain_commands(&mut self, index: usize) {
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
    fn app_event(&mut self, index: usize, event: AppEvent) {
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
    fn fail(&mut self, index: usize, command: StoreRequest, error: StoreError) {
        self.local(self.now, index, Input::Store(command.failed(error)));
    }

    /// Starts or stops the fetching of the member's application.
    fn fetch(&mut self, index: usize, command: FetchCommand) {
        self.trace(Some(index), &("->", &command));
        let hw = &self.hw;
        let newest = |partition: &TopicPartition| hw.get(partition).copied().unwrap_or(0);
        if let Applied::Stopping(..) = self.nodes[index].app.holdings.apply(command, newest) {
            self.finish_drains(index);
        }
    }

    /// Sends a request to the store over the member's connection.
    fn dispatch(&mut self, index: usize, store_command: StoreRequest) {
        self.trace(Some(index), &("->", &store_command));
        // The order of the member's output: a partition leaves the fetcher
        // before its release (or a new claim of it) leaves for the store.
        if let StoreOp::Release { partition, .. } | StoreOp::Claim { partition } = &store_command.op
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
    fn send_gathered(&mut self, index: usize) {
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
    fn send(&mut self, index: usize, session: SessionId, mut commands: Vec<StoreRequest>) {
        let delay = self.delay();
        let node = &mut self.nodes[index];
        let arrival = (self.now + delay).max(node.last_request_arrival);
        node.last_request_arrival = arrival;
        let link = node.link();
        for command in &commands {
            let pending = Pending {
                command: command.clone(),
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

    fn app_tick(&mut self, index: usize) {
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
        for batch in done {
            let counts = self.processed.entry(batch.partition.clone()).or_default();
            for offset in batch.first..batch.end {
                let slot = offset as usize;
                if counts.len() <= slot {
                    counts.resize(slot + 1, 0);
                }
                counts[slot] += 1;
            }
            let processed = Input::App(Told::Processed {
                partition: batch.partition,
                token: batch.token,
                offset: batch.end - 1,
            });
            self.local(now, index, processed);
        }
        let node = &mut self.nodes[index];
        let busy: BTreeSet<TopicPartition> = node
            .app
            .batches
            .iter()
            .map(|b| b.partition.clone())
            .collect();
        let batch_time = node.app.batch_time;
        for (partition, (token, next)) in node.app.holdings.fetching.iter_mut() {
            if busy.contains(partition) {
                continue;
            }
            let hw = self.hw.get(partition).copied().unwrap_or(0);
            if *next < hw {
                let end = (*next + BATCH).min(hw);
                node.app.batches.push(Batch {
                    partition: partition.clone(),
                    token: *token,
                    first: *next,
                    end,
                    done_at: now + batch_time,
                });
                *next = end;
            }
        }
        self.finish_drains(index);
    }

    fn finish_drains(&mut self, index: usize) {
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

    fn finish_leaving(&mut self, index: usize) {
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

    fn check_ownership(&mut self) {
        let now = self.now;
        let running = self.nodes.iter().filter_map(|node| match &node.member {
            Some(member) if node.running(now) => Some(Seen {
                member,
                session: node.session,
            }),
            _ => None,
        });
        let problems = check::exclusive_ownership(&self.store, &self.layout, running);
        for problem in problems {
            self.violation("exclusive ownership", problem);
        }
    }

    /// Whether every partition is owned and fetched by the member the final
    /// assignment names.
    fn converged(&self) -> Result<(), String> {
        let live: Vec<Seen<'_>> = self
            .nodes
            .iter()
            .filter(|node| !node.gone)
            .filter_map(|node| {
                node.member.as_ref().map(|member| Seen {
                    member,
                    session: node.session,
                })
            })
            .collect();
        check::converged(
            &self.store,
            &self.layout,
            &self.config.strategy,
            &self.counts,
            &live,
        )
    }

    fn check_convergence(&mut self) {
        if self.report.converged_after.is_some() {
            return;
        }
        if self.converged().is_ok() {
            self.report.converged_after = Some(self.now.saturating_duration_since(self.quiet_at));
        }
    }

    fn final_checks(&mut self) {
        let bound = self.config.convergence_bound();
        match self.report.converged_after {
            Some(after) if after <= bound => {}
            Some(after) => self.violation(
                "convergence",
                format!("converged {after:?} after the chaos, beyond the bound {bound:?}"),
            ),
            None => {
                let why = self.converged().err().unwrap_or_default();
                self.violation("convergence", format!("never converged: {why}"));
            }
        }
        let mut messages = 0u64;
        let mut duplicates = 0u64;
        let mut lost = None;
        let mut behind = None;
        for (partition, hw) in &self.hw {
            let counts = self
                .processed
                .get(partition)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            messages += *hw as u64;
            for offset in 0..*hw {
                match counts.get(offset as usize).copied().unwrap_or(0) {
                    0 => {
                        lost.get_or_insert((partition.clone(), offset));
                    }
                    n => duplicates += u64::from(n - 1),
                }
            }
            let committed = self.committed.get(partition).copied().unwrap_or(0);
            if committed != *hw {
                behind.get_or_insert((partition.clone(), committed, *hw));
            }
        }
        self.report.messages = messages;
        self.report.duplicates = duplicates;
        if let Some((partition, offset)) = lost {
            self.violation(
                "no lost messages",
                format!("{partition} offset {offset} was never processed"),
            );
        }
        if let Some((partition, committed, hw)) = behind {
            self.violation(
                "offsets committed",
                format!("{partition} committed {committed}, end offset {hw}"),
            );
        }
    }
}

fn assignment_topic_check(topic: &str) -> Result<(), String> {
    tenure_core::types::validate_topic(topic).map_err(|e| e.to_string())
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
