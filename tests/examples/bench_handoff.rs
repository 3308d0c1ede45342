//! Handoff benchmark against a real ZooKeeper or etcd (start them with
//! `eval "$(scripts/services start)"`, which sets `TENURE_ZOOKEEPER` and
//! `TENURE_ETCD`).
//!
//! ```text
//! cargo run --release -p tenure-tests --example bench_handoff
//! cargo run --release -p tenure-tests --example bench_handoff -- --backend etcd
//! ```
//!
//! It measures, in one run:
//! - **handoff latency**: from the old owner's delete of an owner record to
//!   the new owner's claim being done, over `--handoffs` partitions (default
//!   240), for tenure (watch-driven claims) and for the original system's
//!   policy (retry the claim on a fixed 1 s sleep) as the baseline;
//! - **join settle time**: a group of 10 members owning 1,000 partitions,
//!   from an 11th member's join until every member owns and fetches its
//!   share again, and the requests to the store that rebalance took.
//!
//! With `--rtt-ms N`, every member's connection to the store goes
//! through a proxy that delays each chunk of bytes by N/2 ms either way,
//! a round trip of N ms (`tenure_testkit::proxy::at_distance`). The
//! benchmark's own client stays on loopback: the old owner, whose delete
//! is timed as the store makes it (so a handoff is the new owner's part
//! of it: the watch's news coming, its claim going and its answer coming
//! back, a round trip and a half at least), and the baseline's
//! claimants. No Kafka is involved: members are given their topic's
//! partition count.
//!
//! The last line is
//! `rtt_ms=R handoffs=N median_ms=X p99_ms=Y baseline_median_ms=Z
//! join_settle_ms=W handoff_goal_ms=G median_within_goal=… p99_within_goal=…`,
//! the goal being a handoff within three round trips and a millisecond.
//! Figures depend on the machine: compare tenure with the baseline of the
//! same run.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use clap::Parser;
use tenure::core::{Config, MemberId, StoreRequest};
use tenure::tokio::{Backend, BackendError, GroupMember, Joining, View};
use tenure::zookeeper::ZooKeeperBackend;
use tenure_testkit::proxy::{at_distance, Proxy};
use tenure_tests::bench::{percentile, server};
use tenure_tests::unique;
use tokio::sync::mpsc;
use zookeeper_client as zk;

const TOPIC: &str = "bench";
const SESSION: Duration = Duration::from_secs(6);

async fn client(connect: &str) -> Result<zk::Client, String> {
    let connecting = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(20))
        .connect(connect);
    tokio::time::timeout(Duration::from_secs(5), connecting)
        .await
        .map_err(|_| {
            format!("ZooKeeper at {connect} does not answer; start it with scripts/services start")
        })?
        .map_err(|e| format!("ZooKeeper at {connect}: {e}"))
}

fn any_acl(mode: zk::CreateMode) -> zk::CreateOptions<'static> {
    mode.with_acls(zk::Acls::anyone_all())
}

/// A chroot of its own for each part of the run.
async fn sandbox(address: &str, name: &str) -> Result<String, String> {
    let root = client(address).await?;
    let chroot = unique(&format!("/tenure-bench-{name}"));
    root.create(&chroot, b"", &any_acl(zk::CreateMode::Persistent))
        .await
        .map_err(|e| format!("create {chroot}: {e}"))?;
    Ok(format!("{address}{chroot}"))
}

async fn create_path(
    client: &zk::Client,
    path: &str,
    data: &[u8],
    mode: zk::CreateMode,
) -> Result<(), String> {
    let mut prefix = String::new();
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    for (i, part) in parts.iter().enumerate() {
        prefix.push('/');
        prefix.push_str(part);
        let last = i + 1 == parts.len();
        let (bytes, node_mode) = if last {
            (data, mode)
        } else {
            (&b""[..], zk::CreateMode::Persistent)
        };
        match client.create(&prefix, bytes, &any_acl(node_mode)).await {
            Ok(_) | Err(zk::Error::NodeExists) if !last => {}
            Ok(_) => {}
            Err(e) => return Err(format!("create {prefix}: {e}")),
        }
    }
    Ok(())
}

fn owner_path(group: &str, partition: u32) -> String {
    format!("/consumers/{group}/owners/{TOPIC}/{partition}")
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn config(group: &str, member: &str) -> Result<Config, String> {
    let mut config = Config::new(group, member, [TOPIC])
        .map_err(|e| e.to_string())?
        .with_session_timeout(SESSION)
        .with_processing_timeout(Duration::from_secs(5));
    config = config.with_commit_interval(Duration::from_secs(1));
    Ok(config)
}

/// One isolated corner of a store for one part of the run (a ZooKeeper
/// chroot, an etcd prefix), and what the benchmark does there besides
/// running tenure members: hold owner records as an old owner would, and
/// claim them as the original system did.
#[async_trait]
trait Place: Send + Sync {
    /// A backend for one member, and its counter of requests to the store.
    fn backend(&self) -> (Box<dyn Backend>, Arc<AtomicU64>);
    /// Creates the owner record of `partition`, as its old owner.
    async fn hold(&self, group: &str, partition: u32) -> Result<(), String>;
    /// Deletes it, as its old owner releasing.
    async fn let_go(&self, group: &str, partition: u32) -> Result<(), String>;
    /// One claim attempt of the original system: `true` if the record was
    /// created.
    async fn try_claim(&self, group: &str, partition: u32) -> Result<bool, String>;
}

struct ZooKeeperPlace {
    /// The members' connect string (through the proxy, if any).
    connect: String,
    /// The benchmark's own client, on loopback.
    client: zk::Client,
    /// The proxy the members go through, kept for as long as they run.
    _distance: Option<Proxy>,
}

impl ZooKeeperPlace {
    async fn new(address: &str, name: &str, one_way: Duration) -> Result<ZooKeeperPlace, String> {
        let direct = sandbox(address, name).await?;
        let client = client(&direct).await?;
        let (distance, connect) = distant(&direct, one_way).await?;
        Ok(ZooKeeperPlace {
            connect,
            client,
            _distance: distance,
        })
    }
}

/// `address` as members reach it: through a delayed proxy when there is a
/// delay, as it is otherwise (the benchmark as it runs on loopback).
async fn distant(address: &str, one_way: Duration) -> Result<(Option<Proxy>, String), String> {
    if one_way.is_zero() {
        return Ok((None, address.to_owned()));
    }
    let (proxy, through) = at_distance(address, one_way).await?;
    Ok((Some(proxy), through))
}

#[async_trait]
impl Place for ZooKeeperPlace {
    fn backend(&self) -> (Box<dyn Backend>, Arc<AtomicU64>) {
        let backend = ZooKeeperBackend::new(self.connect.clone());
        let requests = backend.request_counter();
        (Box::new(backend), requests)
    }

    async fn hold(&self, group: &str, partition: u32) -> Result<(), String> {
        let path = owner_path(group, partition);
        create_path(&self.client, &path, b"old-owner", zk::CreateMode::Ephemeral).await
    }

    async fn let_go(&self, group: &str, partition: u32) -> Result<(), String> {
        let path = owner_path(group, partition);
        self.client
            .delete(&path, None)
            .await
            .map_err(|e| format!("delete {path}: {e}"))
    }

    async fn try_claim(&self, group: &str, partition: u32) -> Result<bool, String> {
        let path = owner_path(group, partition);
        let ephemeral = any_acl(zk::CreateMode::Ephemeral);
        match self.client.create(&path, b"new-owner", &ephemeral).await {
            Ok(_) => Ok(true),
            Err(zk::Error::NodeExists) => Ok(false),
            Err(e) => Err(format!("create {path}: {e}")),
        }
    }
}

struct EtcdPlace {
    /// The members' endpoint (through the proxy, if any).
    endpoint: String,
    prefix: String,
    /// The benchmark's own client, on loopback.
    client: etcd_client::Client,
    /// The old owner's lease, as a member's would be.
    lease: i64,
    /// The proxy the members go through, kept for as long as they run.
    _distance: Option<Proxy>,
}

impl EtcdPlace {
    async fn new(endpoint: &str, name: &str, one_way: Duration) -> Result<EtcdPlace, String> {
        let connecting = etcd_client::Client::connect([endpoint], None);
        let client = tokio::time::timeout(Duration::from_secs(5), connecting)
            .await
            .map_err(|_| {
                format!("etcd at {endpoint} does not answer; start it with scripts/services start")
            })?
            .map_err(|e| format!("etcd at {endpoint}: {e}"))?;
        let lease = client
            .clone()
            .lease_grant(600, None)
            .await
            .map_err(|e| format!("lease: {e}"))?
            .id();
        let (distance, endpoint) = distant(endpoint, one_way).await?;
        Ok(EtcdPlace {
            endpoint,
            prefix: unique(&format!("/tenure-bench-{name}")),
            client,
            lease,
            _distance: distance,
        })
    }

    fn key(&self, group: &str, partition: u32) -> String {
        format!("{}/{group}/owners/{TOPIC}/{partition}", self.prefix)
    }
}

#[async_trait]
impl Place for EtcdPlace {
    fn backend(&self) -> (Box<dyn Backend>, Arc<AtomicU64>) {
        let backend =
            tenure::etcd::EtcdBackend::new(self.endpoint.clone()).prefix(self.prefix.clone());
        let requests = backend.request_counter();
        (Box::new(backend), requests)
    }

    async fn hold(&self, group: &str, partition: u32) -> Result<(), String> {
        let key = self.key(group, partition);
        self.client
            .clone()
            .put(
                key.clone(),
                "old-owner",
                Some(etcd_client::PutOptions::new().with_lease(self.lease)),
            )
            .await
            .map_err(|e| format!("put {key}: {e}"))?;
        Ok(())
    }

    async fn let_go(&self, group: &str, partition: u32) -> Result<(), String> {
        let key = self.key(group, partition);
        self.client
            .clone()
            .delete(key.clone(), None)
            .await
            .map_err(|e| format!("delete {key}: {e}"))?;
        Ok(())
    }

    async fn try_claim(&self, group: &str, partition: u32) -> Result<bool, String> {
        use etcd_client::{Compare, CompareOp, Txn, TxnOp};
        let key = self.key(group, partition);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), "new-owner", None)]);
        let response = self
            .client
            .clone()
            .txn(txn)
            .await
            .map_err(|e| format!("claim {key}: {e}"))?;
        Ok(response.succeeded())
    }
}

/// tenure: one member holds watches on `n` owner records that another
/// client holds; the other client deletes them one by one, and each delete
/// is timed to the member's claim.
async fn tenure_handoffs(place: &dyn Place, n: u32) -> Result<Vec<Duration>, String> {
    let group = "handoff";
    for p in 0..n {
        place.hold(group, p).await?;
    }
    let (log, mut views) = mpsc::unbounded_channel();
    let member = GroupMember::builder(config(group, "new-owner")?)
        .partitions([(TOPIC.to_owned(), n)].into())
        .auto_drain(true)
        .view_log(log)
        .join(place.backend().0)
        .await
        .map_err(|e| e.to_string())?;
    // Wait until the member has met every held record and watches it: it
    // has claimed nothing, and its claims and watches have had time to reach
    // the server (etcd opens a watch stream per record, which takes a while
    // for hundreds; a release normally comes after a drain, long after).
    wait_view(&mut views, Duration::from_secs(30), |v| {
        v.registered && v.assigned.len() == n as usize
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut deleted_at = BTreeMap::new();
    let mut claimed_at = BTreeMap::new();
    for p in 0..n {
        place.let_go(group, p).await?;
        deleted_at.insert(p, Instant::now());
        // Spread the deletes so each handoff is measured on its own.
        let until = tokio::time::Instant::now() + Duration::from_millis(15);
        collect_claims(&mut views, &mut claimed_at, until).await;
    }
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while claimed_at.len() < n as usize && tokio::time::Instant::now() < until {
        collect_claims(
            &mut views,
            &mut claimed_at,
            until.min(tokio::time::Instant::now() + Duration::from_millis(100)),
        )
        .await;
    }
    let _ = member.close().await.map_err(|e| e.to_string())?;
    let mut latencies = Vec::new();
    for (p, deleted) in deleted_at {
        let claimed = claimed_at.get(&p).ok_or_else(|| {
            format!("partition {p} was never claimed after its owner released it")
        })?;
        latencies.push(claimed.saturating_duration_since(deleted));
    }
    Ok(latencies)
}

async fn collect_claims(
    views: &mut mpsc::UnboundedReceiver<(MemberId, View)>,
    claimed_at: &mut BTreeMap<u32, Instant>,
    until: tokio::time::Instant,
) {
    while let Ok(Some((_, view))) = tokio::time::timeout_at(until, views.recv()).await {
        let at = view.at.unwrap_or_else(Instant::now);
        for partition in view.owned.keys() {
            claimed_at.entry(partition.partition).or_insert(at);
        }
    }
}

async fn wait_view(
    views: &mut mpsc::UnboundedReceiver<(MemberId, View)>,
    limit: Duration,
    done: impl Fn(&View) -> bool,
) -> Result<(), String> {
    let until = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(until, views.recv()).await {
            Ok(Some((_, view))) if done(&view) => return Ok(()),
            Ok(Some(_)) => {}
            _ => return Err(format!("the member did not get ready within {limit:?}")),
        }
    }
}

/// The original policy: try to create the record, and on NodeExists sleep
/// one second and try again.
async fn baseline_handoffs(place: Arc<dyn Place>, n: u32) -> Result<Vec<Duration>, String> {
    let group = "baseline";
    for p in 0..n {
        place.hold(group, p).await?;
    }
    let (done_tx, mut done_rx) = mpsc::unbounded_channel();
    for p in 0..n {
        let place = place.clone();
        let done = done_tx.clone();
        tokio::spawn(async move {
            // Claimants started at different moments: spread the phases.
            tokio::time::sleep(Duration::from_millis(u64::from(p) * 997 % 1000)).await;
            loop {
                match place.try_claim(group, p).await {
                    Ok(true) => {
                        let _ = done.send((p, Instant::now()));
                        return;
                    }
                    Ok(false) => tokio::time::sleep(Duration::from_secs(1)).await,
                    Err(_) => return,
                }
            }
        });
    }
    drop(done_tx);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let mut deleted_at = BTreeMap::new();
    for p in 0..n {
        place.let_go(group, p).await?;
        deleted_at.insert(p, Instant::now());
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    let mut latencies = Vec::new();
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while latencies.len() < n as usize {
        match tokio::time::timeout_at(until, done_rx.recv()).await {
            Ok(Some((p, at))) => {
                if let Some(deleted) = deleted_at.get(&p) {
                    latencies.push(at.saturating_duration_since(*deleted));
                }
            }
            _ => return Err("the baseline claimants did not all finish".into()),
        }
    }
    Ok(latencies)
}

/// Counts the store commands a member sends.
struct Counting {
    inner: Box<dyn Backend>,
    commands: Arc<AtomicU64>,
}

#[async_trait]
impl Backend for Counting {
    async fn start(&mut self, joining: Joining) -> Result<(), BackendError> {
        self.inner.start(joining).await
    }

    fn submit(&mut self, command: StoreRequest) {
        self.commands.fetch_add(1, Ordering::Relaxed);
        self.inner.submit(command);
    }

    async fn shutdown(&mut self) {
        self.inner.shutdown().await
    }
}

fn balanced(views: &BTreeMap<MemberId, View>, members: usize, partitions: usize) -> bool {
    let live: Vec<&View> = views.values().filter(|v| !v.closed).collect();
    let (low, high) = (partitions / members, partitions.div_ceil(members));
    live.len() == members
        && live
            .iter()
            .all(|v| v.settled && (low..=high).contains(&v.fetching.len()))
        && live.iter().map(|v| v.fetching.len()).sum::<usize>() == partitions
}

/// 10 members own 1,000 partitions; an 11th joins. Returns the time to
/// settle and the store commands the rebalance took.
async fn join_settle(place: &dyn Place) -> Result<(Duration, (u64, u64)), String> {
    let group = "join";
    let partitions = 1000u32;
    let commands = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(std::sync::Mutex::new(Vec::<Arc<AtomicU64>>::new()));
    let (log, mut changes) = mpsc::unbounded_channel();
    let mut views: BTreeMap<MemberId, View> = BTreeMap::new();
    let mut members = Vec::new();
    let join = |name: String| {
        let (inner, counter) = place.backend();
        if let Ok(mut counters) = requests.lock() {
            counters.push(counter);
        }
        let backend = Counting {
            inner,
            commands: commands.clone(),
        };
        let log = log.clone();
        let group = group.to_owned();
        async move {
            GroupMember::builder(config(&group, &name)?)
                .partitions([(TOPIC.to_owned(), partitions)].into())
                .auto_drain(true)
                .view_log(log)
                .join(backend)
                .await
                .map_err(|e| e.to_string())
        }
    };
    for n in 0..10 {
        members.push(join(format!("m{n:02}")).await?);
    }
    settle(
        &mut changes,
        &mut views,
        10,
        partitions as usize,
        Duration::from_secs(120),
    )
    .await?;
    let sent = || -> u64 {
        requests
            .lock()
            .map(|counters| counters.iter().map(|c| c.load(Ordering::Relaxed)).sum())
            .unwrap_or(0)
    };
    let before = (commands.load(Ordering::Relaxed), sent());
    let started = Instant::now();
    members.push(join("m10".to_owned()).await?);
    settle(
        &mut changes,
        &mut views,
        11,
        partitions as usize,
        Duration::from_secs(120),
    )
    .await?;
    let took = started.elapsed();
    let used = (
        commands.load(Ordering::Relaxed) - before.0,
        sent() - before.1,
    );
    for member in members {
        let _ = member.close().await.map_err(|e| e.to_string())?;
    }
    Ok((took, used))
}

async fn settle(
    changes: &mut mpsc::UnboundedReceiver<(MemberId, View)>,
    views: &mut BTreeMap<MemberId, View>,
    members: usize,
    partitions: usize,
    limit: Duration,
) -> Result<(), String> {
    let until = tokio::time::Instant::now() + limit;
    while !balanced(views, members, partitions) {
        match tokio::time::timeout_at(until, changes.recv()).await {
            Ok(Some((member, view))) => {
                views.insert(member, view);
            }
            _ => return Err(format!("{members} members did not settle within {limit:?}")),
        }
    }
    Ok(())
}

fn summary(name: &str, latencies: &mut [Duration]) -> (Duration, Duration) {
    latencies.sort();
    let at = |q: f64| percentile(latencies, q).unwrap_or_default();
    let (median, p99) = (at(0.5), at(0.99));
    println!(
        "{name}: {} handoffs, median {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        latencies.len(),
        ms(median),
        ms(p99),
        ms(latencies.last().copied().unwrap_or_default())
    );
    (median, p99)
}

async fn place(backend: &str, name: &str, one_way: Duration) -> Result<Arc<dyn Place>, String> {
    match backend {
        "zookeeper" => {
            let address = server("TENURE_ZOOKEEPER")?;
            Ok(Arc::new(
                ZooKeeperPlace::new(&address, name, one_way).await?,
            ))
        }
        "etcd" => Ok(Arc::new(
            EtcdPlace::new(&server("TENURE_ETCD")?, name, one_way).await?,
        )),
        other => Err(format!("unknown backend {other:?} (zookeeper or etcd)")),
    }
}

async fn run(handoffs: u32, backend: &str, rtt_ms: u64) -> Result<(), String> {
    // Half the round trip each way.
    let one_way = Duration::from_micros(rtt_ms * 500);
    let mut tenure =
        tenure_handoffs(place(backend, "handoff", one_way).await?.as_ref(), handoffs).await?;
    let (median, p99) = summary("tenure (watch)", &mut tenure);
    let mut baseline =
        baseline_handoffs(place(backend, "baseline", one_way).await?, handoffs).await?;
    let (baseline_median, _) = summary("baseline (1 s retry)", &mut baseline);
    println!(
        "handoff speed-up over the baseline: {:.0}x (median)",
        ms(baseline_median) / ms(median).max(0.001)
    );
    let (settle, (commands, requests)) =
        join_settle(place(backend, "join", one_way).await?.as_ref()).await?;
    println!(
        "join on {backend}: 10 members x 1,000 partitions, an 11th joins: settled in {:.0} ms, \
         {commands} store commands, {requests} {backend} requests",
        ms(settle)
    );
    // The goal: a handoff within three round trips and a millisecond.
    let goal = Duration::from_millis(3 * rtt_ms + 1);
    println!(
        "rtt_ms={rtt_ms} handoffs={} median_ms={:.1} p99_ms={:.1} baseline_median_ms={:.1} \
         join_settle_ms={:.0} handoff_goal_ms={:.1} median_within_goal={} p99_within_goal={}",
        tenure.len(),
        ms(median),
        ms(p99),
        ms(baseline_median),
        ms(settle),
        ms(goal),
        median <= goal,
        p99 <= goal,
    );
    Ok(())
}

/// Handoff latency and join settle time against a real ZooKeeper or
/// etcd of `scripts/services`.
#[derive(Parser)]
struct Args {
    /// Partitions handed off, for tenure and for the baseline.
    #[arg(long, default_value_t = 240, value_parser = clap::value_parser!(u32).range(1..))]
    handoffs: u32,
    /// The store (its address from `TENURE_ZOOKEEPER` or `TENURE_ETCD`).
    #[arg(long, default_value = "zookeeper", value_parser = ["zookeeper", "etcd"])]
    backend: String,
    /// The round trip between the members and the store, in milliseconds:
    /// half of it each way through a delaying proxy (0: no proxy).
    #[arg(long, default_value_t = 0)]
    rtt_ms: u64,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let Args {
        handoffs,
        backend,
        rtt_ms,
    } = Args::parse();
    match run(handoffs, &backend, rtt_ms).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("bench_handoff failed: {message}");
            ExitCode::FAILURE
        }
    }
}
