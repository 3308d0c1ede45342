//! Searches every state a small group of real members can reach on the
//! store model, with every order of deliveries and a bounded number of
//! faults, and checks the simulator's properties in each (see
//! `tenure_sim::explore`).
//!
//! ```text
//! cargo run --release -p tenure-sim --example explore -- --members 2 --partitions 2
//! cargo run --release -p tenure-sim --example explore -- --partitions 3 --max-depth 30
//! cargo run --release -p tenure-sim --example explore -- --partitions 3 --replay 0,4,1
//! ```
//!
//! Flags: `--members M` (default 2), `--partitions P` (default 2),
//! `--messages N` per partition (default 1), `--losses L`, `--disconnects
//! D`, `--restarts R` (the fault budget, default 1 each), `--max-depth D`
//! (default: none, the search runs until it closes), `--max-states N`,
//! `--strategy NAME`, `--ensemble` (on a replicated ZooKeeper: followers
//! that report the sessions' activity late and can be cut off from their
//! leader, with `--cuts C` and `--elections E` (default 1 each),
//! `--sync-limit N` (default 2),
//! `--counted-after-ms MS` and `--reads-renew` to try other ways of
//! counting renewals), `--etcd` (leases as etcd keeps them: renewed by
//! keep-alives alone, counted as the etcd backend does; `--answers-renew`
//! counts every answer instead), `--no-convergence` (skip the fault-free
//! continuations), `--progress N` (a line on stderr every N states),
//! `--replay I,J,...` (take those steps from the start, printing each, the
//! properties they break and the fault-free continuation).
//!
//! A violation prints the property, the path of steps that reaches it and
//! the `--replay` argument that takes it again, and the exit code is 1.
//! Last line: `explore members=M partitions=P states=N transitions=T
//! batch_deliveries=B max_depth=D violations=V bound=<what the search
//! covered>`.

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use tenure_sim::{explore, replay, ExploreConfig};

/// Explores every state a small group can reach, checking the guarantees
/// in each.
#[derive(Parser)]
#[command(name = "explore")]
struct Flags {
    /// Members in the group.
    #[arg(long, default_value_t = 2)]
    members: usize,
    /// Partitions of the one topic.
    #[arg(long, default_value_t = 2)]
    partitions: u32,
    /// Messages per partition.
    #[arg(long)]
    messages: Option<i64>,
    /// Lost messages at most.
    #[arg(long)]
    losses: Option<u32>,
    /// Reorders at most, or `any`.
    #[arg(long)]
    reorders: Option<String>,
    /// Time advances a message may cross.
    #[arg(long)]
    max_delay: Option<u32>,
    /// An application that processes and drains only when the search says.
    #[arg(long)]
    lazy_app: bool,
    /// Disconnections or expiries at most.
    #[arg(long)]
    disconnects: Option<u32>,
    /// Member restarts at most.
    #[arg(long)]
    restarts: Option<u32>,
    /// Faults of every kind at most, together.
    #[arg(long)]
    faults: Option<u32>,
    /// How deep the search goes.
    #[arg(long)]
    max_depth: Option<u32>,
    /// How many states it visits at most.
    #[arg(long)]
    max_states: Option<u64>,
    /// The assignment strategy: sticky, range or round-robin.
    #[arg(long)]
    strategy: Option<String>,
    /// Skip the convergence check from every state.
    #[arg(long)]
    no_convergence: bool,
    /// Print progress every N states.
    #[arg(long)]
    progress: Option<u64>,
    /// Runs the group on a replicated ZooKeeper ensemble (followers that
    /// report activity to the leader every half tick, and that can be cut
    /// off from it).
    #[arg(long)]
    ensemble: bool,
    /// On the ensemble: follower cuts at most.
    #[arg(long, requires = "ensemble")]
    cuts: Option<u32>,
    /// On the ensemble: leader elections at most.
    #[arg(long, requires = "ensemble")]
    elections: Option<u32>,
    /// On the ensemble: ticks a cut-off follower keeps its clients.
    #[arg(long, requires = "ensemble")]
    sync_limit: Option<u32>,
    /// On the ensemble: how late the backend says the leader may count an
    /// answer through it (0: every answer counted at once).
    #[arg(long = "counted-after-ms", requires = "ensemble")]
    counted_after_ms: Option<u64>,
    /// On the ensemble: the backend counts a follower's answers to reads
    /// as renewals.
    #[arg(long, requires = "ensemble")]
    reads_renew: bool,
    /// Leases as etcd keeps them: renewed by keep-alives alone, and
    /// counted as the etcd backend counts them.
    #[arg(long, conflicts_with = "ensemble")]
    etcd: bool,
    /// On etcd: the backend counts every answer as a renewal, at once.
    #[arg(long = "answers-renew", requires = "etcd")]
    answers_renew: bool,
    /// Replays a path of moves (`I,J,...`) instead of searching.
    #[arg(long, value_delimiter = ',')]
    replay: Option<Vec<usize>>,
}

impl Flags {
    fn config(&self) -> Result<ExploreConfig, String> {
        let mut config = if self.ensemble {
            ExploreConfig::on_an_ensemble(self.members, self.partitions)
        } else if self.etcd {
            ExploreConfig::on_etcd(self.members, self.partitions)
        } else {
            ExploreConfig::new(self.members, self.partitions)
        };
        if let Some(ensemble) = &mut config.ensemble {
            if let Some(limit) = self.sync_limit {
                ensemble.sync_limit = limit;
            }
            if let Some(ms) = self.counted_after_ms {
                ensemble.counted_after = std::time::Duration::from_millis(ms);
            }
            ensemble.reads_renew = self.reads_renew;
        }
        if let Some(etcd) = &mut config.etcd {
            etcd.answers_renew = self.answers_renew;
        }
        if let Some(cuts) = self.cuts {
            config.cuts = cuts;
        }
        if let Some(elections) = self.elections {
            config.elections = elections;
        }
        if let Some(messages) = self.messages {
            config.messages = messages;
        }
        if let Some(losses) = self.losses {
            config.losses = losses;
        }
        if let Some(reorders) = &self.reorders {
            config.reorders = match reorders.as_str() {
                "any" => None,
                n => Some(
                    n.parse()
                        .map_err(|_| format!("--reorders: {n:?} is neither a number nor any"))?,
                ),
            };
        }
        if let Some(max_delay) = self.max_delay {
            config.max_delay = max_delay;
        }
        config.eager_app = !self.lazy_app;
        if let Some(disconnects) = self.disconnects {
            config.disconnects = disconnects;
        }
        if let Some(restarts) = self.restarts {
            config.restarts = restarts;
        }
        config.faults = self.faults.or(config.faults);
        config.max_depth = self.max_depth.or(config.max_depth);
        config.max_states = self.max_states.or(config.max_states);
        if let Some(strategy) = &self.strategy {
            config.strategy = strategy.clone();
        }
        if self.no_convergence {
            config.convergence = false;
        }
        if let Some(every) = self.progress {
            config.progress_every = every;
        }
        Ok(config)
    }
}

fn main() -> ExitCode {
    let flags = Flags::parse();
    let config = match flags.config() {
        Ok(config) => config,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let config = &config;
    if let Some(moves) = &flags.replay {
        return match replay(config, moves) {
            Ok(replayed) => {
                for (i, step) in replayed.steps.iter().enumerate() {
                    println!("{i:>4}. {step}");
                    for (at, property, detail) in &replayed.problems {
                        if *at == i {
                            println!("      VIOLATION {property}: {detail}");
                        }
                    }
                }
                println!("fault-free continuation:");
                for step in &replayed.continuation {
                    println!("      {step}");
                }
                match &replayed.converged {
                    Ok(took) => println!("converged after {took:?}"),
                    Err(why) => println!("did not converge: {why}"),
                }
                if replayed.problems.is_empty() && replayed.converged.is_ok() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(error) => {
                eprintln!("replay: {error}");
                ExitCode::from(2)
            }
        };
    }
    let started = Instant::now();
    let report = match explore(config) {
        Ok(report) => report,
        Err(error) => {
            eprintln!("explore: {error}");
            return ExitCode::from(2);
        }
    };
    let violations = usize::from(report.violation.is_some());
    if let Some(violation) = &report.violation {
        println!("VIOLATION {violation}");
    }
    println!(
        "explored in {:.1?}: {} continuation steps beyond the search, slowest convergence {:?}",
        started.elapsed(),
        report.lookahead_steps,
        report.slowest_convergence
    );
    println!(
        "explore members={} partitions={} states={} transitions={} batch_deliveries={} max_depth={} violations={} bound={}",
        config.members,
        config.partitions,
        report.states,
        report.transitions,
        report.batch_deliveries,
        report.max_depth,
        violations,
        config.bound(&report)
    );
    if violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
