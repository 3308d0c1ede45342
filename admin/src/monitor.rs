//! Groups watched over time: a task that follows the store's changes
//! through its watch (reading a group only when it changed), reads the
//! log offsets of the groups' topics from Kafka on an interval, keeps a
//! window of samples per partition, judges them ([`crate::health`]) and
//! publishes an [`Overview`] after every change.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use tenure_core::TopicPartition;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::AdminError;
use crate::health::{evaluate, Sample, Status};
use crate::kafka::{KafkaClient, LogOffsets, LogRead, LogReader};
use crate::overview::{
    CorruptEntry, GroupHealth, MemberHealth, Overview, PartitionHealth, TimelineEntry, TimelineKind,
};
use crate::records::GroupRecords;
use crate::selection::group_topics;
use crate::store::{GroupAdmin, StoreChange};

/// Makes a connection to the store: called at the start and after every
/// lost watch (an expired session is terminal for a ZooKeeper client).
pub type Connector = Box<
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<Box<dyn GroupAdmin>, AdminError>> + Send>>
        + Send
        + Sync,
>;

/// Which groups a [`Monitor`] watches.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GroupFilter {
    /// Every group in the store, as groups appear and disappear.
    All,
    /// These groups (a named group without records is shown as ERROR).
    Named(BTreeSet<String>),
}

impl GroupFilter {
    fn selects(&self, group: &str) -> bool {
        match self {
            GroupFilter::All => true,
            GroupFilter::Named(names) => names.contains(group),
        }
    }
}

/// How a [`Monitor`] watches.
#[derive(Clone, Debug)]
pub struct MonitorConfig {
    groups: GroupFilter,
    kafka_interval: Duration,
    window: usize,
    unowned_after: Duration,
    settle: Duration,
    timeline: usize,
    reconnect: Duration,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        MonitorConfig {
            groups: GroupFilter::All,
            kafka_interval: Duration::from_secs(10),
            window: 10,
            unowned_after: Duration::from_secs(30),
            settle: Duration::from_millis(200),
            timeline: 500,
            reconnect: Duration::from_secs(1),
        }
    }
}

impl MonitorConfig {
    /// Every group in the store, a refresh from Kafka every 10 s, a window
    /// of 10 samples, partitions flagged after 30 s unowned.
    pub fn new() -> MonitorConfig {
        MonitorConfig::default()
    }

    /// Which groups to watch (default: all).
    pub fn with_groups(mut self, groups: GroupFilter) -> Self {
        self.groups = groups;
        self
    }

    /// How often log offsets are read from Kafka and each partition
    /// sampled (default 10 s; at least 100 ms). A window spans this times
    /// [`MonitorConfig::with_window`].
    pub fn with_kafka_interval(mut self, interval: Duration) -> Self {
        self.kafka_interval = interval.max(Duration::from_millis(100));
        self
    }

    /// How many samples a partition is judged on (default 10, Burrow's;
    /// at least 2).
    pub fn with_window(mut self, samples: usize) -> Self {
        self.window = samples.max(2);
        self
    }

    /// After how long unowned a partition is listed in
    /// [`GroupHealth::unowned_too_long`] (default 30 s: set it to the
    /// members' session timeout).
    pub fn with_unowned_after(mut self, after: Duration) -> Self {
        self.unowned_after = after;
        self
    }

    /// How long the changes of a group gather before it is read again
    /// (default 200 ms): a burst of commits costs one read.
    pub fn with_settle(mut self, settle: Duration) -> Self {
        self.settle = settle;
        self
    }

    /// How many timeline entries a group keeps (default 500).
    pub fn with_timeline(mut self, entries: usize) -> Self {
        self.timeline = entries;
        self
    }

    /// How long to wait before connecting again after the store was lost
    /// (default 1 s).
    pub fn with_reconnect(mut self, wait: Duration) -> Self {
        self.reconnect = wait;
        self
    }

    /// The groups watched.
    pub fn groups(&self) -> &GroupFilter {
        &self.groups
    }

    /// How often Kafka is read.
    pub fn kafka_interval(&self) -> Duration {
        self.kafka_interval
    }

    /// The samples per window.
    pub fn window(&self) -> usize {
        self.window
    }
}

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
        let state = State::new(config);
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

/// What the monitor knows of one group.
#[derive(Default)]
struct GroupState {
    /// The records as last read; `None` until read.
    records: Option<GroupRecords>,
    /// Why the group could not be read last time.
    read_error: Option<String>,
    windows: BTreeMap<TopicPartition, VecDeque<Sample>>,
    unowned_since: BTreeMap<TopicPartition, u64>,
    /// The last member that owned each partition (kept after a release,
    /// to tell a handoff from a first claim).
    last_owner: BTreeMap<TopicPartition, String>,
    timeline: VecDeque<TimelineEntry>,
}

struct State {
    config: MonitorConfig,
    store: String,
    store_error: Option<String>,
    kafka_error: Option<String>,
    groups: BTreeMap<String, GroupState>,
    /// The last Kafka refresh.
    logs: LogRead,
    /// Whether every group was read once: a group found after that is new,
    /// and what its first read shows (joins, claims) happened meanwhile.
    started: bool,
    /// Each group's judgement as last published: a change to one group
    /// judges that group again, not all of them (a refresh from Kafka, or
    /// the store lost or found, judges all).
    judged: BTreeMap<String, Arc<GroupHealth>>,
    /// The groups to judge again before the next overview.
    stale: BTreeSet<String>,
}

async fn run(
    connect: Connector,
    mut reader: LogReader,
    mut state: State,
    publish: watch::Sender<Arc<Overview>>,
) {
    let mut kafka_tick = tokio::time::interval(state.config.kafka_interval);
    kafka_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let lost = watch_store(&connect, &mut reader, &mut state, &publish, &mut kafka_tick).await;
        state.lost_store(lost);
        state.publish(&publish);
        wait_reconnect(&mut state, &mut reader, &mut kafka_tick, &publish).await;
    }
}

/// Connects, watches and reads the store, and follows its changes and
/// Kafka's logs until the store is lost; returns why.
async fn watch_store(
    connect: &Connector,
    reader: &mut LogReader,
    state: &mut State,
    publish: &watch::Sender<Arc<Overview>>,
    kafka_tick: &mut tokio::time::Interval,
) -> String {
    let admin = match connect().await {
        Ok(admin) => admin,
        Err(error) => return error.to_string(),
    };
    state.store = admin.store();
    let mut changes = match admin.watch().await {
        Ok(changes) => changes,
        Err(error) => return error.to_string(),
    };
    // The watch is set before everything is read: no change between the
    // read and the watch can be missed.
    if let Err(error) = state.read_all(admin.as_ref()).await {
        return error.to_string();
    }
    state.publish(publish);

    let mut dirty: BTreeSet<String> = BTreeSet::new();
    let mut resync = false;
    let mut settle_at: Option<Instant> = None;
    loop {
        tokio::select! {
            change = changes.next() => match change {
                Some(Ok(StoreChange::Group(group))) => {
                    if state.config.groups.selects(&group) {
                        dirty.insert(group);
                        settle_at.get_or_insert_with(|| Instant::now() + state.config.settle);
                    }
                }
                Some(Ok(StoreChange::Disconnected)) => {
                    // Stale until the client is back (then a Resync) or its
                    // session ends (then the stream fails).
                    state.lost_store(format!(
                        "the connection to {} was lost; reconnecting",
                        state.store
                    ));
                    state.publish(publish);
                }
                Some(Ok(StoreChange::Resync)) => {
                    resync = true;
                    settle_at.get_or_insert_with(|| Instant::now() + state.config.settle);
                }
                Some(Err(error)) => return error.to_string(),
                None => return "the store's watch ended".to_owned(),
            },
            () = sleep_until(settle_at), if settle_at.is_some() => {
                settle_at = None;
                let result = if std::mem::take(&mut resync) {
                    dirty.clear();
                    state.read_all(admin.as_ref()).await
                } else {
                    state.read_groups(admin.as_ref(), std::mem::take(&mut dirty)).await
                };
                if let Err(error) = result {
                    return error.to_string();
                }
                state.publish(publish);
            }
            _ = kafka_tick.tick() => {
                state.refresh_kafka(reader).await;
                state.publish(publish);
            }
        }
    }
}

/// Waits before connecting again, refreshing from Kafka meanwhile (the
/// logs keep growing while the store is away).
async fn wait_reconnect(
    state: &mut State,
    reader: &mut LogReader,
    kafka_tick: &mut tokio::time::Interval,
    publish: &watch::Sender<Arc<Overview>>,
) {
    let until = Instant::now() + state.config.reconnect;
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(until) => return,
            _ = kafka_tick.tick() => {
                state.refresh_kafka(reader).await;
                state.publish(publish);
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

impl State {
    fn new(config: MonitorConfig) -> State {
        let mut groups = BTreeMap::new();
        if let GroupFilter::Named(names) = &config.groups {
            for name in names {
                groups.insert(name.clone(), GroupState::default());
            }
        }
        State {
            config,
            store: String::new(),
            store_error: None,
            kafka_error: None,
            groups,
            logs: LogRead::default(),
            started: false,
            judged: BTreeMap::new(),
            stale: BTreeSet::new(),
        }
    }

    fn lost_store(&mut self, error: String) {
        tracing::warn!(store = %self.store, %error, "the store cannot be watched; connecting again");
        self.store_error = Some(error);
        self.all_stale();
    }

    /// Every group is to be judged again.
    fn all_stale(&mut self) {
        self.stale.extend(self.groups.keys().cloned());
    }

    /// Reads every selected group (and, watching all, finds the groups).
    async fn read_all(&mut self, admin: &dyn GroupAdmin) -> Result<(), AdminError> {
        let names: BTreeSet<String> = match &self.config.groups {
            GroupFilter::All => {
                let found: BTreeSet<String> = admin.groups().await?.into_iter().collect();
                self.groups.retain(|name, _| found.contains(name));
                found
            }
            GroupFilter::Named(names) => names.clone(),
        };
        self.read_groups(admin, names).await?;
        self.started = true;
        if self.store_error.take().is_some() {
            self.all_stale();
        }
        Ok(())
    }

    /// Reads `names` again and notes what changed.
    async fn read_groups(
        &mut self,
        admin: &dyn GroupAdmin,
        names: BTreeSet<String>,
    ) -> Result<(), AdminError> {
        let now = now_ms();
        for name in names {
            self.stale.insert(name.clone());
            match admin.records(&name).await {
                Ok(records) => {
                    let started = self.started;
                    let group = self.groups.entry(name).or_insert_with(|| GroupState {
                        // New since the start: its first read is news.
                        records: started.then(GroupRecords::default),
                        ..GroupState::default()
                    });
                    group.read_error = None;
                    group.update(records, now, self.config.timeline);
                }
                Err(AdminError::UnknownGroup { .. }) => match self.config.groups {
                    GroupFilter::All => {
                        self.groups.remove(&name);
                    }
                    _ => {
                        let group = self.groups.entry(name).or_default();
                        group.update(GroupRecords::default(), now, self.config.timeline);
                        group.read_error = Some(format!("no records in {}", admin.store()));
                    }
                },
                Err(error @ (AdminError::Unreachable { .. } | AdminError::Denied { .. })) => {
                    return Err(error)
                }
                Err(error) => {
                    self.groups.entry(name).or_default().read_error = Some(error.to_string());
                }
            }
        }
        Ok(())
    }

    /// Reads the logs of every watched topic and samples every partition.
    async fn refresh_kafka(&mut self, reader: &mut LogReader) {
        let topics: BTreeSet<String> = self
            .groups
            .values()
            .filter_map(|g| g.records.as_ref())
            .flat_map(group_topics)
            .collect();
        let read = reader.read(&topics).await;
        self.kafka_error = read
            .topic_errors
            .iter()
            .next()
            .map(|(topic, error)| format!("topic {topic}: {error}"))
            .or_else(|| {
                read.partition_errors
                    .iter()
                    .next()
                    .map(|(partition, error)| format!("partition {partition}: {error}"))
            });
        self.logs = read;
        let now = now_ms();
        let window = self.config.window;
        for group in self.groups.values_mut() {
            group.sample(&self.logs, now, window);
        }
        self.all_stale();
    }

    /// Publishes a new overview.
    fn publish(&mut self, publish: &watch::Sender<Arc<Overview>>) {
        publish.send_replace(Arc::new(self.overview()));
    }

    /// The overview to publish: the stale groups judged again, the others
    /// as they were.
    fn overview(&mut self) -> Overview {
        let now = now_ms();
        let window_span = self.config.kafka_interval * self.config.window as u32;
        let groups = &self.groups;
        self.judged.retain(|name, _| groups.contains_key(name));
        for name in std::mem::take(&mut self.stale) {
            let Some(group) = self.groups.get(&name) else {
                continue;
            };
            let health = group.health(
                &name,
                &self.logs,
                self.store_error.as_deref(),
                now,
                millis_of(window_span),
                millis_of(self.config.unowned_after),
            );
            self.judged.insert(name, Arc::new(health));
        }
        Overview {
            store: self.store.clone(),
            store_error: self.store_error.clone(),
            kafka_error: self.kafka_error.clone(),
            updated_ms: now,
            kafka_interval_ms: millis_of(self.config.kafka_interval),
            window: self.config.window,
            groups: self.judged.values().cloned().collect(),
        }
    }
}

impl GroupState {
    /// Takes the records just read, noting joins, leaves, claims, releases
    /// and handoffs against the last read (none on the first).
    fn update(&mut self, records: GroupRecords, now: u64, bound: usize) {
        let old = self.records.take();
        if let Some(old) = &old {
            let old_members: BTreeSet<&str> = old.members.iter().map(|m| m.id.as_str()).collect();
            let new_members: BTreeSet<&str> =
                records.members.iter().map(|m| m.id.as_str()).collect();
            for joined in new_members.difference(&old_members) {
                self.note(
                    bound,
                    entry(now, TimelineKind::Joined, joined, None, None, None),
                );
            }
            for left in old_members.difference(&new_members) {
                self.note(
                    bound,
                    entry(now, TimelineKind::Left, left, None, None, None),
                );
            }
            for (partition, owner) in &old.owners {
                if !records.owners.contains_key(partition) {
                    let name = Some(partition.to_string());
                    self.note(
                        bound,
                        entry(now, TimelineKind::Released, &owner.member, name, None, None),
                    );
                }
            }
            for (partition, owner) in &records.owners {
                let before = old.owners.get(partition);
                if before.is_some_and(|b| b.token == owner.token) {
                    continue;
                }
                let previous = before
                    .map(|b| b.member.clone())
                    .or_else(|| self.last_owner.get(partition).cloned());
                let name = Some(partition.to_string());
                let token = Some(owner.token.0);
                let noted = match previous {
                    Some(from) if from != owner.member => entry(
                        now,
                        TimelineKind::Handoff,
                        &owner.member,
                        name,
                        Some(from),
                        token,
                    ),
                    _ => entry(now, TimelineKind::Claimed, &owner.member, name, None, token),
                };
                self.note(bound, noted);
            }
        }
        for (partition, owner) in &records.owners {
            self.last_owner
                .insert(partition.clone(), owner.member.clone());
            self.unowned_since.remove(partition);
        }
        for partition in records.offsets.keys() {
            if !records.owners.contains_key(partition) {
                self.unowned_since.entry(partition.clone()).or_insert(now);
            }
        }
        self.records = Some(records);
    }

    fn note(&mut self, bound: usize, entry: TimelineEntry) {
        self.timeline.push_back(entry);
        while self.timeline.len() > bound {
            self.timeline.pop_front();
        }
    }

    /// The partitions of this group: those with records, and every
    /// partition Kafka listed of its topics.
    fn partitions(&self, logs: &LogRead) -> BTreeSet<TopicPartition> {
        let Some(records) = &self.records else {
            return BTreeSet::new();
        };
        let topics = group_topics(records);
        let mut partitions = records.partitions();
        partitions.extend(
            logs.logs
                .keys()
                .chain(logs.partition_errors.keys())
                .filter(|p| topics.contains(&*p.topic))
                .cloned(),
        );
        partitions
    }

    fn sample(&mut self, logs: &LogRead, now: u64, window: usize) {
        let partitions = self.partitions(logs);
        let Some(records) = &self.records else {
            return;
        };
        self.windows.retain(|p, _| partitions.contains(p));
        for partition in partitions {
            let owned = records.owners.contains_key(&partition);
            if !owned {
                self.unowned_since.entry(partition.clone()).or_insert(now);
            }
            let Some(log) = logs.logs.get(&partition) else {
                continue;
            };
            let samples = self.windows.entry(partition.clone()).or_default();
            samples.push_back(Sample {
                at_ms: now,
                committed: records.offsets.get(&partition).copied(),
                log_start: log.start,
                log_end: log.end,
                owned,
            });
            while samples.len() > window {
                samples.pop_front();
            }
        }
    }

    fn health(
        &self,
        name: &str,
        logs: &LogRead,
        store_error: Option<&str>,
        now: u64,
        window_span_ms: u64,
        unowned_after_ms: u64,
    ) -> GroupHealth {
        let empty = GroupRecords::default();
        let records = self.records.as_ref().unwrap_or(&empty);
        let corrupt_at: BTreeMap<TopicPartition, &str> = records
            .corrupt
            .iter()
            .filter_map(|c| Some((partition_of_path(&c.path)?, c.detail.as_str())))
            .collect();
        let mut partitions = Vec::new();
        for partition in self.partitions(logs) {
            let owner = records.owners.get(&partition);
            let committed = records.offsets.get(&partition).copied();
            let log: Option<&LogOffsets> = logs.logs.get(&partition);
            let error = corrupt_at
                .get(&partition)
                .map(|detail| format!("corrupt record: {detail}"))
                .or_else(|| {
                    logs.partition_errors
                        .get(&partition)
                        .or_else(|| logs.topic_errors.get(&*partition.topic))
                        .map(|e| format!("Kafka: {e}"))
                });
            let window: Vec<Sample> = self
                .windows
                .get(&partition)
                .map(|w| w.iter().copied().collect())
                .unwrap_or_default();
            let judged = evaluate(&window, error.as_deref());
            let lag = log.map(|log| log.lag(committed));
            partitions.push(PartitionHealth {
                topic: partition.topic.to_string(),
                partition: partition.partition,
                owner: owner.map(|o| o.member.clone()),
                token: owner.map(|o| o.token.0),
                committed,
                log_start: log.map(|l| l.start),
                log_end: log.map(|l| l.end),
                lag,
                status: judged.status,
                reason: judged.reason,
                unowned_since_ms: if owner.is_none() {
                    self.unowned_since.get(&partition).copied()
                } else {
                    None
                },
                window,
            });
        }
        let unowned = partitions.iter().filter(|p| p.owner.is_none()).count();
        let unowned_too_long = partitions
            .iter()
            .filter(|p| {
                p.unowned_since_ms
                    .is_some_and(|since| now.saturating_sub(since) >= unowned_after_ms)
            })
            .map(|p| format!("{}/{}", p.topic, p.partition))
            .collect();
        let handoffs_in_window = self
            .timeline
            .iter()
            .filter(|e| e.kind == TimelineKind::Handoff && e.at_ms + window_span_ms >= now)
            .count();
        let lags: Vec<u64> = partitions.iter().filter_map(|p| p.lag).collect();
        let worst = partitions.iter().max_by_key(|p| p.status);
        let (status, reason) = if let Some(error) = store_error {
            (Status::Error, format!("the store cannot be read: {error}"))
        } else if let Some(error) = &self.read_error {
            (Status::Error, error.clone())
        } else {
            match worst {
                Some(p) if p.status != Status::Ok => (
                    p.status,
                    format!("partition {}/{}: {}", p.topic, p.partition, p.reason),
                ),
                Some(_) => (Status::Ok, "every partition OK".to_owned()),
                None => (Status::Ok, "no partition yet".to_owned()),
            }
        };
        let members = records
            .members
            .iter()
            .map(|m| MemberHealth {
                id: m.id.clone(),
                host: m.host.clone(),
                strategy: m.strategy.clone(),
                subscription: subscription_text(&m.subscription),
                since_ms: m
                    .since
                    .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok().map(millis_of)),
                partitions: partitions
                    .iter()
                    .filter(|p| p.owner.as_deref() == Some(m.id.as_str()))
                    .count(),
            })
            .collect::<Vec<_>>();
        GroupHealth {
            group: name.to_owned(),
            status,
            reason,
            mismatches: mismatches(&members),
            members,
            unowned,
            unowned_too_long,
            handoffs_in_window,
            total_lag: (!lags.is_empty()).then(|| lags.iter().sum()),
            max_lag: lags.iter().copied().max(),
            corrupt: records
                .corrupt
                .iter()
                .map(|c| CorruptEntry {
                    path: c.path.clone(),
                    detail: c.detail.clone(),
                })
                .collect(),
            timeline: self.timeline.iter().cloned().collect(),
            partitions,
        }
    }
}

fn entry(
    at_ms: u64,
    kind: TimelineKind,
    member: &str,
    partition: Option<String>,
    from: Option<String>,
    token: Option<u64>,
) -> TimelineEntry {
    TimelineEntry {
        at_ms,
        kind,
        member: member.to_owned(),
        partition,
        from,
        token,
    }
}

/// What members disagree on: strategies and subscriptions, each with the
/// members that hold it.
fn mismatches(members: &[MemberHealth]) -> Vec<String> {
    let mut found = Vec::new();
    for (what, key) in [
        (
            "strategies",
            (|m: &MemberHealth| m.strategy.clone()) as fn(&MemberHealth) -> String,
        ),
        ("subscriptions", |m: &MemberHealth| m.subscription.clone()),
    ] {
        let mut by: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        for member in members {
            by.entry(key(member)).or_default().push(&member.id);
        }
        if by.len() > 1 {
            let parts: Vec<String> = by
                .iter()
                .map(|(value, ids)| format!("{value} ({})", ids.join(", ")))
                .collect();
            found.push(format!(
                "members use different {what}: {}",
                parts.join("; ")
            ));
        }
    }
    found
}

fn subscription_text(subscription: &tenure_core::Subscription) -> String {
    match subscription.named_topics() {
        Some(topics) => topics.iter().cloned().collect::<Vec<_>>().join(","),
        None => format!(
            "{} {}",
            subscription.record_form(),
            subscription.record_keys().concat()
        ),
    }
}

/// The partition an offset or owner record's path or key names: the two
/// elements after `/offsets/` or `/owners/`.
fn partition_of_path(path: &str) -> Option<TopicPartition> {
    let rest = path
        .rsplit_once("/offsets/")
        .or_else(|| path.rsplit_once("/owners/"))?
        .1;
    let (topic, number) = rest.split_once('/')?;
    Some(TopicPartition::new(topic, number.parse().ok()?))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, millis_of)
}

fn millis_of(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::OwnerRecord;
    use tenure_core::FencingToken;

    fn owned(records: &mut GroupRecords, partition: u32, member: &str, token: u64) {
        records.owners.insert(
            TopicPartition::new("t", partition),
            OwnerRecord {
                member: member.to_owned(),
                token: FencingToken(token),
            },
        );
    }

    #[test]
    fn the_timeline_tells_claims_releases_and_handoffs_apart() {
        let mut group = GroupState::default();
        let mut records = GroupRecords::default();
        owned(&mut records, 0, "a", 1);
        group.update(records.clone(), 1, 100);
        assert!(group.timeline.is_empty(), "the first read is no event");

        records.owners.clear();
        group.update(records.clone(), 2, 100);
        owned(&mut records, 0, "b", 5);
        owned(&mut records, 1, "b", 6);
        group.update(records.clone(), 3, 100);
        let kinds: Vec<(TimelineKind, Option<String>)> = group
            .timeline
            .iter()
            .map(|e| (e.kind, e.from.clone()))
            .collect();
        assert_eq!(
            kinds,
            [
                (TimelineKind::Released, None),
                (TimelineKind::Handoff, Some("a".to_owned())),
                (TimelineKind::Claimed, None),
            ]
        );
    }

    #[test]
    fn the_timeline_keeps_its_bound() {
        let mut group = GroupState::default();
        let mut records = GroupRecords::default();
        group.update(records.clone(), 0, 3);
        for token in 1..10 {
            owned(
                &mut records,
                0,
                if token % 2 == 0 { "a" } else { "b" },
                token,
            );
            group.update(records.clone(), token, 3);
        }
        assert_eq!(group.timeline.len(), 3);
        assert_eq!(group.timeline.back().map(|e| e.at_ms), Some(9));
    }

    #[test]
    fn record_paths_name_their_partition() {
        assert_eq!(
            partition_of_path("/consumers/g/offsets/orders/3"),
            Some(TopicPartition::new("orders", 3))
        );
        assert_eq!(
            partition_of_path("/tenure/g/owners/orders/0"),
            Some(TopicPartition::new("orders", 0))
        );
        assert_eq!(partition_of_path("/tenure/g/members/m"), None);
    }
}
