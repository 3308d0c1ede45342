//! A chaos run: members of one group as separate OS processes, against the
//! real store and Kafka of `scripts/services`, under a schedule of faults;
//! every message they hand out is logged and audited at the end.
//!
//! ```text
//! cargo run --release --example chaos -- --store zookeeper [--nodes 1|3] [--seconds N] [--seed S]
//! cargo run --release --features etcd --example chaos -- --store etcd ...
//! cargo run --release --features etcd,postgres --example chaos -- --sink postgres --store zookeeper|etcd ...
//! ```
//!
//! Each member is this program run as `chaos member ...`; it reaches the
//! store through a proxy of its own (this program run as `chaos proxy ...`)
//! and Kafka directly, so that freezing its proxy (SIGSTOP) cuts it off
//! from the store while it still fetches. A producer writes to the topic
//! throughout. The faults, drawn from the seed: a member killed (SIGKILL),
//! paused past its session (SIGSTOP, then SIGCONT), cut off from the store
//! past its session, a member joining, one leaving (SIGTERM: it closes), a
//! store node restarted, and on a 3-node store its leader killed (and
//! started again later). The schedule is printed first; the same seed
//! gives the same schedule.
//!
//! At the end every process is let go, the backlog consumed, the group
//! closed, and one line printed:
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
//! next owner, minus the session timeout. The run exits non-zero on any
//! violation (lost, stale, shared tokens, offsets not at the end).
//!
//! ## `--sink postgres`: exactly once into PostgreSQL
//!
//! ```text
//! cargo build --features etcd,postgres --example exactly_once_postgres
//! cargo run --features etcd,postgres --example chaos -- --sink postgres --store zookeeper|etcd ...
//! ```
//!
//! The members are the `exactly_once_postgres` example (found beside this
//! program's binary) instead of `chaos member`, each behind its own proxy
//! to the store as above, writing every message as a row of a table of
//! this run's own (`chaos_<seed>_<ms>`, in `TENURE_POSTGRES`) with each
//! partition's next offset in `tenure_offsets`, one transaction per batch,
//! fenced by the claim's token. Each batch takes 200 ms of work before its
//! transaction (a few ms), so a member paused past its session nearly
//! always holds a batch it has not written: the write it attempts when it
//! goes on is refused, because the partition's next owner fenced it
//! meanwhile. (One stopped inside a transaction instead finds it ended by
//! the database, and its claim gone: nothing to refuse.) A transaction idle for a second (a quarter of a shorter
//! session) is ended by the database, so that a member stopped inside one
//! does not hold up the next owner's fence.
//!
//! The schedule starts with the faults exactly-once is about, in an order
//! drawn from the seed: two pauses past the session (so that a pause that
//! happens to catch its member inside a transaction is not the run's
//! only one), a cut off from the store, a kill and a store node restart;
//! the rest are drawn as above.
//! At the end the group is let go and closed as above (the backlog is
//! consumed once every partition's next offset in the offsets table is its
//! log end), and the table audited:
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

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rskafka::client::partition::{Compression, OffsetAt, UnknownTopicHandling};
use rskafka::client::ClientBuilder;
use rskafka::record::Record;
use tenure::core::Config;
use tenure::tokio::admin::{self, GroupAdmin};
use tenure::tokio::{AssignmentEvent, Backend, GroupMember, KafkaConfig};

const USAGE: &str = "usage: chaos --store zookeeper|etcd [--nodes 1|3] [--seconds N] [--seed S] \
                     [--members M] [--partitions P] [--session-ms MS] [--rate MESSAGES_PER_S] \
                     [--sink postgres]";

/// `scripts/services`, which starts, restarts and kills store nodes.
const SERVICES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/services");

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("chaos: no tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match args.first().map(String::as_str) {
        Some("member") => runtime.block_on(member::run(&args[1..])),
        Some("proxy") => runtime.block_on(proxy::run(&args[1..])),
        _ => runtime.block_on(orchestrate(&args)),
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

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Flags as `--name value` pairs.
fn flags(args: &[String]) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let name = flag
            .strip_prefix("--")
            .ok_or(format!("unexpected {flag:?}; {USAGE}"))?;
        let value = it.next().ok_or(format!("{flag} needs a value; {USAGE}"))?;
        out.insert(name.to_owned(), value.clone());
    }
    Ok(out)
}

fn number<T: std::str::FromStr>(
    flags: &BTreeMap<String, String>,
    name: &str,
    default: T,
) -> Result<T, String> {
    match flags.get(name) {
        None => Ok(default),
        Some(value) => value
            .parse()
            .map_err(|_| format!("--{name} takes a number, not {value:?}")),
    }
}

// ------------------------------------------------------------------ member

/// A member process: joins, prints what it hands out, closes on SIGTERM.
mod member {
    use super::*;

    /// Prints one line at once (the orchestrator reads it as it comes).
    fn say(line: std::fmt::Arguments<'_>) {
        let mut out = std::io::stdout().lock();
        // The orchestrator is gone if this fails: nothing left to tell.
        let _ = writeln!(out, "{line}").and_then(|()| out.flush());
    }

    pub async fn run(args: &[String]) -> Result<bool, String> {
        let flags = flags(args)?;
        let get = |name: &str| {
            flags
                .get(name)
                .cloned()
                .ok_or(format!("member: --{name} is missing"))
        };
        let (store, address, kafka) = (get("store")?, get("address")?, get("kafka")?);
        let (group, topic, id) = (get("group")?, get("topic")?, get("member")?);
        let session = Duration::from_millis(number(&flags, "session-ms", 4000)?);
        let backend: Box<dyn Backend> = match store.as_str() {
            "zookeeper" => Box::new(tenure::zookeeper::ZooKeeperBackend::new(address)),
            #[cfg(feature = "etcd")]
            "etcd" => Box::new(tenure::etcd::EtcdBackend::new(address).prefix(CHAOS_PREFIX)),
            other => return Err(format!("member: cannot use store {other:?} in this build")),
        };
        let config = Config::new(&group, &id, [&topic])
            .map_err(|e| e.to_string())?
            .with_session_timeout(session);
        let mut member = GroupMember::builder(config)
            .kafka(KafkaConfig::new(&kafka))
            .join(backend)
            .await
            .map_err(|e| format!("member {id}: {e}"))?;
        say(format_args!("ready"));
        let mut events = member.events();
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .map_err(|e| format!("member {id}: SIGTERM: {e}"))?;
        loop {
            tokio::select! {
                message = member.next_message() => {
                    let Some(message) = message else { break };
                    say(format_args!(
                        "m {} {} {} {}",
                        wall_ms(),
                        message.partition,
                        message.offset,
                        message.token.0
                    ));
                    message.ack();
                }
                Some(event) = events.next() => {
                    let (kind, partition, token) = match &event {
                        AssignmentEvent::Assigned { partition, token, .. } => ("assigned", partition, token),
                        AssignmentEvent::Resumed { partition, token } => ("resumed", partition, token),
                        AssignmentEvent::Suspended { partition, token, .. } => ("suspended", partition, token),
                        AssignmentEvent::Revoking { partition, token } => ("revoking", partition, token),
                        AssignmentEvent::Revoked { partition, token } => ("revoked", partition, token),
                        _ => continue,
                    };
                    say(format_args!("e {} {kind} {} {}", wall_ms(), partition.partition, token.0));
                }
                _ = terminate.recv() => break,
            }
        }
        // What the close hands over is printed too: its releases.
        let closing = member.close();
        tokio::pin!(closing);
        loop {
            tokio::select! {
                closed = &mut closing => {
                    closed.map_err(|e| format!("member {id}: close: {e}"))?;
                    break;
                }
                Some(event) = events.next() => {
                    if let AssignmentEvent::Revoked { partition, token } = &event {
                        say(format_args!("e {} revoked {} {}", wall_ms(), partition.partition, token.0));
                    }
                }
            }
        }
        say(format_args!("closed"));
        Ok(true)
    }
}

// ------------------------------------------------------------------- proxy

/// A TCP proxy process in front of every store node: freezing it (SIGSTOP)
/// cuts its member off from the store and nothing else.
mod proxy {
    use super::*;

    pub async fn run(args: &[String]) -> Result<bool, String> {
        let flags = flags(args)?;
        let targets = flags.get("to").ok_or("proxy: --to is missing")?;
        let mut listening = Vec::new();
        for target in targets.split(',') {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(|e| format!("proxy: bind: {e}"))?;
            let address = listener.local_addr().map_err(|e| e.to_string())?;
            listening.push(address.to_string());
            let target = target.to_owned();
            tokio::spawn(async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    let target = target.clone();
                    tokio::spawn(async move {
                        if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    });
                }
            });
        }
        println!("{}", listening.join(","));
        let _ = std::io::stdout().flush();
        std::future::pending::<()>().await;
        Ok(true)
    }
}

// ---------------------------------------------------------------- schedule

/// SplitMix64: the schedule's only randomness, from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// One fault, `at_ms` after the group settled.
#[derive(Clone, Debug)]
enum Fault {
    Kill(String),
    Pause(String, u64),
    Cut(String, u64),
    Join(String),
    Leave(String),
    RestartNode(u8),
    KillLeader(u64),
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Kill(m) => write!(f, "kill {m}"),
            Fault::Pause(m, ms) => write!(f, "pause {m} {ms}ms"),
            Fault::Cut(m, ms) => write!(f, "cut {m} off the store {ms}ms"),
            Fault::Join(m) => write!(f, "join {m}"),
            Fault::Leave(m) => write!(f, "leave {m}"),
            Fault::RestartNode(n) => write!(f, "restart store node {n}"),
            Fault::KillLeader(ms) => write!(f, "kill the store's leader for {ms}ms"),
        }
    }
}

/// The faults of a run of `seconds`, drawn from `seed`: one every 4–9 s,
/// each on a member that is live and not already paused or cut off, with
/// at least two live members at all times.
///
/// With `required` (`--sink postgres`), the first faults are a kill, two
/// pauses, a cut and a store node restart, in an order drawn from the seed
/// (one that cannot be made yet, a kill with two live members, waits for
/// the first slot where it can); the rest are drawn as without.
fn schedule(
    seed: u64,
    seconds: u64,
    members: usize,
    nodes: u8,
    session_ms: u64,
    required: bool,
) -> Vec<(u64, Fault)> {
    let mut rng = Rng(seed);
    let mut live: Vec<String> = (1..=members).map(|i| format!("m{i}")).collect();
    let mut next_id = members + 1;
    // Members busy with a pause or cut until then.
    let mut busy: BTreeMap<String, u64> = BTreeMap::new();
    let mut faults = Vec::new();
    let mut at = 3_000 + rng.below(3_000);
    // The kinds still due, as the draw below numbers them: kill, pause
    // twice, cut, restart; shuffled (Fisher–Yates).
    let mut due: Vec<u64> = Vec::new();
    if required {
        due = vec![0, 1, 1, 2, 4];
        for i in (1..due.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            due.swap(i, j);
        }
    }
    while at < seconds * 1_000 {
        let free: Vec<String> = live
            .iter()
            .filter(|m| busy.get(*m).is_none_or(|until| *until <= at))
            .cloned()
            .collect();
        let longer = session_ms + 1_000 + rng.below(2_000);
        let possible = |kind: u64| match kind {
            0 => live.len() > 2 && !free.is_empty(),
            1 | 2 => !free.is_empty(),
            _ => true,
        };
        let kind = match due.iter().position(|kind| possible(*kind)) {
            Some(i) => due.remove(i),
            None => rng.below(if nodes == 3 { 7 } else { 6 }),
        };
        let fault = match kind {
            0 if live.len() > 2 && !free.is_empty() => {
                let m = rng.pick(&free).clone();
                live.retain(|x| *x != m);
                Fault::Kill(m)
            }
            1 if !free.is_empty() => {
                let m = rng.pick(&free).clone();
                busy.insert(m.clone(), at + longer);
                Fault::Pause(m, longer)
            }
            2 if !free.is_empty() => {
                let m = rng.pick(&free).clone();
                busy.insert(m.clone(), at + longer);
                Fault::Cut(m, longer)
            }
            3 if live.len() > 2 && !free.is_empty() => {
                let m = rng.pick(&free).clone();
                live.retain(|x| *x != m);
                Fault::Leave(m)
            }
            4 => Fault::RestartNode(1 + rng.below(u64::from(nodes)) as u8),
            6 => Fault::KillLeader(2_000 + rng.below(3_000)),
            _ if live.len() < members + 2 => {
                let m = format!("m{next_id}");
                next_id += 1;
                live.push(m.clone());
                Fault::Join(m)
            }
            _ => {
                let m = rng.pick(&live).clone();
                busy.insert(m.clone(), at + longer);
                Fault::Pause(m, longer)
            }
        };
        faults.push((at, fault));
        at += 4_000 + rng.below(5_000);
    }
    faults
}

// ------------------------------------------------------------ orchestrator

/// What the member processes handed out, as they said it.
#[derive(Default)]
struct Log {
    /// (member, wall ms, partition, offset, token)
    messages: Vec<(String, u64, u32, i64, u64)>,
    /// (member, wall ms, kind, partition, token)
    events: Vec<(String, u64, String, u32, u64)>,
    /// Writes the sink refused as stale (`--sink postgres`): (member, wall
    /// ms, partition, token, stored token, messages dropped).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    fenced: Vec<(String, u64, u32, u64, u64, u64)>,
    /// Failed attempts the members reported (`--sink postgres`), as they
    /// said them: (member, line).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    failures: Vec<(String, String)>,
}

type SharedLog = Arc<Mutex<Log>>;

fn lock(log: &SharedLog) -> std::sync::MutexGuard<'_, Log> {
    match log.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// A member process and its proxy.
struct Running {
    process: Child,
    proxy: Child,
    /// When it was killed, if it was.
    killed_at: Option<u64>,
}

/// Where the store is and how to speak to it.
struct Store {
    kind: String,
    nodes: u8,
    /// Its nodes, `host:port`.
    servers: Vec<String>,
}

impl Store {
    fn from_env(kind: &str, nodes: u8) -> Result<Store, String> {
        let var = match (kind, nodes) {
            ("zookeeper", 1) => "TENURE_ZOOKEEPER",
            ("zookeeper", 3) => "TENURE_ZOOKEEPER_CLUSTER",
            ("etcd", 1) => "TENURE_ETCD",
            ("etcd", 3) => "TENURE_ETCD_CLUSTER",
            _ => return Err(format!("--store zookeeper|etcd and --nodes 1|3; {USAGE}")),
        };
        let value = std::env::var(var).map_err(|_| {
            format!("{var} is not set: start the servers with `eval \"$(scripts/services start)\"`")
        })?;
        let servers = value
            .split(',')
            .map(|s| s.trim().trim_start_matches("http://").to_owned())
            .collect();
        Ok(Store {
            kind: kind.to_owned(),
            nodes,
            servers,
        })
    }

    /// The service name `scripts/services` knows it by.
    fn service(&self) -> &'static str {
        match (self.kind.as_str(), self.nodes) {
            ("zookeeper", 1) => "zookeeper",
            ("zookeeper", _) => "zkcluster",
            (_, 1) => "etcd",
            _ => "etcdcluster",
        }
    }

    /// The connect string through the proxy listening at `proxied`.
    fn connect_string(&self, proxied: &str) -> String {
        match self.kind.as_str() {
            "etcd" => proxied
                .split(',')
                .map(|a| format!("http://{a}"))
                .collect::<Vec<_>>()
                .join(","),
            _ => proxied.to_owned(),
        }
    }

    /// An admin of the store; on etcd, of the groups under `prefix`.
    async fn admin(&self, prefix: &str) -> Result<Box<dyn GroupAdmin>, String> {
        #[cfg(not(feature = "etcd"))]
        let _ = prefix;
        let timeout = Duration::from_secs(10);
        match self.kind.as_str() {
            "zookeeper" => Ok(Box::new(
                tenure::zookeeper::ZooKeeperAdmin::connect(&self.servers.join(","), timeout)
                    .await
                    .map_err(|e| e.to_string())?,
            )),
            #[cfg(feature = "etcd")]
            "etcd" => {
                let endpoints: Vec<String> =
                    self.servers.iter().map(|s| format!("http://{s}")).collect();
                Ok(Box::new(
                    tenure::etcd::EtcdAdmin::connect(&endpoints.join(","), prefix, timeout)
                        .await
                        .map_err(|e| e.to_string())?,
                ))
            }
            other => Err(format!(
                "store {other:?} is not in this build (etcd needs `--features etcd`)"
            )),
        }
    }
}

/// Runs `scripts/services` with `args`; its failure is the run's.
async fn services(args: &[String]) -> Result<String, String> {
    let args = args.to_vec();
    tokio::task::spawn_blocking(move || {
        let output = Command::new(SERVICES)
            .args(&args)
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("cannot run {SERVICES}: {e}"))?;
        if !output.status.success() {
            return Err(format!("`scripts/services {}` failed", args.join(" ")));
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    })
    .await
    .map_err(|e| e.to_string())?
}

fn signal(child: &Child, name: &str) {
    // A process already gone needs no signal.
    let _ = Command::new("kill")
        .args([format!("-{name}"), child.id().to_string()])
        .status();
}

/// The etcd prefix of `chaos member`.
const CHAOS_PREFIX: &str = "/tenure-chaos";

/// The etcd prefix of the `exactly_once_postgres` example.
#[cfg(feature = "postgres")]
const EXACTLY_ONCE_PREFIX: &str = "/tenure-exactly-once";

/// The offsets table the `exactly_once_postgres` example writes by default.
const OFFSETS_TABLE: &str = "tenure_offsets";

/// `--sink postgres`: the members are the `exactly_once_postgres` example.
#[derive(Clone)]
struct SinkSetup {
    /// The example's binary, beside this one.
    exe: PathBuf,
    /// `TENURE_POSTGRES`.
    postgres: String,
    /// This run's table of rows.
    table: String,
}

impl SinkSetup {
    fn locate(seed: u64) -> Result<SinkSetup, String> {
        if !cfg!(feature = "postgres") {
            return Err("--sink postgres needs the postgres feature: \
                        `cargo run --features etcd,postgres --example chaos -- --sink postgres ...`"
                .to_owned());
        }
        let exe = std::env::current_exe()
            .map_err(|e| format!("where is this program? {e}"))?
            .with_file_name("exactly_once_postgres");
        if !exe.is_file() {
            return Err(format!(
                "--sink postgres runs {} as its members, and it is not built: \
                 `cargo build --features etcd,postgres --example exactly_once_postgres`",
                exe.display()
            ));
        }
        let postgres = std::env::var("TENURE_POSTGRES").map_err(|_| {
            "TENURE_POSTGRES is not set: start the servers with \
             `eval \"$(scripts/services start)\"`"
                .to_owned()
        })?;
        Ok(SinkSetup {
            exe,
            postgres,
            table: format!("chaos_{seed}_{}", wall_ms()),
        })
    }
}

struct Run {
    store: Store,
    kafka: String,
    group: String,
    topic: String,
    session_ms: u64,
    members: BTreeMap<String, Running>,
    log: SharedLog,
    /// Windows in which the store was down, wall ms.
    outages: Vec<(u64, u64)>,
    /// `--sink postgres`.
    sink: Option<SinkSetup>,
}

impl Run {
    async fn start_member(&mut self, id: &str) -> Result<(), String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut proxy = Command::new(&exe)
            .args(["proxy", "--to", &self.store.servers.join(",")])
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start a proxy: {e}"))?;
        let mut line = String::new();
        let stdout = proxy.stdout.take().ok_or("the proxy has no stdout")?;
        let mut reader = BufReader::new(stdout);
        reader
            .read_line(&mut line)
            .map_err(|e| format!("proxy: {e}"))?;
        let address = self.store.connect_string(line.trim());
        let mut command = match &self.sink {
            None => {
                let mut command = Command::new(&exe);
                command.arg("member");
                command
            }
            Some(sink) => {
                // Well under the session: a member stopped inside a
                // transaction holds the next owner's fence no longer.
                let idle_ms = (self.session_ms / 4).clamp(100, 1_000);
                let mut command = Command::new(&sink.exe);
                command
                    .args(["--postgres", &sink.postgres, "--table", &sink.table])
                    .args(["--offsets-table", OFFSETS_TABLE, "--work-ms", "200"])
                    .args(["--idle-in-transaction-ms", &idle_ms.to_string()]);
                command
            }
        };
        let mut process = command
            .args(["--store", &self.store.kind, "--address", &address])
            .args([
                "--kafka",
                &self.kafka,
                "--group",
                &self.group,
                "--topic",
                &self.topic,
            ])
            .args(["--member", id, "--session-ms", &self.session_ms.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start member {id}: {e}"))?;
        let stdout = process.stdout.take().ok_or("the member has no stdout")?;
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let log = self.log.clone();
        let member = id.to_owned();
        std::thread::spawn(move || read_member(member, stdout, log, ready_tx));
        tokio::time::timeout(Duration::from_secs(30), ready_rx)
            .await
            .map_err(|_| format!("member {id} did not join within 30 s"))?
            .map_err(|_| format!("member {id} exited before joining"))?;
        self.members.insert(
            id.to_owned(),
            Running {
                process,
                proxy,
                killed_at: None,
            },
        );
        Ok(())
    }

    /// Closes the group: every live member closes (SIGTERM) and commits;
    /// one that has not within 30 s is killed. Returns when it started.
    async fn close_group(&mut self) -> u64 {
        let closing_at = wall_ms();
        for running in self.members.values() {
            if running.killed_at.is_none() {
                signal(&running.process, "TERM");
            }
        }
        for (id, running) in self.members.iter_mut() {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                match running.process.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    _ => {
                        eprintln!("chaos: member {id} did not close within 30 s: killed");
                        let _ = running.process.kill();
                        let _ = running.process.wait();
                        break;
                    }
                }
            }
            let _ = running.proxy.kill();
            let _ = running.proxy.wait();
        }
        closing_at
    }

    async fn inject(&mut self, fault: &Fault) -> Result<(), String> {
        let member = |run: &Run, id: &str| -> Result<(), String> {
            run.members
                .get(id)
                .map(|_| ())
                .ok_or(format!("the schedule names {id}, which is not running"))
        };
        match fault {
            Fault::Kill(id) => {
                member(self, id)?;
                if let Some(running) = self.members.get_mut(id) {
                    signal(&running.process, "KILL");
                    running.killed_at = Some(wall_ms());
                    signal(&running.proxy, "KILL");
                }
            }
            Fault::Pause(id, ms) | Fault::Cut(id, ms) => {
                member(self, id)?;
                let cut = matches!(fault, Fault::Cut(..));
                if let Some(running) = self.members.get(id) {
                    let target = if cut {
                        &running.proxy
                    } else {
                        &running.process
                    };
                    let pid = target.id();
                    signal(target, "STOP");
                    let ms = *ms;
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        let _ = Command::new("kill")
                            .args(["-CONT", &pid.to_string()])
                            .status();
                    });
                }
            }
            Fault::Join(id) => self.start_member(id).await?,
            Fault::Leave(id) => {
                member(self, id)?;
                if let Some(running) = self.members.get(id) {
                    signal(&running.process, "TERM");
                }
            }
            Fault::RestartNode(n) => {
                let from = wall_ms();
                if self.store.nodes == 1 {
                    services(&["restart".to_owned(), self.store.service().to_owned()]).await?;
                    self.outages.push((from, wall_ms()));
                } else {
                    let node = n.to_string();
                    services(&[
                        "node".into(),
                        self.store.service().into(),
                        "restart".into(),
                        node,
                    ])
                    .await?;
                }
            }
            Fault::KillLeader(ms) => {
                let service = self.store.service().to_owned();
                let leader = services(&["leader".into(), service.clone()]).await?;
                services(&[
                    "node".into(),
                    service.clone(),
                    "kill".into(),
                    leader.clone(),
                ])
                .await?;
                let ms = *ms;
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    if let Err(e) =
                        services(&["node".into(), service, "start".into(), leader]).await
                    {
                        eprintln!("chaos: {e}");
                    }
                });
            }
        }
        Ok(())
    }
}

/// Reads a member's lines into the log until it exits.
fn read_member(
    member: String,
    stdout: std::process::ChildStdout,
    log: SharedLog,
    ready: tokio::sync::oneshot::Sender<()>,
) {
    let mut ready = Some(ready);
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let fields: Vec<&str> = line.split(' ').collect();
        match fields.as_slice() {
            ["ready"] => {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(());
                }
            }
            ["m", at, partition, offset, token] => {
                if let (Ok(at), Ok(p), Ok(o), Ok(t)) =
                    (at.parse(), partition.parse(), offset.parse(), token.parse())
                {
                    lock(&log).messages.push((member.clone(), at, p, o, t));
                }
            }
            ["e", at, kind, partition, token] => {
                if let (Ok(at), Ok(p), Ok(t)) = (at.parse(), partition.parse(), token.parse()) {
                    lock(&log)
                        .events
                        .push((member.clone(), at, (*kind).to_owned(), p, t));
                }
            }
            ["f", at, partition, token, stored, dropped] => {
                if let (Ok(at), Ok(p), Ok(t), Ok(s), Ok(d)) = (
                    at.parse(),
                    partition.parse(),
                    token.parse(),
                    stored.parse(),
                    dropped.parse(),
                ) {
                    lock(&log).fenced.push((member.clone(), at, p, t, s, d));
                }
            }
            ["x", ..] => lock(&log).failures.push((member.clone(), line.clone())),
            _ => {}
        }
    }
}

async fn orchestrate(args: &[String]) -> Result<bool, String> {
    let flags = flags(args)?;
    let kind = flags.get("store").cloned().ok_or(USAGE)?;
    let nodes: u8 = number(&flags, "nodes", 1)?;
    let seconds: u64 = number(&flags, "seconds", 60)?;
    let seed: u64 = match flags.get("seed") {
        Some(_) => number(&flags, "seed", 0)?,
        None => wall_ms() ^ u64::from(std::process::id()),
    };
    let initial: usize = number(&flags, "members", 3)?;
    let partitions: u32 = number(&flags, "partitions", 6)?;
    let session_ms: u64 = number(&flags, "session-ms", 4_000)?;
    let rate: u64 = number(&flags, "rate", 300)?;
    let store = Store::from_env(&kind, nodes)?;
    let kafka = std::env::var("TENURE_KAFKA").map_err(|_| {
        "TENURE_KAFKA is not set: start the servers with `eval \"$(scripts/services start)\"`"
            .to_owned()
    })?;
    let sink = match flags.get("sink").map(String::as_str) {
        None => None,
        Some("postgres") => Some(SinkSetup::locate(seed)?),
        Some(other) => {
            return Err(format!(
                "--sink {other:?}: postgres is the one sink; {USAGE}"
            ))
        }
    };

    let faults = schedule(seed, seconds, initial, nodes, session_ms, sink.is_some());
    let sink_note = sink.as_ref().map_or(String::new(), |s| {
        format!(" sink=postgres table={}", s.table)
    });
    println!(
        "chaos: store={kind} nodes={nodes} seconds={seconds} seed={seed} members={initial} \
         partitions={partitions} session_ms={session_ms}{sink_note} (replay: --seed {seed})"
    );
    for (at, fault) in &faults {
        println!("  at {:>6.1}s: {fault}", *at as f64 / 1000.0);
    }
    if sink.is_some() {
        let has = |f: fn(&Fault) -> bool| faults.iter().any(|(_, fault)| f(fault));
        let missing: Vec<&str> = [
            ("pause", has(|f| matches!(f, Fault::Pause(..)))),
            ("cut", has(|f| matches!(f, Fault::Cut(..)))),
            ("kill", has(|f| matches!(f, Fault::Kill(..)))),
            (
                "store node restart",
                has(|f| matches!(f, Fault::RestartNode(..))),
            ),
        ]
        .into_iter()
        .filter(|(_, there)| !there)
        .map(|(name, _)| name)
        .collect();
        if !missing.is_empty() {
            println!(
                "  (this schedule has no {}: too short a run or too few members)",
                missing.join(", ")
            );
        }
    }

    // The topic, and a producer that writes to it throughout.
    let client = ClientBuilder::new(vec![kafka.clone()])
        .build()
        .await
        .map_err(|e| format!("Kafka at {kafka}: {e}"))?;
    let client = Arc::new(client);
    let topic = format!("chaos-{seed}-{}", wall_ms());
    client
        .controller_client()
        .map_err(|e| e.to_string())?
        .create_topic(&topic, partitions as i32, 1, 10_000)
        .await
        .map_err(|e| format!("create topic {topic}: {e}"))?;
    let mut producers = Vec::new();
    for p in 0..partitions {
        producers.push(
            client
                .partition_client(topic.clone(), p as i32, UnknownTopicHandling::Retry)
                .await
                .map_err(|e| format!("{topic}/{p}: {e}"))?,
        );
    }
    let producing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    // A batch to every partition every 50 ms.
    let producer = {
        let producing = producing.clone();
        let per_batch = (rate / 20 / u64::from(partitions)).max(1);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            let mut n = 0u64;
            while producing.load(std::sync::atomic::Ordering::Relaxed) {
                tick.tick().await;
                for partition in &producers {
                    let timestamp =
                        rskafka::chrono::DateTime::from_timestamp_millis(wall_ms() as i64)
                            .unwrap_or_default();
                    let batch = (0..per_batch)
                        .map(|_| {
                            n += 1;
                            Record {
                                key: None,
                                value: Some(n.to_string().into_bytes()),
                                headers: BTreeMap::new(),
                                timestamp,
                            }
                        })
                        .collect();
                    if let Err(e) = partition.produce(batch, Compression::NoCompression).await {
                        eprintln!("chaos: produce: {e}");
                    }
                }
            }
        })
    };

    let mut run = Run {
        store,
        kafka,
        group: format!("chaos-{seed}"),
        topic: topic.clone(),
        session_ms,
        members: BTreeMap::new(),
        log: SharedLog::default(),
        outages: Vec::new(),
        sink,
    };
    for i in 1..=initial {
        run.start_member(&format!("m{i}")).await?;
    }
    let started = Instant::now();
    let settled_at = wall_ms();
    for (at, fault) in &faults {
        let due = started + Duration::from_millis(*at);
        tokio::time::sleep_until(due.into()).await;
        println!("  {:>6.1}s: {fault}", started.elapsed().as_secs_f64());
        run.inject(fault).await?;
    }
    tokio::time::sleep_until((started + Duration::from_secs(seconds)).into()).await;

    // Let everything go: continue whatever is stopped, bring every store
    // node back, stop producing, and wait for the backlog to be consumed.
    for running in run.members.values() {
        if running.killed_at.is_none() {
            signal(&running.process, "CONT");
            signal(&running.proxy, "CONT");
        }
    }
    if run.store.nodes == 3 {
        for n in 1..=3u8 {
            services(&[
                "node".into(),
                run.store.service().into(),
                "start".into(),
                n.to_string(),
            ])
            .await?;
        }
    }
    producing.store(false, std::sync::atomic::Ordering::Relaxed);
    producer.await.map_err(|e| e.to_string())?;
    let mut ends = Vec::new();
    for p in 0..partitions {
        let partition = client
            .partition_client(topic.clone(), p as i32, UnknownTopicHandling::Retry)
            .await
            .map_err(|e| e.to_string())?;
        ends.push(
            partition
                .get_offset(OffsetAt::Latest)
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    let faults_end = wall_ms();
    #[cfg(feature = "postgres")]
    if let Some(sink) = run.sink.clone() {
        return sink::finish(&mut run, &sink, &ends).await;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let consumed = {
            let log = lock(&run.log);
            let mut next = vec![0i64; partitions as usize];
            for (_, _, p, o, _) in &log.messages {
                if let Some(n) = next.get_mut(*p as usize) {
                    *n = (*n).max(o + 1);
                }
            }
            next
        };
        if consumed == ends || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let closing_at = run.close_group().await;

    let admin = run.store.admin(CHAOS_PREFIX).await?;
    let described = admin::describe(admin.as_ref(), &run.group, None)
        .await
        .map_err(|e| e.to_string())?;
    let committed: Vec<i64> = (0..partitions)
        .map(|p| {
            described
                .partitions
                .iter()
                .find(|d| d.partition.partition == p && *d.partition.topic == *topic)
                .and_then(|d| d.committed)
                .unwrap_or(0)
        })
        .collect();

    let log = lock(&run.log);
    let audit = audit(
        &log,
        &run,
        &ends,
        &committed,
        settled_at,
        faults_end.min(closing_at),
    );
    println!(
        "lost={} stale={} shared_tokens={} offsets_at_end={} duplicates={} max_unowned_ms={}",
        audit.lost,
        audit.stale,
        audit.shared_tokens,
        committed == ends,
        audit.duplicates,
        audit.max_unowned_ms
    );
    print_failover(&audit.failover_ms, "message", session_ms);
    if committed != ends {
        println!("committed {committed:?}, log ends {ends:?}");
    }
    for line in &audit.findings {
        println!("  {line}");
    }
    Ok(audit.lost == 0 && audit.stale == 0 && audit.shared_tokens == 0 && committed == ends)
}

/// The failover line: for every partition a killed member held, the time
/// from the SIGKILL to its next owner's first `what`, past the session.
fn print_failover(failover_ms: &[i64], what: &str, session_ms: u64) {
    let mut failover = failover_ms.to_vec();
    failover.sort_unstable();
    if failover.is_empty() {
        println!("failover: no kill of a member holding partitions in this schedule");
        return;
    }
    let at = |q: f64| failover[((failover.len() - 1) as f64 * q).round() as usize];
    println!(
        "failover_ms_past_session median={} p99={} samples={} (kill to the next owner's \
         first {what}, minus the {session_ms} ms session timeout)",
        at(0.5),
        at(0.99),
        failover.len()
    );
}

#[derive(Default)]
struct Audit {
    lost: usize,
    stale: usize,
    shared_tokens: usize,
    duplicates: usize,
    max_unowned_ms: u64,
    failover_ms: Vec<i64>,
    /// The first few violations, for the reader.
    findings: Vec<String>,
}

fn audit(log: &Log, run: &Run, ends: &[i64], _committed: &[i64], from: u64, until: u64) -> Audit {
    let mut audit = Audit::default();
    let note = |audit: &mut Audit, line: String| {
        if audit.findings.len() < 10 {
            audit.findings.push(line);
        }
    };
    // Lost and duplicated offsets.
    let mut seen: BTreeMap<(u32, i64), usize> = BTreeMap::new();
    for (_, _, p, o, _) in &log.messages {
        *seen.entry((*p, *o)).or_default() += 1;
    }
    for (p, end) in ends.iter().enumerate() {
        for o in 0..*end {
            if !seen.contains_key(&(p as u32, o)) {
                audit.lost += 1;
                note(&mut audit, format!("lost: partition {p} offset {o}"));
            }
        }
    }
    audit.duplicates = seen.values().map(|n| n - 1).sum();
    // Stale tokens: by the moment of handing out, per partition.
    let mut by_time: Vec<&(String, u64, u32, i64, u64)> = log.messages.iter().collect();
    by_time.sort_by_key(|(_, at, ..)| *at);
    let mut newest: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for (member, at, p, o, token) in by_time {
        match newest.get(p) {
            Some((newer, first_at)) if token < newer && first_at < at => {
                audit.stale += 1;
                note(
                    &mut audit,
                    format!("stale: {member} handed out {p}/{o} under token {token} after token {newer}"),
                );
            }
            Some((newer, _)) if token <= newer => {}
            _ => {
                newest.insert(*p, (*token, *at));
            }
        }
    }
    // Tokens seen from two members.
    let mut holders: BTreeMap<(u32, u64), BTreeSet<&str>> = BTreeMap::new();
    for (member, _, p, _, token) in &log.messages {
        holders.entry((*p, *token)).or_default().insert(member);
    }
    for ((p, token), members) in &holders {
        if members.len() > 1 {
            audit.shared_tokens += 1;
            note(
                &mut audit,
                format!("shared: token {token} of partition {p} from {members:?}"),
            );
        }
    }
    // Held intervals per partition, from each member's own changes; a
    // killed member's end at its kill.
    let mut held: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    let mut open: BTreeMap<(&str, u32), u64> = BTreeMap::new();
    let mut events: Vec<&(String, u64, String, u32, u64)> = log.events.iter().collect();
    events.sort_by_key(|(_, at, ..)| *at);
    for (member, at, kind, p, _) in events {
        match kind.as_str() {
            "assigned" | "resumed" => {
                open.entry((member, *p)).or_insert(*at);
            }
            "suspended" | "revoked" => {
                if let Some(since) = open.remove(&(member.as_str(), *p)) {
                    held.entry(*p).or_default().push((since, *at));
                }
            }
            _ => {}
        }
    }
    for ((member, p), since) in open {
        let end = run
            .members
            .get(member)
            .and_then(|r| r.killed_at)
            .unwrap_or(u64::MAX);
        held.entry(p).or_default().push((since, end));
    }
    for p in 0..ends.len() as u32 {
        let mut intervals = held.remove(&p).unwrap_or_default();
        intervals.sort_unstable();
        let mut covered_to = from;
        let mut longest = 0;
        for (start, end) in intervals.into_iter().chain([(until, until)]) {
            if start > covered_to && covered_to < until {
                let gap_end = start.min(until);
                let down: u64 = run
                    .outages
                    .iter()
                    .map(|(a, b)| gap_end.min(*b).saturating_sub(covered_to.max(*a)))
                    .sum();
                longest = longest.max((gap_end - covered_to).saturating_sub(down));
            }
            covered_to = covered_to.max(end);
        }
        audit.max_unowned_ms = audit.max_unowned_ms.max(longest);
    }
    // Failover: the next owner's first message.
    audit.failover_ms = failover_ms(log, run, |id, p, killed_at| {
        log.messages
            .iter()
            .filter(|(member, at, mp, ..)| member != id && *mp == p && *at > killed_at)
            .map(|(_, at, ..)| *at)
            .min()
    });
    audit
}

/// For every partition a killed member held at its kill, the time from the
/// kill to `first(member, partition, killed_at)` (the next owner's first
/// output, wall ms), minus the session timeout.
fn failover_ms(log: &Log, run: &Run, first: impl Fn(&str, u32, u64) -> Option<u64>) -> Vec<i64> {
    let mut failover = Vec::new();
    for (id, running) in &run.members {
        let Some(killed_at) = running.killed_at else {
            continue;
        };
        for p in held_at(log, id, killed_at) {
            if let Some(first) = first(id, p, killed_at) {
                failover.push(first as i64 - killed_at as i64 - run.session_ms as i64);
            }
        }
    }
    failover
}

/// The partitions `id` held at `at`, by its own assignment changes.
fn held_at(log: &Log, id: &str, at: u64) -> BTreeSet<u32> {
    let mut state: BTreeMap<u32, bool> = BTreeMap::new();
    for (member, when, kind, p, _) in &log.events {
        if member == id && *when <= at {
            match kind.as_str() {
                "assigned" | "resumed" => {
                    state.insert(*p, true);
                }
                "suspended" | "revoked" => {
                    state.insert(*p, false);
                }
                _ => {}
            }
        }
    }
    state
        .into_iter()
        .filter(|(_, h)| *h)
        .map(|(p, _)| p)
        .collect()
}

// -------------------------------------------------------------- sink audit

/// `--sink postgres`: the end of the run and its audit, read from
/// PostgreSQL.
#[cfg(feature = "postgres")]
mod sink {
    use super::*;
    use tenure::postgres::tokio_postgres::{self, Client, NoTls};

    /// One row of the run's table.
    pub struct Row {
        pub partition: u32,
        pub offset: i64,
        pub token: u64,
        /// When its transaction started, wall ms.
        pub written_ms: u64,
    }

    /// What the table says, and what it should.
    #[derive(Default)]
    pub struct SinkAudit {
        pub messages: i64,
        pub rows: usize,
        pub duplicates: usize,
        pub lost: usize,
        pub offsets_at_end: bool,
        pub token_inversions: usize,
        pub fenced_writes_refused: usize,
        pub fenced_messages: u64,
        pub failures: usize,
        pub failover_ms: Vec<i64>,
        /// The first few violations, for the reader.
        pub findings: Vec<String>,
    }

    impl SinkAudit {
        pub fn ok(&self) -> bool {
            self.duplicates == 0
                && self.lost == 0
                && self.offsets_at_end
                && self.token_inversions == 0
                && self.fenced_writes_refused >= 1
        }

        fn note(&mut self, line: String) {
            if self.findings.len() < 10 {
                self.findings.push(line);
            }
        }
    }

    async fn connect(url: &str) -> Result<Client, String> {
        let (client, connection) = tokio_postgres::connect(url, NoTls)
            .await
            .map_err(|e| format!("PostgreSQL at {url}: {e}"))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                eprintln!("chaos: PostgreSQL: {e}");
            }
        });
        Ok(client)
    }

    /// Every partition's next offset in the offsets table (0: nothing
    /// written yet).
    async fn next_offsets(
        client: &Client,
        group: &str,
        topic: &str,
        partitions: usize,
    ) -> Result<Vec<i64>, String> {
        let read = |e: tokio_postgres::Error| format!("read {OFFSETS_TABLE}: {e}");
        let rows = client
            .query(
                &format!(
                    "SELECT partition, next_offset FROM {OFFSETS_TABLE} \
                     WHERE consumer_group = $1 AND topic = $2"
                ),
                &[&group, &topic],
            )
            .await
            .map_err(read)?;
        let mut next = vec![0i64; partitions];
        for row in rows {
            let p: i32 = row.try_get(0).map_err(read)?;
            let offset: Option<i64> = row.try_get(1).map_err(read)?;
            if let Some(n) = usize::try_from(p).ok().and_then(|p| next.get_mut(p)) {
                *n = offset.unwrap_or(0);
            }
        }
        Ok(next)
    }

    async fn rows(client: &Client, table: &str, topic: &str) -> Result<Vec<Row>, String> {
        let read = |e: tokio_postgres::Error| format!("read {table}: {e}");
        let rows = client
            .query(
                &format!(
                    "SELECT partition, \"offset\", token, \
                     (extract(epoch FROM written_at) * 1000)::bigint FROM {table} \
                     WHERE topic = $1"
                ),
                &[&topic],
            )
            .await
            .map_err(read)?;
        rows.iter()
            .map(|row| {
                let partition: i32 = row.try_get(0).map_err(read)?;
                let offset: i64 = row.try_get(1).map_err(read)?;
                let token: i64 = row.try_get(2).map_err(read)?;
                let written_ms: i64 = row.try_get(3).map_err(read)?;
                Ok(Row {
                    partition: partition as u32,
                    offset,
                    token: token as u64,
                    written_ms: written_ms as u64,
                })
            })
            .collect()
    }

    /// Waits for the backlog (every partition's next offset in the offsets
    /// table at its log end, up to 60 s), closes the group, audits the
    /// table and prints the result.
    pub async fn finish(run: &mut Run, sink: &SinkSetup, ends: &[i64]) -> Result<bool, String> {
        let client = connect(&sink.postgres).await?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let next = next_offsets(&client, &run.group, &run.topic, ends.len()).await?;
            if next == ends || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        run.close_group().await;

        let next = next_offsets(&client, &run.group, &run.topic, ends.len()).await?;
        let rows = rows(&client, &sink.table, &run.topic).await?;
        let audit = {
            let log = lock(&run.log);
            audit(&log, run, ends, &next, &rows)
        };
        println!(
            "exactly_once: messages={} rows={} duplicates={} lost={} offsets_at_end={} \
             token_inversions={} fenced_writes_refused={} fenced_messages={} failures={}",
            audit.messages,
            audit.rows,
            audit.duplicates,
            audit.lost,
            audit.offsets_at_end,
            audit.token_inversions,
            audit.fenced_writes_refused,
            audit.fenced_messages,
            audit.failures
        );
        print_failover(&audit.failover_ms, "row written", run.session_ms);
        if !audit.offsets_at_end {
            println!("offsets table {next:?}, log ends {ends:?}");
        }
        for line in &audit.findings {
            println!("  {line}");
        }
        if audit.fenced_writes_refused == 0 {
            println!(
                "  FAILED: no write was refused by the fence (no `f` line with dropped messages \
                 from any member): this run did not exercise the fence, so it shows nothing \
                 about it"
            );
        }
        // The store's committed offsets follow the table's (a batch is
        // acknowledged once its transaction committed): not part of the
        // verdict, worth a word when they differ.
        match run.store.admin(EXACTLY_ONCE_PREFIX).await {
            Ok(admin) => match admin::describe(admin.as_ref(), &run.group, None).await {
                Ok(described) => {
                    let committed: Vec<i64> = (0..ends.len() as u32)
                        .map(|p| {
                            described
                                .partitions
                                .iter()
                                .find(|d| {
                                    d.partition.partition == p && *d.partition.topic == *run.topic
                                })
                                .and_then(|d| d.committed)
                                .unwrap_or(0)
                        })
                        .collect();
                    if committed != ends {
                        println!(
                            "  note: the store's committed offsets {committed:?} are not the log \
                             ends {ends:?} (not part of the verdict)"
                        );
                    }
                }
                Err(e) => println!("  note: cannot describe the group: {e}"),
            },
            Err(e) => println!("  note: no admin of the store: {e}"),
        }
        let ok = audit.ok();
        if ok {
            let cleanup = format!(
                "DROP TABLE {}; DELETE FROM {OFFSETS_TABLE} \
                 WHERE consumer_group = '{}' AND topic = '{}'",
                sink.table, run.group, run.topic
            );
            if let Err(e) = client.batch_execute(&cleanup).await {
                eprintln!("chaos: cannot drop table {}: {e}", sink.table);
            }
        } else {
            println!(
                "  the rows stay in table {} (TENURE_POSTGRES), the offsets in {OFFSETS_TABLE} \
                 (consumer_group '{}', topic '{}')",
                sink.table, run.group, run.topic
            );
        }
        Ok(ok)
    }

    /// Audits the rows of the run's table against the log ends and the
    /// offsets table's next offsets.
    fn audit(log: &Log, run: &Run, ends: &[i64], next: &[i64], rows: &[Row]) -> SinkAudit {
        let mut audit = SinkAudit {
            messages: ends.iter().sum(),
            rows: rows.len(),
            offsets_at_end: next == ends,
            ..SinkAudit::default()
        };
        // Who held a token, for the findings.
        let mut holder: BTreeMap<(u32, u64), &str> = BTreeMap::new();
        for (member, _, kind, p, token) in &log.events {
            if kind == "assigned" {
                holder.insert((*p, *token), member);
            }
        }
        let who = |p: u32, token: u64| {
            let member = holder.get(&(p, token)).copied().unwrap_or("?");
            format!("{token} ({member})")
        };
        // (partition, offset) → tokens of its rows.
        let mut written: BTreeMap<(u32, i64), Vec<u64>> = BTreeMap::new();
        for row in rows {
            written
                .entry((row.partition, row.offset))
                .or_default()
                .push(row.token);
        }
        audit.duplicates = rows.len() - written.len();
        for ((p, o), tokens) in &written {
            if tokens.len() > 1 {
                let tokens: Vec<String> = tokens.iter().map(|t| who(*p, *t)).collect();
                audit.note(format!(
                    "duplicate: partition {p} offset {o} written {} times, under tokens {}",
                    tokens.len(),
                    tokens.join(", ")
                ));
            }
            if ends.get(*p as usize).is_none_or(|end| o >= end) {
                audit.note(format!("beyond the log end: partition {p} offset {o}"));
            }
        }
        for (p, end) in ends.iter().enumerate() {
            let mut first_lost = None;
            let mut lost_here = 0;
            for o in 0..*end {
                if !written.contains_key(&(p as u32, o)) {
                    first_lost.get_or_insert(o);
                    lost_here += 1;
                }
            }
            if let Some(first) = first_lost {
                audit.lost += lost_here;
                audit.note(format!(
                    "lost: partition {p}: {lost_here} offsets without a row, the first {first} \
                     (log end {end})"
                ));
            }
        }
        // Token inversions: by offset, a row under a token older than one
        // of an earlier offset.
        let mut newest: BTreeMap<u32, (u64, i64)> = BTreeMap::new();
        for ((p, o), tokens) in &written {
            let before = newest.get(p).copied();
            for token in tokens {
                if let Some((newer, at)) = before {
                    if *token < newer {
                        audit.token_inversions += 1;
                        audit.note(format!(
                            "token inversion: partition {p} offset {o} under token {}, after \
                             offset {at} under {}",
                            who(*p, *token),
                            who(*p, newer)
                        ));
                    }
                }
            }
            if let Some(max) = tokens.iter().max() {
                if before.is_none_or(|(newer, _)| *max > newer) {
                    newest.insert(*p, (*max, *o));
                }
            }
        }
        // The fence at work, and the attempts that failed.
        for (_, _, _, _, _, dropped) in &log.fenced {
            if *dropped > 0 {
                audit.fenced_writes_refused += 1;
                audit.fenced_messages += dropped;
            }
        }
        audit.failures = log.failures.len();
        let failing = audit.duplicates > 0
            || audit.lost > 0
            || !audit.offsets_at_end
            || audit.token_inversions > 0;
        if failing {
            for (member, line) in log.failures.iter().take(3) {
                audit.note(format!("{member} said: {line}"));
            }
        }
        // Failover: the first row written after the kill.
        audit.failover_ms = failover_ms(log, run, |_, p, killed_at| {
            rows.iter()
                .filter(|row| row.partition == p && row.written_ms > killed_at)
                .map(|row| row.written_ms)
                .min()
        });
        audit
    }
}
