//! How coordination scales: M members (tasks of this process) over P
//! partitions, on the real ZooKeeper or etcd of `scripts/services`.
//!
//! ```text
//! cargo run --release --example bench_scale -- --store zookeeper --members 10 --partitions 1000
//! cargo run --release --features etcd --example bench_scale -- --store etcd --members 100 --partitions 10000
//! ```
//!
//! It measures, in this order: a cold start (every member joins at once)
//! until every partition is owned once and every member settled; one more
//! member joining; one leaving; a rolling restart of every member, dynamic
//! (each closes and joins again) and then static (each closes keeping its
//! session, and a new instance resumes it). For each restart: how many
//! times a partition changed owner or token, the longest time any
//! partition had no owner, and the store requests sent per move. After
//! the cold start, the sessions lost on the way (each starts a member's
//! work over) and the process's resident memory: in all, and what it grew
//! by per partition held (every member's cost included, and the bench's
//! own views), and the heap the members keep per partition held (counted
//! by the allocator, less what the bench's own views take); after the
//! restarts, both again.
//!
//! (`--restarts false` leaves the restarts out, and ends the line with
//! the resident memory once the extra member has left.)
//!
//! With `--rtt-ms N`, every member's connection to the store goes through
//! a proxy that delays each chunk of bytes by N/2 ms either way, a round
//! trip of N ms (`tenure_testkit::proxy::at_distance`). No Kafka is
//! involved: members are given their topic's partition count. The line
//! ends with the goal for a cold start, two seconds and twenty round
//! trips (stated for 100 members over 10,000 partitions), and whether the
//! run met it.
//!
//! Before the last line, for each restart, where its requests went: a
//! line of `kind=requests/commands` pairs (the store requests sent for
//! each kind of the members' commands, and how many of those commands
//! there were), then the requests of each kind per move.
//!
//! There are no messages: nothing is committed unless `--commits true`,
//! with which every member marks what it owns processed before each
//! member restarts, so that each handoff carries a final commit.
//!
//! The last line:
//!
//! ```text
//! rtt_ms=N members=M partitions=P cold_start_ms=… cold_start_sessions_lost=… join_settle_ms=… leave_settle_ms=… rolling_restart_moves=… rolling_restart_max_unowned_ms=… requests_per_move=… static_rolling_restart_moves=… static_rolling_restart_max_unowned_ms=… rss_cold_start_mib=… rss_per_partition_bytes=… heap_per_partition_bytes=… rss_after_restarts_mib=… heap_per_partition_after_restarts_bytes=… cold_start_goal_ms=… cold_start_within_goal=…
//! ```

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use common::Store;
use tenure::core::{Config, MemberId, TopicPartition};
use tenure::tokio::store::{RequestCounts, RequestKind, RequestTally};
use tenure::tokio::{Backend, GroupMember, MemberHandle, StaticMembership, View};
use tokio::sync::mpsc;

/// The system allocator, counting the bytes allocated and not yet freed,
/// so that the heap the members keep can be told apart from the bench's
/// own records (resident memory counts both, and the allocator's slack).
struct CountingAllocator;

/// Bytes allocated through [`CountingAllocator`] and not yet freed.
static HEAP_LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; the
// count beside it does not touch the memory.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller keeps `alloc`'s contract; it is passed on.
        let block = unsafe { System.alloc(layout) };
        if !block.is_null() {
            HEAP_LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        block
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let block = unsafe { System.alloc_zeroed(layout) };
        if !block.is_null() {
            HEAP_LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        block
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        // SAFETY: `block` came from this allocator with `layout`.
        unsafe { System.dealloc(block, layout) };
        HEAP_LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller keeps `realloc`'s contract; it is passed on.
        let moved = unsafe { System.realloc(block, layout, new_size) };
        if !moved.is_null() {
            HEAP_LIVE.fetch_add(new_size, Ordering::Relaxed);
            HEAP_LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        moved
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// The heap in use, in bytes.
fn heap_live() -> usize {
    HEAP_LIVE.load(Ordering::Relaxed)
}

/// How coordination scales: members (tasks of this process) over
/// partitions, on the real ZooKeeper or etcd of `scripts/services`.
#[derive(Parser)]
struct Args {
    /// The store (its address from `TENURE_ZOOKEEPER` or `TENURE_ETCD`;
    /// etcd: built with `--features etcd`).
    #[arg(long, value_enum)]
    store: Store,
    /// Members at the cold start.
    #[arg(long, default_value_t = 10)]
    members: usize,
    /// Partitions of the group's topic.
    #[arg(long, default_value_t = 1000)]
    partitions: u32,
    /// The members' session timeout.
    #[arg(long, default_value_t = 10_000)]
    session_ms: u64,
    /// Whether to measure the rolling restarts (a member at a time: at
    /// hundreds of members they take the better part of an hour); without
    /// them their figures are left out of the last line.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    restarts: bool,
    /// The round trip between the members and the store, in milliseconds:
    /// half of it each way through a delaying proxy (0: no proxy).
    #[arg(long, default_value_t = 0)]
    rtt_ms: u64,
    /// Whether every member marks what it owns processed before each
    /// member restarts, so that each release carries a final commit (and
    /// interval commits go out): there are no messages here, and without
    /// it nothing is ever committed.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    commits: bool,
}

struct Options {
    store: Store,
    /// Whether members mark what they own processed before restarts.
    commits: bool,
    /// Where members reach the store (through the proxy, if any).
    address: String,
    members: usize,
    partitions: u32,
    session: Duration,
}

impl Options {
    fn new(args: Args) -> Result<Options, String> {
        Ok(Options {
            store: args.store,
            commits: args.commits,
            address: common::server(args.store.variable())?,
            members: args.members,
            partitions: args.partitions,
            session: Duration::from_millis(args.session_ms),
        })
    }
}

/// A backend of the chosen store, and its request counts.
fn backend(
    options: &Options,
    prefix: &str,
) -> Result<(Box<dyn Backend>, Arc<RequestCounts>), String> {
    match options.store {
        Store::ZooKeeper => {
            let backend = tenure::zookeeper::ZooKeeperBackend::new(options.address.clone())
                .connect_timeout(Duration::from_secs(30));
            let requests = backend.request_counts();
            Ok((Box::new(backend), requests))
        }
        #[cfg(feature = "etcd")]
        Store::Etcd => {
            let backend = tenure::etcd::EtcdBackend::new(options.address.clone())
                .prefix(prefix)
                .connect_timeout(Duration::from_secs(30));
            let requests = backend.request_counts();
            Ok((Box::new(backend), requests))
        }
        #[cfg(not(feature = "etcd"))]
        Store::Etcd => {
            let _ = prefix;
            Err("etcd is not in this build: run with `--features etcd`".to_owned())
        }
    }
}

/// The members' views as they publish them, and what the partitions did.
///
/// Views of different members arrive in the order they were published, not
/// in the order the store saw the claims: a member's view can still list a
/// partition it is releasing after its successor's view lists it. So what
/// happened to a partition is read from its fencing tokens, which the store
/// hands out in increasing order, never from the order of arrival.
struct Watcher {
    log: mpsc::UnboundedSender<(MemberId, View)>,
    updates: mpsc::UnboundedReceiver<(MemberId, View)>,
    latest: BTreeMap<String, View>,
    /// How many of the latest views list each partition, and in all: kept
    /// as views come, since the settle check looks after every view and
    /// walking all of them there cost O(P) per view.
    holders: BTreeMap<TopicPartition, usize>,
    listed: usize,
    /// Every claim seen, by partition and token.
    claims: BTreeMap<TopicPartition, BTreeMap<u64, Claim>>,
    /// Since the last `reset`: new claims of a partition that had one
    /// before, and the longest time a partition had no owner (from the view
    /// that dropped a claim to the view that showed the next one).
    moves: u64,
    max_unowned: Duration,
    /// Sessions that ended under a running member (expired, or given up),
    /// since it was made: each starts the member's work over.
    sessions_lost: u64,
}

/// When a claim was first shown, and first shown dropped.
#[derive(Clone)]
struct Claim {
    shown: Instant,
    dropped: Option<Instant>,
}

impl Watcher {
    fn new() -> Watcher {
        let (log, updates) = mpsc::unbounded_channel();
        Watcher {
            log,
            updates,
            latest: BTreeMap::new(),
            holders: BTreeMap::new(),
            listed: 0,
            claims: BTreeMap::new(),
            moves: 0,
            max_unowned: Duration::ZERO,
            sessions_lost: 0,
        }
    }

    fn reset(&mut self) {
        self.moves = 0;
        self.max_unowned = Duration::ZERO;
    }

    /// Drops the latest view of `name` (a member that left or restarts).
    fn forget(&mut self, name: &str) {
        if let Some(view) = self.latest.remove(name) {
            self.unlist(view.owned.keys());
        }
    }

    fn unlist<'a>(&mut self, partitions: impl Iterator<Item = &'a TopicPartition>) {
        for partition in partitions {
            self.listed -= 1;
            if let Some(count) = self.holders.get_mut(partition) {
                *count -= 1;
                if *count == 0 {
                    self.holders.remove(partition);
                }
            }
        }
    }

    fn apply(&mut self, member: MemberId, view: View) {
        let name = member.to_string();
        let at = view.at.unwrap_or_else(Instant::now);
        let before = self.latest.insert(name.clone(), view);
        let view = &self.latest[&name];
        if let Some(was) = before.as_ref().and_then(|b| b.session) {
            if view.session != Some(was) && !view.closed {
                self.sessions_lost += 1;
            }
        }
        // What changed since the member's previous view, by one walk of
        // both (sorted) maps: a lookup of each partition in the other view
        // cost O(P log P) per view, which a member owning 10,000
        // partitions publishes at each of its 20,000 steps.
        let empty = BTreeMap::new();
        let old = before.as_ref().map_or(&empty, |b| &b.owned);
        let (mut was, mut is) = (old.iter().peekable(), view.owned.iter().peekable());
        let (mut dropped, mut shown) = (Vec::new(), Vec::new());
        let (mut listed, mut unlisted) = (Vec::new(), Vec::new());
        loop {
            let order = match (was.peek(), is.peek()) {
                (Some((a, _)), Some((b, _))) => a.cmp(b),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => break,
            };
            match order {
                std::cmp::Ordering::Less => {
                    if let Some((p, t)) = was.next() {
                        unlisted.push(p.clone());
                        dropped.push((p.clone(), *t));
                    }
                }
                std::cmp::Ordering::Greater => {
                    if let Some((p, t)) = is.next() {
                        listed.push(p.clone());
                        shown.push((p.clone(), *t));
                    }
                }
                std::cmp::Ordering::Equal => {
                    if let (Some((p, a)), Some((_, b))) = (was.next(), is.next()) {
                        if a != b {
                            dropped.push((p.clone(), *a));
                            shown.push((p.clone(), *b));
                        }
                    }
                }
            }
        }
        for partition in listed {
            self.listed += 1;
            *self.holders.entry(partition).or_default() += 1;
        }
        self.unlist(unlisted.iter());
        for (partition, token) in dropped {
            let Some(tokens) = self.claims.get_mut(&partition) else {
                continue;
            };
            if let Some(claim) = tokens.get_mut(&token.0) {
                claim.dropped.get_or_insert(at);
            }
            // The next claim may have been shown first.
            if let Some((_, next)) = tokens.range(token.0 + 1..).next() {
                self.max_unowned = self
                    .max_unowned
                    .max(next.shown.saturating_duration_since(at));
            }
        }
        for (partition, token) in shown {
            let tokens = self.claims.entry(partition).or_default();
            if tokens.contains_key(&token.0) {
                continue;
            }
            if let Some((_, previous)) = tokens.range(..token.0).next_back() {
                self.moves += 1;
                if let Some(dropped) = previous.dropped {
                    self.max_unowned = self.max_unowned.max(at.saturating_duration_since(dropped));
                }
            } else if tokens.range(token.0..).next().is_some() {
                // A claim older than one already seen, shown late.
                self.moves += 1;
            }
            tokens.insert(
                token.0,
                Claim {
                    shown: at,
                    dropped: None,
                },
            );
        }
    }

    /// The heap the watcher's own records take: what dropping them frees,
    /// measured with a copy of them taken first and put in their place.
    fn heap_held(&mut self) -> usize {
        let copy = (
            self.latest.clone(),
            self.holders.clone(),
            self.claims.clone(),
        );
        let before = heap_live();
        let latest = std::mem::replace(&mut self.latest, copy.0);
        let holders = std::mem::replace(&mut self.holders, copy.1);
        let claims = std::mem::replace(&mut self.claims, copy.2);
        drop((latest, holders, claims));
        before.saturating_sub(heap_live())
    }

    /// Partitions in the latest views: (listed in all, distinct).
    fn owned(&self) -> (usize, usize) {
        (self.listed, self.holders.len())
    }

    /// What keeps `members` from being settled, for a stall's report.
    fn unsettled(&self, members: &[String]) -> String {
        let mut reasons = Vec::new();
        for m in members {
            match self.latest.get(m) {
                None => reasons.push(format!("{m} has published no view")),
                Some(v) if !(v.settled && v.registered) || v.closed => reasons.push(format!(
                    "{m} settled={} registered={} closed={} assigned={} owned={} fetching={}",
                    v.settled,
                    v.registered,
                    v.closed,
                    v.assigned.len(),
                    v.owned.len(),
                    v.fetching.len()
                )),
                Some(_) => {}
            }
        }
        let mut holders: BTreeMap<&TopicPartition, Vec<String>> = BTreeMap::new();
        for (m, v) in &self.latest {
            for (p, t) in &v.owned {
                holders.entry(p).or_default().push(format!("{m}@{}", t.0));
            }
        }
        for (p, h) in holders.iter().filter(|(_, h)| h.len() > 1) {
            reasons.push(format!("{p} in the views of {}", h.join(" ")));
        }
        let (listed, distinct) = self.owned();
        reasons.push(format!("{listed} owned by the views, {distinct} distinct"));
        reasons.join("; ")
    }

    /// Waits until `members` are all settled, registered, each with its
    /// balanced share, and together own every one of `partitions` once.
    async fn settled(&mut self, members: &[String], partitions: u32) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
        loop {
            while let Ok((member, view)) = self.updates.try_recv() {
                self.apply(member, view);
            }
            // Each member owns its balanced share (so none is still working
            // from an older member list), and no one else owns anything.
            let n = members.len().max(1);
            let share = (partitions as usize / n)..=(partitions as usize).div_ceil(n);
            let done = members.iter().all(|m| {
                self.latest.get(m).is_some_and(|v| {
                    v.settled && v.registered && !v.closed && share.contains(&v.owned.len())
                })
            }) && self.owned() == (partitions as usize, partitions as usize);
            if done {
                return Ok(());
            }
            let wake = deadline.min(tokio::time::Instant::now() + Duration::from_secs(30));
            match tokio::time::timeout_at(wake, self.updates.recv()).await {
                Ok(Some((member, view))) => self.apply(member, view),
                Ok(None) => return Err("the view log closed".to_owned()),
                Err(_) if wake < deadline => eprintln!("    waiting: {}", self.unsettled(members)),
                Err(_) => {
                    return Err(format!(
                        "not settled within 600 s: {}",
                        self.unsettled(members)
                    ))
                }
            }
        }
    }
}

struct Bench {
    options: Options,
    group: String,
    prefix: String,
    state_dir: PathBuf,
    watcher: Watcher,
    requests: Vec<Arc<RequestCounts>>,
}

impl Bench {
    async fn join(&mut self, member: &str, static_member: bool) -> Result<MemberHandle, String> {
        let (backend, requests) = backend(&self.options, &self.prefix)?;
        self.requests.push(requests);
        let config = Config::new(&self.group, member, ["t"])
            .map_err(|e| e.to_string())?
            .with_session_timeout(self.options.session);
        let mut builder = GroupMember::builder(config)
            .partitions([("t".to_owned(), self.options.partitions)].into())
            .auto_drain(true)
            .view_log(self.watcher.log.clone());
        if static_member {
            builder = builder.static_membership(StaticMembership::new(
                self.state_dir.join(format!("{member}.state")),
            ));
        }
        let joined = builder
            .join(backend)
            .await
            .map_err(|e| format!("{member} cannot join: {e}"))?;
        Ok(report_problems(member, joined))
    }

    fn requests(&self) -> u64 {
        self.requests.iter().map(|r| r.total()).sum()
    }

    /// Every backend's requests so far, by kind.
    fn tally(&self) -> RequestTally {
        self.requests
            .iter()
            .fold(RequestTally::default(), |sum, r| sum.plus(&r.snapshot()))
    }

    /// Tells every member that what it owns, as its latest view says, is
    /// processed up to an offset that grows with `round`: each partition
    /// has something to commit when it next moves.
    fn mark_processed(&self, members: &BTreeMap<String, MemberHandle>, round: usize) {
        let offset = i64::try_from(round).unwrap_or(i64::MAX);
        for (name, member) in members {
            let Some(view) = self.watcher.latest.get(name) else {
                continue;
            };
            for (partition, token) in &view.owned {
                member.processed(partition.clone(), *token, offset);
            }
        }
    }

    /// Restarts every member in turn; returns (moves, longest unowned,
    /// requests, and those by kind).
    async fn rolling_restart(
        &mut self,
        members: &mut BTreeMap<String, MemberHandle>,
        static_members: bool,
    ) -> Result<(u64, Duration, u64, RequestTally), String> {
        self.watcher.reset();
        let requests_before = self.requests();
        let tally_before = self.tally();
        let names: Vec<String> = members.keys().cloned().collect();
        for (round, name) in names.iter().enumerate() {
            let started = Instant::now();
            let requests_at_start = self.requests();
            if self.options.commits {
                self.mark_processed(members, round);
            }
            let member = members.remove(name).ok_or("a member vanished")?;
            let _ = member.close().await.map_err(|e| format!("{name}: {e}"))?;
            let closed = started.elapsed();
            // Settled again only once the new instance says so.
            while let Ok((member, view)) = self.watcher.updates.try_recv() {
                self.watcher.apply(member, view);
            }
            self.watcher.forget(name);
            members.insert(name.clone(), self.join(name, static_members).await?);
            let joined = started.elapsed();
            self.watcher
                .settled(&names, self.options.partitions)
                .await?;
            // Progress, so that a slow restart shows which member it was,
            // and which part of it.
            eprintln!(
                "    restarted {name}: {:?} (closed after {closed:?}, joined after {joined:?}), \
                 {} requests",
                started.elapsed(),
                self.requests() - requests_at_start
            );
        }
        Ok((
            self.watcher.moves,
            self.watcher.max_unowned,
            self.requests() - requests_before,
            self.tally().since(&tally_before),
        ))
    }
}

async fn run(args: Args) -> Result<(), String> {
    let restarts = args.restarts;
    let rtt_ms = args.rtt_ms;
    let mut options = Options::new(args)?;
    // Kept until the members are gone.
    let _distance = if rtt_ms == 0 {
        None
    } else {
        // Half the round trip each way.
        let one_way = Duration::from_micros(rtt_ms * 500);
        let (proxy, through) =
            tenure_testkit::proxy::at_distance(&options.address, one_way).await?;
        options.address = through;
        Some(proxy)
    };
    // The goal for a cold start: two seconds and twenty round trips.
    let goal = Duration::from_millis(2000 + 20 * rtt_ms);
    let goal_fields = |cold_start: Duration| {
        format!(
            "cold_start_goal_ms={} cold_start_within_goal={}",
            goal.as_millis(),
            cold_start <= goal
        )
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let group = format!("scale-{nanos}");
    let state_dir = std::env::temp_dir().join(format!("tenure-bench-scale-{nanos}"));
    std::fs::create_dir_all(&state_dir).map_err(|e| e.to_string())?;
    let (m, p) = (options.members, options.partitions);
    println!(
        "bench_scale: store={} members={m} partitions={p} session={:?} commits={} rtt_ms={rtt_ms}",
        options.store.name(),
        options.session,
        options.commits
    );
    let mut bench = Bench {
        prefix: format!("/tenure-bench/{group}"),
        group,
        state_dir: state_dir.clone(),
        options,
        watcher: Watcher::new(),
        requests: Vec::new(),
    };

    // Cold start: everyone at once.
    let names: Vec<String> = (0..m).map(|i| format!("m{i:03}")).collect();
    let rss_base = resident_bytes();
    let heap_base = heap_live();
    let started = Instant::now();
    let joins = join_all(&mut bench, &names).await?;
    let mut members: BTreeMap<String, MemberHandle> = names.iter().cloned().zip(joins).collect();
    bench.watcher.settled(&names, p).await?;
    let cold_start = started.elapsed();
    let cold_start_sessions_lost = bench.watcher.sessions_lost;
    let rss_cold = resident_bytes();
    // What the members and the partitions they hold cost, beyond what
    // the process held before the first joined (the bench's own views of
    // every member included: an upper bound).
    let grown = rss_cold.saturating_sub(rss_base);
    // The heap the members keep: what the heap grew by, less the bench's
    // own views of them.
    let heap_views = bench.watcher.heap_held();
    let heap_members = heap_live()
        .saturating_sub(heap_base)
        .saturating_sub(heap_views);
    let heap_per_partition = heap_members / p.max(1) as usize;
    println!(
        "  cold start: {cold_start:?}, {} requests, {cold_start_sessions_lost} sessions lost, \
         resident {} MiB ({} KiB per member, {} bytes per partition held); \
         members' heap {} KiB ({heap_per_partition} bytes per partition held), \
         the bench's views {} KiB",
        bench.requests(),
        rss_cold >> 20,
        (grown / m.max(1) as u64) >> 10,
        grown / u64::from(p.max(1)),
        heap_members >> 10,
        heap_views >> 10,
    );
    println!("    requests/commands by kind: {}", bench.tally());

    // One more joins.
    let extra = format!("m{m:03}");
    let started = Instant::now();
    let before = bench.requests();
    let tally_before = bench.tally();
    members.insert(extra.clone(), bench.join(&extra, false).await?);
    let mut with_extra = names.clone();
    with_extra.push(extra.clone());
    bench.watcher.settled(&with_extra, p).await?;
    let join_settle = started.elapsed();
    println!(
        "  join: {join_settle:?}, {} requests",
        bench.requests() - before
    );
    println!(
        "    requests/commands by kind: {}",
        bench.tally().since(&tally_before)
    );

    // It leaves.
    let started = Instant::now();
    let before = bench.requests();
    if let Some(member) = members.remove(&extra) {
        let _ = member.close().await.map_err(|e| e.to_string())?;
    }
    bench.watcher.forget(&extra);
    bench.watcher.settled(&names, p).await?;
    let leave_settle = started.elapsed();
    println!(
        "  leave: {leave_settle:?}, {} requests",
        bench.requests() - before
    );

    let rss_settled = resident_bytes();
    if !restarts {
        for (_, member) in members {
            let _ = member.close().await;
        }
        let _ = std::fs::remove_dir_all(&state_dir);
        println!(
            "rtt_ms={rtt_ms} members={m} partitions={p} cold_start_ms={} cold_start_sessions_lost={cold_start_sessions_lost} \
             join_settle_ms={} leave_settle_ms={} rss_cold_start_mib={} rss_per_partition_bytes={} \
             heap_per_partition_bytes={heap_per_partition} rss_after_leave_mib={} {}",
            cold_start.as_millis(),
            join_settle.as_millis(),
            leave_settle.as_millis(),
            rss_cold >> 20,
            grown / u64::from(p.max(1)),
            rss_settled >> 20,
            goal_fields(cold_start),
        );
        return Ok(());
    }

    // Rolling restarts: dynamic first.
    let (moves, unowned, requests, by_kind) = bench.rolling_restart(&mut members, false).await?;
    let per_move = if moves == 0 {
        0.0
    } else {
        requests as f64 / moves as f64
    };
    println!(
        "  rolling restart (dynamic): {moves} moves, longest unowned {unowned:?}, {requests} requests"
    );
    print_breakdown(&by_kind, moves);
    // Then static: one restart each, not measured, makes every member a
    // static one (a dynamic member's close leaves); the next is measured.
    bench.rolling_restart(&mut members, true).await?;
    let (static_moves, static_unowned, static_requests, static_by_kind) =
        bench.rolling_restart(&mut members, true).await?;
    println!(
        "  rolling restart (static): {static_moves} moves, longest unowned {static_unowned:?}, \
         {static_requests} requests"
    );
    print_breakdown(&static_by_kind, static_moves);
    let rss_restarted = resident_bytes();
    let heap_restarted_per_partition = heap_live()
        .saturating_sub(heap_base)
        .saturating_sub(bench.watcher.heap_held())
        / p.max(1) as usize;
    for (_, member) in members {
        let _ = member.close().await;
    }
    let _ = std::fs::remove_dir_all(&state_dir);
    println!(
        "rtt_ms={rtt_ms} members={m} partitions={p} cold_start_ms={} cold_start_sessions_lost={cold_start_sessions_lost} \
         join_settle_ms={} leave_settle_ms={} \
         rolling_restart_moves={moves} rolling_restart_max_unowned_ms={} requests_per_move={per_move:.2} \
         static_rolling_restart_moves={static_moves} static_rolling_restart_max_unowned_ms={} \
         rss_cold_start_mib={} rss_per_partition_bytes={} heap_per_partition_bytes={heap_per_partition} \
         rss_after_restarts_mib={} heap_per_partition_after_restarts_bytes={heap_restarted_per_partition} {}",
        cold_start.as_millis(),
        join_settle.as_millis(),
        leave_settle.as_millis(),
        unowned.as_millis(),
        static_unowned.as_millis(),
        rss_cold >> 20,
        grown / u64::from(p.max(1)),
        rss_restarted >> 20,
        goal_fields(cold_start),
    );
    Ok(())
}

/// Prints where a restart's requests went: by kind, requests over the
/// commands they carried out, then the requests of each kind per move.
fn print_breakdown(tally: &RequestTally, moves: u64) {
    println!("    requests/commands by kind: {tally}");
    if moves == 0 {
        return;
    }
    let per_move: Vec<String> = RequestKind::ALL
        .iter()
        .filter(|&&kind| tally.requests(kind) > 0)
        .map(|&kind| {
            let share = tally.requests(kind) as f64 / moves as f64;
            format!("{}={share:.2}", kind.name())
        })
        .collect();
    println!("    requests per move by kind: {}", per_move.join(" "));
}

/// The process's resident memory (Linux: `VmRSS` of `/proc/self/status`;
/// 0 where there is none to read).
fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib << 10)
}

/// Joins every member of `names` at once.
async fn join_all(bench: &mut Bench, names: &[String]) -> Result<Vec<MemberHandle>, String> {
    let mut joining = Vec::new();
    for name in names {
        let (backend, requests) = backend(&bench.options, &bench.prefix)?;
        bench.requests.push(requests);
        let config = Config::new(&bench.group, name, ["t"])
            .map_err(|e| e.to_string())?
            .with_session_timeout(bench.options.session);
        let builder = GroupMember::builder(config)
            .partitions([("t".to_owned(), bench.options.partitions)].into())
            .auto_drain(true)
            .view_log(bench.watcher.log.clone());
        let name = name.clone();
        joining.push(tokio::spawn(async move {
            let joined = builder
                .join(backend)
                .await
                .map_err(|e| format!("{name} cannot join: {e}"))?;
            Ok::<_, String>(report_problems(&name, joined))
        }));
    }
    let mut members = Vec::new();
    for join in joining {
        members.push(join.await.map_err(|e| e.to_string())??);
    }
    Ok(members)
}

/// Prints what `member` reports on its error stream (a stalled claim, a
/// session that could not be resumed...), so that a slow step says why.
fn report_problems(name: &str, member: GroupMember) -> MemberHandle {
    let (member, streams) = member.split();
    let mut errors = streams.errors;
    let name = name.to_owned();
    tokio::spawn(async move {
        while let Some(problem) = errors.next().await {
            eprintln!("    {name}: {problem}");
        }
    });
    member
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    common::exit("bench_scale", run(Args::parse()).await)
}
