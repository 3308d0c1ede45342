//! Throughput benchmark against the real Kafka and ZooKeeper of
//! `scripts/services` (start them with `eval "$(scripts/services start)"`,
//! which sets `TENURE_KAFKA` and `TENURE_ZOOKEEPER`).
//!
//! ```text
//! cargo run --release -p tenure-tests --example bench_throughput
//! ```
//!
//! It produces `--messages` messages (default 300,000, 100-byte values) to
//! a topic of 12 partitions, then, in the same run, for 1 and for 3
//! members: consumes them all through tenure (members coordinating on
//! ZooKeeper, every message acknowledged, offsets committed), and with a
//! plain rskafka fetch loop per partition over the same partitions. The
//! last line is `members=3 tenure_msgs_per_s=X raw_msgs_per_s=Y ratio=R`.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rskafka::client::partition::{Compression, OffsetAt, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder};
use rskafka::record::Record;
use tenure::core::Config;
use tenure::tokio::{GroupMember, KafkaConfig};
use tenure::zookeeper::ZooKeeperBackend;
use zookeeper_client as zk;

const PARTITIONS: u32 = 12;

fn env(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| {
        format!("{name} is not set: start the servers with `eval \"$(scripts/services start)\"`")
    })
}

async fn kafka(bootstrap: &str) -> Result<Arc<Client>, String> {
    let building = ClientBuilder::new(vec![bootstrap.to_owned()]).build();
    let client = tokio::time::timeout(Duration::from_secs(10), building)
        .await
        .map_err(|_| format!("Kafka at {bootstrap} does not answer"))?
        .map_err(|e| format!("Kafka at {bootstrap}: {e}"))?;
    Ok(Arc::new(client))
}

fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{name}-{nanos}")
}

async fn produce(client: &Client, topic: &str, messages: usize) -> Result<(), String> {
    client
        .controller_client()
        .map_err(|e| e.to_string())?
        .create_topic(topic, PARTITIONS as i32, 1, 10_000)
        .await
        .map_err(|e| format!("create {topic}: {e}"))?;
    let timestamp = rskafka::chrono::DateTime::from_timestamp_millis(0).ok_or("a valid time")?;
    let per_partition = messages / PARTITIONS as usize;
    let mut tasks = Vec::new();
    for p in 0..PARTITIONS {
        let target = client
            .partition_client(topic, p as i32, UnknownTopicHandling::Retry)
            .await
            .map_err(|e| e.to_string())?;
        tasks.push(tokio::spawn(async move {
            let mut sent = 0;
            while sent < per_partition {
                let n = 2000.min(per_partition - sent);
                let batch = (0..n)
                    .map(|_| Record {
                        key: None,
                        value: Some(vec![b'x'; 100]),
                        headers: Default::default(),
                        timestamp,
                    })
                    .collect();
                target
                    .produce(batch, Compression::NoCompression)
                    .await
                    .map_err(|e| e.to_string())?;
                sent += n;
            }
            Ok::<(), String>(())
        }));
    }
    for task in tasks {
        task.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}

/// A plain fetch loop per partition (the concurrency tenure's fetchers
/// have): messages per second until every message is read.
async fn raw(client: &Arc<Client>, topic: &str, total: u64) -> Result<f64, String> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for p in 0..PARTITIONS {
        let partition = client
            .partition_client(topic, p as i32, UnknownTopicHandling::Retry)
            .await
            .map_err(|e| e.to_string())?;
        tasks.push(tokio::spawn(async move {
            let end = partition
                .get_offset(OffsetAt::Latest)
                .await
                .map_err(|e| e.to_string())?;
            let mut next = partition
                .get_offset(OffsetAt::Earliest)
                .await
                .map_err(|e| e.to_string())?;
            let mut read = 0u64;
            while next < end {
                let (records, _) = partition
                    .fetch_records(next, 1..(1 << 20), 250)
                    .await
                    .map_err(|e| e.to_string())?;
                for record in records {
                    if record.offset >= next {
                        next = record.offset + 1;
                        read += 1;
                    }
                }
            }
            Ok::<u64, String>(read)
        }));
    }
    let mut read = 0;
    for task in tasks {
        read += task.await.map_err(|e| e.to_string())??;
    }
    if read != total {
        return Err(format!("the raw loop read {read} of {total} messages"));
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

/// `members` members consume everything through tenure: messages per
/// second from the joins to the last acknowledgement.
async fn through_tenure(
    zookeeper: &str,
    bootstrap: &str,
    topic: &str,
    members: usize,
    total: u64,
) -> Result<f64, String> {
    let root = tokio::time::timeout(Duration::from_secs(5), zk::Client::connect(zookeeper))
        .await
        .map_err(|_| format!("ZooKeeper at {zookeeper} does not answer"))?
        .map_err(|e| format!("ZooKeeper at {zookeeper}: {e}"))?;
    let chroot = format!("/{}", unique("tenure-bench-throughput"));
    root.create(
        &chroot,
        b"",
        &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
    )
    .await
    .map_err(|e| format!("create {chroot}: {e}"))?;
    let connect = format!("{zookeeper}{chroot}");
    let consumed = Arc::new(AtomicU64::new(0));
    let (log, mut views) = tokio::sync::mpsc::unbounded_channel();
    let mut joined = Vec::new();
    for n in 0..members {
        let mut config =
            Config::new("bench", &format!("m{n}"), [topic]).map_err(|e| e.to_string())?;
        config.commit_interval = Duration::from_secs(1);
        let backend = ZooKeeperBackend::new(connect.clone());
        let member = GroupMember::builder(config)
            .kafka(KafkaConfig::new(bootstrap))
            .view_log(log.clone())
            .join(backend)
            .await
            .map_err(|e| e.to_string())?;
        joined.push(member);
    }
    // Steady state only: the clock starts once the group has settled (the
    // fetchers have filled their buffers meanwhile, a small head start
    // against the total).
    let mut latest = std::collections::BTreeMap::new();
    let until = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let fetching: usize = latest
            .values()
            .map(|v: &tenure::tokio::View| v.fetching.len())
            .sum();
        let settled = latest.len() == members && latest.values().all(|v| v.settled);
        if settled && fetching == PARTITIONS as usize {
            break;
        }
        match tokio::time::timeout_at(until, views.recv()).await {
            Ok(Some((member, view))) => {
                latest.insert(member, view);
            }
            _ => return Err(format!("{members} members did not settle within 60 s")),
        }
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for mut member in joined {
        let consumed = consumed.clone();
        tasks.push(tokio::spawn(async move {
            while consumed.load(Ordering::Relaxed) < total {
                match tokio::time::timeout(Duration::from_millis(200), member.next_message()).await
                {
                    Ok(Some(message)) => {
                        message.ack();
                        consumed.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(None) => break,
                    Err(_) => {}
                }
            }
            member
        }));
    }
    let mut joined = Vec::new();
    for task in tasks {
        joined.push(task.await.map_err(|e| e.to_string())?);
    }
    let elapsed = started.elapsed();
    let read = consumed.load(Ordering::Relaxed);
    for member in joined {
        member.close().await.map_err(|e| e.to_string())?;
    }
    if read < total {
        return Err(format!("tenure consumed {read} of {total} messages"));
    }
    Ok(total as f64 / elapsed.as_secs_f64())
}

async fn run(messages: usize) -> Result<(), String> {
    let bootstrap = env("TENURE_KAFKA")?;
    let zookeeper = env("TENURE_ZOOKEEPER")?;
    let client = kafka(&bootstrap).await?;
    let topic = unique("bench-throughput");
    produce(&client, &topic, messages).await?;
    let total = (messages / PARTITIONS as usize * PARTITIONS as usize) as u64;
    for members in [1, 3] {
        let raw_rate = raw(&client, &topic, total).await?;
        let tenure_rate = through_tenure(&zookeeper, &bootstrap, &topic, members, total).await?;
        let line = format!(
            "members={members} tenure_msgs_per_s={tenure_rate:.0} raw_msgs_per_s={raw_rate:.0} ratio={:.2}",
            tenure_rate / raw_rate
        );
        println!("{line}");
    }
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let mut messages = 300_000;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next().map(|v| v.parse::<usize>())) {
            ("--messages", Some(Ok(n))) if n >= PARTITIONS as usize => messages = n,
            _ => {
                eprintln!("usage: bench_throughput [--messages N]");
                return ExitCode::from(2);
            }
        }
    }
    match run(messages).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("bench_throughput failed: {message}");
            ExitCode::FAILURE
        }
    }
}
