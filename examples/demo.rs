//! tenure's main job, with no server at all: a group of members shares the
//! partitions of a topic on the embedded in-memory store; a member joins,
//! another leaves, and ownership moves — only the partitions that must.
//!
//! ```text
//! cargo run --example demo                                   # embedded store
//! cargo run --example demo -- --zookeeper 127.0.0.1:21810     # a real ZooKeeper
//! ```
//!
//! Flags: `--members N` (3), `--partitions P` (12), `--duration SECS` (9),
//! `--zookeeper HOST:PORT[/CHROOT]`. It ends by itself and exits 0.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use tenure::core::{Config, MemberId, TopicPartition};
use tenure::tokio::{Backend, GroupMember, MemoryStore, View};
use tokio::sync::mpsc;

struct Args {
    members: usize,
    partitions: u32,
    duration: Duration,
    zookeeper: Option<String>,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        members: 3,
        partitions: 12,
        duration: Duration::from_secs(9),
        zookeeper: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--members" => args.members = value()?.parse().map_err(|_| "--members takes a number")?,
            "--partitions" => args.partitions = value()?.parse().map_err(|_| "--partitions takes a number")?,
            "--duration" => {
                let secs: u64 = value()?.parse().map_err(|_| "--duration takes seconds")?;
                args.duration = Duration::from_secs(secs.max(3));
            }
            "--zookeeper" => args.zookeeper = Some(value()?),
            "--help" | "-h" => {
                return Err("usage: demo [--members N] [--partitions P] [--duration SECS] [--zookeeper HOST:PORT[/CHROOT]]".into())
            }
            other => return Err(format!("unknown flag {other:?} (try --help)")),
        }
    }
    if args.members == 0 || args.partitions == 0 {
        return Err("--members and --partitions must be at least 1".into());
    }
    Ok(args)
}

/// Where the members keep their records.
enum Store {
    Memory(MemoryStore),
    #[cfg(feature = "zookeeper")]
    ZooKeeper(String),
}

impl Store {
    fn backend(&self, session_timeout: Duration) -> Box<dyn Backend> {
        match self {
            Store::Memory(store) => Box::new(store.backend(session_timeout)),
            #[cfg(feature = "zookeeper")]
            Store::ZooKeeper(address) => Box::new(
                tenure::zookeeper::ZooKeeperBackend::new(address.clone())
                    .session_timeout(session_timeout),
            ),
        }
    }
}

const SESSION: Duration = Duration::from_secs(3);

async fn join(
    store: &Store,
    group: &str,
    name: &str,
    partitions: u32,
    log: &mpsc::UnboundedSender<(MemberId, View)>,
) -> Result<GroupMember, String> {
    let mut config = Config::new(group, name, ["orders"]).map_err(|e| e.to_string())?;
    config = config
        .with_session_timeout(SESSION)
        .with_processing_timeout(Duration::from_secs(2));
    GroupMember::builder(config)
        .partitions([("orders".to_owned(), partitions)].into())
        .auto_drain(true)
        .view_log(log.clone())
        .join(store.backend(SESSION))
        .await
        .map_err(|e| format!("{name} cannot join: {e}"))
}

fn table(views: &BTreeMap<MemberId, View>) {
    for (member, view) in views {
        if view.closed {
            continue;
        }
        let owned: Vec<String> = view
            .fetching
            .iter()
            .map(|p: &TopicPartition| format!("{}", p.partition))
            .collect();
        println!(
            "    {member:<8} owns {:>2}: [{}]",
            owned.len(),
            owned.join(" ")
        );
    }
}

/// Prints ownership changes as members publish them, until `until`.
async fn follow(
    changes: &mut mpsc::UnboundedReceiver<(MemberId, View)>,
    views: &mut BTreeMap<MemberId, View>,
    until: tokio::time::Instant,
) {
    while let Ok(Some((member, view))) = tokio::time::timeout_at(until, changes.recv()).await {
        let before = views
            .get(&member)
            .map(|v| v.owned.clone())
            .unwrap_or_default();
        for (partition, token) in &view.owned {
            if !before.contains_key(partition) {
                println!(
                    "  + {member:<8} claims  {partition:<10} (fencing token {})",
                    token.0
                );
            }
        }
        for (partition, token) in &before {
            if !view.owned.contains_key(partition) {
                println!(
                    "  - {member:<8} release {partition:<10} (fencing token {})",
                    token.0
                );
            }
        }
        views.insert(member, view);
    }
}

async fn run(args: Args) -> Result<(), String> {
    let store = match &args.zookeeper {
        None => Store::Memory(MemoryStore::new()),
        #[cfg(feature = "zookeeper")]
        Some(address) => Store::ZooKeeper(address.clone()),
        #[cfg(not(feature = "zookeeper"))]
        Some(_) => return Err("built without the zookeeper feature".into()),
    };
    let group = format!("demo-{}", std::process::id());
    let where_ = args
        .zookeeper
        .as_deref()
        .unwrap_or("the embedded in-memory store");
    println!(
        "group {group} on {where_}: {} members, {} partitions",
        args.members, args.partitions
    );
    let (log, mut changes) = mpsc::unbounded_channel();
    let mut views = BTreeMap::new();
    let mut members = Vec::new();
    for n in 1..=args.members {
        members.push(join(&store, &group, &format!("m{n}"), args.partitions, &log).await?);
    }
    let step = args.duration / 3;
    let start = tokio::time::Instant::now();
    follow(&mut changes, &mut views, start + step).await;
    println!("settled:");
    table(&views);

    let newcomer = format!("m{}", args.members + 1);
    println!("{newcomer} joins:");
    members.push(join(&store, &group, &newcomer, args.partitions, &log).await?);
    follow(&mut changes, &mut views, start + step * 2).await;
    table(&views);

    let leaver = members.remove(0);
    println!("{} leaves:", leaver.id());
    let closing = tokio::spawn(leaver.close());
    follow(&mut changes, &mut views, start + args.duration).await;
    closing
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    table(&views);

    for member in members {
        member.close().await.map_err(|e| e.to_string())?;
    }
    println!("all members left the group cleanly");
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args = match parse() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("demo failed: {message}");
            ExitCode::FAILURE
        }
    }
}
