//! A group seen from outside: who is in it, who owns which partition, how
//! far behind each partition is, moving its committed offsets, and deleting
//! them or the whole group. The library side of the `tenure` command
//! (`groups`, `describe`, `reset-offsets`, `delete-offsets`, `delete`).
//!
//! A store answers through [`GroupAdmin`] (the ZooKeeper and etcd backends
//! implement it); Kafka answers for log offsets through [`log_offsets`].
//! [`describe`] joins the two. [`plan_reset`] (or [`plan_listed`], for
//! offsets given per partition such as [`parse_offsets_csv`] reads) computes
//! a [`ResetPlan`] without writing; [`apply_reset`] writes it.
//! [`plan_delete_offsets`] and [`apply_delete_offsets`] delete committed
//! offsets, [`delete_group`] a group's records. Every write is refused while
//! the group has live members unless forced ([`WriteGuard`]).

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

use tenure_kafka::KafkaError;

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

    /// Deletes the committed offsets of `partitions` in `group`; a partition
    /// with none is skipped. The guard is checked as by
    /// [`GroupAdmin::write_offsets`].
    async fn delete_offsets(
        &self,
        group: &str,
        partitions: &BTreeSet<TopicPartition>,
        guard: WriteGuard,
    ) -> Result<(), AdminError>;

    /// Deletes the records of `group`: its committed offsets and every other
    /// record no live session holds. Records a live session holds (a
    /// member's registration, a partition's owner record: ZooKeeper's
    /// ephemeral nodes, etcd's leased keys) are kept and named in
    /// [`GroupDeletion::kept`]: deleting them would let another member claim
    /// a partition its owner still consumes. They go when their session
    /// ends. A group with no records at all is [`AdminError::UnknownGroup`].
    ///
    /// With [`WriteGuard::NoLiveMembers`] it is refused with
    /// [`AdminError::GroupActive`] if a member is registered: etcd checks in
    /// each transaction that deletes; ZooKeeper looks first, and deletes the
    /// member list in the same multi-op as the last records, which fails if
    /// a member registered meanwhile.
    async fn delete_group(
        &self,
        group: &str,
        guard: WriteGuard,
    ) -> Result<GroupDeletion, AdminError>;
}

/// What [`GroupAdmin::delete_group`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupDeletion {
    /// How many records (znodes, keys) it deleted.
    pub removed: usize,
    /// The records it kept because a live session holds them (and, on
    /// ZooKeeper, their parents), by path or key.
    pub kept: Vec<String>,
}

/// What must hold for a write of [`GroupAdmin`] (offsets written or
/// deleted, a group deleted) to happen.
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
    /// The store refused a request for want of rights: wrong credentials,
    /// or records made by another identity (ZooKeeper: a digest ACL).
    #[error("{store} refused access: {detail}")]
    Denied {
        /// Which store, and as whom.
        store: String,
        /// What was refused, and what to check.
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
    /// Kafka knows the topic but not this partition of it.
    #[error(
        "partition {partition} of topic {topic:?} does not exist in Kafka (the topic has {count} \
         partition(s))"
    )]
    UnknownPartition {
        /// The topic.
        topic: String,
        /// The partition asked for.
        partition: u32,
        /// How many partitions the topic has.
        count: usize,
    },
    /// A shift is relative to the committed offset, and these partitions
    /// have none.
    #[error(
        "cannot shift the offsets of group {group:?}: {} partition(s) have no committed offset \
         ({}); pick partitions with --topic TOPIC:P,... or reset them with --to",
        partitions.len(),
        partitions.iter().map(|p| format!("{}:{}", p.topic, p.partition)).collect::<Vec<_>>().join(", ")
    )]
    NoCommittedOffset {
        /// The group.
        group: String,
        /// The partitions without a committed offset.
        partitions: Vec<TopicPartition>,
    },
    /// All topics were asked for, and the group names none.
    #[error(
        "group {group:?} has no offsets, owners or subscribed topics to select: name the topics \
         with --topic"
    )]
    NothingSelected {
        /// The group.
        group: String,
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
    let topics = group_topics(&records);
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
#[non_exhaustive]
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
    /// The committed offset moved by this many messages, back (negative) or
    /// forward, clamped to the log's bounds. Every selected partition needs a
    /// committed offset.
    ShiftBy(i64),
    /// The first message at or after the time this long before the plan is
    /// made; the log end where there is none.
    Duration(Duration),
    /// The committed offset as it is (the log end where there is none): a
    /// plan to export, or to write back later.
    Current,
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
            ResetTarget::ShiftBy(by) => write!(f, "shift by {by:+}"),
            ResetTarget::Duration(duration) => {
                write!(f, "{} before now", format_iso_duration(*duration))
            }
            ResetTarget::Current => f.write_str("current"),
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
    /// `@<milliseconds since the epoch>`: the forms of `--to`.
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

/// A duration that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid duration {given:?}: {reason} (expected ISO 8601 such as PT1H30M or P1DT12H, or \
     1h30m, 90s, 2d)"
)]
pub struct DurationError {
    /// The duration as given.
    pub given: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Parses a duration: ISO 8601 (`PT1H30M`, `P1DT12H`, `PT0.5S`, `P2W`;
/// years and months are refused, their length varies) or the short form
/// (`1h30m`, `90s`, `2d`, `1d12h`). Negative durations are refused.
pub fn parse_duration(given: &str) -> Result<Duration, DurationError> {
    let error = |reason| DurationError {
        given: given.to_owned(),
        reason,
    };
    let text = given.trim();
    if text.is_empty() {
        return Err(error("it is empty"));
    }
    if text.starts_with('-') {
        return Err(error("it is negative"));
    }
    let iso = text.strip_prefix('P').or_else(|| text.strip_prefix('p'));
    let (units, body) = match iso {
        Some(body) => (Units::Iso, body),
        None => (Units::Short, text),
    };
    let mut total = 0f64;
    let mut in_time = false;
    let mut seen_any = false;
    let mut rest = body;
    while !rest.is_empty() {
        if units == Units::Iso && (rest.starts_with('T') || rest.starts_with('t')) {
            if in_time {
                return Err(error("`T` is given twice"));
            }
            in_time = true;
            rest = &rest[1..];
            continue;
        }
        let digits = rest
            .bytes()
            .take_while(|b| b.is_ascii_digit() || *b == b'.' || *b == b',')
            .count();
        if digits == 0 {
            return Err(error("a number must come before each unit"));
        }
        let number: f64 = rest[..digits]
            .replace(',', ".")
            .parse()
            .map_err(|_| error("a number cannot be read"))?;
        rest = &rest[digits..];
        let unit = rest
            .chars()
            .next()
            .ok_or_else(|| error("the last number has no unit"))?;
        rest = &rest[unit.len_utf8()..];
        let seconds = match (units, in_time, unit.to_ascii_uppercase()) {
            (Units::Iso, false, 'W') => 604_800.0,
            (Units::Iso, false, 'D') | (Units::Short, _, 'D') => 86_400.0,
            (Units::Iso, false, 'Y') | (Units::Iso, false, 'M') => {
                return Err(error("years and months have no fixed length: use days"))
            }
            (Units::Iso, true, 'H') | (Units::Short, _, 'H') => 3_600.0,
            (Units::Iso, true, 'M') | (Units::Short, _, 'M') => 60.0,
            (Units::Iso, true, 'S') | (Units::Short, _, 'S') => 1.0,
            (Units::Iso, false, 'H' | 'S') => {
                return Err(error("hours, minutes and seconds come after `T`"))
            }
            _ => return Err(error("unknown unit")),
        };
        total += number * seconds;
        seen_any = true;
    }
    if !seen_any {
        return Err(error("it has no amount"));
    }
    Duration::try_from_secs_f64(total).map_err(|_| error("it is too long"))
}

/// Which notation [`parse_duration`] reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Units {
    /// ISO 8601, after its `P`.
    Iso,
    /// `1h30m`.
    Short,
}

/// Formats a duration in ISO 8601 (`PT1H30M`, `P2DT3H`, `PT0.5S`).
pub fn format_iso_duration(duration: Duration) -> String {
    let total = duration.as_secs();
    let (days, hours) = (total / 86_400, total % 86_400 / 3_600);
    let (minutes, seconds) = (total % 3_600 / 60, total % 60);
    let millis = duration.subsec_millis();
    let mut out = String::from("P");
    if days > 0 {
        out.push_str(&format!("{days}D"));
    }
    if hours > 0 || minutes > 0 || seconds > 0 || millis > 0 || days == 0 {
        out.push('T');
        if hours > 0 {
            out.push_str(&format!("{hours}H"));
        }
        if minutes > 0 {
            out.push_str(&format!("{minutes}M"));
        }
        if millis > 0 {
            let fraction = format!("{millis:03}");
            out.push_str(&format!("{seconds}.{}S", fraction.trim_end_matches('0')));
        } else if seconds > 0 || (hours == 0 && minutes == 0) {
            out.push_str(&format!("{seconds}S"));
        }
    }
    out
}

/// A topic and, optionally, some of its partitions: one `--topic` argument
/// (`orders` for every partition, `orders:0,2` for those two).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicPartitions {
    /// The topic.
    pub topic: String,
    /// The partitions; `None` for every partition of the topic.
    pub partitions: Option<BTreeSet<u32>>,
}

impl fmt::Display for TopicPartitions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.topic)?;
        if let Some(partitions) = &self.partitions {
            let numbers: Vec<String> = partitions.iter().map(u32::to_string).collect();
            write!(f, ":{}", numbers.join(","))?;
        }
        Ok(())
    }
}

/// A `--topic` argument that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TopicPartitionsError {
    /// The topic's name is not one Kafka allows.
    #[error("invalid topic selection {given:?}: {source}")]
    Topic {
        /// The selection as given.
        given: String,
        /// What is wrong with the name.
        #[source]
        source: NameError,
    },
    /// A partition is not a number.
    #[error(
        "invalid topic selection {given:?}: partition {partition:?} is not a partition number \
         (expected TOPIC or TOPIC:P[,P...])"
    )]
    Partition {
        /// The selection as given.
        given: String,
        /// The partition as given.
        partition: String,
    },
}

/// A partition number as an operator writes it: ASCII digits only (no
/// sign, no spaces), fitting in a `u32`.
fn parse_partition(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

impl FromStr for TopicPartitions {
    type Err = TopicPartitionsError;

    /// `TOPIC` or `TOPIC:P[,P...]` (Kafka topic names have no `:`).
    fn from_str(given: &str) -> Result<Self, Self::Err> {
        let (topic, partitions) = match given.split_once(':') {
            None => (given, None),
            Some((topic, list)) => {
                let mut partitions = BTreeSet::new();
                for part in list.split(',') {
                    let part = part.trim();
                    let number =
                        parse_partition(part).ok_or_else(|| TopicPartitionsError::Partition {
                            given: given.to_owned(),
                            partition: part.to_owned(),
                        })?;
                    partitions.insert(number);
                }
                (topic, Some(partitions))
            }
        };
        tenure_core::types::validate_topic(topic).map_err(|source| {
            TopicPartitionsError::Topic {
                given: given.to_owned(),
                source,
            }
        })?;
        Ok(TopicPartitions {
            topic: topic.to_owned(),
            partitions,
        })
    }
}

/// Which partitions a reset moves.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PartitionSelection {
    /// These topics (all their partitions, or some). A topic named twice
    /// gets the partitions of both (all of them if either names all).
    Topics(Vec<TopicPartitions>),
    /// Every topic the group has offsets or owners for, or its members
    /// subscribe to by name. Topics Kafka does not know (deleted ones whose
    /// offsets remain) are left out and listed in
    /// [`ResetPlan::missing_topics`].
    AllTopics,
}

/// The topics `topics` name, each with its partitions (`None`: all).
fn merge_topics(topics: &[TopicPartitions]) -> BTreeMap<&str, Option<BTreeSet<u32>>> {
    let mut merged: BTreeMap<&str, Option<BTreeSet<u32>>> = BTreeMap::new();
    for selection in topics {
        let entry = merged
            .entry(selection.topic.as_str())
            .or_insert_with(|| Some(BTreeSet::new()));
        match (entry.as_mut(), &selection.partitions) {
            (Some(known), Some(more)) => known.extend(more),
            (_, None) => *entry = None,
            (None, Some(_)) => {}
        }
    }
    merged
}

/// The topics a group's records name: those it has offsets or owners for,
/// and those its members subscribe to by name.
fn group_topics(records: &GroupRecords) -> BTreeSet<String> {
    let mut topics: BTreeSet<String> = records
        .members
        .iter()
        .filter_map(|m| m.subscription.named_topics())
        .flatten()
        .cloned()
        .collect();
    topics.extend(records.owners.keys().map(|p| p.topic.to_string()));
    topics.extend(records.offsets.keys().map(|p| p.topic.to_string()));
    topics
}

/// The log bounds of the partitions `selection` names, and the topics
/// [`PartitionSelection::AllTopics`] found that Kafka does not know.
async fn selected_logs(
    client: &Client,
    group: &str,
    records: &GroupRecords,
    selection: &PartitionSelection,
) -> Result<(BTreeMap<TopicPartition, LogOffsets>, Vec<String>), AdminError> {
    let mut logs = BTreeMap::new();
    let mut missing = Vec::new();
    match selection {
        PartitionSelection::Topics(topics) => {
            for (topic, partitions) in merge_topics(topics) {
                tenure_core::types::validate_topic(topic)?;
                let found = log_offsets(client, topic).await?;
                let wanted: Vec<u32> = match partitions {
                    None => found.keys().copied().collect(),
                    Some(partitions) => partitions.into_iter().collect(),
                };
                for number in wanted {
                    let log = found
                        .get(&number)
                        .ok_or_else(|| AdminError::UnknownPartition {
                            topic: topic.to_owned(),
                            partition: number,
                            count: found.len(),
                        })?;
                    logs.insert(TopicPartition::new(topic, number), *log);
                }
            }
        }
        PartitionSelection::AllTopics => {
            let topics = group_topics(records);
            if topics.is_empty() {
                return Err(AdminError::NothingSelected {
                    group: group.to_owned(),
                });
            }
            for topic in topics {
                match log_offsets(client, &topic).await {
                    Ok(found) => {
                        for (number, log) in found {
                            logs.insert(TopicPartition::new(&topic, number), log);
                        }
                    }
                    Err(AdminError::UnknownTopic { .. }) => missing.push(topic),
                    Err(error) => return Err(error),
                }
            }
        }
    }
    Ok((logs, missing))
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
    /// The offset asked for, when it lay outside the log and [`Self::new`]
    /// is the nearest bound instead.
    pub clamped_from: Option<i64>,
}

/// What [`apply_reset`] will write, computed by [`plan_reset`] or
/// [`plan_listed`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResetPlan {
    /// The group.
    pub group: String,
    /// Where the offsets go; `None` when they were given per partition
    /// ([`plan_listed`]).
    pub target: Option<ResetTarget>,
    /// One change per selected partition, sorted.
    pub changes: Vec<OffsetChange>,
    /// The group's live members when the plan was made.
    pub live_members: Vec<String>,
    /// Topics of [`PartitionSelection::AllTopics`] that Kafka does not
    /// know: their offsets are left as they are.
    pub missing_topics: Vec<String>,
}

impl ResetPlan {
    /// The topics the plan moves, sorted.
    pub fn topics(&self) -> Vec<String> {
        let topics: BTreeSet<&str> = self.changes.iter().map(|c| &*c.partition.topic).collect();
        topics.into_iter().map(str::to_owned).collect()
    }
}

/// `asked` within the log's bounds, and `asked` again when it was not.
fn clamp(asked: i64, log: LogOffsets) -> (Offset, Option<i64>) {
    let new = asked.clamp(log.start, log.end.max(log.start));
    (new, (new != asked).then_some(asked))
}

/// The records of `group`; none for a group without records when
/// `allow_new_group`.
async fn group_records(
    admin: &dyn GroupAdmin,
    group: &str,
    allow_new_group: bool,
) -> Result<GroupRecords, AdminError> {
    tenure_core::types::validate_path_element("group", group)?;
    match admin.records(group).await {
        Ok(records) => Ok(records),
        Err(AdminError::UnknownGroup { .. }) if allow_new_group => Ok(GroupRecords::default()),
        Err(error) => Err(error),
    }
}

/// Computes where the offsets of the partitions `selection` names would
/// move to in `group`, from the store's records and the log offsets.
/// Changes nothing.
///
/// With `allow_new_group`, a group with no records yet gets offsets (to
/// start a new group somewhere else than its initial-offset policy says).
pub async fn plan_reset(
    admin: &dyn GroupAdmin,
    kafka_client: &Client,
    group: &str,
    selection: &PartitionSelection,
    target: ResetTarget,
    allow_new_group: bool,
) -> Result<ResetPlan, AdminError> {
    let records = group_records(admin, group, allow_new_group).await?;
    let (logs, missing_topics) = selected_logs(kafka_client, group, &records, selection).await?;
    if let ResetTarget::ShiftBy(_) = target {
        let without: Vec<TopicPartition> = logs
            .keys()
            .filter(|p| !records.offsets.contains_key(*p))
            .cloned()
            .collect();
        if !without.is_empty() {
            return Err(AdminError::NoCommittedOffset {
                group: group.to_owned(),
                partitions: without,
            });
        }
    }
    let time = match target {
        ResetTarget::Timestamp(ms) => Some(ms),
        ResetTarget::Duration(duration) => {
            let since = SystemTime::now()
                .checked_sub(duration)
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                .unwrap_or_default();
            Some(i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
        }
        _ => None,
    };
    let mut changes = Vec::with_capacity(logs.len());
    for (partition, log) in logs {
        let current = records.offsets.get(&partition).copied();
        let (new, clamped_from) = match (target, time) {
            (_, Some(ms)) => (
                offset_at_time(kafka_client, &partition, ms)
                    .await?
                    .unwrap_or(log.end),
                None,
            ),
            (ResetTarget::Earliest, _) => (log.start, None),
            (ResetTarget::Latest, _) => (log.end, None),
            (ResetTarget::Offset(offset), _) => clamp(offset, log),
            (ResetTarget::ShiftBy(by), _) => {
                clamp(current.unwrap_or(log.end).saturating_add(by), log)
            }
            (ResetTarget::Current, _) | (_, None) => (current.unwrap_or(log.end), None),
        };
        changes.push(OffsetChange {
            partition,
            current,
            new,
            clamped_from,
        });
    }
    Ok(ResetPlan {
        group: group.to_owned(),
        target: Some(target),
        changes,
        live_members: records.members.into_iter().map(|m| m.id).collect(),
        missing_topics,
    })
}

/// Computes a plan from offsets given per partition (such as
/// [`parse_offsets_csv`] reads): each partition must exist in Kafka, and
/// each offset is clamped to its log's bounds. Changes nothing.
///
/// `allow_new_group` as for [`plan_reset`].
pub async fn plan_listed(
    admin: &dyn GroupAdmin,
    kafka_client: &Client,
    group: &str,
    offsets: &BTreeMap<TopicPartition, Offset>,
    allow_new_group: bool,
) -> Result<ResetPlan, AdminError> {
    let records = group_records(admin, group, allow_new_group).await?;
    let mut logs: BTreeMap<&str, BTreeMap<u32, LogOffsets>> = BTreeMap::new();
    let mut changes = Vec::with_capacity(offsets.len());
    for (partition, &asked) in offsets {
        let topic = &*partition.topic;
        if !logs.contains_key(topic) {
            tenure_core::types::validate_topic(topic)?;
            logs.insert(topic, log_offsets(kafka_client, topic).await?);
        }
        let found = logs.get(topic).ok_or_else(|| AdminError::UnknownTopic {
            topic: topic.to_owned(),
        })?;
        let log = found
            .get(&partition.partition)
            .ok_or_else(|| AdminError::UnknownPartition {
                topic: topic.to_owned(),
                partition: partition.partition,
                count: found.len(),
            })?;
        let (new, clamped_from) = clamp(asked, *log);
        changes.push(OffsetChange {
            partition: partition.clone(),
            current: records.offsets.get(partition).copied(),
            new,
            clamped_from,
        });
    }
    Ok(ResetPlan {
        group: group.to_owned(),
        target: None,
        changes,
        live_members: records.members.into_iter().map(|m| m.id).collect(),
        missing_topics: Vec::new(),
    })
}

/// The guard a write gets: none when forced.
fn guard(force: bool) -> WriteGuard {
    if force {
        WriteGuard::None
    } else {
        WriteGuard::NoLiveMembers
    }
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
    admin
        .write_offsets(&plan.group, &offsets, guard(force))
        .await
}

/// A plan's new offsets as kafka-consumer-groups.sh exports them: one
/// `topic,partition,offset` line per partition, no header.
/// [`parse_offsets_csv`] reads it back.
pub fn offsets_csv(plan: &ResetPlan) -> String {
    plan.changes
        .iter()
        .map(|c| {
            format!(
                "{},{},{}\n",
                c.partition.topic, c.partition.partition, c.new
            )
        })
        .collect()
}

/// A line of an offsets file that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CsvError {
    /// The line has neither three fields nor four.
    #[error(
        "line {line}: expected topic,partition,offset (or group,topic,partition,offset), found \
         {found} field(s)"
    )]
    Fields {
        /// The line's number, from 1.
        line: usize,
        /// How many comma-separated fields it has.
        found: usize,
    },
    /// The topic is not a name Kafka allows.
    #[error("line {line}: {source}")]
    Topic {
        /// The line's number, from 1.
        line: usize,
        /// What is wrong with the name.
        #[source]
        source: NameError,
    },
    /// The partition is not a partition number.
    #[error("line {line}: partition {given:?} is not a partition number")]
    Partition {
        /// The line's number, from 1.
        line: usize,
        /// The field as given.
        given: String,
    },
    /// The offset is not an offset.
    #[error("line {line}: offset {given:?} is not an offset (a whole number from 0)")]
    Offset {
        /// The line's number, from 1.
        line: usize,
        /// The field as given.
        given: String,
    },
    /// The partition was given before.
    #[error("line {line}: partition {partition} is already given on line {first}")]
    Duplicate {
        /// The line's number, from 1.
        line: usize,
        /// The partition, as `topic:partition`.
        partition: String,
        /// The line that gave it first.
        first: usize,
    },
    /// A four-field line names another group.
    #[error("line {line}: the offset is for group {found:?}, not {expected:?}")]
    OtherGroup {
        /// The line's number, from 1.
        line: usize,
        /// The group the line names.
        found: String,
        /// The group being reset.
        expected: String,
    },
    /// The file has no offsets at all.
    #[error("no offsets: the file has no topic,partition,offset line")]
    Empty,
}

/// Reads offsets in kafka-consumer-groups.sh's CSV: `topic,partition,offset`
/// lines, or `group,topic,partition,offset` lines whose group must be
/// `group`. Blank lines are skipped; every other line must be one of those,
/// and a partition may be given once.
pub fn parse_offsets_csv(
    text: &str,
    group: &str,
) -> Result<BTreeMap<TopicPartition, Offset>, CsvError> {
    let mut offsets = BTreeMap::new();
    let mut lines_of: BTreeMap<TopicPartition, usize> = BTreeMap::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let content = raw.trim_start_matches('\u{feff}').trim();
        if content.is_empty() {
            continue;
        }
        let fields: Vec<&str> = content.split(',').map(str::trim).collect();
        let (topic, partition, offset) = match fields.as_slice() {
            [topic, partition, offset] => (*topic, *partition, *offset),
            [named, topic, partition, offset] => {
                if *named != group {
                    return Err(CsvError::OtherGroup {
                        line,
                        found: (*named).to_owned(),
                        expected: group.to_owned(),
                    });
                }
                (*topic, *partition, *offset)
            }
            _ => {
                return Err(CsvError::Fields {
                    line,
                    found: fields.len(),
                })
            }
        };
        tenure_core::types::validate_topic(topic)
            .map_err(|source| CsvError::Topic { line, source })?;
        let number = parse_partition(partition).ok_or_else(|| CsvError::Partition {
            line,
            given: partition.to_owned(),
        })?;
        let offset = offset
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| offset.parse::<Offset>().ok())
            .flatten()
            .filter(|o| *o >= 0)
            .ok_or_else(|| CsvError::Offset {
                line,
                given: offset.to_owned(),
            })?;
        let partition = TopicPartition::new(topic, number);
        if let Some(&first) = lines_of.get(&partition) {
            return Err(CsvError::Duplicate {
                line,
                partition: format!("{topic}:{number}"),
                first,
            });
        }
        lines_of.insert(partition.clone(), line);
        offsets.insert(partition, offset);
    }
    if offsets.is_empty() {
        return Err(CsvError::Empty);
    }
    Ok(offsets)
}

/// What [`apply_delete_offsets`] will delete, computed by
/// [`plan_delete_offsets`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteOffsetsPlan {
    /// The group.
    pub group: String,
    /// The committed offsets to delete, with their values now.
    pub offsets: BTreeMap<TopicPartition, Offset>,
    /// What was selected but has no committed offset: a topic (all its
    /// partitions) or some of its partitions.
    pub absent: Vec<TopicPartitions>,
    /// The group's live members when the plan was made.
    pub live_members: Vec<String>,
}

/// Finds the committed offsets of `group` that `topics` select: every
/// partition of a topic that has one, or the partitions named. Reads the
/// store only (the topic may be gone from Kafka). Changes nothing.
pub async fn plan_delete_offsets(
    admin: &dyn GroupAdmin,
    group: &str,
    topics: &[TopicPartitions],
) -> Result<DeleteOffsetsPlan, AdminError> {
    let records = group_records(admin, group, false).await?;
    let mut offsets = BTreeMap::new();
    let mut absent = Vec::new();
    for (topic, partitions) in merge_topics(topics) {
        match partitions {
            None => {
                let found: Vec<_> = records
                    .offsets
                    .iter()
                    .filter(|(p, _)| &*p.topic == topic)
                    .collect();
                if found.is_empty() {
                    absent.push(TopicPartitions {
                        topic: topic.to_owned(),
                        partitions: None,
                    });
                }
                offsets.extend(found.into_iter().map(|(p, o)| (p.clone(), *o)));
            }
            Some(partitions) => {
                let mut missing = BTreeSet::new();
                for number in partitions {
                    let partition = TopicPartition::new(topic, number);
                    match records.offsets.get(&partition) {
                        Some(offset) => {
                            offsets.insert(partition, *offset);
                        }
                        None => {
                            missing.insert(number);
                        }
                    }
                }
                if !missing.is_empty() {
                    absent.push(TopicPartitions {
                        topic: topic.to_owned(),
                        partitions: Some(missing),
                    });
                }
            }
        }
    }
    Ok(DeleteOffsetsPlan {
        group: group.to_owned(),
        offsets,
        absent,
        live_members: records.members.into_iter().map(|m| m.id).collect(),
    })
}

/// Deletes a plan's offsets. Refuses while the group has live members
/// (looked up again now) unless `force`.
pub async fn apply_delete_offsets(
    admin: &dyn GroupAdmin,
    plan: &DeleteOffsetsPlan,
    force: bool,
) -> Result<(), AdminError> {
    let partitions = plan.offsets.keys().cloned().collect();
    admin
        .delete_offsets(&plan.group, &partitions, guard(force))
        .await
}

/// Deletes the records of `group` ([`GroupAdmin::delete_group`]). Refuses
/// while the group has live members unless `force`; even forced, the
/// records live sessions hold stay.
pub async fn delete_group(
    admin: &dyn GroupAdmin,
    group: &str,
    force: bool,
) -> Result<GroupDeletion, AdminError> {
    tenure_core::types::validate_path_element("group", group)?;
    admin.delete_group(group, guard(force)).await
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
    fn durations_parse() {
        let secs = Duration::from_secs;
        assert_eq!(parse_duration("PT1H30M"), Ok(secs(5_400)));
        assert_eq!(parse_duration("1h30m"), Ok(secs(5_400)));
        assert_eq!(parse_duration("P1DT12H"), Ok(secs(129_600)));
        assert_eq!(parse_duration("P2W"), Ok(secs(1_209_600)));
        assert_eq!(parse_duration("PT0.5S"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("90s"), Ok(secs(90)));
        assert_eq!(parse_duration("2d"), Ok(secs(172_800)));
        assert_eq!(parse_duration("pt15m"), Ok(secs(900)));
        for bad in [
            "", "P", "PT", "-PT1H", "P1M", "P1Y", "P1H", "PT1D", "1x", "90", "h", "PT1H1H2",
            "PTT1H",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} parsed");
        }
        for d in [5_400, 129_600, 0, 59, 86_400] {
            let text = format_iso_duration(secs(d));
            assert_eq!(parse_duration(&text), Ok(secs(d)), "{text}");
        }
        assert_eq!(format_iso_duration(secs(5_400)), "PT1H30M");
        assert_eq!(format_iso_duration(Duration::from_millis(1_500)), "PT1.5S");
    }

    #[test]
    fn topic_selections_parse() {
        let t: TopicPartitions = "orders".parse().expect("a topic");
        assert_eq!(t.partitions, None);
        let t: TopicPartitions = "orders:0,2".parse().expect("a topic and partitions");
        assert_eq!(t.topic, "orders");
        assert_eq!(t.partitions, Some([0, 2].into()));
        assert_eq!(t.to_string(), "orders:0,2");
        for bad in [
            "",
            "a b",
            "orders:",
            "orders:x",
            "orders:-1",
            "orders:1,,2",
            ":1",
        ] {
            assert!(bad.parse::<TopicPartitions>().is_err(), "{bad:?} parsed");
        }
        let given: Vec<TopicPartitions> = ["a:1", "a:0", "b:1", "b"]
            .iter()
            .map(|t| t.parse().expect("a selection"))
            .collect();
        let merged = merge_topics(&given);
        assert_eq!(merged["a"], Some([0, 1].into()));
        assert_eq!(merged["b"], None);
    }

    #[test]
    fn offsets_csv_round_trips() {
        let change = |topic: &str, partition, new| OffsetChange {
            partition: TopicPartition::new(topic, partition),
            current: None,
            new,
            clamped_from: None,
        };
        let plan = ResetPlan {
            group: "g".to_owned(),
            target: Some(ResetTarget::Earliest),
            changes: vec![change("a", 0, 5), change("a", 1, 0), change("b.c", 0, 42)],
            live_members: Vec::new(),
            missing_topics: Vec::new(),
        };
        let text = offsets_csv(&plan);
        assert_eq!(text, "a,0,5\na,1,0\nb.c,0,42\n");
        let read = parse_offsets_csv(&text, "g").expect("its own export");
        let expected: BTreeMap<TopicPartition, Offset> = plan
            .changes
            .iter()
            .map(|c| (c.partition.clone(), c.new))
            .collect();
        assert_eq!(read, expected);
        // With the group in front, blank lines and CRLF.
        let read = parse_offsets_csv("g,a,0,5\r\n\r\ng,a,1,0\r\ng,b.c,0,42\r\n", "g");
        assert_eq!(read.expect("four fields"), expected);
    }

    #[test]
    fn bad_offsets_csv_lines_are_named() {
        let line = |text: &str| match parse_offsets_csv(text, "g") {
            Err(CsvError::Empty) => 0,
            Err(
                CsvError::Fields { line, .. }
                | CsvError::Topic { line, .. }
                | CsvError::Partition { line, .. }
                | CsvError::Offset { line, .. }
                | CsvError::Duplicate { line, .. }
                | CsvError::OtherGroup { line, .. },
            ) => line,
            other => panic!("{text:?} read as {other:?}"),
        };
        assert_eq!(line("a,0,1\na,1"), 2);
        assert_eq!(line("a,0,1\n\na b,1,2"), 3);
        assert_eq!(line("a,x,1"), 1);
        assert_eq!(line("a,0,-1"), 1);
        assert_eq!(line("a,0,1.5"), 1);
        assert_eq!(line("a,0,1\na,0,2"), 2);
        assert_eq!(line("h,a,0,1"), 1);
        assert_eq!(line("a,0,1,2,3"), 1);
        assert_eq!(line("\n\n"), 0);
        let message = parse_offsets_csv("a,0,1\na,0,2", "g")
            .expect_err("a duplicate")
            .to_string();
        assert!(
            message.contains("line 2") && message.contains("line 1"),
            "{message}"
        );
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
