//! A complete consumer, against the servers of `scripts/services` (start
//! them with `eval "$(scripts/services start)"`, which sets
//! `TENURE_ZOOKEEPER`, `TENURE_ETCD` and `TENURE_KAFKA`), coordinated
//! through ZooKeeper or, with `--store etcd` (feature `etcd`), etcd:
//!
//! ```text
//! cargo run --example consumer -- --topic orders --group billing
//! cargo run --features etcd --example consumer -- --store etcd --topic orders --group billing
//! ```
//!
//! It consumes until Ctrl-C or SIGTERM (or `--seconds N`), then leaves the
//! group cleanly: drains, commits, releases its partitions. The store is
//! the only thing that differs between the two.

mod common;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use common::{server, Store};
use tenure::core::Config;
use tenure::tokio::{Backend, GroupMember, KafkaConfig};
use tenure::zookeeper::ZooKeeperBackend;

/// A complete consumer against the servers of `scripts/services`: joins a
/// group, acknowledges every message, and leaves cleanly on Ctrl-C or
/// SIGTERM.
#[derive(Parser)]
struct Args {
    /// The topic to consume.
    #[arg(long)]
    topic: String,
    /// The consumer group.
    #[arg(long, default_value = "tenure-example")]
    group: String,
    /// The member's id.
    #[arg(long, default_value_t = format!("member-{}", std::process::id()))]
    member: String,
    /// The coordination store (etcd: built with `--features etcd`).
    #[arg(long, value_enum, default_value_t = Store::ZooKeeper)]
    store: Store,
    /// Leave after this many seconds [default: on Ctrl-C or SIGTERM].
    #[arg(long)]
    seconds: Option<u64>,
    /// Messages to produce before consuming (creating the topic if
    /// needed), so a first run has something to consume.
    #[arg(long, default_value_t = 0, value_name = "N")]
    produce: usize,
    /// Partitions of a topic this example creates.
    #[arg(long, default_value_t = 3)]
    partitions: u32,
}

#[tokio::main]
async fn main() -> ExitCode {
    common::exit("consumer", run(Args::parse()).await)
}

async fn run(args: Args) -> Result<(), String> {
    let config = config(&args)?;
    let store = backend(args.store)?;
    consume(args, config, store).await
}

/// The coordination store named by `--store`.
fn backend(store: Store) -> Result<Box<dyn Backend>, String> {
    match store {
        Store::ZooKeeper => Ok(Box::new(ZooKeeperBackend::new(server(store.variable())?))),
        #[cfg(feature = "etcd")]
        Store::Etcd => Ok(Box::new(tenure::etcd::EtcdBackend::new(server(
            store.variable(),
        )?))),
        #[cfg(not(feature = "etcd"))]
        Store::Etcd => Err("built without etcd: run with --features etcd".to_owned()),
    }
}

/// The member's config: defaults for `args`.
fn config(args: &Args) -> Result<Config, String> {
    Config::new(&args.group, &args.member, [&args.topic]).map_err(|e| e.to_string())
}

/// Creates `topic` with `partitions` partitions unless it exists, and
/// produces `count` messages spread over its partitions.
async fn produce(
    bootstrap: &str,
    topic: &str,
    partitions: u32,
    count: usize,
) -> Result<(), String> {
    use rskafka::client::error::{Error, ProtocolError};
    use rskafka::client::partition::{Compression, UnknownTopicHandling};
    use rskafka::client::ClientBuilder;
    use rskafka::record::Record;

    let client = ClientBuilder::new(vec![bootstrap.to_owned()])
        .build()
        .await
        .map_err(|e| format!("Kafka at {bootstrap}: {e}"))?;
    let controller = client.controller_client().map_err(|e| e.to_string())?;
    match controller
        .create_topic(topic, partitions as i32, 1, 10_000)
        .await
    {
        Ok(()) => println!("created topic {topic} with {partitions} partitions"),
        Err(Error::ServerError {
            protocol_error: ProtocolError::TopicAlreadyExists,
            ..
        }) => {}
        Err(e) => return Err(format!("cannot create topic {topic}: {e}")),
    }
    let existing = client
        .list_topics()
        .await
        .map_err(|e| e.to_string())?
        .into_iter()
        .find(|t| t.name == topic)
        .map_or(partitions as usize, |t| t.partitions.len());
    let now =
        rskafka::chrono::DateTime::from_timestamp_millis(tenure_chaos_lines::wall_ms() as i64)
            .unwrap_or_default();
    for partition in 0..existing {
        // Spread evenly: partition p gets the messages n with n % count == p.
        let share = (count + existing - 1 - partition) / existing;
        let records: Vec<Record> = (0..share)
            .map(|n| Record {
                key: None,
                value: Some(
                    format!("message {n} of partition {partition}")
                        .into_bytes()
                        .into(),
                ),
                headers: Default::default(),
                timestamp: now,
            })
            .collect();
        let target = client
            .partition_client(topic, partition as i32, UnknownTopicHandling::Retry)
            .await
            .map_err(|e| e.to_string())?;
        for batch in records.chunks(1000) {
            target
                .produce(batch.to_vec(), Compression::NoCompression)
                .await
                .map_err(|e| format!("produce to {topic}/{partition}: {e}"))?;
        }
    }
    println!("produced {count} messages to {topic}");
    Ok(())
}

/// Ctrl-C, or SIGTERM (what service managers and `kill` send): either
/// means "leave the group cleanly now".
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = interrupt => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(_) => {
                let _ = interrupt.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}

/// Consumes until Ctrl-C or SIGTERM (or `--seconds`), acknowledging every message,
/// then leaves the group cleanly: drains, commits, releases.
async fn consume(args: Args, config: Config, store: impl Backend) -> Result<(), String> {
    let kafka = server("TENURE_KAFKA")?;
    if args.produce > 0 {
        produce(&kafka, &args.topic, args.partitions, args.produce).await?;
    }
    let member = GroupMember::builder(config)
        .kafka(KafkaConfig::new(&kafka))
        .join(store)
        .await
        .map_err(|e| e.to_string())?;
    println!("{} joined group {}", args.member, args.group);
    let stop = async {
        match args.seconds {
            Some(seconds) => tokio::time::sleep(Duration::from_secs(seconds)).await,
            None => shutdown_signal().await,
        }
    };
    tokio::pin!(stop);
    // The member's streams live apart from it: one select! waits on all.
    let (member, streams) = member.split();
    let (mut messages, mut errors) = (
        streams.messages.expect("a member with Kafka"),
        streams.errors,
    );
    let mut consumed = 0u64;
    loop {
        tokio::select! {
            _ = &mut stop => break,
            message = messages.next() => match message {
                Some(message) => {
                    consumed += 1;
                    if consumed % 1000 == 1 {
                        println!(
                            "{}/{} @{} (token {})",
                            message.topic(), message.partition(), message.offset(), message.token().0
                        );
                    }
                    message.ack();
                }
                None => break,
            },
            Some(problem) = errors.next() => eprintln!("problem: {problem}"),
        }
    }
    let _ = member.close().await.map_err(|e| e.to_string())?;
    println!("consumed {consumed} messages; left the group cleanly");
    Ok(())
}
