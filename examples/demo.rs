//! tenure's main job, live: a group of members shares the partitions of a
//! topic while members join and leave, and a table shows who owns what,
//! under which fencing token, and how fast each member gets through its
//! partitions.
//!
//! There is no Kafka here: every member "processes" a synthetic stream of
//! messages per owned partition at a steady rate, reports its progress, and
//! drains a partition when told to stop. After a handoff the new owner
//! resumes at the offset the old owner committed, so the processed offsets
//! of every partition form one run from 0 with no gap; the demo checks that,
//! and that each partition has exactly one owner at the end of each phase,
//! and exits non-zero otherwise.
//!
//! ```text
//! cargo run --example demo                                             # embedded store, no server
//! cargo run --example demo -- --zookeeper 127.0.0.1:21810               # a real ZooKeeper
//! cargo run --features etcd --example demo -- --etcd http://127.0.0.1:23790   # a real etcd
//! ```
//!
//! It needs no server by default (the embedded in-memory store);
//! `scripts/services start` brings up the ZooKeeper and etcd the flags above
//! point at.
//!
//! Flags (`--help` lists them): `--members N` (3), `--partitions P` (12), `--duration SECS` (9),
//! `--rate MSGS_PER_S_PER_PARTITION` (200), `--zookeeper HOST:PORT[/CHROOT]`,
//! `--etcd http://HOST:PORT` (with the `etcd` feature). On a terminal the
//! table is redrawn in place; otherwise a snapshot is printed every second.
//! It ends by itself after about the duration.

mod common;

use std::collections::{BTreeMap, VecDeque};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use clap::Parser;
use tenure::core::{FencingToken, FetchFrom, MemberId, Offset, TopicPartition};
use tenure::tokio::{AssignmentEvent, Backend, GroupMember, MemoryStore, View};
use tenure_chaos_lines::say;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

const TOPIC: &str = "orders";
const SESSION: Duration = Duration::from_secs(3);
/// Short, so that committed offsets trail the processed ones visibly.
const COMMIT_INTERVAL: Duration = Duration::from_millis(500);
/// Each member's processing clock; small batches keep the rate steady
/// without keeping a core busy.
const BATCH_TICK: Duration = Duration::from_millis(50);
const REDRAW: Duration = Duration::from_millis(500);
/// How long ownership may take to converge after a phase's deadline before
/// the demo calls it wrong; it is only waited for when something is late.
const GRACE: Duration = Duration::from_secs(3);
/// How long the members may take to leave at the end.
const CLOSE_LIMIT: Duration = Duration::from_secs(4);
/// Event lines kept under the live table.
const RECENT: usize = 8;

/// tenure's main job, live: a group of members shares the partitions of a
/// topic while members join and leave, under a table of who owns what.
/// Needs no server by default (the embedded in-memory store).
#[derive(Parser)]
struct Args {
    /// Members at the start (one more joins, then one leaves).
    #[arg(long, default_value_t = 3, value_parser = count::<usize>)]
    members: usize,
    /// Partitions of the topic.
    #[arg(long, default_value_t = 12, value_parser = count::<u32>)]
    partitions: u32,
    /// How long the run takes, in seconds (3 at least).
    #[arg(long = "duration", default_value_t = 9, value_name = "SECS")]
    duration_secs: u64,
    /// Messages per second each owned partition is processed at.
    #[arg(
        long,
        default_value_t = 200,
        value_name = "MSGS_PER_S_PER_PARTITION",
        value_parser = count::<u32>
    )]
    rate: u32,
    /// A real ZooKeeper instead of the embedded store.
    #[arg(long, value_name = "HOST:PORT[/CHROOT]", conflicts_with = "etcd")]
    zookeeper: Option<String>,
    /// A real etcd instead of the embedded store (built with `--features etcd`).
    #[arg(long, value_name = "http://HOST:PORT")]
    etcd: Option<String>,
}

/// A whole number of 1 or more.
fn count<T: std::str::FromStr + From<u8> + PartialOrd>(value: &str) -> Result<T, String> {
    match value.parse::<T>() {
        Ok(n) if n >= T::from(1) => Ok(n),
        _ => Err("a whole number of 1 or more".to_owned()),
    }
}

impl Args {
    fn duration(&self) -> Duration {
        Duration::from_secs(self.duration_secs.max(3))
    }
}

/// Where the members keep their records.
enum Store {
    Memory(MemoryStore),
    #[cfg(feature = "zookeeper")]
    ZooKeeper(String),
    #[cfg(feature = "etcd")]
    Etcd(String),
}

impl Store {
    fn pick(args: &Args) -> Result<Store, String> {
        if let Some(address) = &args.zookeeper {
            #[cfg(feature = "zookeeper")]
            return Ok(Store::ZooKeeper(address.clone()));
            #[cfg(not(feature = "zookeeper"))]
            return Err(format!(
                "--zookeeper {address}: built without the zookeeper feature"
            ));
        }
        if let Some(endpoint) = &args.etcd {
            #[cfg(feature = "etcd")]
            return Ok(Store::Etcd(endpoint.clone()));
            #[cfg(not(feature = "etcd"))]
            return Err(format!(
                "--etcd {endpoint}: built without the etcd feature \
                 (cargo run --features etcd --example demo -- --etcd {endpoint})"
            ));
        }
        Ok(Store::Memory(MemoryStore::new()))
    }

    fn describe(&self) -> String {
        match self {
            Store::Memory(_) => "the embedded in-memory store".to_owned(),
            #[cfg(feature = "zookeeper")]
            Store::ZooKeeper(address) => format!("ZooKeeper {address}"),
            #[cfg(feature = "etcd")]
            Store::Etcd(endpoint) => format!("etcd {endpoint}"),
        }
    }

    fn backend(&self) -> Box<dyn Backend> {
        match self {
            Store::Memory(store) => Box::new(store.backend()),
            #[cfg(feature = "zookeeper")]
            Store::ZooKeeper(address) => {
                Box::new(tenure::zookeeper::ZooKeeperBackend::new(address.clone()))
            }
            #[cfg(feature = "etcd")]
            Store::Etcd(endpoint) => Box::new(tenure::etcd::EtcdBackend::new(endpoint.clone())),
        }
    }

    /// The committed offsets, where the store can be read without a client
    /// of its own: `None` when it cannot, `Some(None)` for a partition with
    /// nothing committed yet.
    fn committed(&self, group: &str, partition: &TopicPartition) -> Option<Option<Offset>> {
        match self {
            Store::Memory(store) => Some(store.committed(group, partition)),
            #[cfg(any(feature = "zookeeper", feature = "etcd"))]
            _ => None,
        }
    }
}

/// One member's processing of one partition under one claim: offsets
/// `start..end`.
struct Run {
    partition: u32,
    member: MemberId,
    token: FencingToken,
    start: Offset,
    end: Offset,
}

/// What the members processed, shared by their workloads and the table.
#[derive(Default)]
struct Ledger {
    runs: Vec<Run>,
    totals: BTreeMap<MemberId, u64>,
    /// Where each partition's processing stands: the end of its latest run.
    next: BTreeMap<u32, Offset>,
    /// Processing that went on after another member had started on the
    /// same partition: two consumers at once.
    overlaps: Vec<String>,
    notes: Vec<String>,
}

impl Ledger {
    fn begin(
        &mut self,
        partition: u32,
        member: &MemberId,
        token: FencingToken,
        start: Offset,
    ) -> usize {
        if let Some(previous) = self.runs.iter().rev().find(|r| r.partition == partition) {
            if previous.member != *member {
                let how = match start.cmp(&previous.end) {
                    std::cmp::Ordering::Equal => "no gap, no duplicate".to_owned(),
                    std::cmp::Ordering::Less => {
                        format!("{} duplicates", previous.end - start)
                    }
                    std::cmp::Ordering::Greater => {
                        format!("GAP of {}", start - previous.end)
                    }
                };
                self.notes.push(format!(
                    "  > {member:<4} resumes {TOPIC}/{partition} at {start} where {} stopped at {} ({how})",
                    previous.member, previous.end
                ));
            }
        }
        self.runs.push(Run {
            partition,
            member: member.clone(),
            token,
            start,
            end: start,
        });
        self.next.insert(partition, start);
        self.runs.len() - 1
    }

    fn advance(&mut self, run: usize, to: Offset) {
        let Some(current) = self.runs.get(run) else {
            return;
        };
        let (partition, member, token, from) = (
            current.partition,
            current.member.clone(),
            current.token,
            current.end,
        );
        if let Some(later) = self.runs[run + 1..]
            .iter()
            .find(|r| r.partition == partition)
        {
            self.overlaps.push(format!(
                "{member} processed {TOPIC}/{partition} (token {}) after {} started on it (token {})",
                token.0, later.member, later.token.0
            ));
        } else {
            self.next.insert(partition, to);
        }
        self.runs[run].end = to;
        *self.totals.entry(member).or_default() += u64::try_from(to - from).unwrap_or(0);
    }

    /// Per partition: whether the runs cover `0..max` without a hole.
    fn audit(&self, partitions: u32) -> Audit {
        let mut audit = Audit::default();
        for partition in 0..partitions {
            let mut runs: Vec<&Run> = self
                .runs
                .iter()
                .filter(|r| r.partition == partition && r.end > r.start)
                .collect();
            runs.sort_by_key(|r| r.start);
            let mut covered: Offset = 0;
            for run in runs {
                let length = run.end - run.start;
                audit.processed += length;
                if run.start > covered {
                    audit.gaps += run.start - covered;
                    audit.problems.push(format!(
                        "{TOPIC}/{partition}: offsets {covered}..{} never processed ({} resumed at {})",
                        run.start, run.member, run.start
                    ));
                } else {
                    audit.duplicates += covered.min(run.end) - run.start;
                }
                covered = covered.max(run.end);
            }
            audit.ends.insert(partition, covered);
        }
        audit
    }
}

#[derive(Default)]
struct Audit {
    processed: i64,
    duplicates: i64,
    gaps: i64,
    /// Per partition, the end of the contiguous run.
    ends: BTreeMap<u32, Offset>,
    problems: Vec<String>,
}

fn locked(ledger: &Mutex<Ledger>) -> std::sync::MutexGuard<'_, Ledger> {
    // A workload that panicked leaves its numbers as they were; the audit
    // still reads them.
    ledger.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A partition this member is processing.
struct Lane {
    token: FencingToken,
    run: usize,
    started: Instant,
    start: Offset,
    next: Offset,
}

/// One member's synthetic workload: processes every assigned partition at
/// `rate` messages per second until told to leave, then leaves the group.
async fn work(
    mut member: GroupMember,
    rate: u32,
    ledger: Arc<Mutex<Ledger>>,
    mut leave: oneshot::Receiver<()>,
) -> Result<(), String> {
    let id = member.id().clone();
    let mut lanes: BTreeMap<TopicPartition, Lane> = BTreeMap::new();
    let mut batches = tokio::time::interval(BATCH_TICK);
    batches.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            // Leaving goes first, so a member told to leave starts on no
            // partition assigned in the meantime.
            biased;
            _ = &mut leave => break,
            event = member.next_event() => match event {
                Some(AssignmentEvent::Assigned { partition, from, token }) => {
                    let start = match from {
                        FetchFrom::Offset(offset) => offset,
                        // The synthetic log starts empty with the demo, so
                        // its oldest and newest offsets are both 0.
                        _ => 0,
                    };
                    let run = locked(&ledger).begin(partition.partition, &id, token, start);
                    let lane = Lane { token, run, started: Instant::now(), start, next: start };
                    lanes.insert(partition, lane);
                }
                Some(AssignmentEvent::Revoking { partition, token }) => {
                    if lanes.get(&partition).is_some_and(|lane| lane.token == token) {
                        lanes.remove(&partition);
                    }
                    // Everything processed was reported before this, so the
                    // final commit covers it.
                    member.drained(partition, token);
                }
                Some(AssignmentEvent::Revoked { partition, token }) => {
                    if lanes.get(&partition).is_some_and(|lane| lane.token == token) {
                        lanes.remove(&partition);
                    }
                }
                // Changes of kinds this demo does not know.
                Some(_) => {}
                None => return Err(format!("{id}: the member stopped on its own")),
            },
            _ = batches.tick() => {
                let mut ledger = locked(&ledger);
                while let Some(problem) = member.try_next_error() {
                    ledger.notes.push(format!("  ! {id:<4} {problem}"));
                }
                for (partition, lane) in &mut lanes {
                    // Due from the lane's start, so rounding never drifts the
                    // rate.
                    let due = lane.start
                        + (lane.started.elapsed().as_secs_f64() * f64::from(rate)) as Offset;
                    if due > lane.next {
                        lane.next = due;
                        ledger.advance(lane.run, due);
                        member.processed(partition.clone(), lane.token, due - 1);
                    }
                }
            }
        }
    }
    // Nothing is in hand once the lanes are dropped, so close() may answer
    // the drains itself.
    drop(lanes);
    let report = member
        .close()
        .await
        .map_err(|e| format!("{id} could not leave cleanly: {e}"))?;
    if !report.all_written() {
        return Err(format!(
            "{id}'s final commits were not all written: {report:?}"
        ));
    }
    Ok(())
}

struct Worker {
    id: MemberId,
    leave: oneshot::Sender<()>,
    task: JoinHandle<Result<(), String>>,
}

/// What every member is started with.
#[derive(Clone)]
struct Setup {
    store: Arc<Store>,
    group: String,
    partitions: u32,
    rate: u32,
    log: mpsc::UnboundedSender<(MemberId, View)>,
    ledger: Arc<Mutex<Ledger>>,
}

impl Worker {
    async fn join(setup: Setup, name: String) -> Result<Worker, String> {
        let mut config =
            tenure::core::Config::new(&setup.group, &name, [TOPIC]).map_err(|e| e.to_string())?;
        config = config
            .with_session_timeout(SESSION)
            .with_processing_timeout(Duration::from_secs(2));
        config = config.with_commit_interval(COMMIT_INTERVAL);
        let member = GroupMember::builder(config)
            .partitions([(TOPIC.to_owned(), setup.partitions)].into())
            .view_log(setup.log)
            .join(setup.store.backend())
            .await
            .map_err(|e| format!("{name} cannot join: {e}"))?;
        let id = member.id().clone();
        let (leave, told) = oneshot::channel();
        let task = tokio::spawn(work(member, setup.rate, setup.ledger, told));
        Ok(Worker { id, leave, task })
    }

    /// Tells the member to leave at once; the future says how that went,
    /// by `deadline` at the latest.
    fn leave(self, deadline: Instant) -> impl std::future::Future<Output = Result<(), String>> {
        // A workload that already ended reports why through its task.
        let _ = self.leave.send(());
        async move {
            match tokio::time::timeout_at(deadline, self.task).await {
                Ok(Ok(result)) => result,
                Ok(Err(e)) => Err(format!("{}: its workload failed: {e}", self.id)),
                Err(_) => Err(format!("{} did not leave in time", self.id)),
            }
        }
    }
}

/// The live table: the members' views, the ledger's numbers, the phase.
struct Monitor {
    tty: bool,
    group: String,
    title: String,
    partitions: u32,
    ledger: Arc<Mutex<Ledger>>,
    store: Arc<Store>,
    roster: Vec<MemberId>,
    views: BTreeMap<MemberId, View>,
    /// Who claimed each partition last, to count handoffs.
    last_owner: BTreeMap<u32, MemberId>,
    handoffs: usize,
    phase: String,
    begun: Instant,
    redraw: tokio::time::Interval,
    draws: u64,
    /// Totals at the last table, for the rates.
    before: (Instant, BTreeMap<MemberId, u64>),
    recent: VecDeque<String>,
}

impl Monitor {
    fn note(&mut self, line: String) {
        if self.tty {
            if self.recent.len() == RECENT {
                self.recent.pop_front();
            }
            self.recent.push_back(line);
        } else {
            say(&line);
        }
    }

    fn on_view(&mut self, member: MemberId, view: View) {
        let before = self
            .views
            .get(&member)
            .map(|v| v.owned.clone())
            .unwrap_or_default();
        for (partition, token) in &view.owned {
            if before.contains_key(partition) {
                continue;
            }
            let from = match self.last_owner.insert(partition.partition, member.clone()) {
                Some(previous) if previous != member => {
                    self.handoffs += 1;
                    format!(" from {previous}")
                }
                _ => String::new(),
            };
            self.note(format!(
                "  + {member:<4} claims  {partition:<10} fencing token {}{from}",
                token.0
            ));
        }
        for (partition, token) in &before {
            if !view.owned.contains_key(partition) {
                self.note(format!(
                    "  - {member:<4} release {partition:<10} fencing token {}",
                    token.0
                ));
            }
        }
        if view.closed && !self.views.get(&member).is_some_and(|v| v.closed) {
            self.note(format!("  {member} left the group"));
            if self.phase == format!("{member} leaving") {
                self.phase = format!("{member} left");
            }
        }
        self.views.insert(member, view);
    }

    /// Follows the members until `until`, redrawing as it goes.
    async fn follow(
        &mut self,
        changes: &mut mpsc::UnboundedReceiver<(MemberId, View)>,
        until: Instant,
    ) {
        loop {
            tokio::select! {
                change = changes.recv() => match change {
                    Some((member, view)) => self.on_view(member, view),
                    None => return tokio::time::sleep_until(until).await,
                },
                _ = self.redraw.tick() => self.tick(),
                _ = tokio::time::sleep_until(until) => return,
            }
        }
    }

    fn tick(&mut self) {
        self.take_notes();
        self.draws += 1;
        // Off a terminal, a snapshot every other redraw: once a second.
        if self.tty || self.draws.is_multiple_of(2) {
            self.draw();
        }
    }

    fn take_notes(&mut self) {
        let notes = std::mem::take(&mut locked(&self.ledger).notes);
        for line in notes {
            self.note(line);
        }
    }

    fn draw(&mut self) {
        let (totals, next) = {
            let ledger = locked(&self.ledger);
            (ledger.totals.clone(), ledger.next.clone())
        };
        let now = Instant::now();
        let seconds = (now - self.before.0).as_secs_f64().max(0.001);
        let mut lines = vec![
            self.title.clone(),
            format!(
                "{:<6} {:>4} {:>7} {:>10} {:>11}  {}",
                "member", "owns", "msg/s", "processed", "uncommitted", "partition@fencing token"
            ),
        ];
        let (mut group_rate, mut group_total) = (0.0, 0);
        for member in &self.roster {
            let Some(view) = self.views.get(member) else {
                continue;
            };
            if view.closed {
                continue;
            }
            let total = totals.get(member).copied().unwrap_or(0);
            let earlier = self.before.1.get(member).copied().unwrap_or(0);
            let rate = total.saturating_sub(earlier) as f64 / seconds;
            group_rate += rate;
            group_total += total;
            let owned: Vec<String> = view
                .owned
                .iter()
                .map(|(p, t)| format!("{}@{}", p.partition, t.0))
                .collect();
            let mut uncommitted = Some(0);
            for partition in view.owned.keys() {
                let processed = next.get(&partition.partition).copied().unwrap_or(0);
                uncommitted = uncommitted.and_then(|sum: Offset| {
                    let committed = self.store.committed(&self.group, partition)?;
                    Some(sum + (processed - committed.unwrap_or(0)).max(0))
                });
            }
            lines.push(format!(
                "{:<6} {:>4} {:>7} {:>10} {:>11}  {}",
                member.as_str(),
                owned.len(),
                grouped(rate.round() as u64),
                grouped(total),
                uncommitted.map_or("-".to_owned(), |u| grouped(u as u64)),
                owned.join(" "),
            ));
        }
        // Members that left still count towards the group's total.
        let departed: u64 = totals
            .iter()
            .filter(|(m, _)| self.views.get(*m).is_some_and(|v| v.closed))
            .map(|(_, t)| t)
            .sum();
        lines.push(format!(
            "{:<6} {:>4} {:>7} {:>10} {:>11}  handoffs {}, phase: {}",
            "group",
            self.partitions,
            grouped(group_rate.round() as u64),
            grouped(group_total + departed),
            "",
            self.handoffs,
            self.phase,
        ));
        self.before = (now, totals);
        let elapsed = (now - self.begun).as_secs_f64();
        if self.tty {
            lines.push(format!("t = {elapsed:.1} s"));
            lines.push(String::new());
            lines.extend(self.recent.iter().cloned());
            // From the top left each time, so lines that wrap on a narrow
            // terminal cannot push the table down the screen.
            let mut frame = String::from("\x1b[H");
            for line in lines {
                frame.push_str(&line);
                frame.push_str("\x1b[K\n");
            }
            frame.push_str("\x1b[J");
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(frame.as_bytes());
            let _ = out.flush();
        } else {
            say(format_args!("[{elapsed:4.1} s] {}", self.phase));
            for line in &lines[1..] {
                say(format_args!("  {line}"));
            }
        }
    }

    /// What is wrong with ownership now, if anything: every partition must
    /// be owned and fetched by exactly one member, and that one live.
    fn ownership_problem(&self, live: &[MemberId]) -> Option<String> {
        for partition in 0..self.partitions {
            let partition = TopicPartition::new(TOPIC, partition);
            let owners: Vec<&MemberId> = self
                .views
                .iter()
                .filter(|(_, v)| !v.closed && v.owned.contains_key(&partition))
                .map(|(m, _)| m)
                .collect();
            match owners.as_slice() {
                [] => return Some(format!("{partition} has no owner")),
                [one] if !live.contains(one) => {
                    return Some(format!(
                        "{partition} is owned by {one}, which should have left"
                    ))
                }
                [one]
                    if !self
                        .views
                        .get(*one)
                        .is_some_and(|v| v.fetching.contains(&partition)) =>
                {
                    return Some(format!("{partition} is owned by {one} but not consumed"))
                }
                [_] => {}
                many => {
                    let names: Vec<&str> = many.iter().map(|m| m.as_str()).collect();
                    return Some(format!("{partition} is owned by {}", names.join(" and ")));
                }
            }
        }
        None
    }

    /// Waits (up to the grace period) for every partition to have exactly
    /// one live owner.
    async fn check_ownership(
        &mut self,
        changes: &mut mpsc::UnboundedReceiver<(MemberId, View)>,
        live: &[MemberId],
        when: &str,
    ) -> Result<(), String> {
        let give_up = Instant::now() + GRACE;
        loop {
            match self.ownership_problem(live) {
                None => {
                    let names: Vec<&str> = live.iter().map(|m| m.as_str()).collect();
                    self.note(format!(
                        "  ok {when}: each of {} partitions owned by exactly one of {}",
                        self.partitions,
                        names.join(" ")
                    ));
                    return Ok(());
                }
                Some(problem) if Instant::now() >= give_up => {
                    self.draw();
                    return Err(format!("{when}: {problem}"));
                }
                Some(_) => {
                    let soon = (Instant::now() + Duration::from_millis(100)).min(give_up);
                    self.follow(changes, soon).await;
                }
            }
        }
    }
}

fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

async fn run(args: Args) -> Result<String, String> {
    let store = Arc::new(Store::pick(&args)?);
    let group = format!("demo-{}", std::process::id());
    let tty = std::io::stdout().is_terminal();
    let title = format!(
        "group {group} on {}, {} partitions at {} msg/s each",
        store.describe(),
        args.partitions,
        args.rate
    );
    if tty {
        say("\x1b[2J");
    } else {
        say(&title);
    }
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let (log, mut changes) = mpsc::unbounded_channel();
    let setup = Setup {
        store: store.clone(),
        group: group.clone(),
        partitions: args.partitions,
        rate: args.rate,
        log,
        ledger: ledger.clone(),
    };
    // All at once, so that the first assignment already shares the
    // partitions out rather than handing most of them on straight away.
    let joining: Vec<_> = (1..=args.members)
        .map(|n| tokio::spawn(Worker::join(setup.clone(), format!("m{n}"))))
        .collect();
    let mut workers = Vec::new();
    for join in joining {
        workers.push(join.await.map_err(|e| e.to_string())??);
    }
    let start = Instant::now();
    let mut redraw = tokio::time::interval(REDRAW);
    redraw.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut monitor = Monitor {
        tty,
        group: group.clone(),
        title,
        partitions: args.partitions,
        ledger: ledger.clone(),
        store: store.clone(),
        roster: workers.iter().map(|w| w.id.clone()).collect(),
        views: BTreeMap::new(),
        last_owner: BTreeMap::new(),
        handoffs: 0,
        phase: "settling".to_owned(),
        begun: start,
        redraw,
        draws: 0,
        before: (start, BTreeMap::new()),
        recent: VecDeque::new(),
    };
    let live = |workers: &[Worker]| workers.iter().map(|w| w.id.clone()).collect::<Vec<_>>();
    let step = args.duration() / 3;

    monitor.follow(&mut changes, start + step).await;
    monitor
        .check_ownership(&mut changes, &live(&workers), "settled")
        .await?;

    let newcomer = format!("m{}", args.members + 1);
    let worker = Worker::join(setup.clone(), newcomer.clone()).await?;
    monitor.roster.push(worker.id.clone());
    workers.push(worker);
    monitor.phase = format!("{newcomer} joined");
    monitor.follow(&mut changes, start + step * 2).await;
    monitor
        .check_ownership(&mut changes, &live(&workers), &format!("{newcomer} joined"))
        .await?;

    let leaver = workers.remove(0);
    monitor.phase = format!("{} leaving", leaver.id);
    let leaving = leaver.leave(start + args.duration() + CLOSE_LIMIT);
    monitor.follow(&mut changes, start + args.duration()).await;
    leaving.await?;
    let left = monitor.phase.clone();
    monitor
        .check_ownership(&mut changes, &live(&workers), &left)
        .await?;

    monitor.phase = "closing".to_owned();
    let handoffs_before_closing = monitor.handoffs;
    let deadline = Instant::now() + CLOSE_LIMIT;
    // Every member is told before any is waited for, so that few of them
    // take over partitions from the others on their way out.
    let closing: Vec<_> = workers.into_iter().map(|w| w.leave(deadline)).collect();
    for leaving in closing {
        leaving.await?;
    }
    // The last views (every member closed) are in the log by now.
    while let Ok((member, view)) = changes.try_recv() {
        monitor.on_view(member, view);
    }
    monitor.phase = "all members left".to_owned();
    monitor.take_notes();
    monitor.draw();

    let (audit, overlaps) = {
        let ledger = locked(&ledger);
        (ledger.audit(args.partitions), ledger.overlaps.clone())
    };
    let mut problems = audit.problems;
    problems.extend(overlaps);
    if let Some(open) = monitor.views.iter().find(|(_, v)| !v.closed) {
        problems.push(format!("{} never reported that it left", open.0));
    }
    for (partition, end) in &audit.ends {
        let tp = TopicPartition::new(TOPIC, *partition);
        if let Some(committed) = store.committed(&group, &tp) {
            let committed = committed.unwrap_or(0);
            // A clean leave commits everything processed, no more.
            if committed != *end {
                problems.push(format!(
                    "{tp}: committed {committed} after processing up to {end}"
                ));
            }
        }
    }
    if !problems.is_empty() {
        return Err(problems.join("\n"));
    }
    Ok(format!(
        "demo ok: {} members, {} partitions, {} handoffs (+{} as the group closed), \
         processed={} duplicates={} gaps={}",
        monitor.roster.len(),
        args.partitions,
        handoffs_before_closing,
        monitor.handoffs - handoffs_before_closing,
        audit.processed,
        audit.duplicates,
        audit.gaps
    ))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(summary) => {
            say(&summary);
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("demo failed: {message}");
            ExitCode::FAILURE
        }
    }
}
