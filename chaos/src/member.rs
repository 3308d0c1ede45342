//! `chaos member`: a member process that joins, prints what it hands out,
//! and closes on SIGTERM.

use std::time::Duration;

use tenure::core::Config;
use tenure::etcd::EtcdBackend;
use tenure::tokio::{Backend, GroupMember, KafkaConfig, ProcessingOrder};
use tenure::zookeeper::ZooKeeperBackend;

use crate::store::{StoreKind, CHAOS_PREFIX};
use tenure_chaos_lines::{close_printing_events, print_event, say, wall_ms};

/// A member's flags, as the chaos run passes them.
#[derive(clap::Args)]
pub struct MemberArgs {
    #[arg(long, value_enum)]
    store: StoreKind,
    /// The store, through this member's proxy.
    #[arg(long)]
    address: String,
    #[arg(long)]
    kafka: String,
    #[arg(long)]
    group: String,
    #[arg(long)]
    topic: String,
    /// The member's id.
    #[arg(long)]
    member: String,
    #[arg(long, default_value_t = 4_000)]
    session_ms: u64,
    /// `key`: key-ordered lanes, each message on a task of its own.
    #[arg(long, value_enum, default_value = "partition")]
    ordering: crate::Ordering,
}

/// Messages of a partition in flight at once in key order.
const LANES: usize = 8;

/// Joins; prints `ready`, then an `m <wall ms> <partition> <offset>
/// <token>` line for each message it hands out and an `e` line for each
/// assignment change; on SIGTERM closes, printing what the close hands
/// over, and prints `closed`. In key order, each message is processed on
/// a task of its own (0 to 19 ms, by its offset), which prints `a <wall
/// ms> <partition> <offset> <token> <key>` and then acknowledges it.
pub async fn run(args: MemberArgs) -> Result<bool, String> {
    let MemberArgs {
        store,
        address,
        kafka,
        group,
        topic,
        member: id,
        session_ms,
        ordering,
    } = args;
    let session = Duration::from_millis(session_ms);
    let backend: Box<dyn Backend> = match store {
        StoreKind::ZooKeeper => Box::new(ZooKeeperBackend::new(address)),
        StoreKind::Etcd => Box::new(EtcdBackend::new(address).prefix(CHAOS_PREFIX)),
    };
    let config = Config::new(&group, &id, [&topic])
        .map_err(|e| e.to_string())?
        .with_session_timeout(session);
    let mut kafka_config = KafkaConfig::new(&kafka);
    if ordering == crate::Ordering::Key {
        kafka_config.order = ProcessingOrder::key(LANES);
    }
    let (member, streams) = GroupMember::builder(config)
        .kafka(kafka_config)
        .join(backend)
        .await
        .map_err(|e| format!("member {id}: {e}"))?
        .split();
    say("ready");
    let mut events = streams.events;
    let mut messages = streams
        .messages
        .ok_or_else(|| format!("member {id}: no message stream"))?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("member {id}: SIGTERM: {e}"))?;
    loop {
        tokio::select! {
            message = messages.next() => {
                let Some(message) = message else { break };
                say(format_args!(
                    "m {} {} {} {}",
                    wall_ms(),
                    message.partition(),
                    message.offset(),
                    message.token().0
                ));
                if ordering == crate::Ordering::Key {
                    tokio::spawn(async move {
                        let work = (message.offset() as u64).wrapping_mul(7_919) % 20;
                        tokio::time::sleep(Duration::from_millis(work)).await;
                        let key = String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned();
                        say(format_args!(
                            "a {} {} {} {} {key}",
                            wall_ms(),
                            message.partition(),
                            message.offset(),
                            message.token().0
                        ));
                        message.ack();
                    });
                } else {
                    message.ack();
                }
            }
            Some(event) = events.next() => print_event(&event),
            _ = terminate.recv() => break,
        }
    }
    let _ = close_printing_events(member.close(), &mut events)
        .await
        .map_err(|e| format!("member {id}: close: {e}"))?;
    say("closed");
    Ok(true)
}
