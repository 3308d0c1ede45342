//! `Serialize` (feature `serde`) for what the operator's tooling prints:
//! the documents of `tenure describe --json` and `tenure reset-offsets
//! --json` are these values serialized, so that a program that links the
//! crate and one that reads the command's output see the same fields.
//!
//! A partition is flat (`topic`, `partition` beside its values) and a time
//! is RFC 3339 in UTC to the second beside its milliseconds since the
//! epoch, as the command has always printed them.

use std::time::SystemTime;

use serde::ser::{Serialize, SerializeStruct, Serializer};

use crate::describe::{GroupDescription, PartitionDescription};
use crate::records::{CorruptRecord, MemberRecord};
use crate::reset::{OffsetChange, ResetPlan};

/// `time` as RFC 3339 in UTC, to the second.
pub fn rfc3339(time: SystemTime) -> String {
    let seconds = match time.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(since) => i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_secs()).map_or(i64::MIN, |s| -s),
    };
    match chrono::DateTime::from_timestamp(seconds, 0) {
        Some(time) => time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        None => format!("{seconds} s since the epoch"),
    }
}

fn millis(time: SystemTime) -> Option<u64> {
    let since = time.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    u64::try_from(since.as_millis()).ok()
}

impl Serialize for MemberRecord {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let subscription = &self.subscription;
        let mut member = serializer.serialize_struct("MemberRecord", 8)?;
        member.serialize_field("id", &self.id)?;
        member.serialize_field("host", &self.host)?;
        member.serialize_field("strategy", &self.strategy)?;
        member.serialize_field("topics", &subscription.named_topics())?;
        member.serialize_field("pattern", subscription.record_form())?;
        member.serialize_field(
            "regex",
            &subscription
                .is_pattern()
                .then(|| subscription.record_keys().concat()),
        )?;
        member.serialize_field("since", &self.since.map(rfc3339))?;
        member.serialize_field("since_ms", &self.since.and_then(millis))?;
        member.end()
    }
}

impl Serialize for PartitionDescription {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut partition = serializer.serialize_struct("PartitionDescription", 8)?;
        partition.serialize_field("topic", &*self.partition.topic)?;
        partition.serialize_field("partition", &self.partition.partition)?;
        partition.serialize_field("owner", &self.owner.as_ref().map(|o| &o.member))?;
        partition.serialize_field("token", &self.owner.as_ref().map(|o| o.token.0))?;
        partition.serialize_field("committed", &self.committed)?;
        partition.serialize_field("log_start", &self.log_start)?;
        partition.serialize_field("log_end", &self.log_end)?;
        partition.serialize_field("lag", &self.lag)?;
        partition.end()
    }
}

impl Serialize for CorruptRecord {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut record = serializer.serialize_struct("CorruptRecord", 2)?;
        record.serialize_field("path", &self.path)?;
        record.serialize_field("detail", &self.detail)?;
        record.end()
    }
}

impl Serialize for GroupDescription {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut group = serializer.serialize_struct("GroupDescription", 5)?;
        group.serialize_field("group", &self.group)?;
        group.serialize_field("store", &self.store)?;
        group.serialize_field("members", &self.members)?;
        group.serialize_field("partitions", &self.partitions)?;
        group.serialize_field("corrupt", &self.corrupt)?;
        group.end()
    }
}

impl Serialize for OffsetChange {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut change = serializer.serialize_struct("OffsetChange", 5)?;
        change.serialize_field("topic", &*self.partition.topic)?;
        change.serialize_field("partition", &self.partition.partition)?;
        change.serialize_field("current", &self.current)?;
        change.serialize_field("new", &self.new)?;
        change.serialize_field("clamped_from", &self.clamped_from)?;
        change.end()
    }
}

impl Serialize for ResetPlan {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let target = self
            .target
            .map_or_else(|| "offsets from a file".to_owned(), |t| t.to_string());
        let mut plan = serializer.serialize_struct("ResetPlan", 6)?;
        plan.serialize_field("group", &self.group)?;
        plan.serialize_field("topics", &self.topics())?;
        plan.serialize_field("target", &target)?;
        plan.serialize_field("live_members", &self.live_members)?;
        plan.serialize_field("missing_topics", &self.missing_topics)?;
        plan.serialize_field("changes", &self.changes)?;
        plan.end()
    }
}
