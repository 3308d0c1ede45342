//! A chaos run: members of one group as separate OS processes, against the
//! real store and Kafka of `scripts/services`, under a schedule of faults;
//! every message they hand out is logged and audited at the end.
//!
//! ```text
//! cargo run --release -p tenure-chaos -- --store zookeeper|etcd [--nodes 1|3] [--seconds N] [--seed S]
//! ```
//!
//! Each member is this program run as `chaos member ...` (`member.rs`); it
//! reaches the store through a proxy of its own (this program run as
//! `chaos proxy ...`, `proxy.rs`) and Kafka directly, so that freezing its
//! proxy (SIGSTOP) cuts it off from the store while it still fetches. A
//! producer writes to the topic throughout. The faults, drawn from the seed
//! (`schedule.rs`) and carried out by `faults.rs`: a member killed
//! (SIGKILL), paused past its session (SIGSTOP, then SIGCONT), cut off from
//! the store past its session, a member joining, one leaving (SIGTERM: it
//! closes), a store node restarted, and on a 3-node store its leader killed
//! (and started again later). The schedule is printed first; the same seed
//! gives the same schedule.
//!
//! At the end every process is let go, the backlog consumed, the group
//! closed, and one line printed (`audit.rs`):
//!
//! ```text
//! lost=0 stale=0 shared_tokens=0 offsets_at_end=true duplicates=N max_unowned_ms=M
//! ```
//!
//! - `lost`: offsets below the log end that no member handed out;
//! - `stale`: messages handed out under a fencing token older than one
//!   already handed out for that partition (by the wall clock of this
//!   machine, which every process shares);
//! - `shared_tokens`: tokens handed out by two members;
//! - `offsets_at_end`: the committed offsets equal the log end once the
//!   group closed;
//! - `duplicates`: messages handed out again (at-least-once: after a kill,
//!   what was handed out and not committed is handed out again);
//! - `max_unowned_ms`: the longest time a partition was held by no member,
//!   by the members' own assignment changes, leaving out the time the store
//!   itself was down.
//!
//! A second line gives the failover figure: for every partition a killed
//! member held, the time from the SIGKILL to the first message from its
//! next owner, minus the session timeout; and a third names the slowest,
//! with the single node's restarts that fell within it (a restarted
//! ZooKeeper starts every session's timeout afresh). The run exits
//! non-zero on any violation (lost, stale, shared tokens, offsets not at
//! the end).
//!
//! ## `--sink postgres`: exactly once into PostgreSQL
//!
//! ```text
//! cargo build --features etcd,postgres --example exactly_once_postgres
//! cargo run -p tenure-chaos -- --sink postgres --store zookeeper|etcd ...
//! ```
//!
//! The members are the facade's `exactly_once_postgres` example (found in
//! `examples/` beside this program's own directory of the build, as cargo
//! lays them out: `target/debug/examples/` for `target/debug/chaos`)
//! instead of `chaos member`, each behind its own proxy to the store as
//! above, writing every message as a row of a table of this run's own
//! (`chaos_<seed>_<ms>`, in `TENURE_POSTGRES`) with each partition's next
//! offset in `tenure_offsets`, one transaction per batch, fenced by the
//! claim's token. Each batch takes 200 ms of work before its transaction
//! (a few ms), so a member paused past its session nearly always holds a
//! batch it has not written: the write it attempts when it goes on is
//! refused, because the partition's next owner fenced it meanwhile. (One
//! stopped inside a transaction instead finds it ended by the database, and
//! its claim gone: nothing to refuse.) A transaction idle for a second (a
//! quarter of a shorter session) is ended by the database, so that a
//! member stopped inside one does not hold up the next owner's fence.
//!
//! The schedule starts with the faults exactly-once is about, in an order
//! drawn from the seed: two pauses past the session (so that a pause that
//! happens to catch its member inside a transaction is not the run's
//! only one), a cut off from the store, a kill and a store node restart;
//! the rest are drawn as above.
//! At the end the group is let go and closed as above (the backlog is
//! consumed once every partition's next offset in the offsets table is its
//! log end), and the table audited (`sink_audit.rs`):
//!
//! ```text
//! exactly_once: messages=N rows=N duplicates=0 lost=0 offsets_at_end=true token_inversions=0 fenced_writes_refused=K fenced_messages=M failures=F
//! ```
//!
//! - `messages`: the sum of the log ends; `rows`: the rows written;
//! - `duplicates`: rows beyond one per (partition, offset);
//! - `lost`: offsets below the log end with no row;
//! - `offsets_at_end`: every partition's next offset in the offsets table
//!   is its log end;
//! - `token_inversions`: rows whose token is lower than that of a row of
//!   an earlier offset of their partition (a stale write that got through);
//! - `fenced_writes_refused`, `fenced_messages`: the writes the database
//!   refused as stale (the members' `f` lines that dropped messages), and
//!   their messages;
//! - `failures`: failed attempts the members retried (their `x` lines).
//!
//! The run succeeds only with no duplicate, nothing lost, the offsets at
//! the end, no token inversion and at least one write refused by the fence
//! (a run that never exercised it proves nothing, and says so). The table
//! is dropped after a run that succeeded and kept for reading otherwise.

mod audit;
mod faults;
mod member;
mod partition;
mod producer;
mod proxy;
mod run;
mod schedule;
mod signals;
mod sink_audit;
mod soak;
mod store;
mod transcript;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};

use crate::producer::Producer;
use crate::run::{Connect, Run, SinkSetup};
use crate::schedule::schedule;
use crate::store::{Store, StoreKind};
use tenure_chaos_lines::wall_ms;

/// A chaos run: members of one group as separate processes against the
/// servers of `scripts/services`, under a schedule of faults drawn from a
/// seed, and an audit of every message they handed out (or, with `--sink
/// postgres`, of the table they wrote). Exits 1 on a violation, 2 if the
/// run could not be made.
#[derive(Parser)]
#[command(
    name = "chaos",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Cli {
    #[command(subcommand)]
    role: Option<Role>,
    #[command(flatten)]
    run: RunArgs,
}

/// What this program is run as, besides a chaos run: its own members and
/// proxies.
#[derive(Subcommand)]
enum Role {
    /// A member process: joins, prints what it hands out, closes on SIGTERM.
    #[command(hide = true)]
    Member(member::MemberArgs),
    /// A TCP proxy in front of every store node.
    #[command(hide = true)]
    Proxy(proxy::ProxyArgs),
}

/// A chaos run's flags.
#[derive(clap::Args)]
struct RunArgs {
    /// The store the members coordinate through (its servers from
    /// `TENURE_ZOOKEEPER`, `TENURE_ETCD` or their `_CLUSTER`).
    #[arg(long, value_enum, required = true)]
    store: Option<StoreKind>,
    /// The store's nodes: 1, or 3 for the cluster of `scripts/services`.
    #[arg(long, default_value_t = 1, value_parser = nodes)]
    nodes: u8,
    /// How long the faults go on.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// The schedule's seed [default: from the clock and the process id].
    #[arg(long)]
    seed: Option<u64>,
    /// Members at the start.
    #[arg(long, default_value_t = 3)]
    members: usize,
    /// Partitions of the run's topic.
    #[arg(long, default_value_t = 6)]
    partitions: u32,
    /// The members' session timeout.
    #[arg(long, default_value_t = 4_000)]
    session_ms: u64,
    /// Messages per second written to the topic throughout.
    #[arg(long, default_value_t = 300, value_name = "MESSAGES_PER_S")]
    rate: u64,
    /// Exactly once into PostgreSQL: the members are the
    /// `exactly_once_postgres` example, and the audit reads its table.
    #[arg(long, value_enum)]
    sink: Option<Sink>,
    /// Which store nodes each member connects to: all of them, one each in
    /// turn (so that some are on the minority side of a partition), or
    /// every other member to all and the rest to one.
    #[arg(long, value_enum, default_value = "all")]
    connect: Connect,
    /// Start with one partition of each kind between the store's nodes
    /// (`--nodes 3`): the leader isolated, a 1|2 split, a follower cut
    /// from the leader. Partitions are drawn on 3 nodes without it too.
    #[arg(long)]
    network_partitions: bool,
    /// Every that many seconds, a sample of the members' memory and
    /// descriptors and the store's watches and request rate, and at the
    /// end the growth between the first and the last (a soak: `--seconds
    /// 3600 --sample-every 60`). 0: none.
    #[arg(long, default_value_t = 0, value_name = "SECONDS")]
    sample_every: u64,
    /// The chaos tool of the previous release (`scripts/previous-release`
    /// builds it): the members at the start run it as theirs, and are
    /// upgraded to this one in turn while the group runs (a rolling
    /// upgrade); members that join run this one.
    #[arg(long, value_name = "PROGRAM")]
    previous: Option<std::path::PathBuf>,
    /// How the members process: `partition`, a message at a time as it
    /// comes; `key`, key-ordered lanes (8 in flight per partition), each
    /// message on a task of its own that takes 0 to 19 ms, audited for
    /// per-key order as well.
    #[arg(long, value_enum, default_value = "partition")]
    ordering: Ordering,
    /// Members m1 to mN are never killed, made to leave, paused or cut
    /// off: in a soak, processes that live the whole run.
    #[arg(long, default_value_t = 0, value_name = "N")]
    spare: usize,
}

/// How the members process (`--ordering`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Ordering {
    /// `ProcessingOrder::Partition`.
    Partition,
    /// `ProcessingOrder::Key`.
    Key,
}

/// Where `--sink` sends the messages.
#[derive(Clone, Copy, ValueEnum)]
enum Sink {
    Postgres,
}

fn nodes(value: &str) -> Result<u8, String> {
    match value {
        "1" => Ok(1),
        "3" => Ok(3),
        _ => Err("1 or 3 (the single node or the cluster of scripts/services)".to_owned()),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("chaos: no tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.role {
        Some(Role::Member(args)) => runtime.block_on(member::run(args)),
        Some(Role::Proxy(args)) => runtime.block_on(proxy::run(args)),
        None => runtime.block_on(orchestrate(cli.run)),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(message) => {
            eprintln!("chaos: {message}");
            ExitCode::from(2)
        }
    }
}

/// The run: the schedule, the topic and its producer, the members, the
/// faults in their time, then everything let go and the audit.
async fn orchestrate(args: RunArgs) -> Result<bool, String> {
    let kind = args.store.ok_or("--store is missing")?;
    let (nodes, seconds, initial) = (args.nodes, args.seconds, args.members);
    let (partitions, session_ms) = (args.partitions, args.session_ms);
    let seed = args
        .seed
        .unwrap_or_else(|| wall_ms() ^ u64::from(std::process::id()));
    let store = Store::from_env(kind, nodes)?;
    let kafka = std::env::var("TENURE_KAFKA").map_err(|_| {
        "TENURE_KAFKA is not set: start the servers with `eval \"$(scripts/services start)\"`"
            .to_owned()
    })?;
    let sink = match args.sink {
        None => None,
        Some(Sink::Postgres) => Some(SinkSetup::locate(seed)?),
    };

    if args.network_partitions && nodes != 3 {
        return Err(
            "--network-partitions needs --nodes 3: a single node has no links to cut".to_owned(),
        );
    }
    if args.ordering == Ordering::Key && (sink.is_some() || args.previous.is_some()) {
        return Err(
            "--ordering key runs `chaos member`s of this release: not with --sink or --previous"
                .to_owned(),
        );
    }
    if args.previous.is_some() && sink.is_some() {
        return Err("--previous runs `chaos member`s, not the --sink example".to_owned());
    }
    if let Some(previous) = &args.previous {
        if !previous.is_file() {
            return Err(format!(
                "--previous {}: no such program (scripts/previous-release builds it)",
                previous.display()
            ));
        }
    }
    let faults = schedule(&schedule::Plan {
        seed,
        seconds,
        members: initial,
        nodes,
        session_ms,
        sink: sink.is_some(),
        network_partitions: args.network_partitions,
        upgrade: args.previous.is_some(),
        spare: args.spare,
    });
    let sink_note = sink.as_ref().map_or(String::new(), |s| {
        format!(" sink=postgres table={}", s.table)
    });
    let connect = match args.connect {
        Connect::All => "all",
        Connect::One => "one",
        Connect::Mixed => "mixed",
    };
    println!(
        "chaos: store={} nodes={nodes}{} connect={connect} seconds={seconds} seed={seed} \
         members={initial} partitions={partitions} session_ms={session_ms}{sink_note} \
         (replay: --seed {seed}{}{})",
        kind.name(),
        store.settings_note(),
        if args.connect == Connect::All {
            String::new()
        } else {
            format!(" --connect {connect}")
        },
        if args.network_partitions {
            " --network-partitions"
        } else {
            ""
        }
    );
    if let Some(previous) = &args.previous {
        println!(
            "  m1 to m{initial} run the previous release ({}) until their upgrade",
            previous.display()
        );
    }
    for (at, fault) in &faults {
        println!("  at {:>6.1}s: {fault}", *at as f64 / 1000.0);
    }
    if sink.is_some() {
        let missing = schedule::missing_required(&faults);
        if !missing.is_empty() {
            println!(
                "  (this schedule has no {}: too short a run or too few members)",
                missing.join(", ")
            );
        }
    }

    let producer = Producer::start(&kafka, seed, partitions, args.rate).await?;
    let mut run = Run {
        store,
        kafka,
        group: format!("chaos-{seed}"),
        topic: producer.topic.clone(),
        session_ms,
        members: BTreeMap::new(),
        log: Default::default(),
        outages: Vec::new(),
        partitions: Vec::new(),
        connect: args.connect,
        started: 0,
        previous: args.previous.clone(),
        upgrades_due: std::collections::BTreeSet::new(),
        sink,
        ordering: args.ordering,
    };
    if run.previous.is_some() {
        run.upgrades_due = (1..=initial).map(|i| format!("m{i}")).collect();
    }
    for i in 1..=initial {
        run.start_member(&format!("m{i}")).await?;
    }
    let started = Instant::now();
    let settled_at = wall_ms();
    // The faults, and the samples between them (each at its own time; a
    // fault that holds the schedule up, a store restart, delays both).
    let mut samples: Vec<soak::Sample> = Vec::new();
    let mut next_sample = (args.sample_every > 0).then_some(0);
    let mut faults = faults.iter().peekable();
    loop {
        let fault_at = faults.peek().map(|(at, _)| *at);
        match (fault_at, next_sample) {
            (_, Some(sample_s)) if fault_at.is_none_or(|f| sample_s * 1_000 <= f) => {
                if sample_s > seconds {
                    next_sample = None;
                    continue;
                }
                tokio::time::sleep_until((started + Duration::from_secs(sample_s)).into()).await;
                run.reap();
                let sample = run.sample(sample_s, samples.last()).await;
                println!("  sample {sample}");
                samples.push(sample);
                next_sample = Some(sample_s + args.sample_every);
            }
            (Some(at), _) => {
                let Some((_, fault)) = faults.next() else {
                    break;
                };
                tokio::time::sleep_until((started + Duration::from_millis(at)).into()).await;
                println!("  {:>6.1}s: {fault}", started.elapsed().as_secs_f64());
                run.reap();
                run.inject(fault).await?;
            }
            // No fault left, and no sample (the first arm takes every
            // sample once no fault is left).
            _ => break,
        }
    }
    tokio::time::sleep_until((started + Duration::from_secs(seconds)).into()).await;
    if let Some(line) = soak::summary(&samples) {
        println!("{line}");
    }

    // Let everything go, stop producing, and audit once the backlog is
    // consumed.
    run.let_go().await?;
    if run.previous.is_some() {
        let left = run.upgrades_due.len();
        println!(
            "mixed versions: {} of {initial} members upgraded from the previous release{}",
            initial - left,
            if left > 0 {
                format!(" ({left} still on it)")
            } else {
                String::new()
            }
        );
    }
    let ends = producer.stop().await?;
    let faults_end = wall_ms();
    match run.sink.clone() {
        Some(sink) => sink_audit::finish(&mut run, &sink, &ends).await,
        None => audit::finish(&mut run, &ends, settled_at, faults_end).await,
    }
}
