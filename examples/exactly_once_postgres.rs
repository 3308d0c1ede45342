//! Exactly once from a Kafka topic into PostgreSQL: a group member writes
//! one row per message into a table (`tenure::postgres::MessageTable`:
//! topic, partition, offset, token, key, value, written_at), and each partition's next offset and
//! fencing token into a second one, in one transaction per batch, so that
//! no message is written twice and none is lost, whichever member is
//! killed, paused or cut off (see `tenure::tokio::exactly_once`). Against
//! the servers of `scripts/services` (`eval "$(scripts/services start)"`):
//!
//! ```text
//! cargo run --features postgres --example exactly_once_postgres -- \
//!     --topic orders --group billing --produce 10000 --exit-when-idle-ms 3000
//! psql "$TENURE_POSTGRES" -c 'SELECT count(*), count(DISTINCT (partition, "offset")) FROM tenure_messages'
//! ```
//!
//! Flags (`--name value`): `--store zookeeper|etcd` (etcd: `--features
//! etcd`), `--address` (default `TENURE_ZOOKEEPER` or `TENURE_ETCD`),
//! `--kafka` (`TENURE_KAFKA`), `--postgres` (`TENURE_POSTGRES`), `--topic`,
//! `--group`, `--member` (default host-pid), `--session-ms` (4000),
//! `--table` (`tenure_messages`), `--offsets-table` (`tenure_offsets`),
//! `--produce N` (create the topic with `--partitions` P, default 6, and
//! write N messages before consuming), `--work-ms` (time each batch's
//! processing takes before its rows are written, outside the transaction,
//! as an application's work is; 0), `--idle-in-transaction-ms` (10000),
//! `--exit-when-idle-ms` (leave once nothing was written for that long;
//! default: run until SIGTERM or Ctrl-C).
//!
//! It prints one line per thing that happened, for people and for the
//! chaos tool (`examples/chaos.rs --sink postgres` runs it as its member):
//! `ready`; `e <wall ms> <assigned|suspended|resumed|revoking|revoked>
//! <partition> <token>`; `f <wall ms> <partition> <token> <stored token>
//! <dropped>` for a write the database refused because a newer claim had
//! fenced the partition; `x <wall ms> <partition> <fence|write> <attempt>
//! <error>` for a failed attempt (retried); and, after a clean close,
//! `closed` with the counts.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rskafka::client::partition::{Compression, UnknownTopicHandling};
use rskafka::client::ClientBuilder;
use rskafka::record::Record;
use tenure::core::{Config, FencingToken, TopicPartition};
use tenure::postgres::{MessageTable, PostgresSink, PostgresSinkError};
use tenure::tokio::exactly_once::{ExactlyOnce, Fence, Report, Stage, TransactionalSink, Written};
use tenure::tokio::{AssignmentEvent, Backend, GroupMember, KafkaConfig, Message};

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("exactly_once_postgres: {message}");
            ExitCode::FAILURE
        }
    }
}

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Prints one line at once (a reader may be waiting for it).
fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    // Nobody reads any more if this fails: nothing left to tell.
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// The flags, as `--name value` pairs.
struct Flags(BTreeMap<String, String>);

impl Flags {
    fn parse() -> Result<Flags, String> {
        let mut out = BTreeMap::new();
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let name = flag
                .strip_prefix("--")
                .ok_or(format!("unexpected {flag:?}: flags are --name value"))?;
            let value = args.next().ok_or(format!("{flag} needs a value"))?;
            out.insert(name.to_owned(), value);
        }
        Ok(Flags(out))
    }

    /// `--name`, else the environment variable `var`.
    fn or_env(&self, name: &str, var: &str) -> Result<String, String> {
        match self.0.get(name) {
            Some(value) => Ok(value.clone()),
            None => std::env::var(var).map_err(|_| {
                format!(
                    "--{name} is missing and {var} is not set \
                     (start the servers with `eval \"$(scripts/services start)\"`)"
                )
            }),
        }
    }

    fn text(&self, name: &str, default: &str) -> String {
        self.0
            .get(name)
            .cloned()
            .unwrap_or_else(|| default.to_owned())
    }

    fn required(&self, name: &str) -> Result<String, String> {
        self.0
            .get(name)
            .cloned()
            .ok_or(format!("--{name} is missing"))
    }

    fn number(&self, name: &str, default: u64) -> Result<u64, String> {
        match self.0.get(name) {
            None => Ok(default),
            Some(value) => value
                .parse()
                .map_err(|_| format!("--{name} takes a number, not {value:?}")),
        }
    }
}

/// The PostgreSQL sink, with the application's work before each write
/// (`--work-ms`): a batch is processed, then its rows written.
struct Working {
    sink: PostgresSink<MessageTable>,
    work: Duration,
}

#[async_trait::async_trait]
impl TransactionalSink for Working {
    type Error = PostgresSinkError;

    async fn fence(
        &self,
        partition: &TopicPartition,
        token: FencingToken,
    ) -> Result<Fence, PostgresSinkError> {
        self.sink.fence(partition, token).await
    }

    async fn write(
        &self,
        partition: &TopicPartition,
        token: FencingToken,
        batch: &[Message],
    ) -> Result<Written, PostgresSinkError> {
        if !self.work.is_zero() {
            tokio::time::sleep(self.work).await;
        }
        self.sink.write(partition, token, batch).await
    }
}

fn backend(store: &str, address: String) -> Result<Box<dyn Backend>, String> {
    match store {
        "zookeeper" => Ok(Box::new(tenure::zookeeper::ZooKeeperBackend::new(address))),
        #[cfg(feature = "etcd")]
        "etcd" => Ok(Box::new(
            tenure::etcd::EtcdBackend::new(address).prefix("/tenure-exactly-once"),
        )),
        #[cfg(not(feature = "etcd"))]
        "etcd" => Err("built without etcd: run with --features etcd".to_owned()),
        other => Err(format!("unknown store {other:?}: zookeeper or etcd")),
    }
}

/// Creates `topic` with `partitions` partitions and writes `count` messages
/// to it, values "0", "1", … round robin.
async fn produce(kafka: &str, topic: &str, partitions: u32, count: u64) -> Result<(), String> {
    let client = ClientBuilder::new(vec![kafka.to_owned()])
        .build()
        .await
        .map_err(|e| format!("Kafka at {kafka}: {e}"))?;
    client
        .controller_client()
        .map_err(|e| e.to_string())?
        .create_topic(topic, partitions as i32, 1, 10_000)
        .await
        .map_err(|e| format!("create topic {topic}: {e}"))?;
    let mut next = 0u64;
    for p in 0..partitions {
        let partition = client
            .partition_client(topic.to_owned(), p as i32, UnknownTopicHandling::Retry)
            .await
            .map_err(|e| format!("{topic}/{p}: {e}"))?;
        let share =
            count / u64::from(partitions) + u64::from(u64::from(p) < count % u64::from(partitions));
        let mut left = share;
        while left > 0 {
            let n = left.min(1_000);
            let records = (0..n)
                .map(|_| {
                    next += 1;
                    Record {
                        key: None,
                        value: Some(next.to_string().into_bytes()),
                        headers: BTreeMap::new(),
                        timestamp: rskafka::chrono::DateTime::from_timestamp_millis(
                            wall_ms() as i64
                        )
                        .unwrap_or_default(),
                    }
                })
                .collect();
            partition
                .produce(records, Compression::NoCompression)
                .await
                .map_err(|e| format!("produce to {topic}/{p}: {e}"))?;
            left -= n;
        }
    }
    Ok(())
}

async fn run() -> Result<(), String> {
    let flags = Flags::parse()?;
    let store = flags.text("store", "zookeeper");
    let address = match store.as_str() {
        "etcd" => flags.or_env("address", "TENURE_ETCD")?,
        _ => flags.or_env("address", "TENURE_ZOOKEEPER")?,
    };
    let kafka = flags.or_env("kafka", "TENURE_KAFKA")?;
    let postgres = flags.or_env("postgres", "TENURE_POSTGRES")?;
    let topic = flags.required("topic")?;
    let group = flags.required("group")?;
    let member_id = flags.text("member", &format!("host-{}", std::process::id()));
    let session = Duration::from_millis(flags.number("session-ms", 4_000)?);
    let table = flags.text("table", "tenure_messages");
    let work = Duration::from_millis(flags.number("work-ms", 0)?);
    let idle_in_transaction =
        Duration::from_millis(flags.number("idle-in-transaction-ms", 10_000)?);
    let exit_when_idle = flags.0.contains_key("exit-when-idle-ms").then(|| {
        flags
            .number("exit-when-idle-ms", 0)
            .map(Duration::from_millis)
    });
    let exit_when_idle = exit_when_idle.transpose()?;
    if let Some(count) = flags.0.get("produce") {
        let count: u64 = count
            .parse()
            .map_err(|_| format!("--produce takes a number, not {count:?}"))?;
        let partitions = flags.number("partitions", 6)? as u32;
        produce(&kafka, &topic, partitions, count).await?;
    }

    let rows = MessageTable::new(&table).map_err(|e| e.to_string())?;
    let sink = PostgresSink::builder(&postgres, &group)
        .offsets_table(&flags.text("offsets-table", "tenure_offsets"))
        .idle_in_transaction_timeout(idle_in_transaction)
        .connect(rows)
        .await
        .map_err(|e| e.to_string())?;
    let config = Config::new(&group, &member_id, [&topic])
        .map_err(|e| e.to_string())?
        .with_session_timeout(session);
    let member = GroupMember::builder(config).kafka(KafkaConfig::new(&kafka));
    let mut consumer = ExactlyOnce::builder(member, Working { sink, work })
        .join(backend(&store, address)?)
        .await
        .map_err(|e| format!("member {member_id}: {e}"))?;
    say(format_args!("ready"));

    let mut events = consumer.events();
    let mut reports = consumer.reports();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("SIGTERM: {e}"))?;
    let mut idle_check = tokio::time::interval(Duration::from_millis(200));
    let (mut last_written, mut written_at) = (0, Instant::now());
    loop {
        tokio::select! {
            Some(event) = events.next() => print_event(&event),
            Some(report) = reports.next() => print_report(&report),
            _ = idle_check.tick(), if exit_when_idle.is_some() => {
                let written = consumer.stats().messages_written;
                if written != last_written {
                    (last_written, written_at) = (written, Instant::now());
                } else if exit_when_idle.is_some_and(|idle| written_at.elapsed() >= idle) {
                    break;
                }
            }
            _ = terminate.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    let stats = consumer.stats();
    // What the close hands over is printed too: its releases.
    let closing = consumer.close();
    tokio::pin!(closing);
    loop {
        tokio::select! {
            closed = &mut closing => {
                closed.map_err(|e| format!("close: {e}"))?;
                break;
            }
            Some(event) = events.next() => print_event(&event),
            Some(report) = reports.next() => print_report(&report),
        }
    }
    say(format_args!(
        "closed messages_written={} batches_written={} fenced_writes={} fenced_messages={} \
         fenced_claims={} failures={}",
        stats.messages_written,
        stats.batches_written,
        stats.fenced_writes,
        stats.fenced_messages,
        stats.fenced_claims,
        stats.failures
    ));
    Ok(())
}

fn print_event(event: &AssignmentEvent) {
    let (kind, partition, token) = match event {
        AssignmentEvent::Assigned {
            partition, token, ..
        } => ("assigned", partition, token),
        AssignmentEvent::Resumed { partition, token } => ("resumed", partition, token),
        AssignmentEvent::Suspended {
            partition, token, ..
        } => ("suspended", partition, token),
        AssignmentEvent::Revoking { partition, token } => ("revoking", partition, token),
        AssignmentEvent::Revoked { partition, token } => ("revoked", partition, token),
        _ => return,
    };
    say(format_args!(
        "e {} {kind} {} {}",
        wall_ms(),
        partition.partition,
        token.0
    ));
}

fn print_report(report: &Report<PostgresSinkError>) {
    match report {
        Report::Fenced {
            partition,
            token,
            stored,
            dropped,
        } => say(format_args!(
            "f {} {} {} {} {dropped}",
            wall_ms(),
            partition.partition,
            token.0,
            stored.0
        )),
        Report::Failed {
            partition,
            stage,
            attempt,
            error,
            ..
        } => {
            let stage = match stage {
                Stage::Fence => "fence",
                _ => "write",
            };
            say(format_args!(
                "x {} {} {stage} {attempt} {error}",
                wall_ms(),
                partition.partition
            ));
        }
        Report::Dropped { count } => say(format_args!("x {} - reports {count} dropped", wall_ms())),
        _ => {}
    }
}
