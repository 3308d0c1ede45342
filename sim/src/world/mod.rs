//! A deterministic simulation of a whole group: N members, each driven by
//! its own [`Member`](tenure_core::protocol::Member), one in-memory store, one log per partition and an
//! application that processes and acknowledges, all on a virtual clock and
//! all from one seed.
//!
//! During the chaos phase it injects faults (delayed and reordered
//! deliveries, dropped connections, requests with unknown outcome, session
//! expiry seen by the client before the server, member crash and restart,
//! pauses longer than the session timeout, late watch notifications,
//! applications that drain slower than the processing timeout; on a
//! replicated [`Ensemble`], followers cut off from their leader; on an
//! [`EtcdCluster`], servers cut off from the quorum, for a while or for
//! good) and churn (joins, leaves, partitions added). Then everything
//! heals (but a server cut off for good), and the group must converge
//! within [`SimConfig::convergence_bound`].
//!
//! After every step it checks: exclusive ownership (a member feeds its
//! application a partition only while the store records its live session as
//! the owner with the same fencing token), fenced and monotone commits, no
//! commit past an unprocessed message; on an etcd cluster, that a join
//! gets its lease while a quorum serves; at the end, convergence and no
//! lost messages. Every violation names the seed and the step, and
//! [`run`] with the same config replays it exactly.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use tenure_core::assignment;
use tenure_core::config::Config;

use crate::ensemble::Ensemble;
use crate::etcd::EtcdCluster;

mod checks;
mod ensemble;
mod etcd;
mod faults;
mod member;
mod operator;
mod parts;
mod run;
mod setup;
mod store;

use self::parts::World;

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
    /// A replicated ZooKeeper ensemble in place of one store node; `None`:
    /// one node, its own leader.
    pub ensemble: Option<Ensemble>,
    /// A replicated etcd cluster in place of one store node (not with
    /// `ensemble`); `None`: one node, its own leader.
    pub etcd: Option<EtcdCluster>,
    /// The members' applications process up to three batches of a
    /// partition at once, finishing in any order (as key-ordered lanes
    /// do), report what they finished above the frontier, and start a
    /// claim past what its progress record names done; checked at every
    /// hand-out: no message the store's progress record names done is
    /// handed out again. Off: one batch at a time, in order.
    pub out_of_order: bool,
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
            ensemble: None,
            etcd: None,
            out_of_order: false,
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
    /// Commits the store took that carried a progress record (work done
    /// above the committed offset, with [`SimConfig::out_of_order`]).
    pub progress_commits: u64,
    /// Of those, the claims that succeeded in a batch of a step's claims
    /// (one `multi`).
    pub batched_claims: u64,
    /// Batches of claims the store refused as a whole (a record was
    /// there), whose claims were sent again one by one.
    pub refused_batches: u64,
    /// Faults injected.
    pub faults: u64,
    /// Of those, on an ensemble or an etcd cluster: leader elections.
    pub elections: u64,
    /// Of the faults, on an etcd cluster: servers cut off from the quorum.
    pub isolations: u64,
    /// On an etcd cluster: tries of a lease grant that a server refused or
    /// held, followed by a try on the next server.
    pub grants_moved: u64,
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
