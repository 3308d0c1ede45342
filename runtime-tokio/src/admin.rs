//! A group seen from outside: who is in it, who owns which partition, how
//! far behind each partition is, and moving its committed offsets. The
//! library side of the `tenure` command (`groups`, `describe`,
//! `reset-offsets`).
//!
//! A store answers through [`GroupAdmin`] (the ZooKeeper and etcd backends
//! and [`crate::MemoryStore`] implement it); Kafka answers for log offsets
//! through [`log_offsets`]. [`describe`] joins the two,
//! [`plan_reset`] and [`apply_reset`] move offsets.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use rskafka::client::partition::{OffsetAt, PartitionClient, UnknownTopicHandling};
use rskafka::client::Client;

/// The Kafka client [`describe`] and [`plan_reset`] take (from
/// [`crate::kafka::connect`]).
pub use rskafka::client::Client as KafkaClient;
use tenure_core::records::{decode_registration_record, parse_offset};
use tenure_core::{FencingToken, NameError, Offset, StoreError, Subscription, TopicPartition};

use crate::kafka::KafkaError;

/// How long one Kafka request of an admin operation may take: the client
/// retries by itself, so an unreachable leader would otherwise hang the tool.
const KAFKA_REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// Reads and writes the records of groups in one store, for operators'
/// tools. Reads are snapshots: a group may change while it is described.
#[async_trait]
pub trait GroupAdmin: Send + Sync {
    /// How the store is named in messages ("ZooKeeper at 127.0.0.1:2181").
    fn store(&self) -> String;

    /// The names of the groups with records in the store, sorted.
    async fn groups(&self) -> Result<Vec<String>, AdminError>;

    /// Every record of `group`. A group with no records at all is
    /// [`AdminError::UnknownGroup`]; records that cannot be read are listed
    /// in [`GroupRecords::corrupt`] and the rest is still returned.
    async fn records(&self, group: &str) -> Result<GroupRecords, AdminError>;

    /// Writes committed offsets of `group` (creating the records that do not
    /// exist). With [`WriteGuard::NoLiveMembers`] the write is refused with
    /// [`AdminError::GroupActive`] if a member is registered: in the same
    /// transaction where the store can (etcd), by a look just before
    /// otherwise (ZooKeeper: a multi-op cannot check a node's children).
    async fn write_offsets(
        &self,
        group: &str,
        offsets: &BTreeMap<TopicPartition, Offset>,
        guard: WriteGuard,
    ) -> Result<(), AdminError>;
}

/// What must hold for [`GroupAdmin::write_offsets`] to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteGuard {
    /// Nothing: write even under live members (their next commits may
    /// overwrite what is written).
    None,
    /// The group has no registered member.
    NoLiveMembers,
}

/// What a store holds of one group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupRecords {
    /// The registered (live) members, sorted by id.
    pub members: Vec<MemberRecord>,
    /// The owner record of each owned partition.
    pub owners: BTreeMap<TopicPartition, OwnerRecord>,
    /// The committed offset (next offset to consume) of each partition that
    /// has one.
    pub offsets: BTreeMap<TopicPartition, Offset>,
    /// Records that could not be read.
    pub corrupt: Vec<CorruptRecord>,
}

impl GroupRecords {
    /// Adds the registration of member `id`, read at `path`. `registered`
    /// is when the store says it was made (ZooKeeper: the node's creation
    /// time, the server's clock); without it, the registration's own
    /// timestamp. One that cannot be read is noted as corrupt.
    pub fn add_member(
        &mut self,
        path: &str,
        id: &str,
        data: &[u8],
        registered: Option<SystemTime>,
    ) {
        match decode_registration_record(id, data) {
            Ok(registration) => self.members.push(MemberRecord {
                id: id.to_owned(),
                host: registration.host,
                strategy: registration.info.strategy,
                subscription: registration.info.subscription,
                since: registered.or_else(|| {
                    registration
                        .timestamp_secs
                        .map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s))
                }),
            }),
            Err(detail) => self.add_corrupt(path, detail),
        }
    }

    /// Adds the owner record of `partition`, read at `path`, whose claim is
    /// `token`. One that cannot be read is noted as corrupt.
    pub fn add_owner(
        &mut self,
        partition: TopicPartition,
        path: &str,
        data: Vec<u8>,
        token: FencingToken,
    ) {
        match String::from_utf8(data) {
            Ok(member) => {
                self.owners.insert(partition, OwnerRecord { member, token });
            }
            Err(_) => self.add_corrupt(path, "the owner's id is not UTF-8"),
        }
    }

    /// Adds the committed offset of `partition`, read at `path`. One that
    /// cannot be read is noted as corrupt.
    pub fn add_offset(&mut self, partition: TopicPartition, path: &str, data: &[u8]) {
        match parse_offset(path, data) {
            Ok(offset) => {
                self.offsets.insert(partition, offset);
            }
            Err(StoreError::Corrupt { detail, .. }) => self.add_corrupt(path, detail),
            Err(other) => self.add_corrupt(path, other.to_string()),
        }
    }

    /// Notes the record at `path` as corrupt, for `detail`.
    pub fn add_corrupt(&mut self, path: &str, detail: impl Into<String>) {
        self.corrupt.push(CorruptRecord {
            path: path.to_owned(),
            detail: detail.into(),
        });
    }
}

/// A member's registration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberRecord {
    /// The member's id.
    pub id: String,
    /// The host it runs on, when its registration says (tenure's do;
    /// Kafka 0.8's and the Go package's do not).
    pub host: Option<String>,
    /// Its assignment strategy (`range` for registrations that name none,
    /// as Kafka 0.8's).
    pub strategy: String,
    /// The topics it consumes: named, or a pattern.
    pub subscription: Subscription,
    /// When it registered, when its registration says.
    pub since: Option<SystemTime>,
}

/// A partition's owner record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRecord {
    /// The owning member's id, as the record holds it.
    pub member: String,
    /// The claim's fencing token (ZooKeeper: czxid; etcd: create_revision).
    pub token: FencingToken,
}

/// A record that could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorruptRecord {
    /// Where it is (znode path or etcd key).
    pub path: String,
    /// What is wrong with it.
    pub detail: String,
}

impl fmt::Display for CorruptRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "corrupt record {}: {}", self.path, self.detail)
    }
}

/// Why an operation on a group failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The store does not answer.
    #[error("cannot reach {store}: {detail}")]
    Unreachable {
        /// Which store.
        store: String,
        /// What went wrong.
        detail: String,
    },
    /// The store's address is unusable.
    #[error("invalid address for {store}: {detail}")]
    BadAddress {
        /// Which store.
        store: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The store has no record of the group.
    #[error("group {group:?} has no records in {store} (`tenure groups` lists the groups there)")]
    UnknownGroup {
        /// The group.
        group: String,
        /// Which store.
        store: String,
    },
    /// A group or topic name is not usable.
    #[error(transparent)]
    Name(#[from] NameError),
    /// A record in the way of the operation cannot be read.
    #[error("{0}")]
    Corrupt(CorruptRecord),
    /// Offsets cannot be moved under live members: their next commits would
    /// overwrite the new offsets, or they would consume from the old ones.
    #[error(
        "group {group:?} has {} live member(s) ({}): stop them first, or pass --force",
        members.len(),
        members.join(", ")
    )]
    GroupActive {
        /// The group.
        group: String,
        /// Its live members.
        members: Vec<String>,
    },
    /// Kafka cannot be reached.
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    /// Kafka does not know the topic.
    #[error("topic {topic:?} does not exist in Kafka")]
    UnknownTopic {
        /// The topic.
        topic: String,
    },
    /// A request to Kafka failed.
    #[error("Kafka request for {what} failed: {detail}")]
    KafkaRequest {
        /// What was asked about (a topic or partition).
        what: String,
        /// What the client said.
        detail: String,
    },
    /// The store refused a request.
    #[error("{store} refused {operation}: {detail}")]
    Store {
        /// Which store.
        store: String,
        /// What was asked.
        operation: String,
        /// What it said.
        detail: String,
    },
}

/// One partition of a described group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionDescription {
    /// The partition.
    pub partition: TopicPartition,
    /// Its owner, if any.
    pub owner: Option<OwnerRecord>,
    /// Its committed offset (the next offset to consume), if any.
    pub committed: Option<Offset>,
    /// The first offset still in the log (without Kafka: unknown).
    pub log_start: Option<Offset>,
    /// The offset the next produced message will get (without Kafka:
    /// unknown).
    pub log_end: Option<Offset>,
    /// How many messages are not committed yet: log end − committed offset
    /// (log end − log start when nothing is committed).
    pub lag: Option<u64>,
}

/// A group as [`describe`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupDescription {
    /// The group.
    pub group: String,
    /// The store described.
    pub store: String,
    /// Its live members.
    pub members: Vec<MemberRecord>,
    /// Every partition of every topic the group consumes or has offsets
    /// for, sorted.
    pub partitions: Vec<PartitionDescription>,
    /// Records that could not be read.
    pub corrupt: Vec<CorruptRecord>,
}

/// Describes `group`: its members, and per partition the owner, fencing
/// token, committed offset and — with a Kafka client — log offsets and lag.
///
/// The partitions are those of every topic a member subscribes to or the
/// group has records for; with Kafka, every partition of those topics,
/// owned or not.
pub async fn describe(
    admin: &dyn GroupAdmin,
    group: &str,
    kafka_client: Option<&Client>,
) -> Result<GroupDescription, AdminError> {
    tenure_core::types::validate_path_element("group", group)?;
    let records = admin.records(group).await?;
    let mut topics: BTreeSet<String> = records
        .members
        .iter()
        .filter_map(|m| m.subscription.named_topics())
        .flatten()
        .cloned()
        .collect();
    topics.extend(records.owners.keys().map(|p| p.topic.to_string()));
    topics.extend(records.offsets.keys().map(|p| p.topic.to_string()));
    let mut partitions: BTreeSet<TopicPartition> = records
        .owners
        .keys()
        .chain(records.offsets.keys())
        .cloned()
        .collect();
    let mut logs: BTreeMap<TopicPartition, LogOffsets> = BTreeMap::new();
    if let Some(client) = kafka_client {
        for topic in &topics {
            match log_offsets(client, topic).await {
                Ok(found) => {
                    for (number, offsets) in found {
                        let partition = TopicPartition::new(topic, number);
                        partitions.insert(partition.clone());
                        logs.insert(partition, offsets);
                    }
                }
                // Offsets of a deleted topic are still worth showing.
                Err(AdminError::UnknownTopic { .. }) => {}
                Err(error) => return Err(error),
            }
        }
    }
    let partitions = partitions
        .into_iter()
        .map(|partition| {
            let log = logs.get(&partition);
            let committed = records.offsets.get(&partition).copied();
            let lag = log.map(|log| {
                let from = committed.unwrap_or(log.start);
                u64::try_from(log.end - from).unwrap_or(0)
            });
            PartitionDescription {
                owner: records.owners.get(&partition).cloned(),
                committed,
                log_start: log.map(|l| l.start),
                log_end: log.map(|l| l.end),
                lag,
                partition,
            }
        })
        .collect();
    Ok(GroupDescription {
        group: group.to_owned(),
        store: admin.store(),
        members: records.members,
        partitions,
        corrupt: records.corrupt,
    })
}

/// Where [`plan_reset`] moves offsets to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetTarget {
    /// The first offset still in each partition's log.
    Earliest,
    /// The end of each partition's log: only new messages are consumed.
    Latest,
    /// This offset in every partition (clamped to the log's bounds).
    Offset(Offset),
    /// The first message at or after this time (milliseconds since the Unix
    /// epoch); the log end where there is none.
    Timestamp(i64),
}

impl fmt::Display for ResetTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResetTarget::Earliest => f.write_str("earliest"),
            ResetTarget::Latest => f.write_str("latest"),
            ResetTarget::Offset(offset) => write!(f, "offset {offset}"),
            ResetTarget::Timestamp(ms) if ms % 1000 == 0 => {
                let time = SystemTime::UNIX_EPOCH + Duration::from_secs((ms / 1000).max(0) as u64);
                write!(f, "time {}", format_rfc3339(time))
            }
            ResetTarget::Timestamp(ms) => write!(f, "time @{ms} (ms since the epoch)"),
        }
    }
}

/// A reset target that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid reset target {given:?}: expected earliest, latest, an offset (0, 42...) or a time \
     (2026-11-30T12:00:00Z, or @<milliseconds since the epoch>)"
)]
pub struct ResetTargetError {
    /// The target as given.
    pub given: String,
}

impl FromStr for ResetTarget {
    type Err = ResetTargetError;

    /// `earliest`, `latest`, a decimal offset, an RFC 3339 time
    /// (`2026-11-30T12:00:00Z`, `2026-11-30T13:00:00.250+01:00`) or
    /// `@<milliseconds since the epoch>`.
    fn from_str(given: &str) -> Result<Self, Self::Err> {
        let error = || ResetTargetError {
            given: given.to_owned(),
        };
        match given {
            "earliest" => Ok(ResetTarget::Earliest),
            "latest" => Ok(ResetTarget::Latest),
            _ if given.starts_with('@') => given[1..]
                .parse()
                .map(ResetTarget::Timestamp)
                .map_err(|_| error()),
            _ if given.bytes().all(|b| b.is_ascii_digit()) => {
                given.parse().map(ResetTarget::Offset).map_err(|_| error())
            }
            _ => parse_rfc3339_millis(given)
                .map(ResetTarget::Timestamp)
                .ok_or_else(error),
        }
    }
}

/// One partition's move.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetChange {
    /// The partition.
    pub partition: TopicPartition,
    /// Its committed offset now.
    pub current: Option<Offset>,
    /// The offset it gets.
    pub new: Offset,
}

/// What [`apply_reset`] will write, computed by [`plan_reset`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResetPlan {
    /// The group.
    pub group: String,
    /// The topic.
    pub topic: String,
    /// Where the offsets go.
    pub target: ResetTarget,
    /// One change per partition of the topic.
    pub changes: Vec<OffsetChange>,
    /// The group's live members when the plan was made.
    pub live_members: Vec<String>,
}

/// Computes where the offsets of `topic` in `group` would move to, from the
/// store's records and the topic's log offsets. Changes nothing.
///
/// With `allow_new_group`, a group with no records yet gets offsets (to
/// start a new group somewhere else than its initial-offset policy says).
pub async fn plan_reset(
    admin: &dyn GroupAdmin,
    kafka_client: &Client,
    group: &str,
    topic: &str,
    target: ResetTarget,
    allow_new_group: bool,
) -> Result<ResetPlan, AdminError> {
    tenure_core::types::validate_path_element("group", group)?;
    tenure_core::types::validate_topic(topic)?;
    let records = match admin.records(group).await {
        Ok(records) => records,
        Err(AdminError::UnknownGroup { .. }) if allow_new_group => GroupRecords::default(),
        Err(error) => return Err(error),
    };
    let logs = log_offsets(kafka_client, topic).await?;
    let mut changes = Vec::with_capacity(logs.len());
    for (number, log) in logs {
        let partition = TopicPartition::new(topic, number);
        let new = match target {
            ResetTarget::Earliest => log.start,
            ResetTarget::Latest => log.end,
            ResetTarget::Offset(offset) => offset.clamp(log.start, log.end),
            ResetTarget::Timestamp(ms) => offset_at_time(kafka_client, &partition, ms)
                .await?
                .unwrap_or(log.end),
        };
        changes.push(OffsetChange {
            current: records.offsets.get(&partition).copied(),
            partition,
            new,
        });
    }
    Ok(ResetPlan {
        group: group.to_owned(),
        topic: topic.to_owned(),
        target,
        changes,
        live_members: records.members.into_iter().map(|m| m.id).collect(),
    })
}

/// Writes a plan's offsets. Refuses while the group has live members (looked
/// up again now, not when the plan was made) unless `force`.
pub async fn apply_reset(
    admin: &dyn GroupAdmin,
    plan: &ResetPlan,
    force: bool,
) -> Result<(), AdminError> {
    let offsets = plan
        .changes
        .iter()
        .map(|change| (change.partition.clone(), change.new))
        .collect();
    let guard = if force {
        WriteGuard::None
    } else {
        WriteGuard::NoLiveMembers
    };
    admin.write_offsets(&plan.group, &offsets, guard).await
}

/// The bounds of one partition's log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogOffsets {
    /// The first offset still in the log.
    pub start: Offset,
    /// The offset the next produced message will get (the high watermark).
    pub end: Offset,
}

/// The log bounds of every partition of `topic`.
pub async fn log_offsets(
    client: &Client,
    topic: &str,
) -> Result<BTreeMap<u32, LogOffsets>, AdminError> {
    let listed = bounded(topic, None, client.list_topics()).await?;
    let Some(found) = listed.into_iter().find(|t| t.name == topic) else {
        return Err(AdminError::UnknownTopic {
            topic: topic.to_owned(),
        });
    };
    let mut lookups = tokio::task::JoinSet::new();
    for &number in &found.partitions {
        let Ok(number) = u32::try_from(number) else {
            continue;
        };
        let partition = TopicPartition::new(topic, number);
        let client = partition_client(client, &partition).await?;
        lookups.spawn(async move {
            let start = bounded(
                &partition.topic,
                Some(&partition),
                client.get_offset(OffsetAt::Earliest),
            )
            .await?;
            let end = bounded(
                &partition.topic,
                Some(&partition),
                client.get_offset(OffsetAt::Latest),
            )
            .await?;
            Ok::<_, AdminError>((number, LogOffsets { start, end }))
        });
    }
    let mut offsets = BTreeMap::new();
    while let Some(joined) = lookups.join_next().await {
        let (number, log) = joined.map_err(|e| AdminError::KafkaRequest {
            what: format!("topic {topic}"),
            detail: format!("offset lookup task failed: {e}"),
        })??;
        offsets.insert(number, log);
    }
    Ok(offsets)
}

/// The offset of the first message of `partition` whose timestamp is at or
/// after `millis` since the epoch; `None` if every message is older.
pub async fn offset_at_time(
    client: &Client,
    partition: &TopicPartition,
    millis: i64,
) -> Result<Option<Offset>, AdminError> {
    let Some(time) = chrono::DateTime::from_timestamp_millis(millis) else {
        return Ok(None);
    };
    let client = partition_client(client, partition).await?;
    let offset = bounded(
        &partition.topic,
        Some(partition),
        client.get_offset(OffsetAt::Timestamp(time)),
    )
    .await?;
    // Kafka answers -1 when no message is that recent.
    Ok((offset >= 0).then_some(offset))
}

async fn partition_client(
    client: &Client,
    partition: &TopicPartition,
) -> Result<PartitionClient, AdminError> {
    bounded(
        &partition.topic,
        Some(partition),
        client.partition_client(
            partition.topic.to_string(),
            partition.partition as i32,
            UnknownTopicHandling::Error,
        ),
    )
    .await
}

/// Runs one Kafka request within [`KAFKA_REQUEST_TIMEOUT`], naming the topic
/// or partition in its error.
async fn bounded<T>(
    topic: &str,
    partition: Option<&TopicPartition>,
    request: impl std::future::Future<Output = Result<T, rskafka::client::error::Error>>,
) -> Result<T, AdminError> {
    let what = partition.map_or_else(|| format!("topic {topic}"), |p| format!("partition {p}"));
    match tokio::time::timeout(KAFKA_REQUEST_TIMEOUT, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(AdminError::KafkaRequest {
            what,
            detail: error.to_string(),
        }),
        Err(_) => Err(AdminError::KafkaRequest {
            what,
            detail: format!("no answer within {KAFKA_REQUEST_TIMEOUT:?}"),
        }),
    }
}

/// Parses an RFC 3339 time (`2026-11-30T12:00:00Z`,
/// `2026-11-30 12:00:00.5+01:00`) into milliseconds since the Unix epoch.
pub fn parse_rfc3339_millis(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = text.get(range)?;
        if part.bytes().all(|b| b.is_ascii_digit()) {
            part.parse().ok()
        } else {
            None
        }
    };
    if bytes.len() < 20 || bytes[4] != b'-' || bytes[7] != b'-' || bytes[13] != b':' {
        return None;
    }
    if !matches!(bytes[10], b'T' | b't' | b' ') || bytes[16] != b':' {
        return None;
    }
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = &text[19..];
    let mut millis = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let padded = format!("{:0<3}", &fraction[..digits.min(3)]);
        millis = padded.parse::<i64>().ok()?;
        rest = &fraction[digits..];
    }
    let offset_minutes = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            if rest.len() != 6 || rest.as_bytes()[3] != b':' {
                return None;
            }
            let hours: i64 = rest[1..3].parse().ok()?;
            let minutes: i64 = rest[4..6].parse().ok()?;
            sign * (hours * 60 + minutes)
        }
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second - offset_minutes * 60;
    Some(seconds * 1_000 + millis)
}

/// Formats a time as RFC 3339 in UTC, to the second.
pub fn format_rfc3339(time: SystemTime) -> String {
    let seconds = match time.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(since) => since.as_secs() as i64,
        Err(before) => -(before.duration().as_secs() as i64),
    };
    let (days, rest) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (the usual era
/// arithmetic: 400-year cycles of 146,097 days).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn reset_targets_parse() {
        assert_eq!("earliest".parse(), Ok(ResetTarget::Earliest));
        assert_eq!("latest".parse(), Ok(ResetTarget::Latest));
        assert_eq!("42".parse(), Ok(ResetTarget::Offset(42)));
        assert_eq!("@1000".parse(), Ok(ResetTarget::Timestamp(1000)));
        assert_eq!(
            "1970-01-01T00:00:01Z".parse(),
            Ok(ResetTarget::Timestamp(1000))
        );
        assert_eq!(
            "2026-11-30T13:00:00.25+01:00".parse(),
            Ok(ResetTarget::Timestamp(1_796_040_000_250))
        );
        for bad in [
            "",
            "-1",
            "newest",
            "2026-13-01T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-11-30",
            "@x",
        ] {
            assert!(bad.parse::<ResetTarget>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn dates_round_trip() {
        for seconds in [0_u64, 951_782_400, 1_796_036_400, 4_102_444_800] {
            let time = SystemTime::UNIX_EPOCH + Duration::from_secs(seconds);
            let text = format_rfc3339(time);
            assert_eq!(
                parse_rfc3339_millis(&text),
                Some(seconds as i64 * 1000),
                "{text}"
            );
        }
        assert_eq!(
            format_rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00Z"
        );
    }
}
