//! Moving a group's committed offsets: where to ([`ResetTarget`]), the plan
//! of each partition's move ([`ResetPlan`]), and writing it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::{Duration, SystemTime};

use tenure_core::{Offset, TopicPartition};

use crate::error::AdminError;
use crate::kafka::{log_offsets, offset_at_time, KafkaClient, LogOffsets};
use crate::records::GroupRecords;
use crate::selection::{group_topics, merge_topics, PartitionSelection};
use crate::store::{group_records, guard, GroupAdmin};

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
            ResetTarget::Timestamp(ms) => match whole_second(*ms) {
                Some(time) => write!(f, "time {time}"),
                None => write!(f, "time @{ms} (ms since the epoch)"),
            },
            ResetTarget::ShiftBy(by) => write!(f, "shift by {by:+}"),
            ResetTarget::Duration(duration) => write!(f, "{} before now", iso_duration(*duration)),
            ResetTarget::Current => f.write_str("current"),
        }
    }
}

/// `ms` since the epoch as an RFC 3339 time in UTC
/// (`2026-11-30T12:00:00Z`), when it is a whole second.
fn whole_second(ms: i64) -> Option<String> {
    if ms % 1000 != 0 {
        return None;
    }
    let time = chrono::DateTime::from_timestamp(ms / 1000, 0)?;
    Some(time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

/// A duration in ISO 8601 (`PT1H30M`, `P2DT3H`, `PT0.5S`), to the
/// millisecond.
fn iso_duration(duration: Duration) -> String {
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

/// The log bounds of the partitions `selection` names, and the topics
/// [`PartitionSelection::AllTopics`] found that Kafka does not know.
async fn selected_logs(
    client: &KafkaClient,
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

/// Computes where the offsets of the partitions `selection` names would
/// move to in `group`, from the store's records and the log offsets.
/// Changes nothing.
///
/// With `allow_new_group`, a group with no records yet gets offsets (to
/// start a new group somewhere else than its initial-offset policy says).
pub async fn plan_reset(
    admin: &dyn GroupAdmin,
    kafka_client: &KafkaClient,
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

/// Computes a plan from offsets given per partition (such as a file of
/// them, or a plan made earlier): each partition must exist in Kafka, and
/// each offset is clamped to its log's bounds. Changes nothing.
///
/// `allow_new_group` as for [`plan_reset`].
pub async fn plan_listed(
    admin: &dyn GroupAdmin,
    kafka_client: &KafkaClient,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_show_as_the_command_takes_them() {
        let shown = |target: ResetTarget| target.to_string();
        assert_eq!(shown(ResetTarget::Earliest), "earliest");
        assert_eq!(shown(ResetTarget::Offset(42)), "offset 42");
        assert_eq!(
            shown(ResetTarget::Timestamp(1_796_040_000_000)),
            "time 2026-11-30T12:00:00Z"
        );
        assert_eq!(
            shown(ResetTarget::Timestamp(951_782_400_000)),
            "time 2000-02-29T00:00:00Z"
        );
        assert_eq!(
            shown(ResetTarget::Timestamp(1_796_040_000_250)),
            "time @1796040000250 (ms since the epoch)"
        );
        assert_eq!(shown(ResetTarget::ShiftBy(-5)), "shift by -5");
        assert_eq!(shown(ResetTarget::ShiftBy(5)), "shift by +5");
    }

    #[test]
    fn durations_show_in_iso_8601() {
        let secs = Duration::from_secs;
        assert_eq!(iso_duration(secs(5_400)), "PT1H30M");
        assert_eq!(iso_duration(secs(129_600)), "P1DT12H");
        assert_eq!(iso_duration(secs(86_400)), "P1D");
        assert_eq!(iso_duration(secs(59)), "PT59S");
        assert_eq!(iso_duration(secs(0)), "PT0S");
        assert_eq!(iso_duration(Duration::from_millis(1_500)), "PT1.5S");
        assert_eq!(iso_duration(Duration::from_millis(250)), "PT0.25S");
        assert_eq!(
            ResetTarget::Duration(secs(5_400)).to_string(),
            "PT1H30M before now"
        );
    }

    #[test]
    fn offsets_are_clamped_to_the_log() {
        let log = LogOffsets { start: 10, end: 20 };
        assert_eq!(clamp(15, log), (15, None));
        assert_eq!(clamp(5, log), (10, Some(5)));
        assert_eq!(clamp(25, log), (20, Some(25)));
        assert_eq!(clamp(20, log), (20, None));
    }
}
