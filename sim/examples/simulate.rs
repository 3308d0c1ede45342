//! Runs the deterministic simulator over many seeds and reports every
//! violated property with the seed that replays it.
//!
//! ```text
//! cargo run --release -p tenure-sim --example simulate -- --seeds 10000
//! cargo run --release -p tenure-sim --example simulate -- --first 7000000 --seeds 2000
//! cargo run --release -p tenure-sim --example simulate -- --seed 42
//! ```
//!
//! Flags: `--seeds N` (runs N seeds, from 0 or from `--first`), `--first S`
//! (the first seed: runs seeds S..S+N, so that each run can cover seeds no
//! run covered before), `--seed S` (replays one seed),
//! `--members M`, `--partitions P` (split over two topics), `--strategy
//! NAME`, `--chaos-secs S`, `--threads T`, `--quiet-faults` (churn only), `--trace TEXT` (print
//! every event, command and fault mentioning TEXT, e.g. `a/1`), `--ensemble` (a replicated
//! ZooKeeper in place of one node, with `--counted-after-ms MS` and `--reads-renew` to model
//! a backend that counts renewals otherwise, and `--tools-without-sync` the operator's tooling
//! reading a follower without a sync), `--etcd` (a 3-server etcd cluster whose servers lose
//! the quorum, for a while or for good; `--without-require-leader` models the backend before it
//! asked for a server with a leader and tried a lease grant again, `--answers-renew` one that
//! counts every answer as a renewal).
//! A violation prints its seed and the command that replays it; the last
//! line is `seeds=N violations=V sim_seconds_per_wall_second=X` (with
//! `first=S` when the run did not start at seed 0).

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::Parser;
use tenure_sim::{run, Ensemble, EtcdCluster, SimConfig, SimReport};

/// Runs the deterministic simulator over many seeds and reports every
/// violated property with the seed that replays it.
#[derive(Parser)]
#[command(name = "simulate")]
struct Args {
    /// How many seeds to run.
    #[arg(long = "seeds", default_value_t = 100)]
    count: u64,
    /// The first of them: runs seeds S..S+N; pick a new S per run to cover
    /// new seeds.
    #[arg(long, default_value_t = 0)]
    first: u64,
    /// Runs this seed alone, verbosely: how a failure is replayed.
    #[arg(long)]
    seed: Option<u64>,
    /// Members at the start.
    #[arg(long)]
    members: Option<usize>,
    /// Partitions, split over two topics.
    #[arg(long)]
    partitions: Option<u32>,
    /// The assignment strategy: sticky, range or round-robin.
    #[arg(long)]
    strategy: Option<String>,
    /// Seconds of faults and churn.
    #[arg(long = "chaos-secs", value_parser = parse_secs)]
    chaos: Option<Duration>,
    /// Threads running seeds (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
    /// Churn only, no faults.
    #[arg(long = "quiet-faults", action = clap::ArgAction::SetFalse)]
    faults: bool,
    /// Prints every seed's report.
    #[arg(long)]
    verbose: bool,
    /// Prints every event, command and fault mentioning TEXT (e.g. `a/1`).
    #[arg(long)]
    trace: Option<String>,
    /// Applications process up to three batches of a partition at once,
    /// finishing in any order, and commit what they finished above the
    /// frontier in the progress record (checked: no recorded work is handed
    /// out again).
    #[arg(long = "out-of-order")]
    out_of_order: bool,
    /// Runs every seed on a replicated ZooKeeper ensemble (followers that
    /// report late and are cut off from their leader) instead of one node.
    #[arg(long)]
    ensemble: bool,
    /// On the ensemble: how late the backend says the leader may count a
    /// write or sync it answered, in milliseconds (default: a third of the
    /// session, as the ZooKeeper backend says; 0 counts every answer at once).
    #[arg(long = "counted-after-ms", requires = "ensemble")]
    counted_after_ms: Option<u64>,
    /// On the ensemble: the backend counts answers to reads as renewals
    /// too (a follower's word taken for the leader's).
    #[arg(long = "reads-renew", requires = "ensemble")]
    reads_renew: bool,
    /// On the ensemble: the operator's tooling reads its follower's state
    /// without a sync first.
    #[arg(long = "tools-without-sync", requires = "ensemble")]
    tools_without_sync: bool,
    /// Runs every seed on a 3-server etcd cluster (servers cut off from the
    /// quorum, for a while or for good) instead of one node.
    #[arg(long, conflicts_with = "ensemble")]
    etcd: bool,
    /// On the etcd cluster: the backend asks for no leader and tries a
    /// lease grant once, as it did before it was fixed.
    #[arg(long = "without-require-leader", requires = "etcd")]
    without_require_leader: bool,
    /// On the etcd cluster: the backend counts every answer as a renewal,
    /// as on one node (only keep-alives renew an etcd lease).
    #[arg(long = "answers-renew", requires = "etcd")]
    answers_renew: bool,
}

fn parse_secs(text: &str) -> Result<Duration, String> {
    text.parse()
        .map(Duration::from_secs)
        .map_err(|_| format!("{text:?} is not a number of seconds"))
}

fn parse() -> Result<Args, String> {
    let mut args = Args::parse();
    // A replayed seed is shown whole.
    args.verbose |= args.seed.is_some();
    if args.seed.is_none() && args.first.checked_add(args.count).is_none() {
        return Err(format!(
            "--first {} with --seeds {} runs past the last seed",
            args.first, args.count
        ));
    }
    Ok(args)
}

impl Args {
    /// Threads to run seeds on.
    fn threads(&self) -> usize {
        self.threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1)
    }

    /// The first seed to run and how many, in order from it.
    fn seeds(&self) -> (u64, u64) {
        match self.seed {
            Some(seed) => (seed, 1),
            None => (self.first, self.count),
        }
    }
}

fn config(args: &Args, seed: u64) -> SimConfig {
    let mut config = SimConfig::new(seed);
    if let Some(members) = args.members {
        config.members = members;
    }
    if let Some(partitions) = args.partitions {
        let first = partitions.div_ceil(2);
        config.topics = vec![
            ("a".to_owned(), first),
            ("b".to_owned(), partitions - first),
        ];
    }
    if let Some(strategy) = &args.strategy {
        config.strategy = strategy.clone();
    }
    if let Some(chaos) = args.chaos {
        config.chaos = chaos;
    }
    config.faults = args.faults;
    config.out_of_order = args.out_of_order;
    config.trace = args.trace.clone();
    if args.ensemble {
        let mut ensemble = Ensemble::zookeeper(config.session_timeout);
        if let Some(ms) = args.counted_after_ms {
            ensemble.counted_after = Duration::from_millis(ms);
        }
        ensemble.reads_renew = args.reads_renew;
        ensemble.tools_sync = !args.tools_without_sync;
        config.ensemble = Some(ensemble);
    }
    if args.etcd {
        let mut cluster = if args.without_require_leader {
            EtcdCluster::without_require_leader()
        } else {
            EtcdCluster::etcd()
        };
        cluster.answers_renew = args.answers_renew;
        config.etcd = Some(cluster);
    }
    config
}

/// The flags besides the seeds that shape a run, to repeat in a replay
/// command.
fn replay_flags(args: &Args) -> String {
    let mut flags = String::new();
    if let Some(members) = args.members {
        flags += &format!(" --members {members}");
    }
    if let Some(partitions) = args.partitions {
        flags += &format!(" --partitions {partitions}");
    }
    if let Some(strategy) = &args.strategy {
        flags += &format!(" --strategy {strategy}");
    }
    if let Some(chaos) = args.chaos {
        flags += &format!(" --chaos-secs {}", chaos.as_secs());
    }
    if !args.faults {
        flags += " --quiet-faults";
    }
    if args.ensemble {
        flags += " --ensemble";
    }
    if let Some(ms) = args.counted_after_ms {
        flags += &format!(" --counted-after-ms {ms}");
    }
    if args.reads_renew {
        flags += " --reads-renew";
    }
    if args.tools_without_sync {
        flags += " --tools-without-sync";
    }
    if args.etcd {
        flags += " --etcd";
    }
    if args.without_require_leader {
        flags += " --without-require-leader";
    }
    if args.answers_renew {
        flags += " --answers-renew";
    }
    flags
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    let (first, total) = args.seeds();
    let next = AtomicU64::new(0);
    let results: Mutex<Vec<SimReport>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        let threads = usize::try_from(total).unwrap_or(usize::MAX);
        for _ in 0..args.threads().min(threads.max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                // In range: `parse` checked that first + total fits.
                let seed = first + i;
                let report = run(&config(&args, seed));
                for violation in &report.violations {
                    eprintln!("VIOLATION {violation}");
                }
                if !report.violations.is_empty() {
                    eprintln!(
                        "seed {seed} failed; replay it with: cargo run --release -p tenure-sim --example simulate -- --seed {seed}{}",
                        replay_flags(&args)
                    );
                }
                if args.verbose {
                    eprintln!(
                        "seed={} steps={} simulated={:?} converged_after={:?} claims={} batched_claims={} refused_batches={} faults={} elections={} isolations={} grants_moved={} resumed_sessions={} messages={} duplicates={} reported={:?}",
                        report.seed,
                        report.steps,
                        report.simulated,
                        report.converged_after,
                        report.claims,
                        report.batched_claims,
                        report.refused_batches,
                        report.faults,
                        report.elections,
                        report.isolations,
                        report.grants_moved,
                        report.resumed_sessions,
                        report.messages,
                        report.duplicates,
                        report.reported
                    );
                }
                if let Ok(mut results) = results.lock() {
                    results.push(report);
                }
            });
        }
    });
    let wall = started.elapsed().as_secs_f64();
    let results = results.into_inner().unwrap_or_default();
    let violations: usize = results.iter().map(|r| r.violations.len()).sum();
    let simulated: f64 = results.iter().map(|r| r.simulated.as_secs_f64()).sum();
    let worst = results
        .iter()
        .filter_map(|r| r.converged_after)
        .max()
        .unwrap_or_default();
    let duplicates: u64 = results.iter().map(|r| r.duplicates).sum();
    let messages: u64 = results.iter().map(|r| r.messages).sum();
    let resumed: u64 = results.iter().map(|r| r.resumed_sessions).sum();
    let elections: u64 = results.iter().map(|r| r.elections).sum();
    let isolations: u64 = results.iter().map(|r| r.isolations).sum();
    let grants_moved: u64 = results.iter().map(|r| r.grants_moved).sum();
    println!(
        "slowest convergence after chaos: {worst:?}; messages={messages} duplicates={duplicates} \
         resumed_sessions={resumed} elections={elections} isolations={isolations} \
         grants_moved={grants_moved}"
    );
    let shown = match (args.seed, args.first) {
        (None, first) if first != 0 => format!(" first={first}"),
        _ => String::new(),
    };
    println!(
        "seeds={}{shown} violations={} sim_seconds_per_wall_second={:.0}",
        results.len(),
        violations,
        simulated / wall.max(1e-9)
    );
    if violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
