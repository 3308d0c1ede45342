//! Throughput and delivery-latency benchmark against the real Kafka and
//! ZooKeeper of `scripts/services` (start them with
//! `eval "$(scripts/services start)"`, which sets `TENURE_KAFKA` and
//! `TENURE_ZOOKEEPER`).
//!
//! ```text
//! cargo run --release -p tenure-tests --example bench_throughput [-- --messages N --rounds R --only throughput|backlog|exactly-once --peer java|franz]
//! ```
//!
//! Throughput: it produces `--messages` messages (default 1,200,000,
//! 100-byte values) to a topic of 12 partitions, then, round after round,
//! for 1 and for 3 members: reads them all with a plain rskafka fetch loop
//! per partition, and consumes them all through tenure (members
//! coordinating on ZooKeeper, every message acknowledged, offsets
//! committed). Each round prints messages per second of wall time and of
//! this process's CPU time; the lines on stdout give the median ratios:
//! `members=3 messages=… rounds=… ratio_median=R ratio_min=… ratio_max=… cpu_ratio_median=C`.
//! With `--peer java`, each round also runs Kafka's own consumer benchmark
//! (`ConsumerPerformance`) on the same topic with a fresh group, and a last
//! line gives its fetch rate and its rate over the process's wall time
//! beside tenure's with one member: `peer=java messages=… rounds=…
//! tenure_1_member_msgs_per_s_median=… java_fetch_msgs_per_s_median=…
//! java_process_msgs_per_s_median=… ratio_to_java_fetch_median=R`.
//! With `--peer franz`, each round also runs a consumer built on franz-go
//! (`tests/peers/franz`, built once per run with the Go toolchain) on the
//! same topic with a fresh group: it joins, reads every message, commits
//! and leaves, timing itself from its first record to its last, as tenure
//! is timed once its group has settled. The last line compares it with
//! tenure's one member, in messages per second of wall time and per CPU
//! second (each process its own): `peer=franz messages=… rounds=…
//! tenure_1_member_msgs_per_s_median=… franz_msgs_per_s_median=…
//! ratio_to_franz_median=R tenure_1_member_msgs_per_cpu_s_median=…
//! franz_msgs_per_cpu_s_median=… cpu_ratio_to_franz_median=C
//! franz_whole_run_msgs_per_s_median=…` (the whole run: join and leave
//! included).
//!
//! Exactly once: round after round, 3 members consume the topic
//! at-least-once (every message acknowledged), then 3 members write it
//! into the PostgreSQL of `TENURE_POSTGRES` exactly once (one row per
//! message, each batch with its offset in one transaction fenced by the
//! claim's token), `--messages` of them: `exactly_once members=3
//! messages=… rounds=… msgs_per_s_median=… ratio_median=R` (against the
//! at-least-once rounds of the same run; both from the first message to
//! the last: the database's clock for the rows, the group settled for the
//! plain run).
//!
//! Latency: one member over 12 partitions, partition 0 200,000 messages
//! behind and the others written to live every 10 ms, the application
//! spending 10 µs per message: how long the live partitions' messages wait
//! from their write to their hand-out while the backlog drains, with the
//! partitions in turns (`KafkaConfig::max_messages_in_a_row`, 64) and, in
//! the same run, with no bound on a run of one partition.

use std::process::ExitCode;

use futures_util::FutureExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use rskafka::client::partition::{Compression, OffsetAt, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder};
use rskafka::record::Record;
use tenure::core::Config;
use tenure::postgres::{MessageTable, PostgresSink};
use tenure::tokio::exactly_once::ExactlyOnce;
use tenure::tokio::{GroupMember, GroupMemberBuilder, KafkaConfig};
use tenure::zookeeper::ZooKeeperBackend;
use tenure_tests::bench::{percentile, run_program, server, wall_ms};
use tenure_tests::unique;
use zookeeper_client as zk;

const PARTITIONS: u32 = 12;

async fn kafka(bootstrap: &str) -> Result<Arc<Client>, String> {
    let building = ClientBuilder::new(vec![bootstrap.to_owned()]).build();
    let client = tokio::time::timeout(Duration::from_secs(10), building)
        .await
        .map_err(|_| format!("Kafka at {bootstrap} does not answer"))?
        .map_err(|e| format!("Kafka at {bootstrap}: {e}"))?;
    Ok(Arc::new(client))
}

async fn create_topic(client: &Client, topic: &str) -> Result<(), String> {
    client
        .controller_client()
        .map_err(|e| e.to_string())?
        .create_topic(topic, PARTITIONS as i32, 1, 10_000)
        .await
        .map_err(|e| format!("create {topic}: {e}"))
}

/// `count` messages of 100 bytes into `partition`, stamped `timestamp`.
async fn produce_to(
    client: &Client,
    topic: &str,
    partition: u32,
    count: usize,
    timestamp: rskafka::chrono::DateTime<rskafka::chrono::Utc>,
) -> Result<(), String> {
    let target = client
        .partition_client(topic, partition as i32, UnknownTopicHandling::Retry)
        .await
        .map_err(|e| e.to_string())?;
    let mut sent = 0;
    while sent < count {
        let n = 2000.min(count - sent);
        let batch = (0..n)
            .map(|_| Record {
                key: None,
                value: Some(vec![b'x'; 100].into()),
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
    Ok(())
}

/// A new topic with `messages` spread evenly over its partitions.
async fn produce(client: &Arc<Client>, topic: &str, messages: usize) -> Result<(), String> {
    create_topic(client, topic).await?;
    let timestamp = rskafka::chrono::DateTime::from_timestamp_millis(0).ok_or("a valid time")?;
    let per_partition = messages / PARTITIONS as usize;
    let mut tasks = Vec::new();
    for p in 0..PARTITIONS {
        let (client, topic) = (client.clone(), topic.to_owned());
        tasks.push(tokio::spawn(async move {
            produce_to(&client, &topic, p, per_partition, timestamp).await
        }));
    }
    for task in tasks {
        task.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}

/// A record as the plain rskafka 0.6 client hands it out (built for its
/// cost, never read).
#[allow(dead_code)]
struct PlainRecord {
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: std::collections::BTreeMap<String, Vec<u8>>,
}

/// A plain fetch loop per partition (the concurrency tenure's fetchers
/// have): messages per second until every message is read.
async fn raw(client: &Arc<Client>, topic: &str, total: u64) -> Result<Rate, String> {
    let started = Instant::now();
    let cpu = process_cpu()?;
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
                    // What the plain client hands out: rskafka 0.6 copies
                    // every key, value and header value into a `Vec` of its
                    // own and the headers into a map. The vendored client
                    // hands out slices of the fetched buffer instead (as
                    // tenure's messages carry them): the copies are made
                    // here, so that this loop keeps costing what a loop on
                    // the plain client costs.
                    let record = record.record;
                    std::hint::black_box(PlainRecord {
                        key: record.key.map(|k| k.to_vec()),
                        value: record.value.map(|v| v.to_vec()),
                        headers: record
                            .headers
                            .into_iter()
                            .map(|(key, value)| (key, value.to_vec()))
                            .collect(),
                    });
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
    Rate::since(total, started, cpu)
}

/// `members` members of a new group on `topic`, each with `kafka`, once
/// the group has settled and every partition is being fetched.
async fn join_group<T, F, Fut>(
    zookeeper: &str,
    kafka: &KafkaConfig,
    topic: &str,
    members: usize,
    join: F,
) -> Result<Vec<T>, String>
where
    F: Fn(GroupMemberBuilder, ZooKeeperBackend) -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
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
    let (log, mut views) = tokio::sync::mpsc::unbounded_channel();
    let mut joined = Vec::new();
    for n in 0..members {
        let mut config =
            Config::new("bench", format!("m{n}"), [topic]).map_err(|e| e.to_string())?;
        config = config.with_commit_interval(Duration::from_secs(1));
        let backend = ZooKeeperBackend::new(connect.clone());
        let builder = GroupMember::builder(config)
            .kafka(kafka.clone())
            .view_log(log.clone());
        joined.push(join(builder, backend).await?);
    }
    let mut latest = std::collections::BTreeMap::new();
    let until = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let fetching: usize = latest
            .values()
            .map(|v: &tenure::tokio::View| v.fetching.len())
            .sum();
        let settled = latest.len() == members && latest.values().all(|v| v.settled);
        if settled && fetching == PARTITIONS as usize {
            return Ok(joined);
        }
        match tokio::time::timeout_at(until, views.recv()).await {
            Ok(Some((member, view))) => {
                latest.insert(member, view);
            }
            _ => return Err(format!("{members} members did not settle within 60 s")),
        }
    }
}

/// [`join_group`] of plain members.
async fn join_members(
    zookeeper: &str,
    kafka: &KafkaConfig,
    topic: &str,
    members: usize,
) -> Result<Vec<GroupMember>, String> {
    join_group(
        zookeeper,
        kafka,
        topic,
        members,
        |builder, backend| async move { builder.join(backend).await.map_err(|e| e.to_string()) },
    )
    .await
}

/// `members` members consume everything through tenure: messages per
/// second from the joins to the last acknowledgement.
async fn through_tenure(
    zookeeper: &str,
    kafka: &KafkaConfig,
    topic: &str,
    members: usize,
    total: u64,
) -> Result<Rate, String> {
    // Steady state only: the clock starts once the group has settled (the
    // fetchers have filled their buffers meanwhile, a small head start
    // against the total).
    let joined = join_members(zookeeper, kafka, topic, members).await?;
    let consumed = Arc::new(AtomicU64::new(0));
    // Every member reads until all messages are consumed; the one that
    // consumes the last wakes the others, so that no member's wait for a
    // message that will never come is counted.
    let started = Instant::now();
    let cpu = process_cpu()?;
    let (done_tx, done) = tokio::sync::watch::channel(false);
    let done_tx = Arc::new(done_tx);
    let mut tasks = Vec::new();
    for member in joined {
        let consumed = consumed.clone();
        let done_tx = done_tx.clone();
        let mut done = done.clone();
        let (member, streams) = member.split();
        tasks.push(tokio::spawn(async move {
            let mut messages = streams.messages.expect("a member with Kafka");
            // Counted here, and added to the total whenever no message is
            // ready (a shared counter per message would cost the members
            // what the plain loop's tasks, counting apart, do not pay); the
            // end is looked for only then too.
            let mut counted = 0u64;
            loop {
                let next = match messages.next().now_or_never() {
                    Some(next) => next,
                    None => {
                        if consumed.fetch_add(counted, Ordering::Relaxed) + counted >= total {
                            let _ = done_tx.send(true);
                        }
                        counted = 0;
                        tokio::select! {
                            next = messages.next() => next,
                            _ = done.wait_for(|d| *d) => None,
                        }
                    }
                };
                let Some(message) = next else { break };
                message.ack();
                counted += 1;
            }
            consumed.fetch_add(counted, Ordering::Relaxed);
            member
        }));
    }
    let mut joined = Vec::new();
    for task in tasks {
        joined.push(task.await.map_err(|e| e.to_string())?);
    }
    let rate = Rate::since(total, started, cpu)?;
    let read = consumed.load(Ordering::Relaxed);
    for member in joined {
        let _ = member.close().await.map_err(|e| e.to_string())?;
    }
    if read < total {
        return Err(format!("tenure consumed {read} of {total} messages"));
    }
    Ok(rate)
}

/// `members` members write everything into PostgreSQL exactly once (one
/// row per message, `tenure::postgres::MessageTable`): messages per second
/// of wall time from the first row written to the last, by the database's
/// own clock (the writers start as the members join, before the group
/// settles, so a clock started at settling would miss some of the work).
async fn into_postgres(
    zookeeper: &str,
    postgres: &str,
    kafka: &KafkaConfig,
    topic: &str,
    members: usize,
    total: u64,
) -> Result<f64, String> {
    let table = tenure_tests::postgres::table("bench_rows");
    let group = "bench";
    let joined = join_group(zookeeper, kafka, topic, members, |builder, backend| {
        let table = table.clone();
        async move {
            let rows = MessageTable::new(&table).map_err(|e| e.to_string())?;
            let sink = PostgresSink::builder(postgres, group)
                .offsets_table(&format!("{table}_offsets"))
                .connect(rows)
                .await
                .map_err(|e| e.to_string())?;
            // The writers' reports and the member's streams are not read:
            // the bench counts what the table holds.
            ExactlyOnce::builder(builder, sink)
                .join(backend)
                .await
                .map(|(consumer, _streams)| consumer)
                .map_err(|e| e.to_string())
        }
    })
    .await?;
    let (client, connection) = tenure::postgres::tokio_postgres::connect(
        postgres,
        tenure::postgres::tokio_postgres::NoTls,
    )
    .await
    .map_err(|e| format!("PostgreSQL at {postgres}: {e}"))?;
    let connection = tokio::spawn(connection);
    let written = format!("SELECT coalesce(sum(next_offset), 0)::bigint FROM {table}_offsets");
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let stored: i64 = client
            .query_one(&written, &[])
            .await
            .map_err(|e| format!("read {table}_offsets: {e}"))?
            .get(0);
        if stored as u64 >= total {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("{stored} of {total} messages written within 600 s"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for consumer in joined {
        let _ = consumer.close().await.map_err(|e| e.to_string())?;
    }
    let row = client
        .query_one(
            &format!(
                "SELECT count(*), extract(epoch FROM max(written_at) - min(written_at))::float8 \
                 FROM {table}"
            ),
            &[],
        )
        .await
        .map_err(|e| format!("count {table}: {e}"))?;
    let (rows, seconds): (i64, f64) = (row.get(0), row.get(1));
    client
        .batch_execute(&format!("DROP TABLE {table}; DROP TABLE {table}_offsets"))
        .await
        .map_err(|e| format!("drop {table}: {e}"))?;
    drop(client);
    let _ = connection.await;
    if rows as u64 != total {
        return Err(format!("{rows} rows for {total} messages"));
    }
    Ok(total as f64 / seconds.max(1e-3))
}

/// Messages per second of wall time, and per second of this process's CPU
/// time (every thread's, user and system). On a shared machine the second
/// is the steadier comparison: another process's load lengthens the wall
/// time of whichever side it falls on, not the CPU time this one spends.
#[derive(Clone, Copy)]
struct Rate {
    wall: f64,
    cpu: f64,
}

impl Rate {
    fn since(messages: u64, started: Instant, cpu: Duration) -> Result<Rate, String> {
        let wall = started.elapsed().as_secs_f64();
        let cpu = (process_cpu()? - cpu).as_secs_f64().max(1e-3);
        Ok(Rate {
            wall: messages as f64 / wall,
            cpu: messages as f64 / cpu,
        })
    }
}

/// This process's CPU time so far, from /proc/self/stat (in clock ticks of
/// 10 ms, the kernel's USER_HZ).
fn process_cpu() -> Result<Duration, String> {
    let stat =
        std::fs::read_to_string("/proc/self/stat").map_err(|e| format!("/proc/self/stat: {e}"))?;
    // The fields after the command name, which is in parentheses and may
    // hold spaces: utime and stime are the 14th and 15th of the line.
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or("/proc/self/stat unreadable")?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| -> Result<u64, String> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| "/proc/self/stat unreadable".to_owned())
    };
    Ok(Duration::from_millis((ticks(11)? + ticks(12)?) * 10))
}

/// How long a message waited, from its write to its hand-out, in one
/// member whose partition 0 holds `backlog` messages while the other
/// partitions are written to live, and the application spends `work` on
/// each message: (the other partitions' latencies in ms, sorted; how long
/// the backlog took to drain).
async fn backlogged(
    client: &Arc<Client>,
    zookeeper: &str,
    kafka: KafkaConfig,
    backlog: usize,
    work: Duration,
) -> Result<(Vec<f64>, Duration), String> {
    let topic = unique("bench-backlog");
    create_topic(client, &topic).await?;
    let now = stamp_now()?;
    produce_to(client, &topic, 0, backlog, now).await?;
    let mut joined = join_members(zookeeper, &kafka, &topic, 1).await?;
    let member = joined.pop().ok_or("no member")?;

    // The first message, so that the fetchers are under way before the
    // clock starts.
    let mut member = member;
    let until = Instant::now() + Duration::from_secs(60);
    let first = tokio::time::timeout_at(until.into(), member.next_message())
        .await
        .map_err(|_| "no message within 60 s".to_owned())?
        .ok_or("the member closed")?;
    first.ack();
    let mut backlog_left = backlog - 1;

    // Then one message into each other partition every 10 ms, each stamped
    // with the time it was written, until the backlog is done (30 s at
    // most).
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let mut writer = Some({
        let (client, topic) = (client.clone(), topic.clone());
        tokio::spawn(async move {
            let mut targets = Vec::new();
            for p in 1..PARTITIONS {
                targets.push(
                    client
                        .partition_client(topic.as_str(), p as i32, UnknownTopicHandling::Retry)
                        .await
                        .map_err(|e| e.to_string())?,
                );
            }
            let mut written = 0usize;
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            let until = Instant::now() + Duration::from_secs(30);
            while !*stop.borrow() && Instant::now() < until {
                tick.tick().await;
                let timestamp = stamp_now()?;
                let writes = targets.iter().map(|target| {
                    let record = Record {
                        key: None,
                        value: Some(vec![b'y'; 100].into()),
                        headers: Default::default(),
                        timestamp,
                    };
                    target.produce(vec![record], Compression::NoCompression)
                });
                for result in futures_util::future::join_all(writes).await {
                    result.map_err(|e| e.to_string())?;
                    written += 1;
                }
            }
            Ok::<usize, String>(written)
        })
    });

    // Until the backlog is done, then until every message written meanwhile
    // is read too (with no bound on a run, they all wait for the backlog).
    let started = Instant::now();
    let mut latencies = Vec::new();
    let mut drained = None;
    let mut written = None;
    while written.is_none_or(|written| latencies.len() < written) {
        if backlog_left == 0 {
            if let Some(writer) = writer.take() {
                drained = Some(started.elapsed());
                let _ = stop_tx.send(true);
                written = Some(writer.await.map_err(|e| e.to_string())??);
                continue;
            }
        }
        let next = tokio::time::timeout_at(until.into(), member.next_message()).await;
        let message = match next {
            Ok(Some(message)) => message,
            Ok(None) => return Err("the member closed".to_owned()),
            Err(_) => {
                return Err(format!(
                    "not done after 60 s: {backlog_left} backlogged messages left, {} others read",
                    latencies.len()
                ))
            }
        };
        // The application's own work on the message.
        let begun = Instant::now();
        while begun.elapsed() < work {
            std::hint::spin_loop();
        }
        if message.partition() == 0 {
            backlog_left -= 1;
        } else {
            latencies.push((wall_ms() - message.timestamp().millis()) as f64);
        }
        message.ack();
    }
    let drained = drained.ok_or("the backlog never drained")?;
    let _ = member.close().await.map_err(|e| e.to_string())?;
    latencies.sort_by(f64::total_cmp);
    Ok((latencies, drained))
}

fn stamp_now() -> Result<rskafka::chrono::DateTime<rskafka::chrono::Utc>, String> {
    rskafka::chrono::DateTime::from_timestamp_millis(wall_ms())
        .ok_or_else(|| "a valid time".to_owned())
}

/// The value at quantile `q` of `sorted`; NaN when it is empty.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    percentile(sorted, q).unwrap_or(f64::NAN)
}

/// Throughput and delivery latency against the real Kafka and ZooKeeper
/// (and PostgreSQL) of `scripts/services`.
#[derive(Parser)]
struct Args {
    /// Messages of the throughput runs (at least one per partition).
    #[arg(long, default_value_t = 1_200_000, value_parser = at_least_a_message_a_partition)]
    messages: usize,
    /// `KafkaConfig::buffered_batches` for the throughput runs.
    #[arg(long)]
    buffered_batches: Option<usize>,
    /// Rounds of each comparison (1 at least).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// One part of the run alone [default: all three].
    #[arg(long, value_parser = ["throughput", "backlog", "exactly-once"])]
    only: Option<String>,
    /// A peer measured on the same topic in each throughput round: `java`
    /// runs Kafka's own consumer benchmark (`ConsumerPerformance`, from the
    /// jars of `TENURE_KAFKA_LIBS`) with a fresh group; `franz` a consumer
    /// built on franz-go (`tests/peers/franz`, needs `go`).
    #[arg(long, value_parser = ["java", "franz"])]
    peer: Option<String>,
}

fn at_least_a_message_a_partition(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if n >= PARTITIONS as usize => Ok(n),
        Ok(_) => Err(format!("at least {PARTITIONS}")),
        Err(e) => Err(e.to_string()),
    }
}

/// What to run.
struct Options {
    messages: usize,
    java_peer: bool,
    franz_peer: bool,
    buffered_batches: Option<usize>,
    rounds: usize,
    throughput: bool,
    backlog: bool,
    exactly_once: bool,
}

impl Options {
    fn new(args: Args) -> Options {
        let part = |name: &str| args.only.as_deref().is_none_or(|only| only == name);
        Options {
            messages: args.messages,
            java_peer: args.peer.as_deref() == Some("java"),
            franz_peer: args.peer.as_deref() == Some("franz"),
            buffered_batches: args.buffered_batches,
            rounds: args.rounds.max(1),
            throughput: part("throughput"),
            backlog: part("backlog"),
            exactly_once: part("exactly-once"),
        }
    }
}

async fn run(options: Options) -> Result<(), String> {
    let bootstrap = server("TENURE_KAFKA")?;
    let zookeeper = server("TENURE_ZOOKEEPER")?;
    let client = kafka(&bootstrap).await?;
    if options.throughput {
        let topic = unique("bench-throughput");
        produce(&client, &topic, options.messages).await?;
        let total = (options.messages / PARTITIONS as usize * PARTITIONS as usize) as u64;
        let mut kafka_config = KafkaConfig::new(&bootstrap);
        if let Some(batches) = options.buffered_batches {
            kafka_config.buffered_batches = batches;
        }
        // The plain loop and tenure take turns, round after round, so that
        // the machine's load falls on both alike; the last lines give the
        // median ratio of the rounds.
        let mut ratios: std::collections::BTreeMap<usize, (Vec<f64>, Vec<f64>)> =
            Default::default();
        let libs = if options.java_peer {
            Some(server("TENURE_KAFKA_LIBS")?)
        } else {
            None
        };
        // Per round: tenure's rate with one member, the Java consumer's own
        // fetch rate and its rate over the process's wall time.
        let mut beside_java: Vec<(f64, f64, f64)> = Vec::new();
        let franz = if options.franz_peer {
            Some(build_franz_peer().await?)
        } else {
            None
        };
        // Per round: tenure's one member, and franz-go's peer.
        let mut beside_franz: Vec<(Rate, FranzRun)> = Vec::new();
        for round in 1..=options.rounds {
            let mut one_member = f64::NAN;
            let mut one_member_rate = None;
            for members in [1, 3] {
                let raw_rate = raw(&client, &topic, total).await?;
                let tenure_rate =
                    through_tenure(&zookeeper, &kafka_config, &topic, members, total).await?;
                let ratio = tenure_rate.wall / raw_rate.wall;
                let cpu_ratio = tenure_rate.cpu / raw_rate.cpu;
                eprintln!(
                    "  round {round}: members={members} tenure_msgs_per_s={:.0} raw_msgs_per_s={:.0} ratio={ratio:.2} tenure_msgs_per_cpu_s={:.0} raw_msgs_per_cpu_s={:.0} cpu_ratio={cpu_ratio:.2}",
                    tenure_rate.wall, raw_rate.wall, tenure_rate.cpu, raw_rate.cpu
                );
                let entry = ratios.entry(members).or_default();
                entry.0.push(ratio);
                entry.1.push(cpu_ratio);
                if members == 1 {
                    one_member = tenure_rate.wall;
                    one_member_rate = Some(tenure_rate);
                }
            }
            if let Some(libs) = &libs {
                let (fetch, process) = java_consumer(&bootstrap, libs, &topic, total).await?;
                eprintln!(
                    "  round {round}: java_fetch_msgs_per_s={fetch:.0} java_process_msgs_per_s={process:.0} tenure_1_member_msgs_per_s={one_member:.0} ratio_to_java_fetch={:.2}",
                    one_member / fetch
                );
                beside_java.push((one_member, fetch, process));
            }
            if let (Some(franz), Some(tenure)) = (&franz, one_member_rate) {
                let run = franz_consumer(franz, &bootstrap, &topic, total).await?;
                eprintln!(
                    "  round {round}: franz_msgs_per_s={:.0} franz_msgs_per_cpu_s={:.0} franz_whole_run_msgs_per_s={:.0} tenure_1_member_msgs_per_s={:.0} tenure_1_member_msgs_per_cpu_s={:.0} ratio_to_franz={:.2} cpu_ratio_to_franz={:.2}",
                    run.steady.wall,
                    run.steady.cpu,
                    run.whole_wall,
                    tenure.wall,
                    tenure.cpu,
                    tenure.wall / run.steady.wall,
                    tenure.cpu / run.steady.cpu,
                );
                beside_franz.push((tenure, run));
            }
        }
        if !beside_franz.is_empty() {
            let column = |pick: &dyn Fn(&(Rate, FranzRun)) -> f64| {
                let mut values: Vec<f64> = beside_franz.iter().map(pick).collect();
                values.sort_by(f64::total_cmp);
                quantile(&values, 0.5)
            };
            println!(
                "peer=franz messages={total} rounds={} tenure_1_member_msgs_per_s_median={:.0} franz_msgs_per_s_median={:.0} ratio_to_franz_median={:.2} tenure_1_member_msgs_per_cpu_s_median={:.0} franz_msgs_per_cpu_s_median={:.0} cpu_ratio_to_franz_median={:.2} franz_whole_run_msgs_per_s_median={:.0}",
                beside_franz.len(),
                column(&|(t, _)| t.wall),
                column(&|(_, f)| f.steady.wall),
                column(&|(t, f)| t.wall / f.steady.wall),
                column(&|(t, _)| t.cpu),
                column(&|(_, f)| f.steady.cpu),
                column(&|(t, f)| t.cpu / f.steady.cpu),
                column(&|(_, f)| f.whole_wall),
            );
        }
        if !beside_java.is_empty() {
            let column = |pick: fn(&(f64, f64, f64)) -> f64| {
                let mut values: Vec<f64> = beside_java.iter().map(pick).collect();
                values.sort_by(f64::total_cmp);
                values
            };
            let to_fetch = column(|r| r.0 / r.1);
            println!(
                "peer=java messages={total} rounds={} tenure_1_member_msgs_per_s_median={:.0} java_fetch_msgs_per_s_median={:.0} java_process_msgs_per_s_median={:.0} ratio_to_java_fetch_median={:.2}",
                beside_java.len(),
                quantile(&column(|r| r.0), 0.5),
                quantile(&column(|r| r.1), 0.5),
                quantile(&column(|r| r.2), 0.5),
                quantile(&to_fetch, 0.5),
            );
        }
        for (members, (mut wall, mut cpu)) in ratios {
            wall.sort_by(f64::total_cmp);
            cpu.sort_by(f64::total_cmp);
            println!(
                "members={members} messages={total} rounds={} ratio_median={:.2} ratio_min={:.2} ratio_max={:.2} cpu_ratio_median={:.2}",
                wall.len(),
                quantile(&wall, 0.5),
                quantile(&wall, 0.0),
                quantile(&wall, 1.0),
                quantile(&cpu, 0.5),
            );
        }
    }
    if options.exactly_once {
        let postgres = server("TENURE_POSTGRES")?;
        let topic = unique("bench-exactly-once");
        let messages = if options.throughput {
            options.messages / 10
        } else {
            options.messages
        };
        produce(&client, &topic, messages).await?;
        let total = (messages / PARTITIONS as usize * PARTITIONS as usize) as u64;
        let kafka_config = KafkaConfig::new(&bootstrap);
        let members = 3;
        let (mut ratios, mut rates) = (Vec::new(), Vec::new());
        for round in 1..=options.rounds {
            let plain = through_tenure(&zookeeper, &kafka_config, &topic, members, total).await?;
            let exactly =
                into_postgres(&zookeeper, &postgres, &kafka_config, &topic, members, total).await?;
            let ratio = exactly / plain.wall;
            eprintln!(
                "  round {round}: members={members} exactly_once_msgs_per_s={exactly:.0} at_least_once_msgs_per_s={:.0} ratio={ratio:.2}",
                plain.wall
            );
            ratios.push(ratio);
            rates.push(exactly);
        }
        ratios.sort_by(f64::total_cmp);
        rates.sort_by(f64::total_cmp);
        println!(
            "exactly_once members={members} messages={total} rounds={} msgs_per_s_median={:.0} ratio_median={:.2} ratio_min={:.2} ratio_max={:.2}",
            ratios.len(),
            quantile(&rates, 0.5),
            quantile(&ratios, 0.5),
            quantile(&ratios, 0.0),
            quantile(&ratios, 1.0),
        );
    }
    if options.backlog {
        // Delivery latency beside a backlog: the partitions in turns (the
        // default), and, in the same run, with no bound on a run of one
        // partition (its buffer handed out whole while it stays full).
        let backlog = 200_000;
        let work = Duration::from_micros(10);
        for (name, in_a_row) in [("unbounded", usize::MAX), ("64", 64)] {
            let mut kafka = KafkaConfig::new(&bootstrap);
            kafka.max_messages_in_a_row = in_a_row;
            let (latencies, drained) =
                backlogged(&client, &zookeeper, kafka, backlog, work).await?;
            println!(
                "backlog={backlog} work_us={} max_messages_in_a_row={name} drained_ms={} other_partitions_latency_ms p50={:.0} p99={:.0} max={:.0} samples={}",
                work.as_micros(),
                drained.as_millis(),
                quantile(&latencies, 0.5),
                quantile(&latencies, 0.99),
                quantile(&latencies, 1.0),
                latencies.len()
            );
        }
    }
    Ok(())
}

/// The franz-go peer's source, `tests/peers/franz`.
const FRANZ_PEER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/peers/franz");

/// Builds the franz-go peer with the Go toolchain (its build cache makes
/// a build after the first quick) and says where the program is.
async fn build_franz_peer() -> Result<std::path::PathBuf, String> {
    let program = std::env::temp_dir().join("tenure-bench-franz-peer");
    let mut build = std::process::Command::new("go");
    build
        .arg("build")
        .arg("-o")
        .arg(&program)
        .arg(".")
        .current_dir(FRANZ_PEER);
    let what = format!(
        "go, building the franz-go peer in {FRANZ_PEER} (--peer franz needs the Go toolchain)"
    );
    run_program(&what, build).await?;
    Ok(program)
}

/// What one run of the franz-go peer measured of itself.
#[derive(Clone, Copy)]
struct FranzRun {
    /// From its first record to its last.
    steady: Rate,
    /// Messages per second over the whole run, join and leave included.
    whole_wall: f64,
}

/// Runs the franz-go peer `program` on all `total` messages of `topic`
/// with a fresh group.
async fn franz_consumer(
    program: &std::path::Path,
    bootstrap: &str,
    topic: &str,
    total: u64,
) -> Result<FranzRun, String> {
    let mut run = std::process::Command::new(program);
    run.arg("--brokers")
        .arg(bootstrap)
        .arg("--topic")
        .arg(topic)
        .arg("--group")
        .arg(unique("bench-franz-peer"))
        .arg("--messages")
        .arg(total.to_string());
    let stdout = run_program("the franz-go peer", run).await?;
    // One line of name=value figures.
    let figure = |name: &str| -> Result<f64, String> {
        stdout
            .split_whitespace()
            .find_map(|field| field.strip_prefix(name)?.strip_prefix('='))
            .and_then(|value| value.parse().ok())
            .ok_or_else(|| format!("no {name} in the franz-go peer's figures: {stdout}"))
    };
    let read = figure("read")?;
    if (read as u64) < total {
        return Err(format!(
            "the franz-go peer read {read} messages, not {total}"
        ));
    }
    let per_second = |seconds: f64| total as f64 / seconds.max(1e-3);
    Ok(FranzRun {
        steady: Rate {
            wall: per_second(figure("steady_wall_s")?),
            cpu: per_second(figure("steady_cpu_s")?),
        },
        whole_wall: per_second(figure("whole_wall_s")?),
    })
}

/// Kafka's own consumer benchmark (`ConsumerPerformance`, what
/// `kafka-consumer-perf-test.sh` runs) reading all `total` messages of
/// `topic` with a fresh group: its own fetch rate (messages per second of
/// fetching, rebalance excluded) and the rate over the process's wall time
/// (JVM start and group join included).
async fn java_consumer(
    bootstrap: &str,
    libs: &str,
    topic: &str,
    total: u64,
) -> Result<(f64, f64), String> {
    let group = unique("bench-java-peer");
    let mut java = std::process::Command::new("java");
    java.args([
        "-Xmx512m",
        "-cp",
        &format!("{libs}/*"),
        "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--messages",
        &total.to_string(),
        "--group",
        &group,
        // Gives up after 60 s without a record, so a run that cannot read
        // says so instead of waiting.
        "--timeout",
        "60000",
    ]);
    let started = Instant::now();
    let stdout = run_program("java (ConsumerPerformance)", java).await?;
    let wall = started.elapsed().as_secs_f64();
    // A header line of comma-separated names, then the values.
    let mut lines = stdout.lines().filter(|l| l.contains(','));
    let (Some(header), Some(values)) = (lines.next(), lines.next()) else {
        return Err(format!("ConsumerPerformance printed no figures: {stdout}"));
    };
    let figure = |name: &str| -> Result<f64, String> {
        let index = header
            .split(',')
            .position(|h| h.trim() == name)
            .ok_or_else(|| format!("no {name} in ConsumerPerformance's header: {header}"))?;
        values
            .split(',')
            .nth(index)
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| format!("no {name} in ConsumerPerformance's figures: {values}"))
    };
    let consumed = figure("data.consumed.in.nMsg")?;
    if consumed as u64 != total {
        return Err(format!(
            "ConsumerPerformance read {consumed} messages, not {total}"
        ));
    }
    Ok((figure("fetch.nMsg.sec")?, total as f64 / wall))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    match run(Options::new(Args::parse())).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("bench_throughput failed: {message}");
            ExitCode::FAILURE
        }
    }
}
