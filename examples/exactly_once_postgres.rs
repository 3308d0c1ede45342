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
//! Flags (`--help` lists them): `--store zookeeper|etcd` (etcd: `--features
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
//! chaos tool (`chaos --sink postgres`, of the `tenure-chaos` crate, runs it
//! as its member; `examples/common/lines.rs` writes the lines both share):
//! `ready`; `e <wall ms> <assigned|suspended|resumed|revoking|revoked|lost>
//! <partition> <token>`; `f <wall ms> <partition> <token> <stored token>
//! <dropped>` for a write the database refused because a newer claim had
//! fenced the partition; `x <wall ms> <partition> <fence|write> <attempt>
//! <error>` for a failed attempt (retried); and, after a clean close,
//! `closed` with the counts.

mod common;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use common::{flag_or_server, Store};
use rskafka::client::partition::{Compression, UnknownTopicHandling};
use rskafka::client::ClientBuilder;
use rskafka::record::Record;
use tenure::core::{Config, FencingToken, TopicPartition};
use tenure::postgres::{MessageTable, PostgresSink, PostgresSinkError};
use tenure::tokio::exactly_once::{ExactlyOnce, Fence, Report, Stage, TransactionalSink, Written};
use tenure::tokio::{Backend, GroupMember, KafkaConfig, Message};
use tenure_chaos_lines::{close_printing_events, print_event, say, wall_ms};

/// Exactly once from a Kafka topic into PostgreSQL: one row per message,
/// each partition's next offset and fencing token in a second table, one
/// transaction per batch.
#[derive(Parser)]
struct Args {
    /// The coordination store (etcd: built with `--features etcd`).
    #[arg(long, value_enum, default_value_t = Store::ZooKeeper)]
    store: Store,
    /// The store's address [default: TENURE_ZOOKEEPER or TENURE_ETCD].
    #[arg(long)]
    address: Option<String>,
    /// Kafka's bootstrap address [default: TENURE_KAFKA].
    #[arg(long)]
    kafka: Option<String>,
    /// The database's URL [default: TENURE_POSTGRES].
    #[arg(long)]
    postgres: Option<String>,
    /// The topic to consume.
    #[arg(long)]
    topic: String,
    /// The consumer group.
    #[arg(long)]
    group: String,
    /// The member's id.
    #[arg(long, default_value_t = format!("host-{}", std::process::id()))]
    member: String,
    /// The member's session timeout.
    #[arg(long, default_value_t = 4_000)]
    session_ms: u64,
    /// The table of rows.
    #[arg(long, default_value = "tenure_messages")]
    table: String,
    /// The table of each partition's next offset and token.
    #[arg(long, default_value = "tenure_offsets")]
    offsets_table: String,
    /// Create the topic with `--partitions` partitions and write this many
    /// messages to it before consuming.
    #[arg(long, value_name = "N")]
    produce: Option<u64>,
    /// Partitions of the topic `--produce` creates.
    #[arg(long, default_value_t = 6)]
    partitions: u32,
    /// The time each batch's processing takes before its rows are written,
    /// outside the transaction, as an application's work is.
    #[arg(long, default_value_t = 0)]
    work_ms: u64,
    /// How long the database lets a transaction sit idle before it ends it.
    #[arg(long, default_value_t = 10_000)]
    idle_in_transaction_ms: u64,
    /// Leave once nothing was written for that long [default: run until
    /// SIGTERM or Ctrl-C].
    #[arg(long)]
    exit_when_idle_ms: Option<u64>,
}

#[tokio::main]
async fn main() -> ExitCode {
    common::exit("exactly_once_postgres", run(Args::parse()).await)
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

fn backend(store: Store, address: String) -> Result<Box<dyn Backend>, String> {
    match store {
        Store::ZooKeeper => Ok(Box::new(tenure::zookeeper::ZooKeeperBackend::new(address))),
        #[cfg(feature = "etcd")]
        Store::Etcd => Ok(Box::new(
            tenure::etcd::EtcdBackend::new(address).prefix("/tenure-exactly-once"),
        )),
        #[cfg(not(feature = "etcd"))]
        Store::Etcd => Err("built without etcd: run with --features etcd".to_owned()),
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
                        value: Some(next.to_string().into_bytes().into()),
                        headers: Vec::new(),
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

async fn run(args: Args) -> Result<(), String> {
    let address = flag_or_server(args.address, args.store.variable())?;
    let kafka = flag_or_server(args.kafka, "TENURE_KAFKA")?;
    let postgres = flag_or_server(args.postgres, "TENURE_POSTGRES")?;
    let (topic, group, table) = (args.topic, args.group, args.table);
    let member_id = args.member;
    let session = Duration::from_millis(args.session_ms);
    let work = Duration::from_millis(args.work_ms);
    let idle_in_transaction = Duration::from_millis(args.idle_in_transaction_ms);
    let exit_when_idle = args.exit_when_idle_ms.map(Duration::from_millis);
    if let Some(count) = args.produce {
        produce(&kafka, &topic, args.partitions, count).await?;
    }

    let rows = MessageTable::new(&table).map_err(|e| e.to_string())?;
    let sink = PostgresSink::builder(&postgres, &group)
        .offsets_table(&args.offsets_table)
        .idle_in_transaction_timeout(idle_in_transaction)
        .connect(rows)
        .await
        .map_err(|e| e.to_string())?;
    let config = Config::new(&group, &member_id, [&topic])
        .map_err(|e| e.to_string())?
        .with_session_timeout(session);
    let member = GroupMember::builder(config).kafka(KafkaConfig::new(&kafka));
    let (consumer, streams) = ExactlyOnce::builder(member, Working { sink, work })
        .join(backend(args.store, address)?)
        .await
        .map_err(|e| format!("member {member_id}: {e}"))?;
    say("ready");

    let mut events = streams.events;
    // The writers' reports, printed as they come until the writers are
    // gone with the close.
    let mut reports = streams.reports;
    let printing_reports = tokio::spawn(async move {
        while let Some(report) = reports.next().await {
            print_report(&report);
        }
    });
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("SIGTERM: {e}"))?;
    let mut idle_check = tokio::time::interval(Duration::from_millis(200));
    let (mut last_written, mut written_at) = (0, Instant::now());
    loop {
        tokio::select! {
            Some(event) = events.next() => print_event(&event),
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
    let _ = close_printing_events(consumer.close(), &mut events)
        .await
        .map_err(|e| format!("close: {e}"))?;
    // The last reports, if the writers had any left (they stop with the
    // close, and their reports end with them).
    let _ = tokio::time::timeout(Duration::from_secs(5), printing_reports).await;
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
