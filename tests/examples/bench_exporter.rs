//! What watching groups from outside costs: the monitor behind `tenure
//! serve` over many groups on a real ZooKeeper and Kafka (start them with
//! `eval "$(scripts/services start)"`).
//!
//! ```text
//! cargo run --release -p tenure-tests --example bench_exporter
//! cargo run --release -p tenure-tests --example bench_exporter -- --groups 100 --partitions 1000
//! ```
//!
//! `--groups` groups (100) each have a committed offset for every one of
//! `--partitions` partitions (1,000) of one topic, written straight into
//! the store (no members: the monitor's cost, not theirs). It measures:
//! - **idle store reads**: the monitor's reads of the store (group lists
//!   and group reads, counted at the admin it is given) per second while
//!   nothing changes, over `--idle-seconds` (30);
//! - **Kafka requests per refresh**: one topic listing and two offset
//!   requests per partition, as the monitor sends them;
//! - **CPU** per second of the whole process while idle, and its
//!   **resident memory** once every group is read;
//! - **commit → lag**: from an offset written to the store to the new lag
//!   in the monitor's overview (what `/metrics` serves), over 10 commits.
//!
//! The last line is `groups=G partitions=P idle_store_reads_per_s=X
//! kafka_requests_per_refresh=K cpu_per_s=C rss_mib=M
//! commit_to_lag_median_ms=L commit_to_lag_max_ms=H`.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use clap::Parser;
use futures_util::StreamExt;
use tenure::admin::{
    AdminError, Connector, GroupAdmin, GroupDeletion, GroupRecords, Monitor, MonitorConfig,
    StoreChanges, WriteGuard,
};
use tenure::core::{Offset, TopicPartition};
use tenure::zookeeper::ZooKeeperAdmin;
use tenure_tests::bench::{percentile, server};
use tenure_tests::unique;
use zookeeper_client as zk;

#[derive(Parser)]
struct Args {
    /// How many groups
    #[arg(long, default_value_t = 100)]
    groups: usize,
    /// How many partitions the topic has (each group has an offset for
    /// every one)
    #[arg(long, default_value_t = 1000)]
    partitions: u32,
    /// How long to measure the idle cost, in seconds
    #[arg(long, default_value_t = 30)]
    idle_seconds: u64,
    /// The monitor's Kafka refresh interval, in seconds (serve's default)
    #[arg(long, default_value_t = 10)]
    kafka_interval: u64,
}

/// An admin that counts what the monitor asks of the store.
struct Counting {
    inner: ZooKeeperAdmin,
    reads: Arc<AtomicU64>,
}

#[async_trait]
impl GroupAdmin for Counting {
    fn store(&self) -> String {
        self.inner.store()
    }
    async fn groups(&self) -> Result<Vec<String>, AdminError> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.groups().await
    }
    async fn watch(&self) -> Result<StoreChanges, AdminError> {
        self.inner.watch().await
    }
    async fn records(&self, group: &str) -> Result<GroupRecords, AdminError> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.records(group).await
    }
    async fn write_offsets(
        &self,
        group: &str,
        offsets: &std::collections::BTreeMap<TopicPartition, Offset>,
        guard: WriteGuard,
    ) -> Result<(), AdminError> {
        self.inner.write_offsets(group, offsets, guard).await
    }
    async fn delete_offsets(
        &self,
        group: &str,
        partitions: &std::collections::BTreeSet<TopicPartition>,
        guard: WriteGuard,
    ) -> Result<(), AdminError> {
        self.inner.delete_offsets(group, partitions, guard).await
    }
    async fn delete_group(
        &self,
        group: &str,
        guard: WriteGuard,
    ) -> Result<GroupDeletion, AdminError> {
        self.inner.delete_group(group, guard).await
    }
}

/// The process's CPU time (user + system) so far.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command's closing parenthesis: utime is the 12th,
    // stime the 13th (clock ticks, 100 per second on Linux).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<u64> = rest
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let ticks = fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Creates `topic` and waits until every partition answers for its log
/// end: a topic of a thousand partitions takes the broker a while to give
/// each a leader, longer than its client's own retries last.
async fn create_topic(
    kafka: &tenure::kafka::KafkaClient,
    topic: &str,
    partitions: u32,
) -> Result<(), String> {
    use rskafka::client::partition::{OffsetAt, UnknownTopicHandling};

    kafka
        .controller_client()
        .map_err(|e| format!("Kafka's controller: {e}"))?
        .create_topic(topic, partitions as i32, 1, 60_000)
        .await
        .map_err(|e| format!("create topic {topic}: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(300);
    for p in 0..partitions {
        loop {
            let answered = match kafka
                .partition_client(topic, p as i32, UnknownTopicHandling::Retry)
                .await
            {
                Ok(partition) => partition.get_offset(OffsetAt::Latest).await.is_ok(),
                Err(_) => false,
            };
            if answered {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("{topic}/{p} has no leader after 300 s"));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    Ok(())
}

async fn run(args: Args) -> Result<(), String> {
    let address = server("TENURE_ZOOKEEPER")?;
    let bootstrap = server("TENURE_KAFKA")?;
    let root = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(20))
        .connect(&address)
        .await
        .map_err(|e| format!("ZooKeeper at {address}: {e}"))?;
    let chroot = unique("/tenure-bench-exporter");
    let acl = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    root.create(&chroot, b"", &acl)
        .await
        .map_err(|e| format!("create {chroot}: {e}"))?;
    let connect = format!("{address}{chroot}");
    let store = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(20))
        .connect(&connect)
        .await
        .map_err(|e| format!("ZooKeeper at {connect}: {e}"))?;

    let kafka = tenure::kafka::connect(&tenure::kafka::KafkaConfig::new(&bootstrap))
        .await
        .map_err(|e| format!("Kafka at {bootstrap}: {e}"))?;
    let topic = unique("bench-exporter");
    create_topic(&kafka, &topic, args.partitions).await?;

    let started = Instant::now();
    let groups: Vec<String> = (0..args.groups).map(|g| format!("group-{g:04}")).collect();
    for group in &groups {
        for path in [
            "/consumers".to_owned(),
            format!("/consumers/{group}"),
            format!("/consumers/{group}/offsets"),
            format!("/consumers/{group}/offsets/{topic}"),
        ] {
            match store.create(&path, b"", &acl).await {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(e) => return Err(format!("create {path}: {e}")),
            }
        }
        let creates = futures_util::stream::iter(0..args.partitions)
            .map(|p| {
                let path = format!("/consumers/{group}/offsets/{topic}/{p}");
                let store = &store;
                let acl = &acl;
                async move { store.create(&path, b"0", acl).await.map(|_| ()) }
            })
            .buffer_unordered(256)
            .collect::<Vec<_>>()
            .await;
        if let Some(Err(e)) = creates.into_iter().find(Result::is_err) {
            return Err(format!("create the offsets of {group}: {e}"));
        }
    }
    eprintln!(
        "{} offsets of {} groups written in {:?}",
        args.groups as u64 * u64::from(args.partitions),
        args.groups,
        started.elapsed()
    );

    let reads = Arc::new(AtomicU64::new(0));
    let counted = reads.clone();
    let connector: Connector = Box::new(move || {
        let (connect, reads) = (connect.clone(), counted.clone());
        Box::pin(async move {
            let inner = ZooKeeperAdmin::connect(&connect, Duration::from_secs(20)).await?;
            Ok(Box::new(Counting { inner, reads }) as Box<dyn GroupAdmin>)
        })
    });
    let interval = Duration::from_secs(args.kafka_interval);
    let monitor = Monitor::start(
        connector,
        Some(kafka.clone()),
        MonitorConfig::new().with_kafka_interval(interval),
    );
    let mut updates = monitor.updates();
    let loading = Instant::now();
    loop {
        let ready = {
            let overview = updates.borrow_and_update();
            overview.groups.len() == args.groups
                && overview.groups.iter().all(|g| {
                    g.partitions.len() == args.partitions as usize && g.total_lag.is_some()
                })
        };
        if ready {
            break;
        }
        if loading.elapsed() > Duration::from_secs(600) {
            return Err("the monitor did not read every group and its logs within 600 s".into());
        }
        tokio::time::timeout(Duration::from_secs(60), updates.changed())
            .await
            .map_err(|_| "no overview for 60 s while loading".to_owned())?
            .map_err(|_| "the monitor stopped".to_owned())?;
    }
    eprintln!("every group read and sampled in {:?}", loading.elapsed());
    let rss = rss_mib();

    // Idle: nothing changes in the store.
    let (reads_before, cpu_before, idle_from) =
        (reads.load(Ordering::Relaxed), cpu_time(), Instant::now());
    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
    let idle = idle_from.elapsed().as_secs_f64();
    let idle_reads = (reads.load(Ordering::Relaxed) - reads_before) as f64 / idle;
    let cpu_per_s = (cpu_time() - cpu_before).as_secs_f64() / idle;

    // Commit → lag: one message in partition 0 (log end 1), then each
    // round moves a group's offset between 0 and 1 (lag 1 and 0).
    tenure_tests::kafka::produce(&kafka, &topic, 0, 1).await;
    let mut latencies = Vec::new();
    for round in 0..10u32 {
        let group = &groups[round as usize % groups.len()];
        let path = format!("/consumers/{group}/offsets/{topic}/0");
        // Wait for the log end of 1 to be known, then move the offset.
        loop {
            let known = updates
                .borrow_and_update()
                .group(group)
                .and_then(|g| g.partitions.first().and_then(|p| p.log_end))
                == Some(1);
            if known {
                break;
            }
            tokio::time::timeout(interval * 3, updates.changed())
                .await
                .map_err(|_| "the log end never showed".to_owned())?
                .map_err(|_| "the monitor stopped".to_owned())?;
        }
        let current = updates
            .borrow()
            .group(group)
            .and_then(|g| g.partitions.first().and_then(|p| p.committed))
            .unwrap_or(0);
        let next: Offset = if current == 0 { 1 } else { 0 };
        let expected_lag = 1 - next as u64;
        let written = Instant::now();
        store
            .set_data(&path, next.to_string().as_bytes(), None)
            .await
            .map_err(|e| format!("commit {path}: {e}"))?;
        loop {
            let lag = updates
                .borrow_and_update()
                .group(group)
                .and_then(|g| g.partitions.first().and_then(|p| p.lag));
            if lag == Some(expected_lag) {
                break;
            }
            tokio::time::timeout(interval * 3, updates.changed())
                .await
                .map_err(|_| format!("the commit to {path} never showed in the lag"))?
                .map_err(|_| "the monitor stopped".to_owned())?;
        }
        latencies.push(written.elapsed());
    }
    latencies.sort();
    let median = percentile(&latencies, 0.5).unwrap_or_default();
    let max = latencies.last().copied().unwrap_or_default();
    let kafka_requests = 1 + 2 * u64::from(args.partitions);
    println!(
        "groups={} partitions={} idle_store_reads_per_s={idle_reads:.2} \
         kafka_requests_per_refresh={kafka_requests} cpu_per_s={cpu_per_s:.3} rss_mib={rss:.0} \
         commit_to_lag_median_ms={:.0} commit_to_lag_max_ms={:.0}",
        args.groups,
        args.partitions,
        median.as_secs_f64() * 1000.0,
        max.as_secs_f64() * 1000.0,
    );
    drop(monitor);
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("bench_exporter: {error}");
            ExitCode::FAILURE
        }
    }
}
