//! What a [`Monitor`](super::Monitor) knows of the groups it watches, as
//! state: the records as last read, windows of samples per partition, the
//! timeline of joins, claims and handoffs, and the judgement of each group
//! ([`crate::health`]). It does no I/O and reads no clock: the monitor's
//! task reads the store, Kafka and the time, and hands them in.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tenure_core::TopicPartition;

use super::config::{GroupFilter, MonitorConfig};
use crate::error::AdminError;
use crate::health::{evaluate, Sample, Status};
use crate::kafka::{LogOffsets, LogRead};
use crate::overview::{
    CorruptEntry, GroupHealth, MemberHealth, Overview, PartitionHealth, TimelineEntry, TimelineKind,
};
use crate::records::GroupRecords;
use crate::selection::group_topics;

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

/// The groups a monitor watches, and what it judged of them.
pub(crate) struct Watched {
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

impl Watched {
    /// Nothing read yet, watching as `config` says.
    pub(crate) fn new(config: MonitorConfig) -> Watched {
        let mut groups = BTreeMap::new();
        if let GroupFilter::Named(names) = &config.groups {
            for name in names {
                groups.insert(name.clone(), GroupState::default());
            }
        }
        Watched {
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

    /// How the monitor watches.
    pub(crate) fn config(&self) -> &MonitorConfig {
        &self.config
    }

    /// The store is `store` (as it names itself), from now on.
    pub(crate) fn found_store(&mut self, store: String) {
        self.store = store;
    }

    /// The store, as it names itself.
    pub(crate) fn store(&self) -> &str {
        &self.store
    }

    /// The store cannot be read or watched, because of `error`.
    pub(crate) fn lost_store(&mut self, error: String) {
        tracing::warn!(store = %self.store, %error, "the store cannot be watched; connecting again");
        self.store_error = Some(error);
        self.all_stale();
    }

    /// Every group is to be judged again.
    fn all_stale(&mut self) {
        self.stale.extend(self.groups.keys().cloned());
    }

    /// The groups a read of every group reads: the named ones, or, watching
    /// all, those `found` in the store (the others are forgotten).
    pub(crate) fn groups_to_read(&mut self, found: Option<BTreeSet<String>>) -> BTreeSet<String> {
        match (&self.config.groups, found) {
            (GroupFilter::All, Some(found)) => {
                self.groups.retain(|name, _| found.contains(name));
                found
            }
            (GroupFilter::All, None) => self.groups.keys().cloned().collect(),
            (GroupFilter::Named(names), _) => names.clone(),
        }
    }

    /// Every group was read: what is found from now on is new, and the
    /// store is back if it was lost.
    pub(crate) fn read_all(&mut self) {
        self.started = true;
        if self.store_error.take().is_some() {
            self.all_stale();
        }
    }

    /// What a read of group `name` at `now` (ms since the epoch) found,
    /// noting what changed. A store that cannot be reached or refused the
    /// read fails it: the read stops there.
    pub(crate) fn group_read(
        &mut self,
        name: String,
        read: Result<GroupRecords, AdminError>,
        now: u64,
    ) -> Result<(), AdminError> {
        self.stale.insert(name.clone());
        match read {
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
                    group.read_error = Some(format!("no records in {}", self.store));
                }
            },
            Err(error @ (AdminError::Unreachable { .. } | AdminError::Denied { .. })) => {
                return Err(error)
            }
            Err(error) => {
                self.groups.entry(name).or_default().read_error = Some(error.to_string());
            }
        }
        Ok(())
    }

    /// The topics of every group read.
    pub(crate) fn topics(&self) -> BTreeSet<String> {
        self.groups
            .values()
            .filter_map(|g| g.records.as_ref())
            .flat_map(group_topics)
            .collect()
    }

    /// What a read of the topics' logs at `now` found: every partition is
    /// sampled.
    pub(crate) fn logs_read(&mut self, read: LogRead, now: u64) {
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
        let window = self.config.window;
        for group in self.groups.values_mut() {
            group.sample(&self.logs, now, window);
        }
        self.all_stale();
    }

    /// The overview at `now`: the stale groups judged again, the others
    /// as they were.
    pub(crate) fn overview(&mut self, now: u64) -> Overview {
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

pub(crate) fn millis_of(duration: Duration) -> u64 {
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
    fn a_partition_is_judged_unowned_too_long_by_the_time_handed_in() {
        let groups = GroupFilter::Named(["g".to_owned()].into());
        let config = MonitorConfig::new()
            .with_groups(groups)
            .with_unowned_after(Duration::from_secs(5));
        let mut watched = Watched::new(config);
        // The partition's committed offset keeps it in the group after
        // its owner lets go.
        let mut released = GroupRecords::default();
        released.offsets.insert(TopicPartition::new("t", 0), 10);
        let mut records = released.clone();
        owned(&mut records, 0, "a", 1);
        let read = watched.groups_to_read(None);
        assert_eq!(read, ["g".to_owned()].into());
        watched
            .group_read("g".to_owned(), Ok(records), 1_000)
            .expect("read");
        watched.read_all();
        let judged = |overview: &Overview| {
            let group = &overview.groups[0];
            (group.unowned, group.unowned_too_long.len())
        };
        let overview = watched.overview(1_000);
        assert_eq!(overview.updated_ms, 1_000, "the time handed in");
        assert_eq!(judged(&overview), (0, 0));

        // Released at 2 s; judged at 3 s, then again at 8 s.
        watched
            .group_read("g".to_owned(), Ok(released), 2_000)
            .expect("read");
        assert_eq!(judged(&watched.overview(3_000)), (1, 0));
        // Unchanged groups are judged again when Kafka's logs are read.
        watched.logs_read(LogRead::default(), 8_000);
        assert_eq!(judged(&watched.overview(8_000)), (1, 1), "5 s unowned");
    }

    #[test]
    fn an_unreachable_store_stops_a_read_and_an_unknown_named_group_is_an_error() {
        let groups = GroupFilter::Named(["g".to_owned()].into());
        let mut watched = Watched::new(MonitorConfig::new().with_groups(groups));
        watched.found_store("the store".to_owned());
        let unknown = AdminError::UnknownGroup {
            group: "g".to_owned(),
            store: "the store".to_owned(),
        };
        watched
            .group_read("g".to_owned(), Err(unknown), 1)
            .expect("an unknown group is no reason to stop");
        let overview = watched.overview(1);
        assert!(
            overview.groups[0]
                .reason
                .contains("no records in the store"),
            "{}",
            overview.groups[0].reason
        );
        let unreachable = AdminError::Unreachable {
            store: "the store".to_owned(),
            detail: "down".to_owned(),
        };
        assert!(watched
            .group_read("g".to_owned(), Err(unreachable), 2)
            .is_err());
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
