//! An exhaustive search of every state a small group can reach: a few real
//! [`Member`](tenure_core::protocol::Member)s on the store model ([`tenure_core::model`]), with every order in
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
//!   through the [`adapter`](tenure_core::model::adapter), a reply or notification is handed to its
//!   member): the oldest one, or, spending one of
//!   [`ExploreConfig::reorders`], any other deliverable one. A connection's
//!   requests are applied in the order they were sent, as ZooKeeper applies
//!   a session's; replies and notifications may arrive in any order. A
//!   notification waits while its member is disconnected, as ZooKeeper and
//!   etcd deliver them after a reconnect;
//! - advance the time to the next deadline: the earliest of the members'
//!   timers ([`Member::poll_timeout`](tenure_core::protocol::Member::poll_timeout)), the next ping of a connected client
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
//! # On a replicated ZooKeeper
//!
//! With [`ExploreConfig::ensemble`], the members sit on the ensemble the
//! simulator models ([`Ensemble`]): each member's follower counts its
//! session's requests and pings and reports them to the leader when the
//! leader pings, every half tick (rounded up to the grid); the report is
//! a message in flight of its own, which reaches the leader ahead of any
//! write the same follower forwards after it; the leader alone renews and
//! expires sessions, from the reports it receives, and a server that
//! expires a session closes its client's connection. An answer through
//! the leader renews the member's lease as the backend says (from when the
//! request was sent, counted after a delay); a follower's answer to a read
//! renews nothing. Its own faults, within [`ExploreConfig::cuts`]: a
//! member's follower is cut off from its leader at any moment. While cut,
//! it answers reads and pings, holds the writes and syncs of its client
//! (and whatever follows them on the connection), the report it had on its
//! way and the notifications it would relay, and reports nothing (the
//! leader's ping waits). It heals at any later moment (the report it held
//! arrives first, the writes it held go on, and the ping that waited is
//! answered with a new report), or, after `syncLimit` ticks, drops its
//! clients, which reconnect to another server. And, within
//! [`ExploreConfig::elections`], the leader is lost: every server closes
//! its clients' connections (reports on their way are lost with the old
//! leader), and the new leader restarts every session's timeout, as
//! ZooKeeper's does; the clients reconnect as it serves (what a longer
//! outage does is a disconnection's).
//!
//! # On etcd
//!
//! With [`ExploreConfig::etcd`], the store keeps leases as etcd does: a
//! lease, granted for the session rounded up to whole seconds, is renewed
//! by keep-alives alone, which a connected client sends a third of the
//! TTL after the last was answered (as the time moves); the answer, a
//! message in flight of its own, tells the member the lease was renewed
//! after it was sent. A request renews nothing; one under a lease past
//! its deadline finds it revoked. The member counts a heartbeat
//! (`LeaseTimeToLive`) from when it was sent less the part of the TTL
//! gone, in whole seconds rounded down, and no other answer. A server cut
//! off from the quorum never applies what reaches it: here, a lost
//! message; the simulator has the servers themselves.
//!
//! Time cannot pass a moment by which something must happen: a session past
//! its deadline is expired, and a disconnected client past its session
//! timeout gives up or reconnects (and one that gave up reconnects; on
//! etcd it only reconnects, as the backend gives a session up only when a
//! server says its lease is gone), and
//! a follower cut off for `syncLimit` ticks heals or drops its clients,
//! before the next advance. Letting time advance while a message could be
//! delivered also spends a reorder, and a message crosses at most
//! [`ExploreConfig::max_delay`] advances (what a cut holds waits as long as
//! the cut).
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

use std::fmt;
use std::time::Duration;

use tenure_core::assignment;
use tenure_core::config::Config;
use tenure_core::types::Offset;

use crate::ensemble::Ensemble;
use crate::etcd::EtcdCluster;

mod ensemble;
mod etcd;
mod fingerprint;
mod model;
mod search;
mod state;
mod step;

use self::model::Model;
use self::search::Search;
use self::state::State;

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
    /// On an [`Ensemble`]: cuts of a member's follower from its leader that
    /// may happen (each heals at any later moment, or ends with the
    /// follower dropping its clients after `syncLimit` ticks).
    pub cuts: u32,
    /// On an [`Ensemble`]: leader elections that may happen (the leader
    /// lost: every follower closes its clients' connections, and the new
    /// leader restarts every session's timeout).
    pub elections: u32,
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
    /// A replicated ZooKeeper ensemble in place of one store node (`None`:
    /// one node, its own leader). Its half tick and `syncLimit` are
    /// rounded up to the time grid.
    pub ensemble: Option<Ensemble>,
    /// Leases as an [`EtcdCluster`] keeps them, in place of one ZooKeeper
    /// node's sessions (not with `ensemble`): only keep-alives renew a
    /// lease, granted for the session rounded up to whole seconds, and
    /// the member counts them as the etcd backend does. Its servers'
    /// faults are the simulator's (here, a request that a server without
    /// a leader never applies is a lost message).
    pub etcd: Option<EtcdCluster>,
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
            cuts: 1,
            elections: 1,
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
            ensemble: None,
            etcd: None,
        }
    }

    /// The same group on a ZooKeeper ensemble
    /// ([`Ensemble::zookeeper`]) with `syncLimit` 2, the shortest a
    /// follower keeps its clients in common configurations: a cut can
    /// last until the follower drops them. The half tick (0.375 s) is
    /// rounded up to 0.4 s on the grid, more than the suspension margin
    /// (0.3 s), so activity a follower has not reported yet can outlast
    /// the margin.
    pub fn on_an_ensemble(members: usize, partitions: u32) -> ExploreConfig {
        let mut config = ExploreConfig::new(members, partitions);
        let mut ensemble = Ensemble::zookeeper(config.session_timeout);
        ensemble.sync_limit = 2;
        config.ensemble = Some(ensemble);
        config
    }

    /// The same group with leases as etcd keeps them, and a 3 s session:
    /// whole seconds, so that the lease's TTL is the session and no
    /// rounding up leaves the member time in hand.
    pub fn on_etcd(members: usize, partitions: u32) -> ExploreConfig {
        ExploreConfig {
            etcd: Some(EtcdCluster::etcd()),
            session_timeout: Duration::from_secs(3),
            ..ExploreConfig::new(members, partitions)
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
        let store = match &self.ensemble {
            Some(e) => format!(
                "a ZooKeeper ensemble (tick {:?}, syncLimit {}, <={} follower cut, <={} election; \
                 answers through the leader counted after {:?}{})",
                e.tick,
                e.sync_limit,
                self.cuts,
                self.elections,
                e.counted_after,
                if e.reads_renew { ", reads renew" } else { "" }
            ),
            None => match &self.etcd {
                Some(etcd) => format!(
                    "etcd's leases (TTL {:?}, renewed by keep-alives only{})",
                    etcd.ttl(self.session_timeout),
                    if etcd.answers_renew {
                        ", every answer counted"
                    } else {
                        ""
                    }
                ),
                None => "one store node".to_owned(),
            },
        };
        format!(
            "{store}; faults<={} in all (<={} lost message, <={} disconnect/expiry, <={} restart); \
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
