//! Handoff benchmark against a real ZooKeeper (start it with
//! `eval "$(scripts/services start)"`, which sets `TENURE_ZOOKEEPER`).
//!
//! ```text
//! cargo run --release --example bench_handoff
//! ```
//!
//! It measures, in one run:
//! - **handoff latency**: from the old owner's delete of an owner record to
//!   the new owner's claim being done, over `--handoffs` partitions (default
//!   240), for tenure (watch-driven claims) and for the original system's
//!   policy (retry the claim on a fixed 1 s sleep) as the baseline;
//! - **join settle time**: a group of 10 members owning 1,000 partitions,
//!   from an 11th member's join until every member owns and fetches its
//!   share again, and the ZooKeeper requests that rebalance took.
//!
//! The last line is
//! `handoffs=N median_ms=X p99_ms=Y baseline_median_ms=Z join_settle_ms=W`.
//! Figures depend on the machine: compare tenure with the baseline of the
//! same run.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tenure::core::{Command, Config, MemberId, MemberInfo};
use tenure::tokio::{Backend, BackendError, EventSender, GroupMember, View};
use tenure::zookeeper::ZooKeeperBackend;
use tokio::sync::mpsc;
use zookeeper_client as zk;

const TOPIC: &str = "bench";
const SESSION: Duration = Duration::from_secs(6);

fn address() -> Result<String, String> {
    std::env::var("TENURE_ZOOKEEPER").map_err(|_| {
        "TENURE_ZOOKEEPER is not set: start ZooKeeper with `eval \"$(scripts/services start)\"`"
            .to_owned()
    })
}

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
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let chroot = format!("/tenure-bench-{name}-{nanos}");
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

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn config(group: &str, member: &str) -> Result<Config, String> {
    let mut config = Config::new(group, member, [TOPIC])
        .map_err(|e| e.to_string())?
        .with_session_timeout(SESSION)
        .with_processing_timeout(Duration::from_secs(5));
    config.commit_interval = Duration::from_secs(1);
    Ok(config)
}

/// tenure: one member holds watches on `n` owner records that another
/// client holds; the other client deletes them one by one, and each delete
/// is timed to the member's claim.
async fn tenure_handoffs(address: &str, n: u32) -> Result<Vec<Duration>, String> {
    let connect = sandbox(address, "handoff").await?;
    let group = "handoff";
    let old_owner = client(&connect).await?;
    for p in 0..n {
        create_path(
            &old_owner,
            &owner_path(group, p),
            b"old-owner",
            zk::CreateMode::Ephemeral,
        )
        .await?;
    }
    let (log, mut views) = mpsc::unbounded_channel();
    let member = GroupMember::builder(config(group, "new-owner")?)
        .partitions([(TOPIC.to_owned(), n)].into())
        .auto_drain(true)
        .view_log(log)
        .join(ZooKeeperBackend::new(connect.clone()).session_timeout(SESSION))
        .await
        .map_err(|e| e.to_string())?;
    // Wait until the member has met every held record and watches it: it
    // has claimed nothing, and its claims have had time to reach the server.
    wait_view(&mut views, Duration::from_secs(30), |v| {
        v.registered && v.assigned.len() == n as usize
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut deleted_at = BTreeMap::new();
    let mut claimed_at = BTreeMap::new();
    for p in 0..n {
        let path = owner_path(group, p);
        old_owner
            .delete(&path, None)
            .await
            .map_err(|e| format!("delete {path}: {e}"))?;
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
    member.close().await.map_err(|e| e.to_string())?;
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
async fn baseline_handoffs(address: &str, n: u32) -> Result<Vec<Duration>, String> {
    let connect = sandbox(address, "baseline").await?;
    let group = "baseline";
    let old_owner = client(&connect).await?;
    let claimant = client(&connect).await?;
    for p in 0..n {
        create_path(
            &old_owner,
            &owner_path(group, p),
            b"old-owner",
            zk::CreateMode::Ephemeral,
        )
        .await?;
    }
    let (done_tx, mut done_rx) = mpsc::unbounded_channel();
    for p in 0..n {
        let claimant = claimant.clone();
        let done = done_tx.clone();
        let path = owner_path(group, p);
        tokio::spawn(async move {
            // Claimants started at different moments: spread the phases.
            tokio::time::sleep(Duration::from_millis(u64::from(p) * 997 % 1000)).await;
            loop {
                match claimant
                    .create(&path, b"new-owner", &any_acl(zk::CreateMode::Ephemeral))
                    .await
                {
                    Ok(_) => {
                        let _ = done.send((p, Instant::now()));
                        return;
                    }
                    Err(zk::Error::NodeExists) => tokio::time::sleep(Duration::from_secs(1)).await,
                    Err(_) => return,
                }
            }
        });
    }
    drop(done_tx);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let mut deleted_at = BTreeMap::new();
    for p in 0..n {
        let path = owner_path(group, p);
        old_owner
            .delete(&path, None)
            .await
            .map_err(|e| format!("delete {path}: {e}"))?;
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
    async fn start(
        &mut self,
        group: &str,
        member: &MemberInfo,
        events: EventSender,
    ) -> Result<(), BackendError> {
        self.inner.start(group, member, events).await
    }

    fn submit(&mut self, command: Command) {
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
async fn join_settle(address: &str) -> Result<(Duration, (u64, u64)), String> {
    let connect = sandbox(address, "join").await?;
    let group = "join";
    let partitions = 1000u32;
    let commands = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(std::sync::Mutex::new(Vec::<Arc<AtomicU64>>::new()));
    let (log, mut changes) = mpsc::unbounded_channel();
    let mut views: BTreeMap<MemberId, View> = BTreeMap::new();
    let mut members = Vec::new();
    let join = |name: String| {
        let zookeeper = ZooKeeperBackend::new(connect.clone()).session_timeout(SESSION);
        if let Ok(mut counters) = requests.lock() {
            counters.push(zookeeper.request_counter());
        }
        let backend = Counting {
            inner: Box::new(zookeeper),
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
        member.close().await.map_err(|e| e.to_string())?;
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
    let (median, p99) = (percentile(latencies, 0.5), percentile(latencies, 0.99));
    println!(
        "{name}: {} handoffs, median {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        latencies.len(),
        ms(median),
        ms(p99),
        ms(latencies.last().copied().unwrap_or_default())
    );
    (median, p99)
}

async fn run(handoffs: u32) -> Result<(), String> {
    let address = address()?;
    let mut tenure = tenure_handoffs(&address, handoffs).await?;
    let (median, p99) = summary("tenure (watch)", &mut tenure);
    let mut baseline = baseline_handoffs(&address, handoffs).await?;
    let (baseline_median, _) = summary("baseline (1 s retry)", &mut baseline);
    println!(
        "handoff speed-up over the baseline: {:.0}x (median)",
        ms(baseline_median) / ms(median).max(0.001)
    );
    let (settle, (commands, requests)) = join_settle(&address).await?;
    println!(
        "join: 10 members x 1,000 partitions, an 11th joins: settled in {:.0} ms, {commands} store commands, {requests} ZooKeeper requests",
        ms(settle)
    );
    println!(
        "handoffs={} median_ms={:.1} p99_ms={:.1} baseline_median_ms={:.1} join_settle_ms={:.0}",
        tenure.len(),
        ms(median),
        ms(p99),
        ms(baseline_median),
        ms(settle)
    );
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let mut handoffs = 240;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next().map(|v| v.parse::<u32>())) {
            ("--handoffs", Some(Ok(n))) if n > 0 => handoffs = n,
            _ => {
                eprintln!("usage: bench_handoff [--handoffs N]");
                return ExitCode::from(2);
            }
        }
    }
    match run(handoffs).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("bench_handoff failed: {message}");
            ExitCode::FAILURE
        }
    }
}
