//! What a [`Monitor`](crate::Monitor) knows of the groups it watches, as
//! plain values: what `tenure serve` serves as JSON (`/v1/groups`) and
//! draws on its page and in its metrics. With the `serde` feature they
//! serialize and deserialize, so a program reading the JSON API can use
//! the same types.
//!
//! Times are milliseconds since the Unix epoch (`*_ms`); offsets and lags
//! are Kafka's numbers; a partition is flat (`topic`, `partition`).

use std::sync::Arc;

use crate::health::{Sample, Status};

/// Every watched group, and the state of the connections they are read
/// through.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Overview {
    /// The store watched ("ZooKeeper at 127.0.0.1:2181").
    pub store: String,
    /// Why the store cannot be read now, if it cannot (every group is then
    /// ERROR with this reason, and keeps what was last read).
    pub store_error: Option<String>,
    /// Why Kafka could not be read at the last refresh, if it could not.
    pub kafka_error: Option<String>,
    /// When this overview was made.
    pub updated_ms: u64,
    /// How often log offsets are read from Kafka and a sample taken, in
    /// milliseconds.
    pub kafka_interval_ms: u64,
    /// How many samples a partition's window holds.
    pub window: usize,
    /// The groups, sorted by name. Shared: an overview made after a change
    /// to one group shares every other group's judgement with the last.
    pub groups: Vec<Arc<GroupHealth>>,
}

impl Overview {
    /// The group named `group`, if watched.
    pub fn group(&self, group: &str) -> Option<&GroupHealth> {
        self.groups
            .binary_search_by(|g| g.group.as_str().cmp(group))
            .ok()
            .map(|i| &*self.groups[i])
    }
}

/// One group: its status and the facts it was judged on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct GroupHealth {
    /// The group.
    pub group: String,
    /// Its worst partition's status; ERROR while the store cannot be read.
    pub status: Status,
    /// Why, for a person.
    pub reason: String,
    /// Its live members, sorted by id.
    pub members: Vec<MemberHealth>,
    /// Every partition of every topic it consumes or has records for,
    /// sorted.
    pub partitions: Vec<PartitionHealth>,
    /// How many of its partitions no member owns now.
    pub unowned: usize,
    /// The partitions no member has owned for longer than the monitor's
    /// `unowned_after` ("topic/partition").
    pub unowned_too_long: Vec<String>,
    /// How many partitions moved from one member to another within the
    /// window.
    pub handoffs_in_window: usize,
    /// Members that disagree on the assignment strategy or the
    /// subscription, in words: such a group cannot settle.
    pub mismatches: Vec<String>,
    /// The sum of its partitions' lags, once Kafka has answered.
    pub total_lag: Option<u64>,
    /// The largest of its partitions' lags, once Kafka has answered.
    pub max_lag: Option<u64>,
    /// Records that could not be read.
    pub corrupt: Vec<CorruptEntry>,
    /// Joins, leaves, claims, releases and handoffs as the monitor saw them
    /// happen, oldest first (the latest ones, up to the monitor's bound).
    pub timeline: Vec<TimelineEntry>,
}

/// A live member of a group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct MemberHealth {
    /// Its id.
    pub id: String,
    /// The host it runs on, when its registration says.
    pub host: Option<String>,
    /// Its assignment strategy.
    pub strategy: String,
    /// What it subscribes to: topics separated by commas, or the pattern.
    pub subscription: String,
    /// When it registered, when known.
    pub since_ms: Option<u64>,
    /// How many partitions it owns.
    pub partitions: usize,
}

/// One partition of a group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PartitionHealth {
    /// The topic.
    pub topic: String,
    /// The partition's number.
    pub partition: u32,
    /// The owning member, if any.
    pub owner: Option<String>,
    /// The owner's fencing token, if owned.
    pub token: Option<u64>,
    /// The committed offset (the next offset to consume), if any.
    pub committed: Option<i64>,
    /// The first offset still in the log, once Kafka has answered.
    pub log_start: Option<i64>,
    /// The offset the next produced message will get, at the last refresh.
    pub log_end: Option<i64>,
    /// Log end − committed offset (from the log start when nothing is
    /// committed): the committed offset as the store has it now, the log
    /// end as Kafka gave it at the last refresh.
    pub lag: Option<u64>,
    /// Its status by the evaluation rules.
    pub status: Status,
    /// Why, for a person.
    pub reason: String,
    /// Since when no member owns it, when unowned.
    pub unowned_since_ms: Option<u64>,
    /// The samples it was judged on, oldest first.
    pub window: Vec<Sample>,
}

/// A record that could not be read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct CorruptEntry {
    /// Where it is (znode path or etcd key).
    pub path: String,
    /// What is wrong with it.
    pub detail: String,
}

/// Something that happened in a group, as the monitor saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TimelineEntry {
    /// When the monitor saw it.
    pub at_ms: u64,
    /// What happened.
    pub kind: TimelineKind,
    /// The member it happened to (for a handoff, the new owner).
    pub member: String,
    /// The partition, for claims, releases and handoffs ("topic/partition").
    pub partition: Option<String>,
    /// The previous owner, for a handoff.
    pub from: Option<String>,
    /// The new claim's fencing token, for claims and handoffs.
    pub token: Option<u64>,
}

/// What a [`TimelineEntry`] records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum TimelineKind {
    /// A member registered.
    Joined,
    /// A member's registration went.
    Left,
    /// A member claimed a partition no other member held before it (as far
    /// as the monitor saw).
    Claimed,
    /// A member released a partition (or its session ended).
    Released,
    /// A member claimed a partition another member held before.
    Handoff,
}
