//! Groups watched over time: a task that follows the store's changes
//! through its watch (reading a group only when it changed), reads the
//! log offsets of the groups' topics from Kafka on an interval, and hands
//! what it read, with the time, to the monitor's state ([`watched`]),
//! which keeps a window of samples per partition and judges them
//! ([`crate::health`]); an [`Overview`] is published after every change.

mod config;
mod watched;

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use tokio::sync::watch;
use tokio::time::Instant;

pub use config::{GroupFilter, MonitorConfig};

use self::watched::{millis_of, Watched};
use crate::error::AdminError;
use crate::kafka::{KafkaClient, LogReader};
use crate::overview::Overview;
use crate::store::{GroupAdmin, StoreChange};

/// Makes a connection to the store: called at the start and after every
/// lost watch (an expired session is terminal for a ZooKeeper client).
pub type Connector = Box<
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<Box<dyn GroupAdmin>, AdminError>> + Send>>
        + Send
        + Sync,
>;

/// Watches groups in a store and Kafka's logs, and judges them. The work
/// runs on a task of its own, stopped when the monitor is dropped; readers
/// take the latest [`Overview`] ([`Monitor::overview`]) or wait for the
/// next ([`Monitor::updates`]), never holding the task up.
pub struct Monitor {
    updates: watch::Receiver<Arc<Overview>>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Monitor").finish_non_exhaustive()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Monitor {
    /// Starts watching: connects with `connect` (again after a lost
    /// store), reads Kafka through `kafka` (without it, no partition has a
    /// lag or a sample, and each is OK: "no sample yet").
    pub fn start(
        connect: Connector,
        kafka: Option<Arc<KafkaClient>>,
        config: MonitorConfig,
    ) -> Monitor {
        let (publish, updates) = watch::channel(Arc::new(Overview {
            kafka_interval_ms: millis_of(config.kafka_interval),
            window: config.window,
            updated_ms: now_ms(),
            store_error: Some("connecting".to_owned()),
            ..Overview::default()
        }));
        // A request may take the interval, within 1 to 15 s.
        let limit = config
            .kafka_interval
            .clamp(Duration::from_secs(1), Duration::from_secs(15));
        let state = Watched::new(config);
        let reader = LogReader::new(kafka, limit);
        let task = tokio::spawn(run(connect, reader, state, publish));
        Monitor { updates, task }
    }

    /// The latest overview.
    pub fn overview(&self) -> Arc<Overview> {
        self.updates.borrow().clone()
    }

    /// A receiver of overviews: it holds the latest one only, so a slow
    /// reader skips overviews and never slows the monitor down.
    pub fn updates(&self) -> watch::Receiver<Arc<Overview>> {
        self.updates.clone()
    }
}

async fn run(
    connect: Connector,
    mut reader: LogReader,
    mut state: Watched,
    publish: watch::Sender<Arc<Overview>>,
) {
    let mut kafka_tick = tokio::time::interval(state.config().kafka_interval);
    kafka_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let lost = watch_store(&connect, &mut reader, &mut state, &publish, &mut kafka_tick).await;
        state.lost_store(lost);
        publish_now(&mut state, &publish);
        wait_reconnect(&mut state, &mut reader, &mut kafka_tick, &publish).await;
    }
}

/// Connects, watches and reads the store, and follows its changes and
/// Kafka's logs until the store is lost; returns why.
async fn watch_store(
    connect: &Connector,
    reader: &mut LogReader,
    state: &mut Watched,
    publish: &watch::Sender<Arc<Overview>>,
    kafka_tick: &mut tokio::time::Interval,
) -> String {
    let admin = match connect().await {
        Ok(admin) => admin,
        Err(error) => return error.to_string(),
    };
    state.found_store(admin.store());
    let mut changes = match admin.watch().await {
        Ok(changes) => changes,
        Err(error) => return error.to_string(),
    };
    // The watch is set before everything is read: no change between the
    // read and the watch can be missed.
    if let Err(error) = read_all(state, admin.as_ref()).await {
        return error.to_string();
    }
    publish_now(state, publish);

    let mut dirty: BTreeSet<String> = BTreeSet::new();
    let mut resync = false;
    let mut settle_at: Option<Instant> = None;
    loop {
        tokio::select! {
            change = changes.next() => match change {
                Some(Ok(StoreChange::Group(group))) => {
                    if state.config().groups.selects(&group) {
                        dirty.insert(group);
                        settle_at.get_or_insert_with(|| Instant::now() + state.config().settle);
                    }
                }
                Some(Ok(StoreChange::Disconnected)) => {
                    // Stale until the client is back (then a Resync) or its
                    // session ends (then the stream fails).
                    state.lost_store(format!(
                        "the connection to {} was lost; reconnecting",
                        state.store()
                    ));
                    publish_now(state, publish);
                }
                Some(Ok(StoreChange::Resync)) => {
                    resync = true;
                    settle_at.get_or_insert_with(|| Instant::now() + state.config().settle);
                }
                Some(Err(error)) => return error.to_string(),
                None => return "the store's watch ended".to_owned(),
            },
            () = sleep_until(settle_at), if settle_at.is_some() => {
                settle_at = None;
                let result = if std::mem::take(&mut resync) {
                    dirty.clear();
                    read_all(state, admin.as_ref()).await
                } else {
                    read_groups(state, admin.as_ref(), std::mem::take(&mut dirty)).await
                };
                if let Err(error) = result {
                    return error.to_string();
                }
                publish_now(state, publish);
            }
            _ = kafka_tick.tick() => {
                refresh_kafka(state, reader).await;
                publish_now(state, publish);
            }
        }
    }
}

/// Waits before connecting again, refreshing from Kafka meanwhile (the
/// logs keep growing while the store is away).
async fn wait_reconnect(
    state: &mut Watched,
    reader: &mut LogReader,
    kafka_tick: &mut tokio::time::Interval,
    publish: &watch::Sender<Arc<Overview>>,
) {
    let until = Instant::now() + state.config().reconnect;
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(until) => return,
            _ = kafka_tick.tick() => {
                refresh_kafka(state, reader).await;
                publish_now(state, publish);
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Reads every selected group (and, watching all, finds the groups).
async fn read_all(state: &mut Watched, admin: &dyn GroupAdmin) -> Result<(), AdminError> {
    let found = match state.config().groups {
        GroupFilter::All => Some(admin.groups().await?.into_iter().collect()),
        GroupFilter::Named(_) => None,
    };
    let names = state.groups_to_read(found);
    read_groups(state, admin, names).await?;
    state.read_all();
    Ok(())
}

/// Reads `names` again and hands each to the state.
async fn read_groups(
    state: &mut Watched,
    admin: &dyn GroupAdmin,
    names: BTreeSet<String>,
) -> Result<(), AdminError> {
    let now = now_ms();
    for name in names {
        let read = admin.records(&name).await;
        state.group_read(name, read, now)?;
    }
    Ok(())
}

/// Reads the logs of every watched topic, and hands them to the state.
async fn refresh_kafka(state: &mut Watched, reader: &mut LogReader) {
    let read = reader.read(&state.topics()).await;
    state.logs_read(read, now_ms());
}

/// Publishes the state's overview now.
fn publish_now(state: &mut Watched, publish: &watch::Sender<Arc<Overview>>) {
    publish.send_replace(Arc::new(state.overview(now_ms())));
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, millis_of)
}
