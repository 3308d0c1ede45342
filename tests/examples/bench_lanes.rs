//! Key-ordered lanes against a real Kafka and ZooKeeper (start them with
//! `eval "$(scripts/services start)"`, which sets `TENURE_KAFKA` and
//! `TENURE_ZOOKEEPER`).
//!
//! ```text
//! cargo run --release -p tenure-tests --example bench_lanes [-- --per-partition N --lanes L --sleep-ms S]
//! ```
//!
//! One member consumes a topic of `--partitions` (12) partitions whose
//! messages carry about `--keys` (10,000) distinct keys, each key in one
//! partition. Each message takes `--sleep-ms` (5) ms of simulated I/O (an
//! async sleep, not CPU) on a task of its own, then is acknowledged. It
//! measures, in one run:
//! - **`Partition` order**, the baseline: one message of a partition at a
//!   time (a task per partition, over the member's per-partition
//!   streams), over the first `--baseline-messages` (6,000) messages;
//! - **`Key` order** with `--lanes` (32) in flight per partition: the
//!   messages of a key one at a time in offset order, different keys at
//!   once, over the whole topic; per-key order checked at every hand-out;
//! - **a restart after `kill -9`**: the same `Key` order over a topic of
//!   its own (`--restart-per-partition`, 40,000, messages per partition),
//!   in a process of its own (this example, run again as a worker, whose
//!   messages take from 0 to twice `--sleep-ms` each, so that they finish
//!   out of offset order as calls to a real service do) that
//!   reports each message as it is handed out and once it is processed,
//!   and its committed offsets as they move; killed with SIGKILL once half
//!   the topic is processed and an offset was committed (every 5 s by
//!   default), then started again to finish it. Completed records
//!   processed again are those the first process had processed and the
//!   second processed too; of them, those the store recorded as done at
//!   the kill (below the committed offset, or named by the progress record
//!   beside it, read from ZooKeeper once the first process is dead) would
//!   break the record's promise, and those below the committed offset the
//!   commit's. The others were acknowledged after the last commit.
//!   `skipped_by_record` counts the completed records the progress record
//!   named done above the committed offset: a committed offset alone
//!   would have had them processed again.
//!
//! With `--peer parallel-consumer`, the same `Key` order workload also
//! runs through Confluent's Parallel Consumer (`tests/peers/parallel-consumer`,
//! its jars resolved from Maven Central once per machine with `mvn`, run with
//! `java`), with a fresh group, `ProcessingOrder.KEY` and a pool of
//! `--lanes` × `--partitions` threads (its sleeps block a thread each): a
//! line `peer=parallel-consumer msgs_per_s=… order_violations=…
//! ratio_to_peer=…`.
//!
//! Each rate counts from the first message handed out to the last one
//! processed. The last line is `ordering=key lanes=L msgs_per_s=…
//! speedup=… order_violations=… reprocessed_after_restart=…
//! reprocessed_recorded=… reprocessed_below_commit=… skipped_by_record=…
//! in_flight_at_kill=… commit_interval_ms=…`,
//! `speedup` the ratio of the `Key` rate to the `Partition` rate of the
//! same run.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use tenure::core::records::{parse_offset, Layout};
use tenure::core::{Committed, Config, Progress, TopicPartition};
use tenure::tokio::{GroupMember, KafkaConfig, Message, ProcessingOrder};
use tenure::zookeeper::ZooKeeperBackend;
use tenure_tests::bench::{run_program, server};
use tenure_tests::{kafka, unique};

#[derive(Parser, Clone)]
#[command(about = "Key-ordered lanes against a real Kafka and ZooKeeper")]
struct Args {
    /// The topic's partitions.
    #[arg(long, default_value_t = 12)]
    partitions: u32,
    /// Messages in each partition.
    #[arg(long, default_value_t = 4_000)]
    per_partition: usize,
    /// Distinct keys over the whole topic (rounded down to a multiple of
    /// the partitions).
    #[arg(long, default_value_t = 10_000)]
    keys: usize,
    /// Simulated I/O per message, in milliseconds.
    #[arg(long, default_value_t = 5)]
    sleep_ms: u64,
    /// Messages in flight per partition in `Key` order.
    #[arg(long, default_value_t = 32)]
    lanes: usize,
    /// Messages per partition of the restart's topic.
    #[arg(long, default_value_t = 40_000)]
    restart_per_partition: usize,
    /// Messages the `Partition` order baseline processes.
    #[arg(long, default_value_t = 6_000)]
    baseline_messages: usize,
    /// Run the same `Key` order workload through a peer too.
    #[arg(long, value_parser = ["parallel-consumer"])]
    peer: Option<String>,
    /// Run as the restart's worker: consume `--topic` in `--group` (the
    /// benchmark starts it so).
    #[arg(long, hide = true)]
    worker_group: Option<String>,
    /// The worker's topic.
    #[arg(long, hide = true)]
    topic: Option<String>,
}

impl Args {
    /// Keys per partition.
    fn keys_per_partition(&self) -> usize {
        (self.keys / self.partitions as usize).max(1)
    }

    /// The key of message `i` of `partition`: a key lives in one partition.
    fn key(&self, partition: u32, i: usize) -> String {
        let per = self.keys_per_partition();
        format!(
            "key{}",
            partition as usize + self.partitions as usize * (i % per)
        )
    }

    fn total(&self) -> usize {
        self.partitions as usize * self.per_partition
    }
}

/// Per-key order as the application sees it: a message handed out while
/// an earlier one of its key is still processed, or after a later one of
/// its key was, breaks it; a repeat of a message already processed (a
/// redelivery after a restart) does not.
#[derive(Default)]
struct KeyOrder {
    /// Per (partition, key): busy now, and the last offset processed.
    keys: HashMap<(u32, String), (bool, i64)>,
    processed: HashSet<(u32, i64)>,
    violations: usize,
    /// When set, every message processed from now on.
    log: Option<Vec<(u32, i64)>>,
}

impl KeyOrder {
    fn handed(&mut self, partition: u32, key: String, offset: i64) {
        let repeat = self.processed.contains(&(partition, offset));
        let (busy, last) = self.keys.entry((partition, key)).or_insert((false, -1));
        if *busy || (offset < *last && !repeat) {
            self.violations += 1;
        }
        *busy = true;
    }

    fn done(&mut self, partition: u32, key: String, offset: i64) {
        let (busy, last) = self.keys.entry((partition, key)).or_insert((false, -1));
        *busy = false;
        *last = (*last).max(offset);
        if let Some(log) = &mut self.log {
            log.push((partition, offset));
        }
        self.processed.insert((partition, offset));
    }

    /// A new process: nothing of the old one is in flight any more.
    fn restarted(&mut self) {
        for (busy, _) in self.keys.values_mut() {
            *busy = false;
        }
    }
}

/// What one in-process run measured.
struct Run {
    msgs_per_s: f64,
    processed: usize,
    violations: usize,
}

fn key_of(message: &Message) -> String {
    String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned()
}

async fn join(
    group: &str,
    topic: &str,
    order: ProcessingOrder,
    per_partition_streams: bool,
) -> Result<GroupMember, String> {
    let config = Config::new(group, "bench-lanes", [topic]).map_err(|e| e.to_string())?;
    let mut kafka_config = KafkaConfig::new(&server("TENURE_KAFKA")?);
    kafka_config.order = order;
    GroupMember::builder(config)
        .kafka(kafka_config)
        .per_partition_streams(per_partition_streams)
        .join(ZooKeeperBackend::new(server("TENURE_ZOOKEEPER")?))
        .await
        .map_err(|e| format!("joining {group}: {e}"))
}

/// `Partition` order: a task per partition processes its messages one
/// after another, until `count` are processed.
async fn partition_order(args: &Args, topic: &str, count: usize) -> Result<Run, String> {
    let mut member = join(
        &unique("lanes-partition"),
        topic,
        ProcessingOrder::Partition,
        true,
    )
    .await?;
    let done = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(tokio::sync::Notify::new());
    let first = Arc::new(Mutex::new(None::<Instant>));
    let sleep = Duration::from_millis(args.sleep_ms);
    let mut tasks = Vec::new();
    while tasks.len() < args.partitions as usize {
        let Some(mut stream) = member.next_partition_stream().await else {
            return Err("the member ended before it held every partition".into());
        };
        let (done, finished, first) = (done.clone(), finished.clone(), first.clone());
        tasks.push(tokio::spawn(async move {
            while let Some(message) = stream.next().await {
                first
                    .lock()
                    .expect("not poisoned")
                    .get_or_insert_with(Instant::now);
                tokio::time::sleep(sleep).await;
                message.ack();
                if done.fetch_add(1, Ordering::SeqCst) + 1 == count {
                    finished.notify_one();
                }
            }
        }));
    }
    tokio::time::timeout(Duration::from_secs(600), finished.notified())
        .await
        .map_err(|_| format!("Partition order: not {count} messages in 600 s"))?;
    let elapsed = first.lock().expect("not poisoned").map(|t| t.elapsed());
    for task in &tasks {
        task.abort();
    }
    member.kill();
    let seconds = elapsed.map_or(1e-3, |e| e.as_secs_f64());
    Ok(Run {
        msgs_per_s: count as f64 / seconds,
        processed: count,
        violations: 0,
    })
}

/// `Key` order with `args.lanes` in flight per partition: every message
/// on a task of its own, acknowledged once its sleep is over, until the
/// whole topic is processed.
async fn key_order(args: &Args, topic: &str) -> Result<Run, String> {
    let total = args.total();
    let order = ProcessingOrder::key(args.lanes);
    let mut member = join(&unique("lanes-key"), topic, order, false).await?;
    let seen = Arc::new(Mutex::new(KeyOrder::default()));
    let done = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(tokio::sync::Notify::new());
    let sleep = Duration::from_millis(args.sleep_ms);
    let mut first = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    loop {
        tokio::select! {
            message = member.next_message() => {
                let Some(message) = message else {
                    return Err("the member ended before the topic was processed".into());
                };
                first.get_or_insert_with(Instant::now);
                let (p, offset, key) = (message.partition(), message.offset(), key_of(&message));
                seen.lock().expect("not poisoned").handed(p, key.clone(), offset);
                let (seen, done, finished) = (seen.clone(), done.clone(), finished.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(sleep).await;
                    seen.lock().expect("not poisoned").done(p, key, offset);
                    message.ack();
                    if done.fetch_add(1, Ordering::SeqCst) + 1 == total {
                        finished.notify_one();
                    }
                });
            }
            () = finished.notified() => break,
            () = tokio::time::sleep_until(deadline) => {
                return Err(format!(
                    "Key order: {} of {total} messages in 600 s",
                    done.load(Ordering::SeqCst)
                ));
            }
        }
    }
    let seconds = first.map_or(1e-3, |t: Instant| t.elapsed().as_secs_f64());
    member.kill();
    let seen = seen.lock().expect("not poisoned");
    Ok(Run {
        msgs_per_s: total as f64 / seconds,
        processed: seen.processed.len(),
        violations: seen.violations,
    })
}

/// The restart's worker: `Key` order in this process, each message taking
/// from 0 to twice `--sleep-ms` (so that they finish out of offset order),
/// a line `s <p>
/// <offset>` when a message is handed out and `d <p> <offset>` once it is
/// processed (written before it is acknowledged, so a kill between the
/// two counts it as completed: a repeat then counts against tenure).
async fn worker(args: &Args, group: &str, topic: &str) -> Result<(), String> {
    let member = join(group, topic, ProcessingOrder::key(args.lanes), false).await?;
    let (handle, streams) = member.split();
    let mut messages = streams
        .messages
        .ok_or("a member with Kafka hands out messages")?;
    // From 0 to twice the sleep, the sleep on average, the same for a
    // message in every run: messages finish out of offset order, as
    // calls to a real service do.
    let sleep_us = args.sleep_ms * 1_000;
    let sleep_of = move |p: u32, offset: i64| {
        let spread = (offset as u64)
            .wrapping_mul(7_919)
            .wrapping_add(u64::from(p) * 104_729)
            % 1_001;
        Duration::from_micros(sleep_us * 2 * spread / 1_000)
    };
    let say = |line: std::fmt::Arguments<'_>| -> Result<(), String> {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}")
            .and_then(|()| out.flush())
            .map_err(|e| format!("stdout: {e}"))
    };
    let mut committed: HashMap<u32, i64> = HashMap::new();
    let mut look = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            message = messages.next() => {
                let Some(message) = message else { break };
                let (p, offset) = (message.partition(), message.offset());
                say(format_args!("s {p} {offset}"))?;
                let sleep = sleep_of(p, offset);
                tokio::spawn(async move {
                    tokio::time::sleep(sleep).await;
                    if say(format_args!("d {p} {offset}")).is_ok() {
                        message.ack();
                    }
                });
            }
            _ = look.tick() => {
                // The committed offsets as they move: `c <p> <next offset>`.
                for p in 0..args.partitions {
                    let tp = TopicPartition::new(topic, p);
                    if let Ok((_, Some(offset))) = handle.committed(&tp).await {
                        if committed.insert(p, offset) != Some(offset) {
                            say(format_args!("c {p} {offset}"))?;
                        }
                    }
                }
            }
        }
    }
    Err("the member ended".into())
}

/// Reads a worker's lines into `seen` until `stop_at` messages are
/// processed in all, the worker's end, or 600 s; gives the messages handed
/// out and not processed when it stopped.
fn follow(
    args: &Args,
    child: &mut std::process::Child,
    seen: &mut KeyOrder,
    committed: &mut HashMap<u32, i64>,
    stop_at: usize,
) -> Result<usize, String> {
    let stdout = child.stdout.take().ok_or("the worker's stdout")?;
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut in_flight = HashSet::new();
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.map_err(|e| format!("the worker's stdout: {e}"))?;
        let mut words = line.split(' ');
        let (Some(kind), Some(p), Some(offset)) = (words.next(), words.next(), words.next()) else {
            return Err(format!("the worker printed {line:?}"));
        };
        let (Ok(p), Ok(offset)) = (p.parse::<u32>(), offset.parse::<i64>()) else {
            return Err(format!("the worker printed {line:?}"));
        };
        let key = args.key(p, offset as usize);
        match kind {
            "c" => {
                committed.insert(p, offset);
                continue;
            }
            "s" => {
                in_flight.insert((p, offset));
                seen.handed(p, key, offset);
            }
            "d" => {
                in_flight.remove(&(p, offset));
                seen.done(p, key, offset);
            }
            _ => return Err(format!("the worker printed {line:?}")),
        }
        if seen.processed.len() >= stop_at && !committed.is_empty() {
            return Ok(in_flight.len());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the worker processed {} of {stop_at} in 600 s",
                seen.processed.len()
            ));
        }
    }
    Err(format!(
        "the worker ended after {} messages processed: {:?}",
        seen.processed.len(),
        child.wait()
    ))
}

/// What the restart measured.
struct Restart {
    reprocessed: usize,
    /// Of them, those the store recorded as done at the kill: below the
    /// committed offset, or in the progress record beside it.
    recorded: usize,
    /// Of them, those below the offset committed at the kill.
    below_commit: usize,
    /// Completed before the kill and named done by the progress record
    /// above the committed offset: skipped after the restart, where a
    /// committed offset alone would have them processed again.
    skipped_by_record: usize,
    in_flight_at_kill: usize,
    violations: usize,
}

/// A worker killed with SIGKILL halfway through the topic, and a new one
/// that finishes it.
fn restart(args: &Args, topic: &str) -> Result<Restart, String> {
    let group = unique("lanes-restart");
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let spawn = || {
        std::process::Command::new(&exe)
            .args(["--worker-group", &group, "--topic", topic])
            .args(["--partitions", &args.partitions.to_string()])
            .args(["--keys", &args.keys.to_string()])
            .args(["--sleep-ms", &args.sleep_ms.to_string()])
            .args(["--lanes", &args.lanes.to_string()])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting the worker: {e}"))
    };
    let total = args.partitions as usize * args.restart_per_partition;
    let mut seen = KeyOrder::default();
    let mut committed = HashMap::new();
    let mut first = spawn()?;
    let in_flight_at_kill = follow(args, &mut first, &mut seen, &mut committed, total / 2)?;
    first
        .kill()
        .map_err(|e| format!("kill -9 of the worker: {e}"))?;
    let _ = first.wait();
    let recorded = recorded_at_kill(&group, topic, args.partitions)?;
    let completed: HashSet<(u32, i64)> = seen.processed.clone();
    seen.restarted();
    seen.log = Some(Vec::new());
    let mut second = spawn()?;
    let finished = follow(args, &mut second, &mut seen, &mut HashMap::new(), total);
    let _ = second.kill();
    let _ = second.wait();
    finished?;
    // Processed by both processes: completed before the kill and again.
    let second_processed: HashSet<(u32, i64)> =
        seen.log.take().unwrap_or_default().into_iter().collect();
    let again: Vec<&(u32, i64)> = second_processed.intersection(&completed).collect();
    let below_commit = again
        .iter()
        .filter(|(p, o)| committed.get(p).is_some_and(|c| o < c))
        .count();
    let done_in_store = |(p, o): &(u32, i64)| {
        recorded
            .get(p)
            .is_some_and(|c| *o < c.offset || c.progress.is_done(*o))
    };
    let skipped_by_record = completed
        .iter()
        .filter(|(p, o)| {
            recorded
                .get(p)
                .is_some_and(|c| *o >= c.offset && c.progress.is_done(*o))
        })
        .count();
    Ok(Restart {
        skipped_by_record,
        reprocessed: again.len(),
        recorded: again.iter().filter(|m| done_in_store(m)).count(),
        below_commit,
        in_flight_at_kill,
        violations: seen.violations,
    })
}

/// What the store recorded as done for each partition of `topic` in
/// `group`: its committed offset and the progress record beside it, read
/// from ZooKeeper (on a thread and runtime of its own: the caller blocks
/// on the workers' output).
fn recorded_at_kill(
    group: &str,
    topic: &str,
    partitions: u32,
) -> Result<HashMap<u32, Committed>, String> {
    let connect = server("TENURE_ZOOKEEPER")?;
    let (group, topic) = (group.to_owned(), topic.to_owned());
    let read = async move {
        let client = zookeeper_client::Client::connect(&connect)
            .await
            .map_err(|e| format!("ZooKeeper at {connect}: {e}"))?;
        let layout = Layout::new("", &group);
        let mut recorded = HashMap::new();
        for p in 0..partitions {
            let tp = TopicPartition::new(&topic, p);
            let path = layout.offset(&tp);
            let offset = match client.get_data(&path).await {
                Ok((data, _)) => parse_offset(&path, &data).map_err(|e| e.to_string())?,
                Err(zookeeper_client::Error::NoNode) => continue,
                Err(e) => return Err(format!("{path}: {e}")),
            };
            let path = layout.progress(&tp);
            let progress = match client.get_data(&path).await {
                Ok((data, _)) => Progress::decode(&path, &data, offset)
                    .map_err(|e| e.to_string())?
                    .unwrap_or_default(),
                Err(zookeeper_client::Error::NoNode) => Progress::new(),
                Err(e) => return Err(format!("{path}: {e}")),
            };
            recorded.insert(p, Committed { offset, progress });
        }
        Ok(recorded)
    };
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("a runtime: {e}"))?
            .block_on(read)
    })
    .join()
    .map_err(|_| "the thread reading the records panicked".to_owned())?
}

async fn run(args: Args) -> Result<(), String> {
    if let (Some(group), Some(topic)) = (&args.worker_group, &args.topic) {
        return worker(&args, group, topic).await;
    }
    let client = kafka_client().await?;
    let topic = unique("bench-lanes");
    kafka::create_topic(&client, &topic, args.partitions).await;
    for p in 0..args.partitions {
        kafka::produce_with(
            &client,
            &topic,
            p,
            args.per_partition,
            |i| args.key(p, i),
            None,
        )
        .await;
    }
    let keys = args.keys_per_partition() * args.partitions as usize;
    println!(
        "topic={topic} partitions={} messages={} keys={keys} sleep_ms={} lanes={}",
        args.partitions,
        args.total(),
        args.sleep_ms,
        args.lanes
    );
    let baseline = partition_order(&args, &topic, args.baseline_messages.min(args.total())).await?;
    println!(
        "ordering=partition msgs_per_s={:.0} messages={}",
        baseline.msgs_per_s, baseline.processed
    );
    let lanes = key_order(&args, &topic).await?;
    println!(
        "ordering=key lanes={} msgs_per_s={:.0} messages={} order_violations={}",
        args.lanes, lanes.msgs_per_s, lanes.processed, lanes.violations
    );
    if args.peer.is_some() {
        let peer = parallel_consumer(&args, &topic).await?;
        println!(
            "peer=parallel-consumer msgs_per_s={:.0} messages={} order_violations={} ratio_to_peer={:.2}",
            peer.msgs_per_s,
            peer.processed,
            peer.violations,
            lanes.msgs_per_s / peer.msgs_per_s.max(1e-9)
        );
    }
    let restart_topic = unique("bench-lanes-restart");
    kafka::create_topic(&client, &restart_topic, args.partitions).await;
    for p in 0..args.partitions {
        let key = |i| args.key(p, i);
        kafka::produce_with(
            &client,
            &restart_topic,
            p,
            args.restart_per_partition,
            key,
            None,
        )
        .await;
    }
    let restarted = restart(&args, &restart_topic)?;
    let commit_interval = Config::new("g", "m", [&topic])
        .map_err(|e| e.to_string())?
        .commit_interval();
    println!(
        "ordering=key lanes={} msgs_per_s={:.0} speedup={:.1} order_violations={} reprocessed_after_restart={} reprocessed_recorded={} reprocessed_below_commit={} skipped_by_record={} in_flight_at_kill={} commit_interval_ms={}",
        args.lanes,
        lanes.msgs_per_s,
        lanes.msgs_per_s / baseline.msgs_per_s.max(1e-9),
        lanes.violations + restarted.violations,
        restarted.reprocessed,
        restarted.recorded,
        restarted.below_commit,
        restarted.skipped_by_record,
        restarted.in_flight_at_kill,
        commit_interval.as_millis()
    );
    Ok(())
}

/// Where the Parallel Consumer peer's sources are.
const PARALLEL_CONSUMER_PEER: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/peers/parallel-consumer");

/// The whole topic through the Parallel Consumer peer, with a fresh group:
/// its rate from its first record to its last, as it measures itself.
async fn parallel_consumer(args: &Args, topic: &str) -> Result<Run, String> {
    let libs = std::env::temp_dir().join("tenure-bench-parallel-consumer-libs");
    if !libs.join("resolved").exists() {
        let mut resolve = std::process::Command::new("mvn");
        resolve
            .args(["-q", "-f", &format!("{PARALLEL_CONSUMER_PEER}/pom.xml")])
            .arg("dependency:copy-dependencies")
            .arg(format!("-DoutputDirectory={}", libs.display()));
        run_program(
            "mvn, resolving the Parallel Consumer peer's jars from Maven Central",
            resolve,
        )
        .await?;
        std::fs::write(libs.join("resolved"), b"")
            .map_err(|e| format!("{}: {e}", libs.display()))?;
    }
    let total = args.total();
    let mut java = std::process::Command::new("java");
    java.args(["-Xmx1g", "-cp", &format!("{}/*", libs.display())])
        .arg(format!("{PARALLEL_CONSUMER_PEER}/Main.java"))
        .arg(server("TENURE_KAFKA")?)
        .arg(topic)
        .arg(unique("lanes-parallel-consumer"))
        .arg(total.to_string())
        .arg(args.sleep_ms.to_string())
        .arg((args.lanes * args.partitions as usize).to_string());
    let stdout = run_program("java (the Parallel Consumer peer)", java).await?;
    let figure = |name: &str| -> Result<f64, String> {
        stdout
            .split_whitespace()
            .find_map(|word| word.strip_prefix(name)?.strip_prefix('='))
            .and_then(|value| value.parse().ok())
            .ok_or_else(|| format!("no {name} in the peer's line: {stdout}"))
    };
    let distinct = figure("distinct")? as usize;
    if distinct != total {
        return Err(format!(
            "the peer processed {distinct} messages, not {total}"
        ));
    }
    Ok(Run {
        msgs_per_s: total as f64 / figure("steady_s")?.max(1e-3),
        processed: distinct,
        violations: figure("order_violations")? as usize,
    })
}

/// The benchmark's own client to the real Kafka, for the topic and its
/// messages.
async fn kafka_client() -> Result<Arc<rskafka::client::Client>, String> {
    server("TENURE_KAFKA")?;
    Ok(kafka::client().await)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("bench_lanes failed: {message}");
            ExitCode::FAILURE
        }
    }
}
